//! `initialize`, `initialized`, `shutdown`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::lsp_types::*;

use super::super::backend::Backend;
use super::super::capabilities::capabilities;
use super::super::status::IndexState;
use super::workspace::folder_path;
use crate::config::{client_settings, Naming};
use crate::sync::{lock, write};

pub fn initialize(backend: &Backend, params: &InitializeParams) -> InitializeResult {
    let mut roots: Vec<PathBuf> =
        params.workspace_folders.iter().flatten().filter_map(|folder| folder_path(&folder.uri)).collect();
    #[allow(deprecated)]
    if roots.is_empty() {
        roots.extend(params.root_uri.as_ref().and_then(folder_path));
    }
    // The preference cache persists with the first folder's index.
    let preferences = roots.first().and_then(|root| crate::workspace::paths::workspace_cache_dir(root).ok());
    backend.engine.set_preferences_dir(preferences);
    *write(&backend.roots) = roots;
    let progress = params.capabilities.window.as_ref().and_then(|w| w.work_done_progress).unwrap_or(false);
    backend.progress_supported.store(progress, Ordering::Relaxed);
    if let Some(options) = &params.initialization_options {
        let warnings = write(&backend.config).apply(client_settings(options), Naming::CamelCase, &backend.file_config);
        lock(&backend.early_warnings).extend(warnings);
    }
    InitializeResult {
        capabilities: capabilities(),
        server_info: Some(ServerInfo {
            name: "copilotd".to_owned(),
            version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        }),
        offset_encoding: None,
    }
}

/// Tells the user what `initialize` found wrong in the settings, and starts loading the model.
pub fn initialized(backend: &Arc<Backend>) {
    if backend.initialized.swap(true, Ordering::SeqCst) {
        return tracing::debug!("a second `initialized` notification is ignored");
    }
    let warnings = std::mem::take(&mut *lock(&backend.early_warnings));
    for warning in warnings {
        backend.notify_user(MessageType::WARNING, format!("copilotd settings: {warning}"));
    }
    if !backend.has_roots() {
        backend.index.set_state(IndexState::None);
    }
    tokio::task::spawn_blocking(crate::workspace::paths::remove_unused);
    backend.load_model();
}

/// Stops the watcher and saves the repository datastore before `exit`.
pub async fn shutdown(backend: &Backend) -> Result<()> {
    backend.shut_down.store(true, Ordering::SeqCst);
    backend.stop_workspaces().await;
    backend.engine.save_learned().await;
    Ok(())
}
