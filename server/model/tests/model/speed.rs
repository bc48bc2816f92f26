//! Speed figures of the runtime on the real model (measured, never asserted):
//! `cargo test -p copilotd-model --release --test model -- --ignored --nocapture speed::`
//! Threads: `COPILOTD_THREADS` (default 2, the reference machine's cores).

use crate::common;

use copilotd_model::{LoadOptions, Model, WeightFormat};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn load(format: WeightFormat) -> Model {
    let threads = std::env::var("COPILOTD_THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    let opts = LoadOptions { threads: Some(threads), weights: format, kernel: None };
    Model::load(&common::model_path(), &opts).expect("model loads")
}

fn context(m: &Model, n: usize) -> Vec<u32> {
    let src = common::python_source("argparse.py");
    let ids = m.tokenizer().encode(&src).unwrap();
    ids[..n].to_vec()
}

fn figures(format: WeightFormat) {
    let mut m = load(format);
    println!("model: {} — weights {} — {}", m.info().name, m.info().weights, m.info().device);
    let ids = context(&m, 512);

    // Prefill throughput (512 tokens, after a warm-up that packs the weights).
    m.prefill(&ids[..64]).unwrap();
    let mut runs = Vec::new();
    for _ in 0..3 {
        m.truncate(0);
        let t = Instant::now();
        m.prefill(&ids).unwrap();
        runs.push(t.elapsed());
    }
    let prefill = median(runs);
    println!(
        "prefill: {:.0} tok/s ({} tokens in {:.0} ms)",
        ids.len() as f64 / prefill.as_secs_f64(),
        ids.len(),
        prefill.as_secs_f64() * 1e3
    );

    // AR decode: one-node forward_tree + keep_path per step on a ~400-token cache.
    m.truncate(400);
    let mut logits = m.forward_tree(&[ids[400]], &[None]).unwrap();
    m.keep_path(&[0]).unwrap();
    let steps = 64;
    let t = Instant::now();
    for _ in 0..steps {
        let next = common::argmax(&logits);
        logits = m.forward_tree(&[next], &[None]).unwrap();
        m.keep_path(&[0]).unwrap();
    }
    let decode = t.elapsed();
    println!(
        "AR decode: {:.1} tok/s ({:.2} ms/token, cache 401..{})",
        steps as f64 / decode.as_secs_f64(),
        decode.as_secs_f64() * 1e3 / steps as f64,
        m.cache_len()
    );

    // Cost curve: one forward over a k-node chain on a 512-token cache.
    let mut t1 = 0.0;
    let mut line = String::from("cost curve (512-token cache):");
    for k in [1usize, 2, 4, 8, 16, 32, 64] {
        m.truncate(0);
        m.prefill(&ids).unwrap();
        let tokens = &ids[100..100 + k];
        let parents: Vec<_> = (0..k).map(|i| i.checked_sub(1)).collect();
        let mut runs = Vec::new();
        for _ in 0..7 {
            let t = Instant::now();
            m.forward_tree(tokens, &parents).unwrap();
            runs.push(t.elapsed());
        }
        let ms = median(runs).as_secs_f64() * 1e3;
        if k == 1 {
            t1 = ms;
        }
        line += &format!("  t({k})={ms:.1}ms ({:.2}x)", ms / t1);
    }
    println!("{line}");
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn speed_q8_0() {
    figures(WeightFormat::Q8_0);
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn speed_native_and_f32() {
    figures(WeightFormat::Native);
    figures(WeightFormat::F32);
}
