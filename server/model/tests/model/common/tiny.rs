//! Tiny random Llama / Qwen2 checkpoints in Hugging Face layout, for fast tests.

use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::AddedToken;

pub const VOCAB: usize = 260;
pub const HIDDEN: usize = 64;
/// Not a multiple of 256 (nor of 64): exercises input padding of the down projection.
pub const INTERMEDIATE: usize = 96;
pub const LAYERS: usize = 2;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const CONTEXT: usize = 64;

/// Normal draws from a fixed seed (xorshift64*, Box-Muller), so that every run of a test, on
/// every CPU, checks the same checkpoint: a tolerance that one draw in a few exceeds fails
/// every time, not now and then.
fn randn(shape: &[usize], std: f64) -> Tensor {
    thread_local!(static STATE: std::cell::Cell<u64> = const { std::cell::Cell::new(0x9e37_79b9_7f4a_7c15) });
    let uniform = || {
        STATE.with(|state| {
            let mut x = state.get();
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            state.set(x);
            ((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        })
    };
    let len: usize = shape.iter().product();
    let values: Vec<f32> = (0..len)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos() * std) as f32
        })
        .collect();
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}

fn ones_ish(len: usize) -> Tensor {
    (randn(&[len], 0.1) + 1.0).unwrap()
}

/// Writes `config.json`, `model.safetensors` (in `dtype`) and `tokenizer.json` to `dir`.
/// `qwen2` adds q/k/v biases and a separate `lm_head`; the Llama variant ties embeddings.
pub fn write(dir: &Path, qwen2: bool, dtype: DType) {
    let hd = HIDDEN / HEADS;
    let (qd, kvd) = (HIDDEN, KV_HEADS * hd);
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert("model.embed_tokens.weight".into(), randn(&[VOCAB, HIDDEN], 1.0));
    t.insert("model.norm.weight".into(), ones_ish(HIDDEN));
    if qwen2 {
        t.insert("lm_head.weight".into(), randn(&[VOCAB, HIDDEN], 0.2));
    }
    for i in 0..LAYERS {
        let p = format!("model.layers.{i}");
        let mut put = |name: &str, tensor: Tensor| {
            t.insert(format!("{p}.{name}"), tensor);
        };
        put("input_layernorm.weight", ones_ish(HIDDEN));
        put("post_attention_layernorm.weight", ones_ish(HIDDEN));
        put("self_attn.q_proj.weight", randn(&[qd, HIDDEN], 0.3));
        put("self_attn.k_proj.weight", randn(&[kvd, HIDDEN], 0.3));
        put("self_attn.v_proj.weight", randn(&[kvd, HIDDEN], 0.3));
        put("self_attn.o_proj.weight", randn(&[HIDDEN, qd], 0.1));
        put("mlp.gate_proj.weight", randn(&[INTERMEDIATE, HIDDEN], 0.2));
        put("mlp.up_proj.weight", randn(&[INTERMEDIATE, HIDDEN], 0.2));
        put("mlp.down_proj.weight", randn(&[HIDDEN, INTERMEDIATE], 0.1));
        if qwen2 {
            put("self_attn.q_proj.bias", randn(&[qd], 0.5));
            put("self_attn.k_proj.bias", randn(&[kvd], 0.5));
            put("self_attn.v_proj.bias", randn(&[kvd], 0.5));
        }
    }
    let t: HashMap<String, Tensor> = t.into_iter().map(|(k, v)| (k, v.to_dtype(dtype).unwrap())).collect();
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
    let config = serde_json::json!({
        "architectures": [if qwen2 { "Qwen2ForCausalLM" } else { "LlamaForCausalLM" }],
        "model_type": if qwen2 { "qwen2" } else { "llama" },
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": CONTEXT,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": !qwen2,
        "bos_token_id": 256,
        "eos_token_id": [256],
        "torch_dtype": format!("{dtype:?}").to_lowercase(),
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    byte_tokenizer().save(dir.join("tokenizer.json"), false).unwrap();
}

/// A byte-level BPE over the 256 byte symbols, no merges, plus `<|endoftext|>` = 256.
pub fn byte_tokenizer() -> tokenizers::Tokenizer {
    let mut alphabet: Vec<char> = ByteLevel::alphabet().into_iter().collect();
    alphabet.sort();
    let vocab: Vocab = alphabet.iter().enumerate().map(|(i, c)| (c.to_string(), i as u32)).collect();
    let bpe = BPE::builder().vocab_and_merges(vocab, vec![]).build().unwrap();
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tok.with_decoder(Some(ByteLevelDecoder::default()));
    tok.add_special_tokens([AddedToken::from("<|endoftext|>", true)]).unwrap();
    tok
}
