//! The typing benchmark: a person typing real code back, keystroke by keystroke, through a real
//! `copilotd --stdio`, as an editor drives it.
//!
//! For each task (a function body cut out of a benchmark package, see [`crate::tasks`]) the
//! file is opened with the body removed, its cursor's place named (`copilotd/warm`, as the editors
//! do when a buffer gets the focus), and the body is typed back at once at a person's pace
//! ([`Pace`]). Every keystroke is a `didChange`; 75 ms after the last one (the Neovim plugin's
//! debounce) an `inlineCompletion` request goes out, and a keystroke while it runs cancels it
//! (`$/cancelRequest`), as editors do; an answer with more lines to come (the suggestion's first
//! lines, see `earlyLines`) is asked for again at the same place 100 ms later, as the editors do.
//! A suggestion stays on screen while the typed characters follow it, as ghost text does. When
//! the suggestion's next lines are what the person is about to type ([`accepted_len`]), they take
//! them (Tab) and type on after them. With feedback on, each take is reported to the daemon as
//! the editors report it (`copilotd/suggestionFeedback`, by the id the item carries), so that the
//! preference cache learns from it; without, the daemon learns only from its own output. Every
//! daemon starts with the workspace's persisted preference cache removed, so that runs do not
//! teach each other.
//!
//! Figures per task: keystroke-to-suggestion latency (from the keystroke to the answer that
//! followed it, debounce included), the share of keystrokes with a useful suggestion on
//! screen, characters taken against characters typed, and the work per character of the body:
//! tokens the model generated (cancelled completions included) and the server's CPU time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::client::{file_uri, StdioClient};
use super::daemon::{set_prompt_latency, settings_in_effect, settings_json, Daemon};
use super::latency::{percentile, wait_for_model};
use super::typist::{accepted_len, is_useful, Pace};
use crate::report::or_na;
use crate::tasks::Task;
use copilotd_server::lsp::suggestions::METHOD as FEEDBACK;
use copilotd_server::lsp::WARM_METHOD;
use copilotd_server::workspace::paths::workspace_cache_dir;

/// The debounce between the last keystroke and the request, in the Neovim plugin.
const DEBOUNCE: Duration = Duration::from_millis(75);
/// How long after an answer with more lines to come the editors ask again at the same place.
const MORE_LINES_DELAY: Duration = Duration::from_millis(100);
const TIMEOUT: Duration = Duration::from_secs(300);

/// When the replay starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// On a daemon that has indexed the package and answered a completion before.
    Warm,
    /// Right after the daemon started: the model loaded, nothing else done.
    Fresh,
}

impl Start {
    /// The name the reports use (as in the JSON results).
    pub fn name(self) -> &'static str {
        match self {
            Start::Warm => "warm",
            Start::Fresh => "fresh",
        }
    }
}

/// The tasks of one package, typed in its workspace.
pub struct PackageTasks {
    pub package: String,
    pub root: PathBuf,
    pub tasks: Vec<Task>,
}

/// What to replay.
pub struct TypingOptions {
    /// The `copilotd` binary to start with `--stdio`.
    pub binary: PathBuf,
    /// GGUF model (`None`: `$COPILOTD_MODEL`, else the default model).
    pub model: Option<PathBuf>,
    pub strategies: Vec<String>,
    pub packages: Vec<PackageTasks>,
    /// Characters of each body typed (cut at a line end).
    pub max_chars: usize,
    /// `maxTokens` of the server.
    pub max_tokens: usize,
    pub seed: u64,
    /// Replays without feedback (`false`) and with it (`true`), each on its own daemons.
    pub feedback: Vec<bool>,
    /// The servers' `promptLatencyMs` (`None`: their default).
    pub prompt_latency_ms: Option<u64>,
}

/// One task typed once.
#[derive(Clone, Debug, Serialize)]
pub struct Replay {
    pub package: String,
    pub file: String,
    pub function: String,
    pub strategy: String,
    /// Whether each take was reported to the daemon.
    pub feedback: bool,
    pub start: Start,
    /// Keys pressed: characters typed and Tabs.
    pub keystrokes: usize,
    /// Keystrokes at which a useful suggestion was on screen.
    pub useful_keystrokes: usize,
    pub typed_chars: usize,
    pub accepted_chars: usize,
    /// Keystroke-to-suggestion latencies of the answered requests.
    pub latencies_ms: Vec<f64>,
    /// Requests cancelled by a later keystroke.
    pub cancelled: usize,
    pub generated_tokens: u64,
    pub cpu_ms: f64,
}

impl Replay {
    fn body_chars(&self) -> usize {
        self.typed_chars + self.accepted_chars
    }
}

/// Figures of one strategy and start over its tasks.
#[derive(Clone, Debug, Serialize)]
pub struct TypingSummary {
    pub strategy: String,
    pub feedback: bool,
    pub start: Start,
    pub tasks: usize,
    pub keystrokes: usize,
    /// Keystroke to suggestion; `None` (n/a) when no suggestion was shown.
    pub latency_p50_ms: Option<f64>,
    pub latency_p95_ms: Option<f64>,
    pub useful_share: f64,
    pub typed_chars: usize,
    pub accepted_chars: usize,
    /// Accepted characters over the body's characters.
    pub accepted_share: f64,
    /// Tokens generated per character of the body.
    pub tokens_per_char: f64,
    /// Server CPU milliseconds per character of the body.
    pub cpu_ms_per_char: f64,
}

/// Replays every task for every strategy, without and with feedback as asked, warm and fresh;
/// logs each replay as it ends.
pub fn run(options: &TypingOptions, log: &mut dyn FnMut(&Replay)) -> Result<Vec<Replay>> {
    let daemon = Daemon::new(options.binary.clone())?;
    let mut replays = Vec::new();
    for strategy in &options.strategies {
        for &feedback in &options.feedback {
            for package in &options.packages {
                for start in [Start::Warm, Start::Fresh] {
                    for replay in replay_package(&daemon, options, strategy, feedback, package, start)? {
                        log(&replay);
                        replays.push(replay);
                    }
                }
            }
        }
    }
    Ok(replays)
}

/// The settings the daemons of `strategy` send, and the ones in effect with them, by
/// config.toml's names; an error for a setting the daemon would refuse.
pub fn settings(options: &TypingOptions, strategy: &str) -> Result<Value> {
    Ok(settings_json(&settings_in_effect(&daemon_settings(options, strategy))?))
}

fn daemon_settings(options: &TypingOptions, strategy: &str) -> Value {
    let mut settings = json!({"strategy": strategy, "maxTokens": options.max_tokens});
    if let Some(model) = &options.model {
        settings["model"] = json!(model);
    }
    set_prompt_latency(&mut settings, options.prompt_latency_ms);
    settings
}

/// Summaries per strategy, feedback and start, in the order of the replays.
pub fn summarize(replays: &[Replay]) -> Vec<TypingSummary> {
    let mut keys: Vec<(String, bool, Start)> = Vec::new();
    for replay in replays {
        let key = (replay.strategy.clone(), replay.feedback, replay.start);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .map(|(strategy, feedback, start)| {
            let runs: Vec<&Replay> = replays
                .iter()
                .filter(|r| r.strategy == strategy && r.feedback == feedback && r.start == start)
                .collect();
            let mut latencies: Vec<f64> = runs.iter().flat_map(|r| r.latencies_ms.iter().copied()).collect();
            latencies.sort_by(f64::total_cmp);
            let sum = |f: fn(&Replay) -> usize| runs.iter().map(|r| f(r)).sum::<usize>();
            let body = sum(Replay::body_chars).max(1) as f64;
            let keystrokes = sum(|r| r.keystrokes);
            TypingSummary {
                tasks: runs.len(),
                keystrokes,
                latency_p50_ms: (!latencies.is_empty()).then(|| percentile(&latencies, 50.0)),
                latency_p95_ms: (!latencies.is_empty()).then(|| percentile(&latencies, 95.0)),
                useful_share: sum(|r| r.useful_keystrokes) as f64 / keystrokes.max(1) as f64,
                typed_chars: sum(|r| r.typed_chars),
                accepted_chars: sum(|r| r.accepted_chars),
                accepted_share: sum(|r| r.accepted_chars) as f64 / body,
                tokens_per_char: runs.iter().map(|r| r.generated_tokens).sum::<u64>() as f64 / body,
                cpu_ms_per_char: runs.iter().map(|r| r.cpu_ms).sum::<f64>() / body,
                strategy,
                feedback,
                start,
            }
        })
        .collect()
}

/// The summaries as a Markdown table.
pub fn table(summaries: &[TypingSummary]) -> String {
    let mut out = String::from(
        "| strategy | feedback | start | tasks | keystrokes | latency p50 ms | p95 ms | useful on screen | typed chars | accepted chars | accepted share | tokens/char | CPU ms/char |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for s in summaries {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.1}% | {} | {} | {:.1}% | {:.2} | {:.1} |\n",
            s.strategy,
            if s.feedback { "on" } else { "off" },
            s.start.name(),
            s.tasks,
            s.keystrokes,
            or_na(s.latency_p50_ms, |ms| format!("{ms:.0}")),
            or_na(s.latency_p95_ms, |ms| format!("{ms:.0}")),
            100.0 * s.useful_share,
            s.typed_chars,
            s.accepted_chars,
            100.0 * s.accepted_share,
            s.tokens_per_char,
            s.cpu_ms_per_char,
        ));
    }
    out
}

/// Removes the preference caches (one per tokenizer) from the workspace cache directory `dir`,
/// so that a replay starts from none.
fn forget_preferences(dir: &std::path::Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => bail!("cannot list {}: {error}", dir.display()),
    };
    for entry in entries {
        let path = entry?.path();
        if path.file_name().and_then(|name| name.to_str()).is_some_and(|name| name.starts_with("preferences")) {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove the preference cache {}", path.display()))?;
        }
    }
    Ok(())
}

/// One daemon for one package: warm (index ready, one completion answered first), then every
/// task; or fresh, then the first task only.
fn replay_package(
    daemon: &Daemon,
    options: &TypingOptions,
    strategy: &str,
    feedback: bool,
    package: &PackageTasks,
    start: Start,
) -> Result<Vec<Replay>> {
    let Some(first) = package.tasks.first() else { return Ok(Vec::new()) };
    forget_preferences(&workspace_cache_dir(&package.root)?)?;
    let mut client = daemon.spawn()?;
    client.initialize(Some(&package.root), daemon_settings(options, strategy), TIMEOUT)?;
    wait_for_model(&mut client)?;
    let tasks = match start {
        Start::Warm => {
            wait_for_index(&mut client)?;
            warm_up(&mut client, &package.root, first)?;
            &package.tasks[..]
        }
        Start::Fresh => std::slice::from_ref(first),
    };
    let mut replays = Vec::new();
    for (index, task) in tasks.iter().enumerate() {
        let seed = options.seed.wrapping_add(index as u64);
        let typed = body_prefix(&task.reference, options.max_chars);
        let mut replay = Replay {
            package: package.package.clone(),
            file: task.file.clone(),
            function: task.function.clone(),
            strategy: strategy.to_owned(),
            feedback,
            start,
            keystrokes: 0,
            useful_keystrokes: 0,
            typed_chars: 0,
            accepted_chars: 0,
            latencies_ms: Vec::new(),
            cancelled: 0,
            generated_tokens: 0,
            cpu_ms: 0.0,
        };
        let (tokens_before, cpu_before) = (generated_tokens(&mut client)?, cpu_ms(client.pid()));
        type_body(&mut client, &package.root, task, typed, seed, &mut replay)?;
        replay.generated_tokens = generated_tokens(&mut client)? - tokens_before;
        replay.cpu_ms = cpu_ms(client.pid()) - cpu_before;
        replays.push(replay);
    }
    let _ = client.shutdown(TIMEOUT);
    Ok(replays)
}

/// The body up to `max_chars`, cut after a whole line (at least the first line).
fn body_prefix(body: &str, max_chars: usize) -> &str {
    if body.len() <= max_chars {
        return body;
    }
    let cut = body[..max_chars].rfind('\n').or_else(|| body.find('\n')).unwrap_or(body.len());
    &body[..cut]
}

fn wait_for_index(client: &mut StdioClient) -> Result<()> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let status = client.call_ok("copilotd/status", Value::Null, TIMEOUT)?;
        match status["indexState"].as_str() {
            Some("ready") | Some("none") => return Ok(()),
            Some("failed") => bail!("indexing failed"),
            _ if Instant::now() > deadline => bail!("indexing did not end within {TIMEOUT:?}"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// One completion at the task's cursor, unrecorded, so that the daemon has calibrated and
/// holds a prompt of the file.
fn warm_up(client: &mut StdioClient, root: &Path, task: &Task) -> Result<()> {
    let uri = file_uri(&root.join(&task.file));
    open(client, &uri, &task.cut_text)?;
    let position = position_at(&task.cut_text, task.cursor);
    client.call_ok("textDocument/inlineCompletion", completion_params(&uri, position), TIMEOUT)?;
    client.notify("textDocument/didClose", json!({"textDocument": {"uri": uri}}))?;
    Ok(())
}

fn open(client: &mut StdioClient, uri: &str, text: &str) -> Result<()> {
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}),
    )
}

/// LSP position (line, UTF-16 column) of byte `offset` of `text`.
fn position_at(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count(), before[line_start..].encode_utf16().count())
}

fn completion_params(uri: &str, (line, character): (usize, usize)) -> Value {
    json!({
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": {"triggerKind": 2},
    })
}

/// The request in flight: its id and the keystroke it follows (none when it asks again for the
/// rest of a suggestion: its latency is not a keystroke's).
struct InFlight {
    id: i64,
    keystroke_at: Option<Instant>,
}

/// Types `body` into the task's file at its cursor, recording into `replay`.
fn type_body(
    client: &mut StdioClient,
    root: &Path,
    task: &Task,
    body: &str,
    seed: u64,
    replay: &mut Replay,
) -> Result<()> {
    let uri = file_uri(&root.join(&task.file));
    let mut text = task.cut_text.clone();
    let mut version = 1;
    open(client, &uri, &text)?;
    // The editor names the cursor's place as the buffer gets the focus; typing starts at once.
    let (line, character) = position_at(&text, task.cursor);
    client.notify(
        WARM_METHOD,
        json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}),
    )?;
    let mut pace = Pace::new(seed);
    let mut done = 0; // bytes of `body` in the document
    let mut shown = String::new(); // the suggestion on screen, from the cursor
    let mut item: Option<(u64, String)> = None; // the daemon's id of the item shown, and its whole text
    let mut in_flight: Option<InFlight> = None;
    let mut request_at: Option<Instant> = None;
    let mut asking_again = false; // whether `request_at` asks again for the rest of a suggestion
    let mut last_keystroke = Instant::now();
    let mut next_key = Instant::now();
    while done < body.len() {
        let rest = &body[done..];
        let wake = request_at.map_or(next_key, |at| at.min(next_key));
        if let Some(flight) = &in_flight {
            if let Some(response) = client.response_until(flight.id, wake)? {
                if let Some(error) = response.get("error") {
                    bail!("completion failed: {error}");
                }
                if let Some(keystroke_at) = flight.keystroke_at {
                    replay.latencies_ms.push(keystroke_at.elapsed().as_secs_f64() * 1000.0);
                }
                let answer = &response["result"][0];
                shown = answer["insertText"].as_str().unwrap_or_default().to_owned();
                item = answer["command"]["arguments"][0]["id"].as_u64().map(|id| (id, shown.clone()));
                in_flight = None;
                if answer["command"]["arguments"][0]["more"] == true {
                    request_at = Some(Instant::now() + MORE_LINES_DELAY);
                    asking_again = true;
                }
                if accepted_len(&shown, rest) > 0 {
                    next_key = Instant::now() + pace.before_accepting();
                }
                continue;
            }
        } else {
            std::thread::sleep(wake.saturating_duration_since(Instant::now()));
        }
        let now = Instant::now();
        if request_at.is_some_and(|at| at <= now) && next_key > now {
            request_at = None;
            let position = position_at(&text, task.cursor + done);
            let id = client.request("textDocument/inlineCompletion", completion_params(&uri, position))?;
            let keystroke_at = (!std::mem::take(&mut asking_again)).then_some(last_keystroke);
            in_flight = Some(InFlight { id, keystroke_at });
            continue;
        }
        if next_key > now {
            continue;
        }
        // A keystroke: Tab on a suggestion worth taking, else the next character.
        replay.keystrokes += 1;
        replay.useful_keystrokes += usize::from(is_useful(&shown, rest));
        let taken = accepted_len(&shown, rest);
        let inserted = if taken > 0 {
            replay.accepted_chars += taken;
            if let Some((id, whole)) = item.as_ref().filter(|_| replay.feedback) {
                client.notify(FEEDBACK, take_report(*id, whole, &shown, taken))?;
            }
            shown = shown[taken..].to_owned();
            &rest[..taken]
        } else {
            let typed = rest.chars().next().expect("rest is not empty");
            replay.typed_chars += 1;
            shown = shown.strip_prefix(typed).map(str::to_owned).unwrap_or_default();
            &rest[..typed.len_utf8()]
        };
        let position = position_at(&text, task.cursor + done);
        version += 1;
        client.notify(
            "textDocument/didChange",
            json!({
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"range": {"start": {"line": position.0, "character": position.1},
                                              "end": {"line": position.0, "character": position.1}},
                                    "text": inserted}],
            }),
        )?;
        text.insert_str(task.cursor + done, inserted);
        done += inserted.len();
        if let Some(flight) = in_flight.take() {
            client.notify("$/cancelRequest", json!({"id": flight.id}))?;
            replay.cancelled += 1;
        }
        last_keystroke = now;
        request_at = Some(now + DEBOUNCE);
        asking_again = false;
        next_key = now + pace.after(inserted.chars().last().expect("inserted is not empty"));
    }
    if let Some(flight) = in_flight {
        client.notify("$/cancelRequest", json!({"id": flight.id}))?;
    }
    client.notify("textDocument/didClose", json!({"textDocument": {"uri": uri}}))?;
    Ok(())
}

/// What an editor reports when the person takes `taken` bytes of `shown`, the end of the item
/// `id` whose whole text is `whole`: all of what is left, or its next lines.
fn take_report(id: u64, whole: &str, shown: &str, taken: usize) -> Value {
    let in_document = &whole[..whole.len() - shown.len() + taken];
    let kind = if taken == shown.len() { "accepted" } else { "acceptedLine" };
    json!({"id": id, "kind": kind, "length": in_document.encode_utf16().count()})
}

fn generated_tokens(client: &mut StdioClient) -> Result<u64> {
    let status = client.call_ok("copilotd/status", Value::Null, TIMEOUT)?;
    Ok(status["generatedTokens"].as_u64().unwrap_or(0))
}

/// CPU time (user and system) of process `pid` so far, in milliseconds (0 where `/proc` is
/// not there to tell).
fn cpu_ms(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name; the
    // kernel counts them in USER_HZ ticks, 100 per second on Linux.
    (ticks(11) + ticks(12)) * 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_utf16_units() {
        let text = "a = 1\nb = 'é𝄞'\n";
        assert_eq!(position_at(text, 0), (0, 0));
        assert_eq!(position_at(text, text.find('b').unwrap()), (1, 0));
        assert_eq!(position_at(text, text.rfind('\'').unwrap()), (1, 8));
    }

    #[test]
    fn bodies_are_cut_after_a_whole_line() {
        assert_eq!(body_prefix("a = 1\nb = 2\nc = 3", 9), "a = 1");
        assert_eq!(body_prefix("a = 1\nb = 2", 100), "a = 1\nb = 2");
        assert_eq!(body_prefix("abcdef\ng", 3), "abcdef");
    }

    #[test]
    fn takes_are_reported_as_the_editors_report_them() {
        // "ab\ncd\n" shown whole; "é" typed through of "éx\ny\n", then its first line taken.
        assert_eq!(take_report(4, "ab\ncd\n", "ab\ncd\n", 6), json!({"id": 4, "kind": "accepted", "length": 6}));
        assert_eq!(take_report(5, "éx\ny\n", "x\ny\n", 2), json!({"id": 5, "kind": "acceptedLine", "length": 3}));
    }

    #[test]
    fn summaries_add_tasks_up() {
        let replay = |feedback: bool, latencies: Vec<f64>| Replay {
            package: "p".into(),
            file: "f.py".into(),
            function: "g".into(),
            strategy: "ar".into(),
            feedback,
            start: Start::Warm,
            keystrokes: 10,
            useful_keystrokes: 5,
            typed_chars: 8,
            accepted_chars: 12,
            latencies_ms: latencies,
            cancelled: 1,
            generated_tokens: 40,
            cpu_ms: 100.0,
        };
        let replays = [
            replay(false, vec![100.0, 300.0]),
            replay(true, vec![50.0]),
            replay(false, vec![200.0]),
            Replay { start: Start::Fresh, ..replay(false, Vec::new()) },
        ];
        let summaries = summarize(&replays);
        // Replays with feedback are summed apart.
        assert_eq!(summaries.len(), 3);
        assert_eq!((summaries[1].feedback, summaries[1].tasks), (true, 1));
        let s = &summaries[0];
        assert_eq!((s.tasks, s.keystrokes, s.typed_chars, s.accepted_chars), (2, 20, 16, 24));
        assert_eq!((s.latency_p50_ms, s.latency_p95_ms), (Some(200.0), Some(300.0)));
        assert_eq!((s.useful_share, s.accepted_share, s.tokens_per_char, s.cpu_ms_per_char), (0.5, 0.6, 2.0, 5.0));
        assert!(table(&summaries).contains("| ar | off | warm | 2 | 20 | 200 | 300 | 50.0% |"));
        assert!(table(&summaries).contains("| ar | on | warm | 1 | 10 | 50 | 50 | 50.0% |"));
        // No suggestion shown: no latency, not a number that is not one.
        assert_eq!((summaries[2].latency_p50_ms, summaries[2].latency_p95_ms), (None, None));
        assert!(table(&summaries).contains("| ar | off | fresh | 1 | 10 | n/a | n/a | 50.0% |"));
    }
}
