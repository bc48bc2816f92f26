//! The kernel on registers that hold a part of a 64-byte vector (AVX2's 32 bytes, NEON's
//! 16; the whole vector for AVX-512's 4-bit weights).
//!
//! A vector's 16 lanes are cut into [`Engine::PARTS`] registers, and each part is summed
//! over the whole row before the next: part `p` holds lanes `p·L … p·L + L − 1`
//! (`L = 16 / PARTS`) of every vector, its block scales and its bias corrections. Lanes
//! never mix until the final fixed-order sum, so the result is the reference's, bit for
//! bit, whatever the register width. The loop is the same for both weight codes; a
//! [`Code`] says how a code's weights are loaded and multiplied.

use super::*;

/// One instruction set's float operations on a part of a vector.
pub(super) trait Engine {
    /// Registers per 64-byte vector.
    const PARTS: usize;
    /// Most input rows a block meets at once (see [`super::blocks`]): the sums and accumulators
    /// of two weight rows with that many stay in registers.
    const LARGEST_GROUP: usize;
    /// Whether each weight row of a block loads the input bytes afresh (see
    /// [`BlockRows::apart`]): where the products read them straight from memory and the
    /// registers are too few to keep them for the next weight row.
    const RELOAD_INPUTS: bool;
    /// Exact 32-bit integer sums, one per lane.
    type Int: Copy;
    /// f32 values, one per lane.
    type Float: Copy;

    /// Loads the lanes' f32 values from `values`.
    unsafe fn load(values: *const f32) -> Self::Float;
    /// `[s0, s1, s0, s1, …]` from `pair`.
    unsafe fn pair(pair: *const f32) -> Self::Float;
    /// [`Engine::load`] from f16 values (bits).
    unsafe fn load_halves(values: *const u16) -> Self::Float;
    /// [`Engine::pair`] from f16 values (bits).
    unsafe fn pair_halves(pair: *const u16) -> Self::Float;
    /// `[v0 … v7, v0 … v7]` from `values`, the part's lanes of it.
    #[inline(always)]
    unsafe fn octet(values: *const f32, part: usize) -> Self::Float {
        Self::load(values.add(part * (LANES / Self::PARTS) % 8))
    }
    /// A part's lanes' block codes, one byte each from `codes`, as f32.
    unsafe fn codes(codes: *const u8) -> Self::Float;
    /// [`Engine::codes`] of signed bytes.
    unsafe fn signed_codes(codes: *const i8) -> Self::Float;
    /// Lane `l` of a whole vector gets `factors[l / 8]` ([`CODED_BLOCKS`] lanes per factor);
    /// a part's lanes start at its own factor. Parts of at most eight lanes share one.
    #[inline(always)]
    unsafe fn eighths(factors: *const f32) -> Self::Float {
        Self::splat(*factors)
    }
    unsafe fn splat(value: f32) -> Self::Float;
    unsafe fn zero() -> Self::Float;
    unsafe fn mul(a: Self::Float, b: Self::Float) -> Self::Float;
    /// `acc + (sums as f32 × x_scale) × w_scale`, the last step fused.
    unsafe fn accumulate(acc: Self::Float, sums: Self::Int, x_scale: Self::Float, w_scale: Self::Float) -> Self::Float;
    /// Asks for the cache line at `line` ahead of its use (a no-op where the hardware
    /// prefetchers suffice).
    unsafe fn prefetch(line: *const u8);
    /// `acc + a × b`, fused.
    unsafe fn fused(acc: Self::Float, a: Self::Float, b: Self::Float) -> Self::Float;
    unsafe fn store(values: Self::Float, to: *mut f32);

    /// [`sum_lanes`] of each array of lanes, in its order, into `sums`.
    #[inline(always)]
    unsafe fn sum_lanes_of(lanes: &[[f32; LANES]], sums: &mut [f32]) {
        for (lanes, sum) in lanes.iter().zip(sums) {
            *sum = sum_lanes(*lanes);
        }
    }
}

/// Multiplying Q8_0 weights (biased bytes) on an engine.
pub(super) trait ByteWeights: Engine {
    /// A part of a weight vector prepared for [`ByteWeights::dot`].
    type Bytes: Copy;
    /// Whether [`ByteWeights::Bytes`] takes two registers: then a block of four input
    /// rows meets one weight row at a time, or the registers run out (measured).
    const PAIRED_WEIGHTS: bool = false;

    /// Loads a part of a weight vector (biased bytes) from `biased`.
    unsafe fn bytes(biased: *const u8) -> Self::Bytes;
    /// Where a lane's integer sum starts, given the lane's bias corrections: at the
    /// corrections for engines that multiply biased weights, at zero for the others.
    unsafe fn start(corrections: *const i32) -> Self::Int;
    /// Adds to each lane the products of its four weight bytes with the input bytes at `x`.
    unsafe fn dot(sums: Self::Int, weights: Self::Bytes, x: *const i8) -> Self::Int;
}

/// Multiplying 4-bit weights (values 0…15) on an engine.
pub(super) trait NibbleWeights: Engine {
    /// A part of a weight vector as bytes 0…15.
    type Nibbles: Copy;
    /// Exact sums of a span's products, in whatever form adds them fastest until the
    /// span ends (16-bit where they cannot overflow there).
    type Partial: Copy;

    unsafe fn zero_partial() -> Self::Partial;
    /// The lanes' 32-bit sums of a span's partial sums.
    unsafe fn flush(partial: Self::Partial) -> Self::Int;
    /// The low and the high nibbles of the part-sized bytes at `packed`.
    unsafe fn nibbles(packed: *const u8) -> (Self::Nibbles, Self::Nibbles);
    /// Adds the products of the weights with the input bytes at `x`, four to each lane.
    unsafe fn dot_nibbles(partial: Self::Partial, weights: Self::Nibbles, x: *const i8) -> Self::Partial;

    unsafe fn zero_sums() -> Self::Int;
    /// The 6-bit values (0…63) of a part of two vectors: low nibbles from the packed pair at
    /// `packed`, high bits from the vector of high bits at `high` (see [`Span::high`]); the
    /// first two vectors of a 6-bit span at `step` 0, the last two at 1.
    unsafe fn six_bits(packed: *const u8, high: *const u8, step: usize) -> (Self::Nibbles, Self::Nibbles);
    /// Adds the products of two vectors of 6-bit weights with the input bytes at `x` (and
    /// the vector after it) to each lane's 32-bit sum.
    unsafe fn dot_six(sums: Self::Int, weights: (Self::Nibbles, Self::Nibbles), x: *const i8) -> Self::Int;

    /// Part `part` of a one-vector span packed at `packed` (its 32 bytes hold values
    /// `0…31` low and `32…63` high).
    #[inline(always)]
    unsafe fn tail_nibbles(packed: *const u8, part: usize) -> Self::Nibbles {
        let halves = Self::PARTS / 2;
        let (low, high) = Self::nibbles(packed.add((part % halves) * (VECTOR / Self::PARTS)));
        if part < halves {
            low
        } else {
            high
        }
    }
}

/// How a weight code stores its block values (scales, mins), and how a span's lanes load them.
pub(super) trait Stored {
    /// Where one row's values start.
    type Row: Copy;
    /// The values of a part's lanes in a full span: the part's lane `l` holds block
    /// `first + l` (row-relative).
    unsafe fn lanes<E: Engine>(row: Self::Row, first: usize) -> E::Float;
    /// `[v(first), v(first + 1), …]` repeated for a one-vector span.
    unsafe fn pair<E: Engine>(row: Self::Row, first: usize) -> E::Float;
    /// The values of a part's lanes in a span of four vectors (6-bit weights), whose first
    /// block is `first`.
    unsafe fn four_vectors<E: Engine>(row: Self::Row, first: usize, part: usize) -> E::Float;
}

/// f32 values (Q8_0's scales).
impl Stored for f32 {
    type Row = *const f32;

    #[inline(always)]
    unsafe fn lanes<E: Engine>(row: *const f32, first: usize) -> E::Float {
        E::load(row.add(first))
    }

    #[inline(always)]
    unsafe fn pair<E: Engine>(row: *const f32, first: usize) -> E::Float {
        E::pair(row.add(first))
    }

    /// Lane `l` holds block `first + l mod 8` (the input's scales).
    #[inline(always)]
    unsafe fn four_vectors<E: Engine>(row: *const f32, first: usize, part: usize) -> E::Float {
        E::octet(row.add(first), part)
    }
}

/// The forms of [`BlockValues`] a 4-bit code reads.
pub(super) trait FourBitStored: Stored {
    /// Where the values of the row whose first block is `first` start.
    fn row(values: &BlockValues, first: usize) -> Self::Row;
}

/// f16 values (bits), as Q4_0 and Q4_1 store them.
impl Stored for u16 {
    type Row = *const u16;

    #[inline(always)]
    unsafe fn lanes<E: Engine>(row: *const u16, first: usize) -> E::Float {
        E::load_halves(row.add(first))
    }

    #[inline(always)]
    unsafe fn pair<E: Engine>(row: *const u16, first: usize) -> E::Float {
        E::pair_halves(row.add(first))
    }

    unsafe fn four_vectors<E: Engine>(_: *const u16, _: usize, _: usize) -> E::Float {
        unreachable!("4-bit weights have no spans of four vectors")
    }
}

impl FourBitStored for u16 {
    #[inline(always)]
    fn row(values: &BlockValues, first: usize) -> *const u16 {
        let BlockValues::Halves(h) = values else { unreachable!("coded block values read as f16") };
        h[first..].as_ptr()
    }
}

/// Q4_K's super-block factors and block codes ([`BlockValues::Coded`]).
#[derive(Clone, Copy)]
pub(super) struct Coded;

impl Stored for Coded {
    /// The row's first super-block factor and first block code (rows start on super-blocks).
    type Row = (*const f32, *const u8);

    #[inline(always)]
    unsafe fn lanes<E: Engine>((factors, codes): Self::Row, first: usize) -> E::Float {
        E::mul(E::codes(codes.add(first)), E::eighths(factors.add(first / CODED_BLOCKS)))
    }

    #[inline(always)]
    unsafe fn pair<E: Engine>((factors, codes): Self::Row, first: usize) -> E::Float {
        // A one-vector span's two blocks lie in one super-block.
        let pair = [*codes.add(first) as f32, *codes.add(first + 1) as f32];
        E::mul(E::pair(pair.as_ptr()), E::splat(*factors.add(first / CODED_BLOCKS)))
    }

    unsafe fn four_vectors<E: Engine>(_: Self::Row, _: usize, _: usize) -> E::Float {
        unreachable!("4-bit weights have no spans of four vectors")
    }
}

/// Q6_K's scales or mins ([`SubBlockScales`]): per span a factor, per lane a signed code.
#[derive(Clone, Copy)]
pub(super) struct SubBlock;

impl Stored for SubBlock {
    /// The row's first span factor and first lane code.
    type Row = (*const f32, *const i8);

    unsafe fn lanes<E: Engine>(_: Self::Row, _: usize) -> E::Float {
        unreachable!("6-bit weights have spans of four vectors only")
    }

    unsafe fn pair<E: Engine>(_: Self::Row, _: usize) -> E::Float {
        unreachable!("6-bit weights have spans of four vectors only")
    }

    #[inline(always)]
    unsafe fn four_vectors<E: Engine>((factors, codes): Self::Row, first: usize, part: usize) -> E::Float {
        let span = first / (SIX_BIT_SPAN_VECTORS * VECTOR / BLOCK);
        let codes = E::signed_codes(codes.add(span * LANES + part * (LANES / E::PARTS)));
        E::mul(codes, E::splat(*factors.add(span)))
    }
}

impl FourBitStored for Coded {
    #[inline(always)]
    fn row(values: &BlockValues, first: usize) -> Self::Row {
        let BlockValues::Coded { factors, codes } = values else { unreachable!("f16 block values read as coded") };
        (factors[first / CODED_BLOCKS..].as_ptr(), codes[first..].as_ptr())
    }
}

/// How the loop reads and multiplies one weight code on engine `E`.
pub(super) trait Code<E: Engine> {
    /// A part of one weight vector, ready to multiply.
    type Weights: Copy;
    /// A span's exact sums while it runs.
    type Sums: Copy;
    /// How the code stores its block scales and mins.
    type Scale: Stored;
    /// Vectors of a full span ([`SPAN_VECTORS`] or [`SIX_BIT_SPAN_VECTORS`]).
    const SPAN_VECTORS: usize;
    /// Vectors of a full span one load brings.
    const STEP: usize;
    /// Whether a block of four input rows meets one weight row at a time.
    const ONE_ROW_FOR_FOUR: bool;
    /// Whether lanes add the weights' block mins times the input's [`QuantizedRows::min_terms`].
    const MINS: bool;
    /// [`Engine::RELOAD_INPUTS`] for this code.
    const RELOAD_INPUTS: bool = E::RELOAD_INPUTS;

    /// Where weight row `row`'s values start.
    fn row(w: &QuantMatrix, row: usize) -> *const u8;
    /// Where weight row `row`'s block scales and (if [`Code::MINS`]) mins start.
    fn scales(w: &QuantMatrix, row: usize) -> (<Self::Scale as Stored>::Row, <Self::Scale as Stored>::Row);
    /// The 64 bytes of a row's weights that load `step` of `span` reads (parts of it).
    unsafe fn line(row: *const u8, span: Span, step: usize) -> *const u8;
    /// Asks for the lines load `step` of `span` reads.
    #[inline(always)]
    unsafe fn prefetch(row: *const u8, span: Span, step: usize) {
        E::prefetch(Self::line(row, span, step));
    }
    /// The part `part` of the weight vectors of `span` that load `step` brings
    /// (the second is the first again where a load brings one vector).
    unsafe fn load(row: *const u8, span: Span, step: usize, part: usize) -> (Self::Weights, Self::Weights);
    /// Where a lane's integer sum starts (`corrections`: the lanes' bias corrections).
    unsafe fn start(corrections: *const i32) -> Self::Sums;
    /// Adds the products of a load's `vectors` weight vectors (1 or [`Code::STEP`]) with
    /// the input vectors from `x`.
    unsafe fn dot(
        sums: Self::Sums,
        weights: (Self::Weights, Self::Weights),
        x: *const i8,
        vectors: usize,
    ) -> Self::Sums;
    /// The lanes' integer sums at the end of a span.
    unsafe fn finish(sums: Self::Sums) -> E::Int;
}

/// Where one weight row's block scales and mins start, for code `C`.
type RowValues<E, C> = (<<C as Code<E>>::Scale as Stored>::Row, <<C as Code<E>>::Scale as Stored>::Row);

/// Q8_0 weights.
pub(super) struct Q8;

impl<E: ByteWeights> Code<E> for Q8 {
    type Weights = E::Bytes;
    type Sums = E::Int;
    type Scale = f32;
    const SPAN_VECTORS: usize = SPAN_VECTORS;
    const STEP: usize = 1;
    const ONE_ROW_FOR_FOUR: bool = E::PAIRED_WEIGHTS;
    const MINS: bool = false;
    /// Paired weights move the signs to the input in a register first: loading it twice
    /// added 27% to a block of two weight rows by two input rows (AVX2, callgrind).
    const RELOAD_INPUTS: bool = E::RELOAD_INPUTS && !E::PAIRED_WEIGHTS;

    #[inline(always)]
    fn row(w: &QuantMatrix, row: usize) -> *const u8 {
        let Values::Biased { biased, .. } = &w.values else { unreachable!("Q8 code on 4-bit weights") };
        biased[row * w.width..].as_ptr()
    }

    #[inline(always)]
    fn scales(w: &QuantMatrix, row: usize) -> (*const f32, *const f32) {
        let Values::Biased { scales, .. } = &w.values else { unreachable!("Q8 code on 4-bit weights") };
        let row_scales = scales[row * w.width / BLOCK..].as_ptr();
        (row_scales, row_scales) // no mins: never read
    }

    #[inline(always)]
    unsafe fn line(row: *const u8, span: Span, step: usize) -> *const u8 {
        row.add(span.start + step * VECTOR)
    }

    #[inline(always)]
    unsafe fn load(row: *const u8, span: Span, step: usize, part: usize) -> (E::Bytes, E::Bytes) {
        let bytes = E::bytes(<Self as Code<E>>::line(row, span, step).add(part * (VECTOR / E::PARTS)));
        (bytes, bytes)
    }

    #[inline(always)]
    unsafe fn start(corrections: *const i32) -> E::Int {
        E::start(corrections)
    }

    #[inline(always)]
    unsafe fn dot(sums: E::Int, (weights, _): (E::Bytes, E::Bytes), x: *const i8, _vectors: usize) -> E::Int {
        E::dot(sums, weights, x)
    }

    #[inline(always)]
    unsafe fn finish(sums: E::Int) -> E::Int {
        sums
    }
}

/// 4-bit weights with block scales and mins stored as `S`: f16 bits ([`Q4Halves`]) or Q4_K's
/// factors and codes ([`Q4Coded`]). Each ISA file compiles the coded version in a function of
/// its own: inlined beside the other two codes it slowed them by a few percent (measured on
/// AVX2).
pub(super) struct Q4<S>(std::marker::PhantomData<S>);
pub(super) type Q4Halves = Q4<u16>;
pub(super) type Q4Coded = Q4<Coded>;

impl<E: NibbleWeights, S: FourBitStored> Code<E> for Q4<S> {
    type Weights = E::Nibbles;
    type Sums = E::Partial;
    type Scale = S;
    const SPAN_VECTORS: usize = SPAN_VECTORS;
    const STEP: usize = 2;
    const ONE_ROW_FOR_FOUR: bool = false;
    const MINS: bool = true;

    #[inline(always)]
    fn row(w: &QuantMatrix, row: usize) -> *const u8 {
        let Values::Nibbles { packed, .. } = &w.values else { unreachable!("4-bit code on Q8_0 weights") };
        packed[row * w.width / 2..].as_ptr()
    }

    #[inline(always)]
    fn scales(w: &QuantMatrix, row: usize) -> (S::Row, S::Row) {
        let Values::Nibbles { scales, mins, .. } = &w.values else { unreachable!("4-bit code on Q8_0 weights") };
        let first = row * w.width / BLOCK;
        (S::row(scales, first), S::row(mins, first))
    }

    /// A full span's load step reads a pair of packed vectors; a tail span's one load
    /// reads half a line.
    #[inline(always)]
    unsafe fn line(row: *const u8, span: Span, step: usize) -> *const u8 {
        row.add(span.start / 2 + step * VECTOR)
    }

    #[inline(always)]
    unsafe fn load(row: *const u8, span: Span, step: usize, part: usize) -> (E::Nibbles, E::Nibbles) {
        let line = <Self as Code<E>>::line(row, span, step);
        if span.vectors == 1 {
            let tail = E::tail_nibbles(line, part);
            (tail, tail)
        } else {
            E::nibbles(line.add(part * (VECTOR / E::PARTS)))
        }
    }

    #[inline(always)]
    unsafe fn start(_corrections: *const i32) -> E::Partial {
        E::zero_partial()
    }

    #[inline(always)]
    unsafe fn dot(
        partial: E::Partial,
        (first, second): (E::Nibbles, E::Nibbles),
        x: *const i8,
        vectors: usize,
    ) -> E::Partial {
        let partial = E::dot_nibbles(partial, first, x);
        if vectors == 2 {
            E::dot_nibbles(partial, second, x.add(VECTOR))
        } else {
            partial
        }
    }

    #[inline(always)]
    unsafe fn finish(partial: E::Partial) -> E::Int {
        E::flush(partial)
    }
}

/// Q6_K weights: spans of four vectors, loaded two vectors at a time.
pub(super) struct Q6;

impl Q6 {
    /// Where the bytes of `span` start in a row.
    #[inline(always)]
    unsafe fn span_bytes(row: *const u8, span: Span) -> *const u8 {
        row.add(span.start / (SIX_BIT_SPAN_VECTORS * VECTOR) * SIX_BIT_SPAN_BYTES)
    }
}

impl<E: NibbleWeights> Code<E> for Q6 {
    type Weights = E::Nibbles;
    type Sums = E::Int;
    type Scale = SubBlock;
    const SPAN_VECTORS: usize = SIX_BIT_SPAN_VECTORS;
    const STEP: usize = 2;
    const ONE_ROW_FOR_FOUR: bool = false;
    const MINS: bool = true;

    #[inline(always)]
    fn row(w: &QuantMatrix, row: usize) -> *const u8 {
        let Values::SixBit { packed, .. } = &w.values else { unreachable!("6-bit code on other weights") };
        packed[row * w.width / (SIX_BIT_SPAN_VECTORS * VECTOR) * SIX_BIT_SPAN_BYTES..].as_ptr()
    }

    #[inline(always)]
    fn scales(w: &QuantMatrix, row: usize) -> ((*const f32, *const i8), (*const f32, *const i8)) {
        let Values::SixBit { scales, .. } = &w.values else { unreachable!("6-bit code on other weights") };
        let first = row * w.width / (SIX_BIT_SPAN_VECTORS * VECTOR);
        let codes = scales.codes[first * LANES..].as_ptr();
        ((scales.factors[first..].as_ptr(), codes), (scales.min_factors[first..].as_ptr(), codes))
    }

    /// Step `step`'s pair of nibble vectors.
    #[inline(always)]
    unsafe fn line(row: *const u8, span: Span, step: usize) -> *const u8 {
        Self::span_bytes(row, span).add(step * VECTOR)
    }

    /// The high bits' line too, with the first step.
    #[inline(always)]
    unsafe fn prefetch(row: *const u8, span: Span, step: usize) {
        E::prefetch(<Self as Code<E>>::line(row, span, step));
        if step == 0 {
            E::prefetch(Self::span_bytes(row, span).add(2 * VECTOR));
        }
    }

    #[inline(always)]
    unsafe fn load(row: *const u8, span: Span, step: usize, part: usize) -> (E::Nibbles, E::Nibbles) {
        let (bytes, offset) = (Self::span_bytes(row, span), part * (VECTOR / E::PARTS));
        E::six_bits(bytes.add(step * VECTOR + offset), bytes.add(2 * VECTOR + offset), step)
    }

    #[inline(always)]
    unsafe fn start(_corrections: *const i32) -> E::Int {
        E::zero_sums()
    }

    #[inline(always)]
    unsafe fn dot(sums: E::Int, weights: (E::Nibbles, E::Nibbles), x: *const i8, _vectors: usize) -> E::Int {
        E::dot_six(sums, weights, x)
    }

    #[inline(always)]
    unsafe fn finish(sums: E::Int) -> E::Int {
        sums
    }
}

/// [`QuantMatrix::multiply`] on engine `E` for weights of code `C`. The caller runs it
/// with `E`'s target features.
#[inline(always)]
pub(super) unsafe fn multiply<E: Engine, C: Code<E>>(
    w: &QuantMatrix,
    x: &QuantizedRows,
    out: &mut [f32],
    rows: Range<usize>,
) {
    for (tile, group, at) in blocks(rows, x.rows, E::LARGEST_GROUP) {
        let pairs = tile.is_multiple_of(2);
        match group {
            6 if pairs && E::LARGEST_GROUP >= 6 => {
                for at in at.tile_by::<2>(tile) {
                    block::<E, C, 2, 6>(w, x, at, out);
                }
            }
            4 if C::ONE_ROW_FOR_FOUR => {
                for at in at.tile_by::<1>(tile) {
                    block::<E, C, 1, 4>(w, x, at, out);
                }
            }
            5 if C::ONE_ROW_FOR_FOUR => {
                for at in at.tile_by::<1>(tile) {
                    block::<E, C, 1, 5>(w, x, at, out);
                }
            }
            5 if pairs => {
                for at in at.tile_by::<2>(tile) {
                    block::<E, C, 2, 5>(w, x, at, out);
                }
            }
            4 if pairs => {
                for at in at.tile_by::<2>(tile) {
                    block::<E, C, 2, 4>(w, x, at, out);
                }
            }
            // Three input rows meet two weight rows at a time too: one at a time made a 3-node
            // pass cost more than a 4-node one (t(3) 10% less this way, AVX-512 and AVX2).
            3 if pairs => {
                for at in at.tile_by::<2>(tile) {
                    block::<E, C, 2, 3>(w, x, at, out);
                }
            }
            3 => {
                for at in at.tile_by::<1>(tile) {
                    block::<E, C, 1, 3>(w, x, at, out);
                }
            }
            2 if pairs => {
                for at in at.tile_by::<2>(tile) {
                    block::<E, C, 2, 2>(w, x, at, out);
                }
            }
            // One input row (and the odd shapes) meets one weight row at a time: memory then
            // streams the rows in order, where two rows side by side made two short streams
            // that the hardware prefetchers kept losing (11 against 19 GB/s per core).
            _ => {
                for at in at.one_by_one(tile, group) {
                    block::<E, C, 1, 1>(w, x, at, out);
                }
            }
        }
    }
}

/// `R` weight rows times `G` input rows.
#[inline(always)]
unsafe fn block<E: Engine, C: Code<E>, const R: usize, const G: usize>(
    w: &QuantMatrix,
    x: &QuantizedRows,
    at: Block,
    out: &mut [f32],
) {
    let rows = BlockRows::<E, C, R, G> {
        w_rows: indexed(|j| C::row(w, at.row0 + j)),
        w_scales: indexed(|j| C::scales(w, at.row0 + j)),
        x_rows: indexed(|i| x.quants.as_ptr().add((at.r0 + i) * x.width)),
        x_scales: indexed(|i| x.scales.as_ptr().add((at.r0 + i) * x.width / BLOCK)),
        // Only the code's own per-lane values exist (the other vector is empty).
        x_corrections: indexed(|i| x.bias_corrections.as_ptr().wrapping_add(x.lanes_start(at.r0 + i))),
        x_min_terms: indexed(|i| x.min_terms.as_ptr().wrapping_add(x.lanes_start(at.r0 + i))),
        // The first group of input rows also pulls the weights [`PREFETCH_ROWS`] further on
        // into the cache, so that memory keeps streaming while the other groups compute from L1.
        prefetched: (at.r0 == 0 && at.row0 + PREFETCH_ROWS + R <= w.rows)
            .then(|| indexed(|j| C::row(w, at.row0 + PREFETCH_ROWS + j))),
        apart: if C::RELOAD_INPUTS && R > 1 { std::hint::black_box(0) } else { 0 },
    };
    let mut lanes = [[[0f32; LANES]; G]; R];
    // Blocks that ask for lines ahead and blocks that do not run copies of their own (the second
    // copy's `None` is written out so that the compiler drops the asking from it), so that
    // neither tests at every step whether to ask: 4–6% fewer instructions with 2 to 16 input
    // rows, 14–17% with one (AVX2, 4-bit weights, counted by callgrind).
    if rows.prefetched.is_some() {
        block_parts(w, &rows, &mut lanes);
    } else {
        block_parts(w, &BlockRows { prefetched: None, ..rows }, &mut lanes);
    }
    let mut sums = [[0f32; G]; R];
    E::sum_lanes_of(lanes.as_flattened(), sums.as_flattened_mut());
    at.write(&sums, out);
}

/// Every part's lanes of a block (see [`block_part`]).
#[inline(always)]
unsafe fn block_parts<E: Engine, C: Code<E>, const R: usize, const G: usize>(
    w: &QuantMatrix,
    rows: &BlockRows<E, C, R, G>,
    lanes: &mut [[[f32; LANES]; G]; R],
) {
    // Two weight rows' pointers, offset for a part, outgrow the registers in a loop over the
    // parts, and went to the stack. With `part` a constant in each copy, the offsets fold into
    // addresses: 13–16% fewer instructions for 576-wide 4-bit rows, 7–11% for 1,536-wide (AVX2,
    // 2 to 16 input rows, counted by callgrind). Since full and tail spans run apart, one weight
    // row by four input rows (Q8_0's) gains too (3–7%); one by one runs 2–4% more instructions
    // so, and keeps the loop; NEON's four parts are not measured and keep it too.
    if E::PARTS == 2 && R * G > 1 {
        block_part(w, rows, lanes, 0);
        block_part(w, rows, lanes, 1);
    } else {
        for part in 0..E::PARTS {
            block_part(w, rows, lanes, part);
        }
    }
}

/// Where a block's weight rows and input rows, and their block values, start.
struct BlockRows<E: Engine, C: Code<E>, const R: usize, const G: usize> {
    w_rows: [*const u8; R],
    w_scales: [RowValues<E, C>; R],
    x_rows: [*const i8; G],
    x_scales: [*const f32; G],
    x_corrections: [*const i32; G],
    x_min_terms: [*const f32; G],
    /// The weight rows [`PREFETCH_ROWS`] on, if this block asks for them.
    prefetched: Option<[*const u8; R]>,
    /// Zero, hidden from the compiler where [`Code::RELOAD_INPUTS`]. Weight row `j` reads the
    /// input at `j × apart` bytes on: seen as one load, the input went to the stack after the
    /// first weight row's products and back for the second's; as loads of their own, both
    /// fold into the products' operands (AVX2, 4-bit weights: 8–12% fewer instructions with
    /// 3 to 16 input rows, counted by callgrind).
    apart: usize,
}

/// One part's lanes of a block: its sums over the whole row, written to that part's lanes in `lanes`.
#[inline(always)]
unsafe fn block_part<E: Engine, C: Code<E>, const R: usize, const G: usize>(
    w: &QuantMatrix,
    rows: &BlockRows<E, C, R, G>,
    lanes: &mut [[[f32; LANES]; G]; R],
    part: usize,
) {
    let mut acc = [[E::zero(); G]; R];
    // Full spans and one-vector tail spans run in loops of their own, in the order of
    // [`spans`], so that each copy of the span's work knows its size: the step
    // count, the loads and the block values then fold to constants (AVX2, 4-bit weights,
    // counted by callgrind: see `benches/README.md`).
    debug_assert_eq!(w.input_form().span_vectors(), C::SPAN_VECTORS);
    for (index, span) in full_spans(w.width, C::SPAN_VECTORS).enumerate() {
        span_part(rows, &mut acc, index, span, part);
    }
    let full = w.width / (C::SPAN_VECTORS * VECTOR);
    for (index, span) in tail_spans(w.width, C::SPAN_VECTORS).enumerate() {
        span_part(rows, &mut acc, full + index, span, part);
    }
    for (lanes, acc) in lanes.iter_mut().zip(&acc) {
        for (lanes, acc) in lanes.iter_mut().zip(acc) {
            E::store(*acc, lanes.as_mut_ptr().add(part * (LANES / E::PARTS)));
        }
    }
}

/// Adds the products of `span` (the row's span `index`) in part `part`'s lanes to `acc`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indexed loops keep the arrays in registers (see below)
unsafe fn span_part<E: Engine, C: Code<E>, const R: usize, const G: usize>(
    rows: &BlockRows<E, C, R, G>,
    acc: &mut [[E::Float; G]; R],
    index: usize,
    span: Span,
    part: usize,
) {
    let BlockRows { w_rows, w_scales, x_rows, x_scales, x_corrections, x_min_terms, prefetched, apart } = *rows;
    // Loops over constant ranges with indices, not `array::from_fn` (its closure
    // would miss the kernel's target features) nor iterator adaptors over arrays:
    // unrolled, these keep every sum and weight in a register.
    let lane_offset = index * LANES + part * (LANES / E::PARTS);
    let mut sums = [[C::start(x_corrections[0].wrapping_add(lane_offset)); G]; R];
    for i in 1..G {
        let start = C::start(x_corrections[i].wrapping_add(lane_offset));
        for j in 0..R {
            sums[j][i] = start;
        }
    }
    let vectors = span.vectors.min(C::STEP);
    for step in 0..span.vectors / vectors {
        // Each part asks for its share of the lines, so that memory keeps streaming
        // while the later parts compute on lines already in L1.
        if let (true, Some(next)) = ((index + step) % E::PARTS == part, prefetched) {
            for row in next {
                C::prefetch(row, span, step);
            }
        }
        let mut weights = [C::load(w_rows[0], span, step, part); R];
        for j in 1..R {
            weights[j] = C::load(w_rows[j], span, step, part);
        }
        let offset = span.start + step * vectors * VECTOR + part * (VECTOR / E::PARTS);
        for i in 0..G {
            let input = x_rows[i].add(offset);
            for j in 0..R {
                // Each weight row reads the input afresh, from an address the compiler
                // cannot prove to be the same (see [`BlockRows::apart`]).
                sums[j][i] = C::dot(sums[j][i], weights[j], input.wrapping_add(j * apart), vectors);
            }
        }
    }
    let mut x_scale = [E::zero(); G];
    for i in 0..G {
        x_scale[i] = part_scales::<E, f32>(x_scales[i], span, part);
    }
    for j in 0..R {
        let w_scale = part_scales::<E, C::Scale>(w_scales[j].0, span, part);
        for i in 0..G {
            acc[j][i] = E::accumulate(acc[j][i], C::finish(sums[j][i]), x_scale[i], w_scale);
        }
    }
    if C::MINS {
        let mut x_terms = [E::zero(); G];
        for i in 0..G {
            x_terms[i] = E::load(x_min_terms[i].add(lane_offset));
        }
        for j in 0..R {
            let w_min = part_scales::<E, C::Scale>(w_scales[j].1, span, part);
            for i in 0..G {
                acc[j][i] = E::fused(acc[j][i], w_min, x_terms[i]);
            }
        }
    }
}

/// The block values (scales or mins) of a row's `span` that match the lanes of `part`:
/// lane `l` of a full span holds block `l`, of a one-vector span block `l % 2`, of a
/// 6-bit span block `l % 8`.
#[inline(always)]
unsafe fn part_scales<E: Engine, S: Stored>(row: S::Row, span: Span, part: usize) -> E::Float {
    let first = span.start / BLOCK;
    match span.vectors {
        SPAN_VECTORS => S::lanes::<E>(row, first + part * LANES / E::PARTS),
        1 => S::pair::<E>(row, first),
        _ => S::four_vectors::<E>(row, first, part),
    }
}
