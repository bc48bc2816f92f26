//! The kernel's arithmetic written out lane by lane: the definition the vector code must
//! match bit for bit, and the fallback where the vector code cannot run.

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
