//! Tiny synthetic models in the real GGUF layout of the code-model families people run:
//! the architecture, the metadata keys, the tokenizer tables with each family's special
//! tokens and FIM spellings, and weights in any ggml type (encoded by [`super::ggml`]).
//! Random weights (seeded per family), a few layers, a small vocabulary.

use super::ggml;
use candle_core::quantized::gguf_file::{self, Value};
pub use candle_core::quantized::GgmlDType;
use candle_core::quantized::{QStorage, QTensor};
use candle_core::Device;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// Multiples of the K-quant super-block (256) where the rows need it.
pub const HIDDEN: usize = 256;
pub const INTERMEDIATE: usize = 512;
pub const LAYERS: usize = 2;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const CONTEXT: usize = 256;

/// The families of code models, by the tokenizer and special tokens they ship.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Qwen2.5-Coder: `qwen2` architecture (q/k/v biases), GPT-2 BPE with the `qwen2`
    /// pre-tokenizer, `<|fim_prefix|>`-style FIM and repository tokens, padded embedding.
    QwenCoder,
    /// StarCoder / SmolLM: `llama` architecture, GPT-2 BPE (`smollm` pre-tokenizer), the
    /// special tokens first in the vocabulary, `<fim_prefix>`-style FIM.
    StarCoder,
    /// DeepSeek-Coder: `llama` architecture, GPT-2 BPE (`deepseek-coder` pre-tokenizer),
    /// `<｜fim▁begin｜>`-style FIM, BOS added.
    DeepSeekCoder,
    /// CodeLlama: `llama` architecture, SentencePiece (`llama`) vocabulary with scores and
    /// byte-fallback tokens, `▁<PRE>`-style FIM, BOS added.
    CodeLlama,
}

impl Family {
    pub const ALL: [Family; 4] = [Family::QwenCoder, Family::StarCoder, Family::DeepSeekCoder, Family::CodeLlama];

    pub fn architecture(self) -> &'static str {
        match self {
            Family::QwenCoder => "qwen2",
            _ => "llama",
        }
    }

    fn seed(self) -> u64 {
        self as u64 + 1
    }
}

/// A tokenizer table as GGUF stores it.
pub struct Vocab {
    pub model: &'static str,
    pub pre: Option<&'static str>,
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub scores: Option<Vec<f32>>,
    pub merges: Option<Vec<String>>,
    pub bos: u32,
    pub eos: u32,
    pub add_bos: bool,
}

pub const NORMAL: i32 = 1;
pub const UNKNOWN: i32 = 2;
pub const CONTROL: i32 = 3;
pub const USER_DEFINED: i32 = 4;
pub const BYTE: i32 = 6;

impl Vocab {
    pub fn id(&self, token: &str) -> u32 {
        self.tokens.iter().position(|t| t == token).unwrap_or_else(|| panic!("{token} not in the vocabulary")) as u32
    }

    /// The vocabulary of `family`.
    pub fn of(family: Family) -> Vocab {
        match family {
            Family::QwenCoder => {
                let specials = [
                    "<|endoftext|>",
                    "<|im_start|>",
                    "<|im_end|>",
                    "<|fim_prefix|>",
                    "<|fim_middle|>",
                    "<|fim_suffix|>",
                    "<|fim_pad|>",
                    "<|repo_name|>",
                    "<|file_sep|>",
                ];
                let mut v = byte_level(&[], &specials, "qwen2");
                v.bos = v.id("<|endoftext|>");
                v.eos = v.bos;
                v
            }
            Family::StarCoder => {
                let specials = [
                    "<|endoftext|>",
                    "<fim_prefix>",
                    "<fim_middle>",
                    "<fim_suffix>",
                    "<fim_pad>",
                    "<repo_name>",
                    "<file_sep>",
                ];
                let mut v = byte_level(&specials, &[], "smollm");
                v.bos = v.id("<|endoftext|>");
                v.eos = v.bos;
                v
            }
            Family::DeepSeekCoder => {
                let specials = [
                    "<｜begin▁of▁sentence｜>",
                    "<｜end▁of▁sentence｜>",
                    "<｜fim▁hole｜>",
                    "<｜fim▁begin｜>",
                    "<｜fim▁end｜>",
                    "<|EOT|>",
                ];
                let mut v = byte_level(&[], &specials, "deepseek-coder");
                v.bos = v.id("<｜begin▁of▁sentence｜>");
                v.eos = v.id("<｜end▁of▁sentence｜>");
                v.add_bos = true;
                // Its FIM and EOT tokens are user-defined there, not control tokens.
                for t in ["<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<|EOT|>"] {
                    let id = v.id(t) as usize;
                    v.types[id] = USER_DEFINED;
                }
                v
            }
            Family::CodeLlama => sentencepiece(SPM_PIECES, &["▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"]),
        }
    }

    pub fn metadata(&self) -> Vec<(String, Value)> {
        let strings = |v: &[String]| Value::Array(v.iter().map(|s| Value::String(s.clone())).collect());
        let mut md = vec![
            ("tokenizer.ggml.model".to_string(), Value::String(self.model.into())),
            ("tokenizer.ggml.tokens".into(), strings(&self.tokens)),
            ("tokenizer.ggml.token_type".into(), Value::Array(self.types.iter().map(|&t| Value::I32(t)).collect())),
            ("tokenizer.ggml.bos_token_id".into(), Value::U32(self.bos)),
            ("tokenizer.ggml.eos_token_id".into(), Value::U32(self.eos)),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(self.add_bos)),
        ];
        if let Some(pre) = self.pre {
            md.push(("tokenizer.ggml.pre".into(), Value::String(pre.into())));
        }
        if let Some(merges) = &self.merges {
            md.push(("tokenizer.ggml.merges".into(), strings(merges)));
        }
        if let Some(scores) = &self.scores {
            md.push(("tokenizer.ggml.scores".into(), Value::Array(scores.iter().map(|&s| Value::F32(s)).collect())));
        }
        md
    }
}

/// GPT-2 byte-level BPE: `lead` specials, the 256 byte symbols, a few merges of common
/// code fragments, then `tail` specials.
fn byte_level(lead: &[&str], tail: &[&str], pre: &'static str) -> Vocab {
    let mut alphabet: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet().into_iter().collect();
    alphabet.sort();
    let mut tokens: Vec<String> = lead.iter().map(|s| s.to_string()).collect();
    tokens.extend(alphabet.iter().map(char::to_string));
    let merges: Vec<String> =
        ["d e", "de f", "Ġ de", "Ġde f", "r e", "re t", "u r", "ur n", "ret urn", "Ġ ret", "Ġret urn", "Ġ Ġ", "ĠĠ ĠĠ"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    tokens.extend(merges.iter().map(|m| m.replace(' ', "")));
    let mut types = vec![CONTROL; lead.len()];
    types.resize(tokens.len(), NORMAL);
    tokens.extend(tail.iter().map(|s| s.to_string()));
    types.resize(tokens.len(), CONTROL);
    Vocab {
        model: "gpt2",
        pre: Some(pre),
        tokens,
        types,
        scores: None,
        merges: Some(merges),
        bos: 0,
        eos: 0,
        add_bos: false,
    }
}

/// Pieces of the synthetic SentencePiece vocabulary and their scores (higher merges
/// first): single characters, then a few words of code. Bytes outside it fall back to
/// `<0xXX>` tokens.
pub const SPM_PIECES: &[(&str, f32)] = &[
    ("▁▁", -1.0),
    ("▁▁▁▁", -2.0),
    ("re", -3.0),
    ("▁d", -4.0),
    ("ef", -5.0),
    ("▁def", -6.0),
    ("ur", -7.0),
    ("urn", -8.0),
    ("▁re", -9.0),
    ("▁ret", -10.0),
    ("▁return", -11.0),
    ("▁x", -12.0),
    ("):", -13.0),
    ("▁", -100.0),
    ("d", -101.0),
    ("e", -102.0),
    ("f", -103.0),
    ("r", -104.0),
    ("t", -105.0),
    ("u", -106.0),
    ("n", -107.0),
    ("x", -108.0),
    ("(", -109.0),
    (")", -110.0),
    (":", -111.0),
    ("*", -112.0),
    ("2", -113.0),
    ("a", -114.0),
    ("b", -115.0),
    ("c", -116.0),
];

/// A llama SentencePiece table: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, `pieces`,
/// then `controls` (e.g. CodeLlama's FIM tokens, which follow the pieces there too).
pub fn sentencepiece(pieces: &[(&str, f32)], controls: &[&str]) -> Vocab {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![UNKNOWN, CONTROL, CONTROL];
    let mut scores = vec![0.0; 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(BYTE);
        scores.push(0.0);
    }
    for (piece, score) in pieces {
        tokens.push(piece.to_string());
        types.push(NORMAL);
        scores.push(*score);
    }
    for c in controls {
        tokens.push(c.to_string());
        types.push(CONTROL);
        scores.push(0.0);
    }
    Vocab {
        model: "llama",
        pre: None,
        tokens,
        types,
        scores: Some(scores),
        merges: None,
        bos: 1,
        eos: 2,
        add_bos: true,
    }
}

/// Deterministic normal samples (xorshift64* and Box-Muller).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (bits as f32 + 0.5) / (1u64 << 24) as f32
    }

    pub fn normal(&mut self, std: f32) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        std * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }

    pub fn vec(&mut self, len: usize, mean: f32, std: f32) -> Vec<f32> {
        (0..len).map(|_| mean + self.normal(std)).collect()
    }
}

/// One synthetic model: weights stored as the chosen types, and (for the tiny shape) the
/// reference with the values those weights decode to stored as F32.
pub struct Written {
    pub model: PathBuf,
    pub reference: PathBuf,
    pub vocab: Vocab,
}

/// The network's shape.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub context: usize,
    /// Embedding rows; `None`: the vocabulary's size (Qwen: rounded up to 64, as Qwen pads).
    /// Tokens up to this many are added as `[PADn]` entries, as in Qwen's files.
    pub rows: Option<usize>,
    /// The head reuses the embedding (no `output.weight`); `None`: Llama families tie,
    /// Qwen does not.
    pub tied: Option<bool>,
}

/// The tiny shape of the tests: the rows of every matrix are multiples of the K-quant
/// super-block (256).
pub const TINY: Shape = Shape {
    hidden: HIDDEN,
    intermediate: INTERMEDIATE,
    layers: LAYERS,
    heads: HEADS,
    kv_heads: KV_HEADS,
    context: CONTEXT,
    rows: None,
    tied: None,
};

/// Qwen2.5-Coder-0.5B's shape (rows of 896 values: no multiple of 256).
pub const QWEN25_CODER_0_5B: Shape = Shape {
    hidden: 896,
    intermediate: 4864,
    layers: 24,
    heads: 14,
    kv_heads: 2,
    context: 32768,
    rows: Some(151_936),
    tied: Some(true),
};

/// Qwen2.5-Coder-1.5B's shape.
pub const QWEN25_CODER_1_5B: Shape = Shape {
    hidden: 1536,
    intermediate: 8960,
    layers: 28,
    heads: 12,
    kv_heads: 2,
    context: 32768,
    rows: Some(151_936),
    tied: Some(true),
};

/// The tensor type of each matrix, by tensor name and row length.
pub type TypeOf<'a> = &'a dyn Fn(&str, usize) -> GgmlDType;

/// The tensor types of llama.cpp's Q4_K_M for a model of `layers` layers, by tensor name and
/// row length: Q6_K for the output (the embedding when tied) and for the v and down
/// projections of the layers that get more bits, Q4_K elsewhere; rows that are no multiple
/// of 256 fall back to Q5_0 (for Q4_K) and Q8_0 (for Q6_K).
pub fn q4_k_m(layers: usize, tied: bool) -> impl Fn(&str, usize) -> GgmlDType {
    move |name: &str, row: usize| {
        let more_bits = |i: usize| i < layers / 8 || i >= 7 * layers / 8 || (i - layers / 8) % 3 == 2;
        let layer = name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|i| i.parse().ok());
        let six = name == "output.weight"
            || (tied && name == "token_embd.weight")
            || ((name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight")) && layer.is_some_and(more_bits));
        match (six, row.is_multiple_of(ggml::QK_K)) {
            (true, true) => GgmlDType::Q6K,
            (true, false) => GgmlDType::Q8_0,
            (false, true) => GgmlDType::Q4K,
            (false, false) => GgmlDType::Q5_0,
        }
    }
}

/// Writes `family` with every weight matrix (embedding and output included) stored as
/// `dtype`, norms and biases as F32 (as llama.cpp stores them), to `dir`.
pub fn write(dir: &Path, family: Family, dtype: GgmlDType) -> Written {
    write_mixed(dir, family, &format!("{dtype:?}"), &|_, _| dtype)
}

/// [`write`] with a type per matrix, chosen by `type_of(tensor name, row length)`.
pub fn write_mixed(dir: &Path, family: Family, label: &str, type_of: TypeOf) -> Written {
    write_shaped(dir, family, &TINY, label, type_of, true)
}

/// Writes `family` in `shape` to `dir`, and the F32 reference when `reference` (both held
/// in memory while writing: for small shapes only).
pub fn write_shaped(
    dir: &Path,
    family: Family,
    shape: &Shape,
    label: &str,
    type_of: TypeOf,
    reference: bool,
) -> Written {
    let mut vocab = Vocab::of(family);
    let rows = shape.rows.unwrap_or(match family {
        Family::QwenCoder => vocab.tokens.len().next_multiple_of(64),
        _ => vocab.tokens.len(),
    });
    if shape.rows.is_some() {
        for i in vocab.tokens.len()..rows {
            vocab.tokens.push(format!("[PAD{i}]"));
            vocab.types.push(NORMAL);
            if let Some(scores) = &mut vocab.scores {
                scores.push(-1e9);
            }
        }
    }
    let tied = shape.tied.unwrap_or(family != Family::QwenCoder);
    let Shape { hidden, intermediate, .. } = *shape;
    let arch = family.architecture();
    let hd = hidden / shape.heads;
    let (qd, kvd) = (shape.heads * hd, shape.kv_heads * hd);
    let mut rng = Rng::new(family.seed());
    let mut stored = Vec::new();
    let mut decoded_f32 = Vec::new();
    let mut matrix = |name: String, n: usize, k: usize, std: f32, rng: &mut Rng| {
        let dtype = type_of(&name, k);
        let (bytes, decoded) = ggml::encode(dtype, &rng.vec(n * k, 0.0, std));
        stored.push((name.clone(), tensor(bytes, dtype, &[n, k])));
        if reference {
            decoded_f32.push((name, tensor(ggml::encode(GgmlDType::F32, &decoded).0, GgmlDType::F32, &[n, k])));
        }
    };
    let mut vectors: Vec<(String, Vec<f32>)> = Vec::new();
    matrix("token_embd.weight".into(), rows, hidden, 1.0, &mut rng);
    if !tied {
        matrix("output.weight".into(), rows, hidden, 0.08, &mut rng);
    }
    for i in 0..shape.layers {
        let p = format!("blk.{i}");
        matrix(format!("{p}.attn_q.weight"), qd, hidden, 0.08, &mut rng);
        matrix(format!("{p}.attn_k.weight"), kvd, hidden, 0.08, &mut rng);
        matrix(format!("{p}.attn_v.weight"), kvd, hidden, 0.08, &mut rng);
        matrix(format!("{p}.attn_output.weight"), hidden, qd, 0.06, &mut rng);
        matrix(format!("{p}.ffn_gate.weight"), intermediate, hidden, 0.08, &mut rng);
        matrix(format!("{p}.ffn_up.weight"), intermediate, hidden, 0.08, &mut rng);
        matrix(format!("{p}.ffn_down.weight"), hidden, intermediate, 0.05, &mut rng);
        vectors.push((format!("{p}.attn_norm.weight"), rng.vec(hidden, 1.0, 0.1)));
        vectors.push((format!("{p}.ffn_norm.weight"), rng.vec(hidden, 1.0, 0.1)));
        if family == Family::QwenCoder {
            vectors.push((format!("{p}.attn_q.bias"), rng.vec(qd, 0.0, 0.3)));
            vectors.push((format!("{p}.attn_k.bias"), rng.vec(kvd, 0.0, 0.3)));
            vectors.push((format!("{p}.attn_v.bias"), rng.vec(kvd, 0.0, 0.3)));
        }
    }
    vectors.push(("output_norm.weight".into(), rng.vec(hidden, 1.0, 0.1)));
    for (name, values) in &vectors {
        let f32_tensor = || tensor(ggml::encode(GgmlDType::F32, values).0, GgmlDType::F32, &[values.len()]);
        stored.push((name.clone(), f32_tensor()));
        if reference {
            decoded_f32.push((name.clone(), f32_tensor()));
        }
    }

    let key = |k: &str| format!("{arch}.{k}");
    let u = |v: usize| Value::U32(v as u32);
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("synthetic {family:?} {label}"))),
        (key("context_length"), u(shape.context)),
        (key("embedding_length"), u(hidden)),
        (key("feed_forward_length"), u(intermediate)),
        (key("block_count"), u(shape.layers)),
        (key("attention.head_count"), u(shape.heads)),
        (key("attention.head_count_kv"), u(shape.kv_heads)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (key("rope.freq_base"), Value::F32(if family == Family::QwenCoder { 1_000_000.0 } else { 10_000.0 })),
    ];
    md.extend(vocab.metadata());
    let stem = format!("{family:?}-{label}").to_lowercase();
    let model = dir.join(format!("{stem}.gguf"));
    let reference_path = dir.join(format!("{stem}-f32-reference.gguf"));
    write_gguf(&model, &md, &stored);
    if reference {
        write_gguf(&reference_path, &md, &decoded_f32);
    }
    Written { model, reference: reference_path, vocab }
}

pub fn tensor(bytes: Vec<u8>, dtype: GgmlDType, shape: &[usize]) -> QTensor {
    let storage = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, dtype).unwrap();
    QTensor::new(storage, shape).unwrap()
}

pub fn write_gguf(path: &Path, metadata: &[(String, Value)], tensors: &[(String, QTensor)]) {
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md, &ts).unwrap();
}
