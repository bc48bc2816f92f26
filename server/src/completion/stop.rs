//! Where a completion ends: at the end of the block the cursor is in.
//!
//! Every language ends a block where the code dedents below it (the first line indented less
//! than the block's first line). Languages other than Python also end it at the closing bracket
//! that closes the cursor's block (`}`, `)` or `]` with no opening partner in the completion, outside
//! strings and comments): the completion stops before it, so the editor's own closing bracket
//! (or the person's) closes it. With nothing after the cursor on its line there is no such
//! bracket: brackets the line opened before the cursor are the completion's to close. Prose
//! (Markdown, plain text) has no bracket rule. Python's indentation is its syntax: there a block
//! ends only at a dedent. Where the person has begun a definition on the cursor's line (`def `, `class `,
//! `function `, `pub fn `, …), the completion is that definition: it also ends before the next line
//! as little indented as the definition's own. The same holds for any statement the person has
//! begun on the cursor's line whose block or brackets the completion's first line opens
//! (`int main() {`, a method's `(key) {`, `if (x) {`, Python's `for x in xs:`, Lua's `if x then`, a
//! call's `(` with its arguments on lines of their own); a line that closes or goes on with it (`}`,
//! `end`, `fi`, `} else {`, `else:`, `rescue`) is still its own. A line after a `return` (`raise`,
//! `throw`, `break`, `continue`) at that statement's own indentation would never run: the
//! completion ends before it.
//! A completion that begins with a definition on a line where nothing is typed (a blank line in a
//! class body) is that definition: it ends before the next definition (or decorator) as little
//! indented, so a suggestion is one method, not the rest of the class.
//!
//! A small model caught in a loop writes the same line, or the same few lines, again and again:
//! once one to [`MAX_LOOP_LINES`] lines have come [`LOOP_ROUNDS`] times in a row, the completion
//! keeps the first round and ends.
//!
//! A model that does not see the text after the cursor (no fill-in-the-middle) writes a whole
//! line of its own where the cursor's line goes on: there the completion ends with its first
//! line, and a copy of that text at its end is left to the text already in the buffer. Nor does
//! it see the lines below the cursor: a line it writes that is the buffer's next one (the same
//! indentation and text) is code already there, and the completion ends before it.

use std::borrow::Cow;

use super::brackets::{is_word_char, Lexer};

/// How the cursor's block is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSyntax {
    /// Indentation only (Python).
    Indentation,
    /// Indentation and brackets. `lifetimes`: a `'` is a character literal or a lifetime
    /// (Rust), not the start of a string.
    Brackets { lifetimes: bool },
    /// Indentation only, and no statements: prose (Markdown, plain text), where a `)` closes a
    /// list number (`1) eggs`) and a colon ends a sentence.
    Prose,
}

/// Extensions of prose files.
const PROSE_EXTENSIONS: &[&str] = &["md", "markdown", "txt", "rst", "adoc", "org", "tex"];

/// Language ids of prose buffers, as VS Code (`plaintext`, `restructuredtext`, `latex`) and
/// Neovim (`text`, `rst`, `tex`) name them.
const PROSE_LANGUAGES: &[&str] =
    &["markdown", "plaintext", "text", "restructuredtext", "rst", "asciidoc", "org", "latex", "tex"];

impl BlockSyntax {
    /// The block syntax of a buffer: by the editor's language id when it gives one (it knows
    /// buffers without a file, and files whose language the user chose), else by the path's
    /// extension; Python when neither tells.
    pub fn for_buffer(path: Option<&str>, language: Option<&str>) -> BlockSyntax {
        match language.filter(|id| !id.is_empty()) {
            Some(id) => BlockSyntax::for_language(id),
            None => BlockSyntax::for_path(path),
        }
    }

    /// The block syntax of a file by its path's extension, in any case: Python for `.py`/`.pyi`
    /// and for buffers without a path or extension, prose for [`PROSE_EXTENSIONS`], brackets
    /// for everything else.
    fn for_path(path: Option<&str>) -> BlockSyntax {
        let extension = path.and_then(|p| std::path::Path::new(p).extension()).and_then(|e| e.to_str());
        match extension.map(str::to_ascii_lowercase).as_deref() {
            None | Some("py" | "pyi") => BlockSyntax::Indentation,
            Some(ext) if PROSE_EXTENSIONS.contains(&ext) => BlockSyntax::Prose,
            Some(ext) => BlockSyntax::Brackets { lifetimes: ext == "rs" },
        }
    }

    /// The block syntax of an editor language id (VS Code's and Neovim's names), in any case:
    /// Python's indentation, prose for [`PROSE_LANGUAGES`], brackets for everything else.
    fn for_language(id: &str) -> BlockSyntax {
        match id.to_ascii_lowercase().as_str() {
            "python" => BlockSyntax::Indentation,
            id if PROSE_LANGUAGES.contains(&id) => BlockSyntax::Prose,
            id => BlockSyntax::Brackets { lifetimes: id == "rust" },
        }
    }
}

/// Stop rules for one completion.
#[derive(Clone, Debug)]
pub struct StopRules {
    /// The text of the cursor's line before the cursor.
    line_prefix: String,
    syntax: BlockSyntax,
    /// The text after the cursor on its line that the model does not see, trimmed (empty
    /// when there is none or the model sees it).
    unseen_rest: String,
    /// The first non-blank line after the cursor's line, which the model does not see, without
    /// trailing white space (empty when there is none or the model sees it).
    unseen_next_line: String,
    /// Whether the cursor's line has nothing after the cursor (seen by the model or not).
    line_ends_at_cursor: bool,
}

impl StopRules {
    pub fn new(line_prefix: &str, syntax: BlockSyntax) -> Self {
        StopRules {
            line_prefix: line_prefix.to_string(),
            syntax,
            unseen_rest: String::new(),
            unseen_next_line: String::new(),
            line_ends_at_cursor: false,
        }
    }

    /// These rules for a cursor with nothing after it on its line: a closing bracket of one the
    /// line opened before the cursor is the completion's to write (`console.log(` completed as
    /// `name);`), since no closing bracket of the editor's follows.
    pub fn with_line_ending_at_cursor(mut self) -> Self {
        self.line_ends_at_cursor = true;
        self
    }

    /// These rules for a cursor followed on its line by `rest`, which the model does not see.
    pub fn with_unseen_rest(mut self, rest: &str) -> Self {
        self.unseen_rest = rest.trim().to_string();
        self
    }

    /// These rules for a cursor followed in the buffer by `after` (the text after the cursor's
    /// line), which the model does not see.
    pub fn with_unseen_lines(mut self, after: &str) -> Self {
        let next = after.lines().find(|line| !line.trim().is_empty()).unwrap_or("");
        self.unseen_next_line = next.trim_end().to_string();
        self
    }

    /// The part of `generated` to keep, and whether generation must stop: once the text reaches
    /// the end of the cursor's block or of the statement begun on its line, a line that would
    /// never run or a line the buffer has below (the rest is cut), or, with text after the cursor
    /// on its line that the model does not see, once its first line is whole.
    pub fn apply<'a>(&self, generated: &'a str) -> (&'a str, bool) {
        self.cut(generated, false)
    }

    /// [`Self::apply`] to the text a generation ended with (at the end of text or its token
    /// limit): its last line is whole too, though no line break ends it.
    pub fn apply_to_end<'a>(&self, generated: &'a str) -> &'a str {
        self.cut(generated, true).0
    }

    /// [`Self::apply`], with the last line of `generated` taken as whole when `ended`.
    fn cut<'a>(&self, generated: &'a str, ended: bool) -> (&'a str, bool) {
        let dedent = self.block_exit(generated);
        let bracket = match self.syntax {
            BlockSyntax::Indentation | BlockSyntax::Prose => None,
            BlockSyntax::Brackets { lifetimes } => {
                // The cursor's line tells whether the completion begins in a string or comment.
                let mut lexer = Lexer::new(lifetimes);
                let line_open = lexer.open_brackets(&self.line_prefix);
                // With nothing after the cursor on its line, no closing bracket of the editor's
                // follows it: brackets the line leaves open are the completion's to close.
                let open = if self.line_ends_at_cursor { line_open } else { 0 };
                unmatched_closer(generated, lexer, open)
            }
        };
        let repeat = self.next_line_repeated(generated, ended);
        let looping = self.second_round_of_loop(generated, ended);
        if let Some(cut) = [dedent, bracket, repeat, looping].into_iter().flatten().min() {
            return (self.without_unseen_rest(generated[..cut].trim_end()), true);
        }
        if !self.unseen_rest.is_empty() {
            return match generated.split_once('\n') {
                // A CRLF line's `\r` is its line break, not text to insert.
                Some((line, _)) => (self.without_unseen_rest(line.strip_suffix('\r').unwrap_or(line)), true),
                None => (self.without_unseen_rest(generated), false),
            };
        }
        (generated, false)
    }

    /// `line` without a copy of the unseen rest of the cursor's line at its end, or of its
    /// start where that closes only brackets and quotes `line` did not open: the buffer already
    /// has them after the cursor (`foo(a|)` completed as `, b)` suggests `, b`).
    fn without_unseen_rest<'a>(&self, line: &'a str) -> &'a str {
        if self.unseen_rest.is_empty() {
            return line;
        }
        let trimmed = line.trim_end();
        if let Some(kept) = trimmed.strip_suffix(self.unseen_rest.as_str()) {
            return kept;
        }
        let closers = trimmed.len() - trimmed.trim_end_matches(CLOSERS).len();
        (1..=closers)
            .rev()
            .map(|len| trimmed.split_at(trimmed.len() - len))
            .find(|(_, end)| self.unseen_rest.starts_with(end) && closes_only_unopened(trimmed, end))
            .map_or(line, |(kept, _)| kept)
    }

    /// Byte offset in `generated` of the first whole line that is the buffer's unseen next line
    /// (a line still being written may go on: `return` becoming `return x`; once the generation
    /// has `ended`, its last line is whole).
    fn next_line_repeated(&self, generated: &str, ended: bool) -> Option<usize> {
        if self.unseen_next_line.is_empty() {
            return None;
        }
        self.buffer_lines(generated)
            .find(|line| {
                let whole = ended || line.generated.ends_with('\n');
                whole && line.full.trim_end() == self.unseen_next_line
            })
            .map(|line| line.start)
    }

    /// Byte offset in `generated` of the second round of the first loop in its whole lines (a
    /// line still being written may go on; once the generation has `ended`, its last line is
    /// whole): the same one to [`MAX_LOOP_LINES`] lines, not all blank, [`LOOP_ROUNDS`] times in
    /// a row.
    fn second_round_of_loop(&self, generated: &str, ended: bool) -> Option<usize> {
        let lines: Vec<BufferLine> =
            self.buffer_lines(generated).filter(|line| ended || line.generated.ends_with('\n')).collect();
        let same = |a: usize, b: usize| lines[a].full.trim_end() == lines[b].full.trim_end();
        (1..=lines.len()).find_map(|end| {
            (1..=MAX_LOOP_LINES).find_map(|period| {
                let first = end.checked_sub(LOOP_ROUNDS * period)?;
                let round = first..first + period;
                let repeats = (first + period..end).all(|i| same(i, i - period));
                let blank = round.clone().all(|i| lines[i].full.trim().is_empty());
                (repeats && !blank).then(|| lines[round.end].start)
            })
        })
    }

    /// The lines of `generated` as the buffer would have them: the first one after the text
    /// typed before the cursor on its line.
    fn buffer_lines<'a>(&'a self, generated: &'a str) -> impl Iterator<Item = BufferLine<'a>> {
        let mut offset = 0;
        generated.split_inclusive('\n').enumerate().map(move |(index, line)| {
            let start = offset;
            offset += line.len();
            let full = match index {
                0 => Cow::Owned(format!("{}{}", self.line_prefix, line)),
                _ => Cow::Borrowed(line),
            };
            BufferLine { index, start, generated: line, full }
        })
    }

    /// The indentation of the cursor's line when the person began a definition on it.
    fn definition_indent(&self) -> Option<usize> {
        let typed = self.line_prefix.trim_start_matches([' ', '\t']);
        begins_definition(typed).then(|| self.line_prefix.len() - typed.len())
    }

    /// Whether the line of code `content` (without its indentation) ends by opening brackets, a
    /// block that a word closes (`then`, `do`: Lua, shell), or in Python a compound statement's
    /// block; a comment opens nothing (`# Steps:`).
    fn opens_block(&self, content: &str) -> bool {
        let code = content.trim_end();
        if self.syntax == BlockSyntax::Prose
            || code.starts_with(['#', '*'])
            || code.starts_with("//")
            || code.starts_with("/*")
            || code.starts_with("--")
        {
            return false;
        }
        let compound = || PYTHON_COMPOUND_WORDS.contains(&first_word(code));
        let last_word = code.rsplit(|c| !is_word_char(c)).next().unwrap_or("");
        code.ends_with(['{', '(', '['])
            || (self.syntax == BlockSyntax::Indentation && code.ends_with(':') && compound())
            || (matches!(self.syntax, BlockSyntax::Brackets { .. }) && BLOCK_OPENING_WORDS.contains(&last_word))
    }

    /// Byte offset in `generated` of the first line that starts with non-blank text indented
    /// less than the block's first line (or than the indentation typed on the cursor's line when
    /// that is all it has), or, after a statement begun on the cursor's line (a
    /// definition, or a block or brackets the completion opens there), no more than that
    /// line (a line that closes or continues it still belongs to it: see [`continues_statement`]),
    /// or the first line after a jump (see [`jumps_away`]) indented as much as the jump, or after
    /// a definition the completion begins on an empty line, the next definition or decorator
    /// indented no more.
    fn block_exit(&self, generated: &str) -> Option<usize> {
        let mut statement = self.definition_indent();
        // On a cursor's line with nothing typed, until the completion's first line of code
        // (decorators aside): whether it begins a definition, and its indentation if so.
        let mut before_code = self.line_prefix.trim().is_empty();
        let mut definition: Option<usize> = None;
        // Indentation typed on a line of its own is the block's: the person put the cursor there.
        let typed_indent = !self.line_prefix.is_empty() && self.line_prefix.trim().is_empty();
        let mut block_indent = typed_indent.then_some(self.line_prefix.len());
        // The indentation of the last jump while the lines after it go on its statement.
        let mut jump_indent: Option<usize> = None;
        for BufferLine { index, start, generated: line, full } in self.buffer_lines(generated) {
            // Lines still blank say nothing about the block, and neither does
            // the cursor's line when nothing was generated on it.
            if line.trim().is_empty() {
                continue;
            }
            let content = full.trim_start_matches([' ', '\t']);
            let indent = full.len() - content.len();
            match block_indent {
                None => block_indent = Some(indent),
                Some(block) if indent < block && index > 0 => return Some(start),
                Some(_) => {}
            }
            if index == 0 && !self.line_prefix.trim().is_empty() && self.opens_block(content) {
                statement = statement.or(Some(indent));
            }
            let begins = content.starts_with('@') || begins_definition(content);
            if definition.is_some_and(|header| indent <= header && begins) {
                return Some(start);
            }
            if before_code && !content.starts_with('@') {
                before_code = false;
                definition = begins_definition(content).then_some(indent);
            }
            let closes = continues_statement(content, self.syntax);
            if statement.is_some_and(|header| indent <= header && index > 0 && !closes) {
                return Some(start);
            }
            if let Some(jump) = jump_indent {
                if indent == jump && !closes {
                    return Some(start);
                }
                if indent < jump {
                    jump_indent = None;
                }
            }
            if jumps_away(content) {
                jump_indent = Some(indent);
            }
        }
        None
    }
}

/// A line of a completion ([`StopRules::buffer_lines`]).
struct BufferLine<'a> {
    /// Its number in the completion, from 0 (the cursor's line).
    index: usize,
    /// Its byte offset in the completion.
    start: usize,
    /// Its text in the completion, line break included.
    generated: &'a str,
    /// Its whole text in the buffer: for the cursor's line, the text before the cursor too.
    full: Cow<'a, str>,
}

/// The most lines in a round of a loop [`StopRules::second_round_of_loop`] finds.
const MAX_LOOP_LINES: usize = 4;

/// The rounds of the same lines in a row that make a loop: two can be code (`x += 1` twice, a
/// pair of `}`), three are a model repeating itself.
const LOOP_ROUNDS: usize = 3;

/// Words that begin Python's compound statements, whose header ends with a colon (a docstring's
/// `Args:` does not open a block).
const PYTHON_COMPOUND_WORDS: &[&str] = &[
    "if", "elif", "else", "for", "while", "with", "try", "except", "finally", "def", "class", "async", "match", "case",
];

/// Words that end a line opening a block that a word of [`CONTINUING_WORDS`] closes (Lua's
/// `if x then`, shell's `for f in *; do`).
const BLOCK_OPENING_WORDS: &[&str] = &["then", "do"];

/// Words that begin a line closing the statement above (`end`: Ruby, Lua; `fi`, `done`, `esac`:
/// shell) or going on with it (`else`, Ruby's `rescue`, …), in languages of brackets.
const CONTINUING_WORDS: &[&str] = &["end", "fi", "done", "esac", "else", "elif", "elsif", "elseif", "rescue", "ensure"];

/// Python's words that go on with the compound statement above (`end` there is a name).
const PYTHON_CONTINUING_WORDS: &[&str] = &["else", "elif", "except", "finally"];

/// Whether the line of code `content` (without its indentation) closes or goes on with the
/// statement above it rather than beginning one: it begins with a closing bracket (a wrapped
/// signature's `) -> int:`, the `}` that closes a body, `} else {`) or a word of
/// [`CONTINUING_WORDS`] (in Python [`PYTHON_CONTINUING_WORDS`]; prose has none) that is not
/// assigned to (`end = 3`).
fn continues_statement(content: &str, syntax: BlockSyntax) -> bool {
    let words = match syntax {
        BlockSyntax::Indentation => PYTHON_CONTINUING_WORDS,
        BlockSyntax::Brackets { .. } => CONTINUING_WORDS,
        BlockSyntax::Prose => &[],
    };
    let word = first_word(content);
    let rest = content[word.len()..].trim_start();
    let operator = rest.trim_start_matches(['+', '-', '*', '/', '%', '&', '|', '^']);
    let assigned = operator.starts_with('=') && !operator.starts_with("==");
    content.starts_with([')', ']', '}']) || (words.contains(&word) && !assigned)
}

/// Statements after which the next one in the same block never runs.
const JUMP_WORDS: &[&str] = &["return", "raise", "throw", "break", "continue"];

/// The word that `code` starts with (empty when it starts with another character).
fn first_word(code: &str) -> &str {
    &code[..code.find(|c| !is_word_char(c)).unwrap_or(code.len())]
}

/// Whether the line of code `content` (without its indentation) is a jump: a word of
/// [`JUMP_WORDS`] that no condition follows (Ruby's and Perl's `return if done` may fall through).
fn jumps_away(content: &str) -> bool {
    let word = first_word(content);
    let rest = &content[word.len()..];
    JUMP_WORDS.contains(&word)
        && rest.chars().next().is_none_or(|c| c.is_whitespace() || c == ';' || c == '(')
        && !rest.split(|c| !is_word_char(c)).any(|w| w == "if" || w == "unless")
}

/// Whether the line of code `code` (without its indentation) begins a definition: a word of
/// [`DEFINITION_WORDS`] and a space, after any [`MODIFIERS`].
fn begins_definition(code: &str) -> bool {
    let mut rest = code;
    while let Some((word, after)) = rest.split_once(char::is_whitespace) {
        if DEFINITION_WORDS.contains(&word) {
            return true;
        }
        if !MODIFIERS.contains(&word) {
            return false;
        }
        rest = after.trim_start();
    }
    false
}

/// Words that begin a definition (Python's `def` and `class`, JavaScript's `function`, Rust's
/// `fn`, Go's `func`, Kotlin's `fun`, …).
const DEFINITION_WORDS: &[&str] =
    &["def", "class", "function", "fn", "func", "fun", "struct", "enum", "impl", "interface", "trait"];
/// Words that may come before a definition's word (Lua's `local function`, Kotlin's
/// `override suspend fun`, …).
const MODIFIERS: &[&str] = &[
    "async",
    "pub",
    "pub(crate)",
    "export",
    "default",
    "public",
    "private",
    "protected",
    "internal",
    "static",
    "abstract",
    "override",
    "suspend",
    "local",
];

/// Closing brackets and quotes: what an editor pairs with an opening one it inserts.
const CLOSERS: [char; 6] = [')', ']', '}', '"', '\'', '`'];

/// Whether every bracket and quote in `end`, the end of `line`, closes one that `line` leaves
/// unopened: a `)` where `line` has more `)` than `(`, a quote where `line` has an odd count of it.
fn closes_only_unopened(line: &str, end: &str) -> bool {
    let count = |c: char| line.matches(c).count();
    end.chars().all(|c| match c {
        ')' => count(')') >= count('(') + end.matches(')').count(),
        ']' => count(']') >= count('[') + end.matches(']').count(),
        '}' => count('}') >= count('{') + end.matches('}').count(),
        quote => count(quote) % 2 == 1,
    })
}

/// Byte offset in `generated` of the closing bracket that closes a bracket opened before the
/// cursor: of its line when only blanks precede it there (a line that closes the block), else
/// of the bracket itself. Brackets in strings and comments do not count; `open` brackets opened
/// before the cursor are the completion's to close first.
fn unmatched_closer(generated: &str, mut lexer: Lexer, mut open: usize) -> Option<usize> {
    let mut found = None;
    lexer.brackets(generated, |at, bracket, line_start| {
        if matches!(bracket, '(' | '[' | '{') {
            open += 1;
        } else if open > 0 {
            open -= 1;
        } else {
            let closes_line = generated[line_start..at].trim().is_empty() && line_start > 0;
            found = Some(if closes_line { line_start } else { at });
            return true;
        }
        false
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const PY: BlockSyntax = BlockSyntax::Indentation;
    const C: BlockSyntax = BlockSyntax::Brackets { lifetimes: false };
    const RUST: BlockSyntax = BlockSyntax::Brackets { lifetimes: true };

    #[test]
    fn a_function_body_ends_where_the_code_dedents() {
        let rules = StopRules::new("    ", PY);
        let text = "return x + 1\n\n\ndef other():\n    pass\n";
        assert_eq!(rules.apply(text), ("return x + 1", true));
        // Still inside the block: keep going.
        assert_eq!(rules.apply("if x:\n        y = 1\n    z"), ("if x:\n        y = 1\n    z", false));
    }

    #[test]
    fn a_bracket_the_cursors_line_opened_is_closed_when_nothing_follows_the_cursor() {
        let js = StopRules::new("  console.log(", C).with_line_ending_at_cursor();
        assert_eq!(js.apply("`Hello, ${name}!`);\n"), ("`Hello, ${name}!`);\n", false));
        assert_eq!(
            js.apply("name);\n  return 1;\n}\n"),
            ("name);\n  return 1;", true),
            "the block's closing bracket still ends it"
        );
        let rust = StopRules::new("    println!(\"{}\", ", RUST).with_line_ending_at_cursor();
        assert_eq!(rust.apply("name);\n}"), ("name);", true));
        // A quote or a comment on the line: its brackets are not code.
        let quoted = StopRules::new("  printf(\"(%d", C).with_line_ending_at_cursor();
        assert_eq!(quoted.apply("\\n\", n);\n}"), ("\\n\", n);", true));
        let commented = StopRules::new("  x = 1; // see f(", C).with_line_ending_at_cursor();
        assert_eq!(commented.apply("a)\n}"), ("a)", true), "the comment ends with its line");
        // With the editor's closing bracket after the cursor, the completion stops before its own.
        let closed = StopRules::new("  console.log(", C);
        assert_eq!(closed.apply("name);\n"), ("name", true));
    }

    #[test]
    fn a_definition_the_completion_begins_on_an_empty_line_ends_before_the_next_one() {
        let class_body = StopRules::new("    ", PY);
        let methods = "def get(self):\n        return self.x\n\n    def set(self, x):\n        self.x = x\n";
        assert_eq!(class_body.apply(methods), ("def get(self):\n        return self.x", true));
        let decorated = "@property\n    def x(self):\n        return 1\n\n    @x.setter\n    def x(self, v):\n";
        assert_eq!(class_body.apply(decorated), ("@property\n    def x(self):\n        return 1", true));
        let module = StopRules::new("", C);
        let functions = "function a() {\n  return 1;\n}\n\nfunction b() {\n";
        assert_eq!(module.apply(functions), ("function a() {\n  return 1;\n}", true));
        // Statements that are not definitions go on as before, also after a definition.
        assert_eq!(class_body.apply("x = 1\n    y = 2\n"), ("x = 1\n    y = 2\n", false));
        let nested = "def inner():\n        pass\n    return inner\n";
        assert_eq!(class_body.apply(nested), (nested, false));
    }

    #[test]
    fn prose_has_no_brackets_and_no_statements() {
        let list = StopRules::new("3", BlockSyntax::Prose).with_line_ending_at_cursor();
        assert_eq!(list.apply(") cheese\n4) bacon\n"), (") cheese\n4) bacon\n", false));
        let colon = StopRules::new("Steps for the build:", BlockSyntax::Prose);
        assert_eq!(colon.apply("\nrun make\nthen install\n"), ("\nrun make\nthen install\n", false));
        let indented = StopRules::new("  - item", BlockSyntax::Prose);
        assert_eq!(indented.apply(" one\n  - two\nNext part"), (" one\n  - two", true), "a dedent ends it");
    }

    #[test]
    fn indentation_typed_on_the_cursors_line_is_the_blocks() {
        let rules = StopRules::new("        ", PY);
        assert_eq!(rules.apply("\n    return s\n"), ("", true), "a dedent below the typed indentation");
        assert_eq!(rules.apply("\n\n    return data"), ("", true));
        assert_eq!(rules.apply("s += 1\n        t += 1\n    return s"), ("s += 1\n        t += 1", true));
        assert_eq!(rules.apply("\n        t += 1\n"), ("\n        t += 1\n", false), "the same block goes on");
    }

    #[test]
    fn before_unseen_text_on_the_line_a_completion_is_one_line_without_a_copy_of_that_text() {
        let call = StopRules::new("    print(", PY).with_unseen_rest(")  ");
        assert_eq!(call.apply("\"hi\")\n    return x"), ("\"hi\"", true));
        assert_eq!(call.apply("\"hi\""), ("\"hi\"", false), "the line goes on");
        assert_eq!(call.apply("x).strip()\n"), ("x).strip(", true), "the model's line, the buffer's `)` ending it");
        assert_eq!(call.apply("x, y\nz"), ("x, y", true));
        let code = StopRules::new("x = ", PY).with_unseen_rest("compute(1)");
        assert_eq!(code.apply("compute(1)\n"), ("", true), "nothing the line does not say already");
        let c_call = StopRules::new("    f(", C).with_unseen_rest(");");
        assert_eq!(c_call.apply("a, b);\n"), ("a, b", true), "the bracket rule cuts first");
        let inside = StopRules::new("x = foo(a", PY).with_unseen_rest(");");
        assert_eq!(inside.apply(", d, s)\n"), (", d, s", true), "the buffer's `)` closes the call");
        assert_eq!(inside.apply(", bar(c)\n"), (", bar(c)", true), "a `)` the line opened stays");
        assert_eq!(inside.apply(", s))\n"), (", s)", true), "one `)` too many: the buffer's one");
        let quoted = StopRules::new("print(\"", PY).with_unseen_rest("\")");
        assert_eq!(quoted.apply("hi\"\n"), ("hi", true), "the buffer's quote ends the string");
        assert_eq!(quoted.apply("a\" + \"b\"\n"), ("a\" + \"b", true));
        assert_eq!(quoted.apply("say \"hi\"\n"), ("say \"hi\"", true), "quotes the line pairs stay");
        assert_eq!(call.apply("\"hi\"\r\n    return x"), ("\"hi\"", true), "a CRLF line break");
        let blank = StopRules::new("    ", PY).with_unseen_rest(" \t");
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
            assert_eq!(StopRules::new(typed, syntax).apply(generated), (kept, true), "after {typed:?}");
        }
        for not_yet in ["def", "    define = ", "x = fn ", "    async "] {
            let rules = StopRules::new(not_yet, PY);
            let same_indent = format!("a\n{}b\n", " ".repeat(not_yet.len() - not_yet.trim_start().len()));
            assert_eq!(rules.apply(&same_indent), (same_indent.as_str(), false), "{not_yet:?} begins no definition");
        }
        // A body begun with a statement goes on to the block's end.
        let body = StopRules::new("    ", PY);
        let text = "def inner():\n        pass\n    return inner\n";
        assert_eq!(body.apply(text), ("def inner():\n        pass\n    return inner\n", false));
    }

    #[test]
    fn kotlin_and_lua_definitions_are_definitions() {
        let class_body = StopRules::new("    ", C);
        let methods = "fun area(): Int {\n        return w * h\n    }\n\n    fun perimeter(): Int {\n";
        assert_eq!(class_body.apply(methods), ("fun area(): Int {\n        return w * h\n    }", true));
        let kotlin = StopRules::new("    override suspend fun ", C);
        let body = "load() = fetch()\n    override fun save() = store()\n";
        assert_eq!(kotlin.apply(body), ("load() = fetch()", true));
        let lua = StopRules::new("local function ", C);
        let functions = "helper(x)\n  return x * 2\nend\n\nlocal function other()\n";
        assert_eq!(lua.apply(functions), ("helper(x)\n  return x * 2\nend", true));
    }

    #[test]
    fn a_completion_ends_before_the_unseen_line_below_the_cursor() {
        let after = "\n\n  return args;\n}\n";
        let rules = StopRules::new("  ", C).with_unseen_lines(after);
        let loop_then_return = "for (const a of argv) {\n    args[a] = true;\n  }\n  return args;\n}";
        assert_eq!(rules.apply(loop_then_return), ("for (const a of argv) {\n    args[a] = true;\n  }", true));
        // Written on the cursor's line, the next line leaves nothing to suggest.
        assert_eq!(rules.apply("return args;\n"), ("", true));
        // A line still being written may become another; the last line of a generation that
        // ended (at the end of text or its token limit) is whole.
        assert_eq!(rules.apply("x();\n  return args;"), ("x();\n  return args;", false));
        assert_eq!(rules.apply_to_end("x();\n  return args;"), "x();");
        assert_eq!(rules.apply_to_end("x();\n  return args"), "x();\n  return args");
        // The same text at another indentation is other code.
        let deeper = "if (x) {\n    return args;\n  }";
        assert_eq!(StopRules::new("  ", C).with_unseen_lines(after).apply(deeper), (deeper, false));
        // With no line below, or one the model sees, nothing is cut.
        for rules in [StopRules::new("  ", C).with_unseen_lines("\n \n"), StopRules::new("  ", C)] {
            assert_eq!(rules.apply("x();\n  return args;"), ("x();\n  return args;", false));
        }
    }

    #[test]
    fn a_block_the_completion_opens_on_a_line_the_person_began_ends_the_completion() {
        // (typed on the cursor's line, generated, kept)
        let cases = [
            ("int main", "() {\n  return 0;\n}\n\nint other() {\n", "() {\n  return 0;\n}"),
            (
                "  set",
                "(key, value) {\n    this.items.set(key, value);\n  }\n\n  delete(key) {\n",
                "(key, value) {\n    this.items.set(key, value);\n  }",
            ),
            ("  const f = ", "() => {\n    go();\n  };\n  f();\n", "() => {\n    go();\n  };"),
            ("  if (x) ", "{\n    a();\n  } else {\n    b();\n  }\n  c();", "{\n    a();\n  } else {\n    b();\n  }"),
            ("  call", "(\n    a,\n  );\n  next();", "(\n    a,\n  );"),
        ];
        for (typed, generated, kept) in cases {
            assert_eq!(StopRules::new(typed, C).apply(generated), (kept, true), "after {typed:?}");
        }
        // Python's blocks open with a colon.
        let python = "xs:\n        t += x\n    return t\n";
        assert_eq!(StopRules::new("    for x in ", PY).apply(python), ("xs:\n        t += x", true));
        let call = "(\n        a,\n    )\n    return t\n";
        assert_eq!(StopRules::new("    t = f", PY).apply(call), ("(\n        a,\n    )", true));
        // A comment or a docstring's section opens nothing.
        let goes_on = [
            ("    # Steps", PY, " to follow:\n    # - a\n    x = 1\n"),
            ("    Ar", PY, "gs:\n        x: a value\n    Returns:\n        y\n"),
            ("  // see", C, " below (\n  // x\n  y();\n"),
        ];
        for (typed, syntax, generated) in goes_on {
            assert_eq!(StopRules::new(typed, syntax).apply(generated), (generated, false), "after {typed:?}");
        }
        // Opened before the cursor, the block ends at its closing bracket or dedent; a cursor's
        // line with nothing typed on it begins no statement.
        assert_eq!(StopRules::new("  if (x) {", C).apply("\n    a();\n  }\n  b();"), ("\n    a();", true));
        let body = "if x:\n        a()\n    b()\n";
        assert_eq!(StopRules::new("    ", PY).apply(body), (body, false));
    }

    #[test]
    fn a_statement_closed_or_continued_by_a_word_ends_after_that_word() {
        // (typed on the cursor's line, block syntax, generated, kept)
        let cases = [
            ("  def ", C, "area\n    @w * @h\n  end\n\n  def perimeter\n", "area\n    @w * @h\n  end"),
            (
                "  def ",
                C,
                "load\n    read\n  rescue IOError => e\n    warn e\n  end\n  def save\n",
                "load\n    read\n  rescue IOError => e\n    warn e\n  end",
            ),
            (
                "function ",
                C,
                "M.setup(opts)\n  opts = opts or {}\nend\n\nfunction M.b()\n",
                "M.setup(opts)\n  opts = opts or {}\nend",
            ),
            (
                "  if ",
                C,
                "x then\n    a()\n  elseif y then\n    b()\n  end\n  c()\n",
                "x then\n    a()\n  elseif y then\n    b()\n  end",
            ),
            (
                "  for f in ",
                C,
                "*.txt; do\n    wc -l \"$f\"\n  done\n  echo ok\n",
                "*.txt; do\n    wc -l \"$f\"\n  done",
            ),
            (
                "    if ",
                PY,
                "x:\n        a()\n    else:\n        b()\n    c()\n",
                "x:\n        a()\n    else:\n        b()",
            ),
            // A name that is assigned to is no such word, and in Python `end` is a name.
            ("    def ", PY, "f(self):\n        pass\n    end = 3\n", "f(self):\n        pass"),
            ("  def ", C, "f\n    x\n  end = 3\n", "f\n    x"),
            ("    def ", PY, "f(self):\n        pass\n    end()\n", "f(self):\n        pass"),
        ];
        for (typed, syntax, generated, kept) in cases {
            assert_eq!(StopRules::new(typed, syntax).apply(generated), (kept, true), "after {typed:?}");
        }
    }

    #[test]
    fn a_line_after_a_jump_at_its_indentation_is_never_run_and_ends_the_completion() {
        // (typed on the cursor's line, block syntax, generated, kept)
        let cases = [
            ("        ", PY, "m = 1\n        return m + 1\n        return m\n", "m = 1\n        return m + 1"),
            ("    return ", PY, "x\n    y = 1\n", "x"),
            ("    ", PY, "raise\n    pass", "raise"),
            // The lines of the jump's own statement go on.
            ("    ", PY, "return (\n        a\n    )\n    b = 1", "return (\n        a\n    )"),
            (
                "  ",
                C,
                "if (!x) {\n    throw new Error();\n  }\n  return x;\n  x++;",
                "if (!x) {\n    throw new Error();\n  }\n  return x;",
            ),
            ("\t", C, "break;\n\tx++;", "break;"),
        ];
        for (typed, syntax, generated, kept) in cases {
            assert_eq!(StopRules::new(typed, syntax).apply(generated), (kept, true), "{generated:?}");
        }
        // A jump in a nested block leaves the enclosing block's next line; a conditional jump
        // (Ruby, Perl) and a word that only begins like one end nothing.
        let goes_on = [
            ("    ", PY, "if x:\n        return 1\n    return 2\n"),
            ("  ", C, "return if done\n  go\n"),
            ("  ", C, "raise_error unless ok\n  go\n"),
            ("    ", PY, "returned = 1\n    breaks = 2\n"),
        ];
        for (typed, syntax, generated) in goes_on {
            assert_eq!(StopRules::new(typed, syntax).apply(generated), (generated, false), "{generated:?}");
        }
    }

    #[test]
    fn an_indentation_still_being_written_does_not_stop() {
        let rules = StopRules::new("    ", PY);
        assert_eq!(rules.apply("a = 1\n  "), ("a = 1\n  ", false));
        assert_eq!(rules.apply("a = 1\nb"), ("a = 1", true));
    }

    #[test]
    fn the_first_line_sets_the_block_when_the_cursor_starts_a_line() {
        let rules = StopRules::new("", PY);
        assert_eq!(rules.apply("    a = 1\n    b = 2\nc = 3"), ("    a = 1\n    b = 2", true));
        // A cursor in the middle of a line measures that line's indentation.
        let mid_line = StopRules::new("    total = ", PY);
        assert_eq!(
            mid_line.apply("0\n    for x in xs:\n        total += x\nprint(total)"),
            ("0\n    for x in xs:\n        total += x", true)
        );
        // At the end of a block opener, the next line sets the block.
        let opener = StopRules::new("def f():", PY);
        assert_eq!(opener.apply("\n    return 1\n\ndef g():"), ("\n    return 1", true));
    }

    #[test]
    fn a_model_repeating_itself_is_cut_after_the_first_round() {
        let rules = StopRules::new("    ", PY);
        // One line three times: the first is kept.
        let same_line = "x = 1\n    x = 1\n    x = 1\n    x = 1\n";
        assert_eq!(rules.apply(same_line), ("x = 1", true));
        // Two rounds may be code, and a line being written may still differ.
        assert_eq!(rules.apply("x += 1\n    x += 1\n"), ("x += 1\n    x += 1\n", false));
        assert_eq!(rules.apply("x = 1\n    x = 1\n    x = 1"), ("x = 1\n    x = 1\n    x = 1", false));
        assert_eq!(rules.apply_to_end("x = 1\n    x = 1\n    x = 1"), "x = 1");
        // A round of two lines, after lines of its own.
        let pair = "total = 0\n    a()\n    b()\n    a()\n    b()\n    a()\n    b()\n    a()";
        assert_eq!(rules.apply(pair), ("total = 0\n    a()\n    b()", true));
        // The first line counts with the text typed before the cursor.
        let typed = StopRules::new("    x = ", PY);
        assert_eq!(typed.apply("1\n    x = 1\n    x = 1\n"), ("1", true));
        // Blank lines alone are no loop, nor are lines that only look alike.
        assert!(!rules.apply("a()\n\n\n\n    b()").1);
        assert!(!rules.apply("x = 1\n    x = 2\n    x = 1\n    x = 1\n").1);
    }

    #[test]
    fn syntax_by_path() {
        let by_path = |path| BlockSyntax::for_buffer(Some(path), None);
        assert_eq!(by_path("a/b.py"), PY);
        assert_eq!(by_path("a/B.PY"), PY);
        assert_eq!(BlockSyntax::for_buffer(None, None), PY);
        assert_eq!(by_path("src/main.rs"), RUST);
        for path in ["README.md", "notes.txt", "NOTES.TXT", "doc/index.rst"] {
            assert_eq!(by_path(path), BlockSyntax::Prose, "{path}");
        }
        for path in ["a.c", "a.js", "a.ts", "a.go", "a.lua", "a.rb", "a.yaml"] {
            assert_eq!(by_path(path), C, "{path}");
        }
    }

    #[test]
    fn the_editors_language_id_outranks_the_path() {
        // An untitled buffer has no path: its language id tells.
        assert_eq!(BlockSyntax::for_buffer(None, Some("javascript")), C);
        assert_eq!(BlockSyntax::for_buffer(None, Some("Rust")), RUST);
        for id in ["markdown", "plaintext", "text", "restructuredtext", "latex"] {
            assert_eq!(BlockSyntax::for_buffer(None, Some(id)), BlockSyntax::Prose, "{id}");
        }
        // A language the user chose for a file outranks its extension.
        assert_eq!(BlockSyntax::for_buffer(Some("build.txt"), Some("python")), PY);
        assert_eq!(BlockSyntax::for_buffer(Some("Makefile"), Some("makefile")), C);
        // Neovim gives an empty filetype when it knows none.
        assert_eq!(BlockSyntax::for_buffer(Some("a.rs"), Some("")), RUST);
    }

    #[test]
    fn a_c_function_body_ends_before_its_closing_brace() {
        // The cursor at the start of a body line: the brace line that closes the function is cut.
        let rules = StopRules::new("    ", C);
        let body = "int y = x * 2;\n    if (y > 10) {\n        y = 10;\n    }\n    return y;\n";
        let text = format!("{body}}}\n\nint other(void) {{\n");
        assert_eq!(rules.apply(&text), (body.trim_end(), true));
        // Nested blocks open and close inside the completion: keep going.
        assert_eq!(
            rules.apply("if (a) {\n        b();\n    }\n    c"),
            ("if (a) {\n        b();\n    }\n    c", false)
        );
        // `} else {` closes the cursor's branch.
        let branch = StopRules::new("        ", C);
        assert_eq!(branch.apply("a();\n    } else {\n        b();"), ("a();", true));
    }

    #[test]
    fn a_brace_that_the_dedent_would_miss_still_ends_the_block() {
        // Code written without indentation: only the bracket tells.
        let rules = StopRules::new("", C);
        assert_eq!(rules.apply("x++;\nreturn x;\n}\nint g() {"), ("x++;\nreturn x;", true));
    }

    #[test]
    fn javascript_arguments_end_at_the_closing_parenthesis() {
        // Inside a call's arguments: the completion stops before the `)` of the call.
        let rules = StopRules::new("fetch(url, ", C);
        assert_eq!(rules.apply("{ method: 'POST' });\nconsole.log(1);"), ("{ method: 'POST' }", true));
        // Brackets in strings, template literals and comments do not count.
        let quoted = StopRules::new("  log(", C);
        assert_eq!(
            quoted.apply("\"a) \\\" ]\", `}`, ')' /* ) */ // )"),
            ("\"a) \\\" ]\", `}`, ')' /* ) */ // )", false)
        );
        assert_eq!(quoted.apply("'x')"), ("'x'", true));
        // Begun in a string, the completion's brackets are text until the string ends.
        let in_string = StopRules::new("  console.log(\"Step ", C);
        assert_eq!(in_string.apply("1) of 3\");\n"), ("1) of 3\"", true));
        // An arrow function's body: its `});` line ends the block of the callback.
        let callback = StopRules::new("  ", C);
        assert_eq!(callback.apply("total += x;\n});\nnext();"), ("total += x;", true));
    }

    #[test]
    fn rust_lifetimes_and_char_literals() {
        let rules = StopRules::new("    ", RUST);
        let body = "let s: &'a str = if c == '}' { \"{\" } else { x };\n    s";
        assert_eq!(rules.apply(&format!("{body}\n}}\n")), (body, true));
        assert_eq!(
            rules.apply("f::<'static>(b'(', '\\'', '\\u{7d}')\n"),
            ("f::<'static>(b'(', '\\'', '\\u{7d}')\n", false)
        );
        // Raw strings, on one line or more, hold no code.
        let raw = "let s = r#\"{\"a\": \"}\"}\"#;\n    let q = br\"\\)\n    (\";\n    r#type(s, q)";
        assert_eq!(rules.apply(&format!("{raw}\n}}\n")), (raw, true));
        assert_eq!(StopRules::new("    f(", RUST).apply("r\"(\", r#\"\"#) + 1"), ("r\"(\", r#\"\"#", true));
        // `#[...]` is an attribute, not a comment.
        assert_eq!(rules.apply("#[inline] x)"), ("#[inline] x", true));
        // `# ...` is a comment (shell, Ruby, YAML).
        assert_eq!(StopRules::new("", C).apply("a # ) }\nb"), ("a # ) }\nb", false));
    }

    #[test]
    fn a_hash_before_a_name_is_code_not_a_comment() {
        // A private method (JavaScript), a CSS id: their `{` opens the block its `}` closes.
        let class_body = StopRules::new("  ", C);
        let private = "#count = 0;\n  #inc() {\n    this.#count++;\n  }\n}\n";
        assert_eq!(class_body.apply(private), ("#count = 0;\n  #inc() {\n    this.#count++;\n  }", true));
        let css = "#header {\n  color: red;\n}\n";
        assert_eq!(StopRules::new("", C).apply(css), (css, false));
        // A macro continued on lines of its own.
        let swap = "#define SWAP(a, b) do { \\\n    int t = a; a = b; b = t; \\\n} while (0)\n";
        assert_eq!(StopRules::new("", C).apply(swap), (swap, false));
        // A shebang is a comment.
        assert_eq!(StopRules::new("", C).apply("#!/bin/sh (\n}"), ("#!/bin/sh (", true));
    }

    #[test]
    fn brackets_and_quotes_in_a_regular_expression_are_not_code() {
        let body = StopRules::new("  ", C);
        let cases = [
            "const parts = line.split(/\\)/);\n  return parts;",
            "if (/^\\s*}/.test(line)) depth--;\n  return depth;",
            // A class holds a `/`; a quote in it opens no string.
            "s = s.replace(/[\"/]/g, '');\n  return s;",
            // A division.
            "const r = (a + b) / (c - d) / 2;\n  return r;",
        ];
        for kept in cases {
            assert_eq!(body.apply(&format!("{kept}\n}}\n")), (kept, true), "{kept:?}");
        }
    }

    #[test]
    fn a_double_dash_and_a_space_begin_a_comment() {
        let lua = "-- 1) parse\n  local x = parse()\n  return x";
        assert_eq!(StopRules::new("  ", C).apply(&format!("{lua}\nend\n")), (lua, true));
        let sql = "SELECT id -- the key (primary\n    FROM t)";
        assert_eq!(StopRules::new("  x IN (", C).apply(sql), ("SELECT id -- the key (primary\n    FROM t", true));
        // A decrement.
        let c = "--depth;\n  if (x) {\n    y();\n  }";
        assert_eq!(StopRules::new("  ", C).apply(&format!("{c}\n}}\n")), (c, true));
    }

    #[test]
    fn lua_and_ruby_blocks_end_at_the_dedent() {
        let rules = StopRules::new("  ", C);
        assert_eq!(rules.apply("local y = x + 1\n  return y\nend\n"), ("local y = x + 1\n  return y", true));
        assert_eq!(rules.apply("puts(x)\nend"), ("puts(x)", true));
    }

    #[test]
    fn yaml_mappings_end_at_the_dedent() {
        let rules = StopRules::new("    ", C);
        let text = "image: nginx\n    ports:\n      - \"80:80\"\n  db:\n    image: postgres";
        assert_eq!(rules.apply(text), ("image: nginx\n    ports:\n      - \"80:80\"", true));
    }

    #[test]
    fn python_keeps_its_indentation_rule() {
        // A `)` closing a call opened before the cursor is no block end in Python.
        let rules = StopRules::new("    total = sum(", PY);
        assert_eq!(rules.apply("xs)\n    return total"), ("xs)\n    return total", false));
        let c = StopRules::new("    total = sum(", C);
        assert_eq!(c.apply("xs)\n    return total"), ("xs", true));
    }
}
