//! Model loading: picks the file format, reads config, tokenizer and weights.

use anyhow::{anyhow, bail, Result};
use std::path::Path;

use crate::config::Config;
use crate::gguf::GgufFile;
use crate::loader::{self, Weights};
use crate::safetensors::SafetensorsDir;
use crate::tokenizer::{FimTokens, Tokenizer};
use crate::weights::Converter;
use crate::{first_line, kernel, memory, threads, KernelChoice, LoadOptions, ModelInfo};

pub(crate) struct Loaded {
    pub info: ModelInfo,
    pub config: Config,
    pub tokenizer: Tokenizer,
    pub weights: Weights,
}

/// Loads a `.gguf` file or a safetensors directory. Every error is one line naming `path`.
pub(crate) fn load(path: &Path, opts: &LoadOptions) -> Result<Loaded> {
    let result = if path.is_dir() {
        load_dir(path, opts)
    } else if path.is_file() {
        load_gguf(path, opts)
    } else if path.exists() {
        bail!("{} is neither a model file (.gguf) nor a model directory (safetensors)", path.display());
    } else {
        bail!("model not found: {}", path.display());
    };
    result.map_err(|e| {
        let causes: Vec<String> = e.chain().map(|c| first_line(c)).collect();
        anyhow!("cannot load model {}: {}", path.display(), causes.join(": "))
    })
}

fn load_gguf(path: &Path, opts: &LoadOptions) -> Result<Loaded> {
    let mut file = GgufFile::open(path)?;
    let config = file.config()?;
    let tokenizer = file.tokenizer()?;
    check_vocabulary(&tokenizer, &config)?;
    memory::ensure_fits(memory::needed(&file.declared(), opts.weights), memory::available(), opts.weights)?;
    let choice = kernel::choose(opts.kernel);
    let conv = Converter::new(opts.weights, choice.kernel);
    let weights = loader::build(&mut file, &config, &conv)?;
    let mut eos: Vec<u32> = ["eos", "eot", "eom"].iter().filter_map(|w| file.token_id(w)).collect();
    eos.extend(end_of_text_tokens(&tokenizer));
    let name = file.name().unwrap_or_else(|| file_stem(path));
    let bos = file.token_id("bos");
    let fim_bos = bos.filter(|_| file.adds_bos());
    Ok(Loaded {
        info: info(name, &config, &tokenizer, (&conv, choice), (bos, fim_bos), eos),
        config,
        tokenizer,
        weights,
    })
}

fn load_dir(dir: &Path, opts: &LoadOptions) -> Result<Loaded> {
    let tokenizer_path = dir.join("tokenizer.json");
    if !tokenizer_path.is_file() {
        bail!("no tokenizer.json in {}", dir.display());
    }
    let tokenizer = Tokenizer::from_file(&tokenizer_path)?;
    memory::ensure_fits(SafetensorsDir::memory_needed(dir, opts.weights)?, memory::available(), opts.weights)?;
    let mut st = SafetensorsDir::open(dir)?;
    let config = st.config.clone();
    check_vocabulary(&tokenizer, &config)?;
    let choice = kernel::choose(opts.kernel);
    let conv = Converter::new(opts.weights, choice.kernel);
    let weights = loader::build(&mut st, &config, &conv)?;
    let mut eos = st.eos.clone();
    eos.extend(end_of_text_tokens(&tokenizer));
    let bos = st.bos;
    let fim_bos = bos.filter(|_| st.adds_bos);
    Ok(Loaded {
        info: info(file_name(dir), &config, &tokenizer, (&conv, choice), (bos, fim_bos), eos),
        config,
        tokenizer,
        weights,
    })
}

/// Refuses a tokenizer with ids the embedding has no row for (more rows than tokens is how
/// Qwen pads its table: those ids are never generated, see [`crate::Model`]).
fn check_vocabulary(tokenizer: &Tokenizer, config: &Config) -> Result<()> {
    let tokens = tokenizer.vocab_size();
    if tokens > config.vocab_size {
        bail!("the tokenizer has {tokens} tokens but the model only {} embedding rows", config.vocab_size);
    }
    Ok(())
}

fn info(
    name: String,
    config: &Config,
    tokenizer: &Tokenizer,
    (conv, kernel): (&Converter, KernelChoice),
    (bos, fim_bos): (Option<u32>, Option<u32>),
    mut eos: Vec<u32>,
) -> ModelInfo {
    eos.sort_unstable();
    eos.dedup();
    let threads = threads::effective();
    let thread_count = match threads {
        1 => "1 thread".to_string(),
        n => format!("{n} threads"),
    };
    ModelInfo {
        name,
        architecture: config.family.name().to_string(),
        vocab_size: config.vocab_size,
        context_length: config.context_length,
        device: match &kernel.warning {
            None => format!("cpu ({thread_count}, {} kernel)", kernel.kernel),
            Some(warning) => format!("cpu ({thread_count}, {} kernel; {warning})", kernel.kernel),
        },
        weights: conv.describe(),
        bos_token: bos,
        eos_tokens: eos,
        fim: tokenizer.fim_tokens().map(|fim| FimTokens { bos: fim_bos, ..fim }),
        threads,
        kernel: kernel.kernel,
        kernel_warning: kernel.warning,
    }
}

/// End-of-text tokens of the common families: a completion stops at any of them.
fn end_of_text_tokens(tokenizer: &Tokenizer) -> Vec<u32> {
    const END: [&str; 12] = [
        "<|endoftext|>",
        "<|im_end|>",
        "<|end_of_text|>",
        "<|eot_id|>",
        "</s>",
        // DeepSeek-Coder.
        "<｜end▁of▁sentence｜>",
        "<|EOT|>",
        // CodeLlama's end of the middle (`▁<EOT>` in its SentencePiece vocabulary).
        "▁<EOT>",
        "<EOT>",
        // Qwen2.5-Coder's FIM padding and its repository-context separators: a middle ends
        // where the model starts another file.
        "<|fim_pad|>",
        "<|file_sep|>",
        "<|repo_name|>",
    ];
    END.iter().filter_map(|t| tokenizer.token_to_id(t)).collect()
}

/// A file's name without its extension (`model.gguf`: `model`).
fn file_stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

/// A directory's whole name, dots included (`Qwen2.5-Coder-0.5B`).
fn file_name(path: &Path) -> String {
    path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}
