//! copilotd's benchmarks and measurements, kept out of the product library
//! (`copilotd-server`), which they use like any other client does:
//!
//! - [`cli`] — `copilotd bench …`: the cost curve, the repository benchmark and the LSP latency
//!   benchmark, wired into the `copilotd` binary beside the product's commands;
//! - the repository benchmark harness: [`packages`] (real packages fetched with pip), [`tasks`]
//!   (function bodies cut out), [`repo`] (every variant against `ar`), [`sweep`] (parameter
//!   sweeps), [`report`] (summaries), [`memory`] (resident size of mapped stores),
//!   [`full_common`] (the uncompacted common store that CREST's compaction is compared with);
//! - [`lsp`] — a blocking stdio client of `copilotd --stdio` (for the integration tests too) and
//!   the LSP latency benchmark;
//! - `indexing` — indexing figures on a real code base (an ignored test).

pub mod cli;
pub mod full_common;
#[cfg(test)]
mod indexing;
pub mod lsp;
pub mod memory;
pub mod packages;
pub mod repo;
pub mod report;
pub mod sweep;
pub mod tasks;
