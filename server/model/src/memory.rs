//! The memory a model takes once loaded and converted, checked against what the system
//! has available before any weight is read: a model too large for this machine is refused
//! with a clear error instead of being loaded until the system swaps or kills the daemon.

use anyhow::{bail, Result};
use candle_core::quantized::GgmlDType;

use crate::WeightFormat;

/// A tensor as the file declares it.
pub(crate) struct Declared {
    pub dtype: GgmlDType,
    pub elements: u64,
    /// Matrices are converted to the weight format; vectors (norms, biases) become f32.
    pub matrix: bool,
}

/// Bytes per weight of the own kernels' Q8_0 (an f32 scale per block of 32).
const Q8_0_BYTES: f64 = 36.0 / 32.0;

/// About how many bytes the weights take in memory after conversion to `format`, plus the
/// f32 copy of the largest matrix that conversion holds for a moment (twice: read, stacked).
pub(crate) fn needed(tensors: &[Declared], format: WeightFormat) -> u64 {
    let stored = |t: &Declared| t.elements as f64 * t.dtype.type_size() as f64 / t.dtype.block_size() as f64;
    let is_float = |d: GgmlDType| matches!(d, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
    let mut total = 0f64;
    let mut largest = 0u64;
    for t in tensors {
        let f32_bytes = t.elements as f64 * 4.0;
        total += match (t.matrix, format) {
            (false, _) | (true, WeightFormat::F32) => f32_bytes,
            (true, WeightFormat::Auto) if matches!(t.dtype, GgmlDType::Q4_0 | GgmlDType::Q4_1) => stored(t),
            (true, WeightFormat::Auto | WeightFormat::Q8_0) => t.elements as f64 * Q8_0_BYTES,
            (true, WeightFormat::Native) if is_float(t.dtype) => f32_bytes,
            (true, WeightFormat::Native) => stored(t),
        };
        if t.matrix {
            largest = largest.max(t.elements);
        }
    }
    total as u64 + 2 * 4 * largest
}

/// `MemAvailable` of `/proc/meminfo` in bytes, where the system reports it.
pub(crate) fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Fails when `needed` bytes exceed `available` (no check when that is unknown).
pub(crate) fn ensure_fits(needed: u64, available: Option<u64>, format: WeightFormat) -> Result<()> {
    match available {
        Some(available) if needed > available => bail!(
            "the model needs about {} of memory with weights {}, more than the {} available (MemAvailable in /proc/meminfo); choose a smaller model or quantization",
            gib(needed),
            format.name(),
            gib(available)
        ),
        _ => Ok(()),
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(dtype: GgmlDType, elements: u64) -> Declared {
        Declared { dtype, elements, matrix: true }
    }

    #[test]
    fn converted_sizes_per_format() {
        let m = 1u64 << 20;
        let tensors = [
            matrix(GgmlDType::Q4_0, m),
            matrix(GgmlDType::Q4K, m),
            Declared { dtype: GgmlDType::F32, elements: 1024, matrix: false },
        ];
        let temp = 2 * 4 * m;
        // Q4_0 as stored (18 bytes per 32), Q4_K to Q8_0 (36 per 32), the vector as f32.
        assert_eq!(needed(&tensors, WeightFormat::Auto), m * 18 / 32 + m * 36 / 32 + 4096 + temp);
        assert_eq!(needed(&tensors, WeightFormat::Q8_0), 2 * m * 36 / 32 + 4096 + temp);
        assert_eq!(needed(&tensors, WeightFormat::F32), 2 * m * 4 + 4096 + temp);
        assert_eq!(needed(&tensors, WeightFormat::Native), m * 18 / 32 + m * 144 / 256 + 4096 + temp);
    }

    #[test]
    fn too_large_is_refused_with_the_figures() {
        let err = ensure_fits(3 << 30, Some(2 << 30), WeightFormat::Auto).unwrap_err().to_string();
        assert!(err.contains("needs about 3.0 GiB") && err.contains("2.0 GiB available"), "{err}");
        assert!(ensure_fits(1 << 30, Some(2 << 30), WeightFormat::Auto).is_ok());
        assert!(ensure_fits(u64::MAX, None, WeightFormat::Auto).is_ok());
        assert!(available().is_some_and(|b| b > 0), "this test runs on Linux");
    }
}
