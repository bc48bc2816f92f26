//! The JSON-RPC answer to each way a request can fail.

use copilotd_draft::cancel::Cancelled;
use tower_lsp_server::jsonrpc::{Error, ErrorCode};

use super::documents::DocumentError;
use crate::completion::CompletionError;
use crate::engine::ServiceError;

/// LSP's RequestFailed: a valid request that could not be served (e.g. no model).
pub const REQUEST_FAILED: i64 = -32803;

pub fn document_error(err: DocumentError) -> Error {
    Error::invalid_params(err.to_string())
}

pub fn service_error(err: ServiceError) -> Error {
    match err {
        ServiceError::Cancelled(Cancelled::InputChanged) => Error {
            code: ErrorCode::ContentModified,
            message: "the document changed; the completion was stopped".into(),
            data: None,
        },
        ServiceError::Cancelled(Cancelled::Superseded) => Error {
            code: ErrorCode::RequestCancelled,
            message: "superseded by a newer inline completion request".into(),
            data: None,
        },
        ServiceError::Cancelled(Cancelled::Abandoned) => Error::request_cancelled(),
        ServiceError::Unavailable(message) => {
            Error { code: ErrorCode::ServerError(REQUEST_FAILED), message: message.into(), data: None }
        }
        ServiceError::Failed(CompletionError::InvalidCursor(_)) => Error::invalid_params(err.to_string()),
        ServiceError::Failed(_) => {
            Error { code: ErrorCode::InternalError, message: err.to_string().into(), data: None }
        }
        ServiceError::Panicked(message) => internal(&message),
    }
}

pub fn internal(message: &str) -> Error {
    Error { code: ErrorCode::InternalError, message: format!("internal error: {message}").into(), data: None }
}
