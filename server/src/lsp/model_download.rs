//! A missing default model: the language server never downloads it on its own. It asks with
//! `window/showMessageRequest`; only the "Download" action fetches it, with `$/progress`, and
//! loads it once there.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tower_lsp_server::lsp_types::{MessageActionItem, MessageType};

use super::backend::Backend;
use super::progress;
use crate::model_files;

/// The action that downloads the model.
pub const DOWNLOAD: &str = "Download";

/// Asks the person whether to download the default model (one question at a time), and
/// downloads it if they say so.
pub async fn offer(backend: Arc<Backend>, error: String) {
    if backend.download_offered.swap(true, Ordering::AcqRel) {
        return;
    }
    let message = format!(
        "copilotd: no completions: {error}. Download the default model (about 100 MB, with pip) now? \
         Or set `model` to a GGUF file."
    );
    tracing::info!("showMessageRequest: {message}");
    let action = MessageActionItem { title: DOWNLOAD.to_owned(), properties: Default::default() };
    let answer = backend.client.show_message_request(MessageType::WARNING, message, Some(vec![action])).await;
    match answer {
        Ok(Some(item)) if item.title == DOWNLOAD => download(&backend).await,
        _ => tracing::info!("the default model was not downloaded (no Download answer)"),
    }
    backend.download_offered.store(false, Ordering::Release);
}

/// Fetches the default model with `$/progress`, then loads it.
async fn download(backend: &Arc<Backend>) {
    let enabled = backend.progress_supported.load(Ordering::Relaxed);
    // The fetch reports no counts: the progress shows its begin and end.
    let (_, updates) = progress::channel();
    let (result_tx, result_rx) = tokio::sync::oneshot::channel();
    let job = async move {
        let (message, result) = match tokio::task::spawn_blocking(model_files::fetch_default).await {
            Ok(Ok(path)) => (format!("downloaded {}", path.display()), Ok(())),
            Ok(Err(error)) => (format!("download failed: {error:#}"), Err(format!("{error:#}"))),
            Err(join) => (format!("download crashed: {join}"), Err(join.to_string())),
        };
        let _ = result_tx.send(result);
        message
    };
    let title = "copilotd: downloading the default model";
    let message = progress::drive(&backend.client, enabled, title, updates, job).await;
    tracing::info!("{message}");
    match result_rx.await {
        Ok(Ok(())) => backend.load_model(),
        Ok(Err(error)) => {
            backend.notify_user(MessageType::ERROR, format!("copilotd: cannot download the default model: {error}"))
        }
        Err(_) => {}
    }
}
