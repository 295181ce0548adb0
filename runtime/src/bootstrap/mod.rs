//! Bootstrap: who am I, who are my peers.
pub mod wire;
