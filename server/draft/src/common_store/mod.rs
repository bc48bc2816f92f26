//! The common datastore in CREST's layout: the top-t most frequent n-grams of
//! a general corpus for every n ≤ max_n, each mapped to a precomputed token
//! tree of its continuations (counts kept), in one memory-mappable file with an
//! O(1) hash lookup per suffix length. See `format.rs` for the byte layout.

mod build;
mod format;
mod tree;

use crate::retrieval::{Continuation, Retrieval};
use anyhow::{ensure, Context, Result};
use std::fs::File;
use std::path::Path;

/// Which n-grams are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopT {
    /// Every n-gram: the uncompacted ("full") store CREST compares against.
    Unlimited,
    /// The `t` most frequent n-grams of each n.
    PerN(u64),
    /// About `t` n-grams in all, shared equally between the values of n (a
    /// share an n cannot use goes to the others), as in CREST's combined top-t.
    Total(u64),
}

/// Build parameters; stored in the file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommonParams {
    /// Longest n-gram stored (CREST: 5 for code).
    pub max_n: usize,
    pub top_t: TopT,
    /// Node budget of each precomputed tree (at most 65535).
    pub tree_nodes: usize,
    /// Depth of each tree: tokens per continuation (at most 255).
    pub continuation_len: usize,
    /// Occurrences read per n-gram when building its tree; more frequent
    /// n-grams are sampled evenly and their counts scaled back up.
    pub max_occurrences: usize,
}

/// Defaults measured on the Python standard library (3.4M tokens, SmolLM2
/// tokenizer): a 90/10 file split, greedy walk of the stored tree along the
/// held-out text gave 2.01 tokens/step at 100k n-grams (56 MB) against 1.84
/// for the full store (4.8M n-grams, 809 MB); 25k: 1.93, 200k: 2.00, 400k: 1.96.
impl Default for CommonParams {
    fn default() -> Self {
        CommonParams {
            max_n: 5,
            top_t: TopT::Total(100_000),
            tree_nodes: 64,
            continuation_len: 10,
            max_occurrences: 5000,
        }
    }
}

/// A built or opened common datastore.
pub struct CommonStore {
    bytes: Backing,
    params: CommonParams,
    fingerprint: u64,
}

enum Backing {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl CommonStore {
    /// Builds the store from token sequences (one per source file) for the
    /// tokenizer identified by `tokenizer_fingerprint`.
    pub fn build<'a>(
        sequences: impl Iterator<Item = &'a [u32]>,
        params: CommonParams,
        tokenizer_fingerprint: u64,
    ) -> Result<CommonStore> {
        ensure!((1..=64).contains(&params.max_n), "max_n must be in 1..=64, not {}", params.max_n);
        ensure!((1..=65535).contains(&params.tree_nodes), "tree_nodes must be in 1..=65535");
        ensure!((1..=255).contains(&params.continuation_len), "continuation_len must be in 1..=255");
        ensure!(params.max_occurrences >= 1, "max_occurrences must be at least 1");
        let corpus = build::Corpus::new(sequences);
        ensure!(corpus.len() < u32::MAX as usize, "corpus too large ({} tokens)", corpus.len());
        let groups = build::build_groups(&corpus, &params);
        let (kind, value) = match params.top_t {
            TopT::Unlimited => (0, 0),
            TopT::PerN(t) => (1, t),
            TopT::Total(t) => (2, t),
        };
        let header = format::Header {
            max_n: params.max_n as u32,
            fingerprint: tokenizer_fingerprint,
            top_t_kind: kind,
            top_t_value: value,
            tree_nodes: params.tree_nodes as u32,
            continuation_len: params.continuation_len as u32,
            max_occurrences: params.max_occurrences.min(u32::MAX as usize) as u32,
        };
        let bytes = format::encode(&header, &groups);
        Ok(CommonStore { bytes: Backing::Owned(bytes), params, fingerprint: tokenizer_fingerprint })
    }

    /// Writes the store atomically: to a temporary file beside `path`, then
    /// renamed over it, so an interrupted write never leaves a partial store.
    pub fn write(&self, path: &Path) -> Result<()> {
        crate::atomic_file::write(path, self.bytes())
    }

    /// Maps a store file and validates its header (magic, format version,
    /// length, checksum, tokenizer fingerprint).
    pub fn open(path: &Path, expected_fingerprint: u64) -> Result<CommonStore> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: store files are only ever replaced by rename (see `write`),
        // never modified in place, so the mapped bytes stay as validated.
        let map = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("mapping {}", path.display()))?;
        let header = format::validate(&map, expected_fingerprint)
            .with_context(|| format!("invalid common datastore {}", path.display()))?;
        let top_t = match header.top_t_kind {
            1 => TopT::PerN(header.top_t_value),
            2 => TopT::Total(header.top_t_value),
            _ => TopT::Unlimited,
        };
        let params = CommonParams {
            max_n: header.max_n as usize,
            top_t,
            tree_nodes: header.tree_nodes as usize,
            continuation_len: header.continuation_len as usize,
            max_occurrences: header.max_occurrences as usize,
        };
        Ok(CommonStore { bytes: Backing::Mapped(map), params, fingerprint: header.fingerprint })
    }

    /// Longest-suffix lookup over all stored n, longest first.
    pub fn query(&self, context: &[u32]) -> Option<Retrieval> {
        self.query_bounded(context, self.params.max_n, 1)
    }

    /// Longest-suffix lookup trying suffix lengths `max_suffix` down to
    /// `min_suffix` (clamped to what is stored). The continuations are the
    /// root-to-node paths of the matched n-gram's tree, with counts such that
    /// the counts of the paths through a node add up to the node's count.
    pub fn query_bounded(&self, context: &[u32], max_suffix: usize, min_suffix: usize) -> Option<Retrieval> {
        let bytes = self.bytes();
        let longest = max_suffix.min(self.params.max_n).min(context.len());
        for n in (min_suffix.max(1)..=longest).rev() {
            let Some(tree) = format::lookup(bytes, self.params.max_n, &context[context.len() - n..]) else {
                continue;
            };
            let mut path: Vec<u32> = Vec::new();
            let mut continuations = Vec::new();
            for node in tree.nodes() {
                let depth = usize::from(node.depth);
                if depth == 0 || depth > path.len() + 1 {
                    return None; // malformed tree
                }
                path.truncate(depth - 1);
                path.push(node.token);
                if node.excess > 0 {
                    continuations.push(Continuation { tokens: path.clone(), count: node.excess });
                }
            }
            if continuations.is_empty() {
                continue;
            }
            continuations.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.tokens.cmp(&b.tokens)));
            return Some(Retrieval { matched_len: n, continuations });
        }
        None
    }

    pub fn params(&self) -> CommonParams {
        self.params
    }

    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Stored n-grams per n (index 0 is n = 1).
    pub fn entries_per_n(&self) -> Vec<u64> {
        format::entry_counts(self.bytes(), self.params.max_n)
    }

    /// Size of the store in bytes (the file size once written).
    pub fn size_bytes(&self) -> usize {
        self.bytes().len()
    }

    fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Backing::Owned(v) => v,
            Backing::Mapped(m) => m,
        }
    }
}

#[cfg(test)]
mod tests;
