//! A fresh `copilotd complete` starts from the acceptance counts an earlier
//! one learned with the same model (kept under the cache directory).

use copilotd_test_support::model_path;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs one completion with private cache and config directories under `home`.
fn complete(home: &Path) {
    let model = model_path();
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");
    let output = Command::new(env!("CARGO_BIN_EXE_copilotd"))
        .args(["complete", "--workspace", workspace, "--file", "bench_sample.py", "--line", "149", "--column", "44"])
        .args(["--strategy", "pld", "--max-tokens", "32", "--model", model.to_str().unwrap()])
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("COPILOTD_MODEL")
        .output()
        .expect("copilotd runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

fn acceptance_dir(home: &Path) -> PathBuf {
    home.join("cache").join("copilotd").join("acceptance")
}

/// Nodes verified in total according to the one kept counts file.
fn tried_total(home: &Path) -> f64 {
    let files: Vec<_> = std::fs::read_dir(acceptance_dir(home)).expect("counts kept").collect();
    assert_eq!(files.len(), 1, "one file per model");
    let counts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(files[0].as_ref().unwrap().path()).unwrap()).unwrap();
    counts["tried"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).sum()
}

/// Flattens the cost curves measured under `home`: a pass over a tree costs what a one-token
/// pass does, so every draft pays. Where a tree node costs half a pass (AVX2 without VNNI),
/// drafts the counts know nothing of yet do not, and a completion would verify none.
fn make_tree_nodes_free(home: &Path) {
    let dir = home.join("cache").join("copilotd").join("calibration");
    for entry in std::fs::read_dir(dir).expect("a cost curve was measured") {
        let path = entry.unwrap().path();
        let mut stored: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for curve in stored["curves"].as_array_mut().expect("curves by cache length") {
            let points = curve[1].as_array_mut().expect("(nodes, ms) points");
            let one_token = points[0][1].clone();
            for point in points {
                point[1] = one_token.clone();
            }
        }
        std::fs::write(&path, serde_json::to_vec(&stored).unwrap()).unwrap();
    }
}

#[test]
fn a_second_process_continues_the_counts_of_the_first() {
    let home = tempfile::tempdir().unwrap();
    // Measures this machine's cost curve, made flat for the runs that count.
    complete(home.path());
    make_tree_nodes_free(home.path());
    let _ = std::fs::remove_dir_all(acceptance_dir(home.path()));
    complete(home.path());
    let first = tried_total(home.path());
    assert!(first > 0.0, "the first completion verified no draft");
    complete(home.path());
    // From zero, the same completion would count the same nodes again.
    assert!(tried_total(home.path()) > first, "the second process started from zero");
}
