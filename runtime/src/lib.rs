//! mpr: a message-passing runtime in the spirit of MPI.
//!
//! ```no_run
//! fn main() -> mpr::Result<()> {
//!     let universe = mpr::init()?;
//!     let world = universe.world();
//!     let (rank, size) = (world.rank(), world.size());
//!     if rank == 0 {
//!         for src in 1..size {
//!             let mut msg = [0u64; 1];
//!             world.recv(&mut msg, src, 0)?;
//!         }
//!     } else {
//!         world.send(&[rank as u64], 0, 0)?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Layers (see the design notes): the public API ([`Comm`], [`Request`]) sits on one
//! progress engine per process (sans-I/O, `engine/`), which a driver (`progress.rs`) connects
//! to transports (`transport/`) found at start-up from the launcher's bootstrap service.
#![warn(missing_docs)]

pub mod bootstrap;
mod buf;
mod capi;
mod coll;
mod comm;
mod copy;
mod datatype;
mod engine;
pub mod env;
mod error;
mod group;
pub mod info;
mod init;
mod layout;
mod progress;
mod request;
pub mod rma;
mod say;
mod shmfile;
mod status;
pub mod topo;
mod transport;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Instant;

pub use coll::op::{
    self, BitAnd, BitOr, BitXor, Builtin, DynOp, ElemType, Loc, LogicalAnd, LogicalOr, LogicalXor, Max, MaxLoc, Min,
    MinLoc, Op, Prod, Sum, UserOp,
};
pub use coll::{CollRequest, InterRoot, PendingComm};
pub use comm::{Comm, Communicator, Message, ANY_SOURCE, ANY_TAG, TAG_UB};
pub use error::{Error, ErrorClass, Result};
pub use group::Group;
pub use half;
pub use layout::{Distribution, Layout};
pub use request::{scope, test_all, unscoped, wait_all, wait_any, Request, Scope};
pub use rma::{AccOp, Assert, DynAcc, Elem, LockType, NoOp, PairValue, Replace, RmaOp, Window};
pub use status::Status;

/// The README's example runs as a doctest (a job of one rank), so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// The running job, as seen by this process. Dropping it finalizes (`MPI_Finalize`).
#[derive(Debug)]
pub struct Universe {
    rt: Arc<progress::Shared>,
    world: Comm,
}

/// Joins the job (`MPI_Init`): connects to the launcher, meets the peers, sets up transports.
/// A process started without a launcher is a job of one rank. Calling it twice is an error.
pub fn init() -> Result<Universe> {
    if INITIALIZED.swap(true, Ordering::SeqCst) {
        return Err(Error::Other("mpr::init called twice".into()));
    }
    let _ = wtime();
    let rt = progress::Shared::new(init::start()?)?;
    let world = Comm::world(rt.clone());
    Ok(Universe { rt, world })
}

impl Universe {
    /// The communicator of all ranks (`MPI_COMM_WORLD`).
    pub fn world(&self) -> Comm {
        self.world.clone()
    }

    /// Leaves the job, reporting errors that dropping would hide (`MPI_Finalize`).
    pub fn finalize(self) -> Result<()> {
        self.rt.stop_helper();
        self.rt.borrow_mut().finalize()
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        self.rt.stop_helper();
        let _ = self.rt.borrow_mut().finalize();
    }
}

/// Seconds since an arbitrary point in this process's past (`MPI_Wtime`).
pub fn wtime() -> f64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Whether what this rank writes to stderr ends up on a terminal: its own stderr is one, or
/// `MPR_STDERR_TTY=1` (mprun sets it when its stderr is a terminal; a rank's stderr is a pipe
/// to mprun, which forwards a line redrawn in place, `text\r`, as it is written). A program
/// may draw progress on stderr when this holds.
pub fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr()) || std::env::var("MPR_STDERR_TTY").is_ok_and(|v| v == "1")
}
