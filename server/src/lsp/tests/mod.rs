//! The language server against a fake completion service (no model): open documents,
//! supersession, cancellation, every error code an editor can see, settings reaching the jobs, the
//! editors' feedback on suggestions, and the places they ask to warm.

pub(crate) mod captured_log;
mod documents;
mod errors;
mod fake_service;
mod feedback;
mod harness;
mod session;
mod settings;
mod supersession;
mod warm;
