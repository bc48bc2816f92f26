//! `workspace/didChangeWorkspaceFolders` (settings changes go to `Backend::apply_settings`).

use std::path::PathBuf;
use std::sync::Arc;

use tower_lsp_server::lsp_types::*;

use super::super::backend::Backend;
use crate::sync::write;

/// The local folder a workspace folder's URI names (only `file:` URIs do).
pub fn folder_path(uri: &Uri) -> Option<PathBuf> {
    crate::lsp::documents::file_path(uri)
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::str::FromStr;

    use super::*;

    #[test]
    fn a_folder_has_one_path_whatever_its_escapes_and_trailing_slash() {
        let path = |uri: &str| folder_path(&Uri::from_str(uri).unwrap()).unwrap();
        let plain = path("file:///tmp/my%20proj%20%C3%BC");
        assert_eq!(plain, Path::new("/tmp/my proj ü"));
        assert_eq!(path("file:///tmp/my%20proj%20%c3%bc"), plain);
        assert_eq!(path("file:///tmp/my%20proj%20%C3%BC/"), plain);
    }
}
