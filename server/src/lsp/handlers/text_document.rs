//! `textDocument/didOpen`, `didChange`, `didClose`: applied synchronously, before any later
//! request runs, and each cancels the document's live completion.

use tower_lsp_server::lsp_types::*;
use tower_lsp_server::UriExt;

use super::super::backend::Backend;

pub fn did_open(backend: &Backend, params: DidOpenTextDocumentParams) {
    let document = params.text_document;
    backend.in_flight.supersede(&document.uri);
    if let Some(path) = document.uri.to_file_path() {
        backend.workspaces().iter().for_each(|workspace| workspace.set_overlay(&path, &document.text));
    }
    backend.documents.open(document.uri, document.language_id, document.version, document.text);
}

pub fn did_change(backend: &Backend, params: DidChangeTextDocumentParams) {
    let uri = params.text_document.uri;
    backend.in_flight.supersede(&uri);
    match backend.documents.change(&uri, params.text_document.version, &params.content_changes) {
        Ok(snapshot) => {
            if let Some(path) = uri.to_file_path() {
                backend.workspaces().iter().for_each(|workspace| workspace.set_overlay(&path, &snapshot.text));
            }
        }
        Err(err) => backend.notify_user(MessageType::WARNING, format!("copilotd: {err}")),
    }
}

pub fn did_close(backend: &Backend, params: DidCloseTextDocumentParams) {
    let uri = params.text_document.uri;
    backend.in_flight.supersede(&uri);
    backend.documents.close(&uri);
    if let Some(path) = uri.to_file_path() {
        backend.workspaces().iter().for_each(|workspace| workspace.clear_overlay(&path));
    }
}
