//! copilotd: a local code-completion daemon. See ARCHITECTURE.md for the map.

pub mod bench;
pub mod cli;
pub mod common_build;
pub mod completion;
pub mod config;
pub mod engine;
pub mod lsp;
pub mod model_files;
pub mod paths;
pub mod python_files;
pub mod sync;
pub mod syntax;
pub mod text_position;
pub mod wheel;
pub mod workspace;
