//! Measuring what one forward pass costs on this machine: t(k) for a tree of
//! k nodes on a warm cache, at a short and a long cache (attention work grows
//! with the cache). The cost-aware draft budget needs it; it is measured once
//! per model, weight format, device (with its kernel), thread count and build of copilotd, and cached.
//!
//! The language server measures in the background, giving way to requests
//! (`interrupt`); a measurement whose repeated timings disagree too much was
//! disturbed by other work on the machine: it is used for the time being, not
//! cached, and measured again later.

use crate::paths;
use anyhow::{Context, Result};
use copilotd_draft::budget::{CostCurve, CostModel};
use copilotd_model::{CpuDescription, Model, ModelInfo};
use std::path::PathBuf;
use std::time::Instant;

/// Node counts measured for the draft budget (larger trees are extrapolated).
const CALIBRATION_NODES: [usize; 6] = [1, 2, 4, 8, 16, 32];
/// Cache lengths under the calibration passes: a short one and the longest
/// default prompt window; the cost between and beyond is interpolated.
const CALIBRATION_CACHES: [usize; 2] = [256, 2048];
/// Timed passes per node count (the median is kept): on a shared machine three were
/// too few for a stable curve.
const CALIBRATION_REPEATS: usize = 7;

/// A calibration is disturbed when, for some node count, the upper quartile of its timed
/// passes exceeds the lower quartile by this factor.
const NOISE_LIMIT: f64 = 1.5;
/// Tokens prefilled at a time, so that an interruption is seen between pieces.
const PREFILL_PIECE: usize = 256;

/// Real code to run the passes on; any text works, a fixed one keeps runs
/// comparable.
pub const SAMPLE_TEXT: &str = include_str!("../../../fixtures/bench_sample.py");

/// `count` tokens of the sample text (repeated as needed).
pub fn sample_tokens(model: &Model, count: usize) -> Result<Vec<u32>> {
    let mut tokens = model.tokenizer().encode(SAMPLE_TEXT)?;
    anyhow::ensure!(!tokens.is_empty(), "the sample text tokenized to nothing");
    while tokens.len() < count {
        tokens.extend_from_within(..);
    }
    tokens.truncate(count);
    Ok(tokens)
}

/// Median milliseconds of one forward over a chain of k nodes on a cache of
/// `cache` tokens, for each k. Leaves the model's cache empty.
pub fn measure(model: &mut Model, cache: usize, nodes: &[usize], repeats: usize) -> Result<Vec<(usize, f64)>> {
    model.truncate(0);
    let times = measure_on_cache(model, cache, nodes, repeats, &|| false);
    model.truncate(0);
    Ok(medians(nodes, &times?.context("never interrupted")?))
}

/// What a calibration gave.
pub enum Calibration {
    /// Measured on a quiet machine (and cached), or read from the cache.
    Done(CostModel),
    /// Measured while other work disturbed the timings: usable for now, not cached.
    Disturbed(CostModel),
    /// `interrupt` asked for the model before the end.
    Interrupted,
}

/// `measure` at several cache lengths, extending one prefill from the
/// shortest to the longest, until `interrupt` says stop. What the cache held before stays:
/// the lengths start above it when it is longer than the first (the cost depends on the
/// length, not on the text), and the cache is cut back to it at the end.
fn measure_lengths(
    model: &mut Model,
    caches: &[usize],
    nodes: &[usize],
    repeats: usize,
    interrupt: &dyn Fn() -> bool,
) -> Result<Calibration> {
    let held = model.cache_len();
    let largest = nodes.iter().copied().max().unwrap_or(1);
    let lengths = lengths_above(caches, held);
    if held > 0 && lengths.last().is_some_and(|&last| last + largest > model.info().context_length) {
        // No room above the cached prompt: measure from an empty cache.
        model.truncate(0);
        return measure_lengths(model, caches, nodes, repeats, interrupt);
    }
    let mut curves = Vec::new();
    let mut disturbed = false;
    for cache in lengths {
        let Some(times) = measure_on_cache(model, cache, nodes, repeats, interrupt)? else {
            model.truncate(held);
            return Ok(Calibration::Interrupted);
        };
        disturbed |= is_disturbed(&times);
        let curve = CostCurve::new(medians(nodes, &times)).context("calibration measured no usable times")?;
        curves.push((cache, curve));
    }
    model.truncate(held);
    let cost = CostModel::new(curves).context("no cache length to calibrate at")?;
    Ok(if disturbed { Calibration::Disturbed(cost) } else { Calibration::Done(cost) })
}

/// The calibration lengths moved above `held` cached tokens, keeping their spacing.
fn lengths_above(caches: &[usize], held: usize) -> Vec<usize> {
    let shift = caches.first().map_or(0, |&first| held.saturating_sub(first));
    caches.iter().map(|&cache| cache + shift).collect()
}

/// The median time of each node count.
fn medians(nodes: &[usize], times: &[Vec<f64>]) -> Vec<(usize, f64)> {
    nodes
        .iter()
        .zip(times)
        .map(|(&k, times)| {
            let mut times = times.clone();
            times.sort_by(f64::total_cmp);
            (k, times[times.len() / 2])
        })
        .collect()
}

/// Whether the repeated timings of some node count spread too far to trust.
fn is_disturbed(times: &[Vec<f64>]) -> bool {
    times.iter().any(|times| {
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        n >= 4 && sorted[3 * n / 4] > sorted[n / 4] * NOISE_LIMIT
    })
}

/// Fills the cache (keeping what it holds of the sample text) to `cache`
/// tokens, then times the chains; the chains' entries are not kept. The node
/// counts take turns, round after round, so that a burst of load on a shared
/// machine spreads over all of them instead of skewing one. Returns every timed pass per
/// node count; `None` once `interrupt` says stop (checked between passes).
fn measure_on_cache(
    model: &mut Model,
    cache: usize,
    nodes: &[usize],
    repeats: usize,
    interrupt: &dyn Fn() -> bool,
) -> Result<Option<Vec<Vec<f64>>>> {
    let largest = nodes.iter().copied().max().unwrap_or(1);
    let tokens = sample_tokens(model, cache + largest)?;
    let held = model.cache_len().min(cache);
    model.truncate(held);
    for piece in tokens[held..cache].chunks(PREFILL_PIECE) {
        if interrupt() {
            return Ok(None);
        }
        model.prefill(piece).context("calibration prefill failed")?;
    }
    let chains: Vec<(&[u32], Vec<Option<usize>>)> =
        nodes.iter().map(|&k| (&tokens[cache..cache + k], (0..k).map(|i| i.checked_sub(1)).collect())).collect();
    let mut times = vec![Vec::with_capacity(repeats); nodes.len()];
    // The first round warms up and is not kept.
    for round in 0..=repeats.max(1) {
        for ((chain, parents), times) in chains.iter().zip(times.iter_mut()) {
            if interrupt() {
                return Ok(None);
            }
            let started = Instant::now();
            model.forward_tree(chain, parents)?;
            if round > 0 {
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    Ok(Some(times))
}

fn cache_file(info: &ModelInfo, fingerprint: u64) -> PathBuf {
    // The version and the build are part of the key: a release or a build from source with
    // other kernels measures anew; so are the CPU and the kernel (in `device`): a cache
    // directory may move to another machine.
    let key = format!(
        "{}|{}|{}|{}|{}|{fingerprint:016x}|{}|{}",
        CpuDescription::of_this_machine().model,
        info.name,
        info.weights,
        info.device,
        info.threads,
        env!("CARGO_PKG_VERSION"),
        build_identity()
    );
    let hash = copilotd_draft::checksum::of_bytes(key.as_bytes());
    paths::cache_dir().join("calibration").join(format!("{hash:016x}.json"))
}

/// Tells one build of the running executable from another: its size and modification time
/// (empty where they cannot be read).
fn build_identity() -> String {
    let Ok(metadata) = std::env::current_exe().and_then(std::fs::metadata) else { return String::new() };
    let modified = metadata.modified().ok().and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok());
    format!("{}-{}", metadata.len(), modified.map_or(0, |since| since.as_secs()))
}

/// The cost model of this model on this machine: cached, or measured now
/// (several seconds for a small model; cached unless disturbed).
pub fn cost_model(model: &mut Model) -> Result<CostModel> {
    match calibrate(model, &|| false)? {
        Calibration::Done(cost) | Calibration::Disturbed(cost) => Ok(cost),
        Calibration::Interrupted => anyhow::bail!("calibration interrupted"),
    }
}

/// The cached cost model of this model on this machine, if there is a usable one.
pub fn cached(model: &Model) -> Option<CostModel> {
    let path = cache_file(model.info(), model.tokenizer().fingerprint());
    match read_cached(&path) {
        Cached::Usable(cost) => Some(cost),
        Cached::Missing => None,
        Cached::Unusable => {
            tracing::warn!("the calibration file {} is unusable; measuring again and replacing it", path.display());
            None
        }
    }
}

/// The cached cost model, or a measurement until `interrupt` says stop; an undisturbed
/// measurement is cached.
pub fn calibrate(model: &mut Model, interrupt: &dyn Fn() -> bool) -> Result<Calibration> {
    if let Some(cost) = cached(model) {
        return Ok(Calibration::Done(cost));
    }
    let path = cache_file(model.info(), model.tokenizer().fingerprint());
    let calibration = measure_lengths(model, &CALIBRATION_CACHES, &CALIBRATION_NODES, CALIBRATION_REPEATS, interrupt)?;
    match &calibration {
        Calibration::Done(cost) => {
            if let Err(error) = copilotd_draft::atomic_file::write(&path, &encode(cost)) {
                tracing::warn!("cannot cache the cost curve at {}: {error:#}", path.display());
            }
        }
        Calibration::Disturbed(_) => tracing::info!("the cost calibration was disturbed by other work; not cached"),
        Calibration::Interrupted => {}
    }
    Ok(calibration)
}

/// What the calibration cache holds for a model.
enum Cached {
    Missing,
    Usable(CostModel),
    /// Unreadable, damaged or from another layout: measured again and replaced.
    Unusable,
}

fn read_cached(path: &std::path::Path) -> Cached {
    match std::fs::read(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Cached::Missing,
        Err(_) => Cached::Unusable,
        Ok(bytes) => parse(&bytes).map_or(Cached::Unusable, Cached::Usable),
    }
}

fn encode(cost: &CostModel) -> Vec<u8> {
    let stored: Vec<(usize, &[(usize, f64)])> = cost.curves().iter().map(|(len, c)| (*len, c.points())).collect();
    serde_json::to_vec(&stored).expect("numbers serialize")
}

/// A cached cost model; `None` when unreadable or from another layout.
fn parse(bytes: &[u8]) -> Option<CostModel> {
    let stored: Vec<(usize, Vec<(usize, f64)>)> = serde_json::from_slice(bytes).ok()?;
    let curves = stored.into_iter().map(|(len, points)| Some((len, CostCurve::new(points)?))).collect::<Option<_>>()?;
    CostModel::new(curves)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_timings_are_a_disturbed_calibration() {
        let quiet = vec![vec![10.0, 10.2, 9.9, 10.1, 10.4, 10.0, 9.8], vec![20.0, 21.0, 20.5, 19.8, 20.1, 20.2, 20.3]];
        assert!(!is_disturbed(&quiet));
        // A busy machine: half the passes of one node count ran twice as slow.
        let busy = vec![quiet[0].clone(), vec![20.0, 41.0, 20.5, 44.0, 39.0, 20.2, 42.0]];
        assert!(is_disturbed(&busy));
        assert_eq!(medians(&[1, 2], &quiet), vec![(1, 10.0), (2, 20.2)]);
    }

    #[test]
    fn calibration_lengths_start_above_the_cached_prompt() {
        assert_eq!(lengths_above(&CALIBRATION_CACHES, 0), vec![256, 2048]);
        assert_eq!(lengths_above(&CALIBRATION_CACHES, 256), vec![256, 2048]);
        assert_eq!(lengths_above(&CALIBRATION_CACHES, 900), vec![900, 2692]);
    }

    #[test]
    fn a_garbage_calibration_file_is_unusable_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.json");
        assert!(matches!(read_cached(&path), Cached::Missing));
        std::fs::write(&path, b"\x00garbage{").unwrap();
        assert!(matches!(read_cached(&path), Cached::Unusable));
        let curve = CostCurve::new(vec![(1, 10.0), (8, 25.0)]).unwrap();
        let cost = CostModel::new(vec![(256, curve.clone()), (2048, curve)]).unwrap();
        copilotd_draft::atomic_file::write(&path, &encode(&cost)).unwrap();
        match read_cached(&path) {
            Cached::Usable(read) => assert_eq!(read.curves().len(), 2),
            _ => panic!("the replaced file must be usable"),
        }
    }
}
