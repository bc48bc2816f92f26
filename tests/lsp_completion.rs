//! Inline completions over LSP with the real model: the same text as `copilotd complete`, edits
//! reflected, prompt reuse, cancellation and supersession. Talks JSON-RPC over stdio to the real
//! `copilotd --stdio`. Speed is printed, never asserted, except relative to a run in the same
//! process (a cancelled generation must stop long before a full one would end).

mod support;

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};
use support::*;

/// The model tests share 2 cores; run them one at a time.
static MODEL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    copilotd_server::sync::lock(&MODEL)
}

/// The fixture with the body of the `value` property (line 28, 0-based) emptied to its
/// indentation: the cursor goes at the end of that line.
fn inventory() -> String {
    let fixture =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bench_sample.py")).unwrap();
    let mut lines: Vec<&str> = fixture.split('\n').collect();
    assert_eq!(lines[27], "    def value(self) -> float:", "the fixture changed");
    lines[28] = "        ";
    lines.join("\n")
}

fn last_stats(client: &mut copilotd_bench::lsp::client::StdioClient) -> Value {
    status(client)["last"].clone()
}

/// A server on a workspace holding [`inventory`] as `inventory.py`, that document open, the
/// model loaded and calibrated (read from the warm cache; when the shared measurement was
/// disturbed, measured here, which takes the model's cache: done first, so that prompt reuse
/// shows in the tests); the workspace, the server and the document's uri.
fn inventory_session(model: &Path, max_tokens: usize) -> (tempfile::TempDir, Harness, String) {
    let (workspace, mut harness, uri) = session_on(model, "inventory.py", &inventory(), max_tokens);
    wait_model(&mut harness.client);
    wait_calibrated(&mut harness.client);
    (workspace, harness, uri)
}

/// A workspace whose file `name` holds `text`, and a daemon serving it from a warm cache with the
/// file open (the file's URI last).
fn session_on(model: &Path, name: &str, text: &str, max_tokens: usize) -> (tempfile::TempDir, Harness, String) {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join(name), text).unwrap();
    let mut harness = start_warm(Some(workspace.path()), options(model, max_tokens));
    let uri = uri(&workspace.path().join(name));
    open(&mut harness.client, &uri, text);
    (workspace, harness, uri)
}

#[test]
fn completion_matches_the_cli_follows_edits_and_reuses_the_prompt() {
    let model = model_path();
    let _serial = serial();
    let max_tokens = 24;
    let (workspace, mut harness, uri) = inventory_session(&model, max_tokens);
    let text = inventory();
    let client = &mut harness.client;

    // 1. The buffer as on disk: the same text as the CLI.
    let started = Instant::now();
    let first = complete(client, &uri, 28, 8);
    let first_ms = started.elapsed().as_millis();
    let cli = cli_completion(complete_command(&model, workspace.path(), "inventory.py", 28, 8, max_tokens));
    assert_eq!(first, cli["text"].as_str().unwrap(), "LSP and CLI differ at the same cursor");
    assert!(!first.trim().is_empty(), "an empty completion proves nothing");
    let stats = last_stats(client);
    assert_eq!(stats["reused_prompt_tokens"], 0, "first request: {stats}");

    // 2. Retype the signature above the cursor, one keystroke per didChange (never saved):
    // the completion follows the buffer, exactly as the CLI does on the edited text.
    let old = "value(self) -> float";
    let new = "describe(self) -> str";
    change(client, &uri, 2, (27, 8), (27, 8 + old.len() as u32), "");
    for (i, ch) in new.chars().enumerate() {
        change(client, &uri, 3 + i as i32, (27, 8 + i as u32), (27, 8 + i as u32), &ch.to_string());
    }
    let started = Instant::now();
    let second = complete(client, &uri, 28, 8);
    let second_ms = started.elapsed().as_millis();
    let edited = tempfile::tempdir().unwrap();
    std::fs::write(edited.path().join("inventory.py"), text.replacen(old, new, 1)).unwrap();
    let cli = cli_completion(complete_command(&model, edited.path(), "inventory.py", 28, 8, max_tokens));
    assert_eq!(second, cli["text"].as_str().unwrap(), "the edited buffer is not what was completed");
    assert_ne!(first, second, "the edit should change the completion");
    let stats = last_stats(client);
    let reused = stats["reused_prompt_tokens"].as_u64().unwrap();
    assert!(reused > 0, "the prompt before the edit is reused: {stats}");

    // 3. One more keystroke at the cursor, not the one suggested (that would be answered
    // from the suggestion, see below): almost the whole prompt is reused.
    let key = if second.starts_with('#') { "x" } else { "#" };
    change(client, &uri, 100, (28, 8), (28, 8), key);
    let started = Instant::now();
    let third = complete(client, &uri, 28, 9);
    let third_ms = started.elapsed().as_millis();
    let stats = last_stats(client);
    let (prompt, reused) = (stats["prompt_tokens"].as_u64().unwrap(), stats["reused_prompt_tokens"].as_u64().unwrap());
    assert!(reused + 4 >= prompt, "a keystroke costs a few tokens of prefill: {stats}");
    eprintln!("after typing {key:?}: {third:?}");
    eprintln!(
        "latency: first {first_ms} ms (cold prompt), after an edit above {second_ms} ms, after a keystroke {third_ms} ms \
         ({reused}/{prompt} prompt tokens reused)"
    );

    let status = status(client);
    assert_eq!(status["completions"], 3, "{status}");
    assert!(status["tokensPerSecond"].as_f64().unwrap() > 0.0, "{status}");
    assert!(status["acceptanceLength"].as_f64().unwrap() >= 1.0, "{status}");
    assert_eq!(status["modelState"], "ready");
    assert!(harness.client.shutdown(QUICK).unwrap());
}

/// The default model does not see the text after the cursor. Before a closing bracket a
/// suggestion is what the model writes there up to its line's end, without its copy of the
/// bracket; inside a line of code the editor's own requests get nothing, and one the person makes
/// gets a line.
#[test]
fn before_text_on_its_line_a_suggestion_is_one_line_and_inside_code_only_on_request() {
    let model = model_path();
    let _serial = serial();
    let (_workspace, mut harness, uri) = inventory_session(&model, 48);
    let client = &mut harness.client;

    change(client, &uri, 2, (28, 8), (28, 8), "return round(");
    let open_call = complete(client, &uri, 28, 21);
    let model_line = open_call.split('\n').next().unwrap().trim_end();
    let arguments = model_line.strip_suffix(')').unwrap_or_else(|| panic!("the model closes the call: {open_call:?}"));
    change(client, &uri, 3, (28, 21), (28, 21), ")");
    assert_eq!(complete(client, &uri, 28, 21), arguments, "the bracket the editor closed is not written again");

    // Before `lines = [...]`, the first statement of `summarize`.
    let code_follows = (149, 4);
    assert_eq!(complete(client, &uri, code_follows.0, code_follows.1), "", "an automatic request inside code");
    assert_eq!(last_stats(client)["stop"], "code_after_cursor");
    let params = json!({
        "textDocument": {"uri": uri},
        "position": {"line": code_follows.0, "character": code_follows.1},
        "context": {"triggerKind": 1},
    });
    let invoked = completion_text(&client.call("textDocument/inlineCompletion", params, SLOW).unwrap());
    assert!(!invoked.trim().is_empty() && !invoked.contains('\n'), "asked for, one line: {invoked:?}");
    assert!(harness.client.shutdown(QUICK).unwrap());
}

/// Nor does the default model see the lines below the cursor: on the blank line above a
/// function's `return`, it writes a loop and then that `return` again (it did before this rule),
/// which the suggestion leaves to the buffer; also where the token limit ends the generation
/// with that line (13 tokens above `return result`, when this test was written).
#[test]
fn a_suggestion_ends_before_the_line_below_the_cursor_that_the_model_writes_again() {
    let model = model_path();
    let _serial = serial();
    let (workspace, mut harness, _) = inventory_session(&model, 48);
    let client = &mut harness.client;
    let text = "def total(xs):\n    result = 0\n    \n    return result\n\n\n\
                def names(users):\n    out = []\n    \n    return out\n";
    let uri = uri(&workspace.path().join("totals.py"));
    open(client, &uri, text);
    for (line, below) in [(2, "    return result"), (8, "    return out")] {
        let suggestion = complete(client, &uri, line, 4);
        assert!(!suggestion.trim().is_empty(), "an empty suggestion proves nothing");
        let lines: Vec<String> = format!("    {suggestion}").lines().map(str::to_owned).collect();
        assert!(!lines.iter().any(|l| l == below), "{below:?} is in the buffer already: {suggestion:?}");
    }
    for max_tokens in 10..=16 {
        set_max_tokens(client, max_tokens);
        let suggestion = complete(client, &uri, 2, 4);
        let last = format!("    {suggestion}").lines().last().map(str::to_owned);
        assert_ne!(last.as_deref(), Some("    return result"), "{max_tokens} tokens: {suggestion:?}");
    }
    assert!(harness.client.shutdown(QUICK).unwrap());
}

#[test]
fn a_place_warmed_ahead_is_completed_from_its_prefilled_prompt_with_the_same_text() {
    let model = model_path();
    let _serial = serial();
    let max_tokens = 24;
    let (workspace, mut harness, uri) = inventory_session(&model, max_tokens);
    let client = &mut harness.client;

    // The editor names the place as the person enters the buffer; the model idles meanwhile.
    let place = json!({"textDocument": {"uri": uri}, "position": {"line": 28, "character": 8}});
    client.notify("copilotd/warm", place).unwrap();
    let deadline = Instant::now() + SLOW;
    while status(client)["warmedTokens"].as_u64() == Some(0) {
        assert!(Instant::now() < deadline, "the place was never warmed: {}", status(client));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let warm = complete(client, &uri, 28, 8);
    let stats = last_stats(client);
    let (prompt, reused) = (stats["prompt_tokens"].as_u64().unwrap(), stats["reused_prompt_tokens"].as_u64().unwrap());
    assert_eq!(reused + 1, prompt, "all but the last prompt token were prefilled ahead: {stats}");
    assert_eq!(status(client)["warmedTokens"].as_u64(), Some(prompt), "the whole prompt was warmed");
    let cli = cli_completion(complete_command(&model, workspace.path(), "inventory.py", 28, 8, max_tokens));
    assert_eq!(warm, cli["text"].as_str().unwrap(), "a warmed prompt must not change the completion");
    assert!(harness.client.shutdown(QUICK).unwrap());
}

/// A cold prompt that cannot be read within `promptLatencyMs` is cut to a shorter window before
/// the cursor: the text is `copilotd complete`'s with that window (`--prompt-tokens`), and a
/// keystroke after it keeps the window and reuses its cache.
#[test]
fn a_prompt_not_read_in_time_is_cut_to_a_shorter_window_that_typing_keeps() {
    let model = model_path();
    let _serial = serial();
    let max_tokens = 24;
    // The fixture with the first line of `summarize`'s body (line 149, 0-based) emptied to its
    // indentation: more than 1,000 prompt tokens before the cursor.
    let fixture =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bench_sample.py")).unwrap();
    let mut lines: Vec<&str> = fixture.split('\n').collect();
    assert!(lines[148].starts_with("def summarize("), "the fixture changed");
    lines[149] = "    ";
    let text = lines.join("\n");
    let (line, character) = (149, 4);
    // 1 ms: no window is read in time, so the shortest one (256 tokens) is taken.
    let (workspace, mut harness, uri) = session_on(&model, "sample.py", &text, max_tokens);
    let client = &mut harness.client;
    client.notify("workspace/didChangeConfiguration", json!({"settings": {"promptLatencyMs": 1}})).unwrap();
    wait_model(client);
    wait_calibrated(client);

    let cut = complete(client, &uri, line, character);
    let stats = last_stats(client);
    let prompt = stats["prompt_tokens"].as_u64().unwrap();
    assert_eq!(stats["window_shortened"], true, "{stats}");
    assert!(prompt <= 256, "{stats}");
    let mut command = complete_command(&model, workspace.path(), "sample.py", line, character, max_tokens);
    command.args(["--prompt-tokens", "256"]);
    let short = cli_completion(command);
    assert_eq!((cut.as_str(), prompt), (short["text"].as_str().unwrap(), short["prompt_tokens"].as_u64().unwrap()));
    let whole = cli_completion(complete_command(&model, workspace.path(), "sample.py", line, character, max_tokens));
    assert!(whole["prompt_tokens"].as_u64().unwrap() > 1000, "the whole window is far longer: {whole}");

    // A keystroke the suggestion did not predict: the same window, its cache reused.
    let key = if cut.starts_with('~') { "!" } else { "~" };
    change(client, &uri, 2, (line, character), (line, character), key);
    complete(client, &uri, line, character + 1);
    let stats = last_stats(client);
    let (prompt, reused) = (stats["prompt_tokens"].as_u64().unwrap(), stats["reused_prompt_tokens"].as_u64().unwrap());
    assert_eq!(stats["window_shortened"], true, "{stats}");
    assert!(prompt <= 256 && reused + 4 >= prompt, "the cut window's cache is reused: {stats}");
    assert!(harness.client.shutdown(QUICK).unwrap());
}

#[test]
fn going_back_to_a_file_reuses_its_prompt_set_aside_with_the_same_text() {
    let model = model_path();
    let _serial = serial();
    let (_workspace, mut harness, uri) = inventory_session(&model, 16);
    let client = &mut harness.client;
    let first = complete(client, &uri, 28, 8);
    let prompt = last_stats(client)["prompt_tokens"].as_u64().unwrap();

    // Another file, whose prompt shares nothing with the first: its own cache.
    let other = "file:///tmp/copilotd-back/other.py";
    open(client, other, "import os\n\n\ndef home():\n    return os.path.expanduser(\"~\")\n\n\ndef ");
    complete(client, other, 7, 4);
    assert_eq!(last_stats(client)["reused_prompt_tokens"], 0);

    // Back to the first file: its prompt was set aside, not overwritten.
    let again = complete(client, &uri, 28, 8);
    let stats = last_stats(client);
    assert_eq!(stats["reused_prompt_tokens"].as_u64(), Some(prompt - 1), "{stats}");
    assert_eq!(again, first, "a cache set aside and put back must not change the completion");
    assert!(harness.client.shutdown(QUICK).unwrap());
}

#[test]
fn typing_what_was_suggested_is_answered_from_the_suggestion() {
    let model = model_path();
    let _serial = serial();
    let mut harness = start_warm(None, options(&model, 24));
    let client = &mut harness.client;
    let uri = "file:///tmp/copilotd-typed/inventory.py";
    open(client, uri, &inventory());
    let suggestion = complete(client, uri, 28, 8);
    assert!(suggestion.trim().len() > 2, "a suggestion to type through: {suggestion:?}");
    let generated = status(client)["generatedTokens"].as_u64().unwrap();
    assert!(generated > 0);

    // Type its first two characters: the rest of it comes back, and the model did nothing.
    let typed: String = suggestion.chars().take(2).collect();
    for (i, ch) in typed.chars().enumerate() {
        change(client, uri, 2 + i as i32, (28, 8 + i as u32), (28, 8 + i as u32), &ch.to_string());
    }
    let rest = complete(client, uri, 28, 10);
    assert_eq!(rest, suggestion[typed.len()..], "the rest of the suggestion");
    let after = status(client);
    assert_eq!(after["last"]["stop"], "typed_through", "{after}");
    assert_eq!(after["generatedTokens"].as_u64().unwrap(), generated, "nothing decoded: {after}");

    // A character the suggestion did not predict: decoded again.
    let next = suggestion[typed.len()..].chars().next().unwrap();
    let other = if next == '~' { "!" } else { "~" };
    change(client, uri, 10, (28, 10), (28, 10), other);
    complete(client, uri, 28, 11);
    let after = status(client);
    assert_ne!(after["last"]["stop"], "typed_through", "{after}");
    assert!(after["generatedTokens"].as_u64().unwrap() > generated, "{after}");
    assert!(harness.client.shutdown(QUICK).unwrap());
}

#[test]
fn a_generation_cancelled_by_a_keystroke_answers_the_requests_that_follow_it() {
    let model = model_path();
    let _serial = serial();
    let max_tokens = 64;
    let mut harness = start_warm(None, options(&model, max_tokens));
    let client = &mut harness.client;
    let (reference, typed_in) = ("file:///tmp/copilotd-carry/reference.py", "file:///tmp/copilotd-carry/typed.py");
    open(client, reference, ENDLESS);
    open(client, typed_in, ENDLESS);
    let end = (11, 5);
    // What the model suggests at the cursor, from another document with the same text (so the
    // prompt below is cached, and the request decodes at once).
    let suggestion = complete(client, reference, end.0, end.1);
    let stats = last_stats(client);
    assert_eq!(stats["new_tokens"], max_tokens, "premise: the buffer is continued to the limit: {stats}");
    let decode = std::time::Duration::from_secs_f64(stats["decode_ms"].as_f64().unwrap() / 1000.0);
    let generated = status(client)["generatedTokens"].as_u64().unwrap();

    // A request cancelled while it decodes, as the next keystroke cancels it in an editor:
    // answered RequestCancelled, while its generation runs on.
    let id = request_completion(client, typed_in, end.0, end.1);
    std::thread::sleep(decode / 4);
    client.notify("$/cancelRequest", json!({"id": id})).unwrap();
    assert_eq!(error_code(&client.response(id, QUICK).unwrap()), Some(-32800), "premise: cancelled while decoding");
    // The person types what it predicts: the next request is answered from it, with no
    // decoding of its own.
    let typed: String = suggestion.chars().take(2).collect();
    for (i, ch) in typed.chars().enumerate() {
        let at = (end.0, end.1 + i as u32);
        change(client, typed_in, 2 + i as i32, at, at, &ch.to_string());
    }
    let rest = complete(client, typed_in, end.0, end.1 + 2);
    assert_eq!(rest, suggestion[typed.len()..], "the rest of the carried generation's suggestion");
    let after = status(client);
    assert_eq!(after["last"]["stop"], "typed_through", "{after}");
    let carried = after["generatedTokens"].as_u64().unwrap() - generated;
    assert_eq!(carried, max_tokens as u64, "one generation, the cancelled one, to its end");
    assert!(harness.client.shutdown(QUICK).unwrap());
}

#[test]
fn taking_a_whole_suggestion_starts_the_next_one_before_it_is_asked_for() {
    let model = model_path();
    let _serial = serial();
    let mut harness = start_warm(None, options(&model, 8));
    let client = &mut harness.client;
    let uri = "file:///tmp/copilotd-next/numbers.py";
    open(client, uri, ENDLESS);
    let end = (11, 5);
    let response = client.call("textDocument/inlineCompletion", completion_params(uri, end.0, end.1), SLOW).unwrap();
    let item = &response["result"][0];
    let suggestion = item["insertText"].as_str().unwrap().to_owned();
    assert!(!suggestion.trim().is_empty(), "premise: a suggestion to take: {response}");
    let generated = status(client)["generatedTokens"].as_u64().unwrap();

    // Taken whole (Tab): reported, then the edit; the next request is answered from the
    // generation the report started, and nothing else was decoded.
    let id = item["command"]["arguments"][0]["id"].as_u64().unwrap();
    client.notify("copilotd/suggestionFeedback", json!({"id": id, "kind": "accepted"})).unwrap();
    // A round trip: the report is taken before the edit (an editor's debounce gives it 75 ms).
    status(client);
    change(client, uri, 2, end, end, &suggestion);
    let last_line = suggestion.rsplit('\n').next().unwrap().encode_utf16().count() as u32;
    let after_it = match suggestion.matches('\n').count() as u32 {
        0 => (end.0, end.1 + last_line),
        lines => (end.0 + lines, last_line),
    };
    let next = complete(client, uri, after_it.0, after_it.1);
    assert!(!next.trim().is_empty(), "a next suggestion: {next:?}");
    let after = status(client);
    assert_eq!(after["last"]["stop"], "typed_through", "answered from the prepared generation: {after}");
    assert_eq!(after["generatedTokens"].as_u64().unwrap() - generated, 8, "one generation of 8 tokens: {after}");
    assert!(harness.client.shutdown(QUICK).unwrap());
}

#[test]
fn a_suggestions_first_lines_answer_before_it_ends_and_asking_again_gives_the_rest() {
    let model = model_path();
    let _serial = serial();
    let max_tokens = 64;
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("numbers.py"), ENDLESS).unwrap();
    let whole = cli_completion(complete_command(&model, workspace.path(), "numbers.py", 11, 5, max_tokens))["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(whole.trim_end().contains('\n'), "premise: a suggestion of several lines: {whole:?}");
    // Early lines are the default.
    let mut harness = start_warm(Some(workspace.path()), json!({"model": model, "maxTokens": max_tokens}));
    let client = &mut harness.client;
    let uri = uri(&workspace.path().join("numbers.py"));
    open(client, &uri, ENDLESS);
    let ask = |client: &mut copilotd_bench::lsp::client::StdioClient| {
        let response = client.call("textDocument/inlineCompletion", completion_params(&uri, 11, 5), SLOW).unwrap();
        let item = response["result"][0].clone();
        (item["insertText"].as_str().unwrap().to_owned(), item["command"]["arguments"][0]["more"] == true)
    };
    // The first answer: whole lines of the suggestion, with more to come.
    let (first, more) = ask(client);
    assert!(more, "the generation goes on after the first answer: {first:?}");
    assert!(whole.starts_with(&first) && first.len() < whole.len(), "{first:?} begins {whole:?}");
    assert!(whole[first.len()..].trim_start_matches([' ', '\t']).starts_with('\n'), "whole lines: {first:?}");
    // Asked again at the same place, as the editors do: more of it, until all of it.
    let mut answers = vec![first];
    let mut more = more;
    while more {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (text, again) = ask(client);
        assert!(whole.starts_with(&text) && text.len() >= answers.last().unwrap().len(), "{text:?} after {answers:?}");
        answers.push(text);
        more = again;
    }
    assert_eq!(answers.last().unwrap(), &whole, "the last answer is the whole suggestion");
    let generated = status(client)["generatedTokens"].as_u64().unwrap();
    assert_eq!(generated, max_tokens as u64, "one generation answered every request");
    assert!(harness.client.shutdown(QUICK).unwrap());
}

/// The persisted preference cache of the workspace in `harness`'s private cache directory (of
/// the one tokenizer used there).
fn preferences_file(home: &Path) -> std::path::PathBuf {
    saved_preferences_file(home).expect("a preference cache file")
}

/// [`preferences_file`], if it was saved.
fn saved_preferences_file(home: &Path) -> Option<std::path::PathBuf> {
    let workspaces = home.join("cache/copilotd/workspaces");
    let folder = std::fs::read_dir(&workspaces).ok()?.next()?.ok()?;
    let mut files = std::fs::read_dir(folder.path()).ok()?.map(|entry| entry.unwrap().path());
    files.find(|path| {
        let name = path.file_name().unwrap().to_str().unwrap();
        name.starts_with("preferences-") && name.ends_with(".cache")
    })
}

#[test]
fn the_preference_cache_survives_a_restart_and_a_damaged_one_is_rebuilt() {
    let model = model_path();
    let _serial = serial();
    // A buffer continued at length: its output fills whole chunks of the cache (20 tokens).
    let (workspace, mut harness, uri) = session_on(&model, "numbers.py", ENDLESS, 48);
    assert!(!complete(&mut harness.client, &uri, 11, 5).is_empty());
    assert!(harness.client.shutdown(QUICK).unwrap());
    let path = preferences_file(harness.home.path());
    let saved = std::fs::read(&path).expect("the cache is saved at shutdown");
    assert!(saved.starts_with(b"CPDPREF\0") && saved.len() > 48, "{} bytes", saved.len());

    // Damaged on disk: the daemon serves with an empty cache and writes a sound one again.
    let mut damaged = saved.clone();
    *damaged.last_mut().unwrap() ^= 0xFF;
    std::fs::write(&path, &damaged).unwrap();
    let mut harness = restart(harness.home, Some(workspace.path()), options(&model, 48));
    open(&mut harness.client, &uri, ENDLESS);
    assert!(!complete(&mut harness.client, &uri, 11, 5).is_empty());
    assert!(harness.client.shutdown(QUICK).unwrap());
    let rewritten = std::fs::read(&path).unwrap();
    assert!(rewritten.starts_with(b"CPDPREF\0") && rewritten != damaged);
}

#[test]
fn what_was_learned_is_saved_a_while_after_it_and_when_the_daemon_is_stopped() {
    let model = model_path();
    let _serial = serial();
    let (_workspace, mut harness, uri) = session_on(&model, "numbers.py", ENDLESS, 48);
    let client = &mut harness.client;
    let response = client.call("textDocument/inlineCompletion", completion_params(&uri, 11, 5), SLOW).unwrap();
    let item = &response["result"][0];
    assert!(!item["insertText"].as_str().unwrap().is_empty(), "premise: a suggestion: {response}");

    // A completion teaches the cache: saved a few seconds later, while the session goes on.
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    let saved = loop {
        if let Some(saved) = saved_preferences_file(harness.home.path()).and_then(|path| std::fs::read(path).ok()) {
            break saved;
        }
        assert!(Instant::now() < deadline, "the preference cache was not saved during the session");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };

    // Taken: a lesson that SIGTERM comes before the saver's delay, and that is saved anyway.
    let id = item["command"]["arguments"][0]["id"].as_u64().unwrap();
    client.notify("copilotd/suggestionFeedback", json!({"id": id, "kind": "accepted"})).unwrap();
    status(client);
    let killed = std::process::Command::new("kill").args(["-TERM", &client.pid().to_string()]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + SLOW;
    while client.is_alive() {
        assert!(Instant::now() < deadline, "the daemon did not stop at SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let path = preferences_file(harness.home.path());
    assert_ne!(std::fs::read(path).unwrap(), saved, "the accepted suggestion is saved at SIGTERM");
}

#[test]
fn acceptance_counts_are_kept_after_the_answer_not_before_it() {
    let model = model_path();
    let _serial = serial();
    let (_workspace, mut harness, uri) = inventory_session(&model, 16);
    let kept = harness.home.path().join("cache/copilotd/acceptance");
    let files = || std::fs::read_dir(&kept).map_or(0, |files| files.count());
    assert!(!complete(&mut harness.client, &uri, 28, 8).is_empty());
    assert_eq!(files(), 0, "no file written before the answer");
    assert!(harness.client.shutdown(QUICK).unwrap());
    assert_eq!(files(), 1, "the counts are kept by the end of the session");
}

/// A buffer the model continues at length (no stop rule fires).
const ENDLESS: &str = "NUMBERS = {\n    \"one\": 1,\n    \"two\": 2,\n    \"three\": 3,\n    \"four\": 4,\n    \
    \"five\": 5,\n    \"six\": 6,\n    \"seven\": 7,\n    \"eight\": 8,\n    \"nine\": 9,\n    \"ten\": 10,\n    \"";

fn set_max_tokens(client: &mut copilotd_bench::lsp::client::StdioClient, max_tokens: usize) {
    client.notify("workspace/didChangeConfiguration", json!({"settings": {"maxTokens": max_tokens}})).unwrap();
}

#[test]
fn cancelled_and_superseded_requests_stop_promptly() {
    let model = model_path();
    let _serial = serial();
    let full_tokens = 64;
    let mut harness = start_warm(None, options(&model, full_tokens));
    let client = &mut harness.client;
    let (a, b, c) =
        ("file:///tmp/copilotd-cancel/a.py", "file:///tmp/copilotd-cancel/b.py", "file:///tmp/copilotd-cancel/c.py");
    for document in [a, b, c] {
        open(client, document, ENDLESS);
    }
    let end = (11, 5);

    // A full generation, for reference, on `b` after `a`: the same buffer, so its prompt is
    // cached, but another document, so it is not answered from `a`'s suggestion.
    complete(client, a, end.0, end.1);
    let started = Instant::now();
    complete(client, b, end.0, end.1);
    let full = started.elapsed();
    let stats = last_stats(client);
    assert_eq!(stats["new_tokens"], full_tokens, "premise: the buffer is continued to the limit: {stats}");

    // $/cancelRequest: answered with RequestCancelled at once. Its generation runs on only
    // while it could answer what comes next (see the test above): a request with other
    // settings (1 token, on an identical buffer, so the prompt is fully reused) stops it within
    // a decode step, and is answered long before the cancelled generation would have ended.
    let id = request_completion(client, a, end.0, end.1);
    std::thread::sleep(full / 8);
    let cancelled_at = Instant::now();
    client.notify("$/cancelRequest", json!({"id": id})).unwrap();
    let response = client.response(id, QUICK).unwrap();
    let answered = cancelled_at.elapsed();
    assert_eq!(error_code(&response), Some(-32800), "{response}");
    set_max_tokens(client, 1);
    complete(client, a, end.0, end.1);
    let freed = cancelled_at.elapsed();
    eprintln!(
        "full {full_tokens}-token generation {full:?}; cancel answered in {answered:?}; next request answered {freed:?} after the cancel"
    );
    assert!(freed < full / 2, "generation went on after the cancel: {freed:?} vs a full run of {full:?}");
    assert_eq!(last_stats(client)["new_tokens"], 1);

    // A newer request for the same document supersedes the older one.
    set_max_tokens(client, 8);
    let older = request_completion(client, b, end.0, end.1);
    let newer = request_completion(client, b, end.0, end.1);
    let response = client.response(older, SLOW).unwrap();
    assert_eq!(error_code(&response), Some(-32800), "{response}");
    assert!(response["error"]["message"].as_str().unwrap().contains("superseded"), "{response}");
    assert!(!completion_text(&client.response(newer, SLOW).unwrap()).is_empty());

    // An edit of the document supersedes its request too.
    let id = request_completion(client, a, end.0, end.1);
    change(client, a, 2, end, end, "e");
    let response = client.response(id, SLOW).unwrap();
    assert_eq!(error_code(&response), Some(-32801), "{response}");
    // ... but not a request for another document.
    let other = request_completion(client, c, end.0, end.1);
    change(client, a, 3, (11, 6), (11, 6), "l");
    assert!(!completion_text(&client.response(other, SLOW).unwrap()).is_empty());
    assert!(harness.client.is_alive());
}

#[test]
fn a_ten_megabyte_buffer_is_completed_from_a_bounded_prompt() {
    let model = model_path();
    let _serial = serial();
    let mut harness = start_warm(None, options(&model, 8));
    let client = &mut harness.client;
    let block = "def scale_{n}(values, factor):\n    return [value * factor for value in values]\n\n\n";
    let mut text = String::with_capacity(10_500_000);
    let mut n = 0;
    while text.len() < 10_000_000 {
        text.push_str(&block.replace("{n}", &n.to_string()));
        n += 1;
    }
    text.push_str("def scale_last(values, factor):\n    ");
    let last_line = text.matches('\n').count() as u32;
    let uri = "file:///tmp/copilotd-huge/huge.py";
    let started = Instant::now();
    open(client, uri, &text);
    let completion = complete(client, uri, last_line, 4);
    eprintln!("10 MB buffer: open + completion in {:?}: {completion:?}", started.elapsed());
    assert!(completion.contains("return"), "{completion:?}");
    let stats = last_stats(client);
    assert!(stats["prompt_tokens"].as_u64().unwrap() <= 4096, "{stats}");
    assert!(harness.client.is_alive());
}

#[test]
fn calibration_runs_in_the_background_never_in_a_request() {
    let model = model_path();
    let _serial = serial();
    let workspace = tempfile::tempdir().unwrap();
    let text = inventory();
    std::fs::write(workspace.path().join("inventory.py"), &text).unwrap();
    // A fresh cache directory: no calibration measured yet.
    let mut harness = start(Some(workspace.path()), options(&model, 16));
    let client = &mut harness.client;
    let uri = uri(&workspace.path().join("inventory.py"));
    open(client, &uri, &text);
    let calibration = wait_model(client)["calibration"].as_str().unwrap().to_owned();
    assert!(["pending", "measuring"].contains(&calibration.as_str()), "{calibration}");

    // Requests keep coming: each is answered (with a small fixed tree) while calibration waits.
    // A line added at the end each time, so that each is decoded (not answered from the
    // previous suggestion).
    let last_line = text.split('\n').count() as u32 - 1;
    for i in 0..3 {
        change(client, &uri, 2 + i as i32, (last_line + i, 0), (last_line + i, 0), "\n");
        assert!(!complete(client, &uri, 28, 8).trim().is_empty());
    }
    let during = status(client);
    assert_ne!(during["calibration"], "done", "no quiet moment yet: {during}");
    let (nodes, steps) = (&during["last"]["tree_nodes"], &during["last"]["forward_steps"]);
    // The pending token and at most four drafted nodes per step.
    assert!(nodes.as_u64().unwrap() <= 5 * steps.as_u64().unwrap(), "uncalibrated trees stay small: {during}");

    // Once the model is left alone, it is measured and cached, to be confirmed later.
    let started = Instant::now();
    let finished = wait_calibrated(client);
    eprintln!("calibration {} after {:?} idle", finished["calibration"], started.elapsed());
    assert!(!complete(client, &uri, 28, 8).trim().is_empty());
    assert!(harness.client.shutdown(QUICK).unwrap());
    if finished["calibration"] == "disturbed" {
        return; // a busy machine: nothing cached to go on from
    }
    assert_eq!(finished["calibration"], "confirming", "one measurement is not final: {finished}");
    let cached = harness.home.path().join("cache/copilotd/calibration");
    let files: Vec<_> = std::fs::read_dir(&cached).unwrap().map(|entry| entry.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "cached in {}", cached.display());
    let first: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(first["measurements"], 1, "{first}");

    // The cached curve was skewed (say, other work held the memory while the one-token passes
    // ran), and measured long enough ago: the next start uses it at once and measures again,
    // and each point keeps its least time.
    let mut skewed = first.clone();
    skewed["measured_at"] = json!(first["measured_at"].as_u64().unwrap() - 3600);
    for curve in skewed["curves"].as_array_mut().unwrap() {
        for point in curve[1].as_array_mut().unwrap() {
            if point[0] == 1 {
                point[1] = json!(point[1].as_f64().unwrap() * 5.0);
            }
        }
    }
    std::fs::write(&files[0], serde_json::to_vec(&skewed).unwrap()).unwrap();
    let mut harness = restart(harness.home, Some(workspace.path()), options(&model, 16));
    let client = &mut harness.client;
    assert_eq!(wait_model(client)["calibration"], "confirming");
    let deadline = Instant::now() + SLOW;
    let second = loop {
        let cached: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
        if cached["measurements"] == 2 {
            break cached;
        }
        let now = status(client);
        if now["calibration"] == "disturbed" {
            return; // measured while the machine was busy: not merged
        }
        assert_eq!(now["calibration"], "confirming", "{now}");
        assert!(Instant::now() < deadline, "not measured again: {cached}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(harness.client.shutdown(QUICK).unwrap());
    let points = |calibration: &Value| -> Vec<f64> {
        let curves = calibration["curves"].as_array().unwrap().iter();
        curves.flat_map(|curve| curve[1].as_array().unwrap().iter().map(|p| p[1].as_f64().unwrap())).collect()
    };
    let one_token = |calibration: &Value| calibration["curves"][0][1][0][1].as_f64().unwrap();
    assert!(one_token(&second) < one_token(&skewed), "the skewed one-token time is corrected: {second}");
    let (skewed, merged) = (points(&skewed), points(&second));
    assert_eq!(skewed.len(), merged.len());
    assert!(skewed.iter().zip(&merged).all(|(before, after)| after <= before), "{skewed:?} {merged:?}");

    // Just measured: a start right after uses it and waits before the third measurement (a
    // measurement takes about 3 s here; the daemon would start one after 1 s of quiet).
    let mut harness = restart(harness.home, Some(workspace.path()), options(&model, 16));
    assert_eq!(wait_model(&mut harness.client)["calibration"], "confirming");
    std::thread::sleep(std::time::Duration::from_secs(6));
    let still: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(still["measurements"], 2, "measured again too soon: {still}");
    assert_eq!(status(&mut harness.client)["calibration"], "confirming");
    assert!(harness.client.shutdown(QUICK).unwrap());
}
