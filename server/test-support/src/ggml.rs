//! Own encoders of the ggml tensor types, written from the block layouts ggml documents
//! (`ggml-common.h`), for the synthetic GGUF files of the tests.
//!
//! Each encoder returns the bytes of the blocks *and* the values those bytes decode to,
//! computed here with ggml's formulas in ggml's order of float operations. A reader whose
//! decoding disagrees with the documented layout then disagrees with these values; using
//! one library to both write and read the blocks could not show that.
//!
//! The quantizers pick scales simply (not ggml's error-minimising search): any choice of
//! scales and integers is a valid block, and the tests need valid blocks with known values.

use candle_core::quantized::GgmlDType;
use half::{bf16, f16};

/// Values per super-block of the K-quants.
pub const QK_K: usize = 256;

/// The bytes of `values` (a multiple of the block size) stored as `dtype`, and the values
/// a correct reader decodes them to.
pub fn encode(dtype: GgmlDType, values: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let block = dtype.block_size();
    assert!(values.len().is_multiple_of(block), "{} values are not whole {dtype:?} blocks", values.len());
    let mut bytes = Vec::new();
    let mut decoded = Vec::with_capacity(values.len());
    for chunk in values.chunks(block) {
        let encode_block = match dtype {
            GgmlDType::F32 => f32_block,
            GgmlDType::F16 => f16_block,
            GgmlDType::BF16 => bf16_block,
            GgmlDType::Q8_0 => q8_0,
            GgmlDType::Q4_0 => q4_0,
            GgmlDType::Q4_1 => q4_1,
            GgmlDType::Q5_0 => q5_0,
            GgmlDType::Q4K => q4_k,
            GgmlDType::Q5K => q5_k,
            GgmlDType::Q6K => q6_k,
            other => panic!("no test encoder for {other:?}"),
        };
        encode_block(chunk, &mut bytes, &mut decoded);
    }
    assert_eq!(bytes.len(), values.len() / block * dtype.type_size(), "{dtype:?} block size");
    (bytes, decoded)
}

fn f32_block(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    for &v in x {
        out.extend_from_slice(&v.to_le_bytes());
        dec.push(v);
    }
}

fn f16_block(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    for &v in x {
        let h = f16::from_f32(v);
        out.extend_from_slice(&h.to_bits().to_le_bytes());
        dec.push(h.to_f32());
    }
}

fn bf16_block(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    for &v in x {
        let h = bf16::from_f32(v);
        out.extend_from_slice(&h.to_bits().to_le_bytes());
        dec.push(h.to_f32());
    }
}

/// An f16 scale as stored, and its value.
fn half(v: f32) -> (f16, f32) {
    let h = f16::from_f32(v);
    (h, h.to_f32())
}

fn push_f16(out: &mut Vec<u8>, h: f16) {
    out.extend_from_slice(&h.to_bits().to_le_bytes());
}

/// `round(x / d)` clamped to `lo..=hi`; 0 when the scale is 0.
fn level(x: f32, d: f32, lo: i32, hi: i32) -> i32 {
    if d == 0.0 {
        return 0.clamp(lo, hi);
    }
    ((x / d).round() as i32).clamp(lo, hi)
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, v| m.max(v.abs()))
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// block_q8_0: f16 d, i8 qs[32]; x = q * d.
fn q8_0(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    let (dh, d) = half(amax(x) / 127.0);
    push_f16(out, dh);
    for &v in x {
        let q = level(v, d, -127, 127);
        out.push(q as i8 as u8);
        dec.push(q as f32 * d);
    }
}

/// block_q4_0: f16 d, u8 qs[16]; value j in the low nibble of qs[j], value j + 16 in the
/// high nibble; x = (q - 8) * d.
fn q4_0(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    let (dh, d) = half(amax(x) / 8.0);
    push_f16(out, dh);
    let q: Vec<i32> = x.iter().map(|&v| level(v, d, -8, 7) + 8).collect();
    for j in 0..16 {
        out.push((q[j] | (q[j + 16] << 4)) as u8);
    }
    dec.extend(q.iter().map(|&q| (q - 8) as f32 * d));
}

/// block_q4_1: f16 d, f16 m, u8 qs[16] (nibbles as Q4_0); x = q * d + m.
fn q4_1(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    let (lo, hi) = min_max(x);
    let (dh, d) = half((hi - lo) / 15.0);
    let (mh, m) = half(lo);
    push_f16(out, dh);
    push_f16(out, mh);
    let q: Vec<i32> = x.iter().map(|&v| level(v - m, d, 0, 15)).collect();
    for j in 0..16 {
        out.push((q[j] | (q[j + 16] << 4)) as u8);
    }
    dec.extend(q.iter().map(|&q| q as f32 * d + m));
}

/// block_q5_0: f16 d, u32 qh (bit j: fifth bit of value j), u8 qs[16] (low nibbles as
/// Q4_0); x = (q - 16) * d.
fn q5_0(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    let (dh, d) = half(amax(x) / 16.0);
    push_f16(out, dh);
    let q: Vec<i32> = x.iter().map(|&v| level(v, d, -16, 15) + 16).collect();
    let qh = q.iter().enumerate().fold(0u32, |h, (j, &q)| h | (((q >> 4) as u32 & 1) << j));
    out.extend_from_slice(&qh.to_le_bytes());
    for j in 0..16 {
        out.push(((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4)) as u8);
    }
    dec.extend(q.iter().map(|&q| (q - 16) as f32 * d));
}

/// Scales and mins of the 8 sub-blocks of 32 of a Q4_K/Q5_K super-block with `levels`
/// quantization levels: 6-bit integers times the f16 super-scales `d` and `dmin`.
struct KScales {
    d: (f16, f32),
    dmin: (f16, f32),
    sc: [u8; 8],
    m: [u8; 8],
}

impl KScales {
    fn new(x: &[f32], levels: f32) -> Self {
        let mut scale = [0f32; 8];
        let mut min = [0f32; 8];
        for (j, sub) in x.chunks(32).enumerate() {
            let (lo, hi) = min_max(sub);
            let lo = lo.min(0.0);
            scale[j] = (hi - lo) / levels;
            min[j] = -lo;
        }
        let d = half(scale.iter().fold(0f32, |a, &s| a.max(s)) / 63.0);
        let dmin = half(min.iter().fold(0f32, |a, &s| a.max(s)) / 63.0);
        let six_bit = |v: f32, unit: f32| if unit == 0.0 { 0 } else { (v / unit).round().clamp(0.0, 63.0) as u8 };
        let sc = scale.map(|s| six_bit(s, d.1).max(1));
        let m = min.map(|s| six_bit(s, dmin.1));
        Self { d, dmin, sc, m }
    }

    /// `d * sc` and `dmin * m` of sub-block `j`, as ggml computes them.
    fn sub(&self, j: usize) -> (f32, f32) {
        (self.d.1 * self.sc[j] as f32, self.dmin.1 * self.m[j] as f32)
    }

    /// The quantized value of `v` in sub-block `j`.
    fn level(&self, v: f32, j: usize, max: i32) -> i32 {
        let (d, m) = self.sub(j);
        level(v + m, d, 0, max)
    }

    /// f16 d, f16 dmin, then the 12 bytes packing 8 six-bit scales and 8 six-bit mins:
    /// sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks
    /// 4-7 in the nibbles of bytes 8-11 with their top 2 bits in the top bits of bytes 0-7.
    fn write(&self, out: &mut Vec<u8>) {
        push_f16(out, self.d.0);
        push_f16(out, self.dmin.0);
        let mut s = [0u8; 12];
        for j in 0..4 {
            s[j] = self.sc[j] | ((self.sc[j + 4] >> 4) << 6);
            s[j + 4] = self.m[j] | ((self.m[j + 4] >> 4) << 6);
            s[j + 8] = (self.sc[j + 4] & 0xF) | ((self.m[j + 4] & 0xF) << 4);
        }
        out.extend_from_slice(&s);
    }

    /// The decoded value of level `q` in sub-block `j`: `d * sc * q - dmin * m`.
    fn value(&self, q: i32, j: usize) -> f32 {
        let (d, m) = self.sub(j);
        d * q as f32 - m
    }
}

/// block_q4_K: KScales header, u8 qs[128]; each 64 values share 32 bytes, the first 32
/// values in the low nibbles and the next 32 in the high nibbles.
fn q4_k(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    let s = KScales::new(x, 15.0);
    s.write(out);
    let q: Vec<i32> = x.iter().enumerate().map(|(i, &v)| s.level(v, i / 32, 15)).collect();
    for c in 0..4 {
        for l in 0..32 {
            out.push((q[c * 64 + l] | (q[c * 64 + 32 + l] << 4)) as u8);
        }
    }
    dec.extend(q.iter().enumerate().map(|(i, &q)| s.value(q, i / 32)));
}

/// block_q5_K: KScales header, u8 qh[32], u8 qs[128] (low nibbles as Q4_K); the fifth bit
/// of value `c * 64 + l` is bit `2c` of qh[l], of value `c * 64 + 32 + l` bit `2c + 1`.
fn q5_k(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    let s = KScales::new(x, 31.0);
    s.write(out);
    let q: Vec<i32> = x.iter().enumerate().map(|(i, &v)| s.level(v, i / 32, 31)).collect();
    let mut qh = [0u8; 32];
    for c in 0..4 {
        for l in 0..32 {
            qh[l] |= (((q[c * 64 + l] >> 4) & 1) << (2 * c) | ((q[c * 64 + 32 + l] >> 4) & 1) << (2 * c + 1)) as u8;
        }
    }
    out.extend_from_slice(&qh);
    for c in 0..4 {
        for l in 0..32 {
            out.push(((q[c * 64 + l] & 0xF) | ((q[c * 64 + 32 + l] & 0xF) << 4)) as u8);
        }
    }
    dec.extend(q.iter().enumerate().map(|(i, &q)| s.value(q, i / 32)));
}

/// block_q6_K: u8 ql[128], u8 qh[64], i8 scales[16] (one per 16 values), f16 d;
/// x = d * scale * (q - 32). In each half of 128 values, value `l + 32g` (g = 0..4) keeps
/// its low nibble in ql[l + 32(g % 2)] (low nibble for g < 2, high for g >= 2) and its
/// top 2 bits at bits 2g..2g+2 of qh[l].
fn q6_k(x: &[f32], out: &mut Vec<u8>, dec: &mut Vec<f32>) {
    let sub_scale: Vec<f32> = x.chunks(16).map(|s| amax(s) / 31.0).collect();
    let (dh, d) = half(sub_scale.iter().fold(0f32, |a, &s| a.max(s)) / 127.0);
    let sc: Vec<i8> = sub_scale.iter().map(|&s| level(s, d, 1, 127) as i8).collect();
    let q: Vec<i32> = x.iter().enumerate().map(|(i, &v)| level(v, d * sc[i / 16] as f32, -32, 31) + 32).collect();
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for n in 0..2 {
        let v = |e: usize| q[n * 128 + e];
        for l in 0..32 {
            ql[64 * n + l] = ((v(l) & 0xF) | ((v(l + 64) & 0xF) << 4)) as u8;
            ql[64 * n + 32 + l] = ((v(l + 32) & 0xF) | ((v(l + 96) & 0xF) << 4)) as u8;
            qh[32 * n + l] =
                ((v(l) >> 4) | ((v(l + 32) >> 4) << 2) | ((v(l + 64) >> 4) << 4) | ((v(l + 96) >> 4) << 6)) as u8;
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as u8));
    push_f16(out, dh);
    dec.extend(q.iter().enumerate().map(|(i, &q)| d * sc[i / 16] as f32 * (q - 32) as f32));
}
