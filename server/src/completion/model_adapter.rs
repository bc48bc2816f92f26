//! The candle model runtime seen through the decode loop's `TreeModel`.

use anyhow::Result;
use copilotd_draft::decode::TreeModel;
use copilotd_model::{KvCache, Model};

/// Wraps a loaded model for the decode loop.
pub struct LoadedModel(pub Model);

impl TreeModel for LoadedModel {
    fn vocab_size(&self) -> usize {
        self.0.info().vocab_size
    }

    fn context_length(&self) -> usize {
        self.0.info().context_length
    }

    fn cache_len(&self) -> usize {
        self.0.cache_len()
    }

    fn truncate(&mut self, len: usize) {
        self.0.truncate(len)
    }

    fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.0.prefill(tokens)
    }

    fn forward_tree(&mut self, tokens: &[u32], parents: &[Option<usize>]) -> Result<Vec<f32>> {
        self.0.forward_tree(tokens, parents)
    }

    fn keep_path(&mut self, path: &[usize]) -> Result<()> {
        self.0.keep_path(path)
    }

    type Cache = KvCache;

    fn copy_cache(&self, len: usize) -> KvCache {
        self.0.copy_cache(len)
    }

    fn replace_cache(&mut self, cache: KvCache) {
        self.0.replace_cache(cache)
    }

    fn cache_bytes(cache: &KvCache) -> usize {
        cache.bytes()
    }
}
