//! Brackets in code told from those in strings, comments, character literals and regular
//! expressions, for the stop rules' closing-bracket rule ([`super::stop`]). A light lexer of
//! C-like languages, Rust, JavaScript, Lua, shell and the like: it tracks only what can hide a
//! bracket, and carries its state from one text to the next (the cursor's line, then the
//! completion).

/// A character of a name or keyword.
pub(super) fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Tells brackets in code from those in strings and comments, from one text to the next (the
/// cursor's line, then the completion).
#[derive(Clone, Copy, Debug)]
pub(super) struct Lexer {
    state: Lexed,
    /// The last character read outside white space: a `/` after one of [`BEFORE_REGEX`] begins
    /// a regular expression, after anything else it divides.
    last: Option<char>,
    /// A `'` is a character literal or a lifetime (Rust), not the start of a string.
    lifetimes: bool,
}

impl Lexer {
    pub(super) fn new(lifetimes: bool) -> Self {
        Lexer { state: Lexed::Code, last: None, lifetimes }
    }

    /// Brackets `text` leaves open (a closing bracket without its opening one in `text`
    /// closes nothing of it).
    pub(super) fn open_brackets(&mut self, text: &str) -> usize {
        let mut open = 0usize;
        self.brackets(text, |_, bracket, _| {
            open = if matches!(bracket, '(' | '[' | '{') { open + 1 } else { open.saturating_sub(1) };
            false
        });
        open
    }

    /// Calls `found(at, bracket, line_start)` for each bracket of `text` in code (`line_start`:
    /// the byte offset of its line), until it returns true.
    pub(super) fn brackets(&mut self, text: &str, mut found: impl FnMut(usize, char, usize) -> bool) {
        let mut line_start = 0;
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            let next = chars.peek().map(|&(_, n)| n);
            self.state = match (self.state, c) {
                (state, '\n') => {
                    line_start = at + 1;
                    // Strings and line comments end with their line; block comments and raw
                    // strings go on.
                    if matches!(state, Lexed::BlockComment | Lexed::Raw(_)) {
                        state
                    } else {
                        Lexed::Code
                    }
                }
                (state @ (Lexed::Quoted(_) | Lexed::Regex { .. }), '\\') => {
                    chars.next();
                    state
                }
                (Lexed::Quoted(quote), c) if c == quote => Lexed::Code,
                (Lexed::Raw(hashes), '"') if text[at + 1..].bytes().take_while(|&b| b == b'#').count() >= hashes => {
                    chars.by_ref().take(hashes).for_each(drop);
                    Lexed::Code
                }
                // A `/` in a class (`[/]`) does not end a regular expression.
                (Lexed::Regex { class: false }, '/') => Lexed::Code,
                (Lexed::Regex { .. }, '[') => Lexed::Regex { class: true },
                (Lexed::Regex { class: true }, ']') => Lexed::Regex { class: false },
                (Lexed::BlockComment, '*') if next == Some('/') => {
                    chars.next();
                    Lexed::Code
                }
                (
                    state @ (Lexed::Quoted(_)
                    | Lexed::Raw(_)
                    | Lexed::Regex { .. }
                    | Lexed::LineComment
                    | Lexed::BlockComment),
                    _,
                ) => state,
                (Lexed::Code, '/') if next == Some('/') => Lexed::LineComment,
                (Lexed::Code, '/') if next == Some('*') => {
                    chars.next();
                    Lexed::BlockComment
                }
                (Lexed::Code, '/') if self.last.is_some_and(|last| BEFORE_REGEX.contains(&last)) => {
                    Lexed::Regex { class: false }
                }
                // `-- ` starts a comment (Lua, SQL); `--i` and `x--` are code.
                (Lexed::Code, '-')
                    if next == Some('-')
                        && starts_word(text, at)
                        && text[at + 2..].chars().next().is_none_or(char::is_whitespace) =>
                {
                    Lexed::LineComment
                }
                // `#` starts a comment where it starts a word (`# note`, `#!`), not in `a#b`, an
                // attribute `#[attr]` or a name: a preprocessor line (`#define`, which a `\` may
                // continue), a private member (`#count`), a CSS id (`#main {`).
                (Lexed::Code, '#') if next.is_none_or(|n| n != '[' && !is_word_char(n)) && starts_word(text, at) => {
                    Lexed::LineComment
                }
                (Lexed::Code, 'r') if self.lifetimes => match raw_string_hashes(text, at) {
                    Some(hashes) => {
                        chars.nth(hashes);
                        Lexed::Raw(hashes)
                    }
                    None => Lexed::Code,
                },
                (Lexed::Code, '\'') if self.lifetimes => {
                    skip_char_literal(&mut chars);
                    Lexed::Code
                }
                (Lexed::Code, '"' | '\'' | '`') => Lexed::Quoted(c),
                (Lexed::Code, '(' | '[' | '{' | ')' | ']' | '}') => {
                    if found(at, c, line_start) {
                        return;
                    }
                    Lexed::Code
                }
                (Lexed::Code, _) => Lexed::Code,
            };
            if !c.is_whitespace() {
                self.last = Some(c);
            }
        }
    }
}

/// Where the bracket scanner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lexed {
    Code,
    Quoted(char),
    /// A raw string (Rust's `r#"..."#`, which may span lines), closed by a `"` and this many `#`.
    Raw(usize),
    /// A regular expression (JavaScript's `/\)/`, Ruby's), `class` while in `[...]`.
    Regex {
        class: bool,
    },
    LineComment,
    BlockComment,
}

/// Characters after which a `/` begins a regular expression: where an operand goes, which a
/// division cannot follow (`(/\d+/)`, `x = /}/`, `a || /x/.test(s)`).
const BEFORE_REGEX: &[char] = &['(', ',', '=', ':', '[', '!', '&', '|', '?', '{', ';', '~'];

fn starts_word(text: &str, at: usize) -> bool {
    text[..at].chars().next_back().is_none_or(char::is_whitespace)
}

/// At the `r` at byte `at` of `text`: the number of `#` of the raw string it begins (`r"`,
/// `r#"`, `br#"`), if it begins one (not in a word such as `for`, nor a raw name `r#type`).
fn raw_string_hashes(text: &str, at: usize) -> Option<usize> {
    let before = text[..at].strip_suffix('b').unwrap_or(&text[..at]);
    let after = &text[at + 1..];
    let hashes = after.bytes().take_while(|&b| b == b'#').count();
    let in_word = before.chars().next_back().is_some_and(is_word_char);
    (!in_word && after[hashes..].starts_with('"')).then_some(hashes)
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
