//! The token-id world of copilotd: drafting sources, datastores, draft trees,
//! verification and the decode loop. Nothing here knows candle, files or LSP.

pub mod atomic_file;
pub mod budget;
pub mod cancel;
pub mod checksum;
pub mod combined;
pub mod common_store;
pub mod decode;
pub mod drafter;
pub mod fastcoder;
pub mod missing;
mod parked;
pub mod persisted;
pub mod pld;
pub mod pref_cache;
pub mod spectra;
pub mod tree;
pub mod verify;

pub mod repo_store;
pub mod retrieval;
