//! Attention of a block of queries that share one kv head, over the cache rows and the
//! pending (tree) rows.
//!
//! Query `r` attends to every cache row, then to the pending rows `pending[r]` (its
//! ancestors, then itself), in that order. Softmax is summed sequentially in that order
//! and each output accumulates its rows in that order, so a query's result depends only
//! on the query and the rows it attends to, never on the other queries of the block. That
//! is what keeps tree passes bit-identical to one-token passes.
//!
//! The two loops over the cache rows (scores, weighted sum of values) are where the time
//! goes once the context is long. On x86-64 with AVX2 and FMA and on aarch64 NEON they run
//! in [`vector`], on 8-lane vectors ([`crate::vector::lanes`]; with AVX-512, a tree pass's
//! scores take two cache rows' eight lanes per register, and the weighted sum 16 lanes):
//! several queries share each loaded cache row, so a tree pass reads the cache from L2 a
//! few times instead of once per query and head. The eight partial sums of many
//! scores are combined at once, transposed in registers, rather than one score at a time.
//! [`portable`] is the same arithmetic written plainly
//! (and what the vector code is tested against): an 8-lane partial sum per score combined as
//! `((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7))`, one fused multiply-add per value element and row.
//! The cache rows arrive as half floats ([`crate::kv`]) and are widened to f32 exactly
//! as they are loaded, before any arithmetic; the pending rows arrive widened.

use half::f16;
use half::slice::HalfFloatSliceExt;

use std::ops::Range;

use crate::kernel::Kernel;
use crate::ops::fused_dots;
use crate::vector::{combine, exp};

/// Keys and values one block of queries attends to: the shared cache rows, then per
/// query its own rows among the pending (tree) entries.
pub struct KvRows<'a> {
    pub head_dim: usize,
    pub cache_keys: &'a [f16],
    /// The cache rows' values in [`value_planes`] planes: plane `p` holds elements
    /// `p·w..(p+1)·w` of every row (`w = head_dim / planes`), row after row. None where only
    /// the keys are read ([`score_cache`]).
    pub cache_values: &'a [Vec<f16>],
    pub pending_keys: &'a [f32],
    pub pending_values: &'a [f32],
}

impl<'a> KvRows<'a> {
    /// The keys of cache rows `rows` alone, for [`score_cache`].
    pub fn keys_of(&self, rows: Range<usize>) -> KvRows<'a> {
        let d = self.head_dim;
        KvRows {
            head_dim: d,
            cache_keys: &self.cache_keys[rows.start * d..rows.end * d],
            cache_values: &[],
            pending_keys: &[],
            pending_values: &[],
        }
    }
}

/// Planes the cache's values of `head_dim` elements are stored in: two halves where each is a
/// whole number of 16-lane registers, else one. A one-token pass has three kv heads for two
/// threads; with two planes its weighted sums are six units that each read half of a head's
/// values, instead of three that leave one thread a second whole head while the other waits
/// (and, waiting long enough, sleeps: waking it took 50 µs a layer, measured). Each output
/// element is its own chain of sums, so the planes never change a result.
pub fn value_planes(head_dim: usize) -> usize {
    if head_dim.is_multiple_of(32) {
        2
    } else {
        1
    }
}

/// Attention for a block of query heads that share one kv head: writes query `r`'s output
/// to `outs[r]`. `scores` is scratch space kept by the caller across calls. On `kernel`'s
/// CPU class the vector code runs (AVX2, AVX-512, NEON), else the portable code; both give
/// the same bits.
pub fn attend_block(
    kernel: Kernel,
    queries: &[&[f32]],
    pending: &[&[usize]],
    kv: &KvRows,
    scale: f32,
    scores: &mut Vec<f32>,
    outs: &mut [&mut [f32]],
) {
    let work = Attention::checked(queries, pending, kv, scale);
    check_outputs(&work, outs, kv.head_dim);
    let mut rows = work.score_rows(scores);
    run(kernel, &work, &mut rows, Part::Whole, outs);
}

/// A block's attention cut across threads, first step: the scores of `queries` against the
/// cache rows of `kv` (a range of a kv head's rows; its values and pending rows are not
/// read), into `rows[r][..cached]`. Each score is the one [`attend_block`] computes for that
/// query and row, whatever range the row is scored in.
pub fn score_cache(kernel: Kernel, queries: &[&[f32]], kv: &KvRows, scale: f32, rows: &mut [&mut [f32]]) {
    let none = vec![&[][..]; queries.len()];
    let work = Attention::checked(queries, &none, kv, scale);
    assert!(rows.len() == queries.len(), "one score row per query");
    assert!(rows.iter().all(|row| row.len() >= work.cached()), "a score row per cache row");
    run(kernel, &work, rows, Part::CacheScores, &mut []);
}

/// Second step: given every cache row's score in `rows[r]` (from [`score_cache`]), the
/// pending rows' scores, then the softmax weights in place of all of them. Returns each
/// query's inverse sum of weights, for [`sum_values`].
pub fn weigh_scores(
    kernel: Kernel,
    queries: &[&[f32]],
    pending: &[&[usize]],
    kv: &KvRows,
    scale: f32,
    rows: &mut [&mut [f32]],
) -> Vec<f32> {
    let work = Attention::checked(queries, pending, kv, scale);
    assert!(rows.len() == queries.len(), "one score row per query");
    assert!((0..rows.len()).all(|r| rows[r].len() >= work.row_len(r)), "a score row per attended row");
    let mut inverses = Vec::with_capacity(queries.len());
    run(kernel, &work, rows, Part::Weights(&mut inverses), &mut []);
    inverses
}

/// A block's softmax weights as [`weigh_scores`] leaves them: per query, its row of weights
/// (cache rows, then its pending rows) and the inverse of their sum.
#[derive(Clone, Copy)]
pub struct Weights<'a> {
    pub rows: &'a [&'a [f32]],
    pub inverses: &'a [f32],
}

/// Last step, one value plane at a time: given the [`Weights`] of [`weigh_scores`], query
/// `r`'s output elements of value plane `plane` into `outs[r]`, bit for bit those
/// [`attend_block`] writes there.
pub fn sum_values(
    kernel: Kernel,
    queries: &[&[f32]],
    pending: &[&[usize]],
    kv: &KvRows,
    plane: usize,
    weights: Weights,
    outs: &mut [&mut [f32]],
) {
    // The scale went into the weights.
    let work = Attention::checked(queries, pending, kv, 1.0);
    assert!(plane < work.planes(), "value plane out of range");
    check_outputs(&work, outs, work.plane_width());
    assert!(weights.rows.len() == queries.len() && weights.inverses.len() == queries.len(), "weights per query");
    assert!((0..queries.len()).all(|r| weights.rows[r].len() >= work.row_len(r)), "a weight per attended row");
    run(kernel, &work, &mut [], Part::Plane { plane, weights }, outs);
}

fn check_outputs(work: &Attention, outs: &[&mut [f32]], width: usize) {
    assert!(work.planes() > 0, "outputs need the values");
    assert!(outs.len() == work.queries.len(), "one output per query");
    assert!(outs.iter().all(|o| o.len() == width), "outputs as wide as the values they take");
}

/// What a call computes of a block's attention.
enum Part<'p> {
    /// Scores, softmax and outputs.
    Whole,
    /// The cache rows' scores only.
    CacheScores,
    /// Given the cache rows' scores: the pending rows' scores and the softmax weights in
    /// place; each query's inverse sum of weights into the vector.
    Weights(&'p mut Vec<f32>),
    /// Given the weights: the outputs of one value plane.
    Plane { plane: usize, weights: Weights<'p> },
}

/// Runs `part` of `work` on `kernel`'s vector code where it applies, else the portable code.
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(unused_variables))]
fn run(kernel: Kernel, work: &Attention, rows: &mut [&mut [f32]], part: Part, outs: &mut [&mut [f32]]) {
    if work.kv.head_dim.is_multiple_of(8 * work.planes().max(1)) {
        // SAFETY (every arm): the model runs only on kernels the CPU supports, and the
        // checks of the entry points keep every row the vector code reads in bounds.
        match kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => return unsafe { vector::attend_avx512(work, rows, part, outs) },
            #[cfg(target_arch = "x86_64")]
            Kernel::AvxVnni | Kernel::Avx2 => return unsafe { vector::attend_avx2(work, rows, part, outs) },
            #[cfg(target_arch = "aarch64")]
            Kernel::NeonDotprod | Kernel::Neon => return unsafe { vector::attend_neon(work, rows, part, outs) },
            _ => {}
        }
    }
    portable::attend(work, rows, part, outs);
}

/// The inputs of [`attend_block`].
struct Attention<'a> {
    queries: &'a [&'a [f32]],
    pending: &'a [&'a [usize]],
    kv: &'a KvRows<'a>,
    scale: f32,
}

impl<'a> Attention<'a> {
    /// The inputs, with the shapes every entry point relies on checked.
    fn checked(queries: &'a [&'a [f32]], pending: &'a [&'a [usize]], kv: &'a KvRows<'a>, scale: f32) -> Attention<'a> {
        let d = kv.head_dim;
        let planes = kv.cache_values.len();
        assert!(planes == 0 || d.is_multiple_of(planes), "value planes must split head_dim evenly");
        assert!(
            kv.cache_values.iter().all(|plane| plane.len() * planes == kv.cache_keys.len())
                && kv.pending_keys.len() == kv.pending_values.len(),
            "keys and values must have the same rows"
        );
        let pending_rows = kv.pending_keys.len() / d;
        assert!(pending.iter().all(|p| p.iter().all(|&node| node < pending_rows)), "pending row out of range");
        assert!(queries.len() == pending.len(), "one pending list per query");
        assert!(queries.iter().all(|q| q.len() == d), "queries are head_dim wide");
        Attention { queries, pending, kv, scale }
    }

    fn cached(&self) -> usize {
        self.kv.cache_keys.len() / self.kv.head_dim
    }

    fn planes(&self) -> usize {
        self.kv.cache_values.len()
    }

    /// Value elements per plane.
    fn plane_width(&self) -> usize {
        self.kv.head_dim / self.planes()
    }

    /// The value planes whose elements the outputs of `part` hold, in order.
    fn planes_of(&self, part: &Part) -> Range<usize> {
        match part {
            Part::Whole => 0..self.planes(),
            Part::Plane { plane, .. } => *plane..*plane + 1,
            Part::CacheScores | Part::Weights(_) => 0..0,
        }
    }

    /// `scores` cut into one row per query, wide enough for the cache rows and the
    /// longest pending list. What an earlier block left there is not cleared: every score is
    /// written before it is read.
    fn score_rows<'s>(&self, scores: &'s mut Vec<f32>) -> Vec<&'s mut [f32]> {
        let width = (self.cached() + self.pending.iter().map(|p| p.len()).max().unwrap_or(0)).max(1);
        let needed = self.queries.len() * width;
        if scores.len() < needed {
            scores.resize(needed, 0.0);
        }
        scores[..needed].chunks_exact_mut(width).collect()
    }

    /// The scores query `r` has in its row: the cache rows', then its pending rows'.
    fn row_len(&self, r: usize) -> usize {
        self.cached() + self.pending[r].len()
    }
}

/// The plain version: one query at a time.
mod portable {
    use super::*;

    /// Cache keys a query is scored against in one loop (independent chains).
    const KEY_GROUP: usize = 8;
    /// Output values accumulated at a time.
    const OUTPUT_SLICE: usize = 8;

    /// One plane of the cache rows' values widened to f32, beside the pending rows' (whole).
    struct Widened<'a> {
        head_dim: usize,
        plane: usize,
        plane_width: usize,
        cache_values: Vec<f32>,
        pending_values: &'a [f32],
    }

    fn widen(halves: &[f16]) -> Vec<f32> {
        let mut wide = vec![0f32; halves.len()];
        halves.convert_to_f32_slice(&mut wide);
        wide
    }

    pub(super) fn attend(work: &Attention, rows: &mut [&mut [f32]], part: Part, outs: &mut [&mut [f32]]) {
        let planes = work.planes_of(&part);
        let own_inverses: Vec<f32>;
        let (weights, inverses): (Vec<&[f32]>, &[f32]) = match part {
            Part::CacheScores => return score_all(work, rows),
            Part::Weights(inverses) => return *inverses = weigh_all(work, rows),
            Part::Plane { weights, .. } => (weights.rows.to_vec(), weights.inverses),
            Part::Whole => {
                score_all(work, rows);
                own_inverses = weigh_all(work, rows);
                (rows.iter().map(|row| &**row).collect(), &own_inverses)
            }
        };
        let (d, w) = (work.kv.head_dim, work.plane_width());
        for plane in planes.clone() {
            let offset = (plane - planes.start) * w;
            let kv = Widened {
                head_dim: d,
                plane,
                plane_width: w,
                cache_values: widen(&work.kv.cache_values[plane]),
                pending_values: work.kv.pending_values,
            };
            for (((weights, own), inverse), out) in weights.iter().zip(work.pending).zip(inverses).zip(outs.iter_mut())
            {
                let out = &mut out[offset..offset + w];
                if w.is_multiple_of(OUTPUT_SLICE) {
                    weighted_sum::<OUTPUT_SLICE>(weights, &kv, own, *inverse, out);
                } else {
                    weighted_sum::<1>(weights, &kv, own, *inverse, out);
                }
            }
        }
    }

    /// Every query's scores against the cache rows.
    fn score_all(work: &Attention, rows: &mut [&mut [f32]]) {
        let keys = widen(work.kv.cache_keys);
        for (q, row) in work.queries.iter().zip(rows.iter_mut()) {
            score_cache(q, &keys, work, row);
        }
    }

    /// The pending rows' scores, then every query's softmax weights in place; their inverse sums.
    fn weigh_all(work: &Attention, rows: &mut [&mut [f32]]) -> Vec<f32> {
        score_pending(work, rows);
        rows.iter_mut().enumerate().map(|(r, row)| 1.0 / weigh(&mut row[..work.row_len(r)])).collect()
    }

    /// Given the cache scores in `rows`, adds each query's scores of its pending rows.
    fn score_pending(work: &Attention, rows: &mut [&mut [f32]]) {
        let (d, cached) = (work.kv.head_dim, work.cached());
        for ((q, row), own) in work.queries.iter().zip(rows.iter_mut()).zip(work.pending) {
            for (i, &node) in own.iter().enumerate() {
                let key = &work.kv.pending_keys[node * d..(node + 1) * d];
                row[cached + i] = fused_dots::<1>(q, [key])[0] * work.scale;
            }
        }
    }

    /// Query `q`'s scores against the cache rows `keys`, into `row`.
    fn score_cache(q: &[f32], keys: &[f32], work: &Attention, row: &mut [f32]) {
        let d = work.kv.head_dim;
        let mut groups = keys.chunks_exact(KEY_GROUP * d);
        for (group, out) in groups.by_ref().zip(row.chunks_exact_mut(KEY_GROUP)) {
            let dots = fused_dots::<KEY_GROUP>(q, std::array::from_fn(|k| &group[k * d..(k + 1) * d]));
            for (o, v) in out.iter_mut().zip(dots) {
                *o = v * work.scale;
            }
        }
        let done = work.cached() / KEY_GROUP * KEY_GROUP;
        for (o, key) in row[done..].iter_mut().zip(groups.remainder().chunks_exact(d)) {
            *o = fused_dots::<1>(q, [key])[0] * work.scale;
        }
    }

    /// Turns `scores` into softmax weights `exp(s − max)` in place and returns their sum:
    /// eight partial sums (element `i` into sum `i mod 8`), [`combine`]d, then the tail.
    pub(super) fn weigh(scores: &mut [f32]) -> f32 {
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut lanes = [0f32; 8];
        let mut chunks = scores.chunks_exact_mut(8);
        for chunk in chunks.by_ref() {
            for (lane, s) in lanes.iter_mut().zip(chunk) {
                *s = exp(*s - max);
                *lane += *s;
            }
        }
        let mut sum = combine(lanes);
        for s in chunks.into_remainder() {
            *s = exp(*s - max);
            sum += *s;
        }
        sum
    }

    /// `out = inverse · Σ weights[j] · value_j` over the cache rows, then the `pending`
    /// rows, in that order, for the elements of `kv`'s plane, `N` output values at a time.
    fn weighted_sum<const N: usize>(weights: &[f32], kv: &Widened, pending: &[usize], inverse: f32, out: &mut [f32]) {
        let (d, w) = (kv.head_dim, kv.plane_width);
        let cached = kv.cache_values.len() / w;
        let pending_values = pending.iter().map(|&node| &kv.pending_values[node * d + kv.plane * w..][..w]);
        let values: Vec<&[f32]> = kv.cache_values.chunks_exact(w).chain(pending_values).collect();
        for (slice, out) in out.chunks_exact_mut(N).enumerate() {
            let mut acc = [0f32; N];
            for (&p, value) in weights[..cached + pending.len()].iter().zip(&values) {
                for (a, v) in acc.iter_mut().zip(&value[slice * N..(slice + 1) * N]) {
                    *a = p.mul_add(*v, *a);
                }
            }
            for (o, a) in out.iter_mut().zip(acc) {
                *o = a * inverse;
            }
        }
    }
}

/// The same arithmetic on 8-lane vectors ([`Lanes`](crate::vector::lanes::Lanes)), several queries at a time.
/// Compiled for AVX2 (16 registers), with AVX-512VL enabled (32 registers: every
/// accumulator in one) and for NEON (an 8-lane vector is two registers).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod vector {
    use super::*;
    use crate::groups::ending_in_a_pair;
    use crate::vector::exp_lanes;
    use crate::vector::lanes::{self, Lanes, Steps};
    use std::ops::Range;

    /// Queries that share each loaded value register in the weighted sum: as many as
    /// keep their sums, four value registers and a weight in the register file (on AVX-512,
    /// six: 29 of the 32 registers; a 2,048-token prefill ran about 4% faster than with four).
    const fn sum_group(registers: usize) -> usize {
        if registers == WIDE {
            6
        } else {
            2
        }
    }
    /// Values a score's eight partial sums are folded to before they are combined.
    const FOLDED: usize = 4;
    /// Cache rows scored before their folded sums are finished (a multiple of 8 and of
    /// every tile's row count).
    const SCORE_CHUNK: usize = 48;
    /// 8-lane vectors the register file holds: 32 with AVX-512VL, 16 with AVX2 and with
    /// NEON (32 registers, two per vector). The tiles below are sized so that their
    /// sums and loaded rows stay in registers; spilling them to the stack costs more
    /// than the cache reads the tiles save. The tile shape never changes a result.
    const WIDE: usize = 32;
    const NARROW: usize = 16;

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn attend_avx512(work: &Attention, rows: &mut [&mut [f32]], part: Part, outs: &mut [&mut [f32]]) {
        crate::frame::align_frame!();
        if work.kv.head_dim.is_multiple_of(16 * work.planes().max(1)) {
            attend::<lanes::Avx2, lanes::Avx512, KeyPairs, lanes::Avx512, WIDE>(work, rows, part, outs)
        } else {
            attend::<lanes::Avx2, lanes::Avx2, KeyPairs, lanes::Avx512, WIDE>(work, rows, part, outs)
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn attend_avx2(work: &Attention, rows: &mut [&mut [f32]], part: Part, outs: &mut [&mut [f32]]) {
        crate::frame::align_frame!();
        attend::<lanes::Avx2, lanes::Avx2, OnLanes<lanes::Avx2>, lanes::Avx2, NARROW>(work, rows, part, outs)
    }

    #[cfg(target_arch = "aarch64")]
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn attend_neon(work: &Attention, rows: &mut [&mut [f32]], part: Part, outs: &mut [&mut [f32]]) {
        attend::<lanes::Neon, lanes::Neon, OnLanes<lanes::Neon>, lanes::Neon, NARROW>(work, rows, part, outs)
    }

    /// How a group of at most [`CacheScores::GROUP`] queries is scored against every cache row:
    /// each score's eight partial sums [`Lanes::fold`]ed to [`FOLDED`] values, then, a chunk
    /// of rows at a time while they are in L1, the rest of [`combine`] ([`finish_scores`]).
    trait CacheScores<L: Lanes> {
        /// Queries that share each loaded cache row.
        const GROUP: usize;
        unsafe fn score(queries: &[&[f32]], work: &Attention, rows: &mut [&mut [f32]]);
    }

    /// On [`Lanes`] vectors, one key row per vector, with 16 registers.
    struct OnLanes<L>(std::marker::PhantomData<L>);

    impl<L: Lanes> CacheScores<L> for OnLanes<L> {
        const GROUP: usize = 4;
        #[inline(always)]
        unsafe fn score(queries: &[&[f32]], work: &Attention, rows: &mut [&mut [f32]]) {
            // Sums `Q × K`, plus `K` key vectors and a query vector in registers; `K` even.
            match queries.len() {
                4 => score_cache::<L, RowsOnLanes<L, 2>, 4>(queries, work, rows),
                3 => score_cache::<L, RowsOnLanes<L, 2>, 3>(queries, work, rows),
                2 => score_cache::<L, RowsOnLanes<L, 4>, 2>(queries, work, rows),
                _ => score_cache::<L, RowsOnLanes<L, 6>, 1>(queries, work, rows),
            }
        }
    }

    /// The registers the weighted sum of values works in: one [`Lanes`] vector or, on
    /// AVX-512, a whole register of 16 lanes ([`lanes::Avx512`]). Each output value is its
    /// own chain of fused multiply-adds in either, so the width never changes a result. (The
    /// scores stay on 8 lanes: there, 16 cost more shuffles than they saved.)
    trait Tile: Steps {
        /// Half floats, widened exactly.
        unsafe fn load_half(from: *const f16) -> Self::V;
    }

    impl<L: Lanes> Tile for L {
        #[inline(always)]
        unsafe fn load_half(from: *const f16) -> L::V {
            L::load_half(from)
        }
    }

    #[cfg(target_arch = "x86_64")]
    impl Tile for lanes::Avx512 {
        #[inline(always)]
        unsafe fn load_half(from: *const f16) -> Self::V {
            use std::arch::x86_64::*;
            _mm512_cvtph_ps(_mm256_loadu_si256(from.cast()))
        }
    }

    /// Needs a value plane's width to be a multiple of `T::WIDTH` and the rows checked by
    /// [`attend_block`]. Everything below is `inline(always)` without features of its own,
    /// so that it is compiled inside the entry points above with their registers (the
    /// intrinsics are inlined there).
    #[inline(always)]
    unsafe fn attend<L: Lanes, T: Tile, S: CacheScores<L>, E: ExpOn<L>, const REGISTERS: usize>(
        work: &Attention,
        rows: &mut [&mut [f32]],
        part: Part,
        outs: &mut [&mut [f32]],
    ) {
        let planes = work.planes_of(&part);
        let own_inverses: Vec<f32>;
        let (weights, inverses): (Vec<&[f32]>, &[f32]) = match part {
            Part::CacheScores => {
                score_all::<L, S>(work, rows);
                return;
            }
            Part::Weights(inverses) => {
                *inverses = weigh_all::<L, E>(work, rows);
                return;
            }
            Part::Plane { weights, .. } => (weights.rows.to_vec(), weights.inverses),
            Part::Whole => {
                score_all::<L, S>(work, rows);
                own_inverses = weigh_all::<L, E>(work, rows);
                (rows.iter().map(|row| &**row).collect(), &own_inverses)
            }
        };
        // The outputs' elements, all their planes', taken a slice of registers at a time.
        let registers = planes.len() * work.plane_width() / T::WIDTH;
        for group in ending_in_a_pair(work.queries.len(), sum_group(REGISTERS)) {
            let sums =
                Sums { weights: &weights[group.clone()], first: group.start, inverses, work, planes: planes.clone() };
            let outs = &mut outs[group.clone()];
            // Sums `Q × V`, plus `V` value registers and a weight in registers.
            if registers.is_multiple_of(4) {
                sums.write_group::<T, 4>(outs);
            } else if registers.is_multiple_of(2) {
                sums.write_group::<T, 2>(outs);
            } else {
                sums.write_group::<T, 1>(outs);
            }
        }
    }

    /// Every query's scores against the cache rows, [`CacheScores::GROUP`] queries at a time.
    #[inline(always)]
    unsafe fn score_all<L: Lanes, S: CacheScores<L>>(work: &Attention, rows: &mut [&mut [f32]]) {
        for group in ending_in_a_pair(work.queries.len(), S::GROUP) {
            S::score(&work.queries[group.clone()], work, &mut rows[group.clone()]);
        }
    }

    /// The pending rows' scores, then every query's softmax weights in place; their inverse sums.
    #[inline(always)]
    unsafe fn weigh_all<L: Lanes, E: ExpOn<L>>(work: &Attention, rows: &mut [&mut [f32]]) -> Vec<f32> {
        score_pending::<L>(work, rows);
        let mut inverses = Vec::with_capacity(rows.len());
        for (r, row) in rows.iter_mut().enumerate() {
            inverses.push(1.0 / weigh::<L, E>(&mut row[..work.row_len(r)]));
        }
        inverses
    }

    /// Pending rows a query is scored against in one loop (independent chains of sums).
    const PENDING_GROUP: usize = 4;

    /// Given the cache scores in `rows`, adds each query's scores of its pending rows: the
    /// sums [`portable`] takes, on vectors, [`PENDING_GROUP`] rows at a time and finished a
    /// chunk of [`SCORE_CHUNK`] rows at a time. (A prefill chunk's queries have up to 128
    /// pending rows each; scored one at a time they took a fifth of its attention.)
    #[inline(always)]
    unsafe fn score_pending<L: Lanes>(work: &Attention, rows: &mut [&mut [f32]]) {
        let (d, cached) = (work.kv.head_dim, work.cached());
        let keys = work.kv.pending_keys.as_ptr();
        let mut folded = [0f32; FOLDED_CHUNK];
        for ((q, row), own) in work.queries.iter().zip(rows.iter_mut()).zip(work.pending) {
            let q = [q.as_ptr()];
            for (chunk, nodes) in own.chunks(SCORE_CHUNK).enumerate() {
                let mut groups = nodes.chunks_exact(PENDING_GROUP);
                for (g, group) in groups.by_ref().enumerate() {
                    let [acc] = dots::<L, f32, 1, PENDING_GROUP>(q, std::array::from_fn(|k| keys.add(group[k] * d)), d);
                    for pair in 0..PENDING_GROUP / 2 {
                        let to = folded.as_mut_ptr().add(FOLDED * (PENDING_GROUP * g + 2 * pair));
                        L::store(to, L::fold(acc[2 * pair], acc[2 * pair + 1]));
                    }
                }
                let done = nodes.len() - groups.remainder().len();
                for (i, &node) in groups.remainder().iter().enumerate() {
                    let [[acc]] = dots::<L, f32, 1, 1>(q, [keys.add(node * d)], d);
                    L::store(folded.as_mut_ptr().add(FOLDED * (done + i)), L::fold(acc, acc));
                }
                let start = cached + chunk * SCORE_CHUNK;
                finish_scores::<L>(&folded, work.scale, &mut row[start..start + nodes.len()]);
            }
        }
    }

    /// Folded sums per chunk: [`FOLDED`] values per row, and room for four rows' worth
    /// written past the chunk's end (a row folded alone writes two; a pair or a row alone on
    /// AVX-512, four).
    const FOLDED_CHUNK: usize = FOLDED * (SCORE_CHUNK + 4);

    /// Folds the 8-lane partial sums of `Q` queries with the cache rows `rows` into `folded`
    /// ([`FOLDED`] values per row, from the first row of `rows` on).
    trait FoldRows<const Q: usize> {
        unsafe fn fold_rows(q: [*const f32; Q], keys: Keys, rows: Range<usize>, folded: &mut Folded<Q>);
    }

    /// Each query's folded sums of a chunk.
    type Folded<const Q: usize> = [[f32; FOLDED_CHUNK]; Q];

    /// The cache's keys: `width` half floats per row, from `rows` on.
    #[derive(Clone, Copy)]
    struct Keys {
        rows: *const f16,
        width: usize,
    }

    /// [`CacheScores`] of `Q` queries, folded by `F` a chunk of [`SCORE_CHUNK`] rows at a time.
    #[inline(always)]
    unsafe fn score_cache<L: Lanes, F: FoldRows<Q>, const Q: usize>(
        queries: &[&[f32]],
        work: &Attention,
        rows: &mut [&mut [f32]],
    ) {
        let mut q = [std::ptr::null(); Q];
        for (p, query) in q.iter_mut().zip(queries) {
            *p = query.as_ptr();
        }
        let keys = Keys { rows: work.kv.cache_keys.as_ptr(), width: work.kv.head_dim };
        let mut folded: Folded<Q> = [[0f32; FOLDED_CHUNK]; Q];
        let mut start = 0;
        while start < work.cached() {
            let end = (start + SCORE_CHUNK).min(work.cached());
            // Rows of 64 elements (the default model's heads) with the width a constant: each
            // score's loop over the row unrolls, without a counter or address arithmetic.
            if keys.width == 64 {
                F::fold_rows(q, Keys { width: 64, ..keys }, start..end, &mut folded);
            } else {
                F::fold_rows(q, keys, start..end, &mut folded);
            }
            for (row, folded) in rows.iter_mut().zip(&folded) {
                finish_scores::<L>(folded, work.scale, &mut row[start..end]);
            }
            start = end;
        }
    }

    /// One row per [`Lanes`] vector, `K` rows at a time (then one).
    struct RowsOnLanes<L, const K: usize>(std::marker::PhantomData<L>);

    impl<L: Lanes, const Q: usize, const K: usize> FoldRows<Q> for RowsOnLanes<L, K> {
        #[inline(always)]
        unsafe fn fold_rows(q: [*const f32; Q], keys: Keys, rows: Range<usize>, folded: &mut Folded<Q>) {
            let (d, keys) = (keys.width, keys.rows);
            let mut j = rows.start;
            while j + K <= rows.end {
                let acc = dots::<L, f16, Q, K>(q, consecutive(keys.add(j * d), d), d);
                for (folded, acc) in folded.iter_mut().zip(&acc) {
                    for pair in 0..K / 2 {
                        let to = folded.as_mut_ptr().add(FOLDED * (j - rows.start + 2 * pair));
                        L::store(to, L::fold(acc[2 * pair], acc[2 * pair + 1]));
                    }
                }
                j += K;
            }
            while j < rows.end {
                let acc = dots::<L, f16, Q, 1>(q, [keys.add(j * d)], d);
                for (folded, acc) in folded.iter_mut().zip(&acc) {
                    L::store(folded.as_mut_ptr().add(FOLDED * (j - rows.start)), L::fold(acc[0], acc[0]));
                }
                j += 1;
            }
        }
    }

    /// On AVX-512 (32 registers), for a group of four to six queries (a tree pass or a prefill): two
    /// key rows' eight lanes in one register (the low half the first row's, the high half the
    /// second's) against a query's eight lanes in both halves. Each fused multiply-add does
    /// the work of two 8-lane ones, and every lane's chain of sums is the one [`OnLanes`]
    /// computes. Fewer queries (a one-token pass has three per kv head) score one row per
    /// vector: pairs made a one-token pass on 2,048 cached tokens 14–21% slower (measured).
    #[cfg(target_arch = "x86_64")]
    struct KeyPairs;

    #[cfg(target_arch = "x86_64")]
    impl CacheScores<lanes::Avx2> for KeyPairs {
        const GROUP: usize = 6;
        #[inline(always)]
        unsafe fn score(queries: &[&[f32]], work: &Attention, rows: &mut [&mut [f32]]) {
            use lanes::Avx2;
            // Sums `Q × P` (or `Q × K`), plus `P` pairs of key rows (or `K` rows) and a query
            // in registers; `P` and `K` even.
            match queries.len() {
                6 => score_cache::<Avx2, RowPairs<2>, 6>(queries, work, rows),
                5 => score_cache::<Avx2, RowPairs<2>, 5>(queries, work, rows),
                4 => score_cache::<Avx2, RowPairs<4>, 4>(queries, work, rows),
                3 => score_cache::<Avx2, RowsOnLanes<Avx2, 4>, 3>(queries, work, rows),
                2 => score_cache::<Avx2, RowsOnLanes<Avx2, 8>, 2>(queries, work, rows),
                _ => score_cache::<Avx2, RowsOnLanes<Avx2, 8>, 1>(queries, work, rows),
            }
        }
    }

    /// Two rows per AVX-512 register ([`KeyPairs`]), `2·P` rows at a time (then pairs, then a
    /// row alone paired with itself).
    #[cfg(target_arch = "x86_64")]
    struct RowPairs<const P: usize>;

    #[cfg(target_arch = "x86_64")]
    impl<const Q: usize, const P: usize> FoldRows<Q> for RowPairs<P> {
        #[inline(always)]
        unsafe fn fold_rows(q: [*const f32; Q], keys: Keys, rows: Range<usize>, folded: &mut Folded<Q>) {
            use std::arch::x86_64::*;
            let (d, keys) = (keys.width, keys.rows);
            let mut j = rows.start;
            while j + 2 * P <= rows.end {
                let acc = pair_dots::<Q, P>(q, keys.add(j * d), d, d);
                for (folded, acc) in folded.iter_mut().zip(&acc) {
                    for two in 0..P / 2 {
                        let to = folded.as_mut_ptr().add(FOLDED * (j - rows.start + 4 * two));
                        _mm512_storeu_ps(to, fold_pairs(acc[2 * two], acc[2 * two + 1]));
                    }
                }
                j += 2 * P;
            }
            while j < rows.end {
                let (rows_here, second) = if j + 2 <= rows.end { (2, d) } else { (1, 0) };
                let acc = pair_dots::<Q, 1>(q, keys.add(j * d), d, second);
                for (folded, acc) in folded.iter_mut().zip(&acc) {
                    _mm512_storeu_ps(folded.as_mut_ptr().add(FOLDED * (j - rows.start)), fold_pairs(acc[0], acc[0]));
                }
                j += rows_here;
            }
        }
    }

    /// 8-lane partial dot products of `Q` vectors with `P` pairs of rows at `keys` (all `d`
    /// wide; a pair's second row `second` values after its first), a pair per register.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn pair_dots<const Q: usize, const P: usize>(
        q: [*const f32; Q],
        keys: *const f16,
        d: usize,
        second: usize,
    ) -> [[std::arch::x86_64::__m512; P]; Q] {
        use std::arch::x86_64::*;
        let mut acc = [[_mm512_setzero_ps(); P]; Q];
        for c in (0..d).step_by(8) {
            let mut key = [_mm512_setzero_ps(); P];
            for (p, key) in key.iter_mut().enumerate() {
                let first = keys.add(2 * p * d + c);
                let halves = _mm256_inserti128_si256::<1>(
                    _mm256_castsi128_si256(_mm_loadu_si128(first.cast())),
                    _mm_loadu_si128(first.add(second).cast()),
                );
                *key = _mm512_cvtph_ps(halves);
            }
            for (acc, q) in acc.iter_mut().zip(q) {
                // The query's eight lanes in both halves (a 256-bit broadcast, by its bits).
                let x = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q.add(c)))));
                for (acc, key) in acc.iter_mut().zip(key) {
                    *acc = _mm512_fmadd_ps(x, key, *acc);
                }
            }
        }
        acc
    }

    /// [`Lanes::fold`] of the four rows in two pair registers, in order: 16 folded values.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn fold_pairs(a: std::arch::x86_64::__m512, b: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // Lanes 0–3 of each row, then lanes 4–7 of each row (128-bit blocks 0, 2 and 1, 3).
        let low = _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b);
        let high = _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b);
        _mm512_add_ps(low, high)
    }

    /// `scores` from their [`FOLDED`] values each: the rest of [`combine`], times `scale`;
    /// eight at a time, then one by one.
    #[inline(always)]
    unsafe fn finish_scores<L: Lanes>(folded: &[f32], scale: f32, scores: &mut [f32]) {
        let scale8 = L::splat(scale);
        let mut eights = scores.chunks_exact_mut(8);
        for (j, eight) in eights.by_ref().enumerate() {
            L::store(eight.as_mut_ptr(), L::mul(L::finish(folded.as_ptr().add(FOLDED * 8 * j)), scale8));
        }
        let done = scores.len() / 8 * 8;
        for (score, f) in scores[done..].iter_mut().zip(folded[FOLDED * done..].chunks_exact(FOLDED)) {
            *score = ((f[0] + f[1]) + (f[2] + f[3])) * scale;
        }
    }

    /// The elements of the key rows [`dots`] reads: half floats in the cache, floats (already
    /// rounded to half floats) among the pending rows.
    trait KeyElement: Copy {
        /// Eight elements, widened exactly.
        unsafe fn load<L: Lanes>(from: *const Self) -> L::V;
    }

    impl KeyElement for f16 {
        #[inline(always)]
        unsafe fn load<L: Lanes>(from: *const f16) -> L::V {
            L::load_half(from)
        }
    }

    impl KeyElement for f32 {
        #[inline(always)]
        unsafe fn load<L: Lanes>(from: *const f32) -> L::V {
            L::load(from)
        }
    }

    /// `K` rows starting `d` elements apart at `first`.
    #[inline(always)]
    unsafe fn consecutive<E, const K: usize>(first: *const E, d: usize) -> [*const E; K] {
        std::array::from_fn(|k| first.add(k * d))
    }

    /// 8-lane partial dot products of `Q` vectors with the `K` rows at `keys` (all `d` wide).
    #[inline(always)]
    unsafe fn dots<L: Lanes, E: KeyElement, const Q: usize, const K: usize>(
        q: [*const f32; Q],
        keys: [*const E; K],
        d: usize,
    ) -> [[L::V; K]; Q] {
        let mut acc = [[L::zero(); K]; Q];
        for c in (0..d).step_by(8) {
            let mut key = [L::zero(); K];
            for (key, row) in key.iter_mut().zip(keys) {
                *key = E::load::<L>(row.add(c));
            }
            for (acc, q) in acc.iter_mut().zip(q) {
                let x = L::load(q.add(c));
                for (acc, key) in acc.iter_mut().zip(key) {
                    *acc = L::mul_add(x, key, *acc);
                }
            }
        }
        acc
    }

    /// The registers the softmax's maximum and exponentials are taken on: a [`Lanes`] vector,
    /// or on AVX-512 a register of two. [`exp_lanes`] gives each lane the same bits at any
    /// width, and the weights are still summed eight at a time in order, so the width never
    /// changes a result. (On AVX-512 the softmax took about a sixth of a long pass's attention
    /// on eight lanes; measured.)
    trait ExpOn<L: Lanes>: Steps {
        /// Adds the register's eights to `sum`, one after the other.
        unsafe fn add_eights(sum: L::V, v: Self::V) -> L::V;
    }

    impl<L: Lanes> ExpOn<L> for L {
        #[inline(always)]
        unsafe fn add_eights(sum: L::V, v: L::V) -> L::V {
            L::add(sum, v)
        }
    }

    #[cfg(target_arch = "x86_64")]
    impl ExpOn<lanes::Avx2> for lanes::Avx512 {
        #[inline(always)]
        unsafe fn add_eights(sum: std::arch::x86_64::__m256, v: Self::V) -> std::arch::x86_64::__m256 {
            use std::arch::x86_64::*;
            let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
            _mm256_add_ps(_mm256_add_ps(sum, _mm512_castps512_ps256(v)), high)
        }
    }

    /// [`portable::weigh`]: the maximum and the exponentials a register of `E` at a time
    /// (the exponentials then eight, then one by one), the weights summed eight at a time.
    #[inline(always)]
    unsafe fn weigh<L: Lanes, E: ExpOn<L>>(scores: &mut [f32]) -> f32 {
        let mut registers = scores.chunks_exact(E::WIDTH);
        let mut max_wide = E::splat(f32::NEG_INFINITY);
        for register in registers.by_ref() {
            max_wide = E::max(max_wide, E::load(register.as_ptr()));
        }
        // The largest of the lanes and the rest, in any order: a maximum is exact. (No
        // register is wider than 16 lanes; a wider one would fail the slice below.)
        let mut lanes = [f32::NEG_INFINITY; 16];
        E::store(lanes[..E::WIDTH].as_mut_ptr(), max_wide);
        let max = lanes.into_iter().chain(registers.remainder().iter().copied()).fold(f32::NEG_INFINITY, f32::max);
        let (max_wide, max8, mut sum8) = (E::splat(max), L::splat(max), L::zero());
        let mut registers = scores.chunks_exact_mut(E::WIDTH);
        for register in registers.by_ref() {
            let weights = exp_lanes::<E>(E::sub(E::load(register.as_ptr()), max_wide));
            E::store(register.as_mut_ptr(), weights);
            sum8 = E::add_eights(sum8, weights);
        }
        let mut chunks = registers.into_remainder().chunks_exact_mut(8);
        for chunk in chunks.by_ref() {
            let weights = exp_lanes::<L>(L::sub(L::load(chunk.as_ptr()), max8));
            L::store(chunk.as_mut_ptr(), weights);
            sum8 = L::add(sum8, weights);
        }
        let mut sum = L::sum(sum8);
        for s in chunks.into_remainder() {
            *s = exp(*s - max);
            sum += *s;
        }
        sum
    }

    /// Softmax weights of a group of queries, and the value planes they are summed over.
    struct Sums<'a> {
        weights: &'a [&'a [f32]],
        /// Index of the group's first query.
        first: usize,
        inverses: &'a [f32],
        work: &'a Attention<'a>,
        /// The planes whose elements the outputs hold, in order.
        planes: Range<usize>,
    }

    impl Sums<'_> {
        /// [`Sums::write`] for the group's size.
        #[inline(always)]
        unsafe fn write_group<T: Tile, const V: usize>(&self, outs: &mut [&mut [f32]]) {
            // Planes of 32 elements (the default model's heads of 64) with the width a constant:
            // the loop over the cache rows then steps without address arithmetic.
            match self.work.plane_width() {
                32 => self.write_sized::<T, V>(outs, 32),
                w => self.write_sized::<T, V>(outs, w),
            }
        }

        /// [`Sums::write`] for the group's size, planes of `w` elements.
        #[inline(always)]
        unsafe fn write_sized<T: Tile, const V: usize>(&self, outs: &mut [&mut [f32]], w: usize) {
            match self.weights.len() {
                6 => self.write::<T, 6, V>(outs, w),
                5 => self.write::<T, 5, V>(outs, w),
                4 => self.write::<T, 4, V>(outs, w),
                3 => self.write::<T, 3, V>(outs, w),
                2 => self.write::<T, 2, V>(outs, w),
                _ => self.write::<T, 1, V>(outs, w),
            }
        }

        /// `out_r = inverse_r · Σ weights_r[j] · value_j` over the cache rows, then query
        /// `r`'s pending rows, for the elements of the planes (`w` each), `T::WIDTH · V` at a
        /// time (a slice's registers may come from two planes: each lies within one), `Q`
        /// queries per loaded row.
        #[inline(always)]
        unsafe fn write<T: Tile, const Q: usize, const V: usize>(&self, outs: &mut [&mut [f32]], w: usize) {
            let kv = self.work.kv;
            let (d, cached) = (kv.head_dim, self.work.cached());
            let pending_values = kv.pending_values.as_ptr().add(self.planes.start * w);
            let width = T::WIDTH;
            let mut weights = [std::ptr::null(); Q];
            for (to, row) in weights.iter_mut().zip(self.weights) {
                *to = row.as_ptr();
            }
            for slice in (0..self.planes.len() * w).step_by(width * V) {
                // Where each register's elements start in the first cache row.
                let mut columns = [std::ptr::null(); V];
                for (v, column) in columns.iter_mut().enumerate() {
                    let element = slice + width * v;
                    *column = kv.cache_values[self.planes.start + element / w].as_ptr().add(element % w);
                }
                let mut acc = [[T::zero(); V]; Q];
                for j in 0..cached {
                    let mut value = [T::zero(); V];
                    for (value, column) in value.iter_mut().zip(columns) {
                        *value = T::load_half(column.add(j * w));
                    }
                    for (acc, weights) in acc.iter_mut().zip(weights) {
                        let p = T::splat(*weights.add(j));
                        for (acc, value) in acc.iter_mut().zip(value) {
                            *acc = T::mul_add(p, value, *acc);
                        }
                    }
                }
                for (r, (acc, out)) in acc.iter_mut().zip(outs.iter_mut()).enumerate() {
                    let own = self.work.pending[self.first + r];
                    for (&p, &node) in self.weights[r][cached..].iter().zip(own) {
                        let row = pending_values.add(node * d + slice);
                        let p = T::splat(p);
                        for (v, acc) in acc.iter_mut().enumerate() {
                            *acc = T::mul_add(p, T::load(row.add(width * v)), *acc);
                        }
                    }
                    let inverse = T::splat(self.inverses[self.first + r]);
                    for (v, acc) in acc.iter().enumerate() {
                        T::store(out[slice + width * v..][..width].as_mut_ptr(), T::mul(*acc, inverse));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cache keys and values as half floats (the values in their planes), pending keys and
    /// values rounded to half floats and widened, as [`crate::kv::KvCache`] keeps them.
    struct Stored {
        head_dim: usize,
        keys: Vec<f16>,
        value_planes: Vec<Vec<f16>>,
        pending: [Vec<f32>; 2],
    }

    impl Stored {
        fn rows(&self) -> KvRows<'_> {
            let [pending_keys, pending_values] = &self.pending;
            KvRows {
                head_dim: self.head_dim,
                cache_keys: &self.keys,
                cache_values: &self.value_planes,
                pending_keys,
                pending_values,
            }
        }
    }

    fn stored(keys: &[f32], values: &[f32], pk: &[f32], pv: &[f32], d: usize) -> Stored {
        let half = |rows: &[f32]| -> Vec<f16> { rows.iter().copied().map(f16::from_f32).collect() };
        let rounded = |rows: &[f32]| -> Vec<f32> { half(rows).into_iter().map(f16::to_f32).collect() };
        let w = d / value_planes(d);
        let plane =
            |p: usize| -> Vec<f16> { values.chunks_exact(d).flat_map(|row| half(&row[p * w..(p + 1) * w])).collect() };
        Stored {
            head_dim: d,
            keys: half(keys),
            value_planes: (0..value_planes(d)).map(plane).collect(),
            pending: [rounded(pk), rounded(pv)],
        }
    }

    /// `cached` cache rows and `pending` pending rows of `d` elements, and `n` queries, from a
    /// fixed sequence of values between −1 and 1.
    fn sample(d: usize, cached: usize, pending: usize, n: usize) -> (Stored, Vec<Vec<f32>>) {
        let value = |i: usize, seed: usize| (((i * 2654435761 + seed) % 1009) as f32 / 300.0 - 1.6).sin();
        let rows = |count: usize, seed: usize| -> Vec<f32> { (0..count * d).map(|i| value(i, seed)).collect() };
        let stored = stored(&rows(cached, 1), &rows(cached, 2), &rows(pending, 3), &rows(pending, 4), d);
        (stored, (0..n).map(|r| (0..d).map(|i| value(i, 10 + r)).collect()).collect())
    }

    #[test]
    fn attention_of_one_key_returns_its_value() {
        let stored = stored(&[0.5, -1.0], &[3.0, 4.0], &[], &[], 2);
        let rows = stored.rows();
        let mut out = [0.0; 2];
        attend_block(Kernel::best(), &[&[1.0, 2.0]], &[&[]], &rows, 0.5, &mut Vec::new(), &mut [&mut out]);
        assert_eq!(out, [3.0, 4.0]);
    }

    #[test]
    fn attention_weights_follow_softmax_over_cache_then_pending_rows() {
        // Cache row 0: key 0, value 1. Pending rows: 0 → key 2, value 0; 1 → key 9, value 5.
        let stored = stored(&[0.0], &[1.0], &[2.0, 9.0], &[0.0, 5.0], 1);
        let rows = stored.rows();
        let mut a = [0.0];
        let mut b = [0.0];
        attend_block(
            Kernel::best(),
            &[&[1.0], &[1.0]],
            &[&[0], &[]],
            &rows,
            1.0,
            &mut Vec::new(),
            &mut [&mut a, &mut b],
        );
        let expected = 1.0 / (1.0 + 2f32.exp());
        assert!((a[0] - expected).abs() < 1e-6, "{} vs {expected}", a[0]);
        assert_eq!(b, [1.0], "the second query sees only the cache row");
    }

    #[test]
    fn a_query_result_does_not_depend_on_its_block() {
        let d = 8;
        let keys: Vec<f32> = (0..40 * d).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
        let values: Vec<f32> = (0..40 * d).map(|i| ((i * 53 % 97) as f32 / 40.0) - 1.2).collect();
        let pk: Vec<f32> = keys[..3 * d].iter().map(|x| x * 0.7).collect();
        let pv: Vec<f32> = values[..3 * d].iter().map(|x| x + 0.3).collect();
        let stored = stored(&keys, &values, &pk, &pv, d);
        let rows = stored.rows();
        let q: Vec<Vec<f32>> = (0..3).map(|r| (0..d).map(|i| ((r * 7 + i) as f32).sin()).collect()).collect();
        let pending: [&[usize]; 3] = [&[0], &[0, 1], &[2]];
        let mut alone = vec![vec![0.0; d]; 3];
        for r in 0..3 {
            attend_block(Kernel::best(), &[&q[r]], &[pending[r]], &rows, 0.3, &mut Vec::new(), &mut [&mut alone[r]]);
        }
        let mut together = vec![vec![0.0; d]; 3];
        let mut outs: Vec<&mut [f32]> = together.iter_mut().map(|o| &mut o[..]).collect();
        let queries: Vec<&[f32]> = q.iter().map(|x| &x[..]).collect();
        attend_block(Kernel::best(), &queries, &pending, &rows, 0.3, &mut Vec::new(), &mut outs);
        assert_eq!(alone, together);
    }

    #[test]
    fn attention_in_steps_is_bit_for_bit_the_block_s() {
        let value = |i: usize, seed: usize| (((i * 2654435761 + seed) % 1013) as f32 / 250.0 - 2.0).cos();
        for (d, cached, cuts) in [(64, 101, vec![0, 48, 101]), (64, 37, vec![0, 0, 16, 37]), (24, 19, vec![0, 8, 19])] {
            let keys: Vec<f32> = (0..cached * d).map(|i| value(i, 1)).collect();
            let values: Vec<f32> = (0..cached * d).map(|i| value(i, 2)).collect();
            let pk: Vec<f32> = (0..2 * d).map(|i| value(i, 3)).collect();
            let pv: Vec<f32> = (0..2 * d).map(|i| value(i, 4)).collect();
            let stored = stored(&keys, &values, &pk, &pv, d);
            let rows = stored.rows();
            let q: Vec<Vec<f32>> = (0..3).map(|r| (0..d).map(|i| value(i, 10 + r)).collect()).collect();
            let queries: Vec<&[f32]> = q.iter().map(|x| &x[..]).collect();
            let pending: [&[usize]; 3] = [&[0], &[0, 1], &[]];
            for kernel in Kernel::supported() {
                let mut whole = vec![vec![0.0; d]; 3];
                let mut outs: Vec<&mut [f32]> = whole.iter_mut().map(|o| &mut o[..]).collect();
                attend_block(kernel, &queries, &pending, &rows, 0.2, &mut Vec::new(), &mut outs);

                let mut scores = vec![vec![0.0; cached + 2]; 3];
                for range in cuts.windows(2).map(|w| w[0]..w[1]) {
                    let part = rows.keys_of(range.clone());
                    let mut pieces: Vec<&mut [f32]> = scores.iter_mut().map(|row| &mut row[range.clone()]).collect();
                    score_cache(kernel, &queries, &part, 0.2, &mut pieces);
                }
                let mut score_rows: Vec<&mut [f32]> = scores.iter_mut().map(|row| &mut row[..]).collect();
                let inverses = weigh_scores(kernel, &queries, &pending, &rows, 0.2, &mut score_rows);
                let weights: Vec<&[f32]> = scores.iter().map(|row| &row[..]).collect();
                let planes = value_planes(d);
                let mut split = vec![vec![0.0; d]; 3];
                for plane in (0..planes).rev() {
                    let w = d / planes;
                    let mut outs: Vec<&mut [f32]> =
                        split.iter_mut().map(|o| &mut o[plane * w..(plane + 1) * w]).collect();
                    let weights = Weights { rows: &weights, inverses: &inverses };
                    sum_values(kernel, &queries, &pending, &rows, plane, weights, &mut outs);
                }
                assert_eq!(whole, split, "{kernel} kernel: d {d}, {cached} cache rows cut at {cuts:?}");
            }
        }
    }

    /// Attention speed of one kv head's block on one thread (measured, never asserted): the
    /// query heads of 1, 2, 4 and 16 tree nodes (three per kv head, as the default model has)
    /// against 512 and 2,048 cache rows of 64 elements, each node seeing its ancestors among
    /// the pending rows. `COPILOTD_ATTENTION_CASE` (a case as printed, say
    /// `avx2 attention 12x2048`) runs that case alone and prints how many blocks it ran, so
    /// that `benches/count_instructions.sh` counts the instructions per query and cache row
    /// under callgrind, as `compute_speed` does for the weight products.
    #[test]
    #[ignore]
    fn attention_speed() {
        const D: usize = 64;
        const HEADS_PER_KV_HEAD: usize = 3;
        let only = std::env::var("COPILOTD_ATTENTION_CASE").ok();
        for cached in [512, 2_048] {
            for nodes in [1, 2, 4, 16] {
                let n = nodes * HEADS_PER_KV_HEAD;
                let (stored, q) = sample(D, cached, nodes, n);
                let rows = stored.rows();
                let queries: Vec<&[f32]> = q.iter().map(|x| &x[..]).collect();
                let chains: Vec<Vec<usize>> = (0..nodes).map(|node| (0..=node).collect()).collect();
                let pending: Vec<&[usize]> = (0..n).map(|r| &chains[r / HEADS_PER_KV_HEAD][..]).collect();
                for kernel in Kernel::supported().into_iter().filter(|&k| k != Kernel::Portable) {
                    let case = format!("{kernel} attention {n}x{cached}");
                    if only.as_ref().is_some_and(|only| *only != case) {
                        continue;
                    }
                    let mut out = vec![vec![0.0; D]; n];
                    let mut scores = Vec::new();
                    let mut run = || {
                        let mut outs: Vec<&mut [f32]> = out.iter_mut().map(|o| &mut o[..]).collect();
                        attend_block(kernel, &queries, &pending, &rows, 0.125, &mut scores, &mut outs);
                    };
                    // The best of five batches of about 30 ms each, as in `compute_speed`.
                    let (repeats, batches) = (300_000_000 / (n * cached * D), if only.is_some() { 1 } else { 5 });
                    run();
                    let seconds = (0..batches)
                        .map(|_| {
                            let started = std::time::Instant::now();
                            for _ in 0..repeats {
                                run();
                            }
                            started.elapsed().as_secs_f64() / repeats as f64
                        })
                        .fold(f64::INFINITY, f64::min);
                    println!("{case}: {:.1} µs ({} blocks)", seconds * 1e6, 1 + batches * repeats);
                }
            }
        }
    }

    #[test]
    fn every_kernel_matches_the_portable_path_bit_for_bit() {
        // Pending rows, and a list of them longer than a chunk of scores, out of order.
        const PENDING: usize = 61;
        let long: Vec<usize> = (0..PENDING).map(|i| (i * 17) % PENDING).collect();
        for (d, cached, n) in [
            (64, 37, 12),
            (64, 101, 5),
            (64, 53, 7),
            (32, 60, 2),
            (64, 8, 3),
            (24, 5, 7),
            (64, 0, 2),
            (128, 19, 1),
            (64, 77, 9),
            (64, 45, 13),
            // A long pass's block (16 nodes of 3 query heads), several chunks of cache rows.
            (64, 131, 48),
        ] {
            let (stored, q) = sample(d, cached, PENDING, n);
            let rows = stored.rows();
            let queries: Vec<&[f32]> = q.iter().map(|x| &x[..]).collect();
            let lists: [&[usize]; 6] = [&[0], &[0, 1], &[0, 1, 3], &[], &long[..9], &long];
            let pending: Vec<&[usize]> = (0..n).map(|r| lists[r % lists.len()]).collect();
            let work = Attention { queries: &queries, pending: &pending, kv: &rows, scale: 0.125 };
            let mut plain = vec![vec![0.0; d]; n];
            let mut outs: Vec<&mut [f32]> = plain.iter_mut().map(|o| &mut o[..]).collect();
            let mut scratch = Vec::new();
            portable::attend(&work, &mut work.score_rows(&mut scratch), Part::Whole, &mut outs);
            for kernel in Kernel::supported() {
                let mut fast = vec![vec![0.0; d]; n];
                let mut outs: Vec<&mut [f32]> = fast.iter_mut().map(|o| &mut o[..]).collect();
                attend_block(kernel, &queries, &pending, &rows, 0.125, &mut Vec::new(), &mut outs);
                assert_eq!(plain, fast, "{kernel} kernel: d {d}, {cached} cache rows, {n} queries");
            }
        }
    }
}
