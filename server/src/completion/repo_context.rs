//! Repository-level context of FIM prompts, in Qwen2.5-Coder's layout: a few files of the
//! repository before the current one, so that the model sees the definitions the cursor's
//! code uses.
//!
//! ```text
//! <|repo_name|>{name}\n
//! <|file_sep|>{path}\n{content}      one block per chosen file, the best match last
//! <|file_sep|>{current path}\n       then the current file's FIM part:
//! <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>
//! ```
//!
//! The files are those of the current file's repository store (its folder; the buffers open in
//! the editor as the store holds them) that share the most distinct [`NGRAM`]-token n-grams
//! with the text around the cursor ([`RepositoryStore::files_sharing`]), the current file
//! excluded. Each is shown from its start, cut at a line end to fit the budget. Everything is a
//! function of the query and the store, so the same query on the same store gives the same
//! tokens, and the model's KV cache of the previous prompt stays usable.
//!
//! [`RepositoryStore::files_sharing`]: copilotd_draft::repo_store::RepositoryStore::files_sharing

use anyhow::Result;
use copilotd_model::{RepoTokens, Tokenizer};

use crate::sync::read;
use crate::workspace::Repository;

/// Length of the n-grams shared with the text around the cursor: about an identifier and its
/// punctuation (a call, an attribute access, a signature's start).
pub const NGRAM: usize = 4;
/// An n-gram found more often than this in the store is boilerplate and tells no file apart.
pub const MAX_OCCURRENCES: usize = 64;
/// Most files shown: the best matches, each unless too little of it fits.
pub const MAX_FILES: usize = 3;
/// A file is shown only with at least this many tokens of its content.
pub const MIN_FILE_TOKENS: usize = 32;

/// Where the context of one request comes from.
#[derive(Clone, Copy, Debug)]
pub struct RepoContext<'a> {
    pub tokens: RepoTokens,
    /// The workspace's folders.
    pub repositories: &'a [Repository],
    /// The current file's store key (path relative to its folder).
    pub path: &'a str,
}

impl RepoContext<'_> {
    /// The tokens before the current file's FIM part, at most `budget`, from the files that
    /// share most n-grams with `query` (the text around the cursor, in pieces: no n-gram spans
    /// two). Empty when no other file shares one or the budget fits none: the prompt is then
    /// the plain FIM prompt.
    ///
    /// The repository is the first folder whose store holds the current file, else the first
    /// folder (a file not indexed, or outside every folder).
    pub fn tokens(&self, tokenizer: &Tokenizer, query: &[&[u32]], budget: usize) -> Result<Vec<u32>> {
        let Some(repository) = self
            .repositories
            .iter()
            .find(|repository| read(&repository.store).contains(self.path))
            .or(self.repositories.first())
        else {
            return Ok(Vec::new());
        };
        let mut head = vec![self.tokens.repo_name];
        head.extend(tokenizer.encode(&format!("{}\n", repository.name))?);
        let current = self.file_header(tokenizer, self.path)?;
        let Some(mut room) = budget.checked_sub(head.len() + current.len()) else {
            return Ok(Vec::new());
        };
        let store = read(&repository.store);
        let mut blocks = Vec::new();
        let ranked = store.files_sharing(query, NGRAM, MAX_OCCURRENCES, Some(self.path));
        for (path, _) in ranked.into_iter().take(MAX_FILES) {
            let mut block = self.file_header(tokenizer, path)?;
            let content = store.file_tokens(path).unwrap_or_default();
            let fits = line_prefix(tokenizer, content, room.saturating_sub(block.len()));
            if fits < MIN_FILE_TOKENS {
                continue;
            }
            block.extend_from_slice(&content[..fits]);
            room -= block.len();
            blocks.push(block);
        }
        if blocks.is_empty() {
            return Ok(Vec::new());
        }
        // The best match nearest the current file.
        Ok(head.into_iter().chain(blocks.into_iter().rev().flatten()).chain(current).collect())
    }

    /// `<|file_sep|>{path}\n`.
    fn file_header(&self, tokenizer: &Tokenizer, path: &str) -> Result<Vec<u32>> {
        let mut header = vec![self.tokens.file_sep];
        header.extend(tokenizer.encode(&format!("{path}\n"))?);
        Ok(header)
    }
}

/// The length of the longest start of `tokens`, at most `max` tokens, that ends at a line end
/// (0 when there is none).
fn line_prefix(tokenizer: &Tokenizer, tokens: &[u32], max: usize) -> usize {
    let ends_line = |id: u32| tokenizer.decode(&[id]).is_ok_and(|text| text.ends_with('\n'));
    (1..=max.min(tokens.len())).rev().find(|&len| ends_line(tokens[len - 1])).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion::prompt::tests::{layout, Part};
    use crate::completion::prompt::{self, Prompt};
    use crate::completion::{Completer, CompletionRequest, EngineSettings, Sampling, Strategy, Trigger};
    use copilotd_draft::cancel::CancelToken;
    use copilotd_draft::repo_store::RepositoryStore;
    use copilotd_model::{LoadOptions, Model};
    use copilotd_test_support::synthetic::{self, Family, GgmlDType, Shape, Vocab};
    use std::path::Path;
    use std::sync::{Arc, RwLock};

    /// What the cursor's code uses: `Square`, `area`, `side`.
    const SHAPES: &str = "class Square:\n    def __init__(self, side):\n        self.side = side\n\n    def area(self):\n        return self.side * self.side\n";
    /// Shares no four characters in a row with the text around the cursor.
    const UNRELATED: &str = "||||~~~~^^^^\n||||~~~~^^^^\n||||~~~~^^^^\n";
    const BEFORE: &str = "from shapes import Square\n\nsquare = Square(3)\nsquares = [Square(side) for side in range(9)]\ntotal = square.area() + sum(s.area() for s in squares)\n";
    const AFTER: &str = "print(square.side)\n";

    fn completer(dir: &Path, family: Family, settings: EngineSettings) -> (Completer, Vocab) {
        // The tiny shape with room for a whole default prompt window.
        let shape = Shape { context: 4096, ..synthetic::TINY };
        let written = synthetic::write_shaped(dir, family, &shape, "Q8_0", &|_, _| GgmlDType::Q8_0, false);
        let model = Model::load(&written.model, &LoadOptions::default()).unwrap();
        (Completer::new(model, settings), written.vocab)
    }

    /// A Qwen2.5-Coder completer, its vocabulary and tokenizer (the directory holds its model).
    fn qwen(settings: EngineSettings) -> (tempfile::TempDir, Completer, Vocab, Tokenizer) {
        let dir = tempfile::tempdir().unwrap();
        let (completer, vocab) = completer(dir.path(), Family::QwenCoder, settings);
        let tok = completer.tokenizer().clone();
        (dir, completer, vocab, tok)
    }

    fn repository(tok: &Tokenizer, name: &str, files: &[(&str, &str)]) -> Repository {
        let mut store = RepositoryStore::new();
        for (path, text) in files {
            store.upsert_file(path, tok.encode(text).unwrap());
        }
        Repository { name: name.to_owned(), store: Arc::new(RwLock::new(store)) }
    }

    fn request<'a>(text: &'a str, path: Option<&'a str>) -> CompletionRequest<'a> {
        let cursor = text.find(AFTER).unwrap_or(text.len());
        CompletionRequest {
            text,
            cursor,
            path,
            language: None,
            max_tokens: 4,
            strategy: Strategy::Ar,
            sampling: Sampling::GREEDY,
            trigger: Trigger::Invoked,
            prompt_latency: None,
        }
    }

    /// The prompt `completer` would build without repository context.
    fn plain(completer: &Completer, text: &str) -> Prompt {
        let fim = completer.info.fim.as_ref().filter(|_| completer.settings.fim);
        let cursor = request(text, None).cursor;
        prompt::build(completer.tokenizer(), text, cursor, &completer.settings.prompt, fim, None).unwrap()
    }

    #[test]
    fn qwen_prompts_show_the_related_files_of_the_current_repository_first() {
        use Part::{Special as S, Text as T};
        let (_dir, mut completer, vocab, tok) = qwen(EngineSettings::default());
        let text = format!("{BEFORE}{AFTER}");
        // The current file is in the second folder, as the editor's buffer (it shares the most
        // with itself, and is left out); the first folder's related file is another repository's.
        let other = repository(&tok, "other", &[("elsewhere.py", SHAPES)]);
        let demo = repository(&tok, "demo", &[("main.py", &text), ("notes.py", UNRELATED), ("lib/shapes.py", SHAPES)]);
        completer.set_repositories(vec![other, demo]);
        let prompt = completer.prompt(&request(&text, Some("main.py"))).unwrap();
        let expected = [
            S("<|repo_name|>"),
            T("demo\n"),
            S("<|file_sep|>"),
            T("lib/shapes.py\n"),
            T(SHAPES),
            S("<|file_sep|>"),
            T("main.py\n"),
            S("<|fim_prefix|>"),
            T(BEFORE),
            S("<|fim_suffix|>"),
            T(AFTER),
            S("<|fim_middle|>"),
        ];
        assert_eq!(prompt.tokens, layout(&tok, &vocab, &expected));
        // The completion runs on that prompt.
        let completion = completer.complete(&request(&text, Some("main.py")), &CancelToken::new()).unwrap();
        assert_eq!(completion.stats.prompt_tokens, prompt.tokens.len());
        // A file no folder's store holds (a new buffer) takes its context from the first folder.
        let prompt = completer.prompt(&request(&text, Some("new.py"))).unwrap();
        let expected = [S("<|repo_name|>"), T("other\n"), S("<|file_sep|>"), T("elsewhere.py\n"), T(SHAPES)];
        assert!(prompt.tokens.starts_with(&layout(&tok, &vocab, &expected)));
    }

    #[test]
    fn no_repository_context_without_the_tokens_a_path_a_related_file_or_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("{BEFORE}{AFTER}");
        let files = [("main.py", text.as_str()), ("lib/shapes.py", SHAPES)];
        // Families without Qwen2.5-Coder's repository tokens (StarCoder's `<repo_name>` spelling
        // included), and Qwen2.5-Coder with repository context or FIM off.
        let off = EngineSettings { repo_context: false, ..EngineSettings::default() };
        let no_fim = EngineSettings { fim: false, ..EngineSettings::default() };
        for (family, settings) in [
            (Family::StarCoder, EngineSettings::default()),
            (Family::DeepSeekCoder, EngineSettings::default()),
            (Family::CodeLlama, EngineSettings::default()),
            (Family::QwenCoder, off),
            (Family::QwenCoder, no_fim),
        ] {
            let (mut completer, _) = completer(dir.path(), family, settings);
            let tok = completer.tokenizer().clone();
            completer.set_repositories(vec![repository(&tok, "demo", &files)]);
            assert!(!completer.uses_repo_context(), "{family:?}");
            let prompt = completer.prompt(&request(&text, Some("main.py"))).unwrap();
            assert_eq!(prompt, plain(&completer, &text), "{family:?}");
        }
        let (mut completer, _) = completer(dir.path(), Family::QwenCoder, EngineSettings::default());
        assert!(completer.uses_repo_context());
        let tok = completer.tokenizer().clone();
        // No folder, a buffer without a path, or nothing related: the plain FIM prompt.
        assert_eq!(completer.prompt(&request(&text, Some("main.py"))).unwrap(), plain(&completer, &text));
        completer.set_repositories(vec![repository(&tok, "demo", &files)]);
        assert_eq!(completer.prompt(&request(&text, None)).unwrap(), plain(&completer, &text));
        completer.set_repositories(vec![repository(&tok, "demo", &[("main.py", &text), ("notes.py", UNRELATED)])]);
        assert_eq!(completer.prompt(&request(&text, Some("main.py"))).unwrap(), plain(&completer, &text));
    }

    #[test]
    fn the_context_keeps_to_its_share_and_cuts_files_at_line_ends() {
        let mut settings = EngineSettings::default();
        settings.prompt.max_tokens = 512;
        let (_dir, mut completer, vocab, tok) = qwen(settings);
        let long_shapes = SHAPES.repeat(8);
        // Far more than the window before the cursor.
        let before = format!("{}{BEFORE}", "x = Square(1).area()\n".repeat(60));
        let text = format!("{before}{AFTER}");
        completer.set_repositories(vec![repository(&tok, "demo", &[("main.py", &text), ("shapes.py", &long_shapes)])]);
        let prompt = completer.prompt(&request(&text, Some("main.py"))).unwrap().tokens;
        let at = |name: &str| prompt.iter().position(|&t| t == vocab.id(name)).unwrap();
        let (prefix_at, suffix_at) = (at("<|fim_prefix|>"), at("<|fim_suffix|>"));
        // The context has its quarter of the window, 128 tokens; the rest is the plain layout's.
        assert!(prefix_at > 0 && prefix_at <= 128, "{prefix_at}");
        assert!(prompt.len() <= 512, "{}", prompt.len());
        // The file is cut at a line end: the tokens before the current file's header are a
        // start of the file's ending with a newline.
        let file = tok.encode(&long_shapes).unwrap();
        let header = [&[vocab.id("<|file_sep|>")][..], &tok.encode("shapes.py\n").unwrap()].concat();
        let start = prompt.windows(header.len()).position(|w| w == header).unwrap() + header.len();
        let current = [&[vocab.id("<|file_sep|>")][..], &tok.encode("main.py\n").unwrap()].concat();
        let end = prefix_at - current.len();
        assert_eq!(prompt[end..prefix_at], current);
        let shown = &prompt[start..end];
        assert!(shown.len() >= MIN_FILE_TOKENS && shown.len() < file.len() && file.starts_with(shown));
        assert!(tok.decode(shown).unwrap().ends_with('\n'));
        // The prefix gave up at most the context's share (its budget less 128 tokens), less its
        // window's stride (a quarter), and is the text's tail.
        let prefix = &prompt[prefix_at + 1..suffix_at];
        let kept = 512 - tok.encode(AFTER).unwrap().len() - 3 - 128;
        assert!(prefix.len() <= kept && prefix.len() > kept * 3 / 4, "{} of {kept}", prefix.len());
        assert!(tok.encode(&before).unwrap().ends_with(prefix));
    }

    #[test]
    fn at_most_a_few_files_the_best_match_last() {
        let (_dir, mut completer, vocab, tok) = qwen(EngineSettings::default());
        let text = format!("{BEFORE}{AFTER}");
        // f0.py to f3.py: each shares more of the text around the cursor than the one before.
        let lines = ["square = Square(3)\n", "total = square.area()\n", "print(square.side)\n"];
        let related: Vec<(String, String)> =
            (0..4).map(|i| (format!("f{i}.py"), format!("{}{SHAPES}", lines[..i].concat()))).collect();
        let mut files: Vec<(&str, &str)> = related.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        files.push(("main.py", &text));
        completer.set_repositories(vec![repository(&tok, "demo", &files)]);
        let prompt = completer.prompt(&request(&text, Some("main.py"))).unwrap().tokens;
        let separators = prompt.iter().filter(|&&t| t == vocab.id("<|file_sep|>")).count();
        assert_eq!(separators, MAX_FILES + 1, "three files and the current one");
        let header_at = |path: &str| {
            let header = [&[vocab.id("<|file_sep|>")][..], &tok.encode(&format!("{path}\n")).unwrap()].concat();
            prompt.windows(header.len()).position(|w| w == header)
        };
        assert_eq!(header_at("f0.py"), None);
        let shown: Vec<usize> = ["f1.py", "f2.py", "f3.py", "main.py"].map(|p| header_at(p).unwrap()).to_vec();
        assert!(shown.is_sorted(), "{shown:?}");
    }

    #[test]
    fn typing_keeps_the_context_and_the_prompt_start() {
        let (_dir, mut completer, vocab, tok) = qwen(EngineSettings::default());
        // The text before the cursor ends a 64-token block: the next keystrokes start a new one.
        let mut before = BEFORE.to_owned();
        while tok.encode(&before).unwrap().len() % 64 != 0 {
            before.push('#');
        }
        before.push('\n');
        let text = |before: &str| format!("{before}{AFTER}");
        // A file that shares only what is about to be typed: it joins the context once the
        // typed text completes its block, not at the first keystroke.
        let zoo = "zebra_qux zebra_qux zebra_qux\n".repeat(3);
        let demo =
            repository(&tok, "demo", &[("main.py", &text(&before)), ("lib/shapes.py", SHAPES), ("zoo.py", &zoo)]);
        let store = demo.store.clone();
        completer.set_repositories(vec![demo]);
        let first = completer.prompt(&request(&text(&before), Some("main.py"))).unwrap().tokens;
        let context_end = first.iter().position(|&t| t == vocab.id("<|fim_prefix|>")).unwrap();
        let suffix_at = first.iter().position(|&t| t == vocab.id("<|fim_suffix|>")).unwrap();
        assert!(context_end > 0, "a context");
        for keystroke in ["z", "e", "b", "r", "a", "_", "q", "u", "x"] {
            before.push_str(keystroke);
            // The editor's buffer reaches the store too.
            crate::sync::write(&store).upsert_file("main.py", tok.encode(&text(&before)).unwrap());
            let next = completer.prompt(&request(&text(&before), Some("main.py"))).unwrap().tokens;
            assert_eq!(next[..context_end], first[..context_end], "after {keystroke:?}");
            let common = first.iter().zip(&next).take_while(|(a, b)| a == b).count();
            assert!(common + 1 >= suffix_at, "the previous prompt's prefix is kept: {common} of {suffix_at}");
        }
    }
}
