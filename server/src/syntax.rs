//! Where a new Python line begins, for FastCoder's skip token:
//! the first non-blank token of a line is the hardest to guess, so retrieval
//! there is throttled — but only in code, not inside a string.
//!
//! A plain text check first rejects every position whose line already has
//! text. At a blank line, the text is parsed with tree-sitter-python with a
//! one-character probe appended at the cursor: the node the probe lands in
//! tells whether the cursor is inside a string, and the brackets left open
//! before it tell a continuation line from a new statement.
//!
//! Both are lexical facts, so the parse need not start at the top of the file:
//! any point after a complete, error-free statement is outside every string
//! and bracket. The oracle remembers the last such point (the *anchor*) and,
//! while the text keeps growing past it, parses only from there. (Incremental
//! re-parsing with an edited tree saved little here: the unfinished tail keeps
//! the enclosing definitions in error recovery.) A text it has not seen starts
//! at the last top-level `def`, `class`, decorator or import before the cursor,
//! not at the top: such a line is outside every string and bracket in all but
//! contrived code (a docstring quoting one at column 0).

use anyhow::{anyhow, Result};
use std::time::{Duration, Instant};
use tree_sitter::{Node, ParseOptions, ParseState, Parser};

/// Default bound on one parse; error recovery on odd text can take tens of ms.
const DEFAULT_BUDGET: Duration = Duration::from_millis(20);

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
    /// The text of the last parse.
    text: String,
    /// A byte offset of `text` at the start of a line outside every string and
    /// bracket; parses start there while later texts extend `text[..anchor]`.
    anchor: usize,
    /// Set when a parse ran out of budget: until the text stops extending
    /// `text`, only the text check decides (no time is spent failing again).
    gave_up: bool,
    budget: Duration,
    /// Whether a text it has not seen is parsed from its last top-level line
    /// (`false`: from the top, as the tests' reference).
    start_at_top_level: bool,
}

impl LineStartOracle {
    pub fn new() -> Result<LineStartOracle> {
        let mut parser = Parser::new();
        parser
            .set_language(&tree_sitter_python::LANGUAGE.into())
            .map_err(|e| anyhow!("cannot load the tree-sitter Python grammar: {e}"))?;
        Ok(LineStartOracle {
            parser,
            text: String::new(),
            anchor: 0,
            gave_up: false,
            budget: DEFAULT_BUDGET,
            start_at_top_level: true,
        })
    }

    /// Bounds the time of one parse; past it, only the text check decides
    /// (a blank line counts as a statement start unless after a backslash).
    pub fn with_budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// True when the cursor (end of `text`) is at the start of a new
    /// statement line: the line is empty or only indentation, and the position
    /// is neither inside a string nor a continuation of an open expression.
    pub fn at_statement_start(&mut self, text: &str) -> bool {
        self.classify(text) == LinePosition::Statement
    }

    /// True at a blank line in code, statement or continuation: where the
    /// paper's skip token (the first non-blank token of a line) applies.
    pub fn at_code_line_start(&mut self, text: &str) -> bool {
        matches!(self.classify(text), LinePosition::Statement | LinePosition::Continuation)
    }

    /// Classifies the end of `text`.
    pub fn classify(&mut self, text: &str) -> LinePosition {
        let line_start = text.rfind('\n').map_or(0, |i| i + 1);
        if !text[line_start..].chars().all(|c| c == ' ' || c == '\t' || c == '\x0c' || c == '\r') {
            return LinePosition::MidLine;
        }
        let previous_line = text[..line_start.saturating_sub(1)].rsplit('\n').next().unwrap_or("");
        let continued = previous_line.trim_end().ends_with('\\');

        let text_only = if continued { LinePosition::Continuation } else { LinePosition::Statement };
        if self.gave_up && text.starts_with(self.text.as_str()) {
            return text_only;
        }
        self.gave_up = false;
        if self.anchor == 0
            || self.anchor > text.len()
            || text.as_bytes()[..self.anchor] != self.text.as_bytes()[..self.anchor]
        {
            self.anchor = if self.start_at_top_level { last_top_level_line(text, line_start) } else { 0 };
        }
        self.text.clear();
        self.text.push_str(text);
        let base = self.anchor;
        let window = &text[base..];
        let source = format!("{window}{PROBE}");
        let Some(tree) = self.parse_within_budget(source.as_bytes()) else {
            self.gave_up = true;
            return text_only;
        };
        let root = tree.root_node();
        let probe = window.len();
        let position = classify_probe(root, probe, continued);
        if position == LinePosition::Statement {
            // Everything before the probe is balanced and outside strings, so
            // the end of any complete statement is a safe place to start.
            if let Some(end) = last_complete_statement_end(root, line_start - base) {
                let next_line = window[end..].find('\n').map_or(line_start - base, |i| end + i + 1);
                self.anchor = base + next_line.min(line_start - base);
            }
        }
        position
    }
}

impl LineStartOracle {
    fn parse_within_budget(&mut self, source: &[u8]) -> Option<tree_sitter::Tree> {
        let started = Instant::now();
        let budget = self.budget;
        let mut over_budget = |_: &ParseState| started.elapsed() > budget;
        let options = ParseOptions::new().progress_callback(&mut over_budget);
        let tree = self.parser.parse_with_options(&mut |at, _| &source[at.min(source.len())..], None, Some(options));
        if tree.is_none() {
            // A halted parse would otherwise be resumed by the next call.
            self.parser.reset();
        }
        tree
    }
}

/// The start of the last line before byte `limit` that opens a top-level
/// definition, decorator or import (0 when there is none).
fn last_top_level_line(text: &str, limit: usize) -> usize {
    const OPENERS: [&str; 6] = ["def ", "class ", "async def ", "@", "import ", "from "];
    text[..limit]
        .rmatch_indices('\n')
        .map(|(newline, _)| newline + 1)
        .filter(|&start| start < limit)
        .find(|&start| OPENERS.iter().any(|opener| text[start..].starts_with(opener)))
        .unwrap_or(0)
}

/// Classifies the probe at byte `probe` of the parsed window.
fn classify_probe(root: Node<'_>, probe: usize, continued: bool) -> LinePosition {
    let Some(leaf) = root.descendant_for_byte_range(probe, probe + PROBE.len()) else {
        return LinePosition::Statement;
    };
    if ancestors(leaf).any(|n| matches!(n.kind(), "string" | "string_content" | "comment"))
        || unterminated_string_before(root, probe)
    {
        return LinePosition::InString;
    }
    if continued || open_brackets(leaf) > 0 {
        return LinePosition::Continuation;
    }
    LinePosition::Statement
}

/// The end of the last statement (a child of the module or of a block) that
/// parsed without errors and ends before byte `limit`.
fn last_complete_statement_end(root: Node<'_>, limit: usize) -> Option<usize> {
    let mut best = None;
    let mut cursor = root.walk();
    'walk: loop {
        let node = cursor.node();
        let in_statement_list = node.parent().is_some_and(|p| matches!(p.kind(), "module" | "block"));
        if node.end_byte() <= limit
            && in_statement_list
            && node.is_named()
            && !node.has_error()
            && ancestors(node).all(|a| !a.is_error())
        {
            best = best.max(Some(node.end_byte()));
        }
        // Only nodes reaching past the limit can contain later statements.
        if node.start_byte() < limit && node.end_byte() > limit && cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                break 'walk;
            }
        }
    }
    best
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

/// Brackets opened and not closed before `leaf` (the probe). Subtrees that
/// end before the probe and parsed without errors are balanced, so only the
/// leaves of earlier siblings along the probe's ancestor path are counted,
/// descending into a sibling only when it contains an error. Strings are
/// separate nodes, so brackets inside them never count.
fn open_brackets(leaf: Node<'_>) -> i64 {
    let at = leaf.start_byte();
    let mut depth = 0;
    for ancestor in ancestors(leaf).skip(1) {
        let mut cursor = ancestor.walk();
        for child in ancestor.children(&mut cursor).take_while(|c| c.end_byte() <= at && c.start_byte() < at) {
            depth += bracket_balance(child);
        }
    }
    depth
}

/// Opening minus closing brackets in `node`, which ends before the probe.
fn bracket_balance(node: Node<'_>) -> i64 {
    if node.child_count() == 0 {
        return match node.kind() {
            "(" | "[" | "{" => 1,
            ")" | "]" | "}" => -1,
            _ => 0,
        };
    }
    if !node.has_error() {
        return 0;
    }
    let mut cursor = node.walk();
    let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
    children.into_iter().map(bracket_balance).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget no test machine exceeds, so that results do not depend on load.
    fn oracle() -> LineStartOracle {
        LineStartOracle::new().unwrap().with_budget(Duration::from_secs(60))
    }

    /// The classification of a parse of the whole text.
    fn classify(text: &str) -> LinePosition {
        whole_text_oracle().classify(text)
    }

    fn whole_text_oracle() -> LineStartOracle {
        LineStartOracle { start_at_top_level: false, ..oracle() }
    }

    #[test]
    fn out_of_budget_falls_back_to_the_text_check() {
        // Budget checks happen every few hundred parser operations, so the
        // text must be long enough to reach one.
        let docstring = format!("def f():\n{}    \"\"\"Summary.\n\n    ", "    x = [1, 2]\n".repeat(2000));
        assert_eq!(oracle().classify(&docstring), LinePosition::InString);
        let mut o = LineStartOracle::new().unwrap().with_budget(Duration::ZERO);
        assert_eq!(o.classify(&docstring), LinePosition::Statement);
        // Having given up, it does not parse the same growing text again.
        let longer = format!("{docstring}More.\n    ");
        let t = Instant::now();
        assert_eq!(o.classify(&longer), LinePosition::Statement);
        assert!(t.elapsed() < Duration::from_millis(1));
        assert_eq!(o.classify("x = 1 + \\\n    "), LinePosition::Continuation);
        assert_eq!(o.classify("x = 1"), LinePosition::MidLine);
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
    fn an_unseen_text_is_parsed_from_its_last_top_level_line() {
        let text = "import os\n\nclass A:\n    x = (1,\n)\n\n\ndef f(a,\n      b):\n    s = \"\"\"\n    text\n    ";
        let mut fresh = oracle();
        assert_eq!(fresh.classify(text), LinePosition::InString);
        assert_eq!(fresh.anchor, text.find("def f").unwrap());
        assert_eq!(classify(text), LinePosition::InString);
        let statement = "import os\n\ndef f(a):\n    return a\n\n";
        assert_eq!(oracle().classify(statement), classify(statement));
    }

    #[test]
    fn windowed_parsing_agrees_with_whole_text_parses() {
        let src = "import os\n\n\nclass Config:\n    \"\"\"Settings.\n\n    More text (here.\n    \"\"\"\n\n    def load(self, path):\n        with open(path) as f:\n            data = f.read(\n                )\n        return data\n";
        let mut windowed = oracle();
        for end in (0..=src.len()).filter(|&i| src.is_char_boundary(i)) {
            let text = &src[..end];
            assert_eq!(windowed.classify(text), classify(text), "at byte {end}: {text:?}");
        }
    }

    /// Windowed parsing against whole-text parses at every line start of a
    /// few real modules. Run with `cargo test -p copilotd-server --lib
    /// syntax::tests::agreement -- --ignored --nocapture`.
    #[test]
    #[ignore = "slow; needs python3"]
    fn agreement_on_stdlib_files() {
        let out = std::process::Command::new("python3")
            .args(["-c", "import argparse, textwrap, json.decoder as d, dataclasses as c; print(argparse.__file__, textwrap.__file__, d.__file__, c.__file__)"])
            .output()
            .expect("python3");
        let mut counts = std::collections::BTreeMap::new();
        for path in String::from_utf8(out.stdout).unwrap().split_whitespace() {
            let src = std::fs::read_to_string(path).unwrap();
            let src = &src[..src.len().min(30_000)];
            let mut windowed = oracle();
            let mut fresh = whole_text_oracle();
            for (i, _) in src.match_indices('\n') {
                let line = &src[i + 1..];
                let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
                for end in [i + 1, i + 1 + indent] {
                    let text = &src[..end];
                    fresh.anchor = 0;
                    let expected = fresh.classify(text);
                    assert_eq!(windowed.classify(text), expected, "{path} at byte {end}");
                    *counts.entry(format!("{expected:?}")).or_insert(0) += 1;
                }
            }
        }
        eprintln!("{counts:?}");
    }

    /// Cost as in decoding: a prompt of about 6 KB of a real file, then the
    /// text grows 3 bytes per step for 600 bytes; repeated at 20 places of
    /// the file, with prompts starting at a `def` line and at any line (which
    /// may be inside a docstring, the worst case). Run with
    /// `cargo test -p copilotd-server --lib syntax::tests::cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement; needs python3"]
    fn cost_on_a_stdlib_file() {
        let out = std::process::Command::new("python3")
            .args(["-c", "import argparse; print(argparse.__file__)"])
            .output()
            .expect("python3");
        let path = String::from_utf8(out.stdout).unwrap();
        let src = std::fs::read_to_string(path.trim()).unwrap();
        for (label, boundary) in [("prompt starts at a def line", "\n    def "), ("prompt starts at any line", "\n")] {
            let (mut blank_calls, mut blank_time, mut other_calls, mut other_time) = (0u32, 0f64, 0u32, 0f64);
            let mut first_time = 0f64;
            for k in 0..20 {
                let start = src[..k * 4000].rfind(boundary).map_or(0, |i| i + 1);
                let mut oracle = LineStartOracle::new().unwrap();
                let mut first = true;
                for end in (start + 6000..(start + 6600).min(src.len())).step_by(3) {
                    let Some(text) = src.get(start..end) else { continue };
                    let t = Instant::now();
                    let kind = oracle.classify(text);
                    let took = t.elapsed().as_secs_f64() * 1e6;
                    if kind == LinePosition::MidLine {
                        (other_calls, other_time) = (other_calls + 1, other_time + took);
                    } else if first {
                        first_time += took;
                        first = false;
                    } else {
                        (blank_calls, blank_time) = (blank_calls + 1, blank_time + took);
                    }
                }
            }
            eprintln!(
                "{label}: first line start {:.0} us; later line starts: {blank_calls} calls, {:.0} us each; \
                 mid-line: {other_calls} calls, {:.2} us each",
                first_time / 20.0,
                blank_time / f64::from(blank_calls),
                other_time / f64::from(other_calls)
            );
        }
    }
}
