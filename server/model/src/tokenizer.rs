//! The model's tokenizer, built from GGUF metadata (byte-level BPE here, SentencePiece in
//! [`crate::sentencepiece`]) or read from `tokenizer.json`.

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file;
use std::path::Path;
use std::sync::Arc;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use crate::gguf::Metadata;

/// Token ids of fill-in-the-middle prompts, when the vocabulary has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FimTokens {
    pub prefix: u32,
    pub suffix: u32,
    pub middle: u32,
    /// The token a FIM prompt starts with, for models that add BOS (CodeLlama,
    /// DeepSeek-Coder); set by the loader.
    pub bos: Option<u32>,
    /// The prefix text starts with a space: CodeLlama's layout `<PRE> {prefix} <SUF>{suffix}
    /// <MID>`, where SentencePiece's dummy prefix puts a space before the prefix only.
    pub space_before_prefix: bool,
    /// Repository-level context tokens, for models trained with them (see [`RepoTokens`]).
    pub repo: Option<RepoTokens>,
}

/// Qwen2.5-Coder's repository-level tokens: `<|repo_name|>` before the repository's name and
/// `<|file_sep|>` before each file's path. StarCoder's `<repo_name>` and `<file_sep>` are not
/// taken: StarCoder2 documents another layout and no combination with FIM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepoTokens {
    pub repo_name: u32,
    pub file_sep: u32,
}

/// A cheaply clonable, thread-safe tokenizer.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    fingerprint: u64,
    /// SentencePiece puts a space before a sequence's text ("dummy prefix"); `encode`
    /// never does, see [`crate::sentencepiece`].
    dummy_prefix: bool,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("fingerprint", &format_args!("{:016x}", self.fingerprint))
            .finish()
    }
}

impl Tokenizer {
    /// Reads a `tokenizer.json`, or the tokenizer embedded in a `.gguf` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if !path.is_file() {
            bail!("tokenizer file not found: {}", path.display());
        }
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            return tokenizer_from_gguf(path);
        }
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow!("cannot read tokenizer {}: {e}", path.display()))?;
        Ok(Self::new(inner))
    }

    pub(crate) fn new(mut inner: tokenizers::Tokenizer) -> Self {
        // Text that merely looks like a special token (e.g. "<|endoftext|>" inside a
        // source file) is encoded as text, never as the control token.
        inner.set_encode_special_tokens(true);
        let fingerprint = fingerprint(&inner);
        Self { inner: Arc::new(inner), fingerprint, dummy_prefix: false }
    }

    pub(crate) fn with_dummy_prefix(self, dummy_prefix: bool) -> Self {
        Self { dummy_prefix, ..self }
    }

    /// Token ids of `text`, without BOS or any other added special token.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(|e| anyhow!("tokenization failed: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids` (special tokens included as their text).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(|e| anyhow!("detokenization failed: {e}"))
    }

    /// Number of token ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Stable 64-bit hash of the vocabulary (in id order) and the BPE merges (in rank
    /// order): datastores built with one tokenizer are rejected by another.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The underlying `tokenizers` object.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// FIM prefix/suffix/middle tokens, recognised by the spellings of the common
    /// code-model families (StarCoder/SmolLM, Qwen2.5-Coder, DeepSeek-Coder, CodeLlama).
    pub fn fim_tokens(&self) -> Option<FimTokens> {
        const SPELLINGS: [[&str; 3]; 5] = [
            ["<fim_prefix>", "<fim_suffix>", "<fim_middle>"],
            ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"],
            ["<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"],
            ["▁<PRE>", "▁<SUF>", "▁<MID>"],
            ["<PRE>", "<SUF>", "<MID>"],
        ];
        SPELLINGS.iter().find_map(|[p, s, m]| {
            Some(FimTokens {
                prefix: self.token_to_id(p)?,
                suffix: self.token_to_id(s)?,
                middle: self.token_to_id(m)?,
                bos: None,
                space_before_prefix: self.dummy_prefix && p.ends_with("<PRE>"),
                repo: self.repo_tokens(),
            })
        })
    }

    /// Qwen2.5-Coder's repository-level tokens, when the vocabulary has both.
    fn repo_tokens(&self) -> Option<RepoTokens> {
        Some(RepoTokens { repo_name: self.token_to_id("<|repo_name|>")?, file_sep: self.token_to_id("<|file_sep|>")? })
    }
}

/// Reads only the tokenizer of a GGUF file.
pub fn tokenizer_from_gguf(path: &Path) -> Result<Tokenizer> {
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot open model file {}", path.display()))?;
    let content = gguf_file::Content::read(&mut file)
        .map_err(|e| anyhow!("{} is not a valid GGUF file: {}", path.display(), crate::first_line(&e)))?;
    from_gguf_metadata(&Metadata::new(&content.metadata))
}

/// The tokenizer `tokenizer.ggml.*` metadata describes.
pub(crate) fn from_gguf_metadata(md: &Metadata) -> Result<Tokenizer> {
    match md.string("tokenizer.ggml.model")? {
        "gpt2" => byte_level_bpe(md),
        "llama" => crate::sentencepiece::from_gguf(md),
        other => bail!(
            "unsupported GGUF tokenizer model '{other}' (supported: gpt2 byte-level BPE, llama SentencePiece); use a safetensors directory with tokenizer.json instead"
        ),
    }
}

/// GPT-2 style byte-level BPE (`tokenizer.ggml.model = "gpt2"`).
fn byte_level_bpe(md: &Metadata) -> Result<Tokenizer> {
    let tokens = md.strings("tokenizer.ggml.tokens")?;
    let merges = md.strings("tokenizer.ggml.merges")?;
    let types: Vec<TokenType> =
        md.ints("tokenizer.ggml.token_type").unwrap_or_default().into_iter().map(TokenType::from).collect();
    let pre = md.opt_string("tokenizer.ggml.pre")?.unwrap_or("default");

    let vocab: Vocab = tokens.iter().enumerate().map(|(id, t)| (t.to_string(), id as u32)).collect();
    let merges = merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .with_context(|| format!("malformed BPE merge '{m}' in GGUF metadata"))
        })
        .collect::<Result<Vec<_>>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| anyhow!("invalid BPE vocabulary in GGUF metadata: {e}"))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
    inner.with_decoder(Some(ByteLevelDecoder::default()));
    inner
        .add_special_tokens(special_tokens(&tokens, &types))
        .map_err(|e| anyhow!("cannot register special tokens: {e}"))?;
    Ok(Tokenizer::new(inner))
}

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
    Other,
}

impl From<i64> for TokenType {
    fn from(v: i64) -> Self {
        match v {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Other,
        }
    }
}

/// Control, unknown and user-defined tokens: registered as special tokens, which text is
/// never encoded to and which decode to their own text.
pub(crate) fn special_tokens(tokens: &[&str], types: &[TokenType]) -> Vec<AddedToken> {
    tokens
        .iter()
        .zip(types)
        .filter(|(_, ty)| matches!(ty, TokenType::Control | TokenType::Unknown | TokenType::UserDefined))
        .map(|(t, _)| AddedToken::from(t.to_string(), true))
        .collect()
}

/// The pre-tokenizer llama.cpp associates with `tokenizer.ggml.pre`.
fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper> {
    const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const DEEPSEEK_CODER: [&str; 5] = [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"];
    // With `use_regex`, ByteLevel splits with the GPT-2 regex itself.
    let byte_level = |use_regex| ByteLevel::new(false, true, use_regex).into();
    let split = |re: &str| -> Result<PreTokenizerWrapper> {
        Ok(Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| anyhow!("bad pre-tokenizer regex: {e}"))?
            .into())
    };
    let steps = match pre {
        "default" | "gpt2" | "gpt-2" => vec![byte_level(true)],
        "smollm" | "starcoder" | "refact" => vec![Digits::new(true).into(), byte_level(true)],
        "qwen2" => vec![split(QWEN2)?, byte_level(false)],
        "llama3" | "llama-bpe" => vec![split(LLAMA3)?, byte_level(false)],
        "deepseek-coder" => {
            let mut steps = DEEPSEEK_CODER
                .iter()
                .map(|re| split(re))
                .collect::<Result<Vec<_>>>()?;
            steps.push(byte_level(false));
            steps
        }
        other => bail!("unsupported GGUF pre-tokenizer '{other}' (supported: default, gpt2, smollm, starcoder, refact, qwen2, llama3, llama-bpe, deepseek-coder)"),
    };
    Ok(Sequence::new(steps).into())
}

/// FNV-1a over the tokens in id order and the merges in rank order.
fn fingerprint(tok: &tokenizers::Tokenizer) -> u64 {
    let mut h = Fnv::default();
    let n = tok.get_vocab_size(true) as u32;
    for id in 0..n {
        match tok.id_to_token(id) {
            Some(t) => h.write(t.as_bytes()),
            None => h.write(b"\xff<hole>"),
        }
        h.write(&[0]);
    }
    h.write(b"\xffmerges\xff");
    let model = serde_json::to_value(tok.get_model()).unwrap_or_default();
    if let Some(merges) = model.get("merges").and_then(|m| m.as_array()) {
        for m in merges {
            match m {
                serde_json::Value::String(s) => h.write(s.as_bytes()),
                serde_json::Value::Array(pair) => {
                    let parts: Vec<&str> = pair.iter().filter_map(|p| p.as_str()).collect();
                    h.write(parts.join(" ").as_bytes());
                }
                _ => {}
            }
            h.write(&[0]);
        }
    }
    h.0
}

struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}
