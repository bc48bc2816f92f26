//! Shared helpers of the model tests: the real model, greedy argmax.

pub mod exact;
pub mod names;
pub mod tiny;

use copilotd_model::{Kernel, LoadOptions, Model, WeightFormat};
use std::path::PathBuf;

pub use copilotd_test_support::model_path;

pub fn load(format: WeightFormat) -> Model {
    load_on(format, None)
}

/// [`load`] on `kernel` (default: the model crate's choice).
pub fn load_on(format: WeightFormat, kernel: Option<Kernel>) -> Model {
    let opts = LoadOptions { threads: None, weights: format, kernel };
    let model = Model::load(&model_path(), &opts).expect("model loads");
    if let Some(kernel) = kernel {
        assert_eq!(model.info().kernel, kernel, "the model runs on the kernel asked for");
    }
    model
}

pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Real Python source from the standard library on this machine (or a fallback snippet).
pub fn python_source(name: &str) -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"])
        .output();
    if let Ok(out) = out {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if let Ok(text) = std::fs::read_to_string(dir.join(name)) {
            return text;
        }
    }
    panic!("python3 and its standard library ({name}) are needed for this test");
}
