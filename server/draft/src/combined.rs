//! Several drafting sources as one: every source proposes, and the draft
//! tree merges their candidates by weight; on equal weights, the
//! candidates of the drafter listed first come first.

use crate::drafter::{AcceptedDraft, Candidate, Drafter, VerifiedStep};

/// Drafters whose candidates are pooled.
pub struct Combined {
    drafters: Vec<Box<dyn Drafter>>,
}

impl Combined {
    pub fn new(drafters: Vec<Box<dyn Drafter>>) -> Combined {
        Combined { drafters }
    }
}

impl Drafter for Combined {
    fn propose(&mut self, context: &[u32], out: &mut Vec<Candidate>) {
        for drafter in &mut self.drafters {
            drafter.propose(context, out);
        }
    }

    fn observe(&mut self, context: &[u32], produced: &[u32], accepted: Option<&AcceptedDraft>) {
        for drafter in &mut self.drafters {
            drafter.observe(context, produced, accepted);
        }
    }

    fn observe_verified(&mut self, context: &[u32], step: &VerifiedStep<'_>) {
        for drafter in &mut self.drafters {
            drafter.observe_verified(context, step);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drafter::Source;
    use crate::pld::PromptLookup;

    struct Fixed(Vec<u32>, usize);

    impl Drafter for Fixed {
        fn propose(&mut self, _context: &[u32], out: &mut Vec<Candidate>) {
            out.push(Candidate { tokens: self.0.clone(), weight: 1.0, source: Source::Fixed, matched: 0 });
        }

        fn observe(&mut self, _context: &[u32], _produced: &[u32], _accepted: Option<&AcceptedDraft>) {
            self.1 += 1;
        }
    }

    #[test]
    fn every_source_proposes_and_observes() {
        let mut combined = Combined::new(vec![Box::new(Fixed(vec![9], 0)), Box::new(PromptLookup::default())]);
        let mut out = Vec::new();
        combined.propose(&[1, 2, 3, 1, 2], &mut out);
        let sources: Vec<Source> = out.iter().map(|c| c.source).collect();
        assert_eq!(sources, vec![Source::Fixed, Source::Prompt]);
        combined.observe(&[1], &[2], None);
    }
}
