//! Q8_0 matrix multiplication whose cost grows slowly with the number of input rows.
//!
//! Weights hold 8 bits per value and one f32 scale per block of 32 values (Q8_0); input
//! rows are quantized the same way at run time. A tile of weight rows is multiplied with
//! every input row while it sits in L1, so a tree pass over k nodes streams the weights
//! from memory once instead of k times, and the integer products are summed over four
//! vectors before one conversion to float. On a CPU this is what makes verifying a draft
//! tree cost little more than decoding one token.
//!
//! Layout: a row is cut into [`Span`]s of 256 values (a 64-value tail where the width is
//! not a multiple of 256). Within a span the values are reordered so that 32-bit lane `j`
//! of every 64-byte vector holds four values of block `j % blocks`: the lane then sums
//! integer products of one block across the whole span, and a vector of the span's block
//! scales broadcast (`[s0 … s7, s0 … s7]`) matches the lanes.
//!
//! Exactness: every output is a pure function of its weight row and its input row. The
//! products are exact integer sums; the float steps (per span and lane: convert, multiply
//! by the input's block scale, fused multiply-add of the weight's block scale into the
//! lane's accumulator; then a fixed tree over the 16 lanes) run in the same order
//! whatever the tile or batch shape, so a token's result never depends on the others.
//!
//! The kernel uses AVX-512 VNNI (`vpdpbusd`: unsigned × signed bytes). Weights are stored
//! biased by +128 as unsigned bytes, and the bias is removed exactly by starting each
//! lane's integer sum at −128 × (the sum of the input bytes it meets).

use std::ops::Range;

/// Values per quantization block.
const BLOCK: usize = 32;
/// Bytes per vector.
const VECTOR: usize = 64;
/// 32-bit lanes per vector.
const LANES: usize = VECTOR / 4;
/// Vectors per full span.
const SPAN_VECTORS: usize = 8;

/// Weights `[rows, width]` in the kernel's layout (`width` padded to a multiple of 64).
pub struct Q8Matrix {
    rows: usize,
    cols: usize,
    width: usize,
    /// Quantized values + 128, reordered within spans.
    biased: Vec<u8>,
    /// One scale per block, row-major.
    scales: Vec<f32>,
}

/// Input rows quantized for [`Q8Matrix::multiply`].
pub struct QuantizedRows {
    rows: usize,
    width: usize,
    /// Quantized values, reordered like the weights.
    quants: Vec<i8>,
    scales: Vec<f32>,
    /// Per span and lane: −128 × the sum of the values the lane meets in the span.
    bias_corrections: Vec<i32>,
}

/// Consecutive values of a row that share lanes: `vectors` × 64 values from `start`.
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    vectors: usize,
}

impl Span {
    fn blocks(self) -> usize {
        2 * self.vectors
    }

    /// Position in the span's reordered bytes of value `e` of block `b` (both in the span).
    fn position(self, b: usize, e: usize) -> usize {
        let vector = (e / 4) % self.vectors;
        let lane = b + self.blocks() * (e / (4 * self.vectors));
        vector * VECTOR + lane * 4 + e % 4
    }
}

/// The spans of a row `width` values wide, in order.
fn spans(width: usize) -> impl Iterator<Item = Span> {
    let full = width / (SPAN_VECTORS * VECTOR);
    let tail = (width % (SPAN_VECTORS * VECTOR)) / VECTOR;
    (0..full)
        .map(|s| Span { start: s * SPAN_VECTORS * VECTOR, vectors: SPAN_VECTORS })
        .chain((0..tail).map(move |t| Span { start: full * SPAN_VECTORS * VECTOR + t * VECTOR, vectors: 1 }))
}

/// Whether this CPU runs the kernel.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl Q8Matrix {
    /// Quantizes row-major f32 weights `[rows, cols]`.
    pub fn quantize(weights: &[f32], rows: usize, cols: usize) -> Q8Matrix {
        assert_eq!(weights.len(), rows * cols, "weights must be rows × cols");
        let width = cols.next_multiple_of(VECTOR);
        let mut biased = Vec::with_capacity(rows * width);
        let mut scales = Vec::with_capacity(rows * width / BLOCK);
        let mut quants = vec![0i8; width];
        for row in weights.chunks_exact(cols) {
            quantize_row(row, &mut quants, &mut scales);
            biased.extend(quants.iter().map(|&q| (q as i16 + 128) as u8));
        }
        Q8Matrix { rows, cols, width, biased, scales }
    }

    /// Quantizes `m` input rows of `cols` values for [`Self::multiply`].
    pub fn quantize_input(&self, x: &[f32], m: usize) -> QuantizedRows {
        QuantizedRows::new(x, m, self.cols, self.width)
    }

    /// Products of the weight rows `rows` with every input row, column-major:
    /// `out[(j - rows.start) * m + r] = W[j] · x[r]`. Disjoint row ranges can run in parallel.
    pub fn multiply(&self, input: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
        assert_eq!(input.width, self.width, "input quantized for another matrix");
        assert!(rows.end <= self.rows && out.len() == rows.len() * input.rows, "output range out of bounds");
        #[cfg(target_arch = "x86_64")]
        if available() {
            // SAFETY: the CPU has the features the kernel is compiled for (checked above),
            // and the asserts above keep every access in bounds.
            unsafe { avx512::multiply(self, input, out, rows) };
            return;
        }
        reference::multiply(self, input, out, rows);
    }
}

impl QuantizedRows {
    fn new(x: &[f32], m: usize, cols: usize, width: usize) -> QuantizedRows {
        assert_eq!(x.len(), m * cols, "input must be m × cols");
        let mut rows = QuantizedRows {
            rows: m,
            width,
            quants: vec![0; m * width],
            scales: Vec::with_capacity(m * width / BLOCK),
            bias_corrections: Vec::with_capacity(m * spans(width).count() * LANES),
        };
        rows.fill(x, cols);
        rows
    }

    /// Index in `bias_corrections` where input row `r`'s spans start.
    fn corrections_start(&self, r: usize) -> usize {
        r * (self.bias_corrections.len() / self.rows)
    }

    fn fill(&mut self, x: &[f32], cols: usize) {
        for (row, quants) in x.chunks_exact(cols).zip(self.quants.chunks_exact_mut(self.width)) {
            quantize_row(row, quants, &mut self.scales);
            for span in spans(self.width) {
                let bytes = &quants[span.start..][..span.vectors * VECTOR];
                self.bias_corrections.extend(bias_corrections(bytes));
            }
        }
    }
}

/// Per lane of a span's input bytes: −128 × the sum of the bytes the lane meets.
fn bias_corrections(bytes: &[i8]) -> [i32; LANES] {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { avx512::bias_corrections(bytes) };
    }
    bias_corrections_portable(bytes)
}

fn bias_corrections_portable(bytes: &[i8]) -> [i32; LANES] {
    std::array::from_fn(|lane| {
        let sum: i32 = bytes.chunks_exact(VECTOR).flat_map(|v| &v[lane * 4..][..4]).map(|&q| q as i32).sum();
        -128 * sum
    })
}

/// Quantizes `row` (zero-padded to `quants.len()`) in blocks of 32, appending one scale
/// per block (`scale = max|v| / 127`, `q = round(v / scale)`), and writes the values in
/// the spans' order (see [`Span::position`]).
fn quantize_row(row: &[f32], quants: &mut [i8], scales: &mut Vec<f32>) {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: the CPU has the features the function is compiled for.
        unsafe { avx512::quantize_row(row, quants, scales) };
        return;
    }
    quantize_row_portable(row, quants, scales);
}

fn quantize_row_portable(row: &[f32], quants: &mut [i8], scales: &mut Vec<f32>) {
    let mut block = [0f32; BLOCK];
    let mut q = [0i8; BLOCK];
    for span in spans(quants.len()) {
        let out = &mut quants[span.start..][..span.vectors * VECTOR];
        for b in 0..span.blocks() {
            let start = span.start + b * BLOCK;
            let values = &row[start.min(row.len())..(start + BLOCK).min(row.len())];
            block[..values.len()].copy_from_slice(values);
            block[values.len()..].fill(0.0);
            let max = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = max / 127.0;
            let inverse = if scale == 0.0 { 0.0 } else { 1.0 / scale };
            for (q, v) in q.iter_mut().zip(&block) {
                *q = (v * inverse).round_ties_even().clamp(-127.0, 127.0) as i8;
            }
            for (four, e) in q.chunks_exact(4).zip((0..BLOCK).step_by(4)) {
                out[span.position(b, e)..][..4].copy_from_slice(four);
            }
            scales.push(scale);
        }
    }
}

/// Sums 16 lanes in a fixed tree order (halves added pairwise).
#[inline(always)]
fn sum_lanes(mut lanes: [f32; LANES]) -> f32 {
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            lanes[i] += lanes[i + n];
        }
    }
    lanes[0]
}

/// The kernel's arithmetic written out lane by lane: the definition the vector code must
/// match bit for bit, and the fallback where the vector code cannot run.
mod reference {
    use super::*;

    pub(super) fn multiply(w: &Q8Matrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
        let m = x.rows;
        for (j, row) in rows.clone().enumerate() {
            for r in 0..m {
                out[j * m + r] = dot(w, row, x, r);
            }
        }
    }

    fn dot(w: &Q8Matrix, row: usize, x: &QuantizedRows, r: usize) -> f32 {
        let mut acc = [0f32; LANES];
        for (index, span) in spans(w.width).enumerate() {
            let len = span.vectors * VECTOR;
            let wq = &w.biased[row * w.width + span.start..][..len];
            let xq = &x.quants[r * x.width + span.start..][..len];
            let corrections = &x.bias_corrections[x.corrections_start(r) + index * LANES..][..LANES];
            let w_scales = &w.scales[(row * w.width + span.start) / BLOCK..][..span.blocks()];
            let x_scales = &x.scales[(r * x.width + span.start) / BLOCK..][..span.blocks()];
            for lane in 0..LANES {
                let mut exact = corrections[lane];
                for v in 0..span.vectors {
                    let at = v * VECTOR + lane * 4;
                    exact += (0..4).map(|i| wq[at + i] as i32 * xq[at + i] as i32).sum::<i32>();
                }
                let block = lane % span.blocks();
                let scaled = exact as f32 * x_scales[block];
                acc[lane] = scaled.mul_add(w_scales[block], acc[lane]);
            }
        }
        sum_lanes(acc)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;
    use std::arch::x86_64::*;

    /// Weight rows per tile and input rows per group: 4 × 4 accumulators stay in registers
    /// (2 × 8 when a pass has more than four rows).
    const TILE_ROWS: usize = 4;
    const GROUP: usize = 4;

    /// [`quantize_row_portable`] a block (two vectors) at a time: the same maximum, scale,
    /// rounding (to nearest, ties to even) and clamping, so the same bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn quantize_row(row: &[f32], quants: &mut [i8], scales: &mut Vec<f32>) {
        let mut block = [0f32; BLOCK];
        let mut q = [0i8; BLOCK];
        for span in spans(quants.len()) {
            let out = &mut quants[span.start..][..span.vectors * VECTOR];
            for b in 0..span.blocks() {
                let start = span.start + b * BLOCK;
                let values = &row[start.min(row.len())..(start + BLOCK).min(row.len())];
                block[..values.len()].copy_from_slice(values);
                block[values.len()..].fill(0.0);
                let halves = [_mm512_loadu_ps(block.as_ptr()), _mm512_loadu_ps(block.as_ptr().add(LANES))];
                let max = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(halves[0]), _mm512_abs_ps(halves[1])));
                let scale = max / 127.0;
                let inverse = _mm512_set1_ps(if scale == 0.0 { 0.0 } else { 1.0 / scale });
                for (half, bytes) in halves.into_iter().zip(q.chunks_exact_mut(LANES)) {
                    let rounded = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                        _mm512_mul_ps(half, inverse),
                    );
                    let clamped = _mm512_min_ps(_mm512_max_ps(rounded, _mm512_set1_ps(-127.0)), _mm512_set1_ps(127.0));
                    _mm_storeu_si128(bytes.as_mut_ptr().cast(), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(clamped)));
                }
                for (four, e) in q.chunks_exact(4).zip((0..BLOCK).step_by(4)) {
                    out[span.position(b, e)..][..4].copy_from_slice(four);
                }
                scales.push(scale);
            }
        }
    }

    /// [`super::bias_corrections`] with one `vpdpbusd` by a vector of ones per vector.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn bias_corrections(bytes: &[i8]) -> [i32; LANES] {
        let mut sums = _mm512_setzero_si512();
        for vector in bytes.chunks_exact(VECTOR) {
            sums = _mm512_dpbusd_epi32(sums, _mm512_set1_epi8(1), _mm512_loadu_si512(vector.as_ptr().cast()));
        }
        let mut lanes = [0i32; LANES];
        _mm512_storeu_si512(lanes.as_mut_ptr().cast(), _mm512_mullo_epi32(sums, _mm512_set1_epi32(-128)));
        lanes
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn multiply(w: &Q8Matrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
        let m = x.rows;
        let mut tile_start = rows.start;
        while tile_start < rows.end {
            let tile = (rows.end - tile_start).min(TILE_ROWS);
            let mut r = 0;
            while r < m {
                let group = (m - r).min(GROUP);
                let at = Block { row0: tile_start, r0: r, column: tile_start - rows.start };
                // Up to 16 weight vectors held in registers: two weight rows at a time
                // with up to four input rows, one with more.
                match (tile, group) {
                    (4, 8) => rows_by::<1, 8>(w, x, at, out),
                    (4, 7) => rows_by::<1, 7>(w, x, at, out),
                    (4, 6) => rows_by::<1, 6>(w, x, at, out),
                    (4, 5) => rows_by::<1, 5>(w, x, at, out),
                    (4, 4) => rows_by::<2, 4>(w, x, at, out),
                    (4, 3) => rows_by::<2, 3>(w, x, at, out),
                    (4, 2) => rows_by::<2, 2>(w, x, at, out),
                    (4, 1) => rows_by::<2, 1>(w, x, at, out),
                    (t, g) => {
                        for j in 0..t {
                            for i in 0..g {
                                let one = Block { row0: at.row0 + j, r0: at.r0 + i, column: at.column + j };
                                block::<1, 1>(w, x, one, out);
                            }
                        }
                    }
                }
                r += group;
            }
            tile_start += tile;
        }
    }

    /// A whole tile of weight rows, `R` at a time, times `G` input rows.
    #[inline(always)]
    unsafe fn rows_by<const R: usize, const G: usize>(w: &Q8Matrix, x: &QuantizedRows, at: Block, out: &mut [f32]) {
        for j in (0..TILE_ROWS).step_by(R) {
            block::<R, G>(w, x, Block { row0: at.row0 + j, column: at.column + j, ..at }, out);
        }
    }

    /// Where a block of products goes: weight rows from `row0`, input rows from `r0`,
    /// written to `out[(column + j) * m + r0 + i]`.
    #[derive(Clone, Copy)]
    struct Block {
        row0: usize,
        r0: usize,
        column: usize,
    }

    /// `R` weight rows times `G` input rows.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn block<const R: usize, const G: usize>(w: &Q8Matrix, x: &QuantizedRows, at: Block, out: &mut [f32]) {
        let m = x.rows;
        let rows = Operands::<R, G> {
            w_rows: std::array::from_fn(|j| w.biased.as_ptr().add((at.row0 + j) * w.width)),
            w_scales: std::array::from_fn(|j| w.scales.as_ptr().add((at.row0 + j) * w.width / BLOCK)),
            x_rows: std::array::from_fn(|i| x.quants.as_ptr().add((at.r0 + i) * x.width)),
            x_scales: std::array::from_fn(|i| x.scales.as_ptr().add((at.r0 + i) * x.width / BLOCK)),
            x_corrections: std::array::from_fn(|i| x.bias_corrections.as_ptr().add(x.corrections_start(at.r0 + i))),
            // The first group of input rows also pulls the next tile's weights into the
            // cache, so that memory keeps streaming while the other groups compute from L1.
            next_tile: (at.r0 == 0 && at.row0 + TILE_ROWS + R <= w.rows).then_some(TILE_ROWS * w.width),
        };
        let mut acc = [[_mm512_setzero_ps(); G]; R];
        for (index, span) in spans(w.width).enumerate() {
            if span.vectors == SPAN_VECTORS {
                rows.span::<SPAN_VECTORS>(&mut acc, index, span.start);
            } else {
                rows.span::<1>(&mut acc, index, span.start);
            }
        }
        for (j, row_acc) in acc.iter().enumerate() {
            for (i, lanes) in row_acc.iter().enumerate() {
                let mut values = [0f32; LANES];
                _mm512_storeu_ps(values.as_mut_ptr(), *lanes);
                out[(at.column + j) * m + at.r0 + i] = sum_lanes(values);
            }
        }
    }

    /// Where the rows of a block start: `R` weight rows and `G` input rows.
    struct Operands<const R: usize, const G: usize> {
        w_rows: [*const u8; R],
        w_scales: [*const f32; R],
        x_rows: [*const i8; G],
        x_scales: [*const f32; G],
        x_corrections: [*const i32; G],
        /// Distance to the weights to prefetch, if this block prefetches.
        next_tile: Option<usize>,
    }

    impl<const R: usize, const G: usize> Operands<R, G> {
        /// Adds the products of span `index` (`V` vectors from value `offset`) to `acc`.
        /// The span's weight vectors are loaded once and kept in registers for every input row.
        #[inline(always)]
        unsafe fn span<const V: usize>(&self, acc: &mut [[__m512; G]; R], index: usize, offset: usize) {
            if let Some(distance) = self.next_tile {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    fn product(w: &Q8Matrix, x: &[f32], m: usize, simd: bool) -> Vec<f32> {
        let input = w.quantize_input(x, m);
        let mut out = vec![0f32; m * w.rows];
        if simd {
            w.multiply(&input, &mut out, 0..w.rows);
        } else {
            reference::multiply(w, &input, &mut out, 0..w.rows);
        }
        out
    }

    #[test]
    fn vector_kernel_matches_the_reference_bit_for_bit() {
        if !available() {
            eprintln!("skipped: this CPU lacks AVX-512 VNNI");
            return;
        }
        for (rows, cols, m) in [(7, 100, 1), (9, 576, 5), (13, 64, 9), (4, 1536, 4)] {
            let w = Q8Matrix::quantize(&values(rows * cols, 3), rows, cols);
            let x = values(m * cols, 11);
            assert_eq!(product(&w, &x, m, true), product(&w, &x, m, false), "{rows}×{cols}, m = {m}");
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")] // the AVX-512 code exists only there
    fn vector_quantization_matches_the_portable_code() {
        if !available() {
            eprintln!("skipped: this CPU lacks AVX-512 VNNI");
            return;
        }
        for cols in [100, 576, 1536, 1088] {
            let mut row = values(cols, 7);
            row[..BLOCK].fill(0.0);
            row[BLOCK] = 3.5;
            let width = cols.next_multiple_of(VECTOR);
            let (mut plain, mut fast) = (vec![0i8; width], vec![0i8; width]);
            let (mut plain_scales, mut fast_scales) = (Vec::new(), Vec::new());
            quantize_row_portable(&row, &mut plain, &mut plain_scales);
            // SAFETY: the CPU has the features (checked above).
            unsafe { avx512::quantize_row(&row, &mut fast, &mut fast_scales) };
            assert_eq!((&plain, &plain_scales), (&fast, &fast_scales), "{cols} columns");
            for span in spans(width) {
                let bytes = &plain[span.start..][..span.vectors * VECTOR];
                let expected = bias_corrections_portable(bytes);
                assert_eq!(bias_corrections(bytes), expected, "{cols} columns, span at {}", span.start);
            }
        }
    }

    #[test]
    fn each_output_row_is_independent_of_the_batch() {
        let (rows, cols, m) = (11, 320, 7);
        let w = Q8Matrix::quantize(&values(rows * cols, 5), rows, cols);
        let x = values(m * cols, 17);
        let together = product(&w, &x, m, true);
        for r in 0..m {
            let alone = product(&w, &x[r * cols..(r + 1) * cols], 1, true);
            let column: Vec<f32> = (0..rows).map(|j| together[j * m + r]).collect();
            assert_eq!(alone, column, "input row {r}");
        }
    }

    #[test]
    fn product_is_close_to_the_f32_product() {
        let (rows, cols, m) = (6, 200, 3);
        let wf = values(rows * cols, 23);
        let x = values(m * cols, 29);
        let got = product(&Q8Matrix::quantize(&wf, rows, cols), &x, m, true);
        for j in 0..rows {
            for r in 0..m {
                let exact: f32 = (0..cols).map(|c| wf[j * cols + c] * x[r * cols + c]).sum();
                let err = (got[j * m + r] - exact).abs();
                assert!(err < 0.05 + 0.01 * exact.abs(), "row {j}, input {r}: {} vs {exact}", got[j * m + r]);
            }
        }
    }

    #[test]
    fn zero_rows_give_zero() {
        let w = Q8Matrix::quantize(&[0.0; 64], 1, 64);
        assert_eq!(product(&w, &values(64, 1), 1, true), [0.0]);
    }
}
