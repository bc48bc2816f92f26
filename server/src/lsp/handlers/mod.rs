//! LSP handlers, one file per method family; each runs under a panic guard.

mod copilotd;
mod inline_completion;
mod lifecycle;
mod text_document;
mod workspace;

use std::sync::Arc;

use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::lsp_types::*;
use tower_lsp_server::LanguageServer;

use super::backend::Backend;
use super::guard::{guarded, guarded_sync};
use super::status::Status;

pub use copilotd::{REINDEX_METHOD, WARM_METHOD};

/// tower-lsp's server type, on a shared backend (`Arc`) so tasks can outlive a call.
pub struct Server(pub Arc<Backend>);

impl Server {
    /// `textDocument/inlineCompletion` (LSP 3.18; registered as a custom method).
    pub async fn inline_completion(&self, params: InlineCompletionParams) -> Result<Option<InlineCompletionResponse>> {
        guarded("textDocument/inlineCompletion", inline_completion::handle(&self.0, params)).await
    }

    /// `copilotd/status`.
    pub async fn status(&self) -> Result<Status> {
        guarded("copilotd/status", async { Ok(copilotd::status(&self.0)) }).await
    }

    /// `copilotd/reindex`.
    pub async fn reindex(&self) -> Result<Value> {
        guarded(REINDEX_METHOD, async { copilotd::reindex(&self.0) }).await
    }

    /// `copilotd/suggestionFeedback` (a notification).
    pub async fn suggestion_feedback(&self, params: Value) {
        guarded_sync("copilotd/suggestionFeedback", || copilotd::suggestion_feedback(&self.0, &params));
    }

    /// `copilotd/warm` (a notification).
    pub async fn warm(&self, params: Value) {
        guarded_sync(copilotd::WARM_METHOD, || copilotd::warm(&self.0, params));
    }

    /// `copilotd/indexedFile`.
    pub async fn indexed_file(&self, params: Value) -> Result<Value> {
        guarded("copilotd/indexedFile", async { copilotd::indexed_file(&self.0, &params) }).await
    }
}

impl LanguageServer for Server {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        guarded("initialize", async { Ok(lifecycle::initialize(&self.0, &params)) }).await
    }

    async fn initialized(&self, _: InitializedParams) {
        guarded_sync("initialized", || lifecycle::initialized(&self.0));
    }

    async fn shutdown(&self) -> Result<()> {
        guarded("shutdown", lifecycle::shutdown(&self.0)).await
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        guarded_sync("textDocument/didOpen", || text_document::did_open(&self.0, params));
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        guarded_sync("textDocument/didChange", || text_document::did_change(&self.0, params));
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        guarded_sync("textDocument/didClose", || text_document::did_close(&self.0, params));
    }

    async fn did_change_configuration(&self, params: DidChangeConfigurationParams) {
        guarded_sync("workspace/didChangeConfiguration", || self.0.apply_settings(&params.settings));
    }

    async fn did_change_workspace_folders(&self, params: DidChangeWorkspaceFoldersParams) {
        guarded_sync("workspace/didChangeWorkspaceFolders", || workspace::did_change_folders(&self.0, params));
    }
}
