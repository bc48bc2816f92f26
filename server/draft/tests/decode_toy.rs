//! The decode loop against a toy model whose next-token logits are a hash of
//! the last three tokens: speculative output must equal plain decoding
//! whatever the drafts, and the KV bookkeeping must stay exact.

use copilotd_draft::budget::FixedBudget;
use copilotd_draft::cancel::{CancelToken, Cancelled};
use copilotd_draft::decode::{DecodeError, DecodeHooks, DecodeOptions, Healing, Session, StopReason, TreeModel};
use copilotd_draft::drafter::{Candidate, Drafter, Source};
use copilotd_draft::pld::PromptLookup;
use copilotd_draft::verify::SamplingParams;
use std::sync::Arc;

mod toy;

use toy::{ToyModel, VOCAB};

/// Knows the true continuation; proposes it with some wrong branches mixed in.
struct Oracle {
    truth: Vec<u32>,
    prompt_len: usize,
}

impl Drafter for Oracle {
    fn propose(&mut self, context: &[u32], out: &mut Vec<Candidate>) {
        let done = context.len() - self.prompt_len;
        let right: Vec<u32> = self.truth.iter().skip(done).take(5).copied().collect();
        if right.is_empty() {
            return;
        }
        let mut wrong_first = right.clone();
        wrong_first[0] = (wrong_first[0] + 1) % VOCAB as u32;
        let mut wrong_late = right.clone();
        let last = wrong_late.len() - 1;
        wrong_late[last] = (wrong_late[last] + 3) % VOCAB as u32;
        for (tokens, weight) in [(wrong_first, 3.0), (wrong_late, 2.0), (right, 1.0)] {
            out.push(Candidate { tokens, weight, source: Source::Fixed, matched: 0 });
        }
    }
}

fn options(max: usize) -> DecodeOptions {
    DecodeOptions { max_new_tokens: max, ..DecodeOptions::default() }
}

fn run(
    session: &mut Session<ToyModel>,
    prompt: &[u32],
    opts: &DecodeOptions,
    drafter: Option<&mut dyn Drafter>,
) -> (Vec<u32>, usize) {
    let mut never = |_: &[u32]| false;
    let hooks = DecodeHooks { stop: &mut never, cancel: &CancelToken::new() };
    let generation = session.generate(prompt, opts, drafter, &mut FixedBudget { nodes: 16, depth: 6 }, hooks).unwrap();
    (generation.tokens, generation.stats.forward_steps)
}

#[test]
fn speculative_output_equals_plain_decoding() {
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3];
    let (reference, ar_steps) = run(&mut Session::new(ToyModel::default()), &prompt, &options(60), None);
    assert_eq!(reference.len(), 60);
    assert_eq!(ar_steps, 59);

    let (pld_out, _) =
        run(&mut Session::new(ToyModel::default()), &prompt, &options(60), Some(&mut PromptLookup::default()));
    assert_eq!(pld_out, reference);

    let mut oracle = Oracle { truth: reference.clone(), prompt_len: prompt.len() };
    let (oracle_out, oracle_steps) =
        run(&mut Session::new(ToyModel::default()), &prompt, &options(60), Some(&mut oracle));
    assert_eq!(oracle_out, reference);
    assert!(oracle_steps < ar_steps / 3, "oracle drafts must be accepted: {oracle_steps} steps");
}

#[test]
fn prompt_prefix_is_reused_and_output_is_unchanged() {
    let mut session = Session::new(ToyModel::default());
    let prompt: Vec<u32> = (0..40).map(|i| (i * 7 % VOCAB) as u32).collect();
    let (first, _) = run(&mut session, &prompt, &options(20), Some(&mut PromptLookup::default()));
    let mut edited = prompt.clone();
    edited[35] = (edited[35] + 1) % VOCAB as u32;
    let mut never = |_: &[u32]| false;
    let hooks = DecodeHooks { stop: &mut never, cancel: &CancelToken::new() };
    let second = session.generate(&edited, &options(20), None, &mut FixedBudget { nodes: 0, depth: 0 }, hooks).unwrap();
    assert_eq!(second.stats.reused_tokens, 35);
    let (fresh, _) = run(&mut Session::new(ToyModel::default()), &edited, &options(20), None);
    assert_eq!(second.tokens, fresh);
    // The same prompt again reuses all but the last token.
    let (again, _) = run(&mut session, &prompt, &options(20), None);
    assert_eq!(again, first);
}

#[test]
fn going_back_to_an_earlier_prompt_reuses_its_cache_set_aside() {
    let prompt = |seed: usize| -> Vec<u32> { (0..40).map(|i| ((i * seed + seed) % VOCAB) as u32).collect() };
    let (a, b) = (prompt(5), prompt(7));
    // `c` begins like `a` for 30 tokens (its 31st differs): more than half of `a`, whose cache it
    // takes from where it was set aside. `d` begins like `b` for 10 tokens, less than half: it
    // reuses a copy of those, and `b`'s cache is set aside whole.
    let c: Vec<u32> = a[..30].iter().copied().chain(b[1..11].iter().copied()).collect();
    let d: Vec<u32> = b[..10].iter().copied().chain(a[1..31].iter().copied()).collect();
    assert!(a[30] != c[30] && b[10] != d[10]);
    let mut session = Session::new(ToyModel::default());
    let steps = [(&a, 0), (&b, 0), (&c, 30), (&b, b.len() - 1), (&d, 10), (&b, b.len() - 1), (&c, c.len() - 1)];
    for (prompt, reused) in steps {
        // What the session says it would reuse, before it does (the last token is always run).
        assert_eq!(session.reusable(prompt).min(prompt.len() - 1), reused, "prompt {prompt:?}");
        let generation = generate_plain(&mut session, prompt);
        assert_eq!(generation.stats.reused_tokens, reused, "prompt {prompt:?}");
        let (fresh, _) = run(&mut Session::new(ToyModel::default()), prompt, &options(10), None);
        assert_eq!(generation.tokens, fresh);
    }
    // Warming a place whose prompt was set aside puts its cache back instead of prefilling.
    assert_eq!(session.warm(&d, 8, &|| false).unwrap(), 0);
}

fn generate_plain(session: &mut Session<ToyModel>, prompt: &[u32]) -> copilotd_draft::decode::Generation {
    let mut never = |_: &[u32]| false;
    let hooks = DecodeHooks { stop: &mut never, cancel: &CancelToken::new() };
    session.generate(prompt, &options(10), None, &mut FixedBudget { nodes: 0, depth: 0 }, hooks).unwrap()
}

#[test]
fn work_on_top_of_the_cache_keeps_the_prompt_reusable() {
    let prompt: Vec<u32> = (0..30).map(|i| (i * 5 % VOCAB) as u32).collect();
    let (reference, _) = run(&mut Session::new(ToyModel::default()), &prompt, &options(10), None);
    let mut session = Session::new(ToyModel::default());
    generate_plain(&mut session, &prompt);
    // Appending (as the cost calibration does) keeps the cached prompt.
    session.on_top_of_cache(|model| model.prefill(&[1, 2, 3, 4]).map(drop)).unwrap();
    let again = generate_plain(&mut session, &prompt);
    assert_eq!(again.stats.reused_tokens, prompt.len() - 1);
    assert_eq!(again.tokens, reference);
    // A cache left shorter than the prompt leaves nothing to reuse, and the output is still right.
    session.on_top_of_cache(|model| model.truncate(3));
    let after_cut = generate_plain(&mut session, &prompt);
    assert_eq!(after_cut.stats.reused_tokens, 0);
    assert_eq!(after_cut.tokens, reference);
}

#[test]
fn a_warmed_prompt_is_reused_and_warming_stops_when_told() {
    let document: Vec<u32> = (0..50).map(|i| (i * 11 % VOCAB) as u32).collect();
    let prompt = &document[..30];
    let (reference, _) = run(&mut Session::new(ToyModel::default()), prompt, &options(10), None);
    let mut session = Session::new(ToyModel::default());
    assert_eq!(session.warm(&document, 8, &|| false).unwrap(), 50);
    // A request whose prompt begins like the warmed one reuses all of it but its last token.
    let warm = generate_plain(&mut session, prompt);
    assert_eq!(warm.stats.reused_tokens, prompt.len() - 1);
    assert_eq!(warm.tokens, reference);

    // Told to stop, warming ends after the pieces so far, and they stay reusable.
    let mut session = Session::new(ToyModel::default());
    let pieces = std::cell::Cell::new(0);
    let warmed = session.warm(&document, 8, &|| {
        pieces.set(pieces.get() + 1);
        pieces.get() > 2
    });
    assert_eq!(warmed.unwrap(), 16);
    let warm = generate_plain(&mut session, prompt);
    assert_eq!(warm.stats.reused_tokens, 16);
    assert_eq!(warm.tokens, reference);
    // Warming again after a request keeps what the two prompts share.
    assert_eq!(session.warm(&document, 8, &|| false).unwrap(), document.len() - prompt.len());
}

#[test]
fn stop_rule_end_tokens_and_cancellation() {
    let prompt = [3, 1, 4, 1, 5];
    let (reference, _) = run(&mut Session::new(ToyModel::default()), &prompt, &options(30), None);
    let stop_at = reference[7];
    let first_stop = reference.iter().position(|&t| t == stop_at).unwrap();

    let mut session = Session::new(ToyModel::default());
    let mut oracle = Oracle { truth: reference.clone(), prompt_len: prompt.len() };
    let mut stop = |out: &[u32]| out.last() == Some(&stop_at);
    let hooks = DecodeHooks { stop: &mut stop, cancel: &CancelToken::new() };
    let generation = session
        .generate(&prompt, &options(30), Some(&mut oracle), &mut FixedBudget { nodes: 16, depth: 6 }, hooks)
        .unwrap();
    assert_eq!(generation.stop, StopReason::StopRule);
    assert_eq!(generation.tokens, reference[..=first_stop]);

    let opts = DecodeOptions { end_tokens: vec![stop_at], ..options(30) };
    let (ended, _) = run(&mut Session::new(ToyModel::default()), &prompt, &opts, None);
    assert_eq!(ended, reference[..first_stop]);

    let mut never = |_: &[u32]| false;
    let cancel = CancelToken::new();
    cancel.cancel(Cancelled::Superseded);
    let hooks = DecodeHooks { stop: &mut never, cancel: &cancel };
    let mut session = Session::new(ToyModel::default());
    let cancelled = session.generate(&prompt, &options(30), None, &mut FixedBudget { nodes: 0, depth: 0 }, hooks);
    assert!(matches!(cancelled, Err(DecodeError::Cancelled(Cancelled::Superseded))), "{cancelled:?}");
    // The cancelled prompt's cache stays reusable.
    let (again, _) = run(&mut session, &prompt, &options(30), None);
    assert_eq!(again, reference);
}

#[test]
fn sampling_is_reproducible_with_a_seed() {
    let prompt = [2, 7, 1, 8];
    let opts =
        DecodeOptions { sampling: Some(SamplingParams { temperature: 0.9, top_p: 0.95, seed: 42 }), ..options(40) };
    let (a, _) = run(&mut Session::new(ToyModel::default()), &prompt, &opts, Some(&mut PromptLookup::default()));
    let (b, _) = run(&mut Session::new(ToyModel::default()), &prompt, &opts, Some(&mut PromptLookup::default()));
    assert_eq!(a, b);
    let other = DecodeOptions { sampling: Some(SamplingParams { seed: 43, ..opts.sampling.unwrap() }), ..opts.clone() };
    let (c, _) = run(&mut Session::new(ToyModel::default()), &prompt, &other, Some(&mut PromptLookup::default()));
    assert_ne!(a, c, "a different seed should change a 40-token sample");
}

/// Token texts for the toy vocabulary: `"z<id>"`, except those given.
fn texts(given: &[(u32, &str)]) -> Arc<[String]> {
    (0..VOCAB as u32)
        .map(|id| given.iter().find(|(g, _)| *g == id).map_or(format!("z{id}"), |(_, text)| text.to_string()))
        .collect()
}

/// Plain and speculative decoding of `prompt` with `healing`, which must agree.
fn healed(prompt: &[u32], healing: Healing) -> Vec<u32> {
    let opts = DecodeOptions { healing: Some(healing), ..options(30) };
    let (plain, _) = run(&mut Session::new(ToyModel::default()), prompt, &opts, None);
    let (speculative, _) =
        run(&mut Session::new(ToyModel::default()), prompt, &opts, Some(&mut PromptLookup::default()));
    assert_eq!(speculative, plain);
    plain
}

#[test]
fn healing_restricts_the_first_token_and_the_rest_stays_lossless() {
    let prompt = [4, 4, 2];
    let (free, _) = run(&mut Session::new(ToyModel::default()), &prompt, &options(1), None);
    // Every token but the free choice spells the healed text "x" and more.
    let given: Vec<(u32, String)> = (0..VOCAB as u32).filter(|&t| t != free[0]).map(|t| (t, format!("x{t}"))).collect();
    let given: Vec<(u32, &str)> = given.iter().map(|(t, text)| (*t, text.as_str())).collect();
    let restricted = healed(&prompt, Healing { text: "x".into(), token_texts: texts(&given) });
    assert_ne!(restricted[0], free[0]);
}

#[test]
fn a_token_spelling_part_of_the_healed_text_is_followed_by_the_rest() {
    // No token spells all of "ab": the first must be "a", the second "b", then the model is free.
    let healing = Healing { text: "ab".into(), token_texts: texts(&[(3, "a"), (7, "b"), (9, "ba")]) };
    let output = healed(&[4, 4, 2], healing);
    assert_eq!(output[..2], [3, 7]);
    assert_eq!(output.len(), 30);
}

#[test]
fn each_pass_is_recorded_with_its_nodes_and_the_cache_under_it() {
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3];
    let (reference, _) = run(&mut Session::new(ToyModel::default()), &prompt, &options(30), None);
    let mut oracle = Oracle { truth: reference, prompt_len: prompt.len() };
    let mut never = |_: &[u32]| false;
    let hooks = DecodeHooks { stop: &mut never, cancel: &CancelToken::new() };
    let budget = &mut FixedBudget { nodes: 16, depth: 6 };
    let stats = Session::new(ToyModel::default())
        .generate(&prompt, &options(30), Some(&mut oracle), budget, hooks)
        .unwrap()
        .stats;
    assert_eq!(stats.passes.len(), stats.forward_steps);
    assert_eq!(stats.passes.iter().map(|&(nodes, _)| nodes).sum::<usize>(), stats.tree_nodes);
    assert!(stats.passes.iter().any(|&(nodes, _)| nodes > 1), "the oracle's drafts are verified");
    // The first pass runs on the prompt; each later one on what the step before it kept.
    assert_eq!(stats.passes[0].1, prompt.len());
    for (step, pair) in stats.passes.windows(2).enumerate() {
        let kept = pair[1].1 - pair[0].1;
        assert!((1..=pair[0].0).contains(&kept), "step {step} kept {kept} of {} nodes", pair[0].0);
    }
}

#[test]
fn a_generation_ends_where_the_context_is_full_and_drafts_never_pass_it() {
    let prompt = [1, 2, 3, 4, 5, 1, 2, 3];
    let context = prompt.len() + 20;
    let (reference, _) = run(&mut Session::new(ToyModel::default()), &prompt, &options(60), None);
    // The last token is chosen from the logits at the context's last position.
    let fits = context - prompt.len() + 1;
    let mut oracle = Oracle { truth: reference.clone(), prompt_len: prompt.len() };
    for drafter in [None, Some(&mut oracle as &mut dyn Drafter)] {
        let mut never = |_: &[u32]| false;
        let hooks = DecodeHooks { stop: &mut never, cancel: &CancelToken::new() };
        let budget = &mut FixedBudget { nodes: 16, depth: 6 };
        let mut session = Session::new(ToyModel::with_context(context));
        let generation = session.generate(&prompt, &options(60), drafter, budget, hooks).unwrap();
        assert_eq!(generation.stop, StopReason::ContextFull);
        assert_eq!(generation.tokens, reference[..fits]);
    }
}
