use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::*;

fn opts(max_suffix: usize, min_suffix: usize, continuation_len: usize, max_matches: usize) -> QueryOptions {
    QueryOptions { max_suffix, min_suffix, continuation_len, max_matches }
}

/// Brute force: scan every position of every file for the longest suffix.
fn oracle(files: &BTreeMap<String, Vec<u32>>, context: &[u32], o: &QueryOptions) -> Option<Retrieval> {
    let max_len = o.max_suffix.min(MAX_SUFFIX).min(context.len());
    for len in (o.min_suffix.max(1)..=max_len).rev() {
        let suffix = &context[context.len() - len..];
        let mut counts: HashMap<Vec<u32>, u32> = HashMap::new();
        for tokens in files.values() {
            for end in len..tokens.len() {
                if &tokens[end - len..end] == suffix {
                    let stop = tokens.len().min(end + o.continuation_len);
                    *counts.entry(tokens[end..stop].to_vec()).or_default() += 1;
                }
            }
        }
        if !counts.is_empty() {
            let mut continuations: Vec<Continuation> =
                counts.into_iter().map(|(tokens, count)| Continuation { tokens, count }).collect();
            continuations.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.tokens.cmp(&b.tokens)));
            return Some(Retrieval { matched_len: len, continuations });
        }
    }
    None
}

fn build(files: &BTreeMap<String, Vec<u32>>) -> RepositoryStore {
    let mut store = RepositoryStore::new();
    store.upsert_files(
        files
            .iter()
            .map(|(path, tokens)| FileUpdate { path: path.clone(), tokens: tokens.clone(), stamp: None })
            .collect(),
    );
    store
}

fn cont(tokens: &[u32], count: u32) -> Continuation {
    Continuation { tokens: tokens.to_vec(), count }
}

#[test]
fn longest_suffix_wins_and_counts_merge() {
    let mut store = RepositoryStore::new();
    store.upsert_file("a.py", vec![1, 2, 3, 4, 5, 9, 2, 3, 6, 7]);
    store.upsert_file("b.py", vec![8, 2, 3, 6, 7, 2, 3]);
    let o = QueryOptions::default();

    // [1, 2, 3] occurs once, so the 3-token suffix wins over [2, 3] (4 times).
    let r = store.query(&[0, 1, 2, 3], &o).unwrap();
    assert_eq!(r.matched_len, 3);
    assert_eq!(r.continuations, vec![cont(&[4, 5, 9, 2, 3, 6, 7], 1)]);

    // Only [2, 3] matches: three occurrences have a continuation (the one at
    // the end of b.py has none and does not count); equal counts sort by tokens.
    let r = store.query(&[5, 5, 2, 3], &o).unwrap();
    assert_eq!(r.matched_len, 2);
    assert_eq!(r.continuations, vec![cont(&[4, 5, 9, 2, 3, 6, 7], 1), cont(&[6, 7], 1), cont(&[6, 7, 2, 3], 1)]);

    // Continuation length is capped and identical continuations merge.
    let r = store.query(&[2, 3], &opts(16, 2, 1, 100)).unwrap();
    assert_eq!(r.continuations, vec![cont(&[6], 2), cont(&[4], 1)]);

    // Suffixes shorter than min_suffix do not count.
    assert!(store.query(&[7, 3], &o).is_none());
    assert_eq!(store.query(&[7, 3], &opts(16, 1, 10, 100)).unwrap().matched_len, 1);
    // max_suffix caps the match.
    assert_eq!(store.query(&[0, 1, 2, 3], &opts(2, 2, 10, 100)).unwrap().matched_len, 2);
    // Too short a context, or an unknown token.
    assert!(store.query(&[3], &o).is_none());
    assert!(store.query(&[42, 43], &o).is_none());
}

#[test]
fn max_matches_limits_occurrences_read() {
    let mut store = RepositoryStore::new();
    store.upsert_file("a", vec![1, 2, 10, 1, 2, 11, 1, 2, 12]);
    let r = store.query(&[1, 2], &opts(16, 2, 10, 2)).unwrap();
    let total: u32 = r.continuations.iter().map(|c| c.count).sum();
    assert_eq!(total, 2);
}

#[test]
fn generation_tracks_changes_and_files_are_listed() {
    let mut store = RepositoryStore::new();
    let g0 = store.generation();
    store.upsert_file("b", vec![1, 2, 3]);
    store.upsert_file("a", vec![4, 5]);
    assert!(store.generation() > g0);
    assert_eq!(store.files().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(store.token_count(), 5);

    let g = store.generation();
    store.upsert_file_stamped("b", vec![1, 2, 3], Some(Stamp([3, 7])));
    assert_eq!(store.generation(), g, "same tokens: no visible change");
    assert_eq!(store.stamp("b"), Some(Stamp([3, 7])));

    assert!(store.rename_file("b", "c"));
    assert!(store.generation() > g);
    assert_eq!(store.stamp("c"), Some(Stamp([3, 7])));
    assert!(!store.rename_file("b", "d"));
    assert!(store.rename_file("c", "a"), "rename replaces the target");
    assert_eq!(store.files().collect::<Vec<_>>(), ["a"]);
    assert_eq!(store.file_tokens("a"), Some(&[1, 2, 3][..]));
    assert_eq!(store.token_count(), 3);
    assert!(store.remove_file("a"));
    assert!(!store.remove_file("a"));
    assert_eq!(store.token_count(), 0);
    assert_eq!(store.index.len(), 0);
}

/// Brute force of [`RepositoryStore::files_sharing`]: every distinct n-gram of `context`, its
/// occurrences followed by a token, the files of the uncommon ones counted.
fn sharing_oracle(
    files: &BTreeMap<String, Vec<u32>>,
    context: &[u32],
    n: usize,
    max_occurrences: usize,
    exclude: Option<&str>,
) -> Vec<(String, usize)> {
    let grams: std::collections::BTreeSet<&[u32]> = context.windows(n).collect();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for gram in grams {
        let holders: Vec<&String> = files
            .iter()
            .flat_map(|(path, tokens)| {
                (n..tokens.len()).filter(|&end| &tokens[end - n..end] == gram).map(move |_| path)
            })
            .collect();
        if holders.len() > max_occurrences {
            continue;
        }
        let distinct: std::collections::BTreeSet<&String> = holders.into_iter().collect();
        for path in distinct.into_iter().filter(|path| Some(path.as_str()) != exclude) {
            *counts.entry(path.clone()).or_default() += 1;
        }
    }
    let mut ranked: Vec<(String, usize)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked
}

#[test]
fn files_sharing_counts_distinct_uncommon_ngrams_per_file() {
    let mut store = RepositoryStore::new();
    store.upsert_file("current.py", vec![1, 2, 3, 4, 5, 6, 0]);
    store.upsert_file("close.py", vec![9, 2, 3, 4, 9, 5, 6, 0, 2, 3, 4, 0]);
    store.upsert_file("far.py", vec![5, 6, 8, 7, 7, 7, 7, 7, 7]);
    store.upsert_file("common.py", vec![7, 7, 7, 7, 7, 7, 7]);
    let context = [2, 3, 4, 7, 7, 5, 6];
    // [2, 3] and [3, 4] are in close.py (twice each: counted once), [5, 6] in close.py and far.py;
    // [7, 7] occurs 9 times: too common for a cap of 4. The current file is never listed.
    let ranked = store.files_sharing(&[&context], 2, 4, Some("current.py"));
    assert_eq!(ranked, [("close.py", 3), ("far.py", 1)]);
    // Split in contexts: [7, 7] spans two and is not looked up; [2, 3], in two, counts once.
    let ranked = store.files_sharing(&[&context[..4], &context[4..], &context[..2]], 2, 4, Some("current.py"));
    assert_eq!(ranked, [("close.py", 3), ("far.py", 1)]);
    // Without the cap [7, 7] counts too; without the exclusion the current file is listed.
    let ranked = store.files_sharing(&[&context], 2, 100, None);
    assert_eq!(ranked, [("close.py", 3), ("current.py", 3), ("far.py", 2), ("common.py", 1)]);
    // n out of range, or an empty context: nothing.
    assert!(store.files_sharing(&[&context], 0, 4, None).is_empty());
    assert!(store.files_sharing(&[&context], MAX_SUFFIX + 1, 4, None).is_empty());
    assert!(store.files_sharing(&[&[]], 2, 4, None).is_empty());
}

#[derive(Clone, Debug)]
enum Op {
    Upsert(usize, Vec<u32>),
    Remove(usize),
    Rename(usize, usize),
}

fn path(i: usize) -> String {
    format!("dir/file{i}.py")
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6usize, prop::collection::vec(0..4u32, 0..40)).prop_map(|(p, t)| Op::Upsert(p, t)),
        1 => (0..6usize).prop_map(Op::Remove),
        1 => (0..6usize, 0..6usize).prop_map(|(a, b)| Op::Rename(a, b)),
    ]
}

fn query_options() -> impl Strategy<Value = QueryOptions> {
    (1..10usize, 0..4usize, 0..6usize, 1..6usize).prop_map(|(max, min, cl, mm)| opts(max, min, cl, mm))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The live store, after any edit history, answers every query exactly
    /// like a fresh build of the final files.
    #[test]
    fn live_store_equals_fresh_build(
        ops in prop::collection::vec(op(), 1..40),
        contexts in prop::collection::vec(prop::collection::vec(0..5u32, 0..12), 20),
        options in prop::collection::vec(query_options(), 4),
    ) {
        let mut live = RepositoryStore::new();
        let mut model: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Upsert(p, tokens) => {
                    live.upsert_file(&path(p), tokens.clone());
                    model.insert(path(p), tokens);
                }
                Op::Remove(p) => {
                    prop_assert_eq!(live.remove_file(&path(p)), model.remove(&path(p)).is_some());
                }
                Op::Rename(a, b) => {
                    let existed = live.rename_file(&path(a), &path(b));
                    prop_assert_eq!(existed, model.contains_key(&path(a)));
                    if let Some(tokens) = model.remove(&path(a)) {
                        model.insert(path(b), tokens);
                    }
                }
            }
        }
        let fresh = build(&model);
        prop_assert_eq!(live.files().collect::<Vec<_>>(), fresh.files().collect::<Vec<_>>());
        prop_assert_eq!(live.token_count(), fresh.token_count());
        prop_assert_eq!(live.index.len(), fresh.index.len());
        for context in &contexts {
            for o in &options {
                prop_assert_eq!(live.query(context, o), fresh.query(context, o));
            }
        }
        // Contexts taken from the files themselves match long suffixes.
        for tokens in model.values() {
            for end in 1..=tokens.len() {
                let o = opts(16, 2, 10, 3);
                prop_assert_eq!(live.query(&tokens[..end], &o), fresh.query(&tokens[..end], &o));
            }
        }
    }

    /// With no cap on matches, the store agrees with a brute-force scan.
    #[test]
    fn store_equals_brute_force(
        files in prop::collection::btree_map("[a-d]{1,3}", prop::collection::vec(0..4u32, 0..50), 0..6),
        contexts in prop::collection::vec(prop::collection::vec(0..5u32, 0..20), 30),
        max in 1..20usize,
        min in 0..4usize,
        cl in 0..12usize,
    ) {
        let store = build(&files);
        let o = opts(max, min, cl, usize::MAX);
        for context in &contexts {
            prop_assert_eq!(store.query(context, &o), oracle(&files, context, &o));
        }
    }

    /// `files_sharing` agrees with a brute-force scan.
    #[test]
    fn files_sharing_equals_brute_force(
        files in prop::collection::btree_map("[a-d]{1,3}", prop::collection::vec(0..4u32, 0..50), 0..6),
        context in prop::collection::vec(0..5u32, 0..30),
        n in 1..5usize,
        max_occurrences in 0..12usize,
        exclude in "[a-d]{1,3}",
    ) {
        let store = build(&files);
        let ranked: Vec<(String, usize)> = store
            .files_sharing(&[&context], n, max_occurrences, Some(&exclude))
            .into_iter()
            .map(|(path, count)| (path.to_owned(), count))
            .collect();
        prop_assert_eq!(ranked, sharing_oracle(&files, &context, n, max_occurrences, Some(&exclude)));
    }

    /// save + load gives a store with the same files, stamps and answers.
    #[test]
    fn save_load_round_trip(
        files in prop::collection::btree_map("[a-z/é]{1,8}", prop::collection::vec(0..7u32, 0..60), 0..8),
        contexts in prop::collection::vec(prop::collection::vec(0..7u32, 1..10), 10),
    ) {
        let mut store = RepositoryStore::with_fingerprint(0xfeed);
        for (i, (path, tokens)) in files.iter().enumerate() {
            let stamp = (i % 2 == 0).then_some(Stamp([i as u64, 99]));
            store.upsert_file_stamped(path, tokens.clone(), stamp);
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("repo.store");
        store.save(&file).unwrap();
        let loaded = RepositoryStore::load(&file, 0xfeed).unwrap();
        prop_assert_eq!(loaded.files().collect::<Vec<_>>(), store.files().collect::<Vec<_>>());
        for path in store.files() {
            prop_assert_eq!(loaded.stamp(path), store.stamp(path));
            prop_assert_eq!(loaded.file_tokens(path), store.file_tokens(path));
        }
        let o = QueryOptions::default();
        for context in &contexts {
            prop_assert_eq!(loaded.query(context, &o), store.query(context, &o));
        }
    }
}

fn saved_store() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let mut store = RepositoryStore::with_fingerprint(7);
    store.upsert_file_stamped("src/a.py", (0..500).map(|i| i % 13).collect(), Some(Stamp([1, 2])));
    store.upsert_file("src/b.py", vec![3, 1, 4, 1, 5, 9, 2, 6]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("repo.store");
    store.save(&file).unwrap();
    let bytes = std::fs::read(&file).unwrap();
    (dir, file, bytes)
}

fn load_error(file: &std::path::Path, bytes: &[u8], fingerprint: u64) -> String {
    std::fs::write(file, bytes).unwrap();
    match RepositoryStore::load(file, fingerprint) {
        Ok(_) => panic!("a damaged file was accepted"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn truncated_files_are_rejected() {
    let (_dir, file, bytes) = saved_store();
    for len in [0, 7, 39, 40, 41, bytes.len() / 2, bytes.len() - 1] {
        let err = load_error(&file, &bytes[..len], 7);
        assert!(err.contains("too short") || err.contains("truncated"), "{len}: {err}");
    }
}

#[test]
fn foreign_and_corrupt_files_are_rejected() {
    let (_dir, file, bytes) = saved_store();
    assert!(load_error(&file, &bytes, 8).contains("another tokenizer"));

    let mut other = bytes.clone();
    other[..8].copy_from_slice(b"GGUF\0\0\0\0");
    assert!(load_error(&file, &other, 7).contains("bad magic"));

    let mut other = bytes.clone();
    other[8] = 9;
    assert!(load_error(&file, &other, 7).contains("format version 9"));

    let mut other = bytes.clone();
    let last = other.len() - 3;
    other[last] ^= 0x40;
    assert!(load_error(&file, &other, 7).contains("checksum"));

    let mut other = bytes.clone();
    other.push(0);
    assert!(load_error(&file, &other, 7).contains("padded"));

    let err = format!("{:#}", RepositoryStore::load(&file.with_extension("missing"), 7).err().unwrap());
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn save_replaces_atomically_and_leaves_no_temporary_files() {
    let (dir, file, _) = saved_store();
    let mut store = RepositoryStore::load(&file, 7).unwrap();
    store.remove_file("src/a.py");
    store.save(&file).unwrap();
    let loaded = RepositoryStore::load(&file, 7).unwrap();
    assert_eq!(loaded.files().collect::<Vec<_>>(), ["src/b.py"]);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["repo.store"]);
}
