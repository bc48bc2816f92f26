//! The prompt of a completion: the text before the cursor (and, for models
//! with fill-in-the-middle tokens when FIM is enabled, the text after it, and for
//! models trained with repository-level context, files of the repository before
//! the current one), within a token budget.

use anyhow::Result;
use copilotd_model::{FimTokens, Tokenizer};

use super::repo_context::RepoContext;

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

/// Repository context is chosen from the text around the cursor: the suffix, and the prefix's
/// start in whole blocks of this many tokens. The query then changes when the text before the
/// cursor has grown by a block (or the window moved), not at every keystroke, so that the
/// files chosen, and with them the prompt's start and the model's KV cache, stay the same
/// while the person types.
const REPO_QUERY_STEP: usize = 64;

/// The stride for a prefix budget of `max_tokens`: [`WINDOW_STRIDE_TOKENS`], or a quarter of
/// a smaller budget (a stride as long as the budget would leave no prefix at all).
fn window_stride(max_tokens: usize) -> usize {
    (max_tokens / 4).clamp(1, WINDOW_STRIDE_TOKENS)
}

/// Prompt settings.
#[derive(Clone, Copy, Debug)]
pub struct PromptBudget {
    /// Most prompt tokens (prefix plus suffix).
    pub max_tokens: usize,
    /// Share of `max_tokens` given to the suffix in FIM prompts.
    pub suffix_share: f32,
    /// Most of `max_tokens` given to repository context in FIM prompts (never more than half
    /// of what the prefix would have without it).
    pub repo_share: f32,
}

impl Default for PromptBudget {
    fn default() -> Self {
        PromptBudget { max_tokens: 2048, suffix_share: 0.25, repo_share: 0.25 }
    }
}

impl PromptBudget {
    /// This budget within a model's context of `context` tokens that must also hold a
    /// generation of `generation` tokens: what is left for the prompt, though at least half the
    /// context (a generation asked for more ends where the context is full).
    pub fn within_context(self, context: usize, generation: usize) -> PromptBudget {
        let room = context - generation.min(context / 2);
        PromptBudget { max_tokens: self.max_tokens.min(room), ..self }
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
///
/// With `repo` (FIM prompts of models with repository-level tokens), files of the repository
/// come first ([`RepoContext::tokens`]), within `repo_share` of the window; the prefix then
/// gives up that much of its budget, never more than half. Without any file to show, the
/// prompt is the plain FIM prompt with the prefix's whole budget.
pub fn build(
    tokenizer: &Tokenizer,
    text: &str,
    cursor: usize,
    budget: &PromptBudget,
    fim: Option<&FimTokens>,
    repo: Option<&RepoContext>,
) -> Result<Prompt> {
    anyhow::ensure!(text.is_char_boundary(cursor), "cursor at byte {cursor} is not at a character boundary");
    let (before, after) = text.split_at(cursor);
    let Some(fim) = fim else {
        let mut tokens = prefix_tokens(tokenizer, before, budget.max_tokens, false)?;
        let healed = match tokens.len() {
            0 | 1 => String::new(),
            _ => {
                let last = tokens.pop().expect("two or more tokens");
                tokenizer.decode(&[last])?
            }
        };
        return Ok(Prompt { tokens, healed });
    };
    // The layout of the family's training: `[BOS] [repository context] PRE prefix SUF suffix MID`.
    let fixed = 3 + usize::from(fim.bos.is_some());
    let suffix_budget = (budget.max_tokens as f32 * budget.suffix_share) as usize;
    let mut suffix = tokenizer.encode(window_from_start(after, suffix_budget * BYTES_PER_TOKEN_WINDOW))?;
    suffix.truncate(suffix_budget);
    let prefix_budget = budget.max_tokens.saturating_sub(suffix.len() + fixed);
    let mut prefix = prefix_tokens(tokenizer, before, prefix_budget, fim.space_before_prefix)?;
    let mut context = Vec::new();
    if let Some(repo) = repo {
        let share = ((budget.max_tokens as f32 * budget.repo_share) as usize).min(prefix_budget / 2);
        let kept = fit(prefix.clone(), prefix_budget - share);
        let query = &kept[..kept.len() - kept.len() % REPO_QUERY_STEP];
        context = repo.tokens(tokenizer, &[query, suffix.as_slice()], share)?;
        if !context.is_empty() {
            prefix = kept;
        }
    }
    let mut prompt = Vec::with_capacity(context.len() + prefix.len() + suffix.len() + fixed);
    prompt.extend(fim.bos);
    prompt.extend(context);
    prompt.push(fim.prefix);
    prompt.extend(prefix);
    prompt.push(fim.suffix);
    prompt.extend(suffix);
    prompt.push(fim.middle);
    Ok(Prompt { tokens: prompt, healed: String::new() })
}

/// The last tokens of the text before the cursor, at most `max_tokens`, with a space before
/// that text when `space_first` (CodeLlama's FIM prefix); the excess is dropped from the
/// front in steps of [`window_stride`].
fn prefix_tokens(tokenizer: &Tokenizer, before: &str, max_tokens: usize, space_first: bool) -> Result<Vec<u32>> {
    let window = window_to_end(before, max_tokens * BYTES_PER_TOKEN_WINDOW);
    let tokens = if space_first { tokenizer.encode(&format!(" {window}"))? } else { tokenizer.encode(window)? };
    Ok(fit(tokens, max_tokens))
}

/// `tokens` without their excess over `max_tokens`, dropped from the front in steps of
/// [`window_stride`].
fn fit(mut tokens: Vec<u32>, max_tokens: usize) -> Vec<u32> {
    let excess = tokens.len().saturating_sub(max_tokens);
    tokens.drain(..excess.next_multiple_of(window_stride(max_tokens)).min(tokens.len()));
    tokens
}

/// The tail of `text` of at most about `max_bytes`, starting at a line start
/// when there is one in range; its start moves in steps of [`WINDOW_STRIDE_BYTES`] (of a
/// quarter of a smaller window).
fn window_to_end(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let stride = (max_bytes / 4).clamp(1, WINDOW_STRIDE_BYTES);
    let mut start = (text.len() - max_bytes).next_multiple_of(stride).min(text.len());
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
pub(super) mod tests {
    use super::*;
    use copilotd_model::{LoadOptions, Model};
    use copilotd_test_support::synthetic::{self, Family, GgmlDType, Vocab};

    /// The tokenizer and FIM tokens of a synthetic model of `family`, as the loader reads them.
    fn family(family: Family) -> (Tokenizer, FimTokens, Vocab) {
        let dir = tempfile::tempdir().unwrap();
        let written = synthetic::write(dir.path(), family, GgmlDType::Q8_0);
        let model = Model::load(&written.model, &LoadOptions::default()).unwrap();
        let fim = model.info().fim.expect("FIM tokens");
        (model.tokenizer().clone(), fim, written.vocab)
    }

    /// A prompt as its parts: a special token by name, or text encoded as it stands.
    pub(crate) enum Part<'a> {
        Special(&'a str),
        Text(&'a str),
    }

    pub(crate) fn layout(tok: &Tokenizer, vocab: &Vocab, parts: &[Part]) -> Vec<u32> {
        let mut ids = Vec::new();
        for part in parts {
            match part {
                Part::Special(name) => ids.push(vocab.id(name)),
                Part::Text(text) => ids.extend(tok.encode(text).unwrap()),
            }
        }
        ids
    }

    const BEFORE: &str = "def f(x):\n    return ";
    const AFTER: &str = "x * 2\n";

    fn fim_prompt(tok: &Tokenizer, fim: &FimTokens) -> Vec<u32> {
        let text = format!("{BEFORE}{AFTER}");
        build(tok, &text, BEFORE.len(), &PromptBudget::default(), Some(fim), None).unwrap().tokens
    }

    #[test]
    fn fim_prompts_follow_each_family_layout() {
        use Part::{Special as S, Text as T};
        // Qwen2.5-Coder: <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>, no BOS.
        let (tok, fim, vocab) = family(Family::QwenCoder);
        let expected = [S("<|fim_prefix|>"), T(BEFORE), S("<|fim_suffix|>"), T(AFTER), S("<|fim_middle|>")];
        assert_eq!(fim_prompt(&tok, &fim), layout(&tok, &vocab, &expected));
        // StarCoder / SmolLM: <fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>, no BOS.
        let (tok, fim, vocab) = family(Family::StarCoder);
        let expected = [S("<fim_prefix>"), T(BEFORE), S("<fim_suffix>"), T(AFTER), S("<fim_middle>")];
        assert_eq!(fim_prompt(&tok, &fim), layout(&tok, &vocab, &expected));
        // DeepSeek-Coder: BOS <｜fim▁begin｜>{prefix}<｜fim▁hole｜>{suffix}<｜fim▁end｜>.
        let (tok, fim, vocab) = family(Family::DeepSeekCoder);
        let expected = [
            S("<｜begin▁of▁sentence｜>"),
            S("<｜fim▁begin｜>"),
            T(BEFORE),
            S("<｜fim▁hole｜>"),
            T(AFTER),
            S("<｜fim▁end｜>"),
        ];
        assert_eq!(fim_prompt(&tok, &fim), layout(&tok, &vocab, &expected));
        // CodeLlama: <s> ▁<PRE> {space + prefix} ▁<SUF>{suffix} ▁<MID>, piece by piece: the
        // prefix starts with SentencePiece's space ("▁def"), the suffix does not ("x").
        let (tok, fim, _) = family(Family::CodeLlama);
        let pieces: Vec<String> = fim_prompt(&tok, &fim).iter().map(|&id| tok.id_to_token(id).unwrap()).collect();
        let expected = [
            "<s>",
            "▁<PRE>",
            "▁def",
            "▁",
            "f",
            "(",
            "x",
            "):",
            "<0x0A>",
            "▁▁▁▁",
            "re",
            "t",
            "urn",
            "▁",
            "▁<SUF>",
            "x",
            "▁",
            "*",
            "▁",
            "2",
            "<0x0A>",
            "▁<MID>",
        ];
        assert_eq!(pieces, expected);
    }

    #[test]
    fn fim_window_gives_the_suffix_its_share() {
        for family_ in [Family::QwenCoder, Family::CodeLlama] {
            let (tok, fim, _) = family(family_);
            let fixed = 3 + usize::from(fim.bos.is_some());
            let before = "alpha = beta + gamma\n".repeat(40);
            let after = "delta = epsilon * zeta\n".repeat(40);
            let text = format!("{before}{after}");
            let budget = PromptBudget { max_tokens: 64, ..PromptBudget::default() };
            let prompt = build(&tok, &text, before.len(), &budget, Some(&fim), None).unwrap().tokens;
            // Both sides longer than the window: the suffix gets its 16, the prefix the rest
            // (less what its stride drops).
            let prefix_budget = 64 - 16 - fixed;
            let stride = window_stride(prefix_budget);
            let at = |t: u32| prompt.iter().position(|&x| x == t).unwrap();
            let (suffix_at, middle_at) = (at(fim.suffix), at(fim.middle));
            assert_eq!(middle_at - suffix_at - 1, 16, "{family_:?}");
            let prefix_len = suffix_at - at(fim.prefix) - 1;
            assert!(prefix_len <= prefix_budget && prefix_len + stride > prefix_budget, "{family_:?}: {prefix_len}");
            assert_eq!(prompt.len(), 64 - (prefix_budget - prefix_len), "{family_:?}");
            // The suffix is the head of the text after the cursor, the prefix the tail before it.
            assert_eq!(prompt[suffix_at + 1..middle_at], tok.encode(&after).unwrap()[..16]);
            let tail = tok.encode(&before).unwrap();
            assert_eq!(prompt[suffix_at - 2..suffix_at], tail[tail.len() - 2..]);
            // A short suffix leaves the rest of the window to the prefix.
            let short = format!("{before}pass\n");
            let prompt = build(&tok, &short, before.len(), &budget, Some(&fim), None).unwrap().tokens;
            let suffix_len = tok.encode("pass\n").unwrap().len();
            let stride = window_stride(64 - suffix_len - fixed);
            assert!(prompt.len() <= 64 && prompt.len() + stride > 64, "{family_:?}: {}", prompt.len());
            assert_eq!(prompt.iter().position(|&x| x == fim.middle).unwrap(), prompt.len() - 1);
            assert!(suffix_len < 16);
        }
    }

    #[test]
    fn the_budget_leaves_the_generation_room_in_the_context() {
        let budget = PromptBudget::default();
        assert_eq!(budget.within_context(8192, 139).max_tokens, 2048, "a long context changes nothing");
        assert_eq!(budget.within_context(2048, 139).max_tokens, 2048 - 139);
        assert_eq!(budget.within_context(256, 139).max_tokens, 128, "at least half the context");
        assert_eq!(budget.within_context(256, 100).max_tokens, 156);
        assert_eq!(budget.within_context(1, 139).max_tokens, 1);
    }

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
        let budget = PromptBudget { max_tokens: 1024, ..PromptBudget::default() };
        // 4 tokens and 8 bytes a line: far more than the window.
        let mut text = "a b c d\n".repeat(20_000);
        let first = build(&tokenizer, &text, text.len(), &budget, None, None).unwrap().tokens;
        assert!(first.len() <= budget.max_tokens && first.len() > budget.max_tokens - WINDOW_STRIDE_TOKENS);
        let mut kept = 0;
        for keystroke in ["a", " ", "b", " ", "c", "\n", "d", " ", "a"] {
            text.push_str(keystroke);
            let next = build(&tokenizer, &text, text.len(), &budget, None, None).unwrap().tokens;
            assert!(next.len() <= budget.max_tokens);
            let common = first.iter().zip(&next).take_while(|(a, b)| a == b).count();
            kept += usize::from(common + 1 >= first.len());
        }
        assert_eq!(kept, 9, "every keystroke keeps the previous prompt as the start of the next one");
    }
}
