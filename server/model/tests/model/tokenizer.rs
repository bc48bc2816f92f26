//! The GGUF-built tokenizer of the default model on real code.

use crate::common;

use copilotd_model::{tokenizer_from_gguf, Tokenizer};

fn tokenizer() -> Tokenizer {
    tokenizer_from_gguf(&common::model_path()).expect("tokenizer loads")
}

#[test]
fn round_trips_real_python_sources_including_non_ascii() {
    let tok = tokenizer();
    // cp1252.py is full of non-ASCII characters; the others are ordinary code.
    for file in ["textwrap.py", "argparse.py", "encodings/cp1252.py", "json/decoder.py"] {
        let text = common::python_source(file);
        let ids = tok.encode(&text).unwrap();
        assert!(ids.len() > 100, "{file}: {} tokens", ids.len());
        assert_eq!(tok.decode(&ids).unwrap(), text, "{file} does not round-trip");
    }
    let mixed = "def naïve(café: str) -> str:\n\treturn f\"東京 {café} 😀 ÷ Ω\"  # ünïcödé\r\n";
    let ids = tok.encode(mixed).unwrap();
    assert_eq!(tok.decode(&ids).unwrap(), mixed);
    // Decoding any prefix of the ids is a prefix of the text (byte-level BPE on ASCII).
    let ascii = "for i in range(10):\n    print(i)\n";
    let ids = tok.encode(ascii).unwrap();
    let mut text = String::new();
    for &id in &ids {
        text.push_str(&tok.decode(&[id]).unwrap());
    }
    assert_eq!(text, ascii);
}

#[test]
fn no_prefix_space_and_individual_digits() {
    let tok = tokenizer();
    // "def" at the start is the plain token, not "Ġdef" (candle's TokenizerFromGguf bug).
    let def = tok.token_to_id("def").expect("'def' is in the vocabulary");
    assert_eq!(tok.encode("def").unwrap(), [def]);
    assert_eq!(tok.encode(" def").unwrap(), [tok.token_to_id("Ġdef").unwrap()]);
    assert_eq!(tok.encode("12345").unwrap().len(), 5, "digits are split one by one");
    assert!(tok.encode("").unwrap().is_empty());
}

#[test]
fn special_token_text_is_encoded_as_text() {
    let tok = tokenizer();
    let eot = tok.token_to_id("<|endoftext|>").unwrap();
    let ids = tok.encode("x = '<|endoftext|>'").unwrap();
    assert!(!ids.contains(&eot), "{ids:?}");
    assert_eq!(tok.decode(&[eot]).unwrap(), "<|endoftext|>");
}

#[test]
fn fingerprint_is_stable() {
    let tok = tokenizer();
    let again = Tokenizer::from_file(common::model_path()).unwrap();
    assert_eq!(tok.fingerprint(), again.fingerprint());
    assert_eq!(tok.vocab_size(), 49152);
    // Pinned: datastores record this value; a change here invalidates them all.
    assert_eq!(tok.fingerprint(), PINNED, "{:#018x}", tok.fingerprint());
}

const PINNED: u64 = 0xa9bb_b610_8679_4121;
