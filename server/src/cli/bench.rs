//! `copilotd bench`: measurements of the running model and device.

use super::EngineArgs;
use crate::completion::Completer;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::time::Instant;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Time one forward over k new tree nodes on a warm cache, for several k.
    CostCurve(CostCurveArgs),
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
    /// Autoregressive tokens generated for the decode-speed figure.
    #[arg(long, default_value_t = 128)]
    decode_tokens: usize,
    /// Print one JSON object on the last line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::CostCurve(args) => cost_curve(&args),
    }
}

/// Real text to fill the cache with: this program's own sources would do,
/// but a fixed, model-independent sample keeps runs comparable.
fn sample_tokens(completer: &Completer, count: usize) -> Result<Vec<u32>> {
    let text = include_str!("../../../fixtures/bench_sample.py");
    let mut tokens = completer.tokenizer().encode(text)?;
    anyhow::ensure!(!tokens.is_empty(), "the benchmark sample tokenized to nothing");
    while tokens.len() < count {
        tokens.extend_from_within(..);
    }
    tokens.truncate(count);
    Ok(tokens)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn cost_curve(args: &CostCurveArgs) -> Result<()> {
    anyhow::ensure!(args.repeats > 0 && args.cache > 0, "--repeats and --cache must be positive");
    let mut completer = Completer::load(&args.engine.settings())?;
    let info = completer.model_info().clone();
    let tokens = sample_tokens(&completer, args.cache + args.nodes.iter().max().copied().unwrap_or(1))?;
    let model = completer.model_mut();

    let prefill_started = Instant::now();
    model.prefill(&tokens[..args.cache]).context("prefill failed")?;
    let prefill_ms = prefill_started.elapsed().as_secs_f64() * 1000.0;

    let mut rows = Vec::new();
    for &k in &args.nodes {
        let nodes = &tokens[args.cache..args.cache + k];
        let parents: Vec<Option<usize>> = (0..k).map(|i| i.checked_sub(1)).collect();
        model.forward_tree(nodes, &parents)?; // warm-up
        let mut times: Vec<f64> = (0..args.repeats)
            .map(|_| {
                let started = Instant::now();
                model.forward_tree(nodes, &parents).map(|_| started.elapsed().as_secs_f64() * 1000.0)
            })
            .collect::<Result<_>>()?;
        rows.push((k, median(&mut times)));
    }
    let t1 = rows.iter().find(|(k, _)| *k == 1).map_or(rows[0].1, |r| r.1);

    // Plain autoregressive decoding on top of the same cache.
    let mut next = tokens[args.cache];
    let decode_started = Instant::now();
    for _ in 0..args.decode_tokens {
        let logits = model.forward_tree(&[next], &[None])?;
        model.keep_path(&[0])?;
        next = copilotd_draft::verify::argmax(&logits);
    }
    let decode_tps = args.decode_tokens as f64 / decode_started.elapsed().as_secs_f64();
    let prefill_tps = args.cache as f64 * 1000.0 / prefill_ms;

    println!("model {} ({}, {}, {})", info.name, info.weights, info.device, threads_note(args.engine.threads));
    println!("cache {} tokens; median of {} runs per k", args.cache, args.repeats);
    println!("{:>4}  {:>9}  {:>8}", "k", "t(k) ms", "t(k)/t(1)");
    for (k, ms) in &rows {
        println!("{k:>4}  {ms:>9.2}  {:>8.2}", ms / t1);
    }
    println!("prefill {prefill_tps:.0} tokens/s; autoregressive decode {decode_tps:.1} tokens/s");
    if args.json {
        let curve: Vec<_> = rows.iter().map(|(k, ms)| json!({"k": k, "ms": ms, "ratio": ms / t1})).collect();
        let object = json!({
            "model": info.name, "weights": info.weights, "device": info.device,
            "cache": args.cache, "curve": curve, "prefill_tokens_per_s": prefill_tps, "decode_tokens_per_s": decode_tps,
        });
        println!("{object}");
    }
    Ok(())
}

fn threads_note(threads: Option<usize>) -> String {
    match threads {
        Some(n) => format!("{n} threads"),
        None => "default threads".to_string(),
    }
}
