//! The language server from outside: a blocking stdio client ([`client`]), the latency
//! benchmark that drives `copilotd --stdio` with it ([`latency`]), and the typing benchmark
//! ([`typing`], with its simulated person in [`typist`]); both start their daemons without the
//! user's config.toml ([`daemon`]).

pub mod client;
pub mod daemon;
pub mod latency;
pub mod typing;
pub mod typist;
