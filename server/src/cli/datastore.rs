//! `copilotd datastore`: the common datastore, built ahead of time.

use crate::completion::common;
use crate::config::Config;
use crate::{common_build, model_files};
use anyhow::Result;
use clap::{Args, Subcommand};
use copilotd_draft::common_store::{CommonParams, CommonStore};
use copilotd_model::Tokenizer;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum DatastoreCommand {
    /// Build the common datastore for the model's tokenizer.
    BuildCommon(BuildCommonArgs),
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
    /// Do nothing when a valid datastore for this tokenizer exists.
    #[arg(long)]
    if_missing: bool,
}

impl BuildCommonArgs {
    /// Builds a common datastore with `params` at the path that `out` gives for the model's
    /// tokenizer (with `--if-missing`, only when there is no valid one).
    pub fn build(&self, out: impl Fn(&Tokenizer) -> PathBuf, params: CommonParams) -> Result<()> {
        let (config, _) = Config::load();
        let model = model_files::resolve(self.model.as_deref().or(config.model.as_deref()))?;
        let tokenizer = model_files::load_tokenizer(&model)?;
        let out = out(&tokenizer);
        if self.if_missing && CommonStore::open(&out, tokenizer.fingerprint()).is_ok() {
            println!("common datastore present: {}", out.display());
            return Ok(());
        }
        let corpus = match &self.corpus {
            Some(dir) => dir.clone(),
            None => common_build::default_corpus()?,
        };
        println!("{}", common::build(&tokenizer, &corpus, &out, params)?);
        Ok(())
    }
}

pub fn run(command: DatastoreCommand) -> Result<()> {
    let DatastoreCommand::BuildCommon(args) = command;
    args.build(common::store_path, CommonParams::default())
}
