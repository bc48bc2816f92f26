//! Where tokens and text do not break in the same places, with the real default model: a
//! prompt that ends inside what the model writes as one token is completed as if the cursor
//! were not there (token healing), and a completion that stops inside a character leaves it out.

use copilotd_draft::cancel::CancelToken;
use copilotd_server::completion::{Completer, CompletionRequest, EngineSettings, Sampling, Strategy, Trigger};
use copilotd_test_support::model_path;

fn completer() -> Completer {
    let settings = EngineSettings { model: Some(model_path()), ..EngineSettings::default() };
    Completer::load(&settings).expect("model loads")
}

fn request(text: &str, max_tokens: usize, strategy: Strategy) -> CompletionRequest<'_> {
    CompletionRequest {
        text,
        cursor: text.len(),
        path: Some("module.py"),
        language: None,
        max_tokens,
        strategy,
        sampling: Sampling::GREEDY,
        trigger: Trigger::Invoked,
        prompt_latency: None,
    }
}

/// At an indented blank line the prompt ends in the token `"\n    "`, which the model writes
/// as `"\n   "`, `" return"`: the completion starts at the cursor, without a space of its own.
#[test]
fn a_completion_at_an_indented_blank_line_keeps_the_indentation_typed() {
    let mut completer = completer();
    let text = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    ";
    let mut completions = Vec::new();
    for strategy in [Strategy::Ar, Strategy::Auto] {
        let request = request(text, 16, strategy);
        completions.push(completer.complete(&request, &CancelToken::new()).expect("completes").text);
    }
    assert!(completions[0].starts_with("return"), "{:?}", completions[0]);
    assert_eq!(completions[1], completions[0]);
}

/// The model goes on with emoji of four bytes each, written in tokens of fewer: whatever the
/// token limit, the completion holds whole characters only.
#[test]
fn a_completion_that_stops_inside_a_character_leaves_it_out() {
    let mut completer = completer();
    let text = "emoji = \"\u{1F389}\u{1F38A}";
    let mut longest = String::new();
    for max_tokens in 1..=12 {
        let completion = completer.complete(&request(text, max_tokens, Strategy::Ar), &CancelToken::new()).unwrap();
        assert!(!completion.text.contains(char::REPLACEMENT_CHARACTER), "{max_tokens} tokens: {:?}", completion.text);
        longest = completion.text;
    }
    assert!(longest.contains('\u{1F389}'), "the model wrote no emoji: {longest:?}");
}
