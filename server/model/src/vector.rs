//! Eight-lane f32 vectors, and the functions whose scalar and vector versions must give the
//! same bits.
//!
//! A token's activations must not depend on which path computed them (a tree pass or a
//! one-token pass, one CPU class or another). A library `expf` has no vector twin, so
//! [`exp`] is written with steps that every instruction set rounds the same way (IEEE
//! additions, multiplications, fused multiply-adds, rounding to an integer), and
//! [`exp_lanes`] takes the same steps on every lane of a vector register. Attention's
//! softmax and the MLP's SiLU use them.

/// `((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7))`: how eight partial sums are combined.
#[inline(always)]
pub(crate) fn combine(l: [f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
}

/// Constants of [`exp`] (Cephes' `expf`: ln 2 split in two, then a degree-5 polynomial).
mod exp_constants {
    pub const LOWEST: f32 = -87.0;
    /// e^88 is still finite in f32 (e^88.7 is not).
    pub const HIGHEST: f32 = 88.0;
    pub const LOG2E: f32 = std::f32::consts::LOG2_E;
    pub const LN2_HI: f32 = 0.693_359_4;
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    pub const POLY: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];
}

/// `e^x` to about one ulp, for inputs clamped to [−87, 88] (below −87 gives e^−87, above
/// 88 gives e^88); [`exp_lanes`] computes the same bits.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    use exp_constants::*;
    // Not `clamp`: the same two steps as `exp_lanes` takes.
    #[allow(clippy::manual_clamp)]
    let x = x.max(LOWEST).min(HIGHEST);
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let mut p = POLY[0];
    for c in &POLY[1..] {
        p = p.mul_add(r, *c);
    }
    let y = p.mul_add(r * r, r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// [`exp`] of every lane.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
pub(crate) unsafe fn exp_lanes<L: lanes::Steps>(x: L::V) -> L::V {
    use exp_constants::*;
    let x = L::min(L::max(x, L::splat(LOWEST)), L::splat(HIGHEST));
    let n = L::round(L::mul(x, L::splat(LOG2E)));
    let r = L::mul_sub(n, L::splat(LN2_LO), L::mul_sub(n, L::splat(LN2_HI), x));
    let mut p = L::splat(POLY[0]);
    for c in &POLY[1..] {
        p = L::mul_add(p, r, L::splat(*c));
    }
    let y = L::add(L::mul_add(p, L::mul(r, r), r), L::splat(1.0));
    L::mul(y, L::pow2(n))
}

/// Eight f32 lanes on each instruction set, with the float steps the portable code takes
/// (and, on AVX-512, sixteen lanes for the steps that never mix lanes).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) mod lanes {
    /// A register of f32 lanes and the steps that treat each lane alone, so that any width
    /// gives every lane the same bits. All `inline(always)`: compiled with the features of
    /// the caller.
    pub(crate) trait Steps {
        type V: Copy;
        /// Lanes per register.
        const WIDTH: usize;
        unsafe fn zero() -> Self::V;
        unsafe fn splat(value: f32) -> Self::V;
        unsafe fn load(from: *const f32) -> Self::V;
        unsafe fn store(to: *mut f32, v: Self::V);
        unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
        unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
        unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
        unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
        unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
        unsafe fn div(a: Self::V, b: Self::V) -> Self::V;
        /// `a · b + c`, fused.
        unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
        /// `c − a · b`, fused.
        unsafe fn mul_sub(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
        /// To the nearest integer, ties to even.
        unsafe fn round(v: Self::V) -> Self::V;
        /// `2^n` of integral `n` (within the normal exponents).
        unsafe fn pow2(n: Self::V) -> Self::V;
    }

    /// Eight f32 lanes, and the steps that combine them in [`super::combine`]'s order.
    pub(crate) trait Lanes: Steps {
        /// Eight half floats, widened exactly.
        unsafe fn load_half(from: *const half::f16) -> Self::V;
        /// The lanes [`super::combine`]d.
        unsafe fn sum(v: Self::V) -> f32;
        /// The first step of [`super::combine`] on two vectors at once:
        /// `[a0+a4, a1+a5, a2+a6, a3+a7, b0+b4, b1+b5, b2+b6, b3+b7]`.
        unsafe fn fold(a: Self::V, b: Self::V) -> Self::V;
        /// The rest of [`super::combine`] for eight vectors [`Lanes::fold`]ed into the 32
        /// values at `folded` (four each, in order): `(f0+f1)+(f2+f3)` of each four.
        unsafe fn finish(folded: *const f32) -> Self::V;
    }

    #[cfg(target_arch = "x86_64")]
    pub(crate) struct Avx2;

    #[cfg(target_arch = "x86_64")]
    impl Steps for Avx2 {
        type V = std::arch::x86_64::__m256;
        const WIDTH: usize = 8;

        #[inline(always)]
        unsafe fn zero() -> Self::V {
            std::arch::x86_64::_mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(value: f32) -> Self::V {
            std::arch::x86_64::_mm256_set1_ps(value)
        }
        #[inline(always)]
        unsafe fn load(from: *const f32) -> Self::V {
            std::arch::x86_64::_mm256_loadu_ps(from)
        }
        #[inline(always)]
        unsafe fn store(to: *mut f32, v: Self::V) {
            std::arch::x86_64::_mm256_storeu_ps(to, v)
        }
        #[inline(always)]
        unsafe fn add(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm256_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm256_sub_ps(a, b)
        }
        #[inline(always)]
        unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm256_mul_ps(a, b)
        }
        #[inline(always)]
        unsafe fn max(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm256_max_ps(a, b)
        }
        #[inline(always)]
        unsafe fn min(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm256_min_ps(a, b)
        }
        #[inline(always)]
        unsafe fn div(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm256_div_ps(a, b)
        }
        #[inline(always)]
        unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            std::arch::x86_64::_mm256_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn mul_sub(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            std::arch::x86_64::_mm256_fnmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn round(v: Self::V) -> Self::V {
            use std::arch::x86_64::*;
            _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
        }
        #[inline(always)]
        unsafe fn pow2(n: Self::V) -> Self::V {
            use std::arch::x86_64::*;
            let exponent = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(exponent))
        }
    }

    #[cfg(target_arch = "x86_64")]
    impl Lanes for Avx2 {
        /// Needs F16C.
        #[inline(always)]
        unsafe fn load_half(from: *const half::f16) -> Self::V {
            use std::arch::x86_64::*;
            _mm256_cvtph_ps(_mm_loadu_si128(from.cast()))
        }
        #[inline(always)]
        unsafe fn sum(v: Self::V) -> f32 {
            use std::arch::x86_64::*;
            let halves = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let pairs = _mm_hadd_ps(halves, halves);
            _mm_cvtss_f32(_mm_hadd_ps(pairs, pairs))
        }
        #[inline(always)]
        unsafe fn fold(a: Self::V, b: Self::V) -> Self::V {
            use std::arch::x86_64::*;
            _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
        }
        #[inline(always)]
        unsafe fn finish(folded: *const f32) -> Self::V {
            use std::arch::x86_64::*;
            // No closures here: they would miss the caller's target features.
            let (v0, v1) = (_mm256_loadu_ps(folded), _mm256_loadu_ps(folded.add(8)));
            let (v2, v3) = (_mm256_loadu_ps(folded.add(16)), _mm256_loadu_ps(folded.add(24)));
            // Vectors 0, 2 (and 4, 6) in the low halves, 1, 3 (5, 7) in the high ones.
            let sums = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
            _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
        }
    }

    /// Sixteen f32 lanes in one AVX-512 register (needs AVX-512F): the steps of [`Avx2`] on
    /// twice the lanes.
    #[cfg(target_arch = "x86_64")]
    pub(crate) struct Avx512;

    #[cfg(target_arch = "x86_64")]
    impl Steps for Avx512 {
        type V = std::arch::x86_64::__m512;
        const WIDTH: usize = 16;

        #[inline(always)]
        unsafe fn zero() -> Self::V {
            std::arch::x86_64::_mm512_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(value: f32) -> Self::V {
            std::arch::x86_64::_mm512_set1_ps(value)
        }
        #[inline(always)]
        unsafe fn load(from: *const f32) -> Self::V {
            std::arch::x86_64::_mm512_loadu_ps(from)
        }
        #[inline(always)]
        unsafe fn store(to: *mut f32, v: Self::V) {
            std::arch::x86_64::_mm512_storeu_ps(to, v)
        }
        #[inline(always)]
        unsafe fn add(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm512_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm512_sub_ps(a, b)
        }
        #[inline(always)]
        unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm512_mul_ps(a, b)
        }
        #[inline(always)]
        unsafe fn max(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm512_max_ps(a, b)
        }
        #[inline(always)]
        unsafe fn min(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm512_min_ps(a, b)
        }
        #[inline(always)]
        unsafe fn div(a: Self::V, b: Self::V) -> Self::V {
            std::arch::x86_64::_mm512_div_ps(a, b)
        }
        #[inline(always)]
        unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            std::arch::x86_64::_mm512_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn mul_sub(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            std::arch::x86_64::_mm512_fnmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn round(v: Self::V) -> Self::V {
            use std::arch::x86_64::*;
            _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
        }
        #[inline(always)]
        unsafe fn pow2(n: Self::V) -> Self::V {
            use std::arch::x86_64::*;
            let exponent = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(exponent))
        }
    }

    /// Two 4-lane registers: lanes 0–3, then 4–7.
    #[cfg(target_arch = "aarch64")]
    pub(crate) struct Neon;

    #[cfg(target_arch = "aarch64")]
    impl Steps for Neon {
        type V = (std::arch::aarch64::float32x4_t, std::arch::aarch64::float32x4_t);
        const WIDTH: usize = 8;

        #[inline(always)]
        unsafe fn zero() -> Self::V {
            Self::splat(0.0)
        }
        #[inline(always)]
        unsafe fn splat(value: f32) -> Self::V {
            let v = std::arch::aarch64::vdupq_n_f32(value);
            (v, v)
        }
        #[inline(always)]
        unsafe fn load(from: *const f32) -> Self::V {
            use std::arch::aarch64::*;
            (vld1q_f32(from), vld1q_f32(from.add(4)))
        }
        #[inline(always)]
        unsafe fn store(to: *mut f32, v: Self::V) {
            use std::arch::aarch64::*;
            vst1q_f32(to, v.0);
            vst1q_f32(to.add(4), v.1);
        }
        #[inline(always)]
        unsafe fn add(a: Self::V, b: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vaddq_f32(a.0, b.0), vaddq_f32(a.1, b.1))
        }
        #[inline(always)]
        unsafe fn sub(a: Self::V, b: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vsubq_f32(a.0, b.0), vsubq_f32(a.1, b.1))
        }
        #[inline(always)]
        unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vmulq_f32(a.0, b.0), vmulq_f32(a.1, b.1))
        }
        #[inline(always)]
        unsafe fn max(a: Self::V, b: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vmaxq_f32(a.0, b.0), vmaxq_f32(a.1, b.1))
        }
        #[inline(always)]
        unsafe fn min(a: Self::V, b: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vminq_f32(a.0, b.0), vminq_f32(a.1, b.1))
        }
        #[inline(always)]
        unsafe fn div(a: Self::V, b: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vdivq_f32(a.0, b.0), vdivq_f32(a.1, b.1))
        }
        #[inline(always)]
        unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vfmaq_f32(c.0, a.0, b.0), vfmaq_f32(c.1, a.1, b.1))
        }
        #[inline(always)]
        unsafe fn mul_sub(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vfmsq_f32(c.0, a.0, b.0), vfmsq_f32(c.1, a.1, b.1))
        }
        #[inline(always)]
        unsafe fn round(v: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vrndnq_f32(v.0), vrndnq_f32(v.1))
        }
        #[inline(always)]
        unsafe fn pow2(n: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            let bits = |n: float32x4_t| {
                vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127))))
            };
            (bits(n.0), bits(n.1))
        }
    }

    #[cfg(target_arch = "aarch64")]
    impl Lanes for Neon {
        /// `fcvtl` is in every aarch64 CPU, but its intrinsic needs Rust's unstable `f16`.
        #[inline(always)]
        unsafe fn load_half(from: *const half::f16) -> Self::V {
            use std::arch::aarch64::*;
            let halves = vld1q_u16(from.cast());
            let (low, high): (float32x4_t, float32x4_t);
            std::arch::asm!(
                "fcvtl {low:v}.4s, {halves:v}.4h",
                "fcvtl2 {high:v}.4s, {halves:v}.8h",
                halves = in(vreg) halves,
                low = out(vreg) low,
                high = lateout(vreg) high,
                options(pure, nomem, nostack, preserves_flags),
            );
            (low, high)
        }
        #[inline(always)]
        unsafe fn sum(v: Self::V) -> f32 {
            use std::arch::aarch64::*;
            let halves = vaddq_f32(v.0, v.1);
            let pairs = vpaddq_f32(halves, halves);
            vgetq_lane_f32::<0>(pairs) + vgetq_lane_f32::<1>(pairs)
        }
        #[inline(always)]
        unsafe fn fold(a: Self::V, b: Self::V) -> Self::V {
            use std::arch::aarch64::*;
            (vaddq_f32(a.0, a.1), vaddq_f32(b.0, b.1))
        }
        #[inline(always)]
        unsafe fn finish(folded: *const f32) -> Self::V {
            use std::arch::aarch64::*;
            let mut sums = [vdupq_n_f32(0.0); 2];
            for (half, sums) in sums.iter_mut().enumerate() {
                let four = folded.add(16 * half);
                let low = vpaddq_f32(vld1q_f32(four), vld1q_f32(four.add(4)));
                let high = vpaddq_f32(vld1q_f32(four.add(8)), vld1q_f32(four.add(12)));
                *sums = vpaddq_f32(low, high);
            }
            (sums[0], sums[1])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulps_of_the_library() {
        for i in -88_000..=87_000 {
            let x = -(i as f32) / 1000.0;
            let (ours, library) = (exp(x), x.exp());
            assert!((ours - library).abs() <= 2.0 * f32::EPSILON * library, "exp({x}) = {ours}, library {library}");
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(1000.0).is_finite() && exp(-1000.0) > 0.0, "clamped, never infinite or zero");
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn exp_lanes_computes_the_bits_of_exp_at_every_width_this_cpu_runs() {
        let xs: Vec<f32> = (-1200..1200).map(|i| i as f32 * 0.0771).chain([0.0, -0.0, 88.5, -87.5]).collect();
        let expected: Vec<u32> = xs.iter().map(|&x| exp(x).to_bits()).collect();
        for (width, exp_all) in widths_here() {
            let whole = xs.len() / width * width;
            let mut out = vec![0f32; whole];
            // SAFETY: `widths_here` lists only the widths whose instructions the CPU has.
            unsafe { exp_all(&xs[..whole], &mut out) };
            let bits: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
            assert_eq!(bits, expected[..whole], "{width} lanes");
        }
    }

    /// [`exp_lanes`] of every value of `x` into `out`, a register of `S::WIDTH` lanes at a time.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[inline(always)]
    unsafe fn exp_all<S: lanes::Steps>(x: &[f32], out: &mut [f32]) {
        for (x, out) in x.chunks_exact(S::WIDTH).zip(out.chunks_exact_mut(S::WIDTH)) {
            S::store(out.as_mut_ptr(), exp_lanes::<S>(S::load(x.as_ptr())));
        }
    }

    /// [`exp_all`] at one register width.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    type ExpAll = unsafe fn(&[f32], &mut [f32]);

    /// The register widths this CPU runs [`exp_lanes`] on, each with [`exp_all`] at that width.
    #[cfg(target_arch = "x86_64")]
    fn widths_here() -> Vec<(usize, ExpAll)> {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn eights(x: &[f32], out: &mut [f32]) {
            exp_all::<lanes::Avx2>(x, out)
        }
        #[target_feature(enable = "avx512f")]
        unsafe fn sixteens(x: &[f32], out: &mut [f32]) {
            exp_all::<lanes::Avx512>(x, out)
        }
        let mut widths: Vec<(usize, ExpAll)> = Vec::new();
        if crate::ops::has_avx2_fma() {
            widths.push((8, eights));
        }
        if is_x86_feature_detected!("avx512f") {
            widths.push((16, sixteens));
        }
        widths
    }

    #[cfg(target_arch = "aarch64")]
    fn widths_here() -> Vec<(usize, ExpAll)> {
        unsafe fn eights(x: &[f32], out: &mut [f32]) {
            exp_all::<lanes::Neon>(x, out)
        }
        vec![(8, eights)]
    }
}
