//! Building the repository datastore of a workspace, reusing the persisted
//! store for files whose size and modification time did not change.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result};
use copilotd_draft::repo_store::{FileUpdate, RepositoryStore};

use super::paths::workspace_store_path;
use super::walk::{read_text, walk, Walk, WalkConfig, WalkedFile};
use super::{tokenizer_fingerprint, Tokenize};

/// What an indexing run did.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexSummary {
    /// Files in the store.
    pub files: usize,
    /// Tokens in the store.
    pub tokens: usize,
    pub seconds: f64,
    /// Size of the persisted store (0 when it could not be written).
    pub bytes_on_disk: u64,
    /// Total size of the admitted files.
    pub source_bytes: u64,
    /// Files read and tokenized in this run (the rest came from the persisted store).
    pub tokenized: usize,
    /// Admitted files that could not be used (binary, unreadable, tokenizer error).
    pub skipped: usize,
    /// Something the user should know, e.g. that a damaged store was rebuilt.
    pub warning: Option<String>,
}

impl std::fmt::Display for IndexSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "indexed {} file{}, {} tokens in {:.2} s ({} bytes on disk)",
            self.files,
            if self.files == 1 { "" } else { "s" },
            self.tokens,
            self.seconds,
            self.bytes_on_disk
        )
    }
}

/// Brings the store of the workspace at `root` up to date and saves it to
/// `store_path`: loads the persisted store when it is valid for this
/// tokenizer (a damaged or foreign one is rebuilt with a warning), tokenizes
/// only new files and files whose size or modification time changed, drops
/// files that are gone. `progress(done, total)` counts files.
pub fn index_workspace(
    root: &Path,
    config: &WalkConfig,
    tokenize: &Tokenize,
    store_path: &Path,
    progress: &dyn Fn(usize, usize),
) -> Result<(RepositoryStore, IndexSummary)> {
    let started = Instant::now();
    let (store, mut summary, unsaved) = update_workspace_store(root, config, tokenize, store_path, progress)?;
    if unsaved {
        save_store(&store, store_path)?;
    }
    summary.bytes_on_disk = std::fs::metadata(store_path).map_or(0, |m| m.len());
    summary.seconds = started.elapsed().as_secs_f64();
    Ok((store, summary))
}

/// The store of the workspace at `root`, brought up to date from the one persisted at
/// `store_path` but not saved ([`index_workspace`] saves it), and whether it differs from what
/// is persisted there.
pub fn update_workspace_store(
    root: &Path,
    config: &WalkConfig,
    tokenize: &Tokenize,
    store_path: &Path,
    progress: &dyn Fn(usize, usize),
) -> Result<(RepositoryStore, IndexSummary, bool)> {
    let started = Instant::now();
    let never = AtomicBool::new(false);
    let walked = walk(root, config, None, &never)?;
    let (store, mut summary, changed) = build(&walked, config, tokenize, store_path, progress, &never)?;
    summary.seconds = started.elapsed().as_secs_f64();
    Ok((store, summary, changed || !store_path.exists()))
}

/// Saves a store, creating its directory.
pub fn save_store(store: &RepositoryStore, store_path: &Path) -> Result<()> {
    if let Some(dir) = store_path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    store.save(store_path)
}

/// The store for the `walked` files, starting from the persisted one; also
/// says whether it differs from what is persisted. `seconds` and
/// `bytes_on_disk` of the summary are left for the caller. Once `cancel` is
/// set, no further file is tokenized: the store returned then lacks files and
/// must be thrown away, not saved.
pub(super) fn build(
    walked: &Walk,
    config: &WalkConfig,
    tokenize: &Tokenize,
    store_path: &Path,
    progress: &dyn Fn(usize, usize),
    cancel: &AtomicBool,
) -> Result<(RepositoryStore, IndexSummary, bool)> {
    let fingerprint = tokenizer_fingerprint(tokenize).context("the tokenizer failed on a probe text")?;
    if let Some(cache) = store_path.parent() {
        super::paths::mark_used(cache);
    }
    let mut warnings = Vec::new();
    let mut rebuilt = false;
    let mut store = if store_path.exists() {
        match RepositoryStore::load(store_path, fingerprint) {
            Ok(store) => store,
            Err(err) => {
                rebuilt = true;
                warnings.push(format!("rebuilding the repository datastore: {err:#}"));
                RepositoryStore::with_fingerprint(fingerprint)
            }
        }
    } else {
        RepositoryStore::with_fingerprint(fingerprint)
    };
    if walked.left_out > 0 {
        warnings.push(format!(
            "the workspace holds more than {:.0} MiB of source files: {} of them, the least recently modified, \
             are not indexed (narrow it with `ignore` globs or `languages`)",
            config.max_total_bytes as f64 / f64::from(1 << 20),
            walked.left_out
        ));
    }
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let files = &walked.files;

    let total = files.len();
    let todo: Vec<&WalkedFile> = files.iter().filter(|f| store.stamp(&f.rel) != Some(f.stamp)).collect();
    let reused = total - todo.len();
    progress(reused, total);

    let admitted: HashSet<&str> = files.iter().map(|f| f.rel.as_str()).collect();
    let vanished: Vec<String> = store.files().filter(|p| !admitted.contains(p)).map(str::to_owned).collect();
    for path in &vanished {
        store.remove_file(path);
    }

    let (updates, skipped) =
        tokenize_files(&todo, config.max_file_size, tokenize, &|n| progress(reused + n, total), cancel);
    for path in &skipped {
        store.remove_file(path);
    }
    store.upsert_files(updates);

    let summary = IndexSummary {
        files: store.file_count(),
        tokens: store.token_count(),
        seconds: 0.0,
        bytes_on_disk: 0,
        source_bytes: files.iter().map(|f| f.size).sum(),
        tokenized: todo.len() - skipped.len(),
        skipped: skipped.len(),
        warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
    };
    let changed = !vanished.is_empty() || !todo.is_empty() || rebuilt;
    Ok((store, summary, changed))
}

/// Reads and tokenizes files on all cores. Returns the updates and the paths
/// of files that could not be used; `progress(n)` counts finished files.
/// Stops taking files once `cancel` is set (the files in hand are finished),
/// so the result may then cover only some of `files`.
pub(super) fn tokenize_files(
    files: &[&WalkedFile],
    max_file_size: u64,
    tokenize: &Tokenize,
    progress: &dyn Fn(usize),
    cancel: &AtomicBool,
) -> (Vec<FileUpdate>, Vec<String>) {
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(files.len());
    let (tx, rx) = mpsc::channel();
    let mut updates = Vec::new();
    let mut skipped = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || loop {
                if cancel.load(Ordering::Relaxed) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(file) = files.get(i) else { break };
                let result =
                    read_text(&file.abs, max_file_size).map_err(|e| e.to_string()).and_then(|(text, stamp)| {
                        tokenize(&text).map(|tokens| (tokens, stamp)).map_err(|e| format!("tokenizer failed: {e:#}"))
                    });
                if tx.send((i, result)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (n, (i, result)) in rx.iter().enumerate() {
            let file = files[i];
            match result {
                Ok((tokens, stamp)) => updates.push(FileUpdate { path: file.rel.clone(), tokens, stamp: Some(stamp) }),
                Err(reason) => {
                    tracing::debug!("not indexing {}: {reason}", file.abs.display());
                    skipped.push(file.rel.clone());
                }
            }
            progress(n + 1);
        }
    });
    (updates, skipped)
}

/// `copilotd index [DIR]`: brings the workspace's store (under the cache
/// directory) up to date, with a progress bar on a terminal when
/// `progress_bar` is set. A damaged store is rebuilt with a logged warning.
pub fn run_index(dir: &Path, config: &WalkConfig, tokenize: &Tokenize, progress_bar: bool) -> Result<IndexSummary> {
    let store_path = workspace_store_path(dir)?;
    let result =
        with_indexing_bar(progress_bar, |progress| index_workspace(dir, config, tokenize, &store_path, progress))?;
    let (_, summary) = result.with_context(|| format!("cannot index {}", dir.display()))?;
    Ok(summary)
}

/// `work` run with a progress callback that draws the indexing bar on stderr when `shown` and
/// stderr is a terminal; the bar is cleared when `work` returns.
pub fn with_indexing_bar<T>(shown: bool, work: impl FnOnce(&dyn Fn(usize, usize)) -> T) -> Result<T> {
    let template = "{spinner} indexing [{bar:40}] {pos}/{len} files ({eta})";
    let bar = crate::progress_bar::on_stderr(shown, 0, template)?;
    let result = work(&|done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    Ok(result)
}
