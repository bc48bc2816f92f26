//! The repository-level benchmark: for each package and task,
//! every variant completes the cut-out function body in the same process,
//! interleaved per task, with `ar` first as the reference.

use crate::packages::{self, Package};
use crate::tasks::{self, Task};
use anyhow::{Context, Result};
use copilotd_draft::cancel::CancelToken;
use copilotd_draft::common_store::CommonStore;
use copilotd_draft::fastcoder::FastCoderConfig;
use copilotd_draft::spectra::SpectraConfig;
use copilotd_server::completion::drafting::{BudgetSettings, DraftSources};
use copilotd_server::completion::{Completer, CompletionRequest, CompletionStats, Sampling, Strategy, Trigger};
use copilotd_server::workspace::{index_workspace, Repository, WalkConfig};
use serde::Serialize;
use std::path::Path;
use std::sync::{Arc, RwLock};

/// One configuration under test.
pub struct Variant {
    pub label: String,
    pub strategy: Strategy,
    /// FastCoder settings (ablations switch components off).
    pub fastcoder: FastCoderConfig,
    pub budget: BudgetSettings,
    /// A common store used instead of [`RepoBench::common`] (the CREST check).
    pub common: Option<Arc<CommonStore>>,
    /// SPECTRA-CORE's settings; `None`: no internal speculation (an ablation).
    pub spectra: Option<SpectraConfig>,
}

impl Variant {
    pub fn plain(strategy: Strategy, budget: BudgetSettings) -> Variant {
        Variant {
            label: strategy.to_string(),
            strategy,
            fastcoder: FastCoderConfig::default(),
            budget,
            common: None,
            spectra: Some(SpectraConfig::default()),
        }
    }
}

/// The result of one variant on one task.
#[derive(Clone, Debug, Serialize)]
pub struct TaskRun {
    pub package: String,
    pub file: String,
    pub function: String,
    /// 1-based line of the cursor (the body's first statement).
    pub line: usize,
    /// Byte offset of the cursor in the file: with the file, which task this is (two functions
    /// of one file may share a name).
    pub cursor: usize,
    pub variant: String,
    /// Output token-for-token equal to `ar`'s; `None` when sampling, where outputs differ
    /// by design (only their distribution is the same).
    pub identical: Option<bool>,
    pub stats: CompletionStats,
}

/// Benchmark settings.
pub struct RepoBench<'a> {
    pub packages: &'a [Package],
    pub tasks_per_package: usize,
    /// Tasks per package completed by every variant before the measured ones and not
    /// reported (other functions of the same package): the daemon a person has used for a
    /// while, whose stores, cache and acceptance counts have seen the workspace.
    pub warmup_tasks_per_package: usize,
    pub max_tokens: usize,
    /// Greedy, or sampling for every variant alike.
    pub sampling: Sampling,
    pub variants: Vec<Variant>,
    /// The compact common store, for the variants that bring none of their own.
    pub common: Option<Arc<CommonStore>>,
    pub cache: &'a Path,
}

/// Runs every variant on every task; `ar` must be the first variant.
///
/// Each variant's budget keeps its acceptance counts from one package to the next the way
/// the product keeps them from one process to the next (per model and strategy, in files,
/// here in a directory of this run's own): a variant starts a package from what it learned
/// on the packages before, as a daemon starts a workspace.
pub fn run(bench: &RepoBench, completer: &mut Completer, log: &mut dyn FnMut(&TaskRun)) -> Result<Vec<TaskRun>> {
    anyhow::ensure!(bench.variants.first().is_some_and(|v| v.strategy == Strategy::Ar), "the first variant must be ar");
    let tokenizer = completer.tokenizer().clone();
    let tokenize = move |text: &str| tokenizer.encode(text);
    let walk = WalkConfig::for_languages(&["python".to_string()], &[])?.context("python files are not indexed")?;
    let acceptance = tempfile::tempdir()?;
    let mut runs = Vec::new();
    for package in bench.packages {
        let root = packages::unpacked(package, bench.cache)?;
        let (chosen, warmup) =
            split_tasks(tasks::find_tasks(&root)?, bench.tasks_per_package, bench.warmup_tasks_per_package);
        if chosen.is_empty() {
            eprintln!(
                "copilotd: warning: {} has no function to complete (a body of {}–{} lines); skipped",
                package.label(),
                tasks::BODY_LINES.start(),
                tasks::BODY_LINES.end()
            );
            continue;
        }
        let scratch = tempfile::tempdir()?;
        let (store, _) = index_workspace(&root, &walk, &tokenize, &scratch.path().join("repo.store"), &|_, _| {})
            .with_context(|| format!("cannot index {}", package.label()))?;
        let store = Arc::new(RwLock::new(store));
        // Each variant keeps its own sources (and preference cache) for the
        // whole package, as one editor session would.
        let mut sources: Vec<DraftSources> = bench
            .variants
            .iter()
            .enumerate()
            .map(|(index, v)| {
                let mut sources = DraftSources::new(v.fastcoder.clone(), v.budget).with_spectra(v.spectra);
                sources.repository = vec![Repository::new(&root, store.clone())];
                sources.common = v.common.clone().or_else(|| bench.common.clone());
                let dir = acceptance.path().to_path_buf();
                sources.acceptance_files = Some(Box::new(move |strategy| dir.join(format!("{index}-{strategy}.json"))));
                sources
            })
            .collect();
        for task in &warmup {
            with_cut_file(&store, task, &tokenize, || {
                for (variant, sources) in bench.variants.iter().zip(sources.iter_mut()) {
                    run_one(completer, sources, task, variant.strategy, bench)?;
                }
                Ok(())
            })?;
        }
        for task in &chosen {
            with_cut_file(&store, task, &tokenize, || {
                let mut reference: Option<Vec<u32>> = None;
                for (variant, sources) in bench.variants.iter().zip(sources.iter_mut()) {
                    let completion = run_one(completer, sources, task, variant.strategy, bench)?;
                    let reference_tokens = reference.get_or_insert_with(|| completion.tokens.clone());
                    let run = TaskRun {
                        package: package.label(),
                        file: task.file.clone(),
                        function: task.function.clone(),
                        line: task.line(),
                        cursor: task.cursor,
                        variant: variant.label.clone(),
                        identical: bench.sampling.is_greedy().then(|| &completion.tokens == reference_tokens),
                        stats: completion.stats,
                    };
                    log(&run);
                    runs.push(run);
                }
                Ok(())
            })?;
        }
    }
    Ok(runs)
}

/// `measured` tasks spread over a package's functions, and `warmup` tasks spread over the
/// others.
fn split_tasks(all: Vec<Task>, measured: usize, warmup: usize) -> (Vec<Task>, Vec<Task>) {
    let chosen = tasks::spread(all.clone(), measured);
    let is_chosen = |task: &Task| chosen.iter().any(|c| c.file == task.file && c.cursor == task.cursor);
    let rest: Vec<Task> = all.into_iter().filter(|task| !is_chosen(task)).collect();
    (chosen, tasks::spread(rest, warmup))
}

/// Runs `run` while the store holds the task's cut file, then puts the original back.
fn with_cut_file<T>(
    store: &Arc<RwLock<copilotd_draft::repo_store::RepositoryStore>>,
    task: &Task,
    tokenize: &dyn Fn(&str) -> Result<Vec<u32>>,
    run: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let original = {
        let mut store = copilotd_server::sync::write(store);
        let original = store.file_tokens(&task.file).map(<[u32]>::to_vec).unwrap_or_default();
        store.upsert_file(&task.file, tokenize(&task.cut_text)?);
        original
    };
    let result = run();
    copilotd_server::sync::write(store).upsert_file(&task.file, original);
    result
}

fn run_one(
    completer: &mut Completer,
    sources: &mut DraftSources,
    task: &Task,
    strategy: Strategy,
    bench: &RepoBench,
) -> Result<copilotd_server::completion::Completion> {
    let request = CompletionRequest {
        text: &task.cut_text,
        cursor: task.cursor,
        path: Some(&task.file),
        language: None,
        max_tokens: bench.max_tokens,
        strategy,
        sampling: bench.sampling,
        trigger: Trigger::Invoked,
        prompt_latency: None,
    };
    let result = completer.complete_with(sources, &request, &CancelToken::new());
    result.with_context(|| format!("{} failed on {}::{}", strategy, task.file, task.function))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(cursor: usize) -> Task {
        Task {
            file: "a.py".to_owned(),
            function: format!("f{cursor}"),
            cut_text: String::new(),
            cursor,
            reference: String::new(),
        }
    }

    #[test]
    fn warm_up_tasks_are_other_functions_than_the_measured_ones() {
        let (measured, warmup) = split_tasks((0..10).map(task).collect(), 4, 3);
        assert_eq!((measured.len(), warmup.len()), (4, 3));
        assert!(warmup.iter().all(|w| measured.iter().all(|m| m.cursor != w.cursor)));
        // Too few functions: all are measured, none warms up.
        let (measured, warmup) = split_tasks((0..3).map(task).collect(), 4, 2);
        assert_eq!((measured.len(), warmup.len()), (3, 0));
    }
}
