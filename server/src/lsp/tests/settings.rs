//! Client settings reach the completion jobs; a bad value is a warning and the previous value
//! stays.

use std::sync::Arc;

use serde_json::json;

use super::fake_service::FakeService;
use super::harness::Editor;
use crate::completion::Sampling;

#[tokio::test]
async fn sampling_settings_reach_the_jobs_and_bad_values_keep_the_previous_ones() {
    let service = Arc::new(FakeService::default());
    let mut editor = Editor::start(Arc::clone(&service)).await;
    editor.open("a.py", "x = ").await;
    let settings = json!({ "copilotd": { "temperature": 0.8, "topP": 0.9, "seed": 4 } });
    editor.notify("workspace/didChangeConfiguration", json!({ "settings": settings })).await;
    let id = editor.complete("a.py", 0, 4).await;
    editor.response(id).await;

    let bad = json!({ "copilotd": { "temperature": -1, "topP": 0, "seed": 2.5 } });
    editor.notify("workspace/didChangeConfiguration", json!({ "settings": bad })).await;
    let id = editor.complete("a.py", 0, 4).await;
    editor.response(id).await;
    for name in ["temperature", "topP", "seed"] {
        let message = editor.notification("window/showMessage").await;
        let text = message["message"].as_str().unwrap();
        assert!(text.contains(&format!("setting `{name}`")) && text.contains("keeping the previous value"), "{text}");
    }

    let expected = Sampling { temperature: 0.8, top_p: 0.9, seed: Some(4) };
    let jobs = service.jobs();
    assert_eq!(jobs.iter().map(|job| job.sampling).collect::<Vec<_>>(), [expected, expected]);
}

#[tokio::test]
async fn a_new_thread_count_once_the_model_runs_is_a_warning_that_it_waits_for_a_restart() {
    copilotd_model::run_on_model_threads(|| ());
    let running = copilotd_model::model_threads_running().expect("the model's threads run");
    let mut editor = Editor::start(Arc::new(FakeService::default())).await;
    let settings = json!({ "copilotd": { "threads": running + 1 } });
    editor.notify("workspace/didChangeConfiguration", json!({ "settings": settings })).await;
    let message = editor.notification("window/showMessage").await;
    let text = message["message"].as_str().unwrap();
    assert!(text.contains("`threads` takes effect when copilotd restarts"), "{text}");
    assert!(text.contains(&format!("runs on {running} threads")), "{text}");
}
