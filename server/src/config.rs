//! User settings: `$XDG_CONFIG_HOME/copilotd/config.toml` (snake_case names), overridden by a
//! client's settings (camelCase names, from LSP `initializationOptions` and
//! `workspace/didChangeConfiguration`).
//!
//! Every setting is validated on its own: a bad value yields a warning and leaves the previous
//! value in place, so one typo never disables the rest of a configuration.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::completion::{sampling, EngineSettings, Sampling, Strategy};
use crate::paths;

/// Default number of tokens a completion may generate.
pub const DEFAULT_MAX_TOKENS: usize = 128;
/// Upper bound accepted for `max_tokens`.
pub const MAX_TOKENS_LIMIT: usize = 4096;
/// Default of `prompt_latency_ms`: a first suggestion in 1.4–2.0 s on two AVX2 cores of the Zen 1
/// class, from a cold prompt of 280–390 tokens (one of 1,900 tokens takes 12 s to read there);
/// on two AVX-512 cores, estimated from their prefill rates, a window of about 1,000 tokens.
pub const DEFAULT_PROMPT_LATENCY: Duration = Duration::from_millis(2000);
/// Upper bound accepted for `prompt_latency_ms`.
const PROMPT_LATENCY_LIMIT_MS: u64 = 60_000;

/// The daemon's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// GGUF model file; `None` means the default model in the cache directory.
    pub model: Option<PathBuf>,
    /// Decoding strategy.
    pub strategy: Strategy,
    /// Most tokens one completion may generate.
    pub max_tokens: usize,
    /// Compute threads; `None` means the runtime's default (physical cores).
    pub threads: Option<usize>,
    /// LSP language ids that get completions.
    pub languages: Vec<String>,
    /// Extra gitignore-style patterns kept out of the repository datastore.
    pub ignore: Vec<String>,
    /// `temperature`, `top_p` and `seed`: greedy by default.
    pub sampling: Sampling,
    /// Fill-in-the-middle prompts (text after the cursor too) for models with FIM tokens;
    /// off: the text before the cursor only, which some FIM models complete better from.
    pub fim: bool,
    /// Files of the repository before the current one in FIM prompts, for models trained
    /// with repository-level context (Qwen2.5-Coder).
    pub repo_context: bool,
    /// A suggestion's first whole lines answer as soon as they are generated, marked as having
    /// more to come (the editors ask again for the rest); off: answers wait for the whole
    /// suggestion.
    pub early_lines: bool,
    /// The place an editor names (`copilotd/warm`) is prefilled while the model idles; off:
    /// those notifications are ignored, and the model works only when asked to complete.
    pub warm: bool,
    /// Most time the prefill of a prompt's uncached part may take before a completion: a prompt
    /// that would take longer (a cold start, a jump to another file) is cut to a shorter window
    /// before the cursor; `None` (`prompt_latency_ms = 0`): never cut, however long it takes.
    pub prompt_latency: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            model: None,
            strategy: Strategy::Auto,
            max_tokens: DEFAULT_MAX_TOKENS,
            threads: None,
            languages: vec!["python".to_owned()],
            ignore: Vec::new(),
            sampling: Sampling::GREEDY,
            fim: true,
            repo_context: true,
            early_lines: true,
            warm: true,
            prompt_latency: Some(DEFAULT_PROMPT_LATENCY),
        }
    }
}

/// How setting names are spelled in a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// `max_tokens`, as in config.toml.
    SnakeCase,
    /// `maxTokens`, as in LSP settings.
    CamelCase,
}

/// The settings, by their snake_case name.
const SETTINGS: [&str; 14] = [
    "model",
    "strategy",
    "max_tokens",
    "threads",
    "languages",
    "ignore",
    "temperature",
    "top_p",
    "seed",
    "fim",
    "repo_context",
    "early_lines",
    "warm",
    "prompt_latency_ms",
];

fn spelled(name: &str, naming: Naming) -> String {
    match naming {
        Naming::SnakeCase => name.to_owned(),
        Naming::CamelCase => {
            let mut out = String::with_capacity(name.len());
            let mut upper = false;
            for ch in name.chars() {
                if ch == '_' {
                    upper = true;
                } else if upper {
                    out.push(ch.to_ascii_uppercase());
                    upper = false;
                } else {
                    out.push(ch);
                }
            }
            out
        }
    }
}

impl Config {
    /// Where config.toml lives: `$XDG_CONFIG_HOME/copilotd/config.toml` (default `~/.config`).
    pub fn default_path() -> PathBuf {
        paths::config_dir().join("config.toml")
    }

    /// The defaults overridden by config.toml at [`Config::default_path`], with warnings for
    /// anything in the file that could not be used. A missing file is not a warning.
    pub fn load() -> (Config, Vec<String>) {
        Config::load_from(&Config::default_path())
    }

    /// The defaults overridden by the config file at `path` (see [`Config::load`]).
    pub fn load_from(path: &Path) -> (Config, Vec<String>) {
        let mut config = Config::default();
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return (config, Vec::new()),
            Err(err) => return (config, vec![format!("cannot read {}: {err}", path.display())]),
        };
        let warnings =
            config.apply_toml(&text).into_iter().map(|warning| format!("{}: {warning}", path.display())).collect();
        (config, warnings)
    }

    /// Applies the settings of a config.toml text; returns warnings.
    pub fn apply_toml(&mut self, text: &str) -> Vec<String> {
        let table: toml::Table = match toml::from_str(text) {
            Ok(table) => table,
            Err(err) => return vec![format!("not valid TOML, ignored: {}", err.message())],
        };
        match serde_json::to_value(table) {
            Ok(value) => self.apply(&value, Naming::SnakeCase, &Config::default()),
            Err(err) => vec![format!("unusable TOML, ignored: {err}")],
        }
    }

    /// Applies the settings present in a JSON object (the others keep their values); returns
    /// warnings for unknown names and bad values. `null` resets a setting to its value in
    /// `base` (for an editor's settings, config.toml's).
    pub fn apply(&mut self, settings: &Value, naming: Naming, base: &Config) -> Vec<String> {
        let Some(object) = settings.as_object() else {
            return if settings.is_null() {
                Vec::new()
            } else {
                vec![format!("settings must be an object, got {settings}")]
            };
        };
        let mut warnings = Vec::new();
        for key in object.keys() {
            if !SETTINGS.iter().any(|name| spelled(name, naming) == *key) {
                warnings.push(format!("unknown setting `{key}` ignored"));
            }
        }
        for name in SETTINGS {
            let key = spelled(name, naming);
            if let Some(value) = object.get(&key) {
                if let Err(problem) = self.set(name, value, base) {
                    warnings.push(format!("setting `{key}`: {problem}; keeping the previous value"));
                }
            }
        }
        warnings
    }

    /// Sets one setting from its JSON value; `null` takes `base`'s.
    fn set(&mut self, name: &str, value: &Value, base: &Config) -> Result<(), String> {
        match (name, value) {
            ("model", Value::Null) => self.model = base.model.clone(),
            ("model", Value::String(path)) if !path.is_empty() => self.model = Some(expand_home(path)),
            ("model", _) => return Err(format!("expected a file path, got {value}")),
            ("strategy", Value::Null) => self.strategy = base.strategy,
            ("strategy", Value::String(text)) => {
                self.strategy = text.parse().map_err(|err| format!("{err}"))?;
            }
            ("strategy", _) => return Err(format!("expected a strategy name, got {value}")),
            ("max_tokens", Value::Null) => self.max_tokens = base.max_tokens,
            ("max_tokens", _) => {
                self.max_tokens = positive(value)
                    .filter(|&n| n <= MAX_TOKENS_LIMIT)
                    .ok_or_else(|| format!("expected an integer in 1..={MAX_TOKENS_LIMIT}, got {value}"))?;
            }
            ("threads", Value::Null) => self.threads = base.threads,
            ("threads", _) => {
                self.threads = Some(
                    positive(value)
                        .filter(|&n| n <= 1024)
                        .ok_or_else(|| format!("expected an integer in 1..=1024, got {value}"))?,
                );
            }
            ("languages", Value::Null) => self.languages.clone_from(&base.languages),
            ("languages", _) => self.languages = strings(value)?,
            ("ignore", Value::Null) => self.ignore.clone_from(&base.ignore),
            ("ignore", _) => self.ignore = strings(value)?,
            ("temperature", Value::Null) => self.sampling.temperature = base.sampling.temperature,
            ("temperature", _) => self.sampling.temperature = sampling::temperature(number(value)?)?,
            ("top_p", Value::Null) => self.sampling.top_p = base.sampling.top_p,
            ("top_p", _) => self.sampling.top_p = sampling::top_p(number(value)?)?,
            ("seed", Value::Null) => self.sampling.seed = base.sampling.seed,
            ("seed", _) => {
                let wrong = || format!("seed must be an integer in 0..={}, got {value}", u64::MAX);
                self.sampling.seed = Some(value.as_u64().ok_or_else(wrong)?);
            }
            ("fim", _) => self.fim = boolean(value, base.fim)?,
            ("repo_context", _) => self.repo_context = boolean(value, base.repo_context)?,
            ("early_lines", _) => self.early_lines = boolean(value, base.early_lines)?,
            ("warm", _) => self.warm = boolean(value, base.warm)?,
            ("prompt_latency_ms", Value::Null) => self.prompt_latency = base.prompt_latency,
            ("prompt_latency_ms", _) => {
                let ms = value.as_u64().filter(|&ms| ms <= PROMPT_LATENCY_LIMIT_MS).ok_or_else(|| {
                    format!(
                        "expected an integer in 0..={PROMPT_LATENCY_LIMIT_MS} (0: never cut the prompt), got {value}"
                    )
                })?;
                self.prompt_latency = (ms > 0).then(|| Duration::from_millis(ms));
            }
            _ => unreachable!("`{name}` is not in SETTINGS"),
        }
        Ok(())
    }

    /// The engine settings these settings select (the rest at the engine's defaults), so that
    /// the server and `copilotd complete` load the same model the same way.
    pub fn engine_settings(&self) -> EngineSettings {
        EngineSettings {
            model: self.model.clone(),
            threads: self.threads,
            fim: self.fim,
            repo_context: self.repo_context,
            ..EngineSettings::default()
        }
    }

    /// Whether documents of this LSP language id get completions.
    pub fn serves_language(&self, language_id: &str) -> bool {
        self.languages.iter().any(|language| language.eq_ignore_ascii_case(language_id))
    }
}

fn positive(value: &Value) -> Option<usize> {
    value.as_u64().filter(|&n| n > 0).and_then(|n| usize::try_from(n).ok())
}

/// A switch: `true` or `false`, `null` for its default.
fn boolean(value: &Value, default: bool) -> Result<bool, String> {
    match value {
        Value::Null => Ok(default),
        Value::Bool(on) => Ok(*on),
        _ => Err(format!("expected true or false, got {value}")),
    }
}

fn number(value: &Value) -> Result<f64, String> {
    value.as_f64().ok_or_else(|| format!("expected a number, got {value}"))
}

fn strings(value: &Value) -> Result<Vec<String>, String> {
    let wrong = || format!("expected a list of strings, got {value}");
    value.as_array().ok_or_else(wrong)?.iter().map(|item| item.as_str().map(str::to_owned).ok_or_else(wrong)).collect()
}

/// `~/x` → `$HOME/x`; other paths unchanged.
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// Every setting's name as clients send it (`initializationOptions`,
/// `workspace/didChangeConfiguration`): camelCase.
pub fn client_setting_names() -> impl Iterator<Item = String> {
    SETTINGS.iter().map(|name| spelled(name, Naming::CamelCase))
}

/// Reads a client's settings object: either the copilotd settings themselves, or an object
/// holding them under a `copilotd` key (how editors usually namespace extension settings).
pub fn client_settings(value: &Value) -> &Value {
    match value.get("copilotd") {
        Some(inner) if inner.is_object() => inner,
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn toml_uses_snake_case_and_keeps_defaults_for_absent_settings() {
        let mut config = Config::default();
        let warnings = config.apply_toml(
            "model = \"/m/x.gguf\"\nstrategy = \"pld\"\nmax_tokens = 32\nthreads = 2\nignore = [\"*.lock\"]\nfim = false\nrepo_context = false\n",
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.model, Some(PathBuf::from("/m/x.gguf")));
        assert_eq!(config.strategy, Strategy::Pld);
        assert_eq!(config.max_tokens, 32);
        assert_eq!(config.threads, Some(2));
        assert_eq!(config.languages, vec!["python".to_owned()]);
        assert_eq!(config.ignore, vec!["*.lock".to_owned()]);
        assert!(!config.fim && !config.engine_settings().fim);
        assert!(!config.repo_context && !config.engine_settings().repo_context);
        assert!(Config::default().engine_settings().fim);
        assert!(Config::default().engine_settings().repo_context);
    }

    #[test]
    fn client_settings_use_camel_case() {
        let mut config = Config::default();
        let warnings = config.apply(
            &json!({"maxTokens": 16, "languages": ["python", "rust"], "fim": false, "repoContext": false, "earlyLines": false, "warm": false, "promptLatencyMs": 800}),
            Naming::CamelCase,
            &Config::default(),
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.max_tokens, 16);
        assert_eq!(config.prompt_latency, Some(Duration::from_millis(800)));
        assert_eq!(Config::default().prompt_latency, Some(DEFAULT_PROMPT_LATENCY));
        assert!(!config.fim && !config.repo_context && !config.early_lines && !config.warm);
        assert!(Config::default().early_lines && Config::default().warm);
        assert!(config.serves_language("rust"));
        // The snake_case spelling is not a client setting.
        let warnings = config.apply(&json!({"max_tokens": 8}), Naming::CamelCase, &Config::default());
        assert_eq!(warnings.len(), 1);
        assert_eq!(config.max_tokens, 16);
    }

    #[test]
    fn null_takes_the_base_value_back() {
        let mut file = Config::default();
        assert!(file.apply_toml("max_tokens = 9\nstrategy = \"pld\"\nlanguages = [\"rust\"]\n").is_empty());
        let mut config = file.clone();
        let set = json!({"maxTokens": 30, "strategy": "ar", "temperature": 0.5, "languages": ["python"], "promptLatencyMs": 0});
        assert!(config.apply(&set, Naming::CamelCase, &file).is_empty());
        assert_eq!(config.prompt_latency, None, "0: never cut");
        assert_eq!((config.max_tokens, config.strategy, config.sampling.temperature), (30, Strategy::Ar, 0.5));
        let unset = json!({"maxTokens": null, "strategy": null, "temperature": null, "languages": null, "promptLatencyMs": null});
        assert!(config.apply(&unset, Naming::CamelCase, &file).is_empty());
        assert_eq!(config.prompt_latency, Some(DEFAULT_PROMPT_LATENCY));
        assert_eq!((config.max_tokens, config.strategy, config.sampling.temperature), (9, Strategy::Pld, 0.0));
        assert_eq!(config.languages, ["rust"]);
    }

    #[test]
    fn bad_values_warn_and_keep_the_previous_value() {
        let mut config = Config::default();
        config.apply(&json!({"maxTokens": 16, "strategy": "ar"}), Naming::CamelCase, &Config::default());
        let warnings = config.apply(
            &json!({"maxTokens": -3, "strategy": "warp", "threads": 0, "languages": "python", "model": 7, "fim": "no", "repoContext": 1, "earlyLines": "yes", "warm": 0, "promptLatencyMs": -1}),
            Naming::CamelCase,
            &Config::default(),
        );
        assert_eq!(warnings.len(), 10, "{warnings:?}");
        assert_eq!(config.prompt_latency, Some(DEFAULT_PROMPT_LATENCY));
        let too_long = config.apply(&json!({"promptLatencyMs": 60_001}), Naming::CamelCase, &Config::default());
        assert!(too_long[0].contains("expected an integer in 0..=60000"), "{too_long:?}");
        assert!(config.fim && config.repo_context && config.early_lines && config.warm);
        assert_eq!(config.max_tokens, 16);
        assert_eq!(config.strategy, Strategy::Ar);
        assert_eq!(config.threads, None);
        assert_eq!(config.languages, vec!["python".to_owned()]);
        assert_eq!(config.model, None);
    }

    #[test]
    fn sampling_settings_are_checked_one_by_one() {
        let mut config = Config::default();
        assert!(config.apply_toml("temperature = 0.8\ntop_p = 0.9\nseed = 7\n").is_empty());
        assert_eq!(config.sampling, Sampling { temperature: 0.8, top_p: 0.9, seed: Some(7) });
        let warnings = config.apply(
            &json!({"temperature": -0.5, "topP": 1.5, "seed": 2.5}),
            Naming::CamelCase,
            &Config::default(),
        );
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].contains("setting `temperature`: temperature must be a number >= 0"), "{warnings:?}");
        assert!(warnings[1].contains("setting `topP`: top_p must be a number in (0, 1]"), "{warnings:?}");
        assert!(warnings[2].contains("setting `seed`: seed must be an integer"), "{warnings:?}");
        assert!(warnings.iter().all(|w| w.ends_with("keeping the previous value")));
        assert_eq!(config.sampling, Sampling { temperature: 0.8, top_p: 0.9, seed: Some(7) });
        let warnings =
            config.apply(&json!({"topP": 0, "seed": -1, "temperature": "hot"}), Naming::CamelCase, &Config::default());
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(config
            .apply(&json!({"temperature": 0, "seed": null, "topP": null}), Naming::CamelCase, &Config::default())
            .is_empty());
        assert_eq!(config.sampling, Sampling::GREEDY);
    }

    #[test]
    fn null_resets_and_nesting_is_accepted() {
        let mut config = Config::default();
        config.apply(&json!({"threads": 3, "maxTokens": 9}), Naming::CamelCase, &Config::default());
        let nested = json!({"copilotd": {"threads": null, "maxTokens": null}});
        assert!(config.apply(client_settings(&nested), Naming::CamelCase, &Config::default()).is_empty());
        assert_eq!(config, Config::default());
    }

    #[test]
    fn broken_or_missing_files_warn_or_default() {
        let dir = tempfile::tempdir().unwrap();
        let (config, warnings) = Config::load_from(&dir.path().join("absent.toml"));
        assert_eq!(config, Config::default());
        assert!(warnings.is_empty());
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "max_tokens = [").unwrap();
        let (config, warnings) = Config::load_from(&path);
        assert_eq!(config, Config::default());
        assert_eq!(warnings.len(), 1);
    }
}
