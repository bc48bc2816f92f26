//! The model crate's integration tests, in one binary: one link against candle and tokenizers
//! instead of one per subject (a quarter of the crate's test build). Each module is one
//! subject; `cargo test -p copilotd-model --test model -- tokenizer::` runs one.

mod common;
mod errors;
mod exactness;
mod formats;
mod gguf_tiny;
mod kernels;
mod product_timing;
mod real_size;
mod safetensors;
mod sentencepiece;
mod speed;
mod tokenizer;
