//! Where copilotd keeps its files: config under `$XDG_CONFIG_HOME/copilotd`,
//! models and datastores under `$XDG_CACHE_HOME/copilotd`. Never in the
//! user's workspace.

use std::path::PathBuf;

/// `$variable`, or `$HOME/fallback` when it is unset, empty or relative: the XDG Base Directory
/// specification says a relative path there is invalid and must be ignored (it would depend on
/// the working directory, often the workspace).
fn xdg_dir(variable: &str, fallback: &str) -> PathBuf {
    match absolute_var(variable) {
        Some(dir) => dir,
        None => absolute_var("HOME").unwrap_or_else(std::env::temp_dir).join(fallback),
    }
}

/// The environment variable `name` as a path, when it is an absolute one.
fn absolute_var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).map(PathBuf::from).filter(|path| path.is_absolute())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_or_empty_variable_is_ignored() {
        // Variables of this test's own, so that no other test sees them change.
        std::env::set_var("COPILOTD_TEST_RELATIVE", ".cache");
        std::env::set_var("COPILOTD_TEST_EMPTY", "");
        std::env::set_var("COPILOTD_TEST_ABSOLUTE", "/somewhere/cache");
        assert_eq!(absolute_var("COPILOTD_TEST_RELATIVE"), None);
        assert_eq!(absolute_var("COPILOTD_TEST_EMPTY"), None);
        assert_eq!(absolute_var("COPILOTD_TEST_UNSET"), None);
        assert_eq!(absolute_var("COPILOTD_TEST_ABSOLUTE"), Some(PathBuf::from("/somewhere/cache")));
        assert_eq!(xdg_dir("COPILOTD_TEST_RELATIVE", ".x"), xdg_dir("COPILOTD_TEST_UNSET", ".x"));
        assert!(xdg_dir("COPILOTD_TEST_RELATIVE", ".x").is_absolute());
    }
}
