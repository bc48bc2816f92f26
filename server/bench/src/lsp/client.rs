//! A small blocking JSON-RPC client that drives `copilotd --stdio` as a child process, for the
//! LSP benchmark and the integration tests. Every wait has a timeout, so a hung server is an
//! error, never a hung caller. Requests from the server (`window/workDoneProgress/create`,
//! `workspace/configuration`, ...) are answered automatically and also recorded.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use copilotd_server::lsp::transport::{encode, Frame, Framer};

/// A running server and the messages it sent.
pub struct StdioClient {
    child: Child,
    stdin: Arc<Mutex<ChildStdin>>,
    incoming: Receiver<Value>,
    next_id: i64,
    /// Responses that arrived while waiting for something else, by id.
    responses: HashMap<i64, Value>,
    /// Notifications and server requests, in arrival order, not yet taken.
    messages: VecDeque<Value>,
}

/// The server's messages, one at a time, framed by the transport's own decoder; `None` at
/// the end of the stream or on anything malformed.
fn messages(mut stdout: impl Read) -> impl Iterator<Item = Value> {
    let mut framer = Framer::default();
    let mut chunk = vec![0u8; 64 << 10];
    std::iter::from_fn(move || loop {
        match framer.next_frame() {
            Some(Frame::Message(body, _)) => return serde_json::from_slice(&body).ok(),
            Some(Frame::Reject(_)) => return None,
            None => {}
        }
        match stdout.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(read) => framer.push(&chunk[..read]),
        }
    })
}

/// The automatic answer to a request from the server.
fn answer(request: &Value) -> Value {
    let result = match request["method"].as_str() {
        Some("workspace/configuration") => {
            let items = request["params"]["items"].as_array().map_or(0, Vec::len);
            Value::Array(vec![Value::Null; items])
        }
        Some("workspace/workspaceFolders") => Value::Array(Vec::new()),
        _ => Value::Null,
    };
    json!({"jsonrpc": "2.0", "id": request["id"].clone(), "result": result})
}

impl StdioClient {
    /// Starts `program args...` with piped stdin/stdout (stderr inherited, for logs).
    pub fn spawn(program: &Path, args: &[&str], envs: &[(&str, &str)]) -> Result<StdioClient> {
        let mut command = Command::new(program);
        command.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        for (name, value) in envs {
            command.env(name, value);
        }
        let mut child = command.spawn().with_context(|| format!("cannot start {}", program.display()))?;
        let stdin = Arc::new(Mutex::new(child.stdin.take().context("no stdin")?));
        let stdout = child.stdout.take().context("no stdout")?;
        let (sender, incoming) = mpsc::channel();
        let replies = Arc::clone(&stdin);
        std::thread::spawn(move || {
            for message in messages(stdout) {
                if message.get("method").is_some() && message.get("id").is_some() {
                    let reply = serde_json::to_vec(&answer(&message)).expect("json");
                    let mut stdin = copilotd_server::sync::lock(&replies);
                    let _ = stdin.write_all(&encode(&reply)).and_then(|()| stdin.flush());
                }
                if sender.send(message).is_err() {
                    return;
                }
            }
        });
        Ok(StdioClient { child, stdin, incoming, next_id: 1, responses: HashMap::new(), messages: VecDeque::new() })
    }

    /// Writes raw bytes to the server (for malformed-input tests).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<()> {
        let mut stdin = copilotd_server::sync::lock(&self.stdin);
        stdin.write_all(bytes).and_then(|()| stdin.flush()).context("the server closed its input")
    }

    /// Sends one JSON value as a frame.
    pub fn send(&mut self, message: &Value) -> Result<()> {
        let body = serde_json::to_vec(message)?;
        self.send_raw(&encode(&body))
    }

    /// Sends a request; returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> Result<i64> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        Ok(id)
    }

    pub fn notify(&mut self, method: &str, params: Value) -> Result<()> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    /// Files a message: responses with a numeric id by id, everything else in order.
    fn stash(&mut self, message: Value) {
        if message.get("method").is_none() {
            if let Some(id) = message.get("id").and_then(Value::as_i64) {
                self.responses.insert(id, message);
                return;
            }
        }
        self.messages.push_back(message);
    }

    /// Files one incoming message; `false` on timeout.
    fn pump(&mut self, deadline: Instant) -> Result<bool> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.incoming.recv_timeout(wait) {
            Ok(message) => {
                self.stash(message);
                Ok(true)
            }
            Err(RecvTimeoutError::Timeout) => Ok(false),
            Err(RecvTimeoutError::Disconnected) => bail!("the server closed its output"),
        }
    }

    /// The whole response object (with `result` or `error`) of request `id`.
    pub fn response(&mut self, id: i64, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(response) = self.responses.remove(&id) {
                return Ok(response);
            }
            if !self.pump(deadline)? {
                bail!("no response to request {id} within {timeout:?}");
            }
        }
    }

    /// The whole response object of request `id` if it arrives before `deadline`.
    pub fn response_until(&mut self, id: i64, deadline: Instant) -> Result<Option<Value>> {
        loop {
            if let Some(response) = self.responses.remove(&id) {
                return Ok(Some(response));
            }
            if !self.pump(deadline)? {
                return Ok(None);
            }
        }
    }

    /// Sends a request and waits for its response object.
    pub fn call(&mut self, method: &str, params: Value, timeout: Duration) -> Result<Value> {
        let id = self.request(method, params)?;
        self.response(id, timeout)
    }

    /// Sends a request and returns its `result`, or an error holding the server's error.
    pub fn call_ok(&mut self, method: &str, params: Value, timeout: Duration) -> Result<Value> {
        let response = self.call(method, params, timeout)?;
        match response.get("error") {
            Some(error) => Err(anyhow!("{method} failed: {error}")),
            None => Ok(response["result"].clone()),
        }
    }

    /// Takes the first message (notification, server request, or response without a numeric
    /// id) that satisfies `accept`, waiting up to `timeout`.
    pub fn wait_for(&mut self, timeout: Duration, accept: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(index) = self.messages.iter().position(&accept) {
                return Ok(self.messages.remove(index).expect("index is valid"));
            }
            if !self.pump(deadline)? {
                bail!("no matching message within {timeout:?}");
            }
        }
    }

    /// Takes the first message with this method that satisfies `accept` (see [`Self::wait_for`]).
    pub fn wait_for_method(
        &mut self,
        method: &str,
        timeout: Duration,
        accept: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        self.wait_for(timeout, |m| m["method"] == method && accept(m)).with_context(|| format!("waiting for {method}"))
    }

    /// Messages received so far (see [`Self::wait_for`]), without waiting or taking them.
    pub fn received(&mut self) -> Vec<Value> {
        while let Ok(message) = self.incoming.try_recv() {
            self.stash(message);
        }
        self.messages.iter().cloned().collect()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the server process is still running.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `initialize` (with work-done progress support) then `initialized`; returns the result.
    pub fn initialize(&mut self, root: Option<&Path>, options: Value, timeout: Duration) -> Result<Value> {
        self.initialize_folders(root.as_slice(), options, timeout)
    }

    /// [`initialize`](Self::initialize) with any number of workspace folders (the first is also
    /// the `rootUri`).
    pub fn initialize_folders(&mut self, roots: &[&Path], options: Value, timeout: Duration) -> Result<Value> {
        let root = roots.first().copied();
        let folders = (!roots.is_empty()).then(|| roots.iter().map(|root| workspace_folder(root)).collect::<Vec<_>>());
        let result = self.call_ok(
            "initialize",
            json!({
                "processId": std::process::id(),
                "rootUri": root.map(file_uri),
                "workspaceFolders": folders,
                "capabilities": {"window": {"workDoneProgress": true}},
                "initializationOptions": options,
            }),
            timeout,
        )?;
        self.notify("initialized", json!({}))?;
        Ok(result)
    }

    /// `shutdown`, `exit`, then waits for the process; returns its exit status success.
    pub fn shutdown(mut self, timeout: Duration) -> Result<bool> {
        self.call_ok("shutdown", Value::Null, timeout)?;
        Ok(self.exit(timeout)?.success())
    }

    /// `exit` (without `shutdown` unless sent before), then waits for the process.
    pub fn exit(&mut self, timeout: Duration) -> Result<std::process::ExitStatus> {
        self.notify("exit", Value::Null)?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("the server did not exit within {timeout:?} of `exit`");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        if self.is_alive() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A `WorkspaceFolder` for a directory.
pub fn workspace_folder(root: &Path) -> Value {
    let name = root.file_name().map_or_else(|| "workspace".into(), |name| name.to_string_lossy());
    json!({"uri": file_uri(root), "name": name})
}

/// A `file://` URI for an absolute path (percent-encoding what URIs do not allow).
pub fn file_uri(path: &Path) -> String {
    let mut uri = String::from("file://");
    for byte in path.to_string_lossy().bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(byte as char);
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}
