//! The prompt of a completion: the text before the cursor (and, for models
//! with fill-in-the-middle tokens when FIM is enabled, the text after it),
//! within a token budget.

use anyhow::Result;
use copilotd_model::{FimTokens, Tokenizer};

/// Bytes of text considered per prompt token before tokenizing; enough for
/// code (about 3-4 bytes per token) while bounding the work on huge files.
const BYTES_PER_TOKEN_WINDOW: usize = 8;
/// In a text longer than the prefix window, the window's start moves by this many bytes at a
/// time: typing at the cursor leaves it in place until the text before the cursor grew this much.
const WINDOW_STRIDE_BYTES: usize = 4096;
/// Tokens dropped at a time from the front of a prefix over its budget. With the stable start,
/// consecutive prompts in a long file keep their leading tokens, and the model the KV cache of
/// the previous one; dropping exactly the excess would shift the whole prompt by a token or two
/// per keystroke, so every request in a long file would prefill the full window again.
const WINDOW_STRIDE_TOKENS: usize = 256;

/// Prompt settings.
#[derive(Clone, Copy, Debug)]
pub struct PromptBudget {
    /// Most prompt tokens (prefix plus suffix).
    pub max_tokens: usize,
    /// Share of `max_tokens` given to the suffix in FIM prompts.
    pub suffix_share: f32,
}

impl Default for PromptBudget {
    fn default() -> Self {
        PromptBudget { max_tokens: 2048, suffix_share: 0.25 }
    }
}

/// A prompt ready for the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt {
    pub tokens: Vec<u32>,
    /// Text of the prompt's last token, removed for token healing: the
    /// completion's first token must start with it, and it is not part of
    /// the completion. Empty when nothing was removed.
    pub healed: String,
}

/// The prompt for a cursor at byte `cursor` of `text`.
///
/// The window starts at a line start so that consecutive requests on the
/// same file tokenize to the same leading tokens, which is what lets the KV
/// cache of the previous prompt be reused.
///
/// Prefix prompts are token-healed: text before a cursor usually ends in the
/// middle of what the model would write as one token (indentation before a
/// statement, half a word), so the last token is taken off and the model
/// chooses the first token among those that restore it.
pub fn build(
    tokenizer: &Tokenizer,
    text: &str,
    cursor: usize,
    budget: &PromptBudget,
    fim: Option<&FimTokens>,
) -> Result<Prompt> {
    anyhow::ensure!(text.is_char_boundary(cursor), "cursor at byte {cursor} is not at a character boundary");
    let (before, after) = text.split_at(cursor);
    let Some(fim) = fim else {
        let mut tokens = prefix_tokens(tokenizer, before, budget.max_tokens)?;
        let healed = match tokens.len() {
            0 | 1 => String::new(),
            _ => {
                let last = tokens.pop().expect("two or more tokens");
                tokenizer.decode(&[last])?
            }
        };
        return Ok(Prompt { tokens, healed });
    };
    let suffix_budget = (budget.max_tokens as f32 * budget.suffix_share) as usize;
    let mut suffix = tokenizer.encode(window_from_start(after, suffix_budget * BYTES_PER_TOKEN_WINDOW))?;
    suffix.truncate(suffix_budget);
    let prefix = prefix_tokens(tokenizer, before, budget.max_tokens - suffix.len() - 3)?;
    let mut prompt = Vec::with_capacity(prefix.len() + suffix.len() + 3);
    prompt.push(fim.prefix);
    prompt.extend(prefix);
    prompt.push(fim.suffix);
    prompt.extend(suffix);
    prompt.push(fim.middle);
    Ok(Prompt { tokens: prompt, healed: String::new() })
}

/// The last tokens of `before`, at most `max_tokens`; the excess is dropped from the front in
/// steps of [`WINDOW_STRIDE_TOKENS`].
fn prefix_tokens(tokenizer: &Tokenizer, before: &str, max_tokens: usize) -> Result<Vec<u32>> {
    let tokens = tokenizer.encode(window_to_end(before, max_tokens * BYTES_PER_TOKEN_WINDOW))?;
    let excess = tokens.len().saturating_sub(max_tokens);
    Ok(tokens[excess.next_multiple_of(WINDOW_STRIDE_TOKENS).min(tokens.len())..].to_vec())
}

/// The tail of `text` of at most about `max_bytes`, starting at a line start
/// when there is one in range; its start moves in steps of [`WINDOW_STRIDE_BYTES`].
fn window_to_end(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut start = (text.len() - max_bytes).next_multiple_of(WINDOW_STRIDE_BYTES).min(text.len());
    while !text.is_char_boundary(start) {
        start += 1;
    }
    match text[start..].find('\n') {
        Some(newline) if start + newline + 1 < text.len() => &text[start + newline + 1..],
        _ => &text[start..],
    }
}

/// The head of `text` of at most `max_bytes`, ending at a character boundary.
fn window_from_start(text: &str, max_bytes: usize) -> &str {
    let mut end = text.len().min(max_bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cut_at_line_starts_and_char_boundaries() {
        let text = "line one\nline two\nline three";
        assert_eq!(window_to_end(text, 100), text);
        assert_eq!(window_from_start("aé", 2), "a");
        let long = format!("{}\nlast line", "x".repeat(2 * WINDOW_STRIDE_BYTES));
        let window = window_to_end(&long, WINDOW_STRIDE_BYTES);
        assert_eq!(window, "last line", "the start moves to the next line start");
        let wide = "é".repeat(WINDOW_STRIDE_BYTES);
        assert!(wide.ends_with(window_to_end(&wide, 3)) && window_to_end(&wide, 3).len() <= 3);
    }

    #[test]
    fn a_long_file_keeps_the_prompt_start_while_the_person_types() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = crate::completion::common::test_tokenizer(dir.path());
        let budget = PromptBudget { max_tokens: 1024, suffix_share: 0.25 };
        // 4 tokens and 8 bytes a line: far more than the window.
        let mut text = "a b c d\n".repeat(20_000);
        let first = build(&tokenizer, &text, text.len(), &budget, None).unwrap().tokens;
        assert!(first.len() <= budget.max_tokens && first.len() > budget.max_tokens - WINDOW_STRIDE_TOKENS);
        let mut kept = 0;
        for keystroke in ["a", " ", "b", " ", "c", "\n", "d", " ", "a"] {
            text.push_str(keystroke);
            let next = build(&tokenizer, &text, text.len(), &budget, None).unwrap().tokens;
            assert!(next.len() <= budget.max_tokens);
            let common = first.iter().zip(&next).take_while(|(a, b)| a == b).count();
            kept += usize::from(common + 1 >= first.len());
        }
        assert_eq!(kept, 9, "every keystroke keeps the previous prompt as the start of the next one");
    }
}
