//! Quantized matrix multiplication whose cost grows slowly with the number of input rows.
//!
//! Weights come in one of three codes: Q8_0 (8-bit values, one scale per block of 32,
//! quantized from f32 or kept exactly as GGUF stores them, [`QuantMatrix::from_q8_0`]), 4-bit
//! values 0…15 with one scale and one min per block of 32 (`w = scale · q + min`), kept
//! exactly as GGUF's Q4_0, Q4_1 and Q4_K store them ([`FourBit`]), or 6-bit values 0…63 with
//! one scale per 16, kept exactly as GGUF's Q6_K stores them ([`QuantMatrix::from_q6_k`]).
//! Input rows are quantized to Q8_0 at run time. A tile of weight rows is multiplied with every input row while it sits in L1, so
//! a tree pass over k nodes streams the weights from memory once instead of k times, and
//! the integer products are summed over whole spans before one conversion to float. On a
//! CPU this is what makes verifying a draft tree cost little more than decoding one token;
//! 4-bit weights halve the bytes a one-token pass streams.
//!
//! Layout: a row is cut into [`Span`]s of 512 values (a 64-value tail where the width is
//! not a multiple of 256; 6-bit rows: spans of 256, a Q6_K super-block each). Within a span the values are reordered so that 32-bit lane `j`
//! of every 64-byte vector holds four values of block `j % blocks`: the lane then sums
//! integer products of one block across the whole span, and a vector of the span's block
//! scales broadcast (`[s0 … s7, s0 … s7]`) matches the lanes. 4-bit values are packed two
//! to a byte after reordering (see [`Span::packed`]).
//!
//! Exactness: every output is a pure function of its weight row and its input row. The
//! products are exact integer sums; the float steps (per span and lane: convert, multiply
//! by the input's block scale, fused multiply-add of the weight's block scale into the
//! lane's accumulator, and for 4-bit and 6-bit weights a fused multiply-add of the weight's block min with
//! the input's scaled sum over the lane; then a fixed tree over the 16 lanes) run in the
//! same order whatever the tile or batch shape, so a token's result never depends on the
//! others.
//!
//! One kernel per CPU class ([`Kernel`]), each tested bit for bit against the lane-by-lane
//! [`reference`]: [`avx512`] holds a 64-byte vector in one register; [`narrow`] runs the
//! same lanes in registers of 64 bytes (AVX-512, 4-bit and 6-bit weights), 32 bytes ([`avx2`]) or
//! 16 bytes ([`neon`]). Q8_0 weights are stored biased by +128 as unsigned bytes. Kernels
//! whose instruction multiplies unsigned by signed bytes (VNNI's `vpdpbusd`) remove the
//! bias exactly by starting each lane's integer sum at −128 × (the sum of the input bytes
//! it meets); the others flip the bias back (`xor 0x80`) and multiply signed bytes. 4-bit
//! and 6-bit values are small and unsigned, so every instruction multiplies them as they are.

use std::ops::Range;

use crate::groups::LargerGroups;
use crate::kernel::Kernel;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod narrow;
#[cfg(target_arch = "aarch64")]
mod neon;
mod reference;

/// Values per quantization block.
const BLOCK: usize = 32;
/// Bytes per vector.
const VECTOR: usize = 64;
/// 32-bit lanes per vector.
const LANES: usize = VECTOR / 4;
/// Vectors per full span.
const SPAN_VECTORS: usize = 8;
/// Vectors per span of 6-bit weights (one Q6_K super-block).
const SIX_BIT_SPAN_VECTORS: usize = 4;
/// Bytes of a 6-bit span: two packed pairs of nibble vectors, then one vector of high bits.
const SIX_BIT_SPAN_BYTES: usize = 3 * VECTOR;

/// Weights `[rows, width]` in the kernel's layout (`width` padded to a multiple of 64).
pub struct QuantMatrix {
    rows: usize,
    cols: usize,
    width: usize,
    kernel: Kernel,
    values: Values,
}

/// The quantized values of a [`QuantMatrix`], reordered within spans, and their blocks'
/// scales (and mins), row-major.
enum Values {
    /// Q8_0: values + 128, f32 scales.
    Biased { biased: Vec<u8>, scales: Vec<f32> },
    /// 4-bit values 0…15 packed two to a byte ([`Span::packed`]); per block a scale and a
    /// min (`w = scale · q + min`).
    Nibbles { packed: Vec<u8>, scales: BlockValues, mins: BlockValues },
    /// Q6_K: 6-bit values 0…63, per span of 256 their low nibbles as in `Nibbles` (128 bytes)
    /// and then their high two bits ([`Span::high`], 64 bytes); `w = d · sc · (q − 32)`.
    SixBit { packed: Vec<u8>, scales: SubBlockScales },
}

/// Q6_K's scales, per lane of a 6-bit span (each lane holds one sub-block of 16 values): the
/// span's `d` and `−32 · d`, and per lane the sub-block's 8-bit scale `sc`. The lane's weight
/// scale is `d · sc` and its min `−32 · d · sc`, both exact in f32 (11 × 8 significant bits).
struct SubBlockScales {
    factors: Vec<f32>,
    min_factors: Vec<f32>,
    codes: Vec<i8>,
}

/// What input rows carry beside their values, and how their spans are cut: as the weights
/// they meet are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InputForm {
    /// For Q8_0 weights: bias corrections.
    Bytes,
    /// For 4-bit weights: min terms.
    FourBit,
    /// For 6-bit weights: min terms, spans of [`SIX_BIT_SPAN_VECTORS`].
    SixBit,
}

impl InputForm {
    fn span_vectors(self) -> usize {
        match self {
            InputForm::SixBit => SIX_BIT_SPAN_VECTORS,
            InputForm::Bytes | InputForm::FourBit => SPAN_VECTORS,
        }
    }

    fn min_terms(self) -> bool {
        self != InputForm::Bytes
    }
}

/// The scales or mins of 4-bit blocks, row-major, in the form the file stores them: f16
/// values (Q4_0, Q4_1), or Q4_K's per super-block of eight blocks an f32 factor (`d`, or
/// `−dmin` for mins) and per block a 6-bit code, the value being `factor · code` (exact in
/// f32: 11 × 6 significant bits). Q4_K thus keeps 0.09 bytes per weight for its blocks'
/// values, where one f32 per block and value would take 0.25.
enum BlockValues {
    Halves(Vec<u16>),
    Coded { factors: Vec<f32>, codes: Vec<u8> },
}

/// Blocks per Q4_K super-block, which share a [`BlockValues::Coded`] factor.
const CODED_BLOCKS: usize = 8;

/// A block's scale or min as its file defines it: `factor · code`, exact in f32 (code 1
/// where the file stores the value itself).
#[derive(Clone, Copy, Debug, PartialEq)]
struct BlockValue {
    factor: f32,
    code: u8,
}

impl BlockValue {
    fn plain(value: f32) -> BlockValue {
        BlockValue { factor: value, code: 1 }
    }

    fn value(self) -> f32 {
        self.factor * self.code as f32
    }
}

impl BlockValues {
    /// `count` zeros, in the form `code` stores its values.
    fn zeros(code: FourBit, count: usize) -> BlockValues {
        match code {
            FourBit::Q4K => {
                BlockValues::Coded { factors: vec![0.0; count.div_ceil(CODED_BLOCKS)], codes: vec![0; count] }
            }
            FourBit::Q4_0 | FourBit::Q4_1 => BlockValues::Halves(vec![0; count]),
        }
    }

    /// Sets block `index` to `value`, which must be of this form (a file's f16, or Q4_K's
    /// factor and code; blocks of one super-block share the factor).
    fn set(&mut self, index: usize, value: BlockValue) {
        match self {
            BlockValues::Halves(h) => h[index] = half::f16::from_f32(value.value()).to_bits(),
            BlockValues::Coded { factors, codes } => {
                factors[index / CODED_BLOCKS] = value.factor;
                codes[index] = value.code;
            }
        }
    }

    /// Puts `later`'s blocks after these (both of whole super-blocks, for Q4_K).
    fn append(&mut self, later: BlockValues) {
        match (self, later) {
            (BlockValues::Halves(h), BlockValues::Halves(more)) => h.extend(more),
            (BlockValues::Coded { factors, codes }, BlockValues::Coded { factors: f, codes: c }) => {
                factors.extend(f);
                codes.extend(c);
            }
            _ => unreachable!("block values of one code appended to another's"),
        }
    }

    /// Block `index` as f32.
    fn get(&self, index: usize) -> f32 {
        match self {
            BlockValues::Halves(h) => half::f16::from_bits(h[index]).to_f32(),
            BlockValues::Coded { factors, codes } => {
                BlockValue { factor: factors[index / CODED_BLOCKS], code: codes[index] }.value()
            }
        }
    }
}

/// A GGUF 4-bit block code whose values [`QuantMatrix::from_four_bit`] keeps exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FourBit {
    /// 18-byte blocks of 32: f16 scale, 16 bytes of values; `w = scale · (q − 8)`.
    Q4_0,
    /// 20-byte blocks of 32: f16 scale, f16 min, 16 bytes of values; `w = scale · q + min`.
    Q4_1,
    /// 144-byte super-blocks of 256: f16 `d` and `dmin`, 12 bytes of 6-bit scales and mins
    /// for eight blocks of 32, 128 bytes of values; block `b`: `w = d·sc_b · q − dmin·m_b`.
    /// Kept as `d`, `−dmin` and the codes ([`BlockValues::Coded`]).
    Q4K,
}

/// A block of 32 values as a GGUF file defines it: `w = scale · q + min`.
type Decoded = (BlockValue, BlockValue, [u8; BLOCK]);

impl FourBit {
    /// Bytes per stored block ([`FourBit::block_values`] values).
    pub fn block_bytes(self) -> usize {
        match self {
            FourBit::Q4_0 => 18,
            FourBit::Q4_1 => 20,
            FourBit::Q4K => 144,
        }
    }

    /// Values per stored block.
    pub fn block_values(self) -> usize {
        match self {
            FourBit::Q4_0 | FourBit::Q4_1 => BLOCK,
            FourBit::Q4K => 256,
        }
    }

    /// The blocks of 32 of one stored block, in order (GGML order within a block of 32:
    /// value `i` in the low nibble of byte `i`, value `i + 16` in its high nibble; within a
    /// Q4_K super-block, blocks `2p` and `2p + 1` share bytes `32p…32p + 31`, low and high
    /// nibbles), added to `out`.
    fn decode(self, block: &[u8], out: &mut Vec<Decoded>) {
        let half = |at: usize| half::f16::from_le_bytes([block[at], block[at + 1]]).to_f32();
        match self {
            FourBit::Q4_0 | FourBit::Q4_1 => {
                let scale = half(0);
                // Q4_0: −8 · scale, exact (a power of two) in f16 and f32.
                let (min, quants) =
                    if self == FourBit::Q4_0 { (-8.0 * scale, &block[2..18]) } else { (half(2), &block[4..20]) };
                let values = std::array::from_fn(|i| if i < 16 { quants[i] & 0x0F } else { quants[i - 16] >> 4 });
                out.push((BlockValue::plain(scale), BlockValue::plain(min), values));
            }
            FourBit::Q4K => {
                let (d, dmin, packed, quants) = (half(0), half(2), &block[4..16], &block[16..144]);
                out.extend((0..8).map(|b| {
                    let (sc, m) = if b < 4 {
                        (packed[b] & 63, packed[b + 4] & 63)
                    } else {
                        (
                            (packed[b + 4] & 0x0F) | ((packed[b - 4] >> 6) << 4),
                            (packed[b + 4] >> 4) | ((packed[b] >> 6) << 4),
                        )
                    };
                    let bytes = &quants[32 * (b / 2)..][..32];
                    let values = std::array::from_fn(|i| if b % 2 == 0 { bytes[i] & 0x0F } else { bytes[i] >> 4 });
                    (BlockValue { factor: d, code: sc }, BlockValue { factor: -dmin, code: m }, values)
                }));
            }
        }
    }
}

/// Bytes per Q6_K super-block: 128 bytes of low nibbles, 64 of high bits, 16 8-bit scales, f16 `d`.
pub const Q6_K_BLOCK_BYTES: usize = 210;
/// Values per Q6_K super-block.
pub const Q6_K_VALUES: usize = 256;
/// Bytes per Q8_0 block: f16 scale, then 32 signed values.
const Q8_0_BLOCK_BYTES: usize = 34;

/// A Q6_K super-block as GGUF defines it: `d`, the 8-bit scales of its 16 sub-blocks of 16
/// values, and its 256 values 0…63; value `i` is `d · scales[i / 16] · (values[i] − 32)`.
/// (Within each half of 128 values, value `32g + l` takes its low nibble from byte
/// `l + 32 (g mod 2)` of the half's 64 nibble bytes, low for `g < 2`, and its high bits
/// from bits `2g…2g + 1` of byte `l` of the half's 32 high-bit bytes.)
fn decode_q6_k(block: &[u8]) -> (f32, [i8; 16], [u8; Q6_K_VALUES]) {
    let (low, high, scales) = (&block[..128], &block[128..192], &block[192..208]);
    let d = half::f16::from_le_bytes([block[208], block[209]]).to_f32();
    let values = std::array::from_fn(|i| {
        let (half, g, l) = (i / 128, (i % 128) / 32, i % 32);
        let nibbles = low[64 * half + l + 32 * (g % 2)];
        let nibble = if g < 2 { nibbles & 0x0F } else { nibbles >> 4 };
        nibble | ((high[32 * half + l] >> (2 * g)) & 3) << 4
    });
    (d, std::array::from_fn(|s| scales[s] as i8), values)
}

/// Input rows quantized for [`QuantMatrix::multiply`].
pub struct QuantizedRows {
    rows: usize,
    width: usize,
    /// Quantized values, reordered like the weights.
    quants: Vec<i8>,
    scales: Vec<f32>,
    /// Per row, span and lane, for Q8_0 weights: −128 × the sum of the values the lane
    /// meets in the span.
    bias_corrections: Vec<i32>,
    /// The weights these rows were quantized for.
    form: InputForm,
    /// Per row, span and lane, for 4-bit and 6-bit weights: the sum of the values the lane
    /// meets in the span times their block's scale (what the weights' block min multiplies).
    min_terms: Vec<f32>,
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

    /// [`Self::position`] of the first value of each group of four in block 0; block `b`'s
    /// groups sit `4 b` bytes further on. Computed once a span: the divisions of
    /// [`Self::position`] at every group took a sixth of the time quantizing inputs took
    /// (AVX-512, Zen 4).
    fn group_positions(self) -> [usize; BLOCK / 4] {
        indexed(|g| self.position(0, 4 * g))
    }

    /// Where the 4-bit value at reordered position `at` of the span sits once packed: the
    /// byte's offset from `start / 2` and the shift of its nibble. A full span packs
    /// vectors in pairs (byte `i` of a pair: byte `i` of the first vector in the low
    /// nibble, of the second in the high one); a one-vector span packs its two halves
    /// (byte `i`: value `i` low, value `i + 32` high).
    fn packed(self, at: usize) -> (usize, u32) {
        let (vector, byte) = (at / VECTOR, at % VECTOR);
        if self.vectors == 1 {
            (byte % (VECTOR / 2), 4 * (byte / (VECTOR / 2)) as u32)
        } else {
            ((vector / 2) * VECTOR + byte, 4 * (vector % 2) as u32)
        }
    }

    /// Where the high two bits of the 6-bit value at reordered position `at` of a 6-bit span
    /// sit in the span's vector of high bits: the byte and the shift. Byte `i` holds those of
    /// byte `i` of vectors 0, 2, 1, 3 from its low bits up, so that one shift and one mask
    /// move each vector's bits to 4…5, beside its nibble.
    fn high(self, at: usize) -> (usize, u32) {
        const SHIFTS: [u32; SIX_BIT_SPAN_VECTORS] = [0, 4, 2, 6];
        (at % VECTOR, SHIFTS[at / VECTOR])
    }
}

/// The spans of a row `width` values wide, in order: full spans of `vectors`, then
/// one-vector spans.
fn spans(width: usize, vectors: usize) -> impl Iterator<Item = Span> {
    full_spans(width, vectors).chain(tail_spans(width, vectors))
}

/// The spans of [`spans`] that hold `vectors` vectors.
fn full_spans(width: usize, vectors: usize) -> impl Iterator<Item = Span> {
    (0..width / (vectors * VECTOR)).map(move |s| Span { start: s * vectors * VECTOR, vectors })
}

/// The one-vector spans of [`spans`], after the full ones.
fn tail_spans(width: usize, vectors: usize) -> impl Iterator<Item = Span> {
    let start = width / (vectors * VECTOR) * vectors * VECTOR;
    (0..(width - start) / VECTOR).map(move |t| Span { start: start + t * VECTOR, vectors: 1 })
}

/// Weights put in the kernels' layout a range of rows (or super-blocks) at a time.
trait Converted: Sized + Send {
    /// These items, then `later`'s.
    fn followed_by(self, later: Self) -> Self;
}

/// `convert` of the items `0..count`, a range of them on each thread, the parts joined in order
/// (`convert` of no items where `count` is zero).
fn convert_on_threads<T: Converted>(count: usize, convert: impl Fn(Range<usize>) -> T + Sync + Send) -> T {
    crate::threads::map_ranges(count, &convert).into_iter().reduce(T::followed_by).unwrap_or_else(|| convert(0..0))
}

/// Consecutive rows of 4-bit weights in the kernels' layout: values packed two to a byte in
/// span order, and their blocks' scales and mins.
struct NibbleRows {
    packed: Vec<u8>,
    scales: BlockValues,
    mins: BlockValues,
}

impl NibbleRows {
    /// Reorders the GGUF blocks of whole rows (`row_bytes` each) into rows `width` values wide.
    fn convert(code: FourBit, stored_rows: &[u8], row_bytes: usize, width: usize) -> NibbleRows {
        let rows = stored_rows.len() / row_bytes;
        let mut packed = vec![0u8; rows * width / 2];
        let mut scales = BlockValues::zeros(code, rows * width / BLOCK);
        let mut mins = BlockValues::zeros(code, rows * width / BLOCK);
        // Where each value of each block of a span goes: the same in every span of a kind.
        let places = |vectors: usize| -> Vec<[(usize, u32); BLOCK]> {
            let span = Span { start: 0, vectors };
            (0..span.blocks()).map(|b| indexed(|e| span.packed(span.position(b, e)))).collect()
        };
        let (full_places, tail_places) = (places(SPAN_VECTORS), places(1));
        let mut decoded = Vec::with_capacity(width / BLOCK);
        for (row, stored) in stored_rows.chunks_exact(row_bytes).enumerate() {
            decoded.clear();
            for block in stored.chunks_exact(code.block_bytes()) {
                code.decode(block, &mut decoded);
            }
            let packed_row = &mut packed[row * width / 2..][..width / 2];
            for span in spans(width, SPAN_VECTORS) {
                let places = if span.vectors == 1 { &tail_places } else { &full_places };
                let span_bytes = &mut packed_row[span.start / 2..];
                for (b, block_places) in places.iter().enumerate() {
                    let Some(&(scale, min, values)) = decoded.get(span.start / BLOCK + b) else {
                        continue; // padding: scale and min stay 0
                    };
                    let index = (row * width + span.start) / BLOCK + b;
                    scales.set(index, scale);
                    mins.set(index, min);
                    for (&q, &(byte, shift)) in values.iter().zip(block_places) {
                        span_bytes[byte] |= q << shift;
                    }
                }
            }
        }
        NibbleRows { packed, scales, mins }
    }
}

impl Converted for NibbleRows {
    fn followed_by(mut self, later: NibbleRows) -> NibbleRows {
        self.packed.extend(later.packed);
        self.scales.append(later.scales);
        self.mins.append(later.mins);
        self
    }
}

/// Consecutive rows of Q8_0 weights in the kernels' layout: values biased to unsigned bytes
/// in span order, and their blocks' scales.
struct BiasedRows {
    biased: Vec<u8>,
    scales: Vec<f32>,
}

impl BiasedRows {
    /// Reorders the GGUF Q8_0 blocks of whole rows (`row_bytes` each) into rows `width` values
    /// wide, each block's f16 scale and 32 values as stored.
    fn convert(stored_rows: &[u8], row_bytes: usize, width: usize) -> BiasedRows {
        let rows = stored_rows.len() / row_bytes;
        let mut biased = Vec::with_capacity(rows * width);
        let mut scales = Vec::with_capacity(rows * width / BLOCK);
        let mut quants = vec![0i8; width];
        for stored in stored_rows.chunks_exact(row_bytes) {
            let mut stored_blocks = stored.chunks_exact(Q8_0_BLOCK_BYTES);
            place_blocks(&mut quants, &mut scales, SPAN_VECTORS, |_, q| match stored_blocks.next() {
                Some(block) => {
                    q.iter_mut().zip(&block[2..]).for_each(|(q, &byte)| *q = byte as i8);
                    half::f16::from_le_bytes([block[0], block[1]]).to_f32()
                }
                None => {
                    q.fill(0); // padding
                    0.0
                }
            });
            biased.extend(quants.iter().map(|&q| (q as i16 + 128) as u8));
        }
        BiasedRows { biased, scales }
    }
}

impl Converted for BiasedRows {
    fn followed_by(mut self, later: BiasedRows) -> BiasedRows {
        self.biased.extend(later.biased);
        self.scales.extend(later.scales);
        self
    }
}

/// Consecutive Q6_K super-blocks in the kernels' layout: a 6-bit span each, and their scales.
struct SixBitSpans {
    packed: Vec<u8>,
    scales: SubBlockScales,
}

impl SixBitSpans {
    /// Reorders whole Q6_K super-blocks (`Q6_K_BLOCK_BYTES` each).
    fn convert(blocks: &[u8]) -> SixBitSpans {
        let spans = blocks.len() / Q6_K_BLOCK_BYTES;
        let mut packed = vec![0u8; spans * SIX_BIT_SPAN_BYTES];
        let mut scales = SubBlockScales {
            factors: Vec::with_capacity(spans),
            min_factors: Vec::with_capacity(spans),
            codes: Vec::with_capacity(spans * LANES),
        };
        // Where each value's low nibble and high bits go: the same in every span.
        let span = Span { start: 0, vectors: SIX_BIT_SPAN_VECTORS };
        let places: Vec<((usize, u32), (usize, u32))> = (0..Q6_K_VALUES)
            .map(|i| {
                let at = span.position(i / BLOCK, i % BLOCK);
                (span.packed(at), span.high(at))
            })
            .collect();
        for (block, bytes) in blocks.chunks_exact(Q6_K_BLOCK_BYTES).zip(packed.chunks_exact_mut(SIX_BIT_SPAN_BYTES)) {
            let (d, sub_scales, values) = decode_q6_k(block);
            scales.factors.push(d);
            scales.min_factors.push(-32.0 * d);
            // Lane `l` holds sub-block `2 (l mod 8) + l / 8` (see [`Span::position`]).
            scales.codes.extend((0..LANES).map(|lane| sub_scales[2 * (lane % 8) + lane / 8]));
            for (&q, &((byte, shift), (high_byte, high_shift))) in values.iter().zip(&places) {
                bytes[byte] |= (q & 0x0F) << shift;
                bytes[2 * VECTOR + high_byte] |= (q >> 4) << high_shift;
            }
        }
        SixBitSpans { packed, scales }
    }
}

impl Converted for SixBitSpans {
    fn followed_by(mut self, later: SixBitSpans) -> SixBitSpans {
        self.packed.extend(later.packed);
        self.scales.factors.extend(later.scales.factors);
        self.scales.min_factors.extend(later.scales.min_factors);
        self.scales.codes.extend(later.scales.codes);
        self
    }
}

impl QuantMatrix {
    /// Quantizes row-major f32 weights `[rows, cols]`, to be multiplied on `kernel` (which
    /// the CPU must support).
    pub fn quantize(weights: &[f32], rows: usize, cols: usize, kernel: Kernel) -> QuantMatrix {
        assert!(kernel.is_supported(), "this CPU cannot run the {kernel} kernel");
        assert_eq!(weights.len(), rows * cols, "weights must be rows × cols");
        let width = cols.next_multiple_of(VECTOR);
        let mut biased = Vec::with_capacity(rows * width);
        let mut scales = Vec::with_capacity(rows * width / BLOCK);
        let mut quants = vec![0i8; width];
        for row in weights.chunks_exact(cols) {
            quantize_row(row, &mut quants, &mut scales, SPAN_VECTORS, kernel);
            biased.extend(quants.iter().map(|&q| (q as i16 + 128) as u8));
        }
        QuantMatrix { rows, cols, width, kernel, values: Values::Biased { biased, scales } }
    }

    /// Keeps Q8_0 weights `[rows, cols]` given as GGUF blocks (`cols` a multiple of 32)
    /// exactly, to be multiplied on `kernel` (which the CPU must support): each block's f16
    /// scale and 32 values as stored, where dequantizing and quantizing again would move
    /// the values of blocks whose largest value is not ±127. Rows convert independently, a
    /// range of them on each thread.
    pub fn from_q8_0(blocks: &[u8], rows: usize, cols: usize, kernel: Kernel) -> QuantMatrix {
        assert!(kernel.is_supported(), "this CPU cannot run the {kernel} kernel");
        assert_eq!(cols % BLOCK, 0, "Q8_0 rows are whole blocks");
        let row_bytes = cols / BLOCK * Q8_0_BLOCK_BYTES;
        assert_eq!(blocks.len(), rows * row_bytes, "blocks must cover rows × cols");
        let width = cols.next_multiple_of(VECTOR);
        let BiasedRows { biased, scales } = convert_on_threads(rows, |range| {
            BiasedRows::convert(&blocks[range.start * row_bytes..range.end * row_bytes], row_bytes, width)
        });
        QuantMatrix { rows, cols, width, kernel, values: Values::Biased { biased, scales } }
    }

    /// Keeps 4-bit weights `[rows, cols]` given as GGUF blocks (`cols` a multiple of the
    /// code's block) exactly, to be multiplied on `kernel` (which the CPU must support).
    /// Rows convert independently, a range of them on each thread.
    pub fn from_four_bit(code: FourBit, blocks: &[u8], rows: usize, cols: usize, kernel: Kernel) -> QuantMatrix {
        assert!(kernel.is_supported(), "this CPU cannot run the {kernel} kernel");
        assert_eq!(cols % code.block_values(), 0, "4-bit rows are whole blocks");
        let row_bytes = cols / code.block_values() * code.block_bytes();
        assert_eq!(blocks.len(), rows * row_bytes, "blocks must cover rows × cols");
        let width = cols.next_multiple_of(VECTOR);
        let NibbleRows { packed, scales, mins } = convert_on_threads(rows, |range| {
            NibbleRows::convert(code, &blocks[range.start * row_bytes..range.end * row_bytes], row_bytes, width)
        });
        QuantMatrix { rows, cols, width, kernel, values: Values::Nibbles { packed, scales, mins } }
    }

    /// Keeps Q6_K weights `[rows, cols]` given as GGUF super-blocks (`cols` a multiple of
    /// 256) exactly, to be multiplied on `kernel` (which the CPU must support).
    pub fn from_q6_k(blocks: &[u8], rows: usize, cols: usize, kernel: Kernel) -> QuantMatrix {
        assert!(kernel.is_supported(), "this CPU cannot run the {kernel} kernel");
        assert_eq!(cols % Q6_K_VALUES, 0, "Q6_K rows are whole super-blocks");
        assert_eq!(blocks.len(), rows * cols / Q6_K_VALUES * Q6_K_BLOCK_BYTES, "blocks must cover rows × cols");
        // Super-blocks convert independently, a range of them on each thread.
        let SixBitSpans { packed, scales } = convert_on_threads(blocks.len() / Q6_K_BLOCK_BYTES, |range| {
            SixBitSpans::convert(&blocks[range.start * Q6_K_BLOCK_BYTES..range.end * Q6_K_BLOCK_BYTES])
        });
        QuantMatrix { rows, cols, width: cols, kernel, values: Values::SixBit { packed, scales } }
    }

    /// What input rows need to meet these weights.
    fn input_form(&self) -> InputForm {
        match self.values {
            Values::Biased { .. } => InputForm::Bytes,
            Values::Nibbles { .. } => InputForm::FourBit,
            Values::SixBit { .. } => InputForm::SixBit,
        }
    }

    /// The spans of a row of these weights.
    fn spans(&self) -> impl Iterator<Item = Span> {
        spans(self.width, self.input_form().span_vectors())
    }

    /// `(rows, cols)` of the weights.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Quantizes `m` input rows of `cols` values for [`Self::multiply`].
    pub fn quantize_input(&self, x: &[f32], m: usize) -> QuantizedRows {
        QuantizedRows::new(x, m, self.cols, self.width, self.kernel, self.input_form())
    }

    /// Products of the weight rows `rows` with every input row, row-major:
    /// `out[r * rows.len() + (j - rows.start)] = W[j] · x[r]`. Disjoint row ranges can run in
    /// parallel.
    pub fn multiply(&self, input: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
        assert!(input.width == self.width && input.form == self.input_form(), "input quantized for another matrix");
        assert!(rows.end <= self.rows && out.len() == rows.len() * input.rows, "output range out of bounds");
        // SAFETY (every arm): `quantize` checked that the CPU runs `self.kernel`, and the
        // asserts above keep every access in bounds.
        match self.kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => unsafe { avx512::multiply(self, input, out, rows) },
            #[cfg(target_arch = "x86_64")]
            Kernel::AvxVnni => unsafe { avx2::multiply_vnni(self, input, out, rows) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { avx2::multiply(self, input, out, rows) },
            #[cfg(target_arch = "aarch64")]
            Kernel::NeonDotprod => unsafe { neon::multiply_dotprod(self, input, out, rows) },
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => unsafe { neon::multiply(self, input, out, rows) },
            _ => reference::multiply(self, input, out, rows),
        }
    }
}

impl QuantizedRows {
    fn new(x: &[f32], m: usize, cols: usize, width: usize, kernel: Kernel, form: InputForm) -> QuantizedRows {
        assert_eq!(x.len(), m * cols, "input must be m × cols");
        if !crate::threads::worth_splitting(m) {
            return Self::on_this_thread(x, m, cols, width, kernel, form);
        }
        let parts = crate::threads::map_ranges(m, |rows| {
            Self::on_this_thread(&x[rows.start * cols..rows.end * cols], rows.len(), cols, width, kernel, form)
        });
        let mut all = Self::empty(m, width, form);
        for part in parts {
            all.rows += part.rows;
            all.quants.extend_from_slice(&part.quants);
            all.scales.extend_from_slice(&part.scales);
            all.bias_corrections.extend_from_slice(&part.bias_corrections);
            all.min_terms.extend_from_slice(&part.min_terms);
        }
        all
    }

    /// [`Self::new`] on the calling thread.
    fn on_this_thread(
        x: &[f32],
        m: usize,
        cols: usize,
        width: usize,
        kernel: Kernel,
        form: InputForm,
    ) -> QuantizedRows {
        let mut rows = Self::empty(m, width, form);
        rows.rows = m;
        rows.quants.resize(m * width, 0);
        rows.fill(x, cols, kernel);
        rows
    }

    /// No rows yet, with room for `m`.
    fn empty(m: usize, width: usize, form: InputForm) -> QuantizedRows {
        let lanes = m * spans(width, form.span_vectors()).count() * LANES;
        QuantizedRows {
            rows: 0,
            width,
            quants: Vec::with_capacity(m * width),
            scales: Vec::with_capacity(m * width / BLOCK),
            bias_corrections: Vec::with_capacity(if form.min_terms() { 0 } else { lanes }),
            form,
            min_terms: Vec::with_capacity(if form.min_terms() { lanes } else { 0 }),
        }
    }

    /// The spans of a row, cut as the weights' rows are.
    fn spans(&self) -> impl Iterator<Item = Span> {
        spans(self.width, self.form.span_vectors())
    }

    /// Index in `bias_corrections` or `min_terms` where input row `r`'s spans start.
    fn lanes_start(&self, r: usize) -> usize {
        r * self.spans().count() * LANES
    }

    fn fill(&mut self, x: &[f32], cols: usize, kernel: Kernel) {
        let span_vectors = self.form.span_vectors();
        for (row, quants) in x.chunks_exact(cols).zip(self.quants.chunks_exact_mut(self.width)) {
            let first_scale = self.scales.len();
            quantize_row(row, quants, &mut self.scales, span_vectors, kernel);
            for span in spans(self.width, span_vectors) {
                let sums = lane_sums(&quants[span.start..][..span.vectors * VECTOR], kernel);
                if self.form.min_terms() {
                    let scales = &self.scales[first_scale + span.start / BLOCK..][..span.blocks()];
                    self.min_terms.extend((0..LANES).map(|lane| sums[lane] as f32 * scales[lane % span.blocks()]));
                } else {
                    self.bias_corrections.extend(sums.map(|sum| -128 * sum));
                }
            }
        }
    }
}

/// Weight rows per tile: a tile's weights stay in L1 while every input row meets them, and
/// each group of input rows comes from L2 once per tile. Tiles of 16 rows made a 512-token
/// prefill 10% faster than tiles of 4 on AVX-512 (no change measured with AVX2).
const TILE_ROWS: usize = 16;
/// Weight rows ahead of a block that its first group of input rows pulls into the cache.
/// Four rows were too short a distance for memory to keep streaming: a one-row pass
/// streamed 11 GB/s per core on AMD Zen 4 with them, 19 GB/s with 8.
const PREFETCH_ROWS: usize = 8;
/// Input rows per group: a group's accumulators stay in registers (left-over rows join the
/// last group where the kernel's registers hold them, see [`blocks`]).
const GROUP: usize = 4;

/// Where a block of products goes: weight rows from `row0`, input rows from `r0`,
/// written to `out[`[`Block::index`]`(j, i)]`.
#[derive(Clone, Copy)]
struct Block {
    row0: usize,
    r0: usize,
    column: usize,
    /// Weight rows per input row in the output.
    width: usize,
}

/// The blocks of the products of weight rows `rows` with `m` input rows: tiles of up to
/// [`TILE_ROWS`] weight rows, each met by groups of [`GROUP`] input rows in turn, the rows
/// left over joining the last group where it stays within `largest` (see [`LargerGroups`]), as
/// `(tile, group, where)`. (Iterators rather than closures: a closure would not be compiled
/// with the target features of the kernel that runs it.)
///
/// The first group's arithmetic overlaps with the weights streaming in from memory; a later
/// group's does not. A lone row there ran one weight row at a time and cost as much as two
/// rows (a 5-node pass's multiplies 3.9 ms against 2.6 for four nodes, 3.1 with a group of
/// five; AVX-512, 1,536 cached tokens). Two left-over rows in a group of their own cost a third
/// more per row than groups of four to six (AVX-512, Zen 4), so they join the last group where
/// the registers hold six.
fn blocks(rows: Range<usize>, m: usize, largest: usize) -> impl Iterator<Item = (usize, usize, Block)> {
    let (start, end, width) = (rows.start, rows.end, rows.len());
    // Groups by index, not an iterator of groups per tile: a prefill's blocks are many and
    // small, and the nested iterator took 2% of it.
    let groups = LargerGroups::new(m, GROUP, largest);
    (0..width.div_ceil(TILE_ROWS) * groups.len()).map(move |k| {
        let (tile_start, group) = (start + k / groups.len() * TILE_ROWS, groups.get(k % groups.len()));
        let tile = (end - tile_start).min(TILE_ROWS);
        (tile, group.len(), Block { row0: tile_start, r0: group.start, column: tile_start - start, width })
    })
}

impl Block {
    /// Where the product of weight row `row0 + j` with input row `r0 + i` goes in the output
    /// ([`QuantMatrix::multiply`]'s layout).
    #[inline(always)]
    fn index(&self, j: usize, i: usize) -> usize {
        (self.r0 + i) * self.width + self.column + j
    }

    /// Writes the products of this block's weight rows (`sums[j]`) with its input rows
    /// (`sums[j][i]`) to their places in `out`.
    #[inline(always)]
    fn write<const R: usize, const G: usize>(&self, sums: &[[f32; G]; R], out: &mut [f32]) {
        for (j, sums) in sums.iter().enumerate() {
            for (i, sum) in sums.iter().enumerate() {
                out[self.index(j, i)] = *sum;
            }
        }
    }

    /// The blocks of `R` weight rows that make up the `tile` rows starting at this one (a
    /// multiple of `R`).
    fn tile_by<const R: usize>(self, tile: usize) -> impl Iterator<Item = Block> {
        (0..tile).step_by(R).map(move |j| Block { row0: self.row0 + j, column: self.column + j, ..self })
    }

    /// The blocks of one weight row and one input row that make up a `tile` × `group` block.
    fn one_by_one(self, tile: usize, group: usize) -> impl Iterator<Item = Block> {
        (0..tile).flat_map(move |j| {
            (0..group).map(move |i| Block { row0: self.row0 + j, r0: self.r0 + i, column: self.column + j, ..self })
        })
    }
}

/// `[f(0), …, f(N − 1)]` in a plain loop that is inlined into the kernel. A block's
/// operands built by `std::array::from_fn` went through calls of its own at every
/// block, 2% of a prefill (measured on AVX-512).
#[inline(always)]
pub(super) fn indexed<T: Copy, const N: usize>(mut f: impl FnMut(usize) -> T) -> [T; N] {
    let mut values = [std::mem::MaybeUninit::<T>::uninit(); N];
    for (i, value) in values.iter_mut().enumerate() {
        value.write(f(i));
    }
    // SAFETY: every element was written above, and `[MaybeUninit<T>; N]` has the layout of `[T; N]`.
    unsafe { std::mem::transmute_copy(&values) }
}

/// Per lane of a span's input bytes: the sum of the bytes the lane meets.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn lane_sums(bytes: &[i8], kernel: Kernel) -> [i32; LANES] {
    // SAFETY (both arms): the CPU has the features the functions are compiled for.
    #[cfg(target_arch = "x86_64")]
    match kernel {
        Kernel::Avx512Vnni => return unsafe { avx512::lane_sums(bytes) },
        Kernel::AvxVnni | Kernel::Avx2 => return unsafe { avx2::lane_sums(bytes) },
        _ => {}
    }
    lane_sums_portable(bytes)
}

fn lane_sums_portable(bytes: &[i8]) -> [i32; LANES] {
    std::array::from_fn(|lane| bytes.chunks_exact(VECTOR).flat_map(|v| &v[lane * 4..][..4]).map(|&q| q as i32).sum())
}

/// Quantizes `row` (zero-padded to `quants.len()`) in blocks of 32, appending one scale
/// per block (`scale = max|v| / 127`, `q = round(v / scale)`), and writes the values in
/// the spans' order (see [`Span::position`]).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn quantize_row(row: &[f32], quants: &mut [i8], scales: &mut Vec<f32>, span_vectors: usize, kernel: Kernel) {
    // SAFETY (both arms): the CPU has the features the functions are compiled for.
    #[cfg(target_arch = "x86_64")]
    match kernel {
        Kernel::Avx512Vnni => return unsafe { avx512::quantize_row(row, quants, scales, span_vectors) },
        Kernel::AvxVnni | Kernel::Avx2 => return unsafe { avx2::quantize_row(row, quants, scales, span_vectors) },
        _ => {}
    }
    quantize_row_portable(row, quants, scales, span_vectors);
}

fn quantize_row_portable(row: &[f32], quants: &mut [i8], scales: &mut Vec<f32>, span_vectors: usize) {
    // SAFETY: the portable block code needs no CPU feature.
    unsafe { quantize_blocks::<Portable>(row, quants, scales, span_vectors) }
}

/// Quantizes one block of 32 values: returns `scale = max|v| / 127` and writes
/// `q = round(v / scale)` (to nearest, ties to even; clamped to ±127). Vector versions
/// compute the same maximum, scale and rounding, so the same bytes.
trait BlockQuantizer {
    unsafe fn quantize(block: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> f32;
}

struct Portable;

impl BlockQuantizer for Portable {
    #[inline(always)]
    unsafe fn quantize(block: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> f32 {
        let max = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = max / 127.0;
        let inverse = if scale == 0.0 { 0.0 } else { 1.0 / scale };
        for (q, v) in q.iter_mut().zip(block) {
            *q = (v * inverse).round_ties_even().clamp(-127.0, 127.0) as i8;
        }
        scale
    }
}

/// The blocks of `row` (zero-padded) through `Q`, in the spans' order. The caller runs it
/// with `Q`'s target features.
#[inline(always)]
unsafe fn quantize_blocks<Q: BlockQuantizer>(
    row: &[f32],
    quants: &mut [i8],
    scales: &mut Vec<f32>,
    span_vectors: usize,
) {
    let mut padded = [0f32; BLOCK];
    place_blocks(quants, scales, span_vectors, |start, q| {
        // A whole block is read where it is: copied first, it went through a call to
        // memcpy and a stalled reload, half the time quantizing inputs took (AVX-512,
        // Zen 4).
        let block = match row.get(start..start + BLOCK) {
            Some(values) => values.try_into().expect("a block is BLOCK values"),
            None => {
                let values = &row[start.min(row.len())..];
                padded[..values.len()].copy_from_slice(values);
                padded[values.len()..].fill(0.0);
                &padded
            }
        };
        // SAFETY: the caller runs this with `Q`'s target features.
        unsafe { Q::quantize(block, q) }
    });
}

/// Fills `quants` (a row of whole spans) block by block in row order: `block(start, q)`
/// writes the 32 values of the block that starts at value `start` and returns its scale,
/// which is appended to `scales`; the values go to their places in the spans' order (see
/// [`Span::position`]).
#[inline(always)]
fn place_blocks(
    quants: &mut [i8],
    scales: &mut Vec<f32>,
    span_vectors: usize,
    mut block: impl FnMut(usize, &mut [i8; BLOCK]) -> f32,
) {
    let mut q = [0i8; BLOCK];
    for span in spans(quants.len(), span_vectors) {
        let out = &mut quants[span.start..][..span.vectors * VECTOR];
        let groups = span.group_positions();
        for b in 0..span.blocks() {
            scales.push(block(span.start + b * BLOCK, &mut q));
            for (four, &group) in q.chunks_exact(4).zip(&groups) {
                out[group + 4 * b..][..4].copy_from_slice(four);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// GGUF Q4_1 blocks for `rows × cols` weights.
    fn q4_1_blocks(rows: usize, cols: usize, seed: u32) -> Vec<u8> {
        let bytes = values(rows * cols / BLOCK * 20, seed);
        bytes
            .chunks_exact(20)
            .flat_map(|b| {
                let scale = half::f16::from_f32(0.01 + 0.02 * b[0].abs()).to_le_bytes();
                let min = half::f16::from_f32(-0.15 * b[1].abs()).to_le_bytes();
                let quants = b[4..].iter().map(|v| ((v + 1.0) * 127.99) as u8);
                scale.into_iter().chain(min).chain(quants)
            })
            .collect()
    }

    /// GGUF Q8_0 blocks for `rows × cols` weights, with values −128 and 127 among them.
    fn q8_0_blocks(rows: usize, cols: usize, seed: u32) -> Vec<u8> {
        let bytes = values(rows * cols / BLOCK * Q8_0_BLOCK_BYTES, seed);
        bytes
            .chunks_exact(Q8_0_BLOCK_BYTES)
            .enumerate()
            .flat_map(|(b, v)| {
                let scale = half::f16::from_f32(0.001 + 0.02 * v[0].abs()).to_le_bytes();
                let quants = v[2..].iter().enumerate().map(move |(i, v)| match (i + b) % 11 {
                    0 => i8::MIN as u8,
                    1 => i8::MAX as u8,
                    _ => (v * 127.0) as i8 as u8,
                });
                scale.into_iter().chain(quants)
            })
            .collect()
    }

    /// The same shape in every code: Q8_0 quantized and as stored, and 4-bit.
    fn every_code(rows: usize, cols: usize, seed: u32, kernel: Kernel) -> [QuantMatrix; 3] {
        [
            QuantMatrix::quantize(&values(rows * cols, seed), rows, cols, kernel),
            QuantMatrix::from_q8_0(&q8_0_blocks(rows, cols, seed), rows, cols, kernel),
            QuantMatrix::from_four_bit(FourBit::Q4_1, &q4_1_blocks(rows, cols, seed), rows, cols, kernel),
        ]
    }

    fn product(w: &QuantMatrix, x: &[f32], m: usize) -> Vec<f32> {
        let input = w.quantize_input(x, m);
        let mut out = vec![0f32; m * w.rows];
        w.multiply(&input, &mut out, 0..w.rows);
        out
    }

    fn reference_product(w: &QuantMatrix, x: &[f32], m: usize) -> Vec<f32> {
        let input = w.quantize_input(x, m);
        let mut out = vec![0f32; m * w.rows];
        reference::multiply(w, &input, &mut out, 0..w.rows);
        out
    }

    #[test]
    fn every_kernel_matches_the_reference_bit_for_bit() {
        // Whole tiles of weight rows and partial ones, odd and even, met by every size of group.
        let shapes = [
            (7, 96, 1),
            (9, 576, 5),
            (13, 64, 9),
            (4, 1536, 4),
            (6, 1088, 3),
            (5, 320, 2),
            (8, 576, 17),
            (37, 576, 9),
            (34, 320, 6),
            (18, 576, 10),
            (16, 1536, 14),
        ];
        for kernel in Kernel::supported() {
            for (rows, cols, m) in shapes {
                for w in every_code(rows, cols, 3, kernel) {
                    let x = values(m * cols, 11);
                    let code = w.input_form();
                    assert_eq!(
                        product(&w, &x, m),
                        reference_product(&w, &x, m),
                        "{kernel}, {code:?}: {rows}×{cols}, m = {m}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_kernel_gives_the_same_bits() {
        let (rows, cols, m) = (9, 1088, 6);
        let x = values(m * cols, 37);
        let results: Vec<(Kernel, Vec<Vec<f32>>)> = Kernel::supported()
            .into_iter()
            .map(|kernel| (kernel, every_code(rows, cols, 31, kernel).iter().map(|w| product(w, &x, m)).collect()))
            .collect();
        for (kernel, result) in &results {
            assert_eq!(result, &results[0].1, "{kernel} against {}", results[0].0);
        }
    }

    #[test]
    fn vector_quantization_matches_the_portable_code() {
        for kernel in Kernel::supported() {
            for cols in [100, 576, 1536, 1088] {
                let mut row = values(cols, 7);
                row[..BLOCK].fill(0.0);
                row[BLOCK] = 3.5;
                let width = cols.next_multiple_of(VECTOR);
                let (mut plain, mut fast) = (vec![0i8; width], vec![0i8; width]);
                let (mut plain_scales, mut fast_scales) = (Vec::new(), Vec::new());
                quantize_row_portable(&row, &mut plain, &mut plain_scales, SPAN_VECTORS);
                quantize_row(&row, &mut fast, &mut fast_scales, SPAN_VECTORS, kernel);
                assert_eq!((&plain, &plain_scales), (&fast, &fast_scales), "{kernel}: {cols} columns");
                for span in spans(width, SPAN_VECTORS) {
                    let bytes = &plain[span.start..][..span.vectors * VECTOR];
                    let expected = lane_sums_portable(bytes);
                    assert_eq!(lane_sums(bytes, kernel), expected, "{kernel}: {cols} columns, span {}", span.start);
                }
            }
        }
    }

    #[test]
    fn each_output_row_is_independent_of_the_batch() {
        // 131 rows: a prefill chunk's size, quantized in ranges on several threads.
        for m in [5, 6, 7, 9, 10, 131] {
            each_output_row_is_independent_of_a_batch_of(m);
        }
    }

    fn each_output_row_is_independent_of_a_batch_of(m: usize) {
        let (rows, cols) = (11, 320);
        let x = values(m * cols, 17);
        for w in every_code(rows, cols, 5, Kernel::best()) {
            let together = product(&w, &x, m);
            for r in 0..m {
                let alone = product(&w, &x[r * cols..(r + 1) * cols], 1);
                let column: Vec<f32> = (0..rows).map(|j| together[r * rows + j]).collect();
                assert_eq!(alone, column, "input row {r} of {m}");
            }
        }
    }

    #[test]
    fn product_is_close_to_the_f32_product() {
        let (rows, cols, m) = (6, 200, 3);
        let wf = values(rows * cols, 23);
        let x = values(m * cols, 29);
        let got = product(&QuantMatrix::quantize(&wf, rows, cols, Kernel::best()), &x, m);
        for j in 0..rows {
            for r in 0..m {
                let exact: f32 = (0..cols).map(|c| wf[j * cols + c] * x[r * cols + c]).sum();
                let err = (got[r * rows + j] - exact).abs();
                assert!(err < 0.05 + 0.01 * exact.abs(), "row {j}, input {r}: {} vs {exact}", got[r * rows + j]);
            }
        }
    }

    #[test]
    fn four_bit_product_is_close_to_the_product_of_the_stored_weights() {
        let (rows, cols, m) = (5, 320, 3);
        let blocks = q4_1_blocks(rows, cols, 41);
        let x = values(m * cols, 43);
        for code in [FourBit::Q4_0, FourBit::Q4_1] {
            let blocks: Vec<u8> = match code {
                FourBit::Q4_1 => blocks.clone(),
                FourBit::Q4_0 => blocks.chunks_exact(20).flat_map(|b| b[..2].iter().chain(&b[4..]).copied()).collect(),
                FourBit::Q4K => unreachable!("Q4_K has a test of its own"),
            };
            let stored: Vec<f32> = decoded(code, &blocks)
                .into_iter()
                .flat_map(|(scale, min, values)| values.map(|q| scale.value() * q as f32 + min.value()))
                .collect();
            let got = product(&QuantMatrix::from_four_bit(code, &blocks, rows, cols, Kernel::best()), &x, m);
            for j in 0..rows {
                for r in 0..m {
                    let exact: f32 = (0..cols).map(|c| stored[j * cols + c] * x[r * cols + c]).sum();
                    let err = (got[r * rows + j] - exact).abs();
                    assert!(
                        err < 0.05 + 0.01 * exact.abs(),
                        "{code:?} row {j}, input {r}: {} vs {exact}",
                        got[r * rows + j]
                    );
                }
            }
        }
    }

    #[test]
    fn largest_products_stay_exact_on_every_kernel() {
        let (rows, cols) = (4, 1088);
        let mut blocks = q4_1_blocks(rows, cols, 47);
        for block in blocks.chunks_exact_mut(20) {
            block[4..].fill(0xFF); // every value 15
        }
        for x in [vec![1.0f32; cols], vec![-1.0f32; cols]] {
            for kernel in Kernel::supported() {
                let w = QuantMatrix::from_four_bit(FourBit::Q4_1, &blocks, rows, cols, kernel);
                assert_eq!(product(&w, &x, 1), reference_product(&w, &x, 1), "{kernel}");
            }
        }
    }

    #[test]
    fn q8_0_blocks_kept_as_stored_are_the_blocks_quantizing_their_values_gives() {
        // Scales that are powers of two and a ±127 in every block: quantizing the stored
        // weights' values gives back the same scales and values, so the same products.
        let (rows, cols, m) = (6, 1088, 5);
        let mut blocks = q8_0_blocks(rows, cols, 53);
        for (b, block) in blocks.chunks_exact_mut(Q8_0_BLOCK_BYTES).enumerate() {
            let scale = 2f32.powi(-5 - (b % 4) as i32);
            block[..2].copy_from_slice(&half::f16::from_f32(scale).to_le_bytes());
            block[2 + b % BLOCK] = if b % 2 == 0 { 127 } else { (-127i8) as u8 };
            block[2..].iter_mut().filter(|q| **q == i8::MIN as u8).for_each(|q| *q = 0);
        }
        let stored: Vec<f32> = blocks
            .chunks_exact(Q8_0_BLOCK_BYTES)
            .flat_map(|block| {
                let scale = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
                block[2..].iter().map(move |&q| scale * q as i8 as f32)
            })
            .collect();
        let x = values(m * cols, 59);
        for kernel in Kernel::supported() {
            let kept = QuantMatrix::from_q8_0(&blocks, rows, cols, kernel);
            let quantized = QuantMatrix::quantize(&stored, rows, cols, kernel);
            assert_eq!(product(&kept, &x, m), product(&quantized, &x, m), "{kernel}");
        }
    }

    /// The blocks of 32 of every stored block in `blocks`.
    fn decoded(code: FourBit, blocks: &[u8]) -> Vec<Decoded> {
        let mut out = Vec::new();
        for block in blocks.chunks_exact(code.block_bytes()) {
            code.decode(block, &mut out);
        }
        out
    }

    #[test]
    fn four_bit_blocks_decode_as_gguf_stores_them() {
        let mut q4_1 = vec![0u8; 20];
        q4_1[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        q4_1[2..4].copy_from_slice(&half::f16::from_f32(-1.0).to_le_bytes());
        q4_1[4] = 0x3A; // value 0 = 0xA, value 16 = 0x3
        let (scale, min, values) = decoded(FourBit::Q4_1, &q4_1)[0];
        assert_eq!((scale.value(), min.value(), values[0], values[16], values[1]), (0.5, -1.0, 10, 3, 0));
        let (scale, min, values) = decoded(FourBit::Q4_0, &[&q4_1[..2], &q4_1[4..]].concat())[0];
        assert_eq!((scale.value(), min.value(), values[0], values[16]), (0.5, -4.0, 10, 3));
    }

    /// Q4_K weights `[rows, cols]` written by the test models' ggml encoder, and the values
    /// ggml decodes them to.
    fn q4_k(rows: usize, cols: usize, seed: u32) -> (Vec<u8>, Vec<f32>) {
        copilotd_test_support::ggml::encode(candle_core::quantized::GgmlDType::Q4K, &values(rows * cols, seed))
    }

    /// [`q4_k`] in Q6_K.
    fn q6_k(rows: usize, cols: usize, seed: u32) -> (Vec<u8>, Vec<f32>) {
        copilotd_test_support::ggml::encode(candle_core::quantized::GgmlDType::Q6K, &values(rows * cols, seed))
    }

    #[test]
    fn q6_k_blocks_decode_to_what_ggml_decodes() {
        let (blocks, decoded) = q6_k(3, 512, 67);
        let ours: Vec<f32> = blocks
            .chunks_exact(Q6_K_BLOCK_BYTES)
            .map(decode_q6_k)
            .flat_map(|(d, scales, values)| {
                (0..Q6_K_VALUES).map(move |i| d * scales[i / 16] as f32 * (values[i] as i32 - 32) as f32)
            })
            .collect();
        assert_eq!(ours, decoded);
    }

    #[test]
    fn q4_k_blocks_decode_to_what_ggml_decodes() {
        let (blocks, ggml) = q4_k(3, 512, 53);
        let ours: Vec<f32> = decoded(FourBit::Q4K, &blocks)
            .into_iter()
            .flat_map(|(scale, min, values)| values.map(|q| scale.value() * q as f32 + min.value()))
            .collect();
        assert_eq!(ours, ggml);
    }

    #[test]
    fn k_quant_weights_run_exactly_on_every_kernel() {
        let shapes = [(5, 256, 3), (9, 1536, 6), (4, 768, 17), (3, 8960, 2), (34, 512, 13)];
        for (six_bit, (rows, cols, m)) in [false, true].into_iter().flat_map(|six| shapes.map(|shape| (six, shape))) {
            let name = if six_bit { "Q6_K" } else { "Q4_K" };
            let (blocks, decoded) = if six_bit { q6_k(rows, cols, 59) } else { q4_k(rows, cols, 59) };
            let x = values(m * cols, 61);
            let mut first: Option<Vec<f32>> = None;
            for kernel in Kernel::supported() {
                let w = if six_bit {
                    QuantMatrix::from_q6_k(&blocks, rows, cols, kernel)
                } else {
                    QuantMatrix::from_four_bit(FourBit::Q4K, &blocks, rows, cols, kernel)
                };
                let got = product(&w, &x, m);
                assert_eq!(got, reference_product(&w, &x, m), "{kernel}, {name}: {rows}×{cols}, m = {m}");
                assert_eq!(&got, first.get_or_insert_with(|| got.clone()), "{kernel} against the first kernel");
                for (j, r) in (0..rows).flat_map(|j| (0..m).map(move |r| (j, r))) {
                    let (w, x) = (&decoded[j * cols..][..cols], &x[r * cols..][..cols]);
                    let exact: f32 = w.iter().zip(x).map(|(w, x)| w * x).sum();
                    // The input's 8-bit rounding moves each value by at most half a step
                    // (its block's largest magnitude / 127).
                    let bound: f32 = (0..cols)
                        .map(|c| {
                            let block = &x[c / BLOCK * BLOCK..][..BLOCK];
                            w[c].abs() * block.iter().fold(0f32, |a, v| a.max(v.abs())) / 254.0
                        })
                        .sum();
                    let err = (got[r * rows + j] - exact).abs();
                    assert!(
                        err <= 1.01 * bound + 1e-3,
                        "{name} row {j}, input {r}: {} vs {exact} (bound {bound})",
                        got[r * rows + j]
                    );
                }
            }
        }
    }

    /// Eight lane sums at a time are each [`sum_lanes`] bit for bit, on values of mixed
    /// magnitudes (where another order of additions would round differently), for every
    /// count of arrays a block has and more.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn lane_sums_eight_at_a_time_are_the_reference_sums() {
        #[target_feature(enable = "avx2")]
        unsafe fn sums_of(lanes: &[[f32; LANES]]) -> Vec<f32> {
            let mut sums = vec![f32::NAN; lanes.len()];
            avx2::sum_lanes_of_avx2(lanes, &mut sums);
            sums
        }
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let values = values(21 * LANES, 11);
        let lanes: Vec<[f32; LANES]> = values
            .chunks_exact(LANES)
            .enumerate()
            .map(|(k, chunk)| std::array::from_fn(|l| chunk[l] * 10f32.powi(((k + 3 * l) % 9) as i32 - 4)))
            .collect();
        for n in 1..=lanes.len() {
            let expected: Vec<u32> = lanes[..n].iter().map(|l| sum_lanes(*l).to_bits()).collect();
            // SAFETY: the CPU has AVX2 (checked above).
            let got: Vec<u32> = unsafe { sums_of(&lanes[..n]) }.iter().map(|s| s.to_bits()).collect();
            assert_eq!(got, expected, "{n} arrays");
        }
    }

    #[test]
    fn zero_rows_give_zero() {
        let w = QuantMatrix::quantize(&[0.0; 64], 1, 64, Kernel::best());
        assert_eq!(product(&w, &values(64, 1), 1), [0.0]);
    }

    /// How fast each vector kernel streams weights on one core (measured, never asserted):
    /// `cargo test -p copilotd-model --release --lib streaming_speed -- --ignored --nocapture`.
    /// A 71,680 × 1,536 matrix (110 M weights: 69 MB as Q4_1, 65 MB as Q4_K, 89 MB as Q6_K,
    /// 124 MB as Q8_0; twice the largest L3 cache of our machines) times 1 and 16 input rows;
    /// for one row the figure to compare is the machine's memory bandwidth on one core.
    #[test]
    #[ignore]
    fn streaming_speed() {
        let (rows, cols, repeats) = (71_680, 1_536, 10);
        let blocks = q4_1_blocks(rows, cols, 7);
        let (k_blocks, _) = q4_k(rows, cols, 7);
        let (six_blocks, _) = q6_k(rows, cols, 7);
        let weights = values(rows * cols, 7);
        // The portable kernel is the correctness fallback, not measured here.
        for kernel in Kernel::supported().into_iter().filter(|&k| k != Kernel::Portable) {
            let matrices = [
                ("4-bit (Q4_1)", QuantMatrix::from_four_bit(FourBit::Q4_1, &blocks, rows, cols, kernel), 5.0 / 8.0),
                ("4-bit (Q4_K)", QuantMatrix::from_four_bit(FourBit::Q4K, &k_blocks, rows, cols, kernel), 0.59375),
                ("6-bit (Q6_K)", QuantMatrix::from_q6_k(&six_blocks, rows, cols, kernel), 0.8125),
                ("Q8_0", QuantMatrix::quantize(&weights, rows, cols, kernel), 9.0 / 8.0),
            ];
            for (name, w, bytes_per_weight) in &matrices {
                for m in [1, 16] {
                    let input = w.quantize_input(&values(cols * m, 3), m);
                    let mut out = vec![0f32; m * rows];
                    w.multiply(&input, &mut out, 0..rows);
                    let started = std::time::Instant::now();
                    for _ in 0..repeats {
                        w.multiply(&input, &mut out, 0..rows);
                    }
                    let seconds = started.elapsed().as_secs_f64() / repeats as f64;
                    let gb_per_s = (rows * cols) as f64 * bytes_per_weight / seconds / 1e9;
                    println!("{kernel} {name}, {m} input rows: {:.2} ms, {gb_per_s:.1} GB/s", seconds * 1e3);
                }
            }
        }
    }

    /// Multiplication speed where memory is no limit: weights of the default model's shapes
    /// (4-bit, Q8_0 as its output matrix, and Q4_K and Q6_K where the width holds their
    /// super-blocks), small enough to stay in L2, times 1 to 16
    /// input rows on one thread. Tree passes are bound by this arithmetic, one-token passes
    /// by [`streaming_speed`].
    ///
    /// `COPILOTD_COMPUTE_CASE` (a case as printed, say `avx2 Q4_1 2048x576x8`) runs that case
    /// alone, one batch, and prints how many multiplies it ran: under
    /// `valgrind --tool=callgrind` the kernel's instructions per product then count exactly,
    /// where a shared machine's timings move by a third.
    #[test]
    #[ignore]
    fn compute_speed() {
        let only = std::env::var("COPILOTD_COMPUTE_CASE").ok();
        for (rows, cols) in [(2_048, 576), (576, 1_536)] {
            let x = values(cols * 16, 9);
            for kernel in Kernel::supported().into_iter().filter(|&k| k != Kernel::Portable) {
                // The codes of `every_code`, in its order, then the K-quants where rows hold whole
                // super-blocks.
                let k_quants = (cols % Q6_K_VALUES == 0).then(|| {
                    let (four_bit, _) = q4_k(rows, cols, 5);
                    let (six_bit, _) = q6_k(rows, cols, 5);
                    [
                        (QuantMatrix::from_four_bit(FourBit::Q4K, &four_bit, rows, cols, kernel), "Q4_K"),
                        (QuantMatrix::from_q6_k(&six_bit, rows, cols, kernel), "Q6_K"),
                    ]
                });
                let codes = every_code(rows, cols, 5, kernel).into_iter().zip(["Q8_0-quantized", "Q8_0", "Q4_1"]);
                for (w, code) in codes.chain(k_quants.into_iter().flatten()) {
                    for m in [1, 2, 3, 4, 8, 16] {
                        let case = format!("{kernel} {code} {rows}x{cols}x{m}");
                        if only.as_ref().is_some_and(|only| *only != case) {
                            continue;
                        }
                        let input = w.quantize_input(&x[..cols * m], m);
                        let mut out = vec![0f32; m * rows];
                        // The best of five batches of about 30 ms each: a shared machine's
                        // bursts of other work fall into some batches, not all.
                        let (repeats, batches) =
                            (1_000_000_000 / (rows * cols * m), if only.is_some() { 1 } else { 5 });
                        w.multiply(&input, &mut out, 0..rows);
                        let seconds = (0..batches)
                            .map(|_| {
                                let started = std::time::Instant::now();
                                for _ in 0..repeats {
                                    w.multiply(&input, &mut out, 0..rows);
                                }
                                started.elapsed().as_secs_f64() / repeats as f64
                            })
                            .fold(f64::INFINITY, f64::min);
                        let products = (rows * cols * m) as f64 / seconds / 1e9;
                        println!(
                            "{case}: {:.1} µs, {products:.0} G products/s ({} multiplies)",
                            seconds * 1e6,
                            1 + batches * repeats
                        );
                    }
                }
            }
        }
    }
}
