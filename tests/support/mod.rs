//! Shared helpers of the LSP integration tests: the real `copilotd --stdio` binary driven over
//! JSON-RPC by `copilotd_bench::lsp::client::StdioClient` (every wait has a timeout).

#![allow(dead_code)] // Each test crate uses a different subset.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use copilotd_bench::lsp::client::{file_uri, StdioClient};
use serde_json::{json, Value};

/// Generous bound for anything that does not run the model.
pub const QUICK: Duration = Duration::from_secs(10);
/// Bound for model loads and completions on a slow, shared 2-core machine.
pub const SLOW: Duration = Duration::from_secs(120);

#[allow(unused_imports)] // Not every test crate needs the model.
pub use copilotd_test_support::model_path;

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_copilotd"))
}

/// A server with private config and cache directories (nothing of the user's is read or written).
pub struct Harness {
    pub client: StdioClient,
    pub home: tempfile::TempDir,
}

/// Starts `copilotd --stdio` with isolated XDG directories and initializes it.
pub fn start(root: Option<&Path>, options: Value) -> Harness {
    start_with_config(None, root, options)
}

/// Like [`start`], with a config.toml in the private config directory.
pub fn start_with_config(config_toml: Option<&str>, root: Option<&Path>, options: Value) -> Harness {
    start_with(config_toml, root.as_slice(), options)
}

/// Like [`start`], with any number of workspace folders.
pub fn start_folders(roots: &[&Path], options: Value) -> Harness {
    start_with(None, roots, options)
}

fn start_with(config_toml: Option<&str>, roots: &[&Path], options: Value) -> Harness {
    start_in(tempfile::tempdir().unwrap(), config_toml, roots, options)
}

/// Like [`start`], with the private cache holding what a daemon on the default model makes once
/// per machine and reuses after (see [`warm_cache`]): the common datastore and the measured cost
/// calibration. For tests about completions, not about that first start.
pub fn start_warm(root: Option<&Path>, options: Value) -> Harness {
    let home = tempfile::tempdir().unwrap();
    let cache = home.path().join("cache").join("copilotd");
    for part in WARM_PARTS {
        let Ok(entries) = std::fs::read_dir(warm_cache().join(part)) else { continue };
        std::fs::create_dir_all(cache.join(part)).unwrap();
        for entry in entries {
            let from = entry.unwrap().path();
            std::fs::copy(&from, cache.join(part).join(from.file_name().unwrap())).unwrap();
        }
    }
    start_in(home, None, root.as_slice(), options)
}

/// The parts of `$XDG_CACHE_HOME/copilotd` that [`start_warm`] copies.
const WARM_PARTS: [&str; 2] = ["common", "calibration"];

/// Runs of `copilotd complete` that [`warm_cache`] makes at most for a cached calibration: on a
/// shared machine, about one measurement in three is disturbed by other work and not cached.
const WARM_ATTEMPTS: usize = 3;

/// `copilotd` in a cache directory made once per test process by `copilotd complete` on the
/// default model: the first run builds the common datastore, and each measures the cost
/// calibration, cached unless other work on the machine disturbed the measurement (after
/// [`WARM_ATTEMPTS`] disturbed ones, each daemon measures its own, as on a first start).
/// Remade on every run, under the target's directory for tests.
fn warm_cache() -> &'static Path {
    static WARM: OnceLock<PathBuf> = OnceLock::new();
    WARM.get_or_init(|| {
        let test = std::env::current_exe().unwrap().file_stem().unwrap().to_owned();
        let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("warm-cache").join(test);
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(home.join("workspace")).unwrap();
        std::fs::write(home.join("workspace/warm.py"), "def warm():\n    return 1\n").unwrap();
        let cache = home.join("cache").join("copilotd");
        let calibrated = || std::fs::read_dir(cache.join("calibration")).is_ok_and(|mut files| files.next().is_some());
        for _ in 0..WARM_ATTEMPTS {
            let mut command = complete_command(&model_path(), &home.join("workspace"), "warm.py", 1, 4, 1);
            command
                .env("XDG_CONFIG_HOME", home.join("config"))
                .env("XDG_CACHE_HOME", home.join("cache"))
                .env("COPILOTD_MODEL", "");
            cli_completion(command);
            if calibrated() {
                break;
            }
            eprintln!("warm cache: the calibration was disturbed by other work; measuring again");
        }
        cache
    })
}

/// Like [`start`], in the private directories of an earlier harness (a restart).
pub fn restart(home: tempfile::TempDir, root: Option<&Path>, options: Value) -> Harness {
    start_in(home, None, root.as_slice(), options)
}

fn start_in(home: tempfile::TempDir, config_toml: Option<&str>, roots: &[&Path], options: Value) -> Harness {
    let config = home.path().join("config");
    let cache = home.path().join("cache");
    if let Some(text) = config_toml {
        std::fs::create_dir_all(config.join("copilotd")).unwrap();
        std::fs::write(config.join("copilotd").join("config.toml"), text).unwrap();
    }
    let envs = [
        ("XDG_CONFIG_HOME", config.to_str().unwrap()),
        ("XDG_CACHE_HOME", cache.to_str().unwrap()),
        ("COPILOTD_LOG", "info"),
        // Only the model the test names: none from the environment.
        ("COPILOTD_MODEL", ""),
    ];
    let mut client = StdioClient::spawn(&binary(), &["--stdio"], &envs).unwrap();
    client.initialize_folders(roots, options, QUICK).expect("initialize");
    Harness { client, home }
}

/// initializationOptions for a given model and token budget.
/// Settings for the server under test: whole suggestions in every answer (see `earlyLines`), so
/// that answers can be compared with `copilotd complete`.
/// Settings of a server on `model` with whole answers, and prompts never cut to be read in time
/// (the same prompt as `copilotd complete`'s, on any machine).
pub fn options(model: &Path, max_tokens: usize) -> Value {
    json!({"model": model, "maxTokens": max_tokens, "earlyLines": false, "promptLatencyMs": 0})
}

pub fn uri(path: &Path) -> String {
    file_uri(path)
}

pub fn open(client: &mut StdioClient, uri: &str, text: &str) {
    client
        .notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}),
        )
        .unwrap();
}

/// One incremental edit: replace `start..end` (line, UTF-16 character) with `text`.
pub fn change(client: &mut StdioClient, uri: &str, version: i32, start: (u32, u32), end: (u32, u32), text: &str) {
    client
        .notify(
            "textDocument/didChange",
            json!({
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{
                    "range": {"start": {"line": start.0, "character": start.1},
                              "end": {"line": end.0, "character": end.1}},
                    "text": text,
                }],
            }),
        )
        .unwrap();
}

pub fn completion_params(uri: &str, line: u32, character: u32) -> Value {
    json!({
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": {"triggerKind": 2},
    })
}

/// Sends an inline completion request; returns its id.
pub fn request_completion(client: &mut StdioClient, uri: &str, line: u32, character: u32) -> i64 {
    client.request("textDocument/inlineCompletion", completion_params(uri, line, character)).unwrap()
}

/// The inserted text of an inline completion response (empty when there is no item).
pub fn completion_text(response: &Value) -> String {
    assert!(response.get("error").is_none(), "completion failed: {response}");
    let items = response["result"].as_array().expect("an array of items");
    items.first().map_or(String::new(), |item| item["insertText"].as_str().unwrap().to_owned())
}

/// Completes and returns the inserted text.
pub fn complete(client: &mut StdioClient, uri: &str, line: u32, character: u32) -> String {
    let id = request_completion(client, uri, line, character);
    completion_text(&client.response(id, SLOW).unwrap())
}

pub fn status(client: &mut StdioClient) -> Value {
    client.call_ok("copilotd/status", Value::Null, QUICK).unwrap()
}

/// Waits until the model is loaded (or failed), returning the status.
pub fn wait_model(client: &mut StdioClient) -> Value {
    let deadline = std::time::Instant::now() + SLOW;
    loop {
        let status = status(client);
        if status["modelState"] != "loading" && status["modelState"] != "idle" {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "model still loading: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until a background measurement of the cost calibration has ended (`confirming`: the
/// first is cached and in use, later ones confirm it; `done`; or `disturbed`); returns the status.
pub fn wait_calibrated(client: &mut StdioClient) -> Value {
    let deadline = std::time::Instant::now() + SLOW;
    loop {
        let status = status(client);
        if ["confirming", "done", "disturbed"].iter().any(|&state| status["calibration"] == state) {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "calibration did not finish: {status}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The error code of a response, if it is an error.
pub fn error_code(response: &Value) -> Option<i64> {
    response["error"]["code"].as_i64()
}

/// `copilotd complete --json` at a 0-based line and character (ASCII lines), for
/// [`cli_completion`] to run (with the environment added where needed).
pub fn complete_command(
    model: &Path,
    workspace: &Path,
    file: &str,
    line: u32,
    character: u32,
    max_tokens: usize,
) -> std::process::Command {
    let mut command = std::process::Command::new(binary());
    command
        .args(["complete", "--workspace"])
        .arg(workspace)
        .args(["--file", file, "--line", &(line + 1).to_string(), "--column", &(character + 1).to_string()])
        .args(["--max-tokens", &max_tokens.to_string(), "--json", "--model"])
        .arg(model);
    command
}

/// Runs a [`complete_command`]: its completion (the JSON line).
pub fn cli_completion(mut command: std::process::Command) -> Value {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "copilotd complete failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.lines().last().expect("a JSON line")).unwrap()
}
