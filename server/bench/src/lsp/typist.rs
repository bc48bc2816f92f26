//! The simulated person of the typing benchmark: how fast they type, and when a suggestion on
//! screen is worth taking.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A person's pace: a keystroke every 50–150 ms, with longer pauses after a word (100–300 ms
/// more) and at the end of a line (300–700 ms more). Seeded, so runs compare.
pub struct Pace {
    rng: StdRng,
}

impl Pace {
    pub fn new(seed: u64) -> Pace {
        Pace { rng: StdRng::seed_from_u64(seed) }
    }

    /// The wait before the keystroke that follows typing `typed`.
    pub fn after(&mut self, typed: char) -> Duration {
        let mut ms = self.rng.random_range(50..=150);
        if typed == '\n' {
            ms += self.rng.random_range(300..=700);
        } else if !(typed.is_alphanumeric() || typed == '_') {
            ms += self.rng.random_range(100..=300);
        }
        Duration::from_millis(ms)
    }

    /// The wait before taking a suggestion (reading it, then Tab).
    pub fn before_accepting(&mut self) -> Duration {
        Duration::from_millis(self.rng.random_range(150..=350))
    }
}

/// How much of `suggestion` the person takes when `rest` is what they are about to type: the
/// longest run of its whole lines that `rest` starts with and that ends where a line of `rest`
/// ends, if it holds more than white space; else 0 (they type on).
pub fn accepted_len(suggestion: &str, rest: &str) -> usize {
    let (mut taken, mut end) = (0, 0);
    for line in suggestion.split_inclusive('\n') {
        let next = end + line.len();
        if rest.get(end..next) != Some(line) {
            break;
        }
        let after = &rest[next..];
        if !(line.ends_with('\n') || after.is_empty() || after.starts_with('\n')) {
            break;
        }
        end = next;
        if !suggestion[..end].trim().is_empty() {
            taken = end;
        }
    }
    taken
}

/// Whether `suggestion` helps someone about to type `rest`: it can be taken whole-line
/// ([`accepted_len`]), or its first line is what they type next (a line they could take
/// word by word).
pub fn is_useful(suggestion: &str, rest: &str) -> bool {
    let first_line = suggestion.split('\n').next().unwrap_or_default();
    accepted_len(suggestion, rest) > 0 || (!first_line.trim().is_empty() && rest.starts_with(first_line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_that_match_are_taken() {
        let rest = "x = 1\n    y = 2\n    return y\n";
        assert_eq!(accepted_len("x = 1\n    y = 2\n    return z", rest), "x = 1\n    y = 2\n".len());
        assert_eq!(accepted_len("x = 1", rest), "x = 1".len());
        // A line cut short, or a wrong first line: nothing taken.
        assert_eq!(accepted_len("x = ", rest), 0);
        assert_eq!(accepted_len("x = 2\n", rest), 0);
        // White space alone is not worth a Tab.
        assert_eq!(accepted_len("\n", "\n    y"), 0);
        assert_eq!(accepted_len("\n    y", "\n    y\n"), "\n    y".len());
    }

    #[test]
    fn a_correct_first_line_is_useful_even_when_cut_short() {
        let rest = "total = sum(values)\n";
        assert!(is_useful("total = sum(values)", rest));
        assert!(is_useful("total = sum(", rest));
        assert!(!is_useful("count = len(values)", rest));
        assert!(!is_useful("", rest));
    }

    #[test]
    fn the_pace_is_seeded_and_slower_at_line_ends() {
        let (mut a, mut b) = (Pace::new(7), Pace::new(7));
        let letters: Vec<Duration> = (0..50).map(|_| a.after('a')).collect();
        assert_eq!(letters, (0..50).map(|_| b.after('a')).collect::<Vec<_>>());
        assert!(letters.iter().all(|d| (50..=150).contains(&d.as_millis())));
        assert!((0..50).all(|_| a.after('\n') >= Duration::from_millis(350)));
    }
}
