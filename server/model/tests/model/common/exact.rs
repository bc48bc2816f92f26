//! The exactness checks shared by the real-model and tiny-model tests.

use super::argmax;
use copilotd_model::Model;

/// Largest absolute logit difference and argmax agreement between two passes.
#[derive(Default, Debug)]
pub struct Diff {
    pub rows: usize,
    pub argmax_agree: usize,
    pub max_abs: f32,
}

impl Diff {
    pub fn add(&mut self, a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        self.rows += 1;
        self.argmax_agree += usize::from(argmax(a) == argmax(b));
        for (x, y) in a.iter().zip(b) {
            self.max_abs = self.max_abs.max((x - y).abs());
        }
    }

    pub fn exact(&self) -> bool {
        self.max_abs == 0.0 && self.argmax_agree == self.rows
    }
}

/// Logits after feeding `tokens` one at a time (one-node trees kept one by one) on top
/// of the first `base` cache entries.
pub fn one_by_one(m: &mut Model, base: usize, tokens: &[u32]) -> Vec<f32> {
    m.truncate(base);
    let mut logits = Vec::new();
    for &t in tokens {
        logits = m.forward_tree(&[t], &[None]).unwrap();
        m.keep_path(&[0]).unwrap();
    }
    logits
}

/// Checks the three exactness properties on `context` followed by `pending` and returns the diffs
/// (tree vs branch, keep_path vs fresh prefill, chunked vs token-by-token prefill).
pub fn check(m: &mut Model, context: &[u32], pending: u32) -> [Diff; 3] {
    let vocab = m.info().vocab_size;
    m.truncate(0);

    // Prefill in one call (chunked when longer than a chunk) vs one token at a time.
    let mut prefill_diff = Diff::default();
    let chunked = m.prefill(context).unwrap();
    let base = m.cache_len();
    assert_eq!(base, context.len());
    let single = one_by_one(m, 0, context);
    prefill_diff.add(&chunked, &single);

    // Greedy continuation from the pending token, to build right and wrong branches.
    let greedy = {
        let mut g = vec![pending];
        for _ in 0..5 {
            let l = one_by_one(m, base, &g);
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
        let r = one_by_one(m, base, &branch(i));
        tree_diff.add(&tree[i * vocab..(i + 1) * vocab], &r);
        refs.push(r);
    }
    // The greedy branch predicts the greedy tokens.
    for i in 0..4 {
        assert_eq!(argmax(&refs[i]), greedy[i + 1]);
    }
    // Short passes (the first nodes of the chain), whose attention runs in smaller blocks,
    // and five nodes: attention blocks of three and two, one group of five rows in the
    // multiplies (the whole tree's nine: blocks of four, three and two, groups of four and five).
    for k in [2, 3, 4, 5] {
        m.truncate(base);
        let short = m.forward_tree(&tokens[..k], &parents[..k]).unwrap();
        for (i, r) in refs.iter().enumerate().take(k) {
            tree_diff.add(&short[i * vocab..(i + 1) * vocab], r);
        }
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
    [tree_diff, keep_diff, prefill_diff]
}
