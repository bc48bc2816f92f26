//! Attention of a pass with too few blocks of nodes for the threads. A one-token pass has one
//! unit per kv head, three for the default model, and two threads ran them two against one.
//! Here it runs in three steps, the threads meeting after each: the cache rows' scores, cut
//! into [`ROW_PARTS`] ranges of rows per kv head, each a unit of its own; each kv head's
//! softmax; each kv head's weighted sums, one unit per value plane (the planes are stored
//! apart, [`crate::attention::value_planes`], so each unit reads only its share of the
//! values). Every score and output is computed as in one block ([`attention::score_cache`],
//! [`attention::weigh_scores`], [`attention::sum_values`]), so the results are
//! [`attention::attend_block`]'s bit for bit.

use std::ops::Range;
use std::sync::Mutex;

use crate::attention::{self, value_planes, Weights};
use crate::config::Config;
use crate::kv::KvCache;
use crate::tree::TreeLayout;
use crate::Kernel;

/// Ranges each kv head's cache rows are scored in.
const ROW_PARTS: usize = 2;

/// Cache rows a range starts on (the vector code scores eight at a time).
const ROW_ALIGN: usize = 8;

/// Attention of every node and head of `tree` over layer `layer` of `kv`, as
/// `[nodes, heads * head_dim]`.
pub(crate) fn attention(
    kernel: Kernel,
    kv: &KvCache,
    layer: usize,
    q: &[f32],
    tree: &TreeLayout,
    cfg: &Config,
) -> Vec<f32> {
    let (n, group) = (tree.len(), cfg.heads / cfg.kv_heads);
    let pass = Pass {
        kernel,
        kv,
        layer,
        q,
        cfg,
        group,
        pending: (0..n).flat_map(|node| std::iter::repeat_n(tree.visible(node), group)).collect(),
        per_head: n * group,
        width: kv.len() + (0..n).map(|node| tree.visible(node).len()).max().unwrap_or(0),
    };
    let mut scores = vec![0f32; cfg.kv_heads * pass.per_head * pass.width];
    pass.score_cache(&mut scores);
    let inverses = pass.weigh(&mut scores);
    pass.sum_values(&scores, &inverses)
}

/// One layer's attention of one pass, and the shapes its steps share.
struct Pass<'a> {
    kernel: Kernel,
    kv: &'a KvCache,
    layer: usize,
    /// The queries, `[nodes, heads * head_dim]`.
    q: &'a [f32],
    cfg: &'a Config,
    /// Query heads per kv head.
    group: usize,
    /// The pending rows each of a kv head's queries sees, in their order.
    pending: Vec<&'a [usize]>,
    /// A kv head's queries.
    per_head: usize,
    /// Scores per query: every cache row's and its pending rows'.
    width: usize,
}

impl Pass<'_> {
    fn scale(&self) -> f32 {
        1.0 / (self.cfg.head_dim as f32).sqrt()
    }

    /// Kv head `g`'s queries, node by node.
    fn queries(&self, g: usize) -> Vec<&[f32]> {
        let (heads, group, hd) = (self.cfg.heads, self.group, self.cfg.head_dim);
        let heads_of = |node: usize| (0..group).map(move |h| node * heads + g * group + h);
        (0..self.per_head / group).flat_map(heads_of).map(|head| &self.q[head * hd..(head + 1) * hd]).collect()
    }

    /// Step one: the cache rows' scores (`scores`: per kv head, a row of `width` per query),
    /// [`ROW_PARTS`] units per kv head.
    fn score_cache(&self, scores: &mut [f32]) {
        let cached = self.kv.len();
        let row_parts = parts(cached);
        let rows = scores.chunks_mut(self.width).map(|row| &mut row[..cached]);
        let score_pieces = cut_rows(rows, self.per_head, &row_parts);
        crate::threads::for_each_range(score_pieces.len(), |units| {
            for unit in units {
                let (g, rows) = (unit / ROW_PARTS, &row_parts[unit % ROW_PARTS]);
                let all = self.kv.rows(self.layer, g);
                let part = all.keys_of(rows.clone());
                let mut pieces = score_pieces[unit].lock().unwrap_or_else(|e| e.into_inner());
                attention::score_cache(self.kernel, &self.queries(g), &part, self.scale(), &mut pieces);
            }
        });
    }

    /// Step two: the pending rows' scores and the softmax weights in place, a unit per kv
    /// head; each kv head's queries' inverse sums.
    fn weigh(&self, scores: &mut [f32]) -> Vec<Vec<f32>> {
        let head_scores: Vec<Mutex<&mut [f32]>> =
            scores.chunks_mut(self.per_head * self.width).map(Mutex::new).collect();
        let inverses: Vec<Mutex<Vec<f32>>> = (0..self.cfg.kv_heads).map(|_| Mutex::new(Vec::new())).collect();
        crate::threads::for_each_range(self.cfg.kv_heads, |units| {
            for g in units {
                let mut own = head_scores[g].lock().unwrap_or_else(|e| e.into_inner());
                let mut rows: Vec<&mut [f32]> = own.chunks_mut(self.width).collect();
                let kv = self.kv.rows(self.layer, g);
                let weighed =
                    attention::weigh_scores(self.kernel, &self.queries(g), &self.pending, &kv, self.scale(), &mut rows);
                *inverses[g].lock().unwrap_or_else(|e| e.into_inner()) = weighed;
            }
        });
        inverses.into_iter().map(|i| i.into_inner().unwrap_or_else(|e| e.into_inner())).collect()
    }

    /// Step three: the outputs, a unit per kv head and value plane.
    fn sum_values(&self, weights: &[f32], inverses: &[Vec<f32>]) -> Vec<f32> {
        let (heads, hd, planes) = (self.cfg.heads, self.cfg.head_dim, value_planes(self.cfg.head_dim));
        let mut out = vec![0f32; self.per_head / self.group * heads * hd];
        // Output rows are node by node, head by head: a kv head's come in its queries' order,
        // each cut into its planes' elements.
        let mut plane_outs: Vec<Vec<&mut [f32]>> = (0..self.cfg.kv_heads * planes).map(|_| Vec::new()).collect();
        for (row, o) in out.chunks_mut(hd).enumerate() {
            for (p, piece) in o.chunks_mut(hd / planes).enumerate() {
                plane_outs[row % heads / self.group * planes + p].push(piece);
            }
        }
        let plane_outs: Vec<Mutex<Vec<&mut [f32]>>> = plane_outs.into_iter().map(Mutex::new).collect();
        let head_weights: Vec<&[f32]> = weights.chunks(self.per_head * self.width).collect();
        crate::threads::for_each_range(self.cfg.kv_heads * planes, |units| {
            for unit in units {
                let (g, plane) = (unit / planes, unit % planes);
                let rows: Vec<&[f32]> = head_weights[g].chunks(self.width).collect();
                let mut outs = plane_outs[unit].lock().unwrap_or_else(|e| e.into_inner());
                let kv = self.kv.rows(self.layer, g);
                let queries = self.queries(g);
                let weights = Weights { rows: &rows, inverses: &inverses[g] };
                attention::sum_values(self.kernel, &queries, &self.pending, &kv, plane, weights, &mut outs);
            }
        });
        drop(plane_outs);
        out
    }
}

/// `0..len` in [`ROW_PARTS`] consecutive ranges of about equal length, cut at multiples of
/// [`ROW_ALIGN`].
fn parts(len: usize) -> Vec<Range<usize>> {
    let cut = |i: usize| if i == ROW_PARTS { len } else { len * i / ROW_PARTS / ROW_ALIGN * ROW_ALIGN };
    (0..ROW_PARTS).map(|i| cut(i)..cut(i + 1)).collect()
}

/// Each row of `rows` cut at `parts`, the pieces gathered per (run of `run` rows, part): unit
/// `u` holds part `u % ROW_PARTS` of every row of run `u / ROW_PARTS`, in row order.
fn cut_rows<'a>(
    rows: impl Iterator<Item = &'a mut [f32]>,
    run: usize,
    parts: &[Range<usize>],
) -> Vec<Mutex<Vec<&'a mut [f32]>>> {
    let mut units: Vec<Vec<&mut [f32]>> = Vec::new();
    for (r, mut row) in rows.enumerate() {
        if r % run == 0 {
            units.extend((0..ROW_PARTS).map(|_| Vec::new()));
        }
        let first = units.len() - ROW_PARTS;
        for (p, range) in parts.iter().enumerate() {
            let (piece, rest) = row.split_at_mut(range.len());
            units[first + p].push(piece);
            row = rest;
        }
    }
    units.into_iter().map(Mutex::new).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_rows_in_order_at_aligned_cuts() {
        assert_eq!(parts(1_803), vec![0..896, 896..1_803]);
        assert_eq!(parts(16), vec![0..8, 8..16]);
        assert_eq!(parts(5), vec![0..0, 0..5]);
        assert_eq!(parts(0), vec![0..0, 0..0]);
    }

    #[test]
    fn pieces_of_a_run_of_rows_stay_together_per_part() {
        let mut data: Vec<f32> = (0..12).map(|i| i as f32).collect();
        // Four rows of three, runs of two rows, parts 0..1 and 1..3.
        let units = cut_rows(data.chunks_mut(3), 2, &[0..1, 1..3]);
        let seen: Vec<Vec<Vec<f32>>> =
            units.into_iter().map(|u| u.into_inner().unwrap().into_iter().map(|p| p.to_vec()).collect()).collect();
        assert_eq!(
            seen,
            vec![
                vec![vec![0.0], vec![3.0]],
                vec![vec![1.0, 2.0], vec![4.0, 5.0]],
                vec![vec![6.0], vec![9.0]],
                vec![vec![7.0, 8.0], vec![10.0, 11.0]],
            ]
        );
    }
}
