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
    /// Building the prompt, the drafters or the cost model, or decoding text, failed. Its
    /// message holds the causes; they are not its `source` too, or a caller printing the chain
    /// would print them twice.
    #[error("{0:#}")]
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for CompletionError {
    fn from(error: anyhow::Error) -> CompletionError {
        CompletionError::Failed(error)
    }
}

impl From<DecodeError> for CompletionError {
    fn from(error: DecodeError) -> CompletionError {
        match error {
            DecodeError::Cancelled(reason) => CompletionError::Cancelled(reason),
            other => CompletionError::Decode(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_says_each_cause_once() {
        let failed = CompletionError::from(anyhow::anyhow!("too long").context("calibration failed"));
        let chain: Vec<String> = anyhow::Error::from(failed).chain().map(ToString::to_string).collect();
        assert_eq!(chain, ["calibration failed: too long"]);
    }
}
