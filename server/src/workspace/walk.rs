//! Which workspace files the repository datastore admits.
//!
//! A file is admitted when all of these hold:
//! - the `ignore` crate's standard filters keep it: `.gitignore` (also outside
//!   a git repository), `.ignore`, `.git/info/exclude`, the global git
//!   excludes, and no hidden files or directories;
//! - it does not match the exclusion globs (gitignore syntax, relative to the
//!   workspace root): the secret patterns ([`SECRET_GLOBS`]) unless turned
//!   off, plus the configured `ignore` globs;
//! - its extension belongs to one of the configured languages
//!   ([`LANGUAGES`]; all of them by default);
//! - it is a regular file (symbolic links are not followed) of at most
//!   `max_file_size` bytes (1 MiB by default);
//! - its contents are text: no NUL byte, valid UTF-8 (checked when read, see
//!   [`read_text`]).
//!
//! A whole walk keeps at most `max_total_bytes` of admitted files ([`MAX_WORKSPACE_BYTES`] by
//! default), the most recently modified first, and says how many it left out.

use std::collections::{BTreeSet, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use copilotd_draft::repo_store::Stamp;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::WalkBuilder;

/// Languages and their file extensions. `text` covers docs and config files.
pub const LANGUAGES: &[(&str, &[&str])] = &[
    ("python", &["py", "pyi", "pyx"]),
    ("rust", &["rs"]),
    ("javascript", &["js", "mjs", "cjs", "jsx"]),
    ("typescript", &["ts", "mts", "cts", "tsx"]),
    ("go", &["go"]),
    ("c", &["c", "h"]),
    ("cpp", &["cc", "cpp", "cxx", "hh", "hpp", "hxx", "h"]),
    ("java", &["java"]),
    ("kotlin", &["kt", "kts"]),
    ("csharp", &["cs"]),
    ("ruby", &["rb"]),
    ("php", &["php"]),
    ("swift", &["swift"]),
    ("scala", &["scala"]),
    ("lua", &["lua"]),
    ("shell", &["sh", "bash", "zsh"]),
    ("sql", &["sql"]),
    ("html", &["html", "htm", "css", "scss"]),
    ("text", &["md", "rst", "txt", "toml", "yaml", "yml", "json", "cfg", "ini"]),
];

/// Files that commonly hold credentials; excluded unless
/// `exclude_secrets` is off.
pub const SECRET_GLOBS: &[&str] =
    &[".env*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*"];

/// Default size cap of an admitted file.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 1 << 20;

/// Default most bytes of admitted files a whole walk keeps. A home directory opened as a workspace would
/// otherwise take minutes to index and gigabytes of memory (the store of the Python standard
/// library's 31.5 MB took 345 MB at its peak); the files a person works on are the recently
/// modified ones.
pub const MAX_WORKSPACE_BYTES: u64 = 64 << 20;

/// What to admit into the repository datastore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkConfig {
    /// Admitted file extensions (without the dot, lower case).
    pub extensions: BTreeSet<String>,
    /// Extra exclusion globs, gitignore syntax.
    pub ignore: Vec<String>,
    pub max_file_size: u64,
    /// Most bytes of admitted files a whole walk keeps.
    pub max_total_bytes: u64,
    pub exclude_secrets: bool,
}

impl Default for WalkConfig {
    fn default() -> Self {
        Self {
            extensions: LANGUAGES.iter().flat_map(|(_, exts)| exts.iter().map(|e| e.to_string())).collect(),
            ignore: Vec::new(),
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            max_total_bytes: MAX_WORKSPACE_BYTES,
            exclude_secrets: true,
        }
    }
}

impl WalkConfig {
    /// The default configuration restricted to the files of the configured editor `languages`
    /// (an empty list means all), with extra ignore globs. Language ids the walk has no
    /// extensions for (`markdown`, `sh`: an editor serves them, nothing indexes them) are left
    /// out; `None` when languages are configured and none of them is in [`LANGUAGES`]: nothing
    /// to index.
    pub fn for_languages(languages: &[String], ignore: &[String]) -> Result<Option<Self>> {
        let mut config = Self { ignore: ignore.to_vec(), ..Self::default() };
        config.exclusions(Path::new("/"))?;
        if languages.is_empty() {
            return Ok(Some(config));
        }
        config.extensions = LANGUAGES
            .iter()
            .filter(|(language, _)| languages.iter().any(|name| language.eq_ignore_ascii_case(name)))
            .flat_map(|(_, extensions)| extensions.iter().map(|e| e.to_string()))
            .collect();
        Ok((!config.extensions.is_empty()).then_some(config))
    }

    fn exclusions(&self, root: &Path) -> Result<Gitignore> {
        let mut builder = GitignoreBuilder::new(root);
        let secrets = if self.exclude_secrets { SECRET_GLOBS } else { &[] };
        for glob in secrets.iter().copied().chain(self.ignore.iter().map(String::as_str)) {
            builder.add_line(None, glob).with_context(|| format!("bad ignore glob {glob:?}"))?;
        }
        Ok(builder.build()?)
    }

    fn has_admitted_extension(&self, path: &Path) -> bool {
        path.extension().and_then(|e| e.to_str()).is_some_and(|e| self.extensions.contains(&e.to_ascii_lowercase()))
    }
}

/// An admitted file found by a walk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkedFile {
    /// Path relative to the root, `/`-separated: the key in the store.
    pub rel: String,
    pub abs: PathBuf,
    pub stamp: Stamp,
    pub size: u64,
    /// When it was last modified (the epoch where the system does not say).
    pub modified: SystemTime,
}

/// The admitted files and the directories that may contain them.
#[derive(Debug, Default)]
pub struct Walk {
    pub files: Vec<WalkedFile>,
    pub dirs: Vec<PathBuf>,
    /// Admitted files a whole walk left out to stay within `max_total_bytes`.
    pub left_out: usize,
}

/// Walks `root`, or only the parts of it on the way to or inside `targets`
/// (absolute paths under `root`) when given. Fails once `cancel` is set: a
/// partial walk would stand for deleted files.
pub fn walk(root: &Path, config: &WalkConfig, targets: Option<&[PathBuf]>, cancel: &AtomicBool) -> Result<Walk> {
    let exclusions = config.exclusions(root)?;
    let mut builder = WalkBuilder::new(root);
    builder.standard_filters(true).require_git(false).follow_links(false).sort_by_file_path(|a, b| a.cmp(b));
    let whole = targets.is_none();
    let targets = targets.map(Targets::new);
    builder.filter_entry(move |entry| {
        let path = entry.path();
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        if exclusions.matched(path, is_dir).is_ignore() {
            return false;
        }
        targets.as_ref().is_none_or(|targets| targets.admit(path, is_dir))
    });
    let mut out = Walk::default();
    for entry in builder.build() {
        if cancel.load(Ordering::Relaxed) {
            bail!("the walk of {} was cancelled", root.display());
        }
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => {
                tracing::debug!("skipping during walk: {err}");
                continue;
            }
        };
        let Some(file_type) = entry.file_type() else { continue };
        let path = entry.path();
        if file_type.is_dir() {
            out.dirs.push(path.to_path_buf());
            continue;
        }
        if !file_type.is_file() || !config.has_admitted_extension(path) {
            continue;
        }
        let Ok(metadata) = entry.metadata() else { continue };
        if metadata.len() > config.max_file_size {
            continue;
        }
        let Some(rel) = relative_key(root, path) else {
            tracing::debug!("skipping {}: path is not UTF-8", path.display());
            continue;
        };
        out.files.push(WalkedFile {
            rel,
            abs: path.to_path_buf(),
            stamp: stamp_of(&metadata),
            size: metadata.len(),
            modified: metadata.modified().unwrap_or(UNIX_EPOCH),
        });
    }
    if whole {
        out.left_out = keep_newest_within(&mut out.files, config.max_total_bytes);
    }
    Ok(out)
}

/// Keeps the most recently modified of `files` whose sizes sum to at most `budget` bytes, in
/// their order, and returns how many were left out.
fn keep_newest_within(files: &mut Vec<WalkedFile>, budget: u64) -> usize {
    if files.iter().map(|f| f.size).sum::<u64>() <= budget {
        return 0;
    }
    let mut newest_first: Vec<usize> = (0..files.len()).collect();
    newest_first.sort_by_key(|&i| std::cmp::Reverse(files[i].modified));
    let mut kept = vec![false; files.len()];
    let mut room = budget;
    for i in newest_first {
        if files[i].size <= room {
            room -= files[i].size;
            kept[i] = true;
        }
    }
    let before = files.len();
    let mut kept = kept.into_iter();
    files.retain(|_| kept.next() == Some(true));
    before - files.len()
}

/// What a targeted walk visits, looked up in time proportional to a path's
/// depth (not to the number of targets: thousands of files change at once).
struct Targets {
    targets: HashSet<PathBuf>,
    /// The directories holding a target.
    on_the_way: HashSet<PathBuf>,
}

impl Targets {
    fn new(targets: &[PathBuf]) -> Self {
        let on_the_way = targets.iter().flat_map(|t| t.ancestors().skip(1)).map(Path::to_path_buf).collect();
        Self { targets: targets.iter().cloned().collect(), on_the_way }
    }

    /// Whether the walk visits `path`: a target, inside one, or a directory on the way to one.
    fn admit(&self, path: &Path, is_dir: bool) -> bool {
        path.ancestors().any(|a| self.targets.contains(a)) || (is_dir && self.on_the_way.contains(path))
    }
}

/// The store key of `path` under `root`: components joined by `/`; `None`
/// when the path is outside `root`, is `root` itself, or is not UTF-8.
pub fn relative_key(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let mut parts = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?),
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// Size of a file, then a hash of its modification time (nanoseconds since the epoch) and its
/// identity (device and inode number): a file renamed keeps its stamp, but one renamed over
/// another file of the same size and time (written in the same clock tick, as a checkout
/// writes files) does not pass for it.
pub fn stamp_of(metadata: &std::fs::Metadata) -> Stamp {
    let modified =
        metadata.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos() as u64);
    let [device, inode] = identity(metadata);
    let version = [modified, device, inode].map(u64::to_le_bytes).concat();
    Stamp([metadata.len(), copilotd_draft::checksum::of_bytes(&version)])
}

#[cfg(unix)]
fn identity(metadata: &std::fs::Metadata) -> [u64; 2] {
    use std::os::unix::fs::MetadataExt;
    [metadata.dev(), metadata.ino()]
}

#[cfg(not(unix))]
fn identity(_: &std::fs::Metadata) -> [u64; 2] {
    [0, 0]
}

/// Why a file's contents were not admitted.
#[derive(Debug)]
pub enum Unreadable {
    Binary,
    TooLarge,
    Io(std::io::Error),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::Binary => f.write_str("binary or not UTF-8"),
            Unreadable::TooLarge => f.write_str("larger than the size cap"),
            Unreadable::Io(err) => write!(f, "{err}"),
        }
    }
}

/// Why a text of an admitted file stays out of the index, if it does: larger than the size
/// cap, or binary (a NUL byte). The rule for files on disk and for open buffers alike.
pub fn unindexable(bytes: &[u8], max_file_size: u64) -> Option<Unreadable> {
    if bytes.len() as u64 > max_file_size {
        Some(Unreadable::TooLarge)
    } else if memchr::memchr(0, bytes).is_some() {
        Some(Unreadable::Binary)
    } else {
        None
    }
}

/// Reads an admitted file as text, with its stamp taken from the same open
/// file: the size cap is enforced on what was read (files grow), files with
/// a NUL byte or invalid UTF-8 are binary.
pub fn read_text(path: &Path, max_file_size: u64) -> Result<(String, Stamp), Unreadable> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(Unreadable::Io)?;
    let metadata = file.metadata().map_err(Unreadable::Io)?;
    let mut bytes = Vec::new();
    file.take(max_file_size + 1).read_to_end(&mut bytes).map_err(Unreadable::Io)?;
    if let Some(why) = unindexable(&bytes, max_file_size) {
        return Err(why);
    }
    let text = String::from_utf8(bytes).map_err(|_| Unreadable::Binary)?;
    Ok((text, stamp_of(&metadata)))
}
