//! Where a new Python line begins, for FastCoder's skip token (DESIGN §4.4):
//! the first non-blank token of a line is the hardest to guess, so retrieval
//! there is throttled — but only in code, not inside a string.
//!
//! The text so far is parsed with tree-sitter-python with a one-character
//! probe appended at the cursor: the node the probe lands in tells whether the
//! cursor is inside a string, and the brackets left open before it tell a
//! continuation line from a new statement. Parsing is incremental (the tree of
//! the previous call is edited and reused) and happens only when the current
//! line is blank, which a plain text check decides first.

use anyhow::{anyhow, Result};
use tree_sitter::{InputEdit, Node, Parser, Point, Tree};

/// What kind of position the end of the text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinePosition {
    /// The current line already has non-blank text.
    MidLine,
    /// A blank (or indentation-only) line where a new statement begins.
    Statement,
    /// A blank line inside open brackets or after a backslash continuation.
    Continuation,
    /// Inside a string literal (e.g. a docstring), where code rules do not apply.
    InString,
}

/// The character appended at the cursor: an identifier starts any statement.
const PROBE: &str = "x";

/// Classifies cursor positions of a growing Python text.
pub struct LineStartOracle {
    parser: Parser,
    /// The last parsed source (text + probe) and its tree, for reuse.
    last: Option<(String, Tree)>,
}

impl LineStartOracle {
    pub fn new() -> Result<LineStartOracle> {
        let mut parser = Parser::new();
        parser
            .set_language(&tree_sitter_python::LANGUAGE.into())
            .map_err(|e| anyhow!("cannot load the tree-sitter Python grammar: {e}"))?;
        Ok(LineStartOracle { parser, last: None })
    }

    /// True when the cursor (end of `text`) is at the start of a new
    /// statement line: the line is empty or only indentation, and the position
    /// is neither inside a string nor a continuation of an open expression.
    pub fn at_statement_start(&mut self, text: &str) -> bool {
        self.classify(text) == LinePosition::Statement
    }

    /// Classifies the end of `text`.
    pub fn classify(&mut self, text: &str) -> LinePosition {
        let line_start = text.rfind('\n').map_or(0, |i| i + 1);
        if !text[line_start..].chars().all(|c| c == ' ' || c == '\t' || c == '\x0c' || c == '\r') {
            return LinePosition::MidLine;
        }
        let Some(tree) = self.parse(text) else {
            // No tree (should not happen without a timeout): the text check alone.
            return LinePosition::Statement;
        };
        let probe = text.len();
        let root = tree.root_node();
        let Some(leaf) = root.descendant_for_byte_range(probe, probe + PROBE.len()) else {
            return LinePosition::Statement;
        };
        if ancestors(leaf).any(|n| matches!(n.kind(), "string" | "string_content" | "comment"))
            || unterminated_string_before(root, probe)
        {
            return LinePosition::InString;
        }
        let previous_line = text[..line_start.saturating_sub(1)].rsplit('\n').next().unwrap_or("");
        if previous_line.trim_end().ends_with('\\') || open_brackets(root, probe) > 0 {
            return LinePosition::Continuation;
        }
        LinePosition::Statement
    }

    /// Parses `text` + probe, reusing the previous tree when possible.
    fn parse(&mut self, text: &str) -> Option<Tree> {
        let source = format!("{text}{PROBE}");
        let old = self.last.take().map(|(old_source, mut tree)| {
            let start = common_prefix(&old_source, &source);
            tree.edit(&InputEdit {
                start_byte: start,
                old_end_byte: old_source.len(),
                new_end_byte: source.len(),
                start_position: point_at(&source, start),
                old_end_position: point_at(&old_source, old_source.len()),
                new_end_position: point_at(&source, source.len()),
            });
            tree
        });
        let tree = self.parser.parse(&source, old.as_ref())?;
        self.last = Some((source, tree.clone()));
        Some(tree)
    }
}

fn ancestors(node: Node<'_>) -> impl Iterator<Item = Node<'_>> {
    std::iter::successors(Some(node), |n| n.parent())
}

/// Whether a string opened before byte `at` is never closed. Error recovery
/// leaves an unterminated string as a lone `string_start` inside an ERROR node
/// (or a `string` whose end is missing) and parses the rest as code; only
/// subtrees containing errors are visited.
fn unterminated_string_before(root: Node<'_>, at: usize) -> bool {
    if !root.has_error() {
        return false;
    }
    let mut cursor = root.walk();
    loop {
        let node = cursor.node();
        if node.start_byte() < at {
            let parent_kind = node.parent().map(|p| p.kind());
            if node.kind() == "string_start" && parent_kind != Some("string") {
                return true;
            }
            if node.kind() == "string_end" && node.is_missing() {
                return true;
            }
        }
        if node.has_error() && cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                return false;
            }
        }
    }
}

/// Brackets opened and not closed before byte `at`, within the top-level
/// node containing `at` (strings are separate nodes, so brackets inside them
/// are not counted).
fn open_brackets(root: Node<'_>, at: usize) -> i64 {
    let mut scope = root;
    let mut cursor = root.walk();
    if let Some(top) = root.children(&mut cursor).find(|c| c.start_byte() < at && at <= c.end_byte()) {
        scope = top;
    }
    let mut depth = 0i64;
    let mut cursor = scope.walk();
    'walk: loop {
        let node = cursor.node();
        if node.start_byte() >= at {
            break;
        }
        if node.child_count() == 0 {
            match node.kind() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                _ => {}
            }
        } else if node.end_byte() > node.start_byte() && cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                break 'walk;
            }
        }
    }
    depth
}

fn common_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    // Stay on a character boundary of both.
    (0..=n).rev().find(|&i| a.is_char_boundary(i) && b.is_char_boundary(i)).unwrap_or(0)
}

/// Row and byte column of byte `at` in `s`.
fn point_at(s: &str, at: usize) -> Point {
    let before = &s.as_bytes()[..at];
    let row = before.iter().filter(|&&b| b == b'\n').count();
    let column = at - before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    Point { row, column }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(text: &str) -> LinePosition {
        LineStartOracle::new().unwrap().classify(text)
    }

    #[test]
    fn statement_starts() {
        assert_eq!(classify("def f():\n    "), LinePosition::Statement);
        assert_eq!(classify(""), LinePosition::Statement);
        assert_eq!(classify("import os\n"), LinePosition::Statement);
        assert_eq!(classify("class A:\n    def f(self):\n        return 1\n\n    "), LinePosition::Statement);
        assert_eq!(classify("if x:\n    y = [1, 2]\n    "), LinePosition::Statement);
        // A comment ends at the newline.
        assert_eq!(classify("x = 1  # note (\n"), LinePosition::Statement);
        // After a closed docstring.
        assert_eq!(classify("def f():\n    \"\"\"Doc.\"\"\"\n    "), LinePosition::Statement);
        // Brackets inside strings do not count.
        assert_eq!(classify("s = '(['\n"), LinePosition::Statement);
    }

    #[test]
    fn mid_line_is_never_a_line_start() {
        assert_eq!(classify("def f():\n    return"), LinePosition::MidLine);
        assert_eq!(classify("x = 1"), LinePosition::MidLine);
    }

    #[test]
    fn inside_strings() {
        assert_eq!(classify("def f():\n    \"\"\"Summary.\n\n    "), LinePosition::InString);
        assert_eq!(classify("x = '''\n"), LinePosition::InString);
        assert_eq!(classify("def f():\n    '''a\n    b\n    "), LinePosition::InString);
    }

    #[test]
    fn continuation_lines() {
        assert_eq!(classify("foo(a,\n    "), LinePosition::Continuation);
        assert_eq!(classify("x = [\n    1,\n    "), LinePosition::Continuation);
        assert_eq!(classify("def f(\n    a,\n    "), LinePosition::Continuation);
        assert_eq!(classify("x = 1 + \\\n    "), LinePosition::Continuation);
        assert_eq!(classify("d = {'a': (1,\n          "), LinePosition::Continuation);
    }

    #[test]
    fn incremental_use_agrees_with_fresh_parses() {
        let src = "import os\n\n\nclass Config:\n    \"\"\"Settings.\n\n    More text (here.\n    \"\"\"\n\n    def load(self, path):\n        with open(path) as f:\n            data = f.read(\n                )\n        return data\n";
        let mut oracle = LineStartOracle::new().unwrap();
        for end in (0..=src.len()).filter(|&i| src.is_char_boundary(i)) {
            let text = &src[..end];
            assert_eq!(oracle.classify(text), classify(text), "at byte {end}: {text:?}");
        }
    }
}
