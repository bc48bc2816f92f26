//! The log of a file saved again and again: what a loaded model learned is saved every few
//! seconds while the person types, and a cache directory that cannot be written must not fill
//! the log with the same warning.

use anyhow::Result;

/// Whether the last save of one kind of file failed.
#[derive(Debug, Default)]
pub struct SaveFailures {
    failing: bool,
}

impl SaveFailures {
    /// Logs the outcome of a save: the first failure is a warning, the failures after it (until
    /// a save succeeds) are debug lines.
    pub fn log(&mut self, saved: Result<()>) {
        match saved {
            Ok(()) => self.failing = false,
            Err(error) if self.failing => tracing::debug!("still failing: {error:#}"),
            Err(error) => {
                self.failing = true;
                tracing::warn!("{error:#} (not said again while saving keeps failing)");
            }
        }
    }
}
