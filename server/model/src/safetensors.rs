//! Reading a model from a Hugging Face directory: `config.json`, `*.safetensors`,
//! `tokenizer.json`.

use anyhow::{anyhow, bail, Context, Result};
use candle_core::{Device, Tensor};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::config::{Config, Family, RopeStyle};
use crate::loader::{Slot, TensorSource};
use crate::memory::{self, Declared};
use crate::weights::RawWeight;
use crate::WeightFormat;
use candle_core::quantized::GgmlDType;

/// The parsed `config.json` plus the tensors of every safetensors file.
pub(crate) struct SafetensorsDir {
    pub config: Config,
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
    /// `add_bos_token` of `tokenizer_config.json` (false when absent).
    pub adds_bos: bool,
    /// `tie_word_embeddings` (true when absent).
    tied: bool,
    tensors: HashMap<String, Tensor>,
}

impl SafetensorsDir {
    pub fn open(dir: &Path) -> Result<Self> {
        let config_path = dir.join("config.json");
        let text =
            std::fs::read_to_string(&config_path).with_context(|| format!("cannot read {}", config_path.display()))?;
        let json: Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", config_path.display()))?;
        let config = parse_config(&json).with_context(|| format!("unusable {}", config_path.display()))?;
        let files = safetensors_files(dir)?;
        let mut tensors = HashMap::new();
        for file in &files {
            let part = candle_core::safetensors::load(file, &Device::Cpu)
                .map_err(|e| anyhow!("cannot read {}: {}", file.display(), crate::first_line(&e)))?;
            tensors.extend(part);
        }
        Ok(Self {
            config,
            bos: token_ids(json.get("bos_token_id")).first().copied(),
            eos: token_ids(json.get("eos_token_id")),
            adds_bos: adds_bos(dir),
            tied: json.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(true),
            tensors,
        })
    }
}

impl SafetensorsDir {
    /// About how many bytes loading `dir` with weights in `format` takes at its peak: the files
    /// are read whole and held while every weight is converted, from their headers alone.
    pub fn memory_needed(dir: &Path, format: WeightFormat) -> Result<u64> {
        let mut held = 0;
        let mut declared = Vec::new();
        for file in safetensors_files(dir)? {
            held += std::fs::metadata(&file).with_context(|| format!("cannot read {}", file.display()))?.len();
            declared.extend(declared_tensors(&file)?);
        }
        Ok(held + memory::needed(&declared, format))
    }
}

/// Largest safetensors header read for the memory estimate (the format allows 100 MB).
const MAX_HEADER_BYTES: u64 = 100 << 20;

/// The tensors a `.safetensors` file declares in its header: an 8-byte little-endian length,
/// then that much JSON naming each tensor's dtype and shape. Tied embeddings count twice (the
/// output matrix is converted from the embedding).
fn declared_tensors(file: &Path) -> Result<Vec<Declared>> {
    use std::io::Read;
    let unreadable = || format!("cannot read the header of {}", file.display());
    let mut reader = std::fs::File::open(file).with_context(unreadable)?;
    let mut length = [0u8; 8];
    reader.read_exact(&mut length).with_context(unreadable)?;
    let length = u64::from_le_bytes(length);
    if length > MAX_HEADER_BYTES {
        bail!("{} is not a safetensors file (its header would be {length} bytes)", file.display());
    }
    let mut header = vec![0u8; length as usize];
    reader.read_exact(&mut header).with_context(unreadable)?;
    let header: HashMap<String, Value> = serde_json::from_slice(&header).with_context(unreadable)?;
    let declare = |entry: &Value| {
        let shape: Vec<u64> = entry.get("shape")?.as_array()?.iter().map(Value::as_u64).collect::<Option<_>>()?;
        let dtype = match entry.get("dtype")?.as_str()? {
            "F16" => GgmlDType::F16,
            "BF16" => GgmlDType::BF16,
            // Refused later if not a float; counted at four bytes meanwhile.
            _ => GgmlDType::F32,
        };
        Some(Declared { dtype, elements: shape.iter().product(), matrix: shape.len() >= 2 })
    };
    let mut declared: Vec<Declared> =
        header.iter().filter(|(name, _)| *name != "__metadata__").filter_map(|(_, entry)| declare(entry)).collect();
    if !header.contains_key("lm_head.weight") {
        declared.extend(header.get("model.embed_tokens.weight").and_then(declare));
    }
    Ok(declared)
}

fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no .safetensors files in {}", dir.display());
    }
    Ok(files)
}

fn adds_bos(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("tokenizer_config.json")) else { return false };
    let json: Option<Value> = serde_json::from_str(&text).ok();
    json.and_then(|j| j.get("add_bos_token").and_then(Value::as_bool)).unwrap_or(false)
}

/// A token id or a list of them (config.json allows both).
fn token_ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().and_then(|x| u32::try_from(x).ok()).into_iter().collect(),
        Some(Value::Array(items)) => {
            items.iter().filter_map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok())).collect()
        }
        _ => Vec::new(),
    }
}

fn parse_config(json: &Value) -> Result<Config> {
    let arch = json.get("model_type").and_then(Value::as_str).context("config.json has no model_type")?;
    let family = Family::parse(arch)?;
    let num = |key: &str| -> Result<usize> {
        json.get(key)
            .and_then(Value::as_u64)
            .map(|v| v as usize)
            .with_context(|| format!("config.json: '{key}' is missing or not an integer"))
    };
    let float = |key: &str, default: f64| -> f32 { json.get(key).and_then(Value::as_f64).unwrap_or(default) as f32 };
    let hidden = num("hidden_size")?;
    let heads = num("num_attention_heads")?;
    let head_dim = match json.get("head_dim").and_then(Value::as_u64) {
        Some(d) => d as usize,
        None if heads > 0 => hidden / heads,
        None => 0,
    };
    // transformers 5 keeps θ and the scaling in `rope_parameters`; earlier versions keep θ at
    // the top level and the scaling in `rope_scaling`.
    let rope = json.get("rope_parameters").filter(|p| !p.is_null());
    let theta = rope.and_then(|p| p.get("rope_theta")).or_else(|| json.get("rope_theta"));
    let rope_theta = theta.and_then(Value::as_f64).unwrap_or(10_000.0) as f32;
    let rope_scale = rope_scale(rope.or_else(|| json.get("rope_scaling")))?;
    let config = Config {
        family,
        hidden,
        intermediate: num("intermediate_size")?,
        layers: num("num_hidden_layers")?,
        heads,
        kv_heads: num("num_key_value_heads").unwrap_or(heads),
        head_dim,
        vocab_size: num("vocab_size")?,
        context_length: num("max_position_embeddings")?,
        rms_eps: float("rms_norm_eps", 1e-6),
        rope_theta,
        rope_scale,
        rope_factors: Vec::new(),
        rope_style: RopeStyle::Half,
    };
    config.validate()?;
    Ok(config)
}

/// The linear RoPE scaling factor of a `rope_scaling` or `rope_parameters` object (1: none;
/// `"default"` is transformers' name for no scaling).
fn rope_scale(scaling: Option<&Value>) -> Result<f32> {
    let Some(scaling) = scaling.filter(|s| !s.is_null()) else { return Ok(1.0) };
    let kind = scaling.get("rope_type").or_else(|| scaling.get("type")).and_then(Value::as_str).unwrap_or("");
    match kind {
        "default" => Ok(1.0),
        "linear" => Ok(scaling.get("factor").and_then(Value::as_f64).unwrap_or(1.0) as f32),
        _ => bail!("unsupported rope_scaling type '{kind}' (supported: linear)"),
    }
}

impl TensorSource for SafetensorsDir {
    fn name_of(&self, slot: Slot) -> String {
        match slot {
            Slot::Embed => "model.embed_tokens.weight".into(),
            Slot::Norm => "model.norm.weight".into(),
            Slot::Output => "lm_head.weight".into(),
            Slot::Layer(i, w) => format!("model.layers.{i}.{}", w.hf_name()),
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    fn read(&mut self, name: &str) -> Result<RawWeight> {
        let t = self.tensors.get(name).with_context(|| format!("tensor '{name}' is missing"))?;
        if !t.dtype().is_float() {
            bail!("tensor '{name}' has dtype {:?}; expected a float type (F32, F16, BF16)", t.dtype());
        }
        Ok(RawWeight::Dense(t.clone()))
    }

    fn ties_embeddings(&self) -> bool {
        self.tied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `model.safetensors` in `dir`, declaring `tensors` (name, dtype, shape), its data
    /// zeroed.
    fn write(dir: &Path, tensors: &[(&str, &str, &[u64])]) {
        let mut header = serde_json::Map::new();
        let mut offset = 0u64;
        for (name, dtype, shape) in tensors {
            let size = shape.iter().product::<u64>() * if *dtype == "F32" { 4 } else { 2 };
            let entry = serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]});
            header.insert(name.to_string(), entry);
            offset += size;
        }
        header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let json = serde_json::to_vec(&header).unwrap();
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend(json);
        bytes.resize(bytes.len() + offset as usize, 0);
        std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
    }

    #[test]
    fn the_memory_estimate_counts_the_files_held_and_every_converted_weight() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("model.embed_tokens.weight", "BF16", &[1000, 64]), ("model.norm.weight", "F16", &[64])]);
        let file = std::fs::metadata(dir.path().join("model.safetensors")).unwrap().len();
        assert_eq!(declared_tensors(&dir.path().join("model.safetensors")).unwrap().len(), 3, "tied: counted twice");
        // The file, two f32 matrices (embedding and output), an f32 norm, and the conversion's
        // two f32 copies of the largest matrix.
        let expected = file + 2 * 64_000 * 4 + 64 * 4 + 2 * 4 * 64_000;
        assert_eq!(SafetensorsDir::memory_needed(dir.path(), WeightFormat::F32).unwrap(), expected);
        assert!(SafetensorsDir::memory_needed(dir.path(), WeightFormat::Q8_0).unwrap() < expected);
    }

    #[test]
    fn a_header_too_long_is_not_a_safetensors_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.safetensors"), u64::MAX.to_le_bytes()).unwrap();
        let err = SafetensorsDir::memory_needed(dir.path(), WeightFormat::Auto).unwrap_err();
        assert!(err.to_string().contains("is not a safetensors file"), "{err:#}");
    }
}
