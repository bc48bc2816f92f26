//! The Python source files under a directory, for corpora (the common datastore's, the
//! benchmark's packages), as opposed to the workspace's admitted files (`workspace::walk`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ignore::WalkBuilder;

/// The `.py` files under `dir`, sorted. Every file counts (no ignore files, hidden ones
/// too), symbolic links are not followed, and directories named in `skipped` are left out.
pub fn python_files(dir: &Path, skipped: &[&str]) -> Result<Vec<PathBuf>> {
    let skipped: Vec<String> = skipped.iter().map(|&name| name.to_owned()).collect();
    let walker = WalkBuilder::new(dir)
        .standard_filters(false)
        .follow_links(false)
        .filter_entry(move |entry| {
            let is_dir = entry.file_type().is_some_and(|kind| kind.is_dir());
            !(is_dir && entry.depth() > 0 && skipped.iter().any(|name| entry.file_name() == name.as_str()))
        })
        .build();
    let mut files = Vec::new();
    for entry in walker {
        let entry = entry.with_context(|| format!("cannot list the files under {}", dir.display()))?;
        let is_file = entry.file_type().is_some_and(|kind| kind.is_file());
        if is_file && entry.path().extension().is_some_and(|ext| ext == "py") {
            files.push(entry.into_path());
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_sorted_python_files_without_skipped_dirs_or_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for path in ["b.py", "a/.hidden.py", "a/c.py", "a/notes.txt", "cache/d.py", "a/cache/e.py"] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), "x = 1\n").unwrap();
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink(root.join("b.py"), root.join("link.py")).unwrap();
        let found: Vec<String> = python_files(root, &["cache"])
            .unwrap()
            .iter()
            .map(|path| path.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(found, ["a/.hidden.py", "a/c.py", "b.py"]);
        assert!(python_files(&root.join("missing"), &[]).is_err());
    }
}
