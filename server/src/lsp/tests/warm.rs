//! `copilotd/warm`: the place an editor names reaches the service as a job at that cursor; a
//! malformed one, or one about an unknown document or outside it, is ignored and the server
//! goes on answering.

use std::sync::Arc;

use serde_json::{json, Value};

use super::fake_service::FakeService;
use super::harness::{uri, Editor};
use crate::lsp::handlers::WARM_METHOD;

/// Sends `params`, then a status request: once it is answered, the notification was handled.
async fn warm(editor: &mut Editor, params: Value) {
    editor.notify(WARM_METHOD, params).await;
    let status = editor.request("copilotd/status", Value::Null).await;
    assert!(editor.response(status).await.get("result").is_some());
}

#[tokio::test]
async fn a_named_place_reaches_the_service_and_bad_ones_are_ignored() {
    let service = Arc::new(FakeService::default());
    let mut editor = Editor::start(Arc::clone(&service)).await;
    let text = "def f():\n    \u{e9} = 1\n";
    editor.open("a.py", text).await;

    // Line 1, character 5 (UTF-16): after "    é", byte 15 of the buffer.
    warm(&mut editor, json!({"textDocument": {"uri": uri("a.py")}, "position": {"line": 1, "character": 5}})).await;
    let warmed = service.warmed();
    assert_eq!(warmed.len(), 1);
    assert_eq!((warmed[0].text.as_str(), warmed[0].cursor), (text, 15));
    assert_eq!(warmed[0].path.as_deref(), Some("a.py"));

    for bad in [
        json!({"textDocument": {"uri": uri("unknown.py")}, "position": {"line": 0, "character": 0}}),
        json!({"textDocument": {"uri": uri("a.py")}, "position": {"line": 9, "character": 0}}),
        json!({"textDocument": {"uri": uri("a.py")}}),
        json!([1, 2]),
    ] {
        warm(&mut editor, bad).await;
    }
    assert_eq!(service.warmed().len(), 1);
    let answered = editor.complete("a.py", 1, 5).await;
    assert!(editor.response(answered).await.get("result").is_some());
}

#[tokio::test]
async fn named_places_are_ignored_while_the_warm_setting_is_off() {
    let service = Arc::new(FakeService::default());
    let mut editor = Editor::start(Arc::clone(&service)).await;
    editor.open("a.py", "x = 1\n").await;
    let place = json!({"textDocument": {"uri": uri("a.py")}, "position": {"line": 0, "character": 4}});
    let set_warm = |on: bool| json!({"settings": {"copilotd": {"warm": on}}});

    editor.notify("workspace/didChangeConfiguration", set_warm(false)).await;
    warm(&mut editor, place.clone()).await;
    assert!(service.warmed().is_empty());

    editor.notify("workspace/didChangeConfiguration", set_warm(true)).await;
    warm(&mut editor, place).await;
    assert_eq!(service.warmed().len(), 1);
}
