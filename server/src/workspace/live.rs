//! Keeping a workspace's repository datastore current while the daemon runs:
//! initial indexing in the background, file-system events (notify, one
//! non-recursive watch per admitted directory, so ignored trees such as
//! `target/` or `node_modules/` cost nothing), and overlays of open editor
//! buffers.
//!
//! One worker thread owns all writes to the shared store. Events and overlay
//! changes are debounced ([`DEBOUNCE`] of quiet, at most [`MAX_DELAY`]) and
//! then reconciled: the affected paths are walked again with the same rules
//! as the initial walk, and the store is made to agree with what was found,
//! comparing stamps (size, modification time) to skip unchanged files. Files
//! are tokenized outside the store's lock; the write lock is held only while
//! the store is updated.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use copilotd_draft::repo_store::{FileUpdate, RepositoryStore};
use notify::event::{ModifyKind, RenameMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use super::index::{build, save_store, tokenize_files, IndexSummary};
use super::walk::{relative_key, unindexable, walk, WalkConfig, WalkedFile};
use super::Tokenize;
use crate::sync::{lock, read, write};

/// The store as shared between the worker (the only writer) and readers.
pub type SharedStore = Arc<RwLock<RepositoryStore>>;

/// A workspace folder's store, with the folder's name: the repository name of prompts with
/// repository-level context.
#[derive(Clone, Debug)]
pub struct Repository {
    pub name: String,
    pub store: SharedStore,
}

impl Repository {
    /// The store of the folder `root`, named after the folder.
    pub fn new(root: &Path, store: SharedStore) -> Self {
        let name = root.file_name().unwrap_or(root.as_os_str()).to_string_lossy().into_owned();
        Repository { name, store }
    }
}

/// Quiet time after the last change before changes are applied.
pub const DEBOUNCE: Duration = Duration::from_millis(100);
/// Longest time a change waits while changes keep coming.
pub const MAX_DELAY: Duration = Duration::from_millis(500);
/// How often a vanished workspace root is checked for.
const ROOT_POLL: Duration = Duration::from_secs(1);

/// Progress of the initial indexing.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexState {
    Indexing { done: usize, total: usize },
    Ready(IndexSummary),
    Failed(String),
}

enum Msg {
    Fs(notify::Result<notify::Event>),
    /// A buffer's text for a store key, or `None` to go back to the disk.
    Overlay(String, Option<String>),
    Sync(mpsc::Sender<()>),
    Stop,
}

/// A workspace whose repository datastore follows the disk and open buffers.
pub struct LiveWorkspace {
    root: PathBuf,
    store: SharedStore,
    state: Arc<Mutex<IndexState>>,
    tx: mpsc::Sender<Msg>,
    cancel: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
    /// The walk's size cap, which buffers meet too.
    max_file_size: u64,
}

impl LiveWorkspace {
    /// Starts watching `root` and indexing it in the background (loading and
    /// updating the store persisted at `store_path`). The store is empty
    /// until indexing ends; `on_state` hears every change of the indexing
    /// state, on the worker thread.
    pub fn start(
        root: &Path,
        config: WalkConfig,
        tokenize: Arc<Tokenize>,
        store_path: PathBuf,
        on_state: Box<dyn Fn(&IndexState) + Send>,
    ) -> Result<Self> {
        let root = root.canonicalize().with_context(|| format!("cannot open workspace {}", root.display()))?;
        if !root.is_dir() {
            bail!("workspace {} is not a directory", root.display());
        }
        let (tx, rx) = mpsc::channel();
        let events = tx.clone();
        let watcher = notify::recommended_watcher(move |event| {
            // The receiver is gone only when the worker has stopped.
            let _ = events.send(Msg::Fs(event));
        })
        .context("cannot start the file watcher")?;
        let store = SharedStore::default();
        let state = Arc::new(Mutex::new(IndexState::Indexing { done: 0, total: 0 }));
        let cancel = Arc::new(AtomicBool::new(false));
        let max_file_size = config.max_file_size;
        let worker = Worker {
            root: root.clone(),
            config,
            tokenize,
            store: store.clone(),
            store_path,
            state: state.clone(),
            on_state,
            cancel: cancel.clone(),
            watcher,
            watched: HashSet::new(),
            watch_limit: WatchLimit::default(),
            overlays: HashSet::new(),
            root_missing: false,
            saved_generation: None,
        };
        let worker = std::thread::Builder::new()
            .name("copilotd-workspace".into())
            .spawn(move || worker.run(rx))
            .context("cannot start the workspace thread")?;
        Ok(Self { root, store, state, tx, cancel, worker: Some(worker), max_file_size })
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The live store, for queries (take the read lock briefly).
    pub fn store(&self) -> SharedStore {
        self.store.clone()
    }

    pub fn index_state(&self) -> IndexState {
        lock(&self.state).clone()
    }

    /// The store key of a file of this workspace (absolute path, possibly
    /// through a symbolic link to the root, possibly not on disk yet).
    pub fn key_for(&self, path: &Path) -> Option<String> {
        relative_key(&self.root, path).or_else(|| relative_key(&self.root, &path.canonicalize().ok()?)).or_else(|| {
            let parent = path.parent()?.canonicalize().ok()?;
            relative_key(&self.root, &parent.join(path.file_name()?))
        })
    }

    /// Makes the store see an open buffer's text instead of the file on disk
    /// (applied after the debounce). Buffers of files that the walk does not
    /// admit (ignored, wrong language, not saved yet) are left out; a buffer
    /// the walk would not read (too large, binary) stands aside for the file
    /// on disk, and is not copied. Returns false when the path is not in this
    /// workspace.
    pub fn set_overlay(&self, path: &Path, text: &str) -> bool {
        let indexable = unindexable(text.as_bytes(), self.max_file_size).is_none();
        self.send_overlay(path, indexable.then_some(text))
    }

    /// Ends an overlay: the store goes back to the file on disk.
    pub fn clear_overlay(&self, path: &Path) -> bool {
        self.send_overlay(path, None)
    }

    fn send_overlay(&self, path: &Path, text: Option<&str>) -> bool {
        match self.key_for(path) {
            Some(key) => self.tx.send(Msg::Overlay(key, text.map(str::to_owned))).is_ok(),
            None => false,
        }
    }

    /// Waits until everything sent before (overlays, and file-system events
    /// already delivered) has been applied, initial indexing included.
    pub fn sync(&self) {
        let (tx, rx) = mpsc::channel();
        if self.tx.send(Msg::Sync(tx)).is_ok() {
            // An error means the worker is gone; nothing is pending then.
            let _ = rx.recv();
        }
    }
}

impl Drop for LiveWorkspace {
    /// Stops the worker (interrupting initial indexing) and saves the store
    /// when it changed.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        let _ = self.tx.send(Msg::Stop);
        if let Some(worker) = self.worker.take() {
            if worker.join().is_err() {
                tracing::error!("the workspace thread panicked");
            }
        }
    }
}

/// Changes waiting for the debounce.
#[derive(Default)]
struct Pending {
    paths: BTreeSet<PathBuf>,
    /// Paths removed or renamed (from or to): the watcher dropped the watch of a directory
    /// there, even when a directory of that name is there again.
    unwatched: BTreeSet<PathBuf>,
    renames: Vec<(PathBuf, PathBuf)>,
    overlays: BTreeMap<String, Option<String>>,
    syncs: Vec<mpsc::Sender<()>>,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Pending {
    fn touch(&mut self) {
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// When the pending changes are due, if any.
    fn due(&self) -> Option<Instant> {
        Some((self.last? + DEBOUNCE).min(self.first? + MAX_DELAY))
    }

    fn add_event(&mut self, root: &Path, event: notify::Event) {
        if matches!(event.kind, EventKind::Access(_)) {
            return;
        }
        if event.need_rescan() {
            self.paths.insert(root.to_path_buf());
        }
        if let (EventKind::Modify(ModifyKind::Name(RenameMode::Both)), [from, to]) = (event.kind, &event.paths[..]) {
            self.renames.push((from.clone(), to.clone()));
        }
        if matches!(event.kind, EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))) {
            self.unwatched.extend(event.paths.iter().cloned());
        }
        for path in event.paths {
            // A changed ignore file changes what its directory admits.
            let is_ignore_file = path.file_name().is_some_and(|n| n == ".gitignore" || n == ".ignore");
            match path.parent() {
                Some(parent) if is_ignore_file => self.paths.insert(parent.to_path_buf()),
                _ => self.paths.insert(path),
            };
        }
        self.touch();
    }
}

struct Worker {
    root: PathBuf,
    config: WalkConfig,
    tokenize: Arc<Tokenize>,
    store: SharedStore,
    store_path: PathBuf,
    state: Arc<Mutex<IndexState>>,
    on_state: Box<dyn Fn(&IndexState) + Send>,
    cancel: Arc<AtomicBool>,
    watcher: RecommendedWatcher,
    watched: HashSet<PathBuf>,
    watch_limit: WatchLimit,
    /// Keys whose store content is an editor buffer.
    overlays: HashSet<String>,
    root_missing: bool,
    /// Store generation last saved (None: never saved by this worker).
    saved_generation: Option<u64>,
}

impl Worker {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let changed_during_walk = self.initial_index();
        let mut pending = Pending::default();
        if !changed_during_walk.is_empty() {
            pending.paths.extend(changed_during_walk);
            pending.touch();
        }
        loop {
            let wait = match pending.due() {
                Some(due) => Some(due.saturating_duration_since(Instant::now())),
                None if self.root_missing => Some(ROOT_POLL),
                None => None,
            };
            let msg = match wait {
                Some(wait) => rx.recv_timeout(wait),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match msg {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(Msg::Fs(Ok(event))) => pending.add_event(&self.root, event),
                Ok(Msg::Fs(Err(err))) => tracing::warn!("file watcher: {err}"),
                Ok(Msg::Overlay(key, text)) => {
                    pending.overlays.insert(key, text);
                    pending.touch();
                }
                Ok(Msg::Sync(done)) => {
                    pending.syncs.push(done);
                    pending.touch();
                    self.flush(&mut pending);
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if self.root_missing && self.root.is_dir() {
                tracing::info!("workspace {} is back; re-indexing it", self.root.display());
                self.root_missing = false;
                self.watched.clear();
                pending.paths.insert(self.root.clone());
                pending.touch();
            }
            if pending.due().is_some_and(|due| due <= Instant::now()) {
                self.flush(&mut pending);
            }
        }
        self.save_if_changed();
    }

    fn set_state(&self, state: IndexState) {
        (self.on_state)(&state);
        *lock(&self.state) = state;
    }

    /// Indexes the whole workspace and watches its directories. Returns the directories whose
    /// entries changed while they were walked and not yet watched: the walk may have missed
    /// files made or removed there, and no event will tell.
    fn initial_index(&mut self) -> Vec<PathBuf> {
        let walk_started = SystemTime::now();
        let mut changed_during_walk = Vec::new();
        let result = walk(&self.root, &self.config, None, &self.cancel).and_then(|walk| {
            self.watch(&walk.dirs);
            changed_during_walk = changed_since(&walk.dirs, walk_started);
            let progress = |done, total| self.set_state(IndexState::Indexing { done, total });
            build(&walk, &self.config, &*self.tokenize, &self.store_path, &progress, &self.cancel)
        });
        // A cancelled build is partial: it is neither saved nor served.
        if self.cancel.load(Ordering::Relaxed) {
            return Vec::new();
        }
        match result {
            Ok((store, mut summary, changed)) => {
                if changed || !self.store_path.exists() {
                    if let Err(err) = save_store(&store, &self.store_path) {
                        tracing::warn!("{err:#}");
                    }
                }
                summary.bytes_on_disk = std::fs::metadata(&self.store_path).map_or(0, |m| m.len());
                self.saved_generation = Some(store.generation());
                *write(&self.store) = store;
                self.set_state(IndexState::Ready(summary));
            }
            Err(err) => {
                tracing::warn!("indexing {} failed: {err:#}", self.root.display());
                self.set_state(IndexState::Failed(format!("{err:#}")));
            }
        }
        changed_during_walk
    }

    fn save_if_changed(&self) {
        let store = read(&self.store);
        if self.saved_generation.is_some_and(|g| g != store.generation()) {
            if let Err(err) = save_store(&store, &self.store_path) {
                tracing::warn!("{err:#}");
            }
        }
    }

    /// Adds a watch to each directory not watched yet; returns those.
    fn watch(&mut self, dirs: &[PathBuf]) -> Vec<PathBuf> {
        let mut added = Vec::new();
        for (i, dir) in dirs.iter().enumerate() {
            // Stopping: the watches would go with the watcher.
            if self.cancel.load(Ordering::Relaxed) {
                break;
            }
            if self.watched.contains(dir) {
                continue;
            }
            match self.watcher.watch(dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.watched.insert(dir.clone());
                    added.push(dir.clone());
                }
                Err(err) if matches!(err.kind, notify::ErrorKind::MaxFilesWatch) => {
                    let unwatched = dirs[i..].iter().filter(|d| !self.watched.contains(*d)).count();
                    self.watch_limit.reached(&self.root, unwatched);
                    break;
                }
                Err(err) => tracing::warn!("cannot watch {}: {err}", dir.display()),
            }
        }
        added
    }

    /// Forgets watches of the directories in or under `gone` (the OS dropped them).
    fn forget_watches_under(&mut self, gone: &HashSet<PathBuf>) {
        let stale: Vec<PathBuf> =
            self.watched.iter().filter(|d| d.ancestors().any(|a| gone.contains(a))).cloned().collect();
        for dir in stale {
            let _ = self.watcher.unwatch(&dir);
            self.watched.remove(&dir);
        }
    }

    /// Applies the pending changes to the store.
    fn flush(&mut self, pending: &mut Pending) {
        let Pending { mut paths, unwatched, renames, overlays, syncs, .. } = std::mem::take(pending);
        if !self.root.is_dir() {
            if !self.root_missing {
                tracing::warn!(
                    "workspace {} vanished; dropped from the index until it comes back",
                    self.root.display()
                );
                self.root_missing = true;
                self.drop_all_files();
            }
        } else {
            let mut buffers = Vec::new();
            for (key, text) in overlays {
                paths.insert(self.root.join(&key));
                match text {
                    Some(text) => {
                        self.overlays.insert(key.clone());
                        buffers.push((key, text));
                    }
                    None => {
                        self.overlays.remove(&key);
                    }
                }
            }
            self.reconcile(paths, unwatched, &renames, buffers);
        }
        for done in syncs {
            let _ = done.send(());
        }
    }

    /// Empties the store (the folder is gone); its watches went with the directories.
    fn drop_all_files(&mut self) {
        self.forget_watches_under(&HashSet::from([self.root.clone()]));
        self.overlays.clear();
        let mut store = write(&self.store);
        let files: Vec<String> = store.files().map(str::to_owned).collect();
        for path in files {
            store.remove_file(&path);
        }
    }

    /// Makes the store agree with the disk (and the buffers) for `paths` and
    /// everything under them. The watches of directories in or under `unwatched` or a path gone
    /// are forgotten first, so that the walk watches what is there now.
    fn reconcile(
        &mut self,
        paths: BTreeSet<PathBuf>,
        unwatched: BTreeSet<PathBuf>,
        renames: &[(PathBuf, PathBuf)],
        buffers: Vec<(String, String)>,
    ) {
        let targets: Vec<PathBuf> =
            if paths.contains(&self.root) { vec![self.root.clone()] } else { paths.into_iter().collect() };
        let gone: HashSet<PathBuf> = targets.iter().filter(|t| !t.exists()).cloned().chain(unwatched).collect();
        if !gone.is_empty() {
            self.forget_watches_under(&gone);
        }
        let found = match self.walk_and_watch(&targets) {
            Ok(found) => found,
            Err(_) if self.cancel.load(Ordering::Relaxed) => return,
            Err(err) => {
                tracing::warn!("cannot walk {}: {err:#}", self.root.display());
                return;
            }
        };
        let keys: HashSet<String> = targets
            .iter()
            .filter_map(|t| if *t == self.root { Some(String::new()) } else { relative_key(&self.root, t) })
            .collect();
        let renamed: HashMap<String, String> = renames
            .iter()
            .filter_map(|(from, to)| Some((relative_key(&self.root, from)?, relative_key(&self.root, to)?)))
            .collect();

        // Buffers are admitted when their file is.
        let mut updates = Vec::new();
        for (key, text) in buffers {
            if !found.contains_key(&key) {
                self.overlays.remove(&key);
                continue;
            }
            match (self.tokenize)(&text) {
                Ok(tokens) => updates.push(FileUpdate { path: key, tokens, stamp: None }),
                Err(err) => tracing::warn!("tokenizer failed on the buffer of {key}: {err:#}"),
            }
        }

        let (moves, stale, todo) = {
            let store = read(&self.store);
            let mut moves = Vec::new();
            let mut moved = HashSet::new();
            if !renamed.is_empty() {
                for path in store.files() {
                    let Some((from, to)) = key_and_parents(path).find_map(|k| renamed.get_key_value(k)) else {
                        continue;
                    };
                    let target = format!("{to}{}", &path[from.len()..]);
                    let same = found.get(&target).is_some_and(|f| store.stamp(path) == Some(f.stamp));
                    if same
                        && !store.contains(&target)
                        && !self.overlays.contains(path)
                        && !self.overlays.contains(&target)
                    {
                        moved.insert(target.clone());
                        moves.push((path.to_owned(), target));
                    }
                }
            }
            let stale: Vec<String> = store
                .files()
                .filter(|p| {
                    key_and_parents(p).any(|k| keys.contains(k))
                        && !found.contains_key(*p)
                        && !self.overlays.contains(*p)
                })
                .map(str::to_owned)
                .collect();
            let todo: Vec<&WalkedFile> = found
                .values()
                .filter(|f| {
                    !self.overlays.contains(&f.rel) && !moved.contains(&f.rel) && store.stamp(&f.rel) != Some(f.stamp)
                })
                .collect();
            (moves, stale, todo)
        };
        let (disk, skipped) = tokenize_files(&todo, self.config.max_file_size, &*self.tokenize, &|_| {}, &self.cancel);
        if self.cancel.load(Ordering::Relaxed) {
            // Stopping: what was not applied is found again from the stamps on the next start.
            return;
        }
        updates.extend(disk);

        let mut store = write(&self.store);
        for (from, to) in &moves {
            store.rename_file(from, to);
        }
        for path in stale.iter().chain(&skipped) {
            store.remove_file(path);
        }
        store.upsert_files(updates);
    }

    /// Walks the targets; newly seen directories get a watch and are walked
    /// once more, so files created before their watch existed are not missed.
    fn walk_and_watch(&mut self, targets: &[PathBuf]) -> Result<HashMap<String, WalkedFile>> {
        let whole = targets.first().is_some_and(|t| *t == self.root);
        let first = walk(&self.root, &self.config, (!whole).then_some(targets), &self.cancel)?;
        let added = self.watch(&first.dirs);
        let mut found: HashMap<String, WalkedFile> = first.files.into_iter().map(|f| (f.rel.clone(), f)).collect();
        if !added.is_empty() {
            let again = walk(&self.root, &self.config, Some(&added), &self.cancel)?;
            found.extend(again.files.into_iter().map(|f| (f.rel.clone(), f)));
        }
        Ok(found)
    }
}

/// A store key, then the keys of the directories holding it, up to the root's (the empty key).
fn key_and_parents(key: &str) -> impl Iterator<Item = &str> {
    std::iter::once(key).chain(key.rmatch_indices('/').map(|(i, _)| &key[..i])).chain((!key.is_empty()).then_some(""))
}

/// How far a directory's modification time may lag behind the change it records: file systems
/// keep times as coarse as 2 s (FAT).
const TIME_GRAIN: Duration = Duration::from_secs(2);

/// The directories of `dirs` whose entries changed since `since` (or as good as: within the
/// file system's time grain), as their modification times say.
pub(super) fn changed_since(dirs: &[PathBuf], since: SystemTime) -> Vec<PathBuf> {
    let since = since - TIME_GRAIN;
    dirs.iter()
        .filter(|dir| std::fs::metadata(dir).and_then(|m| m.modified()).is_ok_and(|modified| modified >= since))
        .cloned()
        .collect()
}

/// The system's limit of watched directories (`fs.inotify.max_user_watches` on Linux), met by
/// a large workspace: warned of once per workspace, not once per directory left unwatched.
#[derive(Debug, Default)]
pub(super) struct WatchLimit {
    warned: bool,
}

impl WatchLimit {
    /// The limit was met with `unwatched` directories still to watch.
    pub(super) fn reached(&mut self, root: &Path, unwatched: usize) {
        if std::mem::replace(&mut self.warned, true) {
            return tracing::debug!("{unwatched} more directories of {} not watched: limit reached", root.display());
        }
        tracing::warn!(
            "the system's limit of watched directories is reached (on Linux: fs.inotify.max_user_watches): {unwatched} \
             directories of {} are not watched, and changes there are indexed at the next start",
            root.display()
        );
    }
}
