//! Measuring what one forward pass costs on this machine: t(k) for a tree of
//! k nodes on a warm cache, at a short and a long cache (attention work grows
//! with the cache). The cost-aware draft budget needs it; it is measured once
//! per model, weight format, device (with its kernel), thread count and build of copilotd, and cached.
//!
//! The language server measures in the background, giving way to requests
//! (`interrupt`); a measurement whose repeated timings disagree too much was
//! disturbed by other work on the machine: it is used for the time being, not
//! cached, and measured again later.
//!
//! A load that lasts a whole measurement leaves its timings steady, so that check misses
//! it, and it does not slow every pass alike: other processes' memory traffic slows a
//! one-token pass (which streams the weights) far more than a tree pass (which computes),
//! and a skewed curve makes the budget verify trees too large for every request after.
//! So a cached curve is measured again later ([`CONFIRMATIONS`] measurements in all, at
//! least [`CONFIRM_AFTER`] apart), and each point keeps its least time.

use crate::paths;
use anyhow::{Context, Result};
use copilotd_draft::budget::{CostCurve, CostModel};
use copilotd_model::{CpuDescription, Model, ModelInfo};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// Node counts measured for the draft budget (larger trees are extrapolated). Most trees
/// verified are small, and the cost bends between the counts where the kernels' work splits
/// change (groups of four input rows, attention blocks): 3, 5 and 6 are measured, not
/// interpolated (with the group of five rows a fifth node adds 0.4–0.5 ms and a sixth
/// 1.0–1.2 ms at 1,536 cached tokens, AVX-512 VNNI; the line between t(4) and t(6) missed it).
const CALIBRATION_NODES: [usize; 9] = [1, 2, 3, 4, 5, 6, 8, 16, 32];
/// Cache lengths under the calibration passes: a short one and the longest
/// default prompt window; the cost between and beyond is interpolated. A model with a shorter
/// context is measured at lengths it holds ([`lengths_within`]).
const CALIBRATION_CACHES: [usize; 2] = [256, 2048];
/// Timed passes per node count (the median is kept): on a shared machine three were
/// too few for a stable curve.
const CALIBRATION_REPEATS: usize = 7;

/// A calibration is disturbed when, for some node count, the upper quartile of its timed
/// passes exceeds the lower quartile by this factor.
const NOISE_LIMIT: f64 = 1.5;
/// Untimed passes of a node count before its timed ones (see [`measure_on_cache`]).
const SETTLE: Duration = Duration::from_millis(30);
/// Tokens prefilled at a time, so that an interruption is seen between pieces.
const PREFILL_PIECE: usize = 256;
/// Undisturbed measurements, taken at different times, merged before a cached curve is final.
pub const CONFIRMATIONS: u32 = 3;
/// Least time between the measurements that confirm a curve, so that a load on the machine
/// lasting minutes skews at most one of them.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(15 * 60);

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

/// A cost model and the undisturbed measurements merged into it.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibrated {
    pub cost: CostModel,
    pub measurements: u32,
    /// When the last of them ended, in seconds since the Unix epoch.
    pub measured_at: u64,
}

impl Calibrated {
    /// Whether enough measurements were merged for the curve to stay as it is.
    pub fn confirmed(&self) -> bool {
        self.measurements >= CONFIRMATIONS
    }

    /// How long until the next measurement that confirms the curve is due at `now` (seconds
    /// since the Unix epoch; zero when it is due); `None` once confirmed.
    pub fn confirm_in(&self, now: u64) -> Option<Duration> {
        let since = Duration::from_secs(now.saturating_sub(self.measured_at));
        (!self.confirmed()).then(|| CONFIRM_AFTER.saturating_sub(since))
    }

    /// This calibration with a later measurement merged: each point keeps the lesser of its
    /// time and the later model's at the same node count and cache length. The later model
    /// may have been measured at other cache lengths (above a cached prompt): a point is
    /// compared only where they cover its length, and the measurement counts only if some
    /// point was. Either way the next one is due [`CONFIRM_AFTER`] after `now`.
    fn merged_with(&self, later: &CostModel, now: u64) -> Calibrated {
        let (Some(&(shortest, _)), Some(&(longest, _))) = (later.curves().first(), later.curves().last()) else {
            return self.clone();
        };
        let covered = |length: usize| (shortest..=longest).contains(&length);
        let curves = self.cost.curves().iter().map(|(length, curve)| {
            let points = curve
                .points()
                .iter()
                .map(|&(nodes, ms)| (nodes, if covered(*length) { ms.min(later.cost(nodes, *length)) } else { ms }));
            (*length, CostCurve::new(points.collect()).expect("merged from a valid curve"))
        });
        let compared = self.cost.curves().iter().any(|(length, _)| covered(*length));
        Calibrated {
            cost: CostModel::new(curves.collect()).expect("merged from a valid model"),
            measurements: self.measurements + u32::from(compared),
            // Also when nothing compared (a measurement above a long cached prompt): the next
            // one waits as long as after any other.
            measured_at: now,
        }
    }
}

/// What a calibration gave.
pub enum Calibration {
    /// Read from the cache, not measured.
    Cached(Calibrated),
    /// Measured on a quiet machine and cached (merged with what was).
    Measured(Calibrated),
    /// Measured while other work disturbed the timings: the cached model if there is one,
    /// else the disturbed one, usable for now and not cached.
    Disturbed(CostModel),
    /// `interrupt` asked for the model before the end.
    Interrupted,
}

/// What [`calibrate`] does with a cached curve that is not [confirmed](Calibrated::confirmed) yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unconfirmed {
    /// Takes it as it is (a one-off command that should not wait).
    Use,
    /// Measures once more and merges, when the last measurement is [`CONFIRM_AFTER`] old.
    MeasureAgain,
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
) -> Result<Measured> {
    let held = model.cache_len();
    let largest = nodes.iter().copied().max().unwrap_or(1);
    let context = model.info().context_length;
    // The longest cache the largest pass fits on.
    let room = context.checked_sub(largest).with_context(|| {
        format!("the model's context of {context} tokens is shorter than the largest calibration pass ({largest})")
    })?;
    let lengths = lengths_above(caches, held);
    if held > 0 && lengths.last().is_some_and(|&last| last > room) {
        // No room above the cached prompt: measure from an empty cache.
        model.truncate(0);
        return measure_lengths(model, caches, nodes, repeats, interrupt);
    }
    let lengths = lengths_within(&lengths, room);
    let mut curves = Vec::new();
    let mut disturbed = false;
    for cache in lengths {
        let Some(times) = measure_on_cache(model, cache, nodes, repeats, interrupt)? else {
            model.truncate(held);
            return Ok(Measured::Interrupted);
        };
        disturbed |= is_disturbed(&times);
        let curve = CostCurve::new(medians(nodes, &times)).context("calibration measured no usable times")?;
        curves.push((cache, curve));
    }
    model.truncate(held);
    let cost = CostModel::new(curves).context("no cache length to calibrate at")?;
    Ok(if disturbed { Measured::Disturbed(cost) } else { Measured::Quiet(cost) })
}

/// What one measurement gave.
enum Measured {
    Quiet(CostModel),
    /// Its repeated timings spread too far to trust.
    Disturbed(CostModel),
    Interrupted,
}

/// The calibration lengths moved above `held` cached tokens, keeping their spacing.
fn lengths_above(caches: &[usize], held: usize) -> Vec<usize> {
    let shift = caches.first().map_or(0, |&first| held.saturating_sub(first));
    caches.iter().map(|&cache| cache + shift).collect()
}

/// `lengths` cut to `room` (a model with a short context), each kept only while longer than
/// the one before it.
fn lengths_within(lengths: &[usize], room: usize) -> Vec<usize> {
    let mut within: Vec<usize> = Vec::with_capacity(lengths.len());
    for length in lengths.iter().map(|&length| length.min(room)) {
        if within.last().is_none_or(|&last| length > last) {
            within.push(length);
        }
    }
    within
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
/// tokens, then times the chains; the chains' entries are not kept. Each node count is
/// timed in a block of its own passes, after [`SETTLE`] of untimed ones: a pass costs more
/// right after larger ones (a one-node pass 40% more after a 16-node pass, a 4-node pass
/// 20% more, on both AVX-512 and AVX2; Intel Xeon, Emerald Rapids class), and node counts
/// that took turns priced small trees above what a generation pays for them. Returns
/// every timed pass per node count; `None` once `interrupt` says stop (checked between
/// passes).
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
    let mut times = Vec::with_capacity(nodes.len());
    for &k in nodes {
        let chain = &tokens[cache..cache + k];
        let parents: Vec<Option<usize>> = (0..k).map(|i| i.checked_sub(1)).collect();
        let block_started = Instant::now();
        let mut timed = Vec::with_capacity(repeats);
        while timed.len() < repeats.max(1) {
            if interrupt() {
                return Ok(None);
            }
            let started = Instant::now();
            model.forward_tree(chain, &parents)?;
            if started.duration_since(block_started) >= SETTLE {
                timed.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
        times.push(timed);
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

/// The cached calibration of this model on this machine, if there is a usable one.
pub fn cached(model: &Model) -> Option<Calibrated> {
    let path = cache_file(model.info(), model.tokenizer().fingerprint());
    match read_cached(&path) {
        CacheFile::Usable(calibrated) => Some(calibrated),
        CacheFile::Missing => None,
        CacheFile::Unusable => {
            tracing::warn!("the calibration file {} is unusable; measuring again and replacing it", path.display());
            None
        }
    }
}

/// Seconds since the Unix epoch (0 on a clock before it).
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

/// The cached calibration (measured once more first if a confirming measurement is due and
/// `unconfirmed` says so), or a measurement until `interrupt` says stop. An undisturbed
/// measurement is merged into the cached one, or cached as the first.
pub fn calibrate(model: &mut Model, unconfirmed: Unconfirmed, interrupt: &dyn Fn() -> bool) -> Result<Calibration> {
    let cached = cached(model);
    let due = |c: &Calibrated| c.confirm_in(unix_now()).is_some_and(|wait| wait.is_zero());
    if let Some(calibrated) = cached.as_ref().filter(|c| unconfirmed == Unconfirmed::Use || !due(c)) {
        return Ok(Calibration::Cached(calibrated.clone()));
    }
    let path = cache_file(model.info(), model.tokenizer().fingerprint());
    // Said before the measurement, which then serves this process only: also when other work
    // disturbs it, which would not be cached anyway.
    let cacheable = match copilotd_draft::atomic_file::check_writable(&path) {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!("cannot cache the cost curve: {error:#}");
            false
        }
    };
    let started = Instant::now();
    let measured = measure_lengths(model, &CALIBRATION_CACHES, &CALIBRATION_NODES, CALIBRATION_REPEATS, interrupt)?;
    Ok(match measured {
        Measured::Quiet(cost) => {
            let now = unix_now();
            let calibrated = match cached {
                Some(earlier) => earlier.merged_with(&cost, now),
                None => Calibrated { cost, measurements: 1, measured_at: now },
            };
            tracing::info!(
                "cost calibration: measurement {} of {CONFIRMATIONS} done in {:.1} s",
                calibrated.measurements,
                started.elapsed().as_secs_f64()
            );
            if cacheable {
                if let Err(error) = write_file(&path, &calibrated) {
                    tracing::warn!("cannot cache the cost curve: {error:#}");
                }
            }
            Calibration::Measured(calibrated)
        }
        Measured::Disturbed(cost) => {
            tracing::info!("the cost calibration was disturbed by other work; not cached");
            Calibration::Disturbed(cached.map_or(cost, |earlier| earlier.cost))
        }
        Measured::Interrupted => Calibration::Interrupted,
    })
}

/// What the calibration cache holds for a model.
enum CacheFile {
    Missing,
    Usable(Calibrated),
    /// Unreadable, damaged or from another layout: measured again and replaced.
    Unusable,
}

fn read_cached(path: &std::path::Path) -> CacheFile {
    match std::fs::read(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => CacheFile::Missing,
        Err(_) => CacheFile::Unusable,
        Ok(bytes) => parse(&bytes).map_or(CacheFile::Unusable, CacheFile::Usable),
    }
}

/// Reads a calibration in the cache's file format (for benchmarks that compare builds on one
/// cost curve: each build otherwise measures and caches its own).
pub fn read_file(path: &std::path::Path) -> Result<Calibrated> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read the calibration file {}", path.display()))?;
    parse(&bytes).with_context(|| format!("{} is not a calibration file", path.display()))
}

/// Writes `calibrated` in the cache's file format.
pub fn write_file(path: &std::path::Path, calibrated: &Calibrated) -> Result<()> {
    copilotd_draft::atomic_file::write(path, &encode(calibrated))
        .with_context(|| format!("cannot write the calibration file {}", path.display()))
}

/// A calibration as the cache file holds it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    measurements: u32,
    measured_at: u64,
    /// `(cache length, [(nodes, milliseconds)])`.
    curves: Vec<(usize, Vec<(usize, f64)>)>,
}

fn encode(calibrated: &Calibrated) -> Vec<u8> {
    let curves = calibrated.cost.curves().iter().map(|(len, c)| (*len, c.points().to_vec())).collect();
    let Calibrated { measurements, measured_at, .. } = *calibrated;
    serde_json::to_vec(&Stored { measurements, measured_at, curves }).expect("numbers serialize")
}

/// A cached calibration; `None` when unreadable or from another layout.
fn parse(bytes: &[u8]) -> Option<Calibrated> {
    let stored: Stored = serde_json::from_slice(bytes).ok()?;
    let curves =
        stored.curves.into_iter().map(|(len, points)| Some((len, CostCurve::new(points)?))).collect::<Option<_>>()?;
    let Stored { measurements, measured_at, .. } = stored;
    (measurements > 0).then_some(Calibrated { cost: CostModel::new(curves)?, measurements, measured_at })
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
    fn calibration_lengths_fit_in_the_context() {
        assert_eq!(lengths_within(&CALIBRATION_CACHES, 8192 - 32), vec![256, 2048]);
        assert_eq!(lengths_within(&CALIBRATION_CACHES, 2048 - 32), vec![256, 2016]);
        assert_eq!(lengths_within(&CALIBRATION_CACHES, 256 - 32), vec![224], "one length when both collapse");
        assert_eq!(lengths_within(&CALIBRATION_CACHES, 256), vec![256]);
    }

    #[test]
    fn a_garbage_calibration_file_is_unusable_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.json");
        assert!(matches!(read_cached(&path), CacheFile::Missing));
        std::fs::write(&path, b"\x00garbage{").unwrap();
        assert!(matches!(read_cached(&path), CacheFile::Unusable));
        let refused = read_file(&path).unwrap_err();
        assert!(format!("{refused:#}").contains("is not a calibration file"), "{refused:#}");
        let curve = CostCurve::new(vec![(1, 10.0), (8, 25.0)]).unwrap();
        let cost = CostModel::new(vec![(256, curve.clone()), (2048, curve)]).unwrap();
        let calibrated = Calibrated { cost, measurements: 2, measured_at: 1_800_000_000 };
        write_file(&path, &calibrated).unwrap();
        match read_cached(&path) {
            CacheFile::Usable(read) => assert_eq!(read, calibrated),
            _ => panic!("the replaced file must be usable"),
        }
        assert_eq!(read_file(&path).unwrap(), calibrated, "a benchmark reads the file the cache holds");
        // The format before measurements were counted: measured again.
        std::fs::write(&path, br#"[[256,[[1,10.0],[8,25.0]]]]"#).unwrap();
        assert!(matches!(read_cached(&path), CacheFile::Unusable));
    }

    fn model(curves: &[(usize, &[(usize, f64)])]) -> CostModel {
        CostModel::new(curves.iter().map(|(len, points)| (*len, CostCurve::new(points.to_vec()).unwrap())).collect())
            .unwrap()
    }

    #[test]
    fn a_later_measurement_keeps_each_points_least_time() {
        // The first measurement ran while other work held the memory: the one-token pass
        // slowed, the tree pass did not.
        let skewed = Calibrated {
            cost: model(&[(256, &[(1, 4.5), (16, 15.0)]), (2048, &[(1, 6.0), (16, 30.0)])]),
            measurements: 1,
            measured_at: 1000,
        };
        assert!(!skewed.confirmed());
        let quiet = model(&[(256, &[(1, 3.0), (16, 15.5)]), (2048, &[(1, 4.5), (16, 29.0)])]);
        let merged = skewed.merged_with(&quiet, 2000);
        assert_eq!((merged.measurements, merged.measured_at), (2, 2000));
        assert_eq!(merged.cost, model(&[(256, &[(1, 3.0), (16, 15.0)]), (2048, &[(1, 4.5), (16, 29.0)])]));
        assert!(merged.merged_with(&quiet, 3000).confirmed());
    }

    #[test]
    fn a_confirming_measurement_is_due_a_while_after_the_last() {
        let cost = model(&[(256, &[(1, 3.0)])]);
        let first = Calibrated { cost: cost.clone(), measurements: 1, measured_at: 10_000 };
        let minutes = |m: u64| 10_000 + 60 * m;
        assert_eq!(first.confirm_in(minutes(0)), Some(CONFIRM_AFTER));
        assert_eq!(first.confirm_in(minutes(5)), Some(CONFIRM_AFTER - Duration::from_secs(300)));
        assert_eq!(first.confirm_in(minutes(60)), Some(Duration::ZERO));
        assert_eq!(first.confirm_in(5_000), Some(CONFIRM_AFTER), "a clock set back waits the whole time");
        let confirmed = Calibrated { cost, measurements: CONFIRMATIONS, measured_at: 10_000 };
        assert_eq!(confirmed.confirm_in(minutes(60)), None);
    }

    #[test]
    fn a_measurement_above_a_cached_prompt_merges_where_it_covers_the_length() {
        let earlier =
            Calibrated { cost: model(&[(256, &[(1, 4.0)]), (2048, &[(1, 8.0)])]), measurements: 1, measured_at: 1000 };
        // Measured at 1,000 and 3,000 cached tokens: 2,048 lies between them, 256 does not.
        let later = model(&[(1000, &[(1, 2.0)]), (3000, &[(1, 6.0)])]);
        let merged = earlier.merged_with(&later, 2000);
        assert_eq!(merged.cost, model(&[(256, &[(1, 4.0)]), (2048, &[(1, 2.0 + 4.0 * 1048.0 / 2000.0)])]));
        assert_eq!(merged.measurements, 2);
        let apart = model(&[(3000, &[(1, 1.0)]), (5000, &[(1, 1.0)])]);
        let not_counted = earlier.merged_with(&apart, 2000);
        assert_eq!((&not_counted.cost, not_counted.measurements), (&earlier.cost, 1), "nothing to compare");
        assert_eq!(not_counted.measured_at, 2000, "the next one waits all the same");
    }
}
