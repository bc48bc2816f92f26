//! `copilotd datastore`: the common datastore, built ahead of time, and
//! refined by the model's perplexity on request.

use crate::common_refine::{self, RefineSettings};
use crate::completion::{self, common, EngineSettings};
use crate::{common_build, model_files};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use copilotd_draft::common_store::{CommonParams, CommonStore};
use copilotd_model::Tokenizer;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum DatastoreCommand {
    /// Build the common datastore for the model's tokenizer, or with --refine
    /// the one refined by the model's perplexity.
    BuildCommon(BuildCommonCommand),
}

#[derive(Args, Debug)]
pub struct BuildCommonCommand {
    #[command(flatten)]
    common: BuildCommonArgs,
    #[command(flatten)]
    refine: RefineArgs,
}

/// Where a common datastore is built from, and for which model's tokenizer.
#[derive(Args, Debug)]
pub struct BuildCommonArgs {
    /// Directory of Python files (default: the Python standard library on this machine).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// The model whose tokenizer the datastore uses (default: as configured).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Do nothing when a valid datastore of this kind exists for the model.
    #[arg(long)]
    if_missing: bool,
}

/// SPECTRA-RETRIEVAL's refinement: the corpus scored by the model's perplexity.
#[derive(Args, Debug)]
pub struct RefineArgs {
    /// Score chunks of the corpus with the model and build the store from the
    /// lowest-perplexity FRACTION of the scored chunks, in (0, 1]. The store is
    /// cached for this model and used instead of the tokenizer's store when
    /// this model is loaded.
    #[arg(long, value_name = "FRACTION", allow_negative_numbers = true, value_parser = common_refine::parse_fraction)]
    refine: Option<f64>,
    /// Seconds spent scoring at most; chunks are sampled (seeded, spread over
    /// the files) in an order whose every prefix covers the corpus.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value = common_refine::DEFAULT_BUDGET_SECONDS,
        allow_negative_numbers = true,
        value_parser = common_refine::parse_budget,
        requires = "refine"
    )]
    refine_budget: Duration,
    /// Tokens per scored chunk.
    #[arg(long, value_name = "TOKENS", default_value_t = common_refine::DEFAULT_WINDOW, requires = "refine")]
    refine_window: usize,
    /// Threads for the model while scoring (default: physical cores).
    #[arg(long, requires = "refine")]
    threads: Option<usize>,
}

impl BuildCommonArgs {
    /// The model as given or configured.
    fn model_path(&self) -> Result<PathBuf> {
        let config = super::load_config();
        model_files::resolve(self.model.as_deref().or(config.model.as_deref()))
    }

    /// The corpus as given, or the standard library.
    fn corpus(&self) -> Result<PathBuf> {
        match &self.corpus {
            Some(dir) => Ok(dir.clone()),
            None => common_build::default_corpus(),
        }
    }

    /// Builds a common datastore with `params` at the path that `out` gives for the model's
    /// tokenizer (with `--if-missing`, only when there is no valid one).
    pub fn build(&self, out: impl Fn(&Tokenizer) -> PathBuf, params: CommonParams) -> Result<()> {
        let model = self.model_path()?;
        let tokenizer = model_files::load_tokenizer(&model)?;
        let out = out(&tokenizer);
        if self.if_missing && CommonStore::open(&out, tokenizer.fingerprint()).is_ok() {
            println!("common datastore present: {}", out.display());
            return Ok(());
        }
        check_writable(&out)?;
        println!("{}", common::build(&tokenizer, &self.corpus()?, &out, params)?);
        Ok(())
    }

    /// Builds the store refined by the model's perplexity, cached for that model.
    fn refine(&self, settings: &RefineSettings, threads: Option<usize>) -> Result<()> {
        let path = self.model_path()?;
        let engine = EngineSettings { model: Some(path.clone()), threads, ..EngineSettings::default() };
        let mut model = completion::load_model(&engine)?;
        let out = common::refined_store_path(model.tokenizer(), model.info());
        if self.if_missing && CommonStore::open(&out, model.tokenizer().fingerprint()).is_ok() {
            println!("refined common datastore present: {}", out.display());
            return Ok(());
        }
        check_writable(&out)?;
        let corpus = self.corpus()?;
        eprintln!(
            "copilotd: scoring {} with {} for up to {:.0} s",
            corpus.display(),
            path.display(),
            settings.budget.as_secs_f64()
        );
        let (refined, built) = with_progress_bar(settings.budget, |progress| {
            common_refine::build_refined(&mut model, &corpus, &out, settings, CommonParams::default(), progress)
        })?;
        println!("{refined}\n{built}");
        Ok(())
    }
}

/// Fails unless the store could be written at `out`: before the work, not after it.
fn check_writable(out: &Path) -> Result<()> {
    copilotd_draft::atomic_file::check_writable(out)
        .with_context(|| format!("cannot write the common datastore to {}", out.display()))
}

/// Runs `work` with a progress bar on a terminal: seconds of the budget spent,
/// and chunks scored.
fn with_progress_bar<T>(
    budget: Duration,
    work: impl FnOnce(&mut dyn FnMut(common_refine::Progress)) -> Result<T>,
) -> Result<T> {
    let template = "{spinner} scoring [{bar:40}] {pos}/{len} s, {msg}";
    let seconds = budget.as_secs().max(1);
    let bar = crate::progress_bar::on_stderr(true, seconds, template)?;
    // From the start of reading the corpus (a few seconds before scoring starts).
    let started = std::time::Instant::now();
    let result = work(&mut |p| {
        bar.set_position(started.elapsed().as_secs().min(seconds));
        bar.set_message(format!("{}/{} chunks, {} tokens", p.scored, p.total, p.tokens));
    });
    bar.finish_and_clear();
    result
}

pub fn run(command: DatastoreCommand) -> Result<()> {
    let DatastoreCommand::BuildCommon(BuildCommonCommand { common, refine }) = command;
    match refine.refine {
        None => common.build(common::store_path, CommonParams::default()),
        Some(fraction) => {
            let settings = RefineSettings::new(fraction, refine.refine_budget, refine.refine_window)?;
            common.refine(&settings, refine.threads)
        }
    }
}
