use super::*;
use crate::tree::{build, DraftTree};

fn dictionaries(ngram: usize) -> NgramDictionaries {
    NgramDictionaries::new(DictionaryLimits { ngram, ..DictionaryLimits::default() })
}

fn forward(d: &NgramDictionaries, token: u32) -> Vec<Vec<u32>> {
    d.forward(token).iter().map(|c| c.as_slice().to_vec()).collect()
}

#[test]
fn backward_search_follows_the_longest_known_suffix() {
    let mut d = dictionaries(4);
    // After "1 2" comes 3, but after "9 1 2" comes 7.
    d.add_sequence(&[1, 2, 3, 4, 5, 9, 1, 2, 7, 8], 0);
    assert_eq!(d.backward_guess(&[9, 1, 2], 8), (vec![7, 8], 3));
    // With only "5 1 2" (unknown as a whole), "1 2" answers: the last seen wins (7).
    assert_eq!(d.backward_guess(&[5, 1, 2], 1), (vec![7], 2));
    assert_eq!(d.backward_guess(&[6, 6], 8), (vec![], 0), "nothing known after 6");
}

#[test]
fn suffixes_of_repeated_and_zero_tokens_are_told_apart() {
    let mut d = dictionaries(4);
    d.add(&[7, 0], 1, 1);
    d.add(&[0, 0, 0], 3, 3);
    d.add(&[5, 0, 0], 2, 2);
    assert_eq!(d.backward_guess(&[7, 0], 1), (vec![1], 2));
    assert_eq!(d.backward_guess(&[0, 0, 0], 1), (vec![3], 3));
    assert_eq!(d.backward_guess(&[9, 0, 0], 1), (vec![2], 2));
    assert_eq!(d.backward_guess(&[9, 0], 1), (vec![2], 1));
}

#[test]
fn backward_guesses_have_varying_length_up_to_the_limit() {
    let mut d = dictionaries(3);
    d.add_sequence(&[10, 11, 12, 13, 14, 15], 0);
    assert_eq!(d.backward_guess(&[10, 11], 3).0, vec![12, 13, 14]);
    assert_eq!(d.backward_guess(&[10, 11], 10).0, vec![12, 13, 14, 15]);
}

#[test]
fn every_subsequence_of_an_ngram_is_stored_in_both_dictionaries() {
    let mut d = dictionaries(4);
    d.add(&[1, 2, 3], 4, 4);
    for suffix in [&[3][..], &[2, 3], &[1, 2, 3]] {
        assert_eq!(d.backward_guess(suffix, 1).0, vec![4], "{suffix:?}");
    }
    assert_eq!(forward(&d, 1), vec![vec![2, 3, 4]]);
    assert_eq!(forward(&d, 2), vec![vec![3, 4]]);
    assert_eq!(forward(&d, 3), vec![vec![4]]);
    // Only the last N−1 history tokens count.
    d.add(&[8, 1, 2, 3], 5, 5);
    assert_eq!(d.backward_guess(&[1, 2, 3], 1).0, vec![5]);
    assert!(d.forward(8).is_empty());
}

#[test]
fn forward_continuations_are_newest_first_merged_by_prefix_and_bounded() {
    let limits = DictionaryLimits { ngram: 4, continuations_per_key: 2, ..DictionaryLimits::default() };
    let mut d = NgramDictionaries::new(limits);
    d.add_sequence(&[1, 2, 3, 4], 0);
    assert_eq!(forward(&d, 1), vec![vec![2, 3, 4]], "shorter prefixes were extended, not kept apart");
    d.add_sequence(&[1, 5, 6], 0);
    d.add_sequence(&[1, 2], 0);
    assert_eq!(forward(&d, 1), vec![vec![2, 3, 4], vec![5, 6]], "a known prefix moves its entry first");
    d.add_sequence(&[1, 7], 0);
    assert_eq!(forward(&d, 1), vec![vec![7], vec![2, 3, 4]]);
    assert!(d.forward_has(1, 7) && !d.forward_has(1, 5));
}

#[test]
fn dictionaries_stay_within_their_bounds() {
    let limits = DictionaryLimits { ngram: 5, continuations_per_key: 3, forward_keys: 64, backward_entries: 256 };
    let mut d = NgramDictionaries::new(limits);
    let tokens: Vec<u32> = (0..20_000u32).map(|i| i.wrapping_mul(2_654_435_761) % 5000).collect();
    d.add_sequence(&tokens, 0);
    let (forward_keys, backward_entries) = d.sizes();
    assert!(forward_keys <= 64 && backward_entries <= 256, "{forward_keys} {backward_entries}");
    assert!((0..5000).all(|t| d.forward(t).len() <= 3));
    // The newest n-grams are still there.
    let tail = &tokens[tokens.len() - 5..];
    assert_eq!(d.backward_guess(&tail[..4], 1).0, vec![tail[4]]);
}

const VOCAB: usize = 16;

/// Logits whose largest value at node i is `best[i]` and second `second[i]`.
fn logits(best: &[u32], second: &[u32]) -> Vec<f32> {
    let mut logits = vec![0.0; best.len() * VOCAB];
    for node in 0..best.len() {
        logits[node * VOCAB + second[node] as usize] = 1.0;
        logits[node * VOCAB + best[node] as usize] = 2.0;
    }
    logits
}

fn config(tau: f64) -> SpectraConfig {
    SpectraConfig {
        limits: DictionaryLimits { ngram: 4, ..DictionaryLimits::default() },
        tau,
        ..SpectraConfig::default()
    }
}

/// The tree 3 → (4 → 5) and 3 → 6, with only 4 accepted.
fn verified_tree() -> DraftTree {
    let candidates = [
        Candidate { tokens: vec![4, 5], weight: 2.0, source: Source::Fixed, matched: 0 },
        Candidate { tokens: vec![6], weight: 1.0, source: Source::Fixed, matched: 0 },
    ];
    build(3, &candidates, 8, 8)
}

#[test]
fn rejected_branches_teach_what_the_model_would_write_after_them() {
    let shared = config(1.0).dictionaries();
    let mut drafter = SpectraDrafter::new(config(1.0), shared.clone());
    let tree = verified_tree();
    let node = |tokens: &[u32]| {
        let mut at = 0;
        for &t in tokens {
            at = tree.child_with_token(at, t).unwrap();
        }
        at
    };
    let (four, five, six) = (node(&[4]), node(&[4, 5]), node(&[6]));
    let mut best = vec![0; tree.len()];
    let mut second = vec![1; tree.len()];
    (best[0], best[four], best[five], best[six]) = (4, 9, 12, 13);
    second[six] = 14;
    let logits = logits(&best, &second);
    let step = VerifiedStep { tree: &tree, path: &[0, four], logits: &logits, vocab: VOCAB };
    drafter.observe_verified(&[1, 2, 3], &step);
    let d = shared.lock().unwrap();
    // After "2 3 4 5" the model writes 12; after "1 2 3 6", 13.
    assert_eq!(d.backward_guess(&[2, 3, 4, 5], 1), (vec![12], 3));
    assert_eq!(d.backward_guess(&[1, 2, 3, 6], 1), (vec![13], 3));
    // Draft tokens are no knowledge, and the accepted node's prediction arrives as output.
    assert!(d.backward_guess(&[7, 3, 4], 1).0.is_empty());
    assert_eq!(forward(&d, 6), vec![vec![13]]);
}

#[test]
fn tau_decides_whether_a_known_prediction_gives_way_to_the_next_likely_token() {
    for (tau, learned) in [(0.0, 14), (1.0, 13)] {
        let shared = config(tau).dictionaries();
        shared.lock().unwrap().add(&[6], 13, 13);
        let mut drafter = SpectraDrafter::new(config(tau), shared.clone());
        let tree = verified_tree();
        let six = tree.child_with_token(0, 6).unwrap();
        let mut best = vec![0; tree.len()];
        best[0] = 4;
        best[six] = 13;
        let mut second = vec![1; tree.len()];
        second[six] = 14;
        let four = tree.child_with_token(0, 4).unwrap();
        let step = VerifiedStep { tree: &tree, path: &[0, four], logits: &logits(&best, &second), vocab: VOCAB };
        drafter.observe_verified(&[1, 2, 3], &step);
        let d = shared.lock().unwrap();
        assert_eq!(forward(&d, 6)[0], vec![learned], "tau {tau}");
        assert_eq!(d.backward_guess(&[2, 3, 6], 1).0, vec![13], "S_bwd keeps the most likely token (tau {tau})");
    }
}

#[test]
fn guesses_come_from_both_directions_backward_first_and_weigh_the_configured_total() {
    let shared = config(0.1).dictionaries();
    let mut first = SpectraDrafter::new(config(0.1), shared.clone());
    let mut out = Vec::new();
    first.propose(&[1, 2, 3, 4, 9, 3, 5, 6, 8, 3, 7], &mut out);
    // A later request (another drafter) sees what the first one learned.
    let mut later = SpectraDrafter::new(config(0.1), shared.clone());
    out.clear();
    later.propose(&[0, 9, 3], &mut out);
    assert_eq!(out[0].tokens, vec![5, 6, 8, 3, 7], "backward: after '9 3' came 5 6 8 3 7 (backward_len tokens)");
    assert_eq!(out[0].matched, 2);
    let forward: Vec<&[u32]> = out[1..].iter().map(|c| c.tokens.as_slice()).collect();
    assert_eq!(forward, vec![&[7][..], &[5, 6, 8], &[4, 9, 3]], "forward: continuations of 3, newest first");
    assert!(out.iter().all(|c| c.source == Source::Internal));
    let total: f32 = out.iter().map(|c| c.weight).sum();
    assert!((total / config(0.1).weight - 1.0).abs() < 1e-6, "{total}");
    assert!(out[1].weight > out[2].weight && out[2].weight > out[3].weight);
}

#[test]
fn the_output_of_a_request_is_learned_up_to_its_last_token() {
    let shared = config(0.1).dictionaries();
    let mut drafter = SpectraDrafter::new(config(0.1), shared.clone());
    drafter.propose(&[1, 2], &mut Vec::new());
    drafter.observe(&[1, 2], &[20, 21, 22], None);
    assert_eq!(shared.lock().unwrap().backward_guess(&[1, 2], 8).0, vec![20, 21, 22]);
}

#[test]
fn at_most_g_guesses() {
    let shared = config(0.1).dictionaries();
    for next in 10..40 {
        shared.lock().unwrap().add(&[5], next, next);
    }
    let mut drafter = SpectraDrafter::new(SpectraConfig { max_guesses: 4, ..config(0.1) }, shared);
    let mut out = Vec::new();
    drafter.propose(&[5], &mut out);
    assert_eq!(out.len(), 4);
}
