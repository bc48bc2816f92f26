//! The repository-level benchmark harness behind `copilotd bench repo`.

pub mod memory;
pub mod packages;
pub mod repo;
pub mod report;
pub mod sweep;
pub mod tasks;
