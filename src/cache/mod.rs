//! The disk cache: who is cached ([`agents`], [`agents_watch`]), how response bodies are
//! decoded ([`decode`]), where objects live on disk ([`key`], [`store`]) the writer thread
//! that persists them ([`writer`]), and the refill of answers the writer had to drop ([`refill`]).

pub mod agents;
pub mod agents_watch;
pub mod decode;
pub mod key;
pub mod object;
pub mod refill;
pub mod store;
pub mod target;
#[cfg(test)]
mod temp_dir;
pub mod writer;
