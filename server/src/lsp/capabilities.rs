//! What the server announces in `initialize`.

use tower_lsp_server::lsp_types::*;

pub fn capabilities() -> ServerCapabilities {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_announce_inline_completion_and_incremental_sync() {
        let value = serde_json::to_value(capabilities()).unwrap();
        assert_eq!(value["inlineCompletionProvider"], true);
        assert_eq!(value["textDocumentSync"]["change"], 2);
        assert_eq!(value["workspace"]["workspaceFolders"]["supported"], true);
    }
}
