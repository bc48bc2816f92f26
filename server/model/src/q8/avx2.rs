//! The kernel on AVX2 + FMA, with or without AVX-VNNI: two 32-byte registers per vector
//! (see [`super::narrow`]).
//!
//! Without VNNI, `vpmaddubsw` multiplies unsigned by signed bytes and adds pairs into
//! saturating 16-bit sums, which the biased weights (up to 255) would overflow. So the
//! weights are flipped back to signed bytes, and the sign of each weight moves to its
//! input byte (`vpsignb`): |w| · (±x) ≤ 127 · 127, and two of them fit in 16 bits exactly.
//! `vpmaddwd` by ones then adds the pairs into the lane's four-byte sum.

use super::narrow::{self, Engine};
use super::*;
use std::arch::x86_64::*;

/// [`Q8Matrix::multiply`] with AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn multiply(w: &Q8Matrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    narrow::multiply::<Avx2>(w, x, out, rows);
}

/// [`Q8Matrix::multiply`] with AVX2, FMA and AVX-VNNI.
#[target_feature(enable = "avx2,fma,avxvnni")]
pub(super) unsafe fn multiply_vnni(w: &Q8Matrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    narrow::multiply::<AvxVnni>(w, x, out, rows);
}

struct Avx2;

/// The float side, common to both engines.
macro_rules! float_ops {
    () => {
        #[inline(always)]
        unsafe fn load(values: *const f32) -> __m256 {
            _mm256_loadu_ps(values)
        }

        #[inline(always)]
        unsafe fn pair(pair: *const f32) -> __m256 {
            _mm256_castpd_ps(_mm256_set1_pd(pair.cast::<f64>().read_unaligned()))
        }

        #[inline(always)]
        unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }

        #[inline(always)]
        unsafe fn accumulate(acc: __m256, sums: __m256i, x_scale: __m256, w_scale: __m256) -> __m256 {
            _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), x_scale), w_scale, acc)
        }

        #[inline(always)]
        unsafe fn store(values: __m256, to: *mut f32) {
            _mm256_storeu_ps(to, values)
        }
    };
}

impl Engine for Avx2 {
    const PARTS: usize = 2;
    type Int = __m256i;
    type Float = __m256;
    /// The weights' absolute values, and the signed weights (for their signs).
    type Weights = (__m256i, __m256i);
    const PAIRED_WEIGHTS: bool = true;

    #[inline(always)]
    unsafe fn weights(biased: *const u8) -> Self::Weights {
        let signed = _mm256_xor_si256(_mm256_loadu_si256(biased.cast()), _mm256_set1_epi8(i8::MIN));
        (_mm256_abs_epi8(signed), signed)
    }

    #[inline(always)]
    unsafe fn start(_corrections: *const i32) -> __m256i {
        _mm256_setzero_si256()
    }

    #[inline(always)]
    unsafe fn dot(sums: __m256i, (magnitudes, signed): Self::Weights, x: *const i8) -> __m256i {
        let signed_inputs = _mm256_sign_epi8(_mm256_loadu_si256(x.cast()), signed);
        let pairs = _mm256_maddubs_epi16(magnitudes, signed_inputs);
        _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    float_ops!();
}

struct AvxVnni;

impl Engine for AvxVnni {
    const PARTS: usize = 2;
    type Int = __m256i;
    type Float = __m256;
    type Weights = __m256i;

    #[inline(always)]
    unsafe fn weights(biased: *const u8) -> __m256i {
        _mm256_loadu_si256(biased.cast())
    }

    #[inline(always)]
    unsafe fn start(corrections: *const i32) -> __m256i {
        _mm256_loadu_si256(corrections.cast())
    }

    #[inline(always)]
    unsafe fn dot(sums: __m256i, weights: __m256i, x: *const i8) -> __m256i {
        _mm256_dpbusd_avx_epi32(sums, weights, _mm256_loadu_si256(x.cast()))
    }

    float_ops!();
}
