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
//!
//! An answer that the server gives from the previous suggestion, without the model (the typed
//! character was that suggestion's next one: *typed through*), is counted apart: the latency,
//! new-token and reuse figures are those of the answers the model generated.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::client::StdioClient;
use super::daemon::{set_prompt_latency, settings_in_effect, settings_json, Daemon};
use copilotd_server::lsp::WARM_METHOD;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LspBenchOptions {
    /// The `copilotd` binary to start with `--stdio`.
    pub binary: PathBuf,
    /// GGUF model (`None`: `$COPILOTD_MODEL`, else the default model).
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
    /// The servers' `promptLatencyMs` (`None`: their default).
    pub prompt_latency_ms: Option<u64>,
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

/// The answers to one kind of request.
#[derive(Debug, Clone, Serialize)]
pub struct RequestFigures {
    /// Answers the model generated.
    pub model_answers: usize,
    /// Their latency (`None` without any).
    pub latency: Option<LatencySummary>,
    /// Their mean new tokens.
    pub mean_new_tokens: Option<f64>,
    /// Their mean share of the prompt's tokens whose KV entries were reused.
    pub mean_reused_share: Option<f64>,
    /// Their mean prompt tokens.
    pub mean_prompt_tokens: Option<f64>,
    /// How many of them had their prompt cut to a shorter window, to be read within the
    /// server's `promptLatencyMs`.
    pub shortened_windows: usize,
    /// Answers given from the previous suggestion, without the model (no prefill, no tokens).
    pub typed_through: usize,
    /// Their latency (`None` without any).
    pub typed_through_latency: Option<LatencySummary>,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct LspBenchReport {
    /// Time from `initialized` to the model being ready.
    pub model_load_ms: f64,
    pub max_tokens: usize,
    /// The daemons' settings (the benchmark's and the defaults: no config.toml is read).
    pub settings: Value,
    /// First request after opening a file the previous request was not about.
    pub cold: RequestFigures,
    /// Request after typing one character where the previous request was.
    pub warm: RequestFigures,
    /// Request back in the previous sample's document, where its last request was, after the
    /// requests in another document.
    pub back: RequestFigures,
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
    pub prompt_tokens: f64,
    /// Whether its prompt was cut to a shorter window.
    pub window_shortened: bool,
}

const TIMEOUT: Duration = Duration::from_secs(300);

/// Nearest-rank percentile of sorted values.
pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The latency figures of `values`; `None` without any.
fn summarize(mut values: Vec<f64>) -> Option<LatencySummary> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(LatencySummary {
        samples: values.len(),
        p50_ms: percentile(&values, 50.0),
        p95_ms: percentile(&values, 95.0),
        mean_ms: values.iter().sum::<f64>() / values.len() as f64,
        max_ms: values.last().copied().unwrap_or(0.0),
    })
}

/// One answer and what the server says of it.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    ms: f64,
    new_tokens: f64,
    /// Share of the prompt's tokens whose KV entries were reused.
    reused_share: f64,
    prompt_tokens: f64,
    window_shortened: bool,
    typed_through: bool,
}

impl Answer {
    /// The answer that took `ms`, as `last` (`copilotd/status`'s figures of the last
    /// completion) describes it.
    fn from_status(ms: f64, last: &Value) -> Answer {
        let figure = |name: &str| last[name].as_f64().unwrap_or(0.0);
        let prompt = figure("prompt_tokens");
        Answer {
            ms,
            new_tokens: figure("new_tokens"),
            reused_share: if prompt > 0.0 { figure("reused_prompt_tokens") / prompt } else { 0.0 },
            prompt_tokens: prompt,
            window_shortened: last["window_shortened"] == true,
            typed_through: last["stop"] == "typed_through",
        }
    }
}

/// The figures of `answers`, those typed through apart.
fn figures(answers: &[Answer]) -> RequestFigures {
    let (through, model): (Vec<&Answer>, Vec<&Answer>) = answers.iter().partition(|a| a.typed_through);
    let mean = |f: fn(&Answer) -> f64| {
        (!model.is_empty()).then(|| model.iter().map(|a| f(a)).sum::<f64>() / model.len() as f64)
    };
    RequestFigures {
        model_answers: model.len(),
        latency: summarize(model.iter().map(|a| a.ms).collect()),
        mean_new_tokens: mean(|a| a.new_tokens),
        mean_reused_share: mean(|a| a.reused_share),
        mean_prompt_tokens: mean(|a| a.prompt_tokens),
        shortened_windows: model.iter().filter(|a| a.window_shortened).count(),
        typed_through: through.len(),
        typed_through_latency: summarize(through.iter().map(|a| a.ms).collect()),
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

/// Asks for a completion at (`line`, `character`) of `uri`; the answer and its figures.
fn answer(client: &mut StdioClient, uri: &str, line: usize, character: usize) -> Result<Answer> {
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
    let status = client.call_ok("copilotd/status", Value::Null, TIMEOUT)?;
    Ok(Answer::from_status(ms, &status["last"]))
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
    let settings = settings_json(&settings_in_effect(&daemon_settings(options))?);
    let texts = options
        .files
        .iter()
        .map(|path| {
            Ok((
                path.clone(),
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?,
            ))
        })
        .collect::<Result<Vec<(PathBuf, String)>>>()?;
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
        bail!(
            "the files offer {} place(s) to complete (ASCII code lines of 16 characters or more); the benchmark needs 2",
            samples.len()
        );
    }

    let daemon = Daemon::new(options.binary.clone())?;
    let after_pause = first_after_pause(&daemon, options, &samples[0])?;
    let (mut client, model_load_ms) = start(&daemon, options)?;

    let (mut cold, mut warm, mut back) = (Vec::new(), Vec::new(), Vec::new());
    // The document of the sample before, and the place of its last request.
    let mut previous: Option<(String, usize, usize)> = None;
    for (index, sample) in samples.iter().enumerate() {
        let (_, text, cut) = sample;
        let line = text.split('\n').nth(cut.line).expect("a cut is on a line of its text");
        let uri = open_cut(&mut client, sample, index)?;
        cold.push(answer(&mut client, &uri, cut.line, cut.column)?);
        let typed = &line[cut.column..cut.column + 1];
        client.notify(
            "textDocument/didChange",
            json!({
                "textDocument": {"uri": uri, "version": 2},
                "contentChanges": [{"range": {"start": {"line": cut.line, "character": cut.column},
                                              "end": {"line": cut.line, "character": cut.column}}, "text": typed}],
            }),
        )?;
        warm.push(answer(&mut client, &uri, cut.line, cut.column + 1)?);
        if let Some((before, line, column)) = previous.replace((uri, cut.line, cut.column + 1)) {
            back.push(answer(&mut client, &before, line, column)?);
            client.notify("textDocument/didClose", json!({"textDocument": {"uri": before}}))?;
        }
    }
    let _ = client.shutdown(TIMEOUT);
    Ok(LspBenchReport {
        model_load_ms,
        max_tokens: options.max_tokens,
        settings,
        cold: figures(&cold),
        warm: figures(&warm),
        back: figures(&back),
        after_pause,
    })
}

/// The settings the benchmark sends its servers.
fn daemon_settings(options: &LspBenchOptions) -> Value {
    // Whole suggestions, not their first lines, as the latency goals count them.
    let mut settings = json!({"maxTokens": options.max_tokens, "earlyLines": false});
    if let Some(model) = &options.model {
        settings["model"] = json!(model);
    }
    set_prompt_latency(&mut settings, options.prompt_latency_ms);
    settings
}

/// A running server with the benchmark's settings and its model loaded, and how long from
/// `initialize` that took.
fn start(daemon: &Daemon, options: &LspBenchOptions) -> Result<(StdioClient, f64)> {
    let mut client = daemon.spawn()?;
    let started = Instant::now();
    client.initialize(None, daemon_settings(options), TIMEOUT)?;
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
fn first_after_pause(daemon: &Daemon, options: &LspBenchOptions, sample: &(&Path, &str, Cut)) -> Result<AfterPause> {
    let (mut client, _) = start(daemon, options)?;
    let uri = open_cut(&mut client, sample, 0)?;
    let position = json!({"line": sample.2.line, "character": sample.2.column});
    client.notify(WARM_METHOD, json!({"textDocument": {"uri": uri}, "position": position}))?;
    std::thread::sleep(options.pause);
    let Answer { ms: latency_ms, reused_share, prompt_tokens, window_shortened, .. } =
        answer(&mut client, &uri, sample.2.line, sample.2.column)?;
    let _ = client.shutdown(TIMEOUT);
    let pause_ms = options.pause.as_secs_f64() * 1000.0;
    Ok(AfterPause { pause_ms, latency_ms, reused_share, prompt_tokens, window_shortened })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        let summary = summarize(values).unwrap();
        assert_eq!((summary.p50_ms, summary.p95_ms, summary.max_ms), (10.0, 19.0, 20.0));
        assert_eq!(summarize(vec![5.0]).unwrap().p95_ms, 5.0);
        assert!(summarize(Vec::new()).is_none());
    }

    #[test]
    fn typed_through_answers_are_counted_apart() {
        let by_model = json!({"prompt_tokens": 100, "reused_prompt_tokens": 99, "new_tokens": 4, "stop": "max_tokens", "window_shortened": true});
        let through = json!({"prompt_tokens": 0, "reused_prompt_tokens": 0, "new_tokens": 0, "stop": "typed_through"});
        let answers = [
            Answer::from_status(120.0, &by_model),
            Answer::from_status(0.3, &through),
            Answer::from_status(80.0, &by_model),
        ];
        assert!(answers[1].typed_through && !answers[0].typed_through);
        let warm = figures(&answers);
        assert_eq!((warm.model_answers, warm.typed_through), (2, 1));
        assert_eq!(warm.latency.unwrap().p50_ms, 80.0);
        assert_eq!((warm.mean_new_tokens, warm.mean_reused_share), (Some(4.0), Some(0.99)));
        assert_eq!((warm.mean_prompt_tokens, warm.shortened_windows), (Some(100.0), 2));
        assert_eq!(warm.typed_through_latency.unwrap().max_ms, 0.3);
        let none = figures(&answers[1..2]);
        assert_eq!((none.latency.is_none(), none.mean_new_tokens, none.mean_reused_share), (true, None, None));
    }

    #[test]
    fn an_unreadable_file_is_named_before_any_server_starts() {
        let options = LspBenchOptions {
            binary: PathBuf::from("/nonexistent/copilotd"),
            model: None,
            files: vec![PathBuf::from("/nonexistent/missing.py")],
            samples: 2,
            max_tokens: 16,
            pause: Duration::ZERO,
            prompt_latency_ms: None,
        };
        let error = format!("{:#}", bench_lsp(&options).unwrap_err());
        assert!(error.starts_with("cannot read /nonexistent/missing.py: "), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short.py");
        std::fs::write(&short, "x = 1\nresult = compute(alpha, beta)\n").unwrap();
        let error = bench_lsp(&LspBenchOptions { files: vec![short], ..options }).unwrap_err().to_string();
        assert!(error.contains("the files offer 1 place(s) to complete"), "{error}");
    }

    #[test]
    fn cuts_pick_code_lines_after_their_middle() {
        let text = "# a comment line that is long enough\nresult = compute(alpha, beta)\nx = 1\n";
        let found = cuts(text, 5);
        assert_eq!(found, vec![Cut { line: 1, column: 24 }]);
        assert_eq!(&text.split('\n').nth(1).unwrap()[..24], "result = compute(alpha, ");
    }
}
