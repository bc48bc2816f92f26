//! `textDocument/didOpen`, `didChange`, `didClose`: applied synchronously, before any later
//! request runs, and each cancels the document's live completion.

use tower_lsp_server::lsp_types::*;

use super::super::backend::Backend;
use super::super::documents::{file_path, DocumentError};

pub fn did_open(backend: &Backend, params: DidOpenTextDocumentParams) {
    let document = params.text_document;
    backend.in_flight.supersede(&document.uri);
    overlay(backend, &document.uri, &document.text);
    backend.documents.open(document.uri, document.language_id, document.version, document.text);
}

pub fn did_change(backend: &Backend, params: DidChangeTextDocumentParams) {
    let uri = params.text_document.uri;
    backend.in_flight.supersede(&uri);
    match backend.documents.change(&uri, params.text_document.version, &params.content_changes) {
        Ok(snapshot) => overlay(backend, &uri, &snapshot.text),
        // Reported with the change that put it out of sync: one warning, not one per keystroke.
        Err(DocumentError::OutOfSync(_)) => {
            tracing::debug!("{}: change skipped, the document is out of sync", uri.as_str());
        }
        Err(DocumentError::Unknown(_)) if !backend.documents.first_change_while_closed(&uri) => {
            tracing::debug!("{}: change skipped, the document is not open", uri.as_str());
        }
        Err(err) => backend.notify_user(MessageType::WARNING, format!("copilotd: {err}")),
    }
}

pub fn did_close(backend: &Backend, params: DidCloseTextDocumentParams) {
    let uri = params.text_document.uri;
    backend.in_flight.supersede(&uri);
    backend.documents.close(&uri);
    if let Some(path) = file_path(&uri) {
        backend.workspaces().iter().for_each(|workspace| workspace.clear_overlay(&path));
    }
}

/// Makes the workspace indexes see a `file:` document's buffer instead of its file on disk
/// (while the buffer is indexable: see [`crate::workspace::LiveWorkspace::set_overlay`]). Other
/// documents overlay nothing.
fn overlay(backend: &Backend, uri: &Uri, text: &str) {
    let Some(path) = file_path(uri) else { return };
    for workspace in backend.workspaces() {
        workspace.set_overlay(&path, text);
    }
}
