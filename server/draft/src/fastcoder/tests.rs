use super::*;
use crate::common_store::{CommonParams, TopT};

fn common(seqs: &[Vec<u32>]) -> Arc<CommonStore> {
    let params = CommonParams { top_t: TopT::Unlimited, ..CommonParams::default() };
    Arc::new(CommonStore::build(seqs.iter().map(|s| s.as_slice()), params, 1).unwrap())
}

fn repo(files: &[(&str, Vec<u32>)]) -> Arc<RwLock<RepositoryStore>> {
    let mut store = RepositoryStore::new();
    for (path, tokens) in files {
        store.upsert_file(path, tokens.clone());
    }
    Arc::new(RwLock::new(store))
}

fn cache(activation: usize) -> Arc<Mutex<PreferenceCache>> {
    Arc::new(Mutex::new(PreferenceCache::new(CacheConfig { activation, ..CacheConfig::default() })))
}

fn drafter(
    config: FastCoderConfig,
    r: Option<Arc<RwLock<RepositoryStore>>>,
    c: Option<Arc<CommonStore>>,
) -> FastCoderDrafter {
    let cache = cache(config.cache.activation);
    FastCoderDrafter::new(config, r, c, cache)
}

fn propose(d: &mut FastCoderDrafter, context: &[u32]) -> Vec<Candidate> {
    let mut out = Vec::new();
    d.propose(context, &mut out);
    out
}

fn weight_of(cands: &[Candidate], source: Source) -> f32 {
    cands.iter().filter(|c| c.source == source).map(|c| c.weight).sum()
}

#[test]
fn merges_both_stores_with_alpha_and_beta() {
    let r = repo(&[("a.py", vec![1, 2, 3, 4, 1, 2, 3, 5])]);
    let c = common(&[vec![2, 3, 9, 9], vec![2, 3, 8]]);
    let config = FastCoderConfig { alpha: 3.0, beta: 0.5, ..FastCoderConfig::default() };
    let mut d = drafter(config, Some(r), Some(c));
    let cands = propose(&mut d, &[7, 1, 2, 3]);
    let mut repo_tokens: Vec<Vec<u32>> =
        cands.iter().filter(|c| c.source == Source::Repository).map(|c| c.tokens.clone()).collect();
    repo_tokens.sort();
    assert_eq!(repo_tokens, vec![vec![4, 1, 2, 3, 5], vec![5]]);
    assert!((weight_of(&cands, Source::Repository) - 3.0).abs() < 1e-5);
    assert!((weight_of(&cands, Source::Common) - 0.5).abs() < 1e-5);
    assert!(cands.iter().any(|c| c.source == Source::Common && c.tokens == vec![9, 9]));
    assert_eq!(d.stats().repository.hits, 1);
    assert_eq!(d.stats().common.hits, 1);
}

#[test]
fn raw_counts_when_not_normalised() {
    let c = common(&[vec![5, 6], vec![5, 6], vec![5, 7]]);
    let config = FastCoderConfig { beta: 2.0, normalize_counts: false, ..FastCoderConfig::default() };
    let mut d = drafter(config, None, Some(c));
    let cands = propose(&mut d, &[5]);
    let w: Vec<(Vec<u32>, f32)> = cands.into_iter().map(|c| (c.tokens, c.weight)).collect();
    assert_eq!(w, vec![(vec![6], 4.0), (vec![7], 2.0)]);
}

#[test]
fn switches_turn_sources_off() {
    let r = repo(&[("a.py", vec![1, 2, 3, 4])]);
    let c = common(&[vec![2, 3, 9]]);
    for (use_repository, use_common) in [(true, false), (false, true), (false, false)] {
        let config = FastCoderConfig { use_repository, use_common, ..FastCoderConfig::default() };
        let mut d = drafter(config, Some(r.clone()), Some(c.clone()));
        let cands = propose(&mut d, &[1, 2, 3]);
        assert_eq!(cands.iter().any(|c| c.source == Source::Repository), use_repository);
        assert_eq!(cands.iter().any(|c| c.source == Source::Common), use_common);
    }
}

#[test]
fn an_active_cache_hit_replaces_retrieval() {
    let c = common(&[vec![1, 2, 50]]);
    let config =
        FastCoderConfig { cache: CacheConfig { activation: 1, ..CacheConfig::default() }, ..Default::default() };
    let shared = cache(1);
    let mut d = FastCoderDrafter::new(config.clone(), None, Some(c.clone()), shared.clone());
    shared.lock().unwrap().insert(&[1, 2, 60, 61]);
    // One sequence is not more than δ = 1: the cache is not consulted.
    assert!(propose(&mut d, &[1, 2]).iter().all(|c| c.source == Source::Common));
    shared.lock().unwrap().insert(&[8, 9, 10]);
    let cands = propose(&mut d, &[1, 2]);
    assert_eq!(cands.len(), 1);
    assert_eq!((cands[0].source, cands[0].tokens.clone()), (Source::Cache, vec![60, 61]));
    // Without cache_first, cache and store candidates are merged.
    let mut merged = FastCoderDrafter::new(FastCoderConfig { cache_first: false, ..config }, None, Some(c), shared);
    let cands = propose(&mut merged, &[1, 2]);
    assert!(cands.iter().any(|c| c.source == Source::Cache));
    assert!(cands.iter().any(|c| c.source == Source::Common));
}

#[test]
fn line_starts_retrieve_with_probability_p() {
    let c = common(&[vec![1, 2, 3]]);
    let run = |p: f64, seed: u64| {
        let config = FastCoderConfig { line_start_retrieval_probability: p, seed, ..FastCoderConfig::default() };
        let mut d =
            drafter(config, None, Some(c.clone())).with_line_start(Box::new(|ctx: &[u32]| ctx.last() == Some(&2)));
        let hits: Vec<bool> = (0..200).map(|_| !propose(&mut d, &[1, 2]).is_empty()).collect();
        // Not a line start: never skipped.
        assert!(!propose(&mut d, &[1]).is_empty());
        (hits, d.stats().skipped_line_start)
    };
    let (never, skipped) = run(0.0, 1);
    assert!(never.iter().all(|h| !h));
    assert_eq!(skipped, 200);
    let (always, skipped) = run(1.0, 1);
    assert!(always.iter().all(|&h| h));
    assert_eq!(skipped, 0);
    let (half, _) = run(0.3, 7);
    let rate = half.iter().filter(|&&h| h).count() as f64 / 200.0;
    assert!((0.2..0.4).contains(&rate), "retrieval rate {rate}");
    assert_eq!(run(0.3, 7).0, half, "same seed, same decisions");
    assert_ne!(run(0.3, 8).0, half, "another seed, other decisions");
    // The retrieval strategy switch turns the rule off.
    let config = FastCoderConfig {
        line_start_retrieval_probability: 0.0,
        use_retrieval_strategy: false,
        ..FastCoderConfig::default()
    };
    let mut d = drafter(config, None, Some(c.clone())).with_line_start(Box::new(|_: &[u32]| true));
    assert!(!propose(&mut d, &[1, 2]).is_empty());
}

#[test]
fn known_misses_skip_retrieval_until_the_repository_changes() {
    let r = repo(&[("a.py", vec![1, 2, 3])]);
    let mut d = drafter(FastCoderConfig { use_common: false, ..Default::default() }, Some(r.clone()), None);
    assert!(propose(&mut d, &[7, 8, 9]).is_empty());
    assert_eq!((d.stats().all_missed, d.stats().skipped_missing), (1, 0));
    // Same last two tokens: skipped without querying.
    assert!(propose(&mut d, &[0, 8, 9]).is_empty());
    assert_eq!((d.stats().all_missed, d.stats().skipped_missing), (1, 1));
    assert_eq!(d.stats().repository.queries, 1);
    // A file now holds [8, 9]: the generation changed, the miss is forgotten.
    r.write().unwrap().upsert_file("b.py", vec![8, 9, 10]);
    let cands = propose(&mut d, &[0, 8, 9]);
    assert_eq!(cands.len(), 1);
    assert_eq!(cands[0].tokens, vec![10]);
}

#[test]
fn observe_caches_verified_drafts_with_their_context() {
    let r = repo(&[("a.py", vec![1, 2, 3, 4, 5, 6])]);
    let config = FastCoderConfig { cache: CacheConfig { activation: 0, ..Default::default() }, ..Default::default() };
    let shared = cache(0);
    let mut d = FastCoderDrafter::new(config, Some(r), None, shared.clone());
    let ctx = [20, 21, 22, 1, 2, 3];
    let cands = propose(&mut d, &ctx);
    assert_eq!(cands[0].tokens, vec![4, 5, 6]);
    let accepted = AcceptedDraft { tokens: vec![4, 5], source: Source::Repository };
    d.observe(&ctx, &[4, 5, 30], Some(&accepted));
    assert_eq!(d.stats().cached_drafts, 1);
    let mut c = shared.lock().unwrap();
    assert_eq!(c.len(), 1);
    // The entry is the context (8 tokens at most) followed by the produced tokens.
    let hit = c.lookup(&[0, 21, 22, 1]).unwrap();
    assert_eq!(hit.matched_len, 3);
    assert_eq!(hit.continuations[0].tokens, vec![2, 3, 4, 5, 30]);
}

/// Greedy speculative decoding against a known target: each step accepts the
/// longest candidate prefix matching the target, plus one bonus token.
/// Returns the number of steps.
fn simulate(d: &mut FastCoderDrafter, prompt: &[u32], target: &[u32]) -> usize {
    let mut context = prompt.to_vec();
    let mut i = 0;
    let mut steps = 0;
    while i < target.len() {
        let cands = propose(d, &context);
        let best = cands
            .iter()
            .map(|c| (c.tokens.iter().zip(&target[i..]).take_while(|(a, b)| a == b).count(), c.source))
            .max_by_key(|&(n, _)| n);
        let accepted = best.filter(|&(n, _)| n > 0 && i + n < target.len());
        let n = accepted.map_or(0, |(n, _)| n);
        let produced = target[i..=i + n].to_vec();
        let draft = accepted.map(|(n, source)| AcceptedDraft { tokens: target[i..i + n].to_vec(), source });
        d.observe(&context, &produced, draft.as_ref());
        context.extend_from_slice(&produced);
        i += n + 1;
        steps += 1;
    }
    steps
}

#[test]
fn the_cache_learns_the_models_own_output() {
    // The model repeats a 30-token pattern; no store knows it.
    let pattern: Vec<u32> = (100..130).collect();
    let target: Vec<u32> = pattern.iter().cycle().take(150).copied().collect();
    let config = FastCoderConfig { cache: CacheConfig { activation: 1, ..Default::default() }, ..Default::default() };
    let mut without = drafter(FastCoderConfig { use_cache: false, ..config.clone() }, None, None);
    assert_eq!(simulate(&mut without, &[1, 2], &target), 150);
    let mut with = drafter(config, None, None);
    let steps = simulate(&mut with, &[1, 2], &target);
    assert!(steps < 60, "{steps} steps");
    assert!(with.stats().cached_chunks >= 2);
    assert!(with.stats().cache.hits > 0);
}

#[test]
fn retrieval_from_the_repository_speeds_up_a_copy() {
    let file: Vec<u32> = (0..200u32).map(|i| (i * 7) % 50).collect();
    let target = file[100..180].to_vec();
    let r = repo(&[("a.py", file.clone())]);
    let mut d = drafter(FastCoderConfig::default(), Some(r), None);
    let steps = simulate(&mut d, &file[90..100], &target);
    assert!(steps <= 80 / 5, "{steps} steps");
}

#[test]
fn every_workspace_folder_store_is_queried() {
    let a = repo(&[("a.py", vec![1, 2, 3, 4])]);
    let b = repo(&[("b.py", vec![6, 2, 3, 5, 6, 2, 3, 5])]);
    let config = FastCoderConfig { use_common: false, use_cache: false, ..FastCoderConfig::default() };
    let cache = cache(config.cache.activation);
    let mut d = FastCoderDrafter::new(config, vec![a, b.clone()], None, cache);
    let mut tokens: Vec<Vec<u32>> = propose(&mut d, &[9, 2, 3]).into_iter().map(|c| c.tokens).collect();
    tokens.sort();
    assert_eq!(tokens, vec![vec![4], vec![5], vec![5, 6, 2, 3, 5]], "both folders answer");
    // A context only the second folder knows, after it changed: the longer match wins.
    b.write().unwrap().upsert_file("c.py", vec![8, 2, 3, 7]);
    let cands = propose(&mut d, &[8, 2, 3]);
    assert_eq!(cands.iter().map(|c| c.tokens.clone()).collect::<Vec<_>>(), vec![vec![7]]);
}
