//! The cost-aware budget's acceptance counts, kept per model across
//! processes: a fresh `copilotd complete` or daemon starts from what earlier
//! ones learned instead of from zero. They count as at most
//! [`PRIOR_WEIGHT`] verified nodes per bucket, so that a new session still
//! adapts to its own workspace. An unusable file is logged and replaced at
//! the next save; a failed save is the caller's to log.

use super::Strategy;
use crate::paths;
use copilotd_draft::budget::AcceptanceCounts;
use copilotd_model::ModelInfo;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Most verified nodes per bucket that counts kept earlier weigh in a new process.
pub const PRIOR_WEIGHT: f64 = 200.0;

#[derive(Serialize, Deserialize)]
struct Stored {
    accepted: Vec<f64>,
    tried: Vec<f64>,
}

/// Where the counts of this model (and tokenizer) are kept for `strategy`: each strategy
/// learns how its own trees fare. The version is part of the key: another release may
/// bucket nodes differently.
pub fn file(info: &ModelInfo, tokenizer_fingerprint: u64, strategy: Strategy) -> PathBuf {
    let key =
        format!("{}|{}|{tokenizer_fingerprint:016x}|{strategy}|{}", info.name, info.weights, env!("CARGO_PKG_VERSION"));
    let hash = copilotd_draft::checksum::of_bytes(key.as_bytes());
    paths::cache_dir().join("acceptance").join(format!("{hash:016x}.json"))
}

/// The counts stored at `path`; `None` when there are none or they are unusable (logged).
pub fn load(path: &Path) -> Option<AcceptanceCounts> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::warn!("cannot read the acceptance counts {}: {error}", path.display());
            return None;
        }
    };
    match serde_json::from_slice::<Stored>(&bytes) {
        Ok(stored) => Some(as_prior(AcceptanceCounts { accepted: stored.accepted, tried: stored.tried })),
        Err(error) => {
            tracing::warn!("the acceptance counts {} are unusable ({error}); starting from zero", path.display());
            None
        }
    }
}

/// Scales each bucket down to at most `PRIOR_WEIGHT` tried nodes, keeping its rate.
fn as_prior(mut counts: AcceptanceCounts) -> AcceptanceCounts {
    for (accepted, tried) in counts.accepted.iter_mut().zip(counts.tried.iter_mut()) {
        if *tried > PRIOR_WEIGHT {
            *accepted *= PRIOR_WEIGHT / *tried;
            *tried = PRIOR_WEIGHT;
        }
    }
    counts
}

/// Stores `counts` at `path` (whole or not at all).
pub fn save(path: &Path, counts: &AcceptanceCounts) -> anyhow::Result<()> {
    let stored = Stored { accepted: counts.accepted.clone(), tried: counts.tried.clone() };
    let bytes = serde_json::to_vec(&stored).expect("numbers serialize");
    copilotd_draft::atomic_file::write(path, &bytes)
        .map_err(|error| error.context(format!("cannot keep the acceptance counts at {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_round_trip_and_garbage_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counts.json");
        assert_eq!(load(&path), None);
        let counts = AcceptanceCounts { accepted: vec![1.0, 0.0, 300.0], tried: vec![3.0, 2.0, 4.0 * PRIOR_WEIGHT] };
        save(&path, &counts).unwrap();
        let prior = AcceptanceCounts { accepted: vec![1.0, 0.0, 75.0], tried: vec![3.0, 2.0, PRIOR_WEIGHT] };
        assert_eq!(load(&path), Some(prior), "large counts keep their rate with a bounded weight");
        std::fs::write(&path, b"{not json").unwrap();
        assert_eq!(load(&path), None);
    }
}
