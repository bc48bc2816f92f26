//! Every JSON-RPC error code the server answers, each from its cause.

use std::sync::Arc;

use serde_json::json;

use super::fake_service::{FakeService, Step};
use super::harness::Editor;
use crate::lsp::errors::REQUEST_FAILED;

/// The error code the server answers to one completion the service handles with `step`.
async fn completion_error(step: Step) -> (i64, String) {
    let mut editor = Editor::start(Arc::new(FakeService::with_script([step]))).await;
    editor.open("a.py", "x = ").await;
    let id = editor.complete("a.py", 0, 4).await;
    let answer = editor.response(id).await;
    let code = answer["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error: {answer}"));
    (code, answer["error"]["message"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn service_errors_map_to_their_codes() {
    assert_eq!(completion_error(Step::Unavailable).await, (REQUEST_FAILED, "no model in this test".to_owned()));
    let (code, message) = completion_error(Step::Fail).await;
    assert_eq!((code, message.as_str()), (-32603, "completion failed: the fake failed"));
    assert_eq!(completion_error(Step::InvalidCursor).await.0, -32602);
    let (code, message) = completion_error(Step::Crashed).await;
    assert_eq!(code, -32603);
    assert!(message.contains("the fake crashed"), "{message}");
    let (code, message) = completion_error(Step::Panic).await;
    assert_eq!(code, -32603);
    assert!(message.contains("the fake panicked"), "{message}");
}

#[tokio::test]
async fn bad_requests_are_answered_and_the_server_goes_on() {
    let service = Arc::new(FakeService::with_script([Step::Answer("ok")]));
    let mut editor = Editor::start(Arc::clone(&service)).await;
    // A document never opened, and a position past its end: invalid params.
    let unknown = editor.complete("never.py", 0, 0).await;
    assert_eq!(editor.error_code(unknown).await, -32602);
    editor.open("a.py", "x").await;
    let past_end = editor.complete("a.py", 3, 0).await;
    assert_eq!(editor.error_code(past_end).await, -32602);
    let unknown_method = editor.request("copilotd/nothing", json!({})).await;
    assert_eq!(editor.error_code(unknown_method).await, -32601);
    editor.send_raw("{not json").await;
    assert_eq!(editor.response_to(json!(null)).await["error"]["code"], -32700);
    // A message without `method` (and no result or error) is an invalid request.
    editor.send_raw(r#"{"jsonrpc":"2.0","id":77,"params":{}}"#).await;
    assert_eq!(editor.error_code(77).await, -32600);
    assert!(service.jobs().is_empty());
    let fine = editor.complete("a.py", 0, 1).await;
    assert_eq!(editor.response(fine).await["result"][0]["insertText"], "ok");
}
