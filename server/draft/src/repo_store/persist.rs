//! On-disk form of the repository store.
//!
//! Layout (little-endian):
//! ```text
//! header   magic "CPDREPO\0" | format version u32 | reserved u32 (0)
//!          | tokenizer fingerprint u64 | payload length u64 | payload checksum u64
//! payload  file count u64, then per file:
//!          path length u32 | path (UTF-8) | has stamp u8 | stamp 2 × u64 (when has stamp)
//!          | token count u64 | tokens u32 × count
//! ```
//! Only files and tokens are stored; the index is rebuilt on load, so a
//! loaded store is never more trusted than its token lists.

use std::fs;
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};

use super::{FileUpdate, RepositoryStore, Stamp};
use crate::persisted::{Kind, Reader};

pub const MAGIC: [u8; 8] = *b"CPDREPO\0";
pub const FORMAT_VERSION: u32 = 2;
const KIND: Kind = Kind { magic: MAGIC, version: FORMAT_VERSION, name: "repository store" };

impl RepositoryStore {
    /// Writes the store to `path` atomically: a temporary file in the same
    /// directory, flushed to disk, then renamed over `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = KIND.wrap(self.fingerprint, &self.encode_payload());
        crate::atomic_file::write(path, &bytes)
            .with_context(|| format!("cannot write repository store {}", path.display()))
    }

    /// Reads a store written by [`save`](Self::save), rejecting files that
    /// are truncated, corrupt, of another format version or made for another
    /// tokenizer.
    pub fn load(path: &Path, expected_fingerprint: u64) -> Result<Self> {
        let bytes = fs::read(path).with_context(|| format!("cannot read repository store {}", path.display()))?;
        Self::decode(&bytes, expected_fingerprint)
            .with_context(|| format!("invalid repository store {}", path.display()))
    }

    fn encode_payload(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.token_count * 4);
        out.extend_from_slice(&(self.by_path.len() as u64).to_le_bytes());
        for &slot in self.by_path.values() {
            let entry = &self.files[slot as usize];
            out.extend_from_slice(&(entry.path.len() as u32).to_le_bytes());
            out.extend_from_slice(entry.path.as_bytes());
            match entry.stamp {
                Some(Stamp([a, b])) => {
                    out.push(1);
                    out.extend_from_slice(&a.to_le_bytes());
                    out.extend_from_slice(&b.to_le_bytes());
                }
                None => out.push(0),
            }
            out.extend_from_slice(&(entry.tokens.len() as u64).to_le_bytes());
            for t in &entry.tokens {
                out.extend_from_slice(&t.to_le_bytes());
            }
        }
        out
    }

    fn decode(bytes: &[u8], expected_fingerprint: u64) -> Result<Self> {
        let payload = KIND.unwrap(bytes, expected_fingerprint)?;
        let mut r = Reader::new(payload);
        let count = r.u64()?;
        let mut updates = Vec::new();
        for _ in 0..count {
            let path_len = r.u32()? as usize;
            let path = std::str::from_utf8(r.take(path_len)?).context("a path is not UTF-8")?.to_owned();
            let stamp = match r.u8()? {
                0 => None,
                1 => Some(Stamp([r.u64()?, r.u64()?])),
                other => bail!("bad stamp flag {other} for {path}"),
            };
            let count = usize::try_from(r.u64()?).context("token count overflows")?;
            let tokens = r.tokens(count)?;
            updates.push(FileUpdate { path, tokens, stamp });
        }
        ensure!(r.is_empty(), "trailing bytes after the last file");
        let mut paths: Vec<&str> = updates.iter().map(|u| u.path.as_str()).collect();
        paths.sort_unstable();
        ensure!(paths.windows(2).all(|w| w[0] != w[1]), "a path occurs twice");
        let mut store = RepositoryStore::with_fingerprint(expected_fingerprint);
        store.upsert_files(updates);
        Ok(store)
    }
}
