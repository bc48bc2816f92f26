//! How much of a memory-mapped file is resident, for reporting the in-memory
//! size of datastores next to their size on disk.

use std::path::Path;

/// Resident bytes of this process's mappings of the file at `path`, read
/// from `/proc/self/smaps`; `None` where that is unavailable (not Linux) or
/// the file is not mapped.
pub fn mapped_resident_bytes(path: &Path) -> Option<u64> {
    let path = path.canonicalize().ok()?;
    resident_in_smaps(&std::fs::read_to_string("/proc/self/smaps").ok()?, &path.to_string_lossy())
}

/// Sums the `Rss:` lines of the mappings named `path` in smaps text.
fn resident_in_smaps(smaps: &str, path: &str) -> Option<u64> {
    let mut in_mapping = false;
    let mut total = None;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // A mapping's header: "start-end perms offset dev inode [pathname]".
        if fields.len() >= 5 && fields[0].contains('-') && !fields[0].ends_with(':') {
            in_mapping = fields.len() >= 6 && fields[5..].join(" ") == path;
        } else if in_mapping && fields.first() == Some(&"Rss:") {
            let kb: u64 = fields.get(1)?.parse().ok()?;
            total = Some(total.unwrap_or(0) + kb * 1024);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_resident_size_of_the_named_mappings_only() {
        let smaps = "\
7f00-7f10 r--s 00000000 fd:01 42                         /cache/a b.crest
Size:                 64 kB
Rss:                  12 kB
7f10-7f20 r--p 00000000 fd:01 43                         /cache/other.crest
Rss:                 100 kB
7f20-7f30 r--s 00001000 fd:01 42                         /cache/a b.crest
Rss:                   4 kB
7f30-7f40 rw-p 00000000 00:00 0
Rss:                   8 kB
";
        assert_eq!(resident_in_smaps(smaps, "/cache/a b.crest"), Some(16 * 1024));
        assert_eq!(resident_in_smaps(smaps, "/cache/missing.crest"), None);
    }

    #[test]
    fn finds_a_store_mapped_by_this_process() {
        use copilotd_draft::common_store::{CommonParams, CommonStore};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mapped.crest");
        let corpus: Vec<u32> = (0..20_000u32).map(|i| i % 97).collect();
        CommonStore::build(std::iter::once(corpus.as_slice()), CommonParams::default(), 1)
            .unwrap()
            .write(&path)
            .unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(mapped_resident_bytes(&path), None, "not mapped yet");
        // Opening validates a checksum over every byte, so all pages are read.
        let store = CommonStore::open(&path, 1).unwrap();
        if cfg!(target_os = "linux") {
            let resident = mapped_resident_bytes(&path).unwrap();
            assert!(resident >= len && resident <= len.next_multiple_of(1 << 16), "{resident} vs {len}");
        }
        drop(store);
        assert_eq!(mapped_resident_bytes(&path), None);
    }
}
