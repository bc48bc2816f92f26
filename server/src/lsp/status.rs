//! The `copilotd/status` request: what the daemon is running and how it is doing.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use serde::Serialize;

/// Method name of the status request.
pub const METHOD: &str = "copilotd/status";

/// State of the repository index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexState {
    /// No workspace folder, so no index.
    None,
    Indexing,
    Ready,
    Failed,
}

impl IndexState {
    fn code(self) -> u8 {
        match self {
            IndexState::None => 0,
            IndexState::Indexing => 1,
            IndexState::Ready => 2,
            IndexState::Failed => 3,
        }
    }

    fn from_code(code: u8) -> IndexState {
        match code {
            1 => IndexState::Indexing,
            2 => IndexState::Ready,
            3 => IndexState::Failed,
            _ => IndexState::None,
        }
    }
}

impl IndexState {
    /// The state of several folders' indexes as one: indexing while any is, failed when any
    /// failed, ready when all are; `None` without folders.
    pub fn combined(states: impl IntoIterator<Item = IndexState>) -> IndexState {
        let states: Vec<IndexState> = states.into_iter().collect();
        [IndexState::Indexing, IndexState::Failed, IndexState::Ready]
            .into_iter()
            .find(|state| states.contains(state))
            .unwrap_or(IndexState::None)
    }
}

/// Index state and size, updated from indexing threads, read by status requests.
#[derive(Debug, Default)]
pub struct IndexStatus {
    state: AtomicU8,
    files: AtomicUsize,
}

impl IndexStatus {
    pub fn set_state(&self, state: IndexState) {
        self.state.store(state.code(), Ordering::Release);
    }

    pub fn state(&self) -> IndexState {
        IndexState::from_code(self.state.load(Ordering::Acquire))
    }

    pub fn set_files(&self, files: usize) {
        self.files.store(files, Ordering::Release);
    }

    pub fn files(&self) -> usize {
        self.files.load(Ordering::Acquire)
    }
}

/// The answer to `copilotd/status`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Model name, or the path being loaded.
    pub model: String,
    /// `loading`, `ready` or `failed`.
    pub model_state: &'static str,
    /// Why the model is unavailable, when it is.
    pub model_error: Option<String>,
    /// Compute device, e.g. `cpu`.
    pub device: String,
    pub strategy: String,
    pub index_state: IndexState,
    pub indexed_files: usize,
    /// Workspace folders with a live index.
    pub indexed_folders: usize,
    /// Decode speed over recent completions.
    pub tokens_per_second: Option<f64>,
    /// Mean accepted tokens per forward step over recent completions.
    pub acceptance_length: Option<f64>,
    /// The cost calibration of the loaded model: `pending`, `measuring`, `disturbed`,
    /// `confirming` (in use, measured again later), `done`, `off`; `none` without a model.
    pub calibration: String,
    /// Completions answered since start.
    pub completions: u64,
    /// Tokens the model generated since start, cancelled completions included.
    pub generated_tokens: u64,
    /// Prompt tokens prefilled ahead of requests (`copilotd/warm`).
    pub warmed_tokens: u64,
    /// Statistics of the last completion, as the engine reports them.
    pub last: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_status_round_trips_and_serializes_lowercase() {
        let status = IndexStatus::default();
        assert_eq!(status.state(), IndexState::None);
        for state in [IndexState::Indexing, IndexState::Ready, IndexState::Failed, IndexState::None] {
            status.set_state(state);
            assert_eq!(status.state(), state);
        }
        assert_eq!(serde_json::to_value(IndexState::Indexing).unwrap(), "indexing");
    }

    #[test]
    fn folders_combine_into_one_state() {
        use IndexState::*;
        assert_eq!(IndexState::combined([Ready, Indexing, Failed]), Indexing);
        assert_eq!(IndexState::combined([Ready, Failed]), Failed);
        assert_eq!(IndexState::combined([Ready, Ready]), Ready);
        assert_eq!(IndexState::combined([]), None);
    }
}
