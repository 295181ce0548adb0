//! Transports move frames between processes; they know nothing of tags or communicators.
//!
//! Each transport implements [`Transport`] and describes itself with [`Caps`]; the engine
//! picks protocols from the caps alone (no code matches on a transport's name). Every
//! transport carries whole frames (an engine header plus payload, at most `max_frame`
//! bytes) in order per peer: that is the active-message path everything else can fall back
//! on. Optional abilities, such as reading a peer's memory in one copy, are flags in `Caps`.

pub(crate) mod shm;
pub(crate) mod tcp;
pub(crate) mod verbs;

use crate::buf::{RawBuf, RawBufMut};
use crate::error::Error;

/// What a transport can do, per peer it serves.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caps {
    /// Name for logs and `--verbose` (never matched on).
    pub(crate) name: &'static str,
    /// Largest frame (header + payload) `try_send` accepts.
    pub(crate) max_frame: usize,
    /// Messages up to this size should go eagerly.
    pub(crate) eager_limit: usize,
    /// `bulk_read` can read a peer's memory directly (single copy).
    pub(crate) bulk_read: bool,
    /// The sender's buffer must be exposed (`expose`) before the peer can read it; the key
    /// `expose` returns travels in the announcement.
    pub(crate) expose: bool,
    /// `bulk_write` can write into a peer's memory directly (single copy).
    pub(crate) bulk_write: bool,
    /// One-sided: `start_remote` writes into memory a peer registered with
    /// `register_region` (RDMA WRITE), without the peer's CPU.
    pub(crate) remote_write: bool,
    /// One-sided: `start_remote` reads such memory (RDMA READ).
    pub(crate) remote_read: bool,
}

/// A one-sided transfer of [`Transport::start_remote`] and the local bytes it moves.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RemoteOp {
    /// Write these bytes into the peer's memory.
    Write(RawBuf),
    /// Read the peer's memory into these bytes.
    Read(RawBufMut),
}

/// How a peer is doing, as far as its transport can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerState {
    Alive,
    /// It left the job cleanly (finalized); frames it sent before are still delivered.
    Finalized,
    /// It died without finalizing.
    Dead,
}

/// Where [`Transport::poll`] delivers what arrives (the engine).
pub(crate) trait Sink {
    /// A whole frame from `peer`.
    fn frame(&mut self, peer: usize, frame: &[u8]) -> Result<(), Error>;

    /// Offered by stream transports for a large frame whose first bytes `head` (at least the
    /// header) have arrived: where its payload should land, if the engine can take it in
    /// place (saving a copy). Returns the header length, a token, and the destination of
    /// exactly `frame_len - header length` bytes.
    fn place(&mut self, peer: usize, head: &[u8], frame_len: usize) -> Option<(usize, u64, RawBufMut)>;

    /// Whether the destination given for `token` is still valid (checked before each write).
    fn placement_live(&self, token: u64) -> bool;

    /// The payload of `n` bytes for `token` is in place.
    fn placed(&mut self, peer: usize, token: u64, n: usize) -> Result<(), Error>;

    /// The one-sided transfer `token` to `peer` ([`Transport::start_remote`]) is over: for a
    /// write, its bytes are in the peer's memory; for a read, in the local buffer, or, if
    /// the transport read them into its own memory, they are `Ok(Some(bytes))`, to be
    /// copied there now.
    fn remote_done(&mut self, peer: usize, token: u64, result: Result<Option<&[u8]>, Error>);
}

/// The sink of [`Transport::poll`].
pub(crate) type FrameSink<'a> = dyn Sink + 'a;

/// One way of moving frames to a set of peers (world ranks).
pub(crate) trait Transport: std::fmt::Debug {
    /// Capabilities towards the peers this transport serves.
    fn caps(&self) -> Caps;

    /// Sends one frame made of `hdr` followed by `payload` to `peer`. `Ok(false)` means no
    /// room now (back-pressure): try again after polling. Never sends part of a frame. An
    /// error means the path to `peer` is broken for good: the runtime offers it no frame
    /// again and fails the operations on `peer` (and only those) with the error.
    fn try_send(&mut self, peer: usize, hdr: &[u8], payload: &[u8]) -> Result<bool, Error>;

    /// [`Transport::try_send`] for a frame that may arrive before or after the peer's other
    /// frames (a `Data` frame names its place in its message). A transport with several
    /// paths to `peer` (cables, rails) spreads these over all of them; the others send them
    /// in order like any frame.
    fn try_send_any_order(&mut self, peer: usize, hdr: &[u8], payload: &[u8]) -> Result<bool, Error> {
        self.try_send(peer, hdr, payload)
    }

    /// Writes out frames a transport held back to batch them (called after a blocking send
    /// and at every poll).
    fn flush(&mut self) {}

    /// Delivers arrived frames, in order per peer, to `sink(peer, frame)`; returns how many.
    /// An error (it names no peer) ends the wait in progress: report a peer's lost
    /// connection through [`Transport::peer_state`] instead, and an error only once.
    fn poll(&mut self, sink: &mut FrameSink<'_>) -> Result<usize, Error>;

    /// Reads `dst.len()` bytes at address `addr` of `peer`'s memory, opened by `key` where
    /// the transport exposes memory (only if `caps().bulk_read`).
    fn bulk_read(&mut self, peer: usize, addr: u64, key: u64, dst: &mut [u8]) -> Result<(), Error>;

    /// Lets `peer` read the `len` bytes at `addr` (only if `caps().expose`) until
    /// [`Transport::conceal`]: the key to announce, or `None` to have the bytes streamed (too
    /// small to be worth it, or out of registrations).
    ///
    /// # Safety
    /// The memory must stay valid until `conceal(peer, key)` returns.
    unsafe fn expose(&mut self, _peer: usize, _addr: u64, _len: usize) -> Option<u64> {
        None
    }

    /// Ends an exposure: from its return on, `peer` can no longer read the memory.
    fn conceal(&mut self, _peer: usize, _key: u64) {}

    /// One-sided access for as long as a window lives: registers the `len` bytes at `addr`
    /// once, so that `peer` may write and read any part of them with
    /// [`Transport::start_remote`] under the returned key (released with
    /// [`Transport::conceal`]); `None` where the path to `peer` has no remote access
    /// (`caps().remote_write` and `remote_read`), or no registration is left.
    ///
    /// # Safety
    /// The memory must stay valid until `conceal(peer, key)` returns.
    unsafe fn register_region(&mut self, _peer: usize, _addr: u64, _len: usize) -> Option<u64> {
        None
    }

    /// Starts `op` on the bytes at address `addr` of `peer`'s memory, registered under `key`
    /// by the peer's [`Transport::register_region`], without the peer's CPU. Never waits:
    /// what the device cannot take now is queued and started by later polls, and a poll
    /// reports the end with [`Sink::remote_done`] of `token`. Returns whether the transport
    /// copied a write's bytes already (the caller's buffer is free at once).
    ///
    /// # Safety
    /// The local buffer of `op` must stay valid, and a read's must not be touched, until
    /// `remote_done` of `token` (or until `peer`'s path is broken).
    unsafe fn start_remote(
        &mut self,
        peer: usize,
        _op: RemoteOp,
        _addr: u64,
        _key: u64,
        _token: u64,
    ) -> Result<bool, Error> {
        Err(Error::Transport(format!("no one-sided access to rank {peer} on this path")))
    }

    /// Writes `src` to address `addr` of `peer`'s memory (only if `caps().bulk_write`).
    fn bulk_write(&mut self, peer: usize, addr: u64, src: &[u8]) -> Result<(), Error>;

    /// Liveness of `peer`.
    fn peer_state(&self, peer: usize) -> PeerState;

    /// Why `peer` is [`PeerState::Dead`], where the transport knows better than "the process
    /// died" (a link that stopped acknowledging).
    fn why_dead(&self, _peer: usize) -> Option<String> {
        None
    }

    /// Marks this process as finalized for its peers.
    fn finalize(&mut self);

    /// After `finalize`: whether leaving now loses nothing (everything sent is delivered and
    /// the peers are done sending). Transports whose delivery is certain once sent say yes.
    fn quiescent(&self) -> bool {
        true
    }
}
