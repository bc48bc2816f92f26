//! The language server against a fake completion service (no model): supersession,
//! cancellation and every error code an editor can see.

mod errors;
mod fake_service;
mod harness;
mod session;
mod supersession;
