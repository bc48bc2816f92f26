//! Typed-through answers: while the person types exactly what the last suggestion predicted,
//! the rest of that suggestion is the answer, at once, without the model. The last suggestion
//! may be a running generation's whole lines so far
//! ([`LINES_SO_FAR`](crate::completion::LINES_SO_FAR)); a job answers from those only if it
//! takes early lines ([`Job::early_lines`]).
//!
//! The editor already shortens its ghost text while the typed characters match it; this keeps
//! the daemon's answer in step with what is on screen instead of decoding it again (a fresh
//! decode of the longer prompt could differ, since the typed characters are tokenized as
//! prompt, not as the tokens that generated them).

use std::sync::Arc;

use super::Job;
use crate::completion::feedback::Origin;
use crate::completion::Completion;

/// The last suggestion a generation gave, with the job (buffer, path, cursor, settings) it was
/// generated for.
#[derive(Default)]
pub struct LastSuggestion {
    last: Option<Answered>,
}

struct Answered {
    job: Job,
    suggestion: String,
    tokens: Vec<u32>,
    origin: Origin,
    /// Whether it is a generation's lines so far, not its end.
    partial: bool,
}

impl LastSuggestion {
    /// Remembers the suggestion generated for `job`, whole or its lines so far (an empty one
    /// forgets).
    pub fn remember(&mut self, job: &Job, suggestion: &Completion) {
        self.last = (!suggestion.text.is_empty()).then(|| Answered {
            job: job.clone(),
            suggestion: suggestion.text.clone(),
            tokens: suggestion.tokens.clone(),
            origin: suggestion.origin.clone(),
            partial: suggestion.is_partial(),
        });
    }

    /// The generation that gave the last suggestion stopped before its end: the lines it gave
    /// are all it will give, so they no longer say more is to come.
    pub fn end_lines_so_far(&mut self) {
        if let Some(last) = &mut self.last {
            last.partial = false;
        }
    }

    /// The job of the buffer once the whole last suggestion is in it, cursor after it, when
    /// `taken` is that suggestion or its rest (what a typed-through answer gave).
    pub fn taken_whole(&self, taken: &str) -> Option<Job> {
        let last = self.last.as_ref().filter(|last| !taken.is_empty() && last.suggestion.ends_with(taken))?;
        let (before, after) = last.job.text.split_at_checked(last.job.cursor)?;
        Some(Job {
            text: Arc::new([before, &last.suggestion, after].concat()),
            cursor: last.job.cursor + last.suggestion.len(),
            ..last.job.clone()
        })
    }

    /// The rest of the last suggestion, when `job` asks for the same completion with a beginning
    /// of the suggestion typed at its cursor ([`Job::typed_before`]); `None` when anything else
    /// changed, when only white space would remain, or when the suggestion is a generation's
    /// lines so far and `job` waits for whole suggestions. With its tokens and origin (its own,
    /// past the part typed through) and whether it is partial.
    pub fn continuation(&self, job: &Job) -> Option<Continuation> {
        let last = self.last.as_ref().filter(|last| !last.partial || job.early_lines)?;
        let rest = last.suggestion.strip_prefix(last.job.typed_before(job)?)?;
        (!rest.trim().is_empty()).then(|| Continuation {
            rest: rest.to_owned(),
            tokens: last.tokens.clone(),
            origin: Origin { skipped: last.origin.skipped + last.suggestion.len() - rest.len(), ..last.origin.clone() },
            partial: last.partial,
        })
    }
}

/// The rest of the last suggestion that answers a job ([`LastSuggestion::continuation`]).
#[derive(Debug, PartialEq)]
pub struct Continuation {
    pub rest: String,
    pub tokens: Vec<u32>,
    pub origin: Origin,
    pub partial: bool,
}

#[cfg(test)]
mod tests {
    use super::super::test_job as job;
    use super::*;
    use crate::completion::LINES_SO_FAR;

    /// The last suggestion after a generation for `f.py` at `cursor` gave `suggestion`, whole
    /// or (with the stop reason [`LINES_SO_FAR`]) its lines so far.
    fn remembered(text: &str, cursor: usize, suggestion: &str, stop: &'static str) -> LastSuggestion {
        let mut last = LastSuggestion::default();
        let stats = crate::completion::CompletionStats::empty(crate::completion::Strategy::Ar);
        let completion = Completion {
            text: suggestion.to_owned(),
            tokens: vec![7, 8],
            origin: Origin { skipped: 1, ..Origin::default() },
            stats: crate::completion::CompletionStats { stop, ..stats },
        };
        last.remember(&job(text, cursor), &completion);
        last
    }

    fn shown(text: &str, cursor: usize, suggestion: &str) -> LastSuggestion {
        remembered(text, cursor, suggestion, "stop_rule")
    }

    impl LastSuggestion {
        fn continuation_in_f(&self, text: &str, cursor: usize) -> Option<String> {
            self.continuation(&job(text, cursor)).map(|answer| answer.rest)
        }
    }

    #[test]
    fn typing_the_suggestion_answers_its_rest() {
        let last = shown("def f(x):\n    \nend\n", 14, "return x + 1");
        assert_eq!(last.continuation_in_f("def f(x):\n    \nend\n", 14).as_deref(), Some("return x + 1"));
        // Its tokens are the suggestion's, past what was typed.
        let answer = last.continuation(&job("def f(x):\n    ret\nend\n", 17)).unwrap();
        assert_eq!(answer.rest, "urn x + 1");
        assert_eq!((answer.tokens, answer.origin.skipped, answer.partial), (vec![7, 8], 4, false));
    }

    #[test]
    fn a_generations_lines_so_far_answer_only_jobs_that_take_early_lines() {
        let last = remembered("def f(x):\n    \nend\n", 14, "y = x + 1", LINES_SO_FAR);
        let answer = last.continuation(&job("def f(x):\n    y\nend\n", 15)).unwrap();
        assert_eq!((answer.rest.as_str(), answer.partial), (" = x + 1", true));
        let whole_only = Job { early_lines: false, ..job("def f(x):\n    y\nend\n", 15) };
        assert_eq!(last.continuation(&whole_only), None, "waits for the whole suggestion");
    }

    #[test]
    fn lines_so_far_of_a_stopped_generation_promise_no_more() {
        let mut last = remembered("def f(x):\n    \nend\n", 14, "y = x + 1", LINES_SO_FAR);
        last.end_lines_so_far();
        let answer = last.continuation(&job("def f(x):\n    \nend\n", 14)).unwrap();
        assert_eq!((answer.rest.as_str(), answer.partial), ("y = x + 1", false));
    }

    #[test]
    fn anything_else_is_decoded_again() {
        let last = shown("def f(x):\n    \nend\n", 14, "return x + 1");
        // Typed something else, moved back, edited elsewhere, or typed it all.
        assert_eq!(last.continuation_in_f("def f(x):\n    rex\nend\n", 17), None);
        assert_eq!(last.continuation_in_f("def f(x):\n    \nend\n", 13), None);
        assert_eq!(last.continuation_in_f("def g(x):\n    ret\nend\n", 17), None);
        assert_eq!(last.continuation_in_f("def f(x):\n    ret\nend!\n", 17), None);
        assert_eq!(last.continuation_in_f("def f(x):\n    return x + 1\nend\n", 26), None);
        assert_eq!(LastSuggestion::default().continuation_in_f("x", 0), None);
        assert_eq!(shown("x", 1, "").continuation_in_f("x", 1), None);
        // The same buffer in another file, or with other settings, is another completion.
        let shown = shown("x", 1, "y");
        assert_eq!(shown.continuation(&Job { path: Some("g.py".to_owned()), ..job("x", 1) }), None);
        assert_eq!(shown.continuation(&Job { max_tokens: 1, ..job("x", 1) }), None);
        assert_eq!(shown.continuation(&Job { strategy: crate::completion::Strategy::Ar, ..job("x", 1) }), None);
    }

    #[test]
    fn taking_the_whole_suggestion_or_its_rest_puts_all_of_it_in_the_buffer() {
        let last = shown("def f(x):\n    \nend\n", 14, "return x + 1");
        let expected = Some(("def f(x):\n    return x + 1\nend\n".to_owned(), 26));
        let taken = |text: &str| last.taken_whole(text).map(|job| (job.text.to_string(), job.cursor));
        assert_eq!(taken("return x + 1"), expected);
        assert_eq!(taken("urn x + 1"), expected, "typed through, then taken");
        assert_eq!(taken("return"), None, "not the end of the suggestion");
        assert_eq!(taken(""), None);
        assert!(LastSuggestion::default().taken_whole("x").is_none());
    }

    #[test]
    fn cursors_off_character_boundaries_are_refused() {
        let last = shown("é", 0, "éa");
        assert_eq!(last.continuation_in_f("éé", 1), None);
        assert_eq!(last.continuation_in_f("éé", 2).as_deref(), Some("a"));
    }
}
