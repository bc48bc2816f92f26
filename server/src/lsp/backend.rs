//! State shared by all handlers, and the work that outlives a single handler: loading the
//! model, (re)starting the workspace index, applying settings.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;
use tower_lsp_server::lsp_types::{MessageType, Uri};
use tower_lsp_server::Client;

use super::documents::Documents;
use super::model_download;
use super::requests::InFlight;
use super::status::{IndexState, IndexStatus};
use super::suggestions::Suggestions;
use super::workspace_link::WorkspaceLink;
use crate::config::{client_settings, Config, Naming};
use crate::engine::CompletionService;
use crate::model_files;
use crate::sync::{lock, read, write};
use crate::workspace::{relative_key, Repository};

pub struct Backend {
    pub(super) client: Client,
    pub(super) config: RwLock<Config>,
    /// config.toml's settings: what an editor's `null` for a setting goes back to.
    pub(super) file_config: Config,
    /// Settings warnings found before the client could be told (during `initialize`).
    pub(super) early_warnings: Mutex<Vec<String>>,
    pub(super) documents: Documents,
    pub(super) in_flight: Arc<InFlight>,
    pub(super) engine: Arc<dyn CompletionService>,
    /// The suggestions answered recently, for the editor's feedback on them.
    pub(super) suggestions: Suggestions,
    /// The index state while no folder is indexed (no folder, or no model to index with).
    pub(super) index: Arc<IndexStatus>,
    /// Workspace root folders, from `initialize` and folder changes.
    pub(super) roots: RwLock<Vec<PathBuf>>,
    /// One live index per workspace folder.
    pub(super) workspaces: Mutex<Vec<Arc<WorkspaceLink>>>,
    /// Held while folders' indexes are started or stopped, so that changes apply in order. Holds
    /// the folders that could not be indexed, so that every folder change does not repeat their
    /// warning.
    workspace_changes: tokio::sync::Mutex<Unindexed>,
    pub(super) progress_supported: AtomicBool,
    /// Whether `initialized` came: the model loads once, a second one is ignored.
    pub(super) initialized: AtomicBool,
    /// Whether the person is being asked to download the default model (or it is downloading).
    pub(super) download_offered: AtomicBool,
    /// Whether `shutdown` was received (an `exit` without it is an error).
    pub(super) shut_down: Arc<AtomicBool>,
}

/// How often a workspace folder that does not exist is looked for.
const MISSING_FOLDER_POLL: Duration = Duration::from_secs(1);

/// Workspace folders that could not be indexed (as the client named them).
#[derive(Default)]
struct Unindexed {
    /// Failed for another reason than not existing: tried again only on a restart.
    failed: Vec<PathBuf>,
    /// Did not exist: indexed once they do (see [`Backend::index_once_created`]).
    missing: Vec<PathBuf>,
}

impl Unindexed {
    fn contains(&self, folder: &Path) -> bool {
        self.failed.iter().chain(&self.missing).any(|f| f == folder)
    }
}

/// The roots, each folder once: a folder named twice (through a symbolic link, with a trailing
/// slash, with other %-escapes) keeps the first name given. With each, its canonical path when
/// it exists (the name otherwise): what tells folders apart.
fn distinct_folders(roots: &[PathBuf]) -> Vec<(PathBuf, PathBuf)> {
    let mut seen = HashSet::new();
    roots
        .iter()
        .filter_map(|root| {
            let canonical = root.canonicalize().unwrap_or_else(|_| root.clone());
            seen.insert(canonical.clone()).then(|| (root.clone(), canonical))
        })
        .collect()
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
            file_config: config.clone(),
            config: RwLock::new(config),
            early_warnings: Mutex::new(Vec::new()),
            documents: Documents::default(),
            in_flight: Arc::default(),
            engine,
            suggestions: Suggestions::default(),
            index: Arc::default(),
            roots: RwLock::default(),
            workspaces: Mutex::default(),
            workspace_changes: tokio::sync::Mutex::default(),
            progress_supported: AtomicBool::new(false),
            initialized: AtomicBool::new(false),
            download_offered: AtomicBool::new(false),
            shut_down,
        }
    }

    pub(super) fn config(&self) -> Config {
        read(&self.config).clone()
    }

    /// The live indexes of the workspace folders.
    pub(super) fn workspaces(&self) -> Vec<Arc<WorkspaceLink>> {
        lock(&self.workspaces).clone()
    }

    pub(super) fn has_roots(&self) -> bool {
        !read(&self.roots).is_empty()
    }

    /// Sends `window/showMessage` without making the caller wait.
    pub(super) fn notify_user(&self, typ: MessageType, message: String) {
        tracing::info!("showMessage: {message}");
        let client = self.client.clone();
        tokio::spawn(async move { client.show_message(typ, message).await });
    }

    /// The path of a document as completions see it: relative to its workspace folder (with `/`
    /// separators: the repository datastore's key for it), or its file name outside every folder.
    pub(super) fn relative_path(&self, uri: &Uri) -> Option<String> {
        let path = super::documents::file_path(uri)?;
        if let Some(key) = self.workspaces().iter().find_map(|workspace| workspace.key_for(&path)) {
            return Some(key);
        }
        let roots = read(&self.roots).clone();
        roots
            .iter()
            .find_map(|root| relative_key(root, &path))
            .or_else(|| path.file_name().and_then(|name| name.to_str()).map(str::to_owned))
    }

    /// Starts (or restarts) loading the model from the current settings; once it is loaded,
    /// (re)starts the workspace index with its tokenizer.
    pub(super) fn load_model(self: &Arc<Self>) {
        let settings = self.config().engine_settings();
        let backend = Arc::clone(self);
        tokio::spawn(async move {
            let model = settings.model.clone();
            match backend.engine.load(settings).await {
                Ok(()) => backend.restart_workspaces().await,
                Err(error) => {
                    backend.index.set_state(if backend.has_roots() { IndexState::Failed } else { IndexState::None });
                    if model_files::default_model_needs_fetch(model.as_deref()) {
                        return model_download::offer(backend, error).await;
                    }
                    // A model the person chose is theirs to check; the default one can be fetched again.
                    let hint = match model {
                        Some(_) => "Check the `model` setting: a GGUF file or a safetensors directory.",
                        None => "Set `model` to a GGUF file, or run `copilotd model fetch`.",
                    };
                    backend.notify_user(MessageType::ERROR, format!("copilotd: no completions: {error}. {hint}"));
                }
            }
        });
    }

    /// Restarts every folder's index in the background (settings changed, or reindex asked).
    pub(super) fn spawn_restart_workspaces(self: &Arc<Self>) {
        let backend = Arc::clone(self);
        tokio::spawn(async move { backend.restart_workspaces().await });
    }

    /// Brings the folders' indexes in line with the roots in the background: removed folders
    /// are dropped from the index, added ones indexed.
    pub(super) fn spawn_sync_workspaces(self: &Arc<Self>) {
        let backend = Arc::clone(self);
        tokio::spawn(async move { backend.sync_workspaces(false).await });
    }

    /// Stops every folder's index (joining their threads, which save the stores).
    pub(super) async fn stop_workspaces(&self) {
        let _changing = self.workspace_changes.lock().await;
        self.stop_links(|_| true).await;
    }

    async fn restart_workspaces(self: &Arc<Self>) {
        self.sync_workspaces(true).await;
    }

    /// Stops the indexes of folders that are no longer roots (all of them when `restart`), and
    /// starts one for each root without one, with the loaded model's tokenizer. Does nothing
    /// while no model is loaded.
    ///
    /// A folder is known by the name the client gave it and by its canonical path: either keeps
    /// its index (the canonical path of a folder deleted under its index is unknown).
    async fn sync_workspaces(self: &Arc<Self>, restart: bool) {
        let Some(tokenizer) = self.engine.tokenizer() else { return };
        let mut unindexed = self.workspace_changes.lock().await;
        if self.shut_down.load(Ordering::SeqCst) {
            return;
        }
        let roots = read(&self.roots).clone();
        let folders = distinct_folders(&roots);
        unindexed.failed.retain(|root| !restart && roots.contains(root));
        unindexed.missing.retain(|root| roots.contains(root));
        let wanted = |folder: &Path, canonical: &Path| {
            roots.iter().any(|root| root == folder) || folders.iter().any(|(_, c)| c == canonical)
        };
        let stopped = self.stop_links(|link| restart || !wanted(link.folder(), link.root())).await;
        let running: Vec<(PathBuf, PathBuf)> =
            self.workspaces().iter().map(|link| (link.folder().to_path_buf(), link.root().to_path_buf())).collect();
        let config = self.config();
        let mut started = false;
        let new: Vec<PathBuf> = folders
            .into_iter()
            .filter(|(folder, canonical)| {
                !running.iter().any(|(f, c)| f == folder || c == canonical) && !unindexed.contains(folder)
            })
            .map(|(folder, _)| folder)
            .collect();
        for root in new {
            let (config, tokenizer, folder) = (config.clone(), tokenizer.clone(), root.clone());
            let link = tokio::task::spawn_blocking(move || {
                WorkspaceLink::start(&folder, &config.languages, &config.ignore, tokenizer)
            })
            .await;
            let failure = match link {
                Ok(Ok(Some(link))) => {
                    self.serve_workspace(Arc::new(link));
                    started = true;
                    continue;
                }
                Ok(Ok(None)) => continue,
                Ok(Err(_)) if !root.exists() => {
                    let failure = format!("workspace folder {} does not exist; indexed once it does", root.display());
                    self.index_once_created(root.clone());
                    unindexed.missing.push(root);
                    failure
                }
                Ok(Err(err)) => {
                    unindexed.failed.push(root.clone());
                    format!("cannot index {}: {err:#}", root.display())
                }
                Err(join) => {
                    unindexed.failed.push(root.clone());
                    format!("indexing {} crashed: {join}", root.display())
                }
            };
            tracing::warn!("{failure}");
            self.notify_user(MessageType::WARNING, format!("copilotd: {failure}"));
        }
        if started || stopped {
            let repositories =
                self.workspaces().iter().map(|link| Repository::new(link.folder(), link.store())).collect();
            self.engine.set_repositories(repositories).await;
        }
        // Seen only while no folder is indexed.
        let failed = !unindexed.failed.is_empty() || !unindexed.missing.is_empty();
        self.index.set_state(if failed { IndexState::Failed } else { IndexState::None });
    }

    /// Looks for `folder`, a root that does not exist, every [`MISSING_FOLDER_POLL`], and
    /// indexes it once it exists; gives up when it stops being a missing root, or on shutdown.
    fn index_once_created(self: &Arc<Self>, folder: PathBuf) {
        let backend = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(MISSING_FOLDER_POLL).await;
                if backend.shut_down.load(Ordering::SeqCst) {
                    return;
                }
                let mut unindexed = backend.workspace_changes.lock().await;
                if !unindexed.missing.contains(&folder) {
                    return;
                }
                if folder.is_dir() {
                    tracing::info!("workspace folder {} exists now; indexing it", folder.display());
                    unindexed.missing.retain(|missing| *missing != folder);
                    drop(unindexed);
                    backend.spawn_sync_workspaces();
                    return;
                }
            }
        });
    }

    /// Stops (and forgets) the folders' indexes that `stop` selects; whether any was.
    async fn stop_links(&self, stop: impl Fn(&WorkspaceLink) -> bool) -> bool {
        let stopped: Vec<Arc<WorkspaceLink>> = {
            let mut links = lock(&self.workspaces);
            let (gone, kept) = links.drain(..).partition(|link| stop(link));
            *links = kept;
            gone
        };
        let any = !stopped.is_empty();
        for link in &stopped {
            tracing::info!("workspace folder {} is no longer indexed", link.folder().display());
        }
        let _ = tokio::task::spawn_blocking(move || drop(stopped)).await;
        any
    }

    /// Makes a started folder index live: overlays, then progress reported in the background.
    fn serve_workspace(self: &Arc<Self>, link: Arc<WorkspaceLink>) {
        lock(&self.workspaces).push(Arc::clone(&link));
        // Buffers opened before the index existed become overlays now, sent under the
        // documents' lock so that a concurrent edit's overlay is never overtaken by older text.
        self.documents.for_each(|uri, text| {
            if let Some(path) = super::documents::file_path(uri) {
                link.set_overlay(&path, text);
            }
        });
        let (indexing, folder) = (link.indexing(), link.folder().to_path_buf());
        drop(link);
        let backend = Arc::clone(self);
        tokio::spawn(async move {
            let progress = backend.progress_supported.load(Ordering::Relaxed);
            let outcome = indexing.report(&backend.client, progress).await;
            tracing::info!("workspace {}: {}", folder.display(), outcome.message);
            if let Some(warning) = outcome.warning {
                backend.notify_user(MessageType::WARNING, format!("copilotd: {warning}"));
            }
        });
    }

    /// Applies client settings; reloads the model if its settings (model, prompt layout, or
    /// threads before the model's threads have started) changed.
    pub(super) fn apply_settings(self: &Arc<Self>, settings: &Value) {
        let (before, after, mut warnings) = {
            let mut config = write(&self.config);
            let before = config.clone();
            let warnings = config.apply(client_settings(settings), Naming::CamelCase, &self.file_config);
            (before, config.clone(), warnings)
        };
        let mut threads_changed = before.threads != after.threads;
        if let Some(running) = copilotd_model::model_threads_running().filter(|_| threads_changed) {
            threads_changed = false;
            if copilotd_model::model_threads_wanted(after.threads) != running {
                warnings.push(format!(
                    "setting `threads` takes effect when copilotd restarts: the model runs on {running} threads until then"
                ));
            }
        }
        for warning in warnings {
            self.notify_user(MessageType::WARNING, format!("copilotd settings: {warning}"));
        }
        let prompt_changed = before.fim != after.fim || before.repo_context != after.repo_context;
        if before.model != after.model || threads_changed || prompt_changed {
            self.load_model();
        }
        if before.ignore != after.ignore || before.languages != after.languages {
            self.spawn_restart_workspaces();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_named_twice_is_indexed_once() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("project");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let canonical = real.canonicalize().unwrap();
        let missing = dir.path().join("missing");
        let roots = [&link, &real, &real.join(""), &dir.path().join("./project"), &missing, &missing.join("")]
            .map(PathBuf::from);
        assert_eq!(distinct_folders(&roots), [(link, canonical), (missing.clone(), missing)]);
    }
}
