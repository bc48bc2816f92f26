//! The workspace side of the repository datastore: which files are admitted
//! (`walk`), building and persisting the store (`index`), keeping it current
//! with the file system and open buffers (`live`), and where copilotd keeps
//! its caches (`paths`).

mod index;
mod live;
pub mod paths;
mod walk;

pub use index::{index_workspace, run_index, save_store, update_workspace_store, with_indexing_bar, IndexSummary};
pub use live::{IndexState, LiveWorkspace, Repository, SharedStore};
pub use walk::{
    read_text, relative_key, walk, Unreadable, Walk, WalkConfig, WalkedFile, DEFAULT_MAX_FILE_SIZE, LANGUAGES,
    SECRET_GLOBS,
};

use anyhow::Result;

/// The model's tokenizer as the workspace sees it: text to token ids.
pub type Tokenize = dyn Fn(&str) -> Result<Vec<u32>> + Send + Sync;

/// Text whose token ids identify a tokenizer: code, indentation, digits,
/// punctuation, non-ASCII text and a special-token lookalike.
const FINGERPRINT_PROBE: &str = "def fingerprint(self, x: int = 0x1F) -> str:\n    \
    return f\"{x!r:>10}\"  # naïve café 日本語 ß Ω 🙂\n\t\tif a<=b and c!=d: pass\n\
    <|endoftext|> 12345678901234567890 __init__ self.assertEqual([], {})\r\n";

/// A fingerprint of the tokenizer, stored in the repository datastore's
/// header so that a store built with another tokenizer is rejected: a hash of
/// the ids the tokenizer gives a fixed probe text.
pub fn tokenizer_fingerprint(tokenize: &Tokenize) -> Result<u64> {
    let ids = tokenize(FINGERPRINT_PROBE)?;
    Ok(copilotd_draft::checksum::of_ids(&ids))
}

#[cfg(test)]
mod tests;
