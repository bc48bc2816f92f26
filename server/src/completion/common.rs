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
    open_or_build_at(tokenizer, &store_path(tokenizer), CommonParams::default(), &common_build::default_corpus)
}

/// Like `open_or_build`, for a store with other `params` at `path` (benchmarks compare
/// variants of the common store this way).
pub fn open_or_build_with(tokenizer: &Tokenizer, path: &Path, params: CommonParams) -> Result<Arc<CommonStore>> {
    open_or_build_at(tokenizer, path, params, &common_build::default_corpus)
}

/// Opens the store at `path`, or builds it with `params` from the corpus
/// directory that `corpus` finds.
fn open_or_build_at(
    tokenizer: &Tokenizer,
    path: &Path,
    params: CommonParams,
    corpus: &dyn Fn() -> Result<PathBuf>,
) -> Result<Arc<CommonStore>> {
    if path.exists() {
        match CommonStore::open(path, tokenizer.fingerprint()) {
            Ok(store) => return Ok(Arc::new(store)),
            Err(error) => tracing::warn!("rebuilding the common datastore {}: {error:#}", path.display()),
        }
    }
    let corpus = corpus()?;
    eprintln!("copilotd: building the common datastore {} from {} (once)", path.display(), corpus.display());
    build(tokenizer, &corpus, path, params)?;
    Ok(Arc::new(CommonStore::open(path, tokenizer.fingerprint())?))
}

/// Builds the common datastore of `tokenizer` from the Python files under
/// `corpus` into `out`.
pub fn build(tokenizer: &Tokenizer, corpus: &Path, out: &Path, params: CommonParams) -> Result<CommonBuildSummary> {
    let encoder = tokenizer.clone();
    let tokenize = move |text: &str| encoder.encode(text);
    common_build::build_common(corpus, &tokenize, tokenizer.fingerprint(), out, params, true)
}

/// A word-level tokenizer over a handful of words (`a` to `d`), written into `dir`.
#[cfg(test)]
pub(crate) fn test_tokenizer(dir: &Path) -> Tokenizer {
    let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"a":1,"b":2,"c":3,"d":4},"unk_token":"[UNK]"}}"#;
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, json).unwrap();
    Tokenizer::from_file(&path).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use copilotd_draft::common_store::TopT;

    /// Every n-gram kept: the largest store these parameters make.
    fn full_params() -> CommonParams {
        CommonParams { top_t: TopT::Unlimited, ..CommonParams::default() }
    }

    /// A directory with the tokenizer and a corpus of one file holding `text`.
    fn with_corpus(text: &str) -> (tempfile::TempDir, Tokenizer, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = test_tokenizer(dir.path());
        let corpus = dir.path().join("corpus");
        std::fs::create_dir_all(&corpus).unwrap();
        std::fs::write(corpus.join("m.py"), text).unwrap();
        (dir, tokenizer, corpus)
    }

    #[test]
    fn a_store_with_other_params_is_built_once_and_rebuilt_when_damaged() {
        // Every n-gram followed by a token: 1-grams a b c d; 2-grams ab bc cd da ba; ...
        let (dir, tokenizer, corpus) = with_corpus("a b c d a b a c");
        let found = || Ok(corpus.clone());
        let path = dir.path().join("store.full.crest");
        let full = open_or_build_at(&tokenizer, &path, full_params(), &found).unwrap();
        assert_eq!(full.params().top_t, TopT::Unlimited);
        assert_eq!(full.entries_per_n(), vec![4, 5, 5, 4, 3]);
        let compact_params = CommonParams { top_t: TopT::PerN(2), ..CommonParams::default() };
        let compact = open_or_build_at(&tokenizer, &dir.path().join("c.crest"), compact_params, &found).unwrap();
        assert_eq!(compact.entries_per_n(), vec![2; 5]);
        assert!(compact.size_bytes() < full.size_bytes());

        // Cached: opened again without the corpus.
        let gone = || anyhow::bail!("the corpus must not be read again");
        assert_eq!(open_or_build_at(&tokenizer, &path, full_params(), &gone).unwrap().size_bytes(), full.size_bytes());
        // A damaged file is rebuilt, not trusted (unmapped first: stores
        // are only ever replaced by rename, never written in place).
        let counts = full.entries_per_n();
        drop(full);
        std::fs::write(&path, b"not a store").unwrap();
        let rebuilt = open_or_build_at(&tokenizer, &path, full_params(), &found).unwrap();
        assert_eq!(rebuilt.entries_per_n(), counts);
    }

    #[test]
    fn an_interrupted_rebuild_leaves_no_partial_store() {
        let (dir, tokenizer, corpus) = with_corpus("a b c d a b");
        let stores = dir.path().join("common");
        let path = stores.join("store.crest");
        std::fs::create_dir_all(&stores).unwrap();
        std::fs::write(&path, b"damaged").unwrap();
        // Stopped before the new store was complete: the old file is untouched.
        let stopped = || anyhow::bail!("stopped mid-rebuild");
        assert!(open_or_build_at(&tokenizer, &path, CommonParams::default(), &stopped).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"damaged");
        // A finished rebuild replaces it whole and leaves no temporary file behind.
        let found = || Ok(corpus.clone());
        open_or_build_at(&tokenizer, &path, CommonParams::default(), &found).unwrap();
        let names: Vec<_> = std::fs::read_dir(&stores).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("store.crest")]);
    }
}
