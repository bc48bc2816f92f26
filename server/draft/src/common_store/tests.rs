use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

const FP: u64 = 0xC0FF_EE00_1234_5678;

fn params(top_t: TopT) -> CommonParams {
    CommonParams { max_n: 3, top_t, tree_nodes: 64, continuation_len: 4, max_occurrences: 5000 }
}

fn build(seqs: &[Vec<u32>], p: CommonParams) -> CommonStore {
    CommonStore::build(seqs.iter().map(|s| s.as_slice()), p, FP).unwrap()
}

/// What an uncompacted, unpruned store must answer: every occurrence of the
/// longest matching suffix (n ≤ max_n), grouped by exact continuation.
fn brute_force(seqs: &[Vec<u32>], context: &[u32], max_n: usize, cont_len: usize) -> Option<Retrieval> {
    for n in (1..=max_n.min(context.len())).rev() {
        let key = &context[context.len() - n..];
        let mut counts: BTreeMap<Vec<u32>, u32> = BTreeMap::new();
        for s in seqs {
            for start in 0..s.len().saturating_sub(n) {
                if &s[start..start + n] == key {
                    let end = (start + n + cont_len).min(s.len());
                    *counts.entry(s[start + n..end].to_vec()).or_default() += 1;
                }
            }
        }
        if !counts.is_empty() {
            let mut continuations: Vec<Continuation> =
                counts.into_iter().map(|(tokens, count)| Continuation { tokens, count }).collect();
            continuations.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.tokens.cmp(&b.tokens)));
            return Some(Retrieval { matched_len: n, continuations });
        }
    }
    None
}

fn sample_corpus() -> Vec<Vec<u32>> {
    vec![vec![1, 2, 3, 4, 5, 1, 2, 3, 6], vec![9, 1, 2, 3, 4, 7], vec![2, 3, 4, 5]]
}

#[test]
fn answers_longest_suffix_with_counted_paths() {
    let store = build(&sample_corpus(), params(TopT::Unlimited));
    let r = store.query(&[8, 1, 2, 3]).unwrap();
    assert_eq!(r.matched_len, 3);
    let got: Vec<(Vec<u32>, u32)> = r.continuations.iter().map(|c| (c.tokens.clone(), c.count)).collect();
    assert_eq!(got, vec![(vec![4, 5, 1, 2], 1), (vec![4, 7], 1), (vec![6], 1)]);
    // [5, 3] is unseen as a 2-gram: falls back to the 1-gram [3].
    let r = store.query(&[5, 3]).unwrap();
    assert_eq!(r.matched_len, 1);
    assert_eq!(r.continuations.iter().map(|c| c.count).sum::<u32>(), 4);
    assert!(store.query(&[42]).is_none());
    assert!(store.query(&[]).is_none());
}

#[test]
fn bounded_query_respects_min_suffix() {
    let store = build(&sample_corpus(), params(TopT::Unlimited));
    assert!(store.query_bounded(&[5, 3], 3, 2).is_none());
    assert_eq!(store.query_bounded(&[1, 2, 3], 2, 1).unwrap().matched_len, 2);
}

#[test]
fn write_then_open_answers_identically() {
    let seqs: Vec<Vec<u32>> = (0..40u32).map(|i| (0..200u32).map(|j| (i * 7 + j * j) % 23).collect()).collect();
    let built = build(&seqs, CommonParams { max_n: 5, top_t: TopT::Total(300), ..CommonParams::default() });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("common.bin");
    built.write(&path).unwrap();
    let opened = CommonStore::open(&path, FP).unwrap();
    assert_eq!(opened.params(), built.params());
    assert_eq!(opened.entries_per_n(), built.entries_per_n());
    assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, built.size_bytes());
    let mut hits = 0;
    for s in &seqs {
        for end in 1..s.len() {
            let ctx = &s[end.saturating_sub(8)..end];
            let a = built.query(ctx);
            hits += usize::from(a.is_some());
            assert_eq!(a, opened.query(ctx));
        }
    }
    assert!(hits > 1000, "only {hits} hits");
    // No temporary file is left behind.
    assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
}

#[test]
fn damaged_or_foreign_files_are_rejected() {
    let store = build(&sample_corpus(), params(TopT::Unlimited));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("common.bin");
    store.write(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let error_of = |bytes: &[u8], fp: u64| {
        std::fs::write(&path, bytes).unwrap();
        format!("{:#}", CommonStore::open(&path, fp).err().expect("must be rejected"))
    };
    assert!(error_of(&good[..good.len() - 5], FP).contains("truncated"));
    assert!(error_of(&good[..10], FP).contains("truncated"));
    assert!(error_of(&[], FP).contains("truncated"));
    assert!(error_of(&good, FP ^ 1).contains("another tokenizer"));
    let mut wrong_version = good.clone();
    wrong_version[8] = 99;
    assert!(error_of(&wrong_version, FP).contains("version 99"));
    let mut foreign = good.clone();
    foreign[..8].copy_from_slice(b"GGUF\0\0\0\0");
    assert!(error_of(&foreign, FP).contains("bad magic"));
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    assert!(error_of(&flipped, FP).contains("checksum"));
    std::fs::write(&path, &good).unwrap();
    assert!(CommonStore::open(&path, FP).is_ok());
    assert!(CommonStore::open(&dir.path().join("missing.bin"), FP).is_err());
}

#[test]
fn top_t_keeps_the_most_frequent_ngrams() {
    // 2-gram [1, 2] occurs 5 times, [3, 4] 3 times, [5, 6] once.
    let seqs = vec![
        vec![1, 2, 10, 1, 2, 11, 1, 2, 12, 3, 4, 13],
        vec![1, 2, 14, 3, 4, 15, 3, 4, 16, 1, 2, 17],
        vec![5, 6, 18],
    ];
    let store = build(&seqs, CommonParams { max_n: 2, ..params(TopT::PerN(2)) });
    assert_eq!(store.entries_per_n(), vec![2, 2]);
    assert_eq!(store.query_bounded(&[1, 2], 2, 2).unwrap().continuations.len(), 5);
    assert_eq!(store.query_bounded(&[3, 4], 2, 2).unwrap().continuations.len(), 3);
    assert!(store.query_bounded(&[5, 6], 2, 2).is_none());
    // The kept 1-grams are the two most frequent with a continuation: 1, 2.
    assert!(store.query_bounded(&[2], 1, 1).is_some());
    assert!(store.query_bounded(&[1], 1, 1).is_some());
    assert!(store.query_bounded(&[3], 1, 1).is_none());
    let full = build(&seqs, CommonParams { max_n: 2, ..params(TopT::Unlimited) });
    assert!(full.query_bounded(&[5, 6], 2, 2).is_some());
    assert!(full.size_bytes() > store.size_bytes());
}

#[test]
fn trees_are_pruned_to_the_node_budget_keeping_counts() {
    let seqs: Vec<Vec<u32>> = (0..30u32).map(|i| vec![7, 100 + i % 10, 200 + i % 3, 300 + i]).collect();
    let store = build(&seqs, CommonParams { max_n: 1, tree_nodes: 12, ..params(TopT::Unlimited) });
    let r = store.query(&[7]).unwrap();
    let mut nodes: Vec<Vec<u32>> = Vec::new();
    for c in &r.continuations {
        for d in 1..=c.tokens.len() {
            if !nodes.contains(&c.tokens[..d].to_vec()) {
                nodes.push(c.tokens[..d].to_vec());
            }
        }
    }
    assert!(nodes.len() <= 12, "{} nodes", nodes.len());
    // All 30 occurrences are still counted at the first level.
    assert_eq!(r.continuations.iter().map(|c| c.count).sum::<u32>(), 30);
}

#[test]
fn frequent_ngrams_are_sampled_with_scaled_counts() {
    let seqs: Vec<Vec<u32>> = (0..1000u32).map(|i| vec![5, i / 250]).collect();
    let store = build(&seqs, CommonParams { max_n: 1, max_occurrences: 100, ..params(TopT::Unlimited) });
    let r = store.query(&[5]).unwrap();
    let counts: Vec<u32> = r.continuations.iter().map(|c| c.count).collect();
    assert_eq!(counts, vec![250, 250, 250, 250]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn full_store_matches_brute_force(
        seqs in prop::collection::vec(prop::collection::vec(0u32..6, 0..40), 1..6),
        contexts in prop::collection::vec(prop::collection::vec(0u32..7, 1..6), 1..20),
    ) {
        let store = build(&seqs, CommonParams { tree_nodes: 65535, ..params(TopT::Unlimited) });
        for ctx in &contexts {
            prop_assert_eq!(store.query(ctx), brute_force(&seqs, ctx, 3, 4));
        }
    }
}
