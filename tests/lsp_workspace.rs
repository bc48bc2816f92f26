//! The live workspace behind the language server, with the real model's tokenizer: background
//! indexing with `$/progress`, files created, changed, renamed and deleted on disk reaching the
//! repository datastore within a second, open buffers as overlays, hostile files (binary,
//! non-UTF-8, ignored), every folder of a multi-root workspace (added and removed ones too),
//! and a workspace directory deleted under the watcher.

mod support;

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use copilotd_bench::lsp::client::{workspace_folder, StdioClient};
use serde_json::{json, Value};
use support::*;

static MODEL: Mutex<()> = Mutex::new(());

const MODULES: usize = 40;

fn module(n: usize) -> String {
    format!(
        "\"\"\"Module {n}.\"\"\"\n\n\ndef handler_{n}(request, retries={n}):\n    for attempt in range(retries):\n        \
         response = request.send(timeout=attempt + {n})\n        if response.ok:\n            return response\n    \
         return None\n"
    )
}

fn populate(root: &Path) {
    for n in 0..MODULES {
        std::fs::write(root.join(format!("mod_{n}.py")), module(n)).unwrap();
    }
    std::fs::write(root.join("blob.py"), b"\x7fELF\x00\x00\x01binary\x00data").unwrap();
    std::fs::write(root.join("latin1.py"), b"name = 'caf\xe9'\n").unwrap();
    std::fs::write(root.join("random.bin"), (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect::<Vec<_>>()).unwrap();
    std::fs::write(root.join(".hidden.py"), module(999)).unwrap();
    std::fs::write(root.join(".gitignore"), "ignored_dir/\n").unwrap();
    std::fs::create_dir(root.join("ignored_dir")).unwrap();
    std::fs::write(root.join("ignored_dir").join("skip.py"), module(998)).unwrap();
}

/// Tokens the repository datastore holds for a workspace file (`None`: not indexed).
fn indexed(client: &mut StdioClient, path: &str) -> Option<u64> {
    let answer = client.call_ok("copilotd/indexedFile", json!({"path": path}), QUICK).unwrap();
    answer["indexed"].as_bool().unwrap().then(|| answer["tokens"].as_u64().unwrap())
}

/// Polls until `check` holds; returns how long it took, or fails after `limit`.
fn within(limit: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if check() {
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_ready(client: &mut StdioClient) -> Value {
    let deadline = Instant::now() + SLOW;
    loop {
        let status = status(client);
        if status["indexState"] == "ready" {
            return status;
        }
        assert_ne!(status["indexState"], "failed", "{status}");
        assert!(Instant::now() < deadline, "indexing did not finish: {status}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn indexing_reports_progress_and_the_store_follows_disk_and_buffers() {
    let model = model_path();
    let _serial = copilotd_server::sync::lock(&MODEL);
    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path();
    populate(root);
    let mut harness = start(Some(root), options(&model, 8));
    let client = &mut harness.client;

    // $/progress: a token is created, then begin, report(s), end.
    let create = client.wait_for_method("window/workDoneProgress/create", SLOW, |_| true).unwrap();
    let token = create["params"]["token"].clone();
    let of_token = |kind: &'static str| {
        let token = token.clone();
        move |m: &Value| m["params"]["token"] == token && m["params"]["value"]["kind"] == kind
    };
    let begin = client.wait_for_method("$/progress", SLOW, of_token("begin")).unwrap();
    assert!(begin["params"]["value"]["title"].as_str().unwrap().contains("indexing"), "{begin}");
    client.wait_for_method("$/progress", SLOW, of_token("report")).unwrap();
    let end = client.wait_for_method("$/progress", SLOW, of_token("end")).unwrap();
    let summary = end["params"]["value"]["message"].as_str().unwrap();
    assert!(summary.contains(&format!("indexed {MODULES} files")), "{summary}");

    let status = wait_ready(client);
    assert_eq!(status["indexedFiles"], MODULES, "binary, non-UTF-8, hidden and ignored files stay out: {status}");
    assert!(indexed(client, "mod_0.py").unwrap() > 20);
    for outside in ["blob.py", "latin1.py", "random.bin", ".hidden.py", "ignored_dir/skip.py", "nowhere.py"] {
        assert_eq!(indexed(client, outside), None, "{outside}");
    }

    // Created, changed, renamed, deleted on disk: in the store within a second.
    std::fs::write(root.join("fresh.py"), module(1000)).unwrap();
    let created = within(Duration::from_secs(1), "created file", || indexed(client, "fresh.py").is_some());
    let before = indexed(client, "mod_1.py").unwrap();
    std::fs::write(root.join("mod_1.py"), module(1) + &module(1001)).unwrap();
    let changed =
        within(Duration::from_secs(1), "changed file", || indexed(client, "mod_1.py").is_some_and(|t| t > before));
    std::fs::rename(root.join("mod_2.py"), root.join("moved.py")).unwrap();
    let renamed = within(Duration::from_secs(1), "renamed file", || {
        indexed(client, "moved.py").is_some() && indexed(client, "mod_2.py").is_none()
    });
    std::fs::remove_file(root.join("fresh.py")).unwrap();
    let deleted = within(Duration::from_secs(1), "deleted file", || indexed(client, "fresh.py").is_none());
    eprintln!("store updated after: create {created:?}, change {changed:?}, rename {renamed:?}, delete {deleted:?}");

    // An open buffer overlays its file; closing it goes back to the disk.
    let on_disk = indexed(client, "mod_3.py").unwrap();
    let uri = uri(&root.join("mod_3.py"));
    open(client, &uri, &module(3));
    change(client, &uri, 2, (0, 0), (0, 0), &module(3003).repeat(3));
    within(Duration::from_secs(1), "buffer overlay", || indexed(client, "mod_3.py").is_some_and(|t| t > 2 * on_disk));
    client.notify("textDocument/didClose", json!({"textDocument": {"uri": uri}})).unwrap();
    within(Duration::from_secs(1), "overlay cleared", || indexed(client, "mod_3.py") == Some(on_disk));
    assert!(harness.client.shutdown(QUICK).unwrap());
}

#[test]
fn the_workspace_deleted_under_the_watcher_is_survived() {
    let model = model_path();
    let _serial = copilotd_server::sync::lock(&MODEL);
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("project");
    std::fs::create_dir(&root).unwrap();
    for n in 0..5 {
        std::fs::write(root.join(format!("mod_{n}.py")), module(n)).unwrap();
    }
    let mut harness = start(Some(&root), options(&model, 8));
    let client = &mut harness.client;
    wait_ready(client);
    let uri = uri(&root.join("mod_0.py"));
    open(client, &uri, &module(0));

    std::fs::remove_dir_all(&root).unwrap();
    within(Duration::from_secs(2), "the vanished folder dropped from the index", || {
        indexed(client, "mod_1.py").is_none()
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert!(client.is_alive());
    let status = status(client);
    assert_eq!(status["indexedFiles"], 0, "{status}");
    // The open buffer is still completed (from the buffer, not the vanished disk), at the end
    // of its `for` line.
    let completion = complete(client, &uri, 4, 34);
    assert!(!completion.is_empty());

    // The directory comes back: it is indexed again.
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("back.py"), module(7)).unwrap();
    within(Duration::from_secs(10), "re-indexed after the root came back", || indexed(client, "back.py").is_some());
    assert!(harness.client.shutdown(QUICK).unwrap());
}

/// Status of the index once every folder is indexed.
fn wait_folders(client: &mut StdioClient, folders: usize) -> Value {
    within(SLOW, "every folder indexed", || status(client)["indexedFolders"] == folders);
    wait_ready(client)
}

fn folders_change(client: &mut StdioClient, added: &[&Path], removed: &[&Path]) {
    let list = |roots: &[&Path]| roots.iter().map(|root| workspace_folder(root)).collect::<Vec<_>>();
    let event = json!({"event": {"added": list(added), "removed": list(removed)}});
    client.notify("workspace/didChangeWorkspaceFolders", event).unwrap();
}

#[test]
fn every_workspace_folder_is_indexed_as_folders_come_and_go() {
    let model = model_path();
    let _serial = copilotd_server::sync::lock(&MODEL);
    let parent = tempfile::tempdir().unwrap();
    let [first, second, third] = ["first", "second", "third"].map(|name| parent.path().join(name));
    for (n, root) in [&first, &second, &third].into_iter().enumerate() {
        std::fs::create_dir(root).unwrap();
        for file in 0..3 {
            std::fs::write(root.join(format!("{}_{file}.py", n + 1)), module(10 * n + file)).unwrap();
        }
    }
    let mut harness = start_folders(&[&first, &second], options(&model, 8));
    let client = &mut harness.client;
    let now = wait_folders(client, 2);
    assert_eq!(now["indexedFiles"], 6, "{now}");
    assert!(indexed(client, "1_0.py").is_some() && indexed(client, "2_2.py").is_some());
    assert_eq!(indexed(client, "3_0.py"), None);

    // A file created in the second folder is followed like one in the first.
    std::fs::write(second.join("2_new.py"), module(99)).unwrap();
    within(Duration::from_secs(2), "created in the second folder", || indexed(client, "2_new.py").is_some());

    folders_change(client, &[&third], &[&first]);
    within(SLOW, "third folder in, first out", || {
        indexed(client, "3_1.py").is_some() && indexed(client, "1_0.py").is_none()
    });
    let now = wait_folders(client, 2);
    assert_eq!(now["indexedFiles"], 7, "{now}");

    // A folder that does not exist is reported, and the others keep being served.
    let missing = parent.path().join("missing");
    folders_change(client, &[&missing], &[]);
    client
        .wait_for_method("window/showMessage", QUICK, |m| m["params"]["message"].as_str().unwrap().contains("missing"))
        .unwrap();
    let now = wait_folders(client, 2);
    assert_eq!(now["indexState"], "ready", "{now}");

    // A folder deleted on disk is dropped from the index; the others stay.
    std::fs::remove_dir_all(&third).unwrap();
    within(Duration::from_secs(2), "deleted folder dropped", || indexed(client, "3_1.py").is_none());
    assert_eq!(status(client)["indexedFiles"], 4);

    folders_change(client, &[], &[&second, &third, &missing]);
    within(QUICK, "no folder left", || {
        let now = status(client);
        now["indexedFolders"] == 0 && now["indexState"] == "none"
    });
    assert!(harness.client.shutdown(QUICK).unwrap());
}
