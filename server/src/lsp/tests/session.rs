//! How a session ends: `exit` after `shutdown` is a success, without it an error.

use std::sync::Arc;

use serde_json::Value;

use super::super::SessionEnd;
use super::fake_service::FakeService;
use super::harness::Editor;

async fn editor() -> Editor {
    Editor::start(Arc::new(FakeService::default())).await
}

#[tokio::test]
async fn exit_after_shutdown_is_a_success() {
    let mut editor = editor().await;
    let id = editor.request("shutdown", Value::Null).await;
    assert!(editor.response(id).await.get("result").is_some());
    editor.notify("exit", Value::Null).await;
    assert_eq!(editor.end().await, SessionEnd::AfterShutdown);
}

#[tokio::test]
async fn exit_or_the_end_of_input_without_shutdown_is_an_error() {
    let mut editor = editor().await;
    editor.notify("exit", Value::Null).await;
    assert_eq!(editor.end().await, SessionEnd::WithoutShutdown);
    assert_eq!(self::editor().await.end().await, SessionEnd::WithoutShutdown);
}
