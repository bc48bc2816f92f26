//! The common datastore of a tokenizer: where it is cached, and building it
//! from the default corpus when it is missing or damaged.

use crate::paths;
use anyhow::Result;
use copilotd_draft::common_store::CommonStore;
use copilotd_model::Tokenizer;
use std::path::PathBuf;
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
    anyhow::bail!("no common datastore at {} (building it is not wired yet)", path.display())
}
