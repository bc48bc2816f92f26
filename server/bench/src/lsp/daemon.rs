//! How the LSP benchmarks start `copilotd --stdio`: with the settings they send and the
//! defaults for the rest, never the user's config.toml (the daemon gets an empty config
//! directory of its own), but with the user's cache directory, where the model, its
//! calibration and the stores are found as usual.

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use tempfile::TempDir;

use super::client::StdioClient;
use crate::report::printed_f64;
use copilotd_server::config::{Config, Naming};

/// Starts daemons that read no config.toml.
pub struct Daemon {
    binary: PathBuf,
    /// `XDG_CONFIG_HOME` of the daemons: empty, removed with this.
    config_home: TempDir,
}

impl Daemon {
    /// Daemons of the `copilotd` binary at `binary`.
    pub fn new(binary: PathBuf) -> Result<Daemon> {
        let config_home = tempfile::tempdir().context("cannot create an empty config directory for the daemon")?;
        Ok(Daemon { binary, config_home })
    }

    /// A running `copilotd --stdio`, not yet initialized.
    pub fn spawn(&self) -> Result<StdioClient> {
        let config_home = self.config_home.path().to_str().context("the temporary directory's path is not UTF-8")?;
        StdioClient::spawn(&self.binary, &["--stdio"], &[("XDG_CONFIG_HOME", config_home)])
            .context("cannot start the server")
    }
}

/// The settings a daemon without config.toml runs with when a client sends `sent` (its
/// `initializationOptions`); an error naming any that the daemon would refuse.
pub fn settings_in_effect(sent: &Value) -> Result<Config> {
    let mut config = Config::default();
    let refused = config.apply(sent, Naming::CamelCase, &Config::default());
    ensure!(refused.is_empty(), "the daemon would refuse the benchmark's settings: {}", refused.join("; "));
    Ok(config)
}

/// Sets the servers' `promptLatencyMs` in `settings`, when the benchmark sets it (`ms`).
pub fn set_prompt_latency(settings: &mut Value, ms: Option<u64>) {
    if let Some(ms) = ms {
        settings["promptLatencyMs"] = json!(ms);
    }
}

/// `config` as the reports record it, by config.toml's names (`model` and `threads` `null`:
/// the daemon's default).
pub fn settings_json(config: &Config) -> Value {
    json!({
        "model": config.model, "strategy": config.strategy.to_string(), "max_tokens": config.max_tokens,
        "threads": config.threads, "temperature": printed_f64(config.sampling.temperature),
        "top_p": printed_f64(config.sampling.top_p), "seed": config.sampling.seed, "fim": config.fim,
        "repo_context": config.repo_context, "early_lines": config.early_lines, "warm": config.warm,
        "languages": config.languages,
        "prompt_latency_ms": config.prompt_latency.map_or(0, |latency| latency.as_millis()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    #[test]
    fn daemons_read_no_config_file_but_keep_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let (record, binary) = (dir.path().join("env"), dir.path().join("copilotd"));
        // A stand-in binary that writes down where its config and cache are, and what the
        // config directory holds.
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n%s\\n%s\\n' \"$XDG_CONFIG_HOME\" \"$XDG_CACHE_HOME\" \"$(ls -A \"$XDG_CONFIG_HOME\")\" > {}\n",
            record.display()
        );
        std::fs::write(&binary, script).unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let daemon = Daemon::new(binary).unwrap();
        let mut client = daemon.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while client.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let seen = std::fs::read_to_string(&record).unwrap();
        let lines: Vec<&str> = seen.lines().collect();
        assert_eq!(lines[0], daemon.config_home.path().to_str().unwrap());
        assert_ne!(Some(lines[0].to_owned()), std::env::var("XDG_CONFIG_HOME").ok());
        assert_eq!(lines[1], std::env::var("XDG_CACHE_HOME").unwrap_or_default());
        assert_eq!(lines.get(2).copied().unwrap_or(""), "", "the config directory is empty");
    }

    #[test]
    fn the_settings_in_effect_are_the_defaults_and_the_ones_sent() {
        let config = settings_in_effect(&json!({"maxTokens": 16, "strategy": "ar"})).unwrap();
        let recorded = settings_json(&config);
        assert_eq!((recorded["max_tokens"].as_u64(), recorded["strategy"].as_str()), (Some(16), Some("ar")));
        assert_eq!((recorded["temperature"].as_f64(), recorded["top_p"].as_f64()), (Some(0.0), Some(1.0)));
        assert_eq!((&recorded["model"], &recorded["seed"]), (&Value::Null, &Value::Null));
        assert_eq!(recorded["prompt_latency_ms"].as_u64(), Some(2000), "the daemon's default");
        let uncut = settings_json(&settings_in_effect(&json!({"promptLatencyMs": 0})).unwrap());
        assert_eq!(uncut["prompt_latency_ms"].as_u64(), Some(0));
        let error = settings_in_effect(&json!({"maxTokens": 0})).unwrap_err().to_string();
        assert!(error.contains("setting `maxTokens`: expected an integer in 1..=4096"), "{error}");
    }
}
