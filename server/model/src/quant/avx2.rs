//! The kernel on AVX2 + FMA, with or without AVX-VNNI: two 32-byte registers per vector
//! (see [`super::narrow`]).
//!
//! Without VNNI, `vpmaddubsw` multiplies unsigned by signed bytes and adds pairs into
//! saturating 16-bit sums, which the biased weights (up to 255) would overflow. So the
//! weights are flipped back to signed bytes, and the sign of each weight moves to its
//! input byte (`vpsignb`): |w| · (±x) ≤ 127 · 127, and two of them fit in 16 bits exactly.
//! `vpmaddwd` by ones then adds the pairs into the lane's four-byte sum. 4-bit weights
//! (0…15) need no such care: `vpmaddubsw` takes them as they are, and its 16-bit sums
//! are added over a whole span before one `vpmaddwd`.

use super::narrow::{self, ByteWeights, Code, Engine, NibbleWeights, Q4Coded, Q4Halves, Q6, Q8};
use super::*;
use std::arch::x86_64::*;

/// [`QuantMatrix::multiply`] with AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn multiply(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    crate::frame::align_frame!();
    match &w.values {
        Values::Biased { .. } => narrow::multiply::<Avx2, Q8>(w, x, out, rows),
        Values::Nibbles { scales: BlockValues::Halves(_), .. } => narrow::multiply::<Avx2, Q4Halves>(w, x, out, rows),
        Values::Nibbles { .. } => multiply_apart_avx2::<Q4Coded>(w, x, out, rows),
        Values::SixBit { .. } => multiply_apart_avx2::<Q6>(w, x, out, rows),
    }
}

/// [`QuantMatrix::multiply`] with AVX2, FMA and AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn multiply_vnni(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    crate::frame::align_frame!();
    match &w.values {
        Values::Biased { .. } => narrow::multiply::<AvxVnni, Q8>(w, x, out, rows),
        Values::Nibbles { scales: BlockValues::Halves(_), .. } => {
            narrow::multiply::<AvxVnni, Q4Halves>(w, x, out, rows)
        }
        Values::Nibbles { .. } => multiply_apart_vnni::<Q4Coded>(w, x, out, rows),
        Values::SixBit { .. } => multiply_apart_vnni::<Q6>(w, x, out, rows),
    }
}

/// [`quantize_row_portable`] with 8-lane vectors.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_row(row: &[f32], quants: &mut [i8], scales: &mut Vec<f32>, span_vectors: usize) {
    crate::frame::align_frame!();
    quantize_blocks::<Avx2>(row, quants, scales, span_vectors)
}

/// [`super::lane_sums`]: byte pairs by `vpmaddubsw` with ones, then pairs of pairs by
/// `vpmaddwd` with ones, per half vector.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn lane_sums(bytes: &[i8]) -> [i32; LANES] {
    let (ones, pairs) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
    let mut halves = [_mm256_setzero_si256(); 2];
    for vector in bytes.chunks_exact(VECTOR) {
        for (h, half) in halves.iter_mut().enumerate() {
            let words = _mm256_maddubs_epi16(ones, _mm256_loadu_si256(vector.as_ptr().add(32 * h).cast()));
            *half = _mm256_add_epi32(*half, _mm256_madd_epi16(words, pairs));
        }
    }
    let mut lanes = [0i32; LANES];
    _mm256_storeu_si256(lanes.as_mut_ptr().cast(), halves[0]);
    _mm256_storeu_si256(lanes.as_mut_ptr().add(8).cast(), halves[1]);
    lanes
}

impl BlockQuantizer for Avx2 {
    #[inline(always)]
    unsafe fn quantize(block: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> f32 {
        let values: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(block.as_ptr().add(8 * i)));
        let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
        let mut max = _mm256_and_ps(values[0], magnitude);
        for v in &values[1..] {
            max = _mm256_max_ps(max, _mm256_and_ps(*v, magnitude));
        }
        let four = _mm_max_ps(_mm256_castps256_ps128(max), _mm256_extractf128_ps(max, 1));
        let two = _mm_max_ps(four, _mm_movehl_ps(four, four));
        let max = _mm_cvtss_f32(_mm_max_ss(two, _mm_shuffle_ps(two, two, 1)));
        let scale = max / 127.0;
        let inverse = _mm256_set1_ps(if scale == 0.0 { 0.0 } else { 1.0 / scale });
        for (v, bytes) in values.into_iter().zip(q.chunks_exact_mut(8)) {
            let rounded =
                _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(v, inverse));
            let clamped = _mm256_min_ps(_mm256_max_ps(rounded, _mm256_set1_ps(-127.0)), _mm256_set1_ps(127.0));
            let ints = _mm256_cvtps_epi32(clamped);
            let words = _mm_packs_epi32(_mm256_castsi256_si128(ints), _mm256_extracti128_si256(ints, 1));
            _mm_storel_epi64(bytes.as_mut_ptr().cast(), _mm_packs_epi16(words, words));
        }
        scale
    }
}

struct Avx2;

/// The float side and the nibbles, common to both engines.
macro_rules! float_ops {
    () => {
        const PARTS: usize = 2;
        /// Sixteen registers: a group of six multiplied up to 14% slower than groups of four and
        /// two, and no faster on any shape (`avx2` forced on Zen 4).
        const LARGEST_GROUP: usize = 5;
        const RELOAD_INPUTS: bool = true;
        type Int = __m256i;
        type Float = __m256;

        #[inline(always)]
        unsafe fn load(values: *const f32) -> __m256 {
            _mm256_loadu_ps(values)
        }

        #[inline(always)]
        unsafe fn pair(pair: *const f32) -> __m256 {
            _mm256_castpd_ps(_mm256_set1_pd(pair.cast::<f64>().read_unaligned()))
        }

        #[inline(always)]
        unsafe fn load_halves(values: *const u16) -> __m256 {
            _mm256_cvtph_ps(_mm_loadu_si128(values.cast()))
        }

        #[inline(always)]
        unsafe fn pair_halves(pair: *const u16) -> __m256 {
            _mm256_cvtph_ps(_mm_set1_epi32(pair.cast::<i32>().read_unaligned()))
        }

        #[inline(always)]
        unsafe fn codes(codes: *const u8) -> __m256 {
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(codes.cast())))
        }

        #[inline(always)]
        unsafe fn signed_codes(codes: *const i8) -> __m256 {
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(codes.cast())))
        }

        #[inline(always)]
        unsafe fn splat(value: f32) -> __m256 {
            _mm256_set1_ps(value)
        }

        #[inline(always)]
        unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }

        #[inline(always)]
        unsafe fn mul(a: __m256, b: __m256) -> __m256 {
            _mm256_mul_ps(a, b)
        }

        #[inline(always)]
        unsafe fn accumulate(acc: __m256, sums: __m256i, x_scale: __m256, w_scale: __m256) -> __m256 {
            _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), x_scale), w_scale, acc)
        }

        #[inline(always)]
        unsafe fn prefetch(line: *const u8) {
            _mm_prefetch::<_MM_HINT_T0>(line.cast());
        }

        #[inline(always)]
        unsafe fn fused(acc: __m256, a: __m256, b: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, acc)
        }

        #[inline(always)]
        unsafe fn store(values: __m256, to: *mut f32) {
            _mm256_storeu_ps(to, values)
        }

        #[inline(always)]
        unsafe fn sum_lanes_of(lanes: &[[f32; LANES]], sums: &mut [f32]) {
            sum_lanes_of_avx2(lanes, sums)
        }
    };
}

/// [`super::sum_lanes`] in vector registers: the same additions in the same order (the
/// upper half onto the lower, eight lanes, then four, two, one).
#[inline(always)]
pub(super) unsafe fn sum_lanes_avx2(lanes: &[f32; LANES]) -> f32 {
    let eight = _mm256_add_ps(_mm256_loadu_ps(lanes.as_ptr()), _mm256_loadu_ps(lanes.as_ptr().add(8)));
    let four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps::<1>(eight));
    let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)))
}

/// [`sum_lanes_avx2`] of each array of lanes into `sums`, eight arrays at a time: each step
/// of the order above runs for eight sums in one or two instructions. Summed one by one, a
/// block's outputs took 3.3% of the instructions of a 16-node pass's products (`avx2`,
/// counted by callgrind), half of them now.
#[inline(always)]
pub(super) unsafe fn sum_lanes_of_avx2(lanes: &[[f32; LANES]], sums: &mut [f32]) {
    if let ([one], [sum]) = (lanes, &mut *sums) {
        *sum = sum_lanes_avx2(one);
        return;
    }
    let none = [0f32; LANES];
    for (lanes, sums) in lanes.chunks(8).zip(sums.chunks_mut(8)) {
        // Array k's upper eight lanes onto its lower eight.
        let eights: [__m256; 8] = indexed(|k| {
            let lanes = lanes.get(k).unwrap_or(&none).as_ptr();
            _mm256_add_ps(_mm256_loadu_ps(lanes), _mm256_loadu_ps(lanes.add(8)))
        });
        // `fours[p]`: array 2p's four lanes, then array 2p + 1's.
        let fours: [__m256; 4] = indexed(|p| {
            let (a, b) = (eights[2 * p], eights[2 * p + 1]);
            _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
        });
        // `twos[q]`: arrays 4q and 4q + 2's two lanes in the lower half, 4q + 1 and 4q + 3's
        // in the upper.
        let twos: [__m256; 2] = indexed(|q| {
            let (f, h) = (fours[2 * q], fours[2 * q + 1]);
            _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(f, h), _mm256_shuffle_ps::<0b11_10_11_10>(f, h))
        });
        // Arrays 0, 2, 4, 6, then 1, 3, 5, 7.
        let (t, u) = (twos[0], twos[1]);
        let ones = _mm256_add_ps(_mm256_shuffle_ps::<0b10_00_10_00>(t, u), _mm256_shuffle_ps::<0b11_01_11_01>(t, u));
        let mut values = [0f32; 8];
        _mm256_storeu_ps(values.as_mut_ptr(), ones);
        for (k, sum) in sums.iter_mut().enumerate() {
            *sum = values[k / 2 + 4 * (k % 2)];
        }
    }
}

/// The 4-bit weights' loads, common to both engines.
macro_rules! nibble_ops {
    () => {
        type Nibbles = __m256i;

        #[inline(always)]
        unsafe fn zero_partial() -> __m256i {
            _mm256_setzero_si256()
        }

        /// Low and high nibbles of 32 bytes.
        #[inline(always)]
        unsafe fn nibbles(packed: *const u8) -> (__m256i, __m256i) {
            let bytes = _mm256_loadu_si256(packed.cast());
            let mask = _mm256_set1_epi8(0x0F);
            (_mm256_and_si256(bytes, mask), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask))
        }

        #[inline(always)]
        unsafe fn zero_sums() -> __m256i {
            _mm256_setzero_si256()
        }

        #[inline(always)]
        unsafe fn six_bits(packed: *const u8, high: *const u8, step: usize) -> (__m256i, __m256i) {
            let (bits, top) = (_mm256_loadu_si256(high.cast()), _mm256_set1_epi8(0x30));
            let (low, high) = Self::nibbles(packed);
            let (first, second) = if step == 0 {
                (_mm256_slli_epi16(bits, 4), bits)
            } else {
                (_mm256_slli_epi16(bits, 2), _mm256_srli_epi16(bits, 2))
            };
            (_mm256_or_si256(low, _mm256_and_si256(first, top)), _mm256_or_si256(high, _mm256_and_si256(second, top)))
        }
    };
}

impl Engine for Avx2 {
    float_ops!();
}

impl ByteWeights for Avx2 {
    /// The weights' absolute values, and the signed weights (for their signs).
    type Bytes = (__m256i, __m256i);
    const PAIRED_WEIGHTS: bool = true;

    #[inline(always)]
    unsafe fn bytes(biased: *const u8) -> Self::Bytes {
        let signed = _mm256_xor_si256(_mm256_loadu_si256(biased.cast()), _mm256_set1_epi8(i8::MIN));
        (_mm256_abs_epi8(signed), signed)
    }

    #[inline(always)]
    unsafe fn start(_corrections: *const i32) -> __m256i {
        _mm256_setzero_si256()
    }

    #[inline(always)]
    unsafe fn dot(sums: __m256i, (magnitudes, signed): Self::Bytes, x: *const i8) -> __m256i {
        let signed_inputs = _mm256_sign_epi8(_mm256_loadu_si256(x.cast()), signed);
        let pairs = _mm256_maddubs_epi16(magnitudes, signed_inputs);
        _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }
}

impl NibbleWeights for Avx2 {
    /// 16-bit sums of pairs of products: a span adds at most 8 vectors' pairs, each at
    /// most 2 · 15 · 127 in magnitude, so 30,480: exact in 16 bits.
    type Partial = __m256i;

    nibble_ops!();

    #[inline(always)]
    unsafe fn flush(partial: __m256i) -> __m256i {
        _mm256_madd_epi16(partial, _mm256_set1_epi16(1))
    }

    #[inline(always)]
    unsafe fn dot_nibbles(partial: __m256i, weights: __m256i, x: *const i8) -> __m256i {
        _mm256_add_epi16(partial, _mm256_maddubs_epi16(weights, _mm256_loadu_si256(x.cast())))
    }

    /// Two vectors' pairs of products (each at most 2 · 63 · 127) add up to at most
    /// 32,004: exact in 16 bits.
    #[inline(always)]
    unsafe fn dot_six(sums: __m256i, (first, second): (__m256i, __m256i), x: *const i8) -> __m256i {
        let pairs = Self::dot_nibbles(Self::dot_nibbles(Self::zero_partial(), first, x), second, x.add(VECTOR));
        _mm256_add_epi32(sums, Self::flush(pairs))
    }
}

struct AvxVnni;

impl Engine for AvxVnni {
    float_ops!();
}

impl NibbleWeights for AvxVnni {
    type Partial = __m256i;

    nibble_ops!();

    #[inline(always)]
    unsafe fn flush(partial: __m256i) -> __m256i {
        partial
    }

    #[inline(always)]
    unsafe fn dot_nibbles(sums: __m256i, weights: __m256i, x: *const i8) -> __m256i {
        _mm256_dpbusd_avx_epi32(sums, weights, _mm256_loadu_si256(x.cast()))
    }

    #[inline(always)]
    unsafe fn dot_six(sums: __m256i, (first, second): (__m256i, __m256i), x: *const i8) -> __m256i {
        Self::dot_nibbles(Self::dot_nibbles(sums, first, x), second, x.add(VECTOR))
    }
}

impl ByteWeights for AvxVnni {
    type Bytes = __m256i;

    #[inline(always)]
    unsafe fn bytes(biased: *const u8) -> __m256i {
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
}

/// [`narrow::multiply`] of code `C` on Avx2 in a function of its own (see [`narrow::Q4`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline(never)]
unsafe fn multiply_apart_avx2<C: Code<Avx2>>(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    crate::frame::align_frame!();
    narrow::multiply::<Avx2, C>(w, x, out, rows)
}

/// [`narrow::multiply`] of code `C` on AvxVnni in a function of its own (see [`narrow::Q4`]).
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
#[inline(never)]
unsafe fn multiply_apart_vnni<C: Code<AvxVnni>>(
    w: &QuantMatrix,
    x: &QuantizedRows,
    out: &mut [f32],
    rows: Range<usize>,
) {
    crate::frame::align_frame!();
    narrow::multiply::<AvxVnni, C>(w, x, out, rows)
}
