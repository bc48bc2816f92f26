//! SentencePiece (`tokenizer.ggml.model = "llama"`) tokenizers from GGUF metadata, on the
//! synthetic CodeLlama vocabulary: exact tokenizations worked out by SentencePiece's rule
//! (merge the highest-scoring adjacent pair, leftmost first; bytes for the rest), round
//! trips, and the errors for tables the loader cannot build.

use candle_core::quantized::gguf_file::Value;
use copilotd_model::{tokenizer_from_gguf, Tokenizer};
use copilotd_test_support::synthetic::{self, Family, Vocab};
use std::path::Path;

/// A GGUF holding only the tokenizer metadata of `vocab`, edited by `edit`.
fn write(path: &Path, vocab: &Vocab, edit: impl FnOnce(&mut Vec<(String, Value)>)) {
    let mut md = vocab.metadata();
    edit(&mut md);
    synthetic::write_gguf(path, &md, &[]);
}

fn codellama() -> (Tokenizer, Vocab) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("codellama.gguf");
    let vocab = Vocab::of(Family::CodeLlama);
    write(&path, &vocab, |_| {});
    (tokenizer_from_gguf(&path).unwrap_or_else(|e| panic!("{e:#}")), vocab)
}

fn pieces(tok: &Tokenizer, text: &str) -> Vec<String> {
    tok.encode(text).unwrap().iter().map(|&id| tok.id_to_token(id).unwrap()).collect()
}

#[test]
fn merges_by_piece_score_with_byte_fallback() {
    let (tok, _) = codellama();
    // "▁▁" (score -1) pairs the four spaces leftmost first, then "▁▁▁▁" (-2) joins the pairs;
    // "re" (-3) is taken before "▁re" (-9) could be, so "return" after spaces is re|t|urn;
    // "▁def" is "▁d" (-4) + "ef" (-5); "\n" and "é" are no piece: their UTF-8 bytes.
    assert_eq!(
        pieces(&tok, " def f(x):\n    return x * 2é"),
        [
            "▁def",
            "▁",
            "f",
            "(",
            "x",
            "):",
            "<0x0A>",
            "▁▁▁▁",
            "re",
            "t",
            "urn",
            "▁x",
            "▁",
            "*",
            "▁",
            "2",
            "<0xC3>",
            "<0xA9>"
        ]
    );
    // A single space before "return" makes "▁re" (-9) then "▁ret" and "▁return".
    assert_eq!(pieces(&tok, " return"), ["▁return"]);
    // No space is put before the text (SentencePiece's dummy prefix): "def" is not "▁def".
    assert_eq!(pieces(&tok, "def"), ["d", "ef"]);
    assert!(tok.encode("").unwrap().is_empty());
}

#[test]
fn round_trips_text_including_bytes_and_special_spellings() {
    let (tok, vocab) = codellama();
    for text in [
        "def f(x):\n    return x * 2\n",
        "  leading spaces, trailing space ",
        "naïve café 東京 😀\r\n\ttab",
        "<s> </s> <unk> <PRE> <0x0A>",
    ] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text, "{ids:?}");
        // Control tokens are never made from text that spells them.
        for control in ["<s>", "</s>", "<unk>", "▁<PRE>"] {
            assert!(!ids.contains(&vocab.id(control)), "{text:?} -> {ids:?}");
        }
    }
    // Decoding token by token gives the text piece by piece (spaces included).
    let ids = tok.encode(" return x").unwrap();
    let joined: String = ids.iter().map(|&id| tok.decode(&[id]).unwrap()).collect();
    assert_eq!(joined, " return x");
    assert_eq!(tok.decode(&[vocab.id("<0x0A>")]).unwrap(), "\n");
    // As in SentencePiece, the space marker in text comes back as a space.
    assert_eq!(tok.decode(&tok.encode("a\u{2581}b").unwrap()).unwrap(), "a b");
}

#[test]
fn codellama_fim_tokens_and_prefix_space() {
    let (tok, vocab) = codellama();
    let fim = tok.fim_tokens().expect("CodeLlama FIM tokens");
    assert_eq!((fim.prefix, fim.suffix, fim.middle), (vocab.id("▁<PRE>"), vocab.id("▁<SUF>"), vocab.id("▁<MID>")));
    assert!(fim.space_before_prefix);
    // A file that turns SentencePiece's dummy prefix off has no space there.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-space.gguf");
    write(&path, &vocab, |md| md.push(("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false))));
    assert!(!tokenizer_from_gguf(&path).unwrap().fim_tokens().unwrap().space_before_prefix);
}

#[test]
fn fingerprint_tells_vocabularies_apart() {
    let (a, vocab) = codellama();
    let (b, _) = codellama();
    assert_eq!(a.fingerprint(), b.fingerprint());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rescored.gguf");
    // Other scores, other merges: another tokenizer.
    let mut rescored = Vocab::of(Family::CodeLlama);
    let scores = rescored.scores.as_mut().unwrap();
    scores[vocab.id("▁▁") as usize] = -1000.0;
    write(&path, &rescored, |_| {});
    let c = tokenizer_from_gguf(&path).unwrap();
    assert_ne!(a.fingerprint(), c.fingerprint());
    // "▁re" (-9) now comes before "▁▁" (-1000): the spaces no longer join as "▁▁▁▁".
    assert_eq!(pieces(&a, "    return"), ["▁▁▁▁", "re", "t", "urn"]);
    assert_eq!(pieces(&c, "    return"), ["▁▁", "▁", "▁return"]);
}

fn error(vocab: &Vocab, edit: impl FnOnce(&mut Vec<(String, Value)>)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    write(&path, vocab, edit);
    match tokenizer_from_gguf(&path) {
        Ok(_) => panic!("built a tokenizer"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn tables_the_loader_cannot_build_are_named() {
    let vocab = Vocab::of(Family::CodeLlama);
    let set = |key: &'static str, value: Value| {
        move |md: &mut Vec<(String, Value)>| {
            md.retain(|(k, _)| k != key);
            md.push((key.into(), value));
        }
    };
    let err = error(&vocab, set("tokenizer.ggml.model", Value::String("bert".into())));
    assert!(err.contains("unsupported GGUF tokenizer model 'bert'"), "{err}");
    let err = error(&vocab, |md| md.retain(|(k, _)| k != "tokenizer.ggml.scores"));
    assert!(err.contains("'tokenizer.ggml.scores' is missing"), "{err}");
    let err = error(&vocab, set("tokenizer.ggml.scores", Value::Array(vec![Value::F32(0.0); 3])));
    assert!(err.contains("but 3 scores"), "{err}");
    let mut no_bytes = synthetic::sentencepiece(synthetic::SPM_PIECES, &[]);
    no_bytes.tokens[3 + 0x41] = "A".into();
    let err = error(&no_bytes, |_| {});
    assert!(err.contains("byte tokens"), "{err}");
}
