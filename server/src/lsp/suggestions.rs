//! Suggestions recently answered, by the id their item carries, so that the person's feedback
//! on one (`copilotd/suggestionFeedback`) reaches the engine with what was shown. Bounded:
//! the oldest are forgotten past [`CAPACITY`], and any after [`LIFETIME`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::completion::feedback::Verdict;
use crate::completion::Completion;
use crate::sync::lock;

/// The notification an editor sends with its verdict on a suggestion.
pub const METHOD: &str = "copilotd/suggestionFeedback";
/// The command an item carries: its one argument is `{"id": n, "more": bool}`, the id to echo
/// back, and whether more lines of the suggestion follow (the editor asks again for them).
pub const ITEM_COMMAND: &str = "copilotd.suggestionAccepted";
/// Suggestions remembered at most.
pub const CAPACITY: usize = 32;
/// Feedback on an older suggestion is ignored.
pub const LIFETIME: Duration = Duration::from_secs(600);

/// What the person did, as an editor reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Took the whole suggestion (what is left of it).
    Accepted,
    /// Took its next word or line: `length` says how much of it is in the document now.
    AcceptedPart,
    /// Dismissed it (what is left after `length`, when given).
    Dismissed,
}

/// One editor's report: `{"id": n, "kind": "accepted" | "acceptedWord" | "acceptedLine" |
/// "dismissed", "length": UTF-16 code units of the item's text in the document now}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub id: u64,
    pub kind: Kind,
    pub length: Option<usize>,
}

impl Report {
    /// Reads a report's params; `Err` says what is wrong with them.
    pub fn parse(params: &Value) -> Result<Report, String> {
        let id = params.get("id").and_then(Value::as_u64).ok_or("no numeric \"id\"")?;
        let kind = match params.get("kind").and_then(Value::as_str) {
            Some("accepted") => Kind::Accepted,
            Some("acceptedWord" | "acceptedLine") => Kind::AcceptedPart,
            Some("dismissed") => Kind::Dismissed,
            other => return Err(format!("unknown kind {other:?}")),
        };
        let length = match params.get("length") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_u64().ok_or("\"length\" is not a count")? as usize),
        };
        if kind == Kind::AcceptedPart && length.is_none() {
            return Err("a partial acceptance without \"length\"".to_owned());
        }
        Ok(Report { id, kind, length })
    }
}

struct Shown {
    id: u64,
    completion: Arc<Completion>,
    /// Bytes of the text in the document already (taken or typed), whose verdict was given.
    settled: usize,
    at: Instant,
}

/// The recent suggestions of a session.
#[derive(Default)]
pub struct Suggestions {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    shown: VecDeque<Shown>,
}

impl Suggestions {
    /// Remembers a suggestion answered now; returns the id its item carries.
    pub fn remember(&self, completion: Completion) -> u64 {
        let mut state = lock(&self.state);
        state.next_id += 1;
        let id = state.next_id;
        state.shown.retain(|shown| shown.at.elapsed() < LIFETIME);
        if state.shown.len() >= CAPACITY {
            state.shown.pop_front();
        }
        state.shown.push_back(Shown { id, completion: Arc::new(completion), settled: 0, at: Instant::now() });
        id
    }

    /// The suggestion `report` is about and the verdict on its text; `None` for an unknown or
    /// expired id, or a report that says nothing new. A whole acceptance or a dismissal ends
    /// the suggestion's life.
    pub fn verdict(&self, report: &Report) -> Option<(Arc<Completion>, Verdict)> {
        let mut state = lock(&self.state);
        let index = state.shown.iter().position(|shown| shown.id == report.id && shown.at.elapsed() < LIFETIME)?;
        let shown = &mut state.shown[index];
        let text = &shown.completion.text;
        let length = report.length.map(|units| byte_offset(text, units));
        let verdict = match report.kind {
            Kind::Accepted => Verdict::Accepted(shown.settled..text.len()),
            Kind::AcceptedPart => Verdict::Accepted(shown.settled..length.unwrap_or(shown.settled)),
            Kind::Dismissed => Verdict::Dismissed { from: length.unwrap_or(0).max(shown.settled) },
        };
        let news = match &verdict {
            Verdict::Accepted(range) => !range.is_empty(),
            Verdict::Dismissed { from } => *from < text.len(),
        };
        if let Verdict::Accepted(range) = &verdict {
            shown.settled = shown.settled.max(range.end);
        }
        let (completion, ended) = (Arc::clone(&shown.completion), shown.settled >= text.len());
        if report.kind != Kind::AcceptedPart || ended {
            state.shown.remove(index);
        }
        news.then_some((completion, verdict))
    }
}

/// Byte offset in `text` after `units` UTF-16 code units (clamped to the text; never inside
/// a character).
fn byte_offset(text: &str, units: usize) -> usize {
    let mut counted = 0;
    for (offset, c) in text.char_indices() {
        if counted + c.len_utf16() > units {
            return offset;
        }
        counted += c.len_utf16();
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion::{CompletionStats, Strategy};
    use serde_json::json;

    fn completion(text: &str) -> Completion {
        Completion {
            text: text.to_owned(),
            tokens: Vec::new(),
            origin: Default::default(),
            stats: CompletionStats::empty(Strategy::Ar),
        }
    }

    fn report(id: u64, kind: Kind, length: Option<usize>) -> Report {
        Report { id, kind, length }
    }

    #[test]
    fn reports_are_read_or_refused_with_a_reason() {
        let read = Report::parse(&json!({"id": 3, "kind": "acceptedLine", "length": 4})).unwrap();
        assert_eq!(read, report(3, Kind::AcceptedPart, Some(4)));
        assert_eq!(Report::parse(&json!({"id": 3, "kind": "dismissed"})).unwrap(), report(3, Kind::Dismissed, None));
        assert!(Report::parse(&json!({"kind": "accepted"})).unwrap_err().contains("id"));
        assert!(Report::parse(&json!({"id": 1, "kind": "liked"})).unwrap_err().contains("unknown kind"));
        assert!(Report::parse(&json!({"id": 1, "kind": "acceptedWord"})).unwrap_err().contains("length"));
        assert!(Report::parse(&json!({"id": 1, "kind": "accepted", "length": -1})).unwrap_err().contains("length"));
    }

    #[test]
    fn parts_accepted_then_the_rest_dismissed() {
        let suggestions = Suggestions::default();
        let id = suggestions.remember(completion("é = 1\nreturn é\n"));
        // "é = 1\n" is 6 UTF-16 units and 7 bytes.
        let (_, verdict) = suggestions.verdict(&report(id, Kind::AcceptedPart, Some(6))).unwrap();
        assert_eq!(verdict, Verdict::Accepted(0..7));
        // Saying the same again says nothing new.
        assert!(suggestions.verdict(&report(id, Kind::AcceptedPart, Some(6))).is_none());
        let (shown, verdict) = suggestions.verdict(&report(id, Kind::Dismissed, None)).unwrap();
        assert_eq!((shown.text.as_str(), verdict), ("é = 1\nreturn é\n", Verdict::Dismissed { from: 7 }));
        // The dismissal ended its life.
        assert!(suggestions.verdict(&report(id, Kind::Accepted, None)).is_none());
    }

    #[test]
    fn a_whole_acceptance_takes_the_rest_once() {
        let suggestions = Suggestions::default();
        let id = suggestions.remember(completion("abc"));
        assert_eq!(suggestions.verdict(&report(id, Kind::Accepted, None)).unwrap().1, Verdict::Accepted(0..3));
        assert!(suggestions.verdict(&report(id, Kind::Dismissed, None)).is_none());
        // Typed through one character, then dismissed.
        let id = suggestions.remember(completion("xyz"));
        assert_eq!(
            suggestions.verdict(&report(id, Kind::Dismissed, Some(1))).unwrap().1,
            Verdict::Dismissed { from: 1 }
        );
    }

    #[test]
    fn old_suggestions_are_forgotten() {
        let suggestions = Suggestions::default();
        let first = suggestions.remember(completion("a"));
        let ids: Vec<u64> = (0..CAPACITY).map(|_| suggestions.remember(completion("b"))).collect();
        assert!(suggestions.verdict(&report(first, Kind::Accepted, None)).is_none());
        assert!(suggestions.verdict(&report(ids[0], Kind::Accepted, None)).is_some());
        assert!(suggestions.verdict(&report(12345, Kind::Accepted, None)).is_none());
    }
}
