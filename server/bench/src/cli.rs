//! `copilotd bench`: measurements of the running model and device, the repository benchmark,
//! the LSP latency benchmark, and the uncompacted common store they compare with.

use crate::packages;
use crate::repo::{self, RepoBench, TaskRun, Variant};
use crate::sweep::{self, Sweep};
use crate::{full_common, memory, report};
use anyhow::{Context, Result};
use clap::builder::RangedU64ValueParser;
use clap::{Args, Subcommand};
use copilotd_draft::common_store::CommonStore;
use copilotd_draft::fastcoder::FastCoderConfig;
use copilotd_model::{CpuDescription, Kernel, ModelInfo};
use copilotd_server::cli::{parse, BuildCommonArgs, EngineArgs, ModelArgs, SamplingArgs};
use copilotd_server::completion::drafting::BudgetSettings;
use copilotd_server::completion::{
    self, calibrate, common, Calibrated, Calibration, Completer, Sampling, Strategy, Unconfirmed,
};
use copilotd_server::config::{Config, MAX_TOKENS_LIMIT};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Time one forward over k new tree nodes on a warm cache, for several k.
    CostCurve(CostCurveArgs),
    /// Time the weight products of a forward pass alone, per kind of matrix, for several
    /// numbers of input rows: where a pass's arithmetic goes and the kernel's rate.
    Products(ProductsArgs),
    /// Repository-level completion tasks from real packages, every strategy
    /// against `ar` in the same run.
    Repo(RepoArgs),
    /// LSP request-to-response latency of single-line completions, cold
    /// (a new file) and warm (after one keystroke), against `copilotd --stdio`.
    Lsp(LspArgs),
    /// A person typing function bodies of real packages back, keystroke by keystroke,
    /// through `copilotd --stdio`: latency, suggestions taken, work per character.
    Typing(TypingArgs),
    /// Build the uncompacted common datastore (every n-gram, not CREST's top-t)
    /// that `bench repo --common-full` compares with, ahead of time.
    BuildFullCommon(BuildCommonArgs),
}

#[derive(Args, Debug)]
pub struct LspArgs {
    /// Python files to complete in (default: a few modules of the Python standard library).
    files: Vec<PathBuf>,
    /// Cold/warm pairs to measure, at least 2.
    #[arg(long, default_value_t = 20, value_parser = RangedU64ValueParser::<usize>::new().range(2..))]
    samples: usize,
    /// Most new tokens per completion, 1 to 4096.
    #[arg(long, default_value_t = 16, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_TOKENS_LIMIT as u64))]
    max_tokens: usize,
    /// The model (default: $COPILOTD_MODEL, else the embedded default model; config.toml is
    /// not read).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Seconds between opening a document and the first request in it, for the figure of a
    /// fresh server's first completion after a pause.
    #[arg(long, default_value_t = 5.0)]
    pause: f64,
    #[command(flatten)]
    prompt_latency: PromptLatencyArg,
}

/// The servers' bound on reading prompts, for the benchmarks that start servers.
#[derive(Args, Debug)]
pub struct PromptLatencyArg {
    /// The servers' `promptLatencyMs`, 0 to 60000 (0: prompts are never cut to be read in time;
    /// default: the server's default).
    #[arg(long, value_parser = RangedU64ValueParser::<u64>::new().range(0..=60_000))]
    prompt_latency_ms: Option<u64>,
}

#[derive(Args, Debug)]
pub struct TypingArgs {
    /// Package list, one `name==version` a line.
    #[arg(long, default_value = "benches/packages.txt")]
    packages: PathBuf,
    /// Packages used, from the top of the list.
    #[arg(long, default_value_t = 2)]
    package_count: usize,
    /// Tasks per package.
    #[arg(long, default_value_t = 2)]
    tasks: usize,
    /// Strategies replayed, each on its own daemon.
    #[arg(long, value_delimiter = ',', default_value = "ar,auto", value_parser = parse::<Strategy>)]
    strategies: Vec<Strategy>,
    /// Characters of each body typed (cut after a whole line).
    #[arg(long, default_value_t = 300)]
    max_chars: usize,
    /// Most new tokens per completion, 1 to 4096 (the editors' default).
    #[arg(long, default_value_t = 64, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_TOKENS_LIMIT as u64))]
    max_tokens: usize,
    /// Seed of the person's pace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Whether the person's takes are reported to the daemon (`copilotd/suggestionFeedback`):
    /// `off`, `on`, or `off,on` to replay both and compare.
    #[arg(long, value_delimiter = ',', default_value = "off", value_parser = parse_switch)]
    feedback: Vec<bool>,
    /// The model (default: $COPILOTD_MODEL, else the embedded default model; config.toml is
    /// not read).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Where results.json and results.md go.
    #[arg(long, default_value = "target/bench/typing")]
    out: PathBuf,
    #[command(flatten)]
    prompt_latency: PromptLatencyArg,
}

#[derive(Args, Debug)]
pub struct RepoArgs {
    /// Package list, one `name==version` a line.
    #[arg(long, default_value = "benches/packages.txt")]
    packages: PathBuf,
    /// Tasks per package, at least 1.
    #[arg(long, default_value_t = 8, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    tasks: usize,
    /// Tasks per package that every variant completes first, unmeasured (other functions
    /// of the package): the measured tasks then meet a warm daemon, as a person does after
    /// a while. Acceptance counts carry from package to package either way.
    #[arg(long, default_value_t = 2)]
    warmup_tasks: usize,
    /// Most new tokens per task, 1 to 4096.
    #[arg(long, default_value_t = 128, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_TOKENS_LIMIT as u64))]
    max_tokens: usize,
    /// Strategies compared with `ar` (which always runs first).
    #[arg(long, value_delimiter = ',', default_value = "pld,fastcoder", value_parser = parse::<Strategy>)]
    strategies: Vec<Strategy>,
    /// Also run FastCoder with each component switched off in turn, and
    /// `auto` without internal speculation.
    #[arg(long)]
    ablations: bool,
    /// Also run one variant per value of a parameter, the others at their
    /// defaults (repeatable). FastCoder's: alpha, beta, cache_weight, delta
    /// (the cache's activation threshold δ), p (line-start retrieval
    /// probability); SPECTRA's: tau, ngram, backward_len, and spectra_weight
    /// (run with auto); nodes: every FastCoder tree verified at this fixed size.
    #[arg(long = "sweep", value_name = "NAME=V1,V2,...", value_parser = parse_sweep)]
    sweeps: Vec<Sweep>,
    /// Also run each strategy that reads the common store with the
    /// uncompacted store (every n-gram of the same corpus instead of CREST's
    /// top-t; built once and cached).
    #[arg(long)]
    common_full: bool,
    /// Also run each strategy that reads the common store with the store
    /// refined by the loaded model's perplexity (SPECTRA-RETRIEVAL): the one
    /// `copilotd datastore build-common --refine FRACTION` built for this
    /// model, or the store file at PATH.
    #[arg(long, value_name = "PATH")]
    common_refined: Option<Option<PathBuf>>,
    /// Price drafts with the cost curve in this file (a `calibration.json` that an earlier
    /// run wrote next to its results, or a file of the calibration cache) instead of this
    /// build's own: acceptance moves with the curve, so builds compared with each other
    /// should share one.
    #[arg(long, value_name = "FILE", conflicts_with = "fixed_budget")]
    calibration: Option<PathBuf>,
    /// Where results.json, results.md and calibration.json (the cost curve used) go.
    #[arg(long, default_value = "target/bench/repo")]
    out: PathBuf,
    /// Greedy by default; with a temperature every variant samples (outputs then differ from
    /// `ar`'s by design: acceptance and speed are reported, identity is not).
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Args, Debug)]
pub struct CostCurveArgs {
    /// Tokens in the KV cache under the measured passes.
    #[arg(long, default_value_t = 512)]
    cache: usize,
    /// Timed repetitions per k (the median is reported).
    #[arg(long, default_value_t = 9)]
    repeats: usize,
    /// Node counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,6,8,12,16,32,64")]
    nodes: Vec<usize>,
    /// Autoregressive tokens generated for the decode-speed figure, at least 1.
    #[arg(long, default_value_t = 128, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    decode_tokens: usize,
    /// Print one JSON object on the last line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(Args, Debug)]
pub struct ProductsArgs {
    /// Input rows (tree nodes or prompt tokens) per product.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    rows: Vec<usize>,
    /// Timed repetitions per matrix and row count (the median is reported), at least 1.
    #[arg(long, default_value_t = 21, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    repeats: usize,
    /// Print one JSON object on the last line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model: ModelArgs,
}

pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::CostCurve(args) => cost_curve(&args),
        BenchCommand::Products(args) => products(&args),
        BenchCommand::Repo(args) => repo(&args),
        BenchCommand::Lsp(args) => lsp(args),
        BenchCommand::Typing(args) => typing(&args),
        BenchCommand::BuildFullCommon(args) => args.build(full_common::store_path, full_common::params()),
    }
}

fn cost_curve(args: &CostCurveArgs) -> Result<()> {
    anyhow::ensure!(args.repeats > 0 && args.cache > 0, "--repeats and --cache must be positive");
    anyhow::ensure!(!args.nodes.is_empty() && !args.nodes.contains(&0), "--nodes must list positive node counts");
    let mut model = completion::load_model(&args.model.settings(&Config::default()))?;
    let info = model.info().clone();
    let tokens = calibrate::sample_tokens(&model, args.cache + 1)?;

    let prefill_started = Instant::now();
    model.prefill(&tokens[..args.cache]).context("prefill failed")?;
    let prefill_ms = prefill_started.elapsed().as_secs_f64() * 1000.0;

    // Plain autoregressive decoding on top of that cache.
    let mut next = tokens[args.cache];
    let decode_started = Instant::now();
    for _ in 0..args.decode_tokens {
        let logits = model.forward_tree(&[next], &[None])?;
        model.keep_path(&[0])?;
        next = copilotd_draft::verify::argmax(&logits);
    }
    let decode_tps = args.decode_tokens as f64 / decode_started.elapsed().as_secs_f64();
    let prefill_tps = args.cache as f64 * 1000.0 / prefill_ms;

    let rows = calibrate::measure(&mut model, args.cache, &args.nodes, args.repeats)?;
    let t1 = rows.iter().find(|(k, _)| *k == 1).map_or(rows[0].1, |r| r.1);

    let cpu = CpuDescription::of_this_machine();
    println!("{}", model_line(&info));
    println!("{}", machine_line(&cpu));
    println!("cache {} tokens; median of {} runs per k", args.cache, args.repeats);
    println!("{:>4}  {:>9}  {:>8}", "k", "t(k) ms", "t(k)/t(1)");
    for (k, ms) in &rows {
        println!("{k:>4}  {ms:>9.2}  {:>8.2}", ms / t1);
    }
    println!("prefill {prefill_tps:.0} tokens/s; autoregressive decode {decode_tps:.1} tokens/s");
    if args.json {
        let curve: Vec<_> = rows.iter().map(|(k, ms)| json!({"k": k, "ms": ms, "ratio": ms / t1})).collect();
        let object = json!({
            "model": info.name, "weights": info.weights, "device": info.device, "machine": machine_json(&cpu, info.kernel),
            "cache": args.cache, "curve": curve, "prefill_tokens_per_s": prefill_tps, "decode_tokens_per_s": decode_tps,
        });
        println!("{object}");
    }
    Ok(())
}

fn products(args: &ProductsArgs) -> Result<()> {
    let model = completion::load_model(&args.model.settings(&Config::default()))?;
    let info = model.info().clone();
    let cpu = CpuDescription::of_this_machine();
    println!("{}", model_line(&info));
    println!("{}", machine_line(&cpu));
    println!("weight products alone; median of {} runs per matrix and row count", args.repeats);
    println!("{:>4}  {:<8} {:>13} {:>6} {:>9} {:>8}", "rows", "matrix", "shape", "count", "ms", "GMAC/s");
    let mut results = Vec::new();
    for &rows in &args.rows {
        let timings = model.time_products(rows, args.repeats)?;
        for t in &timings {
            let shape = format!("{} x {}", t.shape.0, t.shape.1);
            println!("{rows:>4}  {:<8} {shape:>13} {:>6} {:>9.3} {:>8.2}", t.name, t.count, t.ms, t.gmacs(rows));
        }
        let pass_ms: f64 = timings.iter().map(|t| t.ms * t.count as f64).sum();
        let macs: usize = timings.iter().map(|t| t.shape.0 * t.shape.1 * t.count * rows).sum();
        let pass_gmacs = macs as f64 / (pass_ms * 1e6);
        println!("{rows:>4}  {:<8} {:>13} {:>6} {pass_ms:>9.3} {pass_gmacs:>8.2}", "a pass", "", "");
        let matrices: Vec<_> = timings
            .iter()
            .map(|t| json!({"matrix": t.name, "shape": [t.shape.0, t.shape.1], "count": t.count, "ms": t.ms, "gmacs": t.gmacs(rows)}))
            .collect();
        results.push(json!({"rows": rows, "matrices": matrices, "pass_ms": pass_ms, "pass_gmacs": pass_gmacs}));
    }
    if args.json {
        let object = json!({
            "model": info.name, "weights": info.weights, "device": info.device, "machine": machine_json(&cpu, info.kernel),
            "products": results,
        });
        println!("{object}");
    }
    Ok(())
}

/// FastCoder with each component switched off in turn (FastCoder Table II),
/// and `auto` without SPECTRA-CORE's internal speculation.
fn ablations(budget: BudgetSettings) -> Vec<Variant> {
    let base = FastCoderConfig::default;
    let fixed = BudgetSettings { cost_aware: false, ..budget };
    [
        ("fastcoder -repository", FastCoderConfig { use_repository: false, ..base() }, budget),
        ("fastcoder -common", FastCoderConfig { use_common: false, ..base() }, budget),
        ("fastcoder -cache", FastCoderConfig { use_cache: false, ..base() }, budget),
        ("fastcoder -skip/missing", FastCoderConfig { use_retrieval_strategy: false, ..base() }, budget),
        ("fastcoder -cost-aware budget", base(), fixed),
    ]
    .into_iter()
    .map(|(label, fastcoder, budget)| Variant {
        label: label.to_string(),
        fastcoder,
        ..Variant::plain(Strategy::FastCoder, budget)
    })
    .chain(std::iter::once(Variant {
        label: "auto -internal speculation".to_string(),
        spectra: None,
        ..Variant::plain(Strategy::Auto, budget)
    }))
    .collect()
}

/// A common store that some variants use instead of the compact one.
struct OtherStore {
    /// Ends the variants' labels: `<strategy> <label> common store`.
    label: &'static str,
    path: PathBuf,
    store: Arc<CommonStore>,
    readers: Vec<Strategy>,
}

/// Disk and resident sizes of the compact common store and the others, after a
/// run (all are memory-mapped: only the pages read are resident).
fn common_store_sizes(tokenizer: &copilotd_model::Tokenizer, others: &[OtherStore]) -> String {
    let mb = |bytes: Option<u64>| bytes.map_or("?".to_string(), |b| format!("{:.1} MB", b as f64 / 1e6));
    let line = |label: &str, path: &std::path::Path, entries: u64| {
        let disk = std::fs::metadata(path).ok().map(|m| m.len());
        let resident = memory::mapped_resident_bytes(path);
        format!(
            "- {label} common store: {entries} n-grams, {} on disk, {} resident after the run\n",
            mb(disk),
            mb(resident)
        )
    };
    let compact_path = common::store_path(tokenizer);
    let compact_entries =
        CommonStore::open(&compact_path, tokenizer.fingerprint()).map_or(0, |s| s.entries_per_n().iter().sum());
    let mut lines = line("compact (top-t)", &compact_path, compact_entries);
    for other in others {
        lines += &line(other.label, &other.path, other.store.entries_per_n().iter().sum());
    }
    lines + "\n"
}

/// The strategies that read the common store among `--strategies`, when
/// `wanted` (an error naming `flag` when there is none).
fn common_readers(args: &RepoArgs, wanted: bool, flag: &str) -> Result<Vec<Strategy>> {
    let readers: Vec<Strategy> = args.strategies.iter().copied().filter(|s| wanted && s.uses_common_store()).collect();
    anyhow::ensure!(
        !wanted || !readers.is_empty(),
        "{flag} needs a strategy that reads the common store among --strategies (rest, fastcoder, auto)"
    );
    Ok(readers)
}

/// The refined common store at `path`, or else the loaded model's, which must have been built.
fn refined_store(completer: &Completer, path: Option<PathBuf>) -> Result<(PathBuf, Arc<CommonStore>)> {
    let tokenizer = completer.tokenizer();
    let path = path.unwrap_or_else(|| common::refined_store_path(tokenizer, completer.model_info()));
    let store = CommonStore::open(&path, tokenizer.fingerprint()).with_context(|| {
        format!(
            "no usable refined common store for this model at {}; build it with \
             `copilotd datastore build-common --refine FRACTION`",
            path.display()
        )
    })?;
    Ok((path, Arc::new(store)))
}

/// `ar` first, then the strategies, the ablations, the sweeps, and the
/// strategies that read the common store run with each other store.
fn variants(args: &RepoArgs, budget: BudgetSettings, others: &[OtherStore]) -> Vec<Variant> {
    let mut variants = vec![Variant::plain(Strategy::Ar, budget)];
    variants.extend(args.strategies.iter().filter(|s| **s != Strategy::Ar).map(|s| Variant::plain(*s, budget)));
    if args.ablations {
        variants.extend(ablations(budget));
    }
    variants.extend(sweep::variants(&args.sweeps, budget));
    for other in others {
        variants.extend(other.readers.iter().map(|&strategy| Variant {
            label: format!("{strategy} {} common store", other.label),
            common: Some(other.store.clone()),
            ..Variant::plain(strategy, budget)
        }));
    }
    variants
}

fn parse_sweep(value: &str) -> Result<Sweep, String> {
    value.parse().map_err(|e: anyhow::Error| format!("{e:#}"))
}

/// `on` or `off`.
fn parse_switch(value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("expected on or off, not {other:?}")),
    }
}

fn repo(args: &RepoArgs) -> Result<()> {
    let full_readers = common_readers(args, args.common_full, "--common-full")?;
    let refined_readers = common_readers(args, args.common_refined.is_some(), "--common-refined")?;
    let packages = packages::read_list(&args.packages)?;
    let settings = args.engine.settings(&Config::default());
    let mut completer = Completer::load(&settings)?;
    let calibration = if settings.budget.cost_aware { Some(price_drafts(&mut completer, args)?) } else { None };
    let common = match common::open_or_build(completer.tokenizer()) {
        Ok(store) => Some(store),
        Err(error) => {
            eprintln!("copilotd: warning: running without the common datastore: {error:#}");
            None
        }
    };
    let mut others = Vec::new();
    if !full_readers.is_empty() {
        let (path, store) =
            (full_common::store_path(completer.tokenizer()), full_common::open_or_build(completer.tokenizer())?);
        others.push(OtherStore { label: "full", path, store, readers: full_readers });
    }
    if !refined_readers.is_empty() {
        let (path, store) = refined_store(&completer, args.common_refined.clone().flatten())?;
        others.push(OtherStore { label: "refined", path, store, readers: refined_readers });
    }
    let variants = variants(args, settings.budget, &others);
    let labels: Vec<String> = variants.iter().map(|v| v.label.clone()).collect();
    let bench = RepoBench {
        packages: &packages,
        tasks_per_package: args.tasks,
        warmup_tasks_per_package: args.warmup_tasks,
        max_tokens: args.max_tokens,
        sampling: args.sampling.sampling(),
        variants,
        common,
        cache: &copilotd_server::paths::cache_dir().join("bench"),
    };
    let mut log = |run: &TaskRun| {
        eprintln!(
            "{} {}:{} {} {:<24} {:>3} tokens {:>6.1} ms/token acceptance {:.2}{}",
            run.package,
            run.file,
            run.line,
            run.function,
            run.variant,
            run.stats.new_tokens,
            run.stats.ms_per_token,
            run.stats.acceptance_length,
            if run.identical == Some(false) { "  MISMATCH" } else { "" }
        )
    };
    let runs = repo::run(&bench, &mut completer, &mut log)?;
    anyhow::ensure!(
        !runs.is_empty(),
        "no task was run: no package of {} has a function to complete",
        args.packages.display()
    );
    let summaries = report::summarize(&runs, &labels);
    let table = report::markdown(&summaries);
    let store_sizes =
        if others.is_empty() { String::new() } else { common_store_sizes(completer.tokenizer(), &others) };
    let info = completer.model_info();
    let cpu = CpuDescription::of_this_machine();
    let budget = &settings.budget;
    std::fs::create_dir_all(&args.out)?;
    let cost_curve = match &calibration {
        Some((calibrated, from)) => {
            calibrate::write_file(&args.out.join("calibration.json"), calibrated)?;
            let count = calibrated.measurements;
            format!(" ({from}, {count} measurement{}; saved as calibration.json)", if count == 1 { "" } else { "s" })
        }
        None => String::new(),
    };
    let header = format!(
        "Repository benchmark: {}, {} tasks/package after {} unmeasured, up to {} tokens, {}; \
         draft budget {} nodes, depth {}{}{cost_curve}.\n{}.\n\n{store_sizes}",
        model_line(info),
        args.tasks,
        args.warmup_tasks,
        args.max_tokens,
        decoding(&args.sampling.sampling()),
        budget.max_nodes,
        budget.max_depth,
        if budget.cost_aware { ", cost-aware" } else { ", fixed" },
        machine_line(&cpu),
    );
    std::fs::write(args.out.join("results.md"), format!("{header}{table}"))?;
    let json = json!({
        "model": info.name, "weights": info.weights, "device": info.device, "threads": info.threads,
        "machine": machine_json(&cpu, info.kernel), "tasks_per_package": args.tasks,
        "warmup_tasks_per_package": args.warmup_tasks, "max_tokens": args.max_tokens, "sampling": sampling_json(&args.sampling.sampling()),
        "draft_budget": {"max_nodes": budget.max_nodes, "max_depth": budget.max_depth, "cost_aware": budget.cost_aware},
        "cost_curve": calibration.as_ref().map(|(calibrated, from)| json!({
            "from": from, "measurements": calibrated.measurements, "curves": calibrated.cost.curves().iter()
                .map(|(cache, curve)| json!({"cache": cache, "points": curve.points()})).collect::<Vec<_>>(),
        })),
        "summaries": summaries, "runs": runs,
    });
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    print!("{header}{table}");
    println!("written to {}", args.out.display());
    Ok(())
}

/// Measurements of the cost curve a benchmark takes before it keeps a disturbed one. The
/// daemon measures again a minute after a disturbed measurement, a few times; a benchmark
/// measures again at once, so that its drafts are priced as the daemon's are once it has
/// measured on a quiet moment.
const CALIBRATION_ATTEMPTS: usize = 3;

/// Sets the cost curve the variants' drafts are priced with: the one in `--calibration`, or
/// this build's own, measured once more while unconfirmed and due as the daemon does (a load
/// on the machine that skewed one measurement does not skew every later run), and measured
/// again when other work disturbed it. Returns it with where it came from.
fn price_drafts(completer: &mut Completer, args: &RepoArgs) -> Result<(Calibrated, String)> {
    if let Some(path) = &args.calibration {
        let calibrated = calibrate::read_file(path)?;
        completer.use_cost_model(&calibrated.cost);
        return Ok((calibrated, format!("cost curve read from {}", path.display())));
    }
    let mut attempt = 1;
    loop {
        match completer.calibrate_until(Unconfirmed::MeasureAgain, &|| false)? {
            Calibration::Cached(calibrated) => return Ok((calibrated, "this build's cached cost curve".to_string())),
            Calibration::Measured(calibrated) => {
                return Ok((calibrated, "cost curve measured by this build".to_string()))
            }
            Calibration::Disturbed(cost) if attempt == CALIBRATION_ATTEMPTS => {
                let calibrated = Calibrated { cost, measurements: 1, measured_at: calibrate::unix_now() };
                let source = format!(
                    "this build's cost curve, {attempt} measurements disturbed by other work: the cached curve \
                     where there is one, else the last measurement"
                );
                return Ok((calibrated, source));
            }
            Calibration::Disturbed(_) => {
                eprintln!("the cost calibration was disturbed by other work ({attempt} of {CALIBRATION_ATTEMPTS}); measuring again");
                attempt += 1;
            }
            Calibration::Interrupted => anyhow::bail!("the calibration was interrupted"),
        }
    }
}

/// How the benchmark decodes, for its header.
fn decoding(sampling: &Sampling) -> String {
    if sampling.is_greedy() {
        return "greedy".to_string();
    }
    let seed = sampling.seed.map_or("unseeded".to_string(), |seed| format!("seed {seed}"));
    format!("sampling at temperature {}, top-p {}, {seed}", sampling.temperature, sampling.top_p)
}

fn sampling_json(sampling: &Sampling) -> serde_json::Value {
    json!({"temperature": report::printed_f64(sampling.temperature), "top_p": report::printed_f64(sampling.top_p), "seed": sampling.seed})
}

fn lsp(args: LspArgs) -> Result<()> {
    let files = if args.files.is_empty() {
        let stdlib = copilotd_server::common_build::default_corpus()?;
        ["textwrap.py", "shlex.py", "fnmatch.py", "csv.py", "glob.py"].iter().map(|name| stdlib.join(name)).collect()
    } else {
        args.files
    };
    let options = crate::lsp::latency::LspBenchOptions {
        binary: std::env::current_exe().context("cannot find the copilotd binary")?,
        model: args.model,
        files,
        samples: args.samples,
        max_tokens: args.max_tokens,
        pause: std::time::Duration::try_from_secs_f64(args.pause).context("--pause must be a number of seconds")?,
        prompt_latency_ms: args.prompt_latency.prompt_latency_ms,
    };
    let report = crate::lsp::latency::bench_lsp(&options)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn typing(args: &TypingArgs) -> Result<()> {
    use crate::lsp::typing::{self, PackageTasks, TypingOptions};
    anyhow::ensure!(args.tasks > 0 && args.package_count > 0, "--tasks and --package-count must be positive");
    let cache = copilotd_server::paths::cache_dir().join("bench");
    let mut packages = Vec::new();
    for package in packages::read_list(&args.packages)?.into_iter().take(args.package_count) {
        let root = packages::unpacked(&package, &cache)?;
        let tasks = crate::tasks::spread(crate::tasks::find_tasks(&root)?, args.tasks);
        packages.push(PackageTasks { package: package.label(), root, tasks });
    }
    let options = TypingOptions {
        binary: std::env::current_exe().context("cannot find the copilotd binary")?,
        model: args.model.clone(),
        strategies: args.strategies.iter().map(Strategy::to_string).collect(),
        packages,
        max_chars: args.max_chars,
        max_tokens: args.max_tokens,
        seed: args.seed,
        feedback: args.feedback.clone(),
        prompt_latency_ms: args.prompt_latency.prompt_latency_ms,
    };
    let settings = options.strategies.iter().map(|s| typing::settings(&options, s)).collect::<Result<Vec<_>>>()?;
    let replays = typing::run(&options, &mut |r| {
        eprintln!(
            "{} feedback {} {} {} {}: {} keystrokes, {} typed, {} accepted",
            r.strategy,
            if r.feedback { "on" } else { "off" },
            r.start.name(),
            r.package,
            r.function,
            r.keystrokes,
            r.typed_chars,
            r.accepted_chars
        )
    })?;
    let summaries = typing::summarize(&replays);
    let cpu = CpuDescription::of_this_machine();
    let header = format!(
        "Typing replay: {} packages × {} tasks, up to {} characters per body (cut after a whole line, at least the \
         first), maxTokens {}, seed {}; daemons without config.toml, settings in results.json.\n{}\n\n",
        options.packages.len(),
        args.tasks,
        args.max_chars,
        args.max_tokens,
        args.seed,
        machine_line(&cpu),
    );
    let table = typing::table(&summaries);
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("results.md"), format!("{header}{table}"))?;
    let json = json!({
        "machine": {"cpu": cpu.model, "features": cpu.features},
        "tasks_per_package": args.tasks, "max_chars": args.max_chars, "max_tokens": args.max_tokens, "seed": args.seed,
        "feedback": args.feedback, "settings": settings,
        "summaries": summaries, "replays": replays,
    });
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    print!("{header}{table}");
    println!("written to {}", args.out.display());
    Ok(())
}

/// The model a benchmark ran, as its report's header names it: the weights and the device,
/// which names the threads and the kernel (the weights' description does too: left out there).
fn model_line(info: &ModelInfo) -> String {
    let weights = info.weights.replace(&format!("; {} kernel", info.kernel), "");
    format!("model {} ({weights}; {})", info.name, info.device)
}

/// The CPU a benchmark ran on, as one line of its report.
fn machine_line(cpu: &CpuDescription) -> String {
    format!("CPU {} (features: {})", cpu.model, cpu.features.join(" "))
}

/// The CPU and kernel a benchmark ran on, for its JSON results.
fn machine_json(cpu: &CpuDescription, kernel: Kernel) -> serde_json::Value {
    json!({"cpu": cpu.model, "features": cpu.features, "kernel": kernel.name()})
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use copilotd_draft::common_store::CommonParams;

    #[derive(Parser)]
    struct Wrapper<T: Args> {
        #[command(flatten)]
        args: T,
    }

    /// The arguments of one bench subcommand, parsed from `line`.
    fn parse_as<T: Args + clap::FromArgMatches>(line: &[&str]) -> Result<T, clap::Error> {
        Wrapper::<T>::try_parse_from(std::iter::once("bench").chain(line.iter().copied())).map(|w| w.args)
    }

    fn parse(line: &[&str]) -> Result<RepoArgs, clap::Error> {
        parse_as(line)
    }

    #[test]
    fn out_of_range_counts_are_command_line_errors() {
        use clap::error::ErrorKind::{UnknownArgument, ValueValidation};
        let kind = |error: clap::Error| error.kind();
        for max_tokens in ["0", "4097"] {
            let line = ["--max-tokens", max_tokens];
            assert_eq!(parse_as::<LspArgs>(&line).map_err(kind).err(), Some(ValueValidation));
            assert_eq!(parse_as::<TypingArgs>(&line).map_err(kind).err(), Some(ValueValidation));
            assert_eq!(parse_as::<RepoArgs>(&line).map_err(kind).err(), Some(ValueValidation));
        }
        assert_eq!(parse_as::<LspArgs>(&["--max-tokens", "4096"]).unwrap().max_tokens, 4096);
        let latency = ["--prompt-latency-ms", "60001"];
        assert_eq!(parse_as::<LspArgs>(&latency).map_err(kind).err(), Some(ValueValidation));
        assert_eq!(parse_as::<TypingArgs>(&latency).map_err(kind).err(), Some(ValueValidation));
        let uncut = parse_as::<TypingArgs>(&["--prompt-latency-ms", "0"]).unwrap();
        assert_eq!(uncut.prompt_latency.prompt_latency_ms, Some(0));
        assert_eq!(parse_as::<LspArgs>(&[]).unwrap().prompt_latency.prompt_latency_ms, None);
        assert_eq!(parse_as::<LspArgs>(&["--samples", "1"]).map_err(kind).err(), Some(ValueValidation));
        assert_eq!(parse_as::<RepoArgs>(&["--tasks", "0"]).map_err(kind).err(), Some(ValueValidation));
        let cost_curve = |line: &[&str]| parse_as::<CostCurveArgs>(line).map_err(kind).err();
        assert_eq!(cost_curve(&["--decode-tokens", "0"]), Some(ValueValidation));
        for unused in [
            "--prompt-tokens=9",
            "--no-fim",
            "--no-repo-context",
            "--draft-nodes=9",
            "--draft-depth=9",
            "--fixed-budget",
        ] {
            assert_eq!(cost_curve(&[unused]), Some(UnknownArgument), "{unused}");
        }
        assert_eq!(cost_curve(&["--threads", "2", "--weights", "q8_0", "--kernel", "portable"]), None);
        let products = |line: &[&str]| parse_as::<ProductsArgs>(line).map_err(kind).err();
        assert_eq!(products(&["--rows", "1,0"]), Some(ValueValidation));
        assert_eq!(products(&["--repeats", "0"]), Some(ValueValidation));
        let args = parse_as::<ProductsArgs>(&["--rows", "1,16", "--threads", "1", "--kernel", "portable"]).unwrap();
        assert_eq!((args.rows, args.repeats), (vec![1, 16], 21));
    }

    #[test]
    fn the_model_line_names_threads_and_kernel_once() {
        let info = ModelInfo {
            name: "M".into(),
            architecture: "llama".into(),
            vocab_size: 1,
            context_length: 1,
            device: "cpu (2 threads, avx2 kernel)".into(),
            weights: "Q8_0 (converted from Q4_1; avx2 kernel)".into(),
            bos_token: None,
            eos_tokens: Vec::new(),
            fim: None,
            threads: 2,
            kernel: Kernel::Avx2,
            kernel_warning: None,
        };
        assert_eq!(model_line(&info), "model M (Q8_0 (converted from Q4_1); cpu (2 threads, avx2 kernel))");
        let auto =
            ModelInfo { weights: "4-bit as stored, the rest Q8_0 (converted from Q4_1); avx2 kernel".into(), ..info };
        assert_eq!(model_line(&auto).matches("kernel").count(), 1);
    }

    #[test]
    fn a_given_cost_curve_needs_the_cost_aware_budget() {
        assert_eq!(parse(&["--calibration", "a.json"]).unwrap().calibration, Some(PathBuf::from("a.json")));
        let refused = parse(&["--calibration", "a.json", "--fixed-budget"]).expect_err("refused");
        assert_eq!(refused.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn sweeps_and_the_full_store_add_labelled_variants() {
        let args =
            parse(&["--strategies", "rest,pld,fastcoder", "--sweep", "p=1", "--sweep", "delta=0,5", "--common-full"])
                .unwrap();
        let readers = common_readers(&args, args.common_full, "--common-full").unwrap();
        assert_eq!(readers, [Strategy::Rest, Strategy::FastCoder]);
        let store =
            Arc::new(CommonStore::build(std::iter::once(&[1u32, 2, 3][..]), CommonParams::default(), 1).unwrap());
        let other = |label, readers: &[Strategy]| OtherStore {
            label,
            path: PathBuf::new(),
            store: store.clone(),
            readers: readers.to_vec(),
        };
        let others = [other("full", &readers), other("refined", &readers[..1])];
        let variants = variants(&args, BudgetSettings::default(), &others);
        let labels: Vec<&str> = variants.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "ar",
                "rest",
                "pld",
                "fastcoder",
                "fastcoder p=1",
                "fastcoder delta=0",
                "fastcoder delta=5",
                "rest full common store",
                "fastcoder full common store",
                "rest refined common store"
            ]
        );
        assert!(variants.iter().filter(|v| v.common.is_some()).all(|v| v.label.ends_with(" common store")));
    }

    #[test]
    fn bad_options_are_refused_with_a_reason() {
        let error = parse(&["--sweep", "alpha=1,-2"]).err().unwrap().to_string();
        assert!(error.contains("alpha must be a finite number ≥ 0, not -2"), "{error}");
        let args = parse(&["--strategies", "pld", "--common-full", "--common-refined"]).unwrap();
        let error = common_readers(&args, args.common_full, "--common-full").unwrap_err().to_string();
        assert!(error.contains("--common-full needs a strategy that reads the common store"), "{error}");
        let error = common_readers(&args, args.common_refined.is_some(), "--common-refined").unwrap_err().to_string();
        assert!(error.contains("--common-refined needs a strategy that reads the common store"), "{error}");
        let args = parse(&["--strategies", "pld,auto"]).unwrap();
        assert!(common_readers(&args, args.common_refined.is_some(), "--common-refined").unwrap().is_empty());
        assert_eq!(parse(&["--common-refined"]).unwrap().common_refined, Some(None));
        let at = parse(&["--common-refined", "x.crest"]).unwrap().common_refined;
        assert_eq!(at, Some(Some(PathBuf::from("x.crest"))));
    }
}
