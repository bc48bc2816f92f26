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

pub const MAGIC: [u8; 8] = *b"CPDREPO\0";
pub const FORMAT_VERSION: u32 = 2;
const HEADER_LEN: usize = 40;

impl RepositoryStore {
    /// Writes the store to `path` atomically: a temporary file in the same
    /// directory, flushed to disk, then renamed over `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let payload = self.encode_payload();
        let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&self.fingerprint.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crate::checksum::of_bytes(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
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
        ensure!(bytes.len() >= HEADER_LEN, "file too short ({} bytes) for the {HEADER_LEN}-byte header", bytes.len());
        let mut header = Reader::new(&bytes[..HEADER_LEN]);
        ensure!(header.take(8)? == MAGIC, "not a copilotd repository store (bad magic)");
        let version = header.u32()?;
        ensure!(version == FORMAT_VERSION, "format version {version}, expected {FORMAT_VERSION}");
        header.u32()?;
        let fingerprint = header.u64()?;
        ensure!(
            fingerprint == expected_fingerprint,
            "built for another tokenizer (fingerprint {fingerprint:016x}, expected {expected_fingerprint:016x})"
        );
        let payload_len = header.u64()?;
        let sum = header.u64()?;
        let payload = &bytes[HEADER_LEN..];
        ensure!(
            payload.len() as u64 == payload_len,
            "truncated or padded: payload is {} bytes, header says {payload_len}",
            payload.len()
        );
        ensure!(crate::checksum::of_bytes(payload) == sum, "checksum mismatch (corrupt file)");

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
            let n = usize::try_from(r.u64()?).context("token count overflows")?;
            let raw = r.take(n.checked_mul(4).context("token count overflows")?)?;
            let tokens = raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            updates.push(FileUpdate { path, tokens, stamp });
        }
        ensure!(r.is_empty(), "trailing bytes after the last file");
        let mut paths: Vec<&str> = updates.iter().map(|u| u.path.as_str()).collect();
        paths.sort_unstable();
        ensure!(paths.windows(2).all(|w| w[0] != w[1]), "a path occurs twice");
        let mut store = RepositoryStore::with_fingerprint(fingerprint);
        store.upsert_files(updates);
        Ok(store)
    }
}

/// Bounds-checked little-endian reader.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        ensure!(n <= self.bytes.len(), "unexpected end of data");
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}
