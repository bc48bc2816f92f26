//! Key/value cache: the accepted sequence, plus the provisional entries of the last tree.

use anyhow::{bail, Context, Result};

use crate::attention::KvRows;
use crate::tree::TreeLayout;

/// Per layer and kv head, keys and values stored row after row (`head_dim` each).
pub struct KvCache {
    kv_heads: usize,
    head_dim: usize,
    len: usize,
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    pending_keys: Vec<Vec<f32>>,
    pending_values: Vec<Vec<f32>>,
    pending_tree: Option<TreeLayout>,
}

impl KvCache {
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        let empty = || vec![Vec::new(); layers * kv_heads];
        Self {
            kv_heads,
            head_dim,
            len: 0,
            keys: empty(),
            values: empty(),
            pending_keys: empty(),
            pending_values: empty(),
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

    /// Stores the keys and values of all nodes of a tree pass for `layer`; rows are
    /// `[nodes, kv_heads * head_dim]`.
    pub fn set_pending(&mut self, layer: usize, keys: &[f32], values: &[f32]) {
        let d = self.head_dim;
        for g in 0..self.kv_heads {
            let slot = layer * self.kv_heads + g;
            for (dst, src) in [(&mut self.pending_keys[slot], keys), (&mut self.pending_values[slot], values)] {
                dst.clear();
                for row in src.chunks_exact(self.kv_heads * d) {
                    dst.extend_from_slice(&row[g * d..(g + 1) * d]);
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
                dst.extend_from_slice(&src[node * d..(node + 1) * d]);
            }
        }
        self.len += path.len();
        self.discard_pending();
        Ok(())
    }
}
