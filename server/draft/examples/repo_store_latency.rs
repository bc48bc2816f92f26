//! Measures the repository store on synthetic code-like token streams: build
//! time of a 50,000-line store, the latency of replacing one 1,000-line file,
//! and query time. Run with
//! `cargo run -p copilotd-draft --release --example repo_store_latency [LINES]`.

use std::time::Instant;

use copilotd_draft::repo_store::{FileUpdate, RepositoryStore};
use copilotd_draft::retrieval::QueryOptions;

/// Pseudo-code tokens: Zipf-like frequencies over a small vocabulary, one
/// indentation token per line and a newline token, roughly like BPE ids of
/// source code.
fn synthetic_file(seed: u64, lines: usize) -> Vec<u32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut tokens = Vec::new();
    for _ in 0..lines {
        tokens.push((next() % 4) as u32);
        for _ in 0..(4 + next() % 10) {
            let r = next() % 1000;
            tokens.push(10 + (r * r / 1000) as u32 * 7);
        }
        tokens.push(5);
    }
    tokens
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let lines: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let files: Vec<FileUpdate> = (0..lines / 200)
        .map(|i| FileUpdate { path: format!("pkg/mod{i}.py"), tokens: synthetic_file(i as u64, 200), stamp: None })
        .collect();
    let mut store = RepositoryStore::new();
    let t = Instant::now();
    store.upsert_files(files);
    println!("build: {lines} lines, {} tokens in {:.1} ms", store.token_count(), t.elapsed().as_secs_f64() * 1e3);

    // Replacing a file = removing its old postings + adding the new ones;
    // timed together, and the two halves separately.
    let (mut replace, mut remove, mut add) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..21u64 {
        let tokens = synthetic_file(1_000_000 + round, 1000);
        let t = Instant::now();
        store.upsert_file("pkg/big.py", tokens.clone());
        replace.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        store.remove_file("pkg/big.py");
        remove.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        store.upsert_file("pkg/big.py", tokens);
        add.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "replace a 1000-line file ({} tokens): median {:.2} ms, max {:.2} ms (remove {:.2} ms + add {:.2} ms)",
        store.file_tokens("pkg/big.py").map_or(0, <[u32]>::len),
        median(&mut replace),
        replace.iter().copied().fold(0.0, f64::max),
        median(&mut remove),
        median(&mut add)
    );

    let context = synthetic_file(7, 50);
    let opts = QueryOptions::default();
    let t = Instant::now();
    let mut continuations = 0;
    for end in 2..context.len() {
        continuations += store.query(&context[..end], &opts).map_or(0, |r| r.continuations.len());
    }
    println!(
        "query: {:.1} µs on average ({} contexts, {continuations} continuations)",
        t.elapsed().as_secs_f64() * 1e6 / (context.len() - 2) as f64,
        context.len() - 2
    );
}
