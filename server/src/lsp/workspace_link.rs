//! The server's side of the live workspace: starts one [`LiveWorkspace`] per workspace folder
//! (initial indexing in the background, the watcher), turns its indexing state into
//! `$/progress` and status, and forwards open buffers as overlays.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use copilotd_model::Tokenizer;
use tokio::sync::watch;
use tower_lsp_server::Client;

use super::progress::{self, ProgressSink};
use super::status::{IndexState as StatusState, IndexStatus};
use crate::workspace::{paths, IndexState, LiveWorkspace, SharedStore, WalkConfig};

/// How indexing ended: a summary for the progress end, and a warning for the user, if any.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub message: String,
    pub warning: Option<String>,
}

/// The live workspace of one folder.
pub struct WorkspaceLink {
    /// The folder as the client named it.
    folder: PathBuf,
    live: LiveWorkspace,
    status: Arc<IndexStatus>,
    finished: watch::Receiver<Option<Outcome>>,
    progress: watch::Receiver<(usize, usize)>,
}

/// A folder's indexing as seen from outside: reporting it does not keep the folder's index alive.
pub struct IndexingWatch {
    title: String,
    finished: watch::Receiver<Option<Outcome>>,
    progress: watch::Receiver<(usize, usize)>,
}

impl WorkspaceLink {
    /// Starts indexing and watching the folder `root` with the model's tokenizer. `None` when
    /// the configured languages leave nothing to index.
    pub fn start(
        root: &Path,
        languages: &[String],
        ignore: &[String],
        tokenizer: Tokenizer,
    ) -> Result<Option<WorkspaceLink>> {
        let Some(config) = WalkConfig::for_languages(languages, ignore)? else {
            return Ok(None);
        };
        let store_path = paths::workspace_store_path(root)?;
        let (sink, progress) = progress::channel();
        let (finish, finished) = watch::channel(None);
        let status = Arc::new(IndexStatus::default());
        status.set_state(StatusState::Indexing);
        let reported = Arc::clone(&status);
        let on_state = Box::new(move |state: &IndexState| report(state, &sink, &finish, &reported));
        let tokenize = Arc::new(move |text: &str| tokenizer.encode(text));
        let live = LiveWorkspace::start(root, config, tokenize, store_path, on_state)?;
        Ok(Some(WorkspaceLink { folder: root.to_path_buf(), live, status, finished, progress }))
    }

    /// What reports this folder's indexing.
    pub fn indexing(&self) -> IndexingWatch {
        let name = self.folder.file_name().unwrap_or(self.folder.as_os_str()).to_string_lossy();
        IndexingWatch {
            title: format!("copilotd: indexing {name}"),
            finished: self.finished.clone(),
            progress: self.progress.clone(),
        }
    }

    /// The folder as the client named it.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The folder's indexing state.
    pub fn state(&self) -> StatusState {
        self.status.state()
    }

    /// Files in the store now, or counted so far while indexing.
    pub fn files(&self) -> usize {
        match self.status.state() {
            StatusState::Ready => self.file_count(),
            _ => self.status.files(),
        }
    }

    pub fn store(&self) -> SharedStore {
        self.live.store()
    }

    pub fn root(&self) -> &Path {
        self.live.root()
    }

    /// The store key of a file of this workspace, if it is one.
    pub fn key_for(&self, path: &Path) -> Option<String> {
        self.live.key_for(path)
    }

    /// Files in the store now.
    pub fn file_count(&self) -> usize {
        self.store().read().map_or(0, |store| store.file_count())
    }

    /// Tokens the store holds for a file (by store key), if it holds the file.
    pub fn indexed_tokens(&self, key: &str) -> Option<usize> {
        self.store().read().ok()?.file_tokens(key).map(<[u32]>::len)
    }

    pub fn set_overlay(&self, path: &Path, text: &str) {
        self.live.set_overlay(path, text);
    }

    pub fn clear_overlay(&self, path: &Path) {
        self.live.clear_overlay(path);
    }
}

impl IndexingWatch {
    /// Reports indexing to the client (`$/progress` when `enabled`) until it ends, or until
    /// the folder's index is stopped.
    pub async fn report(self, client: &Client, enabled: bool) -> Outcome {
        let mut finished = self.finished;
        let outcome = async move {
            match finished.wait_for(Option::is_some).await {
                Ok(outcome) => outcome.clone().expect("waited for Some"),
                Err(_) => Outcome { message: "indexing stopped".to_owned(), warning: None },
            }
        };
        let (message_tx, message_rx) = tokio::sync::oneshot::channel();
        let job = async move {
            let outcome = outcome.await;
            let message = outcome.message.clone();
            let _ = message_tx.send(outcome);
            message
        };
        let message = progress::drive(client, enabled, &self.title, self.progress, job).await;
        message_rx.await.unwrap_or(Outcome { message, warning: None })
    }
}

/// Runs on the workspace thread for every indexing state change.
fn report(state: &IndexState, sink: &ProgressSink, finish: &watch::Sender<Option<Outcome>>, status: &IndexStatus) {
    match state {
        IndexState::Indexing { done, total } => {
            status.set_state(StatusState::Indexing);
            status.set_files(*done);
            sink.update(*done, *total);
        }
        IndexState::Ready(summary) => {
            status.set_files(summary.files);
            status.set_state(StatusState::Ready);
            finish.send_replace(Some(Outcome { message: summary.to_string(), warning: summary.warning.clone() }));
        }
        IndexState::Failed(error) => {
            status.set_state(StatusState::Failed);
            finish.send_replace(Some(Outcome {
                message: format!("indexing failed: {error}"),
                warning: Some(format!("indexing failed: {error}")),
            }));
        }
    }
}
