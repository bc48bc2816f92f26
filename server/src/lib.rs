//! copilotd's product library: the completion service, the LSP adapter, workspace indexing and
//! the command line of the `copilotd` binary. See ARCHITECTURE.md for the map.
//!
//! It holds no benchmark or measurement code: that is the `copilotd-bench` crate, which depends
//! on this one (and never the other way round).

pub mod cli;
pub mod common_build;
pub mod common_refine;
pub mod completion;
pub mod config;
pub mod engine;
pub mod lsp;
pub mod model_files;
pub mod paths;
pub mod progress_bar;
pub mod python_files;
pub mod sync;
pub mod syntax;
pub mod text_position;
pub mod wheel;
pub mod workspace;
