//! The persisted preference cache of one workspace and tokenizer: the one persisted file that
//! cannot be rebuilt from sources. A damaged file is rebuilt (with a warning); a file this
//! process cannot read, or that holds another tokenizer's lessons, is left as it is for the
//! whole session. Several daemons on one workspace share the file: each save merges what the
//! others saved since (under a lock file), so that none loses the others' lessons.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use copilotd_draft::pref_cache::{Baseline, CacheConfig, LoadError, PreferenceCache};

use crate::workspace::paths::{legacy_preferences_path, preferences_path};

/// The preference cache's file, and whether this process may write it.
#[derive(Debug)]
pub struct PreferenceFile {
    path: PathBuf,
    fingerprint: u64,
    /// `false` when the file holds something this process could not read: it is kept.
    writable: bool,
    /// What the file held when this process last read or wrote it.
    base: Baseline,
}

impl PreferenceFile {
    /// The file of the tokenizer `fingerprint` in the workspace cache directory
    /// `workspace_cache`, and the cache it holds (with `config`), if it holds a usable one. A
    /// file of the format before per-tokenizer files, made for this tokenizer, is adopted.
    pub fn open(
        workspace_cache: &Path,
        fingerprint: u64,
        config: CacheConfig,
    ) -> (PreferenceFile, Option<PreferenceCache>) {
        let path = preferences_path(workspace_cache, fingerprint);
        let mut file = PreferenceFile { path, fingerprint, writable: true, base: Baseline::default() };
        match PreferenceCache::load(&file.path, config, fingerprint) {
            Ok(cache) => {
                file.base = cache.baseline();
                return (file, Some(cache));
            }
            Err(error) if error.is_missing() => {}
            Err(error @ LoadError::Damaged { .. }) => {
                tracing::warn!("{error}; the preference cache starts empty and the file is rebuilt");
                return (file, None);
            }
            Err(error) => {
                tracing::warn!("{error}; the preference cache starts empty, and the file is kept as it is");
                file.writable = false;
                return (file, None);
            }
        }
        let adopted = file.adopt(&legacy_preferences_path(workspace_cache), config);
        if let Some(cache) = &adopted {
            file.base = cache.baseline();
        }
        (file, adopted)
    }

    /// The cache in `legacy`, moved to this file's place, when it was made for this tokenizer.
    fn adopt(&self, legacy: &Path, config: CacheConfig) -> Option<PreferenceCache> {
        let cache = PreferenceCache::load(legacy, config, self.fingerprint).ok()?;
        match std::fs::rename(legacy, &self.path) {
            Ok(()) => Some(cache),
            Err(error) => {
                tracing::warn!(
                    "cannot move the preference cache {} to {}: {error}",
                    legacy.display(),
                    self.path.display()
                );
                None
            }
        }
    }

    /// Writes `cache` to the file, unless the file is kept (see [`PreferenceFile::open`]),
    /// after merging into it what other processes saved there since this one last read or
    /// wrote it. A file that became unreadable or foreign meanwhile is kept (an error).
    pub fn save(&mut self, cache: &mut PreferenceCache) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        let _lock = self.lock()?;
        match PreferenceCache::load(&self.path, *cache.config(), self.fingerprint) {
            Ok(saved) => cache.merge_saved(&saved, &self.base),
            Err(error) if error.is_missing() => {}
            Err(error @ LoadError::Damaged { .. }) => tracing::warn!("{error}; the file is rebuilt"),
            Err(error) => return Err(error).context("the preference cache is not saved, the file is kept"),
        }
        cache.save(&self.path, self.fingerprint)?;
        self.base = cache.baseline();
        Ok(())
    }

    /// Holds the lock file beside the cache file (`<file>.lock`) until dropped: one process
    /// at a time reads, merges and writes the file. Makes the directory when it is missing.
    fn lock(&self) -> Result<std::fs::File> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let mut name = self.path.clone().into_os_string();
        name.push(".lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&name)
            .with_context(|| format!("cannot open the lock file {}", name.display()))?;
        lock.lock().with_context(|| format!("cannot lock {}", name.display()))?;
        Ok(lock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CacheConfig {
        CacheConfig { activation: 0, ..CacheConfig::default() }
    }

    fn learned(tokens: &[u32]) -> PreferenceCache {
        let mut cache = PreferenceCache::new(config());
        cache.accept(tokens);
        cache
    }

    /// Opens the file of `fingerprint` in `dir`, and the number of sequences restored from it.
    fn open(dir: &Path, fingerprint: u64) -> (PreferenceFile, usize) {
        let (file, cache) = PreferenceFile::open(dir, fingerprint, config());
        (file, cache.map_or(0, |cache| cache.len()))
    }

    #[test]
    fn a_session_with_another_tokenizer_leaves_the_first_ones_lessons() {
        let dir = tempfile::tempdir().unwrap();
        let (mut first, _) = open(dir.path(), 7);
        first.save(&mut learned(&[1, 2, 3])).unwrap();
        let (mut other, restored) = open(dir.path(), 8);
        assert_eq!(restored, 0);
        other.save(&mut PreferenceCache::new(config())).unwrap();
        assert_eq!(open(dir.path(), 7).1, 1, "the first tokenizer's cache is still there");
    }

    #[test]
    fn a_file_that_cannot_be_read_or_is_foreign_is_kept_and_a_damaged_one_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        // Unreadable: a link to a directory (reading fails; a rename would replace the link).
        let path = preferences_path(dir.path(), 7);
        std::os::unix::fs::symlink(dir.path(), &path).unwrap();
        let (mut file, restored) = open(dir.path(), 7);
        assert_eq!(restored, 0);
        file.save(&mut learned(&[1, 2, 3])).unwrap();
        assert!(path.symlink_metadata().unwrap().file_type().is_symlink(), "the unreadable file is kept");
        std::fs::remove_file(&path).unwrap();

        // Another tokenizer's lessons under this name: kept.
        learned(&[4, 5, 6]).save(&path, 9).unwrap();
        let foreign = std::fs::read(&path).unwrap();
        let (mut file, _) = open(dir.path(), 7);
        file.save(&mut learned(&[1, 2, 3])).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), foreign);

        // Damaged: rebuilt.
        std::fs::write(&path, b"CPDPREF\0 garbage").unwrap();
        let (mut file, restored) = open(dir.path(), 7);
        assert_eq!(restored, 0);
        file.save(&mut learned(&[1, 2, 3])).unwrap();
        assert_eq!(open(dir.path(), 7).1, 1);
    }

    #[test]
    fn two_daemons_on_one_workspace_keep_each_others_lessons() {
        let dir = tempfile::tempdir().unwrap();
        let (mut a, _) = open(dir.path(), 7);
        let (mut b, _) = open(dir.path(), 7);
        let mut learned_by_a = learned(&[1, 2, 3]);
        a.save(&mut learned_by_a).unwrap();
        b.save(&mut learned(&[4, 5, 6])).unwrap();
        learned_by_a.accept(&[7, 8, 9]);
        a.save(&mut learned_by_a).unwrap();
        assert_eq!(learned_by_a.len(), 3, "A learned B's lesson too");
        assert_eq!(open(dir.path(), 7).1, 3, "the file holds both daemons' lessons");
    }

    #[test]
    fn a_save_makes_the_workspace_cache_directory_when_there_is_none() {
        // Nothing made it yet (no folder indexed), or a sweep removed it meanwhile.
        let dir = tempfile::tempdir().unwrap();
        let workspace_cache = dir.path().join("workspaces").join("0123456789abcdef");
        let (mut file, _) = open(&workspace_cache, 7);
        file.save(&mut learned(&[1, 2, 3])).unwrap();
        assert_eq!(open(&workspace_cache, 7).1, 1);
    }

    #[test]
    fn the_file_of_an_earlier_release_is_adopted_by_its_tokenizer_only() {
        let dir = tempfile::tempdir().unwrap();
        let legacy = legacy_preferences_path(dir.path());
        learned(&[1, 2, 3]).save(&legacy, 7).unwrap();
        assert_eq!(open(dir.path(), 8).1, 0);
        assert!(legacy.exists(), "another tokenizer leaves it");
        assert_eq!(open(dir.path(), 7).1, 1);
        assert!(!legacy.exists() && preferences_path(dir.path(), 7).exists(), "moved to its tokenizer's name");
    }
}
