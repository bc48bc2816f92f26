//! On-disk layout of the common datastore, shared by the in-memory image built
//! by [`super::CommonStore::build`] and a memory-mapped file.
//!
//! All integers are little-endian; offsets are from the start of the file.
//!
//! ```text
//! header   (HEADER_LEN bytes)
//!   0  magic            [u8; 8]  = MAGIC
//!   8  format version   u32      = VERSION
//!  12  max_n            u32
//!  16  tokenizer hash   u64
//!  24  top_t kind       u32      (0 unlimited, 1 per n, 2 total)
//!  28  tree_nodes       u32
//!  32  top_t value      u64
//!  40  continuation_len u32
//!  44  max_occurrences  u32
//!  48  file length      u64
//!  56  checksum         u64      (over the file with this field zeroed)
//! directory (max_n × 24 bytes): per n = 1..=max_n
//!   table offset u64, slot count u64 (a power of two, or 0), entry count u64
//! tables: per n, `slot count` slots of 16 bytes: key hash u64, entry offset u64
//!   (EMPTY_SLOT when unused); open addressing with linear probing
//! entries: n tokens (u32 each), node count u16, then the pruned
//!   continuation tree in preorder: token u32, excess u32, depth u8
//! ```
//! A node's *excess* is its count minus the counts of its kept children, so
//! that summing the counts of the root-to-node paths through a node gives the
//! node's count again.

use anyhow::{bail, ensure, Context, Result};

pub const MAGIC: [u8; 8] = *b"CPDCOMMN";
pub const VERSION: u32 = 2;
pub const HEADER_LEN: usize = 64;
pub const DIR_ENTRY_LEN: usize = 24;
pub const SLOT_LEN: usize = 16;
pub const NODE_LEN: usize = 9;
pub const EMPTY_SLOT: u64 = u64::MAX;
const CHECKSUM_AT: usize = 56;
const LENGTH_AT: usize = 48;

/// Header fields describing how a store was built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub max_n: u32,
    pub fingerprint: u64,
    pub top_t_kind: u32,
    pub top_t_value: u64,
    pub tree_nodes: u32,
    pub continuation_len: u32,
    pub max_occurrences: u32,
}

/// One node of a pruned continuation tree as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    pub token: u32,
    pub excess: u32,
    pub depth: u8,
}

/// Hash of an n-gram: stable across builds and platforms (it is persisted).
pub fn key_hash(tokens: &[u32]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64 ^ (tokens.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for &t in tokens {
        h = (h ^ u64::from(t)).wrapping_mul(0x100_0000_01B3).rotate_left(23);
    }
    mix64(h)
}

/// splitmix64 finaliser: every input bit affects every output bit.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The serialised entries of one n, in the order they were added.
#[derive(Default)]
pub struct Group {
    bytes: Vec<u8>,
    /// (key hash, offset of the entry within `bytes`).
    index: Vec<(u64, usize)>,
}

impl Group {
    /// Appends the entry of `key` with its pruned tree.
    pub fn add(&mut self, key: &[u32], nodes: &[Node]) {
        self.index.push((key_hash(key), self.bytes.len()));
        for &t in key {
            self.bytes.extend_from_slice(&t.to_le_bytes());
        }
        self.bytes.extend_from_slice(&(nodes.len() as u16).to_le_bytes());
        for node in nodes {
            self.bytes.extend_from_slice(&node.token.to_le_bytes());
            self.bytes.extend_from_slice(&node.excess.to_le_bytes());
            self.bytes.push(node.depth);
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }
}

/// Serialises a store: `groups[n - 1]` holds the entries for n.
pub fn encode(header: &Header, groups: &[Group]) -> Vec<u8> {
    let max_n = header.max_n as usize;
    debug_assert_eq!(groups.len(), max_n);
    let slot_counts: Vec<usize> =
        groups.iter().map(|g| if g.len() == 0 { 0 } else { (g.len() * 2).next_power_of_two() }).collect();
    let tables_at = HEADER_LEN + max_n * DIR_ENTRY_LEN;
    let entries_at = tables_at + slot_counts.iter().sum::<usize>() * SLOT_LEN;
    let total = entries_at + groups.iter().map(|g| g.bytes.len()).sum::<usize>();
    let mut out = vec![0u8; entries_at];
    out.reserve_exact(total - entries_at);

    out[..8].copy_from_slice(&MAGIC);
    put_u32(&mut out, 8, VERSION);
    put_u32(&mut out, 12, header.max_n);
    put_u64(&mut out, 16, header.fingerprint);
    put_u32(&mut out, 24, header.top_t_kind);
    put_u32(&mut out, 28, header.tree_nodes);
    put_u64(&mut out, 32, header.top_t_value);
    put_u32(&mut out, 40, header.continuation_len);
    put_u32(&mut out, 44, header.max_occurrences);

    let mut table_at = tables_at;
    for (i, (group, &slots)) in groups.iter().zip(&slot_counts).enumerate() {
        let dir = HEADER_LEN + i * DIR_ENTRY_LEN;
        put_u64(&mut out, dir, table_at as u64);
        put_u64(&mut out, dir + 8, slots as u64);
        put_u64(&mut out, dir + 16, group.len() as u64);
        for s in 0..slots {
            put_u64(&mut out, table_at + s * SLOT_LEN + 8, EMPTY_SLOT);
        }
        let group_at = out.len();
        out.extend_from_slice(&group.bytes);
        let mask = slots.wrapping_sub(1);
        for &(hash, offset) in &group.index {
            let mut s = hash as usize & mask;
            while get_u64(&out, table_at + s * SLOT_LEN + 8) != Some(EMPTY_SLOT) {
                s = (s + 1) & mask;
            }
            put_u64(&mut out, table_at + s * SLOT_LEN, hash);
            put_u64(&mut out, table_at + s * SLOT_LEN + 8, (group_at + offset) as u64);
        }
        table_at += slots * SLOT_LEN;
    }
    let len = out.len() as u64;
    put_u64(&mut out, LENGTH_AT, len);
    let sum = crate::checksum::of_bytes_zeroing(&out, CHECKSUM_AT..CHECKSUM_AT + 8);
    put_u64(&mut out, CHECKSUM_AT, sum);
    out
}

/// Checks magic, version, length, checksum and tokenizer, and returns the header.
pub fn validate(bytes: &[u8], expected_fingerprint: u64) -> Result<Header> {
    ensure!(bytes.len() >= HEADER_LEN, "file is truncated ({} bytes, header needs {HEADER_LEN})", bytes.len());
    if bytes[..8] != MAGIC {
        bail!("not a copilotd common datastore (bad magic)");
    }
    let version = get_u32(bytes, 8).context("header")?;
    ensure!(version == VERSION, "format version {version} is not supported (expected {VERSION})");
    let stated_len = get_u64(bytes, LENGTH_AT).context("header")?;
    ensure!(
        stated_len == bytes.len() as u64,
        "file is truncated or padded ({} bytes, header says {stated_len})",
        bytes.len()
    );
    let stored = get_u64(bytes, CHECKSUM_AT).context("header")?;
    ensure!(
        crate::checksum::of_bytes_zeroing(bytes, CHECKSUM_AT..CHECKSUM_AT + 8) == stored,
        "checksum mismatch: the file is damaged"
    );
    let header = Header {
        max_n: get_u32(bytes, 12).context("header")?,
        fingerprint: get_u64(bytes, 16).context("header")?,
        top_t_kind: get_u32(bytes, 24).context("header")?,
        tree_nodes: get_u32(bytes, 28).context("header")?,
        top_t_value: get_u64(bytes, 32).context("header")?,
        continuation_len: get_u32(bytes, 40).context("header")?,
        max_occurrences: get_u32(bytes, 44).context("header")?,
    };
    ensure!(
        header.fingerprint == expected_fingerprint,
        "built for another tokenizer (fingerprint {:016x}, expected {expected_fingerprint:016x})",
        header.fingerprint
    );
    ensure!((1..=64).contains(&header.max_n), "implausible max_n {}", header.max_n);
    ensure!(HEADER_LEN + header.max_n as usize * DIR_ENTRY_LEN <= bytes.len(), "file is truncated (directory)");
    Ok(header)
}

/// Finds the stored tree of `key` (whose length selects the table).
/// Returns `None` when absent or when the bytes do not hold together.
pub fn lookup<'a>(bytes: &'a [u8], max_n: usize, key: &[u32]) -> Option<TreeView<'a>> {
    let n = key.len();
    if n == 0 || n > max_n {
        return None;
    }
    let dir = HEADER_LEN + (n - 1) * DIR_ENTRY_LEN;
    let table_at = usize::try_from(get_u64(bytes, dir)?).ok()?;
    let slots = usize::try_from(get_u64(bytes, dir + 8)?).ok()?;
    if slots == 0 || !slots.is_power_of_two() {
        return None;
    }
    let hash = key_hash(key);
    let mask = slots - 1;
    let mut s = hash as usize & mask;
    for _ in 0..slots {
        let slot = table_at + s * SLOT_LEN;
        let entry = get_u64(bytes, slot + 8)?;
        if entry == EMPTY_SLOT {
            return None;
        }
        if get_u64(bytes, slot)? == hash {
            let at = usize::try_from(entry).ok()?;
            let stored = (0..n).map(|i| get_u32(bytes, at + 4 * i));
            if stored.zip(key).all(|(t, &k)| t == Some(k)) {
                let count_at = at + 4 * n;
                let nodes = usize::from(u16::from_le_bytes(bytes.get(count_at..count_at + 2)?.try_into().ok()?));
                let body = bytes.get(count_at + 2..count_at + 2 + nodes * NODE_LEN)?;
                return Some(TreeView { body });
            }
        }
        s = (s + 1) & mask;
    }
    None
}

/// Number of entries stored per n (index 0 is n = 1).
pub fn entry_counts(bytes: &[u8], max_n: usize) -> Vec<u64> {
    (0..max_n).map(|i| get_u64(bytes, HEADER_LEN + i * DIR_ENTRY_LEN + 16).unwrap_or(0)).collect()
}

/// The stored nodes of one tree.
pub struct TreeView<'a> {
    body: &'a [u8],
}

impl TreeView<'_> {
    pub fn nodes(&self) -> impl Iterator<Item = Node> + '_ {
        self.body.chunks_exact(NODE_LEN).map(|c| Node {
            token: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            excess: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            depth: c[8],
        })
    }
}

fn put_u32(out: &mut [u8], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut [u8], at: usize, v: u64) {
    out[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn get_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at.checked_add(8)?)?.try_into().ok()?))
}
