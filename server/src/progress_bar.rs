//! The progress bars of the long commands (`index`, `datastore build-common --refine`).

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// A bar of `len` steps drawn with `template` on stderr when `shown` and
/// stderr is a terminal; a hidden one otherwise.
pub fn on_stderr(shown: bool, len: u64, template: &str) -> Result<ProgressBar> {
    if !shown || !std::io::stderr().is_terminal() {
        return Ok(ProgressBar::hidden());
    }
    let style = ProgressStyle::with_template(template).context("bad progress bar template")?.progress_chars("=> ");
    Ok(ProgressBar::new(len).with_style(style))
}
