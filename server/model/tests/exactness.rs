//! Tree passes, kept paths and chunked prefill against one-token passes, bit for bit,
//! on the real default model.

mod common;

use common::argmax;
use copilotd_model::{Model, WeightFormat};

/// Largest absolute logit difference and argmax agreement between two passes.
#[derive(Default, Debug)]
struct Diff {
    rows: usize,
    argmax_agree: usize,
    max_abs: f32,
}

impl Diff {
    fn add(&mut self, a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        self.rows += 1;
        self.argmax_agree += usize::from(argmax(a) == argmax(b));
        for (x, y) in a.iter().zip(b) {
            self.max_abs = self.max_abs.max((x - y).abs());
        }
    }

    fn exact(&self) -> bool {
        self.max_abs == 0.0 && self.argmax_agree == self.rows
    }
}

/// Logits after feeding `tokens` one at a time (one-node trees kept one by one) on top
/// of the first `base` cache entries.
fn one_by_one(m: &mut Model, base: usize, tokens: &[u32]) -> Vec<f32> {
    m.truncate(base);
    let mut logits = Vec::new();
    for &t in tokens {
        logits = m.forward_tree(&[t], &[None]).unwrap();
        m.keep_path(&[0]).unwrap();
    }
    logits
}

fn prompt(m: &Model, n: usize) -> Vec<u32> {
    let src = common::python_source("textwrap.py");
    let ids = m.tokenizer().encode(&src).unwrap();
    assert!(ids.len() > n);
    ids[..n].to_vec()
}

/// Checks the three exactness properties for one weight format and returns the diffs
/// (tree vs branch, keep_path vs fresh prefill, chunked vs token-by-token prefill).
fn check(format: WeightFormat) -> Option<[Diff; 3]> {
    let mut m = common::load(format)?;
    let vocab = m.info().vocab_size;
    let ids = prompt(&m, 141);
    let (context, pending) = (&ids[..140], ids[140]);

    // Chunked prefill (2 chunks) vs one token at a time.
    let mut prefill_diff = Diff::default();
    let chunked = m.prefill(context).unwrap();
    let base = m.cache_len();
    assert_eq!(base, context.len());
    let single = one_by_one(&mut m, 0, context);
    prefill_diff.add(&chunked, &single);

    // Greedy continuation from the pending token, to build right and wrong branches.
    let greedy = {
        let mut g = vec![pending];
        for _ in 0..5 {
            let l = one_by_one(&mut m, base, &g);
            g.push(argmax(&l));
        }
        g
    };
    let wrong = |t: u32| (t + 17) % vocab as u32;
    //  0:g0 ─ 1:g1 ─ 2:g2 ─ 3:g3 ─ 4:g4
    //   │      └─ 5:w ─ 6:w
    //   └─ 7:w
    //  8:w (a second top-level node)
    let tokens = [
        greedy[0],
        greedy[1],
        greedy[2],
        greedy[3],
        greedy[4],
        wrong(greedy[2]),
        wrong(greedy[3]),
        wrong(greedy[1]),
        wrong(greedy[0]),
    ];
    let parents = [None, Some(0), Some(1), Some(2), Some(3), Some(1), Some(5), Some(0), None];
    let branch = |mut i: usize| {
        let mut b = vec![tokens[i]];
        while let Some(p) = parents[i] {
            b.push(tokens[p]);
            i = p;
        }
        b.reverse();
        b
    };
    m.truncate(base);
    let tree = m.forward_tree(&tokens, &parents).unwrap();
    assert_eq!(tree.len(), tokens.len() * vocab);
    let mut tree_diff = Diff::default();
    let mut refs = Vec::new();
    for i in 0..tokens.len() {
        let r = one_by_one(&mut m, base, &branch(i));
        tree_diff.add(&tree[i * vocab..(i + 1) * vocab], &r);
        refs.push(r);
    }
    // The greedy branch predicts the greedy tokens.
    for i in 0..4 {
        assert_eq!(argmax(&refs[i]), greedy[i + 1]);
    }

    // keep_path, then one more token, vs a fresh prefill of the accepted sequence.
    let mut keep_diff = Diff::default();
    for path in [&[0usize, 1, 5][..], &[0, 1, 2, 3], &[8], &[0]] {
        m.truncate(base);
        m.forward_tree(&tokens, &parents).unwrap();
        m.keep_path(path).unwrap();
        assert_eq!(m.cache_len(), base + path.len());
        let next = wrong(tokens[*path.last().unwrap()]);
        let after_keep = m.forward_tree(&[next], &[None]).unwrap();
        let mut seq = context.to_vec();
        seq.extend(path.iter().map(|&i| tokens[i]));
        seq.push(next);
        m.truncate(0);
        let fresh = m.prefill(&seq).unwrap();
        keep_diff.add(&after_keep, &fresh);
        m.truncate(0);
        m.prefill(context).unwrap();
    }
    println!(
        "{format:?}: tree vs one-token passes {tree_diff:?}; keep_path vs fresh prefill {keep_diff:?}; chunked vs token-by-token prefill {prefill_diff:?}"
    );
    Some([tree_diff, keep_diff, prefill_diff])
}

#[test]
fn q8_0_tree_keep_path_and_prefill_are_bit_exact() {
    let Some(diffs) = check(WeightFormat::Q8_0) else { return };
    for d in &diffs {
        assert!(d.exact(), "{diffs:?}");
    }
}

#[test]
fn f32_tree_keep_path_and_prefill_are_bit_exact() {
    let Some(diffs) = check(WeightFormat::F32) else { return };
    for d in &diffs {
        assert!(d.exact(), "{diffs:?}");
    }
}

#[test]
fn native_tree_keep_path_and_prefill_are_bit_exact() {
    let Some(diffs) = check(WeightFormat::Native) else { return };
    for d in &diffs {
        assert!(d.exact(), "{diffs:?}");
    }
}
