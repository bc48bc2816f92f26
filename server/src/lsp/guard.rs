//! Panic guards: a handler that panics answers InternalError (or logs, for a notification),
//! and the server goes on.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tower_lsp_server::jsonrpc::Result;

use super::errors::internal;

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_owned())
}

/// Runs a request handler; a panic becomes an InternalError answer.
pub async fn guarded<T>(method: &str, handler: impl Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic_message(panic.as_ref());
            tracing::error!("{method} panicked: {message}");
            Err(internal(&format!("{method} failed: {message}")))
        }
    }
}

/// Runs a notification handler's synchronous part; a panic is logged.
pub fn guarded_sync(method: &str, handler: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(handler)) {
        tracing::error!("{method} panicked: {}", panic_message(panic.as_ref()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_lsp_server::jsonrpc::ErrorCode;

    #[tokio::test]
    async fn a_panicking_handler_answers_internal_error() {
        let answer: Result<()> = guarded("test/panic", async { panic!("boom") }).await;
        let error = answer.unwrap_err();
        assert_eq!(error.code, ErrorCode::InternalError);
        assert!(error.message.contains("boom"), "{}", error.message);
        let fine: Result<u8> = guarded("test/fine", async { Ok(7) }).await;
        assert_eq!(fine.unwrap(), 7);
    }
}
