//! Where a completion ends: at the end of the block the cursor is in, or after a line limit.
//!
//! Every language ends a block where the code dedents below it (the first line indented less
//! than the block's first line). Languages other than Python also end it at the closing bracket
//! that closes the cursor's block (`}`, `)` or `]` with no opening partner in the completion, outside
//! strings and comments): the completion stops before it, so the editor's own closing bracket
//! (or the person's) closes it. Python's indentation is its syntax: there a block ends only at
//! a dedent. Where the person has begun a definition on the cursor's line (`def `, `class `,
//! `function `, `pub fn `, …), the completion is that definition: it also ends before the next line
//! as little indented as the definition's own.
//!
//! A model that does not see the text after the cursor (no fill-in-the-middle) writes a whole
//! line of its own where the cursor's line goes on: there the completion ends with its first
//! line, and a copy of that text at its end is left to the text already in the buffer.

/// How the cursor's block is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSyntax {
    /// Indentation only (Python).
    Indentation,
    /// Indentation and brackets. `lifetimes`: a `'` is a character literal or a lifetime
    /// (Rust), not the start of a string.
    Brackets { lifetimes: bool },
}

impl BlockSyntax {
    /// The block syntax of a file by its path: Python for `.py`/`.pyi` and for buffers without
    /// a path or extension, brackets for everything else.
    pub fn for_path(path: Option<&str>) -> BlockSyntax {
        match path.and_then(|p| std::path::Path::new(p).extension()).and_then(|e| e.to_str()) {
            None | Some("py" | "pyi") => BlockSyntax::Indentation,
            Some(ext) => BlockSyntax::Brackets { lifetimes: ext == "rs" },
        }
    }
}

/// Stop rules for one completion.
#[derive(Clone, Debug)]
pub struct StopRules {
    /// The text of the cursor's line before the cursor.
    line_prefix: String,
    syntax: BlockSyntax,
    /// Stop after this many completed lines (0: no limit).
    max_lines: usize,
    /// The text after the cursor on its line that the model does not see, trimmed (empty
    /// when there is none or the model sees it).
    unseen_rest: String,
}

impl StopRules {
    pub fn new(line_prefix: &str, syntax: BlockSyntax, max_lines: usize) -> Self {
        StopRules { line_prefix: line_prefix.to_string(), syntax, max_lines, unseen_rest: String::new() }
    }

    /// These rules for a cursor followed on its line by `rest`, which the model does not see.
    pub fn with_unseen_rest(mut self, rest: &str) -> Self {
        self.unseen_rest = rest.trim().to_string();
        self
    }

    /// The part of `generated` to keep, and whether generation must stop.
    /// Generation stops once the text reaches the end of the cursor's block
    /// (the rest is cut) or completes `max_lines` lines.
    pub fn apply<'a>(&self, generated: &'a str) -> (&'a str, bool) {
        let dedent = self.block_exit(generated);
        let bracket = match self.syntax {
            BlockSyntax::Indentation => None,
            BlockSyntax::Brackets { lifetimes } => unmatched_closer(generated, lifetimes),
        };
        if let Some(cut) = [dedent, bracket].into_iter().flatten().min() {
            return (self.without_unseen_rest(generated[..cut].trim_end()), true);
        }
        if !self.unseen_rest.is_empty() {
            return match generated.split_once('\n') {
                Some((line, _)) => (self.without_unseen_rest(line), true),
                None => (self.without_unseen_rest(generated), false),
            };
        }
        if self.max_lines > 0 {
            if let Some((cut, _)) = generated.match_indices('\n').nth(self.max_lines - 1) {
                return (&generated[..cut], true);
            }
        }
        (generated, false)
    }

    /// `line` without a copy of the unseen rest of the cursor's line at its end: the buffer
    /// already has it after the cursor.
    fn without_unseen_rest<'a>(&self, line: &'a str) -> &'a str {
        if self.unseen_rest.is_empty() {
            return line;
        }
        line.trim_end().strip_suffix(self.unseen_rest.as_str()).unwrap_or(line)
    }

    /// The indentation of the cursor's line when it begins a definition: a word of
    /// [`DEFINITION_WORDS`] and a space typed, after any [`MODIFIERS`].
    fn definition_indent(&self) -> Option<usize> {
        let typed = self.line_prefix.trim_start_matches([' ', '\t']);
        let mut rest = typed;
        while let Some((word, after)) = rest.split_once(char::is_whitespace) {
            if DEFINITION_WORDS.contains(&word) {
                return Some(self.line_prefix.len() - typed.len());
            }
            if !MODIFIERS.contains(&word) {
                return None;
            }
            rest = after.trim_start();
        }
        None
    }

    /// Byte offset in `generated` of the first line that starts with non-blank text indented
    /// less than the block's first line, or, after a definition begun on the cursor's line, no
    /// more than that line (a line that starts with a closing bracket still belongs to the
    /// definition: a wrapped signature's `) -> int:`, the `}` that closes its body).
    fn block_exit(&self, generated: &str) -> Option<usize> {
        let definition = self.definition_indent();
        let mut block_indent: Option<usize> = None;
        let mut offset = 0;
        for (index, line) in generated.split_inclusive('\n').enumerate() {
            let start = offset;
            offset += line.len();
            // Lines still blank say nothing about the block, and neither does
            // the cursor's line when nothing was generated on it.
            if line.trim().is_empty() {
                continue;
            }
            let full_line = if index == 0 { format!("{}{}", self.line_prefix, line) } else { line.to_string() };
            let content = full_line.trim_start_matches([' ', '\t']);
            let indent = full_line.len() - content.len();
            match block_indent {
                None => block_indent = Some(indent),
                Some(block) if indent < block && index > 0 => return Some(start),
                Some(_) => {}
            }
            let closes = content.starts_with([')', ']', '}']);
            if definition.is_some_and(|header| indent <= header && index > 0 && !closes) {
                return Some(start);
            }
        }
        None
    }
}

/// Words that begin a definition (Python's `def` and `class`, JavaScript's `function`, Rust's
/// `fn`, Go's `func`, …).
const DEFINITION_WORDS: &[&str] =
    &["def", "class", "function", "fn", "func", "struct", "enum", "impl", "interface", "trait"];
/// Words that may come before a definition's word.
const MODIFIERS: &[&str] =
    &["async", "pub", "pub(crate)", "export", "default", "public", "private", "protected", "static", "abstract"];

/// Byte offset in `generated` of the closing bracket that closes a bracket opened before the
/// cursor: of its line when only blanks precede it there (a line that closes the block), else
/// of the bracket itself. Brackets in strings and comments do not count.
fn unmatched_closer(generated: &str, lifetimes: bool) -> Option<usize> {
    let mut depth = 0usize;
    let mut line_start = 0;
    let mut state = Lexed::Code;
    let mut chars = generated.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        state = match (state, c) {
            (_, '\n') => {
                line_start = at + 1;
                // Strings and line comments end with their line; block comments go on.
                if state == Lexed::BlockComment {
                    state
                } else {
                    Lexed::Code
                }
            }
            (Lexed::Quoted(_), '\\') => {
                chars.next();
                state
            }
            (Lexed::Quoted(quote), c) if c == quote => Lexed::Code,
            (Lexed::BlockComment, '*') if next == Some('/') => {
                chars.next();
                Lexed::Code
            }
            (Lexed::Quoted(_) | Lexed::LineComment | Lexed::BlockComment, _) => state,
            (Lexed::Code, '/') if next == Some('/') => Lexed::LineComment,
            (Lexed::Code, '/') if next == Some('*') => {
                chars.next();
                Lexed::BlockComment
            }
            // `#` starts a comment where it starts a word (`# note`), not in `a#b` or `#[attr]`.
            (Lexed::Code, '#') if next != Some('[') && starts_word(generated, at) => Lexed::LineComment,
            (Lexed::Code, '\'') if lifetimes => {
                skip_char_literal(&mut chars);
                Lexed::Code
            }
            (Lexed::Code, '"' | '\'' | '`') => Lexed::Quoted(c),
            (Lexed::Code, '(' | '[' | '{') => {
                depth += 1;
                Lexed::Code
            }
            (Lexed::Code, ')' | ']' | '}') => {
                if depth == 0 {
                    let closes_line = generated[line_start..at].trim().is_empty() && line_start > 0;
                    return Some(if closes_line { line_start } else { at });
                }
                depth -= 1;
                Lexed::Code
            }
            (Lexed::Code, _) => Lexed::Code,
        };
    }
    None
}

/// Where the bracket scanner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lexed {
    Code,
    Quoted(char),
    LineComment,
    BlockComment,
}

fn starts_word(text: &str, at: usize) -> bool {
    text[..at].chars().next_back().is_none_or(char::is_whitespace)
}

/// After a `'` in Rust: skips a character literal (`'x'`, `'\n'`, `'\u{1F600}'`); a lifetime
/// (`'a`) is left as code.
fn skip_char_literal(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) {
    let mut ahead = chars.clone();
    match ahead.next() {
        Some((_, '\\')) => {
            ahead.next();
            while let Some((_, c)) = ahead.next() {
                if c == '\'' {
                    *chars = ahead;
                    return;
                }
                if c == '\n' {
                    return;
                }
            }
        }
        Some((_, c)) if c != '\'' && c != '\n' && ahead.next().is_some_and(|(_, q)| q == '\'') => *chars = ahead,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PY: BlockSyntax = BlockSyntax::Indentation;
    const C: BlockSyntax = BlockSyntax::Brackets { lifetimes: false };
    const RUST: BlockSyntax = BlockSyntax::Brackets { lifetimes: true };

    #[test]
    fn a_function_body_ends_where_the_code_dedents() {
        let rules = StopRules::new("    ", PY, 0);
        let text = "return x + 1\n\n\ndef other():\n    pass\n";
        assert_eq!(rules.apply(text), ("return x + 1", true));
        // Still inside the block: keep going.
        assert_eq!(rules.apply("if x:\n        y = 1\n    z"), ("if x:\n        y = 1\n    z", false));
    }

    #[test]
    fn before_unseen_text_on_the_line_a_completion_is_one_line_without_a_copy_of_that_text() {
        let call = StopRules::new("    print(", PY, 0).with_unseen_rest(")  ");
        assert_eq!(call.apply("\"hi\")\n    return x"), ("\"hi\"", true));
        assert_eq!(call.apply("\"hi\""), ("\"hi\"", false), "the line goes on");
        assert_eq!(call.apply("x).strip()\n"), ("x).strip(", true), "the model's line, the buffer's `)` ending it");
        assert_eq!(call.apply("x, y\nz"), ("x, y", true));
        let code = StopRules::new("x = ", PY, 0).with_unseen_rest("compute(1)");
        assert_eq!(code.apply("compute(1)\n"), ("", true), "nothing the line does not say already");
        let c_call = StopRules::new("    f(", C, 0).with_unseen_rest(");");
        assert_eq!(c_call.apply("a, b);\n"), ("a, b", true), "the bracket rule cuts first");
        let blank = StopRules::new("    ", PY, 0).with_unseen_rest(" \t");
        assert_eq!(blank.apply("a = 1\n    b = 2\nc"), ("a = 1\n    b = 2", true), "white space is no text");
    }

    #[test]
    fn a_definition_begun_on_the_cursors_line_ends_with_itself() {
        // (typed on the cursor's line, block syntax, generated, kept)
        let cases = [
            (
                "    def ",
                PY,
                "get(self):\n        return 1\n\n    def other(self):\n        pass\n",
                "get(self):\n        return 1",
            ),
            // A line that starts with `)` goes on the header.
            ("def ", PY, "f(\n    a,\n) -> int:\n    return a\n\n\ndef g():\n", "f(\n    a,\n) -> int:\n    return a"),
            (
                "class ",
                PY,
                "A:\n    x = 1\n\n    def f(self):\n        pass\n\nclass B:\n",
                "A:\n    x = 1\n\n    def f(self):\n        pass",
            ),
            // A header typed whole: its body sets no new bound.
            ("class A(Base):", PY, "\n    x = 1\n    y = 2\n\nclass B:\n", "\n    x = 1\n    y = 2"),
            (
                "export function ",
                C,
                "mul(a, b) {\n  return a * b;\n}\n\nfunction div(a, b) {\n",
                "mul(a, b) {\n  return a * b;\n}",
            ),
            (
                "    pub fn ",
                RUST,
                "len(&self) -> usize {\n        self.0.len()\n    }\n\n    pub fn is_empty",
                "len(&self) -> usize {\n        self.0.len()\n    }",
            ),
        ];
        for (typed, syntax, generated, kept) in cases {
            assert_eq!(StopRules::new(typed, syntax, 0).apply(generated), (kept, true), "after {typed:?}");
        }
        for not_yet in ["def", "    define = ", "x = fn ", "    async "] {
            let rules = StopRules::new(not_yet, PY, 0);
            let same_indent = format!("a\n{}b\n", " ".repeat(not_yet.len() - not_yet.trim_start().len()));
            assert_eq!(rules.apply(&same_indent), (same_indent.as_str(), false), "{not_yet:?} begins no definition");
        }
        // A body begun with a statement goes on to the block's end.
        let body = StopRules::new("    ", PY, 0);
        let text = "def inner():\n        pass\n    return inner\n";
        assert_eq!(body.apply(text), ("def inner():\n        pass\n    return inner\n", false));
    }

    #[test]
    fn an_indentation_still_being_written_does_not_stop() {
        let rules = StopRules::new("    ", PY, 0);
        assert_eq!(rules.apply("a = 1\n  "), ("a = 1\n  ", false));
        assert_eq!(rules.apply("a = 1\nb"), ("a = 1", true));
    }

    #[test]
    fn the_first_line_sets_the_block_when_the_cursor_starts_a_line() {
        let rules = StopRules::new("", PY, 0);
        assert_eq!(rules.apply("    a = 1\n    b = 2\nc = 3"), ("    a = 1\n    b = 2", true));
        // A cursor in the middle of a line measures that line's indentation.
        let mid_line = StopRules::new("    total = ", PY, 0);
        assert_eq!(
            mid_line.apply("0\n    for x in xs:\n        total += x\nprint(total)"),
            ("0\n    for x in xs:\n        total += x", true)
        );
        // At the end of a block opener, the next line sets the block.
        let opener = StopRules::new("def f():", PY, 0);
        assert_eq!(opener.apply("\n    return 1\n\ndef g():"), ("\n    return 1", true));
    }

    #[test]
    fn line_limit() {
        let rules = StopRules::new("", PY, 2);
        assert_eq!(rules.apply("a\nb\nc"), ("a\nb", true));
        assert_eq!(rules.apply("a\nb"), ("a\nb", false));
        assert_eq!(StopRules::new("", PY, 0).apply("x\ny\nz"), ("x\ny\nz", false));
    }

    #[test]
    fn syntax_by_path() {
        assert_eq!(BlockSyntax::for_path(Some("a/b.py")), PY);
        assert_eq!(BlockSyntax::for_path(None), PY);
        assert_eq!(BlockSyntax::for_path(Some("src/main.rs")), RUST);
        for path in ["a.c", "a.js", "a.ts", "a.go", "a.lua", "a.rb", "a.yaml"] {
            assert_eq!(BlockSyntax::for_path(Some(path)), C, "{path}");
        }
    }

    #[test]
    fn a_c_function_body_ends_before_its_closing_brace() {
        // The cursor at the start of a body line: the brace line that closes the function is cut.
        let rules = StopRules::new("    ", C, 0);
        let body = "int y = x * 2;\n    if (y > 10) {\n        y = 10;\n    }\n    return y;\n";
        let text = format!("{body}}}\n\nint other(void) {{\n");
        assert_eq!(rules.apply(&text), (body.trim_end(), true));
        // Nested blocks open and close inside the completion: keep going.
        assert_eq!(
            rules.apply("if (a) {\n        b();\n    }\n    c"),
            ("if (a) {\n        b();\n    }\n    c", false)
        );
        // `} else {` closes the cursor's branch.
        let branch = StopRules::new("        ", C, 0);
        assert_eq!(branch.apply("a();\n    } else {\n        b();"), ("a();", true));
    }

    #[test]
    fn a_brace_that_the_dedent_would_miss_still_ends_the_block() {
        // Code written without indentation: only the bracket tells.
        let rules = StopRules::new("", C, 0);
        assert_eq!(rules.apply("x++;\nreturn x;\n}\nint g() {"), ("x++;\nreturn x;", true));
    }

    #[test]
    fn javascript_arguments_end_at_the_closing_parenthesis() {
        // Inside a call's arguments: the completion stops before the `)` of the call.
        let rules = StopRules::new("fetch(url, ", C, 0);
        assert_eq!(rules.apply("{ method: 'POST' });\nconsole.log(1);"), ("{ method: 'POST' }", true));
        // Brackets in strings, template literals and comments do not count.
        let quoted = StopRules::new("  log(", C, 0);
        assert_eq!(
            quoted.apply("\"a) \\\" ]\", `}`, ')' /* ) */ // )"),
            ("\"a) \\\" ]\", `}`, ')' /* ) */ // )", false)
        );
        assert_eq!(quoted.apply("'x')"), ("'x'", true));
        // An arrow function's body: its `});` line ends the block of the callback.
        let callback = StopRules::new("  ", C, 0);
        assert_eq!(callback.apply("total += x;\n});\nnext();"), ("total += x;", true));
    }

    #[test]
    fn rust_lifetimes_and_char_literals() {
        let rules = StopRules::new("    ", RUST, 0);
        let body = "let s: &'a str = if c == '}' { \"{\" } else { x };\n    s";
        assert_eq!(rules.apply(&format!("{body}\n}}\n")), (body, true));
        assert_eq!(
            rules.apply("f::<'static>(b'(', '\\'', '\\u{7d}')\n"),
            ("f::<'static>(b'(', '\\'', '\\u{7d}')\n", false)
        );
        // `#[...]` is an attribute, not a comment.
        assert_eq!(rules.apply("#[inline] x)"), ("#[inline] x", true));
        // `# ...` is a comment (shell, Ruby, YAML).
        assert_eq!(StopRules::new("", C, 0).apply("a # ) }\nb"), ("a # ) }\nb", false));
    }

    #[test]
    fn lua_and_ruby_blocks_end_at_the_dedent() {
        let rules = StopRules::new("  ", C, 0);
        assert_eq!(rules.apply("local y = x + 1\n  return y\nend\n"), ("local y = x + 1\n  return y", true));
        assert_eq!(rules.apply("puts(x)\nend"), ("puts(x)", true));
    }

    #[test]
    fn yaml_mappings_end_at_the_dedent() {
        let rules = StopRules::new("    ", C, 0);
        let text = "image: nginx\n    ports:\n      - \"80:80\"\n  db:\n    image: postgres";
        assert_eq!(rules.apply(text), ("image: nginx\n    ports:\n      - \"80:80\"", true));
    }

    #[test]
    fn python_keeps_its_indentation_rule() {
        // A `)` closing a call opened before the cursor is no block end in Python.
        let rules = StopRules::new("    total = sum(", PY, 0);
        assert_eq!(rules.apply("xs)\n    return total"), ("xs)\n    return total", false));
        let c = StopRules::new("    total = sum(", C, 0);
        assert_eq!(c.apply("xs)\n    return total"), ("xs", true));
    }
}
