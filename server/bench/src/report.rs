//! Aggregates of the repository benchmark, as JSON and a Markdown table.

use crate::repo::TaskRun;
use serde::Serialize;
use std::collections::BTreeMap;

/// One variant over a set of tasks.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub package: String,
    pub variant: String,
    pub tasks: usize,
    pub new_tokens: usize,
    /// Decode milliseconds per new token, token-weighted over the tasks.
    pub ms_per_token: f64,
    /// New tokens per forward step.
    pub acceptance_length: f64,
    /// `ar` ms/token over this variant's ms/token, on the same tasks.
    pub speedup: f64,
    /// Median over tasks of the per-task speedup.
    pub median_task_speedup: f64,
    /// The speedup that the cost curve in use predicts for the forward passes each ran
    /// (drafting not counted): free of timing noise, so builds that share one curve compare
    /// exactly. `None` without a curve.
    pub curve_speedup: Option<f64>,
    /// Share of tasks whose output equals `ar`'s token for token; `None` when sampling.
    pub identity_rate: Option<f64>,
    /// Drafting time over decode time.
    pub draft_share: f64,
}

/// Summaries per package and variant, then over all packages ("all").
pub fn summarize(runs: &[TaskRun], variants: &[String]) -> Vec<Summary> {
    let mut packages: Vec<String> = runs.iter().map(|r| r.package.clone()).collect();
    packages.dedup();
    packages.push("all".to_string());
    let mut summaries = Vec::new();
    for package in &packages {
        let in_package = |r: &&TaskRun| package == "all" || &r.package == package;
        let ar: Vec<&TaskRun> = runs.iter().filter(in_package).filter(|r| r.variant == variants[0]).collect();
        let ar_by_task: BTreeMap<(&str, &str, &str), &TaskRun> =
            ar.iter().map(|r| ((r.package.as_str(), r.file.as_str(), r.function.as_str()), *r)).collect();
        let ar_ms = ms_per_token(&ar);
        for variant in variants {
            let selected: Vec<&TaskRun> = runs.iter().filter(in_package).filter(|r| &r.variant == variant).collect();
            if selected.is_empty() {
                continue;
            }
            let mut task_speedups: Vec<f64> = selected
                .iter()
                .filter_map(|r| {
                    let reference = ar_by_task.get(&(r.package.as_str(), r.file.as_str(), r.function.as_str()))?;
                    (r.stats.ms_per_token > 0.0).then(|| reference.stats.ms_per_token / r.stats.ms_per_token)
                })
                .collect();
            task_speedups.sort_by(f64::total_cmp);
            let new_tokens: usize = selected.iter().map(|r| r.stats.new_tokens).sum();
            let steps: usize = selected.iter().map(|r| r.stats.forward_steps).sum();
            let decode: f64 = selected.iter().map(|r| r.stats.decode_ms).sum();
            let draft: f64 = selected.iter().map(|r| r.stats.draft_ms).sum();
            let ms = ms_per_token(&selected);
            summaries.push(Summary {
                package: package.clone(),
                variant: variant.clone(),
                tasks: selected.len(),
                new_tokens,
                ms_per_token: ms,
                acceptance_length: ratio(new_tokens as f64, steps as f64),
                speedup: ratio(ar_ms, ms),
                median_task_speedup: task_speedups.get(task_speedups.len() / 2).copied().unwrap_or(0.0),
                curve_speedup: curve_ms_per_token(&ar).zip(curve_ms_per_token(&selected)).map(|(a, b)| ratio(a, b)),
                identity_rate: identity_rate(&selected),
                draft_share: ratio(draft, decode),
            });
        }
    }
    summaries
}

/// The share of identical outputs, if every run was compared with `ar`.
fn identity_rate(runs: &[&TaskRun]) -> Option<f64> {
    let identical: Option<Vec<bool>> = runs.iter().map(|r| r.identical).collect();
    identical.map(|all| ratio(all.iter().filter(|&&same| same).count() as f64, all.len() as f64))
}

fn ms_per_token(runs: &[&TaskRun]) -> f64 {
    let tokens: usize = runs.iter().map(|r| r.stats.new_tokens).sum();
    ratio(runs.iter().map(|r| r.stats.decode_ms).sum(), tokens as f64)
}

/// Cost-curve milliseconds per new token, if every run was priced.
fn curve_ms_per_token(runs: &[&TaskRun]) -> Option<f64> {
    let tokens: usize = runs.iter().map(|r| r.stats.new_tokens).sum();
    let ms: Option<f64> = runs.iter().map(|r| r.stats.curve_ms).sum();
    ms.map(|ms| ratio(ms, tokens as f64))
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// A Markdown table of the summaries.
pub fn markdown(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| package | variant | tasks | tokens | ms/token | acceptance | speedup | median task speedup | speedup by the cost curve | identity | draft share |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for s in summaries {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {:.2} | {:.2}x | {:.2}x | {} | {} | {:.1}% |\n",
            s.package,
            s.variant,
            s.tasks,
            s.new_tokens,
            s.ms_per_token,
            s.acceptance_length,
            s.speedup,
            s.median_task_speedup,
            s.curve_speedup.map_or("n/a".to_string(), |speedup| format!("{speedup:.3}x")),
            s.identity_rate.map_or("n/a".to_string(), |rate| format!("{:.0}%", rate * 100.0)),
            s.draft_share * 100.0
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use copilotd_server::completion::{CompletionStats, Strategy};

    fn run(variant: &str, function: &str, tokens: usize, decode_ms: f64, curve_ms: Option<f64>) -> TaskRun {
        let stats = CompletionStats { new_tokens: tokens, decode_ms, curve_ms, ..CompletionStats::empty(Strategy::Ar) };
        TaskRun {
            package: "p".to_owned(),
            file: "a.py".to_owned(),
            function: function.to_owned(),
            variant: variant.to_owned(),
            identical: Some(true),
            stats,
        }
    }

    #[test]
    fn the_curve_speedup_prices_every_variant_with_the_same_curve_and_needs_every_run_priced() {
        let variants = ["ar".to_owned(), "auto".to_owned()];
        let runs = [
            run("ar", "f", 10, 40.0, Some(40.0)),
            run("ar", "g", 30, 130.0, Some(120.0)),
            run("auto", "f", 10, 30.0, Some(20.0)),
            run("auto", "g", 30, 70.0, Some(60.0)),
        ];
        let summaries = summarize(&runs, &variants);
        let auto = summaries.iter().find(|s| s.package == "all" && s.variant == "auto").unwrap();
        // 160 curve ms against 80 for the same 40 tokens; measured 170 against 100.
        assert_eq!(auto.curve_speedup, Some(2.0));
        assert!((auto.speedup - 1.7).abs() < 1e-12);
        let unpriced = [runs[0].clone(), run("ar", "g", 30, 130.0, None), runs[2].clone(), runs[3].clone()];
        let summaries = summarize(&unpriced, &variants);
        assert!(summaries.iter().all(|s| s.curve_speedup.is_none()), "no figure from part of the runs");
    }
}
