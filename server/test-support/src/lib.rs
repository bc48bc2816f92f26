//! What copilotd's tests share: where the real default model is, the chi-square tests of the
//! sampling tests ([`chi_square`]), and tiny synthetic models in the real file formats
//! ([`synthetic`], weights encoded by [`ggml`]).
//!
//! A test that needs the real model fails without it, naming the command that fetches it: a
//! run without the model must not pass having run nothing. (CI fetches it before the tests.)

pub mod chi_square;

use std::path::PathBuf;

pub mod ggml;
pub mod synthetic;

use copilotd_model::DEFAULT_MODEL_FILE;

/// Environment variable naming the model to use instead of the cached default one.
pub const MODEL_ENV: &str = "COPILOTD_MODEL";

/// The real model: `$COPILOTD_MODEL`, else the default model in copilotd's cache
/// (`$XDG_CACHE_HOME/copilotd/models`, default `~/.cache/copilotd/models`).
///
/// # Panics
/// When there is none, with a message saying how to fetch it.
pub fn model_path() -> PathBuf {
    let path = std::env::var_os(MODEL_ENV).filter(|v| !v.is_empty()).map(PathBuf::from).unwrap_or_else(cached_model);
    assert!(
        path.exists(),
        "this test needs the real model, and there is none at {}: run `copilotd model fetch` \
         (cargo run -p copilotd -- model fetch) or set {MODEL_ENV}",
        path.display()
    );
    path
}

fn cached_model() -> PathBuf {
    let cache = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
    };
    cache.join("copilotd").join("models").join(DEFAULT_MODEL_FILE)
}
