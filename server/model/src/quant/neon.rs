//! The kernel on aarch64 NEON: four 16-byte registers per vector (see [`super::narrow`]).
//! The weights are flipped back to signed bytes; with the dot-product extension `sdot`
//! adds each lane's four byte products, without it widening multiplies (`smull`) and two
//! pairwise additions do. Products of bytes within ±127 fit in 16 bits exactly. 4-bit
//! weights (0…15) are signed bytes as they are, and take the same products.

use super::narrow::{self, ByteWeights, Code, Engine, NibbleWeights, Q4Coded, Q4Halves, Q6, Q8};
use super::*;
use std::arch::aarch64::*;

/// [`QuantMatrix::multiply`] with NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn multiply(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    match &w.values {
        Values::Biased { .. } => narrow::multiply::<Neon, Q8>(w, x, out, rows),
        Values::Nibbles { scales: BlockValues::Halves(_), .. } => narrow::multiply::<Neon, Q4Halves>(w, x, out, rows),
        Values::Nibbles { .. } => multiply_apart_neon::<Q4Coded>(w, x, out, rows),
        Values::SixBit { .. } => multiply_apart_neon::<Q6>(w, x, out, rows),
    }
}

/// [`QuantMatrix::multiply`] with NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn multiply_dotprod(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    match &w.values {
        Values::Biased { .. } => narrow::multiply::<NeonDotprod, Q8>(w, x, out, rows),
        Values::Nibbles { scales: BlockValues::Halves(_), .. } => {
            narrow::multiply::<NeonDotprod, Q4Halves>(w, x, out, rows)
        }
        Values::Nibbles { .. } => multiply_apart_dotprod::<Q4Coded>(w, x, out, rows),
        Values::SixBit { .. } => multiply_apart_dotprod::<Q6>(w, x, out, rows),
    }
}

/// Both weight codes on an engine whose `dot` multiplies signed bytes.
macro_rules! signed_byte_codes {
    ($engine:ty) => {
        impl ByteWeights for $engine {
            type Bytes = int8x16_t;

            #[inline(always)]
            unsafe fn bytes(biased: *const u8) -> int8x16_t {
                vreinterpretq_s8_u8(veorq_u8(vld1q_u8(biased), vdupq_n_u8(0x80)))
            }

            #[inline(always)]
            unsafe fn start(_corrections: *const i32) -> int32x4_t {
                vdupq_n_s32(0)
            }

            #[inline(always)]
            unsafe fn dot(sums: int32x4_t, weights: int8x16_t, x: *const i8) -> int32x4_t {
                <$engine>::signed_dot(sums, weights, x)
            }
        }

        impl NibbleWeights for $engine {
            type Nibbles = int8x16_t;
            type Partial = int32x4_t;

            #[inline(always)]
            unsafe fn zero_partial() -> int32x4_t {
                vdupq_n_s32(0)
            }

            #[inline(always)]
            unsafe fn flush(partial: int32x4_t) -> int32x4_t {
                partial
            }

            #[inline(always)]
            unsafe fn nibbles(packed: *const u8) -> (int8x16_t, int8x16_t) {
                let bytes = vld1q_u8(packed);
                (vreinterpretq_s8_u8(vandq_u8(bytes, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8::<4>(bytes)))
            }

            #[inline(always)]
            unsafe fn dot_nibbles(sums: int32x4_t, weights: int8x16_t, x: *const i8) -> int32x4_t {
                <$engine>::signed_dot(sums, weights, x)
            }

            #[inline(always)]
            unsafe fn zero_sums() -> int32x4_t {
                vdupq_n_s32(0)
            }

            #[inline(always)]
            unsafe fn six_bits(packed: *const u8, high: *const u8, step: usize) -> (int8x16_t, int8x16_t) {
                let (low, bits, top) = (vld1q_u8(packed), vld1q_u8(high), vdupq_n_u8(0x30));
                let (first, second) = if step == 0 {
                    (vshlq_n_u8::<4>(bits), bits)
                } else {
                    (vshlq_n_u8::<2>(bits), vshrq_n_u8::<2>(bits))
                };
                (
                    vreinterpretq_s8_u8(vorrq_u8(vandq_u8(low, vdupq_n_u8(0x0F)), vandq_u8(first, top))),
                    vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(low), vandq_u8(second, top))),
                )
            }

            /// 6-bit weights (0…63) are signed bytes as they are.
            #[inline(always)]
            unsafe fn dot_six(sums: int32x4_t, (first, second): (int8x16_t, int8x16_t), x: *const i8) -> int32x4_t {
                <$engine>::signed_dot(<$engine>::signed_dot(sums, first, x), second, x.add(VECTOR))
            }
        }
    };
}

/// Four f16 values (bits) as f32 (`fcvtl` in assembly: Rust's f16 vector types are not
/// stable yet).
#[inline(always)]
unsafe fn widen_halves(halves: uint16x4_t) -> float32x4_t {
    let widened: float32x4_t;
    std::arch::asm!(
        "fcvtl {out:v}.4s, {halves:v}.4h",
        out = lateout(vreg) widened,
        halves = in(vreg) halves,
        options(pure, nomem, nostack, preserves_flags),
    );
    widened
}

/// Everything but the integer products, common to both engines.
macro_rules! common_ops {
    () => {
        const PARTS: usize = 4;
        /// As AVX2's: NEON's 32 registers would hold groups of six, but no ARM machine has
        /// measured them yet.
        const LARGEST_GROUP: usize = 5;
        /// Loads are instructions of their own here, and 32 registers keep the inputs.
        const RELOAD_INPUTS: bool = false;
        type Int = int32x4_t;
        type Float = float32x4_t;

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
        unsafe fn load_halves(values: *const u16) -> float32x4_t {
            widen_halves(vld1_u16(values))
        }

        #[inline(always)]
        unsafe fn pair_halves(pair: *const u16) -> float32x4_t {
            widen_halves(vreinterpret_u16_u32(vdup_n_u32(pair.cast::<u32>().read_unaligned())))
        }

        #[inline(always)]
        unsafe fn codes(codes: *const u8) -> float32x4_t {
            let bytes = vreinterpret_u8_u32(vdup_n_u32(codes.cast::<u32>().read_unaligned()));
            vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(bytes))))
        }

        #[inline(always)]
        unsafe fn signed_codes(codes: *const i8) -> float32x4_t {
            let bytes = vreinterpret_s8_u32(vdup_n_u32(codes.cast::<u32>().read_unaligned()));
            vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(bytes))))
        }

        #[inline(always)]
        unsafe fn splat(value: f32) -> float32x4_t {
            vdupq_n_f32(value)
        }

        #[inline(always)]
        unsafe fn zero() -> float32x4_t {
            vdupq_n_f32(0.0)
        }

        #[inline(always)]
        unsafe fn mul(a: float32x4_t, b: float32x4_t) -> float32x4_t {
            vmulq_f32(a, b)
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

        /// The cores' own prefetchers follow the weight streams.
        #[inline(always)]
        unsafe fn prefetch(_line: *const u8) {}

        #[inline(always)]
        unsafe fn fused(acc: float32x4_t, a: float32x4_t, b: float32x4_t) -> float32x4_t {
            vfmaq_f32(acc, a, b)
        }

        #[inline(always)]
        unsafe fn store(values: float32x4_t, to: *mut f32) {
            vst1q_f32(to, values)
        }
    };
}

/// An engine's product of signed weight bytes with input bytes, added to each lane.
trait SignedDot {
    unsafe fn signed_dot(sums: int32x4_t, weights: int8x16_t, x: *const i8) -> int32x4_t;
}

struct Neon;

impl Engine for Neon {
    common_ops!();
}

impl SignedDot for Neon {
    #[inline(always)]
    unsafe fn signed_dot(sums: int32x4_t, weights: int8x16_t, x: *const i8) -> int32x4_t {
        let input = vld1q_s8(x);
        let low = vmull_s8(vget_low_s8(weights), vget_low_s8(input));
        let high = vmull_high_s8(weights, input);
        vaddq_s32(sums, vpaddq_s32(vpaddlq_s16(low), vpaddlq_s16(high)))
    }
}

signed_byte_codes!(Neon);

struct NeonDotprod;

impl Engine for NeonDotprod {
    common_ops!();
}

signed_byte_codes!(NeonDotprod);

impl SignedDot for NeonDotprod {
    /// `sdot` written as assembly: its intrinsic (`vdotq_s32`) is not stable Rust yet.
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn signed_dot(mut sums: int32x4_t, weights: int8x16_t, x: *const i8) -> int32x4_t {
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

/// [`narrow::multiply`] of code `C` on Neon in a function of its own (see [`narrow::Q4`]).
#[target_feature(enable = "neon")]
#[inline(never)]
unsafe fn multiply_apart_neon<C: Code<Neon>>(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    narrow::multiply::<Neon, C>(w, x, out, rows)
}

/// [`narrow::multiply`] of code `C` on NeonDotprod in a function of its own (see [`narrow::Q4`]).
#[target_feature(enable = "neon,dotprod")]
#[inline(never)]
unsafe fn multiply_apart_dotprod<C: Code<NeonDotprod>>(
    w: &QuantMatrix,
    x: &QuantizedRows,
    out: &mut [f32],
    rows: Range<usize>,
) {
    narrow::multiply::<NeonDotprod, C>(w, x, out, rows)
}
