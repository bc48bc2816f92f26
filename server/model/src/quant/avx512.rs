//! The kernel on AVX-512 VNNI: one 64-byte register per vector, `vpdpbusd`. Q8_0 weights
//! run in the loop below, which keeps a whole span of weights in registers; 4-bit weights
//! run in [`narrow`]'s loop with one part per vector.

use super::narrow::{self, Code, Engine, NibbleWeights, Q4Coded, Q4Halves, Q6};
use super::*;
use std::arch::x86_64::*;

/// [`quantize_row_portable`] with 16-lane vectors.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn quantize_row(row: &[f32], quants: &mut [i8], scales: &mut Vec<f32>, span_vectors: usize) {
    crate::frame::align_frame!();
    quantize_blocks::<Quantizer>(row, quants, scales, span_vectors)
}

struct Quantizer;

impl BlockQuantizer for Quantizer {
    #[inline(always)]
    unsafe fn quantize(block: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> f32 {
        let halves = [_mm512_loadu_ps(block.as_ptr()), _mm512_loadu_ps(block.as_ptr().add(LANES))];
        let max = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(halves[0]), _mm512_abs_ps(halves[1])));
        let scale = max / 127.0;
        let inverse = _mm512_set1_ps(if scale == 0.0 { 0.0 } else { 1.0 / scale });
        for (half, bytes) in halves.into_iter().zip(q.chunks_exact_mut(LANES)) {
            let rounded =
                _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(half, inverse));
            let clamped = _mm512_min_ps(_mm512_max_ps(rounded, _mm512_set1_ps(-127.0)), _mm512_set1_ps(127.0));
            _mm_storeu_si128(bytes.as_mut_ptr().cast(), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(clamped)));
        }
        scale
    }
}

/// [`super::lane_sums`] with one `vpdpbusd` by a vector of ones per vector.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn lane_sums(bytes: &[i8]) -> [i32; LANES] {
    let mut sums = _mm512_setzero_si512();
    for vector in bytes.chunks_exact(VECTOR) {
        sums = _mm512_dpbusd_epi32(sums, _mm512_set1_epi8(1), _mm512_loadu_si512(vector.as_ptr().cast()));
    }
    let mut lanes = [0i32; LANES];
    _mm512_storeu_si512(lanes.as_mut_ptr().cast(), sums);
    lanes
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn multiply(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    crate::frame::align_frame!();
    match &w.values {
        Values::Biased { biased, scales } => multiply_bytes(w, biased, scales, x, out, rows),
        Values::Nibbles { scales: BlockValues::Halves(_), .. } => narrow::multiply::<Avx512, Q4Halves>(w, x, out, rows),
        Values::Nibbles { .. } => multiply_apart::<Q4Coded>(w, x, out, rows),
        Values::SixBit { .. } => multiply_apart::<Q6>(w, x, out, rows),
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn multiply_bytes(
    w: &QuantMatrix,
    biased: &[u8],
    scales: &[f32],
    x: &QuantizedRows,
    out: &mut [f32],
    rows: Range<usize>,
) {
    let weights = ByteRows { rows: w.rows, width: w.width, biased, scales };
    for (tile, group, at) in blocks(rows, x.rows, Avx512::LARGEST_GROUP) {
        // Up to 16 weight vectors held in registers: two weight rows at a time.
        match (tile % 2, group) {
            (0, 6) => at.tile_by::<2>(tile).for_each(|at| block::<2, 6>(&weights, x, at, out)),
            (0, 5) => at.tile_by::<2>(tile).for_each(|at| block::<2, 5>(&weights, x, at, out)),
            (0, 4) => at.tile_by::<2>(tile).for_each(|at| block::<2, 4>(&weights, x, at, out)),
            (0, 3) => at.tile_by::<2>(tile).for_each(|at| block::<2, 3>(&weights, x, at, out)),
            (0, 2) => at.tile_by::<2>(tile).for_each(|at| block::<2, 2>(&weights, x, at, out)),
            _ => at.one_by_one(tile, group).for_each(|at| block::<1, 1>(&weights, x, at, out)),
        }
    }
}

/// `R` weight rows times `G` input rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn block<const R: usize, const G: usize>(w: &ByteRows, x: &QuantizedRows, at: Block, out: &mut [f32]) {
    let rows = Operands::<R, G> {
        w_rows: indexed(|j| w.biased.as_ptr().add((at.row0 + j) * w.width)),
        w_scales: indexed(|j| w.scales.as_ptr().add((at.row0 + j) * w.width / BLOCK)),
        x_rows: indexed(|i| x.quants.as_ptr().add((at.r0 + i) * x.width)),
        x_scales: indexed(|i| x.scales.as_ptr().add((at.r0 + i) * x.width / BLOCK)),
        x_corrections: indexed(|i| x.bias_corrections.as_ptr().add(x.lanes_start(at.r0 + i))),
        // The first group of input rows also pulls weights further on into the cache, so
        // that memory keeps streaming while the other groups compute from L1.
        prefetch_distance: (at.r0 == 0 && at.row0 + PREFETCH_ROWS + R <= w.rows).then_some(PREFETCH_ROWS * w.width),
    };
    let mut acc = [[_mm512_setzero_ps(); G]; R];
    for (index, span) in spans(w.width, SPAN_VECTORS).enumerate() {
        if span.vectors == SPAN_VECTORS {
            rows.span::<SPAN_VECTORS>(&mut acc, index, span.start);
        } else {
            rows.span::<1>(&mut acc, index, span.start);
        }
    }
    let mut lanes = [[[0f32; LANES]; G]; R];
    for (lanes, acc) in lanes.iter_mut().zip(&acc) {
        for (lanes, acc) in lanes.iter_mut().zip(acc) {
            _mm512_storeu_ps(lanes.as_mut_ptr(), *acc);
        }
    }
    let mut sums = [[0f32; G]; R];
    super::avx2::sum_lanes_of_avx2(lanes.as_flattened(), sums.as_flattened_mut());
    at.write(&sums, out);
}

/// Q8_0 weights of a [`QuantMatrix`].
struct ByteRows<'a> {
    rows: usize,
    width: usize,
    biased: &'a [u8],
    scales: &'a [f32],
}

/// Where the rows of a block start: `R` weight rows and `G` input rows.
struct Operands<const R: usize, const G: usize> {
    w_rows: [*const u8; R],
    w_scales: [*const f32; R],
    x_rows: [*const i8; G],
    x_scales: [*const f32; G],
    x_corrections: [*const i32; G],
    /// Distance to the weights to prefetch, if this block prefetches.
    prefetch_distance: Option<usize>,
}

impl<const R: usize, const G: usize> Operands<R, G> {
    /// Adds the products of span `index` (`V` vectors from value `offset`) to `acc`.
    /// The span's weight vectors are loaded once and kept in registers for every input row.
    #[inline(always)]
    unsafe fn span<const V: usize>(&self, acc: &mut [[__m512; G]; R], index: usize, offset: usize) {
        if let Some(distance) = self.prefetch_distance {
            for row in self.w_rows {
                for v in 0..V {
                    _mm_prefetch::<_MM_HINT_T0>(row.add(distance + offset + v * VECTOR).cast());
                }
            }
        }
        let scale_offset = offset / BLOCK;
        let mut weights = [[_mm512_setzero_si512(); V]; R];
        let mut w_scales = [_mm512_setzero_ps(); R];
        for j in 0..R {
            for (v, vector) in weights[j].iter_mut().enumerate() {
                *vector = _mm512_loadu_si512(self.w_rows[j].add(offset + v * VECTOR).cast());
            }
            w_scales[j] = block_scales::<V>(self.w_scales[j].add(scale_offset));
        }
        for i in 0..G {
            let x_scales = block_scales::<V>(self.x_scales[i].add(scale_offset));
            let corrections = _mm512_loadu_si512(self.x_corrections[i].add(index * LANES).cast());
            // Each input vector is loaded once and meets every weight row at once.
            let mut exact = [corrections; R];
            for (v, _) in weights[0].iter().enumerate() {
                let input = _mm512_loadu_si512(self.x_rows[i].add(offset + v * VECTOR).cast());
                for (exact, row) in exact.iter_mut().zip(&weights) {
                    *exact = _mm512_dpbusd_epi32(*exact, row[v], input);
                }
            }
            for ((acc, exact), w_scale) in acc.iter_mut().zip(exact).zip(w_scales) {
                let scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(exact), x_scales);
                acc[i] = _mm512_fmadd_ps(scaled, w_scale, acc[i]);
            }
        }
    }
}

/// The block scales of a span of `V` vectors repeated across the lanes: lane `j` gets
/// `scales[j % (2 V)]`.
#[inline(always)]
unsafe fn block_scales<const V: usize>(scales: *const f32) -> __m512 {
    if V == SPAN_VECTORS {
        _mm512_loadu_ps(scales)
    } else {
        _mm512_castpd_ps(_mm512_set1_pd(scales.cast::<f64>().read_unaligned()))
    }
}

/// The engine of [`narrow`] for 4-bit weights: a whole vector per register.
struct Avx512;

impl Engine for Avx512 {
    const PARTS: usize = 1;
    /// Thirty-two registers hold two weight rows' sums and accumulators for six input rows.
    const LARGEST_GROUP: usize = 6;
    /// Thirty-two registers keep the inputs: loading them again made 4-bit products 5–43%
    /// slower with 2 to 16 input rows (`compute_speed`, Zen 4).
    const RELOAD_INPUTS: bool = false;
    type Int = __m512i;
    type Float = __m512;

    #[inline(always)]
    unsafe fn load(values: *const f32) -> __m512 {
        _mm512_loadu_ps(values)
    }

    #[inline(always)]
    unsafe fn pair(pair: *const f32) -> __m512 {
        _mm512_castpd_ps(_mm512_set1_pd(pair.cast::<f64>().read_unaligned()))
    }

    #[inline(always)]
    unsafe fn load_halves(values: *const u16) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(values.cast()))
    }

    #[inline(always)]
    unsafe fn pair_halves(pair: *const u16) -> __m512 {
        _mm512_cvtph_ps(_mm256_set1_epi32(pair.cast::<i32>().read_unaligned()))
    }

    #[inline(always)]
    unsafe fn codes(codes: *const u8) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(codes.cast())))
    }

    #[inline(always)]
    unsafe fn signed_codes(codes: *const i8) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(codes.cast())))
    }

    #[inline(always)]
    unsafe fn octet(values: *const f32, _part: usize) -> __m512 {
        _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(values.cast())))
    }

    #[inline(always)]
    unsafe fn eighths(factors: *const f32) -> __m512 {
        let low = _mm256_castps_pd(_mm256_set1_ps(*factors));
        let high = _mm256_castps_pd(_mm256_set1_ps(*factors.add(1)));
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_castpd256_pd512(low), high))
    }

    #[inline(always)]
    unsafe fn splat(value: f32) -> __m512 {
        _mm512_set1_ps(value)
    }

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }

    #[inline(always)]
    unsafe fn accumulate(acc: __m512, sums: __m512i, x_scale: __m512, w_scale: __m512) -> __m512 {
        _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums), x_scale), w_scale, acc)
    }

    #[inline(always)]
    unsafe fn prefetch(line: *const u8) {
        _mm_prefetch::<_MM_HINT_T0>(line.cast());
    }

    #[inline(always)]
    unsafe fn fused(acc: __m512, a: __m512, b: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, acc)
    }

    #[inline(always)]
    unsafe fn store(values: __m512, to: *mut f32) {
        _mm512_storeu_ps(to, values)
    }

    #[inline(always)]
    unsafe fn sum_lanes_of(lanes: &[[f32; LANES]], sums: &mut [f32]) {
        super::avx2::sum_lanes_of_avx2(lanes, sums)
    }
}

impl NibbleWeights for Avx512 {
    type Nibbles = __m512i;
    type Partial = __m512i;

    #[inline(always)]
    unsafe fn zero_partial() -> __m512i {
        _mm512_setzero_si512()
    }

    #[inline(always)]
    unsafe fn flush(partial: __m512i) -> __m512i {
        partial
    }

    #[inline(always)]
    unsafe fn nibbles(packed: *const u8) -> (__m512i, __m512i) {
        let bytes = _mm512_loadu_si512(packed.cast());
        let mask = _mm512_set1_epi8(0x0F);
        (_mm512_and_si512(bytes, mask), _mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask))
    }

    /// The 32 bytes hold the vector's first half low and its second half high.
    #[inline(always)]
    unsafe fn tail_nibbles(packed: *const u8, _part: usize) -> __m512i {
        let bytes = _mm256_loadu_si256(packed.cast());
        let mask = _mm256_set1_epi8(0x0F);
        let (low, high) = (_mm256_and_si256(bytes, mask), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask));
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high)
    }

    #[inline(always)]
    unsafe fn dot_nibbles(sums: __m512i, weights: __m512i, x: *const i8) -> __m512i {
        _mm512_dpbusd_epi32(sums, weights, _mm512_loadu_si512(x.cast()))
    }

    #[inline(always)]
    unsafe fn zero_sums() -> __m512i {
        _mm512_setzero_si512()
    }

    #[inline(always)]
    unsafe fn six_bits(packed: *const u8, high: *const u8, step: usize) -> (__m512i, __m512i) {
        let (low, high_bits) = (_mm512_loadu_si512(packed.cast()), _mm512_loadu_si512(high.cast()));
        let (nibble, top) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        let (first, second) = if step == 0 {
            (_mm512_slli_epi16(high_bits, 4), high_bits)
        } else {
            (_mm512_slli_epi16(high_bits, 2), _mm512_srli_epi16(high_bits, 2))
        };
        (
            _mm512_or_si512(_mm512_and_si512(low, nibble), _mm512_and_si512(first, top)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), nibble), _mm512_and_si512(second, top)),
        )
    }

    #[inline(always)]
    unsafe fn dot_six(sums: __m512i, (first, second): (__m512i, __m512i), x: *const i8) -> __m512i {
        let sums = _mm512_dpbusd_epi32(sums, first, _mm512_loadu_si512(x.cast()));
        _mm512_dpbusd_epi32(sums, second, _mm512_loadu_si512(x.add(VECTOR).cast()))
    }
}

/// [`narrow::multiply`] of code `C` on Avx512 in a function of its own (see [`narrow::Q4`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline(never)]
unsafe fn multiply_apart<C: Code<Avx512>>(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    crate::frame::align_frame!();
    narrow::multiply::<Avx512, C>(w, x, out, rows)
}
