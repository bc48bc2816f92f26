//! Every kernel this CPU runs, on the real default model: each keeps tree passes, kept
//! paths and chunked prefill bit-exact, and all of them compute the same logits.

use crate::common;

use common::exact;
use copilotd_model::{Kernel, Model, WeightFormat};

fn prompt(m: &Model, n: usize) -> Vec<u32> {
    let ids = m.tokenizer().encode(&common::python_source("textwrap.py")).unwrap();
    ids[..n].to_vec()
}

/// The vector kernels but the default one (which `exactness.rs` checks). The portable
/// kernel is the slow lane-by-lane reference, checked against them on a short prompt below.
fn other_vector_kernels() -> Vec<Kernel> {
    Kernel::supported().into_iter().filter(|&k| k != Kernel::Portable && k != Kernel::best()).collect()
}

#[test]
fn each_kernel_keeps_trees_kept_paths_and_prefill_bit_exact() {
    for kernel in other_vector_kernels() {
        let mut m = common::load_on(WeightFormat::Auto, Some(kernel));
        let ids = prompt(&m, 141);
        let diffs = exact::check(&mut m, &ids[..140], ids[140]);
        println!("{kernel}: {diffs:?}");
        assert!(diffs.iter().all(exact::Diff::exact), "{kernel}: {diffs:?}");
    }
}

#[test]
fn every_kernel_computes_the_same_logits() {
    for format in [WeightFormat::Auto, WeightFormat::Q8_0] {
        same_logits_on_every_kernel(format);
    }
}

fn same_logits_on_every_kernel(format: WeightFormat) {
    let mut reference: Option<(Kernel, Vec<f32>, Vec<f32>)> = None;
    for kernel in Kernel::supported() {
        let mut m = common::load_on(format, Some(kernel));
        let ids = prompt(&m, 13);
        let prefill = m.prefill(&ids[..12]).unwrap();
        let tree = m.forward_tree(&[ids[12], ids[0], ids[1]], &[None, Some(0), None]).unwrap();
        match &reference {
            None => reference = Some((kernel, prefill, tree)),
            Some((first, p, t)) => {
                assert!(p == &prefill, "{format:?}: prefill logits of {kernel} differ from {first}'s");
                assert!(t == &tree, "{format:?}: tree logits of {kernel} differ from {first}'s");
            }
        }
    }
}
