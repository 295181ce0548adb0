//! Errors of the public API, with MPI-like classes (MPI 4.1, section 9.4).

use std::fmt;

/// The class of an error, as MPI names them (`MPI_ERR_TRUNCATE`, `MPI_ERR_RANK`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// A message was larger than the receive buffer (`MPI_ERR_TRUNCATE`).
    Truncate,
    /// A rank out of range (`MPI_ERR_RANK`).
    Rank,
    /// An invalid tag (`MPI_ERR_TAG`).
    Tag,
    /// A buffer or count that does not fit the datatype (`MPI_ERR_COUNT`).
    Count,
    /// A peer died or left the job (`MPI_ERR_PROC_FAILED` in ULFM terms).
    ProcFailed,
    /// The job could not be set up (`MPI_ERR_OTHER` at init).
    Bootstrap,
    /// A transport failed or a peer sent bytes that are not mpr's protocol.
    Transport,
    /// A wait exceeded the configured time limit.
    Timeout,
    /// A one-sided operation or synchronisation outside its epoch, or a misuse of the
    /// window's synchronisation calls (`MPI_ERR_RMA_SYNC`).
    RmaSync,
    /// A one-sided access outside the target's window (`MPI_ERR_RMA_RANGE`).
    RmaRange,
    /// An argument out of its range that no other class names (`MPI_ERR_ARG`).
    Arg,
    /// Grid extents that do not fit (`MPI_ERR_DIMS`).
    Dims,
    /// A communicator of the wrong kind for the operation (`MPI_ERR_COMM`).
    Comm,
    /// Anything else (`MPI_ERR_OTHER`).
    Other,
}

/// An error returned by mpr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The matched message (`message` bytes) does not fit the receive buffer (`buffer` bytes).
    Truncate {
        /// Size of the incoming message in bytes.
        message: usize,
        /// Size of the receive buffer in bytes.
        buffer: usize,
        /// The message's sender (its rank in the communicator), which the status of the
        /// failed receive tells.
        source: usize,
        /// The message's tag, which that status tells too.
        tag: i32,
    },
    /// The ranks of a collective passed counts that do not agree (an erroneous program, as
    /// a broadcast whose root sends more or fewer bytes than another rank's buffer holds):
    /// `buffer` bytes were due from rank `from`, and `message` bytes came (`None`: another
    /// number, which this rank cannot tell). A collective that finds it still ends in step
    /// with the other ranks, so the communicator remains usable.
    Mismatch {
        /// The rank whose part did not fit (a broadcast's root, or the rank it came through).
        from: usize,
        /// Bytes this rank's buffer was due.
        buffer: usize,
        /// Bytes that came, if known.
        message: Option<usize>,
    },
    /// `rank` is not a rank of a communicator of `size` ranks.
    Rank {
        /// The offending rank.
        rank: usize,
        /// The communicator's size.
        size: usize,
    },
    /// A tag that is negative (only `ANY_TAG` may be, and only on receive) or too large.
    Tag(i32),
    /// A message whose byte count is not a whole number of elements of the receive type.
    Count {
        /// Size of the message in bytes.
        bytes: usize,
        /// Size of one element of the receive type.
        elem: usize,
    },
    /// The peer (a world rank) died or finalized while this rank still depended on it.
    PeerGone {
        /// World rank of the peer.
        rank: usize,
        /// What happened to it.
        detail: String,
    },
    /// Start-up failed: missing environment, key-value service errors.
    Bootstrap(String),
    /// A transport-level failure or a malformed frame from a peer.
    Transport(String),
    /// A wait exceeded `MPR_WAIT_TIMEOUT`.
    Timeout(std::time::Duration),
    /// A window's synchronisation misused: an operation outside an epoch, an unlock without
    /// a lock, ...
    RmaSync(String),
    /// An access to elements `disp..disp+len` of the window of rank `target`, which holds
    /// `size` elements.
    RmaRange {
        /// The target's rank in the window's communicator.
        target: usize,
        /// First element accessed.
        disp: usize,
        /// Elements accessed.
        len: usize,
        /// Elements in the target's window.
        size: usize,
    },
    /// An argument out of its range that no other variant names: a coordinate outside a
    /// grid, a grid larger than its communicator.
    Arg(String),
    /// Grid extents that do not fit: a dimension of no points, a number of ranks that the
    /// given extents do not divide.
    Dims(String),
    /// A communicator of the wrong kind for the operation: an intra-communicator's
    /// collective called on an inter-communicator, say.
    Comm(String),
    /// The operation was cancelled ([`crate::Request::cancel`], `MPI_Cancel`) before anything
    /// matched it: no byte of it was sent or received. Not a failure in MPI's terms (the C
    /// ABI reports it as a status `MPI_Test_cancelled` recognises).
    Cancelled,
    /// Anything else.
    Other(String),
}

impl Error {
    /// The MPI-like class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Truncate { .. } => ErrorClass::Truncate,
            // More than the buffer holds is a truncation (as MPICH's class for it); fewer is
            // not one.
            Error::Mismatch { buffer, message: Some(m), .. } if m > buffer => ErrorClass::Truncate,
            Error::Mismatch { .. } => ErrorClass::Other,
            Error::Rank { .. } => ErrorClass::Rank,
            Error::Tag(_) => ErrorClass::Tag,
            Error::Count { .. } => ErrorClass::Count,
            Error::PeerGone { .. } => ErrorClass::ProcFailed,
            Error::Bootstrap(_) => ErrorClass::Bootstrap,
            Error::Transport(_) => ErrorClass::Transport,
            Error::Timeout(_) => ErrorClass::Timeout,
            Error::RmaSync(_) => ErrorClass::RmaSync,
            Error::RmaRange { .. } => ErrorClass::RmaRange,
            Error::Arg(_) => ErrorClass::Arg,
            Error::Dims(_) => ErrorClass::Dims,
            Error::Comm(_) => ErrorClass::Comm,
            Error::Cancelled | Error::Other(_) => ErrorClass::Other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncate { message, buffer, source, .. } => {
                write!(f, "message truncated: {message} bytes arrived from rank {source} for a receive buffer of {buffer} bytes")
            }
            Error::Mismatch { from, buffer, message } => {
                write!(f, "the ranks' counts of a collective differ: this rank's buffer was due {buffer} bytes from rank {from}, ")?;
                match message {
                    Some(m) => write!(f, "and {m} came"),
                    None => f.write_str("and another number came"),
                }
            }
            Error::Rank { rank, size } => {
                write!(f, "invalid rank {rank}: the communicator has {size} ranks")
            }
            Error::Tag(t) => write!(f, "invalid tag {t}: tags must be in 0..={}", crate::TAG_UB),
            Error::Count { bytes, elem } => {
                write!(f, "message of {bytes} bytes is not a whole number of {elem}-byte elements")
            }
            Error::PeerGone { rank, detail } => write!(f, "rank {rank} is gone: {detail}"),
            Error::Bootstrap(m) => write!(f, "bootstrap failed: {m}"),
            Error::Transport(m) => write!(f, "transport error: {m}"),
            Error::Timeout(d) => write!(f, "wait timed out after {:.3} s", d.as_secs_f64()),
            Error::RmaSync(m) => write!(f, "window synchronisation error: {m}"),
            Error::RmaRange { target, disp, len, size } => write!(
                f,
                "access to elements {disp}..{} of the window of rank {target}, which holds {size} elements",
                disp.saturating_add(*len)
            ),
            Error::Arg(m) => write!(f, "invalid argument: {m}"),
            Error::Dims(m) => write!(f, "invalid dimensions: {m}"),
            Error::Comm(m) => write!(f, "invalid communicator: {m}"),
            Error::Cancelled => f.write_str("the operation was cancelled before anything matched it"),
            Error::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with mpr's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
