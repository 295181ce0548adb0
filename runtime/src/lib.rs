//! mpr: a message-passing runtime in the spirit of MPI.
#![warn(missing_docs)]

pub mod bootstrap;
