//! `copilotd datastore`: the common datastore, built ahead of time.

use crate::completion::common;
use crate::config::Config;
use crate::{common_build, model_files};
use anyhow::Result;
use clap::Subcommand;
use copilotd_draft::common_store::{CommonParams, CommonStore};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum DatastoreCommand {
    /// Build the common datastore for the model's tokenizer.
    BuildCommon {
        /// Directory of Python files (default: the Python standard library on this machine).
        #[arg(long)]
        corpus: Option<PathBuf>,
        /// The model whose tokenizer the datastore uses (default: as configured).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Do nothing when a valid datastore for this tokenizer exists.
        #[arg(long)]
        if_missing: bool,
        /// Build the uncompacted store (every n-gram, not CREST's top-t) that
        /// `copilotd bench repo --common-full` compares with, instead.
        #[arg(long)]
        full: bool,
    },
}

pub fn run(command: DatastoreCommand) -> Result<()> {
    let DatastoreCommand::BuildCommon { corpus, model, if_missing, full } = command;
    let (config, _) = Config::load();
    let model = model_files::resolve(model.as_deref().or(config.model.as_deref()))?;
    let tokenizer = model_files::load_tokenizer(&model)?;
    let out = if full { common::full_store_path(&tokenizer) } else { common::store_path(&tokenizer) };
    if if_missing && CommonStore::open(&out, tokenizer.fingerprint()).is_ok() {
        println!("common datastore present: {}", out.display());
        return Ok(());
    }
    let corpus = match corpus {
        Some(dir) => dir,
        None => common_build::default_corpus()?,
    };
    let params = if full { common::full_params() } else { CommonParams::default() };
    println!("{}", common::build(&tokenizer, &corpus, &out, params)?);
    Ok(())
}
