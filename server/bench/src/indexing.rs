//! Indexing figures on a real code base (ignored test; prints, never asserts
//! speed). Run with optimisations, e.g.
//! `CARGO_TARGET_DIR=/tmp/opt CARGO_PROFILE_DEV_OPT_LEVEL=3 cargo test -p copilotd-bench --lib indexing -- --ignored --nocapture`.
//! Corpus: `$COPILOTD_INDEX_CORPUS`, default the Python standard library
//! (its `*.py` files are copied to a temporary workspace). The real tokenizer
//! is used when `$COPILOTD_MODEL` names a GGUF file.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{Context, Result};
use copilotd_draft::repo_store::RepositoryStore;

use copilotd_server::workspace::{index_workspace, read_text, walk, Tokenize, WalkConfig};

/// Stand-in for BPE at a similar granularity: one id per identifier, number,
/// run of spaces, or other character.
fn fake_tokenize(text: &str) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        let mut end = start + c.len_utf8();
        let same = |d: char| {
            if c.is_alphanumeric() || c == '_' {
                d.is_alphanumeric() || d == '_'
            } else {
                c == ' ' && d == ' '
            }
        };
        while let Some(&(i, d)) = chars.peek() {
            if !same(d) {
                break;
            }
            end = i + d.len_utf8();
            chars.next();
        }
        let h = copilotd_draft::checksum::of_bytes(&text.as_bytes()[start..end]);
        ids.push((h % 49_152) as u32);
    }
    Ok(ids)
}

fn corpus() -> Result<PathBuf> {
    match std::env::var_os("COPILOTD_INDEX_CORPUS") {
        Some(dir) => Ok(dir.into()),
        None => copilotd_server::common_build::default_corpus(),
    }
}

fn copy_python_files(from: &Path, to: &Path) -> Result<(usize, usize)> {
    let files = copilotd_server::python_files::python_files(from, &[])?;
    let mut lines = 0;
    for path in &files {
        let target = to.join(path.strip_prefix(from)?);
        std::fs::create_dir_all(target.parent().context("no parent")?)?;
        std::fs::copy(path, &target)?;
        lines += std::fs::read(path)?.iter().filter(|&&b| b == b'\n').count();
    }
    Ok((files.len(), lines))
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn measure(name: &str, root: &Path, tokenize: &Tokenize) -> Result<()> {
    let store_path = root.parent().context("no parent")?.join(format!("{name}.store"));
    let config = WalkConfig::default();
    let (store, cold) = index_workspace(root, &config, tokenize, &store_path, &|_, _| {})?;
    let mb = cold.source_bytes as f64 / 1e6;
    println!(
        "[{name}] cold: {cold} — {:.1} MB of source, {:.2} MB/s, store {:.1} MB ({:.2} bytes/token)",
        mb,
        mb / cold.seconds,
        cold.bytes_on_disk as f64 / 1e6,
        cold.bytes_on_disk as f64 / cold.tokens as f64
    );
    let (_, warm) = index_workspace(root, &config, tokenize, &store_path, &|_, _| {})?;
    println!("[{name}] warm (nothing changed): {:.2} s, {} files tokenized", warm.seconds, warm.tokenized);
    let t = Instant::now();
    let loaded = RepositoryStore::load(&store_path, store.fingerprint())?;
    println!("[{name}] load: {:.2} s for {} tokens", t.elapsed().as_secs_f64(), loaded.token_count());

    // One 1,000-line file changes: its text is the first 1,000 lines of the
    // largest file, with a line that differs each round (so every round is a
    // real update, whatever the file holds).
    let files = walk(root, &config, None, &AtomicBool::new(false))?.files;
    let largest = files.iter().max_by_key(|f| f.size).context("empty corpus")?;
    let (text, _) = read_text(&largest.abs, config.max_file_size).map_err(|e| anyhow::anyhow!("{e}"))?;
    let base: String = text.lines().take(1000).map(|l| format!("{l}\n")).collect();
    let mut store = loaded;
    let (mut tokenize_ms, mut update_ms) = (Vec::new(), Vec::new());
    for round in 0..15 {
        let edited = format!("# revision {round}\n{base}");
        let t = Instant::now();
        let tokens = tokenize(&edited)?;
        tokenize_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        store.upsert_file(&largest.rel, tokens);
        update_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "[{name}] 1000-line file ({} tokens) changed: tokenize {:.1} ms, store update {:.2} ms (medians of 15; max update {:.2} ms)",
        store.file_tokens(&largest.rel).map_or(0, |t| t.len()),
        median(tokenize_ms),
        median(update_ms.clone()),
        update_ms.iter().copied().fold(0.0, f64::max)
    );
    Ok(())
}

#[test]
#[ignore = "measurement"]
fn indexing_figures() -> Result<()> {
    let source = corpus()?;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("ws");
    let (files, lines) = copy_python_files(&source, &root)?;
    println!("corpus: {} — {files} .py files, {lines} lines", source.display());
    measure("fake tokenizer", &root, &fake_tokenize)?;
    match std::env::var_os("COPILOTD_MODEL") {
        Some(model) => {
            let tokenizer = copilotd_model::tokenizer_from_gguf(Path::new(&model))?;
            measure("SmolLM2 tokenizer", &root, &move |text: &str| tokenizer.encode(text))?;
        }
        None => println!("COPILOTD_MODEL not set: skipping the real tokenizer"),
    }
    println!("peak RSS {:.0} MB", peak_rss_mb());
    Ok(())
}
