//! The decode loop: drafts, one tree forward per step, verification, and
//! the statistics of a request. Generic over the model so it can be tested
//! with a toy model; the daemon plugs in the candle runtime.

use crate::budget::{BudgetPolicy, Verified};
use crate::cancel::{CancelToken, Cancelled};
use crate::drafter::{AcceptedDraft, Candidate, Drafter, VerifiedStep};
use crate::parked::{keeps_most, shared_prefix, ParkedCaches};
use crate::tree::{self, DraftTree};
use crate::verify::{self, SamplingParams};
use anyhow::Result;
use rand::{rngs::StdRng, SeedableRng};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// What the decode loop needs from a model (see `copilotd-model`).
pub trait TreeModel {
    fn vocab_size(&self) -> usize;
    /// Most tokens the cache holds: positions past it are never fed to the model.
    fn context_length(&self) -> usize;
    fn cache_len(&self) -> usize;
    fn truncate(&mut self, len: usize);
    /// Appends `tokens` to the KV cache; returns the logits of the last one.
    fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    /// One forward over a token tree on top of the cache; logits per node.
    fn forward_tree(&mut self, tokens: &[u32], parents: &[Option<usize>]) -> Result<Vec<f32>>;
    /// Keeps these nodes of the last tree (root first) in the cache.
    fn keep_path(&mut self, path: &[usize]) -> Result<()>;

    /// A KV cache, which a session may set aside and put back.
    type Cache;
    /// A copy of the first `len` entries of the cache.
    fn copy_cache(&self, len: usize) -> Self::Cache;
    /// Puts `cache` in place of the model's cache (the model's is dropped).
    fn replace_cache(&mut self, cache: Self::Cache);
    /// Bytes of memory `cache` holds.
    fn cache_bytes(cache: &Self::Cache) -> usize;
}

/// Why a generation ended with its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    MaxTokens,
    EndOfText,
    StopRule,
    /// While healing white space the person typed (the indentation of the cursor's line), the
    /// model's own choice laid it out otherwise (a dedent, most often): nothing follows it.
    Indentation,
    /// The model's context is full: the next token would sit past the last position it holds.
    ContextFull,
}

/// Why a generation produced no text.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("generation cancelled: {0}")]
    Cancelled(Cancelled),
    #[error("empty prompt")]
    EmptyPrompt,
    /// The model failed (the cache was reset).
    #[error("model forward failed: {0:#}")]
    Model(anyhow::Error),
}

/// Per-request statistics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodeStats {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV entries were reused from the previous request.
    pub reused_tokens: usize,
    pub new_tokens: usize,
    /// Model forward passes after the prompt.
    pub forward_steps: usize,
    /// Tree nodes verified in total (including roots).
    pub tree_nodes: usize,
    /// Each forward step's tree nodes (including the root) and the tokens cached before it:
    /// what the cost curve prices.
    pub passes: Vec<(usize, usize)>,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Time spent building drafts and feeding drafters what a step
    /// verified; part of `decode_ms`.
    pub draft_ms: f64,
    /// Accepted draft tokens per source.
    pub accepted_by_source: BTreeMap<&'static str, usize>,
    /// Steps whose accepted draft length was `i` (index = length).
    pub accepted_histogram: Vec<usize>,
}

impl DecodeStats {
    /// New tokens per forward step (the acceptance length).
    pub fn acceptance_length(&self) -> f64 {
        if self.forward_steps == 0 {
            0.0
        } else {
            self.new_tokens as f64 / self.forward_steps as f64
        }
    }

    /// Milliseconds per new token over the decode phase.
    pub fn ms_per_token(&self) -> f64 {
        if self.new_tokens == 0 {
            0.0
        } else {
            self.decode_ms / self.new_tokens as f64
        }
    }
}

/// The result of one generation.
#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    pub stats: DecodeStats,
}

/// Settings of one generation.
#[derive(Clone, Debug)]
pub struct DecodeOptions {
    pub max_new_tokens: usize,
    /// Tokens that end generation (not included in the output).
    pub end_tokens: Vec<u32>,
    /// `None`: greedy. `Some`: lossless speculative sampling.
    pub sampling: Option<SamplingParams>,
    /// Token healing: the first new tokens must spell this text again.
    pub healing: Option<Healing>,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { max_new_tokens: 128, end_tokens: Vec::new(), sampling: None, healing: None }
    }
}

/// Token healing: the prompt's last token was taken off, and the first new tokens spell its
/// text again. Each is chosen among the tokens whose text agrees with what is left to spell:
/// those that start with all of it (which ends the healing), and those that are a part of it
/// from its start. The second kind matters at indentation: a prompt ending in `"\n    "` is
/// written `"\n   "`, `" return"` by the model, and allowing only tokens that start with
/// `"\n    "` made it write one space too many.
///
/// Blanks the text ends with are all the blanks there: the person typed that indentation (or
/// that space), so the character after it is not a space or a tab. Without this rule a model
/// that wanted to dedent wrote `"\n   "`, then the rest of the indentation in a token that
/// went on with more spaces, and its statement landed three spaces too deep.
#[derive(Clone, Debug)]
pub struct Healing {
    pub text: String,
    /// Every token id's text.
    pub token_texts: Arc<[String]>,
}

impl Healing {
    /// The tokens that may come next while `left` is still to be spelled (empty: spelled, but
    /// the next character must not be a blank).
    fn allowed(&self, left: &str) -> Vec<u32> {
        let agrees = |text: &str| {
            !text.is_empty()
                && (text.strip_prefix(left).is_some_and(|beyond| self.may_follow(beyond))
                    || (left.starts_with(text) && !left.is_empty()))
        };
        (0..self.token_texts.len() as u32).filter(|&id| agrees(&self.token_texts[id as usize])).collect()
    }

    /// Whether `beyond`, the text a token adds past the healed text, may follow it.
    fn may_follow(&self, beyond: &str) -> bool {
        !(self.ends_blank() && beyond.starts_with([' ', '\t']))
    }

    /// Whether the healed text ends with a blank the person typed: no blank may follow it.
    fn ends_blank(&self) -> bool {
        self.text.ends_with([' ', '\t'])
    }

    /// What is left to spell after `token`, which [`Healing::allowed`] allowed for `left`;
    /// `None` once spelled and followed by a character of its own, or once spelled when the
    /// text does not end with a blank.
    fn left_after(&self, left: &str, token: u32) -> Option<String> {
        let text = self.token_texts.get(token as usize).map_or("", String::as_str);
        match left.strip_prefix(text) {
            Some("") if self.ends_blank() && !left.is_empty() => Some(String::new()),
            Some(rest) if !rest.is_empty() => Some(rest.to_owned()),
            _ => None,
        }
    }

    /// Keeps only the logits of the tokens that may come next while `left` is still to be
    /// spelled (all of them when none may: an unusual vocabulary is not healed). Returns whether
    /// the model disagrees with the white space typed: only white space is left to spell, and
    /// the model's own first choice is not allowed and lays the line out otherwise. A choice
    /// that only puts blank lines first (a blank line after a docstring) does not: the person
    /// typed the line the code goes on.
    fn restrict(&self, logits: &mut [f32], left: &str) -> bool {
        let allowed = self.allowed(left);
        if allowed.is_empty() {
            return false;
        }
        let own_choice = verify::argmax(logits);
        let own_text = self.token_texts.get(own_choice as usize).map_or("", String::as_str);
        let disagrees = left.trim().is_empty() && !allowed.contains(&own_choice) && !blank_lines_before(own_text, left);
        let mut masked = vec![f32::NEG_INFINITY; logits.len()];
        for id in allowed {
            if let Some(&value) = logits.get(id as usize) {
                masked[id as usize] = value;
            }
        }
        logits.copy_from_slice(&masked);
        disagrees
    }
}

/// Whether `choice` is line breaks and then no more than the indentation that `left` ends
/// with: blank lines before the line the indentation begins (`"\n\n"` or `"\n\n    "` before
/// `"\n    "`), not a line laid out otherwise (`"\ndef"`, `"\n\n        "`).
fn blank_lines_before(choice: &str, left: &str) -> bool {
    let indentation = left.rsplit('\n').next().unwrap_or(left);
    let after_breaks = choice.trim_start_matches(['\n', '\r']);
    after_breaks.len() < choice.len() && indentation.starts_with(after_breaks)
}

/// Hooks a caller passes into one generation.
pub struct DecodeHooks<'a> {
    /// Called with all tokens generated so far after each new token; `true`
    /// stops generation after that token.
    pub stop: &'a mut (dyn FnMut(&[u32]) -> bool + Send),
    /// Checked once per step; once cancelled, the generation ends with
    /// [`DecodeError::Cancelled`].
    pub cancel: &'a CancelToken,
}

/// Earlier prompts' caches a session keeps besides the live one, and the memory they may hold
/// together: four 2,048-token prompts of the default model (47 MB each), none of a 7B model's.
const PARKED_CACHES: usize = 4;
const PARKED_CACHE_BYTES: usize = 192 << 20;

/// Owns a model plus the tokens its KV cache holds, so consecutive requests
/// reuse their longest common prompt prefix; the caches of earlier prompts that a prompt would
/// have overwritten are set aside, for a prompt that begins like one of them.
pub struct Session<M: TreeModel> {
    model: M,
    cached: Vec<u32>,
    /// How many of `cached` came as a prompt (the rest were generated after it).
    prompt_len: usize,
    parked: ParkedCaches<M::Cache>,
    /// Tokens generated since the session started, cancelled generations included: the
    /// work done, whether or not anyone saw its result.
    generated: u64,
}

impl<M: TreeModel> Session<M> {
    pub fn new(model: M) -> Self {
        Session {
            model,
            cached: Vec::new(),
            prompt_len: 0,
            parked: ParkedCaches::new(PARKED_CACHES, PARKED_CACHE_BYTES),
            generated: 0,
        }
    }

    /// Tokens generated since the session started, cancelled generations included.
    pub fn generated_tokens(&self) -> u64 {
        self.generated
    }

    pub fn model(&self) -> &M {
        &self.model
    }

    /// Runs `f` on the model, keeping the cached prompt: `f` may append to the cache but must
    /// leave its first `cache_len()` entries as they were (the cost calibration measures on top
    /// of them; cutting in and growing back would go unnoticed). What `f` appended is dropped
    /// afterwards; a cache that `f` left shorter than the prompt is not reused at all.
    pub fn on_top_of_cache<R>(&mut self, f: impl FnOnce(&mut M) -> R) -> R {
        let held = self.in_step();
        let result = f(&mut self.model);
        if self.model.cache_len() < held {
            self.forget_cache();
        } else {
            self.model.truncate(held);
        }
        result
    }

    pub fn model_mut(&mut self) -> &mut M {
        // Direct model access invalidates what we know of the cache.
        self.forget_cache();
        &mut self.model
    }

    /// Cuts the cache and the tokens known to be in it to the entries both hold; returns how many.
    fn in_step(&mut self) -> usize {
        let held = self.model.cache_len().min(self.cached.len());
        self.model.truncate(held);
        self.cached.truncate(held);
        held
    }

    /// Empties the cache, and what is known of it.
    fn forget_cache(&mut self) {
        self.model.truncate(0);
        self.cached.clear();
        self.prompt_len = 0;
    }

    /// Prefills `prompt` ahead of the request that will want it (or a prompt that begins like
    /// it), `piece` tokens at a time, reusing the common prefix with the cache, until `stop`
    /// says to give the model back; what was prefilled stays for the next prompt to reuse.
    /// Returns the tokens newly prefilled.
    pub fn warm(&mut self, prompt: &[u32], piece: usize, stop: &dyn Fn() -> bool) -> Result<usize, DecodeError> {
        self.choose_cache(prompt);
        let common = self.common_prefix(prompt);
        self.model.truncate(common);
        self.cached.truncate(common);
        let mut warmed = 0;
        for piece in prompt[common..].chunks(piece.max(1)) {
            if stop() {
                break;
            }
            if let Err(error) = self.model.prefill(piece) {
                self.forget_cache();
                return Err(DecodeError::Model(error));
            }
            self.cached.extend_from_slice(piece);
            warmed += piece.len();
        }
        self.prompt_len = self.cached.len();
        Ok(warmed)
    }

    /// Tokens at the start of `prompt` whose KV entries a prefill of it would find cached, in
    /// the live cache or one set aside (as [`Self::choose_cache`] chooses), the rest to be read.
    pub fn reusable(&self, prompt: &[u32]) -> usize {
        self.common_prefix(prompt).max(self.parked.longest_shared(prompt))
    }

    /// Tokens at the start of `prompt` whose KV entries the cache holds.
    fn common_prefix(&self, prompt: &[u32]) -> usize {
        shared_prefix(&self.cached, prompt).min(self.model.cache_len())
    }

    /// Makes the live cache the one that shares the longest prefix with `prompt`: a cache set
    /// aside that shares more than the live one, and that `prompt` keeps at least half of, takes
    /// its place. When `prompt` would keep less than half of the live cache's prompt, a copy of
    /// that prompt's entries is set aside first (what was generated after it is left out), so
    /// that a prompt beginning like the old one finds all of it later.
    fn choose_cache(&mut self, prompt: &[u32]) {
        let held = self.in_step();
        let kept = self.common_prefix(prompt);
        let parked = self.parked.take_longest(prompt, kept);
        let live_prompt = self.prompt_len.min(held);
        if !keeps_most(kept, live_prompt) {
            let copy = self.model.copy_cache(live_prompt);
            self.set_aside(self.cached[..live_prompt].to_vec(), copy);
        }
        if let Some(parked) = parked {
            self.model.replace_cache(parked.cache);
            self.cached = parked.tokens;
            self.prompt_len = self.cached.len();
        }
    }

    fn set_aside(&mut self, tokens: Vec<u32>, cache: M::Cache) {
        let bytes = M::cache_bytes(&cache);
        self.parked.park(tokens, cache, bytes);
    }

    /// Brings the cache to `prompt` reusing the common prefix, and returns
    /// the logits after its last token and how many tokens were reused.
    fn prefill(&mut self, prompt: &[u32]) -> Result<(Vec<f32>, usize), DecodeError> {
        if prompt.is_empty() {
            return Err(DecodeError::EmptyPrompt);
        }
        self.choose_cache(prompt);
        // The last prompt token is always run so that its logits are fresh.
        let reuse = self.common_prefix(prompt).min(prompt.len() - 1);
        self.model.truncate(reuse);
        self.cached.truncate(reuse);
        let result = self.model.prefill(&prompt[reuse..]);
        match result {
            Ok(logits) => {
                self.cached.extend_from_slice(&prompt[reuse..]);
                self.prompt_len = prompt.len();
                Ok((logits, reuse))
            }
            Err(error) => {
                self.forget_cache();
                Err(DecodeError::Model(error))
            }
        }
    }

    /// Generates a continuation of `prompt`. With no drafter (or one that
    /// proposes nothing) every step is a one-node tree: plain autoregressive
    /// decoding through the same kernels, the reference for losslessness.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        options: &DecodeOptions,
        drafter: Option<&mut dyn Drafter>,
        budget: &mut dyn BudgetPolicy,
        hooks: DecodeHooks<'_>,
    ) -> Result<Generation, DecodeError> {
        let outcome = self.generate_inner(prompt, options, drafter, budget, hooks);
        if matches!(outcome, Err(DecodeError::Model(_))) {
            // A failed step may leave the cache out of step with `cached` (a cancelled
            // generation stops between steps, with both in step: its prefix stays reusable).
            self.forget_cache();
        }
        outcome
    }

    fn generate_inner(
        &mut self,
        prompt: &[u32],
        options: &DecodeOptions,
        mut drafter: Option<&mut dyn Drafter>,
        budget: &mut dyn BudgetPolicy,
        hooks: DecodeHooks<'_>,
    ) -> Result<Generation, DecodeError> {
        let DecodeHooks { stop, cancel } = hooks;
        let vocab = self.model.vocab_size();
        let mut rng = options.sampling.map(|s| StdRng::seed_from_u64(s.seed));
        let mut stats = DecodeStats { prompt_tokens: prompt.len(), ..DecodeStats::default() };
        let mut output: Vec<u32> = Vec::new();
        let started = Instant::now();

        let (mut logits, reused) = self.prefill(prompt)?;
        let healing = options.healing.as_ref().filter(|h| !h.text.is_empty());
        let mut disagrees = healing.is_some_and(|healing| healing.restrict(&mut logits, &healing.text));
        stats.reused_tokens = reused;
        stats.prefill_ms = ms_since(started);
        let decode_started = Instant::now();

        let mut pending = match (&options.sampling, rng.as_mut()) {
            (Some(params), Some(rng)) => verify::sample(&verify::distribution(&logits, params), rng),
            _ => verify::argmax(&logits),
        };
        // While the tokens so far spell only a part of the healed text, the rest of it.
        let mut healing_left = healing.and_then(|h| h.left_after(&h.text, pending));
        let mut context: Vec<u32> = prompt.to_vec();
        let mut candidates: Vec<Candidate> = Vec::new();
        // Appends one chosen token to the output through the stop checks of
        // plain decoding; `Some` ends the generation.
        let mut emit = |token: u32, output: &mut Vec<u32>, context: &mut Vec<u32>| {
            if options.end_tokens.contains(&token) {
                return Some(StopReason::EndOfText);
            }
            output.push(token);
            context.push(token);
            if stop(output) {
                Some(StopReason::StopRule)
            } else if output.len() >= options.max_new_tokens {
                Some(StopReason::MaxTokens)
            } else {
                None
            }
        };

        // Each iteration: `pending` is chosen but not yet in the cache.
        let stop_reason = 'steps: loop {
            if disagrees {
                break StopReason::Indentation;
            }
            if let Some(reason) = emit(pending, &mut output, &mut context) {
                break reason;
            }
            if let Some(reason) = cancel.reason() {
                self.generated += output.len() as u64;
                return Err(DecodeError::Cancelled(reason));
            }

            // The pending token takes a position, and each draft level one more.
            let Some(room) = self.model.context_length().checked_sub(self.model.cache_len() + 1) else {
                break StopReason::ContextFull;
            };
            let draft_started = Instant::now();
            // A healing step verifies its root alone: the token after it is chosen among some.
            let (node_budget, max_depth) = if healing_left.is_some() { (0, 0) } else { budget.limits() };
            candidates.clear();
            if let Some(drafter) = drafter.as_deref_mut() {
                if node_budget > 0 {
                    drafter.propose(&context, &mut candidates);
                }
            }
            let remaining = options.max_new_tokens - output.len();
            let pool = tree::build(pending, &candidates, node_budget, max_depth.min(remaining).min(room));
            let selected = budget.select(&pool, self.model.cache_len());
            let tree =
                if selected.len() + 1 < pool.len() { Cow::Owned(pool.keep(&selected)) } else { Cow::Borrowed(&pool) };
            let tree = tree.as_ref();
            stats.draft_ms += ms_since(draft_started);

            stats.passes.push((tree.len(), self.model.cache_len()));
            let mut logits = self.model.forward_tree(&tree.tokens, &tree.parents).map_err(DecodeError::Model)?;
            if let (Some(healing), Some(left)) = (healing, &healing_left) {
                disagrees = healing.restrict(&mut logits[..vocab], left);
            }
            stats.forward_steps += 1;
            stats.tree_nodes += tree.len();
            let verdict = match (&options.sampling, rng.as_mut()) {
                (Some(params), Some(rng)) => verify::verify_sampling(tree, &logits, vocab, params, rng),
                _ => verify::verify_greedy(tree, &logits, vocab),
            };
            self.model.keep_path(&verdict.path).map_err(DecodeError::Model)?;
            self.cached.push(pending);
            let accepted: Vec<u32> = verdict.path[1..].iter().map(|&n| tree.tokens[n]).collect();
            self.cached.extend_from_slice(&accepted);
            budget.observe(&Verified { pool: &pool, tree, path: &verdict.path, next: verdict.bonus });
            record_acceptance(&mut stats, tree, &verdict.path);

            if let Some(drafter) = drafter.as_deref_mut() {
                let observe_started = Instant::now();
                let step = VerifiedStep { tree, path: &verdict.path, logits: &logits, vocab };
                drafter.observe_verified(&context, &step);
                let accepted_draft = verdict
                    .path
                    .last()
                    .filter(|&&n| n != 0)
                    .map(|&deepest| AcceptedDraft { tokens: accepted.clone(), source: tree.sources[deepest] });
                let mut produced = accepted.clone();
                produced.push(verdict.bonus);
                drafter.observe(&context, &produced, accepted_draft.as_ref());
                stats.draft_ms += ms_since(observe_started);
            }

            for &token in &accepted {
                if let Some(reason) = emit(token, &mut output, &mut context) {
                    break 'steps reason;
                }
            }
            healing_left = healing.zip(healing_left).and_then(|(h, left)| h.left_after(&left, verdict.bonus));
            pending = verdict.bonus;
        };

        stats.new_tokens = output.len();
        stats.decode_ms = ms_since(decode_started);
        self.generated += output.len() as u64;
        Ok(Generation { tokens: output, stop: stop_reason, stats })
    }
}

fn record_acceptance(stats: &mut DecodeStats, tree: &DraftTree, path: &[usize]) {
    let accepted = path.len() - 1;
    if stats.accepted_histogram.len() <= accepted {
        stats.accepted_histogram.resize(accepted + 1, 0);
    }
    stats.accepted_histogram[accepted] += 1;
    for &node in &path[1..] {
        *stats.accepted_by_source.entry(tree.sources[node].name()).or_default() += 1;
    }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healing_allows_tokens_that_spell_the_text_or_a_part_of_it_from_its_start() {
        let texts = ["\n", "\n   ", "\n    ", "\n    return", " return", "", "\t", "return", "\n     return"];
        let healing = Healing { text: "\n    ".into(), token_texts: texts.iter().map(|t| t.to_string()).collect() };
        assert_eq!(healing.allowed("\n    "), [0, 1, 2, 3]);
        assert_eq!(healing.left_after("\n    ", 1).as_deref(), Some(" "));
        assert_eq!(healing.left_after("\n    ", 0).as_deref(), Some("    "));
        assert_eq!(healing.left_after("\n    ", 3), None);
        assert_eq!(healing.allowed(" "), [4], "the rest of the indentation, then the statement");
        assert_eq!(healing.left_after(" ", 4), None);
    }

    #[test]
    fn a_blank_line_first_is_no_disagreement_with_the_typed_indentation() {
        let texts = ["\n    ", "\n", "\n\n", "\n\n    ", "\ndef", "\n\n        ", "x", "    "];
        let healing = Healing { text: "\n    ".into(), token_texts: texts.iter().map(|t| t.to_string()).collect() };
        // (the model's own first choice, whether it disagrees)
        for (own, disagrees) in [(2, false), (3, false), (4, true), (5, true)] {
            let mut logits = vec![0.0; texts.len()];
            logits[own] = 1.0;
            assert_eq!(healing.restrict(&mut logits, "\n    "), disagrees, "{:?}", texts[own]);
            // The code goes on the typed line: only what spells the indentation is left.
            assert_eq!(logits.iter().filter(|l| l.is_finite()).count(), 2, "{:?}", texts[own]);
        }
        // After the line break, the same: one more blank line is no disagreement.
        let mut logits = vec![0.0; texts.len()];
        logits[1] = 1.0;
        assert!(!healing.restrict(&mut logits, "    "));
        assert!(logits[7].is_finite() && logits[1] == f32::NEG_INFINITY);
    }

    #[test]
    fn healed_blanks_are_all_the_blanks_before_the_next_character() {
        let texts = ["\n    ", "\n     return", "    ", "     ", " return", "  return", "return", "\n", "\t"];
        let healing = Healing { text: "\n    ".into(), token_texts: texts.iter().map(|t| t.to_string()).collect() };
        // Not a token that indents deeper than the text.
        assert_eq!(healing.allowed("\n    "), [0, 7]);
        // Spelled exactly: one more step, whose token starts with no blank (a line break may).
        assert_eq!(healing.left_after("\n    ", 0).as_deref(), Some(""));
        assert_eq!(healing.allowed(""), [0, 1, 6, 7]);
        assert_eq!(healing.left_after("", 6), None);
        // The rest of the indentation: no token that adds blanks after it.
        assert_eq!(healing.allowed("    "), [2]);
        assert_eq!(healing.left_after("    ", 2).as_deref(), Some(""));
        assert_eq!(healing.allowed(" "), [4], "its last blank and a word, not more blanks");
        // A text that ends with no blank sets no rule after it.
        let word = Healing { text: "re".into(), token_texts: healing.token_texts.clone() };
        assert_eq!(word.allowed("re"), [6]);
        assert_eq!(word.left_after("re", 6), None);
    }
}
