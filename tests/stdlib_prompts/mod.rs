//! Real prompts from the Python standard library on this machine.

use std::path::PathBuf;

/// Python standard library sources on this machine.
pub fn stdlib_dir() -> PathBuf {
    let output = std::process::Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"])
        .output()
        .expect("python3 must be installed: the Python standard library is the test corpus");
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// Real prompts: the text of stdlib modules up to the start of a function
/// body (after the `def` line, at the body's indentation), one per module,
/// for functions whose bodies have at least `min_body_lines` lines.
pub fn function_body_prompts(count: usize, min_body_lines: usize) -> Vec<(String, String)> {
    const MODULES: &[&str] = &[
        "argparse.py",
        "ast.py",
        "base64.py",
        "bisect.py",
        "calendar.py",
        "cmd.py",
        "colorsys.py",
        "configparser.py",
        "csv.py",
        "difflib.py",
        "filecmp.py",
        "fnmatch.py",
        "fractions.py",
        "ftplib.py",
        "getopt.py",
        "gettext.py",
        "glob.py",
        "gzip.py",
        "heapq.py",
        "hmac.py",
        "imaplib.py",
        "ipaddress.py",
        "locale.py",
        "mailbox.py",
        "netrc.py",
        "ntpath.py",
        "optparse.py",
        "pprint.py",
        "quopri.py",
        "random.py",
        "sched.py",
        "shlex.py",
        "shutil.py",
        "smtplib.py",
        "statistics.py",
        "string.py",
        "tarfile.py",
        "textwrap.py",
        "tokenize.py",
        "uuid.py",
        "wave.py",
        "zipfile/__init__.py",
    ];
    let stdlib = stdlib_dir();
    let mut prompts = Vec::new();
    for module in MODULES {
        let Ok(text) = std::fs::read_to_string(stdlib.join(module)) else { continue };
        if let Some(cursor) = first_function_body(&text, min_body_lines) {
            prompts.push((module.to_string(), text[..cursor].to_string()));
        }
        if prompts.len() == count {
            break;
        }
    }
    prompts
}

/// Byte offset just after the indentation of the first body line of the
/// first function (past its first quarter of the file) with a long enough
/// body.
fn first_function_body(text: &str, min_body_lines: usize) -> Option<usize> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let offsets: Vec<usize> = lines
        .iter()
        .scan(0, |at, line| {
            let start = *at;
            *at += line.len();
            Some(start)
        })
        .collect();
    let indent = |line: &str| line.len() - line.trim_start().len();
    for (i, line) in lines.iter().enumerate().skip(lines.len() / 4) {
        let trimmed = line.trim_start();
        if !(trimmed.starts_with("def ") && line.trim_end().ends_with(':')) {
            continue;
        }
        let body_indent = indent(lines.get(i + 1)?);
        if body_indent <= indent(line) {
            continue;
        }
        let body_len = lines[i + 1..].iter().take_while(|l| l.trim().is_empty() || indent(l) >= body_indent).count();
        if body_len >= min_body_lines {
            return Some(offsets[i + 1] + body_indent);
        }
    }
    None
}
