//! How a session ends: `exit` after `shutdown` is a success, without it an error; either way
//! what the engine learned is saved, once.

use std::sync::Arc;

use serde_json::Value;

use super::super::SessionEnd;
use super::fake_service::FakeService;
use super::harness::Editor;

async fn editor() -> (Editor, Arc<FakeService>) {
    let service = Arc::new(FakeService::default());
    (Editor::start(Arc::clone(&service)).await, service)
}

#[tokio::test]
async fn exit_after_shutdown_is_a_success() {
    let (mut editor, service) = editor().await;
    let id = editor.request("shutdown", Value::Null).await;
    assert!(editor.response(id).await.get("result").is_some());
    editor.notify("exit", Value::Null).await;
    assert_eq!(editor.end().await, SessionEnd::AfterShutdown);
    assert_eq!(service.saves(), 1);
}

#[tokio::test]
async fn exit_or_the_end_of_input_without_shutdown_is_an_error_and_saves_what_was_learned() {
    let (mut editor, service) = editor().await;
    editor.notify("exit", Value::Null).await;
    assert_eq!(editor.end().await, SessionEnd::WithoutShutdown);
    assert_eq!(service.saves(), 1, "after `exit` without `shutdown`");
    let (editor, service) = self::editor().await;
    assert_eq!(editor.end().await, SessionEnd::WithoutShutdown);
    assert_eq!(service.saves(), 1, "at the end of input");
}
