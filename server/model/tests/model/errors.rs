//! Bad model inputs give a one-line error naming the problem, never a panic.

use crate::common;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use copilotd_model::{LoadOptions, Model, NonFiniteLogits, WeightFormat};
use copilotd_test_support::synthetic::{self, Family};
use std::path::Path;

fn load_error(path: &Path) -> String {
    let err = match Model::load(path, &LoadOptions::default()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => format!("{e:#}"),
    };
    assert!(!err.contains('\n'), "not one line: {err}");
    err
}

fn write_gguf(path: &Path, metadata: &[(&str, Value)]) {
    let t = QTensor::quantize(&Tensor::zeros((4, 32), DType::F32, &Device::Cpu).unwrap(), GgmlDType::F32).unwrap();
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md, &[("token_embd.weight", &t)]).unwrap();
}

#[test]
fn missing_file() {
    let err = load_error(Path::new("/nonexistent/model.gguf"));
    assert!(err.contains("model not found: /nonexistent/model.gguf"), "{err}");
    // A path that exists but is neither a file nor a directory (a device) is named as such.
    #[cfg(unix)]
    assert!(load_error(Path::new("/dev/null")).contains("/dev/null is neither a model file"));
}

#[test]
fn file_that_is_not_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    std::fs::write(&path, b"this is not a model, just some text\n").unwrap();
    let err = load_error(&path);
    assert!(err.contains("not a valid GGUF file"), "{err}");
    std::fs::write(&path, b"").unwrap();
    assert!(load_error(&path).contains("not a valid GGUF file"));
}

#[test]
fn unsupported_architecture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt2.gguf");
    write_gguf(&path, &[("general.architecture", Value::String("gpt2".into()))]);
    let err = load_error(&path);
    assert!(err.contains("unsupported model architecture 'gpt2'"), "{err}");
}

#[test]
fn an_alignment_of_zero_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("align0.gguf");
    write_gguf(&path, &[("general.architecture", Value::String("llama".into())), ("general.alignment", Value::U32(0))]);
    let err = load_error(&path);
    assert!(err.contains("not a valid GGUF file") && err.contains("general.alignment is 0"), "{err}");
}

#[test]
fn a_tokenizer_larger_than_the_embedding_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = synthetic::Vocab::of(Family::StarCoder).tokens.len();
    let shape = synthetic::Shape { rows: Some(tokens - 8), ..synthetic::TINY };
    let written = synthetic::write_shaped(dir.path(), Family::StarCoder, &shape, "F32", &|_, _| GgmlDType::F32, false);
    let err = load_error(&written.model);
    let expected = format!("the tokenizer has {tokens} tokens but the model only {} embedding rows", tokens - 8);
    assert!(err.contains(&expected), "{err}");
}

#[test]
fn missing_hyper_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("llama.gguf");
    write_gguf(&path, &[("general.architecture", Value::String("llama".into()))]);
    let err = load_error(&path);
    assert!(err.contains("'llama.embedding_length' is missing"), "{err}");
}

#[test]
fn truncated_real_model() {
    let model = common::model_path();
    let bytes = std::fs::read(&model).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truncated.gguf");
    // Cut inside the metadata (the vocabulary), then inside the tensor data.
    std::fs::write(&path, &bytes[..200_000]).unwrap();
    let err = load_error(&path);
    assert!(err.contains("not a valid GGUF file"), "{err}");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_error(&path);
    assert!(err.contains("cannot read tensor") && err.contains("truncated.gguf"), "{err}");
}

#[test]
fn broken_safetensors_directories() {
    let dir = tempfile::tempdir().unwrap();
    assert!(load_error(dir.path()).contains("no tokenizer.json"));
    common::tiny::write(dir.path(), false, DType::F32);
    let config = dir.path().join("config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("\"llama\"", "\"gpt_neox\"")).unwrap();
    assert!(load_error(dir.path()).contains("unsupported model architecture 'gpt_neox'"));
    std::fs::write(&config, "{ not json").unwrap();
    assert!(load_error(dir.path()).contains("not valid JSON"));
    std::fs::write(&config, text).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), b"garbage").unwrap();
    let err = load_error(dir.path());
    assert!(err.contains("model.safetensors"), "{err}");
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    assert!(load_error(dir.path()).contains("no .safetensors files"));
}

#[test]
fn untied_weights_without_a_head_and_integer_weights_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    common::tiny::write(dir.path(), false, DType::F32);
    let config = dir.path().join("config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("\"tie_word_embeddings\":true", "\"tie_word_embeddings\":false")).unwrap();
    let err = load_error(dir.path());
    assert!(err.contains("tensor 'lm_head.weight' is missing and the embeddings are not tied"), "{err}");
    std::fs::write(&config, text).unwrap();
    let path = dir.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    let up = "model.layers.0.mlp.up_proj.weight";
    tensors.insert(up.into(), tensors[up].to_dtype(DType::U32).unwrap());
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let err = load_error(dir.path());
    assert!(err.contains(&format!("tensor '{up}' has dtype U32; expected a float type")), "{err}");
}

/// A tiny safetensors model (tied, f32) with its tensor `name` replaced by `replace` of it.
fn tiny_model_with(name: &str, replace: impl FnOnce(&Tensor) -> Tensor) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    common::tiny::write(dir.path(), false, DType::F32);
    let path = dir.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    let replaced = replace(&tensors[name]);
    tensors.insert(name.into(), replaced);
    candle_core::safetensors::save(&tensors, &path).unwrap();
    dir
}

#[test]
fn damaged_weights_give_a_typed_error_not_garbage() {
    // One overflowing value, as an f16 conversion leaves it.
    let dir = tiny_model_with("model.layers.1.mlp.down_proj.weight", |down| {
        let mut values = down.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        values[5] = f32::INFINITY;
        Tensor::from_vec(values, down.shape(), &Device::Cpu).unwrap()
    });
    // Converted from floats: refused at load (on aarch64 the pass gave zeros, not NaN).
    for weights in [WeightFormat::F32, WeightFormat::Q8_0] {
        let Err(err) = Model::load(dir.path(), &LoadOptions { weights, ..LoadOptions::default() }) else {
            panic!("{weights:?}: a damaged weight loaded");
        };
        assert!(format!("{err:#}").contains("a weight is not a finite number"), "{weights:?}: {err:#}");
    }
}

#[test]
fn a_pass_whose_logits_overflow_is_an_error() {
    // Finite weights, so the load accepts them, whose products overflow f32.
    let dir = tiny_model_with("model.norm.weight", |norm| (norm.ones_like().unwrap() * 3e38).unwrap());
    let mut model =
        Model::load(dir.path(), &LoadOptions { weights: WeightFormat::F32, ..LoadOptions::default() }).unwrap();
    let err = model.prefill(&[1, 2, 3]).expect_err("overflowing logits were returned");
    assert!(err.downcast_ref::<NonFiniteLogits>().is_some(), "{err:#}");
}

#[test]
fn missing_tensor_is_named() {
    let dir = tempfile::tempdir().unwrap();
    common::tiny::write(dir.path(), true, DType::F32);
    let path = dir.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    tensors.remove("model.layers.1.self_attn.k_proj.bias");
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let err = load_error(dir.path());
    assert!(err.contains("tensor 'model.layers.1.self_attn.k_proj.bias' is missing"), "{err}");
}

/// A synthetic StarCoder-family model (Q4_0) with `patch` applied to its bytes.
fn patched_model(patch: impl FnOnce(&mut Vec<u8>)) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let written = synthetic::write(dir.path(), Family::StarCoder, GgmlDType::Q4_0);
    let mut bytes = std::fs::read(&written.model).unwrap();
    patch(&mut bytes);
    std::fs::write(&written.model, bytes).unwrap();
    (dir, written.model)
}

/// Overwrites the bytes `skip` bytes after the first occurrence of `needle`.
fn overwrite_after(bytes: &mut [u8], needle: &[u8], skip: usize, new: &[u8]) {
    let at = bytes.windows(needle.len()).position(|w| w == needle).expect("needle in file") + needle.len() + skip;
    bytes[at..at + new.len()].copy_from_slice(new);
}

#[test]
fn unsupported_tensor_type_is_named() {
    // A tensor's info: name, u32 dimension count, u64 dimensions, u32 type.
    let (_dir, path) = patched_model(|b| overwrite_after(b, b"blk.0.attn_q.weight", 4 + 16, &20u32.to_le_bytes()));
    let err = load_error(&path);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("unsupported tensor type IQ4_NL (ggml type 20)"), "{err}");
}

#[test]
fn unsupported_architecture_of_a_whole_model_is_named() {
    // A string value: u32 type, u64 length, bytes.
    let (_dir, path) = patched_model(|b| overwrite_after(b, b"general.architecture", 12, b"mamba"));
    let err = load_error(&path);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("unsupported model architecture 'mamba'"), "{err}");
}

#[test]
fn tokenizer_the_loader_cannot_build_is_named() {
    let (_dir, path) = patched_model(|b| overwrite_after(b, b"tokenizer.ggml.model", 12, b"bert"));
    let err = load_error(&path);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("unsupported GGUF tokenizer model 'bert'"), "{err}");
    let (_dir, path) = patched_model(|b| overwrite_after(b, b"tokenizer.ggml.pre", 12, b"qwen3x"));
    let err = load_error(&path);
    assert!(err.contains("unsupported GGUF pre-tokenizer 'qwen3x'"), "{err}");
}

#[test]
fn model_larger_than_memory_is_refused_before_loading() {
    // The embedding declares 2^36 rows of 256 values: 18 TiB as Q8_0.
    let (_dir, path) = patched_model(|b| overwrite_after(b, b"token_embd.weight", 4 + 8, &(1u64 << 36).to_le_bytes()));
    let err = load_error(&path);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("the model needs about") && err.contains("available (MemAvailable"), "{err}");
}
