//! The language server: LSP handlers over documents, the engine and the workspace.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::FutureExt;
use serde_json::Value;
use tower_lsp_server::jsonrpc::{Error, ErrorCode, Result};
use tower_lsp_server::lsp_types::*;
use tower_lsp_server::{Client, LanguageServer, UriExt};

use super::documents::{offset_at, DocumentError, Documents};
use super::engine::{CompleteError, Engine, Job, Load};
use super::requests::{Cancelled, InFlight};
use super::status::{IndexState, IndexStatus, Status};
use super::workspace_link::WorkspaceLink;
use crate::config::{client_settings, Config, Naming};

/// State shared by all handlers.
pub struct Backend {
    client: Client,
    config: RwLock<Config>,
    /// Settings warnings found before the client could be told (during `initialize`).
    early_warnings: Mutex<Vec<String>>,
    documents: Documents,
    in_flight: Arc<InFlight>,
    engine: Arc<Engine>,
    index: Arc<IndexStatus>,
    /// Workspace root folders, from `initialize` and folder changes.
    roots: RwLock<Vec<PathBuf>>,
    workspace: Mutex<Option<Arc<WorkspaceLink>>>,
    progress_supported: AtomicBool,
}

impl Backend {
    pub fn new(client: Client, config: Config) -> Backend {
        Backend {
            client,
            config: RwLock::new(config),
            early_warnings: Mutex::new(Vec::new()),
            documents: Documents::default(),
            in_flight: Arc::default(),
            engine: Arc::default(),
            index: Arc::default(),
            roots: RwLock::default(),
            workspace: Mutex::default(),
            progress_supported: AtomicBool::new(false),
        }
    }

    fn config(&self) -> Config {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn workspace(&self) -> Option<Arc<WorkspaceLink>> {
        self.workspace.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sends `window/showMessage` without making the caller wait.
    fn notify_user(&self, typ: MessageType, message: String) {
        tracing::info!("showMessage: {message}");
        let client = self.client.clone();
        tokio::spawn(async move { client.show_message(typ, message).await });
    }

    /// The workspace-relative path (with `/` separators) of a document in the first root: the
    /// repository datastore's key for it.
    fn relative_path(&self, uri: &Uri) -> Option<String> {
        let path = uri.to_file_path()?;
        if let Some(workspace) = self.workspace() {
            return workspace.key_for(&path);
        }
        let roots = self.roots.read().unwrap_or_else(|p| p.into_inner());
        let relative = path.strip_prefix(roots.first()?).ok()?;
        let parts: Option<Vec<&str>> = relative.components().map(|c| c.as_os_str().to_str()).collect();
        Some(parts?.join("/"))
    }

    /// Starts (or restarts) loading the model from the current settings; once it is loaded,
    /// (re)starts the workspace index with its tokenizer.
    fn load_model(self: &Arc<Self>) {
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
                    let no_roots = backend.roots.read().unwrap_or_else(|p| p.into_inner()).is_empty();
                    // The repository datastore needs the model's tokenizer.
                    backend.index.set_state(if no_roots { IndexState::None } else { IndexState::Failed });
                }
            }
        });
    }

    /// (Re)starts the live index of the first workspace root with the loaded model's
    /// tokenizer, and reports its progress. Does nothing while no model is loaded.
    async fn restart_workspace(self: &Arc<Self>) {
        let Load::Ready(loaded) = self.engine.state() else { return };
        let old = self.workspace.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(old) = old {
            // Stopping joins the workspace thread and saves the store.
            let _ = tokio::task::spawn_blocking(move || drop(old)).await;
        }
        let root = self.roots.read().unwrap_or_else(|p| p.into_inner()).first().cloned();
        let Some(root) = root else {
            self.index.set_state(IndexState::None);
            return;
        };
        let config = self.config();
        let tokenizer = loaded.tokenizer.clone();
        let status = Arc::clone(&self.index);
        let started = tokio::task::spawn_blocking(move || {
            WorkspaceLink::start(&root, &config.languages, &config.ignore, tokenizer, status)
        })
        .await;
        let link = match started {
            Ok(Ok(Some(link))) => Arc::new(link),
            Ok(Ok(None)) => {
                self.index.set_state(IndexState::None);
                return;
            }
            Ok(Err(err)) => {
                self.index.set_state(IndexState::Failed);
                self.notify_user(MessageType::WARNING, format!("copilotd: cannot index the workspace: {err:#}"));
                return;
            }
            Err(join) => {
                self.index.set_state(IndexState::Failed);
                self.notify_user(MessageType::WARNING, format!("copilotd: workspace indexing crashed: {join}"));
                return;
            }
        };
        *self.workspace.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&link));
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

    /// Applies client settings; reloads the model if its settings changed.
    fn apply_settings(self: &Arc<Self>, settings: &Value) {
        let (before, after, warnings) = {
            let mut config = self.config.write().unwrap_or_else(|p| p.into_inner());
            let before = config.clone();
            let warnings = config.apply(client_settings(settings), Naming::CamelCase);
            (before, config.clone(), warnings)
        };
        for warning in warnings {
            self.notify_user(MessageType::WARNING, format!("copilotd settings: {warning}"));
        }
        if before.model != after.model || before.threads != after.threads {
            self.load_model();
        }
        if before.ignore != after.ignore || before.languages != after.languages {
            let backend = Arc::clone(self);
            tokio::spawn(async move { backend.restart_workspace().await });
        }
    }

    async fn inline_completion_inner(
        &self,
        params: InlineCompletionParams,
    ) -> Result<Option<InlineCompletionResponse>> {
        let position = params.text_document_position.position;
        let uri = params.text_document_position.text_document.uri;
        // Everything up to `begin` is synchronous: the snapshot is the state this request was
        // sent after, and the ticket is registered before any later edit can run.
        let snapshot = self.documents.snapshot(&uri).map_err(document_error)?;
        let config = self.config();
        if !config.serves_language(&snapshot.language_id) {
            return Ok(Some(InlineCompletionResponse::Array(Vec::new())));
        }
        let cursor = offset_at(&snapshot.text, position).map_err(|err| Error::invalid_params(err.to_string()))?;
        let ticket = self.in_flight.begin(&uri);
        let job = Job {
            text: snapshot.text,
            cursor,
            path: self.relative_path(&uri),
            max_tokens: config.max_tokens,
            strategy: config.strategy,
        };
        let completion = self.engine.complete(job, ticket.flag().clone()).await.map_err(complete_error)?;
        drop(ticket);
        let items = if completion.text.is_empty() {
            Vec::new()
        } else {
            vec![InlineCompletionItem {
                insert_text: completion.text,
                filter_text: None,
                range: Some(Range { start: position, end: position }),
                command: None,
                insert_text_format: Some(InsertTextFormat::PLAIN_TEXT),
            }]
        };
        Ok(Some(InlineCompletionResponse::Array(items)))
    }

    fn status_now(&self) -> Status {
        let config = self.config();
        let recent = self.engine.recent();
        let (model, model_state, model_error, device) = match self.engine.state() {
            Load::Idle => ("none".to_owned(), "idle", None, "none".to_owned()),
            Load::Loading { model } => (model, "loading", None, "none".to_owned()),
            Load::Ready(loaded) => (loaded.name.clone(), "ready", None, loaded.device.clone()),
            Load::Failed { model, error } => (model, "failed", Some(error), "none".to_owned()),
        };
        Status {
            model,
            model_state,
            model_error,
            device,
            strategy: config.strategy.to_string(),
            index_state: self.index.state(),
            indexed_files: match (self.index.state(), self.workspace()) {
                (IndexState::Ready, Some(workspace)) => workspace.file_count(),
                _ => self.index.files(),
            },
            tokens_per_second: recent.tokens_per_second,
            acceptance_length: recent.acceptance_length,
            completions: recent.completions,
            last: recent.last,
        }
    }
}

/// LSP's RequestFailed: a valid request that could not be served (e.g. no model).
pub const REQUEST_FAILED: i64 = -32803;

fn document_error(err: DocumentError) -> Error {
    Error::invalid_params(err.to_string())
}

fn complete_error(err: CompleteError) -> Error {
    match err {
        CompleteError::Cancelled(Cancelled::ByEdit) => Error {
            code: ErrorCode::ContentModified,
            message: "the document changed; the completion was stopped".into(),
            data: None,
        },
        CompleteError::Cancelled(Cancelled::ByNewerRequest) => Error {
            code: ErrorCode::RequestCancelled,
            message: "superseded by a newer inline completion request".into(),
            data: None,
        },
        CompleteError::Cancelled(Cancelled::ByClient) => Error::request_cancelled(),
        CompleteError::Unavailable(message) => {
            Error { code: ErrorCode::ServerError(REQUEST_FAILED), message: message.into(), data: None }
        }
        CompleteError::Failed(err) => {
            Error { code: ErrorCode::InternalError, message: format!("completion failed: {err:#}").into(), data: None }
        }
        CompleteError::Panicked(message) => internal(&message),
    }
}

fn internal(message: &str) -> Error {
    Error { code: ErrorCode::InternalError, message: format!("internal error: {message}").into(), data: None }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_owned())
}

/// Runs a request handler; a panic becomes an InternalError answer and the server goes on.
pub async fn guarded<T>(method: &str, handler: impl Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic_message(panic.as_ref());
            tracing::error!("{method} panicked: {message}");
            Err(internal(&format!("{method} failed: {message}")))
        }
    }
}

/// Runs a notification handler's synchronous part; a panic is logged and the server goes on.
fn guarded_sync(method: &str, handler: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(handler)) {
        tracing::error!("{method} panicked: {}", panic_message(panic.as_ref()));
    }
}

fn folder_path(uri: &Uri) -> Option<PathBuf> {
    uri.to_file_path().map(|path| path.into_owned())
}

/// The server's capabilities.
fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Options(TextDocumentSyncOptions {
            open_close: Some(true),
            change: Some(TextDocumentSyncKind::INCREMENTAL),
            save: Some(TextDocumentSyncSaveOptions::Supported(false)),
            ..Default::default()
        })),
        inline_completion_provider: Some(OneOf::Left(true)),
        workspace: Some(WorkspaceServerCapabilities {
            workspace_folders: Some(WorkspaceFoldersServerCapabilities {
                supported: Some(true),
                change_notifications: Some(OneOf::Left(true)),
            }),
            file_operations: None,
        }),
        ..Default::default()
    }
}

/// Handlers of tower-lsp's trait, on a shared backend (`Arc`) so tasks can outlive a call.
pub struct Server(pub Arc<Backend>);

impl Server {
    /// `textDocument/inlineCompletion` (LSP 3.18; registered as a custom method).
    pub async fn inline_completion(&self, params: InlineCompletionParams) -> Result<Option<InlineCompletionResponse>> {
        guarded("textDocument/inlineCompletion", self.0.inline_completion_inner(params)).await
    }

    /// `copilotd/status`.
    pub async fn status(&self) -> Result<Status> {
        guarded("copilotd/status", async { Ok(self.0.status_now()) }).await
    }

    /// `copilotd/reindex`: rebuilds the live index of the workspace (files
    /// whose size and modification time did not change keep their tokens).
    /// Answers once indexing has started again.
    pub async fn reindex(&self) -> Result<Value> {
        guarded("copilotd/reindex", async {
            if !matches!(self.0.engine.state(), Load::Ready(_)) {
                return Err(Error::invalid_params("the model is not loaded yet; nothing to index with"));
            }
            let backend = Arc::clone(&self.0);
            tokio::spawn(async move { backend.restart_workspace().await });
            Ok(serde_json::json!({ "started": true }))
        })
        .await
    }

    /// `copilotd/indexedFile`: whether the repository datastore holds a workspace file now
    /// (`{"path": "rel/path.py"}` → `{"indexed": bool, "tokens": n}`).
    pub async fn indexed_file(&self, params: Value) -> Result<Value> {
        guarded("copilotd/indexedFile", async {
            let path = params
                .get("path")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::invalid_params("expected {\"path\": \"relative/path\"}"))?;
            let workspace = self.0.workspace().ok_or_else(|| Error::invalid_params("no workspace folder is open"))?;
            let tokens = workspace.indexed_tokens(path.trim_start_matches('/'));
            Ok(serde_json::json!({ "indexed": tokens.is_some(), "tokens": tokens.unwrap_or(0) }))
        })
        .await
    }
}

impl LanguageServer for Server {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        guarded("initialize", async {
            let backend = &self.0;
            let mut roots: Vec<PathBuf> =
                params.workspace_folders.iter().flatten().filter_map(|folder| folder_path(&folder.uri)).collect();
            #[allow(deprecated)]
            if roots.is_empty() {
                roots.extend(params.root_uri.as_ref().and_then(folder_path));
            }
            *backend.roots.write().unwrap_or_else(|p| p.into_inner()) = roots;
            let progress = params.capabilities.window.as_ref().and_then(|w| w.work_done_progress).unwrap_or(false);
            backend.progress_supported.store(progress, Ordering::Relaxed);
            if let Some(options) = &params.initialization_options {
                let warnings = backend
                    .config
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .apply(client_settings(options), Naming::CamelCase);
                backend.early_warnings.lock().unwrap_or_else(|p| p.into_inner()).extend(warnings);
            }
            Ok(InitializeResult {
                capabilities: capabilities(),
                server_info: Some(ServerInfo {
                    name: "copilotd".to_owned(),
                    version: Some(env!("CARGO_PKG_VERSION").to_owned()),
                }),
                offset_encoding: None,
            })
        })
        .await
    }

    async fn initialized(&self, _: InitializedParams) {
        let backend = &self.0;
        guarded_sync("initialized", || {
            let warnings = std::mem::take(&mut *backend.early_warnings.lock().unwrap_or_else(|p| p.into_inner()));
            for warning in warnings {
                backend.notify_user(MessageType::WARNING, format!("copilotd settings: {warning}"));
            }
            if backend.roots.read().unwrap_or_else(|p| p.into_inner()).is_empty() {
                backend.index.set_state(IndexState::None);
            }
            backend.load_model();
        });
    }

    async fn shutdown(&self) -> Result<()> {
        guarded("shutdown", async {
            // Stop the watcher and save the repository datastore before `exit`.
            let link = self.0.workspace.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(link) = link {
                let _ = tokio::task::spawn_blocking(move || drop(link)).await;
            }
            Ok(())
        })
        .await
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let backend = &self.0;
        guarded_sync("textDocument/didOpen", || {
            let document = params.text_document;
            backend.in_flight.supersede(&document.uri);
            if let (Some(workspace), Some(path)) = (backend.workspace(), document.uri.to_file_path()) {
                workspace.set_overlay(&path, &document.text);
            }
            backend.documents.open(document.uri, document.language_id, document.version, document.text);
        });
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        let backend = &self.0;
        guarded_sync("textDocument/didChange", || {
            let uri = params.text_document.uri;
            backend.in_flight.supersede(&uri);
            match backend.documents.change(&uri, params.text_document.version, &params.content_changes) {
                Ok(snapshot) => {
                    if let (Some(workspace), Some(path)) = (backend.workspace(), uri.to_file_path()) {
                        workspace.set_overlay(&path, &snapshot.text);
                    }
                }
                Err(err) => backend.notify_user(MessageType::WARNING, format!("copilotd: {err}")),
            }
        });
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        let backend = &self.0;
        guarded_sync("textDocument/didClose", || {
            let uri = params.text_document.uri;
            backend.in_flight.supersede(&uri);
            backend.documents.close(&uri);
            if let (Some(workspace), Some(path)) = (backend.workspace(), uri.to_file_path()) {
                workspace.clear_overlay(&path);
            }
        });
    }

    async fn did_change_configuration(&self, params: DidChangeConfigurationParams) {
        guarded_sync("workspace/didChangeConfiguration", || self.0.apply_settings(&params.settings));
    }

    async fn did_change_workspace_folders(&self, params: DidChangeWorkspaceFoldersParams) {
        let backend = &self.0;
        guarded_sync("workspace/didChangeWorkspaceFolders", || {
            let first_before = backend.roots.read().unwrap_or_else(|p| p.into_inner()).first().cloned();
            {
                let mut roots = backend.roots.write().unwrap_or_else(|p| p.into_inner());
                let removed: Vec<PathBuf> =
                    params.event.removed.iter().filter_map(|folder| folder_path(&folder.uri)).collect();
                roots.retain(|root| !removed.contains(root));
                roots.extend(params.event.added.iter().filter_map(|folder| folder_path(&folder.uri)));
            }
            let first_after = backend.roots.read().unwrap_or_else(|p| p.into_inner()).first().cloned();
            if first_before != first_after {
                let backend = Arc::clone(backend);
                tokio::spawn(async move { backend.restart_workspace().await });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_answers_internal_error() {
        let answer: Result<()> = guarded("test/panic", async { panic!("boom") }).await;
        let error = answer.unwrap_err();
        assert_eq!(error.code, ErrorCode::InternalError);
        assert!(error.message.contains("boom"), "{}", error.message);
        let fine: Result<u8> = guarded("test/fine", async { Ok(7) }).await;
        assert_eq!(fine.unwrap(), 7);
    }

    #[test]
    fn capabilities_announce_inline_completion_and_incremental_sync() {
        let value = serde_json::to_value(capabilities()).unwrap();
        assert_eq!(value["inlineCompletionProvider"], true);
        assert_eq!(value["textDocumentSync"]["change"], 2);
        assert_eq!(value["workspace"]["workspaceFolders"]["supported"], true);
    }
}
