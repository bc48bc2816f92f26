//! `textDocument/inlineCompletion`.

use tower_lsp_server::jsonrpc::{Error, Result};
use tower_lsp_server::lsp_types::*;

use super::super::backend::Backend;
use super::super::documents::{place, Snapshot};
use super::super::errors::{document_error, service_error};
use super::super::suggestions::ITEM_COMMAND;
use crate::completion::Trigger;
use crate::config::Config;
use crate::engine::Job;

/// The job of a completion at byte `cursor` of the buffer `snapshot`, with the settings
/// `config` (those in force, read once by the caller), asked for by `trigger`.
pub fn job(backend: &Backend, config: &Config, snapshot: Snapshot, cursor: usize, trigger: Trigger) -> Job {
    Job {
        path: backend.relative_path(&snapshot.uri),
        language: Some(snapshot.language_id),
        text: snapshot.text,
        cursor,
        max_tokens: config.max_tokens,
        strategy: config.strategy,
        sampling: config.sampling,
        early_lines: config.early_lines,
        trigger,
        prompt_latency: config.prompt_latency,
    }
}

pub async fn handle(backend: &Backend, params: InlineCompletionParams) -> Result<Option<InlineCompletionResponse>> {
    let uri = params.text_document_position.text_document.uri;
    // Everything up to `begin` is synchronous: the snapshot is the state this request was
    // sent after, and the ticket is registered before any later edit can run.
    let snapshot = backend.documents.snapshot(&uri).map_err(document_error)?;
    let config = backend.config();
    if !config.serves_language(&snapshot.language_id) {
        return Ok(Some(InlineCompletionResponse::Array(Vec::new())));
    }
    let (cursor, position) = place(&snapshot.text, params.text_document_position.position)
        .map_err(|err| Error::invalid_params(err.to_string()))?;
    let ticket = backend.in_flight.begin(&uri);
    let trigger = match params.context.trigger_kind {
        InlineCompletionTriggerKind::Automatic => Trigger::Automatic,
        _ => Trigger::Invoked,
    };
    let job = job(backend, &config, snapshot, cursor, trigger);
    let completion = backend.engine.complete(job, ticket.token().clone()).await.map_err(service_error)?;
    drop(ticket);
    let items = if completion.text.is_empty() {
        Vec::new()
    } else {
        let insert_text = completion.text.clone();
        // More lines to come: the editor asks again at the same place for them.
        let more = completion.is_partial();
        // The id the editor echoes back with its verdict (`copilotd/suggestionFeedback`).
        let id = backend.suggestions.remember(completion);
        vec![InlineCompletionItem {
            insert_text,
            filter_text: None,
            range: Some(Range { start: position, end: position }),
            command: Some(Command {
                title: "copilotd: suggestion accepted".to_owned(),
                command: ITEM_COMMAND.to_owned(),
                arguments: Some(vec![serde_json::json!({ "id": id, "more": more })]),
            }),
            insert_text_format: Some(InsertTextFormat::PLAIN_TEXT),
        }]
    };
    Ok(Some(InlineCompletionResponse::Array(items)))
}
