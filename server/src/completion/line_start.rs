//! FastCoder's line-start check on token contexts: whether the tokens end on a
//! blank line of Python code, where the paper's skip token applies.
//!
//! The check runs at every decode step, so it is made cheap where it can be: a
//! short decoded tail rejects every position whose line already has text; at a
//! blank line the context's text is brought up to date by decoding only the
//! tokens that changed since the last check ([`ContextText`]), and the parser's
//! anchor ([`LineStartOracle`]) carries over while the text keeps its start.
//! One check serves every request of an engine, so a request that continues
//! the text of the one before (typing) parses only what is new.

use crate::syntax::LineStartOracle;
use anyhow::Result;
use copilotd_model::Tokenizer;

/// Tokens decoded to check whether the context ends on a blank line before the
/// (costlier) full text and parse.
const LINE_TAIL_TOKENS: usize = 16;

/// Tokens before a change that are decoded with it, so that whatever the decoder
/// does at the start of a text (SentencePiece drops the first piece's space) or
/// across a boundary (bytes of one character in several tokens) happens in both
/// decodes and cancels out.
const OVERLAP_TOKENS: usize = 4;

/// Whether a token context ends where a Python code line begins.
pub struct LineStartCheck {
    tokenizer: Tokenizer,
    text: ContextText,
    oracle: LineStartOracle,
}

impl LineStartCheck {
    pub fn new(tokenizer: Tokenizer) -> Result<LineStartCheck> {
        Ok(LineStartCheck { tokenizer, text: ContextText::default(), oracle: LineStartOracle::new()? })
    }

    /// True at a blank line in code (a statement or a continuation line; not in
    /// a string), false elsewhere and when the tokens cannot be decoded.
    pub fn at_code_line_start(&mut self, context: &[u32]) -> bool {
        let tail = &context[context.len().saturating_sub(LINE_TAIL_TOKENS)..];
        let Ok(tail_text) = self.tokenizer.decode(tail) else { return false };
        let line = tail_text.rsplit('\n').next().unwrap_or("");
        if !tail_text.contains('\n') || !line.trim().is_empty() {
            return false;
        }
        match self.text.update(&self.tokenizer, context) {
            Ok(text) => self.oracle.at_code_line_start(text),
            Err(_) => false,
        }
    }
}

/// The text of a token context that grows, or changes near its end, from one
/// call to the next: the decoded text is kept, with the token counts at which it
/// was extended, and only the tokens after the last such point still shared
/// are decoded again.
#[derive(Default)]
struct ContextText {
    tokens: Vec<u32>,
    text: String,
    /// `(tokens, bytes)`: `text[..bytes]` is the text of `tokens[..tokens]`.
    checkpoints: Vec<(usize, usize)>,
}

impl ContextText {
    /// The text of `context`, as `tokenizer.decode(context)` gives it.
    fn update(&mut self, tokenizer: &Tokenizer, context: &[u32]) -> Result<&str> {
        let shared = self.tokens.iter().zip(context).take_while(|(a, b)| a == b).count();
        while self.checkpoints.last().is_some_and(|&(tokens, _)| tokens > shared) {
            self.checkpoints.pop();
        }
        let (kept, bytes) = self.checkpoints.last().copied().unwrap_or((0, 0));
        self.tokens.truncate(kept);
        self.text.truncate(bytes);
        if kept == context.len() {
            return Ok(&self.text);
        }
        match appended_text(tokenizer, &context[..kept], &context[kept..])? {
            Some(appended) => self.text.push_str(&appended),
            None => {
                self.text = tokenizer.decode(context)?;
                self.checkpoints.clear();
            }
        }
        self.tokens.extend_from_slice(&context[kept..]);
        self.checkpoints.push((self.tokens.len(), self.text.len()));
        Ok(&self.text)
    }
}

/// What `added` appends to the text of `before`, decoded with the last few
/// tokens of `before`; `None` when that cannot be told apart (the overlap ends
/// inside a character, or the decoder changed its text).
fn appended_text(tokenizer: &Tokenizer, before: &[u32], added: &[u32]) -> Result<Option<String>> {
    let overlap = &before[before.len().saturating_sub(OVERLAP_TOKENS)..];
    let overlap_text = tokenizer.decode(overlap)?;
    let joined: Vec<u32> = overlap.iter().chain(added).copied().collect();
    let joined_text = tokenizer.decode(&joined)?;
    Ok(joined_text
        .strip_prefix(overlap_text.as_str())
        .filter(|_| !overlap_text.ends_with(char::REPLACEMENT_CHARACTER))
        .map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use copilotd_test_support::synthetic::{self, Family, Vocab};

    /// The tokenizer of a synthetic GGUF of `family`.
    fn tokenizer(family: Family) -> Tokenizer {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.gguf");
        synthetic::write_gguf(&path, &Vocab::of(family).metadata(), &[]);
        copilotd_model::tokenizer_from_gguf(&path).unwrap()
    }

    const CODE: &str =
        "def café(x):\n    \"\"\"Ünïcode — 🐍 text.\"\"\"\n    return x * 2  # é\n\n\nclass A:\n    pass\n";

    #[test]
    fn the_text_follows_a_context_that_grows_and_changes_at_its_end() {
        for family in [Family::StarCoder, Family::CodeLlama] {
            let tokenizer = tokenizer(family);
            let tokens = tokenizer.encode(CODE).unwrap();
            let mut text = ContextText::default();
            // Grow by one to three tokens, and every fifth step take two back and put others
            // in their place (as when a typed character changes the last tokens).
            let (mut end, mut step) = (0, 0);
            while end < tokens.len() {
                step += 1;
                end = (end + 1 + step % 3).min(tokens.len());
                let mut context = tokens[..end].to_vec();
                if step % 5 == 0 && end > 2 {
                    context.truncate(end - 2);
                    context.extend(tokenizer.encode("é\n").unwrap());
                }
                let expected = tokenizer.decode(&context).unwrap();
                assert_eq!(text.update(&tokenizer, &context).unwrap(), expected, "{family:?}, step {step}");
            }
            // A context with another start is decoded whole.
            let other = tokenizer.encode("x = 1\n").unwrap();
            assert_eq!(text.update(&tokenizer, &other).unwrap(), tokenizer.decode(&other).unwrap());
        }
    }

    #[test]
    fn blank_code_lines_are_line_starts_and_blank_lines_in_strings_are_not() {
        let tokenizer = tokenizer(Family::StarCoder);
        let mut check = LineStartCheck::new(tokenizer.clone()).unwrap();
        let mut at = |text: &str| check.at_code_line_start(&tokenizer.encode(text).unwrap());
        assert!(at("def f(x):\n    y = x\n    "));
        assert!(!at("def f(x):\n    y = x\n    return"));
        assert!(!at("def f(x):\n    \"\"\"Doc.\n\n    "));
        assert!(at("def f(x):\n    return g(\n        "));
    }
}
