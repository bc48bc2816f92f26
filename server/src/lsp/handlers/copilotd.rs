//! copilotd's own requests: `copilotd/status`, `copilotd/reindex`, `copilotd/indexedFile`; and
//! its notifications `copilotd/suggestionFeedback` and `copilotd/warm`.

use std::sync::Arc;

use serde_json::Value;
use tower_lsp_server::jsonrpc::{Error, Result};
use tower_lsp_server::lsp_types::TextDocumentPositionParams;

use super::super::backend::Backend;
use super::super::documents::offset_at;
use super::super::status::{IndexState, Status};
use super::super::suggestions::{Report, METHOD};
use super::inline_completion;
use crate::completion::Trigger;
use crate::engine::ModelState;

pub fn status(backend: &Backend) -> Status {
    let config = backend.config();
    let recent = backend.engine.recent();
    let workspaces = backend.workspaces();
    let (index_state, indexed_files) = if workspaces.is_empty() {
        (backend.index.state(), backend.index.files())
    } else {
        (IndexState::combined(workspaces.iter().map(|w| w.state())), workspaces.iter().map(|w| w.files()).sum())
    };
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
        index_state,
        indexed_files,
        indexed_folders: workspaces.len(),
        tokens_per_second: recent.tokens_per_second,
        acceptance_length: recent.acceptance_length,
        calibration: recent.calibration.map_or_else(none, |state| state.name().to_owned()),
        completions: recent.completions,
        generated_tokens: recent.generated_tokens,
        warmed_tokens: recent.warmed_tokens,
        last: recent.last,
    }
}

/// Rebuilds the live index of the workspace (files whose size and modification time did not
/// change keep their tokens). Answers once indexing has started again.
pub fn reindex(backend: &Arc<Backend>) -> Result<Value> {
    if !matches!(backend.engine.model_state(), ModelState::Ready { .. }) {
        return Err(Error::invalid_params("the model is not loaded yet; nothing to index with"));
    }
    backend.spawn_restart_workspaces();
    Ok(serde_json::json!({ "started": true }))
}

/// Whether the repository datastore of some workspace folder holds a file now
/// (`{"path": "rel/path.py"}`, relative to its folder → `{"indexed": bool, "tokens": n}`).
pub fn indexed_file(backend: &Backend, params: &Value) -> Result<Value> {
    let path = params
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid_params("expected {\"path\": \"relative/path\"}"))?;
    let workspaces = backend.workspaces();
    if workspaces.is_empty() {
        return Err(Error::invalid_params("no workspace folder is open"));
    }
    let tokens = workspaces.iter().find_map(|w| w.indexed_tokens(path.trim_start_matches('/')));
    Ok(serde_json::json!({ "indexed": tokens.is_some(), "tokens": tokens.unwrap_or(0) }))
}

/// The person's verdict on a suggestion (`copilotd/suggestionFeedback`), passed to the engine.
/// A malformed report, or one about a suggestion that is unknown or expired, is ignored with a
/// debug log line.
pub fn suggestion_feedback(backend: &Backend, params: &Value) {
    let report = match Report::parse(params) {
        Ok(report) => report,
        Err(problem) => return tracing::debug!("{METHOD} ignored: {problem}: {params}"),
    };
    match backend.suggestions.verdict(&report) {
        Some((suggestion, verdict)) => backend.engine.feedback(&suggestion, verdict),
        None => tracing::debug!("{METHOD} ignored: suggestion {} is unknown, expired or settled", report.id),
    }
}

/// `copilotd/warm`: the person is at `position` of the document (`TextDocumentPositionParams`),
/// so the engine may prefill that place's prompt while the model idles, unless the `warm` setting
/// is off. A malformed one, or one about an unknown document, a place outside it or a language
/// not served, is ignored with a debug log line.
pub fn warm(backend: &Backend, params: Value) {
    let config = backend.config();
    if !config.warm {
        return tracing::debug!("{WARM_METHOD} ignored: the `warm` setting is off");
    }
    let place = match serde_json::from_value::<TextDocumentPositionParams>(params) {
        Ok(place) => place,
        Err(problem) => return tracing::debug!("{WARM_METHOD} ignored: {problem}"),
    };
    let uri = place.text_document.uri;
    let snapshot = match backend.documents.snapshot(&uri) {
        Ok(snapshot) if config.serves_language(&snapshot.language_id) => snapshot,
        Ok(_) => return,
        Err(problem) => return tracing::debug!("{WARM_METHOD} ignored: {problem}"),
    };
    match offset_at(&snapshot.text, place.position) {
        Ok(cursor) => {
            backend.engine.warm(inline_completion::job(backend, &config, snapshot, cursor, Trigger::Automatic))
        }
        Err(problem) => tracing::debug!("{WARM_METHOD} ignored: {problem}"),
    }
}

/// The method of [`warm`].
pub const WARM_METHOD: &str = "copilotd/warm";

/// The method of [`reindex`].
pub const REINDEX_METHOD: &str = "copilotd/reindex";
