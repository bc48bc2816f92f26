//! Shared helpers of the model tests: finding the real model, greedy argmax.

#![allow(dead_code)] // each test binary uses a subset

pub mod exact;
pub mod names;
pub mod tiny;

use copilotd_model::{Kernel, LoadOptions, Model, WeightFormat, DEFAULT_MODEL_FILE};
use std::path::PathBuf;

/// The real default model: `COPILOTD_MODEL`, else the project's cache directory.
/// Without one, fails under `CI` and otherwise returns `None` (the test skips).
pub fn model_path() -> Option<PathBuf> {
    let candidates = std::env::var_os("COPILOTD_MODEL").map(PathBuf::from).into_iter().chain(cache_path());
    for path in candidates {
        if path.is_file() {
            return Some(path);
        }
    }
    let msg = "no model found: set COPILOTD_MODEL to the GGUF file (or run `copilotd model fetch`)";
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("skipping: {msg}");
    None
}

fn cache_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("copilotd/models").join(DEFAULT_MODEL_FILE))
}

pub fn load(format: WeightFormat) -> Option<Model> {
    load_on(format, None)
}

/// [`load`] on `kernel` (default: the model crate's choice).
pub fn load_on(format: WeightFormat, kernel: Option<Kernel>) -> Option<Model> {
    let path = model_path()?;
    let opts = LoadOptions { threads: None, weights: format, kernel };
    let model = Model::load(&path, &opts).expect("model loads");
    if let Some(kernel) = kernel {
        assert_eq!(model.info().kernel, kernel, "the model runs on the kernel asked for");
    }
    Some(model)
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
