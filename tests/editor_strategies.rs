//! The editors offer exactly the strategies the daemon accepts: adding or removing one in
//! `Strategy::ALL` without updating VS Code's setting and the editors' docs fails here.

use std::collections::BTreeSet;
use std::path::Path;

use copilotd_server::completion::Strategy;

fn daemon_names() -> BTreeSet<String> {
    Strategy::ALL.iter().map(|s| s.name().to_owned()).collect()
}

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// The `backquoted` words of `text`.
fn quoted_words(text: &str) -> BTreeSet<String> {
    text.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

#[test]
fn vscode_setting_lists_the_daemon_strategies() {
    let manifest: serde_json::Value = serde_json::from_str(&read("editors/vscode/package.json")).unwrap();
    let setting = &manifest["contributes"]["configuration"]["properties"]["copilotd.strategy"];
    let values: Vec<&str> = setting["enum"].as_array().expect("an enum").iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(values.first(), Some(&""), "the first choice is the daemon's default");
    let offered: BTreeSet<String> = values[1..].iter().map(|v| (*v).to_owned()).collect();
    assert_eq!(offered.len(), values.len() - 1, "a strategy is listed twice: {values:?}");
    assert_eq!(offered, daemon_names());
    let descriptions = setting["enumDescriptions"].as_array().expect("descriptions");
    assert_eq!(descriptions.len(), values.len(), "one description per choice");
}

#[test]
fn editor_docs_list_the_daemon_strategies() {
    let readme = read("editors/README.md");
    let row = readme.lines().find(|line| line.starts_with("| `copilotd.strategy`")).expect("the strategy row");
    let mut listed = quoted_words(row.rsplit('|').nth(1).unwrap());
    assert_eq!(listed, daemon_names(), "editors/README.md: {row}");

    let doc = read("editors/nvim/doc/copilotd.txt");
    let start = doc.find("\nstrategy ").expect("the strategy option in the Neovim doc");
    let end = doc[start..].find(" All give the same text").expect("the end of the strategy paragraph") + start;
    listed = quoted_words(&doc[start..end]);
    assert_eq!(listed, daemon_names(), "editors/nvim/doc/copilotd.txt: {}", &doc[start..end]);
}
