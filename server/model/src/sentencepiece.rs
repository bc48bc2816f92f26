//! SentencePiece ("llama") tokenizers from GGUF metadata, as CodeLlama and the Llama 2
//! derived models ship them: pieces with scores, `▁` for a space, `<0xXX>` byte tokens
//! for text the pieces do not cover.
//!
//! SentencePiece's BPE repeatedly merges the adjacent pair of symbols whose concatenation
//! is the highest-scoring piece (the leftmost pair on ties), starting from characters;
//! characters that are no piece become their UTF-8 bytes. A BPE whose merges are ranked by
//! the score of the piece they make, with byte fallback, takes the same steps (this is how
//! Hugging Face converts these tokenizers). No pre-tokenizer: SentencePiece does not split
//! the text before merging.
//!
//! [`Tokenizer::encode`] encodes text as the continuation of a sequence, without the space
//! SentencePiece puts before a sequence's first piece (its "dummy prefix"), so that encoding
//! and decoding round-trip and pieces of a file encode alike wherever a window starts; a
//! prompt adds that space itself where the family was trained with it (CodeLlama's FIM).

use anyhow::{anyhow, bail, Result};
use std::collections::HashMap;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::replace::Replace;

use crate::gguf::Metadata;
use crate::tokenizer::{special_tokens, TokenType, Tokenizer};

/// The space marker of SentencePiece pieces.
const SPACE: &str = "▁";

/// Builds the tokenizer of `tokenizer.ggml.model = "llama"`.
pub(crate) fn from_gguf(md: &Metadata) -> Result<Tokenizer> {
    let tokens = md.strings("tokenizer.ggml.tokens")?;
    let scores = md.floats("tokenizer.ggml.scores")?;
    let types = md.ints("tokenizer.ggml.token_type")?;
    if scores.len() != tokens.len() || types.len() != tokens.len() {
        bail!(
            "SentencePiece vocabulary has {} tokens but {} scores and {} token types",
            tokens.len(),
            scores.len(),
            types.len()
        );
    }
    let unk = md.opt_usize("tokenizer.ggml.unknown_token_id")?.unwrap_or(0);
    let unk = tokens.get(unk).ok_or_else(|| anyhow!("unknown-token id {unk} is outside the vocabulary"))?;
    if !(0..=255u8).all(|b| tokens.contains(&format!("<0x{b:02X}>").as_str())) {
        bail!("SentencePiece vocabulary lacks some of the 256 byte tokens <0x00>..<0xFF>");
    }
    let types: Vec<TokenType> = types.into_iter().map(TokenType::from).collect();
    let vocab: Vocab = tokens.iter().enumerate().map(|(id, t)| (t.to_string(), id as u32)).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges(&tokens, &scores, &types))
        .unk_token(unk.to_string())
        .byte_fallback(true)
        .build()
        .map_err(|e| anyhow!("invalid SentencePiece vocabulary in GGUF metadata: {e}"))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    let space = |from: &str, to: &str| Replace::new(from, to).map_err(|e| anyhow!("{e}"));
    inner.with_normalizer(Some(space(" ", SPACE)?)).map_err(|e| anyhow!("{e}"))?;
    inner.with_decoder(Some(Sequence::new(vec![
        space(SPACE, " ")?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ])));
    inner
        .add_special_tokens(special_tokens(&tokens, &types))
        .map_err(|e| anyhow!("cannot register special tokens: {e}"))?;
    let dummy_prefix = md.opt_bool("tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
    Ok(Tokenizer::new(inner).with_dummy_prefix(dummy_prefix))
}

/// Every split of a normal piece into two pieces, ranked by the piece's score (highest
/// first; equal scores by the piece's id).
fn merges(tokens: &[&str], scores: &[f32], types: &[TokenType]) -> Vec<(String, String)> {
    let ids: HashMap<&str, usize> = tokens.iter().enumerate().map(|(id, t)| (*t, id)).collect();
    let mut ranked: Vec<(f32, usize, usize, String, String)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        if types[id] != TokenType::Normal {
            continue;
        }
        for (at, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(at);
            if let (Some(&l), Some(_)) = (ids.get(left), ids.get(right)) {
                ranked.push((scores[id], id, l, left.to_string(), right.to_string()));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    ranked.into_iter().map(|(_, _, _, l, r)| (l, r)).collect()
}
