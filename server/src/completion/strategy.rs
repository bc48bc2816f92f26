//! The decoding strategies a user can choose.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How drafts are produced for a completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Plain greedy decoding, one token per forward pass: the reference.
    Ar,
    /// Prompt lookup: n-gram matches in the prompt and output so far.
    Pld,
    /// Suffix matches in the common datastore only (REST with CREST's layout).
    Rest,
    /// The full FastCoder method: cache, repository and common stores.
    #[serde(rename = "fastcoder")]
    FastCoder,
    /// SPECTRA-CORE: n-gram dictionaries of what the model wrote and predicted.
    Spectra,
    /// The best available strategy for the loaded model and stores.
    #[default]
    Auto,
}

/// What a strategy drafts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sources {
    /// Prompt lookup: the prompt and the output so far.
    pub prompt_lookup: bool,
    /// The common datastore (through FastCoder's drafter).
    pub common: bool,
    /// FastCoder's own sources besides the common store: the repository datastore, the
    /// preference cache and its retrieval timing.
    pub repository: bool,
    /// SPECTRA-CORE's internal n-gram dictionaries.
    pub internal: bool,
}

impl Strategy {
    pub const ALL: [Strategy; 6] =
        [Strategy::Ar, Strategy::Pld, Strategy::Rest, Strategy::FastCoder, Strategy::Spectra, Strategy::Auto];

    /// The one table of which sources each strategy drafts from.
    pub fn sources(self) -> Sources {
        let (prompt_lookup, common, repository, internal) = match self {
            Strategy::Ar => (false, false, false, false),
            Strategy::Pld => (true, false, false, false),
            Strategy::Rest => (false, true, false, false),
            Strategy::FastCoder => (false, true, true, false),
            Strategy::Spectra => (false, false, false, true),
            Strategy::Auto => (true, true, true, true),
        };
        Sources { prompt_lookup, common, repository, internal }
    }

    /// Whether drafting reads the common datastore.
    pub fn uses_common_store(self) -> bool {
        self.sources().common
    }

    /// Whether drafting reads the repository datastore.
    pub fn uses_repository_store(self) -> bool {
        self.sources().repository
    }

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Ar => "ar",
            Strategy::Pld => "pld",
            Strategy::Rest => "rest",
            Strategy::FastCoder => "fastcoder",
            Strategy::Spectra => "spectra",
            Strategy::Auto => "auto",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        Strategy::ALL.into_iter().find(|strategy| strategy.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
            anyhow::anyhow!("unknown strategy '{s}' (expected one of: {})", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.name().parse::<Strategy>().unwrap(), strategy);
            assert_eq!(serde_json::to_string(&strategy).unwrap(), format!("\"{strategy}\""));
        }
        let error = "fast".parse::<Strategy>().unwrap_err().to_string();
        assert!(error.contains("unknown strategy 'fast'") && error.contains("fastcoder"), "{error}");
    }
}
