//! The suffix index behind [`super::RepositoryStore`].
//!
//! Every position `end` of a file with `1 <= end < len` is a *posting*: the
//! tokens before `end` may match a context suffix, and the tokens from `end`
//! on are its continuation. Postings are partitioned by their key token
//! `tokens[end - 1]` (the last token of any match), and each partition is kept
//! sorted by the *reversed* preceding context (`tokens[end - 2]`,
//! `tokens[end - 3]`, … up to [`CONTEXT_DEPTH`] tokens, shorter first on a
//! tie), then by path, then by position. That is a suffix array of the
//! reversed text, split per key token: the occurrences of any context suffix
//! form one contiguous run, found by binary search, and the order depends only
//! on the files' contents and paths, never on the history of updates.
//!
//! Updating a file touches only the partitions of the tokens it contains:
//! removal is one linear filter per partition, insertion one sorted merge.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::FileEntry;

/// Longest context suffix the index can match (key token included).
pub const MAX_SUFFIX: usize = 32;

/// How many tokens before the key token take part in the order.
const CONTEXT_DEPTH: usize = MAX_SUFFIX - 1;

/// One position in one file: `files[file].tokens[..end]` ends the match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Posting {
    pub file: u32,
    pub end: u32,
}

/// Hasher for token-id keys (a multiplicative mix; keys are not adversarial
/// enough to need SipHash, and lookups sit on the query path).
#[derive(Default)]
pub(super) struct TokenHasher(u64);

impl Hasher for TokenHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0 ^ value).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

type TokenMap<V> = HashMap<u32, V, BuildHasherDefault<TokenHasher>>;

#[derive(Default)]
pub(super) struct SuffixIndex {
    lists: TokenMap<Vec<Posting>>,
}

/// The tokens before the key token of `p`, nearest last.
fn before(files: &[FileEntry], p: Posting) -> &[u32] {
    &files[p.file as usize].tokens[..p.end as usize - 1]
}

/// The canonical order of postings within one partition.
fn order(files: &[FileEntry], a: Posting, b: Posting) -> Ordering {
    let ca = before(files, a).iter().rev().take(CONTEXT_DEPTH);
    let cb = before(files, b).iter().rev().take(CONTEXT_DEPTH);
    ca.cmp(cb).then_with(|| files[a.file as usize].path.cmp(&files[b.file as usize].path)).then(a.end.cmp(&b.end))
}

/// Compares the reversed context of `p` with the reversed query context `r`,
/// looking at `r.len()` tokens at most: a posting whose context starts with
/// `r` compares equal.
fn cmp_prefix(files: &[FileEntry], p: Posting, r: &[u32]) -> Ordering {
    before(files, p).iter().rev().take(r.len()).cmp(r.iter())
}

/// Number of leading tokens the reversed context of `p` shares with `r`.
fn common_prefix(files: &[FileEntry], p: Posting, r: &[u32]) -> usize {
    before(files, p).iter().rev().zip(r).take_while(|(a, b)| a == b).count()
}

/// Distinct key tokens of a file's postings.
fn keys(tokens: &[u32]) -> Vec<u32> {
    let mut keys = tokens[..tokens.len().saturating_sub(1)].to_vec();
    keys.sort_unstable();
    keys.dedup();
    keys
}

impl SuffixIndex {
    /// Removes every posting of the files in `slots` (whose entries still hold
    /// the tokens that were indexed).
    pub fn remove(&mut self, files: &[FileEntry], slots: &[u32]) {
        let mut gone = vec![false; files.len()];
        let mut touched = Vec::new();
        for &slot in slots {
            gone[slot as usize] = true;
            touched.extend(keys(&files[slot as usize].tokens));
        }
        touched.sort_unstable();
        touched.dedup();
        for key in touched {
            if let Some(list) = self.lists.get_mut(&key) {
                list.retain(|p| !gone[p.file as usize]);
                if list.is_empty() {
                    self.lists.remove(&key);
                }
            }
        }
    }

    /// Adds every posting of the files in `slots`.
    pub fn add(&mut self, files: &[FileEntry], slots: &[u32]) {
        let mut groups: TokenMap<Vec<Posting>> = TokenMap::default();
        for &file in slots {
            let tokens = &files[file as usize].tokens;
            for end in 1..tokens.len() {
                groups.entry(tokens[end - 1]).or_default().push(Posting { file, end: end as u32 });
            }
        }
        for (key, mut group) in groups {
            group.sort_unstable_by(|&a, &b| order(files, a, b));
            let list = self.lists.entry(key).or_default();
            *list = merge(files, std::mem::take(list), group);
        }
    }

    /// The longest suffix of `context` of length `1..=max_len` followed by
    /// at least one token somewhere: its length and its occurrences in
    /// canonical order. `max_len` must be in `1..=min(MAX_SUFFIX, context.len())`.
    pub fn longest_match<'a>(
        &'a self,
        files: &[FileEntry],
        context: &[u32],
        max_len: usize,
    ) -> Option<(usize, &'a [Posting])> {
        let (&key, rest) = context.split_last()?;
        let list = self.lists.get(&key)?;
        let r: Vec<u32> = rest.iter().rev().take(max_len - 1).copied().collect();
        let at = list.partition_point(|&p| cmp_prefix(files, p, &r) == Ordering::Less);
        // In a sorted list the longest common prefix with `r` is reached next
        // to the place where `r` would be inserted.
        let deeper = [at.checked_sub(1), Some(at)]
            .into_iter()
            .flatten()
            .filter_map(|i| list.get(i))
            .map(|&p| common_prefix(files, p, &r))
            .max()?;
        let r = &r[..deeper];
        let lo = list.partition_point(|&p| cmp_prefix(files, p, r) == Ordering::Less);
        let hi = list.partition_point(|&p| cmp_prefix(files, p, r) != Ordering::Greater);
        Some((deeper + 1, &list[lo..hi]))
    }

    /// Number of postings (for tests and statistics).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lists.values().map(Vec::len).sum()
    }
}

/// Merges the sorted `new` postings into the sorted `old` list.
fn merge(files: &[FileEntry], old: Vec<Posting>, new: Vec<Posting>) -> Vec<Posting> {
    if old.is_empty() {
        return new;
    }
    let mut out = Vec::with_capacity(old.len() + new.len());
    let mut from = 0;
    for p in new {
        // Galloping would save compares for huge batches; a binary search per
        // new posting keeps single-file updates at O(k log n).
        let to = from + old[from..].partition_point(|&q| order(files, q, p) == Ordering::Less);
        out.extend_from_slice(&old[from..to]);
        out.push(p);
        from = to;
    }
    out.extend_from_slice(&old[from..]);
    out
}
