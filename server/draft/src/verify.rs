//! Verification of a draft tree against the model's logits, greedy and
//! sampled. Both are lossless: greedy yields exactly the tokens plain greedy
//! decoding would, sampling yields tokens distributed exactly as the model's
//! (tempered, nucleus-filtered) distribution.

use crate::tree::DraftTree;
use rand::Rng;

/// What one verification step produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Accepted tree nodes, starting with the root (node 0).
    pub path: Vec<usize>,
    /// The model's choice after the last accepted node; the next pending token.
    pub bonus: u32,
}

impl Verdict {
    /// Number of accepted draft tokens (the root is not a draft).
    pub fn accepted(&self) -> usize {
        self.path.len() - 1
    }
}

/// Index of the largest logit; the first one wins ties, as in plain greedy
/// decoding with this function. NaN logits are never chosen (0 when all are).
pub fn argmax(logits: &[f32]) -> u32 {
    first_index_of(logits, lane_max(logits), None).unwrap_or(0) as u32
}

/// The two largest logits' indices, the largest first: [`argmax`], then the
/// first index of the largest logit among the others (the first index again
/// when there are no others).
pub fn top_two(logits: &[f32]) -> (u32, u32) {
    let (largest, second) = lane_top_two(logits);
    let Some(best) = first_index_of(logits, largest, None) else { return (0, 0) };
    (best as u32, first_index_of(logits, second, Some(best)).unwrap_or(best) as u32)
}

/// Lanes of the searches below. Independent lanes let the compiler keep them in
/// vector registers, where one running maximum is a chain of compares and
/// branches: over 49,152 logits `argmax` took 23 µs that way and takes 4.4 µs
/// so, `top_two` 24 and 7.3 µs (AMD Zen 5).
const LANES: usize = 16;

fn larger(current: f32, value: f32) -> f32 {
    if value > current {
        value
    } else {
        current
    }
}

/// The largest value that is not NaN (−∞ when there is none).
fn lane_max(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for chunk in chunks.by_ref() {
        for (lane, &value) in lanes.iter_mut().zip(chunk) {
            *lane = larger(*lane, value);
        }
    }
    lanes.iter().chain(chunks.remainder()).fold(f32::NEG_INFINITY, |max, &value| larger(max, value))
}

/// The largest and the second largest values that are not NaN, counting equal
/// values apart (the second is the largest again when it occurs twice).
fn lane_top_two(values: &[f32]) -> (f32, f32) {
    let push = |(first, second): (f32, f32), value: f32| {
        let lower = if value > first { first } else { value };
        (larger(first, value), larger(second, lower))
    };
    let (mut firsts, mut seconds) = ([f32::NEG_INFINITY; LANES], [f32::NEG_INFINITY; LANES]);
    let mut chunks = values.chunks_exact(LANES);
    for chunk in chunks.by_ref() {
        for ((first, second), &value) in firsts.iter_mut().zip(seconds.iter_mut()).zip(chunk) {
            (*first, *second) = push((*first, *second), value);
        }
    }
    let lanes = firsts.iter().chain(&seconds).chain(chunks.remainder());
    lanes.fold((f32::NEG_INFINITY, f32::NEG_INFINITY), |top, &value| push(top, value))
}

/// The first index holding `target`, other than `skip`: a chunk at a time, then
/// within the first chunk that holds it.
fn first_index_of(values: &[f32], target: f32, skip: Option<usize>) -> Option<usize> {
    let holds = |chunk: &[f32]| chunk.iter().fold(false, |any, &value| any | (value == target));
    values
        .chunks(LANES)
        .enumerate()
        .filter(|(_, chunk)| holds(chunk))
        .flat_map(|(c, chunk)| {
            chunk.iter().enumerate().filter(move |&(_, &value)| value == target).map(move |(i, _)| c * LANES + i)
        })
        .find(|&index| Some(index) != skip)
}

fn node_logits(logits: &[f32], vocab: usize, node: usize) -> &[f32] {
    &logits[node * vocab..(node + 1) * vocab]
}

/// Greedy verification: follow the child that carries the model's argmax as
/// long as there is one.
pub fn verify_greedy(tree: &DraftTree, logits: &[f32], vocab: usize) -> Verdict {
    let mut path = vec![0];
    let mut node = 0;
    loop {
        let choice = argmax(node_logits(logits, vocab, node));
        match tree.child_with_token(node, choice) {
            Some(child) => {
                path.push(child);
                node = child;
            }
            None => return Verdict { path, bonus: choice },
        }
    }
}

/// Sampling settings; `temperature` must be positive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
}

/// The model's next-token distribution for one node: softmax of the logits
/// divided by the temperature, restricted to the smallest set of tokens whose
/// mass reaches `top_p`, renormalised.
pub fn distribution(logits: &[f32], params: &SamplingParams) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<f32> = logits.iter().map(|&l| ((l - max) / params.temperature).exp()).collect();
    normalize(&mut probs);
    if params.top_p < 1.0 {
        keep_nucleus(&mut probs, params.top_p);
        normalize(&mut probs);
    }
    probs
}

/// Zeroes every token outside the nucleus: the most likely tokens (ties: the lower id first)
/// whose summed mass first reaches `top_p`. Only as many tokens as the nucleus needs are sorted
/// (a few dozen of a vocabulary of tens of thousands, usually), with the same result as sorting
/// them all.
fn keep_nucleus(probs: &mut [f32], top_p: f32) {
    let by_probability = |a: &usize, b: &usize| probs[*b].total_cmp(&probs[*a]).then(a.cmp(b));
    let mut order: Vec<usize> = (0..probs.len()).collect();
    let mut head = order.len().min(64);
    let keep = loop {
        if head < order.len() {
            order.select_nth_unstable_by(head - 1, by_probability);
        }
        order[..head].sort_by(by_probability);
        let mut mass = 0.0;
        let reached = order[..head].iter().position(|&token| {
            mass += probs[token];
            mass >= top_p
        });
        match reached {
            Some(rank) => break rank + 1,
            None if head == order.len() => break head,
            None => head = order.len().min(head * 4),
        }
    };
    for &token in &order[keep..] {
        probs[token] = 0.0;
    }
}

fn normalize(probs: &mut [f32]) {
    let total: f32 = probs.iter().sum();
    if total > 0.0 {
        probs.iter_mut().for_each(|p| *p /= total);
    }
}

/// Draws a token from a normalised distribution.
pub fn sample(probs: &[f32], rng: &mut impl Rng) -> u32 {
    let target = rng.random::<f64>();
    let mut mass = 0.0;
    let mut last_nonzero = 0;
    for (token, &p) in probs.iter().enumerate() {
        if p > 0.0 {
            mass += f64::from(p);
            last_nonzero = token;
            if target < mass {
                return token as u32;
            }
        }
    }
    last_nonzero as u32
}

/// Sampling verification for deterministic drafts (SPECTRA Alg. 4, the
/// multi-candidate form of speculative sampling): at each node, try the
/// children in order; accept child token x with probability p(x); on
/// rejection set p(x) = 0 and renormalise. If every child is rejected, the
/// bonus token is drawn from what remains. The accepted tokens are therefore
/// distributed exactly as sampling from p step by step.
///
/// Every drafter of this crate is deterministic (a draft is a point mass, not a
/// distribution), so this one rule serves every strategy, whatever the tree's
/// shape: a child token x_i is chosen with probability
/// (1 - p(x_1) - … - p(x_{i-1})) · p(x_i) / (1 - p(x_1) - … - p(x_{i-1})) = p(x_i),
/// and a token no child carries with its own p(y). The children of a node carry
/// distinct tokens (the tree is a trie).
pub fn verify_sampling(
    tree: &DraftTree,
    logits: &[f32],
    vocab: usize,
    params: &SamplingParams,
    rng: &mut impl Rng,
) -> Verdict {
    let mut path = vec![0];
    let mut node = 0;
    'descend: loop {
        let mut probs = distribution(node_logits(logits, vocab, node), params);
        for child in tree.children(node).collect::<Vec<_>>() {
            let token = tree.tokens[child] as usize;
            if rng.random::<f64>() < f64::from(probs[token]) {
                path.push(child);
                node = child;
                continue 'descend;
            }
            probs[token] = 0.0;
            normalize(&mut probs);
        }
        return Verdict { path, bonus: sample(&probs, rng) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drafter::{Candidate, Source};
    use crate::tree::build;
    use rand::{rngs::StdRng, SeedableRng};

    const VOCAB: usize = 4;

    fn tree_of(paths: &[&[u32]]) -> DraftTree {
        let candidates: Vec<Candidate> = paths
            .iter()
            .map(|p| Candidate { tokens: p.to_vec(), weight: 1.0, source: Source::Fixed, matched: 0 })
            .collect();
        build(0, &candidates, 64, 8)
    }

    /// Logits whose argmax at every node is `choices[node]`.
    fn logits_choosing(choices: &[u32]) -> Vec<f32> {
        let mut logits = vec![0.0; choices.len() * VOCAB];
        for (node, &c) in choices.iter().enumerate() {
            logits[node * VOCAB + c as usize] = 1.0;
        }
        logits
    }

    #[test]
    fn greedy_follows_matching_children_and_returns_bonus() {
        // Tree: root(0) -> 1 -> 2, root -> 3.
        let tree = tree_of(&[&[1, 2], &[3]]);
        let node_one = tree.child_with_token(0, 1).unwrap();
        let node_two = tree.child_with_token(node_one, 2).unwrap();
        let mut choices = vec![0; tree.len()];
        choices[0] = 1;
        choices[node_one] = 2;
        choices[node_two] = 3;
        let verdict = verify_greedy(&tree, &logits_choosing(&choices), VOCAB);
        assert_eq!(verdict.path, vec![0, node_one, node_two]);
        assert_eq!(verdict.bonus, 3);
        assert_eq!(verdict.accepted(), 2);
    }

    #[test]
    fn greedy_rejects_at_root_when_no_child_matches() {
        let tree = tree_of(&[&[1, 2]]);
        let verdict = verify_greedy(&tree, &logits_choosing(&vec![2; tree.len()]), VOCAB);
        assert_eq!(verdict, Verdict { path: vec![0], bonus: 2 });
    }

    #[test]
    fn argmax_prefers_the_first_of_equal_values() {
        assert_eq!(argmax(&[0.5, 2.0, 2.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NAN, -3.0, f32::NAN]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY; 3]), 0);
        assert_eq!(argmax(&[f32::NAN; 2]), 0);
    }

    /// The chunked search finds what one running maximum over the logits finds, on
    /// vocabularies with ties inside and across its lanes.
    #[test]
    fn argmax_and_top_two_equal_a_running_maximum() {
        fn running(values: &[f32], skip: Option<usize>) -> Option<usize> {
            let mut best: Option<usize> = None;
            for (i, &v) in values.iter().enumerate().filter(|&(i, _)| Some(i) != skip) {
                if best.is_none_or(|b| v > values[b]) {
                    best = Some(i);
                }
            }
            best
        }
        let mut rng = StdRng::seed_from_u64(11);
        for len in [1, 2, 15, 16, 17, 33, 1000, 49_152] {
            for levels in [2u32, 50, 1 << 20] {
                let logits: Vec<f32> = (0..len).map(|_| rng.random_range(0..levels) as f32).collect();
                let best = running(&logits, None).unwrap();
                let second = running(&logits, Some(best)).unwrap_or(best);
                assert_eq!(argmax(&logits), best as u32, "len {len}, levels {levels}");
                assert_eq!(top_two(&logits), (best as u32, second as u32), "len {len}, levels {levels}");
            }
        }
        assert_eq!(top_two(&[f32::NEG_INFINITY; 3]), (0, 1));
        assert_eq!(top_two(&[2.0, f32::NAN, 1.0]), (0, 2));
        assert_eq!(top_two(&[0.1, 3.0, 2.0, 3.0]), (1, 3));
        assert_eq!(top_two(&[5.0, 1.0, 4.0]), (0, 2));
        assert_eq!(top_two(&[1.0]), (0, 0));
    }

    #[test]
    fn top_p_keeps_the_smallest_sufficient_set() {
        let params = SamplingParams { temperature: 1.0, top_p: 0.6, seed: 0 };
        let logits = [3.0f32.ln(), 2.0f32.ln(), 1.0f32.ln(), f32::NEG_INFINITY];
        let probs = distribution(&logits, &params);
        assert!((probs[0] - 0.6).abs() < 1e-6 && (probs[1] - 0.4).abs() < 1e-6);
        assert_eq!(&probs[2..], &[0.0, 0.0]);
    }

    /// The nucleus found by sorting only the head of the vocabulary is the one a full sort finds.
    #[test]
    fn partial_nucleus_equals_the_fully_sorted_one() {
        let mut rng = StdRng::seed_from_u64(3);
        for (vocab, spread) in [(5000, 8.0f32), (5000, 0.5), (300, 3.0), (10, 1.0)] {
            let logits: Vec<f32> = (0..vocab).map(|_| rng.random::<f32>() * spread).collect();
            for top_p in [0.05f32, 0.5, 0.9, 0.99, 0.999_999] {
                let params = SamplingParams { temperature: 1.0, top_p, seed: 0 };
                let mut expected = distribution(&logits, &SamplingParams { top_p: 1.0, ..params });
                let mut order: Vec<usize> = (0..vocab).collect();
                order.sort_by(|&a, &b| expected[b].total_cmp(&expected[a]).then(a.cmp(&b)));
                let mut mass = 0.0;
                let keep = order.iter().position(|&t| {
                    mass += expected[t];
                    mass >= top_p
                });
                for &token in &order[keep.map_or(vocab, |rank| rank + 1)..] {
                    expected[token] = 0.0;
                }
                normalize(&mut expected);
                assert_eq!(distribution(&logits, &params), expected, "vocab {vocab}, spread {spread}, top_p {top_p}");
            }
        }
    }

    /// The first produced token must follow the model's distribution whatever
    /// the drafts are: compare empirical frequencies with p.
    #[test]
    fn sampling_verification_preserves_the_distribution() {
        let params = SamplingParams { temperature: 0.8, top_p: 1.0, seed: 0 };
        let root_logits = [1.0f32, 0.2, -0.5, 0.7];
        let expected = distribution(&root_logits, &params);
        let tree = tree_of(&[&[2, 1], &[3]]);
        let mut logits = vec![0.0; tree.len() * VOCAB];
        logits[..VOCAB].copy_from_slice(&root_logits);
        let mut rng = StdRng::seed_from_u64(7);
        let trials = 200_000;
        let mut counts = [0usize; VOCAB];
        for _ in 0..trials {
            let verdict = verify_sampling(&tree, &logits, VOCAB, &params, &mut rng);
            let first = if verdict.path.len() > 1 { tree.tokens[verdict.path[1]] } else { verdict.bonus };
            counts[first as usize] += 1;
        }
        for token in 0..VOCAB {
            let observed = counts[token] as f32 / trials as f32;
            assert!((observed - expected[token]).abs() < 0.006, "token {token}: {observed} vs {}", expected[token]);
        }
    }
}
