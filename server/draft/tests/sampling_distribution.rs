//! Speculative sampling is lossless: on a toy model whose probabilities are known exactly, the
//! first tokens sampled through the decode loop follow the model's distribution, with no drafts
//! (`ar`), prompt lookup, and a drafter whose trees branch at several depths with right and
//! wrong guesses. Pearson's chi-square at a fixed level over fixed seeds decides, and the same
//! test rejects a verifier with a classic bias.

mod toy;

use copilotd_draft::budget::FixedBudget;
use copilotd_draft::cancel::CancelToken;
use copilotd_draft::decode::{DecodeHooks, DecodeOptions, DecodeStats, Session};
use copilotd_draft::drafter::{Candidate, Drafter, Source};
use copilotd_draft::pld::PromptLookup;
use copilotd_draft::tree::{self, DraftTree};
use copilotd_draft::verify::{self, distribution, verify_sampling, SamplingParams};
use copilotd_test_support::chi_square;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use toy::{toy_logits, ToyModel, VOCAB};

/// Tokens whose joint distribution is tested.
const TOKENS: usize = 3;
/// Seeds per configuration.
const SAMPLES: u64 = 20_000;
/// Repeats itself, so prompt lookup (down to one-token matches) finds some.
const PROMPT: [u32; 8] = [5, 1, 7, 5, 1, 7, 5, 1];

/// Sampling settings tested: flat and peaked, with and without a nucleus.
const SETTINGS: [(f32, f32); 2] = [(2.0, 1.0), (1.3, 0.95)];

/// Knows the model: drafts its three likeliest next tokens, each followed by its likeliest
/// continuation, plus the second likeliest token under the best one and the least likely token
/// first (always wrong in effect). Trees branch at the root and at depth 1.
struct Brancher;

fn ranked(context: &[u32]) -> Vec<u32> {
    let logits = toy_logits(context);
    let mut order: Vec<u32> = (0..VOCAB as u32).collect();
    order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    order
}

fn likeliest_path(context: &[u32], first: u32, len: usize) -> Vec<u32> {
    let mut path = vec![first];
    while path.len() < len {
        let mut sequence = context.to_vec();
        sequence.extend_from_slice(&path);
        path.push(ranked(&sequence)[0]);
    }
    path
}

impl Drafter for Brancher {
    fn propose(&mut self, context: &[u32], out: &mut Vec<Candidate>) {
        let order = ranked(context);
        let mut add =
            |tokens: Vec<u32>, weight: f32| out.push(Candidate { tokens, weight, source: Source::Fixed, matched: 0 });
        for (rank, &first) in order.iter().take(3).enumerate() {
            add(likeliest_path(context, first, 3), 3.0 - rank as f32);
        }
        let mut after_best = context.to_vec();
        after_best.push(order[0]);
        add(vec![order[0], ranked(&after_best)[1]], 0.5);
        add(vec![order[VOCAB - 1]], 0.2);
    }
}

/// The exact probability of every sequence of `TOKENS` first tokens (index: base-VOCAB digits).
fn exact_distribution(params: &SamplingParams) -> Vec<f64> {
    (0..VOCAB.pow(TOKENS as u32))
        .map(|index| {
            let tokens = digits(index, TOKENS);
            (0..TOKENS)
                .map(|i| {
                    let context: Vec<u32> = PROMPT.iter().chain(&tokens[..i]).copied().collect();
                    f64::from(distribution(&toy_logits(&context), params)[tokens[i] as usize])
                })
                .product()
        })
        .collect()
}

/// The tokens of a sequence index, first token first.
fn digits(mut index: usize, len: usize) -> Vec<u32> {
    let mut tokens = vec![0; len];
    for slot in tokens.iter_mut().rev() {
        *slot = (index % VOCAB) as u32;
        index /= VOCAB;
    }
    tokens
}

fn index_of(tokens: &[u32]) -> usize {
    tokens.iter().fold(0, |index, &t| index * VOCAB + t as usize)
}

/// Counts of the first tokens over `SAMPLES` seeds, and the summed decode statistics.
fn sampled_counts(params: SamplingParams, mut drafter: Option<Box<dyn Drafter>>) -> (Vec<u64>, DecodeStats) {
    let mut counts = vec![0u64; VOCAB.pow(TOKENS as u32)];
    let mut total = DecodeStats::default();
    let mut session = Session::new(ToyModel::default());
    for seed in 0..SAMPLES {
        let options = DecodeOptions {
            max_new_tokens: TOKENS,
            sampling: Some(SamplingParams { seed, ..params }),
            ..DecodeOptions::default()
        };
        let mut never = |_: &[u32]| false;
        let hooks = DecodeHooks { stop: &mut never, cancel: &CancelToken::new() };
        let mut budget = FixedBudget { nodes: 16, depth: 4 };
        let drafting: Option<&mut dyn Drafter> = match &mut drafter {
            Some(drafter) => Some(drafter.as_mut()),
            None => None,
        };
        let generation = session.generate(&PROMPT, &options, drafting, &mut budget, hooks).expect("toy model");
        assert_eq!(generation.tokens.len(), TOKENS);
        counts[index_of(&generation.tokens)] += 1;
        total.forward_steps += generation.stats.forward_steps;
        total.new_tokens += generation.stats.new_tokens;
    }
    (counts, total)
}

#[test]
fn speculative_sampling_follows_the_exact_distribution() {
    for (temperature, top_p) in SETTINGS {
        let params = SamplingParams { temperature, top_p, seed: 0 };
        let exact = exact_distribution(&params);
        assert!((exact.iter().sum::<f64>() - 1.0).abs() < 1e-4);
        let configurations: [(&str, Option<Box<dyn Drafter>>); 3] = [
            ("ar", None),
            ("pld", Some(Box::new(PromptLookup { min_ngram: 1, ..PromptLookup::default() }))),
            ("branching", Some(Box::new(Brancher))),
        ];
        for (name, drafter) in configurations {
            let (counts, stats) = sampled_counts(params, drafter);
            let test = chi_square::goodness_of_fit(&counts, &exact);
            eprintln!("T={temperature} top_p={top_p} {name}: {test:?}, {} steps", stats.forward_steps);
            assert!(!test.rejects(), "{name} at T={temperature}, top_p={top_p}: {test:?}");
            // Without drafts every token after the first costs one step; the brancher's drafts
            // must be both accepted (fewer steps) and rejected (more than one step) for the
            // test to mean something. (Prompt lookup's are mostly wrong on this model.)
            let ar_steps = (TOKENS as u64 - 1) * SAMPLES;
            if name == "branching" {
                let steps = stats.forward_steps as u64;
                assert!(steps < ar_steps * 19 / 20 && steps > SAMPLES, "{name}: {steps} steps vs ar {ar_steps}");
            }
        }
    }
}

/// Verification with a classic mistake: after a rejected child, the next child is accepted with
/// its unrenormalised probability, and the bonus is drawn from the full distribution.
fn biased_verify(tree: &DraftTree, logits: &[f32], params: &SamplingParams, rng: &mut StdRng) -> u32 {
    let probs = distribution(&logits[..VOCAB], params);
    for child in tree.children(0) {
        let token = tree.tokens[child];
        if rng.random::<f64>() < f64::from(probs[token as usize]) {
            return token;
        }
    }
    verify::sample(&probs, rng)
}

#[test]
fn the_test_rejects_a_biased_verifier_and_accepts_the_real_one() {
    let params = SamplingParams { temperature: 1.5, top_p: 1.0, seed: 0 };
    let context = PROMPT.to_vec();
    let mut candidates = Vec::new();
    Brancher.propose(&context, &mut candidates);
    let tree = tree::build(PROMPT[PROMPT.len() - 1], &candidates, 16, 4);
    assert!(tree.children(0).count() >= 3, "the root must branch");
    let logits: Vec<f32> = (0..tree.len()).flat_map(|_| toy_logits(&context)).collect();
    let exact: Vec<f64> = distribution(&logits[..VOCAB], &params).iter().map(|&p| f64::from(p)).collect();

    let mut rng = StdRng::seed_from_u64(1);
    let mut biased = vec![0u64; VOCAB];
    let mut real = vec![0u64; VOCAB];
    for _ in 0..SAMPLES {
        biased[biased_verify(&tree, &logits, &params, &mut rng) as usize] += 1;
        let verdict = verify_sampling(&tree, &logits, VOCAB, &params, &mut rng);
        let first = verdict.path.get(1).map_or(verdict.bonus, |&node| tree.tokens[node]);
        real[first as usize] += 1;
    }
    let biased_test = chi_square::goodness_of_fit(&biased, &exact);
    assert!(biased_test.rejects(), "a biased verifier passed: {biased_test:?}");
    let real_test = chi_square::goodness_of_fit(&real, &exact);
    assert!(!real_test.rejects(), "{real_test:?}");
}
