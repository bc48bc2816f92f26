//! Row-wise kernels of the forward pass.
//!
//! Each kernel computes a row's result as a pure function of that row's inputs, with a
//! fixed summation order, so a token's activations never depend on how many other rows
//! share the batch. That is what makes tree passes bit-identical to one-token passes.

use crate::config::RopeStyle;
use crate::kernel::Kernel;
use crate::vector::exp;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::vector::{exp_lanes, lanes};

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
pub(crate) fn fused_dots<const K: usize>(a: &[f32], bs: [&[f32]; K]) -> [f32; K] {
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

/// SwiGLU on rows laid out as `[gate (f) | up (f)]`: returns rows of `silu(gate) * up`,
/// `silu(g) = g / (1 + e^−g)` with [`exp`]. A register of values at a time on `kernel`'s
/// vector lanes where it has them; every path gives the same bits.
pub fn swiglu(kernel: Kernel, gate_up: &[f32], f: usize) -> Vec<f32> {
    let mut out = vec![0f32; gate_up.len() / 2];
    let rows_of = |first: usize, out: &mut [f32]| {
        for (row, out) in gate_up[2 * f * first..].chunks_exact(2 * f).zip(out.chunks_exact_mut(f)) {
            let (gate, up) = row.split_at(f);
            let done = swiglu_lanes(kernel, gate, up, out);
            for ((o, &g), &u) in out[done..].iter_mut().zip(&gate[done..]).zip(&up[done..]) {
                *o = silu(g) * u;
            }
        }
    };
    if crate::threads::worth_splitting(out.len() / f.max(1)) {
        crate::threads::for_each_rows(&mut out, f, rows_of);
    } else {
        rows_of(0, &mut out);
    }
    out
}

#[inline(always)]
fn silu(g: f32) -> f32 {
    g / (1.0 + exp(-g))
}

/// [`swiglu`] of the leading whole registers of one row on `kernel`'s lanes (eight, or
/// sixteen on AVX-512); returns how many values it wrote (0 where the kernel has no vector
/// lanes).
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(unused_variables))]
fn swiglu_lanes(kernel: Kernel, gate: &[f32], up: &[f32], out: &mut [f32]) -> usize {
    // SAFETY (every arm): the model runs only on kernels the CPU supports, and the three
    // slices have the same length.
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Vnni => unsafe { swiglu_avx512(gate, up, out) },
        #[cfg(target_arch = "x86_64")]
        Kernel::AvxVnni | Kernel::Avx2 => unsafe { swiglu_avx2(gate, up, out) },
        #[cfg(target_arch = "aarch64")]
        Kernel::NeonDotprod | Kernel::Neon => unsafe { swiglu_registers::<lanes::Neon>(gate, up, out) },
        _ => 0,
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn swiglu_avx512(gate: &[f32], up: &[f32], out: &mut [f32]) -> usize {
    swiglu_registers::<lanes::Avx512>(gate, up, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn swiglu_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) -> usize {
    swiglu_registers::<lanes::Avx2>(gate, up, out)
}

/// [`silu`]`(g) · u`, a register of `S::WIDTH` values at a time: the same steps as the
/// scalar code. Returns how many values it wrote (the whole registers' worth).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
unsafe fn swiglu_registers<S: lanes::Steps>(gate: &[f32], up: &[f32], out: &mut [f32]) -> usize {
    let whole = gate.len() / S::WIDTH * S::WIDTH;
    let one = S::splat(1.0);
    for at in (0..whole).step_by(S::WIDTH) {
        let g = S::load(gate.as_ptr().add(at));
        let silu = S::div(g, S::add(one, exp_lanes::<S>(S::sub(S::zero(), g))));
        S::store(out.as_mut_ptr().add(at), S::mul(silu, S::load(up.as_ptr().add(at))));
    }
    whole
}

/// Rotary embedding angles for one position: `cos` and `sin` of `pos * theta^(-2i/d)`.
pub struct Rotation {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rotation {
    /// The rotation at `position`, the frequency of pair `i` divided by `factors[i]` where
    /// there are factors (none: the plain frequencies).
    pub fn new(position: usize, head_dim: usize, theta: f32, scale: f32, factors: &[f32]) -> Self {
        let half = head_dim / 2;
        let pos = position as f64 / scale as f64;
        let (mut cos, mut sin) = (Vec::with_capacity(half), Vec::with_capacity(half));
        for i in 0..half {
            let inv_freq = (theta as f64).powf(-2.0 * i as f64 / head_dim as f64);
            let mut angle = pos * inv_freq;
            if let Some(&factor) = factors.get(i) {
                angle /= factor as f64;
            }
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

/// `out[r * n + j] = dot(w_j, x_r)` for the `n` weight rows `w` (each `k` wide) and the
/// input rows `x`: one fixed-order dot product per output, whatever the number of rows.
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
    for xr in x.chunks_exact(k) {
        for wr in w.chunks_exact(k) {
            if let Some(dst) = o.next() {
                *dst = dot(wr, xr);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_at_position_zero_is_identity_and_preserves_norm() {
        let mut x: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
        let orig = x.clone();
        Rotation::new(0, 8, 10000.0, 1.0, &[]).apply(&mut x, RopeStyle::Half);
        assert_eq!(x, orig);
        for style in [RopeStyle::Half, RopeStyle::Interleaved] {
            let mut y = orig.clone();
            Rotation::new(37, 8, 10000.0, 1.0, &[]).apply(&mut y, style);
            assert!((dot(&y, &y) - dot(&orig, &orig)).abs() < 1e-3);
            assert_ne!(y, orig);
        }
    }

    #[test]
    fn swiglu_gives_the_same_bits_on_every_kernel() {
        let f = 45; // not a multiple of eight or sixteen: the scalar tail runs too

        // 131 rows: a prefill chunk's size, computed in ranges on several threads.
        for rows in [3, 131] {
            let gate_up: Vec<f32> = (0..rows * 2 * f).map(|i| ((i * 7919 % 613) as f32 - 306.0) / 9.0).collect();
            let plain = swiglu(Kernel::Portable, &gate_up, f);
            let expected: Vec<f32> = gate_up
                .chunks_exact(2 * f)
                .flat_map(|row| row[..f].iter().zip(&row[f..]).map(|(&g, &u)| g / (1.0 + (-g).exp()) * u))
                .collect();
            for (ours, library) in plain.iter().zip(&expected) {
                assert!((ours - library).abs() <= 4.0 * f32::EPSILON * library.abs().max(1e-30), "{ours} vs {library}");
            }
            for kernel in Kernel::supported() {
                let fast = swiglu(kernel, &gate_up, f);
                assert_eq!(
                    fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    plain.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{kernel}, {rows} rows"
                );
            }
        }
    }

    #[test]
    fn rms_norm_scales_rows_to_unit_rms() {
        let out = rms_norm(&[3.0, 4.0, 0.0, 0.0], &[1.0, 1.0], 0.0);
        let rms = (12.5f32).sqrt();
        assert_eq!(out[..2], [3.0 / rms, 4.0 / rms]);
    }
}
