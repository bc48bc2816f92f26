//! FastCoder's context- and LLM-preference-aware cache (§4.B): short token
//! sequences the model has already confirmed — verified retrieved drafts with
//! the context that retrieved them, and the model's own output in chunks —
//! searched by longest suffix match before the datastores.
//!
//! Beyond the paper, the cache is bounded and meant to outlive a request (one
//! per workspace): when full, the least recently used sequence is evicted,
//! where "used" means inserted again or supplying a continuation to a lookup.
//!
//! The person's verdicts weigh in too: every sequence has a weight (a model-confirmed one
//! starts at [`CONFIRMED_WEIGHT`]); text the person accepted is added with
//! [`ACCEPTED_BONUS`] more, and the sequences that would draft a suggestion the person
//! dismissed lose half their weight (and leave at zero). A lookup's counts are the summed
//! weights of the sequences behind each continuation, so accepted text is drafted first.

use crate::retrieval::{Continuation, Retrieval};
use std::collections::HashMap;

mod merge;
mod persist;

pub use merge::Baseline;
pub use persist::LoadError;

/// Settings of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Most sequences held; the least recently used one goes first.
    pub capacity: usize,
    /// The cache answers lookups only once it holds more than this many
    /// sequences (FastCoder's δ; the paper searched 10–100).
    pub activation: usize,
    /// Longest context suffix matched.
    pub max_suffix: usize,
    /// Shortest context suffix that counts as a match.
    pub min_suffix: usize,
    /// Tokens per returned continuation.
    pub continuation_len: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { capacity: 1024, activation: 5, max_suffix: 16, min_suffix: 2, continuation_len: 16 }
    }
}

/// Weight of a sequence the model confirmed (its output, a verified draft).
pub const CONFIRMED_WEIGHT: u32 = 1;
/// Weight a sequence gains each time the person accepts it.
pub const ACCEPTED_BONUS: u32 = 3;
/// Most weight one sequence holds.
pub const MAX_WEIGHT: u32 = 16;

struct Entry {
    tokens: Vec<u32>,
    last_used: u64,
    weight: u32,
}

/// The cache. Lookups take `&mut self` because they refresh recency.
pub struct PreferenceCache {
    config: CacheConfig,
    slots: Vec<Option<Entry>>,
    free: Vec<u32>,
    /// Every position of every sequence, by the token found there.
    by_token: HashMap<u32, Vec<(u32, u32)>>,
    /// Exact contents → slot, so a repeated sequence is refreshed, not duplicated.
    by_content: HashMap<Vec<u32>, u32>,
    clock: u64,
    len: usize,
}

impl PreferenceCache {
    pub fn new(config: CacheConfig) -> PreferenceCache {
        PreferenceCache {
            config,
            slots: Vec::new(),
            free: Vec::new(),
            by_token: HashMap::new(),
            by_content: HashMap::new(),
            clock: 0,
            len: 0,
        }
    }

    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Number of sequences held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether lookups are answered (more than δ sequences held).
    pub fn is_active(&self) -> bool {
        self.len > self.config.activation
    }

    /// Adds a sequence the model confirmed (or refreshes an identical one, its weight
    /// unchanged). Sequences shorter than two tokens cannot supply a continuation and are
    /// ignored.
    pub fn insert(&mut self, tokens: &[u32]) {
        self.upsert(tokens, CONFIRMED_WEIGHT, 0);
    }

    /// Adds a sequence the person accepted: [`ACCEPTED_BONUS`] above a confirmed one, or
    /// that much more weight for one already held (up to [`MAX_WEIGHT`]).
    pub fn accept(&mut self, tokens: &[u32]) {
        self.upsert(tokens, CONFIRMED_WEIGHT + ACCEPTED_BONUS, ACCEPTED_BONUS);
    }

    /// The person dismissed `rejected`, suggested after `context`: every sequence that a
    /// lookup would have drafted one of its tokens from (among the longest matches of the
    /// context up to that token, followed by that token) loses half its weight, once, and
    /// leaves the cache at zero. Returns how many sequences lost weight.
    pub fn reject(&mut self, context: &[u32], rejected: &[u32]) -> usize {
        let all = [context, rejected].concat();
        let mut demoted: Vec<u32> = Vec::new();
        for at in context.len()..all.len() {
            let Some((_, hits)) = self.longest_matches(&all[..at]) else { continue };
            for (slot, pos) in hits {
                let drafts_it = self.slots[slot as usize]
                    .as_ref()
                    .is_some_and(|entry| entry.tokens.get(pos as usize + 1) == Some(&all[at]));
                if drafts_it && !demoted.contains(&slot) {
                    demoted.push(slot);
                }
            }
        }
        for &slot in &demoted {
            let Some(entry) = self.slots[slot as usize].as_mut() else { continue };
            entry.weight /= 2;
            if entry.weight == 0 {
                self.remove(slot as usize);
            }
        }
        demoted.len()
    }

    /// The weight of the sequence `tokens`, if held.
    fn weight(&self, tokens: &[u32]) -> Option<u32> {
        let &slot = self.by_content.get(tokens)?;
        self.slots[slot as usize].as_ref().map(|entry| entry.weight)
    }

    /// Adds `tokens` with weight `weight`, or raises the weight of the identical sequence
    /// by `raise` (up to [`MAX_WEIGHT`]); either way it becomes the most recent.
    fn upsert(&mut self, tokens: &[u32], weight: u32, raise: u32) {
        if tokens.len() < 2 || self.config.capacity == 0 || weight == 0 {
            return;
        }
        self.clock += 1;
        if let Some(&slot) = self.by_content.get(tokens) {
            if let Some(entry) = self.slots[slot as usize].as_mut() {
                entry.last_used = self.clock;
                entry.weight = entry.weight.saturating_add(raise).min(MAX_WEIGHT);
            }
            return;
        }
        if self.len >= self.config.capacity {
            self.evict_least_recent();
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        for (pos, &t) in tokens.iter().enumerate() {
            self.by_token.entry(t).or_default().push((slot, pos as u32));
        }
        self.by_content.insert(tokens.to_vec(), slot);
        let weight = weight.min(MAX_WEIGHT);
        self.slots[slot as usize] = Some(Entry { tokens: tokens.to_vec(), last_used: self.clock, weight });
        self.len += 1;
    }

    fn evict_least_recent(&mut self) {
        let victim = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (e.last_used, i)))
            .min()
            .map(|(_, i)| i);
        if let Some(victim) = victim {
            self.remove(victim);
        }
    }

    fn remove(&mut self, victim: usize) {
        let Some(entry) = self.slots[victim].take() else { return };
        for t in &entry.tokens {
            if let Some(list) = self.by_token.get_mut(t) {
                list.retain(|&(s, _)| s as usize != victim);
                if list.is_empty() {
                    self.by_token.remove(t);
                }
            }
        }
        self.by_content.remove(&entry.tokens);
        self.free.push(victim as u32);
        self.len -= 1;
    }

    /// The longest context suffix (at least `min_suffix` tokens) that some sequence holds
    /// with a token after it, and every (slot, position of its last token) holding it.
    fn longest_matches(&self, context: &[u32]) -> Option<(usize, Vec<(u32, u32)>)> {
        let &last = context.last()?;
        let occurrences = self.by_token.get(&last)?;
        let max = self.config.max_suffix.min(context.len());
        let mut best = 0;
        let mut hits: Vec<(u32, u32)> = Vec::new();
        for &(slot, pos) in occurrences {
            let Some(entry) = self.slots[slot as usize].as_ref() else { continue };
            let seq = &entry.tokens;
            if pos as usize + 1 >= seq.len() {
                continue; // nothing follows
            }
            let m = matched_len(&seq[..=pos as usize], context, max);
            if m > best {
                best = m;
                hits.clear();
            }
            if m == best {
                hits.push((slot, pos));
            }
        }
        (best >= self.config.min_suffix.max(1)).then_some((best, hits))
    }

    /// Longest-suffix lookup (within single sequences): the continuations
    /// after every occurrence of the longest matching suffix, identical ones
    /// merged with their weights summed as counts, sorted by count then tokens.
    /// `None` while the cache is inactive or when no suffix of at least
    /// `min_suffix` tokens matches.
    pub fn lookup(&mut self, context: &[u32]) -> Option<Retrieval> {
        if !self.is_active() {
            return None;
        }
        let (best, hits) = self.longest_matches(context)?;
        self.clock += 1;
        let mut counts: HashMap<&[u32], u32> = HashMap::new();
        for &(slot, pos) in &hits {
            if let Some(entry) = self.slots[slot as usize].as_ref() {
                let from = pos as usize + 1;
                let to = (from + self.config.continuation_len).min(entry.tokens.len());
                *counts.entry(&entry.tokens[from..to]).or_default() += entry.weight;
            }
        }
        let mut continuations: Vec<Continuation> =
            counts.into_iter().map(|(t, count)| Continuation { tokens: t.to_vec(), count }).collect();
        continuations.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.tokens.cmp(&b.tokens)));
        for &(slot, _) in &hits {
            if let Some(entry) = self.slots[slot as usize].as_mut() {
                entry.last_used = self.clock;
            }
        }
        Some(Retrieval { matched_len: best, continuations })
    }
}

/// Cuts the model's output stream into cache entries of `chunk_len` new
/// tokens, each preceded by the `context_len` tokens before it so that a later
/// suffix match can cross the cut. A context that does not continue the
/// previous step's text starts a new stream (a new request); the unfinished
/// chunk of the old one is emitted first.
pub struct OutputChunker {
    chunk_len: usize,
    context_len: usize,
    stream: Vec<u32>,
    fresh: usize,
    expected: Option<(usize, u32)>,
}

impl OutputChunker {
    pub fn new(chunk_len: usize, context_len: usize) -> OutputChunker {
        OutputChunker { chunk_len: chunk_len.max(1), context_len, stream: Vec::new(), fresh: 0, expected: None }
    }

    /// Feeds one decode step (`context` it started from, tokens it
    /// `produced`); returns the entries completed by it.
    pub fn observe(&mut self, context: &[u32], produced: &[u32]) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        let continues = self.expected == Some((context.len(), context.last().copied().unwrap_or(u32::MAX)));
        if !continues {
            if self.fresh >= 2 {
                out.push(std::mem::take(&mut self.stream));
            }
            self.stream = context[context.len().saturating_sub(self.context_len)..].to_vec();
            self.fresh = 0;
        }
        if let Some(&last) = produced.last() {
            self.expected = Some((context.len() + produced.len(), last));
        }
        for &t in produced {
            self.stream.push(t);
            self.fresh += 1;
            if self.fresh == self.chunk_len {
                out.push(self.stream.clone());
                self.stream.drain(..self.stream.len().saturating_sub(self.context_len));
                self.fresh = 0;
            }
        }
        out
    }
}

/// Length of the common suffix of `a` and `b`, at most `max`.
fn matched_len(a: &[u32], b: &[u32], max: usize) -> usize {
    a.iter().rev().zip(b.iter().rev()).take(max).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(capacity: usize, activation: usize) -> PreferenceCache {
        PreferenceCache::new(CacheConfig { capacity, activation, ..CacheConfig::default() })
    }

    #[test]
    fn inactive_until_more_than_delta_sequences() {
        let mut c = cache(10, 2);
        c.insert(&[1, 2, 3]);
        c.insert(&[4, 5, 6]);
        assert!(!c.is_active());
        assert_eq!(c.lookup(&[9, 1, 2]), None);
        c.insert(&[7, 8, 9]);
        assert!(c.is_active());
        let r = c.lookup(&[9, 1, 2]).unwrap();
        assert_eq!(r.matched_len, 2);
        assert_eq!(r.continuations, vec![Continuation { tokens: vec![3], count: 1 }]);
    }

    #[test]
    fn longest_match_wins_and_counts_merge() {
        let mut c = cache(10, 0);
        c.insert(&[1, 2, 3, 10, 11]);
        c.insert(&[5, 2, 3, 20]);
        c.insert(&[6, 2, 3, 20, 21]);
        // Context ends with [1, 2, 3]: only the first sequence matches 3 tokens.
        let r = c.lookup(&[0, 1, 2, 3]).unwrap();
        assert_eq!(r.matched_len, 3);
        assert_eq!(r.continuations, vec![Continuation { tokens: vec![10, 11], count: 1 }]);
        // Context ends with [7, 2, 3]: all three match 2 tokens.
        let r = c.lookup(&[7, 2, 3]).unwrap();
        assert_eq!(r.matched_len, 2);
        let got: Vec<(Vec<u32>, u32)> = r.continuations.into_iter().map(|c| (c.tokens, c.count)).collect();
        assert_eq!(got, vec![(vec![10, 11], 1), (vec![20], 1), (vec![20, 21], 1)]);
        // A one-token match is below min_suffix (2).
        assert_eq!(c.lookup(&[9, 3]), None);
        // A match at a sequence's last token has no continuation.
        assert_eq!(c.lookup(&[10, 11]), None);
    }

    #[test]
    fn duplicates_refresh_instead_of_filling() {
        let mut c = cache(10, 0);
        c.insert(&[1, 2, 3]);
        c.insert(&[1, 2, 3]);
        assert_eq!(c.len(), 1);
        assert_eq!(c.lookup(&[1, 2]).unwrap().continuations[0].count, 1);
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut c = cache(3, 0);
        c.insert(&[1, 1, 100]);
        c.insert(&[2, 2, 200]);
        c.insert(&[3, 3, 300]);
        // Using the oldest sequence protects it; the second is now least recent.
        assert!(c.lookup(&[1, 1]).is_some());
        c.insert(&[4, 4, 400]);
        assert_eq!(c.len(), 3);
        assert!(c.lookup(&[2, 2]).is_none());
        for k in [1, 3, 4] {
            assert!(c.lookup(&[k, k]).is_some(), "sequence {k} should be kept");
        }
        // The freed slot is reused and indexed correctly.
        c.insert(&[5, 5, 500]);
        assert_eq!(c.lookup(&[5, 5]).unwrap().continuations[0].tokens, vec![500]);
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn chunker_cuts_every_chunk_len_tokens_with_context() {
        let mut ch = OutputChunker::new(3, 2);
        let ctx: Vec<u32> = vec![1, 2, 3, 4];
        assert!(ch.observe(&ctx, &[10, 11]).is_empty());
        let ctx2: Vec<u32> = [ctx.clone(), vec![10, 11]].concat();
        assert_eq!(ch.observe(&ctx2, &[12, 13]), vec![vec![3, 4, 10, 11, 12]]);
        let ctx3: Vec<u32> = [ctx2.clone(), vec![12, 13]].concat();
        assert_eq!(ch.observe(&ctx3, &[14, 15]), vec![vec![11, 12, 13, 14, 15]]);
        // A new request: nothing unfinished to flush (0 fresh tokens).
        assert!(ch.observe(&[7, 8, 9], &[20, 21]).is_empty());
        // Another new request flushes the unfinished chunk of the last one.
        assert_eq!(ch.observe(&[5, 5], &[30]), vec![vec![8, 9, 20, 21]]);
    }

    #[test]
    fn short_sequences_are_ignored() {
        let mut c = cache(3, 0);
        c.insert(&[1]);
        c.insert(&[]);
        assert!(c.is_empty());
    }

    fn counts(r: Option<Retrieval>) -> Vec<(Vec<u32>, u32)> {
        r.map(|r| r.continuations.into_iter().map(|c| (c.tokens, c.count)).collect()).unwrap_or_default()
    }

    #[test]
    fn accepted_text_outweighs_what_the_model_confirmed() {
        let mut c = cache(10, 0);
        c.insert(&[1, 2, 10, 11]);
        c.insert(&[1, 2, 20, 21]);
        // Equal weights: the continuations tie and sort by tokens.
        assert_eq!(counts(c.lookup(&[0, 1, 2])), vec![(vec![10, 11], 1), (vec![20, 21], 1)]);
        c.accept(&[5, 1, 2, 20, 21]);
        assert_eq!(c.weight(&[5, 1, 2, 20, 21]), Some(CONFIRMED_WEIGHT + ACCEPTED_BONUS));
        assert_eq!(counts(c.lookup(&[0, 1, 2])), vec![(vec![20, 21], 5), (vec![10, 11], 1)]);
        // Accepting it again adds the bonus, up to the cap; a model insert leaves it as it is.
        for _ in 0..10 {
            c.accept(&[5, 1, 2, 20, 21]);
        }
        c.insert(&[5, 1, 2, 20, 21]);
        assert_eq!(c.weight(&[5, 1, 2, 20, 21]), Some(MAX_WEIGHT));
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn dismissed_drafts_lose_weight_until_they_leave() {
        let mut c = cache(10, 0);
        c.accept(&[1, 2, 3, 4, 5]);
        c.insert(&[8, 2, 3, 9]);
        c.insert(&[6, 6, 7, 7]);
        // The person dismissed [3, 4] after [.., 1, 2]: the accepted sequence drafted it
        // (longest match [1, 2], then 3; and [2, 3] then 4); the others did not.
        assert_eq!(c.reject(&[0, 1, 2], &[3, 4]), 1);
        assert_eq!(c.weight(&[1, 2, 3, 4, 5]), Some(2));
        assert_eq!(c.weight(&[8, 2, 3, 9]), Some(1));
        assert_eq!(counts(c.lookup(&[0, 1, 2])), vec![(vec![3, 4, 5], 2)]);
        // Dismissed again twice: 2 -> 1 -> gone, and lookups stop drafting it.
        c.reject(&[0, 1, 2], &[3, 4]);
        assert_eq!(c.reject(&[0, 1, 2], &[3, 4]), 1);
        assert_eq!(c.weight(&[1, 2, 3, 4, 5]), None);
        assert_eq!(c.len(), 2);
        assert_eq!(c.lookup(&[0, 1, 2]), None);
        // [2, 3] now leads only to 9.
        assert_eq!(counts(c.lookup(&[5, 2, 3])), vec![(vec![9], 1)]);
        // Nothing drafts an unknown rejection.
        assert_eq!(c.reject(&[40, 41], &[42, 43]), 0);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_rejected_draft_loses_weight_once_per_dismissal() {
        let mut c = cache(10, 0);
        c.accept(&[1, 2, 1, 2, 1, 2]);
        // The sequence drafts every token of [1, 2, 1, 2] after [1, 2]; it is halved once.
        assert_eq!(c.reject(&[1, 2], &[1, 2, 1, 2]), 1);
        assert_eq!(c.weight(&[1, 2, 1, 2, 1, 2]), Some(2));
    }
}
