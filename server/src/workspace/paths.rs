//! Where a workspace's repository datastore lives: under the cache directory
//! ([`crate::paths::cache_dir`]), never in the workspace itself.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The directory holding everything cached for one workspace:
/// `cache_dir()/workspaces/<16 hex digits of a hash of the canonical root>`.
pub fn workspace_cache_dir(root: &Path) -> Result<PathBuf> {
    let canonical = root.canonicalize().with_context(|| format!("cannot resolve workspace {}", root.display()))?;
    Ok(crate::paths::cache_dir().join("workspaces").join(format!("{:016x}", path_hash(&canonical))))
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
}
