//! Measuring what one forward pass costs on this machine: t(k) for a tree of
//! k nodes on a warm cache, at a short and a long cache (attention work grows
//! with the cache). The cost-aware draft budget needs it; it is measured once
//! per model, weight format, device and thread count, and cached.

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
    let curve = measure_on_cache(model, cache, nodes, repeats);
    model.truncate(0);
    curve
}

/// `measure` at several cache lengths, extending one prefill from the
/// shortest to the longest. Leaves the model's cache empty.
fn measure_lengths(model: &mut Model, caches: &[usize], nodes: &[usize], repeats: usize) -> Result<CostModel> {
    model.truncate(0);
    let curves: Result<Vec<(usize, CostCurve)>> = caches
        .iter()
        .map(|&cache| {
            let points = measure_on_cache(model, cache, nodes, repeats)?;
            Ok((cache, CostCurve::new(points).context("calibration measured no usable times")?))
        })
        .collect();
    model.truncate(0);
    CostModel::new(curves?).context("no cache length to calibrate at")
}

/// Fills the cache (keeping what it holds of the sample text) to `cache`
/// tokens, then times the chains; the chains' entries are not kept. The node
/// counts take turns, round after round, so that a burst of load on a shared
/// machine spreads over all of them instead of skewing one.
fn measure_on_cache(model: &mut Model, cache: usize, nodes: &[usize], repeats: usize) -> Result<Vec<(usize, f64)>> {
    let largest = nodes.iter().copied().max().unwrap_or(1);
    let tokens = sample_tokens(model, cache + largest)?;
    let held = model.cache_len().min(cache);
    model.truncate(held);
    model.prefill(&tokens[held..cache]).context("calibration prefill failed")?;
    let chains: Vec<(&[u32], Vec<Option<usize>>)> =
        nodes.iter().map(|&k| (&tokens[cache..cache + k], (0..k).map(|i| i.checked_sub(1)).collect())).collect();
    let mut times = vec![Vec::with_capacity(repeats); nodes.len()];
    // The first round warms up and is not kept.
    for round in 0..=repeats.max(1) {
        for ((chain, parents), times) in chains.iter().zip(times.iter_mut()) {
            let started = Instant::now();
            model.forward_tree(chain, parents)?;
            if round > 0 {
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    Ok(nodes
        .iter()
        .zip(times)
        .map(|(&k, mut times)| {
            times.sort_by(f64::total_cmp);
            (k, times[times.len() / 2])
        })
        .collect())
}

fn cache_file(info: &ModelInfo, fingerprint: u64) -> PathBuf {
    // The version is part of the key: a release with other kernels measures anew; so
    // are the CPU and the kernel (in `device`): a cache directory may move to another machine.
    let key = format!(
        "{}|{}|{}|{}|{}|{fingerprint:016x}|{}",
        CpuDescription::of_this_machine().model,
        info.name,
        info.weights,
        info.device,
        info.threads,
        env!("CARGO_PKG_VERSION")
    );
    let hash = copilotd_draft::checksum::of_bytes(key.as_bytes());
    paths::cache_dir().join("calibration").join(format!("{hash:016x}.json"))
}

/// The cost model of this model on this machine: cached, or measured now
/// (several seconds for a small model) and cached.
pub fn cost_model(model: &mut Model) -> Result<CostModel> {
    let path = cache_file(model.info(), model.tokenizer().fingerprint());
    match read_cached(&path) {
        Cached::Usable(cost) => return Ok(cost),
        Cached::Missing => {}
        Cached::Unusable => {
            tracing::warn!("the calibration file {} is unusable; measuring again and replacing it", path.display())
        }
    }
    let cost = measure_lengths(model, &CALIBRATION_CACHES, &CALIBRATION_NODES, CALIBRATION_REPEATS)?;
    if let Err(error) = copilotd_draft::atomic_file::write(&path, &encode(&cost)) {
        tracing::warn!("cannot cache the cost curve at {}: {error:#}", path.display());
    }
    Ok(cost)
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
