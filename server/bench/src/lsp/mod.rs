//! The language server from outside: a blocking stdio client ([`client`]) and the latency
//! benchmark that drives `copilotd --stdio` with it ([`latency`]).

pub mod client;
pub mod latency;
