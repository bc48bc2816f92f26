//! copilotd: a local code-completion daemon. See ARCHITECTURE.md for the map.

pub mod cli;
pub mod completion;
pub mod model_files;
pub mod paths;
pub mod text_position;
pub mod config;
pub mod lsp;
pub mod syntax;
pub mod workspace;
