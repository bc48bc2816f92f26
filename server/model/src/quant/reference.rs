//! The kernel's arithmetic written out lane by lane: the definition the vector code must
//! match bit for bit, and the fallback where the vector code cannot run.

use super::*;

pub(super) fn multiply(w: &QuantMatrix, x: &QuantizedRows, out: &mut [f32], rows: Range<usize>) {
    let m = x.rows;
    let mut weights = vec![0i32; w.width];
    for (j, row) in rows.clone().enumerate() {
        unpack_row(w, row, &mut weights);
        for r in 0..m {
            out[j * m + r] = dot(w, row, &weights, x, r);
        }
    }
}

/// Weight row `row` as integers in the reordered layout: biased bytes (Q8_0) or 4-bit values.
fn unpack_row(w: &QuantMatrix, row: usize, weights: &mut [i32]) {
    match &w.values {
        Values::Biased { biased, .. } => {
            for (value, &b) in weights.iter_mut().zip(&biased[row * w.width..][..w.width]) {
                *value = b as i32;
            }
        }
        Values::Nibbles { packed, .. } => {
            let packed = &packed[row * w.width / 2..][..w.width / 2];
            for span in spans(w.width) {
                for at in 0..span.vectors * VECTOR {
                    let (byte, shift) = span.packed(at);
                    weights[span.start + at] = ((packed[span.start / 2 + byte] >> shift) & 0x0F) as i32;
                }
            }
        }
    }
}

fn dot(w: &QuantMatrix, row: usize, weights: &[i32], x: &QuantizedRows, r: usize) -> f32 {
    let mut acc = [0f32; LANES];
    let lanes_start = x.lanes_start(r);
    for (index, span) in spans(w.width).enumerate() {
        let len = span.vectors * VECTOR;
        let wq = &weights[span.start..][..len];
        let xq = &x.quants[r * x.width + span.start..][..len];
        let blocks = (row * w.width + span.start) / BLOCK..;
        let blocks = blocks.start..blocks.start + span.blocks();
        let x_scales = &x.scales[(r * x.width + span.start) / BLOCK..][..span.blocks()];
        let lanes = lanes_start + index * LANES..;
        let floats = |values: &BlockValues| blocks.clone().map(|b| values.get(b)).collect();
        let (starts, w_scales, mins): (_, Vec<f32>, _) = match &w.values {
            Values::Biased { scales, .. } => (&x.bias_corrections[lanes][..LANES], scales[blocks].to_vec(), None),
            Values::Nibbles { scales, mins, .. } => {
                (&[0; LANES][..], floats(scales), Some((floats(mins), &x.min_terms[lanes][..LANES])))
            }
        };
        for (lane, (acc, start)) in acc.iter_mut().zip(starts).enumerate() {
            let mut exact = *start;
            for v in 0..span.vectors {
                let at = v * VECTOR + lane * 4;
                exact += (0..4).map(|i| wq[at + i] * xq[at + i] as i32).sum::<i32>();
            }
            let block = lane % span.blocks();
            let scaled = exact as f32 * x_scales[block];
            *acc = scaled.mul_add(w_scales[block], *acc);
            if let Some((w_mins, terms)) = &mins {
                *acc = w_mins[block].mul_add(terms[lane], *acc);
            }
        }
    }
    sum_lanes(acc)
}
