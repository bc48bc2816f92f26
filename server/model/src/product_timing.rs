//! The weight products of a forward pass, timed alone: where a pass's arithmetic goes, per
//! kind of matrix, and at what rate this CPU's kernel multiplies. Attention, norms and the
//! other per-token work are left out, so the figures compare kernels (and shapes) directly.

use crate::loader::Weights;
use crate::weights::Linear;
use anyhow::Result;
use std::time::Instant;

/// One kind of weight matrix and how long its product takes.
#[derive(Clone, Debug)]
pub struct ProductTiming {
    /// What the matrix computes: `qkv`, `o`, `gate_up`, `down` (one per layer) or `lm_head`.
    pub name: &'static str,
    /// Outputs and inputs of one product.
    pub shape: (usize, usize),
    /// How many matrices of this kind a forward pass multiplies.
    pub count: usize,
    /// Median milliseconds of one product of the input rows.
    pub ms: f64,
}

impl ProductTiming {
    /// Multiply-adds per second, in billions, of `rows` input rows in [`Self::ms`].
    pub fn gmacs(&self, rows: usize) -> f64 {
        (self.shape.0 * self.shape.1 * rows) as f64 / (self.ms * 1e6)
    }
}

/// Times each kind of matrix of `weights` (the first layer's: the layers share shapes and
/// weight formats) multiplying `rows` input rows, median of `repeats`, on the model's threads
/// as a forward pass runs them.
pub(crate) fn time(weights: &Weights, rows: usize, repeats: usize) -> Result<Vec<ProductTiming>> {
    anyhow::ensure!(rows > 0 && repeats > 0, "rows and repeats must be positive");
    let layers = weights.layers.len();
    let mut kinds: Vec<(&'static str, &Linear, usize)> = Vec::new();
    if let Some(layer) = weights.layers.first() {
        kinds.extend([("qkv", &layer.qkv, layers), ("o", &layer.o, layers)]);
        kinds.extend([("gate_up", &layer.gate_up, layers), ("down", &layer.down, layers)]);
    }
    kinds.push(("lm_head", &weights.lm_head, 1));
    crate::threads::run(|| {
        kinds
            .into_iter()
            .map(|(name, linear, count)| {
                let (outputs, inputs) = linear.shape();
                let x = input_rows(rows, inputs);
                linear.forward(&x, rows)?; // once untimed: buffers and caches settle
                let mut times = (0..repeats)
                    .map(|_| {
                        let started = Instant::now();
                        linear.forward(&x, rows).map(|_| started.elapsed().as_secs_f64() * 1000.0)
                    })
                    .collect::<Result<Vec<f64>>>()?;
                times.sort_by(f64::total_cmp);
                Ok(ProductTiming { name, shape: (outputs, inputs), count, ms: times[repeats / 2] })
            })
            .collect()
    })
}

/// `rows` rows of `width` values spread over −1…1 (the products' time does not depend on them).
fn input_rows(rows: usize, width: usize) -> Vec<f32> {
    (0..rows * width).map(|i| (i * 7919 % 2001) as f32 / 1000.0 - 1.0).collect()
}
