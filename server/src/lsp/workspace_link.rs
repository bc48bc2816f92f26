//! TEMPORARY placeholder until `crate::workspace` lands; replaced by the real link.

use std::path::PathBuf;
use std::sync::Arc;

use tower_lsp_server::Client;

use super::engine::Engine;
use super::status::{IndexState, IndexStatus};

pub struct WorkspaceLink {
    _root: PathBuf,
}

impl WorkspaceLink {
    pub fn new(root: PathBuf, _ignore: &[String]) -> WorkspaceLink {
        WorkspaceLink { _root: root }
    }

    pub async fn start(
        &self,
        _client: &Client,
        _progress: bool,
        index: Arc<IndexStatus>,
        _engine: Arc<Engine>,
    ) -> Result<(), String> {
        index.set_state(IndexState::None);
        Ok(())
    }

    pub fn set_overlay(&self, _path: &str, _text: &str) {}

    pub fn clear_overlay(&self, _path: &str) {}

    pub fn indexed_tokens(&self, _path: &str) -> Option<usize> {
        None
    }
}
