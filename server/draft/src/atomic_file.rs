//! Writing a file so that readers (and a crash) see either the old or the new content.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

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

/// An empty temporary file in the directory of `path`, which is created if need be.
fn temporary_beside(path: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    tempfile::Builder::new()
        .prefix(".copilotd-")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))
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
