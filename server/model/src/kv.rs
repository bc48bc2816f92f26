//! Key/value cache: the accepted sequence, plus the provisional entries of the last tree.
//!
//! Keys and values are stored as IEEE half floats, as llama.cpp's cache is by default. Once
//! the context is long, a one-token pass spends most of its time reading the cache (in f32,
//! 94 MB at 2,048 tokens with the default model, as much as its weights); halves take half.
//! A row is rounded once, when its pass stores it, and every pass after it (and the rest of
//! its own pass) reads the same rounded values, so tree passes stay bit-identical to
//! one-token passes. A kv head's values are kept in [`value_planes`] planes of their own
//! (column ranges of the rows), so that threads can share one head's weighted sums.

use anyhow::{bail, Context, Result};
use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::attention::{value_planes, KvRows};
use crate::tree::TreeLayout;

/// Per layer and kv head, keys stored row after row (`head_dim` each), and values the same
/// way in each of their planes (`head_dim / planes` each).
pub struct KvCache {
    kv_heads: usize,
    head_dim: usize,
    planes: usize,
    len: usize,
    keys: Vec<Vec<f16>>,
    /// `planes` per layer and kv head.
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
        let planes = value_planes(head_dim);
        Self {
            kv_heads,
            head_dim,
            planes,
            len: 0,
            keys: vec![Vec::new(); slots],
            values: vec![Vec::new(); slots * planes],
            pending_keys: vec![Vec::new(); slots],
            pending_values: vec![Vec::new(); slots],
            pending_tree: None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A cache holding a copy of this one's first `len` rows (all of them if fewer).
    pub fn prefix_copy(&self, len: usize) -> KvCache {
        let len = len.min(self.len);
        let rows = |buffers: &[Vec<f16>], width: usize| -> Vec<Vec<f16>> {
            buffers.iter().map(|rows| rows[..len * width].to_vec()).collect()
        };
        KvCache {
            len,
            keys: rows(&self.keys, self.head_dim),
            values: rows(&self.values, self.head_dim / self.planes),
            pending_keys: vec![Vec::new(); self.pending_keys.len()],
            pending_values: vec![Vec::new(); self.pending_values.len()],
            pending_tree: None,
            ..*self
        }
    }

    /// Bytes of memory the cache holds (what its buffers have room for).
    pub fn bytes(&self) -> usize {
        let halves: usize = self.keys.iter().chain(&self.values).map(Vec::capacity).sum();
        let floats: usize = self.pending_keys.iter().chain(&self.pending_values).map(Vec::capacity).sum();
        halves * std::mem::size_of::<f16>() + floats * std::mem::size_of::<f32>()
    }

    /// Drops cache rows past `len` and any provisional tree entries.
    pub fn truncate(&mut self, len: usize) {
        self.discard_pending();
        if len < self.len {
            self.len = len;
            for rows in &mut self.keys {
                rows.truncate(len * self.head_dim);
            }
            for rows in &mut self.values {
                rows.truncate(len * self.head_dim / self.planes);
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
            cache_values: &self.values[slot * self.planes..(slot + 1) * self.planes],
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
        let (d, planes) = (self.head_dim, self.planes);
        let w = d / planes;
        for (dst, src) in self.keys.iter_mut().zip(&self.pending_keys) {
            append_rows(dst, src, d, path, 0..d);
        }
        for (i, dst) in self.values.iter_mut().enumerate() {
            let plane = i % planes;
            append_rows(dst, &self.pending_values[i / planes], d, path, plane * w..(plane + 1) * w);
        }
        self.len += path.len();
        self.discard_pending();
        Ok(())
    }
}

/// Appends the elements `columns` of the rows `path` of `src` (rows of `width` values
/// already rounded to half floats, so exactly) to `dst`.
fn append_rows(dst: &mut Vec<f16>, src: &[f32], width: usize, path: &[usize], columns: std::ops::Range<usize>) {
    for &node in path {
        let start = dst.len();
        dst.resize(start + columns.len(), f16::ZERO);
        dst[start..].convert_from_f32_slice(&src[node * width..][columns.clone()]);
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
        assert_eq!(rows.cache_values.len(), 1);
        assert_eq!(widened(&rows.cache_values[0]), rounded(&values[..2]));
        assert!(rows.pending_keys.is_empty() && kv.len() == 1);
    }

    #[test]
    fn values_are_kept_in_planes_of_their_columns() {
        // One layer, two kv heads of 64 (two planes of 32); three nodes, of which 2 and 0 are kept.
        let (kv_heads, d) = (2, 64);
        let mut kv = KvCache::new(1, kv_heads, d);
        let value = |node: usize, column: usize| (node * 200 + column) as f32; // exact in half floats
        let rows: Vec<f32> = (0..3).flat_map(|node| (0..kv_heads * d).map(move |c| value(node, c))).collect();
        kv.set_pending(0, &rows, &rows);
        kv.finish_pending(TreeLayout::new(&[None, Some(0), None]).unwrap());
        kv.keep(&[2]).unwrap();
        kv.set_pending(0, &rows, &rows);
        kv.finish_pending(TreeLayout::chain(3));
        kv.keep(&[0]).unwrap();
        for g in 0..kv_heads {
            let rows = kv.rows(0, g);
            assert_eq!(rows.cache_values.len(), 2);
            for (p, plane) in rows.cache_values.iter().enumerate() {
                let expected: Vec<f32> =
                    [2, 0].iter().flat_map(|&node| (0..32).map(move |c| value(node, g * d + p * 32 + c))).collect();
                let widened: Vec<f32> = plane.iter().map(|v| v.to_f32()).collect();
                assert_eq!(widened, expected, "kv head {g}, plane {p}");
            }
        }
        kv.truncate(1);
        assert!(kv.rows(0, 1).cache_values.iter().all(|plane| plane.len() == 32));
    }

    #[test]
    fn a_prefix_copy_holds_the_same_rows_and_nothing_pending() {
        let (kv_heads, d) = (2, 64);
        let mut kv = KvCache::new(2, kv_heads, d);
        let rows: Vec<f32> = (0..3 * kv_heads * d).map(|i| i as f32).collect(); // exact in half floats
        for layer in 0..2 {
            kv.set_pending(layer, &rows, &rows);
        }
        kv.finish_pending(TreeLayout::chain(3));
        kv.keep(&[0, 1, 2]).unwrap();
        kv.set_pending(0, &rows, &rows);
        let copy = kv.prefix_copy(2);
        assert_eq!(copy.len(), 2);
        for (layer, g) in [(0, 0), (1, 1)] {
            let (whole, part) = (kv.rows(layer, g), copy.rows(layer, g));
            assert_eq!(part.cache_keys, &whole.cache_keys[..2 * d]);
            for (part, whole) in part.cache_values.iter().zip(whole.cache_values) {
                assert_eq!(part, &whole[..2 * d / copy.planes]);
            }
            assert!(part.pending_keys.is_empty() && part.pending_values.is_empty());
        }
        assert!(copy.bytes() < kv.bytes() && kv.prefix_copy(9).len() == 3);
    }
}
