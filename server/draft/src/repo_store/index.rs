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
//! A partition is a list of sorted blocks (a two-level B-tree), so adding or
//! removing one posting costs a binary search and a move of at most one
//! block, whatever the size of the store: updating a file costs
//! O(k log n) for its k tokens.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::FileEntry;

/// Longest context suffix the index can match (key token included).
pub const MAX_SUFFIX: usize = 32;

/// How many tokens before the key token take part in the order.
const CONTEXT_DEPTH: usize = MAX_SUFFIX - 1;

/// Target block size; blocks hold between 1 and `2 * BLOCK` postings. Tiny
/// in tests, so that they exercise splits and merges.
const BLOCK: usize = if cfg!(test) { 4 } else { 512 };

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
    partitions: TokenMap<Partition>,
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

/// The first two context tokens of `p` as a number that sorts like them
/// (a missing token sorts first): a cheap first step of [`order`].
fn sort_key(files: &[FileEntry], p: Posting) -> u128 {
    let mut context = before(files, p).iter().rev();
    let mut next = || context.next().map_or(0, |&t| u128::from(t) + 1);
    (next() << 64) | next()
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

/// The postings of the files in `slots`, grouped by key token.
fn postings_by_key(files: &[FileEntry], slots: &[u32]) -> TokenMap<Vec<Posting>> {
    let mut groups: TokenMap<Vec<Posting>> = TokenMap::default();
    for &file in slots {
        let tokens = &files[file as usize].tokens;
        for end in 1..tokens.len() {
            groups.entry(tokens[end - 1]).or_default().push(Posting { file, end: end as u32 });
        }
    }
    groups
}

/// Sorts postings canonically, most comparisons settled by [`sort_key`].
fn sort_postings(files: &[FileEntry], group: &mut Vec<Posting>) {
    let mut keyed: Vec<(u128, Posting)> = group.iter().map(|&p| (sort_key(files, p), p)).collect();
    keyed.sort_unstable_by(|(ka, a), (kb, b)| ka.cmp(kb).then_with(|| order(files, *a, *b)));
    group.clear();
    group.extend(keyed.into_iter().map(|(_, p)| p));
}

/// A partition this many times larger than the postings added to or
/// removed from it is searched posting by posting instead of rewritten.
/// Tests use 1 so that both ways are exercised.
const SCAN_LIMIT: usize = if cfg!(test) { 1 } else { 256 };

impl SuffixIndex {
    /// Removes every posting of the files in `slots` (whose entries still hold
    /// the tokens that were indexed).
    pub fn remove(&mut self, files: &[FileEntry], slots: &[u32]) {
        let mut gone = vec![false; files.len()];
        for &slot in slots {
            gone[slot as usize] = true;
        }
        for (key, group) in postings_by_key(files, slots) {
            let Some(partition) = self.partitions.get_mut(&key) else {
                continue;
            };
            // Rewriting costs nanoseconds per posting, a search about a
            // microsecond (its comparisons read other files).
            if partition.len() <= SCAN_LIMIT * group.len() {
                partition.retain(|p| !gone[p.file as usize]);
            } else {
                for p in group {
                    partition.remove(files, p);
                }
            }
            if partition.blocks.is_empty() {
                self.partitions.remove(&key);
            }
        }
    }

    /// Adds every posting of the files in `slots`.
    pub fn add(&mut self, files: &[FileEntry], slots: &[u32]) {
        for (key, mut group) in postings_by_key(files, slots) {
            sort_postings(files, &mut group);
            let partition = self.partitions.entry(key).or_default();
            if partition.len() <= SCAN_LIMIT * group.len() {
                let merged = merge(files, partition.blocks.concat(), group);
                partition.blocks = merged.chunks(BLOCK).map(<[Posting]>::to_vec).collect();
            } else {
                partition.insert_sorted(files, &group);
            }
        }
    }

    /// The longest suffix of `context` of length `1..=max_len` followed by
    /// at least one token somewhere: its length and its occurrences in
    /// canonical order. `max_len` must be in `1..=min(MAX_SUFFIX, context.len())`.
    pub fn longest_match<'a>(
        &'a self,
        files: &'a [FileEntry],
        context: &[u32],
        max_len: usize,
    ) -> Option<(usize, impl Iterator<Item = Posting> + 'a)> {
        let (&key, rest) = context.split_last()?;
        let partition = self.partitions.get(&key)?;
        let r: Vec<u32> = rest.iter().rev().take(max_len - 1).copied().collect();
        let at = partition.partition_point(|p| cmp_prefix(files, p, &r) == Ordering::Less);
        // In a sorted list the longest common prefix with `r` is reached next
        // to the place where `r` would be inserted.
        let deeper = [partition.before(at), partition.get(at)]
            .into_iter()
            .flatten()
            .map(|p| common_prefix(files, p, &r))
            .max()?;
        let r = &r[..deeper];
        let lo = partition.partition_point(|p| cmp_prefix(files, p, r) == Ordering::Less);
        let hi = partition.partition_point(|p| cmp_prefix(files, p, r) != Ordering::Greater);
        Some((deeper + 1, partition.range(lo, hi)))
    }

    /// Number of postings (for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.partitions.values().map(Partition::len).sum()
    }
}

/// A place in a partition: block index and offset within the block, with
/// `offset < blocks[block].len()` unless it is the end (`block == blocks.len()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    block: usize,
    offset: usize,
}

/// The sorted postings of one key token, in blocks.
#[derive(Default)]
struct Partition {
    blocks: Vec<Vec<Posting>>,
}

impl Partition {
    /// The first place whose posting does not satisfy `pred` (which must hold
    /// for a prefix of the postings).
    fn partition_point(&self, pred: impl Fn(Posting) -> bool) -> Place {
        let block = self.blocks.partition_point(|b| b.last().is_some_and(|&p| pred(p)));
        match self.blocks.get(block) {
            Some(postings) => Place { block, offset: postings.partition_point(|&p| pred(p)) },
            None => Place { block, offset: 0 },
        }
    }

    fn get(&self, at: Place) -> Option<Posting> {
        self.blocks.get(at.block)?.get(at.offset).copied()
    }

    fn before(&self, at: Place) -> Option<Posting> {
        match at.offset.checked_sub(1) {
            Some(offset) => self.get(Place { block: at.block, offset }),
            None => self.blocks[..at.block].last()?.last().copied(),
        }
    }

    fn range(&self, lo: Place, hi: Place) -> impl Iterator<Item = Posting> + '_ {
        self.blocks.iter().enumerate().skip(lo.block).take_while(move |(b, _)| *b <= hi.block).flat_map(
            move |(b, postings)| {
                let start = if b == lo.block { lo.offset } else { 0 };
                let stop = if b == hi.block { hi.offset } else { postings.len() };
                postings[start..stop].iter().copied()
            },
        )
    }

    fn len(&self) -> usize {
        self.blocks.iter().map(Vec::len).sum()
    }

    fn retain(&mut self, keep: impl Fn(&Posting) -> bool) {
        for postings in &mut self.blocks {
            postings.retain(&keep);
        }
        self.blocks.retain(|b| !b.is_empty());
    }

    /// Inserts canonically sorted postings; each search starts at the block
    /// of the previous insertion.
    fn insert_sorted(&mut self, files: &[FileEntry], sorted: &[Posting]) {
        let mut first = 0;
        for &p in sorted {
            let last = self.blocks.len() - 1;
            let block = (first
                + self.blocks[first..]
                    .partition_point(|b| b.last().is_some_and(|&q| order(files, q, p) == Ordering::Less)))
            .min(last);
            let postings = &mut self.blocks[block];
            let offset = postings.partition_point(|&q| order(files, q, p) == Ordering::Less);
            postings.insert(offset, p);
            if postings.len() > 2 * BLOCK {
                let upper = postings.split_off(BLOCK);
                self.blocks.insert(block + 1, upper);
            }
            first = block;
        }
    }

    fn remove(&mut self, files: &[FileEntry], p: Posting) {
        let at = self.partition_point(|q| order(files, q, p) == Ordering::Less);
        if self.get(at) != Some(p) {
            return;
        }
        let postings = &mut self.blocks[at.block];
        postings.remove(at.offset);
        if postings.is_empty() {
            self.blocks.remove(at.block);
        } else if postings.len() < BLOCK / 4 {
            // Merge small neighbours so blocks stay large.
            if let Some(next) = self.blocks.get(at.block + 1) {
                if self.blocks[at.block].len() + next.len() <= BLOCK {
                    let next = self.blocks.remove(at.block + 1);
                    self.blocks[at.block].extend(next);
                }
            }
        }
    }
}

/// Merges the sorted `new` postings into the sorted `old` ones; each search
/// starts where the previous one ended.
fn merge(files: &[FileEntry], old: Vec<Posting>, new: Vec<Posting>) -> Vec<Posting> {
    let mut out = Vec::with_capacity(old.len() + new.len());
    let mut from = 0;
    for p in new {
        let to = from + old[from..].partition_point(|&q| order(files, q, p) == Ordering::Less);
        out.extend_from_slice(&old[from..to]);
        out.push(p);
        from = to;
    }
    out.extend_from_slice(&old[from..]);
    out
}
