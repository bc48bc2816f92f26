//! A chunk's mean negative log-likelihood under the loaded model: one forward
//! pass over the chunk as a chain on an empty cache (a batched prefill that
//! keeps the logits of every position).

use anyhow::{ensure, Result};
use copilotd_model::Model;

/// Mean of −log P(tokens[i] | tokens[..i]) over i ≥ 1, in nats per token
/// (its exponential is the chunk's perplexity). Leaves the cache empty.
pub fn mean_nll(model: &mut Model, tokens: &[u32]) -> Result<f64> {
    ensure!(tokens.len() >= 2, "a chunk of {} tokens has nothing to score", tokens.len());
    model.truncate(0);
    let parents: Vec<Option<usize>> = (0..tokens.len()).map(|i| i.checked_sub(1)).collect();
    let logits = model.forward_tree(tokens, &parents);
    model.truncate(0);
    let logits = logits?;
    let vocab = logits.len() / tokens.len();
    let total: f64 = tokens[1..].iter().zip(logits.chunks_exact(vocab)).map(|(&next, row)| token_nll(row, next)).sum();
    Ok(total / (tokens.len() - 1) as f64)
}

/// −log softmax(row)[token], computed in f64 (infinite for a token outside the row).
pub fn token_nll(row: &[f32], token: u32) -> f64 {
    let Some(&logit) = row.get(token as usize) else { return f64::INFINITY };
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    max + sum.ln() - logit as f64
}

#[cfg(test)]
mod tests {
    use super::token_nll;

    #[test]
    fn token_nll_is_minus_the_log_softmax() {
        let row = [0.0f32, (3.0f32).ln(), f32::NEG_INFINITY];
        // softmax = [1/4, 3/4, 0]
        assert!((token_nll(&row, 0) - 4f64.ln()).abs() < 1e-6);
        assert!((token_nll(&row, 1) - (4.0f64 / 3.0).ln()).abs() < 1e-6);
        assert_eq!(token_nll(&row, 2), f64::INFINITY);
        assert_eq!(token_nll(&row, 9), f64::INFINITY);
    }
}
