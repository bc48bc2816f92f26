//! The drafting sources of the engine and the drafter each strategy uses.

use super::line_start::LineStartCheck;
use super::{acceptance, Strategy};
use crate::workspace::Repository;
use anyhow::{bail, Result};
use copilotd_draft::budget::{BudgetPolicy, CostAwareBudget, CostModel, FixedBudget};
use copilotd_draft::combined::Combined;
use copilotd_draft::common_store::CommonStore;
use copilotd_draft::drafter::Drafter;
use copilotd_draft::fastcoder::{FastCoderConfig, FastCoderDrafter};
use copilotd_draft::pld::PromptLookup;
use copilotd_draft::pref_cache::PreferenceCache;
use copilotd_draft::spectra::{SharedDictionaries, SpectraConfig, SpectraDrafter};
use copilotd_model::Tokenizer;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// How big draft trees are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetSettings {
    /// Choose each tree's size from the measured cost curve and learned
    /// acceptance (`false`: always verify up to `max_nodes`).
    pub cost_aware: bool,
    /// Most nodes besides the root.
    pub max_nodes: usize,
    /// Deepest draft token.
    pub max_depth: usize,
}

impl Default for BudgetSettings {
    fn default() -> Self {
        BudgetSettings { cost_aware: true, max_nodes: 32, max_depth: 10 }
    }
}

/// The draft tree while the forward cost is not measured yet: a chain of a few nodes. A
/// tree pass reads each weight once for all its rows, so a few rows cost about what one
/// does on any CPU (memory-bound), while a large tree can cost several one-token passes
/// on a slow one; this small tree never makes a step much dearer than plain decoding.
pub const UNCALIBRATED: FixedBudget = FixedBudget { nodes: 4, depth: 4 };

/// The stores, the cache, SPECTRA-CORE's dictionaries and the budget policy
/// that drafting uses. They live as long as the engine (one workspace): an
/// editor session is one long generation, and the preference cache, the
/// n-gram dictionaries and the acceptance statistics of the budget keep
/// learning across requests.
pub struct DraftSources {
    /// The repository datastores, one per workspace folder (also the repository-level
    /// context of FIM prompts, see `repo_context`).
    pub repository: Vec<Repository>,
    pub common: Option<Arc<CommonStore>>,
    pub cache: Arc<Mutex<PreferenceCache>>,
    pub fastcoder: FastCoderConfig,
    pub budget: BudgetSettings,
    /// SPECTRA-CORE's settings and dictionaries; `None`: internal speculation off.
    internal: Option<(SpectraConfig, SharedDictionaries)>,
    /// One per strategy, created at its first drafting request once the cost model is
    /// known: each strategy learns how its own trees fare, as if it were the only one used.
    cost_aware: HashMap<Strategy, CostAwareBudget>,
    /// Where each strategy's acceptance counts are kept across processes (the
    /// engine's own sources; `None`: learned in this process only).
    pub acceptance_files: Option<Box<dyn Fn(Strategy) -> PathBuf + Send>>,
    /// FastCoder's line-start check, made at the first drafting request and shared by
    /// all after it (`None` inside: no Python grammar, skip tokens off).
    line_start: OnceLock<Option<Arc<Mutex<LineStartCheck>>>>,
}

impl DraftSources {
    pub fn new(fastcoder: FastCoderConfig, budget: BudgetSettings) -> Self {
        DraftSources {
            repository: Vec::new(),
            common: None,
            cache: Arc::new(Mutex::new(PreferenceCache::new(fastcoder.cache))),
            fastcoder,
            budget,
            internal: Some((SpectraConfig::default(), SpectraConfig::default().dictionaries())),
            cost_aware: HashMap::new(),
            acceptance_files: None,
            line_start: OnceLock::new(),
        }
    }

    /// These sources with SPECTRA-CORE set up as `spectra` (empty
    /// dictionaries), or without internal speculation (`None`).
    pub fn with_spectra(mut self, spectra: Option<SpectraConfig>) -> Self {
        self.internal = spectra.map(|config| (config, config.dictionaries()));
        self
    }

    /// Whether `budget_policy` needs a cost model it does not have yet for `strategy`.
    pub fn needs_cost_model(&self, strategy: Strategy) -> bool {
        self.budget.cost_aware && !self.cost_aware.contains_key(&strategy)
    }

    /// Creates the cost-aware budget of `strategy`, starting from the acceptance counts
    /// it kept earlier if there are any.
    pub fn set_cost_model(&mut self, strategy: Strategy, cost: CostModel) {
        let mut policy = CostAwareBudget::new(cost, self.budget.max_nodes, self.budget.max_depth);
        let kept = self.acceptance_files.as_ref().map(|file| file(strategy));
        if let Some(counts) = kept.as_deref().and_then(acceptance::load) {
            if !policy.restore(counts) {
                tracing::warn!("the kept acceptance counts do not fit this budget; starting from zero");
            }
        }
        self.cost_aware.insert(strategy, policy);
    }

    /// Prices every strategy's trees with `cost` from now on (a later calibration), keeping
    /// what their budgets learned.
    pub fn update_cost_model(&mut self, cost: &CostModel) {
        for policy in self.cost_aware.values_mut() {
            policy.set_cost(cost.clone());
        }
    }

    /// Keeps what each strategy's cost-aware budget learned (when there is a file to keep it in);
    /// the first failure is the error, after every file was tried.
    pub fn save_acceptance(&self) -> Result<()> {
        let Some(file) = &self.acceptance_files else { return Ok(()) };
        let saved: Vec<Result<()>> = self
            .cost_aware
            .iter()
            .map(|(&strategy, policy)| acceptance::save(&file(strategy), &policy.counts()))
            .collect();
        saved.into_iter().collect()
    }

    /// The budget policy for the next request of `strategy`. `fixed` is used when the
    /// policy is not cost-aware, and holds [`UNCALIBRATED`] while the cost-aware one has no
    /// cost model yet.
    pub fn budget_policy<'a>(&'a mut self, strategy: Strategy, fixed: &'a mut FixedBudget) -> &'a mut dyn BudgetPolicy {
        *fixed = FixedBudget { nodes: self.budget.max_nodes, depth: self.budget.max_depth };
        if self.needs_cost_model(strategy) {
            *fixed =
                FixedBudget { nodes: fixed.nodes.min(UNCALIBRATED.nodes), depth: fixed.depth.min(UNCALIBRATED.depth) };
        }
        match (self.cost_aware.get_mut(&strategy), self.budget.cost_aware) {
            (Some(policy), true) => policy,
            _ => fixed,
        }
    }

    /// The drafter for one request, from the strategy's sources (`Strategy::sources`);
    /// `None` for plain decoding. Several sources are combined, the internal
    /// guesses first (as SPECTRA does), then FastCoder's, then prompt lookup's.
    pub fn drafter(&self, strategy: Strategy, tokenizer: &Tokenizer) -> Result<Option<Box<dyn Drafter>>> {
        let sources = strategy.sources();
        let mut drafters: Vec<Box<dyn Drafter>> = Vec::new();
        if let Some((config, dictionaries)) = self.internal.as_ref().filter(|_| sources.internal) {
            drafters.push(Box::new(SpectraDrafter::new(*config, dictionaries.clone())));
        }
        if sources.common && !sources.repository {
            if self.common.is_none() {
                bail!("strategy '{strategy}' needs the common datastore (copilotd datastore build-common)");
            }
            let config = FastCoderConfig {
                use_repository: false,
                use_cache: false,
                use_retrieval_strategy: false,
                ..self.fastcoder.clone()
            };
            drafters.push(Box::new(self.fastcoder_drafter(config, tokenizer)));
        } else if sources.common {
            drafters.push(Box::new(self.fastcoder_drafter(self.fastcoder.clone(), tokenizer)));
        }
        // Prompt lookup also sees the output generated so far.
        if sources.prompt_lookup {
            drafters.push(Box::new(PromptLookup::default()));
        }
        Ok(match drafters.len() {
            0 | 1 => drafters.pop(),
            _ => Some(Box::new(Combined::new(drafters))),
        })
    }

    fn fastcoder_drafter(&self, config: FastCoderConfig, tokenizer: &Tokenizer) -> FastCoderDrafter {
        let stores: Vec<_> = self.repository.iter().map(|repository| repository.store.clone()).collect();
        let drafter = FastCoderDrafter::new(config, stores, self.common.clone(), self.cache.clone());
        let check = self.line_start.get_or_init(|| match LineStartCheck::new(tokenizer.clone()) {
            Ok(check) => Some(Arc::new(Mutex::new(check))),
            Err(error) => {
                tracing::warn!("line-start detection unavailable, skip tokens off: {error:#}");
                None
            }
        });
        match check.clone() {
            Some(check) => drafter.with_line_start(Box::new(move |context: &[u32]| {
                check.lock().is_ok_and(|mut check| check.at_code_line_start(context))
            })),
            None => drafter,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_strategy_drafts_from_its_sources() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = crate::completion::common::test_tokenizer(dir.path());
        let sources = DraftSources::new(FastCoderConfig::default(), BudgetSettings::default());
        assert!(sources.drafter(Strategy::Ar, &tokenizer).unwrap().is_none());
        assert!(sources.drafter(Strategy::Pld, &tokenizer).unwrap().is_some());
        let error = sources.drafter(Strategy::Rest, &tokenizer).err().unwrap().to_string();
        assert!(error.contains("strategy 'rest' needs the common datastore"), "{error}");
        for strategy in [Strategy::FastCoder, Strategy::Spectra, Strategy::Auto] {
            assert!(sources.drafter(strategy, &tokenizer).unwrap().is_some(), "{strategy}");
        }
    }

    #[test]
    fn a_small_fixed_tree_until_the_cost_is_measured() {
        use copilotd_draft::budget::CostCurve;
        let mut sources = DraftSources::new(FastCoderConfig::default(), BudgetSettings::default());
        let mut fixed = FixedBudget { nodes: 0, depth: 0 };
        let uncalibrated = (UNCALIBRATED.nodes, UNCALIBRATED.depth);
        assert_eq!(sources.budget_policy(Strategy::Auto, &mut fixed).limits(), uncalibrated);
        let curve = CostCurve::new(vec![(1, 10.0), (32, 40.0)]).unwrap();
        sources.set_cost_model(Strategy::Auto, CostModel::new(vec![(256, curve)]).unwrap());
        let defaults = BudgetSettings::default();
        let (nodes, depth) = sources.budget_policy(Strategy::Auto, &mut fixed).limits();
        assert!(nodes >= defaults.max_nodes && depth == defaults.max_depth, "the cost-aware policy: {nodes}, {depth}");
        assert!(sources.needs_cost_model(Strategy::Pld), "each strategy has its own budget");
        assert_eq!(sources.budget_policy(Strategy::Pld, &mut fixed).limits(), uncalibrated);
        // Not cost-aware: the configured fixed tree, measured or not.
        let fixed_settings = BudgetSettings { cost_aware: false, ..defaults };
        let mut plain = DraftSources::new(FastCoderConfig::default(), fixed_settings);
        assert_eq!(plain.budget_policy(Strategy::Auto, &mut fixed).limits(), (defaults.max_nodes, defaults.max_depth));
    }
}
