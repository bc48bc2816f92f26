//! `copilotd --stdio`: the Language Server, a thin adapter over the completion service
//! ([`crate::engine`]).
//!
//! Documents with UTF-16 positions ([`documents`]), completion requests that supersede and
//! cancel each other ([`requests`]), handlers one file per method family ([`handlers`]) over
//! shared state ([`backend`]), the service's errors mapped to JSON-RPC codes ([`errors`]), panic
//! guards ([`guard`]), the suggestions answered for the editors' feedback on them
//! ([`suggestions`]), the live workspace index ([`workspace_link`]) with `$/progress`
//! ([`progress`]), `copilotd/status` ([`status`]), a missing default model offered for download
//! (`model_download`), and a framing guard that keeps malformed
//! input from ending the session ([`transport`]).

mod backend;
mod capabilities;
pub mod documents;
pub mod errors;
mod guard;
mod handlers;
mod model_download;
pub mod progress;
pub mod requests;
pub mod status;
pub mod suggestions;
#[cfg(test)]
pub(crate) mod tests;
pub mod transport;
pub mod workspace_link;

pub use handlers::WARM_METHOD;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tower_lsp_server::{LspService, Server as LspServer};

use crate::config::Config;
use crate::engine::{CompletionService, ModelEngine};
use backend::Backend;
use handlers::Server;

/// Requests handled at the same time. Completions serialize on the model, but status requests,
/// cancellations and document changes must never wait behind them.
const CONCURRENCY: usize = 64;

/// Runs the language server on stdin/stdout until `exit`, the end of input, SIGTERM or SIGINT
/// (what the engine learned is saved first). Logs go to stderr (filter with `COPILOTD_LOG`,
/// e.g. `COPILOTD_LOG=debug`), never to stdout.
pub fn run_stdio(config: Config) -> anyhow::Result<()> {
    init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("copilotd-lsp")
        .build()?;
    let engine = Arc::new(ModelEngine::default());
    let end = runtime.block_on(async {
        let session = serve_with(tokio::io::stdin(), tokio::io::stdout(), config, Arc::clone(&engine) as _);
        tokio::select! {
            end = session => Ok(end),
            signal = termination_signal() => {
                engine.save_learned().await;
                Err(signal)
            }
        }
    });
    // Reading stdin blocks a thread that cannot be interrupted; do not wait for it.
    runtime.shutdown_background();
    match end {
        Ok(SessionEnd::AfterShutdown) => Ok(()),
        // LSP: exit code 1 when `exit` (or the end of input) comes without `shutdown`.
        Ok(SessionEnd::WithoutShutdown) => anyhow::bail!("the client ended the session without `shutdown`"),
        Err(signal) => anyhow::bail!("stopped by {signal}"),
    }
}

/// The name of the first SIGTERM or SIGINT received; never, where they cannot be listened to.
async fn termination_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut interrupt)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::warn!("cannot listen to SIGTERM and SIGINT: what was learned is not saved when they come");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    }
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    AfterShutdown,
    WithoutShutdown,
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("COPILOTD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,copilotd=info"));
    // Another subscriber (e.g. the CLI's) may already be installed; that one wins.
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).try_init();
}

/// Serves one LSP session over `input`/`output` with the model engine.
pub async fn serve<R, W>(input: R, output: W, config: Config) -> SessionEnd
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_with(input, output, config, Arc::new(ModelEngine::default())).await
}

/// Serves one LSP session over `input`/`output` with `engine`, until `exit` or the end of input;
/// what the engine learned is saved at the end, by `shutdown` or after it.
pub async fn serve_with<R, W>(input: R, output: W, config: Config, engine: Arc<dyn CompletionService>) -> SessionEnd
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let shut_down = Arc::new(AtomicBool::new(false));
    let (service, socket) = LspService::build(|client| {
        Server(Arc::new(Backend::new(client, config, Arc::clone(&engine), Arc::clone(&shut_down))))
    })
    .custom_method("textDocument/inlineCompletion", Server::inline_completion)
    .custom_method(status::METHOD, Server::status)
    .custom_method("copilotd/indexedFile", Server::indexed_file)
    .custom_method(handlers::REINDEX_METHOD, Server::reindex)
    .custom_method(suggestions::METHOD, Server::suggestion_feedback)
    .custom_method(handlers::WARM_METHOD, Server::warm)
    .finish();

    // editor → guard → tower-lsp, tower-lsp → guard → editor.
    let (to_server, server_input) = tokio::io::duplex(1 << 20);
    let (server_output, from_server) = tokio::io::duplex(1 << 20);
    let (server_frames_tx, server_frames) = mpsc::channel(64);
    let (replies_tx, replies) = mpsc::channel(64);

    let gate = Arc::new(transport::InitializeGate::default());
    tokio::spawn(transport::read_client(input, to_server, replies_tx, Arc::clone(&gate)));
    tokio::spawn(transport::read_server(from_server, server_frames_tx, gate));
    let writer = tokio::spawn(transport::write_client(output, server_frames, replies));

    LspServer::new(server_input, server_output, socket).concurrency_level(CONCURRENCY).serve(service).await;
    // The server dropped its output; the writer drains what is left and ends.
    let _ = writer.await;
    if shut_down.load(Ordering::SeqCst) {
        SessionEnd::AfterShutdown
    } else {
        engine.save_learned().await;
        SessionEnd::WithoutShutdown
    }
}
