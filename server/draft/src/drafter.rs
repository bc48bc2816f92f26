//! What a drafting source proposes, and the trait every source implements.

use crate::tree::DraftTree;

/// Where a draft came from; used for weighting, statistics and ablations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// Prompt lookup: an earlier occurrence in the prompt or the output so far.
    Prompt,
    /// The repository datastore (workspace files and open buffers).
    Repository,
    /// The common datastore (CREST layout, built from a general corpus).
    Common,
    /// The context- and preference-aware cache.
    Cache,
    /// SPECTRA-CORE internal n-gram dictionaries.
    Internal,
    /// Hand-built drafts (tests and experiments).
    Fixed,
}

impl Source {
    pub const ALL: [Source; 6] =
        [Source::Prompt, Source::Repository, Source::Common, Source::Cache, Source::Internal, Source::Fixed];

    pub fn name(self) -> &'static str {
        match self {
            Source::Prompt => "prompt",
            Source::Repository => "repository",
            Source::Common => "common",
            Source::Cache => "cache",
            Source::Internal => "internal",
            Source::Fixed => "fixed",
        }
    }
}

/// One proposed continuation of the context: `tokens[0]` would follow the
/// pending token (the last token of the context).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub tokens: Vec<u32>,
    /// Relative confidence, summed over candidates sharing a prefix when the
    /// draft tree is built (e.g. an occurrence count times a source weight).
    pub weight: f32,
    pub source: Source,
    /// How many context tokens the source matched to find it (0: unknown).
    /// A long match is stronger evidence than a short one.
    pub matched: usize,
}

/// A source of drafts. Works on token ids only.
pub trait Drafter: Send {
    /// Proposes continuations of `context`, whose last token is the pending
    /// token (chosen by the model, not yet verified past). Appends to `out`.
    fn propose(&mut self, context: &[u32], out: &mut Vec<Candidate>);

    /// Called after every decode step with the context the step started from
    /// and the tokens it produced (accepted drafts plus the bonus token), and
    /// the draft path that was accepted with its source, if any.
    fn observe(&mut self, _context: &[u32], _produced: &[u32], _accepted: Option<&AcceptedDraft>) {}

    /// Called after every decode step, before [`Drafter::observe`], with the
    /// context the step started from and what its verification computed:
    /// the model's logits at every node of the tree, accepted or not.
    fn observe_verified(&mut self, _context: &[u32], _step: &VerifiedStep<'_>) {}
}

/// One verified draft tree: what a decode step computed.
#[derive(Clone, Copy, Debug)]
pub struct VerifiedStep<'a> {
    pub tree: &'a DraftTree,
    /// The accepted nodes, root first.
    pub path: &'a [usize],
    /// `vocab` logits per node, in tree order.
    pub logits: &'a [f32],
    pub vocab: usize,
}

impl VerifiedStep<'_> {
    /// The model's logits for the token after `node`'s branch.
    pub fn node_logits(&self, node: usize) -> &[f32] {
        &self.logits[node * self.vocab..(node + 1) * self.vocab]
    }
}

/// The part of a draft tree the model confirmed in one step.
#[derive(Clone, Debug, PartialEq)]
pub struct AcceptedDraft {
    /// The accepted draft tokens (without the bonus token).
    pub tokens: Vec<u32>,
    /// The source of the heaviest candidate through the deepest accepted node.
    pub source: Source,
}
