//! The repository-level benchmark harness behind `copilotd bench repo`.

pub mod packages;
pub mod repo;
pub mod report;
pub mod tasks;
