//! Where a completion ends: for Python, at the end of the block the cursor
//! is in (the first line that dedents below it), or after a line limit.

/// Stop rules for one completion.
#[derive(Clone, Debug)]
pub struct StopRules {
    /// The text of the cursor's line before the cursor.
    line_prefix: String,
    /// Indentation-based block end (Python); off for other languages.
    block_end: bool,
    /// Stop after this many completed lines (0: no limit).
    max_lines: usize,
}

impl StopRules {
    pub fn new(line_prefix: &str, block_end: bool, max_lines: usize) -> Self {
        StopRules { line_prefix: line_prefix.to_string(), block_end, max_lines }
    }

    /// The part of `generated` to keep, and whether generation must stop.
    /// Generation stops once the text reaches a line that leaves the block
    /// (that line is cut) or completes `max_lines` lines.
    pub fn apply<'a>(&self, generated: &'a str) -> (&'a str, bool) {
        if let Some(cut) = self.block_end.then(|| self.block_exit(generated)).flatten() {
            return (generated[..cut].trim_end(), true);
        }
        if self.max_lines > 0 {
            if let Some((cut, _)) = generated.match_indices('\n').nth(self.max_lines - 1) {
                return (&generated[..cut], true);
            }
        }
        (generated, false)
    }

    /// Byte offset in `generated` of the first line that starts with
    /// non-blank text indented less than the block's first line.
    fn block_exit(&self, generated: &str) -> Option<usize> {
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
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_body_ends_where_the_code_dedents() {
        let rules = StopRules::new("    ", true, 0);
        let text = "return x + 1\n\n\ndef other():\n    pass\n";
        assert_eq!(rules.apply(text), ("return x + 1", true));
        // Still inside the block: keep going.
        assert_eq!(rules.apply("if x:\n        y = 1\n    z"), ("if x:\n        y = 1\n    z", false));
    }

    #[test]
    fn an_indentation_still_being_written_does_not_stop() {
        let rules = StopRules::new("    ", true, 0);
        assert_eq!(rules.apply("a = 1\n  "), ("a = 1\n  ", false));
        assert_eq!(rules.apply("a = 1\nb"), ("a = 1", true));
    }

    #[test]
    fn the_first_line_sets_the_block_when_the_cursor_starts_a_line() {
        let rules = StopRules::new("", true, 0);
        assert_eq!(rules.apply("    a = 1\n    b = 2\nc = 3"), ("    a = 1\n    b = 2", true));
        // A cursor in the middle of a line measures that line's indentation.
        let mid_line = StopRules::new("    total = ", true, 0);
        assert_eq!(
            mid_line.apply("0\n    for x in xs:\n        total += x\nprint(total)"),
            ("0\n    for x in xs:\n        total += x", true)
        );
        // At the end of a block opener, the next line sets the block.
        let opener = StopRules::new("def f():", true, 0);
        assert_eq!(opener.apply("\n    return 1\n\ndef g():"), ("\n    return 1", true));
    }

    #[test]
    fn line_limit_and_no_block_rule() {
        let rules = StopRules::new("", false, 2);
        assert_eq!(rules.apply("a\nb\nc"), ("a\nb", true));
        assert_eq!(rules.apply("a\nb"), ("a\nb", false));
        assert_eq!(StopRules::new("", false, 0).apply("x\ny\nz"), ("x\ny\nz", false));
    }
}
