//! The common datastore of a tokenizer: where it is cached, and building it
//! from the default corpus when it is missing or damaged.

use crate::common_build::{self, CommonBuildSummary};
use crate::paths;
use anyhow::Result;
use copilotd_draft::common_store::{CommonParams, CommonStore};
use copilotd_model::Tokenizer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `$XDG_CACHE_HOME/copilotd/common/<tokenizer fingerprint>.crest`.
pub fn store_path(tokenizer: &Tokenizer) -> PathBuf {
    paths::cache_dir().join("common").join(format!("{:016x}.crest", tokenizer.fingerprint()))
}

/// Opens the cached common store; builds it from the default corpus first
/// when there is none, or rebuilds it (with a warning) when it is unusable.
pub fn open_or_build(tokenizer: &Tokenizer) -> Result<Arc<CommonStore>> {
    let path = store_path(tokenizer);
    if path.exists() {
        match CommonStore::open(&path, tokenizer.fingerprint()) {
            Ok(store) => return Ok(Arc::new(store)),
            Err(error) => tracing::warn!("rebuilding the common datastore {}: {error:#}", path.display()),
        }
    }
    let corpus = common_build::default_corpus()?;
    eprintln!("copilotd: building the common datastore from {} (once)", corpus.display());
    build(tokenizer, &corpus, &path)?;
    Ok(Arc::new(CommonStore::open(&path, tokenizer.fingerprint())?))
}

/// Builds the common datastore of `tokenizer` from the Python files under
/// `corpus` into `out` with the default (CREST) parameters.
pub fn build(tokenizer: &Tokenizer, corpus: &Path, out: &Path) -> Result<CommonBuildSummary> {
    let encoder = tokenizer.clone();
    let tokenize = move |text: &str| encoder.encode(text);
    common_build::build_common(corpus, &tokenize, tokenizer.fingerprint(), out, CommonParams::default(), true)
}
