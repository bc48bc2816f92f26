//! `copilotd index [DIR]`: build or refresh a workspace's repository
//! datastore ahead of time, so the daemon starts with it.

use crate::model_files;
use crate::workspace::{run_index, WalkConfig};
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct IndexArgs {
    /// The workspace root.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// The model whose tokenizer the datastore uses (default: as configured).
    #[arg(long)]
    model: Option<PathBuf>,
}

pub fn run(args: &IndexArgs) -> Result<()> {
    let config = super::load_config();
    let dir = args.dir.canonicalize().with_context(|| format!("cannot open workspace {}", args.dir.display()))?;
    anyhow::ensure!(dir.is_dir(), "{} is not a directory", dir.display());
    let model = model_files::resolve(args.model.as_deref().or(config.model.as_deref()))?;
    let tokenizer = model_files::load_tokenizer(&model)?;
    let Some(walk) = WalkConfig::for_languages(&config.languages, &config.ignore)? else {
        anyhow::bail!("nothing to index: no language of config.toml's `languages` has files the index knows");
    };
    let tokenize = move |text: &str| tokenizer.encode(text);
    let summary = run_index(&dir, &walk, &tokenize, true)?;
    println!("{summary}");
    Ok(())
}
