//! Every hash copilotd persists or names files with: XXH3 (64 bits) from `xxhash-rust`.
//! Stable across runs, platforms and Rust versions, as persisted values must be; not
//! cryptographic (the default model's download is checked with SHA-256 instead).

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// The hash of `bytes`.
pub fn of_bytes(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

/// The hash of token ids (as little-endian bytes, so the same on every platform).
pub fn of_ids(ids: &[u32]) -> u64 {
    let mut hasher = Xxh3::new();
    ids.iter().for_each(|id| hasher.update(&id.to_le_bytes()));
    hasher.digest()
}

/// The hash of `bytes` with the range `zeroed` read as zeros (a checksum stored inside the
/// bytes it covers).
pub fn of_bytes_zeroing(bytes: &[u8], zeroed: std::ops::Range<usize>) -> u64 {
    let mut hasher = Xxh3::new();
    hasher.update(&bytes[..zeroed.start]);
    hasher.update(&vec![0; zeroed.len()]);
    hasher.update(&bytes[zeroed.end..]);
    hasher.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroing_a_range_is_hashing_zeros_there() {
        let bytes: Vec<u8> = (0..40).collect();
        let mut zeroed = bytes.clone();
        zeroed[8..16].fill(0);
        assert_eq!(of_bytes_zeroing(&bytes, 8..16), of_bytes(&zeroed));
        assert_ne!(of_bytes(&bytes), of_bytes(&zeroed));
    }

    #[test]
    fn ids_hash_as_little_endian_bytes() {
        assert_eq!(of_ids(&[1, 258]), of_bytes(&[1, 0, 0, 0, 2, 1, 0, 0]));
    }
}
