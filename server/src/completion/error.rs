//! Why a completion produced no text.

use copilotd_draft::cancel::Cancelled;
use copilotd_draft::decode::DecodeError;

#[derive(Debug, thiserror::Error)]
pub enum CompletionError {
    /// Its cancellation token fired; nothing is wrong.
    #[error("completion cancelled: {0}")]
    Cancelled(Cancelled),
    #[error("cursor offset {0} is outside the document or inside a character")]
    InvalidCursor(usize),
    /// The decode loop failed (the model's forward pass, an empty prompt).
    #[error(transparent)]
    Decode(DecodeError),
    /// Building the prompt, the drafters or the cost model, or decoding text, failed.
    #[error("{0:#}")]
    Failed(#[from] anyhow::Error),
}

impl From<DecodeError> for CompletionError {
    fn from(error: DecodeError) -> CompletionError {
        match error {
            DecodeError::Cancelled(reason) => CompletionError::Cancelled(reason),
            other => CompletionError::Decode(other),
        }
    }
}
