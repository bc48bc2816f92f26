//! A newer request, an edit and the client's `$/cancelRequest` each stop a running completion.

use std::sync::Arc;

use copilotd_draft::cancel::Cancelled;
use serde_json::json;

use super::fake_service::{FakeService, Step};
use super::harness::{uri, Editor};

#[tokio::test]
async fn a_newer_request_supersedes_the_running_one() {
    let service = Arc::new(FakeService::with_script([Step::WaitForCancel, Step::Answer("pass")]));
    let mut editor = Editor::start(Arc::clone(&service)).await;
    editor.open("a.py", "def f():\n    ").await;
    let first = editor.complete("a.py", 1, 4).await;
    let second = editor.complete("a.py", 1, 4).await;
    assert_eq!(editor.error_code(first).await, -32800);
    let answer = editor.response(second).await;
    assert_eq!(answer["result"][0]["insertText"], "pass", "{answer}");
    assert_eq!(service.token(0).reason(), Some(Cancelled::Superseded));
    assert_eq!(service.jobs()[1].cursor, "def f():\n    ".len());
}

#[tokio::test]
async fn a_request_for_another_document_does_not_supersede() {
    let service = Arc::new(FakeService::with_script([Step::WaitForCancel, Step::Answer("x")]));
    let mut editor = Editor::start(Arc::clone(&service)).await;
    editor.open("a.py", "a").await;
    editor.open("b.py", "b").await;
    let waiting = editor.complete("a.py", 0, 1).await;
    let other = editor.complete("b.py", 0, 1).await;
    assert_eq!(editor.response(other).await["result"][0]["insertText"], "x");
    assert!(!service.token(0).is_cancelled());
    editor.notify("$/cancelRequest", json!({ "id": waiting })).await;
    assert_eq!(editor.error_code(waiting).await, -32800);
}

/// An editor whose completion request on `a.py` is running in the service.
async fn running_completion() -> (Arc<FakeService>, Editor, i64) {
    let service = Arc::new(FakeService::with_script([Step::WaitForCancel]));
    let mut editor = Editor::start(Arc::clone(&service)).await;
    editor.open("a.py", "x = ").await;
    let id = editor.complete("a.py", 0, 4).await;
    // Wait until the service has the job, so what follows cancels a running completion.
    while service.jobs().is_empty() {
        tokio::task::yield_now().await;
    }
    (service, editor, id)
}

#[tokio::test]
async fn an_edit_stops_the_completion_with_content_modified() {
    let (service, mut editor, id) = running_completion().await;
    let change = json!({
        "textDocument": { "uri": uri("a.py"), "version": 2 },
        "contentChanges": [{ "text": "x = 1" }],
    });
    editor.notify("textDocument/didChange", change).await;
    assert_eq!(editor.error_code(id).await, -32801);
    assert_eq!(service.token(0).reason(), Some(Cancelled::InputChanged));
}

#[tokio::test]
async fn cancel_request_abandons_the_generation() {
    let (service, mut editor, id) = running_completion().await;
    editor.notify("$/cancelRequest", json!({ "id": id })).await;
    assert_eq!(editor.error_code(id).await, -32800);
    assert_eq!(service.token(0).reason(), Some(Cancelled::Abandoned));
}
