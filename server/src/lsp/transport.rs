//! A framing guard between the editor's byte stream and tower-lsp.
//!
//! tower-lsp's reader ends the whole session on the first message it cannot decode (its codec
//! error ends tokio-util's `FramedRead` stream), so a single malformed header or JSON body would
//! kill the server. This guard does the framing itself: it forwards only messages that tower-lsp
//! will accept, answers the rest with a JSON-RPC error (`-32700` parse error, `-32600` invalid
//! request), and resynchronises on the next `Content-Length` header. An empty `params` of a
//! method that takes none is dropped on the way, as tower-lsp refuses it. Outgoing frames from
//! tower-lsp and from the guard are merged whole, so they never interleave.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tower_lsp_server::jsonrpc::{Error, Id, Request, Response};

/// Largest message body accepted (a 10 MB document with JSON escaping fits comfortably).
pub const MAX_BODY: usize = 256 << 20;
/// Longest header block accepted before the bytes are treated as garbage.
const MAX_HEADER: usize = 8 << 10;
const HEADER_NAME: &[u8] = b"content-length";

/// What the framer made of the next bytes.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A well-formed JSON-RPC message body, to forward.
    Message(Vec<u8>, Kind),
    /// Bytes that are not a usable message, with the error to answer.
    Reject(Response),
}

/// What a forwarded message is, as far as the guard cares.
#[derive(Debug, PartialEq)]
pub enum Kind {
    /// A response to the request with this id.
    Response(Id),
    /// The `initialize` request with this id.
    Initialize(Id),
    Other,
}

/// Holds the client's messages after `initialize` until tower-lsp has answered it: tower-lsp
/// drops notifications and refuses requests that it reads before its `initialize` handler ran,
/// and a client that sends `initialized` right behind `initialize` would lose them.
#[derive(Debug, Default)]
pub struct InitializeGate {
    pending: std::sync::Mutex<Option<Id>>,
    answered: tokio::sync::Notify,
}

/// Longest hold (the `initialize` handler does no slow work).
const GATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl InitializeGate {
    fn pending(&self) -> std::sync::MutexGuard<'_, Option<Id>> {
        crate::sync::lock(&self.pending)
    }

    /// Starts a hold for the response to `id` (before the request is forwarded, so the
    /// response cannot be missed).
    fn expect(&self, id: Id) {
        *self.pending() = Some(id);
    }

    /// Waits until the expected response has been written (or the hold times out).
    async fn wait(&self) {
        let deadline = tokio::time::Instant::now() + GATE_TIMEOUT;
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if self.pending().is_none() {
                return;
            }
            if tokio::time::timeout_at(deadline, answered).await.is_err() {
                tracing::warn!("no answer to `initialize` within {GATE_TIMEOUT:?}; reading on");
                self.pending().take();
                return;
            }
        }
    }

    fn saw_response(&self, id: &Id) {
        let mut pending = self.pending();
        if pending.as_ref() == Some(id) {
            pending.take();
            self.answered.notify_waiters();
        }
    }
}

/// Incremental decoder for `Content-Length`-framed messages that never gives up on a stream:
/// the one framing codec of copilotd, shared by the server's transport and the test client
/// (bytes go in with [`Framer::push`], whole frames come out of [`Framer::next_frame`]).
///
/// Each bad frame is rejected once: after a reject, the bytes up to the next `Content-Length`
/// header are dropped without another (the rest of an oversized or misframed message).
#[derive(Debug, Default)]
pub struct Framer {
    buffer: Vec<u8>,
    /// Length of the body being waited for, once its header has been read.
    body: Option<usize>,
    /// Set by a reject: bytes are dropped silently until a header name starts the buffer.
    resynchronising: bool,
}

impl Framer {
    /// Appends bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Drops at least `at_least` bytes, then everything up to the next `Content-Length`; with
    /// none in sight, keeps only a tail that may be the start of one split across reads.
    fn skip_garbage(&mut self, at_least: usize) {
        let start = at_least.min(self.buffer.len());
        let drop_to = match find_header_name(&self.buffer[start..]) {
            Some(index) => start + index,
            None => {
                let rest = &self.buffer[start..];
                let keep = (1..HEADER_NAME.len().min(rest.len() + 1))
                    .rev()
                    .find(|&n| rest[rest.len() - n..].eq_ignore_ascii_case(&HEADER_NAME[..n]))
                    .unwrap_or(0);
                self.buffer.len() - keep
            }
        };
        self.buffer.drain(..drop_to);
    }

    /// Answers a bad frame with `error`, and drops what follows it up to the next header.
    fn reject(&mut self, error: Error) -> Frame {
        self.resynchronising = true;
        Frame::Reject(self::error(Id::Null, error))
    }

    /// While resynchronising, drops bytes up to the next header name; whether one starts the
    /// buffer now (so framing can go on).
    fn resynchronised(&mut self) -> bool {
        if self.resynchronising {
            self.skip_garbage(0);
            self.resynchronising = find_header_name(&self.buffer) != Some(0);
        }
        !self.resynchronising
    }

    /// The next complete frame, if the buffer holds one (`None` until more bytes are pushed).
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(length) = self.body {
                if self.buffer.len() < length {
                    return None;
                }
                let body: Vec<u8> = self.buffer.drain(..length).collect();
                self.body = None;
                let frame = check_body(body);
                // A body that is not JSON may have been misframed (a wrong `Content-Length`).
                self.resynchronising = is_parse_error(&frame);
                return Some(frame);
            }
            if !self.resynchronised() {
                return None;
            }
            let Some(end) = find(&self.buffer, b"\r\n\r\n") else {
                if self.buffer.len() > MAX_HEADER {
                    self.skip_garbage(1);
                    return Some(self.reject(Error::parse_error()));
                }
                return None;
            };
            match content_length(&self.buffer[..end]) {
                Some(0) => {
                    self.buffer.drain(..end + 4);
                    return Some(Frame::Reject(error(Id::Null, Error::invalid_request())));
                }
                Some(length) if length <= MAX_BODY => {
                    self.buffer.drain(..end + 4);
                    self.body = Some(length);
                }
                _ => {
                    // Resynchronise at the next header name (possibly inside this block, after
                    // leading garbage); an oversized body is dropped on the way.
                    self.skip_garbage(1);
                    return Some(self.reject(Error::parse_error()));
                }
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

fn find_header_name(haystack: &[u8]) -> Option<usize> {
    haystack.windows(HEADER_NAME.len()).position(|window| window.eq_ignore_ascii_case(HEADER_NAME))
}

/// The `Content-Length` of a header block (names are case-insensitive, other headers ignored).
fn content_length(header: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(header).ok()?;
    let mut length = None;
    for line in text.split("\r\n") {
        let (name, value) = line.split_once(':')?;
        if name.trim().eq_ignore_ascii_case("content-length") {
            length = Some(value.trim().parse().ok()?);
        }
    }
    length
}

/// Accepts a body only if tower-lsp's own decoding will: like its `Message`, a response first,
/// then a request or notification.
fn check_body(body: Vec<u8>) -> Frame {
    if let Ok(response) = serde_json::from_slice::<Response>(&body) {
        let (id, _) = response.into_parts();
        return Frame::Message(body, Kind::Response(id));
    }
    match serde_json::from_slice::<Request>(&body) {
        // LSP: a request for a `$/` method the receiver does not implement must be answered
        // with MethodNotFound; the server implements `$/` methods only as notifications, and
        // tower-lsp would leave such a request unanswered.
        Ok(request) if request.method().starts_with("$/") && request.id().is_some() => {
            let id = request.id().cloned().unwrap_or(Id::Null);
            Frame::Reject(error(id, Error::method_not_found()))
        }
        // tower-lsp reads a missing `method` as "" and would answer MethodNotFound.
        Ok(request) if request.method().is_empty() && !has_method(&body) => {
            Frame::Reject(error(request.id().cloned().unwrap_or(Id::Null), Error::invalid_request()))
        }
        Ok(request) if takes_no_params(request.method()) && has_empty_params(&request) => {
            Frame::Message(without_params(request), Kind::Other)
        }
        Ok(request) => match request.id() {
            Some(id) if request.method() == "initialize" => {
                let id = id.clone();
                Frame::Message(body, Kind::Initialize(id))
            }
            _ => Frame::Message(body, Kind::Other),
        },
        Err(err) if err.is_syntax() || err.is_eof() => Frame::Reject(error(Id::Null, Error::parse_error())),
        Err(err) => {
            let id = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|value| value.get("id").cloned())
                .and_then(|id| serde_json::from_value::<Id>(id).ok())
                .unwrap_or(Id::Null);
            tracing::warn!("invalid JSON-RPC message: {err}");
            Frame::Reject(error(id, Error::invalid_request()))
        }
    }
}

/// Methods without parameters. tower-lsp accepts only a missing or `null` `params` for them, and
/// some clients send `{}` or `[]`, which would cost them the call (for `exit`, the exit itself).
const WITHOUT_PARAMS: [&str; 4] = ["shutdown", "exit", super::status::METHOD, super::handlers::REINDEX_METHOD];

fn takes_no_params(method: &str) -> bool {
    WITHOUT_PARAMS.contains(&method)
}

fn has_empty_params(request: &Request) -> bool {
    match request.params() {
        Some(serde_json::Value::Object(fields)) => fields.is_empty(),
        Some(serde_json::Value::Array(items)) => items.is_empty(),
        _ => false,
    }
}

/// The request's body with its `params` left out.
fn without_params(request: Request) -> Vec<u8> {
    let (method, id, _) = request.into_parts();
    let request = match id {
        Some(id) => Request::build(method).id(id).finish(),
        None => Request::build(method).finish(),
    };
    serde_json::to_vec(&request).expect("requests serialize")
}

/// Whether a body was answered with a parse error (it is not JSON).
fn is_parse_error(frame: &Frame) -> bool {
    *frame == Frame::Reject(error(Id::Null, Error::parse_error()))
}

fn has_method(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|value| value.get("method").is_some())
}

fn error(id: Id, error: Error) -> Response {
    Response::from_error(id, error)
}

/// One message body as a `Content-Length` frame.
pub fn encode(body: &[u8]) -> Vec<u8> {
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(body);
    frame
}

/// Reads the editor's stream, forwards good messages to `server`, sends error replies to
/// `replies`. Returns at end of input or when the server stops reading.
pub async fn read_client<R, W>(
    mut input: R,
    mut server: W,
    replies: mpsc::Sender<Vec<u8>>,
    gate: std::sync::Arc<InitializeGate>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut framer = Framer::default();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let read = match input.read(&mut chunk).await {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) => {
                tracing::error!("reading the client stream failed: {err}");
                break;
            }
        };
        framer.push(&chunk[..read]);
        while let Some(frame) = framer.next_frame() {
            match frame {
                Frame::Message(body, kind) => {
                    let initialize = matches!(kind, Kind::Initialize(_));
                    if let Kind::Initialize(id) = kind {
                        gate.expect(id);
                    }
                    if server.write_all(&encode(&body)).await.is_err() {
                        return;
                    }
                    if initialize {
                        gate.wait().await;
                    }
                }
                Frame::Reject(response) => {
                    tracing::warn!("rejected a malformed message from the client");
                    let body = serde_json::to_vec(&response).expect("responses serialize");
                    if replies.send(encode(&body)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
    let _ = server.shutdown().await;
}

/// Splits tower-lsp's (well-formed) output into whole frames.
pub async fn read_server<R>(mut output: R, frames: mpsc::Sender<Vec<u8>>, gate: std::sync::Arc<InitializeGate>)
where
    R: AsyncRead + Unpin,
{
    let mut framer = Framer::default();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        match output.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => framer.push(&chunk[..read]),
        }
        while let Some(frame) = framer.next_frame() {
            match frame {
                Frame::Message(body, kind) => {
                    if frames.send(encode(&body)).await.is_err() {
                        return;
                    }
                    if let Kind::Response(id) = kind {
                        gate.saw_response(&id);
                    }
                }
                Frame::Reject(_) => tracing::error!("tower-lsp wrote a malformed frame"),
            }
        }
    }
}

/// Writes whole frames to the editor until the server's frame stream ends.
pub async fn write_client<W>(
    mut output: W,
    mut server_frames: mpsc::Receiver<Vec<u8>>,
    mut replies: mpsc::Receiver<Vec<u8>>,
) where
    W: AsyncWrite + Unpin,
{
    loop {
        let frame = tokio::select! {
            frame = server_frames.recv() => match frame {
                Some(frame) => frame,
                None => break,
            },
            Some(frame) = replies.recv() => frame,
        };
        if output.write_all(&frame).await.is_err() || output.flush().await.is_err() {
            tracing::error!("writing to the client failed");
            return;
        }
    }
    let _ = output.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &str) -> Vec<u8> {
        encode(body.as_bytes())
    }

    fn all(framer: &mut Framer) -> Vec<Frame> {
        std::iter::from_fn(|| framer.next_frame()).collect()
    }

    fn code(frame: &Frame) -> Option<i64> {
        match frame {
            Frame::Reject(response) => {
                let value = serde_json::to_value(response).unwrap();
                value["error"]["code"].as_i64()
            }
            Frame::Message(..) => None,
        }
    }

    #[test]
    fn passes_good_messages_split_anywhere() {
        let good = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        let bytes = [frame(good), frame(r#"{"jsonrpc":"2.0","method":"exit"}"#)].concat();
        for split in 0..bytes.len() {
            let mut framer = Framer::default();
            framer.push(&bytes[..split]);
            let mut frames = all(&mut framer);
            framer.push(&bytes[split..]);
            frames.extend(all(&mut framer));
            assert_eq!(frames.len(), 2, "split at {split}");
            assert_eq!(frames[0], Frame::Message(good.as_bytes().to_vec(), Kind::Initialize(Id::Number(1))));
        }
    }

    #[test]
    fn rejects_bad_bodies_and_recovers() {
        let mut framer = Framer::default();
        framer.push(&frame("{not json"));
        framer.push(&encode(b"\xff\xfe"));
        framer.push(&frame(r#"{"jsonrpc":"1.0","id":7,"method":"x"}"#));
        framer.push(&frame(r#"[1,2]"#));
        framer.push(&frame(r#"{"jsonrpc":"2.0","id":8,"method":"$/cancelRequest","params":{"id":1}}"#));
        framer.push(&frame(r#"{"jsonrpc":"2.0","id":9,"params":{}}"#));
        framer.push(&frame(r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#));
        let frames = all(&mut framer);
        let codes: Vec<_> = frames.iter().map(code).collect();
        let expected = [Some(-32700), Some(-32700), Some(-32600), Some(-32600), Some(-32601), Some(-32600), None];
        assert_eq!(codes, expected);
        let value = serde_json::to_value(match &frames[2] {
            Frame::Reject(response) => response,
            Frame::Message(..) => unreachable!(),
        })
        .unwrap();
        assert_eq!(value["id"], 7);
    }

    #[test]
    fn rejects_bad_headers_and_resynchronises() {
        let good = r#"{"jsonrpc":"2.0","method":"exit"}"#;
        let mut framer = Framer::default();
        framer.push(b"Content-Type: text/plain\r\n\r\n");
        framer.push(b"Content-Length: banana\r\n\r\n");
        framer.push(b"garbage garbage\r\n\r\n");
        framer.push(b"Content-Length: 99999999999999\r\n\r\n");
        framer.push(b"content-length: 0\r\n\r\n");
        framer.push(&frame(good));
        let frames = all(&mut framer);
        assert_eq!(frames.last(), Some(&Frame::Message(good.as_bytes().to_vec(), Kind::Other)));
        assert!(frames[..frames.len() - 1].iter().all(|f| code(f).is_some()));
    }

    /// The frames of `bytes` pushed in reads of 64 KiB (as the transport reads), checking that
    /// the buffer stays bounded while no message is due.
    fn read_in_chunks(framer: &mut Framer, bytes: &[u8]) -> Vec<Frame> {
        let mut frames = Vec::new();
        for chunk in bytes.chunks(64 << 10) {
            framer.push(chunk);
            frames.extend(all(framer));
            assert!(framer.buffer.len() <= MAX_HEADER + (64 << 10), "buffered {}", framer.buffer.len());
        }
        frames
    }

    #[test]
    fn endless_garbage_without_headers_is_bounded() {
        let mut framer = Framer::default();
        let mut errors = 0;
        for _ in 0..100 {
            framer.push(&[b'x'; 1000]);
            errors += all(&mut framer).len();
        }
        assert!(framer.buffer.len() <= MAX_HEADER + 1000);
        framer.push(b"garbage\r\n\r\nmore garbage Content-Le");
        errors += all(&mut framer).len();
        assert_eq!(errors, 1, "one error per run of garbage");
        assert_eq!(framer.buffer, b"Content-Le");
        framer.push(b"ngth: 2\r\n\r\n{}");
        assert_eq!(all(&mut framer).len(), 1);
        framer.push(&frame(r#"{"jsonrpc":"2.0","method":"exit"}"#));
        assert!(matches!(all(&mut framer).last(), Some(Frame::Message(..))));
    }

    #[test]
    fn an_oversized_message_is_one_error() {
        let mut framer = Framer::default();
        let header = format!("Content-Length: {}\r\n\r\n", MAX_BODY + 1);
        let body =
            [br#"{"jsonrpc":"2.0","id":1,"method":"x","params":""#.as_slice(), &[b'a'; 4 << 20], b"\"}"].concat();
        let mut frames = read_in_chunks(&mut framer, &[header.as_bytes(), &body].concat());
        frames.extend(read_in_chunks(&mut framer, &frame(r#"{"jsonrpc":"2.0","method":"exit"}"#)));
        let codes: Vec<_> = frames.iter().map(code).collect();
        assert_eq!(codes, [Some(-32700), None]);
    }

    #[test]
    fn a_content_length_too_long_costs_one_error_and_the_message_it_ran_into() {
        let mut framer = Framer::default();
        let short = r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#;
        let lying = format!("Content-Length: {}\r\n\r\n{short}", short.len() + 40).into_bytes();
        let text = "x = 1\\n".repeat(300_000);
        let open = format!(r#"{{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{{"text":"{text}"}}}}"#);
        let bytes = [lying, frame(&open), frame(r#"{"jsonrpc":"2.0","method":"exit"}"#)].concat();
        let codes: Vec<_> = read_in_chunks(&mut framer, &bytes).iter().map(code).collect();
        assert_eq!(codes, [Some(-32700), None]);
    }

    #[test]
    fn a_rejected_body_does_not_hide_the_next_message() {
        let mut framer = Framer::default();
        framer.push(&frame("{not json"));
        framer.push(&frame(r#"{"jsonrpc":"2.0","method":"exit"}"#));
        let codes: Vec<_> = all(&mut framer).iter().map(code).collect();
        assert_eq!(codes, [Some(-32700), None]);
    }
}
