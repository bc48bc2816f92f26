//! Row-wise kernels of the forward pass.
//!
//! Each kernel computes a row's result as a pure function of that row's inputs, with a
//! fixed summation order, so a token's activations never depend on how many other rows
//! share the batch. That is what makes tree passes bit-identical to one-token passes.

use crate::config::RopeStyle;

/// Dot product with eight interleaved partial sums, combined in a fixed order.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (a8, a_tail) = a.split_at(a.len() / 8 * 8);
    let (b8, b_tail) = b.split_at(a8.len());
    for (x, y) in a8.chunks_exact(8).zip(b8.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in a_tail.iter().zip(b_tail) {
        sum += x * y;
    }
    sum
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

/// Attention of one query head over an ordered list of key/value rows.
///
/// `keys` and `values` yield the same rows in the same order (the cache, then the
/// node's ancestors, then the node itself). Softmax is summed sequentially in that
/// order, so the result depends only on the query and the attended rows.
pub fn attend<'a>(
    q: &[f32],
    keys: impl Iterator<Item = &'a [f32]>,
    values: impl Iterator<Item = &'a [f32]>,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked at runtime).
        unsafe { attend_avx2(q, keys, values, scale, scores, out) };
        return;
    }
    attend_portable(q, keys, values, scale, scores, out);
}

/// The same code compiled for 256-bit vectors. Rust never contracts `a * b + c` into
/// an FMA, so this computes exactly what [`attend_portable`] computes, only faster.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn attend_avx2<'a>(
    q: &[f32],
    keys: impl Iterator<Item = &'a [f32]>,
    values: impl Iterator<Item = &'a [f32]>,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    attend_portable(q, keys, values, scale, scores, out);
}

/// `out[j * m + r] = dot(w_j, x_r)` for the weight rows `w` (each `k` wide) and the `m`
/// input rows `x`: one fixed-order dot product per output, whatever `m` is.
pub fn dot_rows(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 (checked at runtime).
        unsafe { dot_rows_avx2(w, x, k, out) };
        return;
    }
    dot_rows_portable(w, x, k, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
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
fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

#[inline(always)]
fn attend_portable<'a>(
    q: &[f32],
    keys: impl Iterator<Item = &'a [f32]>,
    values: impl Iterator<Item = &'a [f32]>,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    scores.clear();
    let mut max = f32::NEG_INFINITY;
    for k in keys {
        let s = dot(q, k) * scale;
        max = max.max(s);
        scores.push(s);
    }
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    out.fill(0.0);
    for (p, v) in scores.iter().zip(values) {
        for (o, x) in out.iter_mut().zip(v) {
            *o += p * x;
        }
    }
    let inv = 1.0 / sum;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_of_one_key_returns_its_value() {
        let q = [1.0, 2.0];
        let k = [0.5f32, -1.0];
        let v = [3.0f32, 4.0];
        let mut out = [0.0; 2];
        attend(&q, [&k[..]].into_iter(), [&v[..]].into_iter(), 0.5, &mut Vec::new(), &mut out);
        assert_eq!(out, [3.0, 4.0]);
    }

    #[test]
    fn attention_weights_follow_softmax() {
        let q = [1.0f32];
        let keys = [[0.0f32], [2.0f32]];
        let values = [[1.0f32], [0.0f32]];
        let mut out = [0.0];
        attend(&q, keys.iter().map(|k| &k[..]), values.iter().map(|v| &v[..]), 1.0, &mut Vec::new(), &mut out);
        let expected = 1.0 / (1.0 + 2f32.exp());
        assert!((out[0] - expected).abs() < 1e-6, "{} vs {expected}", out[0]);
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
