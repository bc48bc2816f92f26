//! Weights as loaded from a file, converted once into the format the forward pass runs on.
//!
//! Quantized projections run on the own multi-row kernels of [`crate::quant`]: by default
//! 4-bit, 6-bit and 8-bit weights (GGUF Q4_0, Q4_1, Q4_K, Q6_K, Q8_0) exactly as stored and
//! every other weight converted to Q8_0, so GGUF and safetensors models share one code path.
//! The `Native` format runs quantized weights as stored on candle's `QMatMul` instead; f32
//! weights use an own row-independent kernel (see [`Matmul::Dense`]). Projections that read
//! the same input (q/k/v, gate/up) are fused into one matrix by stacking rows: each output
//! column of a matmul depends only on its own weight row, so fusing changes no bit of the
//! result.

use anyhow::{bail, Context, Result};
use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;

use crate::quant::{FourBit, QuantMatrix, Q6_K_VALUES};
use crate::{ops, Kernel, WeightFormat};

/// A 2-D weight `[out, in]` as stored in the model file.
pub enum RawWeight {
    Quantized(QTensor),
    Dense(Tensor),
}

impl RawWeight {
    pub fn dims(&self) -> Result<(usize, usize)> {
        Ok(match self {
            Self::Quantized(q) => q.shape().dims2()?,
            Self::Dense(t) => t.dims2()?,
        })
    }

    /// Short name of the stored element type (e.g. `Q4_1`, `BF16`).
    pub fn dtype_name(&self) -> String {
        match self {
            Self::Quantized(q) => {
                // candle spells the K-quants `Q4K`; GGUF and llama.cpp say `Q4_K`.
                let name = format!("{:?}", q.dtype());
                match name.strip_suffix('K') {
                    Some(stem) => format!("{stem}_K"),
                    None => name,
                }
            }
            Self::Dense(t) => format!("{:?}", t.dtype()).to_uppercase(),
        }
    }

    fn is_block_quantized(&self) -> bool {
        matches!(self, Self::Quantized(q) if !is_float(q.dtype()))
    }

    pub fn to_f32(&self) -> Result<Tensor> {
        Ok(match self {
            Self::Quantized(q) => q.dequantize(&Device::Cpu)?,
            Self::Dense(t) => t.to_dtype(DType::F32)?,
        })
    }

    /// A vector (norm weight, bias) as f32 values.
    pub fn to_vec1(&self) -> Result<Vec<f32>> {
        Ok(self.to_f32()?.flatten_all()?.to_vec1::<f32>()?)
    }
}

/// One matmul of a [`Linear`]: `n` outputs from a `k_in`-wide (possibly zero-padded) input.
struct Part {
    matmul: Matmul,
    k_in: usize,
    n: usize,
}

enum Matmul {
    /// The own kernels: weights read once per pass, whatever the number of rows.
    Own(QuantMatrix),
    /// candle's quantized matmul: each output row is computed on its own (row-independent).
    Quantized(QMatMul),
    /// Row-major f32 weights `[n, k]`. candle's f32 gemm picks kernels by batch size, so a
    /// row's result would change with the number of rows; these use [`ops::dot_rows`].
    Dense(Vec<f32>),
}

/// `y = x W^T (+ b)` for a batch of rows, possibly made of several stacked parts.
pub struct Linear {
    parts: Vec<Part>,
    in_dim: usize,
    out_dim: usize,
    bias: Option<Vec<f32>>,
}

impl Linear {
    /// `(out_dim, in_dim)`: outputs and inputs of one row's product.
    pub fn shape(&self) -> (usize, usize) {
        (self.out_dim, self.in_dim)
    }

    /// Multiplies `m` rows of `in_dim` values (row-major) and returns `m` rows of `out_dim`.
    pub fn forward(&self, x: &[f32], m: usize) -> Result<Vec<f32>> {
        debug_assert_eq!(x.len(), m * self.in_dim);
        let mut out = if let [part] = self.parts.as_slice() {
            self.run_part(part, x, m)?
        } else {
            let results = self.parts.iter().map(|p| self.run_part(p, x, m)).collect::<Result<Vec<_>>>()?;
            let mut out = Vec::with_capacity(m * self.out_dim);
            for row in 0..m {
                for (part, r) in self.parts.iter().zip(&results) {
                    out.extend_from_slice(&r[row * part.n..(row + 1) * part.n]);
                }
            }
            out
        };
        if let Some(bias) = &self.bias {
            for row in out.chunks_exact_mut(self.out_dim) {
                for (y, b) in row.iter_mut().zip(bias) {
                    *y += b;
                }
            }
        }
        Ok(out)
    }

    fn run_part(&self, part: &Part, x: &[f32], m: usize) -> Result<Vec<f32>> {
        let input = if part.k_in > self.in_dim {
            let mut padded = Vec::with_capacity(m * part.k_in);
            for row in x.chunks_exact(self.in_dim) {
                padded.extend_from_slice(row);
                padded.resize(padded.len() + part.k_in - self.in_dim, 0.0);
            }
            Cow::Owned(padded)
        } else {
            Cow::Borrowed(x)
        };
        match &part.matmul {
            Matmul::Quantized(mm) => {
                let t = Tensor::from_slice(&input, (m, part.k_in), &Device::Cpu)?;
                Ok(mm.forward(&t)?.flatten_all()?.to_vec1::<f32>()?)
            }
            Matmul::Own(w) => {
                let input = w.quantize_input(&input, m);
                Ok(over_weight_row_tiles(part.n, m, |rows, dst| w.multiply(&input, dst, rows)))
            }
            Matmul::Dense(w) => {
                let k = part.k_in;
                Ok(over_weight_row_tiles(part.n, m, |rows, dst| {
                    ops::dot_rows(&w[rows.start * k..rows.end * k], &input, k, dst)
                }))
            }
        }
    }
}

/// Turns raw weights into [`Linear`]s of the requested format.
pub struct Converter {
    format: WeightFormat,
    kernel: Kernel,
    /// Matrices converted so far, by (stored type, type they run as): what
    /// [`Self::describe`] reports.
    tally: RefCell<BTreeMap<(String, String), usize>>,
}

impl Converter {
    /// Converts to `format`, for the forward pass to run on `kernel` (which the CPU runs).
    pub fn new(format: WeightFormat, kernel: Kernel) -> Self {
        Self { format, kernel, tally: RefCell::default() }
    }

    /// Counts `parts` as running as `runs_as` (their stored type when `None`).
    fn record(&self, parts: &[RawWeight], runs_as: Option<&str>) {
        let mut tally = self.tally.borrow_mut();
        for part in parts {
            let stored = part.dtype_name();
            let runs_as = runs_as.map_or_else(|| stored.clone(), str::to_string);
            *tally.entry((stored, runs_as)).or_default() += 1;
        }
    }

    /// Stacks `parts` (same input width) into one linear layer with an optional bias.
    pub fn linear(&self, parts: Vec<RawWeight>, bias: Option<Vec<f32>>) -> Result<Linear> {
        let dims = parts.iter().map(RawWeight::dims).collect::<Result<Vec<_>>>()?;
        let Some(&(_, in_dim)) = dims.first() else {
            bail!("linear layer without weights");
        };
        if dims.iter().any(|&(_, k)| k != in_dim) {
            bail!("fused weights have different input widths: {dims:?}");
        }
        let out_dim = dims.iter().map(|&(n, _)| n).sum();
        if let Some(b) = &bias {
            if b.len() != out_dim {
                bail!("bias has {} values for {out_dim} outputs", b.len());
            }
        }
        let parts = match self.format {
            WeightFormat::Auto => self.auto_parts(&parts, out_dim, in_dim)?,
            WeightFormat::Q8_0 => vec![self.q8_part(&parts, out_dim, in_dim)?],
            WeightFormat::F32 => {
                self.record(&parts, Some(DENSE));
                vec![dense_part(&parts, out_dim, in_dim)?]
            }
            WeightFormat::Native => {
                for part in &parts {
                    let runs_as = (!part.is_block_quantized()).then_some(DENSE);
                    self.record(std::slice::from_ref(part), runs_as);
                }
                native_parts(parts, out_dim, in_dim)?
            }
        };
        Ok(Linear { parts, in_dim, out_dim, bias })
    }

    /// 4-bit and 6-bit weights as stored, the rest as Q8_0 ([`Self::q8_part`]): one fused matrix
    /// where every part has the same code, else one matrix per part (as Q4_K_M files mix Q4_K
    /// with Q6_K).
    fn auto_parts(&self, parts: &[RawWeight], n: usize, k: usize) -> Result<Vec<Part>> {
        if let Some((code, blocks)) = kept_blocks(parts, k)? {
            self.record(parts, None);
            let matrix = match code {
                Kept::FourBit(code) => QuantMatrix::from_four_bit(code, &blocks, n, k, self.kernel),
                Kept::Q6K => QuantMatrix::from_q6_k(&blocks, n, k, self.kernel),
            };
            return Ok(vec![self.own_part(matrix)]);
        }
        if parts.len() > 1 && parts.iter().any(|p| kept_code(p, k).is_some()) {
            return parts
                .iter()
                .map(|p| {
                    let (n, k) = p.dims()?;
                    Ok(self.auto_parts(std::slice::from_ref(p), n, k)?.remove(0))
                })
                .collect();
        }
        Ok(vec![self.q8_part(parts, n, k)?])
    }

    /// Q8_0 weights as stored when every part is Q8_0 (as GGUF files keep their token
    /// embeddings, which tied heads reuse), else quantized from f32.
    fn q8_part(&self, parts: &[RawWeight], n: usize, k: usize) -> Result<Part> {
        if let Some(blocks) = stored_q8_0_blocks(parts, k)? {
            self.record(parts, None);
            return Ok(self.own_part(QuantMatrix::from_q8_0(&blocks, n, k, self.kernel)));
        }
        self.record(parts, Some("Q8_0"));
        let w = finite_values(parts)?;
        Ok(self.own_part(QuantMatrix::quantize(&w, n, k, self.kernel)))
    }

    fn own_part(&self, matrix: QuantMatrix) -> Part {
        let (n, k_in) = matrix.shape();
        Part { matmul: Matmul::Own(matrix), k_in, n }
    }

    /// What the matrices converted so far run as, for [`crate::ModelInfo::weights`]: e.g.
    /// `Q4_1 ×210, Q8_0 ×1 as stored; avx2 kernel` or `F16 ×211 converted to Q8_0; avx2 kernel`.
    pub fn describe(&self) -> String {
        let tally = self.tally.borrow();
        let mut kept = Vec::new();
        let mut converted: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((stored, runs_as), n) in tally.iter() {
            let count = format!("{stored} ×{n}");
            if stored == runs_as {
                kept.push(count);
            } else {
                converted.entry(runs_as).or_default().push(count);
            }
        }
        let mut groups = Vec::new();
        if !kept.is_empty() {
            groups.push(format!("{} as stored", kept.join(", ")));
        }
        groups.extend(converted.into_iter().map(|(to, from)| format!("{} converted to {to}", from.join(", "))));
        let matrices = groups.join("; ");
        match self.format {
            WeightFormat::Auto | WeightFormat::Q8_0 => format!("{matrices}; {} kernel", self.kernel),
            WeightFormat::F32 | WeightFormat::Native => matrices,
        }
    }
}

/// The type float weights run as outside the own quantized kernels.
const DENSE: &str = "F32";

/// A GGUF code the own kernels keep exactly.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kept {
    FourBit(FourBit),
    Q6K,
}

/// The code the own kernels keep `part` in exactly (rows `k` values wide), if any.
fn kept_code(part: &RawWeight, k: usize) -> Option<Kept> {
    let RawWeight::Quantized(q) = part else { return None };
    let (code, block) = match q.dtype() {
        GgmlDType::Q4_1 => (Kept::FourBit(FourBit::Q4_1), FourBit::Q4_1.block_values()),
        GgmlDType::Q4_0 => (Kept::FourBit(FourBit::Q4_0), FourBit::Q4_0.block_values()),
        GgmlDType::Q4K => (Kept::FourBit(FourBit::Q4K), FourBit::Q4K.block_values()),
        GgmlDType::Q6K => (Kept::Q6K, Q6_K_VALUES),
        _ => return None,
    };
    k.is_multiple_of(block).then_some(code)
}

/// The GGUF blocks of `parts` stacked by rows, if they are all of one code that the own
/// kernels keep exactly.
fn kept_blocks(parts: &[RawWeight], k: usize) -> Result<Option<(Kept, Vec<u8>)>> {
    let Some(code) = parts.first().and_then(|p| kept_code(p, k)) else { return Ok(None) };
    if parts.iter().any(|p| kept_code(p, k) != Some(code)) {
        return Ok(None);
    }
    Ok(Some((code, stacked_blocks(parts)?)))
}

/// The GGUF blocks of `parts` stacked by rows, if they are all Q8_0 with rows of whole blocks.
fn stored_q8_0_blocks(parts: &[RawWeight], k: usize) -> Result<Option<Vec<u8>>> {
    let is_q8_0 = |p: &RawWeight| matches!(p, RawWeight::Quantized(q) if q.dtype() == GgmlDType::Q8_0);
    if !k.is_multiple_of(GgmlDType::Q8_0.block_size()) || !parts.iter().all(is_q8_0) {
        return Ok(None);
    }
    Ok(Some(stacked_blocks(parts)?))
}

/// The stored blocks of the quantized ones of `parts`, one after the other.
fn stacked_blocks(parts: &[RawWeight]) -> Result<Vec<u8>> {
    let mut blocks = Vec::new();
    for p in parts {
        if let RawWeight::Quantized(q) = p {
            blocks.extend_from_slice(&q.data()?);
        }
    }
    Ok(blocks)
}

fn stack_f32(parts: &[RawWeight]) -> Result<Tensor> {
    let ts = parts.iter().map(RawWeight::to_f32).collect::<Result<Vec<_>>>()?;
    Ok(Tensor::cat(&ts, 0)?)
}

/// The stacked parts' values as f32, refused when one is not a finite number (a damaged file,
/// an overflowing conversion): it would make every pass NaN, or on some kernels silently zero.
fn finite_values(parts: &[RawWeight]) -> Result<Vec<f32>> {
    let values = stack_f32(parts)?.flatten_all()?.to_vec1::<f32>()?;
    if values.iter().any(|v| !v.is_finite()) {
        bail!("a weight is not a finite number: the model's weights are damaged");
    }
    Ok(values)
}

fn dense_part(parts: &[RawWeight], n: usize, k: usize) -> Result<Part> {
    let w = finite_values(parts)?;
    Ok(Part { matmul: Matmul::Dense(w), k_in: k, n })
}

/// Weight rows per tile of [`over_weight_row_tiles`].
const TILE: usize = 16;

/// Runs `tile(rows, dst)` for tiles of weight rows in parallel, `dst` being the tile's
/// products row-major (`dst[r * rows.len() + (j - rows.start)]` for input row `r`), and
/// returns the `[m, n]` result row-major.
fn over_weight_row_tiles(n: usize, m: usize, tile: impl Fn(Range<usize>, &mut [f32]) + Sync) -> Vec<f32> {
    // Not zeroed first: the tiles write every element (a prefill chunk's outputs are up to
    // 1.5 MB a matrix, and zeroing them took 1–2% of a long prefill on one thread).
    let mut out = Vec::with_capacity(m * n);
    let columns = DisjointColumns { out: out.as_mut_ptr(), m, n };
    crate::threads::for_each_range(n.div_ceil(TILE), |tiles| {
        let mut dst = vec![0f32; TILE * m];
        for t in tiles {
            let rows = t * TILE..((t + 1) * TILE).min(n);
            let dst = &mut dst[..rows.len() * m];
            tile(rows.clone(), dst);
            columns.write(rows, dst);
        }
    });
    // SAFETY: the tiles cover columns `0..n`, and `write` stored every row of each.
    unsafe { out.set_len(m * n) };
    out
}

/// A row-major `[m, n]` matrix whose columns tiles write from several threads at once.
struct DisjointColumns {
    out: *mut f32,
    m: usize,
    n: usize,
}

// SAFETY: threads write through the pointer only to the columns of their own tile (see
// `write`), and the matrix outlives the parallel region that uses it.
unsafe impl Sync for DisjointColumns {}

impl DisjointColumns {
    /// Stores the row-major block `block` (`m` rows of `columns.len()`) into `columns` of
    /// every row.
    fn write(&self, columns: Range<usize>, block: &[f32]) {
        assert!(columns.end <= self.n && block.len() == columns.len() * self.m);
        for (r, values) in block.chunks_exact(columns.len()).enumerate() {
            let to = self.out.wrapping_add(r * self.n + columns.start);
            // SAFETY (both): row `r < m`, columns `columns` (within `0..n`) of the `m * n`
            // buffer, which no other thread writes (tiles are disjoint).
            match <&[f32; TILE]>::try_from(values) {
                // A whole tile's row as one value: a few vector moves, where a call to
                // `memcpy` per row of 16 values cost more than the copy (measured).
                Ok(&row) => unsafe { to.cast::<[f32; TILE]>().write_unaligned(row) },
                Err(_) => unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), to, values.len()) },
            }
        }
    }
}

/// Keeps quantized weights as stored. Parts of one quantized type are stacked by
/// concatenating their blocks (rows are whole blocks); mixed types stay separate.
fn native_parts(parts: Vec<RawWeight>, n: usize, k: usize) -> Result<Vec<Part>> {
    let first_q = match parts.first() {
        Some(RawWeight::Quantized(q)) if !is_float(q.dtype()) => Some(q.dtype()),
        _ => None,
    };
    let all_same_quant = parts.iter().all(|p| matches!(p, RawWeight::Quantized(q) if Some(q.dtype()) == first_q));
    if first_q.is_none() && parts.iter().all(|p| !p.is_block_quantized()) {
        return Ok(vec![dense_part(&parts, n, k)?]);
    }
    if all_same_quant && parts.len() > 1 {
        let dtype = first_q.context("no quantized part")?;
        let mut bytes = Vec::new();
        for p in &parts {
            if let RawWeight::Quantized(q) = p {
                bytes.extend_from_slice(&q.data()?);
            }
        }
        let storage = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, dtype)?;
        let q = QTensor::new(storage, (n, k))?;
        return Ok(vec![Part { matmul: Matmul::Quantized(QMatMul::from_qtensor(q)?), k_in: k, n }]);
    }
    parts
        .into_iter()
        .map(|p| match p {
            RawWeight::Quantized(q) if !is_float(q.dtype()) => {
                let (n, k) = q.shape().dims2()?;
                Ok(Part { matmul: Matmul::Quantized(QMatMul::from_qtensor(q)?), k_in: k, n })
            }
            p => {
                let (n, k) = p.dims()?;
                dense_part(&[p], n, k)
            }
        })
        .collect()
}

/// GGUF may store small or sensitive tensors unquantized; those run as dense f32.
fn is_float(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16)
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: usize = 256;

    fn quantized(dtype: GgmlDType) -> RawWeight {
        let values = Tensor::ones((8, K), DType::F32, &Device::Cpu).unwrap();
        RawWeight::Quantized(QTensor::quantize(&values, dtype).unwrap())
    }

    fn half_floats() -> RawWeight {
        RawWeight::Dense(Tensor::ones((8, K), DType::F16, &Device::Cpu).unwrap())
    }

    /// Loads the same mix of matrices as `format` and returns the description.
    fn described(format: WeightFormat) -> String {
        let conv = Converter::new(format, Kernel::Portable);
        conv.linear(vec![quantized(GgmlDType::Q4_1), quantized(GgmlDType::Q4_1)], None).unwrap();
        conv.linear(vec![quantized(GgmlDType::Q6K)], None).unwrap();
        conv.linear(vec![quantized(GgmlDType::Q8_0)], None).unwrap();
        conv.linear(vec![half_floats()], None).unwrap();
        conv.describe()
    }

    #[test]
    fn the_description_counts_what_each_stored_type_runs_as() {
        assert_eq!(
            described(WeightFormat::Auto),
            "Q4_1 ×2, Q6_K ×1, Q8_0 ×1 as stored; F16 ×1 converted to Q8_0; portable kernel"
        );
        assert_eq!(
            described(WeightFormat::Q8_0),
            "Q8_0 ×1 as stored; F16 ×1, Q4_1 ×2, Q6_K ×1 converted to Q8_0; portable kernel"
        );
        assert_eq!(described(WeightFormat::F32), "F16 ×1, Q4_1 ×2, Q6_K ×1, Q8_0 ×1 converted to F32");
        assert_eq!(described(WeightFormat::Native), "Q4_1 ×2, Q6_K ×1, Q8_0 ×1 as stored; F16 ×1 converted to F32");
    }
}
