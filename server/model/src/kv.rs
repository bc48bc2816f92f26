//! Key/value cache: the accepted sequence, plus the provisional entries of the last tree.
//!
//! Keys and values are stored as IEEE half floats, as llama.cpp's cache is by default. Once
//! the context is long, a one-token pass spends most of its time reading the cache (in f32,
//! 94 MB at 2,048 tokens with the default model, as much as its weights); halves take half.
//! A row is rounded once, when its pass stores it, and every pass after it (and the rest of
//! its own pass) reads the same rounded values, so tree passes stay bit-identical to
//! one-token passes.

use anyhow::{bail, Context, Result};
use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::attention::KvRows;
use crate::tree::TreeLayout;

/// Per layer and kv head, keys and values stored row after row (`head_dim` each).
pub struct KvCache {
    kv_heads: usize,
    head_dim: usize,
    len: usize,
    keys: Vec<Vec<f16>>,
    values: Vec<Vec<f16>>,
    /// The last tree pass's rows, already rounded to half floats but kept widened: every
    /// query of a prefill chunk reads most of them, the cache rows only once per block.
    pending_keys: Vec<Vec<f32>>,
    pending_values: Vec<Vec<f32>>,
    pending_tree: Option<TreeLayout>,
}

impl KvCache {
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        let slots = layers * kv_heads;
        Self {
            kv_heads,
            head_dim,
            len: 0,
            keys: vec![Vec::new(); slots],
            values: vec![Vec::new(); slots],
            pending_keys: vec![Vec::new(); slots],
            pending_values: vec![Vec::new(); slots],
            pending_tree: None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Drops cache rows past `len` and any provisional tree entries.
    pub fn truncate(&mut self, len: usize) {
        self.discard_pending();
        if len < self.len {
            self.len = len;
            for rows in self.keys.iter_mut().chain(self.values.iter_mut()) {
                rows.truncate(len * self.head_dim);
            }
        }
    }

    /// Forgets the provisional entries of the last tree.
    pub fn discard_pending(&mut self) {
        self.pending_tree = None;
        for rows in self.pending_keys.iter_mut().chain(self.pending_values.iter_mut()) {
            rows.clear();
        }
    }

    /// Stores the keys and values of all nodes of a tree pass for `layer`, rounded to half
    /// floats; rows are `[nodes, kv_heads * head_dim]`.
    pub fn set_pending(&mut self, layer: usize, keys: &[f32], values: &[f32]) {
        let d = self.head_dim;
        let mut halves = vec![f16::ZERO; d];
        for g in 0..self.kv_heads {
            let slot = layer * self.kv_heads + g;
            for (dst, src) in [(&mut self.pending_keys[slot], keys), (&mut self.pending_values[slot], values)] {
                dst.clear();
                for row in src.chunks_exact(self.kv_heads * d) {
                    halves.convert_from_f32_slice(&row[g * d..(g + 1) * d]);
                    let start = dst.len();
                    dst.resize(start + d, 0.0);
                    halves.convert_to_f32_slice(&mut dst[start..]);
                }
            }
        }
    }

    /// Marks the pending entries as belonging to `tree`, making them keepable.
    pub fn finish_pending(&mut self, tree: TreeLayout) {
        self.pending_tree = Some(tree);
    }

    /// The rows of kv head `g` of `layer` for attention.
    pub fn rows(&self, layer: usize, g: usize) -> KvRows<'_> {
        let slot = layer * self.kv_heads + g;
        KvRows {
            head_dim: self.head_dim,
            cache_keys: &self.keys[slot],
            cache_values: &self.values[slot],
            pending_keys: &self.pending_keys[slot],
            pending_values: &self.pending_values[slot],
        }
    }

    /// Appends the pending entries of `path` (a chain from the top level) to the cache
    /// and discards the other pending entries.
    pub fn keep(&mut self, path: &[usize]) -> Result<()> {
        let tree =
            self.pending_tree.take().context("keep_path: no tree pass to keep nodes from (or it was already kept)")?;
        if let Err(e) = tree.check_path(path) {
            self.discard_pending();
            bail!("keep_path: {e}");
        }
        let d = self.head_dim;
        for (dst, src) in
            self.keys.iter_mut().zip(&self.pending_keys).chain(self.values.iter_mut().zip(&self.pending_values))
        {
            for &node in path {
                // Exact: pending rows hold half-float values.
                let start = dst.len();
                dst.resize(start + d, f16::ZERO);
                dst[start..].convert_from_f32_slice(&src[node * d..(node + 1) * d]);
            }
        }
        self.len += path.len();
        self.discard_pending();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_rounded_to_half_floats_once_and_kept_exactly() {
        // One layer, one kv head, head_dim 2; two chained nodes, of which the first is kept.
        let mut kv = KvCache::new(1, 1, 2);
        let (keys, values) = ([0.1f32, 1.0e-3, 3.3, -2.6], [65504.0f32, 1.0e-8, -0.3, 7.0]);
        kv.set_pending(0, &keys, &values);
        let rounded = |x: &[f32]| -> Vec<f32> { x.iter().map(|&v| f16::from_f32(v).to_f32()).collect() };
        assert_eq!(kv.rows(0, 0).pending_keys, rounded(&keys));
        assert_eq!(kv.rows(0, 0).pending_values, rounded(&values));
        assert_ne!(kv.rows(0, 0).pending_keys, keys, "0.1 is not a half float");
        kv.finish_pending(TreeLayout::chain(2));
        kv.keep(&[0]).unwrap();
        let rows = kv.rows(0, 0);
        let widened = |x: &[f16]| -> Vec<f32> { x.iter().map(|v| v.to_f32()).collect() };
        assert_eq!(widened(rows.cache_keys), rounded(&keys[..2]));
        assert_eq!(widened(rows.cache_values), rounded(&values[..2]));
        assert!(rows.pending_keys.is_empty() && kv.len() == 1);
    }
}
