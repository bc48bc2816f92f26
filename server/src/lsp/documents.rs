//! Open text documents: versioned buffers, incremental edits, and LSP positions (UTF-16 code units).
//!
//! tower-lsp runs handlers concurrently (tower-lsp issue 284), so the store is synchronous: a
//! notification handler applies its change before it awaits anything, and a request takes a
//! [`Snapshot`] of exactly the state it was asked about. Texts are shared with snapshots through
//! `Arc`, so an edit copies a buffer only while a completion still reads the old version.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use tower_lsp_server::lsp_types::{Position, TextDocumentContentChangeEvent, Uri};
use tower_lsp_server::UriExt;

use crate::text_position;

/// Why a position does not denote a place in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PositionError {
    /// The line is past the last line of the document.
    LineOutOfRange { line: u32, lines: usize },
    /// The character points between the two halves of a UTF-16 surrogate pair.
    InsideSurrogatePair { line: u32, character: u32 },
}

impl fmt::Display for PositionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LineOutOfRange { line, lines } => {
                write!(f, "line {line} is out of range: the document has {lines} lines")
            }
            Self::InsideSurrogatePair { line, character } => {
                write!(f, "character {character} of line {line} points inside a UTF-16 surrogate pair")
            }
        }
    }
}

impl std::error::Error for PositionError {}

/// Why a document operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocumentError {
    /// The URI was never opened (or was closed).
    Unknown(String),
    /// An earlier change could not be applied; the buffer no longer matches the editor's.
    OutOfSync(String),
    /// A change range does not fit the document.
    BadRange(PositionError),
    /// A change range ends before it starts.
    ReversedRange,
}

impl fmt::Display for DocumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown(uri) => write!(f, "document {uri} is not open"),
            Self::OutOfSync(uri) => {
                write!(f, "document {uri} is out of sync after a change that did not apply; reopen it")
            }
            Self::BadRange(err) => write!(f, "change range is invalid: {err}"),
            Self::ReversedRange => write!(f, "change range ends before it starts"),
        }
    }
}

impl std::error::Error for DocumentError {}

/// Byte offset in `text` of an LSP position. Lines end at `\n`, `\r\n` or `\r`; characters count
/// UTF-16 code units. A character past the end of its line stands for the line's end, as the LSP
/// specification says; a line past the last one is an error.
pub fn offset_at(text: &str, position: Position) -> Result<usize, PositionError> {
    place(text, position).map(|(offset, _)| offset)
}

/// [`offset_at`], with the position it stands for: `position`, its character past the end of
/// its line brought back to the line's end (what an answer at that place names).
pub fn place(text: &str, position: Position) -> Result<(usize, Position), PositionError> {
    let start = line_start(text, position.line)?;
    let rest = &text[start..text_position::line_end(text, start)];
    let mut units = 0usize;
    let wanted = position.character as usize;
    for (index, ch) in rest.char_indices() {
        if units == wanted {
            return Ok((start + index, position));
        }
        units += ch.len_utf16();
        if units > wanted {
            return Err(PositionError::InsideSurrogatePair { line: position.line, character: position.character });
        }
    }
    Ok((start + rest.len(), Position { line: position.line, character: units as u32 }))
}

/// Byte offset where line `line` starts.
fn line_start(text: &str, line: u32) -> Result<usize, PositionError> {
    text_position::line_start(text, line as usize).map_err(|lines| PositionError::LineOutOfRange { line, lines })
}

/// The local file a document is the buffer of. Only `file:` URIs name files: an `untitled:`,
/// `git:` or `http:` document is a buffer of its own, even when its path looks like a file's.
pub fn file_path(uri: &Uri) -> Option<PathBuf> {
    let scheme = uri.scheme()?;
    if !scheme.as_str().eq_ignore_ascii_case("file") {
        return None;
    }
    uri.to_file_path().map(|path| path.into_owned())
}

/// Applies one content change event to `text`.
pub fn apply_change(text: &mut String, change: &TextDocumentContentChangeEvent) -> Result<(), DocumentError> {
    match change.range {
        None => {
            text.clear();
            text.push_str(&change.text);
        }
        Some(range) => {
            let start = change_offset(text, range.start).map_err(DocumentError::BadRange)?;
            let end = change_offset(text, range.end).map_err(DocumentError::BadRange)?;
            if end < start {
                return Err(DocumentError::ReversedRange);
            }
            text.replace_range(start..end, &change.text);
        }
    }
    Ok(())
}

/// [`offset_at`] of a change's range, where the line after the last one stands for the end of
/// the text: a client that removes a document's last line may range up to the start of the
/// line after it, though the text does not end with a line break.
fn change_offset(text: &str, position: Position) -> Result<usize, PositionError> {
    match offset_at(text, position) {
        Err(PositionError::LineOutOfRange { line, lines }) if line as usize == lines => Ok(text.len()),
        placed => placed,
    }
}

/// An immutable view of one version of a document, cheap to clone.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub uri: Uri,
    pub version: i32,
    pub language_id: String,
    pub text: Arc<String>,
}

#[derive(Debug)]
struct Document {
    version: i32,
    language_id: String,
    text: Arc<String>,
    /// Set when a change could not be applied; cleared by a full-text change.
    out_of_sync: bool,
}

/// The open documents, keyed by URI.
#[derive(Debug, Default)]
pub struct Documents {
    open: Mutex<HashMap<Uri, Document>>,
    /// Documents changed while not open whose first such change was reported (see
    /// [`Documents::first_change_while_closed`]).
    reported_closed: Mutex<HashSet<Uri>>,
}

/// Most documents remembered as reported changed while not open; past it the record starts
/// over (a client that keeps editing unopened documents hears of each again).
const REPORTED_CLOSED_LIMIT: usize = 1024;

impl Documents {
    fn lock(&self) -> MutexGuard<'_, HashMap<Uri, Document>> {
        // A panic while holding the lock cannot leave a document half-edited (edits are single
        // `replace_range` calls), so a poisoned map is still consistent.
        crate::sync::lock(&self.open)
    }

    /// Opens (or reopens) a document with its full text.
    pub fn open(&self, uri: Uri, language_id: String, version: i32, text: String) {
        crate::sync::lock(&self.reported_closed).remove(&uri);
        let document = Document { version, language_id, text: Arc::new(text), out_of_sync: false };
        self.lock().insert(uri, document);
    }

    /// Whether a change to `uri`, which is not open, is the first since it was last opened: the
    /// one to report, so that an editor that edits a document it never opened hears of it once
    /// rather than at every keystroke.
    pub fn first_change_while_closed(&self, uri: &Uri) -> bool {
        let mut reported = crate::sync::lock(&self.reported_closed);
        if reported.len() >= REPORTED_CLOSED_LIMIT {
            reported.clear();
        }
        reported.insert(uri.clone())
    }

    /// Applies the changes of one `didChange` in order. A change that does not apply marks the
    /// document out of sync, and the changes after it are skipped until a full-text change
    /// (which brings it back in sync). The error returned is the one that put the document out
    /// of sync; a `didChange` to a document that was out of sync already returns
    /// [`DocumentError::OutOfSync`] (its cause was returned before), so that the cause is
    /// reported once.
    pub fn change(
        &self,
        uri: &Uri,
        version: i32,
        changes: &[TextDocumentContentChangeEvent],
    ) -> Result<Snapshot, DocumentError> {
        let mut open = self.lock();
        let document = open.get_mut(uri).ok_or_else(|| DocumentError::Unknown(uri.as_str().to_owned()))?;
        if version < document.version {
            tracing::debug!(
                "{}: didChange goes back from version {} to {version}; applied",
                uri.as_str(),
                document.version
            );
        }
        let mut failure = document.out_of_sync.then(|| DocumentError::OutOfSync(uri.as_str().to_owned()));
        for change in changes {
            if change.range.is_none() {
                failure = None;
            }
            if failure.is_none() {
                failure = apply_change(Arc::make_mut(&mut document.text), change).err();
            }
        }
        document.version = version;
        document.out_of_sync = failure.is_some();
        match failure {
            Some(err) => Err(err),
            None => Ok(snapshot_of(uri, document)),
        }
    }

    /// Forgets a document; returns whether it was open.
    pub fn close(&self, uri: &Uri) -> bool {
        self.lock().remove(uri).is_some()
    }

    /// Calls `visit` with every open document that stands for a workspace file (in sync, with a
    /// [`file_path`]), holding the store's lock (so no change is applied meanwhile).
    pub fn for_each(&self, mut visit: impl FnMut(&Uri, &str)) {
        let open = self.lock();
        let overlays = open.iter().filter(|(uri, document)| !document.out_of_sync && file_path(uri).is_some());
        for (uri, document) in overlays {
            visit(uri, &document.text);
        }
    }

    /// The current state of a document.
    pub fn snapshot(&self, uri: &Uri) -> Result<Snapshot, DocumentError> {
        let open = self.lock();
        let document = open.get(uri).ok_or_else(|| DocumentError::Unknown(uri.as_str().to_owned()))?;
        if document.out_of_sync {
            return Err(DocumentError::OutOfSync(uri.as_str().to_owned()));
        }
        Ok(snapshot_of(uri, document))
    }
}

fn snapshot_of(uri: &Uri, document: &Document) -> Snapshot {
    Snapshot {
        uri: uri.clone(),
        version: document.version,
        language_id: document.language_id.clone(),
        text: Arc::clone(&document.text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_lsp_server::lsp_types::Range;

    fn pos(line: u32, character: u32) -> Position {
        Position { line, character }
    }

    fn edit(start: Position, end: Position, text: &str) -> TextDocumentContentChangeEvent {
        TextDocumentContentChangeEvent { range: Some(Range { start, end }), range_length: None, text: text.to_owned() }
    }

    #[test]
    fn offsets_count_utf16_units() {
        // 'é' is 2 bytes / 1 unit, '😀' is 4 bytes / 2 units.
        let text = "aé😀b\nx";
        assert_eq!(offset_at(text, pos(0, 0)), Ok(0));
        assert_eq!(offset_at(text, pos(0, 1)), Ok(1));
        assert_eq!(offset_at(text, pos(0, 2)), Ok(3));
        assert_eq!(offset_at(text, pos(0, 4)), Ok(7));
        assert_eq!(offset_at(text, pos(0, 5)), Ok(8));
        assert_eq!(offset_at(text, pos(1, 1)), Ok(10));
    }

    #[test]
    fn surrogate_pair_middle_is_an_error() {
        let text = "a😀b";
        assert_eq!(offset_at(text, pos(0, 2)), Err(PositionError::InsideSurrogatePair { line: 0, character: 2 }));
    }

    #[test]
    fn a_line_out_of_range_is_an_error_a_character_past_the_line_its_end() {
        let text = "ab\ncd";
        assert_eq!(offset_at(text, pos(0, 3)), Ok(2));
        assert_eq!(offset_at(text, pos(1, 99)), Ok(5));
        assert_eq!(place(text, pos(1, 99)), Ok((5, pos(1, 2))), "the place named is the line's end");
        assert_eq!(place("a😀b", pos(0, 3)), Ok((5, pos(0, 3))));
        assert_eq!(offset_at(text, pos(2, 0)), Err(PositionError::LineOutOfRange { line: 2, lines: 2 }));
        assert_eq!(offset_at("", pos(0, 0)), Ok(0));
        assert_eq!(offset_at("a\n", pos(1, 0)), Ok(2));
    }

    #[test]
    fn all_line_endings_count() {
        let text = "a\r\nb\rc\nd";
        assert_eq!(offset_at(text, pos(1, 0)), Ok(3));
        assert_eq!(offset_at(text, pos(2, 0)), Ok(5));
        assert_eq!(offset_at(text, pos(3, 0)), Ok(7));
        // The end of a line is before its terminator, even a two-byte one.
        assert_eq!(offset_at(text, pos(0, 1)), Ok(1));
        assert_eq!(offset_at(text, pos(0, 2)), Ok(1));
    }

    #[test]
    fn incremental_edits_apply_in_order() {
        let docs = Documents::default();
        let uri: Uri = "file:///w/a.py".parse().unwrap();
        docs.open(uri.clone(), "python".into(), 1, "def f():\n    pass\n".into());
        let snap = docs
            .change(
                &uri,
                2,
                &[
                    edit(pos(1, 4), pos(1, 8), "return 1"),
                    edit(pos(0, 4), pos(0, 5), "g😀"),
                    edit(pos(0, 7), pos(0, 7), "x"),
                ],
            )
            .unwrap();
        assert_eq!(snap.text.as_str(), "def g😀x():\n    return 1\n");
        assert_eq!(snap.version, 2);
    }

    #[test]
    fn a_change_may_range_to_the_line_after_the_last() {
        let docs = Documents::default();
        let uri: Uri = "file:///w/a.py".parse().unwrap();
        docs.open(uri.clone(), "python".into(), 1, "a = 1\nb = 2".into());
        let snap = docs.change(&uri, 2, &[edit(pos(1, 0), pos(2, 0), "")]).unwrap();
        assert_eq!(snap.text.as_str(), "a = 1\n");
        let appended = docs.change(&uri, 3, &[edit(pos(2, 0), pos(2, 0), "c = 3\n")]).unwrap();
        assert_eq!(appended.text.as_str(), "a = 1\nc = 3\n");
        // Further than that is still an error.
        assert!(docs.change(&uri, 4, &[edit(pos(4, 0), pos(4, 0), "x")]).is_err());
    }

    #[test]
    fn snapshots_are_unaffected_by_later_edits() {
        let docs = Documents::default();
        let uri: Uri = "file:///w/a.py".parse().unwrap();
        docs.open(uri.clone(), "python".into(), 1, "abc".into());
        let before = docs.snapshot(&uri).unwrap();
        docs.change(&uri, 2, &[edit(pos(0, 3), pos(0, 3), "d")]).unwrap();
        assert_eq!(before.text.as_str(), "abc");
        assert_eq!(docs.snapshot(&uri).unwrap().text.as_str(), "abcd");
    }

    #[test]
    fn a_bad_change_marks_the_document_out_of_sync_until_a_full_change() {
        let docs = Documents::default();
        let uri: Uri = "file:///w/a.py".parse().unwrap();
        docs.open(uri.clone(), "python".into(), 1, "abc".into());
        let bad = docs.change(&uri, 2, &[edit(pos(3, 0), pos(3, 0), "x")]);
        assert!(matches!(bad, Err(DocumentError::BadRange(_))));
        assert!(matches!(docs.snapshot(&uri), Err(DocumentError::OutOfSync(_))));
        let later = docs.change(&uri, 3, &[edit(pos(0, 0), pos(0, 0), "x")]);
        assert!(matches!(later, Err(DocumentError::OutOfSync(_))));
        let full = TextDocumentContentChangeEvent { range: None, range_length: None, text: "new".into() };
        assert_eq!(docs.change(&uri, 4, &[full]).unwrap().text.as_str(), "new");
        let reversed = docs.change(&uri, 5, &[edit(pos(0, 2), pos(0, 1), "")]);
        assert_eq!(reversed.unwrap_err(), DocumentError::ReversedRange);
    }

    #[test]
    fn only_the_change_that_puts_a_document_out_of_sync_is_its_error() {
        let docs = Documents::default();
        let uri: Uri = "file:///w/a.py".parse().unwrap();
        docs.open(uri.clone(), "python".into(), 1, "abc".into());
        let bad = || edit(pos(5, 0), pos(5, 0), "x");
        let full = |text: &str| TextDocumentContentChangeEvent { range: None, range_length: None, text: text.into() };
        assert!(matches!(docs.change(&uri, 2, &[bad()]), Err(DocumentError::BadRange(_))));
        for version in 3..6 {
            let later = docs.change(&uri, version, &[edit(pos(0, 0), pos(0, 0), "x")]);
            assert!(matches!(later, Err(DocumentError::OutOfSync(_))), "{later:?}");
        }
        // A full-text change later in the same batch brings it back in sync; a bad change after
        // that is a new error.
        let batch = [edit(pos(0, 0), pos(0, 0), "x"), full("new"), edit(pos(0, 3), pos(0, 3), "!")];
        assert_eq!(docs.change(&uri, 6, &batch).unwrap().text.as_str(), "new!");
        assert_eq!(docs.change(&uri, 7, &[bad(), full("fixed")]).unwrap().text.as_str(), "fixed");
        assert!(matches!(docs.change(&uri, 8, &[full("again"), bad()]), Err(DocumentError::BadRange(_))));
        docs.open(uri.clone(), "python".into(), 9, "reopened".into());
        assert_eq!(docs.snapshot(&uri).unwrap().text.as_str(), "reopened");
    }

    #[test]
    fn a_version_going_back_is_applied_and_logged() {
        let docs = Documents::default();
        let uri: Uri = "file:///w/a.py".parse().unwrap();
        docs.open(uri.clone(), "python".into(), 5, "ab".into());
        let captured = crate::lsp::tests::captured_log::CapturedLog::default();
        tracing::subscriber::with_default(captured.subscriber(), || {
            docs.change(&uri, 6, &[edit(pos(0, 2), pos(0, 2), "c")]).unwrap();
            docs.change(&uri, 3, &[edit(pos(0, 3), pos(0, 3), "d")]).unwrap();
        });
        let log = captured.text();
        assert_eq!(docs.snapshot(&uri).unwrap().text.as_str(), "abcd");
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(log.contains("from version 6 to 3"), "{log}");
    }

    #[test]
    fn only_file_uris_name_files() {
        let path = |uri: &str| file_path(&uri.parse().unwrap());
        assert_eq!(path("file:///ws/a%20b.py"), Some(PathBuf::from("/ws/a b.py")));
        assert_eq!(path("FILE:///ws/a.py"), Some(PathBuf::from("/ws/a.py")));
        for uri in ["git:/ws/a.py?%7B%22ref%22%3A%22HEAD%22%7D", "untitled:/ws/a.py", "http://host/ws/a.py"] {
            assert_eq!(path(uri), None, "{uri}");
        }
    }

    #[test]
    fn only_in_sync_file_documents_overlay_the_workspace() {
        let docs = Documents::default();
        let open = |uri: &str, text: &str| docs.open(uri.parse().unwrap(), "python".into(), 1, text.into());
        open("file:///ws/a.py", "a = 1\n");
        open("untitled:/ws/b.py", "b = 1\n");
        open("git:/ws/c.py?ref", "c = 1\n");
        open("file:///ws/e.py", "e = 1\n");
        docs.change(&"file:///ws/e.py".parse().unwrap(), 2, &[edit(pos(9, 0), pos(9, 0), "x")]).unwrap_err();
        let mut visited = Vec::new();
        docs.for_each(|uri, _| visited.push(uri.as_str().to_owned()));
        assert_eq!(visited, ["file:///ws/a.py"]);
    }

    #[test]
    fn unknown_and_closed_documents_are_errors() {
        let docs = Documents::default();
        let uri: Uri = "file:///w/a.py".parse().unwrap();
        assert!(matches!(docs.snapshot(&uri), Err(DocumentError::Unknown(_))));
        docs.open(uri.clone(), "python".into(), 1, "x".into());
        assert!(docs.close(&uri));
        assert!(!docs.close(&uri));
        assert!(matches!(docs.change(&uri, 2, &[]), Err(DocumentError::Unknown(_))));
    }
}
