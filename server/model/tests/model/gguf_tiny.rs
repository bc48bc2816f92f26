//! The GGUF reader on tiny Llama and Qwen2 files written from the tiny safetensors
//! checkpoints: both formats must load the same network and tokenizer.

use crate::common;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use common::{exact::Diff, tiny};
use copilotd_model::{LoadOptions, Model, WeightFormat};
use std::path::Path;

/// Converts the checkpoint in `dir` to `out` (GGUF v2, f32 tensors), permuting Llama's
/// q/k rows to llama.cpp's interleaved rotary order as its converter does.
fn write_gguf(dir: &Path, out: &Path, qwen2: bool) {
    let arch = if qwen2 { "qwen2" } else { "llama" };
    let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
    let hd = tiny::HIDDEN / tiny::HEADS;
    let permute = |t: &Tensor, nh: usize| -> Tensor {
        let k = t.dim(1).unwrap();
        t.reshape((nh, 2, hd / 2, k))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape((nh * hd, k))
            .unwrap()
    };
    let mut q: Vec<(String, QTensor)> = Vec::new();
    for (name, t) in &tensors {
        let gguf = common::names::gguf_name(name);
        let t = t.to_dtype(DType::F32).unwrap();
        let t = match (qwen2, gguf.rsplit('.').nth(1)) {
            (false, Some("attn_q")) => permute(&t, tiny::HEADS),
            (false, Some("attn_k")) => permute(&t, tiny::KV_HEADS),
            _ => t,
        };
        q.push((gguf, QTensor::quantize(&t, GgmlDType::F32).unwrap()));
    }
    let tok = tiny::byte_tokenizer();
    let n_tokens = tok.get_vocab_size(true) as u32;
    let tokens: Vec<Value> = (0..n_tokens).map(|i| Value::String(tok.id_to_token(i).unwrap())).collect();
    let types: Vec<Value> = (0..n_tokens).map(|i| Value::I32(if i == 256 { 3 } else { 1 })).collect();
    let key = |k: &str| format!("{arch}.{k}");
    let u = |v: usize| Value::U32(v as u32);
    let md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("tiny-{arch}"))),
        (key("embedding_length"), u(tiny::HIDDEN)),
        (key("feed_forward_length"), u(tiny::INTERMEDIATE)),
        (key("block_count"), u(tiny::LAYERS)),
        (key("attention.head_count"), u(tiny::HEADS)),
        (key("attention.head_count_kv"), u(tiny::KV_HEADS)),
        (key("context_length"), u(tiny::CONTEXT)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (key("rope.freq_base"), Value::F32(10000.0)),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(tokens)),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.merges".into(), Value::Array(vec![])),
        ("tokenizer.ggml.bos_token_id".into(), u(256)),
        ("tokenizer.ggml.eos_token_id".into(), u(256)),
    ];
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = q.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(out).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}

/// Loads both formats and returns the logits differences over a prefill and a tree.
fn compare(qwen2: bool, weights: WeightFormat) -> Diff {
    let dir = tempfile::tempdir().unwrap();
    tiny::write(dir.path(), qwen2, DType::F32);
    let gguf = dir.path().join("tiny.gguf");
    write_gguf(dir.path(), &gguf, qwen2);
    let opts = LoadOptions { threads: None, weights, kernel: None };
    let mut a = Model::load(&gguf, &opts).unwrap();
    let mut b = Model::load(dir.path(), &opts).unwrap();
    assert_eq!(a.info().architecture, b.info().architecture);
    assert_eq!(a.info().name, if qwen2 { "tiny-qwen2" } else { "tiny-llama" });
    assert_eq!(a.info().eos_tokens, b.info().eos_tokens);
    assert_eq!(a.tokenizer().fingerprint(), b.tokenizer().fingerprint());
    let text = "def f(x):\n    return x * 2  # ünïcode\n";
    let ids = a.tokenizer().encode(text).unwrap();
    assert_eq!(ids, b.tokenizer().encode(text).unwrap());
    let mut d = Diff::default();
    d.add(&a.prefill(&ids).unwrap(), &b.prefill(&ids).unwrap());
    let parents = [None, Some(0), Some(0), Some(2)];
    let (la, lb) = (a.forward_tree(&[5, 6, 7, 8], &parents).unwrap(), b.forward_tree(&[5, 6, 7, 8], &parents).unwrap());
    for (x, y) in la.chunks(tiny::VOCAB).zip(lb.chunks(tiny::VOCAB)) {
        d.add(x, y);
    }
    d
}

#[test]
fn qwen2_gguf_equals_its_safetensors_bit_for_bit() {
    for format in [WeightFormat::F32, WeightFormat::Q8_0] {
        let d = compare(true, format);
        assert!(d.exact(), "{format:?}: {d:?}");
    }
}

#[test]
fn llama_gguf_with_permuted_rotary_rows_matches_its_safetensors() {
    // Interleaved vs half-split rotary pairs reorder a few sums: tiny differences only. The
    // KV cache rounds keys and values to half floats, where a last-bit difference can move a
    // value by a whole half-float step (2^-11 of it): up to 2.5e-3 in the logits (aarch64,
    // Cortex-A53), against 1e-4 on x86-64.
    let d = compare(false, WeightFormat::F32);
    println!("tiny llama GGUF vs safetensors: {d:?}");
    assert_eq!(d.argmax_agree, d.rows, "{d:?}");
    assert!(d.max_abs < 1e-2, "{d:?}");
}
