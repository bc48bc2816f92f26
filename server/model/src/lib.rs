//! Llama-family model runtime on candle, built for lossless speculative decoding.
//!
//! [`Model`] runs one forward pass over a *token tree* on top of its KV cache and returns
//! the logits of every node, then keeps only the accepted path in the cache. Every
//! kernel computes a token's result independently of the other tokens in the pass, so
//! the logits of a tree node are bit-identical to those of a one-token pass along its
//! branch (own sequential softmax and attention, row-independent quantized matmuls; the
//! `exactness` tests check it bit for bit).
//!
//! Weights come from a GGUF file (Llama, Qwen2) or a Hugging Face safetensors directory
//! and are converted once at load time ([`WeightFormat`]). See `README.md` for the
//! layout, the numerics and how to run the tests and the speed benchmark.

mod attention;
mod config;
#[cfg(target_arch = "x86_64")]
mod frame;
mod gguf;
mod gguf_alignment;
mod groups;
mod kernel;
mod kv;
mod loader;
mod memory;
mod model;
mod ops;
mod product_timing;
mod quant;
mod safetensors;
mod sentencepiece;
mod source;
mod split_attention;
mod threads;
mod tokenizer;
mod tree;
mod vector;
mod weights;

pub use config::{Config, Family, RopeStyle};
pub use kernel::{choose as choose_kernel, CpuDescription, Kernel, KernelChoice, KERNEL_ENV};
pub use kv::KvCache;
pub use model::Model;
pub use product_timing::ProductTiming;
pub use threads::{run as run_on_model_threads, running as model_threads_running, wanted as model_threads_wanted};
pub use tokenizer::{tokenizer_from_gguf, FimTokens, RepoTokens, Tokenizer};
pub use tree::TreeLayout;

/// File name of the embedded default model.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// SHA-256 of [`DEFAULT_MODEL_FILE`].
pub const DEFAULT_MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// How weights are held in memory for the forward pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightFormat {
    /// As stored in the file (quantized GGUF types through candle's kernels; float
    /// safetensors as f32).
    Native,
    /// The own kernels (see [`Kernel`]): 4-bit, 6-bit and 8-bit weights (GGUF Q4_0, Q4_1,
    /// Q4_K, Q6_K, Q8_0) exactly as stored, every other weight re-quantized to Q8_0 at load.
    /// 4-bit weights halve the bytes a one-token pass streams from memory.
    #[default]
    Auto,
    /// Every weight re-quantized to Q8_0 at load, on the own kernels.
    Q8_0,
    /// Dequantized to f32.
    F32,
}

impl WeightFormat {
    /// The name `--weights` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Native => "native",
            Self::Q8_0 => "q8_0",
            Self::F32 => "f32",
        }
    }
}

impl std::str::FromStr for WeightFormat {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "native" => Ok(Self::Native),
            "q8_0" | "q8" => Ok(Self::Q8_0),
            "f32" => Ok(Self::F32),
            other => anyhow::bail!("unknown weight format '{other}' (expected auto, native, q8_0 or f32)"),
        }
    }
}

/// Options of [`Model::load`].
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Threads for candle's kernels (default: the physical cores). Takes effect only if
    /// no candle computation has run in this process yet; see [`ModelInfo::threads`].
    pub threads: Option<usize>,
    pub weights: WeightFormat,
    /// The kernel to run on (default: [`KERNEL_ENV`] if set, else the best this CPU runs).
    pub kernel: Option<Kernel>,
}

/// What was loaded.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub name: String,
    /// `llama` or `qwen2`.
    pub architecture: String,
    /// Width of a logits row (the embedding table's rows; may exceed the tokenizer's).
    pub vocab_size: usize,
    pub context_length: usize,
    pub device: String,
    /// The weight format in memory and where it came from.
    pub weights: String,
    pub bos_token: Option<u32>,
    /// Tokens that end a generation: the model's EOS/EOT ids plus the end-of-text tokens
    /// of the common families found in the vocabulary.
    pub eos_tokens: Vec<u32>,
    pub fim: Option<FimTokens>,
    /// Threads candle's kernels run on.
    pub threads: usize,
    /// The kernel the forward pass runs on.
    pub kernel: Kernel,
    /// Why the kernel is not the one asked for, if it is not.
    pub kernel_warning: Option<String>,
}

/// The error of a forward pass whose logits are NaN or infinite: weights damaged at conversion or
/// overflowing (an `inf` in an f16 file). The model's output would be garbage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NonFiniteLogits;

impl std::fmt::Display for NonFiniteLogits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the model produced non-finite logits: its weights are damaged")
    }
}

impl std::error::Error for NonFiniteLogits {}

/// The first line of an error's message: candle appends a backtrace to its errors when
/// `RUST_BACKTRACE` is set, and our errors are one line.
pub(crate) fn first_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}
