//! Writing a file so that readers (and a crash) see either the old or the new content.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};

/// How the names of temporary files begin.
const TEMPORARY_PREFIX: &str = ".copilotd-";

/// Age past which a temporary file (or folder) is taken for one a killed process left: writing
/// one takes seconds, a download minutes.
pub const STALE_AFTER: Duration = Duration::from_secs(60 * 60);

/// Writes `bytes` to a temporary file beside `path`, flushes it to disk and renames it over
/// `path`. The temporary file is removed if anything fails.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = temporary_beside(path)?;
    file.write_all(bytes).with_context(|| format!("writing {}", file.path().display()))?;
    file.as_file().sync_all().with_context(|| format!("syncing {}", file.path().display()))?;
    file.persist(path).with_context(|| format!("renaming onto {}", path.display()))?;
    Ok(())
}

/// Whether [`write`] could write `path`: its directory is created, and a temporary file is
/// made there and removed. Work that ends by writing its result checks first, so that it
/// fails before the work rather than after it.
pub fn check_writable(path: &Path) -> Result<()> {
    temporary_beside(path).map(drop)
}

/// An empty temporary file in the directory of `path`, which is created if need be. Temporary
/// files a killed process left there are removed first.
fn temporary_beside(path: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    remove_stale(dir, TEMPORARY_PREFIX, STALE_AFTER);
    tempfile::Builder::new()
        .prefix(TEMPORARY_PREFIX)
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))
}

/// Removes the files and folders in `dir` whose names begin with `prefix` and that were last
/// modified longer than `age` ago: temporaries of a process killed before it could remove them,
/// or caches left unused. What cannot be removed is left (another user's, or gone meanwhile).
pub fn remove_stale(dir: &Path, prefix: &str, age: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let stale = entry.file_name().to_str().is_some_and(|name| name.starts_with(prefix))
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|modified| now.duration_since(modified).is_ok_and(|since| since > age));
        if !stale {
            continue;
        }
        let path = entry.path();
        let _ = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_the_file_whole_and_leaves_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("file.bin");
        super::write(&path, b"old").unwrap();
        super::write(&path, b"new content").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new content");
        assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn temporaries_a_killed_process_left_are_removed_at_the_next_write_fresh_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let old = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"partial").unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(std::time::SystemTime::now() - super::STALE_AFTER * 2).unwrap();
            path
        };
        let stale = old(".copilotd-dead1");
        let not_ours = old("notes.txt");
        let fresh = dir.path().join(".copilotd-writing");
        std::fs::write(&fresh, b"being written").unwrap();
        super::write(&dir.path().join("store"), b"x").unwrap();
        assert!(!stale.exists(), "a stale temporary is removed");
        assert!(not_ours.exists() && fresh.exists(), "other files and a recent temporary stay");
    }

    #[test]
    fn a_place_that_cannot_be_written_is_found_before_writing_and_one_that_can_is_left_empty() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("a file");
        std::fs::write(&blocker, b"").unwrap();
        assert!(super::check_writable(&blocker.join("sub").join("store")).is_err());
        let path = dir.path().join("new").join("store");
        super::check_writable(&path).unwrap();
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 0, "no temporary file is left");
    }
}
