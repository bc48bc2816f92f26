//! A toy model for the decode loop's tests: its next-token logits are a hash of the last three
//! tokens, so every probability is known exactly, and its tree passes give each node the logits
//! of a plain pass along its branch.

use anyhow::Result;
use copilotd_draft::decode::TreeModel;

pub const VOCAB: usize = 12;

#[derive(Default)]
pub struct ToyModel {
    cache: Vec<u32>,
    tree: Vec<Vec<u32>>,
    forwards: usize,
    /// Most tokens the cache holds (`None`: no limit); a pass beyond fails, as the real model's.
    context: Option<usize>,
}

impl ToyModel {
    /// A toy model holding at most `context` tokens.
    #[allow(dead_code)] // each test binary uses a subset
    pub fn with_context(context: usize) -> Self {
        ToyModel { context: Some(context), ..ToyModel::default() }
    }

    fn check_room(&self, extra: usize) -> Result<()> {
        let needed = self.cache.len() + extra;
        match self.context {
            Some(context) if needed > context => anyhow::bail!("{needed} tokens exceed the context of {context}"),
            _ => Ok(()),
        }
    }
}

pub fn toy_logits(sequence: &[u32]) -> Vec<f32> {
    let tail: Vec<u32> = sequence.iter().rev().take(3).copied().collect();
    (0..VOCAB as u32)
        .map(|t| {
            let mut h: u64 = 1469598103934665603;
            for &x in tail.iter().chain(std::iter::once(&t)) {
                h = (h ^ x as u64).wrapping_mul(1099511628211);
            }
            (h % 1000) as f32 / 100.0
        })
        .collect()
}

impl TreeModel for ToyModel {
    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn context_length(&self) -> usize {
        self.context.unwrap_or(usize::MAX)
    }
    fn cache_len(&self) -> usize {
        self.cache.len()
    }
    fn truncate(&mut self, len: usize) {
        self.cache.truncate(len);
    }
    fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.check_room(tokens.len())?;
        self.cache.extend_from_slice(tokens);
        Ok(toy_logits(&self.cache))
    }
    fn forward_tree(&mut self, tokens: &[u32], parents: &[Option<usize>]) -> Result<Vec<f32>> {
        self.forwards += 1;
        self.tree.clear();
        let mut logits = Vec::new();
        for (i, &token) in tokens.iter().enumerate() {
            let mut path = match parents[i] {
                Some(p) => self.tree[p].clone(),
                None => Vec::new(),
            };
            path.push(token);
            let mut sequence = self.cache.clone();
            sequence.extend_from_slice(&path);
            logits.extend(toy_logits(&sequence));
            self.tree.push(path);
        }
        self.check_room(self.tree.iter().map(Vec::len).max().unwrap_or(0))?;
        Ok(logits)
    }
    fn keep_path(&mut self, path: &[usize]) -> Result<()> {
        let deepest = &self.tree[*path.last().unwrap()];
        assert_eq!(deepest.len(), path.len(), "kept path must be a root-to-node chain");
        self.cache.extend_from_slice(deepest);
        Ok(())
    }

    type Cache = Vec<u32>;

    fn copy_cache(&self, len: usize) -> Vec<u32> {
        self.cache[..len.min(self.cache.len())].to_vec()
    }

    fn replace_cache(&mut self, cache: Vec<u32>) {
        self.cache = cache;
    }

    fn cache_bytes(cache: &Vec<u32>) -> usize {
        std::mem::size_of_val(cache.as_slice())
    }
}
