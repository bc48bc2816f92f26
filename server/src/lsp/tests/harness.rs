//! An in-memory editor: frames JSON-RPC messages to [`serve_with`] and reads its answers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::super::transport::{encode, Frame, Framer};
use super::super::{serve_with, SessionEnd};
use super::fake_service::FakeService;
use crate::config::Config;

/// Longest wait for an answer: a hung server fails the test instead of hanging it.
const TIMEOUT: Duration = Duration::from_secs(10);

pub struct Editor {
    server: tokio::task::JoinHandle<SessionEnd>,
    to_server: DuplexStream,
    from_server: DuplexStream,
    framer: Framer,
    next_id: i64,
    /// Messages read while waiting for something else.
    unread: VecDeque<Value>,
}

impl Editor {
    /// Starts a server on `service` and goes through `initialize`/`initialized`.
    pub async fn start(service: Arc<FakeService>) -> Editor {
        let (to_server, server_input) = tokio::io::duplex(1 << 20);
        let (server_output, from_server) = tokio::io::duplex(1 << 20);
        let server = tokio::spawn(serve_with(server_input, server_output, Config::default(), service));
        let mut editor =
            Editor { server, to_server, from_server, framer: Framer::default(), next_id: 1, unread: VecDeque::new() };
        let id = editor.request("initialize", json!({ "capabilities": {} })).await;
        assert!(editor.response(id).await.get("result").is_some());
        editor.notify("initialized", json!({})).await;
        editor
    }

    /// Closes the input and waits for the server to end.
    pub async fn end(self) -> SessionEnd {
        drop(self.to_server);
        tokio::time::timeout(TIMEOUT, self.server).await.expect("the session ends").expect("the server runs")
    }

    pub async fn send_raw(&mut self, body: &str) {
        self.to_server.write_all(&encode(body.as_bytes())).await.expect("the server reads");
    }

    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.send_raw(&message.to_string()).await;
        id
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        let message = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        self.send_raw(&message.to_string()).await;
    }

    pub async fn open(&mut self, name: &str, text: &str) {
        let document = json!({ "uri": uri(name), "languageId": "python", "version": 1, "text": text });
        self.notify("textDocument/didOpen", json!({ "textDocument": document })).await;
    }

    pub async fn change(&mut self, name: &str, version: i32, changes: Value) {
        let document = json!({ "uri": uri(name), "version": version });
        self.notify("textDocument/didChange", json!({ "textDocument": document, "contentChanges": changes })).await;
    }

    pub async fn complete(&mut self, name: &str, line: u32, character: u32) -> i64 {
        let params = json!({
            "textDocument": { "uri": uri(name) },
            "position": { "line": line, "character": character },
            "context": { "triggerKind": 2 },
        });
        self.request("textDocument/inlineCompletion", params).await
    }

    /// The answer to request `id` (a response with `id: null` when `id` is `None`).
    pub async fn response_to(&mut self, id: Value) -> Value {
        if let Some(index) = self.unread.iter().position(|m| m.get("id") == Some(&id) && m.get("method").is_none()) {
            return self.unread.remove(index).unwrap();
        }
        tokio::time::timeout(TIMEOUT, async {
            loop {
                let message = self.read().await;
                if message.get("id") == Some(&id) && message.get("method").is_none() {
                    return message;
                }
                self.unread.push_back(message);
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no answer to request {id} within {TIMEOUT:?}"))
    }

    /// The params of the next notification `method` from the server.
    pub async fn notification(&mut self, method: &str) -> Value {
        let is_it = |m: &Value| m.get("method").and_then(Value::as_str) == Some(method) && m.get("id").is_none();
        if let Some(index) = self.unread.iter().position(is_it) {
            return self.unread.remove(index).unwrap()["params"].take();
        }
        tokio::time::timeout(TIMEOUT, async {
            loop {
                let mut message = self.read().await;
                if is_it(&message) {
                    return message["params"].take();
                }
                self.unread.push_back(message);
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {method} within {TIMEOUT:?}"))
    }

    pub async fn response(&mut self, id: i64) -> Value {
        self.response_to(json!(id)).await
    }

    /// The error code of the answer to `id`.
    pub async fn error_code(&mut self, id: i64) -> i64 {
        let answer = self.response(id).await;
        answer["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error: {answer}"))
    }

    async fn read(&mut self) -> Value {
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            if let Some(frame) = self.framer.next_frame() {
                match frame {
                    Frame::Message(body, _) => return serde_json::from_slice(&body).expect("the server writes JSON"),
                    Frame::Reject(response) => panic!("the server wrote a malformed frame: {response:?}"),
                }
            }
            let read = self.from_server.read(&mut chunk).await.expect("the server writes");
            assert!(read > 0, "the server closed its output");
            self.framer.push(&chunk[..read]);
        }
    }
}

pub fn uri(name: &str) -> String {
    format!("file:///fake/{name}")
}
