//! The product's command line: `copilotd --stdio` and the subcommands for people and scripts
//! (`complete`, `index`, `model`, `datastore`), and the model options they share
//! ([`EngineArgs`]). The `copilotd` binary (server/bin/main.rs) puts these beside the
//! benchmarks' `bench` commands.

mod complete;
mod datastore;
mod index;
pub mod log;

use crate::completion::drafting::BudgetSettings;
use crate::completion::{sampling, EngineSettings, Sampling};
use crate::config::Config;
use anyhow::Result;
use clap::builder::RangedU64ValueParser;
use clap::{Args, Subcommand};
use copilotd_model::{Kernel, WeightFormat};
use std::path::PathBuf;

pub use datastore::BuildCommonArgs;

/// The product's subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// One completion at a cursor.
    Complete(complete::CompleteArgs),
    /// Build or refresh the repository datastore of a workspace.
    Index(index::IndexArgs),
    /// Manage the model.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Manage datastores.
    #[command(subcommand)]
    Datastore(datastore::DatastoreCommand),
}

#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Fetch the embedded default model into the cache directory.
    Fetch {
        /// Do nothing when the model is already there.
        #[arg(long)]
        if_missing: bool,
    },
}

/// The model options of every subcommand that loads a model.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A GGUF file or a safetensors directory (default: config.toml's `model` for `complete`,
    /// else the embedded SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Threads for the model (default: config.toml's `threads` for `complete`, else physical cores).
    #[arg(long, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,
    /// Weight format at load time: auto (4-bit, Q6_K and Q8_0 weights as stored, the rest Q8_0), q8_0, native or f32.
    #[arg(long, default_value = "auto", value_parser = parse::<WeightFormat>)]
    pub weights: WeightFormat,
    /// Kernel to run on: avx512-vnni, avx-vnni, avx2, neon-dotprod, neon or portable
    /// (default: $COPILOTD_KERNEL, else the fastest this CPU runs).
    #[arg(long)]
    pub kernel: Option<Kernel>,
}

impl ModelArgs {
    /// The engine that loads the model these flags ask for, `config` giving the model and
    /// threads they leave open; everything else at the engine's defaults.
    pub fn settings(&self, config: &Config) -> EngineSettings {
        EngineSettings {
            model: self.model.clone().or_else(|| config.model.clone()),
            threads: self.threads.or(config.threads),
            weights: self.weights,
            kernel: self.kernel,
            ..EngineSettings::default()
        }
    }
}

/// Model and decoding options shared by the subcommands that complete.
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Most prompt tokens.
    #[arg(long, default_value_t = 2048, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    pub prompt_tokens: usize,
    /// Prompt with the text before the cursor only, also for models with fill-in-the-middle tokens.
    #[arg(long)]
    pub no_fim: bool,
    /// No files of the repository before the current one in FIM prompts (models trained with
    /// repository-level context, such as Qwen2.5-Coder, get them by default).
    #[arg(long)]
    pub no_repo_context: bool,
    /// Most draft tree nodes per step (besides the root).
    #[arg(long, default_value_t = BudgetSettings::default().max_nodes)]
    pub draft_nodes: usize,
    /// Deepest draft token.
    #[arg(long, default_value_t = BudgetSettings::default().max_depth)]
    pub draft_depth: usize,
    /// Always verify up to --draft-nodes instead of sizing each tree from the
    /// measured cost curve.
    #[arg(long)]
    pub fixed_budget: bool,
}

impl EngineArgs {
    /// The engine these flags ask for, `config` giving the model, threads and prompt layout
    /// they leave open (the benchmarks pass the defaults: their settings are their flags).
    pub fn settings(&self, config: &Config) -> EngineSettings {
        let mut settings = EngineSettings {
            fim: config.fim && !self.no_fim,
            repo_context: config.repo_context && !self.no_repo_context,
            budget: BudgetSettings {
                cost_aware: !self.fixed_budget,
                max_nodes: self.draft_nodes,
                max_depth: self.draft_depth,
            },
            ..self.model.settings(config)
        };
        settings.prompt.max_tokens = self.prompt_tokens;
        settings
    }
}

/// Greedy decoding or lossless sampling, for the commands that complete.
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 (the default) decodes greedily. Every strategy samples losslessly:
    /// its output follows the same distribution as plain sampling.
    #[arg(long, allow_negative_numbers = true, value_parser = sampling::parse_temperature)]
    pub temperature: Option<f32>,
    /// Nucleus sampling: draw among the most likely tokens whose mass reaches P, in (0, 1]
    /// (default: 1).
    #[arg(long, allow_negative_numbers = true, value_parser = sampling::parse_top_p)]
    pub top_p: Option<f32>,
    /// Seeds each request's draws with its prompt: the same request gives the same text under
    /// `ar`, and under drafting strategies when the drafts are the same; drafts follow the
    /// acceptance counts each run learns and saves, so runs repeat under `ar` or with
    /// `--fixed-budget` (default: fresh randomness per request).
    #[arg(long, allow_negative_numbers = true, value_parser = sampling::parse_seed)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampling these flags ask for, `base` giving the values they leave open.
    pub fn sampling_over(&self, base: Sampling) -> Sampling {
        Sampling {
            temperature: self.temperature.unwrap_or(base.temperature),
            top_p: self.top_p.unwrap_or(base.top_p),
            seed: self.seed.or(base.seed),
        }
    }

    /// The sampling these flags ask for, greedy where they say nothing.
    pub fn sampling(&self) -> Sampling {
        self.sampling_over(Sampling::default())
    }

    /// A warning when `sampling` decodes greedily although `--top-p` or `--seed` was given,
    /// which only sampling uses.
    pub fn unused_warning(&self, sampling: &Sampling) -> Option<&'static str> {
        let sampling_only = self.top_p.is_some() || self.seed.is_some();
        (sampling_only && sampling.temperature == 0.0).then_some(
            "--top-p and --seed have no effect at temperature 0 (greedy decoding); sample with a --temperature above 0",
        )
    }
}

/// A command-line value through the type's own `FromStr` (the one parser of each type), as a
/// clap `value_parser`.
pub fn parse<T: std::str::FromStr<Err = anyhow::Error>>(value: &str) -> Result<T, String> {
    value.parse().map_err(|e: anyhow::Error| e.to_string())
}

/// The user's configuration (config.toml), its warnings printed.
pub fn load_config() -> Config {
    let (config, warnings) = Config::load();
    for warning in warnings {
        eprintln!("copilotd: warning: {warning}");
    }
    config
}

/// `copilotd --stdio`: the language server with the user's configuration, until the session ends.
pub fn serve_stdio() -> Result<()> {
    crate::lsp::run_stdio(load_config())
}

/// Runs one of the product's subcommands.
pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Complete(args) => complete::run(&args),
        Command::Index(args) => index::run(&args),
        Command::Model(ModelCommand::Fetch { if_missing }) => {
            if if_missing {
                // Fetched only when missing or damaged.
                let path = crate::model_files::ensure_default()?;
                println!("model present: {}", path.display());
                return Ok(());
            }
            let path = crate::model_files::fetch_default()?;
            println!("fetched {}", path.display());
            Ok(())
        }
        Command::Datastore(command) => datastore::run(command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_formats_parse_as_the_model_crate_spells_them() {
        assert_eq!(parse::<WeightFormat>("q8_0"), Ok(WeightFormat::Q8_0));
        assert_eq!(parse::<WeightFormat>("Native"), "native".parse::<WeightFormat>().map_err(|e| e.to_string()));
        assert!(parse::<WeightFormat>("q4").unwrap_err().contains("expected auto, native, q8_0 or f32"));
    }

    #[test]
    fn no_fim_turns_fill_in_the_middle_off() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            engine: EngineArgs,
        }
        let settings = |args: &[&str]| <Cli as clap::Parser>::parse_from(args).engine.settings(&Config::default());
        assert!(settings(&["copilotd"]).fim);
        assert!(!settings(&["copilotd", "--no-fim"]).fim);
        assert!(settings(&["copilotd"]).repo_context);
        assert!(!settings(&["copilotd", "--no-repo-context"]).repo_context);
    }
}
