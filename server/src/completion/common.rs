//! The common datastore of a tokenizer: where it is cached, and building it
//! from the default corpus when it is missing or damaged; and the store refined
//! by a model's perplexity, used instead when one was built for the loaded model.

use crate::common_build::{self, CommonBuildSummary};
use crate::paths;
use anyhow::{Context, Result};
use copilotd_draft::atomic_file;
use copilotd_draft::common_store::{CommonParams, CommonStore};
use copilotd_model::{ModelInfo, Tokenizer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `$XDG_CACHE_HOME/copilotd/common/<tokenizer fingerprint>.crest`.
pub fn store_path(tokenizer: &Tokenizer) -> PathBuf {
    paths::cache_dir().join("common").join(format!("{:016x}.crest", tokenizer.fingerprint()))
}

/// What a cache that depends on a model's predictions (not only on its
/// tokenizer) is keyed by: the model's name (its file stem), architecture,
/// vocabulary and context sizes, and its tokenizer's fingerprint. The weight
/// format and the kernel are left out: they move the logits in their last
/// bits, not which chunks of a corpus rank lowest.
pub fn model_fingerprint(info: &ModelInfo, tokenizer: &Tokenizer) -> u64 {
    let key = format!(
        "{}|{}|{}|{}|{:016x}",
        info.name,
        info.architecture,
        info.vocab_size,
        info.context_length,
        tokenizer.fingerprint()
    );
    copilotd_draft::checksum::of_bytes(key.as_bytes())
}

/// `<tokenizer fingerprint>.refined-<model fingerprint>.crest` beside the
/// tokenizer's store: the store `copilotd datastore build-common --refine`
/// builds for this model.
pub fn refined_store_path(tokenizer: &Tokenizer, info: &ModelInfo) -> PathBuf {
    let model = model_fingerprint(info, tokenizer);
    store_path(tokenizer).with_extension(format!("refined-{model:016x}.crest"))
}

/// The common store completions use: the refined store of this model when
/// there is a usable one, else the tokenizer's store (see [`open_or_build`]).
pub fn open_for_model(tokenizer: &Tokenizer, info: &ModelInfo) -> Result<Arc<CommonStore>> {
    open_preferring(&refined_store_path(tokenizer, info), tokenizer, &|| open_or_build(tokenizer))
}

/// Opens the store at `refined` when it exists and is valid (an unusable one
/// is logged and passed over, never deleted: the next refinement replaces
/// it), else what `fallback` opens.
fn open_preferring(
    refined: &Path,
    tokenizer: &Tokenizer,
    fallback: &dyn Fn() -> Result<Arc<CommonStore>>,
) -> Result<Arc<CommonStore>> {
    if refined.exists() {
        match CommonStore::open(refined, tokenizer.fingerprint()) {
            Ok(store) => {
                tracing::info!("using the refined common datastore {}", refined.display());
                return Ok(Arc::new(store));
            }
            Err(error) => tracing::warn!("passing over the refined common datastore: {error:#}"),
        }
    }
    fallback()
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
    // The build takes a while: a place it could not be saved to fails before it, not after.
    atomic_file::check_writable(path)
        .with_context(|| format!("cannot write the common datastore to {}", path.display()))?;
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
    use std::time::Duration;

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

    /// What the loader reports for a model named `name` (the other fields do not matter here).
    fn info(name: &str) -> ModelInfo {
        ModelInfo {
            name: name.to_string(),
            architecture: "llama".to_string(),
            vocab_size: 5,
            context_length: 2048,
            device: "cpu".to_string(),
            weights: "q8_0".to_string(),
            bos_token: None,
            eos_tokens: vec![],
            fim: None,
            threads: 1,
            kernel: copilotd_model::Kernel::Portable,
            kernel_warning: None,
        }
    }

    #[test]
    fn the_refined_store_is_keyed_by_the_model_beside_the_tokenizers_store() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = test_tokenizer(dir.path());
        let path = refined_store_path(&tokenizer, &info("small"));
        assert_eq!(path.parent(), store_path(&tokenizer).parent());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let model = model_fingerprint(&info("small"), &tokenizer);
        assert_eq!(name, format!("{:016x}.refined-{model:016x}.crest", tokenizer.fingerprint()));
        // Another model with the same tokenizer has its own; the weight format and kernel do not count.
        assert_ne!(refined_store_path(&tokenizer, &info("large")), path);
        let mut converted = info("small");
        converted.weights = "native".to_string();
        converted.kernel = copilotd_model::Kernel::Avx2;
        assert_eq!(refined_store_path(&tokenizer, &converted), path);
        let mut wider = info("small");
        wider.vocab_size = 6;
        assert_ne!(model_fingerprint(&wider, &tokenizer), model);
    }

    #[test]
    fn a_failed_refinement_leaves_the_previous_store_in_use_and_the_next_one_replaces_it() {
        use crate::common_refine::{refine_and_write, RefineSettings};
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = test_tokenizer(dir.path());
        let corpus = dir.path().join("corpus");
        std::fs::create_dir_all(&corpus).unwrap();
        std::fs::write(corpus.join("low.py"), "a b a b a b a b").unwrap();
        std::fs::write(corpus.join("high.py"), "c d c d c d c d").unwrap();
        let encoder = tokenizer.clone();
        let tokens = common_build::tokenize_corpus(&corpus, &move |t: &str| encoder.encode(t), true).unwrap();
        let stores = dir.path().join("common");
        let (plain_path, refined) = (stores.join("plain.crest"), stores.join("plain.refined-1.crest"));
        let plain = open_or_build_at(&tokenizer, &plain_path, full_params(), &|| Ok(corpus.clone())).unwrap();
        let fallback = || Ok(plain.clone());
        // No refined store yet: the tokenizer's store is used.
        assert!(open_preferring(&refined, &tokenizer, &fallback).unwrap().query(&[3]).is_some());

        let settings = RefineSettings { window: 4, ..RefineSettings::new(0.5, Duration::from_secs(600), 16).unwrap() };
        let key = (tokenizer.fingerprint(), full_params());
        // A toy perplexity: the mean token id, so that `a b` scores lowest.
        let mut mean_id = |t: &[u32]| Ok(t.iter().map(|&x| f64::from(x)).sum::<f64>() / t.len() as f64);
        refine_and_write(&tokens, &mut mean_id, &settings, key, &refined, &mut |_| {}).unwrap();
        let used = open_preferring(&refined, &tokenizer, &fallback).unwrap();
        assert!(used.query(&[1]).is_some() && used.query(&[3]).is_none(), "only the low-perplexity half");
        drop(used);
        let before = std::fs::read(&refined).unwrap();

        // Interrupted after two chunks (a failing scorer stands for Ctrl-C or a kill: nothing is
        // written before scoring ends).
        let mut left = 2;
        let mut interrupted = |t: &[u32]| {
            left -= 1;
            if left < 0 {
                anyhow::bail!("interrupted")
            }
            mean_id(t)
        };
        assert!(refine_and_write(&tokens, &mut interrupted, &settings, key, &refined, &mut |_| {}).is_err());
        assert_eq!(std::fs::read(&refined).unwrap(), before, "the previous refined store is untouched");
        let mut names: Vec<_> = std::fs::read_dir(&stores).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["plain.crest", "plain.refined-1.crest"], "no partial or temporary file");
        assert!(open_preferring(&refined, &tokenizer, &fallback).unwrap().query(&[3]).is_none());

        // A damaged refined store is passed over, and the next run replaces it whole.
        std::fs::write(&refined, b"damaged").unwrap();
        assert!(open_preferring(&refined, &tokenizer, &fallback).unwrap().query(&[3]).is_some());
        let all = RefineSettings { fraction: 1.0, ..settings };
        refine_and_write(&tokens, &mut mean_id, &all, key, &refined, &mut |_| {}).unwrap();
        assert!(open_preferring(&refined, &tokenizer, &fallback).unwrap().query(&[3]).is_some());
        assert_eq!(std::fs::read_dir(&stores).unwrap().count(), 2);
    }
}
