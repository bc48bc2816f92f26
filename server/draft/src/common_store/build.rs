//! Building the common datastore: count every n-gram (n ≤ max_n) of the corpus,
//! keep the top-t of each n, and precompute each kept n-gram's token tree.
//!
//! Counting sorts (hash, position) pairs per n instead of filling hash maps:
//! memory stays at 16 bytes per corpus position and n, and a run of equal
//! n-grams in the sorted order is exactly the occurrence list the tree needs.

use super::format::{Group, Node};
use super::tree::ContinuationTrie;
use super::{CommonParams, TopT};

/// Separates sequences in the flattened corpus; never part of an n-gram or a
/// continuation.
const SEP: u32 = u32::MAX;

/// All sequences, flattened, each followed by `SEP`.
pub struct Corpus {
    tokens: Vec<u32>,
}

impl Corpus {
    pub fn new<'a>(sequences: impl Iterator<Item = &'a [u32]>) -> Corpus {
        let mut tokens = Vec::new();
        for seq in sequences {
            tokens.extend(seq.iter().map(|&t| if t == SEP { SEP - 1 } else { t }));
            tokens.push(SEP);
        }
        Corpus { tokens }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }
}

/// Occurrences of each distinct n-gram of one n: `items` sorted so that equal
/// n-grams are adjacent, `runs` = (start, length) of each distinct n-gram.
struct Occurrences {
    n: usize,
    items: Vec<(u64, u32)>,
    runs: Vec<(u32, u32)>,
}

fn count(corpus: &Corpus, n: usize) -> Occurrences {
    let tokens = &corpus.tokens;
    let mut items = Vec::new();
    let mut clean = 0usize; // non-separator tokens ending at the current position
    for end in 0..tokens.len() {
        clean = if tokens[end] == SEP { 0 } else { clean + 1 };
        // An n-gram ending at `end` counts only if a continuation token follows.
        if clean >= n && tokens.get(end + 1).is_some_and(|&t| t != SEP) {
            let start = end + 1 - n;
            items.push((super::format::key_hash(&tokens[start..=end]), start as u32));
        }
    }
    items.sort_unstable_by(|a, b| {
        let (x, y) = (a.1 as usize, b.1 as usize);
        a.0.cmp(&b.0).then_with(|| tokens[x..x + n].cmp(&tokens[y..y + n])).then(a.1.cmp(&b.1))
    });
    let mut runs = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let key = &tokens[items[i].1 as usize..items[i].1 as usize + n];
        let mut j = i + 1;
        while j < items.len()
            && items[j].0 == items[i].0
            && &tokens[items[j].1 as usize..items[j].1 as usize + n] == key
        {
            j += 1;
        }
        runs.push((i as u32, (j - i) as u32));
        i = j;
    }
    Occurrences { n, items, runs }
}

/// How many n-grams to keep for each n, given the distinct counts.
fn quotas(top_t: TopT, distinct: &[usize]) -> Vec<usize> {
    match top_t {
        TopT::Unlimited => distinct.to_vec(),
        TopT::PerN(t) => distinct.iter().map(|&d| d.min(saturating_usize(t))).collect(),
        TopT::Total(total) => {
            let total = saturating_usize(total);
            // Equal shares; what a small group cannot use goes to the others.
            let mut order: Vec<usize> = (0..distinct.len()).collect();
            order.sort_by_key(|&i| distinct[i]);
            let mut left = total;
            let mut out = vec![0; distinct.len()];
            for (k, &i) in order.iter().enumerate() {
                let share = left / (distinct.len() - k);
                out[i] = distinct[i].min(share);
                left -= out[i];
            }
            out
        }
    }
}

fn saturating_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Builds the entries of one n: the `keep` most frequent n-grams with their
/// pruned continuation trees.
fn build_group(corpus: &Corpus, occ: &Occurrences, keep: usize, params: &CommonParams) -> Group {
    let n = occ.n;
    let tokens = &corpus.tokens;
    let mut chosen: Vec<(u32, u32)> = occ.runs.clone();
    if keep < chosen.len() {
        // Most frequent first; equal counts in sorted (hash) order.
        chosen.sort_by_key(|&(start, len)| (std::cmp::Reverse(len), start));
        chosen.truncate(keep);
        chosen.sort_unstable();
    }
    let mut group = Group::default();
    let mut trie = ContinuationTrie::default();
    let mut continuations: Vec<&[u32]> = Vec::new();
    for (start, len) in chosen {
        let occurrences = &occ.items[start as usize..(start + len) as usize];
        // Very frequent n-grams: read an evenly spread sample, each sampled
        // occurrence standing for `stride` of them.
        let stride = occurrences.len().div_ceil(params.max_occurrences.max(1));
        continuations.clear();
        continuations.extend(occurrences.iter().step_by(stride).map(|&(_, pos)| {
            let from = pos as usize + n;
            let len = tokens[from..].iter().take(params.continuation_len).take_while(|&&t| t != SEP).count();
            &tokens[from..from + len]
        }));
        continuations.sort_unstable();
        trie.clear();
        for continuation in &continuations {
            trie.insert(continuation, stride as u32);
        }
        let nodes: Vec<Node> = trie.prune(params.tree_nodes);
        let first = occurrences[0].1 as usize;
        group.add(&tokens[first..first + n], &nodes);
    }
    group
}

/// Counts, selects and builds the groups for n = 1..=max_n, one thread per n.
pub fn build_groups(corpus: &Corpus, params: &CommonParams) -> Vec<Group> {
    let occurrences: Vec<Occurrences> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..=params.max_n).map(|n| s.spawn(move || count(corpus, n))).collect();
        handles.into_iter().map(|h| h.join().expect("n-gram counting thread panicked")).collect()
    });
    let distinct: Vec<usize> = occurrences.iter().map(|o| o.runs.len()).collect();
    let keep = quotas(params.top_t, &distinct);
    std::thread::scope(|s| {
        let handles: Vec<_> = occurrences
            .iter()
            .zip(keep)
            .map(|(occ, keep)| s.spawn(move || build_group(corpus, occ, keep, params)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("tree building thread panicked")).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_quota_redistributes_unused_share() {
        assert_eq!(quotas(TopT::Total(30), &[4, 100, 100]), vec![4, 13, 13]);
        assert_eq!(quotas(TopT::PerN(10), &[4, 100]), vec![4, 10]);
        assert_eq!(quotas(TopT::Unlimited, &[4, 100]), vec![4, 100]);
    }

    #[test]
    fn counting_respects_sequence_boundaries() {
        let a: &[u32] = &[1, 2, 1, 2];
        let b: &[u32] = &[2, 1];
        let corpus = Corpus::new([a, b].into_iter());
        let occ = count(&corpus, 2);
        // 2-grams with a following token: [1,2]@0, [2,1]@1 only ([1,2]@2 ends
        // its sequence, [2,1] of b has no continuation).
        assert_eq!(occ.items.len(), 2);
        assert_eq!(occ.runs.len(), 2);
    }
}
