//! Format-independent assembly of the network's weights from a tensor source.

use anyhow::{bail, Result};
use candle_core::quantized::QMatMul;

use crate::config::Config;
use crate::weights::{Converter, Linear, RawWeight};

/// The per-layer tensors of a Llama-family block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LayerWeight {
    AttnNorm,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    O,
    FfnNorm,
    Gate,
    Up,
    Down,
}

impl LayerWeight {
    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::AttnNorm => "attn_norm.weight",
            Self::Q => "attn_q.weight",
            Self::K => "attn_k.weight",
            Self::V => "attn_v.weight",
            Self::QBias => "attn_q.bias",
            Self::KBias => "attn_k.bias",
            Self::VBias => "attn_v.bias",
            Self::O => "attn_output.weight",
            Self::FfnNorm => "ffn_norm.weight",
            Self::Gate => "ffn_gate.weight",
            Self::Up => "ffn_up.weight",
            Self::Down => "ffn_down.weight",
        }
    }

    pub fn hf_name(self) -> &'static str {
        match self {
            Self::AttnNorm => "input_layernorm.weight",
            Self::Q => "self_attn.q_proj.weight",
            Self::K => "self_attn.k_proj.weight",
            Self::V => "self_attn.v_proj.weight",
            Self::QBias => "self_attn.q_proj.bias",
            Self::KBias => "self_attn.k_proj.bias",
            Self::VBias => "self_attn.v_proj.bias",
            Self::O => "self_attn.o_proj.weight",
            Self::FfnNorm => "post_attention_layernorm.weight",
            Self::Gate => "mlp.gate_proj.weight",
            Self::Up => "mlp.up_proj.weight",
            Self::Down => "mlp.down_proj.weight",
        }
    }
}

/// A tensor of the network, named per file format by [`TensorSource::name_of`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Embed,
    Norm,
    Output,
    Layer(usize, LayerWeight),
}

/// Where weights come from (a GGUF file, a safetensors directory).
pub(crate) trait TensorSource {
    fn name_of(&self, slot: Slot) -> String;
    fn contains(&self, name: &str) -> bool;
    fn read(&mut self, name: &str) -> Result<RawWeight>;
    /// Whether a missing output matrix means the head reuses the embedding table (a GGUF file
    /// has none then); `false` when the file says the two are separate.
    fn ties_embeddings(&self) -> bool {
        true
    }
}

pub(crate) struct Layer {
    pub attn_norm: Vec<f32>,
    /// q, k and v stacked: outputs `[q_dim | kv_dim | kv_dim]`.
    pub qkv: Linear,
    pub o: Linear,
    pub ffn_norm: Vec<f32>,
    /// gate and up stacked: outputs `[intermediate | intermediate]`.
    pub gate_up: Linear,
    pub down: Linear,
}

pub(crate) struct Weights {
    /// Token embeddings as stored (rows are looked up, never multiplied).
    pub embed: QMatMul,
    pub layers: Vec<Layer>,
    pub norm: Vec<f32>,
    pub lm_head: Linear,
}

struct Reader<'a> {
    src: &'a mut dyn TensorSource,
}

impl Reader<'_> {
    /// Reads `slot` and checks its shape (`[out, in]` for matrices, `[len]` for vectors).
    fn read(&mut self, slot: Slot, shape: &[usize]) -> Result<RawWeight> {
        let name = self.src.name_of(slot);
        if !self.src.contains(&name) {
            bail!("tensor '{name}' is missing from the model file");
        }
        let w = self.src.read(&name)?;
        let dims = match &w {
            RawWeight::Quantized(q) => q.shape().dims().to_vec(),
            RawWeight::Dense(t) => t.dims().to_vec(),
        };
        if dims != shape {
            bail!("tensor '{name}' has shape {dims:?}, expected {shape:?}");
        }
        Ok(w)
    }

    fn vector(&mut self, slot: Slot, len: usize) -> Result<Vec<f32>> {
        self.read(slot, &[len])?.to_vec1()
    }

    fn has(&self, slot: Slot) -> bool {
        self.src.contains(&self.src.name_of(slot))
    }
}

/// Reads and converts every weight of the network described by `cfg`.
pub(crate) fn build(src: &mut dyn TensorSource, cfg: &Config, conv: &Converter) -> Result<Weights> {
    let mut r = Reader { src };
    let (h, qd, kvd, f) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.intermediate);
    let embed = r.read(Slot::Embed, &[cfg.vocab_size, h])?;
    let mut layers = Vec::with_capacity(cfg.layers);
    for i in 0..cfg.layers {
        use LayerWeight as W;
        let slot = |w| Slot::Layer(i, w);
        let q = r.read(slot(W::Q), &[qd, h])?;
        let k = r.read(slot(W::K), &[kvd, h])?;
        let v = r.read(slot(W::V), &[kvd, h])?;
        let bias = if cfg.family.has_qkv_bias() {
            let mut b = r.vector(slot(W::QBias), qd)?;
            b.extend(r.vector(slot(W::KBias), kvd)?);
            b.extend(r.vector(slot(W::VBias), kvd)?);
            Some(b)
        } else {
            None
        };
        let qkv = conv.linear(vec![q, k, v], bias)?;
        let o = conv.linear(vec![r.read(slot(W::O), &[h, qd])?], None)?;
        let gate = r.read(slot(W::Gate), &[f, h])?;
        let up = r.read(slot(W::Up), &[f, h])?;
        let gate_up = conv.linear(vec![gate, up], None)?;
        let down = conv.linear(vec![r.read(slot(W::Down), &[h, f])?], None)?;
        layers.push(Layer {
            attn_norm: r.vector(slot(W::AttnNorm), h)?,
            qkv,
            o,
            ffn_norm: r.vector(slot(W::FfnNorm), h)?,
            gate_up,
            down,
        });
    }
    let norm = r.vector(Slot::Norm, h)?;
    // Tied embeddings (no separate output matrix): the head reuses the embedding table.
    let head = match (r.has(Slot::Output), r.src.ties_embeddings()) {
        (true, _) => r.read(Slot::Output, &[cfg.vocab_size, h])?,
        (false, true) => r.read(Slot::Embed, &[cfg.vocab_size, h])?,
        (false, false) => bail!(
            "tensor '{}' is missing and the embeddings are not tied (tie_word_embeddings: false)",
            r.src.name_of(Slot::Output)
        ),
    };
    let lm_head = conv.linear(vec![head], None)?;
    let embed = match embed {
        RawWeight::Quantized(q) => QMatMul::from_qtensor(q)?,
        RawWeight::Dense(t) => QMatMul::Tensor(t),
    };
    Ok(Weights { embed, layers, norm, lm_head })
}
