//! The answer type shared by the token datastores (repository and common).

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
