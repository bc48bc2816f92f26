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

/// Updates the roots; restarts the index when the first root changed.
pub fn did_change_folders(backend: &Arc<Backend>, params: DidChangeWorkspaceFoldersParams) {
    let first_before = backend.first_root();
    {
        let mut roots = write(&backend.roots);
        let removed: Vec<PathBuf> = params.event.removed.iter().filter_map(|folder| folder_path(&folder.uri)).collect();
        roots.retain(|root| !removed.contains(root));
        roots.extend(params.event.added.iter().filter_map(|folder| folder_path(&folder.uri)));
    }
    if backend.first_root() != first_before {
        backend.spawn_restart_workspace();
    }
}
