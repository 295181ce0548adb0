//! mprun's PMI-1 server: the subset of the protocol MPICH's simple PMI client speaks.
//!
//! [`server::Server`] is the protocol alone (a key-value space, a repeating barrier, the
//! replies), with no I/O, so it is tested line by line. [`conn::Conn`] frames one rank's
//! socket into lines and buffers the replies; the job's event loop connects the two.

pub(crate) mod conn;
pub(crate) mod server;
