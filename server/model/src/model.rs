//! The forward pass over token trees on top of a KV cache.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::ops::Range;
use std::path::Path;
use std::sync::Mutex;

use crate::attention;
use crate::config::Config;
use crate::groups::ending_in_a_pair;
use crate::kv::KvCache;
use crate::loader::Weights;
use crate::ops::{self, Rotation};
use crate::product_timing::{self, ProductTiming};
use crate::source::{self, Loaded};
use crate::split_attention;
use crate::tokenizer::Tokenizer;
use crate::tree::TreeLayout;
use crate::{Kernel, LoadOptions, ModelInfo, NonFiniteLogits};

/// Prompt tokens per forward pass during prefill.
const PREFILL_CHUNK: usize = 128;

/// A loaded model with its tokenizer and KV cache.
pub struct Model {
    info: ModelInfo,
    config: Config,
    tokenizer: Tokenizer,
    /// The tokenizer's ids: a logits row's columns past them (padded embedding rows, as
    /// Qwen2.5's 151,665 tokens in 151,936 rows) are −∞, never chosen.
    tokens: usize,
    weights: Weights,
    kv: KvCache,
}

impl Model {
    /// Loads a `.gguf` file, or a directory with `config.json`, `*.safetensors` and
    /// `tokenizer.json`.
    pub fn load(path: &Path, opts: &LoadOptions) -> Result<Model> {
        crate::threads::configure(opts.threads);
        let loaded = source::load(path, opts)?;
        let kv = KvCache::new(loaded.config.layers, loaded.config.kv_heads, loaded.config.head_dim);
        let tokens = loaded.tokenizer.vocab_size();
        let Loaded { info, config, tokenizer, weights } = loaded;
        Ok(Model { info, config, tokenizer, tokens, weights, kv })
    }

    /// A copy of the first `len` entries of the KV cache.
    pub fn copy_cache(&self, len: usize) -> KvCache {
        self.kv.prefix_copy(len)
    }

    /// Puts `cache` (one this model's [`Model::copy_cache`] made) in place of the model's cache.
    pub fn replace_cache(&mut self, cache: KvCache) {
        self.kv = cache;
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Number of tokens whose keys and values are in the cache.
    pub fn cache_len(&self) -> usize {
        self.kv.len()
    }

    /// Drops cache entries past `len` (and any provisional tree entries).
    pub fn truncate(&mut self, len: usize) {
        self.kv.truncate(len);
    }

    /// Appends `tokens` to the cache, in chunks, and returns the logits after the last one.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            bail!("prefill: no tokens");
        }
        self.check_room(tokens.len())?;
        let mut logits = Vec::new();
        let chunks = tokens.chunks(PREFILL_CHUNK);
        let n_chunks = chunks.len();
        for (i, chunk) in chunks.enumerate() {
            let want: &[usize] = if i + 1 == n_chunks { &[chunk.len() - 1] } else { &[] };
            logits = self.run(chunk, TreeLayout::chain(chunk.len()), want)?;
            let all: Vec<usize> = (0..chunk.len()).collect();
            self.kv.keep(&all)?;
        }
        Ok(logits)
    }

    /// One forward pass over a token tree on top of the cache. Node `i` sits at position
    /// `cache_len + depth(i)` and attends to the cache, its ancestors and itself
    /// (`parents[i] < i`, `None` for top-level nodes). Returns the logits of every node,
    /// row-major `[nodes, vocab_size]`. The nodes' cache entries are held until
    /// [`Self::keep_path`] or the next call.
    pub fn forward_tree(&mut self, tokens: &[u32], parents: &[Option<usize>]) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            bail!("forward_tree: empty tree");
        }
        if tokens.len() != parents.len() {
            bail!("forward_tree: {} tokens but {} parent links", tokens.len(), parents.len());
        }
        let tree = TreeLayout::new(parents)?;
        self.check_room(tree.max_depth().unwrap_or(0) + 1)?;
        let all: Vec<usize> = (0..tokens.len()).collect();
        self.run(tokens, tree, &all)
    }

    /// Times the weight products of a pass of `rows` tokens alone, per kind of matrix
    /// (median of `repeats`; see [`crate::ProductTiming`]).
    pub fn time_products(&self, rows: usize, repeats: usize) -> Result<Vec<ProductTiming>> {
        product_timing::time(&self.weights, rows, repeats)
    }

    /// Appends the entries of `path` (nodes of the last tree, a chain from a top-level
    /// node down, in order) to the cache and discards the other nodes.
    pub fn keep_path(&mut self, path: &[usize]) -> Result<()> {
        self.kv.keep(path)
    }

    fn check_room(&self, extra: usize) -> Result<()> {
        let needed = self.kv.len() + extra;
        if needed > self.config.context_length {
            bail!("sequence of {needed} tokens exceeds the model's context length of {}", self.config.context_length);
        }
        Ok(())
    }

    /// Runs the network over the nodes of `tree` and returns logits for the rows in `want`.
    fn run(&mut self, tokens: &[u32], tree: TreeLayout, want: &[usize]) -> Result<Vec<f32>> {
        crate::threads::run(|| self.run_here(tokens, tree, want))
    }

    /// [`Self::run`] on the calling thread.
    fn run_here(&mut self, tokens: &[u32], tree: TreeLayout, want: &[usize]) -> Result<Vec<f32>> {
        self.kv.discard_pending();
        let cfg = &self.config;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            bail!("token id {bad} is outside the vocabulary ({})", cfg.vocab_size);
        }
        let n = tokens.len();
        let (qd, kvd, hd) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let cache_len = self.kv.len();
        let rotations: Vec<Rotation> = (0..=tree.max_depth().unwrap_or(0))
            .map(|d| Rotation::new(cache_len + d, hd, cfg.rope_theta, cfg.rope_scale, &cfg.rope_factors))
            .collect();

        let mut x = self.embed(tokens)?;
        for (l, layer) in self.weights.layers.iter().enumerate() {
            let h = ops::rms_norm(&x, &layer.attn_norm, cfg.rms_eps);
            let qkv = layer.qkv.forward(&h, n)?;
            let width = qd + 2 * kvd;
            let mut q = Vec::with_capacity(n * qd);
            let mut k = Vec::with_capacity(n * kvd);
            let mut v = Vec::with_capacity(n * kvd);
            for (i, row) in qkv.chunks_exact(width).enumerate() {
                let rot = &rotations[tree.depth(i)];
                let start = q.len();
                q.extend_from_slice(&row[..qd]);
                rot.apply(&mut q[start..], cfg.rope_style);
                let start = k.len();
                k.extend_from_slice(&row[qd..qd + kvd]);
                rot.apply(&mut k[start..], cfg.rope_style);
                v.extend_from_slice(&row[qd + kvd..]);
            }
            self.kv.set_pending(l, &k, &v);
            let attn = attention(self.info.kernel, &self.kv, l, &q, &tree, cfg);
            ops::add_assign(&mut x, &layer.o.forward(&attn, n)?);
            let h = ops::rms_norm(&x, &layer.ffn_norm, cfg.rms_eps);
            let act = ops::swiglu(self.info.kernel, &layer.gate_up.forward(&h, n)?, cfg.intermediate);
            ops::add_assign(&mut x, &layer.down.forward(&act, n)?);
        }
        self.kv.finish_pending(tree);

        if want.is_empty() {
            return Ok(Vec::new());
        }
        let h = cfg.hidden;
        let rows: Vec<f32> = want.iter().flat_map(|&r| x[r * h..(r + 1) * h].iter().copied()).collect();
        let normed = ops::rms_norm(&rows, &self.weights.norm, cfg.rms_eps);
        let mut logits = self.weights.lm_head.forward(&normed, want.len())?;
        if !all_finite(&logits) {
            return Err(NonFiniteLogits.into());
        }
        if self.tokens < cfg.vocab_size {
            for row in logits.chunks_exact_mut(cfg.vocab_size) {
                row[self.tokens..].fill(f32::NEG_INFINITY);
            }
        }
        Ok(logits)
    }

    fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>> {
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let rows = self.weights.embed.embedding(&ids).context("embedding lookup failed")?;
        Ok(rows.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
    }
}

/// Whether no value is NaN or infinite; without an early exit, so that the loop is vectorized
/// (49,280 logits in 4.7 µs, against 13 ms for the one-token pass that makes them; measured).
fn all_finite(values: &[f32]) -> bool {
    values.iter().fold(true, |finite, x| finite & x.is_finite())
}

/// Most nodes per attention work unit: a unit attends a block of nodes times the query
/// heads of one kv head, sharing the loads of the cache rows.
const ATTENTION_BLOCK: usize = 4;

/// Attention work units a pass gives each thread, at least, where it has the nodes.
const ATTENTION_UNITS_PER_THREAD: usize = 2;

/// Nodes per attention work unit in a pass long enough to give each thread
/// [`LONG_PASS_UNITS_PER_THREAD`] units of them, such as a prefill chunk: fewer, larger units
/// made a 2,048-token prefill 4% faster than [`ATTENTION_BLOCK`] on AVX-512 (measured; within
/// the noise with AVX2).
const LONG_PASS_BLOCK: usize = 16;
const LONG_PASS_UNITS_PER_THREAD: usize = 6;

/// Nodes per attention work unit for `n` nodes: [`LONG_PASS_BLOCK`] in a long pass, else
/// [`ATTENTION_BLOCK`], unless blocks that large would leave a thread fewer than
/// [`ATTENTION_UNITS_PER_THREAD`] units; then blocks of equal smaller size that do not (down
/// to one node).
///
/// With one unit per kv head (three for the default model) the threads' shares were two
/// against one, and the second thread took its share up late: a 4-node pass spent as long
/// in attention as an 8-node pass (measured). Smaller blocks share the loads of the cache
/// rows among fewer queries (a 6-node pass in blocks of 3 was slower than in 4 and 2), so
/// they are used only where the units would be too few.
fn attention_block(n: usize, kv_heads: usize, threads: usize) -> usize {
    let blocks = (ATTENTION_UNITS_PER_THREAD * threads).div_ceil(kv_heads);
    if n.div_ceil(LONG_PASS_BLOCK) * kv_heads >= LONG_PASS_UNITS_PER_THREAD * threads {
        LONG_PASS_BLOCK
    } else if n.div_ceil(ATTENTION_BLOCK) >= blocks {
        ATTENTION_BLOCK
    } else {
        n.div_ceil(blocks).max(1)
    }
}

/// The nodes of each attention work unit: blocks of [`attention_block`] nodes, the last five
/// of a longer pass in three and two rather than four and one ([`ending_in_a_pair`]: a
/// block of five would give its kv heads' units to the threads unevenly).
fn attention_blocks(n: usize, kv_heads: usize, threads: usize) -> Vec<Range<usize>> {
    ending_in_a_pair(n, attention_block(n, kv_heads, threads)).collect()
}

/// Attention of every node and head, in parallel. Returns
/// `[nodes, heads * head_dim]`.
fn attention(kernel: Kernel, kv: &KvCache, layer: usize, q: &[f32], tree: &TreeLayout, cfg: &Config) -> Vec<f32> {
    let (heads, kv_heads, hd) = (cfg.heads, cfg.kv_heads, cfg.head_dim);
    let group = heads / kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let n = tree.len();
    let threads = crate::threads::effective();
    let blocks = attention_blocks(n, kv_heads, threads);
    if blocks.len() * kv_heads < ATTENTION_UNITS_PER_THREAD * threads {
        return split_attention::attention(kernel, kv, layer, q, tree, cfg);
    }
    let mut out = vec![0f32; n * heads * hd];
    // One cell per (node, kv head): the outputs of the query heads sharing that kv head.
    let cells: Vec<Mutex<&mut [f32]>> = out.chunks_mut(group * hd).map(Mutex::new).collect();
    crate::threads::for_each_range(blocks.len() * kv_heads, |units| {
        let mut scores = Vec::new();
        for unit in units {
            let (block, g) = (unit / kv_heads, unit % kv_heads);
            let nodes = blocks[block].clone();
            let mut guards: Vec<_> =
                nodes.clone().map(|i| cells[i * kv_heads + g].lock().unwrap_or_else(|e| e.into_inner())).collect();
            let mut outs: Vec<&mut [f32]> = Vec::with_capacity(nodes.len() * group);
            let mut queries: Vec<&[f32]> = Vec::with_capacity(outs.capacity());
            let mut pending: Vec<&[usize]> = Vec::with_capacity(outs.capacity());
            for (node, guard) in nodes.zip(guards.iter_mut()) {
                for (h, o) in guard.chunks_mut(hd).enumerate() {
                    let head = g * group + h;
                    outs.push(o);
                    queries.push(&q[(node * heads + head) * hd..(node * heads + head + 1) * hd]);
                    pending.push(tree.visible(node));
                }
            }
            attention::attend_block(kernel, &queries, &pending, &kv.rows(layer, g), scale, &mut scores, &mut outs);
        }
    });
    drop(cells);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Units of the default model's attention (3 kv heads) for `n` nodes on `threads`.
    fn units(n: usize, threads: usize) -> usize {
        n.div_ceil(attention_block(n, 3, threads)) * 3
    }

    #[test]
    fn short_passes_give_every_thread_several_attention_units() {
        for n in 2..=48 {
            assert!(units(n, 2) >= 4, "{n} nodes");
            assert!(attention_block(n, 3, 2) <= ATTENTION_BLOCK);
        }
        // Passes of many nodes (a prefill chunk) take long blocks, and still give each thread
        // several units.
        for n in 49..=512 {
            assert_eq!(attention_block(n, 3, 2), LONG_PASS_BLOCK, "{n} nodes");
            assert!(units(n, 2) >= 2 * LONG_PASS_UNITS_PER_THREAD, "{n} nodes");
        }
        // Tree passes, and a single thread, share each load among the most queries.
        assert_eq!(attention_block(8, 3, 2), ATTENTION_BLOCK);
        assert_eq!(attention_block(48, 3, 2), ATTENTION_BLOCK);
        assert_eq!(attention_block(4, 3, 1), ATTENTION_BLOCK);
        assert_eq!(attention_block(4, 8, 2), ATTENTION_BLOCK);
        assert_eq!(attention_block(5, 3, 2), ATTENTION_BLOCK);
        // A shorter pass's blocks are of equal size.
        assert_eq!(attention_block(4, 3, 2), 2);
        assert_eq!(attention_block(3, 3, 2), 2);
        assert_eq!(attention_block(1, 3, 2), 1);
    }
}
