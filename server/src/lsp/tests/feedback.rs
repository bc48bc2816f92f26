//! `copilotd/suggestionFeedback`: every item carries the id an editor echoes back with its
//! verdict; the verdict reaches the service with the suggestion's text, and feedback on an
//! unknown, expired or settled suggestion is ignored with a debug log line.

use std::sync::Arc;

use serde_json::{json, Value};

use super::captured_log::CapturedLog;
use super::fake_service::{FakeService, Step};
use super::harness::Editor;
use crate::completion::feedback::Verdict;
use crate::lsp::suggestions::{ITEM_COMMAND, METHOD};

/// The id the answer's item carries, checking the item's command.
fn item_id(answer: &Value) -> u64 {
    let command = &answer["result"][0]["command"];
    assert_eq!(command["command"], ITEM_COMMAND, "{answer}");
    command["arguments"][0]["id"].as_u64().unwrap_or_else(|| panic!("no id in {answer}"))
}

/// Sends `report`, then waits until the service holds `verdicts` verdicts (the notifications
/// are handled in order, so every report before it has been handled too).
async fn report(editor: &mut Editor, service: &FakeService, report: Value, verdicts: usize) {
    editor.notify(METHOD, report).await;
    let status = editor.request("copilotd/status", Value::Null).await;
    editor.response(status).await;
    for _ in 0..1000 {
        if service.verdicts().len() >= verdicts {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(service.verdicts().len(), verdicts);
}

#[tokio::test]
async fn verdicts_reach_the_service_and_bad_reports_are_logged() {
    let log = CapturedLog::default();
    let _installed = tracing::subscriber::set_default(log.subscriber());

    let service = Arc::new(FakeService::with_script([Step::Answer("x = 1\ny = 2\n"), Step::Answer("pass")]));
    let mut editor = Editor::start(Arc::clone(&service)).await;
    editor.open("a.py", "def f():\n    ").await;
    let first = editor.complete("a.py", 1, 4).await;
    let id = item_id(&editor.response(first).await);

    // A line, then the rest.
    report(&mut editor, &service, json!({"id": id, "kind": "acceptedLine", "length": 6}), 1).await;
    report(&mut editor, &service, json!({"id": id, "kind": "accepted"}), 2).await;
    let text = "x = 1\ny = 2\n".to_owned();
    assert_eq!(service.verdicts(), vec![(text.clone(), Verdict::Accepted(0..6)), (text, Verdict::Accepted(6..12))]);

    // Settled, unknown, malformed: ignored, with a reason in the log.
    report(&mut editor, &service, json!({"id": id, "kind": "dismissed"}), 2).await;
    report(&mut editor, &service, json!({"id": id + 100, "kind": "dismissed"}), 2).await;
    report(&mut editor, &service, json!({"kind": "dismissed"}), 2).await;
    let logged = log.text();
    assert!(logged.contains(&format!("suggestion {id} is unknown, expired or settled")), "{logged}");
    assert!(logged.contains(&format!("suggestion {} is unknown", id + 100)), "{logged}");
    assert!(logged.contains("no numeric \"id\""), "{logged}");
    assert!(logged.contains("DEBUG"), "{logged}");

    // A later suggestion has its own id; dismissing it reaches the service.
    let second = editor.complete("a.py", 1, 4).await;
    let other = item_id(&editor.response(second).await);
    assert_ne!(other, id);
    report(&mut editor, &service, json!({"id": other, "kind": "dismissed"}), 3).await;
    assert_eq!(service.verdicts()[2], ("pass".to_owned(), Verdict::Dismissed { from: 0 }));
}
