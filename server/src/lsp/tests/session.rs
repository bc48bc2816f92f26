//! How a session ends: `exit` after `shutdown` is a success, without it an error; either way
//! what the engine learned is saved, once.

use std::sync::Arc;

use serde_json::{json, Value};

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
async fn methods_without_params_accept_an_empty_object_or_array() {
    let (mut editor, service) = editor().await;
    for params in [json!({}), json!([])] {
        let id = editor.request(super::super::status::METHOD, params).await;
        assert!(editor.response(id).await.get("result").is_some());
    }
    let id = editor.request(super::super::handlers::REINDEX_METHOD, json!({})).await;
    assert!(editor.response(id).await.get("result").is_some());
    let id = editor.request(super::super::status::METHOD, json!({ "verbose": true })).await;
    assert_eq!(editor.error_code(id).await, -32602, "parameters it does not take are still refused");
    let id = editor.request("shutdown", json!({})).await;
    assert!(editor.response(id).await.get("result").is_some());
    editor.notify("exit", json!({})).await;
    assert_eq!(editor.end().await, SessionEnd::AfterShutdown);
    assert_eq!(service.saves(), 1);
}

#[tokio::test]
async fn a_second_initialized_loads_nothing_again() {
    let (mut editor, service) = editor().await;
    editor.notify("initialized", serde_json::json!({})).await;
    // A request answered after the notification: it was handled, and a load it started would
    // have been asked for within the wait.
    let id = editor.request(super::super::status::METHOD, Value::Null).await;
    editor.response(id).await;
    for _ in 0..50 {
        if service.loads() > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(service.loads(), 1);
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
