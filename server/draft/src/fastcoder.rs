//! The FastCoder drafting policy (seed paper 000, Alg. 1): the preference
//! cache first, then the retrieval-timing rules (skip tokens at line starts,
//! the missing table), then the repository and common stores; every result
//! becomes weighted candidates for the draft trie.
//!
//! The paper queries the two stores in parallel. Here they are queried one after the other:
//! each query takes microseconds, and a thread per step cost more than it saved (the share
//! of decode time spent drafting fell from 8–11% to 3% on AMD Zen 5, where a step takes
//! 5–7 ms; benches/README.md).

use crate::common_store::CommonStore;
use crate::drafter::{AcceptedDraft, Candidate, Drafter, Source};
use crate::missing::MissingTable;
use crate::pref_cache::{CacheConfig, OutputChunker, PreferenceCache};
use crate::repo_store::RepositoryStore;
use crate::retrieval::{QueryOptions, Retrieval};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

/// Tells whether the context ends at the start of a line (where FastCoder's
/// skip token applies); supplied by the daemon, which can see text.
pub type LineStartFn = Box<dyn FnMut(&[u32]) -> bool + Send>;

/// Settings of the FastCoder drafter; the switches serve the ablation table.
#[derive(Clone, Debug)]
pub struct FastCoderConfig {
    pub use_repository: bool,
    pub use_common: bool,
    pub use_cache: bool,
    /// Skip tokens and the missing table (FastCoder's "retrieval strategy").
    pub use_retrieval_strategy: bool,
    /// α: weight of the repository store's counts.
    pub alpha: f32,
    /// β: weight of the common store's counts.
    pub beta: f32,
    /// Weight of the cache's counts.
    pub cache_weight: f32,
    /// Divide each source's counts by their sum before weighting, so that α,
    /// β and the cache weight are shares rather than raw-count scales (the
    /// common store's counts are corpus frequencies, orders of magnitude above
    /// the repository's). `false` uses raw counts as in the paper.
    pub normalize_counts: bool,
    /// Paper behaviour: a cache hit is the whole draft and the stores are not
    /// queried. `false` merges cache hits with the stores' results.
    pub cache_first: bool,
    /// p: probability of retrieving at a line start.
    pub line_start_retrieval_probability: f64,
    /// Seed of the generator behind p.
    pub seed: u64,
    /// Queries of the repository store.
    pub repository_query: QueryOptions,
    /// Suffix lengths tried in the common store (clamped to what it stores).
    pub common_max_suffix: usize,
    pub common_min_suffix: usize,
    /// Candidates kept per source (the most frequent).
    pub max_candidates_per_source: usize,
    /// The cache (its `activation` is δ).
    pub cache: CacheConfig,
    /// Model output is cut into cache entries of this many tokens.
    pub output_chunk_len: usize,
    /// Context tokens stored before a verified draft or an output chunk.
    pub cache_context_len: usize,
    /// Bound of the missing table.
    pub missing_capacity: usize,
}

impl Default for FastCoderConfig {
    fn default() -> Self {
        FastCoderConfig {
            use_repository: true,
            use_common: true,
            use_cache: true,
            use_retrieval_strategy: true,
            alpha: 1.0,
            beta: 0.5,
            cache_weight: 2.0,
            normalize_counts: true,
            cache_first: true,
            line_start_retrieval_probability: 0.5,
            seed: 0,
            repository_query: QueryOptions::default(),
            common_max_suffix: 5,
            common_min_suffix: 1,
            max_candidates_per_source: 32,
            cache: CacheConfig::default(),
            output_chunk_len: 20,
            cache_context_len: 8,
            missing_capacity: 4096,
        }
    }
}

/// Counters of one source.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SourceStats {
    pub queries: u64,
    pub hits: u64,
    pub candidates: u64,
    pub micros: u64,
}

/// What the drafter did, step by step, summed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FastCoderStats {
    pub proposals: u64,
    pub repository: SourceStats,
    pub common: SourceStats,
    pub cache: SourceStats,
    /// Retrieval skipped at a line start (the draw against p).
    pub skipped_line_start: u64,
    /// Retrieval skipped because the context suffix is a known miss.
    pub skipped_missing: u64,
    /// Retrievals where every store returned nothing (recorded as misses).
    pub all_missed: u64,
    /// Entries added to the cache: verified drafts, output chunks.
    pub cached_drafts: u64,
    pub cached_chunks: u64,
}

/// The FastCoder drafter. The cache is shared (one per workspace, across
/// requests); stores are shared read-only.
pub struct FastCoderDrafter {
    config: FastCoderConfig,
    /// One store per workspace folder, queried as one.
    repository: Vec<Arc<RwLock<RepositoryStore>>>,
    common: Option<Arc<CommonStore>>,
    cache: Arc<Mutex<PreferenceCache>>,
    line_start: Option<LineStartFn>,
    missing: MissingTable,
    chunker: OutputChunker,
    rng: StdRng,
    /// Matched suffix length per source in the last proposal (for cache entries).
    last_matched: [(Source, usize); 3],
    stats: FastCoderStats,
}

impl FastCoderDrafter {
    /// `repository`: the repository stores (one per workspace folder; an `Option` for one or none).
    pub fn new(
        config: FastCoderConfig,
        repository: impl IntoIterator<Item = Arc<RwLock<RepositoryStore>>>,
        common: Option<Arc<CommonStore>>,
        cache: Arc<Mutex<PreferenceCache>>,
    ) -> FastCoderDrafter {
        // A miss is certain for a context sharing the last k tokens, where k is
        // the largest shortest-suffix length among the stores queried.
        let mut key_len = 1;
        if config.use_repository {
            key_len = key_len.max(config.repository_query.min_suffix);
        }
        if config.use_common {
            key_len = key_len.max(config.common_min_suffix);
        }
        FastCoderDrafter {
            missing: MissingTable::new(key_len, config.missing_capacity),
            chunker: OutputChunker::new(config.output_chunk_len, config.cache_context_len),
            rng: StdRng::seed_from_u64(config.seed),
            last_matched: [(Source::Repository, 0), (Source::Common, 0), (Source::Cache, 0)],
            stats: FastCoderStats::default(),
            config,
            repository: repository.into_iter().collect(),
            common,
            cache,
            line_start: None,
        }
    }

    /// Installs the line-start test used by the skip-token rule.
    pub fn with_line_start(mut self, line_start: LineStartFn) -> Self {
        self.line_start = Some(line_start);
        self
    }

    pub fn config(&self) -> &FastCoderConfig {
        &self.config
    }

    pub fn stats(&self) -> &FastCoderStats {
        &self.stats
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, PreferenceCache> {
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set_matched(&mut self, source: Source, len: usize) {
        if let Some(slot) = self.last_matched.iter_mut().find(|(s, _)| *s == source) {
            slot.1 = len;
        }
    }

    fn push_candidates(&self, r: &Retrieval, weight: f32, source: Source, out: &mut Vec<Candidate>) -> u64 {
        let kept = &r.continuations[..r.continuations.len().min(self.config.max_candidates_per_source)];
        let scale = if self.config.normalize_counts {
            let total: u64 = kept.iter().map(|c| u64::from(c.count)).sum();
            weight / total.max(1) as f32
        } else {
            weight
        };
        for c in kept.iter().filter(|c| !c.tokens.is_empty()) {
            let weight = scale * c.count as f32;
            out.push(Candidate { tokens: c.tokens.clone(), weight, source, matched: r.matched_len });
        }
        kept.len() as u64
    }

    /// Whether the retrieval-timing rules say to skip the stores this step.
    fn skip_retrieval(&mut self, context: &[u32], generation: u64) -> bool {
        if !self.config.use_retrieval_strategy {
            return false;
        }
        if let Some(line_start) = self.line_start.as_mut() {
            // The draw against p comes first: the line-start check (a parse, at a blank line)
            // then runs only where its answer can skip retrieval.
            if !self.rng.random_bool(self.config.line_start_retrieval_probability.clamp(0.0, 1.0))
                && line_start(context)
            {
                self.stats.skipped_line_start += 1;
                return true;
            }
        }
        if self.missing.is_known_miss(context, generation) {
            self.stats.skipped_missing += 1;
            return true;
        }
        false
    }

    /// Queries the enabled stores.
    fn query_stores(&mut self, context: &[u32], out: &mut Vec<Candidate>) {
        let repositories = if self.config.use_repository { self.repository.clone() } else { Vec::new() };
        let guards: Vec<_> = repositories.iter().filter_map(|r| r.read().ok()).collect();
        let repo_stores: Vec<&RepositoryStore> = guards.iter().map(|g| &**g).collect();
        let generation = stores_generation(&repo_stores);
        if self.skip_retrieval(context, generation) {
            return;
        }
        let common = self.common.as_deref().filter(|_| self.config.use_common);
        let repo_query = |stores: &[&RepositoryStore]| {
            let t = Instant::now();
            let answers = stores.iter().filter_map(|store| store.query(context, &self.config.repository_query));
            (Retrieval::merge(answers), t.elapsed())
        };
        let common_query = |store: &CommonStore| {
            let t = Instant::now();
            let r = store.query_bounded(context, self.config.common_max_suffix, self.config.common_min_suffix);
            (r, t.elapsed())
        };
        let repo_stores = Some(&repo_stores[..]).filter(|stores| !stores.is_empty());
        let queried = repo_stores.is_some() || common.is_some();
        let (repo_result, common_result) = (repo_stores.map(repo_query), common.map(common_query));
        drop(guards);

        let mut any = false;
        if let Some((result, took)) = repo_result {
            self.stats.repository.queries += 1;
            self.stats.repository.micros += took.as_micros() as u64;
            if let Some(r) = result {
                any = true;
                self.stats.repository.hits += 1;
                self.stats.repository.candidates +=
                    self.push_candidates(&r, self.config.alpha, Source::Repository, out);
                self.set_matched(Source::Repository, r.matched_len);
            }
        }
        if let Some((result, took)) = common_result {
            self.stats.common.queries += 1;
            self.stats.common.micros += took.as_micros() as u64;
            if let Some(r) = result {
                any = true;
                self.stats.common.hits += 1;
                self.stats.common.candidates += self.push_candidates(&r, self.config.beta, Source::Common, out);
                self.set_matched(Source::Common, r.matched_len);
            }
        }
        if !any && queried && self.config.use_retrieval_strategy {
            self.stats.all_missed += 1;
            self.missing.record_miss(context, generation);
        }
    }
}

/// A value that changes whenever an answer of the stores may have changed: the stores'
/// identities and generations, hashed.
fn stores_generation(stores: &[&RepositoryStore]) -> u64 {
    let bytes: Vec<u8> = stores
        .iter()
        .flat_map(|store| [std::ptr::from_ref(*store) as usize as u64, store.generation()])
        .flat_map(u64::to_le_bytes)
        .collect();
    crate::checksum::of_bytes(&bytes)
}

impl Drafter for FastCoderDrafter {
    fn propose(&mut self, context: &[u32], out: &mut Vec<Candidate>) {
        self.stats.proposals += 1;
        self.last_matched.iter_mut().for_each(|m| m.1 = 0);
        if self.config.use_cache {
            let t = Instant::now();
            let (active, hit) = {
                let mut cache = self.lock_cache();
                (cache.is_active(), cache.lookup(context))
            };
            if active {
                self.stats.cache.queries += 1;
                self.stats.cache.micros += t.elapsed().as_micros() as u64;
            }
            if let Some(r) = hit {
                self.stats.cache.hits += 1;
                self.stats.cache.candidates += self.push_candidates(&r, self.config.cache_weight, Source::Cache, out);
                self.set_matched(Source::Cache, r.matched_len);
                if self.config.cache_first {
                    return;
                }
            }
        }
        self.query_stores(context, out);
    }

    fn observe(&mut self, context: &[u32], produced: &[u32], accepted: Option<&AcceptedDraft>) {
        if !self.config.use_cache {
            return;
        }
        let chunks = self.chunker.observe(context, produced);
        let mut entries: Vec<Vec<u32>> = Vec::new();
        if let Some(a) = accepted.filter(|a| !a.tokens.is_empty()) {
            // A verified retrieved draft, with the context that retrieved it.
            let matched = self.last_matched.iter().find(|(s, _)| *s == a.source).map(|m| m.1);
            if let Some(matched) = matched.filter(|_| a.source != Source::Cache) {
                let k = matched.max(self.config.cache_context_len).min(context.len());
                entries.push([&context[context.len() - k..], produced].concat());
                self.stats.cached_drafts += 1;
            }
        }
        self.stats.cached_chunks += chunks.len() as u64;
        entries.extend(chunks);
        let mut cache = self.lock_cache();
        for e in &entries {
            cache.insert(e);
        }
    }
}

#[cfg(test)]
mod tests;
