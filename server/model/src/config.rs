//! Hyper-parameters of a Llama-family transformer, independent of the file format.

use anyhow::{bail, Result};

/// The model families this runtime implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Llama, CodeLlama, DeepSeek-Coder, SmolLM2: no attention biases.
    Llama,
    /// Qwen2 / Qwen2.5(-Coder): biases on the q, k and v projections.
    Qwen2,
}

impl Family {
    /// Parses an architecture name as GGUF (`general.architecture`) or
    /// config.json (`model_type`) spell it.
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "llama" => Ok(Self::Llama),
            "qwen2" => Ok(Self::Qwen2),
            other => bail!("unsupported model architecture '{other}' (supported: llama, qwen2)"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
        }
    }

    /// Whether q, k and v projections carry a bias.
    pub fn has_qkv_bias(self) -> bool {
        matches!(self, Self::Qwen2)
    }
}

/// How rotary embeddings pair the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs (2i, 2i+1): GGUF Llama weights (llama.cpp permutes q/k at conversion).
    Interleaved,
    /// Pairs (i, i + d/2) ("rotate half"): Hugging Face weights, GGUF Qwen2.
    Half,
}

/// Everything the forward pass needs to know about the network's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub family: Family,
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    /// Linear RoPE scaling: positions are divided by this factor (1 = none).
    pub rope_scale: f32,
    /// A divisor of each pair's rotary frequency (GGUF `rope_freqs.weight`: Llama 3.1's
    /// `rope_type: llama3` as llama.cpp stores it); empty: none.
    pub rope_factors: Vec<f32>,
    pub rope_style: RopeStyle,
}

impl Config {
    /// Rejects shapes the forward pass cannot run, with a message naming the field.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("hidden size", self.hidden),
            ("intermediate size", self.intermediate),
            ("layer count", self.layers),
            ("head count", self.heads),
            ("kv head count", self.kv_heads),
            ("head dimension", self.head_dim),
            ("vocabulary size", self.vocab_size),
            ("context length", self.context_length),
        ];
        for (name, value) in positive {
            if value == 0 {
                bail!("invalid model config: {name} is 0");
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            bail!("invalid model config: {} heads is not a multiple of {} kv heads", self.heads, self.kv_heads);
        }
        if !self.head_dim.is_multiple_of(2) {
            bail!("invalid model config: head dimension {} is odd", self.head_dim);
        }
        if !(self.rope_theta > 0.0 && self.rope_scale > 0.0 && self.rms_eps >= 0.0) {
            bail!("invalid model config: rope theta, rope scale or rms epsilon out of range");
        }
        if !self.rope_factors.is_empty() && self.rope_factors.len() != self.head_dim / 2 {
            bail!(
                "invalid model config: {} RoPE frequency factors for {} pairs of a head's dimensions",
                self.rope_factors.len(),
                self.head_dim / 2
            );
        }
        if self.rope_factors.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
            bail!("invalid model config: a RoPE frequency factor is not a positive number");
        }
        Ok(())
    }

    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}
