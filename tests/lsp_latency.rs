//! LSP end-to-end latency (request → response), cold and warm, on real Python files: a
//! measurement, not an assertion. Run it on an idle machine:
//! `cargo test --test lsp_latency -- --ignored --nocapture`.

mod support;

use copilotd_bench::lsp::latency::{bench_lsp, LspBenchOptions};
use std::path::PathBuf;
use support::model_path;

fn stdlib_files() -> Vec<PathBuf> {
    let output = std::process::Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"])
        .output()
        .expect("python3 provides the real files");
    let stdlib = PathBuf::from(String::from_utf8(output.stdout).unwrap().trim());
    ["textwrap.py", "shlex.py", "fnmatch.py", "csv.py", "glob.py"].iter().map(|name| stdlib.join(name)).collect()
}

#[test]
#[ignore = "a measurement of a few minutes; run with --ignored --nocapture"]
fn lsp_latency_cold_and_warm() {
    let model = model_path();
    let samples = std::env::var("COPILOTD_LSP_SAMPLES").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let options = LspBenchOptions {
        binary: support::binary(),
        model: Some(model),
        files: stdlib_files(),
        samples,
        max_tokens: 16,
        pause: std::time::Duration::from_secs(5),
        prompt_latency_ms: None,
    };
    let report = bench_lsp(&options).unwrap();
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    let answers =
        |figures: &copilotd_bench::lsp::latency::RequestFigures| figures.model_answers + figures.typed_through;
    assert_eq!(answers(&report.cold), answers(&report.warm));
}
