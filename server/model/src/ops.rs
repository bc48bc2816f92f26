//! Row-wise kernels of the forward pass.
//!
//! Each kernel computes a row's result as a pure function of that row's inputs, with a
//! fixed summation order, so a token's activations never depend on how many other rows
//! share the batch. That is what makes tree passes bit-identical to one-token passes.

use crate::config::RopeStyle;

/// Dot product with eight interleaved partial sums, combined in a fixed order.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dots::<false, 1>(a, [b])[0]
}

/// [`dot`]s of `a` with `K` vectors at once, with fused multiply-adds (one rounding per
/// step instead of two; where the CPU lacks FMA, `mul_add` is a slow library call). Each
/// result is the same as computing it alone: the vectors only share the loop, which gives
/// the CPU `K` independent chains of additions to overlap.
#[inline(always)]
fn fused_dots<const K: usize>(a: &[f32], bs: [&[f32]; K]) -> [f32; K] {
    dots::<true, K>(a, bs)
}

#[inline(always)]
fn dots<const FUSED: bool, const K: usize>(a: &[f32], bs: [&[f32]; K]) -> [f32; K] {
    let step = |acc: f32, x: f32, y: f32| if FUSED { x.mul_add(y, acc) } else { acc + x * y };
    let body = a.len() / 8 * 8;
    let mut acc = [[0f32; 8]; K];
    for start in (0..body).step_by(8) {
        let x: &[f32; 8] = a[start..start + 8].try_into().expect("8 values");
        for (acc, b) in acc.iter_mut().zip(&bs) {
            let y: &[f32; 8] = b[start..start + 8].try_into().expect("8 values");
            for i in 0..8 {
                acc[i] = step(acc[i], x[i], y[i]);
            }
        }
    }
    std::array::from_fn(|k| {
        let acc = &acc[k];
        let mut sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (x, y) in a[body..].iter().zip(&bs[k][body..a.len()]) {
            sum = step(sum, *x, *y);
        }
        sum
    })
}

/// RMSNorm of each `weight.len()`-wide row of `x`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let d = weight.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(d) {
        let mean_sq = dot(row, row) / d as f32;
        let scale = 1.0 / (mean_sq + eps).sqrt();
        out.extend(row.iter().zip(weight).map(|(v, w)| v * scale * w));
    }
    out
}

/// Adds `y` into `x` element-wise.
pub fn add_assign(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// SwiGLU on rows laid out as `[gate (f) | up (f)]`: returns rows of `silu(gate) * up`.
pub fn swiglu(gate_up: &[f32], f: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(gate_up.len() / 2);
    for row in gate_up.chunks_exact(2 * f) {
        let (gate, up) = row.split_at(f);
        out.extend(gate.iter().zip(up).map(|(&g, &u)| g / (1.0 + (-g).exp()) * u));
    }
    out
}

/// Rotary embedding angles for one position: `cos` and `sin` of `pos * theta^(-2i/d)`.
pub struct Rotation {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rotation {
    pub fn new(position: usize, head_dim: usize, theta: f32, scale: f32) -> Self {
        let half = head_dim / 2;
        let pos = position as f64 / scale as f64;
        let (mut cos, mut sin) = (Vec::with_capacity(half), Vec::with_capacity(half));
        for i in 0..half {
            let inv_freq = (theta as f64).powf(-2.0 * i as f64 / head_dim as f64);
            let angle = pos * inv_freq;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
        Self { cos, sin }
    }

    /// Rotates every `head_dim`-wide head in `x` in place.
    pub fn apply(&self, x: &mut [f32], style: RopeStyle) {
        let half = self.cos.len();
        for head in x.chunks_exact_mut(2 * half) {
            for i in 0..half {
                let (a, b) = match style {
                    RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                    RopeStyle::Half => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * self.cos[i] - x1 * self.sin[i];
                head[b] = x0 * self.sin[i] + x1 * self.cos[i];
            }
        }
    }
}

/// Keys and values one block of queries attends to: the shared cache rows, then per
/// query its own rows among the pending (tree) entries.
pub struct KvRows<'a> {
    pub head_dim: usize,
    pub cache_keys: &'a [f32],
    pub cache_values: &'a [f32],
    pub pending_keys: &'a [f32],
    pub pending_values: &'a [f32],
}

/// Attention for a block of query heads that share one kv head.
///
/// Query `r` attends to every cache row, then to the pending rows `pending[r]` (its
/// ancestors, then itself), in that order. Softmax is summed sequentially in that order
/// and each output accumulates its rows in that order, so a query's result depends only
/// on the query and the rows it attends to, never on the other queries of the block.
/// The block shares the loads of cache rows between its queries.
pub fn attend_block(
    queries: &[&[f32]],
    pending: &[&[usize]],
    kv: &KvRows,
    scale: f32,
    scores: &mut Vec<f32>,
    outs: &mut [&mut [f32]],
) {
    let work = Attention { queries, pending, kv, scale };
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && has_avx2_fma() {
        // SAFETY: the CPU supports AVX-512F, AVX2 and FMA (checked at runtime).
        unsafe { attend_block_avx512(&work, scores, outs) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at runtime).
        unsafe { attend_block_avx2(&work, scores, outs) };
        return;
    }
    attend_block_portable(&work, scores, outs);
}

/// The inputs of [`attend_block`].
struct Attention<'a> {
    queries: &'a [&'a [f32]],
    pending: &'a [&'a [usize]],
    kv: &'a KvRows<'a>,
    scale: f32,
}

/// The same code compiled for 512-bit vectors (the whole 64-wide output sum of
/// [`weighted_sum`] fits in registers). See [`attend_block_avx2`] for why the result is
/// the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn attend_block_avx512(work: &Attention, scores: &mut Vec<f32>, outs: &mut [&mut [f32]]) {
    attend_block_portable(work, scores, outs);
}

/// The same code compiled for 256-bit vectors and FMA instructions: Rust never contracts
/// `a * b + c` into an FMA by itself and `mul_add` is exact everywhere, so this computes
/// exactly what the portable build computes, only faster.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_block_avx2(work: &Attention, scores: &mut Vec<f32>, outs: &mut [&mut [f32]]) {
    attend_block_portable(work, scores, outs);
}

#[inline(always)]
fn attend_block_portable(work: &Attention, scores: &mut Vec<f32>, outs: &mut [&mut [f32]]) {
    let Attention { queries, pending, kv, scale } = *work;
    let d = kv.head_dim;
    let cached = kv.cache_keys.len() / d;
    let width = cached + pending.iter().map(|p| p.len()).max().unwrap_or(0);
    scores.clear();
    scores.resize(queries.len() * width, 0.0);
    for (r, q) in queries.iter().enumerate() {
        let row = &mut scores[r * width..][..cached];
        let mut keys = kv.cache_keys.chunks_exact(KEY_GROUP * d);
        for (group, out) in keys.by_ref().zip(row.chunks_exact_mut(KEY_GROUP)) {
            let dots = fused_dots::<KEY_GROUP>(q, std::array::from_fn(|k| &group[k * d..(k + 1) * d]));
            for (o, v) in out.iter_mut().zip(dots) {
                *o = v * scale;
            }
        }
        let done = cached / KEY_GROUP * KEY_GROUP;
        for (o, key) in row[done..].iter_mut().zip(keys.remainder().chunks_exact(d)) {
            *o = fused_dots::<1>(q, [key])[0] * scale;
        }
    }
    let mut sums = Vec::with_capacity(queries.len());
    for (r, q) in queries.iter().enumerate() {
        let row = &mut scores[r * width..(r + 1) * width];
        for (i, &node) in pending[r].iter().enumerate() {
            row[cached + i] = fused_dots::<1>(q, [&kv.pending_keys[node * d..(node + 1) * d]])[0] * scale;
        }
        let row = &mut row[..cached + pending[r].len()];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for s in row.iter_mut() {
            *s = (*s - max).exp();
            sum += *s;
        }
        sums.push(sum);
    }
    for (r, out) in outs.iter_mut().enumerate() {
        let weights = &scores[r * width..][..cached + pending[r].len()];
        let inverse = 1.0 / sums[r];
        if d.is_multiple_of(OUTPUT_SLICE) {
            weighted_sum::<OUTPUT_SLICE>(weights, kv, pending[r], inverse, out);
        } else if d.is_multiple_of(16) {
            weighted_sum::<16>(weights, kv, pending[r], inverse, out);
        } else {
            weighted_sum::<1>(weights, kv, pending[r], inverse, out);
        }
    }
}

/// Output values accumulated in registers at a time by [`weighted_sum`]: eight
/// independent 8-wide chains keep the FMA units busy.
const OUTPUT_SLICE: usize = 64;

/// Cache keys a query is scored against in one loop (independent chains, as above).
const KEY_GROUP: usize = 8;

/// `out = inverse · Σ weights[j] · value_j` over the cache rows, then the `pending` rows,
/// in that order, `N` output values at a time so that the sums stay in registers.
#[inline(always)]
fn weighted_sum<const N: usize>(weights: &[f32], kv: &KvRows, pending: &[usize], inverse: f32, out: &mut [f32]) {
    let d = kv.head_dim;
    let cached = kv.cache_values.len() / d;
    for (slice, out) in out.chunks_exact_mut(N).enumerate() {
        let mut acc = [0f32; N];
        for (&p, value) in weights[..cached].iter().zip(kv.cache_values.chunks_exact(d)) {
            accumulate(&mut acc, p, &value[slice * N..]);
        }
        for (&p, &node) in weights[cached..].iter().zip(pending) {
            accumulate(&mut acc, p, &kv.pending_values[node * d + slice * N..]);
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = a * inverse;
        }
    }
}

/// `acc += p · value[..N]`, fused.
#[inline(always)]
fn accumulate<const N: usize>(acc: &mut [f32; N], p: f32, value: &[f32]) {
    let value: &[f32; N] = value[..N].try_into().expect("N values");
    for i in 0..N {
        acc[i] = p.mul_add(value[i], acc[i]);
    }
}

/// `out[j * m + r] = dot(w_j, x_r)` for the weight rows `w` (each `k` wide) and the `m`
/// input rows `x`: one fixed-order dot product per output, whatever `m` is.
pub fn dot_rows(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at runtime).
        unsafe { dot_rows_avx2(w, x, k, out) };
        return;
    }
    dot_rows_portable(w, x, k, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_rows_avx2(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    dot_rows_portable(w, x, k, out);
}

#[inline(always)]
fn dot_rows_portable(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    let mut o = out.iter_mut();
    for wr in w.chunks_exact(k) {
        for xr in x.chunks_exact(k) {
            if let Some(dst) = o.next() {
                *dst = dot(wr, xr);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv<'a>(keys: &'a [f32], values: &'a [f32], pk: &'a [f32], pv: &'a [f32], d: usize) -> KvRows<'a> {
        KvRows { head_dim: d, cache_keys: keys, cache_values: values, pending_keys: pk, pending_values: pv }
    }

    #[test]
    fn attention_of_one_key_returns_its_value() {
        let rows = kv(&[0.5, -1.0], &[3.0, 4.0], &[], &[], 2);
        let mut out = [0.0; 2];
        attend_block(&[&[1.0, 2.0]], &[&[]], &rows, 0.5, &mut Vec::new(), &mut [&mut out]);
        assert_eq!(out, [3.0, 4.0]);
    }

    #[test]
    fn attention_weights_follow_softmax_over_cache_then_pending_rows() {
        // Cache row 0: key 0, value 1. Pending rows: 0 → key 2, value 0; 1 → key 9, value 5.
        let rows = kv(&[0.0], &[1.0], &[2.0, 9.0], &[0.0, 5.0], 1);
        let mut a = [0.0];
        let mut b = [0.0];
        attend_block(&[&[1.0], &[1.0]], &[&[0], &[]], &rows, 1.0, &mut Vec::new(), &mut [&mut a, &mut b]);
        let expected = 1.0 / (1.0 + 2f32.exp());
        assert!((a[0] - expected).abs() < 1e-6, "{} vs {expected}", a[0]);
        assert_eq!(b, [1.0], "the second query sees only the cache row");
    }

    #[test]
    fn a_query_result_does_not_depend_on_its_block() {
        let d = 8;
        let keys: Vec<f32> = (0..40 * d).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
        let values: Vec<f32> = (0..40 * d).map(|i| ((i * 53 % 97) as f32 / 40.0) - 1.2).collect();
        let pk: Vec<f32> = keys[..3 * d].iter().map(|x| x * 0.7).collect();
        let pv: Vec<f32> = values[..3 * d].iter().map(|x| x + 0.3).collect();
        let rows = kv(&keys, &values, &pk, &pv, d);
        let q: Vec<Vec<f32>> = (0..3).map(|r| (0..d).map(|i| ((r * 7 + i) as f32).sin()).collect()).collect();
        let pending: [&[usize]; 3] = [&[0], &[0, 1], &[2]];
        let mut alone = vec![vec![0.0; d]; 3];
        for r in 0..3 {
            attend_block(&[&q[r]], &[pending[r]], &rows, 0.3, &mut Vec::new(), &mut [&mut alone[r]]);
        }
        let mut together = vec![vec![0.0; d]; 3];
        let mut outs: Vec<&mut [f32]> = together.iter_mut().map(|o| &mut o[..]).collect();
        let queries: Vec<&[f32]> = q.iter().map(|x| &x[..]).collect();
        attend_block(&queries, &pending, &rows, 0.3, &mut Vec::new(), &mut outs);
        assert_eq!(alone, together);
    }

    #[test]
    fn rotation_at_position_zero_is_identity_and_preserves_norm() {
        let mut x: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
        let orig = x.clone();
        Rotation::new(0, 8, 10000.0, 1.0).apply(&mut x, RopeStyle::Half);
        assert_eq!(x, orig);
        for style in [RopeStyle::Half, RopeStyle::Interleaved] {
            let mut y = orig.clone();
            Rotation::new(37, 8, 10000.0, 1.0).apply(&mut y, style);
            assert!((dot(&y, &y) - dot(&orig, &orig)).abs() < 1e-3);
            assert_ne!(y, orig);
        }
    }

    #[test]
    fn rms_norm_scales_rows_to_unit_rms() {
        let out = rms_norm(&[3.0, 4.0, 0.0, 0.0], &[1.0, 1.0], 0.0);
        let rms = (12.5f32).sqrt();
        assert_eq!(out[..2], [3.0 / rms, 4.0 / rms]);
    }
}
