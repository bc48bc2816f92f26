//! SPECTRA-RETRIEVAL's corpus refinement: the corpus is cut into windows of a
//! few hundred tokens (chunks), chunks are scored by the loaded model's mean
//! negative log-likelihood (the log of their perplexity) in a seeded order
//! spread over the files until the time budget is spent, and the
//! lowest-perplexity share of the scored chunks is what the refined common
//! store is built from.
//!
//! Scoring the whole Python standard library (3.4M tokens) takes hours on two
//! cores, so the budget bounds the work: the order takes one chunk of every
//! file (files in a seeded random order, each file's chunks in a seeded random
//! order) before a second chunk of any, so whatever prefix of the order the
//! budget allows is a sample spread over the whole corpus.

pub mod perplexity;

use crate::common_build::{self, CommonBuildSummary, TokenizedCorpus};
use anyhow::{bail, ensure, Result};
use copilotd_draft::common_store::CommonParams;
use copilotd_model::Model;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::path::Path;
use std::time::{Duration, Instant};

/// Tokens per chunk unless asked otherwise.
pub const DEFAULT_WINDOW: usize = 256;

/// Seconds of scoring unless asked otherwise (as `--refine-budget` reads it).
pub const DEFAULT_BUDGET_SECONDS: &str = "600";

/// Seed of the sampling order.
const ORDER_SEED: u64 = 20_261_124;

/// Shortest and longest window accepted.
const WINDOWS: std::ops::RangeInclusive<usize> = 16..=2048;

/// How a refinement runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RefineSettings {
    /// Share of the scored chunks kept, in (0, 1].
    pub fraction: f64,
    /// Time spent scoring at most (the chunk under way is finished).
    pub budget: Duration,
    /// Tokens per chunk.
    pub window: usize,
    /// Seed of the sampling order.
    pub seed: u64,
}

impl RefineSettings {
    /// Checked settings; the seed is fixed, so that two runs with the same
    /// budget score the same chunks first.
    pub fn new(fraction: f64, budget: Duration, window: usize) -> Result<RefineSettings> {
        ensure!(fraction > 0.0 && fraction <= 1.0, "the refine fraction must be in (0, 1], not {fraction}");
        ensure!(!budget.is_zero(), "the refine budget must be more than 0 seconds");
        ensure!(
            WINDOWS.contains(&window),
            "the refine window must be {} to {} tokens, not {window}",
            WINDOWS.start(),
            WINDOWS.end()
        );
        Ok(RefineSettings { fraction, budget, window, seed: ORDER_SEED })
    }
}

/// `--refine FRACTION`: a number in (0, 1].
pub fn parse_fraction(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("the fraction must be a number in (0, 1], not {value:?}")),
    }
}

/// `--refine-budget SECONDS`: a positive number of seconds.
pub fn parse_budget(value: &str) -> Result<Duration, String> {
    match value.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("the budget must be a positive number of seconds, not {value:?}")),
    }
}

/// A window of one file's tokens: `sequences[file][start..end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Chunk {
    pub file: usize,
    pub start: usize,
    pub end: usize,
}

impl Chunk {
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    fn tokens<'a>(&self, sequences: &'a [Vec<u32>]) -> &'a [u32] {
        &sequences[self.file][self.start..self.end]
    }
}

/// Every file cut into windows of `window` tokens, in corpus order. A file's
/// last window of at most a quarter window joins the one before it; a file of
/// fewer than 2 tokens has nothing to score.
pub fn chunks(sequences: &[Vec<u32>], window: usize) -> Vec<Chunk> {
    let mut out = Vec::new();
    for (file, tokens) in sequences.iter().enumerate() {
        if tokens.len() < 2 {
            continue;
        }
        let first = out.len();
        for start in (0..tokens.len()).step_by(window.max(1)) {
            out.push(Chunk { file, start, end: (start + window).min(tokens.len()) });
        }
        let last = out.len() - 1;
        if last > first && out[last].len() <= window / 4 {
            out[last - 1].end = out[last].end;
            out.pop();
        }
    }
    out
}

/// The order chunks are scored in: rounds over the files in a seeded random
/// order, each round taking the next of every file's chunks (shuffled per
/// file) that has one left.
pub fn sample_order(chunks: &[Chunk], seed: u64) -> Vec<Chunk> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut per_file: Vec<Vec<Chunk>> = Vec::new();
    for chunk in chunks {
        match per_file.last_mut() {
            Some(group) if group[0].file == chunk.file => group.push(*chunk),
            _ => per_file.push(vec![*chunk]),
        }
    }
    per_file.shuffle(&mut rng);
    for group in &mut per_file {
        group.shuffle(&mut rng);
    }
    let rounds = per_file.iter().map(Vec::len).max().unwrap_or(0);
    (0..rounds).flat_map(|round| per_file.iter().filter_map(move |group| group.get(round).copied())).collect()
}

/// A chunk and its mean negative log-likelihood under the model (nats per token).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    pub chunk: Chunk,
    pub nll: f64,
}

/// How far scoring is, for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub scored: usize,
    pub total: usize,
    pub tokens: usize,
}

/// Scores the chunks of `order` one after another while `in_budget` says so
/// (asked before each chunk). A chunk the scorer gives no finite value is
/// left out; a scorer error ends the run with that error.
pub fn score(
    order: &[Chunk],
    sequences: &[Vec<u32>],
    scorer: &mut dyn FnMut(&[u32]) -> Result<f64>,
    in_budget: &mut dyn FnMut() -> bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<Scored>> {
    let mut scored = Vec::new();
    let mut tokens = 0;
    for (i, chunk) in order.iter().enumerate() {
        if !in_budget() {
            break;
        }
        let nll = scorer(chunk.tokens(sequences))?;
        if nll.is_finite() {
            scored.push(Scored { chunk: *chunk, nll });
        }
        tokens += chunk.len();
        progress(Progress { scored: i + 1, total: order.len(), tokens });
    }
    Ok(scored)
}

/// The lowest-perplexity `fraction` of `scored` (at least one chunk; ties
/// broken by scoring order), sorted by position in the corpus.
pub fn select(scored: &[Scored], fraction: f64) -> Result<Vec<Scored>> {
    if scored.is_empty() {
        bail!("no chunk was scored within the budget");
    }
    let keep = ((scored.len() as f64 * fraction).ceil() as usize).clamp(1, scored.len());
    let mut ranked = scored.to_vec();
    ranked.sort_by(|a, b| a.nll.total_cmp(&b.nll)); // stable: ties keep scoring order
    ranked.truncate(keep);
    ranked.sort_by_key(|s| s.chunk);
    Ok(ranked)
}

/// The kept chunks' tokens as sequences for the store: chunks that follow
/// each other in a file are joined, so n-grams across their border count.
pub fn kept_sequences(kept: &[Scored], sequences: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let mut out: Vec<Vec<u32>> = Vec::new();
    let mut previous: Option<Chunk> = None;
    for s in kept {
        let tokens = s.chunk.tokens(sequences);
        match (previous, out.last_mut()) {
            (Some(p), Some(last)) if p.file == s.chunk.file && p.end == s.chunk.start => last.extend_from_slice(tokens),
            _ => out.push(tokens.to_vec()),
        }
        previous = Some(s.chunk);
    }
    out
}

/// What a refinement kept of what it scored.
#[derive(Clone, Debug, PartialEq)]
pub struct RefineSummary {
    pub chunks: usize,
    pub scored: usize,
    pub scored_tokens: usize,
    pub kept: usize,
    pub kept_tokens: usize,
    /// Mean negative log-likelihood over the scored and over the kept chunks
    /// (chunk means, averaged), and the highest one kept.
    pub mean_nll_scored: f64,
    pub mean_nll_kept: f64,
    pub threshold_nll: f64,
    pub scoring_seconds: f64,
}

impl RefineSummary {
    pub fn new(chunks: usize, scored: &[Scored], kept: &[Scored], scoring_seconds: f64) -> RefineSummary {
        let mean = |s: &[Scored]| s.iter().map(|s| s.nll).sum::<f64>() / s.len().max(1) as f64;
        let tokens = |s: &[Scored]| s.iter().map(|s| s.chunk.len()).sum();
        RefineSummary {
            chunks,
            scored: scored.len(),
            scored_tokens: tokens(scored),
            kept: kept.len(),
            kept_tokens: tokens(kept),
            mean_nll_scored: mean(scored),
            mean_nll_kept: mean(kept),
            threshold_nll: kept.iter().map(|s| s.nll).fold(f64::NEG_INFINITY, f64::max),
            scoring_seconds,
        }
    }
}

impl std::fmt::Display for RefineSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refined by perplexity: scored {} of {} chunks ({} tokens) in {:.0} s, kept {} ({} tokens) with \
             perplexity ≤ {:.2} (mean {:.2}, scored mean {:.2})",
            self.scored,
            self.chunks,
            self.scored_tokens,
            self.scoring_seconds,
            self.kept,
            self.kept_tokens,
            self.threshold_nll.exp(),
            self.mean_nll_kept.exp(),
            self.mean_nll_scored.exp()
        )
    }
}

/// Tokenizes the Python files under `corpus` with `model`'s tokenizer, scores
/// them with `model` and writes the refined store to `out` (see
/// [`refine_and_write`]).
pub fn build_refined(
    model: &mut Model,
    corpus: &Path,
    out: &Path,
    settings: &RefineSettings,
    params: CommonParams,
    progress: &mut dyn FnMut(Progress),
) -> Result<(RefineSummary, CommonBuildSummary)> {
    let tokenizer = model.tokenizer().clone();
    let fingerprint = tokenizer.fingerprint();
    let corpus = common_build::tokenize_corpus(corpus, &move |text: &str| tokenizer.encode(text), true)?;
    let mut scorer = |tokens: &[u32]| perplexity::mean_nll(model, tokens);
    refine_and_write(&corpus, &mut scorer, settings, (fingerprint, params), out, progress)
}

/// Scores `corpus` in chunks within the budget, keeps the lowest-perplexity
/// share and writes the store built from it to `out` (for the tokenizer
/// `fingerprint`, with `params`). Nothing is written before scoring is over,
/// and the store is replaced by rename: a run that fails or is killed leaves
/// the file at `out` as it was.
pub fn refine_and_write(
    corpus: &TokenizedCorpus,
    scorer: &mut dyn FnMut(&[u32]) -> Result<f64>,
    settings: &RefineSettings,
    (fingerprint, params): (u64, CommonParams),
    out: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<(RefineSummary, CommonBuildSummary)> {
    let started = Instant::now();
    let chunks = chunks(&corpus.sequences, settings.window);
    let order = sample_order(&chunks, settings.seed);
    let mut in_budget = || started.elapsed() < settings.budget;
    let scored = score(&order, &corpus.sequences, scorer, &mut in_budget, progress)?;
    let kept = select(&scored, settings.fraction)?;
    let summary = RefineSummary::new(chunks.len(), &scored, &kept, started.elapsed().as_secs_f64());
    let sequences = kept_sequences(&kept, &corpus.sequences);
    // The build began when the corpus was tokenized.
    let began = started.checked_sub(Duration::from_secs_f64(corpus.seconds)).unwrap_or(started);
    let built = common_build::write_store(&sequences, corpus, fingerprint, out, params, began)?;
    Ok((summary, built))
}

#[cfg(test)]
mod tests;
