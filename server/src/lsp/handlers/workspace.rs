//! `workspace/didChangeWorkspaceFolders` (settings changes go to `Backend::apply_settings`).

use std::path::PathBuf;
use std::sync::Arc;

use tower_lsp_server::lsp_types::*;
use tower_lsp_server::UriExt;

use super::super::backend::Backend;
use crate::sync::write;

pub fn folder_path(uri: &Uri) -> Option<PathBuf> {
    uri.to_file_path().map(|path| path.into_owned())
}

/// Updates the roots; removed folders leave the index, added ones are indexed.
pub fn did_change_folders(backend: &Arc<Backend>, params: DidChangeWorkspaceFoldersParams) {
    {
        let mut roots = write(&backend.roots);
        let removed: Vec<PathBuf> = params.event.removed.iter().filter_map(|folder| folder_path(&folder.uri)).collect();
        roots.retain(|root| !removed.contains(root));
        for added in params.event.added.iter().filter_map(|folder| folder_path(&folder.uri)) {
            if !roots.contains(&added) {
                roots.push(added);
            }
        }
    }
    backend.spawn_sync_workspaces();
}
