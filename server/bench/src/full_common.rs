//! The uncompacted common datastore: every n-gram of the corpus kept instead of CREST's top-t,
//! to measure what the compaction costs in acceptance (`copilotd bench repo --common-full`).

use anyhow::Result;
use copilotd_draft::common_store::{CommonParams, CommonStore, TopT};
use copilotd_model::Tokenizer;
use copilotd_server::completion::common;
use std::path::PathBuf;
use std::sync::Arc;

/// `<tokenizer fingerprint>.full.crest` beside the compact store.
pub fn store_path(tokenizer: &Tokenizer) -> PathBuf {
    common::store_path(tokenizer).with_extension("full.crest")
}

/// The parameters of the uncompacted store: the defaults, every n-gram kept.
pub fn params() -> CommonParams {
    CommonParams { top_t: TopT::Unlimited, ..CommonParams::default() }
}

/// Opens the cached uncompacted store, or builds it from the default corpus (about 0.9 GB
/// for the Python standard library, all of it read when opened).
pub fn open_or_build(tokenizer: &Tokenizer) -> Result<Arc<CommonStore>> {
    common::open_or_build_with(tokenizer, &store_path(tokenizer), params())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_store_lies_beside_the_compact_one() {
        let dir = tempfile::tempdir().unwrap();
        let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"a":1},"unk_token":"[UNK]"}}"#;
        std::fs::write(dir.path().join("tokenizer.json"), json).unwrap();
        let tokenizer = Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
        let (compact, full) = (common::store_path(&tokenizer), store_path(&tokenizer));
        assert_eq!(compact.parent(), full.parent());
        assert_eq!(full.file_name().unwrap().to_string_lossy(), format!("{:016x}.full.crest", tokenizer.fingerprint()));
        assert_eq!(params().top_t, TopT::Unlimited);
    }
}
