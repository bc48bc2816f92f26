//! The person's verdict on a suggestion, taught to the preference cache: the tokens of text
//! they accepted enter it with more weight (with the context they followed), and the cache's
//! drafts of text they dismissed lose weight.
//!
//! A verdict names bytes of the suggestion's text; [`Origin`] says which generated tokens
//! that text came from. A token counts as accepted once the accepted text reaches its end,
//! and as dismissed when any of it was dismissed.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use copilotd_draft::pref_cache::PreferenceCache;
use copilotd_model::Tokenizer;

use crate::sync::lock;

/// Prompt tokens kept with a completion: the longest context a cache lookup matches.
pub const CONTEXT_TOKENS: usize = 16;

/// What a completion's text was generated from, kept for feedback on it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Origin {
    /// The prompt's last tokens (up to [`CONTEXT_TOKENS`]).
    pub context: Vec<u32>,
    /// Text the first generated token restored before the cursor (token healing).
    pub healed: String,
    /// Bytes of the generated text (after `healed`) before the completion's text: typed
    /// through before this answer was given.
    pub skipped: usize,
    /// Fingerprint of the tokenizer that made the tokens.
    pub tokenizer: u64,
}

/// What the person did with a suggestion's text (byte offsets into it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Took these bytes (the ones before were taken or typed already).
    Accepted(Range<usize>),
    /// Dismissed the text from this byte on.
    Dismissed { from: usize },
}

/// Teaches a preference cache the person's verdicts (shares the engine's cache).
#[derive(Clone)]
pub struct Teacher {
    cache: Arc<Mutex<PreferenceCache>>,
    tokenizer: Tokenizer,
    /// Context tokens stored before accepted text (as before a verified draft).
    context_len: usize,
}

impl Teacher {
    pub fn new(cache: Arc<Mutex<PreferenceCache>>, tokenizer: Tokenizer, context_len: usize) -> Teacher {
        Teacher { cache, tokenizer, context_len }
    }

    /// Applies `verdict` on `text`, generated as `tokens` from `origin`; returns how many
    /// tokens it concerned (none when they are another tokenizer's, or no whole token).
    pub fn teach(&self, text: &str, tokens: &[u32], origin: &Origin, verdict: &Verdict) -> usize {
        if origin.tokenizer != self.tokenizer.fingerprint() {
            tracing::debug!("feedback on a suggestion of another model; ignored");
            return 0;
        }
        let ends = self.token_ends(tokens, origin);
        let upto = |offset: usize| ends.iter().take_while(|&&end| end <= offset as isize).count();
        let context = |first: usize| [&origin.context[..], &tokens[..first]].concat();
        match verdict {
            Verdict::Accepted(range) => {
                let (first, last) = (upto(range.start), upto(range.end.min(text.len())));
                if first >= last {
                    return 0;
                }
                let context = context(first);
                let kept = &context[context.len().saturating_sub(self.context_len)..];
                lock(&self.cache).accept(&[kept, &tokens[first..last]].concat());
                last - first
            }
            Verdict::Dismissed { from } => {
                let first = upto(*from);
                // Tokens that start before the end of the text shown.
                let shown = 1 + upto(text.len().saturating_sub(1));
                let last = shown.min(tokens.len());
                if first >= last {
                    return 0;
                }
                lock(&self.cache).reject(&context(first), &tokens[first..last]);
                last - first
            }
        }
    }

    /// Where each token ends in the completion's text (negative or zero: before it).
    fn token_ends(&self, tokens: &[u32], origin: &Origin) -> Vec<isize> {
        let before = (origin.healed.len() + origin.skipped) as isize;
        (1..=tokens.len())
            .map(|n| self.tokenizer.decode(&tokens[..n]).map_or(isize::MAX, |text| text.len() as isize - before))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use copilotd_draft::pref_cache::CacheConfig;

    /// A teacher over an empty, always active cache, with the word-level test tokenizer
    /// (`a`..`d` are tokens 1..4; decoded text puts a space between tokens).
    fn teacher(dir: &std::path::Path) -> (Teacher, Arc<Mutex<PreferenceCache>>, Origin) {
        let tokenizer = crate::completion::common::test_tokenizer(dir);
        let cache = Arc::new(Mutex::new(PreferenceCache::new(CacheConfig { activation: 0, ..CacheConfig::default() })));
        let origin = Origin { context: vec![1, 1], tokenizer: tokenizer.fingerprint(), ..Origin::default() };
        (Teacher::new(Arc::clone(&cache), tokenizer, 8), cache, origin)
    }

    fn drafts(cache: &Mutex<PreferenceCache>, context: &[u32]) -> Vec<(Vec<u32>, u32)> {
        let found = lock(cache).lookup(context);
        found.map(|r| r.continuations.into_iter().map(|c| (c.tokens, c.count)).collect()).unwrap_or_default()
    }

    #[test]
    fn accepted_text_is_drafted_after_its_context() {
        let dir = tempfile::tempdir().unwrap();
        let (teacher, cache, origin) = teacher(dir.path());
        // "b c d a" from tokens 2 3 4 1; the person takes "b c" (a word at a time), then the rest.
        let (text, tokens) = ("b c d a", [2, 3, 4, 1]);
        assert_eq!(teacher.teach(text, &tokens, &origin, &Verdict::Accepted(0..2)), 1);
        assert_eq!(teacher.teach(text, &tokens, &origin, &Verdict::Accepted(2..3)), 1);
        // Each part was stored after what came before it.
        assert_eq!(drafts(&cache, &[0, 1, 1]), vec![(vec![2], 4), (vec![2, 3], 4)]);
        assert_eq!(teacher.teach(text, &tokens, &origin, &Verdict::Accepted(3..7)), 2);
        assert_eq!(drafts(&cache, &[1, 2, 3]), vec![(vec![4, 1], 4)]);
        // Half a token is no token.
        assert_eq!(teacher.teach(text, &tokens, &origin, &Verdict::Accepted(3..4)), 0);
    }

    #[test]
    fn dismissed_text_loses_its_drafts_weight() {
        let dir = tempfile::tempdir().unwrap();
        let (teacher, cache, origin) = teacher(dir.path());
        lock(&cache).accept(&[1, 1, 2, 3]);
        assert_eq!(drafts(&cache, &[1, 1]), vec![(vec![2, 3], 4)]);
        // The text shown ends within the third token: it was dismissed too; the fourth was never shown.
        assert_eq!(teacher.teach("b c d", &[2, 3, 4, 1], &origin, &Verdict::Dismissed { from: 0 }), 3);
        assert_eq!(drafts(&cache, &[1, 1]), vec![(vec![2, 3], 2)]);
        // Typed through "b c " already: only "d" was dismissed, which the cache never drafted.
        let typed = Origin { skipped: 4, ..origin.clone() };
        assert_eq!(teacher.teach("d", &[2, 3, 4], &typed, &Verdict::Dismissed { from: 0 }), 1);
        assert_eq!(drafts(&cache, &[1, 1]), vec![(vec![2, 3], 2)]);
    }

    #[test]
    fn another_tokenizers_tokens_teach_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (teacher, cache, origin) = teacher(dir.path());
        let foreign = Origin { tokenizer: origin.tokenizer ^ 1, ..origin };
        assert_eq!(teacher.teach("b c", &[2, 3], &foreign, &Verdict::Accepted(0..3)), 0);
        assert!(lock(&cache).is_empty());
    }
}
