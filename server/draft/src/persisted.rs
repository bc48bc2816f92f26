//! The envelope of the small persisted files (repository store, preference cache): a header
//! that names the file's kind, format version and tokenizer, then a checksummed payload.
//!
//! Layout (little-endian):
//! ```text
//! magic [u8; 8] | format version u32 | reserved u32 (0) | tokenizer fingerprint u64
//! | payload length u64 | payload checksum u64 | payload
//! ```

use anyhow::{ensure, Result};

const HEADER_LEN: usize = 40;

/// What a file must say of itself to be read.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    pub magic: [u8; 8],
    pub version: u32,
    /// What the file is, for errors ("repository store").
    pub name: &'static str,
}

impl Kind {
    /// The whole file: header, then `payload`.
    pub fn wrap(&self, fingerprint: u64, payload: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
        bytes.extend_from_slice(&self.magic);
        bytes.extend_from_slice(&self.version.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&fingerprint.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crate::checksum::of_bytes(payload).to_le_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    /// The tokenizer fingerprint in the header of `bytes`, when they begin with a header of
    /// this kind and format version (whatever the rest holds).
    pub fn tokenizer_of(&self, bytes: &[u8]) -> Option<u64> {
        let mut header = Reader::new(bytes.get(..HEADER_LEN)?);
        let kind_and_version = header.take(8).ok()? == self.magic && header.u32().ok()? == self.version;
        header.u32().ok()?;
        kind_and_version.then(|| header.u64().ok()).flatten()
    }

    /// The payload of a file written by [`Kind::wrap`], refusing files that are truncated,
    /// corrupt, of another kind or format version, or made for another tokenizer.
    pub fn unwrap<'a>(&self, bytes: &'a [u8], expected_fingerprint: u64) -> Result<&'a [u8]> {
        ensure!(bytes.len() >= HEADER_LEN, "file too short ({} bytes) for the {HEADER_LEN}-byte header", bytes.len());
        let mut header = Reader::new(&bytes[..HEADER_LEN]);
        ensure!(header.take(8)? == self.magic, "not a copilotd {} (bad magic)", self.name);
        let version = header.u32()?;
        ensure!(version == self.version, "format version {version}, expected {}", self.version);
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
        Ok(payload)
    }
}

/// Bounds-checked little-endian reader.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        ensure!(n <= self.bytes.len(), "unexpected end of data");
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    /// `count` token ids.
    pub fn tokens(&mut self, count: usize) -> Result<Vec<u32>> {
        let raw = self.take(count.checked_mul(4).ok_or_else(|| anyhow::anyhow!("token count overflows"))?)?;
        Ok(raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}
