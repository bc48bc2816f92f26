//! Tree passes, kept paths and chunked prefill against one-token passes, bit for bit,
//! on the real default model.

use crate::common;

use common::exact;
use copilotd_model::{Model, WeightFormat};

fn prompt(m: &Model, n: usize) -> Vec<u32> {
    let src = common::python_source("textwrap.py");
    let ids = m.tokenizer().encode(&src).unwrap();
    assert!(ids.len() > n);
    ids[..n].to_vec()
}

/// Runs the checks for one weight format, printing the measured differences.
fn check(format: WeightFormat) -> [exact::Diff; 3] {
    let mut m = common::load(format);
    let ids = prompt(&m, 141);
    let diffs = exact::check(&mut m, &ids[..140], ids[140]);
    let [tree, keep, prefill] = &diffs;
    println!(
        "{format:?}: tree vs one-token passes {tree:?}; keep_path vs fresh prefill {keep:?}; chunked vs token-by-token prefill {prefill:?}"
    );
    diffs
}

#[test]
fn default_tree_keep_path_and_prefill_are_bit_exact() {
    let diffs = check(WeightFormat::Auto);
    for d in &diffs {
        assert!(d.exact(), "{diffs:?}");
    }
}

#[test]
fn q8_0_tree_keep_path_and_prefill_are_bit_exact() {
    let diffs = check(WeightFormat::Q8_0);
    for d in &diffs {
        assert!(d.exact(), "{diffs:?}");
    }
}

#[test]
fn f32_tree_keep_path_and_prefill_are_bit_exact() {
    let diffs = check(WeightFormat::F32);
    for d in &diffs {
        assert!(d.exact(), "{diffs:?}");
    }
}

#[test]
fn native_tree_keep_path_and_prefill_are_bit_exact() {
    let diffs = check(WeightFormat::Native);
    for d in &diffs {
        assert!(d.exact(), "{diffs:?}");
    }
}
