//! Reading a model from a GGUF file: metadata → [`Config`], tensors → [`RawWeight`]s.

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use candle_core::Device;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use crate::config::{Config, Family, RopeStyle};
use crate::first_line;
use crate::loader::{Slot, TensorSource};
use crate::memory::Declared;
use crate::tokenizer::{self, Tokenizer};
use crate::weights::RawWeight;

/// Typed access to GGUF metadata with clear errors for missing or mistyped keys.
pub(crate) struct Metadata<'a> {
    map: &'a HashMap<String, Value>,
}

impl<'a> Metadata<'a> {
    pub fn new(map: &'a HashMap<String, Value>) -> Self {
        Self { map }
    }

    fn get(&self, key: &str) -> Result<&'a Value> {
        self.map.get(key).with_context(|| format!("GGUF metadata key '{key}' is missing"))
    }

    pub fn opt_string(&self, key: &str) -> Result<Option<&'a str>> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => bail!("GGUF metadata key '{key}' is not a string"),
        }
    }

    pub fn string(&self, key: &str) -> Result<&'a str> {
        self.opt_string(key)?.with_context(|| format!("GGUF metadata key '{key}' is missing"))
    }

    pub fn strings(&self, key: &str) -> Result<Vec<&'a str>> {
        match self.get(key)? {
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.as_str()),
                    _ => bail!("GGUF metadata key '{key}' holds a non-string item"),
                })
                .collect(),
            _ => bail!("GGUF metadata key '{key}' is not an array"),
        }
    }

    pub fn ints(&self, key: &str) -> Result<Vec<i64>> {
        match self.get(key)? {
            Value::Array(items) => items
                .iter()
                .map(|v| int(v).with_context(|| format!("GGUF metadata key '{key}' holds a non-integer item")))
                .collect(),
            _ => bail!("GGUF metadata key '{key}' is not an array"),
        }
    }

    pub fn floats(&self, key: &str) -> Result<Vec<f32>> {
        match self.get(key)? {
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::F32(x) => Ok(*x),
                    Value::F64(x) => Ok(*x as f32),
                    _ => bail!("GGUF metadata key '{key}' holds a non-float item"),
                })
                .collect(),
            _ => bail!("GGUF metadata key '{key}' is not an array"),
        }
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => bail!("GGUF metadata key '{key}' is not a boolean"),
        }
    }

    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.map.get(key) {
            None => Ok(None),
            Some(v) => int(v)
                .and_then(|i| usize::try_from(i).ok())
                .map(Some)
                .with_context(|| format!("GGUF metadata key '{key}' is not a non-negative integer")),
        }
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.with_context(|| format!("GGUF metadata key '{key}' is missing"))
    }

    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::F32(v)) => Ok(Some(*v)),
            Some(Value::F64(v)) => Ok(Some(*v as f32)),
            Some(v) => {
                int(v).map(|i| Some(i as f32)).with_context(|| format!("GGUF metadata key '{key}' is not a number"))
            }
        }
    }
}

fn int(v: &Value) -> Option<i64> {
    Some(match *v {
        Value::U8(x) => x as i64,
        Value::I8(x) => x as i64,
        Value::U16(x) => x as i64,
        Value::I16(x) => x as i64,
        Value::U32(x) => x as i64,
        Value::I32(x) => x as i64,
        Value::U64(x) => i64::try_from(x).ok()?,
        Value::I64(x) => x,
        _ => return None,
    })
}

/// An open GGUF file: parsed header plus the handle its tensors are read from.
pub(crate) struct GgufFile {
    content: Content,
    /// Buffered: the header is read a few bytes at a time (a string's length, then the
    /// string), some 100,000 reads for a vocabulary of 49,152 tokens and its merges; unbuffered
    /// they took a fifth of a second, a system call each.
    file: BufReader<File>,
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("cannot open model file {}", path.display()))?;
        let mut file = BufReader::new(file);
        crate::gguf_alignment::check(&mut file)?;
        let content = Content::read(&mut file).map_err(|e| {
            let message = first_line(&e);
            match message.strip_prefix("unknown dtype for tensor ").and_then(|t| t.parse::<u32>().ok()) {
                Some(id) => anyhow!(
                    "unsupported tensor type {} (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                    ggml_type_name(id)
                ),
                None => anyhow!("not a valid GGUF file (truncated or corrupt?): {message}"),
            }
        })?;
        Ok(Self { content, file })
    }

    pub fn metadata(&self) -> Metadata<'_> {
        Metadata::new(&self.content.metadata)
    }

    pub fn tokenizer(&self) -> Result<Tokenizer> {
        tokenizer::from_gguf_metadata(&self.metadata())
    }

    /// Model hyper-parameters from `<arch>.*` keys (and the RoPE frequency factors' tensor).
    pub fn config(&mut self) -> Result<Config> {
        let rope_factors = self.rope_factors()?;
        let md = self.metadata();
        let arch = md.string("general.architecture")?;
        let family = Family::parse(arch)?;
        let key = |k: &str| format!("{arch}.{k}");
        let hidden = md.usize(&key("embedding_length"))?;
        let heads = md.usize(&key("attention.head_count"))?;
        let kv_heads = md.opt_usize(&key("attention.head_count_kv"))?.unwrap_or(heads);
        let head_dim = match md.opt_usize(&key("attention.key_length"))? {
            Some(d) => d,
            None if heads > 0 => hidden / heads,
            None => 0,
        };
        let embed_rows = self
            .content
            .tensor_infos
            .get("token_embd.weight")
            .map(|t| t.shape.dims().first().copied().unwrap_or(0))
            .context("tensor 'token_embd.weight' is missing")?;
        let rope_scale = match md.opt_string(&key("rope.scaling.type"))? {
            Some("linear") => md.opt_f32(&key("rope.scaling.factor"))?.unwrap_or(1.0),
            Some("none") | None => md.opt_f32(&key("rope.scale_linear"))?.unwrap_or(1.0),
            Some(other) => bail!("unsupported RoPE scaling '{other}'"),
        };
        let config = Config {
            family,
            hidden,
            intermediate: md.usize(&key("feed_forward_length"))?,
            layers: md.usize(&key("block_count"))?,
            heads,
            kv_heads,
            head_dim,
            vocab_size: embed_rows,
            context_length: md.usize(&key("context_length"))?,
            rms_eps: md.opt_f32(&key("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5),
            rope_theta: md.opt_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0),
            rope_scale,
            rope_factors,
            // llama.cpp permutes Llama q/k weights to pair adjacent dimensions;
            // Qwen2 weights keep Hugging Face's half-split pairing.
            rope_style: match family {
                Family::Llama => RopeStyle::Interleaved,
                Family::Qwen2 => RopeStyle::Half,
            },
        };
        config.validate()?;
        Ok(config)
    }

    /// The divisors of each pair's rotary frequency in `rope_freqs.weight`; empty without it.
    fn rope_factors(&mut self) -> Result<Vec<f32>> {
        const NAME: &str = "rope_freqs.weight";
        if !self.contains(NAME) {
            return Ok(Vec::new());
        }
        self.read(NAME)?.to_vec1()
    }

    /// The tensors as declared in the header, for [`crate::memory::needed`]; a model without
    /// an output matrix counts its embedding twice (the head converts a copy).
    pub fn declared(&self) -> Vec<Declared> {
        let infos = &self.content.tensor_infos;
        let declared = |t: &TensorInfo| Declared {
            dtype: t.ggml_dtype,
            elements: t.shape.elem_count() as u64,
            matrix: t.shape.rank() >= 2,
        };
        let mut all: Vec<Declared> = infos.values().map(declared).collect();
        if !infos.contains_key("output.weight") {
            all.extend(infos.get("token_embd.weight").map(declared));
        }
        all
    }

    /// `general.name`, if set.
    pub fn name(&self) -> Option<String> {
        self.metadata().opt_string("general.name").ok().flatten().map(str::to_string)
    }

    /// Whether the model's sequences start with BOS (`tokenizer.ggml.add_bos_token`; when
    /// unset, llama.cpp's default: yes for SentencePiece vocabularies, no for BPE).
    pub fn adds_bos(&self) -> bool {
        let md = self.metadata();
        match md.opt_bool("tokenizer.ggml.add_bos_token") {
            Ok(Some(add)) => add,
            _ => md.opt_string("tokenizer.ggml.model").ok().flatten() == Some("llama"),
        }
    }

    /// Special token ids named in the metadata (`tokenizer.ggml.<what>_token_id`).
    pub fn token_id(&self, what: &str) -> Option<u32> {
        self.metadata()
            .opt_usize(&format!("tokenizer.ggml.{what}_token_id"))
            .ok()
            .flatten()
            .and_then(|v| u32::try_from(v).ok())
    }
}

/// The name ggml gives tensor type `id` (the types candle cannot read, mostly).
fn ggml_type_name(id: u32) -> String {
    const NAMES: [(u32, &str); 16] = [
        (16, "IQ2_XXS"),
        (17, "IQ2_XS"),
        (18, "IQ3_XXS"),
        (19, "IQ1_S"),
        (20, "IQ4_NL"),
        (21, "IQ3_S"),
        (22, "IQ2_S"),
        (23, "IQ4_XS"),
        (24, "I8"),
        (25, "I16"),
        (26, "I32"),
        (27, "I64"),
        (28, "F64"),
        (29, "IQ1_M"),
        (34, "TQ1_0"),
        (35, "TQ2_0"),
    ];
    match NAMES.iter().find(|(i, _)| *i == id) {
        Some((_, name)) => format!("{name} (ggml type {id})"),
        None => format!("ggml type {id}"),
    }
}

impl TensorSource for GgufFile {
    fn name_of(&self, slot: Slot) -> String {
        match slot {
            Slot::Embed => "token_embd.weight".into(),
            Slot::Norm => "output_norm.weight".into(),
            Slot::Output => "output.weight".into(),
            Slot::Layer(i, w) => format!("blk.{i}.{}", w.gguf_name()),
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    fn read(&mut self, name: &str) -> Result<RawWeight> {
        let t = self
            .content
            .tensor(&mut self.file, name, &Device::Cpu)
            .map_err(|e| anyhow!("cannot read tensor '{name}' (file truncated or corrupt?): {}", first_line(&e)))?;
        Ok(RawWeight::Quantized(t))
    }
}
