//! The kernel on registers narrower than a 64-byte vector (AVX2's 32 bytes, NEON's 16).
//!
//! A vector's 16 lanes are cut into [`Engine::PARTS`] registers, and each part is summed
//! over the whole row before the next: part `p` holds lanes `p·L … p·L + L − 1`
//! (`L = 16 / PARTS`) of every vector, its block scales and its bias corrections. Lanes
//! never mix until the final fixed-order sum, so the result is the reference's, bit for
//! bit, whatever the register width.

use super::*;

/// One instruction set's operations on a part of a vector.
pub(super) trait Engine {
    /// Registers per 64-byte vector.
    const PARTS: usize;
    /// Exact 32-bit integer sums, one per lane.
    type Int: Copy;
    /// f32 values, one per lane.
    type Float: Copy;
    /// A part of a weight vector prepared for [`Engine::dot`].
    type Weights: Copy;
    /// Whether [`Engine::Weights`] takes two registers: then a block of four input rows
    /// meets one weight row at a time, or the registers run out (measured).
    const PAIRED_WEIGHTS: bool = false;

    /// Loads a part of a weight vector (biased bytes) from `biased`.
    unsafe fn weights(biased: *const u8) -> Self::Weights;
    /// Where a lane's integer sum starts, given the lane's bias corrections: at the
    /// corrections for engines that multiply biased weights, at zero for the others.
    unsafe fn start(corrections: *const i32) -> Self::Int;
    /// Adds to each lane the products of its four weight bytes with the input bytes at `x`.
    unsafe fn dot(sums: Self::Int, weights: Self::Weights, x: *const i8) -> Self::Int;
    /// Loads the lanes' f32 values from `values`.
    unsafe fn load(values: *const f32) -> Self::Float;
    /// `[s0, s1, s0, s1, …]` from `pair`.
    unsafe fn pair(pair: *const f32) -> Self::Float;
    unsafe fn zero() -> Self::Float;
    /// `acc + (sums as f32 × x_scale) × w_scale`, the last step fused.
    unsafe fn accumulate(acc: Self::Float, sums: Self::Int, x_scale: Self::Float, w_scale: Self::Float) -> Self::Float;
    unsafe fn store(values: Self::Float, to: *mut f32);
}

/// [`Q8Matrix::multiply`] on engine `E`. The caller runs it with `E`'s target features.
#[inline(always)]
pub(super) unsafe fn multiply<E: Engine>(w: &Q8Matrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    for (tile, group, at) in blocks(rows, x.rows) {
        match (tile, group) {
            (TILE_ROWS, 4) if E::PAIRED_WEIGHTS => {
                for at in at.tile_by::<1>() {
                    block::<E, 1, 4>(w, x, at, out);
                }
            }
            (TILE_ROWS, 4) => {
                for at in at.tile_by::<2>() {
                    block::<E, 2, 4>(w, x, at, out);
                }
            }
            (TILE_ROWS, 3) => {
                for at in at.tile_by::<1>() {
                    block::<E, 1, 3>(w, x, at, out);
                }
            }
            (TILE_ROWS, 2) => {
                for at in at.tile_by::<2>() {
                    block::<E, 2, 2>(w, x, at, out);
                }
            }
            (TILE_ROWS, 1) => {
                for at in at.tile_by::<2>() {
                    block::<E, 2, 1>(w, x, at, out);
                }
            }
            _ => {
                for at in at.one_by_one(tile, group) {
                    block::<E, 1, 1>(w, x, at, out);
                }
            }
        }
    }
}

/// `R` weight rows times `G` input rows.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indexed loops keep the arrays in registers (see below)
unsafe fn block<E: Engine, const R: usize, const G: usize>(
    w: &Q8Matrix,
    x: &QuantizedRows,
    at: Block,
    out: &mut [f32],
) {
    let lanes_per_part = LANES / E::PARTS;
    let bytes_per_part = VECTOR / E::PARTS;
    let w_rows: [*const u8; R] = std::array::from_fn(|j| w.biased.as_ptr().add((at.row0 + j) * w.width));
    let w_scales: [*const f32; R] = std::array::from_fn(|j| w.scales.as_ptr().add((at.row0 + j) * w.width / BLOCK));
    let x_rows: [*const i8; G] = std::array::from_fn(|i| x.quants.as_ptr().add((at.r0 + i) * x.width));
    let x_scales: [*const f32; G] = std::array::from_fn(|i| x.scales.as_ptr().add((at.r0 + i) * x.width / BLOCK));
    let x_corrections: [*const i32; G] =
        std::array::from_fn(|i| x.bias_corrections.as_ptr().add(x.corrections_start(at.r0 + i)));

    let mut lanes = [[[0f32; LANES]; G]; R];
    for part in 0..E::PARTS {
        let mut acc = [[E::zero(); G]; R];
        for (index, span) in spans(w.width).enumerate() {
            // Loops over constant ranges with indices, not `array::from_fn` (its closure
            // would miss the kernel's target features) nor iterator adaptors over arrays:
            // unrolled, these keep every sum and weight in a register.
            let corrections = index * LANES + part * lanes_per_part;
            let mut sums = [[E::start(x_corrections[0].add(corrections)); G]; R];
            for i in 1..G {
                let start = E::start(x_corrections[i].add(corrections));
                for j in 0..R {
                    sums[j][i] = start;
                }
            }
            for v in 0..span.vectors {
                let offset = span.start + v * VECTOR + part * bytes_per_part;
                let mut weights = [E::weights(w_rows[0].add(offset)); R];
                for j in 1..R {
                    weights[j] = E::weights(w_rows[j].add(offset));
                }
                for i in 0..G {
                    let input = x_rows[i].add(offset);
                    for j in 0..R {
                        sums[j][i] = E::dot(sums[j][i], weights[j], input);
                    }
                }
            }
            let mut x_scale = [E::zero(); G];
            for i in 0..G {
                x_scale[i] = part_scales::<E>(x_scales[i], span, part);
            }
            for j in 0..R {
                let w_scale = part_scales::<E>(w_scales[j], span, part);
                for i in 0..G {
                    acc[j][i] = E::accumulate(acc[j][i], sums[j][i], x_scale[i], w_scale);
                }
            }
        }
        for (lanes, acc) in lanes.iter_mut().zip(&acc) {
            for (lanes, acc) in lanes.iter_mut().zip(acc) {
                E::store(*acc, lanes.as_mut_ptr().add(part * lanes_per_part));
            }
        }
    }
    for (j, lanes) in lanes.iter().enumerate() {
        for (i, lanes) in lanes.iter().enumerate() {
            out[(at.column + j) * x.rows + at.r0 + i] = sum_lanes(*lanes);
        }
    }
}

/// The block scales of a row's `span` that match the lanes of `part`: lane `l` of a full
/// span holds block `l`, of a one-vector span block `l % 2`.
#[inline(always)]
unsafe fn part_scales<E: Engine>(row_scales: *const f32, span: Span, part: usize) -> E::Float {
    let first = row_scales.add(span.start / BLOCK);
    if span.vectors == SPAN_VECTORS {
        E::load(first.add(part * LANES / E::PARTS))
    } else {
        E::pair(first)
    }
}
