//! What the person has typed at the cursor since a generation started. The engine lets a
//! generation run on after its request was cancelled by a keystroke, so that its suggestion
//! can answer the requests that follow while the person types what it predicted; it tells the
//! generation what was typed, and the generation stops as soon as its text and the typed text
//! part ways, since it can no longer answer them.

use std::sync::{Arc, Mutex};

use crate::sync::lock;

/// Shared between the engine, which sets it, and the generation, which reads it each token.
#[derive(Clone, Debug, Default)]
pub struct TypedAhead(Arc<Mutex<String>>);

impl TypedAhead {
    /// What has been typed at the generation's cursor by now.
    pub fn set(&self, typed: &str) {
        let mut current = lock(&self.0);
        current.clear();
        current.push_str(typed);
    }

    /// Whether `generated` (the text after the cursor so far) can no longer begin with what was
    /// typed: neither is a beginning of the other.
    pub fn parted_from(&self, generated: &str) -> bool {
        let typed = lock(&self.0);
        !(generated.starts_with(typed.as_str()) || typed.starts_with(generated))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_parts_from_the_typed_text_at_the_first_difference() {
        let typed = TypedAhead::default();
        assert!(!typed.parted_from("return x"), "nothing typed yet");
        typed.set("ret");
        assert!(!typed.parted_from(""));
        assert!(!typed.parted_from("re"), "still on the way");
        assert!(!typed.parted_from("return x"));
        assert!(typed.parted_from("rex"));
        assert!(typed.parted_from("if"));
        typed.set("retu");
        assert!(typed.parted_from("retry"));
    }
}
