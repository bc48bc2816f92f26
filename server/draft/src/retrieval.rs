//! The answer type shared by the token datastores (repository and common).

use std::collections::HashMap;

/// One continuation found after a matched context suffix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Continuation {
    /// The tokens that followed the match (up to `QueryOptions::continuation_len`).
    pub tokens: Vec<u32>,
    /// How many occurrences were followed by exactly these tokens.
    pub count: u32,
}

/// The result of a longest-suffix query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retrieval {
    /// Length of the context suffix that matched.
    pub matched_len: usize,
    /// Distinct continuations, sorted by count (descending), then by tokens.
    pub continuations: Vec<Continuation>,
}

impl Retrieval {
    /// One answer from the answers of several stores (the workspace's folders): the longest
    /// match wins; stores that matched that long add their counts, identical continuations
    /// merged. `None` when no store answered.
    pub fn merge(answers: impl IntoIterator<Item = Retrieval>) -> Option<Retrieval> {
        let answers: Vec<Retrieval> = answers.into_iter().collect();
        let matched_len = answers.iter().map(|r| r.matched_len).max()?;
        let mut counts: HashMap<Vec<u32>, u32> = HashMap::new();
        for answer in answers.into_iter().filter(|r| r.matched_len == matched_len) {
            for c in answer.continuations {
                *counts.entry(c.tokens).or_default() += c.count;
            }
        }
        let mut continuations: Vec<Continuation> =
            counts.into_iter().map(|(tokens, count)| Continuation { tokens, count }).collect();
        continuations.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.tokens.cmp(&b.tokens)));
        Some(Retrieval { matched_len, continuations })
    }
}

/// Parameters of a longest-suffix query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryOptions {
    /// Longest context suffix tried first.
    pub max_suffix: usize,
    /// Shortest context suffix tried last.
    pub min_suffix: usize,
    /// Maximum number of tokens per continuation.
    pub continuation_len: usize,
    /// Maximum number of occurrences of the matched suffix that are read.
    pub max_matches: usize,
}

impl Default for QueryOptions {
    fn default() -> Self {
        Self { max_suffix: 16, min_suffix: 2, continuation_len: 10, max_matches: 2000 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(matched_len: usize, continuations: &[(&[u32], u32)]) -> Retrieval {
        let continuations = continuations
            .iter()
            .map(|(tokens, count)| Continuation { tokens: tokens.to_vec(), count: *count })
            .collect();
        Retrieval { matched_len, continuations }
    }

    #[test]
    fn merge_keeps_the_longest_match_and_adds_counts() {
        let merged = Retrieval::merge([
            answer(3, &[(&[1, 2], 2), (&[5], 1)]),
            answer(2, &[(&[9], 50)]),
            answer(3, &[(&[5], 4)]),
        ])
        .unwrap();
        assert_eq!(merged, answer(3, &[(&[5], 5), (&[1, 2], 2)]));
        assert_eq!(Retrieval::merge([answer(4, &[(&[7], 1)])]), Some(answer(4, &[(&[7], 1)])));
        assert_eq!(Retrieval::merge(Vec::new()), None);
    }
}
