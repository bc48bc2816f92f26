//! The language server against a fake completion service (no model): supersession,
//! cancellation, every error code an editor can see, and settings reaching the jobs.

mod errors;
mod fake_service;
mod harness;
mod session;
mod settings;
mod supersession;
