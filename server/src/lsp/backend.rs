//! State shared by all handlers, and the work that outlives a single handler: loading the
//! model, (re)starting the workspace index, applying settings.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;
use tower_lsp_server::lsp_types::{MessageType, Uri};
use tower_lsp_server::{Client, UriExt};

use super::documents::Documents;
use super::requests::InFlight;
use super::status::{IndexState, IndexStatus};
use super::workspace_link::WorkspaceLink;
use crate::config::{client_settings, Config, Naming};
use crate::engine::CompletionService;
use crate::sync::{lock, read, write};

pub struct Backend {
    pub(super) client: Client,
    pub(super) config: RwLock<Config>,
    /// Settings warnings found before the client could be told (during `initialize`).
    pub(super) early_warnings: Mutex<Vec<String>>,
    pub(super) documents: Documents,
    pub(super) in_flight: Arc<InFlight>,
    pub(super) engine: Arc<dyn CompletionService>,
    pub(super) index: Arc<IndexStatus>,
    /// Workspace root folders, from `initialize` and folder changes.
    pub(super) roots: RwLock<Vec<PathBuf>>,
    pub(super) workspace: Mutex<Option<Arc<WorkspaceLink>>>,
    pub(super) progress_supported: AtomicBool,
    /// Whether `shutdown` was received (an `exit` without it is an error).
    pub(super) shut_down: Arc<AtomicBool>,
}

impl Backend {
    pub fn new(
        client: Client,
        config: Config,
        engine: Arc<dyn CompletionService>,
        shut_down: Arc<AtomicBool>,
    ) -> Backend {
        Backend {
            client,
            config: RwLock::new(config),
            early_warnings: Mutex::new(Vec::new()),
            documents: Documents::default(),
            in_flight: Arc::default(),
            engine,
            index: Arc::default(),
            roots: RwLock::default(),
            workspace: Mutex::default(),
            progress_supported: AtomicBool::new(false),
            shut_down,
        }
    }

    pub(super) fn config(&self) -> Config {
        read(&self.config).clone()
    }

    pub(super) fn workspace(&self) -> Option<Arc<WorkspaceLink>> {
        lock(&self.workspace).clone()
    }

    pub(super) fn first_root(&self) -> Option<PathBuf> {
        read(&self.roots).first().cloned()
    }

    /// Sends `window/showMessage` without making the caller wait.
    pub(super) fn notify_user(&self, typ: MessageType, message: String) {
        tracing::info!("showMessage: {message}");
        let client = self.client.clone();
        tokio::spawn(async move { client.show_message(typ, message).await });
    }

    /// The workspace-relative path (with `/` separators) of a document in the first root: the
    /// repository datastore's key for it.
    pub(super) fn relative_path(&self, uri: &Uri) -> Option<String> {
        let path = uri.to_file_path()?;
        if let Some(workspace) = self.workspace() {
            return workspace.key_for(&path);
        }
        let root = self.first_root()?;
        let relative = path.strip_prefix(root).ok()?;
        let parts: Option<Vec<&str>> = relative.components().map(|c| c.as_os_str().to_str()).collect();
        Some(parts?.join("/"))
    }

    /// Starts (or restarts) loading the model from the current settings; once it is loaded,
    /// (re)starts the workspace index with its tokenizer.
    pub(super) fn load_model(self: &Arc<Self>) {
        let settings = self.config().engine_settings();
        let backend = Arc::clone(self);
        tokio::spawn(async move {
            match backend.engine.load(settings).await {
                Ok(()) => backend.restart_workspace().await,
                Err(error) => {
                    backend.notify_user(
                        MessageType::ERROR,
                        format!(
                            "copilotd: no completions: {error}. Set `model` to a GGUF file, or run `copilotd model fetch`."
                        ),
                    );
                    // The repository datastore needs the model's tokenizer.
                    let state = if backend.first_root().is_none() { IndexState::None } else { IndexState::Failed };
                    backend.index.set_state(state);
                }
            }
        });
    }

    /// Restarts the workspace index in the background.
    pub(super) fn spawn_restart_workspace(self: &Arc<Self>) {
        let backend = Arc::clone(self);
        tokio::spawn(async move { backend.restart_workspace().await });
    }

    /// Stops the live index (joining its thread, which saves the store).
    pub(super) async fn stop_workspace(&self) {
        let old = lock(&self.workspace).take();
        if let Some(old) = old {
            let _ = tokio::task::spawn_blocking(move || drop(old)).await;
        }
    }

    /// (Re)starts the live index of the first workspace root with the loaded model's
    /// tokenizer, and reports its progress. Does nothing while no model is loaded.
    async fn restart_workspace(self: &Arc<Self>) {
        let Some(tokenizer) = self.engine.tokenizer() else { return };
        self.stop_workspace().await;
        let Some(root) = self.first_root() else {
            self.index.set_state(IndexState::None);
            return;
        };
        let config = self.config();
        let status = Arc::clone(&self.index);
        let started = tokio::task::spawn_blocking(move || {
            WorkspaceLink::start(&root, &config.languages, &config.ignore, tokenizer, status)
        })
        .await;
        let failure = match started {
            Ok(Ok(Some(link))) => return self.serve_workspace(Arc::new(link)).await,
            Ok(Ok(None)) => {
                self.index.set_state(IndexState::None);
                return;
            }
            Ok(Err(err)) => format!("cannot index the workspace: {err:#}"),
            Err(join) => format!("workspace indexing crashed: {join}"),
        };
        self.index.set_state(IndexState::Failed);
        self.notify_user(MessageType::WARNING, format!("copilotd: {failure}"));
    }

    /// Makes a started index the live one: overlays, the engine's repository, progress.
    async fn serve_workspace(self: &Arc<Self>, link: Arc<WorkspaceLink>) {
        *lock(&self.workspace) = Some(Arc::clone(&link));
        // Buffers opened before the workspace existed become overlays now, sent under the
        // documents' lock so that a concurrent edit's overlay is never overtaken by older text.
        self.documents.for_each(|uri, text| {
            if let Some(path) = uri.to_file_path() {
                link.set_overlay(&path, text);
            }
        });
        self.engine.set_repository(link.store()).await;
        let progress = self.progress_supported.load(Ordering::Relaxed);
        let outcome = link.report_progress(&self.client, progress).await;
        tracing::info!("workspace {}: {}", link.root().display(), outcome.message);
        if let Some(warning) = outcome.warning {
            self.notify_user(MessageType::WARNING, format!("copilotd: {warning}"));
        }
    }

    /// Applies client settings; reloads the model if its settings (model, threads, FIM) changed.
    pub(super) fn apply_settings(self: &Arc<Self>, settings: &Value) {
        let (before, after, warnings) = {
            let mut config = write(&self.config);
            let before = config.clone();
            let warnings = config.apply(client_settings(settings), Naming::CamelCase);
            (before, config.clone(), warnings)
        };
        for warning in warnings {
            self.notify_user(MessageType::WARNING, format!("copilotd settings: {warning}"));
        }
        if before.model != after.model || before.threads != after.threads || before.fim != after.fim {
            self.load_model();
        }
        if before.ignore != after.ignore || before.languages != after.languages {
            self.spawn_restart_workspace();
        }
    }
}
