//! Writing a file so that readers (and a crash) see either the old or the new content.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Writes `bytes` to a temporary file beside `path`, flushes it to disk and renames it over
/// `path`. The temporary file is removed if anything fails.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut file = tempfile::Builder::new()
        .prefix(".copilotd-")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    file.write_all(bytes).with_context(|| format!("writing {}", file.path().display()))?;
    file.as_file().sync_all().with_context(|| format!("syncing {}", file.path().display()))?;
    file.persist(path).with_context(|| format!("renaming onto {}", path.display()))?;
    Ok(())
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
}
