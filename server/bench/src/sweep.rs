//! One-at-a-time parameter sweeps of FastCoder for `copilotd bench repo
//! --sweep NAME=V1,V2,...`: one variant per value, every other parameter at
//! its default. Besides FastCoder's own parameters, `nodes` verifies trees of
//! a fixed size, to trace acceptance and speed against tree size.

use crate::repo::Variant;
use anyhow::{bail, ensure, Context, Result};
use copilotd_draft::fastcoder::FastCoderConfig;
use copilotd_server::completion::drafting::BudgetSettings;
use copilotd_server::completion::Strategy;
use std::str::FromStr;

/// A tunable parameter of FastCoder.
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
}

impl Param {
    const ALL: [Param; 6] = [Param::Alpha, Param::Beta, Param::CacheWeight, Param::Delta, Param::P, Param::Nodes];

    pub fn name(self) -> &'static str {
        match self {
            Param::Alpha => "alpha",
            Param::Beta => "beta",
            Param::CacheWeight => "cache_weight",
            Param::Delta => "delta",
            Param::P => "p",
            Param::Nodes => "nodes",
        }
    }

    /// Checks that `value` is allowed for this parameter.
    fn check(self, value: f64) -> Result<()> {
        match self {
            Param::Alpha | Param::Beta | Param::CacheWeight => {
                ensure!(value.is_finite() && value >= 0.0, "{} must be a finite number ≥ 0, not {value}", self.name())
            }
            Param::Delta => ensure!(
                value.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&value),
                "delta must be a whole number of sequences ≥ 0, not {value}"
            ),
            Param::P => ensure!((0.0..=1.0).contains(&value), "p must be a probability in [0, 1], not {value}"),
            Param::Nodes => ensure!(
                value.fract() == 0.0 && (1.0..=1024.0).contains(&value),
                "nodes must be a whole number from 1 to 1024, not {value}"
            ),
        }
        Ok(())
    }

    /// Sets this parameter of `config` or `budget` to a value accepted by `check`.
    fn apply(self, config: &mut FastCoderConfig, budget: &mut BudgetSettings, value: f64) {
        match self {
            Param::Alpha => config.alpha = value as f32,
            Param::Beta => config.beta = value as f32,
            Param::CacheWeight => config.cache_weight = value as f32,
            Param::Delta => config.cache.activation = value as usize,
            Param::P => config.line_start_retrieval_probability = value,
            Param::Nodes => *budget = BudgetSettings { cost_aware: false, max_nodes: value as usize, ..*budget },
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
            .with_context(|| format!("unknown FastCoder parameter `{name}` (known: {})", known()))
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

/// One FastCoder variant per swept value, labelled like `fastcoder alpha=2`,
/// with every other parameter at its default.
pub fn variants(sweeps: &[Sweep], budget: BudgetSettings) -> Vec<Variant> {
    sweeps
        .iter()
        .flat_map(|sweep| sweep.values.iter().map(move |&value| (sweep.param, value)))
        .map(|(param, value)| {
            let (mut fastcoder, mut budget) = (FastCoderConfig::default(), budget);
            param.apply(&mut fastcoder, &mut budget, value);
            Variant {
                label: format!("fastcoder {}={value}", param.name()),
                fastcoder,
                ..Variant::plain(Strategy::FastCoder, budget)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        format!("{:#}", text.parse::<Sweep>().unwrap_err())
    }

    #[test]
    fn parses_each_parameter() {
        let sweep: Sweep = "alpha=0.5, 1,2".parse().unwrap();
        assert_eq!(sweep, Sweep { param: Param::Alpha, values: vec![0.5, 1.0, 2.0] });
        for param in Param::ALL {
            let parsed: Sweep = format!("{}=1", param.name()).parse().unwrap();
            assert_eq!(parsed.param, param);
        }
    }

    #[test]
    fn rejects_bad_names_and_values_clearly() {
        assert!(error("gamma=1").contains("unknown FastCoder parameter `gamma`"));
        assert!(error("gamma=1").contains("alpha, beta, cache_weight, delta, p, nodes"));
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
