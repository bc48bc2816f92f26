//! Reading source files and turning 1-based line/column (in characters)
//! into byte offsets, with clear errors for everything out of range.

use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;

/// Files larger than this are not completed (they are not source code a
/// person edits by hand).
pub const MAX_SOURCE_BYTES: u64 = 16 * 1024 * 1024;

/// Reads a UTF-8 text file, without the byte-order mark it may begin with (editors hide it:
/// their first column is after it); binary, huge and empty files are errors.
pub fn read_source_file(path: &Path) -> Result<String> {
    let metadata = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !metadata.is_file() {
        bail!("{} is not a file", path.display());
    }
    if metadata.len() > MAX_SOURCE_BYTES {
        bail!("{} is too large ({} bytes, limit {MAX_SOURCE_BYTES})", path.display(), metadata.len());
    }
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.is_empty() {
        bail!("{} is empty: nothing to complete from", path.display());
    }
    if bytes.contains(&0) {
        bail!("{} is a binary file", path.display());
    }
    let text = String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{} is not valid UTF-8 text", path.display()))?;
    Ok(match text.strip_prefix(BYTE_ORDER_MARK) {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

const BYTE_ORDER_MARK: char = '\u{feff}';

/// Byte offset of 1-based `line` and `column` (characters; the column after
/// the last character of a line is valid). Lines end at `\n`, `\r\n` or `\r`, as editors and
/// the LSP count them.
pub fn offset_of_line_column(text: &str, line: usize, column: usize) -> Result<usize> {
    if line == 0 || column == 0 {
        bail!("line and column are 1-based (got line {line}, column {column})");
    }
    let line_start = line_start(text, line - 1)
        .map_err(|lines| anyhow!("line {line} is out of range: the file has {lines} lines"))?;
    let line_text = &text[line_start..line_end(text, line_start)];
    let chars = line_text.chars().count();
    if column > chars + 1 {
        bail!("column {column} is out of range: line {line} has {chars} characters");
    }
    let within: usize = line_text.chars().take(column - 1).map(char::len_utf8).sum();
    Ok(line_start + within)
}

/// Byte offset where 0-based line `line` starts, lines ending at `\n`, `\r\n` or `\r`; or, when
/// there is no such line, how many lines `text` has.
pub fn line_start(text: &str, line: usize) -> std::result::Result<usize, usize> {
    if line == 0 {
        return Ok(0);
    }
    let bytes = text.as_bytes();
    let mut current = 0;
    // The `\n` of a `\r\n` ends no line of its own.
    let mut second_half = None;
    for found in memchr::memchr2_iter(b'\n', b'\r', bytes) {
        if second_half == Some(found) {
            continue;
        }
        let crlf = bytes[found] == b'\r' && bytes.get(found + 1) == Some(&b'\n');
        second_half = crlf.then_some(found + 1);
        current += 1;
        if current == line {
            return Ok(found + if crlf { 2 } else { 1 });
        }
    }
    Err(current + 1)
}

/// Byte offset where the line starting at `start` ends (before its `\n`, `\r\n` or `\r`).
pub fn line_end(text: &str, start: usize) -> usize {
    text[start..].find(['\n', '\r']).map_or(text.len(), |length| start + length)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_map_to_byte_offsets() {
        let text = "ab\nçd\r\n\nx";
        assert_eq!(offset_of_line_column(text, 1, 1).unwrap(), 0);
        assert_eq!(offset_of_line_column(text, 1, 3).unwrap(), 2);
        assert_eq!(offset_of_line_column(text, 2, 2).unwrap(), 5);
        assert_eq!(offset_of_line_column(text, 2, 3).unwrap(), 6);
        assert_eq!(offset_of_line_column(text, 3, 1).unwrap(), 8);
        assert_eq!(offset_of_line_column(text, 4, 2).unwrap(), 10);
    }

    #[test]
    fn a_lone_carriage_return_ends_a_line() {
        let text = "ab\rcd\r\ne\r";
        assert_eq!(offset_of_line_column(text, 2, 1).unwrap(), 3);
        assert_eq!(offset_of_line_column(text, 2, 3).unwrap(), 5);
        assert_eq!(offset_of_line_column(text, 3, 2).unwrap(), 8);
        assert_eq!(offset_of_line_column(text, 4, 1).unwrap(), 9);
        let err = offset_of_line_column(text, 5, 1).unwrap_err().to_string();
        assert!(err.contains("the file has 4 lines"), "{err}");
        let err = offset_of_line_column(text, 1, 4).unwrap_err().to_string();
        assert!(err.contains("line 1 has 2 characters"), "{err}");
    }

    #[test]
    fn a_byte_order_mark_is_not_a_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bom.py");
        std::fs::write(&path, "\u{feff}def add(a, b):\n").unwrap();
        let text = read_source_file(&path).unwrap();
        assert_eq!(text, "def add(a, b):\n");
        assert_eq!(offset_of_line_column(&text, 1, 15).unwrap(), "def add(a, b):".len());
    }

    #[test]
    fn out_of_range_positions_are_errors() {
        let text = "ab\ncd";
        for (line, column, message) in
            [(3, 1, "line 3 is out of range"), (1, 4, "column 4 is out of range"), (0, 1, "1-based")]
        {
            let error = offset_of_line_column(text, line, column).unwrap_err().to_string();
            assert!(error.contains(message), "{error}");
        }
    }
}
