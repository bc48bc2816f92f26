//! Where copilotd keeps its files: config under `$XDG_CONFIG_HOME/copilotd`,
//! models and datastores under `$XDG_CACHE_HOME/copilotd`. Never in the
//! user's workspace.

use std::path::PathBuf;

fn xdg_dir(variable: &str, fallback: &str) -> PathBuf {
    match std::env::var_os(variable).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir).join(fallback),
    }
}

/// `$XDG_CACHE_HOME/copilotd` (default `~/.cache/copilotd`).
pub fn cache_dir() -> PathBuf {
    xdg_dir("XDG_CACHE_HOME", ".cache").join("copilotd")
}

/// `$XDG_CONFIG_HOME/copilotd` (default `~/.config/copilotd`).
pub fn config_dir() -> PathBuf {
    xdg_dir("XDG_CONFIG_HOME", ".config").join("copilotd")
}

/// Directory of downloaded models.
pub fn models_dir() -> PathBuf {
    cache_dir().join("models")
}
