//! The editors offer what the daemon accepts: exactly its strategies, and every one of its
//! settings. Adding or removing a strategy in `Strategy::ALL`, or a setting in the daemon's
//! list, without updating VS Code's settings, the Neovim plugin and the editors' docs fails here.

use std::collections::BTreeSet;
use std::path::Path;

use copilotd_server::completion::Strategy;
use copilotd_server::config::client_setting_names;

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

/// The Neovim plugin's `daemon_options` table: the names it sends (`option = 'daemonName',`).
fn neovim_sent_names() -> BTreeSet<String> {
    let source = read("editors/nvim/lua/copilotd/config.lua");
    let start = source.find("M.daemon_options = {").expect("daemon_options in config.lua");
    let body = &source[start..start + source[start..].find("\n}").expect("the end of daemon_options")];
    body.lines()
        .filter_map(|line| line.trim().split_once(" = '"))
        .map(|(_, sent)| sent.trim_end_matches("',").to_owned())
        .collect()
}

#[test]
fn both_editors_offer_every_daemon_setting_and_document_it() {
    let manifest: serde_json::Value = serde_json::from_str(&read("editors/vscode/package.json")).unwrap();
    let properties = &manifest["contributes"]["configuration"]["properties"];
    let readme = read("editors/README.md");
    let neovim = neovim_sent_names();
    let doc = read("editors/nvim/doc/copilotd.txt");
    let sent_as = &doc[doc.find("sent as `initializationOptions`").expect("the Neovim doc's list of names")..];
    let sent_as = quoted_words(&sent_as[..sent_as.find("\n\n").unwrap_or(sent_as.len())]);
    let names: Vec<String> = client_setting_names().collect();
    assert!(names.len() >= 13, "the daemon's settings: {names:?}");
    for name in &names {
        assert!(properties.get(format!("copilotd.{name}")).is_some(), "VS Code has no setting copilotd.{name}");
        assert!(readme.contains(&format!("| `copilotd.{name}` |")), "editors/README.md has no row for copilotd.{name}");
        assert!(neovim.contains(name), "the Neovim plugin does not send {name}: it sends {neovim:?}");
        assert!(sent_as.contains(name), "the Neovim doc does not name {name} among the names it sends");
    }
}
