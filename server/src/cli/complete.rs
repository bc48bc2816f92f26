//! `copilotd complete`: one completion at a cursor, for scripts and
//! benchmarks.

use super::{parse, EngineArgs, SamplingArgs};
use crate::completion::{Completer, CompletionRequest, Strategy, Trigger, Unconfirmed};
use crate::config::{Config, MAX_TOKENS_LIMIT};
use crate::text_position;
use crate::workspace::paths::workspace_store_path;
use crate::workspace::{save_store, update_workspace_store, with_indexing_bar, Repository, WalkConfig};
use anyhow::{Context, Result};
use clap::builder::RangedU64ValueParser;
use clap::Args;
use copilotd_draft::cancel::CancelToken;
use copilotd_model::Tokenizer;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

#[derive(Args, Debug)]
pub struct CompleteArgs {
    /// The workspace root. Strategies that draft from the repository datastore (auto, rest,
    /// fastcoder) first bring its datastore up to date, as `copilotd index` does: the first time,
    /// that reads the whole folder.
    #[arg(long, default_value = ".")]
    workspace: PathBuf,
    /// The file, relative to the workspace.
    #[arg(long)]
    file: PathBuf,
    /// Cursor line, 1-based.
    #[arg(long)]
    line: usize,
    /// Cursor column in characters, 1-based.
    #[arg(long)]
    column: usize,
    /// Most new tokens, 1 to 4096 (default: config.toml's `max_tokens`, else 128).
    #[arg(long, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_TOKENS_LIMIT as u64))]
    max_tokens: Option<usize>,
    /// Decoding strategy: ar, pld, rest, fastcoder, spectra or auto (default: config.toml's
    /// `strategy`, else auto).
    #[arg(long, value_parser = parse::<Strategy>)]
    strategy: Option<Strategy>,
    /// Print one JSON object on the last line of stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    engine: EngineArgs,
}

/// The workspace's repository datastore, brought up to date (reusing what
/// `copilotd index` or the daemon persisted, with the indexing bar on a terminal) and saved for
/// next time; used all the same where it cannot be saved (a cache directory that cannot be
/// written), with a warning. `None`, with a warning, when the configured languages leave
/// nothing to index.
fn refreshed_repository(workspace: &Path, tokenizer: &Tokenizer, config: &Config) -> Result<Option<Repository>> {
    let root = workspace.canonicalize().with_context(|| format!("cannot open workspace {}", workspace.display()))?;
    let Some(walk) = WalkConfig::for_languages(&config.languages, &config.ignore)? else {
        eprintln!("copilotd: warning: no language of config.toml's `languages` has files to index; completing without the repository datastore");
        return Ok(None);
    };
    let encoder = tokenizer.clone();
    let tokenize = move |text: &str| encoder.encode(text);
    let store_path = workspace_store_path(&root)?;
    let updated =
        with_indexing_bar(true, |progress| update_workspace_store(&root, &walk, &tokenize, &store_path, progress))?;
    // The summary's warnings were logged, so shown, as they arose.
    let (store, _, unsaved) = updated?;
    if unsaved {
        if let Err(error) = save_store(&store, &store_path) {
            eprintln!("copilotd: warning: the repository datastore is not kept for next time: {error:#}");
        }
    }
    Ok(Some(Repository::new(&root, Arc::new(RwLock::new(store)))))
}

/// One completion, with the settings of config.toml where the flags leave them open.
pub fn run(args: &CompleteArgs) -> Result<()> {
    let config = super::load_config();
    let strategy = args.strategy.unwrap_or(config.strategy);
    let sampling = args.sampling.sampling_over(config.sampling);
    if let Some(warning) = args.sampling.unused_warning(&sampling) {
        eprintln!("copilotd: warning: {warning}");
    }
    let path = args.workspace.join(&args.file);
    let text = text_position::read_source_file(&path)?;
    let cursor = text_position::offset_of_line_column(&text, args.line, args.column)?;
    let mut completer = Completer::load(&args.engine.settings(&config))?;
    if strategy != Strategy::Ar {
        // Measured once per model and machine, then cached (the daemon measures in the background,
        // and again later to confirm it; a one-off command takes the cached curve as it is).
        // Without it drafting keeps a small fixed tree, as in the daemon.
        if let Err(error) = completer.calibrate(Unconfirmed::Use) {
            eprintln!("copilotd: warning: cost calibration failed: {error}; drafting keeps a small fixed tree");
        }
    }
    // Without the common store (a cache directory that cannot be written), drafts come from the
    // other sources, as in the daemon.
    if strategy.uses_common_store() {
        if let Err(error) = completer.load_common_store() {
            eprintln!("copilotd: warning: completing without the common datastore: {error:#}");
        }
    }
    // The repository store feeds drafting and, for models trained with it, the prompt.
    if strategy.uses_repository_store() || completer.uses_repo_context() {
        completer.set_repositories(
            refreshed_repository(&args.workspace, completer.tokenizer(), &config)?.into_iter().collect(),
        );
    }
    let relative = args.file.to_string_lossy();
    let request = CompletionRequest {
        text: &text,
        cursor,
        path: Some(&relative),
        language: None,
        max_tokens: args.max_tokens.unwrap_or(config.max_tokens),
        strategy,
        sampling,
        trigger: Trigger::Invoked,
        prompt_latency: None,
    };
    let completion = completer.complete(&request, &CancelToken::new()).context("completion failed")?;
    // The acceptance counts, for the next process (a `complete` has no preference cache).
    completer.save_learned();
    if args.json {
        let mut object = serde_json::to_value(&completion.stats)?;
        object["text"] = json!(completion.text);
        object["model"] = json!(completer.model_info().name);
        println!("{}", serde_json::to_string(&object)?);
    } else {
        println!("{}", completion.text);
        let stats = &completion.stats;
        eprintln!(
            "{} tokens in {} steps ({:.2} tokens/step), {:.1} ms/token, prefill {:.0} ms, strategy {}",
            stats.new_tokens,
            stats.forward_steps,
            stats.acceptance_length,
            stats.ms_per_token,
            stats.prefill_ms,
            stats.strategy
        );
    }
    Ok(())
}
