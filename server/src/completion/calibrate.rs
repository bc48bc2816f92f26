//! Measuring what one forward pass costs on this machine: t(k) for a tree of
//! k nodes on a warm cache. The cost-aware draft budget needs it; it is
//! measured once per model, weight format, device and thread count, and
//! cached.

use crate::paths;
use anyhow::{Context, Result};
use copilotd_draft::budget::CostCurve;
use copilotd_model::{Model, ModelInfo};
use std::path::PathBuf;
use std::time::Instant;

/// Node counts measured for the draft budget.
const CALIBRATION_NODES: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Cache length under the calibration passes.
const CALIBRATION_CACHE: usize = 256;
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
    let largest = nodes.iter().copied().max().unwrap_or(1);
    let tokens = sample_tokens(model, cache + largest)?;
    model.truncate(0);
    model.prefill(&tokens[..cache]).context("calibration prefill failed")?;
    let mut curve = Vec::with_capacity(nodes.len());
    for &k in nodes {
        let chain = &tokens[cache..cache + k];
        let parents: Vec<Option<usize>> = (0..k).map(|i| i.checked_sub(1)).collect();
        model.forward_tree(chain, &parents)?; // warm-up
        let mut times = Vec::with_capacity(repeats);
        for _ in 0..repeats.max(1) {
            let started = Instant::now();
            model.forward_tree(chain, &parents)?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        curve.push((k, times[times.len() / 2]));
    }
    model.truncate(0);
    Ok(curve)
}

fn cache_file(info: &ModelInfo, fingerprint: u64) -> PathBuf {
    // The version is part of the key: a release with other kernels measures anew.
    let key = format!(
        "{}|{}|{}|{}|{fingerprint:016x}|{}",
        info.name,
        info.weights,
        info.device,
        info.threads,
        env!("CARGO_PKG_VERSION")
    );
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    paths::cache_dir().join("calibration").join(format!("{hash:016x}.json"))
}

/// The cost curve of this model on this machine: cached, or measured now
/// (a few seconds for a small model) and cached.
pub fn cost_curve(model: &mut Model) -> Result<CostCurve> {
    let path = cache_file(model.info(), model.tokenizer().fingerprint());
    if let Some(curve) = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Vec<(usize, f64)>>(&bytes).ok())
        .and_then(CostCurve::new)
    {
        return Ok(curve);
    }
    let points = measure(model, CALIBRATION_CACHE, &CALIBRATION_NODES, CALIBRATION_REPEATS)?;
    let curve = CostCurve::new(points.clone()).context("calibration measured no usable times")?;
    if let Err(error) = write_atomically(&path, &serde_json::to_vec(&points)?) {
        tracing::warn!("cannot cache the cost curve at {}: {error:#}", path.display());
    }
    Ok(curve)
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().context("no parent directory")?;
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.persist(path)?;
    Ok(())
}
