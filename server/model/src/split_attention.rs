//! Attention of a pass with too few blocks of nodes for the threads. A one-token pass has one
//! unit per kv head, three for the default model, and two threads ran them two against one.
//! Here the cache rows' scores, half of the work, are cut into [`ROW_PARTS`] ranges of rows per
//! kv head, each a unit of its own; then, the threads having met, each kv head's softmax and
//! weighted sums run as one unit. (Cutting the weighted sums by output values as well made
//! both threads read every value row: no faster.) Every score and output is computed as in
//! one block ([`attention::score_cache`], [`attention::attend_scored`]), so the results are
//! [`attention::attend_block`]'s bit for bit.

use std::ops::Range;
use std::sync::Mutex;

use crate::attention::{self, KvRows};
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
    let (heads, kv_heads, hd) = (cfg.heads, cfg.kv_heads, cfg.head_dim);
    let group = heads / kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let n = tree.len();
    let cached = kv.len();
    // A kv head's queries, node by node, and the pending rows each one sees.
    let per_head = n * group;
    let queries = |g: usize| -> Vec<&[f32]> {
        let heads_of = |node: usize| (0..group).map(move |h| node * heads + g * group + h);
        (0..n).flat_map(heads_of).map(|head| &q[head * hd..(head + 1) * hd]).collect()
    };
    let pending: Vec<&[usize]> = (0..n).flat_map(|node| std::iter::repeat_n(tree.visible(node), group)).collect();
    let width = cached + (0..n).map(|node| tree.visible(node).len()).max().unwrap_or(0);

    let mut scores = vec![0f32; kv_heads * per_head * width];
    let row_parts = parts(cached);
    let score_pieces = cut_rows(scores.chunks_mut(width).map(|row| &mut row[..cached]), per_head, &row_parts);
    crate::threads::for_each_range(score_pieces.len(), |units| {
        for unit in units {
            let (g, rows) = (unit / ROW_PARTS, &row_parts[unit % ROW_PARTS]);
            let all = kv.rows(layer, g);
            let part = KvRows {
                head_dim: hd,
                cache_keys: &all.cache_keys[rows.start * hd..rows.end * hd],
                cache_values: &all.cache_values[rows.start * hd..rows.end * hd],
                pending_keys: &[],
                pending_values: &[],
            };
            let mut pieces = score_pieces[unit].lock().unwrap_or_else(|e| e.into_inner());
            attention::score_cache(kernel, &queries(g), &part, scale, &mut pieces);
        }
    });
    drop(score_pieces);

    let mut out = vec![0f32; n * heads * hd];
    let head_scores: Vec<Mutex<&mut [f32]>> = scores.chunks_mut(per_head * width).map(Mutex::new).collect();
    // Output rows are node by node, head by head: a kv head's come in its queries' order.
    let mut head_outs: Vec<Vec<&mut [f32]>> = (0..kv_heads).map(|_| Vec::new()).collect();
    for (row, o) in out.chunks_mut(hd).enumerate() {
        head_outs[row % heads / group].push(o);
    }
    let head_outs: Vec<Mutex<Vec<&mut [f32]>>> = head_outs.into_iter().map(Mutex::new).collect();
    crate::threads::for_each_range(kv_heads, |units| {
        for g in units {
            let mut own = head_scores[g].lock().unwrap_or_else(|e| e.into_inner());
            let mut rows: Vec<&mut [f32]> = own.chunks_mut(width).collect();
            let mut outs = head_outs[g].lock().unwrap_or_else(|e| e.into_inner());
            attention::attend_scored(kernel, &queries(g), &pending, &kv.rows(layer, g), scale, &mut rows, &mut outs);
        }
    });
    drop(head_outs);
    out
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
