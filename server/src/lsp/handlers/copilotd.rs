//! copilotd's own requests: `copilotd/status`, `copilotd/reindex`, `copilotd/indexedFile`.

use std::sync::Arc;

use serde_json::Value;
use tower_lsp_server::jsonrpc::{Error, Result};

use super::super::backend::Backend;
use super::super::status::{IndexState, Status};
use crate::engine::ModelState;

pub fn status(backend: &Backend) -> Status {
    let config = backend.config();
    let recent = backend.engine.recent();
    let none = || "none".to_owned();
    let (model, model_state, model_error, device) = match backend.engine.model_state() {
        ModelState::Idle => (none(), "idle", None, none()),
        ModelState::Loading { model } => (model, "loading", None, none()),
        ModelState::Ready { name, device } => (name, "ready", None, device),
        ModelState::Failed { model, error } => (model, "failed", Some(error), none()),
    };
    Status {
        model,
        model_state,
        model_error,
        device,
        strategy: config.strategy.to_string(),
        index_state: backend.index.state(),
        indexed_files: match (backend.index.state(), backend.workspace()) {
            (IndexState::Ready, Some(workspace)) => workspace.file_count(),
            _ => backend.index.files(),
        },
        tokens_per_second: recent.tokens_per_second,
        acceptance_length: recent.acceptance_length,
        completions: recent.completions,
        generated_tokens: recent.generated_tokens,
        last: recent.last,
    }
}

/// Rebuilds the live index of the workspace (files whose size and modification time did not
/// change keep their tokens). Answers once indexing has started again.
pub fn reindex(backend: &Arc<Backend>) -> Result<Value> {
    if !matches!(backend.engine.model_state(), ModelState::Ready { .. }) {
        return Err(Error::invalid_params("the model is not loaded yet; nothing to index with"));
    }
    backend.spawn_restart_workspace();
    Ok(serde_json::json!({ "started": true }))
}

/// Whether the repository datastore holds a workspace file now
/// (`{"path": "rel/path.py"}` → `{"indexed": bool, "tokens": n}`).
pub fn indexed_file(backend: &Backend, params: &Value) -> Result<Value> {
    let path = params
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid_params("expected {\"path\": \"relative/path\"}"))?;
    let workspace = backend.workspace().ok_or_else(|| Error::invalid_params("no workspace folder is open"))?;
    let tokens = workspace.indexed_tokens(path.trim_start_matches('/'));
    Ok(serde_json::json!({ "indexed": tokens.is_some(), "tokens": tokens.unwrap_or(0) }))
}
