//! Safetensors directories: tiny random Llama and Qwen2 checkpoints (f32/f16/bf16) run
//! exactly like GGUF models, and the default model exported to safetensors computes
//! what the GGUF file computes.

use crate::common;

use candle_core::DType;
use common::{exact, tiny};
use copilotd_model::{LoadOptions, Model, WeightFormat};

fn load(dir: &std::path::Path, weights: WeightFormat) -> Model {
    let opts = LoadOptions { threads: None, weights, kernel: None };
    Model::load(dir, &opts).expect("tiny model loads")
}

fn check_tiny(qwen2: bool, dtype: DType) {
    let dir = tempfile::tempdir().unwrap();
    tiny::write(dir.path(), qwen2, dtype);
    for format in [WeightFormat::Q8_0, WeightFormat::F32, WeightFormat::Native] {
        let mut m = load(dir.path(), format);
        let info = m.info().clone();
        assert_eq!(info.architecture, if qwen2 { "qwen2" } else { "llama" });
        assert_eq!(info.vocab_size, tiny::VOCAB);
        assert_eq!(info.context_length, tiny::CONTEXT);
        assert_eq!(info.bos_token, Some(256));
        assert_eq!(info.eos_tokens, [256]);
        assert_eq!(m.tokenizer().vocab_size(), 257);
        let context: Vec<u32> = m.tokenizer().encode("def tiny(x):\n    return x").unwrap();
        let diffs = exact::check(&mut m, &context, 259);
        println!("{} {dtype:?} {format:?}: {diffs:?}", info.architecture);
        assert!(diffs.iter().all(exact::Diff::exact), "{diffs:?}");
    }
}

#[test]
fn tiny_llama_bf16_tree_passes_are_exact() {
    check_tiny(false, DType::BF16);
}

#[test]
fn tiny_llama_f32_tree_passes_are_exact() {
    check_tiny(false, DType::F32);
}

#[test]
fn tiny_qwen2_f16_tree_passes_are_exact() {
    check_tiny(true, DType::F16);
}

#[test]
fn qwen2_biases_are_applied() {
    let dir = tempfile::tempdir().unwrap();
    tiny::write(dir.path(), true, DType::F32);
    let mut m = load(dir.path(), WeightFormat::F32);
    let with_bias = m.prefill(&[1, 2, 3]).unwrap();
    // Zero the biases: the logits must change.
    let path = dir.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
    for (name, t) in tensors.iter_mut() {
        if name.ends_with(".bias") {
            *t = t.zeros_like().unwrap();
        }
    }
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let mut m = load(dir.path(), WeightFormat::F32);
    let without = m.prefill(&[1, 2, 3]).unwrap();
    assert_ne!(with_bias, without);
}

/// The logits after a few tokens of the tiny Llama in `dir` once its config.json is `edit`ed.
fn logits_with_config(dir: &std::path::Path, edit: impl FnOnce(&mut serde_json::Value)) -> Vec<f32> {
    let path = dir.join("config.json");
    let original = std::fs::read_to_string(&path).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&original).unwrap();
    edit(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    let logits = load(dir, WeightFormat::F32).prefill(&[1, 2, 3, 4, 5, 6]).unwrap();
    std::fs::write(&path, original).unwrap();
    logits
}

#[test]
fn transformers_5_rope_parameters_are_read() {
    let dir = tempfile::tempdir().unwrap();
    tiny::write(dir.path(), false, DType::F32);
    let theta = logits_with_config(dir.path(), |c| c["rope_theta"] = 100_000.0.into());
    let parameters = logits_with_config(dir.path(), |c| {
        c.as_object_mut().unwrap().remove("rope_theta");
        c["rope_parameters"] = serde_json::json!({"rope_type": "default", "rope_theta": 100_000.0});
    });
    assert_eq!(parameters, theta);
    assert_ne!(logits_with_config(dir.path(), |_| {}), theta, "θ changes the logits");
    // transformers' "default" scaling is no scaling, in either place.
    let unscaled = logits_with_config(dir.path(), |_| {});
    let default = logits_with_config(dir.path(), |c| c["rope_scaling"] = serde_json::json!({"rope_type": "default"}));
    assert_eq!(default, unscaled);
    let linear = |c: &mut serde_json::Value| {
        c["rope_parameters"] = serde_json::json!({"rope_type": "linear", "factor": 4.0, "rope_theta": 10_000.0});
    };
    let scaled =
        logits_with_config(dir.path(), |c| c["rope_scaling"] = serde_json::json!({"type": "linear", "factor": 4.0}));
    assert_eq!(logits_with_config(dir.path(), linear), scaled);
}

#[test]
fn a_directory_name_keeps_its_dots() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("Tiny-0.5B-Instruct");
    std::fs::create_dir(&model).unwrap();
    tiny::write(&model, false, DType::F32);
    assert_eq!(load(&model, WeightFormat::F32).info().name, "Tiny-0.5B-Instruct");
}

#[test]
fn context_length_and_vocabulary_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    tiny::write(dir.path(), false, DType::F32);
    let mut m = load(dir.path(), WeightFormat::Q8_0);
    let long = vec![5u32; tiny::CONTEXT + 1];
    let err = m.prefill(&long).unwrap_err().to_string();
    assert!(err.contains("context length"), "{err}");
    assert_eq!(m.cache_len(), 0);
    m.prefill(&long[..tiny::CONTEXT - 1]).unwrap();
    assert!(m.forward_tree(&[1, 2], &[None, Some(0)]).is_err(), "one slot left");
    assert!(m.forward_tree(&[1, 2], &[None, None]).is_ok(), "two roots share a position");
    m.truncate(0);
    let err = m.prefill(&[tiny::VOCAB as u32]).unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
}

#[test]
fn misuse_of_trees_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    tiny::write(dir.path(), false, DType::F32);
    let mut m = load(dir.path(), WeightFormat::Q8_0);
    m.prefill(&[1, 2, 3]).unwrap();
    assert!(m.keep_path(&[0]).is_err(), "no tree pass yet");
    assert!(m.forward_tree(&[], &[]).is_err());
    assert!(m.forward_tree(&[1, 2], &[None]).is_err(), "length mismatch");
    assert!(m.forward_tree(&[1, 2], &[Some(1), None]).is_err(), "parent after child");
    m.forward_tree(&[1, 2, 3], &[None, Some(0), Some(0)]).unwrap();
    assert!(m.keep_path(&[0, 1, 2]).is_err(), "2 is a sibling of 1");
    assert_eq!(m.cache_len(), 3, "a rejected path keeps nothing");
    assert!(m.keep_path(&[0]).is_err(), "the tree was discarded");
    m.forward_tree(&[1, 2, 3], &[None, Some(0), Some(0)]).unwrap();
    m.keep_path(&[0, 2]).unwrap();
    assert_eq!(m.cache_len(), 5);
    m.truncate(10);
    assert_eq!(m.cache_len(), 5, "truncate never grows the cache");
    m.truncate(1);
    assert_eq!(m.cache_len(), 1);
}

/// Writes the default GGUF model as a Hugging Face checkpoint (f32): tensor names mapped,
/// q/k rows un-permuted back to "rotate half" order, config.json from the metadata, the
/// GGUF-built tokenizer saved as tokenizer.json.
fn export_gguf_as_safetensors(gguf: &std::path::Path, dir: &std::path::Path) {
    use candle_core::quantized::gguf_file::{Content, Value};
    use candle_core::{Device, Tensor};
    let mut file = std::fs::File::open(gguf).unwrap();
    let content = Content::read(&mut file).unwrap();
    let md = |k: &str| -> usize {
        match &content.metadata[&format!("llama.{k}")] {
            Value::U32(v) => *v as usize,
            Value::U64(v) => *v as usize,
            other => panic!("{k}: {other:?}"),
        }
    };
    let f32_of = |k: &str| match &content.metadata[&format!("llama.{k}")] {
        Value::F32(v) => *v as f64,
        other => panic!("{k}: {other:?}"),
    };
    let (hidden, heads, kv_heads) = (md("embedding_length"), md("attention.head_count"), md("attention.head_count_kv"));
    let hd = hidden / heads;
    let unpermute = |t: Tensor, nh: usize| -> Tensor {
        let k = t.dim(1).unwrap();
        t.reshape((nh, hd / 2, 2, k))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape((nh * hd, k))
            .unwrap()
    };
    let mut out = std::collections::HashMap::new();
    for name in content.tensor_infos.keys() {
        let t = content.tensor(&mut file, name, &Device::Cpu).unwrap().dequantize(&Device::Cpu).unwrap();
        let hf = common::names::hf_name(name);
        let t = match name.rsplit('.').nth(1) {
            Some("attn_q") => unpermute(t, heads),
            Some("attn_k") => unpermute(t, kv_heads),
            _ => t,
        };
        out.insert(hf, t);
    }
    candle_core::safetensors::save(&out, dir.join("model.safetensors")).unwrap();
    let config = serde_json::json!({
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": md("feed_forward_length"),
        "num_hidden_layers": md("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": 49152,
        "max_position_embeddings": md("context_length"),
        "rms_norm_eps": f32_of("attention.layer_norm_rms_epsilon"),
        "rope_theta": f32_of("rope.freq_base"),
        "tie_word_embeddings": true,
        "bos_token_id": 1,
        "eos_token_id": 2,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let tok = copilotd_model::tokenizer_from_gguf(gguf).unwrap();
    tok.inner().save(dir.join("tokenizer.json"), false).unwrap();
}

#[test]
fn default_model_exported_to_safetensors_computes_the_same_logits() {
    let gguf = common::model_path();
    let dir = tempfile::tempdir().unwrap();
    export_gguf_as_safetensors(&gguf, dir.path());
    let mut from_gguf =
        Model::load(&gguf, &LoadOptions { threads: None, weights: WeightFormat::F32, kernel: None }).unwrap();
    let mut from_st = load(dir.path(), WeightFormat::F32);
    assert_eq!(from_st.tokenizer().fingerprint(), from_gguf.tokenizer().fingerprint());
    let src = common::python_source("textwrap.py");
    let ids = from_gguf.tokenizer().encode(&src).unwrap();
    assert_eq!(from_st.tokenizer().encode(&src).unwrap(), ids, "tokenizer.json tokenizes alike");
    assert_eq!(from_st.info().eos_tokens, [0, 2]);

    let mut diff = exact::Diff::default();
    diff.add(&from_gguf.prefill(&ids[..150]).unwrap(), &from_st.prefill(&ids[..150]).unwrap());
    let tokens = &ids[150..156];
    let parents = [None, Some(0), Some(1), Some(0), Some(3), None];
    let a = from_gguf.forward_tree(tokens, &parents).unwrap();
    let b = from_st.forward_tree(tokens, &parents).unwrap();
    for (x, y) in a.chunks(49152).zip(b.chunks(49152)) {
        diff.add(x, y);
    }
    println!("GGUF (F32) vs its safetensors export (F32): {diff:?}");
    // Only the pairing order of rotary dimensions differs (interleaved vs halves), which
    // reorders a few float sums: tiny differences, same predictions.
    assert_eq!(diff.argmax_agree, diff.rows, "{diff:?}");
    assert!(diff.max_abs < 1e-2, "{diff:?}");
}

#[test]
fn model_and_tokenizer_can_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Model>();
    send_sync::<copilotd_model::Tokenizer>();
}
