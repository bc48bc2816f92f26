//! SPECTRA-CORE (seed paper 003, Alg. 1) made for a CPU: internal
//! speculation from n-gram dictionaries of what this model writes.
//!
//! On a GPU the paper verifies its guesses and, in the same pass, extends a
//! pool of W candidate sequences by one token each (W×(N−1) extra rows,
//! free there). On a CPU every row costs, so the pool is the draft tree
//! itself: every node the budget chose to verify is a candidate sequence
//! (the context, then the node's branch), and the model's prediction at
//! that node, which verification computed anyway, extends it by one token.
//! Rejected branches thus teach the dictionaries what the model would write
//! after them, at no extra cost; the real tokens (prompt and output) are
//! added as well. The guesses (bi-directional search, Alg. 1 lines 7–15)
//! become weighted candidates that the cost-aware budget prices like any
//! other node. The dictionaries are shared across requests (one per
//! workspace, bounded), so the model's habits carry from one completion to
//! the next.

mod bounded_map;
mod dictionaries;

pub use dictionaries::{DictionaryLimits, NgramDictionaries, MAX_NGRAM};

use crate::drafter::{Candidate, Drafter, Source, VerifiedStep};
use crate::verify::top_two;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::{Arc, Mutex, MutexGuard};

/// The dictionaries of one workspace, shared by the drafters of its requests.
pub type SharedDictionaries = Arc<Mutex<NgramDictionaries>>;

/// Settings of SPECTRA-CORE (the paper's values: N = 5, W = 15, G = 15, τ = 0.1; here N = 12,
/// [`DictionaryLimits`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpectraConfig {
    /// N and the dictionaries' bounds.
    pub limits: DictionaryLimits,
    /// G: most guesses per step.
    pub max_guesses: usize,
    /// W: most unaccepted tree nodes per step whose predictions feed the dictionaries.
    pub pool: usize,
    /// τ: when a uniform draw exceeds it, S_fwd learns the most likely
    /// token it does not yet hold after the node's token (of the two most
    /// likely); otherwise the most likely one. S_bwd always learns the most
    /// likely one (it answers for greedy decoding).
    pub tau: f64,
    /// Longest backward guess (the paper: N).
    pub backward_len: usize,
    /// Share of the weight given to the backward guess; the forward guesses
    /// share the rest, newer ones more.
    pub backward_share: f32,
    /// Total weight of the guesses of one step against the other sources of `auto` (prompt
    /// lookup weighs 1; FastCoder's repository store 1, common store 0.5, cache 2): 3, so that
    /// the internal guesses lead their siblings more often, as the paper gives them priority
    /// (chosen by a sweep of 0.25–4 in benches/README.md, and checked on six packages outside
    /// the benchmark).
    pub weight: f32,
    /// Seed of the draws against τ.
    pub seed: u64,
}

impl Default for SpectraConfig {
    fn default() -> Self {
        SpectraConfig {
            limits: DictionaryLimits::default(),
            max_guesses: 15,
            pool: 15,
            tau: 0.1,
            backward_len: 5,
            backward_share: 0.5,
            weight: 3.0,
            seed: 0,
        }
    }
}

impl SpectraConfig {
    /// Empty dictionaries sized by this configuration.
    pub fn dictionaries(&self) -> SharedDictionaries {
        Arc::new(Mutex::new(NgramDictionaries::new(self.limits)))
    }
}

/// The SPECTRA-CORE drafter of one request.
pub struct SpectraDrafter {
    config: SpectraConfig,
    dictionaries: SharedDictionaries,
    /// Real tokens of this request's context already added.
    absorbed: usize,
    rng: StdRng,
}

impl SpectraDrafter {
    pub fn new(config: SpectraConfig, dictionaries: SharedDictionaries) -> SpectraDrafter {
        SpectraDrafter { config, dictionaries, absorbed: 0, rng: StdRng::seed_from_u64(config.seed) }
    }

    fn lock(&self) -> MutexGuard<'_, NgramDictionaries> {
        // The dictionaries hold no invariant a panic could break.
        self.dictionaries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds the real tokens of `context` not added yet.
    fn absorb(&mut self, context: &[u32]) {
        if context.len() < self.absorbed {
            self.absorbed = 0;
        }
        let from = self.absorbed;
        self.lock().add_sequence(context, from);
        self.absorbed = context.len();
    }
}

impl Drafter for SpectraDrafter {
    fn propose(&mut self, context: &[u32], out: &mut Vec<Candidate>) {
        self.absorb(context);
        let Some(&last) = context.last() else { return };
        let config = self.config;
        let dictionaries = self.lock();
        let (backward, matched) = dictionaries.backward_guess(context, config.backward_len);
        let forward_room = config.max_guesses.saturating_sub(usize::from(!backward.is_empty()));
        let forward: Vec<&[u32]> = dictionaries
            .forward(last)
            .iter()
            .map(|c| c.as_slice())
            .filter(|c| !c.is_empty())
            .take(forward_room)
            .collect();
        let backward_weight = match (backward.is_empty(), forward.is_empty()) {
            (true, _) => 0.0,
            (false, true) => config.weight,
            (false, false) => config.weight * config.backward_share,
        };
        // Internal guesses first: the backward one (quality), then the forward ones (quantity).
        if !backward.is_empty() {
            out.push(Candidate { tokens: backward, weight: backward_weight, source: Source::Internal, matched });
        }
        let count = forward.len();
        let total = (count * (count + 1) / 2) as f32;
        let forward_weight = config.weight - backward_weight;
        out.extend(forward.into_iter().enumerate().map(|(rank, tokens)| Candidate {
            tokens: tokens.to_vec(),
            weight: forward_weight * (count - rank) as f32 / total,
            source: Source::Internal,
            matched: 1,
        }));
    }

    /// The candidate pool's update (Alg. 1, lines 25–42) from the unaccepted
    /// nodes of the verified tree: the model's prediction after each.
    fn observe_verified(&mut self, context: &[u32], step: &VerifiedStep<'_>) {
        let tree = step.tree;
        let mut on_path = vec![false; tree.len()];
        step.path.iter().for_each(|&node| on_path[node] = true);
        let key_len = self.config.limits.ngram.clamp(2, MAX_NGRAM) - 1;
        let tail = &context[context.len().saturating_sub(key_len)..];
        let pool: Vec<usize> = (1..tree.len()).filter(|&n| !on_path[n]).take(self.config.pool).collect();
        for node in pool {
            let mut branch = Vec::with_capacity(tree.depths[node]);
            let mut at = node;
            while let Some(parent) = tree.parents[at] {
                branch.push(tree.tokens[at]);
                at = parent;
            }
            branch.extend(tail.iter().rev());
            branch.reverse();
            let (best, second) = top_two(step.node_logits(node));
            let explore = self.rng.random::<f64>() > self.config.tau;
            let mut dictionaries = self.lock();
            let forward_next = if explore && dictionaries.forward_has(tree.tokens[node], best) { second } else { best };
            dictionaries.add(&branch, best, forward_next);
        }
    }

    fn observe(&mut self, context: &[u32], produced: &[u32], _accepted: Option<&crate::drafter::AcceptedDraft>) {
        if self.absorbed != context.len() {
            self.absorb(context);
        }
        let key_len = self.config.limits.ngram.clamp(2, MAX_NGRAM) - 1;
        let tail_start = context.len().saturating_sub(key_len);
        let sequence: Vec<u32> = context[tail_start..].iter().chain(produced).copied().collect();
        self.lock().add_sequence(&sequence, context.len() - tail_start);
        self.absorbed = context.len() + produced.len();
    }
}

#[cfg(test)]
mod tests;
