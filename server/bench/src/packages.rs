//! The real Python packages of the repository benchmark: fetched as wheels
//! with pip (wheels contain the sources) and unpacked once into the cache.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// A pinned package, `name==version`.
#[derive(Clone, Debug, PartialEq)]
pub struct Package {
    pub name: String,
    pub version: String,
}

impl Package {
    pub fn label(&self) -> String {
        format!("{}=={}", self.name, self.version)
    }
}

/// Reads a package list: one `name==version` a line, `#` comments.
pub fn read_list(path: &Path) -> Result<Vec<Package>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, version) =
                line.split_once("==").with_context(|| format!("'{line}' is not a pinned requirement name==version"))?;
            Ok(Package { name: name.trim().to_string(), version: version.trim().to_string() })
        })
        .collect()
}

/// The unpacked sources of `package` under `cache`, fetching them first.
pub fn unpacked(package: &Package, cache: &Path) -> Result<PathBuf> {
    let dir = cache.join("packages").join(format!("{}-{}", package.name, package.version));
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    let wheel = copilotd_server::wheel::download(&package.label(), &cache.join("wheels"))?;
    let _ = std::fs::remove_dir_all(&dir);
    copilotd_server::wheel::extract_all(&wheel, &dir)?;
    std::fs::write(dir.join(".complete"), b"")?;
    Ok(dir)
}
