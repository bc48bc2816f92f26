//! Synthetic models of real shapes (random weights), for speed measurements without the
//! real weights: Qwen2.5-Coder-0.5B and 1.5B in llama.cpp's Q4_K_M layout and in Q8_0.
//! llama.cpp runs the same files. Written by an ignored test:
//!
//! `COPILOTD_SYNTHETIC_DIR=/tmp/synthetic cargo test -p copilotd-model --release --test model -- --ignored --nocapture real_size::`
//!
//! then e.g. `copilotd bench cost-curve --model /tmp/synthetic/qwencoder-1.5b-q4_k_m.gguf`.

use copilotd_model::{LoadOptions, Model};
use copilotd_test_support::synthetic::{self, Family, GgmlDType, Shape, TypeOf};

#[test]
#[ignore = "writes about 3 GB; run by hand for speed measurements"]
fn write_qwen_coder_shapes() {
    let dir = std::env::var_os("COPILOTD_SYNTHETIC_DIR").expect("set COPILOTD_SYNTHETIC_DIR to the output directory");
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let shapes: [(&str, Shape); 2] = [("0.5b", synthetic::QWEN25_CODER_0_5B), ("1.5b", synthetic::QWEN25_CODER_1_5B)];
    for (size, shape) in shapes {
        let q4_k_m = synthetic::q4_k_m(shape.layers, true);
        let q8_0 = |_: &str, _: usize| GgmlDType::Q8_0;
        let layouts: [(&str, TypeOf); 2] = [("q4_k_m", &q4_k_m), ("q8_0", &q8_0)];
        for (layout, type_of) in layouts {
            let label = format!("{size}-{layout}");
            let written = synthetic::write_shaped(&dir, Family::QwenCoder, &shape, &label, type_of, false);
            let model = Model::load(&written.model, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e:#}"));
            let bytes = std::fs::metadata(&written.model).unwrap().len();
            println!("{} ({:.0} MB): {}", written.model.display(), bytes as f64 / 1e6, model.info().weights);
        }
    }
}
