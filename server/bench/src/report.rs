//! Aggregates of the repository benchmark, as JSON and a Markdown table.

use crate::repo::TaskRun;
use serde::Serialize;
use std::collections::BTreeMap;

/// One variant over a set of tasks. Tasks that generated no token are counted in `tasks` and
/// `empty_tasks` but left out of the speed and acceptance figures; a figure of nothing is `None`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub package: String,
    pub variant: String,
    pub tasks: usize,
    /// Tasks that generated no token (the completion stopped at once).
    pub empty_tasks: usize,
    pub new_tokens: usize,
    /// Decode milliseconds per new token, token-weighted over the tasks.
    pub ms_per_token: Option<f64>,
    /// New tokens per forward step.
    pub acceptance_length: Option<f64>,
    /// `ar` ms/token over this variant's ms/token, on the same tasks.
    pub speedup: Option<f64>,
    /// Median over tasks of the per-task speedup (tasks where both generated).
    pub median_task_speedup: Option<f64>,
    /// The speedup that the cost curve in use predicts for the forward passes each ran
    /// (drafting not counted): free of timing noise, so builds that share one curve compare
    /// exactly. `None` without a curve.
    pub curve_speedup: Option<f64>,
    /// Share of tasks (empty ones included) whose output equals `ar`'s token for token; `None`
    /// when sampling.
    pub identity_rate: Option<f64>,
    /// Drafting time over decode time.
    pub draft_share: Option<f64>,
}

/// Which task a run is of: two functions of one file may share a name, never a cursor.
type TaskKey<'a> = (&'a str, &'a str, usize);

fn task_key(run: &TaskRun) -> TaskKey<'_> {
    (&run.package, &run.file, run.cursor)
}

fn generated(run: &&TaskRun) -> bool {
    run.stats.new_tokens > 0
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
        for variant in variants {
            let selected: Vec<&TaskRun> = runs.iter().filter(in_package).filter(|r| &r.variant == variant).collect();
            if !selected.is_empty() {
                summaries.push(summary(package, variant, &selected, &ar));
            }
        }
    }
    summaries
}

/// The summary of `selected`, one variant's runs, against `ar`'s runs of the same tasks.
fn summary(package: &str, variant: &str, selected: &[&TaskRun], ar: &[&TaskRun]) -> Summary {
    let ar_by_task: BTreeMap<TaskKey, &TaskRun> = ar.iter().map(|r| (task_key(r), *r)).collect();
    let measured: Vec<&TaskRun> = selected.iter().copied().filter(generated).collect();
    let ar_measured: Vec<&TaskRun> = ar.iter().copied().filter(generated).collect();
    let mut task_speedups: Vec<f64> = measured
        .iter()
        .filter_map(|r| {
            let reference = ar_by_task.get(&task_key(r))?;
            ratio(ms_per_token(&[*reference])?, ms_per_token(&[*r])?)
        })
        .collect();
    task_speedups.sort_by(f64::total_cmp);
    let new_tokens: usize = measured.iter().map(|r| r.stats.new_tokens).sum();
    let steps: usize = measured.iter().map(|r| r.stats.forward_steps).sum();
    let decode: f64 = measured.iter().map(|r| r.stats.decode_ms).sum();
    let draft: f64 = measured.iter().map(|r| r.stats.draft_ms).sum();
    let ms = ms_per_token(&measured);
    Summary {
        package: package.to_owned(),
        variant: variant.to_owned(),
        tasks: selected.len(),
        empty_tasks: selected.len() - measured.len(),
        new_tokens,
        ms_per_token: ms,
        acceptance_length: ratio(new_tokens as f64, steps as f64),
        speedup: ms_per_token(&ar_measured).zip(ms).and_then(|(a, b)| ratio(a, b)),
        median_task_speedup: task_speedups.get(task_speedups.len() / 2).copied(),
        curve_speedup: curve_ms_per_token(&ar_measured)
            .zip(curve_ms_per_token(&measured))
            .and_then(|(a, b)| ratio(a, b)),
        identity_rate: identity_rate(selected),
        draft_share: ratio(draft, decode),
    }
}

/// The share of identical outputs, if every run was compared with `ar`.
fn identity_rate(runs: &[&TaskRun]) -> Option<f64> {
    let identical: Option<Vec<bool>> = runs.iter().map(|r| r.identical).collect();
    identical.and_then(|all| ratio(all.iter().filter(|&&same| same).count() as f64, all.len() as f64))
}

fn ms_per_token(runs: &[&TaskRun]) -> Option<f64> {
    let tokens: usize = runs.iter().map(|r| r.stats.new_tokens).sum();
    ratio(runs.iter().map(|r| r.stats.decode_ms).sum(), tokens as f64)
}

/// Cost-curve milliseconds per new token, if every run was priced.
fn curve_ms_per_token(runs: &[&TaskRun]) -> Option<f64> {
    let tokens: usize = runs.iter().map(|r| r.stats.new_tokens).sum();
    let ms: Option<f64> = runs.iter().map(|r| r.stats.curve_ms).sum();
    ratio(ms?, tokens as f64)
}

/// `a / b`; `None` (n/a) when there is nothing to divide by.
fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// The f64 that prints as `value` does (`0.8`, not the widened `0.800000011920929`), for JSON.
pub fn printed_f64(value: f32) -> f64 {
    value.to_string().parse().expect("a printed f32 parses as f64")
}

/// A Markdown table of the summaries, with a note when some tasks generated nothing.
pub fn markdown(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| package | variant | tasks | no output | tokens | ms/token | acceptance | speedup | median task speedup | speedup by the cost curve | identity | draft share |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for s in summaries {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            s.package,
            s.variant,
            s.tasks,
            s.empty_tasks,
            s.new_tokens,
            or_na(s.ms_per_token, |ms| format!("{ms:.1}")),
            or_na(s.acceptance_length, |length| format!("{length:.2}")),
            or_na(s.speedup, |speedup| format!("{speedup:.2}x")),
            or_na(s.median_task_speedup, |speedup| format!("{speedup:.2}x")),
            or_na(s.curve_speedup, |speedup| format!("{speedup:.3}x")),
            or_na(s.identity_rate, |rate| format!("{:.0}%", rate * 100.0)),
            or_na(s.draft_share, |share| format!("{:.1}%", share * 100.0)),
        ));
    }
    if summaries.iter().any(|s| s.empty_tasks > 0) {
        out.push_str(
            "\nTasks with no output (the completion stopped before its first token) count in `tasks` and \
             identity only: ms/token, acceptance, speedups and draft share leave them out.\n",
        );
    }
    out
}

/// `value` formatted, or `n/a`.
pub fn or_na(value: Option<f64>, format: impl Fn(f64) -> String) -> String {
    value.map_or("n/a".to_string(), format)
}

#[cfg(test)]
mod tests {
    use super::*;
    use copilotd_server::completion::{CompletionStats, Strategy};

    fn run(variant: &str, function: &str, tokens: usize, decode_ms: f64, curve_ms: Option<f64>) -> TaskRun {
        at(variant, function, 0, tokens, decode_ms, curve_ms)
    }

    /// A run of the task whose cursor is at byte `cursor` of a.py.
    fn at(
        variant: &str,
        function: &str,
        cursor: usize,
        tokens: usize,
        decode_ms: f64,
        curve_ms: Option<f64>,
    ) -> TaskRun {
        let stats = CompletionStats {
            new_tokens: tokens,
            forward_steps: tokens,
            decode_ms,
            curve_ms,
            ..CompletionStats::empty(Strategy::Ar)
        };
        TaskRun {
            package: "p".to_owned(),
            file: "a.py".to_owned(),
            function: function.to_owned(),
            line: 1 + cursor / 10,
            cursor,
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
        assert!((auto.speedup.unwrap() - 1.7).abs() < 1e-12);
        let unpriced = [runs[0].clone(), run("ar", "g", 30, 130.0, None), runs[2].clone(), runs[3].clone()];
        let summaries = summarize(&unpriced, &variants);
        assert!(summaries.iter().all(|s| s.curve_speedup.is_none()), "no figure from part of the runs");
    }

    #[test]
    fn tasks_without_output_are_counted_apart_and_give_no_ratios() {
        let variants = ["ar".to_owned(), "pld".to_owned()];
        let empty = [run("ar", "f", 0, 0.5, Some(0.0)), run("pld", "f", 0, 0.7, Some(0.0))];
        let summaries = summarize(&empty, &variants);
        for s in &summaries {
            assert_eq!((s.tasks, s.empty_tasks, s.new_tokens), (1, 1, 0));
            assert_eq!((s.ms_per_token, s.acceptance_length, s.speedup), (None, None, None));
            assert_eq!((s.median_task_speedup, s.curve_speedup, s.draft_share), (None, None, None));
        }
        let table = markdown(&summaries);
        assert!(table.contains("| p | pld | 1 | 1 | 0 | n/a | n/a | n/a | n/a | n/a | 100% | n/a |"), "{table}");
        assert!(table.contains("Tasks with no output"), "{table}");
        let json = serde_json::to_string(&summaries).unwrap();
        assert!(json.contains("\"speedup\":null") && !json.contains("-0.0"), "{json}");
        // Beside a task with output, the empty one changes no figure.
        let mixed = [
            run("ar", "f", 0, 0.5, Some(0.0)),
            run("ar", "g", 10, 40.0, Some(40.0)),
            run("pld", "f", 0, 0.7, Some(0.0)),
            run("pld", "g", 10, 20.0, Some(20.0)),
        ];
        let pld = summarize(&mixed, &variants).into_iter().find(|s| s.variant == "pld").unwrap();
        assert_eq!((pld.tasks, pld.empty_tasks, pld.ms_per_token), (2, 1, Some(2.0)));
        assert_eq!((pld.speedup, pld.median_task_speedup, pld.curve_speedup), (Some(2.0), Some(2.0), Some(2.0)));
        assert_eq!(pld.acceptance_length, Some(1.0));
    }

    #[test]
    fn functions_of_one_name_in_one_file_are_paired_by_their_cursor() {
        let variants = ["ar".to_owned(), "pld".to_owned()];
        let runs = [
            at("ar", "__init__", 10, 10, 120.0, None),
            at("ar", "__init__", 90, 10, 180.0, None),
            at("pld", "__init__", 10, 10, 100.0, None),
            at("pld", "__init__", 90, 10, 360.0, None),
        ];
        let pld = summarize(&runs, &variants).into_iter().find(|s| s.variant == "pld").unwrap();
        // Per task 1.2x and 0.5x; paired by name, both would be compared with the last `ar`
        // run: 1.8x and 0.5x.
        assert_eq!(pld.median_task_speedup, Some(1.2));
        let json = serde_json::to_value(&runs[0]).unwrap();
        assert_eq!((json["line"].as_u64(), json["cursor"].as_u64()), (Some(2), Some(10)));
    }

    #[test]
    fn single_precision_settings_are_written_as_given() {
        assert_eq!(serde_json::to_string(&printed_f64(0.8)).unwrap(), "0.8");
        assert_eq!(printed_f64(0.95), 0.95);
    }
}
