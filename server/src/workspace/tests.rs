//! Tests of walking, indexing and live updates, with a byte-level tokenizer
//! (one token per byte) so that expectations are easy to state.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use copilotd_draft::repo_store::RepositoryStore;
use copilotd_draft::retrieval::QueryOptions;

use super::*;

/// A cancel flag that is never set.
static NEVER: AtomicBool = AtomicBool::new(false);

fn bytes(text: &str) -> Result<Vec<u32>> {
    Ok(text.bytes().map(u32::from).collect())
}

fn write(root: &Path, rel: &str, contents: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
}

fn keys(files: &[WalkedFile]) -> Vec<&str> {
    files.iter().map(|f| f.rel.as_str()).collect()
}

/// Whether the store holds `text` followed by something.
fn knows(store: &RepositoryStore, text: &str) -> bool {
    let context = bytes(text).unwrap();
    let opts = QueryOptions { max_suffix: context.len(), min_suffix: context.len(), ..QueryOptions::default() };
    store.query(&context, &opts).is_some()
}

#[test]
fn a_cancelled_walk_fails_rather_than_miss_files() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.py", b"x = 1\n");
    let err = walk(dir.path(), &WalkConfig::default(), None, &AtomicBool::new(true)).unwrap_err();
    assert!(format!("{err:#}").contains("cancelled"), "{err:#}");
}

#[test]
fn walk_applies_ignore_rules_secrets_languages_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "a.py", b"x = 1\n");
    write(root, "src/b.rs", b"fn main() {}\n");
    write(root, "README.md", b"# hi\n");
    write(root, "logo.png", b"\x89PNG");
    write(root, "Makefile", b"all:\n");
    write(root, ".hidden/c.py", b"x\n");
    write(root, ".env.py", b"SECRET = 1\n");
    write(root, ".gitignore", b"build/\n*.gen.py\n");
    write(root, "build/d.py", b"x\n");
    write(root, "e.gen.py", b"x\n");
    write(root, "sub/.ignore", b"skip.py\n");
    write(root, "sub/skip.py", b"x\n");
    write(root, "sub/keep.py", b"x\n");
    write(root, "vendor/v.py", b"x\n");
    write(root, "big.py", &vec![b'x'; 2000]);
    write(root, "server.pem", b"-----BEGIN\n");
    write(root, "keys/id_rsa.txt", b"key\n");
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("a.py"), root.join("link.py")).unwrap();

    let mut config = WalkConfig::for_languages(&[], &["vendor/".to_owned()]).unwrap().unwrap();
    config.max_file_size = 1000;
    config.extensions.insert("pem".into());
    let walked = walk(root, &config, None, &NEVER).unwrap();
    assert_eq!(keys(&walked.files), ["README.md", "a.py", "src/b.rs", "sub/keep.py"]);
    let file = &walked.files[1];
    assert_eq!(file.abs, root.join("a.py"));
    assert_eq!(file.size, 6);
    assert_eq!(file.stamp.0[0], 6);

    config.exclude_secrets = false;
    let walked = walk(root, &config, None, &NEVER).unwrap();
    assert!(keys(&walked.files).contains(&"server.pem"));
    assert!(keys(&walked.files).contains(&"keys/id_rsa.txt"));

    let python = WalkConfig::for_languages(&["Python".to_owned(), "markdown".to_owned()], &[]).unwrap().unwrap();
    assert_eq!(
        keys(&walk(root, &python, None, &NEVER).unwrap().files),
        ["a.py", "big.py", "sub/keep.py", "vendor/v.py"]
    );
    // Editor languages the walk has no files for leave nothing to index.
    assert!(WalkConfig::for_languages(&["cobol".to_owned(), "sh".to_owned()], &[]).unwrap().is_none());

    // A targeted walk only visits what is on the way to the targets.
    let targeted =
        walk(root, &WalkConfig::default(), Some(&[root.join("sub"), root.join("build/d.py")]), &NEVER).unwrap();
    assert_eq!(keys(&targeted.files), ["sub/keep.py"]);
}

#[test]
fn read_text_rejects_binary_and_oversized_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "nul.py", b"x = 1\0\n");
    write(root, "latin1.py", b"caf\xe9\n");
    write(root, "ok.py", "café\n".as_bytes());
    assert!(matches!(read_text(&root.join("nul.py"), 100), Err(Unreadable::Binary)));
    assert!(matches!(read_text(&root.join("latin1.py"), 100), Err(Unreadable::Binary)));
    assert!(matches!(read_text(&root.join("ok.py"), 3), Err(Unreadable::TooLarge)));
    assert!(matches!(read_text(&root.join("gone.py"), 100), Err(Unreadable::Io(_))));
    let (text, stamp) = read_text(&root.join("ok.py"), 100).unwrap();
    assert_eq!(text, "café\n");
    assert_eq!(stamp.0[0], 6);
}

#[test]
fn relative_keys_are_slash_separated_and_inside_the_root() {
    let root = Path::new("/w");
    assert_eq!(relative_key(root, Path::new("/w/a/b.py")).as_deref(), Some("a/b.py"));
    assert_eq!(relative_key(root, Path::new("/w")), None);
    assert_eq!(relative_key(root, Path::new("/x/a.py")), None);
    assert_eq!(relative_key(root, Path::new("/w/../x.py")), None);
}

#[test]
fn tokenizer_fingerprint_tells_tokenizers_apart() {
    let chars = |text: &str| -> Result<Vec<u32>> { Ok(text.chars().map(u32::from).collect()) };
    assert_eq!(tokenizer_fingerprint(&bytes).unwrap(), tokenizer_fingerprint(&bytes).unwrap());
    assert_ne!(tokenizer_fingerprint(&bytes).unwrap(), tokenizer_fingerprint(&chars).unwrap());
}

#[test]
fn index_reuses_unchanged_files_and_rebuilds_damaged_stores() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    let store_path = dir.path().join("cache/repo.store");
    write(&root, "a.py", b"def alpha_function(): pass\n");
    write(&root, "b.py", b"def beta_function(): pass\n");
    write(&root, "bin.py", b"\0\0\0");
    write(&root, "latin1.py", b"caf\xe9\n");
    let config = WalkConfig::default();
    let calls = Mutex::new(Vec::new());
    let progress = |done, total| calls.lock().unwrap().push((done, total));

    let (store, summary) = index_workspace(&root, &config, &bytes, &store_path, &progress).unwrap();
    assert_eq!(store.files().collect::<Vec<_>>(), ["a.py", "b.py"]);
    assert_eq!((summary.files, summary.tokenized, summary.skipped), (2, 2, 2));
    assert_eq!(summary.tokens, 27 + 26);
    assert_eq!(summary.bytes_on_disk, fs::metadata(&store_path).unwrap().len());
    assert!(summary.warning.is_none());
    assert_eq!(calls.lock().unwrap().last(), Some(&(4, 4)));
    assert!(knows(&store, "alpha_func"));
    assert!(summary.to_string().starts_with("indexed 2 files, 53 tokens in "));

    // Nothing changed: nothing is tokenized again.
    let (_, summary) = index_workspace(&root, &config, &bytes, &store_path, &|_, _| {}).unwrap();
    assert_eq!((summary.files, summary.tokenized), (2, 0));

    // One file changed (size differs), one removed, one added.
    write(&root, "a.py", b"def alpha_renamed(): pass\n");
    fs::remove_file(root.join("b.py")).unwrap();
    write(&root, "c.py", b"def gamma(): pass\n");
    let (store, summary) = index_workspace(&root, &config, &bytes, &store_path, &|_, _| {}).unwrap();
    assert_eq!(store.files().collect::<Vec<_>>(), ["a.py", "c.py"]);
    assert_eq!(summary.tokenized, 2);
    assert!(knows(&store, "alpha_rena") && !knows(&store, "alpha_func") && !knows(&store, "beta_func"));

    // A damaged store is rebuilt with a warning.
    let mut damaged = fs::read(&store_path).unwrap();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    fs::write(&store_path, &damaged).unwrap();
    let (store, summary) = index_workspace(&root, &config, &bytes, &store_path, &|_, _| {}).unwrap();
    assert!(summary.warning.as_deref().unwrap().contains("checksum"), "{:?}", summary.warning);
    assert_eq!((store.file_count(), summary.tokenized), (2, 2));
    assert!(RepositoryStore::load(&store_path, tokenizer_fingerprint(&bytes).unwrap()).is_ok());

    // So is a store made with another tokenizer.
    let chars = |text: &str| -> Result<Vec<u32>> { Ok(text.chars().map(|c| u32::from(c) + 1).collect()) };
    let (_, summary) = index_workspace(&root, &config, &chars, &store_path, &|_, _| {}).unwrap();
    assert!(summary.warning.as_deref().unwrap().contains("another tokenizer"));
    assert_eq!(summary.tokenized, 2);
}

#[test]
fn a_workspace_over_the_size_limit_keeps_its_newest_files_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    let store_path = dir.path().join("cache/repo.store");
    let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for (rel, age) in [("a.py", 3), ("b.py", 0), ("c.py", 2), ("d.py", 1)] {
        write(&root, rel, b"x = 1\n");
        let file = fs::File::options().write(true).open(root.join(rel)).unwrap();
        file.set_modified(old - Duration::from_secs(age * 60)).unwrap();
    }
    // Room for two files and a half.
    let config = WalkConfig { max_total_bytes: 15, ..WalkConfig::default() };

    let walked = walk(&root, &config, None, &NEVER).unwrap();
    assert_eq!((keys(&walked.files), walked.left_out), (vec!["b.py", "d.py"], 2));
    // A walk of chosen targets is not limited: they are what changed.
    let targets = [root.join("a.py"), root.join("c.py")];
    assert_eq!(walk(&root, &config, Some(&targets), &NEVER).unwrap().left_out, 0);

    let (store, summary) = index_workspace(&root, &config, &bytes, &store_path, &|_, _| {}).unwrap();
    assert_eq!(store.files().collect::<Vec<_>>(), ["b.py", "d.py"]);
    let warning = summary.warning.unwrap();
    assert!(warning.contains("2 of them, the least recently modified, are not indexed"), "{warning}");
    // Within the limit, no warning.
    let (_, summary) = index_workspace(&root, &WalkConfig::default(), &bytes, &store_path, &|_, _| {}).unwrap();
    assert_eq!((summary.files, summary.warning), (4, None));
}

#[test]
fn files_swapped_with_the_same_size_and_time_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    let store_path = dir.path().join("repo.store");
    let (alpha, bravo) = ("def alpha(): pass\n", "def bravo(): pass\n");
    write(&root, "a.py", alpha.as_bytes());
    write(&root, "b.py", bravo.as_bytes());
    // One modification time, as files written in one clock tick have.
    let written = std::time::SystemTime::now() - Duration::from_secs(60);
    for name in ["a.py", "b.py"] {
        fs::File::options().write(true).open(root.join(name)).unwrap().set_modified(written).unwrap();
    }
    let config = WalkConfig::default();
    index_workspace(&root, &config, &bytes, &store_path, &|_, _| {}).unwrap();
    fs::rename(root.join("a.py"), root.join("t.py")).unwrap();
    fs::rename(root.join("b.py"), root.join("a.py")).unwrap();
    fs::rename(root.join("t.py"), root.join("b.py")).unwrap();
    let (store, summary) = index_workspace(&root, &config, &bytes, &store_path, &|_, _| {}).unwrap();
    assert_eq!(summary.tokenized, 2);
    assert_eq!(store.file_tokens("a.py"), Some(&bytes(bravo).unwrap()[..]));
    assert_eq!(store.file_tokens("b.py"), Some(&bytes(alpha).unwrap()[..]));
}

#[test]
fn a_failing_tokenizer_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.py", b"x\n");
    let broken = |_: &str| -> Result<Vec<u32>> { anyhow::bail!("no vocabulary") };
    let err = index_workspace(dir.path(), &WalkConfig::default(), &broken, &dir.path().join("s"), &|_, _| {});
    assert!(format!("{:#}", err.unwrap_err()).contains("no vocabulary"));
}

struct Live {
    ws: LiveWorkspace,
    states: Arc<Mutex<Vec<IndexState>>>,
    _dir: tempfile::TempDir,
}

fn start_live(populate: impl FnOnce(&Path)) -> Live {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    fs::create_dir(&root).unwrap();
    populate(&root);
    let states = Arc::new(Mutex::new(Vec::new()));
    let seen = states.clone();
    let ws = LiveWorkspace::start(
        &root,
        WalkConfig::default(),
        Arc::new(bytes),
        dir.path().join("cache/repo.store"),
        Box::new(move |s| seen.lock().unwrap().push(s.clone())),
    )
    .unwrap();
    ws.sync();
    Live { ws, states, _dir: dir }
}

/// Polls until `check` holds for the store, failing after `limit`.
fn eventually(ws: &LiveWorkspace, limit: Duration, what: &str, check: impl Fn(&RepositoryStore) -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if check(&ws.store().read().unwrap()) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn live_workspace_indexes_then_follows_the_disk() {
    let live = start_live(|root| write(root, "pkg/old.py", b"def first_function(): pass\n"));
    let ws = &live.ws;
    let root = ws.root().to_path_buf();
    assert!(matches!(ws.index_state(), IndexState::Ready(ref s) if s.files == 1));
    let states = live.states.lock().unwrap().clone();
    assert!(matches!(states.first(), Some(IndexState::Indexing { .. })));
    assert!(knows(&ws.store().read().unwrap(), "first_func"));

    // Created, in a watched directory and in a new one.
    write(&root, "pkg/new.py", b"def created_on_disk(): pass\n");
    let took = eventually(ws, SECOND, "created file", |s| knows(s, "created_on_d"));
    eprintln!("created file retrievable after {took:?}");
    write(&root, "fresh/dir/deep.py", b"def deep_in_new_dir(): pass\n");
    eventually(ws, SECOND, "file in a new directory", |s| knows(s, "deep_in_new"));

    // Ignored files stay out.
    write(&root, ".gitignore", b"generated/\n");
    write(&root, "generated/out.py", b"def generated_code(): pass\n");
    write(&root, "pkg/.secret.py", b"def hidden_code(): pass\n");
    write(&root, "pkg/data.bin.py", b"def binary(\0): pass\n");
    write(&root, "pkg/marker.py", b"def marker_after_ignored(): pass\n");
    eventually(ws, SECOND, "marker", |s| knows(s, "marker_after"));
    ws.sync();
    {
        let store = ws.store();
        let store = store.read().unwrap();
        assert!(!knows(&store, "generated_co") && !knows(&store, "hidden_code") && !knows(&store, "def binary"));
        assert!(!store.contains("generated/out.py"));
    }

    // Modified, renamed, deleted.
    write(&root, "pkg/old.py", b"def first_changed(): pass\n");
    eventually(ws, SECOND, "modified file", |s| knows(s, "first_chang") && !knows(s, "first_func"));
    fs::rename(root.join("pkg/new.py"), root.join("pkg/moved.py")).unwrap();
    eventually(ws, SECOND, "renamed file", |s| s.contains("pkg/moved.py") && !s.contains("pkg/new.py"));
    assert!(knows(&ws.store().read().unwrap(), "created_on_d"));
    fs::rename(root.join("fresh"), root.join("renamed")).unwrap();
    eventually(ws, SECOND, "renamed directory", |s| {
        s.contains("renamed/dir/deep.py") && !s.contains("fresh/dir/deep.py")
    });
    fs::remove_file(root.join("pkg/moved.py")).unwrap();
    eventually(ws, SECOND, "deleted file", |s| !knows(s, "created_on_d"));
    fs::remove_dir_all(root.join("renamed")).unwrap();
    eventually(ws, SECOND, "deleted directory", |s| !s.contains("renamed/dir/deep.py"));
    // A file in the re-created directory is seen again.
    write(&root, "renamed/dir/again.py", b"def again_here(): pass\n");
    eventually(ws, SECOND, "re-created directory", |s| knows(s, "again_her"));
}

#[test]
fn overlays_replace_and_restore_the_disk_version() {
    let live = start_live(|root| {
        write(root, "a.py", b"def on_disk_version(): pass\n");
        write(root, "ignored.txt.bak", b"x\n");
    });
    let ws = &live.ws;
    let file = ws.root().join("a.py");
    assert!(ws.set_overlay(&file, "def typed_in_buffer(): pass\n"));
    ws.sync();
    {
        let store = ws.store();
        let store = store.read().unwrap();
        assert!(knows(&store, "typed_in_bu") && !knows(&store, "on_disk_ver"));
    }
    // A save of other contents does not override the open buffer.
    write(ws.root(), "a.py", b"def saved_elsewhere(): pass\n");
    std::thread::sleep(Duration::from_millis(300));
    ws.sync();
    assert!(knows(&ws.store().read().unwrap(), "typed_in_bu"));
    assert!(ws.clear_overlay(&file));
    ws.sync();
    {
        let store = ws.store();
        let store = store.read().unwrap();
        assert!(knows(&store, "saved_elsew") && !knows(&store, "typed_in_bu"));
    }
    // Buffers of files the walk does not admit stay out.
    assert!(ws.set_overlay(&ws.root().join("ignored.txt.bak"), "def not_admitted(): pass\n"));
    assert!(ws.set_overlay(&ws.root().join("unsaved.py"), "def not_saved_yet(): pass\n"));
    assert!(!ws.set_overlay(Path::new("/elsewhere/x.py"), "x"));
    ws.sync();
    let store = ws.store();
    let store = store.read().unwrap();
    assert!(!knows(&store, "not_admitt") && !knows(&store, "not_saved_y"));
}

#[test]
fn buffers_too_large_or_binary_stand_aside_for_the_disk_version() {
    let live = start_live(|root| write(root, "a.py", b"def on_disk_version(): pass\n"));
    let ws = &live.ws;
    let file = ws.root().join("a.py");
    let too_large = format!("def too_large_buffer(): pass\n{}", "#\n".repeat(DEFAULT_MAX_FILE_SIZE as usize / 2));
    for buffer in ["def binary_buffer(): '\0'\n", too_large.as_str()] {
        assert!(ws.set_overlay(&file, "def typed_in_buffer(): pass\n"));
        ws.sync();
        assert!(knows(&ws.store().read().unwrap(), "typed_in_bu"));
        assert!(ws.set_overlay(&file, buffer));
        ws.sync();
        let store = ws.store();
        let store = store.read().unwrap();
        assert!(knows(&store, "on_disk_ver"), "{}", &buffer[..20]);
        assert!(!knows(&store, "typed_in_bu") && !knows(&store, "binary_buff") && !knows(&store, "too_large_b"));
    }
}

#[test]
fn a_deleted_workspace_is_dropped_and_picked_up_again() {
    let live = start_live(|root| write(root, "a.py", b"def dropped_now(): pass\n"));
    let ws = &live.ws;
    let root = ws.root().to_path_buf();
    assert!(knows(&ws.store().read().unwrap(), "dropped_no"));
    fs::remove_dir_all(&root).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    ws.sync();
    assert_eq!(ws.store().read().unwrap().file_count(), 0);
    assert!(ws.set_overlay(&root.join("a.py"), "x"));
    ws.sync();

    fs::create_dir(&root).unwrap();
    write(&root, "b.py", b"def came_back(): pass\n");
    eventually(ws, Duration::from_secs(3), "re-created workspace", |s| knows(s, "came_bac") && !s.contains("a.py"));
}

#[test]
fn dropping_the_workspace_saves_its_changes() {
    let live = start_live(|root| write(root, "a.py", b"def before(): pass\n"));
    let root = live.ws.root().to_path_buf();
    write(&root, "b.py", b"def added_live(): pass\n");
    eventually(&live.ws, SECOND, "added file", |s| knows(s, "added_liv"));
    let store_path = live._dir.path().join("cache/repo.store");
    drop(live.ws);
    let saved = RepositoryStore::load(&store_path, tokenizer_fingerprint(&bytes).unwrap()).unwrap();
    assert!(knows(&saved, "added_liv"));
}

#[test]
fn renames_move_tokens_without_tokenizing_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    write(&root, "pkg/a.py", b"def moved_function(): pass\n");
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let tokenize = move |text: &str| {
        counted.fetch_add(1, Ordering::SeqCst);
        bytes(text)
    };
    let ws = LiveWorkspace::start(
        &root,
        WalkConfig::default(),
        Arc::new(tokenize),
        dir.path().join("repo.store"),
        Box::new(|_| {}),
    )
    .unwrap();
    ws.sync();
    let before = calls.load(Ordering::SeqCst);
    fs::rename(ws.root().join("pkg"), ws.root().join("lib")).unwrap();
    eventually(&ws, SECOND, "renamed directory", |s| s.contains("lib/a.py") && !s.contains("pkg/a.py"));
    assert!(knows(&ws.store().read().unwrap(), "moved_func"));
    assert_eq!(calls.load(Ordering::SeqCst), before, "a rename needs no tokenizing");
    // The renamed directory is watched under its new name.
    write(ws.root(), "lib/b.py", b"def after_the_move(): pass\n");
    eventually(&ws, SECOND, "file in the renamed directory", |s| s.contains("lib/b.py") && knows(s, "after_the_m"));
    assert!(!ws.store().read().unwrap().contains("pkg/b.py"));
}

#[test]
fn stopping_interrupts_indexing_and_keeps_the_saved_store() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const FILES: usize = 400;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    let store_path = dir.path().join("repo.store");
    for i in 0..FILES {
        write(&root, &format!("m{i}.py"), format!("def saved_{i}(): pass\n").as_bytes());
    }
    index_workspace(&root, &WalkConfig::default(), &bytes, &store_path, &|_, _| {}).unwrap();
    // Every file changes (another size): indexing has all of them to tokenize again.
    for i in 0..FILES {
        write(&root, &format!("m{i}.py"), format!("def changed_since_{i}(): pass\n").as_bytes());
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let (started, on_start) = std::sync::mpsc::sync_channel(1);
    let counted = calls.clone();
    let slow = move |text: &str| {
        // The first call is the fingerprint's; the next ones are files.
        if counted.fetch_add(1, Ordering::SeqCst) == 2 {
            let _ = started.try_send(());
        }
        std::thread::sleep(Duration::from_millis(5));
        bytes(text)
    };
    let ws = LiveWorkspace::start(&root, WalkConfig::default(), Arc::new(slow), store_path.clone(), Box::new(|_| {}))
        .unwrap();
    on_start.recv().unwrap();
    drop(ws);
    let tokenized = calls.load(Ordering::SeqCst);
    assert!(tokenized < FILES / 2, "{tokenized} of {FILES} files tokenized after the stop");
    let saved = RepositoryStore::load(&store_path, tokenizer_fingerprint(&bytes).unwrap()).unwrap();
    assert_eq!(saved.file_count(), FILES);
    assert!(knows(&saved, "def saved_1") && !knows(&saved, "def changed_s"), "the partial index is not saved");
}

#[test]
fn a_walk_with_many_targets_visits_exactly_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for d in 0..10 {
        for f in 0..300 {
            write(root, &format!("d{d}/f{f}.py"), b"x\n");
        }
    }
    write(root, "deep/er/still/x.py", b"x\n");
    write(root, "deep/other.py", b"x\n");
    write(root, "untouched/u.py", b"x\n");
    // Every third file, one whole directory, a nested directory, and a path that is gone.
    let mut targets: Vec<PathBuf> =
        (0..10).flat_map(|d| (0..300).step_by(3).map(move |f| root.join(format!("d{d}/f{f}.py")))).collect();
    targets.extend([root.join("d7"), root.join("deep/er"), root.join("d1/gone.py")]);
    let walked = walk(root, &WalkConfig::default(), Some(&targets), &NEVER).unwrap();
    let mut expected: Vec<String> = (0..10)
        .flat_map(|d| (0..300).filter(move |f| d == 7 || f % 3 == 0).map(move |f| format!("d{d}/f{f}.py")))
        .collect();
    expected.push("deep/er/still/x.py".to_owned());
    expected.sort();
    let mut found: Vec<String> = walked.files.into_iter().map(|f| f.rel).collect();
    found.sort();
    assert_eq!(found, expected);
    assert!(walked.dirs.contains(&root.join("deep/er/still")) && !walked.dirs.contains(&root.join("untouched")));
}

#[test]
fn thousands_of_files_changed_at_once_are_all_followed() {
    let live = start_live(|root| {
        for i in 0..1000 {
            write(root, &format!("old/o{i}.py"), format!("def old_{i}(): pass\n").as_bytes());
        }
        write(root, "keep/k.py", b"def kept_file(): pass\n");
    });
    let ws = &live.ws;
    let root = ws.root().to_path_buf();
    assert_eq!(ws.store().read().unwrap().file_count(), 1001);
    // Created in a watched directory and in a new one, deleted, renamed: all at once.
    for i in 0..2000 {
        write(&root, &format!("old/n{i}.py"), format!("def new_{i}(): pass\n").as_bytes());
        write(&root, &format!("fresh/f{i}.py"), format!("def fresh_{i}(): pass\n").as_bytes());
    }
    for i in (0..1000).step_by(2) {
        fs::remove_file(root.join(format!("old/o{i}.py"))).unwrap();
    }
    fs::rename(root.join("keep"), root.join("kept")).unwrap();
    let expected: BTreeSet<String> = (0..2000)
        .flat_map(|i| [format!("old/n{i}.py"), format!("fresh/f{i}.py")])
        .chain((1..1000).step_by(2).map(|i| format!("old/o{i}.py")))
        .chain(["kept/k.py".to_owned()])
        .collect();
    eventually(ws, Duration::from_secs(30), "every change applied", |s| {
        s.file_count() == expected.len() && s.files().all(|f| expected.contains(f))
    });
    assert!(knows(&ws.store().read().unwrap(), "def fresh_1999"));
}

#[test]
fn a_directory_replaced_within_one_debounce_is_still_watched() {
    let live = start_live(|root| {
        write(root, "gone/a.py", b"def before_removal(): pass\n");
        write(root, "swap/x/a.py", b"def swapped_x(): pass\n");
        write(root, "swap/y/a.py", b"def swapped_y(): return\n");
    });
    let ws = &live.ws;
    let root = ws.root().to_path_buf();
    // Removed and made again, and two directories swapped, faster than the debounce: the old
    // directories' watches went with them (or with their old names).
    fs::remove_dir_all(root.join("gone")).unwrap();
    write(&root, "gone/a.py", b"def made_again(): pass\n");
    fs::rename(root.join("swap/x"), root.join("swap/t")).unwrap();
    fs::rename(root.join("swap/y"), root.join("swap/x")).unwrap();
    fs::rename(root.join("swap/t"), root.join("swap/y")).unwrap();
    eventually(ws, 5 * SECOND, "the re-made file", |s| knows(s, "made_agai"));
    // Files made later in those directories are seen.
    write(&root, "gone/b.py", b"def later_in_remade(): pass\n");
    write(&root, "swap/x/b.py", b"def later_in_x(): pass\n");
    write(&root, "swap/y/b.py", b"def later_in_y(): pass\n");
    eventually(ws, 5 * SECOND, "files made in the replaced directories", |s| {
        knows(s, "later_in_rem") && knows(s, "later_in_x") && knows(s, "later_in_y")
    });
    let store = ws.store();
    let store = store.read().unwrap();
    assert_eq!(store.file_tokens("swap/x/a.py"), Some(&bytes("def swapped_y(): return\n").unwrap()[..]));
    assert_eq!(store.file_tokens("swap/y/a.py"), Some(&bytes("def swapped_x(): pass\n").unwrap()[..]));
}

#[test]
fn the_limit_of_watched_directories_is_warned_of_once() {
    use crate::lsp::tests::captured_log::CapturedLog;
    let log = CapturedLog::default();
    let mut limit = live::WatchLimit::default();
    tracing::subscriber::with_default(log.subscriber(), || {
        limit.reached(Path::new("/ws"), 120);
        limit.reached(Path::new("/ws"), 3);
    });
    let text = log.text();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(warnings[0].contains("120 directories of /ws are not watched"), "{text}");
}

#[test]
fn directories_changed_while_walked_are_found_by_their_time() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old"), dir.path().join("new"));
    fs::create_dir(&old).unwrap();
    fs::create_dir(&new).unwrap();
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for dir in [&old, &new] {
        fs::File::open(dir).unwrap().set_modified(an_hour_ago).unwrap();
    }
    let walk_started = std::time::SystemTime::now();
    // A file made in `new` after the walk started sets its time.
    write(&new, "made_during_the_walk.py", b"x\n");
    let gone = dir.path().join("gone");
    assert_eq!(live::changed_since(&[old, new.clone(), gone], walk_started), [new]);
}
