//! The kernel on aarch64 NEON: four 16-byte registers per vector (see [`super::narrow`]).
//! The weights are flipped back to signed bytes; with the dot-product extension `sdot`
//! adds each lane's four byte products, without it widening multiplies (`smull`) and two
//! pairwise additions do. Products of bytes within ±127 fit in 16 bits exactly.

use super::narrow::{self, Engine};
use super::*;
use std::arch::aarch64::*;

/// [`Q8Matrix::multiply`] with NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn multiply(w: &Q8Matrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    narrow::multiply::<Neon>(w, x, out, rows);
}

/// [`Q8Matrix::multiply`] with NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn multiply_dotprod(w: &Q8Matrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    narrow::multiply::<NeonDotprod>(w, x, out, rows);
}

/// Everything but the integer products, common to both engines.
macro_rules! common_ops {
    () => {
        const PARTS: usize = 4;
        type Int = int32x4_t;
        type Float = float32x4_t;
        type Weights = int8x16_t;

        #[inline(always)]
        unsafe fn weights(biased: *const u8) -> int8x16_t {
            vreinterpretq_s8_u8(veorq_u8(vld1q_u8(biased), vdupq_n_u8(0x80)))
        }

        #[inline(always)]
        unsafe fn start(_corrections: *const i32) -> int32x4_t {
            vdupq_n_s32(0)
        }

        #[inline(always)]
        unsafe fn load(values: *const f32) -> float32x4_t {
            vld1q_f32(values)
        }

        #[inline(always)]
        unsafe fn pair(pair: *const f32) -> float32x4_t {
            let two = vld1_f32(pair);
            vcombine_f32(two, two)
        }

        #[inline(always)]
        unsafe fn zero() -> float32x4_t {
            vdupq_n_f32(0.0)
        }

        #[inline(always)]
        unsafe fn accumulate(
            acc: float32x4_t,
            sums: int32x4_t,
            x_scale: float32x4_t,
            w_scale: float32x4_t,
        ) -> float32x4_t {
            vfmaq_f32(acc, vmulq_f32(vcvtq_f32_s32(sums), x_scale), w_scale)
        }

        #[inline(always)]
        unsafe fn store(values: float32x4_t, to: *mut f32) {
            vst1q_f32(to, values)
        }
    };
}

struct Neon;

impl Engine for Neon {
    common_ops!();

    #[inline(always)]
    unsafe fn dot(sums: int32x4_t, weights: int8x16_t, x: *const i8) -> int32x4_t {
        let input = vld1q_s8(x);
        let low = vmull_s8(vget_low_s8(weights), vget_low_s8(input));
        let high = vmull_high_s8(weights, input);
        vaddq_s32(sums, vpaddq_s32(vpaddlq_s16(low), vpaddlq_s16(high)))
    }
}

struct NeonDotprod;

impl Engine for NeonDotprod {
    common_ops!();

    /// `sdot` written as assembly: its intrinsic (`vdotq_s32`) is not stable Rust yet.
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn dot(mut sums: int32x4_t, weights: int8x16_t, x: *const i8) -> int32x4_t {
        std::arch::asm!(
            "sdot {sums:v}.4s, {weights:v}.16b, {input:v}.16b",
            sums = inout(vreg) sums,
            weights = in(vreg) weights,
            input = in(vreg) vld1q_s8(x),
            options(pure, nomem, nostack, preserves_flags),
        );
        sums
    }
}
