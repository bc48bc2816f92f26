//! On-disk form of the preference cache, so that what the model confirmed in a workspace
//! outlives the daemon. The envelope is [`crate::persisted`]'s (versioned, checksummed, tied
//! to the tokenizer); the payload holds the sequences, least recently used first, so that
//! loading them in order restores their recency:
//! ```text
//! sequence count u64, then per sequence: weight u32 | token count u32 | tokens u32 × count
//! ```
//! Version 1 had no weights; such files are refused and the cache rebuilt from nothing.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};

use super::{CacheConfig, PreferenceCache};
use crate::persisted::{Kind, Reader};

const KIND: Kind = Kind { magic: *b"CPDPREF\0", version: 2, name: "preference cache" };

/// Why a preference cache file was not loaded. The caller tells apart a file it may replace
/// (missing or damaged) from one it must keep (unreadable, or another tokenizer's lessons).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read preference cache {path}: {source}")]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("preference cache {path} was built for another tokenizer (fingerprint {found:016x})")]
    Foreign { path: PathBuf, found: u64 },
    #[error("invalid preference cache {path}: {reason:#}")]
    Damaged { path: PathBuf, reason: anyhow::Error },
}

impl LoadError {
    /// Whether there was no file at all.
    pub fn is_missing(&self) -> bool {
        matches!(self, LoadError::Unreadable { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

impl PreferenceCache {
    /// Writes the cache to `path` atomically, for the tokenizer `fingerprint`.
    pub fn save(&self, path: &Path, fingerprint: u64) -> Result<()> {
        let mut entries: Vec<_> = self.slots.iter().flatten().collect();
        entries.sort_by_key(|entry| entry.last_used);
        let mut payload = Vec::new();
        payload.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for entry in entries {
            payload.extend_from_slice(&entry.weight.to_le_bytes());
            payload.extend_from_slice(&(entry.tokens.len() as u32).to_le_bytes());
            entry.tokens.iter().for_each(|t| payload.extend_from_slice(&t.to_le_bytes()));
        }
        crate::atomic_file::write(path, &KIND.wrap(fingerprint, &payload))
            .with_context(|| format!("cannot write preference cache {}", path.display()))
    }

    /// Reads a cache written by [`save`](Self::save) into a new cache with `config` (the
    /// most recent sequences kept if it holds fewer), refusing a damaged file or one made
    /// for another tokenizer.
    pub fn load(path: &Path, config: CacheConfig, fingerprint: u64) -> Result<PreferenceCache, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Unreadable { path: path.to_owned(), source })?;
        if let Some(found) = KIND.tokenizer_of(&bytes).filter(|&found| found != fingerprint) {
            return Err(LoadError::Foreign { path: path.to_owned(), found });
        }
        Self::decode(&bytes, config, fingerprint).map_err(|reason| LoadError::Damaged { path: path.to_owned(), reason })
    }

    fn decode(bytes: &[u8], config: CacheConfig, fingerprint: u64) -> Result<PreferenceCache> {
        let mut reader = Reader::new(KIND.unwrap(bytes, fingerprint)?);
        let count = reader.u64()?;
        let mut cache = PreferenceCache::new(config);
        for _ in 0..count {
            let weight = reader.u32()?;
            let len = reader.u32()? as usize;
            cache.upsert(&reader.tokens(len)?, weight, 0);
        }
        ensure!(reader.is_empty(), "trailing bytes after the last sequence");
        Ok(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pref_cache::{ACCEPTED_BONUS, CONFIRMED_WEIGHT};

    fn filled() -> PreferenceCache {
        let mut cache = PreferenceCache::new(CacheConfig { activation: 0, ..CacheConfig::default() });
        cache.insert(&[1, 2, 3, 4]);
        cache.accept(&[5, 6, 7]);
        cache.insert(&[1, 2, 9, 9]);
        cache
    }

    #[test]
    fn a_saved_cache_answers_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pref.cache");
        let mut cache = filled();
        cache.save(&path, 7).unwrap();
        let mut loaded = PreferenceCache::load(&path, *cache.config(), 7).unwrap();
        assert_eq!(loaded.len(), 3);
        assert_eq!(loaded.lookup(&[0, 1, 2]), cache.lookup(&[0, 1, 2]));
        assert_eq!(loaded.lookup(&[5, 6]), cache.lookup(&[5, 6]));
        assert_eq!(loaded.weight(&[5, 6, 7]), Some(CONFIRMED_WEIGHT + ACCEPTED_BONUS));
        assert_eq!(loaded.weight(&[1, 2, 3, 4]), Some(CONFIRMED_WEIGHT));
    }

    #[test]
    fn a_smaller_cache_keeps_the_most_recent_sequences() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pref.cache");
        filled().save(&path, 7).unwrap();
        let config = CacheConfig { capacity: 2, activation: 0, ..CacheConfig::default() };
        let mut loaded = PreferenceCache::load(&path, config, 7).unwrap();
        assert_eq!(loaded.len(), 2);
        assert!(loaded.lookup(&[4, 1, 2]).is_some_and(|r| r.continuations[0].tokens == [9, 9]));
        assert!(loaded.lookup(&[5, 6]).is_some());
    }

    #[test]
    fn damaged_or_foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pref.cache");
        filled().save(&path, 7).unwrap();
        let config = CacheConfig::default();
        let error = PreferenceCache::load(&path, config, 8).err().unwrap();
        assert!(matches!(error, LoadError::Foreign { found: 7, .. }), "{error}");
        assert!(PreferenceCache::load(&dir.path().join("none"), config, 7).err().unwrap().is_missing());
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let error = PreferenceCache::load(&path, config, 7).err().unwrap();
        assert!(
            matches!(error, LoadError::Damaged { .. }) && error.to_string().contains("checksum mismatch"),
            "{error}"
        );
        std::fs::write(&path, &bytes[..20]).unwrap();
        assert!(matches!(PreferenceCache::load(&path, config, 7), Err(LoadError::Damaged { .. })));
        // A file of the format before weights is refused (and the caller rebuilds).
        let unweighted = Kind { version: 1, ..KIND };
        std::fs::write(&path, unweighted.wrap(7, &0u64.to_le_bytes())).unwrap();
        let error = PreferenceCache::load(&path, config, 7).err().unwrap();
        assert!(error.to_string().contains("format version 1"), "{error}");
    }
}
