//! Token healing with the real default model: a prompt that ends inside what the model
//! writes as one token is completed as if the cursor were not there.

use copilotd_draft::cancel::CancelToken;
use copilotd_server::completion::{Completer, CompletionRequest, EngineSettings, Sampling, Strategy};
use copilotd_test_support::model_path;

/// At an indented blank line the prompt ends in the token `"\n    "`, which the model writes
/// as `"\n   "`, `" return"`: the completion starts at the cursor, without a space of its own.
#[test]
fn a_completion_at_an_indented_blank_line_keeps_the_indentation_typed() {
    let settings = EngineSettings { model: Some(model_path()), ..EngineSettings::default() };
    let mut completer = Completer::load(&settings).expect("model loads");
    let text = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    ";
    let mut completions = Vec::new();
    for strategy in [Strategy::Ar, Strategy::Auto] {
        let request = CompletionRequest {
            text,
            cursor: text.len(),
            path: Some("arith.py"),
            max_tokens: 16,
            strategy,
            sampling: Sampling::GREEDY,
        };
        completions.push(completer.complete(&request, &CancelToken::new()).expect("completes").text);
    }
    assert!(completions[0].starts_with("return"), "{:?}", completions[0]);
    assert_eq!(completions[1], completions[0]);
}
