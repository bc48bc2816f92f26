//! The `copilotd` binary: wires the product's command line (`copilotd_server::cli`: `--stdio`,
//! `complete`, `index`, `model`, `datastore`) and the benchmarks' (`copilotd_bench::cli`:
//! `bench …`) into one program. Nothing else lives here.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use copilotd_bench::cli::BenchCommand;
use copilotd_server::cli;

#[derive(Parser, Debug)]
#[command(
    name = "copilotd",
    version,
    about = "Local code completions from a local LLM, decoded speculatively and losslessly"
)]
struct Cli {
    /// Run the language server on stdin/stdout.
    #[arg(long)]
    stdio: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(flatten)]
    Product(cli::Command),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    match (cli.stdio, cli.command) {
        (true, None) => cli::serve_stdio(),
        (true, Some(_)) => anyhow::bail!("--stdio takes no subcommand"),
        (false, None) => anyhow::bail!("nothing to do: pass --stdio or a subcommand (see --help)"),
        (false, Some(Command::Product(command))) => {
            cli::log::to_stderr();
            cli::run(command)
        }
        (false, Some(Command::Bench(command))) => {
            cli::log::to_stderr();
            copilotd_bench::cli::run(command)
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line: the error and its causes.
            let causes: Vec<String> = error.chain().map(|cause| cause.to_string()).collect();
            eprintln!("copilotd: error: {}", causes.join(": "));
            ExitCode::FAILURE
        }
    }
}
