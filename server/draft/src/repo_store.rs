//! The live repository datastore: the workspace's files as token
//! ids, answering longest-suffix queries with counted continuations, updated
//! one file at a time in milliseconds.
//!
//! The answers depend only on the current set of (path, tokens) pairs: after
//! any sequence of upserts, removals and renames the store answers exactly
//! like a store built from scratch with the final files (see `index` for how
//! the order of occurrences is made canonical).

mod index;
mod persist;
mod related;

use std::collections::{BTreeMap, HashMap};

use crate::retrieval::{Continuation, QueryOptions, Retrieval};

pub use index::MAX_SUFFIX;
pub use persist::{FORMAT_VERSION, MAGIC};

/// An opaque version of a file's source as the caller knows it (the workspace
/// keeps its size and a hash of its modification time and identity there),
/// persisted with the file so that a later run can tell which files need
/// tokenizing again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stamp(pub [u64; 2]);

/// New contents for one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileUpdate {
    pub path: String,
    pub tokens: Vec<u32>,
    pub stamp: Option<Stamp>,
}

/// One slot of the file table; a free slot has an empty path and no tokens.
#[derive(Default)]
struct FileEntry {
    path: Box<str>,
    tokens: Vec<u32>,
    stamp: Option<Stamp>,
}

/// Index of the files of a workspace over token ids.
#[derive(Default)]
pub struct RepositoryStore {
    files: Vec<FileEntry>,
    free: Vec<u32>,
    by_path: BTreeMap<Box<str>, u32>,
    index: index::SuffixIndex,
    token_count: usize,
    generation: u64,
    fingerprint: u64,
}

impl std::fmt::Debug for RepositoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepositoryStore")
            .field("files", &self.file_count())
            .field("tokens", &self.token_count)
            .field("generation", &self.generation)
            .field("fingerprint", &format_args!("{:016x}", self.fingerprint))
            .finish()
    }
}

impl RepositoryStore {
    /// An empty store with tokenizer fingerprint 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store for the tokenizer with the given fingerprint (written
    /// by [`save`](Self::save) and checked by [`load`](Self::load)).
    pub fn with_fingerprint(fingerprint: u64) -> Self {
        Self { fingerprint, ..Self::default() }
    }

    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Changes whenever an answer to some query may have changed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The indexed paths, in sorted order.
    pub fn files(&self) -> impl Iterator<Item = &str> + '_ {
        self.by_path.keys().map(|p| &**p)
    }

    pub fn file_count(&self) -> usize {
        self.by_path.len()
    }

    /// Total number of tokens over all files.
    pub fn token_count(&self) -> usize {
        self.token_count
    }

    pub fn contains(&self, path: &str) -> bool {
        self.by_path.contains_key(path)
    }

    pub fn file_tokens(&self, path: &str) -> Option<&[u32]> {
        self.slot(path).map(|s| &*self.files[s as usize].tokens)
    }

    pub fn stamp(&self, path: &str) -> Option<Stamp> {
        self.slot(path).and_then(|s| self.files[s as usize].stamp)
    }

    fn slot(&self, path: &str) -> Option<u32> {
        self.by_path.get(path).copied()
    }

    /// Adds or replaces a file (without a stamp).
    pub fn upsert_file(&mut self, path: &str, tokens: Vec<u32>) {
        self.upsert_files(vec![FileUpdate { path: path.to_owned(), tokens, stamp: None }]);
    }

    /// Adds or replaces a file and records its stamp.
    pub fn upsert_file_stamped(&mut self, path: &str, tokens: Vec<u32>, stamp: Option<Stamp>) {
        self.upsert_files(vec![FileUpdate { path: path.to_owned(), tokens, stamp }]);
    }

    /// Adds or replaces many files at once: one merge per touched partition,
    /// so a whole workspace is built in O(n log n). Later updates of the same
    /// path win. Files with more than `u32::MAX` tokens are cut there.
    pub fn upsert_files(&mut self, updates: Vec<FileUpdate>) {
        let mut latest: HashMap<String, FileUpdate> = HashMap::new();
        for mut update in updates {
            update.tokens.truncate(u32::MAX as usize);
            latest.insert(update.path.clone(), update);
        }
        let mut changed_old = Vec::new();
        let mut changed = Vec::new();
        for (path, update) in latest {
            match self.slot(&path) {
                Some(slot) => {
                    let entry = &mut self.files[slot as usize];
                    if entry.tokens == update.tokens {
                        entry.stamp = update.stamp;
                    } else {
                        changed_old.push(slot);
                        changed.push((slot, update));
                    }
                }
                None => {
                    let slot = self.allocate(&path);
                    changed.push((slot, update));
                }
            }
        }
        if changed.is_empty() {
            return;
        }
        self.index.remove(&self.files, &changed_old);
        let mut slots = Vec::with_capacity(changed.len());
        for (slot, update) in changed {
            let entry = &mut self.files[slot as usize];
            self.token_count -= entry.tokens.len();
            self.token_count += update.tokens.len();
            entry.tokens = update.tokens;
            entry.stamp = update.stamp;
            slots.push(slot);
        }
        self.index.add(&self.files, &slots);
        self.generation += 1;
    }

    /// Removes a file; false when it was not in the store.
    pub fn remove_file(&mut self, path: &str) -> bool {
        let Some(slot) = self.by_path.remove(path) else {
            return false;
        };
        self.index.remove(&self.files, &[slot]);
        let entry = std::mem::take(&mut self.files[slot as usize]);
        self.token_count -= entry.tokens.len();
        self.free.push(slot);
        self.generation += 1;
        true
    }

    /// Moves a file to a new path, replacing any file already there (like a
    /// file-system rename); false when `from` was not in the store.
    pub fn rename_file(&mut self, from: &str, to: &str) -> bool {
        if from == to {
            return self.contains(from);
        }
        let Some(slot) = self.slot(from) else {
            return false;
        };
        let entry = &self.files[slot as usize];
        let (tokens, stamp) = (entry.tokens.clone(), entry.stamp);
        // The path breaks ties in the canonical order, so the file's postings
        // are re-sorted under the new name.
        self.remove_file(from);
        self.upsert_file_stamped(to, tokens, stamp);
        true
    }

    fn allocate(&mut self, path: &str) -> u32 {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.files.push(FileEntry::default());
                (self.files.len() - 1) as u32
            }
        };
        self.files[slot as usize].path = path.into();
        self.by_path.insert(path.into(), slot);
        slot
    }

    /// The longest suffix of `context` (from `opts.max_suffix` down to
    /// `opts.min_suffix` tokens, at most [`MAX_SUFFIX`]) that occurs in the
    /// store followed by at least one token, with what followed its first
    /// `opts.max_matches` occurrences (in the index's canonical order): up to
    /// `opts.continuation_len` tokens each, identical ones merged with counts,
    /// sorted by count (descending) then tokens. `None` when no suffix of an
    /// allowed length occurs.
    pub fn query(&self, context: &[u32], opts: &QueryOptions) -> Option<Retrieval> {
        let max_len = opts.max_suffix.min(MAX_SUFFIX).min(context.len());
        let min_len = opts.min_suffix.max(1);
        if max_len < min_len {
            return None;
        }
        let (matched_len, occurrences) = self.index.longest_match(&self.files, context, max_len)?;
        if matched_len < min_len {
            return None;
        }
        let mut counts: HashMap<&[u32], u32> = HashMap::new();
        for p in occurrences.take(opts.max_matches) {
            let tokens = &self.files[p.file as usize].tokens;
            let start = p.end as usize;
            let stop = tokens.len().min(start + opts.continuation_len);
            *counts.entry(&tokens[start..stop]).or_default() += 1;
        }
        let mut continuations: Vec<Continuation> =
            counts.into_iter().map(|(tokens, count)| Continuation { tokens: tokens.to_vec(), count }).collect();
        continuations.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.tokens.cmp(&b.tokens)));
        Some(Retrieval { matched_len, continuations })
    }
}

#[cfg(test)]
mod tests;
