//! The completion service: what the language server asks of the engine, and the real engine
//! behind it ([`ModelEngine`]).
//!
//! The service knows no LSP: it takes owned jobs and a [`CancelToken`], and answers with a
//! [`Completion`] or a typed [`ServiceError`]. The LSP adapter maps those errors to JSON-RPC
//! codes, and its tests run against a fake service without a model.

mod calibration;
mod model_engine;
mod saving;
mod typed_through;
mod warming;

pub use calibration::CalibrationState;
pub use model_engine::ModelEngine;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use copilotd_draft::cancel::{CancelToken, Cancelled};
use copilotd_model::Tokenizer;
use futures::future::BoxFuture;

use crate::completion::feedback::Verdict;
use crate::completion::{Completion, CompletionError, CompletionRequest, EngineSettings, Sampling, Strategy, Trigger};
use crate::workspace::Repository;

/// One completion to run, owning its inputs.
#[derive(Debug, Clone)]
pub struct Job {
    pub text: Arc<String>,
    /// Byte offset of the cursor in `text`.
    pub cursor: usize,
    /// Workspace-relative path of the buffer, when it has one.
    pub path: Option<String>,
    /// The editor's language id of the buffer ([`CompletionRequest::language`]).
    pub language: Option<String>,
    pub max_tokens: usize,
    pub strategy: Strategy,
    pub sampling: Sampling,
    /// Whether the answer may be the suggestion's first whole lines, given as soon as they are
    /// generated while the rest follows (the editor asks again for it).
    pub early_lines: bool,
    /// Who asked ([`CompletionRequest::trigger`]).
    pub trigger: Trigger,
    /// [`CompletionRequest::prompt_latency`].
    pub prompt_latency: Option<Duration>,
}

impl Job {
    /// The completion request this job asks for.
    pub fn request(&self) -> CompletionRequest<'_> {
        CompletionRequest {
            text: &self.text,
            cursor: self.cursor,
            path: self.path.as_deref(),
            language: self.language.as_deref(),
            max_tokens: self.max_tokens,
            strategy: self.strategy,
            sampling: self.sampling,
            trigger: self.trigger,
            prompt_latency: self.prompt_latency,
        }
    }

    /// What was typed at this job's cursor to make `later`'s buffer, when `later` asks for the
    /// same completion further on: the same document and settings, and nothing changed but
    /// text typed at the cursor, with the cursor after it.
    pub fn typed_before<'a>(&self, later: &'a Job) -> Option<&'a str> {
        let same_settings = (self.path.as_deref(), self.max_tokens, self.strategy, self.sampling)
            == (later.path.as_deref(), later.max_tokens, later.strategy, later.sampling);
        if !same_settings {
            return None;
        }
        let typed = later.text.get(self.cursor..later.cursor)?;
        let (before, after) = self.text.split_at_checked(self.cursor)?;
        let unchanged = later.text.len() == self.text.len() + typed.len()
            && later.text.as_bytes()[..self.cursor] == *before.as_bytes()
            && later.text.as_bytes()[later.cursor..] == *after.as_bytes();
        unchanged.then_some(typed)
    }
}

/// Where the model is.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelState {
    /// Not asked to load yet.
    Idle,
    Loading {
        model: String,
    },
    Ready {
        name: String,
        device: String,
    },
    Failed {
        model: String,
        error: String,
    },
}

/// Recent figures for the status request.
#[derive(Debug, Clone, Default)]
pub struct Recent {
    pub completions: u64,
    pub tokens_per_second: Option<f64>,
    pub acceptance_length: Option<f64>,
    /// Tokens generated since start, cancelled completions included.
    pub generated_tokens: u64,
    /// Prompt tokens prefilled ahead of requests (`copilotd/warm`).
    pub warmed_tokens: u64,
    pub last: Option<serde_json::Value>,
    /// The loaded model's cost calibration; `None` without a model.
    pub calibration: Option<CalibrationState>,
}

/// Why a job produced no completion.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("completion cancelled: {0}")]
    Cancelled(Cancelled),
    /// The model is missing, failed to load or is not loaded yet.
    #[error("{0}")]
    Unavailable(String),
    #[error("completion failed: {0}")]
    Failed(CompletionError),
    /// The engine panicked; the service goes on.
    #[error("the completion engine panicked: {0}")]
    Panicked(String),
}

impl From<CompletionError> for ServiceError {
    fn from(error: CompletionError) -> ServiceError {
        match error {
            CompletionError::Cancelled(reason) => ServiceError::Cancelled(reason),
            other => ServiceError::Failed(other),
        }
    }
}

/// What the language server needs from a completion engine.
pub trait CompletionService: Send + Sync {
    fn model_state(&self) -> ModelState;
    /// The loaded model's tokenizer (the workspace index is built with it).
    fn tokenizer(&self) -> Option<Tokenizer>;
    fn recent(&self) -> Recent;
    /// (Re)loads the model; resolves to the load error, if any, once done.
    fn load(&self, settings: EngineSettings) -> BoxFuture<'_, Result<(), String>>;
    /// Gives the workspace's repository datastores (one per folder) to the current and all
    /// future models.
    fn set_repositories(&self, repositories: Vec<Repository>) -> BoxFuture<'_, ()>;
    /// The workspace cache directory where the preference cache persists (a file per
    /// tokenizer): every model loaded from now on starts from it, and it is saved there a while
    /// after each lesson and by [`CompletionService::save_learned`].
    fn set_preferences_dir(&self, dir: Option<PathBuf>);
    /// Saves what the engine learned now (at the end of the session, however it ends),
    /// stopping a generation that runs on without a request.
    fn save_learned(&self) -> BoxFuture<'_, ()>;
    /// Runs one job, waiting for the model if it is loading; ends with
    /// [`ServiceError::Cancelled`] within one decode step once `cancel` fires.
    fn complete(&self, job: Job, cancel: CancelToken) -> BoxFuture<'_, Result<Completion, ServiceError>>;
    /// The person's verdict on `suggestion`, a completion this service answered: accepted text
    /// is preferred when drafting from now on, dismissed text less.
    fn feedback(&self, suggestion: &Completion, verdict: Verdict);
    /// The person is at `job`'s cursor: its prompt may be prefilled in the background while the
    /// model is idle (once it is loaded), for the request to come there.
    fn warm(&self, job: Job) {
        let _ = job;
    }
}

/// A job at `cursor` in the buffer `text` of `f.py`, with the default settings of `auto`.
#[cfg(test)]
fn test_job(text: &str, cursor: usize) -> Job {
    Job {
        text: Arc::new(text.to_owned()),
        cursor,
        path: Some("f.py".to_owned()),
        language: Some("python".to_owned()),
        max_tokens: 64,
        strategy: Strategy::Auto,
        sampling: Sampling::default(),
        early_lines: true,
        trigger: Trigger::Automatic,
        prompt_latency: None,
    }
}

#[cfg(test)]
mod tests {
    use super::test_job as job;
    use super::*;

    #[test]
    fn a_job_follows_another_when_only_typing_at_its_cursor_came_between() {
        let started = job("def f(x):\n    \n", 14);
        assert_eq!(started.typed_before(&job("def f(x):\n    \n", 14)), Some(""));
        assert_eq!(started.typed_before(&job("def f(x):\n    re\n", 16)), Some("re"));
        // Typed elsewhere, moved back, another document or other settings: it does not.
        assert_eq!(started.typed_before(&job("def g(x):\n    re\n", 16)), None);
        assert_eq!(started.typed_before(&job("def f(x):\n    \n", 13)), None);
        assert_eq!(started.typed_before(&Job { path: Some("g.py".to_owned()), ..job("def f(x):\n    \n", 14) }), None);
        assert_eq!(started.typed_before(&Job { max_tokens: 1, ..job("def f(x):\n    \n", 14) }), None);
        assert_eq!(started.typed_before(&Job { strategy: Strategy::Ar, ..job("def f(x):\n    \n", 14) }), None);
    }
}
