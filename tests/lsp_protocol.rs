//! The language server under bad and hostile input, without a model: every message gets an
//! answer (or a warning), and the server never crashes or hangs. Talks JSON-RPC over stdio to
//! the real `copilotd --stdio`.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

/// A model path that does not exist: the server must run without a model.
fn no_model() -> Value {
    json!({"model": "/nonexistent/copilotd-test-model.gguf"})
}

fn assert_alive(harness: &mut Harness) {
    assert!(harness.client.is_alive(), "the server exited");
    let status = status(&mut harness.client);
    assert!(status["strategy"].is_string(), "{status}");
}

#[test]
fn initialize_announces_capabilities_and_exits_cleanly() {
    let mut client = copilotd_bench::lsp::client::StdioClient::spawn(&binary(), &["--stdio"], &[]).unwrap();
    let early = client.call("copilotd/status", Value::Null, QUICK).unwrap();
    assert_eq!(error_code(&early), Some(-32002), "requests before initialize: {early}");
    let result = client.initialize(None, no_model(), QUICK).unwrap();
    let capabilities = &result["capabilities"];
    assert_eq!(capabilities["inlineCompletionProvider"], true, "{capabilities}");
    assert_eq!(capabilities["textDocumentSync"]["change"], 2, "incremental sync: {capabilities}");
    assert_eq!(capabilities["textDocumentSync"]["openClose"], true);
    assert_eq!(capabilities["workspace"]["workspaceFolders"]["supported"], true);
    assert_eq!(result["serverInfo"]["name"], "copilotd");
    let again = client.call("initialize", json!({"capabilities": {}}), QUICK).unwrap();
    assert_eq!(error_code(&again), Some(-32600), "a second initialize is refused: {again}");
    assert!(client.shutdown(QUICK).unwrap(), "exit after shutdown is a success");
}

#[test]
fn exit_without_shutdown_exits_with_code_one() {
    let mut client = copilotd_bench::lsp::client::StdioClient::spawn(&binary(), &["--stdio"], &[]).unwrap();
    client.initialize(None, no_model(), QUICK).unwrap();
    let status = client.exit(QUICK).unwrap();
    assert_eq!(status.code(), Some(1), "exit without shutdown is an error");
}

#[test]
fn a_missing_default_model_is_offered_for_download_never_fetched_unasked() {
    // No model configured, and an empty cache: the default model is missing.
    let mut harness = start(None, json!({}));
    let client = &mut harness.client;
    let request = client.wait_for_method("window/showMessageRequest", QUICK, |_| true).unwrap();
    let text = request["params"]["message"].as_str().unwrap();
    assert!(text.contains("not downloaded yet"), "{text}");
    assert_eq!(request["params"]["actions"], json!([{"title": "Download"}]), "{request}");
    // The test client answers no action: nothing is fetched.
    let status = wait_model(client);
    assert_eq!(status["modelState"], "failed", "{status}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let models = harness.home.path().join("cache/copilotd/models");
    let fetched = std::fs::read_dir(&models).map_or(0, |entries| entries.count());
    assert_eq!(fetched, 0, "nothing downloaded into {}", models.display());
    assert!(client.received().iter().all(|m| m["method"] != "window/workDoneProgress/create"));
    assert!(harness.client.shutdown(QUICK).unwrap());
}

#[test]
fn a_missing_model_is_shown_and_completions_answer_an_error() {
    let mut harness = start(None, no_model());
    let client = &mut harness.client;
    let message = client.wait_for_method("window/showMessage", QUICK, |m| m["params"]["type"] == 1).unwrap();
    let text = message["params"]["message"].as_str().unwrap();
    assert!(text.contains("model not found"), "{text}");
    assert!(text.contains("Check the `model` setting") && !text.contains("model fetch"), "a model chosen: {text}");
    let status = wait_model(client);
    assert_eq!(status["modelState"], "failed", "{status}");
    assert!(status["modelError"].as_str().unwrap().contains("nonexistent"), "{status}");

    open(client, "file:///tmp/copilotd-test/a.py", "def f():\n    ");
    let id = request_completion(client, "file:///tmp/copilotd-test/a.py", 1, 4);
    let response = client.response(id, QUICK).unwrap();
    assert_eq!(error_code(&response), Some(-32803), "{response}");
    assert!(response["error"]["message"].as_str().unwrap().contains("unavailable"), "{response}");
    assert_alive(&mut harness);
}

#[test]
fn malformed_json_and_headers_are_answered_and_the_server_goes_on() {
    let mut harness = start(None, no_model());
    let client = &mut harness.client;
    let bodies: [(&[u8], i64, Value); 5] = [
        (b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ", -32700, Value::Null),
        (b"\xff\xfe\x00garbage", -32700, Value::Null),
        (b"[1, 2, 3]", -32600, Value::Null),
        (b"{\"jsonrpc\": \"1.0\", \"id\": 77, \"method\": \"copilotd/status\"}", -32600, json!(77)),
        (b"null", -32600, Value::Null),
    ];
    for (body, code, id) in bodies {
        let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        frame.extend_from_slice(body);
        client.send_raw(&frame).unwrap();
        let error = match id.as_i64() {
            Some(id) => client.response(id, QUICK).unwrap(),
            None => client.wait_for(QUICK, |m| m.get("error").is_some()).unwrap(),
        };
        assert_eq!(error_code(&error), Some(code), "{}: {error}", String::from_utf8_lossy(body));
        assert_eq!(error["id"], id, "{error}");
    }
    // Broken headers: each is answered with a parse error (adjacent garbage may be answered
    // once), and the next good message is read.
    let headers: [&[u8]; 4] = [
        b"Content-Type: application/json\r\n\r\n{}",
        b"Content-Length: twelve\r\n\r\n",
        b"this is not a header at all\r\n\r\n",
        b"Content-Length: 99999999999999999999\r\n\r\n",
    ];
    for garbage in headers {
        client.send_raw(garbage).unwrap();
        let status = client.call_ok("copilotd/status", Value::Null, QUICK);
        assert!(status.is_ok(), "after {}: {status:?}", String::from_utf8_lossy(garbage));
        let error = client.wait_for(QUICK, |m| m.get("error").is_some()).unwrap();
        assert_eq!(error_code(&error), Some(-32700), "{error}");
    }
    assert_alive(&mut harness);
}

#[test]
fn a_wrong_content_length_is_one_error_and_the_server_goes_on() {
    let mut harness = start(None, no_model());
    let client = &mut harness.client;
    // 40 bytes too long: the body runs into the next message's header, which is lost with it.
    let body = br#"{"jsonrpc":"2.0","method":"copilotd/warm","params":null}"#;
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len() + 40).into_bytes();
    frame.extend_from_slice(body);
    client.send_raw(&frame).unwrap();
    open(client, "file:///tmp/copilotd-test/lost.py", &"x = 1\n".repeat(400_000));
    assert!(status(client)["strategy"].is_string());
    let error = client.wait_for(QUICK, |m| m.get("error").is_some()).unwrap();
    assert_eq!(error_code(&error), Some(-32700), "{error}");
    assert!(status(client)["strategy"].is_string());
    let errors: Vec<Value> = client.received().into_iter().filter(|m| m.get("error").is_some()).collect();
    assert!(errors.is_empty(), "one error for the bad frame, then: {errors:?}");
    assert_alive(&mut harness);
}

#[test]
fn unknown_methods_uris_and_bad_params_are_errors() {
    let mut harness = start(None, no_model());
    let client = &mut harness.client;
    for method in ["copilotd/noSuchMethod", "$/noSuchMethod", "$/cancelRequest"] {
        let unknown = client.call(method, json!({"id": 1}), QUICK).unwrap();
        assert_eq!(error_code(&unknown), Some(-32601), "{method}: {unknown}");
    }
    client.notify("custom/unknownNotification", json!({"x": 1})).unwrap();
    client.notify("$/unknownDollarNotification", json!({})).unwrap();

    let response =
        client.call("textDocument/inlineCompletion", completion_params("file:///nowhere/x.py", 0, 0), QUICK).unwrap();
    assert_eq!(error_code(&response), Some(-32602), "{response}");
    assert!(response["error"]["message"].as_str().unwrap().contains("not open"), "{response}");
    let response = client.call("textDocument/inlineCompletion", json!(5), QUICK).unwrap();
    assert_eq!(error_code(&response), Some(-32602), "{response}");
    let response =
        client.call("textDocument/inlineCompletion", completion_params("not a uri at all", 0, 0), QUICK).unwrap();
    assert_eq!(error_code(&response), Some(-32602), "{response}");

    change(client, "file:///nowhere/x.py", 2, (0, 0), (0, 0), "x");
    let warning = client.wait_for_method("window/showMessage", QUICK, |m| m["params"]["type"] == 2).unwrap();
    assert!(warning["params"]["message"].as_str().unwrap().contains("not open"), "{warning}");
    client.notify("textDocument/didClose", json!({"textDocument": {"uri": "file:///nowhere/x.py"}})).unwrap();
    assert_alive(&mut harness);
}

#[test]
fn positions_past_the_last_line_or_inside_a_surrogate_pair_are_invalid_params() {
    let mut harness = start(None, no_model());
    let client = &mut harness.client;
    let uri = "file:///tmp/copilotd-test/emoji.py";
    open(client, uri, "s = '😀'\nx = 1\n");
    for (line, character, expect) in [(0u32, 6u32, "surrogate"), (9, 0, "out of range")] {
        let response =
            client.call("textDocument/inlineCompletion", completion_params(uri, line, character), QUICK).unwrap();
        assert_eq!(error_code(&response), Some(-32602), "({line},{character}): {response}");
        assert!(response["error"]["message"].as_str().unwrap().contains(expect), "{response}");
    }
    // In range (after the pair, at the end of a line, past it (which stands for its end), the
    // empty last line): the position is accepted and the request fails only for want of a model.
    for (line, character) in [(0u32, 7u32), (0, 8), (0, 99), (2, 0)] {
        let response =
            client.call("textDocument/inlineCompletion", completion_params(uri, line, character), SLOW).unwrap();
        assert_eq!(error_code(&response), Some(-32803), "({line},{character}): {response}");
    }
    // An edit inside the pair is refused with a warning; the document is out of sync until a
    // full-text change.
    change(client, uri, 2, (0, 6), (0, 6), "!");
    let warning = client.wait_for_method("window/showMessage", QUICK, |m| m["params"]["type"] == 2).unwrap();
    assert!(warning["params"]["message"].as_str().unwrap().contains("surrogate"), "{warning}");
    let response = client.call("textDocument/inlineCompletion", completion_params(uri, 1, 0), QUICK).unwrap();
    assert!(response["error"]["message"].as_str().unwrap().contains("out of sync"), "{response}");
    client
        .notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": 3}, "contentChanges": [{"text": "y = 2\n"}]}),
        )
        .unwrap();
    let response = client.call("textDocument/inlineCompletion", completion_params(uri, 0, 5), SLOW).unwrap();
    assert_eq!(error_code(&response), Some(-32803), "{response}");
    assert_alive(&mut harness);
}

#[test]
fn a_ten_megabyte_document_is_served() {
    let mut harness = start(None, no_model());
    let client = &mut harness.client;
    let line = "value = compute(alpha, beta, gamma)  # a line of ordinary Python code\n";
    let lines = 10_000_000 / line.len() + 1;
    let text = line.repeat(lines);
    assert!(text.len() >= 10_000_000);
    let uri = "file:///tmp/copilotd-test/huge.py";
    let started = Instant::now();
    open(client, uri, &text);
    change(client, uri, 2, (lines as u32, 0), (lines as u32, 0), "def tail():\n    ");
    let response =
        client.call("textDocument/inlineCompletion", completion_params(uri, lines as u32 + 1, 4), SLOW).unwrap();
    assert_eq!(error_code(&response), Some(-32803), "position accepted, no model: {response}");
    let past =
        client.call("textDocument/inlineCompletion", completion_params(uri, lines as u32 + 2, 0), QUICK).unwrap();
    assert_eq!(error_code(&past), Some(-32602), "{past}");
    eprintln!("10 MB document: open + edit + 2 requests in {:?}", started.elapsed());
    assert_alive(&mut harness);
}

#[test]
fn a_thousand_rapid_changes_apply_in_order() {
    let mut harness = start(None, no_model());
    let client = &mut harness.client;
    let uri = "file:///tmp/copilotd-test/typing.py";
    open(client, uri, "");
    // Type 1,000 characters, every tenth a surrogate pair (2 UTF-16 units), with a completion
    // request (superseded by the next edit) every 100 keystrokes.
    let mut units = 0u32;
    let mut requests = Vec::new();
    for i in 0..1000 {
        let typed = if i % 10 == 9 { "😀" } else { "a" };
        change(client, uri, i + 2, (0, units), (0, units), typed);
        units += typed.encode_utf16().count() as u32;
        if i % 100 == 99 {
            requests.push(request_completion(client, uri, 0, units));
        }
    }
    assert_eq!(units, 1100);
    for id in requests {
        let response = client.response(id, SLOW).unwrap();
        assert!(response.get("error").is_some(), "{response}");
        assert_ne!(error_code(&response), Some(-32602), "every position was valid when asked: {response}");
    }
    // The buffer is exactly the typed text: its end is valid, the line after it is not, and
    // the last pair cannot be split.
    let end = client.call("textDocument/inlineCompletion", completion_params(uri, 0, units), SLOW).unwrap();
    assert_eq!(error_code(&end), Some(-32803), "{end}");
    let past = client.call("textDocument/inlineCompletion", completion_params(uri, 1, 0), QUICK).unwrap();
    assert_eq!(error_code(&past), Some(-32602), "{past}");
    let split = client.call("textDocument/inlineCompletion", completion_params(uri, 0, units - 1), QUICK).unwrap();
    assert!(split["error"]["message"].as_str().unwrap().contains("surrogate"), "{split}");
    assert!(harness.client.received().iter().all(|m| m["method"] != "window/showMessage" || m["params"]["type"] != 2));
    assert_alive(&mut harness);
}

#[test]
fn config_file_then_client_settings_with_bad_values_warned() {
    let toml = "strategy = \"pld\"\nmax_tokens = 9\n";
    let mut harness = start_with_config(Some(toml), None, json!({"model": "/nonexistent.gguf"}));
    let client = &mut harness.client;
    assert_eq!(status(client)["strategy"], "pld", "config.toml is read");
    client
        .notify(
            "workspace/didChangeConfiguration",
            json!({"settings": {"copilotd": {"strategy": "warp", "maxTokens": 0}}}),
        )
        .unwrap();
    let warning = client.wait_for_method("window/showMessage", QUICK, |m| {
        m["params"]["type"] == 2 && m["params"]["message"].as_str().unwrap_or("").contains("strategy")
    });
    assert!(warning.is_ok(), "a bad strategy is warned about");
    assert_eq!(status(client)["strategy"], "pld", "a bad value keeps the old one");
    client.notify("workspace/didChangeConfiguration", json!({"settings": {"strategy": "ar"}})).unwrap();
    let deadline = Instant::now() + QUICK;
    while status(client)["strategy"] != "ar" {
        assert!(Instant::now() < deadline, "strategy setting not applied");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A setting the editor clears goes back to config.toml's value.
    client.notify("workspace/didChangeConfiguration", json!({"settings": {"strategy": null}})).unwrap();
    let deadline = Instant::now() + QUICK;
    while status(client)["strategy"] != "pld" {
        assert!(Instant::now() < deadline, "a cleared strategy is config.toml's again");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A small deterministic generator (xorshift64*), so the fuzz run is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    fn string(&mut self) -> String {
        let alphabet = ["a", "Z", " ", "\n", "\t", "\r\n", "😀", "é", "\"", "\\", "def ", ":", "\u{0}", "\u{fffd}"];
        (0..self.below(12)).map(|_| *self.pick(&alphabet)).collect()
    }

    fn value(&mut self, depth: u32) -> Value {
        match self.below(if depth == 0 { 6 } else { 8 }) {
            0 => Value::Null,
            1 => json!(self.below(2) == 0),
            2 => json!(self.next() as i64),
            3 => json!(self.below(5) as i64 - 1),
            4 => json!(self.string()),
            5 => json!(f64::from(self.below(1000) as u32) / 7.0),
            6 => Value::Array((0..self.below(4)).map(|_| self.value(depth - 1)).collect()),
            _ => {
                let keys = [
                    "uri",
                    "textDocument",
                    "position",
                    "line",
                    "character",
                    "range",
                    "text",
                    "version",
                    "id",
                    "settings",
                ];
                let mut object = serde_json::Map::new();
                for _ in 0..self.below(5) {
                    object.insert((*self.pick(&keys)).to_owned(), self.value(depth - 1));
                }
                Value::Object(object)
            }
        }
    }

    /// Params that are often nearly right, so that handlers get past the first check.
    fn params(&mut self, uris: &[&str]) -> Value {
        if self.below(3) == 0 {
            return self.value(3);
        }
        let uri = *self.pick(uris);
        let position = json!({"line": self.below(4) as i64 - 1, "character": self.below(12)});
        json!({
            "textDocument": {"uri": uri, "languageId": "python", "version": self.below(100), "text": self.string()},
            "position": position,
            "context": {"triggerKind": self.below(3)},
            "contentChanges": [{"range": {"start": position, "end": position}, "text": self.string()}, {"text": self.string()}],
            "settings": {"maxTokens": self.value(0), "strategy": self.value(0)},
            "id": self.value(0),
        })
    }
}

#[test]
fn random_json_rpc_messages_never_crash_or_hang_the_server() {
    let mut harness = start(None, no_model());
    let client = &mut harness.client;
    let methods = [
        "textDocument/didOpen",
        "textDocument/didChange",
        "textDocument/didClose",
        "textDocument/didSave",
        "textDocument/inlineCompletion",
        "textDocument/completion",
        "textDocument/hover",
        "workspace/didChangeConfiguration",
        "workspace/didChangeWorkspaceFolders",
        "copilotd/status",
        "copilotd/indexedFile",
        "$/cancelRequest",
        "$/setTrace",
        "initialized",
        "copilotd/bogus",
        "",
    ];
    let uris = ["file:///tmp/fuzz/a.py", "file:///tmp/fuzz/b.py", "untitled:Untitled-1", "file:///tmp/fuzz/%zz"];
    let mut rng = Rng(0x00c0_ffee_d15e_a5e5);
    let mut pending = Vec::new();
    for n in 0..300 {
        let method = *rng.pick(&methods);
        match rng.below(10) {
            0 => {
                // Raw bytes: random JSON-ish text in a valid frame.
                let body = rng.string();
                client.send_raw(format!("Content-Length: {}\r\n\r\n{}", body.len(), body).as_bytes()).unwrap();
            }
            1..=3 => {
                let params = rng.params(&uris);
                client.send(&json!({"jsonrpc": "2.0", "method": method, "params": params})).unwrap();
            }
            _ => {
                let id = 100_000 + n;
                let params = rng.params(&uris);
                client.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
                pending.push(id);
            }
        }
    }
    for id in pending {
        let response = client.response(id, SLOW).unwrap_or_else(|err| panic!("request {id}: {err}"));
        assert!(response.get("result").is_some() || response.get("error").is_some(), "{response}");
    }
    assert_alive(&mut harness);
    assert!(harness.client.shutdown(QUICK).unwrap());
}
