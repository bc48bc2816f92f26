//! The kernel's arithmetic written out lane by lane: the definition the vector code must
//! match bit for bit, and the fallback where the vector code cannot run.

use super::*;

pub(super) fn multiply(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    let m = x.rows;
    let mut weights = vec![0i32; w.width];
    for (j, row) in rows.clone().enumerate() {
        unpack_row(w, row, &mut weights);
        for r in 0..m {
            out[r * rows.len() + j] = dot(w, row, &weights, x, r);
        }
    }
}

/// Weight row `row` as integers in the reordered layout: biased bytes (Q8_0), 4-bit or 6-bit values.
fn unpack_row(w: &QuantMatrix, row: usize, weights: &mut [i32]) {
    match &w.values {
        Values::Biased { biased, .. } => {
            for (value, &b) in weights.iter_mut().zip(&biased[row * w.width..][..w.width]) {
                *value = b as i32;
            }
        }
        Values::Nibbles { packed, .. } => {
            let packed = &packed[row * w.width / 2..][..w.width / 2];
            for span in w.spans() {
                for at in 0..span.vectors * VECTOR {
                    let (byte, shift) = span.packed(at);
                    weights[span.start + at] = ((packed[span.start / 2 + byte] >> shift) & 0x0F) as i32;
                }
            }
        }
        Values::SixBit { packed, .. } => {
            let row_bytes = w.width / (SIX_BIT_SPAN_VECTORS * VECTOR) * SIX_BIT_SPAN_BYTES;
            let spans = w.spans().zip(packed[row * row_bytes..][..row_bytes].chunks_exact(SIX_BIT_SPAN_BYTES));
            for (span, bytes) in spans {
                for at in 0..span.vectors * VECTOR {
                    let ((low, low_shift), (high, high_shift)) = (span.packed(at), span.high(at));
                    let nibble = (bytes[low] >> low_shift) & 0x0F;
                    let top = (bytes[2 * VECTOR + high] >> high_shift) & 3;
                    weights[span.start + at] = (nibble | top << 4) as i32;
                }
            }
        }
    }
}

fn dot(w: &QuantMatrix, row: usize, weights: &[i32], x: &QuantizedRows, r: usize) -> f32 {
    let mut acc = [0f32; LANES];
    let lanes_start = x.lanes_start(r);
    for (index, span) in w.spans().enumerate() {
        let len = span.vectors * VECTOR;
        let wq = &weights[span.start..][..len];
        let xq = &x.quants[r * x.width + span.start..][..len];
        let first_block = (row * w.width + span.start) / BLOCK;
        let x_scales = &x.scales[(r * x.width + span.start) / BLOCK..][..span.blocks()];
        let lanes = lanes_start + index * LANES..;
        // Per lane: the weights' scale and min (lane `l` holds block `l mod blocks`, or on
        // 6-bit weights its own sub-block).
        let by_block = |value: &dyn Fn(usize) -> f32| -> [f32; LANES] {
            std::array::from_fn(|lane| value(first_block + lane % span.blocks()))
        };
        let (starts, w_scales, mins) = match &w.values {
            Values::Biased { scales, .. } => (&x.bias_corrections[lanes][..LANES], by_block(&|b| scales[b]), None),
            Values::Nibbles { scales, mins, .. } => (
                &[0; LANES][..],
                by_block(&|b| scales.get(b)),
                Some((by_block(&|b| mins.get(b)), &x.min_terms[lanes][..LANES])),
            ),
            Values::SixBit { scales, .. } => {
                let span_index = (row * w.width + span.start) / (SIX_BIT_SPAN_VECTORS * VECTOR);
                let code = |lane: usize| scales.codes[span_index * LANES + lane] as f32;
                (
                    &[0; LANES][..],
                    std::array::from_fn(|lane| scales.factors[span_index] * code(lane)),
                    Some((
                        std::array::from_fn(|lane| scales.min_factors[span_index] * code(lane)),
                        &x.min_terms[lanes][..LANES],
                    )),
                )
            }
        };
        for (lane, (acc, start)) in acc.iter_mut().zip(starts).enumerate() {
            let mut exact = *start;
            for v in 0..span.vectors {
                let at = v * VECTOR + lane * 4;
                exact += (0..4).map(|i| wq[at + i] * xq[at + i] as i32).sum::<i32>();
            }
            let scaled = exact as f32 * x_scales[lane % span.blocks()];
            *acc = scaled.mul_add(w_scales[lane], *acc);
            if let Some((w_mins, terms)) = &mins {
                *acc = w_mins[lane].mul_add(terms[lane], *acc);
            }
        }
    }
    sum_lanes(acc)
}
