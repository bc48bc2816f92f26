//! One-at-a-time parameter sweeps of FastCoder and SPECTRA-CORE for
//! `copilotd bench repo --sweep NAME=V1,V2,...`: one variant per value, every
//! other parameter at its default. Besides the drafters' own parameters,
//! `nodes` verifies trees of a fixed size, to trace acceptance and speed
//! against tree size.

use crate::repo::Variant;
use anyhow::{bail, ensure, Context, Result};
use copilotd_draft::spectra::{SpectraConfig, MAX_NGRAM};
use copilotd_server::completion::drafting::BudgetSettings;
use copilotd_server::completion::Strategy;
use std::str::FromStr;

/// A tunable parameter of FastCoder or SPECTRA-CORE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    /// α: weight of the repository store's counts.
    Alpha,
    /// β: weight of the common store's counts.
    Beta,
    /// Weight of the preference cache's counts.
    CacheWeight,
    /// δ: sequences the preference cache must hold before it answers.
    Delta,
    /// p: probability of retrieving at a line start.
    P,
    /// Nodes of every draft tree (a fixed budget instead of the cost-aware one).
    Nodes,
    /// SPECTRA's τ (coverage exploration of the forward dictionary).
    Tau,
    /// SPECTRA's N (n-gram size of the dictionaries).
    Ngram,
    /// Longest backward guess of SPECTRA.
    BackwardLen,
    /// Weight of SPECTRA's guesses against the other sources of `auto`.
    SpectraWeight,
}

impl Param {
    const ALL: [Param; 10] = [
        Param::Alpha,
        Param::Beta,
        Param::CacheWeight,
        Param::Delta,
        Param::P,
        Param::Nodes,
        Param::Tau,
        Param::Ngram,
        Param::BackwardLen,
        Param::SpectraWeight,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Param::Alpha => "alpha",
            Param::Beta => "beta",
            Param::CacheWeight => "cache_weight",
            Param::Delta => "delta",
            Param::P => "p",
            Param::Nodes => "nodes",
            Param::Tau => "tau",
            Param::Ngram => "ngram",
            Param::BackwardLen => "backward_len",
            Param::SpectraWeight => "spectra_weight",
        }
    }

    /// The strategy whose variants the sweep runs.
    fn strategy(self) -> Strategy {
        match self {
            Param::Tau | Param::Ngram | Param::BackwardLen => Strategy::Spectra,
            Param::SpectraWeight => Strategy::Auto,
            _ => Strategy::FastCoder,
        }
    }

    /// Checks that `value` is allowed for this parameter.
    fn check(self, value: f64) -> Result<()> {
        match self {
            Param::Alpha | Param::Beta | Param::CacheWeight | Param::SpectraWeight => {
                ensure!(value.is_finite() && value >= 0.0, "{} must be a finite number ≥ 0, not {value}", self.name())
            }
            Param::Delta => ensure!(
                value.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&value),
                "delta must be a whole number of sequences ≥ 0, not {value}"
            ),
            Param::P | Param::Tau => {
                ensure!((0.0..=1.0).contains(&value), "{} must be a probability in [0, 1], not {value}", self.name())
            }
            Param::Ngram => ensure!(
                value.fract() == 0.0 && (2.0..=MAX_NGRAM as f64).contains(&value),
                "ngram must be a whole number from 2 to {MAX_NGRAM}, not {value}"
            ),
            Param::BackwardLen => ensure!(
                value.fract() == 0.0 && (1.0..=64.0).contains(&value),
                "backward_len must be a whole number from 1 to 64, not {value}"
            ),
            Param::Nodes => ensure!(
                value.fract() == 0.0 && (1.0..=1024.0).contains(&value),
                "nodes must be a whole number from 1 to 1024, not {value}"
            ),
        }
        Ok(())
    }

    /// Sets this parameter of `variant` to a value accepted by `check`.
    fn apply(self, variant: &mut Variant, value: f64) {
        let (config, budget) = (&mut variant.fastcoder, &mut variant.budget);
        let spectra = variant.spectra.get_or_insert_with(SpectraConfig::default);
        match self {
            Param::Alpha => config.alpha = value as f32,
            Param::Beta => config.beta = value as f32,
            Param::CacheWeight => config.cache_weight = value as f32,
            Param::Delta => config.cache.activation = value as usize,
            Param::P => config.line_start_retrieval_probability = value,
            Param::Nodes => *budget = BudgetSettings { cost_aware: false, max_nodes: value as usize, ..*budget },
            Param::Tau => spectra.tau = value,
            Param::Ngram => spectra.limits.ngram = value as usize,
            Param::BackwardLen => spectra.backward_len = value as usize,
            Param::SpectraWeight => spectra.weight = value as f32,
        }
    }
}

impl FromStr for Param {
    type Err = anyhow::Error;

    fn from_str(name: &str) -> Result<Param> {
        let known = || Param::ALL.map(Param::name).join(", ");
        Param::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .with_context(|| format!("unknown parameter `{name}` (known: {})", known()))
    }
}

/// The values one parameter takes in a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    pub param: Param,
    pub values: Vec<f64>,
}

impl FromStr for Sweep {
    type Err = anyhow::Error;

    /// Parses `NAME=V1,V2,...`.
    fn from_str(text: &str) -> Result<Sweep> {
        let Some((name, list)) = text.split_once('=') else {
            bail!("expected NAME=V1,V2,... (e.g. alpha=0.5,1,2), not `{text}`");
        };
        let param: Param = name.trim().parse()?;
        let values = list
            .split(',')
            .map(|v| {
                let value: f64 =
                    v.trim().parse().with_context(|| format!("`{}` is not a number (in {text})", v.trim()))?;
                param.check(value)?;
                Ok(value)
            })
            .collect::<Result<Vec<f64>>>()?;
        Ok(Sweep { param, values })
    }
}

/// One variant per swept value, labelled like `fastcoder alpha=2`, with
/// every other parameter at its default.
pub fn variants(sweeps: &[Sweep], budget: BudgetSettings) -> Vec<Variant> {
    sweeps
        .iter()
        .flat_map(|sweep| sweep.values.iter().map(move |&value| (sweep.param, value)))
        .map(|(param, value)| {
            let strategy = param.strategy();
            let mut variant =
                Variant { label: format!("{strategy} {}={value}", param.name()), ..Variant::plain(strategy, budget) };
            param.apply(&mut variant, value);
            variant
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use copilotd_draft::fastcoder::FastCoderConfig;

    fn error(text: &str) -> String {
        format!("{:#}", text.parse::<Sweep>().unwrap_err())
    }

    #[test]
    fn parses_each_parameter() {
        let sweep: Sweep = "alpha=0.5, 1,2".parse().unwrap();
        assert_eq!(sweep, Sweep { param: Param::Alpha, values: vec![0.5, 1.0, 2.0] });
        for param in Param::ALL {
            let value = if param == Param::Ngram { 2 } else { 1 };
            let parsed: Sweep = format!("{}={value}", param.name()).parse().unwrap();
            assert_eq!(parsed.param, param);
        }
    }

    #[test]
    fn rejects_bad_names_and_values_clearly() {
        assert!(error("gamma=1").contains("unknown parameter `gamma`"));
        assert!(error("gamma=1").contains("alpha, beta, cache_weight, delta, p, nodes, tau, ngram"));
        assert!(error("alpha").contains("expected NAME=V1,V2"));
        assert!(error("alpha=1,x").contains("`x` is not a number"));
        assert!(error("alpha=").contains("`` is not a number"));
        assert!(error("beta=-1").contains("beta must be a finite number ≥ 0"));
        assert!(error("cache_weight=inf").contains("finite"));
        assert!(error("delta=2.5").contains("whole number"));
        assert!(error("delta=-3").contains("whole number"));
        assert!(error("p=1.5").contains("probability in [0, 1]"));
        assert!(error("p=NaN").contains("probability"));
        assert!(error("nodes=0").contains("whole number from 1 to 1024"));
        assert!(error("nodes=8.5").contains("whole number"));
        assert!(error("tau=2").contains("tau must be a probability"));
        assert!(error("ngram=1").contains("whole number from 2 to 12"));
        assert!(error("backward_len=0").contains("whole number from 1 to 64"));
    }

    #[test]
    fn spectra_parameters_vary_spectra_and_its_weight_varies_auto() {
        let sweeps: Vec<Sweep> = ["tau=1", "ngram=3", "spectra_weight=2"].iter().map(|s| s.parse().unwrap()).collect();
        let variants = variants(&sweeps, BudgetSettings::default());
        let labels: Vec<&str> = variants.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["spectra tau=1", "spectra ngram=3", "auto spectra_weight=2"]);
        let spectra: Vec<SpectraConfig> = variants.iter().map(|v| v.spectra.unwrap()).collect();
        let default = SpectraConfig::default();
        assert_eq!((spectra[0].tau, spectra[0].limits.ngram), (1.0, default.limits.ngram));
        assert_eq!((spectra[1].tau, spectra[1].limits.ngram), (default.tau, 3));
        assert_eq!(spectra[2].weight, 2.0);
        assert_eq!(variants[2].strategy, Strategy::Auto);
    }

    #[test]
    fn one_variant_per_value_with_the_rest_at_defaults() {
        let sweeps: Vec<Sweep> = ["alpha=2", "delta=0,50", "p=0.25"].iter().map(|s| s.parse().unwrap()).collect();
        let budget = BudgetSettings { cost_aware: false, max_nodes: 16, max_depth: 10 };
        let variants = variants(&sweeps, budget);
        let labels: Vec<&str> = variants.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["fastcoder alpha=2", "fastcoder delta=0", "fastcoder delta=50", "fastcoder p=0.25"]);
        let default = FastCoderConfig::default();
        assert!(variants.iter().all(|v| v.strategy == Strategy::FastCoder && v.budget == budget));
        assert_eq!((variants[0].fastcoder.alpha, variants[0].fastcoder.beta), (2.0, default.beta));
        assert_eq!(variants[2].fastcoder.cache.activation, 50);
        assert_eq!(variants[2].fastcoder.alpha, default.alpha);
        assert_eq!(variants[3].fastcoder.line_start_retrieval_probability, 0.25);
        assert_eq!(variants[3].fastcoder.cache, default.cache);
    }

    #[test]
    fn a_nodes_sweep_fixes_the_tree_size_and_keeps_the_depth() {
        let sweeps = ["nodes=8,32".parse().unwrap()];
        let budget = BudgetSettings { cost_aware: true, max_nodes: 16, max_depth: 6 };
        let variants = variants(&sweeps, budget);
        let budgets: Vec<BudgetSettings> = variants.iter().map(|v| v.budget).collect();
        let fixed = |max_nodes| BudgetSettings { cost_aware: false, max_nodes, max_depth: 6 };
        assert_eq!(budgets, [fixed(8), fixed(32)]);
        assert_eq!(variants[1].label, "fastcoder nodes=32");
        assert_eq!(variants[1].fastcoder.alpha, FastCoderConfig::default().alpha);
    }
}
