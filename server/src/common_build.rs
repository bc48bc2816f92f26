//! `copilotd datastore build-common`: tokenizes a corpus of Python files
//! (by default the standard library of the machine's `python3`) and writes the
//! common datastore (CREST layout, see `copilotd_draft::common_store`).

use anyhow::{bail, Context, Result};
use copilotd_draft::common_store::{CommonParams, CommonStore};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Files larger than this are skipped (generated tables, not code).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Directory names never entered: installed packages are not the standard
/// library, and caches hold no sources.
const SKIPPED_DIRS: [&str; 3] = ["site-packages", "dist-packages", "__pycache__"];

/// Test directories, skipped on request.
const TEST_DIRS: [&str; 3] = ["test", "tests", "idle_test"];

/// What a build did.
#[derive(Clone, Debug, PartialEq)]
pub struct CommonBuildSummary {
    pub files: usize,
    /// Files skipped: unreadable, not UTF-8, too large, or failing to tokenize.
    pub skipped_files: usize,
    pub tokens: usize,
    /// Stored n-grams per n (index 0 is n = 1).
    pub ngrams_per_n: Vec<u64>,
    pub bytes: usize,
    /// Whole build, and the part spent reading and tokenizing files.
    pub seconds: f64,
    pub tokenize_seconds: f64,
    pub path: PathBuf,
}

impl std::fmt::Display for CommonBuildSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept: u64 = self.ngrams_per_n.iter().sum();
        let per_n: Vec<String> = self.ngrams_per_n.iter().enumerate().map(|(i, k)| format!("{}:{k}", i + 1)).collect();
        write!(
            f,
            "common datastore: {} files ({} skipped), {} tokens, {} n-grams kept (by n {}), {:.1} MB, {:.1} s \
             ({:.1} s tokenizing) -> {}",
            self.files,
            self.skipped_files,
            self.tokens,
            kept,
            per_n.join(" "),
            self.bytes as f64 / 1e6,
            self.seconds,
            self.tokenize_seconds,
            self.path.display()
        )
    }
}

/// The standard library directory of the machine's `python3`.
pub fn default_corpus() -> Result<PathBuf> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"])
        .output()
        .context("cannot run python3 to find the standard library; pass --corpus DIR")?;
    if !out.status.success() {
        bail!("python3 could not report its standard library path; pass --corpus DIR");
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !dir.is_dir() {
        bail!("python3 reports {} as its standard library, which is not a directory", dir.display());
    }
    Ok(dir)
}

/// The `.py` files under `dir`, sorted, skipping installed packages, caches,
/// symbolic links and (when `skip_tests`) test directories.
pub fn corpus_files(dir: &Path, skip_tests: bool) -> Result<Vec<PathBuf>> {
    let tests: &[&str] = if skip_tests { &TEST_DIRS } else { &[] };
    crate::python_files::python_files(dir, &[&SKIPPED_DIRS[..], tests].concat())
}

/// The `.py` files of a corpus, tokenized: what a build reads.
pub struct TokenizedCorpus {
    /// One token sequence per usable file, in file order.
    pub sequences: Vec<Vec<u32>>,
    pub files: usize,
    /// Files skipped: unreadable, not UTF-8, too large, or failing to tokenize.
    pub skipped_files: usize,
    pub seconds: f64,
}

/// Reads and tokenizes the `.py` files under `corpus` on all cores.
pub fn tokenize_corpus(
    corpus: &Path,
    tokenize: &(dyn Fn(&str) -> Result<Vec<u32>> + Sync),
    skip_tests: bool,
) -> Result<TokenizedCorpus> {
    let started = Instant::now();
    let files = corpus_files(corpus, skip_tests)?;
    if files.is_empty() {
        bail!("no .py files under {}", corpus.display());
    }
    let sequences = tokenize_all(&files, tokenize);
    let skipped_files = sequences.iter().filter(|s| s.is_none()).count();
    Ok(TokenizedCorpus {
        sequences: sequences.into_iter().flatten().collect(),
        files: files.len() - skipped_files,
        skipped_files,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Builds the common datastore from the `.py` files under `corpus` and writes
/// it atomically to `out`. Files are tokenized on all cores.
pub fn build_common(
    corpus: &Path,
    tokenize: &(dyn Fn(&str) -> Result<Vec<u32>> + Sync),
    fingerprint: u64,
    out: &Path,
    params: CommonParams,
    skip_tests: bool,
) -> Result<CommonBuildSummary> {
    let started = Instant::now();
    let corpus = tokenize_corpus(corpus, tokenize, skip_tests)?;
    write_store(&corpus.sequences, &corpus, fingerprint, out, params, started)
}

/// Builds the store from `sequences` (all of `corpus`, or the part kept of
/// it) and writes it atomically to `out`; `started` is when the build began.
pub fn write_store(
    sequences: &[Vec<u32>],
    corpus: &TokenizedCorpus,
    fingerprint: u64,
    out: &Path,
    params: CommonParams,
    started: Instant,
) -> Result<CommonBuildSummary> {
    let store = CommonStore::build(sequences.iter().map(Vec::as_slice), params, fingerprint)?;
    store.write(out).with_context(|| format!("cannot write the common datastore to {}", out.display()))?;
    Ok(CommonBuildSummary {
        files: corpus.files,
        skipped_files: corpus.skipped_files,
        tokens: sequences.iter().map(Vec::len).sum(),
        ngrams_per_n: store.entries_per_n(),
        bytes: store.size_bytes(),
        seconds: started.elapsed().as_secs_f64(),
        tokenize_seconds: corpus.seconds,
        path: out.to_path_buf(),
    })
}

/// Tokenizes each file (in order) on as many threads as there are cores;
/// `None` for a file that cannot be used.
fn tokenize_all(files: &[PathBuf], tokenize: &(dyn Fn(&str) -> Result<Vec<u32>> + Sync)) -> Vec<Option<Vec<u32>>> {
    let read = |path: &PathBuf| -> Option<Vec<u32>> {
        let meta = std::fs::metadata(path).ok()?;
        if meta.len() > MAX_FILE_BYTES {
            return None;
        }
        let text = std::fs::read_to_string(path).ok()?;
        tokenize(&text).ok()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = files.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> =
            files.chunks(chunk).map(|part| s.spawn(move || part.iter().map(read).collect::<Vec<_>>())).collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use copilotd_draft::common_store::TopT;

    /// A stand-in tokenizer: one token per byte.
    fn bytes(text: &str) -> Result<Vec<u32>> {
        Ok(text.bytes().map(u32::from).collect())
    }

    #[test]
    fn builds_from_python_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("pkg/test")).unwrap();
        std::fs::create_dir_all(root.join("site-packages/other")).unwrap();
        std::fs::write(root.join("a.py"), "def f():\n    return 1\n").unwrap();
        std::fs::write(root.join("pkg/b.py"), "def g():\n    return 2\n").unwrap();
        std::fs::write(root.join("pkg/test/test_b.py"), "assert g() == 2\n").unwrap();
        std::fs::write(root.join("site-packages/other/c.py"), "zzz\n").unwrap();
        std::fs::write(root.join("notes.txt"), "not python").unwrap();
        std::fs::write(root.join("latin1.py"), [0x23u8, 0xE9, 0x0A]).unwrap();

        let out = root.join("out/common.bin");
        let params = CommonParams { top_t: TopT::Unlimited, ..CommonParams::default() };
        let summary = build_common(root, &bytes, 42, &out, params, true).unwrap();
        assert_eq!((summary.files, summary.skipped_files), (2, 1));
        assert_eq!(summary.tokens, 2 * "def f():\n    return 1\n".len());
        assert_eq!(summary.bytes as u64, std::fs::metadata(&out).unwrap().len());
        let store = CommonStore::open(&out, 42).unwrap();
        let context: Vec<u32> = "    ret".bytes().map(u32::from).collect();
        let r = store.query(&context).unwrap();
        assert_eq!(r.continuations[0].tokens, b"urn 1\n".iter().map(|&b| u32::from(b)).collect::<Vec<_>>());
        assert!(store.query(&[u32::from(b'z')]).is_none(), "site-packages must be skipped");

        let with_tests = build_common(root, &bytes, 42, &out, params, false).unwrap();
        assert_eq!(with_tests.files, 3);
        assert!(summary.to_string().contains("2 files (1 skipped)"));
    }

    #[test]
    fn an_empty_corpus_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = build_common(dir.path(), &bytes, 1, &dir.path().join("x.bin"), CommonParams::default(), true);
        assert!(format!("{:#}", err.unwrap_err()).contains("no .py files"));
    }

    /// Builds the store for the real tokenizer from the default corpus and
    /// prints the summary. Run with `COPILOTD_MODEL=... cargo test -p copilotd-server
    /// --lib common_build -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement: tokenizes the whole Python standard library"]
    fn stdlib_with_the_real_tokenizer() {
        let model = std::env::var("COPILOTD_MODEL").expect("set COPILOTD_MODEL to a GGUF file");
        let tokenizer = copilotd_model::Tokenizer::from_file(&model).unwrap();
        let corpus = default_corpus().unwrap();
        let dir = tempfile::tempdir().unwrap();
        for (label, top_t, skip_tests) in
            [("compact", CommonParams::default().top_t, true), ("full", TopT::Unlimited, true)]
        {
            let params = CommonParams { top_t, ..CommonParams::default() };
            let out = dir.path().join(format!("{label}.bin"));
            let s = build_common(&corpus, &|t| tokenizer.encode(t), tokenizer.fingerprint(), &out, params, skip_tests)
                .unwrap();
            eprintln!("{label}: {s}");
        }
    }
}
