//! End-to-end latency of the language server: request → response of `textDocument/inlineCompletion`
//! over stdio against a real `copilotd --stdio` process, cold and warm.
//!
//! For each sample a line of a real source file is cut after its middle (the buffer keeps the
//! rest of the file below), the document is opened and completed at the cut (*cold*: the
//! previous prompt was another file, so nothing is reused), then the line's next character is
//! typed and the document completed again (*warm*: the prompt differs by a keystroke, so the
//! cached prompt is reused). Then the previous sample's document is completed again where it was
//! last (*back*: the person returns to a file; its prompt's cache was set aside when the other
//! file's prompt came, and is put back). Before those, a server of its own opens the first sample, names its
//! place as the editors do (`copilotd/warm`) and is asked a pause later (*after a pause*: the
//! prompt was prefilled meanwhile).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::client::StdioClient;
use copilotd_server::lsp::WARM_METHOD;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LspBenchOptions {
    /// The `copilotd` binary to start with `--stdio`.
    pub binary: PathBuf,
    /// GGUF model (`None`: the server's configured model).
    pub model: Option<PathBuf>,
    /// Real source files to complete in (absolute paths).
    pub files: Vec<PathBuf>,
    /// Cold/warm pairs to measure.
    pub samples: usize,
    /// `maxTokens` of the server.
    pub max_tokens: usize,
    /// Time between opening a document and asking for the first completion in it, on a server
    /// of its own (the prompt is prefilled meanwhile).
    pub pause: Duration,
}

/// Latency figures of one kind of request, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    pub samples: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub mean_ms: f64,
    pub max_ms: f64,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct LspBenchReport {
    /// Time from `initialized` to the model being ready.
    pub model_load_ms: f64,
    pub max_tokens: usize,
    /// First request after opening a file the previous request was not about.
    pub cold: LatencySummary,
    /// Request after typing one character where the previous request was.
    pub warm: LatencySummary,
    /// Request back in the previous sample's document, where its last request was, after the
    /// requests in another document.
    pub back: LatencySummary,
    /// Mean new tokens per completion (cold, warm).
    pub mean_new_tokens: (f64, f64),
    /// Mean share of the prompt's tokens whose KV entries were reused (cold, warm).
    pub mean_reused_share: (f64, f64),
    /// The same share for the requests back in a document.
    pub back_reused_share: f64,
    /// A fresh server's first completion, asked for a pause after its document was opened and
    /// the cursor's place announced.
    pub after_pause: AfterPause,
}

/// The first completion of a fresh server in a document opened, and its cursor's place
/// announced (`copilotd/warm`), `pause_ms` before.
#[derive(Debug, Clone, Serialize)]
pub struct AfterPause {
    pub pause_ms: f64,
    pub latency_ms: f64,
    /// Share of the prompt's tokens prefilled before the request.
    pub reused_share: f64,
}

const TIMEOUT: Duration = Duration::from_secs(300);

/// Nearest-rank percentile of sorted values.
pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summarize(mut values: Vec<f64>) -> LatencySummary {
    values.sort_by(f64::total_cmp);
    LatencySummary {
        samples: values.len(),
        p50_ms: percentile(&values, 50.0),
        p95_ms: percentile(&values, 95.0),
        mean_ms: values.iter().sum::<f64>() / values.len() as f64,
        max_ms: values.last().copied().unwrap_or(0.0),
    }
}

/// A place to complete: a code line (0-based) cut at a byte offset within it.
#[derive(Debug, Clone, PartialEq)]
struct Cut {
    line: usize,
    column: usize,
}

/// Up to `count` cuts spread over the file: lines with at least 16 characters of code (not
/// comments or strings starts), cut at the first space after the middle; ASCII lines only, so
/// byte and UTF-16 columns agree.
fn cuts(text: &str, count: usize) -> Vec<Cut> {
    let candidates: Vec<Cut> = text
        .split('\n')
        .enumerate()
        .filter_map(|(line, content)| {
            let code = content.trim();
            if !content.is_ascii() || code.len() < 16 || code.starts_with(['#', '"', '\'']) {
                return None;
            }
            let middle = content.len() / 2;
            let column = content[middle..].find(' ').map(|i| middle + i + 1)?;
            (column < content.len()).then_some(Cut { line, column })
        })
        .collect();
    if candidates.is_empty() || count == 0 {
        return Vec::new();
    }
    let step = (candidates.len() / count).max(1);
    candidates.into_iter().skip(step / 2).step_by(step).take(count).collect()
}

fn latency(client: &mut StdioClient, uri: &str, line: usize, character: usize) -> Result<(f64, String)> {
    let params = json!({
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": {"triggerKind": 2},
    });
    let started = Instant::now();
    let response = client.call("textDocument/inlineCompletion", params, TIMEOUT)?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Some(error) = response.get("error") {
        bail!("completion failed: {error}");
    }
    let text = response["result"][0]["insertText"].as_str().unwrap_or_default().to_owned();
    Ok((ms, text))
}

/// New tokens and the reused share of the prompt of the last completion.
fn last_figures(client: &mut StdioClient) -> Result<(f64, f64)> {
    let status = client.call_ok("copilotd/status", Value::Null, TIMEOUT)?;
    let last = &status["last"];
    let prompt = last["prompt_tokens"].as_f64().unwrap_or(0.0);
    let reused = last["reused_prompt_tokens"].as_f64().unwrap_or(0.0);
    Ok((last["new_tokens"].as_f64().unwrap_or(0.0), if prompt > 0.0 { reused / prompt } else { 0.0 }))
}

/// Waits until the server's model is loaded.
pub(super) fn wait_for_model(client: &mut StdioClient) -> Result<()> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let status = client.call_ok("copilotd/status", Value::Null, TIMEOUT)?;
        match status["modelState"].as_str() {
            Some("ready") => return Ok(()),
            Some("failed") => bail!("the model did not load: {}", status["modelError"]),
            _ if Instant::now() > deadline => bail!("the model did not load within {TIMEOUT:?}"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Runs the benchmark (a few minutes on a laptop CPU). The server runs without a workspace
/// folder, so only the buffers matter.
pub fn bench_lsp(options: &LspBenchOptions) -> Result<LspBenchReport> {
    let texts: Vec<(PathBuf, String)> =
        options.files.iter().filter_map(|path| Some((path.clone(), std::fs::read_to_string(path).ok()?))).collect();
    if texts.is_empty() {
        bail!("none of the {} files could be read as text", options.files.len());
    }
    let per_file = options.samples.div_ceil(texts.len());
    let mut samples: Vec<(&Path, &str, Cut)> = Vec::new();
    let all_cuts: Vec<Vec<Cut>> = texts.iter().map(|(_, text)| cuts(text, per_file)).collect();
    // Interleave files, so each cold request follows a request about another file.
    for round in 0..per_file {
        for ((path, text), cuts) in texts.iter().zip(&all_cuts) {
            if let Some(cut) = cuts.get(round) {
                samples.push((path, text, cut.clone()));
            }
        }
    }
    samples.truncate(options.samples);
    if samples.len() < 2 {
        bail!("the files offer fewer than 2 places to complete");
    }

    let after_pause = first_after_pause(options, &samples[0])?;
    let (mut client, model_load_ms) = start(options)?;

    let (mut cold, mut warm, mut back) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cold_figures, mut warm_figures, mut back_figures) = ((0.0, 0.0), (0.0, 0.0), (0.0, 0.0));
    // The document of the sample before, and the place of its last request.
    let mut previous: Option<(String, usize, usize)> = None;
    let add = |sum: &mut (f64, f64), (tokens, reused): (f64, f64)| {
        sum.0 += tokens;
        sum.1 += reused;
    };
    for (index, sample) in samples.iter().enumerate() {
        let (_, text, cut) = sample;
        let line = text.split('\n').nth(cut.line).expect("a cut is on a line of its text");
        let uri = open_cut(&mut client, sample, index)?;
        let (ms, _) = latency(&mut client, &uri, cut.line, cut.column)?;
        cold.push(ms);
        add(&mut cold_figures, last_figures(&mut client)?);
        let typed = &line[cut.column..cut.column + 1];
        client.notify(
            "textDocument/didChange",
            json!({
                "textDocument": {"uri": uri, "version": 2},
                "contentChanges": [{"range": {"start": {"line": cut.line, "character": cut.column},
                                              "end": {"line": cut.line, "character": cut.column}}, "text": typed}],
            }),
        )?;
        let (ms, _) = latency(&mut client, &uri, cut.line, cut.column + 1)?;
        warm.push(ms);
        add(&mut warm_figures, last_figures(&mut client)?);
        if let Some((before, line, column)) = previous.replace((uri, cut.line, cut.column + 1)) {
            let (ms, _) = latency(&mut client, &before, line, column)?;
            back.push(ms);
            add(&mut back_figures, last_figures(&mut client)?);
            client.notify("textDocument/didClose", json!({"textDocument": {"uri": before}}))?;
        }
    }
    let _ = client.shutdown(TIMEOUT);
    let count = samples.len() as f64;
    let back_count = back.len() as f64;
    Ok(LspBenchReport {
        model_load_ms,
        max_tokens: options.max_tokens,
        cold: summarize(cold),
        warm: summarize(warm),
        back: summarize(back),
        mean_new_tokens: (cold_figures.0 / count, warm_figures.0 / count),
        mean_reused_share: (cold_figures.1 / count, warm_figures.1 / count),
        back_reused_share: back_figures.1 / back_count,
        after_pause,
    })
}

/// A running server with the benchmark's settings and its model loaded, and how long from
/// `initialize` that took.
fn start(options: &LspBenchOptions) -> Result<(StdioClient, f64)> {
    let mut client = StdioClient::spawn(&options.binary, &["--stdio"], &[]).context("cannot start the server")?;
    // Whole suggestions, not their first lines, as the latency goals count them.
    let mut settings = json!({"maxTokens": options.max_tokens, "earlyLines": false});
    if let Some(model) = &options.model {
        settings["model"] = json!(model);
    }
    let started = Instant::now();
    client.initialize(None, settings, TIMEOUT)?;
    wait_for_model(&mut client)?;
    Ok((client, started.elapsed().as_secs_f64() * 1000.0))
}

/// Opens `sample`'s file cut at its cursor as a fresh document (its path only names it; the
/// text is the cut buffer); returns its uri.
fn open_cut(client: &mut StdioClient, (path, text, cut): &(&Path, &str, Cut), index: usize) -> Result<String> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines[cut.line] = &lines[cut.line][..cut.column];
    let name = path.file_name().map_or("sample.py".into(), |n| n.to_string_lossy());
    let uri = format!("file:///copilotd-bench/{index}/{name}");
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": lines.join("\n")}}),
    )?;
    Ok(uri)
}

/// The first completion of a server of its own in `sample`, asked for `options.pause` after
/// opening it, as a person does who opens a file and looks at it before typing. The editors
/// tell the server where the cursor is as the buffer is entered (`copilotd/warm`), so does this.
fn first_after_pause(options: &LspBenchOptions, sample: &(&Path, &str, Cut)) -> Result<AfterPause> {
    let (mut client, _) = start(options)?;
    let uri = open_cut(&mut client, sample, 0)?;
    let position = json!({"line": sample.2.line, "character": sample.2.column});
    client.notify(WARM_METHOD, json!({"textDocument": {"uri": uri}, "position": position}))?;
    std::thread::sleep(options.pause);
    let (latency_ms, _) = latency(&mut client, &uri, sample.2.line, sample.2.column)?;
    let (_, reused_share) = last_figures(&mut client)?;
    let _ = client.shutdown(TIMEOUT);
    Ok(AfterPause { pause_ms: options.pause.as_secs_f64() * 1000.0, latency_ms, reused_share })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        let summary = summarize(values);
        assert_eq!((summary.p50_ms, summary.p95_ms, summary.max_ms), (10.0, 19.0, 20.0));
        assert_eq!(summarize(vec![5.0]).p95_ms, 5.0);
    }

    #[test]
    fn cuts_pick_code_lines_after_their_middle() {
        let text = "# a comment line that is long enough\nresult = compute(alpha, beta)\nx = 1\n";
        let found = cuts(text, 5);
        assert_eq!(found, vec![Cut { line: 1, column: 24 }]);
        assert_eq!(&text.split('\n').nth(1).unwrap()[..24], "result = compute(alpha, ");
    }
}
