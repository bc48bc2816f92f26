//! Where a workspace's repository datastore lives: under the cache directory
//! ([`crate::paths::cache_dir`]), never in the workspace itself.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};

/// How long the cache directory of a workspace may go unused before [`remove_unused`] removes
/// it: its key is the folder's path, so a folder moved or deleted leaves it behind for good; a
/// folder still there gets its store rebuilt when it is opened again.
pub const UNUSED_FOR: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// The directory holding everything cached for one workspace:
/// `cache_dir()/workspaces/<16 hex digits of a hash of the canonical root>`.
pub fn workspace_cache_dir(root: &Path) -> Result<PathBuf> {
    let canonical = root.canonicalize().with_context(|| format!("cannot resolve workspace {}", root.display()))?;
    Ok(all_workspaces_dir().join(format!("{:016x}", path_hash(&canonical))))
}

fn all_workspaces_dir() -> PathBuf {
    crate::paths::cache_dir().join("workspaces")
}

/// Marks the cache directory of a workspace as used now (its modification time), when its store
/// is opened: a store only read is not written. What cannot be marked is left.
pub fn mark_used(workspace_cache: &Path) {
    if let Ok(dir) = std::fs::File::open(workspace_cache) {
        let _ = dir.set_modified(SystemTime::now());
    }
}

/// Removes the cache directories of workspaces that have not been used for [`UNUSED_FOR`].
pub fn remove_unused() {
    remove_unused_in(&all_workspaces_dir());
}

/// [`remove_unused`] in the directory `all_workspaces` of the workspaces' cache directories.
fn remove_unused_in(all_workspaces: &Path) {
    copilotd_draft::atomic_file::remove_stale(all_workspaces, "", UNUSED_FOR);
}

/// The repository datastore file of a workspace.
pub fn workspace_store_path(root: &Path) -> Result<PathBuf> {
    Ok(workspace_cache_dir(root)?.join("repo.store"))
}

/// The persisted preference cache of a workspace (of its first folder) for one tokenizer, in
/// the workspace's cache directory `workspace_cache`: each tokenizer's lessons in a file of
/// their own, so that a session with another model leaves them alone.
pub fn preferences_path(workspace_cache: &Path, tokenizer_fingerprint: u64) -> PathBuf {
    workspace_cache.join(format!("preferences-{tokenizer_fingerprint:016x}.cache"))
}

/// Where releases before per-tokenizer files kept a workspace's preference cache.
pub fn legacy_preferences_path(workspace_cache: &Path) -> PathBuf {
    workspace_cache.join("preferences.cache")
}

fn path_hash(path: &Path) -> u64 {
    copilotd_draft::checksum::of_bytes(path.as_os_str().as_encoded_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_path_depends_on_the_canonical_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let direct = workspace_store_path(&dir.path().join("a")).unwrap();
        let dotted = workspace_store_path(&dir.path().join("a/../a/.")).unwrap();
        assert_eq!(direct, dotted);
        assert!(direct.starts_with(crate::paths::cache_dir().join("workspaces")));
        assert!(direct.ends_with("repo.store"));
        assert_ne!(direct, workspace_store_path(dir.path()).unwrap());
        assert!(workspace_store_path(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn the_caches_of_workspaces_unused_for_long_are_removed() {
        let all = tempfile::tempdir().unwrap();
        let caches = [all.path().join("0123456789abcdef"), all.path().join("fedcba9876543210")];
        for cache in &caches {
            std::fs::create_dir(cache).unwrap();
            std::fs::write(cache.join("repo.store"), b"store").unwrap();
            let long_ago = SystemTime::now() - UNUSED_FOR - Duration::from_secs(60);
            std::fs::File::open(cache).unwrap().set_modified(long_ago).unwrap();
        }
        mark_used(&caches[0]);
        remove_unused_in(all.path());
        assert!(caches[0].join("repo.store").exists(), "a workspace just opened lost its cache");
        assert!(!caches[1].exists(), "an unused workspace's cache was kept");
    }
}
