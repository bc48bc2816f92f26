//! Bad input on the command line: each case is a one-line error on stderr
//! and a non-zero exit, never a panic. A cache directory that cannot be
//! written is no error: what would be kept there is only not kept.

use std::path::Path;
use std::process::{Command, Output};

fn copilotd(args: &[&str], model_env: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_copilotd"));
    // No config.toml of the person running the tests.
    command.args(args).env_remove("COPILOTD_MODEL").env("XDG_CONFIG_HOME", "/nonexistent/copilotd-tests");
    if let Some(model) = model_env {
        command.env("COPILOTD_MODEL", model);
    }
    command.output().expect("copilotd runs")
}

/// Asserts a clean failure whose single stderr line contains `expected`.
fn assert_clean_error(output: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "expected failure, got success; stderr: {stderr}");
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(lines[0].starts_with("copilotd: error: "), "{stderr}");
    assert!(lines[0].contains(expected), "expected '{expected}' in: {stderr}");
}

fn complete_args<'a>(workspace: &'a str, file: &'a str, line: &'a str, column: &'a str) -> Vec<&'a str> {
    vec!["complete", "--workspace", workspace, "--file", file, "--line", line, "--column", column]
}

#[test]
fn file_and_position_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.py"), "def f():\n    return 1\n").unwrap();
    std::fs::write(dir.path().join("empty.py"), "").unwrap();
    std::fs::write(dir.path().join("blob.bin"), [0x7f, b'E', b'L', b'F', 0, 0, 1, 2]).unwrap();
    let ws = dir.path().to_str().unwrap();
    let cases = [
        (complete_args(ws, "missing.py", "1", "1"), "cannot read"),
        (complete_args(ws, "empty.py", "1", "1"), "is empty"),
        (complete_args(ws, "blob.bin", "1", "1"), "binary file"),
        (complete_args(ws, "ok.py", "9", "1"), "line 9 is out of range"),
        (complete_args(ws, "ok.py", "1", "40"), "column 40 is out of range"),
        (complete_args(ws, "ok.py", "0", "1"), "1-based"),
    ];
    for (args, expected) in cases {
        assert_clean_error(&copilotd(&args, None), expected);
    }
}

#[test]
fn model_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.py"), "def f():\n    return 1\n").unwrap();
    let ws = dir.path().to_str().unwrap();
    let with_model = |model: &str| {
        let mut args = complete_args(ws, "ok.py", "2", "5");
        args.extend(["--model", model]);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| copilotd(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);

    let missing = dir.path().join("nope.gguf");
    assert_clean_error(&run(with_model(missing.to_str().unwrap())), "model not found");

    let garbage = dir.path().join("garbage.gguf");
    std::fs::write(&garbage, b"this is not a model file at all").unwrap();
    let output = run(with_model(garbage.to_str().unwrap()));
    assert_clean_error(&output, "cannot load model");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("cannot load model").count(), 1, "the prefix is said once: {stderr}");

    let foreign = dir.path().join("mamba.gguf");
    std::fs::write(&foreign, gguf_with_architecture("mamba")).unwrap();
    assert_clean_error(&run(with_model(foreign.to_str().unwrap())), "mamba");

    let bytes = std::fs::read(copilotd_test_support::model_path()).unwrap();
    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    assert_clean_error(&run(with_model(truncated.to_str().unwrap())), "cannot load model");
}

#[test]
fn unknown_strategy_is_a_usage_error() {
    let output = copilotd(&["complete", "--file", "x.py", "--line", "1", "--column", "1", "--strategy", "magic"], None);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown strategy 'magic'"));
}

#[test]
fn bad_sampling_values_are_usage_errors() {
    let cases = [
        ("--temperature", "-0.5", "temperature must be a number >= 0"),
        ("--top-p", "0", "top_p must be a number in (0, 1]"),
        ("--top-p", "1.5", "top_p must be a number in (0, 1]"),
        ("--seed", "1.5", "seed must be an integer"),
        ("--seed", "-3", "seed must be an integer"),
        ("--max-tokens", "0", "0 is not in 1..=4096"),
        ("--max-tokens", "5000", "5000 is not in 1..=4096"),
        ("--threads", "0", "0 is not in 1..=1024"),
        ("--prompt-tokens", "0", "0 is not in 1.."),
    ];
    for (flag, value, expected) in cases {
        let output = copilotd(&["complete", "--file", "x.py", "--line", "1", "--column", "1", flag, value], None);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(expected) && stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}

#[test]
fn bad_refinement_values_are_usage_errors() {
    let cases: [(&[&str], &str); 7] = [
        (&["--refine", "0"], "the fraction must be a number in (0, 1]"),
        (&["--refine", "-0.5"], "the fraction must be a number in (0, 1]"),
        (&["--refine", "1.5"], "the fraction must be a number in (0, 1]"),
        (&["--refine", "most"], "the fraction must be a number in (0, 1]"),
        (&["--refine", "0.5", "--refine-budget", "0"], "the budget must be a positive number of seconds"),
        (&["--refine", "0.5", "--refine-budget", "-10"], "the budget must be a positive number of seconds"),
        (&["--refine-budget", "60"], "--refine <FRACTION>"),
    ];
    for (flags, expected) in cases {
        let output = copilotd(&[&["datastore", "build-common"], flags].concat(), None);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(expected), "{flags:?}: {stderr}");
    }
}

#[test]
fn refining_with_a_missing_model_or_a_bad_window_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.gguf");
    let output =
        copilotd(&["datastore", "build-common", "--refine", "0.5", "--model", missing.to_str().unwrap()], None);
    assert_clean_error(&output, "model not found");
    let output = copilotd(&["datastore", "build-common", "--refine", "0.5", "--refine-window", "4"], None);
    assert_clean_error(&output, "the refine window must be 16 to 2048 tokens, not 4");
}

/// A minimal, well-formed GGUF v3 file with no tensors and one metadata
/// entry naming the architecture.
fn gguf_with_architecture(architecture: &str) -> Vec<u8> {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes()); // version
    bytes.extend(0u64.to_le_bytes()); // tensors
    bytes.extend(1u64.to_le_bytes()); // metadata entries
    let key = b"general.architecture";
    bytes.extend((key.len() as u64).to_le_bytes());
    bytes.extend(key);
    bytes.extend(8u32.to_le_bytes()); // string type
    bytes.extend((architecture.len() as u64).to_le_bytes());
    bytes.extend(architecture.as_bytes());
    bytes
}

#[test]
fn a_cache_directory_that_cannot_be_written_costs_the_stores_not_the_completion() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.py"), "def total(xs):\n    result = 0\n    \n    return result\n").unwrap();
    // A directory cannot be made below a file, whoever runs the test.
    std::fs::write(dir.path().join("a file"), b"").unwrap();
    let model = copilotd_test_support::model_path();
    let output = Command::new(env!("CARGO_BIN_EXE_copilotd"))
        .args(complete_args(dir.path().to_str().unwrap(), "ok.py", "3", "5"))
        .args(["--model", model.to_str().unwrap(), "--max-tokens", "8"])
        .env("XDG_CACHE_HOME", dir.path().join("a file").join("cache"))
        .output()
        .expect("copilotd runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).trim().is_empty(), "a completion: {stderr}");
    assert!(stderr.contains("warning: completing without the common datastore"), "{stderr}");
    assert!(stderr.contains("warning: the repository datastore is not kept for next time"), "{stderr}");
    assert!(!stderr.contains("building the common datastore"), "no build whose result cannot be kept: {stderr}");
    // The library's own warnings are shown as the command line's are.
    assert!(stderr.contains("copilotd: warning: cannot cache the cost curve"), "{stderr}");
}

#[test]
fn building_a_common_store_where_it_cannot_be_written_fails_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    // A directory cannot be made below a file, whoever runs the test.
    std::fs::write(dir.path().join("a file"), b"").unwrap();
    // The corpus is not read: a missing one would be the error otherwise.
    let corpus = dir.path().join("no corpus");
    for refine in [&[][..], &["--refine", "0.5"]] {
        let args = [&["datastore", "build-common", "--corpus", corpus.to_str().unwrap()], refine].concat();
        let output = Command::new(env!("CARGO_BIN_EXE_copilotd"))
            .args(args)
            .env("COPILOTD_MODEL", copilotd_test_support::model_path())
            .env("XDG_CACHE_HOME", dir.path().join("a file").join("cache"))
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .output()
            .expect("copilotd runs");
        assert_clean_error(&output, "cannot write the common datastore to");
    }
}

#[test]
fn a_failed_calibration_costs_the_draft_tree_not_the_completion() {
    use copilotd_test_support::synthetic::{self, Family, GgmlDType, Shape};
    let dir = tempfile::tempdir().unwrap();
    // A context shorter than the largest calibration pass (32 nodes) cannot be calibrated.
    let shape = Shape { context: 24, ..synthetic::TINY };
    let written =
        synthetic::write_shaped(dir.path(), Family::StarCoder, &shape, "Q8_0", &|_, _| GgmlDType::Q8_0, false);
    std::fs::write(dir.path().join("ok.py"), "def total(xs):\n    result = 0\n    \n    return result\n").unwrap();
    let mut args = complete_args(dir.path().to_str().unwrap(), "ok.py", "3", "5");
    args.extend(["--model", written.model.to_str().unwrap(), "--strategy", "pld", "--max-tokens", "40", "--json"]);
    let output = copilotd_in(dir.path(), &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let completion = completion_json(&output);
    assert_eq!(stderr.matches("copilotd: warning: cost calibration failed").count(), 1, "{stderr}");
    assert!(stderr.contains("shorter than the largest calibration pass"), "{stderr}");
    let used = completion["prompt_tokens"].as_u64().unwrap() + completion["new_tokens"].as_u64().unwrap();
    assert!(used <= 25, "the generation stays within the context: {completion}");
}

/// `copilotd` with the test model and the cache and configuration directories of `dir`.
fn copilotd_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_copilotd"))
        .args(args)
        .env("COPILOTD_MODEL", copilotd_test_support::model_path())
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .output()
        .expect("copilotd runs")
}

/// The JSON line `complete --json` printed.
fn completion_json(output: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("a JSON line")
}

#[test]
fn complete_takes_what_the_flags_leave_open_from_config_toml() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("config/copilotd")).unwrap();
    std::fs::write(dir.path().join("config/copilotd/config.toml"), "strategy = \"ar\"\nmax_tokens = 2\n").unwrap();
    std::fs::write(dir.path().join("ok.py"), "def total(xs):\n    result = 0\n    \n    return result\n").unwrap();
    let mut args = complete_args(dir.path().to_str().unwrap(), "ok.py", "3", "5");
    args.push("--json");
    let configured = completion_json(&copilotd_in(dir.path(), &args));
    assert_eq!(configured["strategy"], "ar", "{configured}");
    assert!(configured["new_tokens"].as_u64().unwrap() <= 2, "{configured}");
    args.extend(["--strategy", "pld", "--max-tokens", "3"]);
    let flagged = completion_json(&copilotd_in(dir.path(), &args));
    assert_eq!(flagged["strategy"], "pld", "the flag wins: {flagged}");
    assert!(flagged["new_tokens"].as_u64().unwrap() <= 3, "{flagged}");

    std::fs::write(dir.path().join("config/copilotd/config.toml"), "model = \"/nonexistent/model.gguf\"\n").unwrap();
    assert_clean_error(&copilotd_in(dir.path(), &args), "model not found");
}

#[test]
fn top_p_or_seed_without_a_temperature_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.py"), "x = 1\n").unwrap();
    let mut args = complete_args(dir.path().to_str().unwrap(), "ok.py", "2", "1");
    args.extend(["--strategy", "ar", "--max-tokens", "1", "--seed", "7"]);
    let output = copilotd_in(dir.path(), &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && stderr.contains("no effect at temperature 0"), "{stderr}");
}

#[test]
fn index_reports_once_and_rebuilds_a_damaged_store_with_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("a.py"), "def f():\n    return 1\n").unwrap();
    let index = || copilotd_in(dir.path(), &["index", workspace.to_str().unwrap()]);
    let first = index();
    assert_eq!(String::from_utf8_lossy(&first.stdout).matches("indexed").count(), 1, "{first:?}");
    let stores: Vec<_> =
        walk_files(&dir.path().join("cache")).into_iter().filter(|p| p.ends_with("repo.store")).collect();
    assert_eq!(stores.len(), 1, "{stores:?}");
    std::fs::write(&stores[0], b"not a store").unwrap();
    let second = index();
    let (stdout, stderr) = (String::from_utf8_lossy(&second.stdout), String::from_utf8_lossy(&second.stderr));
    assert!(second.status.success(), "{stderr}");
    assert_eq!(stdout.matches("indexed").count(), 1, "{stdout}");
    assert_eq!(stderr.matches("rebuilding the repository datastore").count(), 1, "{stderr}");
    assert!(stderr.lines().all(|line| !line.starts_with("warning:")), "every warning is a copilotd one: {stderr}");
}

#[test]
fn editor_languages_the_index_has_no_files_for_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("a.py"), "def f():\n    return 1\n").unwrap();
    std::fs::create_dir_all(dir.path().join("config/copilotd")).unwrap();
    let configure = |languages: &str| {
        std::fs::write(dir.path().join("config/copilotd/config.toml"), format!("languages = {languages}\n")).unwrap()
    };
    // An editor serves Markdown; the index has no files of it and indexes the Python ones.
    configure(r#"["python", "markdown"]"#);
    let index = || copilotd_in(dir.path(), &["index", workspace.to_str().unwrap()]);
    let indexed = index();
    assert!(indexed.status.success(), "{}", String::from_utf8_lossy(&indexed.stderr));
    let mut args = complete_args(workspace.to_str().unwrap(), "a.py", "2", "13");
    args.extend(["--strategy", "fastcoder", "--max-tokens", "2", "--json"]);
    completion_json(&copilotd_in(dir.path(), &args));
    // Nothing to index: `index` says so; `complete` goes on without the repository datastore.
    configure(r#"["markdown"]"#);
    assert_clean_error(&index(), "nothing to index");
    let output = copilotd_in(dir.path(), &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("completing without the repository datastore"), "{stderr}");
    completion_json(&output);
}

/// Every file below `dir`.
fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk_files(&path));
        } else {
            files.push(path);
        }
    }
    files
}
