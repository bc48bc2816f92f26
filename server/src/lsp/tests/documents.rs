//! Open documents as the editor sees them: a change that does not apply is reported once.

use std::sync::Arc;

use serde_json::{json, Value};

use super::fake_service::{FakeService, Step};
use super::harness::{uri, Editor};

/// An insertion at `line`, `character`.
fn insert(line: u32, character: u32, text: &str) -> Value {
    let at = json!({ "line": line, "character": character });
    json!([{ "range": { "start": at, "end": at }, "text": text }])
}

#[tokio::test]
async fn an_out_of_sync_document_is_reported_once_until_replaced() {
    let service = Arc::new(FakeService::with_script([Step::Answer("ok")]));
    let mut editor = Editor::start(Arc::clone(&service)).await;
    editor.open("a.py", "x = 1\n").await;
    editor.change("a.py", 2, insert(99, 0, "zzz")).await;
    for version in 3..23 {
        editor.change("a.py", version, insert(0, 0, "a")).await;
    }
    let stale = editor.complete("a.py", 0, 0).await;
    let answer = editor.response(stale).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("out of sync"), "{answer}");
    assert!(service.jobs().is_empty(), "no completion of a stale buffer");

    editor.change("a.py", 23, json!([{ "text": "y = 2\n" }])).await;
    let fresh = editor.complete("a.py", 0, 5).await;
    assert_eq!(editor.response(fresh).await["result"][0]["insertText"], "ok");
    editor.change("a.py", 24, insert(99, 0, "zzz")).await;
    // Warnings are sent in order: the second is the new bad change's, none came in between.
    for _ in 0..2 {
        let warning = editor.notification("window/showMessage").await;
        assert!(warning["message"].as_str().unwrap().contains("change range is invalid"), "{warning}");
    }
}

#[tokio::test]
async fn changes_to_a_document_that_is_not_open_are_reported_once_until_it_is_opened() {
    let service = Arc::new(FakeService::with_script([Step::Answer("ok")]));
    let mut editor = Editor::start(Arc::clone(&service)).await;
    for version in 1..21 {
        editor.change("a.py", version, insert(0, 0, "a")).await;
    }
    editor.open("a.py", "x = 1\n").await;
    editor.change("a.py", 2, insert(99, 0, "zzz")).await;
    editor.notify("textDocument/didClose", json!({ "textDocument": { "uri": uri("a.py") } })).await;
    editor.change("a.py", 3, insert(0, 0, "a")).await;
    // Warnings are sent in order: one for the twenty changes, one for the bad change while
    // open, one for the change after it was closed.
    for expected in ["is not open", "change range is invalid", "is not open"] {
        let warning = editor.notification("window/showMessage").await;
        assert!(warning["message"].as_str().unwrap().contains(expected), "{expected}: {warning}");
    }
}

#[tokio::test]
async fn documents_that_are_not_files_are_served() {
    let service = Arc::new(FakeService::with_script([Step::Answer("ok")]));
    let mut editor = Editor::start(Arc::clone(&service)).await;
    let uri = "untitled:/fake/a.py";
    let document = json!({ "uri": uri, "languageId": "python", "version": 1, "text": "x = " });
    editor.notify("textDocument/didOpen", json!({ "textDocument": document })).await;
    let params = json!({
        "textDocument": { "uri": uri },
        "position": { "line": 0, "character": 4 },
        "context": { "triggerKind": 2 },
    });
    let id = editor.request("textDocument/inlineCompletion", params).await;
    assert_eq!(editor.response(id).await["result"][0]["insertText"], "ok");
    assert_eq!(service.jobs()[0].text.as_str(), "x = ");
}

#[tokio::test]
async fn a_position_past_the_end_of_its_line_is_answered_at_the_lines_end() {
    let service = Arc::new(FakeService::with_script([Step::Answer("ok")]));
    let mut editor = Editor::start(Arc::clone(&service)).await;
    editor.open("a.py", "x = 1\ny = 2\n").await;
    let id = editor.complete("a.py", 0, 40).await;
    let item = &editor.response(id).await["result"][0];
    assert_eq!(item["insertText"], "ok");
    let end = json!({ "line": 0, "character": 5 });
    assert_eq!(item["range"], json!({ "start": end, "end": end }), "{item}");
    assert_eq!(service.jobs()[0].cursor, 5);
}
