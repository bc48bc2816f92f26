//! FastCoder's context- and LLM-preference-aware cache (§4.B): short token
//! sequences the model has already confirmed — verified retrieved drafts with
//! the context that retrieved them, and the model's own output in chunks —
//! searched by longest suffix match before the datastores.
//!
//! Beyond the paper, the cache is bounded and meant to outlive a request (one
//! per workspace): when full, the least recently used sequence is evicted,
//! where "used" means inserted again or supplying a continuation to a lookup.

use crate::retrieval::{Continuation, Retrieval};
use std::collections::HashMap;

mod persist;

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

struct Entry {
    tokens: Vec<u32>,
    last_used: u64,
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

    /// Adds a sequence (or refreshes an identical one). Sequences shorter
    /// than two tokens cannot supply a continuation and are ignored.
    pub fn insert(&mut self, tokens: &[u32]) {
        if tokens.len() < 2 || self.config.capacity == 0 {
            return;
        }
        self.clock += 1;
        if let Some(&slot) = self.by_content.get(tokens) {
            if let Some(entry) = self.slots[slot as usize].as_mut() {
                entry.last_used = self.clock;
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
        self.slots[slot as usize] = Some(Entry { tokens: tokens.to_vec(), last_used: self.clock });
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
        let Some(victim) = victim else { return };
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

    /// Longest-suffix lookup (within single sequences): the continuations
    /// after every occurrence of the longest matching suffix, identical ones
    /// merged with counts, sorted by count then tokens. `None` while the cache
    /// is inactive or when no suffix of at least `min_suffix` tokens matches.
    pub fn lookup(&mut self, context: &[u32]) -> Option<Retrieval> {
        if !self.is_active() {
            return None;
        }
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
        if best < self.config.min_suffix.max(1) {
            return None;
        }
        self.clock += 1;
        let mut counts: HashMap<&[u32], u32> = HashMap::new();
        for &(slot, pos) in &hits {
            if let Some(entry) = self.slots[slot as usize].as_ref() {
                let from = pos as usize + 1;
                let to = (from + self.config.continuation_len).min(entry.tokens.len());
                *counts.entry(&entry.tokens[from..to]).or_default() += 1;
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
}
