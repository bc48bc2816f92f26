//! Prompt lookup drafting: the longest suffix of the context that occurred
//! earlier in the prompt or output; what followed each occurrence is a draft.

use crate::drafter::{Candidate, Drafter, Source};

/// Settings of the prompt lookup drafter.
#[derive(Clone, Copy, Debug)]
pub struct PromptLookup {
    /// Longest suffix tried first.
    pub max_ngram: usize,
    /// Shortest suffix still worth a lookup.
    pub min_ngram: usize,
    /// Tokens per draft.
    pub draft_len: usize,
    /// Most recent occurrences kept as branches.
    pub max_branches: usize,
}

impl Default for PromptLookup {
    fn default() -> Self {
        PromptLookup { max_ngram: 8, min_ngram: 2, draft_len: 10, max_branches: 8 }
    }
}

impl PromptLookup {
    /// Continuations of the longest matching suffix (at least `max(min_ngram, 1)` tokens),
    /// most recent first.
    ///
    /// One pass over the context: at each earlier position, the length of the suffix that
    /// also ends there (capped at `max_ngram`); mostly its last token already differs.
    pub fn lookup(&self, context: &[u32]) -> Vec<Found> {
        let len = context.len();
        let longest = self.max_ngram.min(len.saturating_sub(1));
        let shortest = self.min_ngram.max(1);
        // Ends of the earlier occurrences of the longest suffix found so far, newest first.
        let (mut matched, mut ends) = (0, Vec::new());
        for end in (1..len).rev() {
            let length = match_length(context, end, longest);
            if length < shortest.max(matched) {
                continue;
            }
            if length > matched {
                (matched, ends) = (length, Vec::new());
            }
            ends.push(end);
        }
        let mut drafts: Vec<Found> = Vec::new();
        for end in ends {
            let follow = &context[end..(end + self.draft_len).min(len)];
            if !follow.is_empty() && !drafts.iter().any(|d| d.tokens == follow) {
                drafts.push(Found { tokens: follow.to_vec(), run: match_length(context, end, LONGEST_RUN) });
                if drafts.len() == self.max_branches {
                    break;
                }
            }
        }
        drafts
    }
}

/// One draft of [`PromptLookup::lookup`].
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// What followed the earlier occurrence.
    pub tokens: Vec<u32>,
    /// How many tokens before that occurrence's end equal the context's last ones, up to
    /// [`LONGEST_RUN`]: past the `max_ngram` that found it, a long run says the text is
    /// repeating itself (the budget prices runs of 16 or more apart from shorter ones).
    pub run: usize,
}

/// Longest run [`Found::run`] measures.
const LONGEST_RUN: usize = 16;

/// How many tokens before `end` equal the context's last ones, at most `cap`.
fn match_length(context: &[u32], end: usize, cap: usize) -> usize {
    let len = context.len();
    (0..cap.min(end)).take_while(|&k| context[end - 1 - k] == context[len - 1 - k]).count()
}

impl Drafter for PromptLookup {
    fn propose(&mut self, context: &[u32], out: &mut Vec<Candidate>) {
        let drafts = self.lookup(context);
        let count = drafts.len();
        // Newer occurrences weigh a little more; the weights sum to one, like
        // the normalised counts of the other sources they may be pooled with.
        let total = (count * (count + 1) / 2) as f32;
        out.extend(drafts.into_iter().enumerate().map(|(rank, found)| Candidate {
            tokens: found.tokens,
            weight: (count - rank) as f32 / total,
            source: Source::Prompt,
            matched: found.run,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// The drafts' tokens of [`PromptLookup::lookup`].
    fn drafts(pld: &PromptLookup, context: &[u32]) -> Vec<Vec<u32>> {
        pld.lookup(context).into_iter().map(|found| found.tokens).collect()
    }

    #[test]
    fn longest_suffix_wins_and_newest_comes_first() {
        let pld = PromptLookup { max_ngram: 3, min_ngram: 1, draft_len: 2, max_branches: 4 };
        // Suffix [1, 2] occurs at 0 (followed by 3 4) and at 4 (followed by 5 6).
        let context = [1, 2, 3, 4, 1, 2, 5, 6, 9, 1, 2];
        assert_eq!(drafts(&pld, &context), vec![vec![5, 6], vec![3, 4]]);
    }

    #[test]
    fn falls_back_to_shorter_suffixes() {
        let pld = PromptLookup { max_ngram: 4, min_ngram: 1, draft_len: 3, max_branches: 4 };
        assert_eq!(drafts(&pld, &[7, 8, 9, 5, 8]), vec![vec![9, 5, 8]]);
        assert!(PromptLookup { min_ngram: 2, ..pld }.lookup(&[7, 8, 9, 5, 8]).is_empty());
    }

    #[test]
    fn drafts_stop_at_the_end_of_the_context_and_duplicates_merge() {
        let pld = PromptLookup { max_ngram: 2, min_ngram: 2, draft_len: 5, max_branches: 4 };
        assert_eq!(drafts(&pld, &[1, 2, 3, 1, 2, 3, 1, 2]), vec![vec![3, 1, 2], vec![3, 1, 2, 3, 1, 2][..5].to_vec()]);
        assert_eq!(drafts(&pld, &[1, 2, 1, 2]), vec![vec![1, 2]]);
    }

    /// The scan per suffix length, longest first, that one pass replaces: the suffix's
    /// length and the drafts.
    fn lookup_per_length(pld: &PromptLookup, context: &[u32]) -> (usize, Vec<Vec<u32>>) {
        let len = context.len();
        for n in (pld.min_ngram.max(1)..=pld.max_ngram.min(len.saturating_sub(1))).rev() {
            let suffix = &context[len - n..];
            let mut drafts: Vec<Vec<u32>> = Vec::new();
            for start in (0..len - n).rev().filter(|&start| &context[start..start + n] == suffix) {
                let follow = context[start + n..(start + n + pld.draft_len).min(len)].to_vec();
                if !drafts.contains(&follow) && drafts.len() < pld.max_branches {
                    drafts.push(follow);
                }
            }
            if !drafts.is_empty() {
                return (n, drafts);
            }
        }
        (0, Vec::new())
    }

    #[test]
    fn one_pass_finds_what_a_scan_per_suffix_length_finds() {
        let mut rng = StdRng::seed_from_u64(7);
        for (alphabet, len) in [(2, 40), (3, 200), (8, 500), (50, 2000)] {
            for _ in 0..20 {
                let context: Vec<u32> = (0..len).map(|_| rng.random_range(0..alphabet)).collect();
                for pld in [
                    PromptLookup::default(),
                    PromptLookup { max_ngram: 3, min_ngram: 1, draft_len: 2, max_branches: 3 },
                ] {
                    let (suffix, expected) = lookup_per_length(&pld, &context);
                    assert_eq!(drafts(&pld, &context), expected, "alphabet {alphabet}");
                    // Each occurrence's run, cut at the longest suffix tried, is the suffix found.
                    let longest = pld.max_ngram.min(context.len() - 1);
                    assert!(pld.lookup(&context).iter().all(|f| f.run.min(longest) == suffix), "alphabet {alphabet}");
                }
            }
        }
    }

    #[test]
    fn short_contexts_propose_nothing() {
        let mut out = Vec::new();
        PromptLookup::default().propose(&[5], &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn each_draft_tells_how_long_its_occurrence_runs_past_the_suffix() {
        let mut pld = PromptLookup { max_ngram: 2, min_ngram: 2, draft_len: 2, max_branches: 4 };
        // [8, 9] occurs after [1, 2, 3, 4] (the context ends with those six tokens) and after [7].
        let context = [1, 2, 3, 4, 8, 9, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 8, 9];
        let found = pld.lookup(&context);
        assert_eq!(
            found.iter().map(|f| (f.tokens.clone(), f.run)).collect::<Vec<_>>(),
            [(vec![0, 1], 2), (vec![5, 6], 6)]
        );
        let mut candidates = Vec::new();
        pld.propose(&context, &mut candidates);
        assert_eq!(candidates.iter().map(|c| c.matched).collect::<Vec<_>>(), [2, 6]);
        // Runs are measured up to LONGEST_RUN tokens, whatever the repetition's length.
        let repeated: Vec<u32> = (0..3).flat_map(|_| 0..20).collect();
        assert!(pld.lookup(&repeated).iter().all(|f| f.run == LONGEST_RUN));
    }
}
