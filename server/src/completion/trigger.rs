//! Whether a suggestion is wanted where it is asked for.
//!
//! A model prompted with the text before the cursor only (no fill-in-the-middle) does not see
//! the code after the cursor on its line: what it writes there is new code in front of that
//! code. A person who asks (a key, a command, the CLI) gets it; an editor asking on its own while
//! the person edits inside a line gets nothing, unless only closing brackets, quotes and
//! separators follow (an editor's own closing bracket, a colon to come).

/// Who asked for a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The person (a key, a command) or a program (the CLI, the benchmarks).
    Invoked,
    /// The editor, on its own, as the person types.
    Automatic,
}

/// What may follow the cursor on its line without making it the middle of code.
const CLOSING: &[char] = &[')', ']', '}', '>', '"', '\'', '`', ';', ':', ','];

/// Whether a completion is wanted, asked by `trigger` with `unseen_rest` after the cursor on
/// its line, which the model will not see.
pub fn wanted(trigger: Trigger, unseen_rest: &str) -> bool {
    trigger == Trigger::Invoked || unseen_rest.chars().all(|c| c.is_whitespace() || CLOSING.contains(&c))
}

/// The stop reason of a completion not wanted where it was asked for (see [`wanted`]).
pub const CODE_AFTER_CURSOR: &str = "code_after_cursor";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_editor_asking_in_the_middle_of_code_gets_nothing_and_a_person_asking_does() {
        assert!(!wanted(Trigger::Automatic, "lines = []"));
        assert!(!wanted(Trigger::Automatic, "x)"));
        assert!(wanted(Trigger::Invoked, "lines = []"));
    }

    #[test]
    fn closing_brackets_quotes_separators_and_white_space_leave_room_for_a_suggestion() {
        for rest in ["", "  \t", ")", "\")", "]);", "}:", "'>,`"] {
            assert!(wanted(Trigger::Automatic, rest), "{rest:?}");
        }
    }
}
