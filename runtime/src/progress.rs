//! The I/O driver around the sans-I/O engine: hands its frames to transports, feeds it what
//! arrives, performs its single-copy reads, and waits (spin, then yield) with liveness checks
//! and an optional time limit. Everything that touches a transport or a clock lives here.
//!
//! Failures, and the rules they keep:
//! - An operation the engine has accepted always gets a handle (a request, or a schedule its
//!   scope waits for): starting it never returns an error after acceptance; what goes wrong
//!   on the way is that handle's result. An operation whose start returns an error was never
//!   accepted, so nothing of it is in flight.
//! - A failed operation leaves nothing in flight ([`Runtime::fail_in_flight`]): its queued
//!   frames are dropped (in the engine's outbox and here), its pending single-copy transfers
//!   are never performed, its exposed buffer is concealed, and a buffer whose address a live
//!   peer holds ends the job rather than being released.
//! - A transport error is per peer where it names one: a frame `try_send` refuses with an
//!   error breaks the path to that peer ([`Runtime::break_peer`]), which fails the
//!   operations that wait on it and no others; frames to the other peers go on. An error
//!   from `poll` (a transport serves several peers there and its error names none) ends the
//!   wait or test in progress, which retires its operation.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::bootstrap::Bootstrap;
use crate::buf::{RawBuf, RawBufMut};
use crate::coll::sched::Sched;
pub(crate) use crate::engine::Started;
use crate::engine::{Action, Engine, Exposure, ReqId, Transmit};
use crate::error::Error;
use crate::status::Status;
use crate::transport::{PeerState, RemoteOp, Transport};

pub(crate) mod shared;
pub(crate) use shared::Shared;

/// `route` value for this rank itself (the engine handles self-sends).
pub(crate) const SELF_ROUTE: usize = usize::MAX;

/// How waits behave, from the environment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitPolicy {
    /// How long a wait spins without progress before it yields the CPU on every idle poll
    /// (`MPR_WAIT_SPIN`, microseconds). A time, not a count of polls: one poll costs a few
    /// nanoseconds over shared memory and a system call over TCP.
    pub(crate) spin: Duration,
    /// Idle time between liveness checks of peers.
    pub(crate) check: Duration,
    /// Longest a single wait may take (`MPR_WAIT_TIMEOUT`, seconds; unset: no limit).
    pub(crate) timeout: Option<Duration>,
}

/// Idle polls between two looks at the clock while a wait spins.
const SPIN_CLOCK_EVERY: u32 = 16;

impl WaitPolicy {
    /// Spin time before yielding: none when `outnumbered` (more ranks may run on this rank's
    /// CPUs than it has: spinning only steals the CPU from the rank we wait for), 50 us
    /// otherwise: long enough that a reply within a round trip is seen at once, short enough
    /// that a rank which shares its core after all (hosts that are containers of one machine
    /// and could not tell, another job) gives it up within a scheduler's time slice.
    pub(crate) fn from_env(outnumbered: bool) -> WaitPolicy {
        let default_spin = if outnumbered { 0 } else { 50 };
        let spin = Duration::from_micros(crate::env::parsed("MPR_WAIT_SPIN").unwrap_or(default_spin));
        let timeout = crate::env::seconds("MPR_WAIT_TIMEOUT").filter(|s| !s.is_zero());
        WaitPolicy { spin, check: Duration::from_millis(50), timeout }
    }
}

/// Everything one rank's communication needs: engine, transports, queues.
#[derive(Debug)]
pub(crate) struct Runtime {
    pub(crate) engine: Engine,
    pub(crate) boot: Bootstrap,
    transports: Vec<Box<dyn Transport>>,
    /// Transport index for each world rank.
    route: Vec<usize>,
    /// Frames waiting for room in their transport, per peer, in order.
    pending: Vec<VecDeque<Transmit>>,
    pending_total: usize,
    /// Per peer: the transport error that broke the path to it, if one did. No frame goes
    /// to a broken peer again, and operations on it fail at once with this error.
    broken: Vec<Option<Error>>,
    policy: WaitPolicy,
    finalized: bool,
    /// The next communicator context id this process may hand out (even: point-to-point,
    /// the odd one after it: collectives). The world uses 0 and 1.
    pub(crate) next_ctx: u32,
    /// The contexts agreed by nonblocking calls (`MPI_Comm_idup`), which hand out ids of
    /// their own (coll/idup.rs).
    pub(crate) nb_contexts: crate::coll::NbContexts,
    /// Nonblocking collectives in flight, with a generation each (handles stay unique).
    scheds: slab::Slab<(u32, Sched)>,
    sched_gen: u32,
    /// Where the ranks run, for collectives that meet in shared memory per host (coll/node.rs).
    pub(crate) hosts: Hosts,
    /// Single-copy transfers performed, for the verbose end line and the tests that claim
    /// the path.
    copies: Copies,
    /// An error the progress thread met, for the application's next call to report.
    aside_err: Option<Error>,
    /// Rounds of the progress thread that found work (for the verbose end line and the
    /// tests that claim it served a busy target).
    aside_rounds: u64,
    /// One-sided operations of freed windows by path: applied directly in shared memory, by
    /// single copy, sent as messages, by RDMA READ, by RDMA WRITE (for the verbose end line
    /// and the tests that claim a path).
    pub(crate) rma_ops: [u64; 5],
    /// Point-to-point operations of the application: sends and receives done as they
    /// started (no request), and sends and receives that took a request (`MPR_VERBOSE`).
    p2p: [u64; 4],
}

// SAFETY: the runtime holds raw views of buffers the application lent to requests in flight
// (`RawBuf`), transports with pointers into their mappings, and handles of C libraries
// (verbs), and the closures that unpack a staged receive into such a buffer. None of them
// is tied to the thread that made it: the buffers stay valid until
// their requests complete, whichever thread completes them, and the mappings and handles
// live as long as the runtime. The runtime is only ever reached through the lock of
// `shared::Shared`, so one thread at a time uses it.
unsafe impl Send for Runtime {}

/// Counts of the single-copy transfers this rank performed (a read of a peer's memory, or a
/// write into it for a split copy).
#[derive(Clone, Copy, Debug, Default)]
struct Copies {
    reads: u64,
    read_bytes: u64,
    writes: u64,
    write_bytes: u64,
    /// Transfers the OS refused (each fell back to streaming).
    failed: u64,
}

/// Which ranks share a host.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hosts {
    /// Host index of each world rank (hosts numbered by their lowest rank).
    pub(crate) of: Vec<u32>,
    /// Whether ranks of one host may share memory (`MPR_TRANSPORTS` allows shm).
    pub(crate) shm: bool,
    /// Whether some rank of the job has more ranks that may run on its CPUs than it has
    /// CPUs. Every rank computes it from the same business cards, so every rank agrees: a
    /// collective may choose its algorithm by it.
    pub(crate) outnumbered: bool,
    /// Position of each world rank on the ring the ring algorithms follow (see
    /// `coll::ring`); empty: rank order.
    pub(crate) ring: Vec<usize>,
}

/// What a wait is for, which says which peers' loss ends it.
#[derive(Clone, Copy, Debug)]
enum Target {
    Req(ReqId),
    Sched(SchedId),
    /// What one peer sends (a probe of one source).
    Peer(usize),
    /// Anything (a wildcard receive or probe, finalize).
    Job,
}

/// Handle of a schedule in the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SchedId {
    key: usize,
    gen: u32,
}

impl Runtime {
    pub(crate) fn new(
        engine: Engine,
        boot: Bootstrap,
        transports: Vec<Box<dyn Transport>>,
        route: Vec<usize>,
        policy: WaitPolicy,
    ) -> Runtime {
        let n = route.len();
        Runtime {
            engine,
            boot,
            transports,
            route,
            pending: (0..n).map(|_| VecDeque::new()).collect(),
            pending_total: 0,
            broken: vec![None; n],
            policy,
            finalized: false,
            next_ctx: 2,
            nb_contexts: crate::coll::NbContexts::default(),
            scheds: slab::Slab::new(),
            sched_gen: 0,
            hosts: Hosts { of: vec![0; n], shm: false, outnumbered: false, ring: Vec::new() },
            copies: Copies::default(),
            aside_err: None,
            aside_rounds: 0,
            rma_ops: [0; 5],
            p2p: [0; 4],
        }
    }

    fn flush_outbox(&mut self) {
        while let Some(mut t) = self.engine.outbox.pop_front() {
            let peer = t.peer;
            if let Some(e) = &self.broken[peer] {
                let e = e.clone();
                self.drop_frame(t, e);
                continue;
            }
            if t.expose {
                self.expose(&mut t);
            }
            if self.pending[peer].is_empty() {
                match offer(&mut self.transports[self.route[peer]], &t) {
                    Ok(true) => {
                        if let Some(id) = t.on_sent {
                            self.engine.on_sent(id);
                        }
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        self.break_peer(peer, e, Some(t));
                        continue;
                    }
                }
            }
            self.pending[peer].push_back(t);
            self.pending_total += 1;
        }
    }

    /// Drops frame `t` of a broken peer, failing the operation it belongs to (if still in
    /// flight) with `e`.
    fn drop_frame(&mut self, t: Transmit, e: Error) {
        if let Some(id) = t.owner.filter(|&id| !self.engine.is_done(id)) {
            self.fail_in_flight(id, e, t.is_rts());
        }
    }

    /// The path to `peer` broke with `err` (a transport refused a frame with an error): no
    /// frame goes to `peer` again, what is queued for it (and `held`, the frame refused,
    /// if the caller holds it) is dropped, and every operation that waits on it alone fails
    /// with that error (its handle reports it). Operations on other peers go on; a wildcard
    /// receive learns of it from its liveness checks. Returns the error operations on `peer`
    /// fail with (the first one, naming the peer).
    fn break_peer(&mut self, peer: usize, err: Error, held: Option<Transmit>) -> Error {
        if let Some(e) = self.broken[peer].clone() {
            if let Some(t) = held {
                self.drop_frame(t, e.clone());
            }
            return e;
        }
        let err = match err {
            Error::Transport(s) => Error::Transport(format!("sending to rank {peer}: {s}")),
            e => e,
        };
        self.broken[peer] = Some(err.clone());
        self.pending_total -= self.pending[peer].len();
        let mut dropped: VecDeque<Transmit> = held.into_iter().collect();
        dropped.append(&mut self.pending[peer]);
        let (to_peer, others): (VecDeque<Transmit>, VecDeque<Transmit>) =
            std::mem::take(&mut self.engine.outbox).into_iter().partition(|t| t.peer == peer);
        self.engine.outbox = others;
        dropped.extend(to_peer);
        for t in dropped {
            self.drop_frame(t, err.clone());
        }
        for id in self.engine.waiting_on(peer) {
            self.fail_in_flight(id, err.clone(), false);
        }
        err
    }

    /// Exposes the buffer an `Rts` announces to its peer's transport, if it offers a key.
    fn expose(&mut self, t: &mut Transmit) {
        let key = self.engine.to_expose(t).and_then(|buf| {
            let tr = &mut self.transports[self.route[t.peer]];
            // SAFETY: the buffer belongs to a live send request, which keeps it until the
            // receiver's `Fin` or its failure; both conceal the key first (`Action::Conceal`,
            // `Runtime::fail_in_flight`).
            unsafe { tr.expose(t.peer, buf.addr(), buf.len()) }
        });
        self.engine.on_exposed(t, key);
    }

    fn flush_pending(&mut self) -> usize {
        let mut sent = 0;
        for peer in 0..self.pending.len() {
            while let Some(t) = self.pending[peer].front() {
                match offer(&mut self.transports[self.route[peer]], t) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        // Drops this peer's queue; the other peers' frames go on.
                        self.break_peer(peer, e, None);
                        break;
                    }
                }
                let t = self.pending[peer].pop_front().expect("front exists");
                self.pending_total -= 1;
                sent += 1;
                if let Some(id) = t.on_sent {
                    self.engine.on_sent(id);
                }
            }
        }
        sent
    }

    /// Hands queued frames to the transports (no polling). Never fails: a transport error
    /// breaks its peer ([`Runtime::break_peer`]) and fails the operations on it.
    pub(crate) fn flush(&mut self) {
        self.flush_outbox();
        if self.pending_total > 0 {
            self.flush_pending();
        }
    }

    /// One-sided: stops serving window `id` (see [`Engine::win_remove`]); the answers from
    /// its memory still queued here take copies first.
    pub(crate) fn win_remove(&mut self, id: u64) {
        self.engine.win_remove(id);
        for t in self.pending.iter_mut().flatten() {
            t.own_payload(id);
        }
    }

    /// One-sided: registers `len` bytes at `addr` for `peer` to read for as long as a window
    /// lives (see [`Transport::register_region`]).
    ///
    /// # Safety
    /// The memory must stay valid until [`Runtime::rma_unregister`] of the key returns.
    pub(crate) unsafe fn rma_register(&mut self, peer: usize, addr: u64, len: usize) -> Option<u64> {
        let r = *self.route.get(peer).filter(|&&r| r != SELF_ROUTE)?;
        // SAFETY: the caller's contract.
        unsafe { self.transports[r].register_region(peer, addr, len) }
    }

    /// Releases a registration of [`Runtime::rma_register`].
    pub(crate) fn rma_unregister(&mut self, peer: usize, key: u64) {
        if let Some(&r) = self.route.get(peer).filter(|&&r| r != SELF_ROUTE) {
            self.transports[r].conceal(peer, key);
        }
    }

    /// One-sided: starts `op` on the memory `peer` registered under `key` (see
    /// [`Transport::start_remote`]). Returns its request, and whether a write's bytes were
    /// copied already (the request is then detached: nobody waits for it, and the caller's
    /// buffer is free).
    ///
    /// # Safety
    /// The local buffer of `op` must stay valid, and a read's untouched, until the request
    /// completes.
    pub(crate) unsafe fn rma_remote(
        &mut self,
        peer: usize,
        op: RemoteOp,
        addr: u64,
        key: u64,
    ) -> Result<(ReqId, bool), Error> {
        if let Some(e) = &self.broken[peer] {
            return Err(e.clone());
        }
        let buf = match op {
            RemoteOp::Read(b) => b,
            RemoteOp::Write(_) => RawBufMut::EMPTY,
        };
        let id = self.engine.rma_remote_begin(peer, buf);
        let r = self.route[peer];
        // SAFETY: the caller's contract.
        match unsafe { self.transports[r].start_remote(peer, op, addr, key, id.to_wire()) } {
            Ok(true) => {
                self.engine.rma_remote_detach(id);
                Ok((id, true))
            }
            Ok(false) => Ok((id, false)),
            Err(e) => {
                self.engine.rma_remote_abort(peer, id);
                Err(self.break_peer(peer, e, None))
            }
        }
    }

    /// One-sided: whether `peer`'s memory is reached by single copy (`Transport::bulk_write`
    /// and `bulk_read` at its addresses, with no key).
    pub(crate) fn rma_single_copy(&self, peer: usize) -> bool {
        self.transport_of(peer).is_some_and(|t| {
            let c = t.caps();
            c.bulk_read && c.bulk_write && !c.expose
        })
    }

    /// Whether `peer`'s path writes and reads memory registered for a window without its
    /// CPU.
    pub(crate) fn rma_remote_access(&self, peer: usize) -> bool {
        self.transport_of(peer).is_some_and(|t| t.caps().remote_write && t.caps().remote_read)
    }

    /// One-sided single copy: does `op` at address `addr` of `peer`'s memory at once. An
    /// error says the OS refused (the caller sends a message instead).
    pub(crate) fn rma_copy(&mut self, peer: usize, addr: u64, op: RemoteOp) -> Result<(), Error> {
        let tr = &mut self.transports[self.route[peer]];
        match op {
            RemoteOp::Write(src) => tr.bulk_write(peer, addr, src.bytes()),
            RemoteOp::Read(mut dst) => {
                let n = dst.len();
                tr.bulk_read(peer, addr, 0, dst.range_mut(0, n).expect("the whole buffer"))
            }
        }
    }

    /// Whether frames for `peer` are still queued here or in the engine (not yet taken by
    /// its transport).
    pub(crate) fn queued_to(&self, peer: usize) -> bool {
        !self.pending[peer].is_empty() || self.engine.outbox.iter().any(|t| t.peer == peer)
    }

    /// Blocking-send fast path: if the message can go eagerly and nothing is queued ahead of
    /// it for `peer`, hands it to the transport now, without a request, and has the transport
    /// write it out. Returns whether it did.
    pub(crate) fn send_now(&mut self, ctx: u32, src: u32, tag: i32, peer: usize, bytes: &[u8]) -> Result<bool, Error> {
        self.offer_now(ctx, src, tag, peer, bytes, true)
    }

    /// Hands an eager message to `peer`'s transport now if nothing is queued ahead of it;
    /// `flush`: have the transport write it out at once (a blocking send), rather than with
    /// the next frames or at the next progress (a burst of nonblocking sends).
    fn offer_now(
        &mut self,
        ctx: u32,
        src: u32,
        tag: i32,
        peer: usize,
        bytes: &[u8],
        flush: bool,
    ) -> Result<bool, Error> {
        let route = self.route[peer];
        if route == SELF_ROUTE
            || !self.pending[peer].is_empty()
            || !self.engine.outbox.is_empty()
            || self.broken[peer].is_some()
        {
            return Ok(false);
        }
        let Some(hdr) = self.engine.eager_header(ctx, src, tag, peer, bytes.len()) else { return Ok(false) };
        let tr = &mut self.transports[route];
        let sent = tr.try_send(peer, &hdr, bytes);
        if flush {
            tr.flush();
        }
        // Nothing was accepted: the error leaves nothing in flight, and breaks the peer.
        sent.map_err(|e| self.break_peer(peer, e, None))
    }

    /// Starts a send (`MPI_Isend`, or with `flush` `MPI_Send`, whose message is then also
    /// written out at once). A message that goes eagerly with nothing queued ahead of it is
    /// handed to the transport at once and is done: no request, nothing to wait for (the
    /// common case of a stream of small messages costs no request at all).
    pub(crate) fn isend(
        &mut self,
        ctx: u32,
        src: u32,
        tag: i32,
        peer: usize,
        buf: RawBuf,
        flush: bool,
    ) -> Result<Started, Error> {
        if self.offer_now(ctx, src, tag, peer, buf.bytes(), flush)? {
            self.p2p[0] += 1;
            return Ok(Started::Done(self.engine.sent_status()));
        }
        self.p2p[2] += 1;
        let id = self.engine.isend(ctx, src, tag, peer, buf);
        self.flush();
        Ok(Started::Req(id))
    }

    /// Starts a synchronous send (`MPI_Issend`): always a request, done once a receive has
    /// matched the message.
    pub(crate) fn issend(&mut self, ctx: u32, src: u32, tag: i32, peer: usize, buf: RawBuf) -> ReqId {
        self.p2p[2] += 1;
        let id = self.engine.issend(ctx, src, tag, peer, buf);
        self.flush();
        id
    }

    /// Starts a receive (`MPI_Irecv`). A message already here whole is received at once,
    /// with no request.
    pub(crate) fn irecv(
        &mut self,
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
        peer: Option<usize>,
        buf: RawBufMut,
    ) -> Started {
        let started = self.engine.start_recv(ctx, src, tag, peer, buf, true);
        self.p2p[if matches!(started, Started::Done(_)) { 1 } else { 3 }] += 1;
        started
    }

    /// One round of progress made by the progress thread: an error is kept for the
    /// application's next call (its operations are the ones to fail).
    pub(crate) fn progress_aside(&mut self) -> usize {
        if self.aside_err.is_some() || self.finalized {
            return 0;
        }
        let n = self.progress().unwrap_or_else(|e| {
            self.aside_err = Some(e);
            0
        });
        self.aside_rounds += u64::from(n > 0);
        n
    }

    /// One round of progress; returns how many events happened (0: nothing to do).
    pub(crate) fn progress(&mut self) -> Result<usize, Error> {
        if self.aside_err.is_some() {
            return Err(self.aside_err.take().expect("checked"));
        }
        self.flush_outbox();
        let mut n = if self.pending_total > 0 { self.flush_pending() } else { 0 };
        let engine = &mut self.engine;
        for t in self.transports.iter_mut() {
            n += t.poll(engine)?;
        }
        if !self.engine.actions.is_empty() {
            // Frames first: a split copy's CTS must reach the peer before we start our part.
            self.flush_outbox();
            n += self.perform_actions();
        }
        if !self.scheds.is_empty() {
            let (engine, nb) = (&mut self.engine, &mut self.nb_contexts);
            for (_, (_, s)) in self.scheds.iter_mut() {
                n += usize::from(s.advance(engine, nb));
            }
        }
        if n > 0 {
            self.flush_outbox();
        }
        Ok(n)
    }

    /// Performs the engine's single-copy transfers, in order. One the OS refuses falls back
    /// to streaming (the engine asks the peer for frames), and the first such refusal is said
    /// on stderr: the pair checked at start-up that it could, so the bandwidth lost is news.
    fn perform_actions(&mut self) -> usize {
        let actions = std::mem::take(&mut self.engine.actions);
        let n = actions.len();
        for a in actions {
            match a {
                Action::BulkRead { peer, addr, key, mut dst, rreq } => {
                    let len = dst.len();
                    let tr = &mut self.transports[self.route[peer]];
                    let r = match dst.range_mut(0, len) {
                        Some(d) => tr.bulk_read(peer, addr, key, d),
                        None => Err(Error::Transport("the receive buffer is gone".into())),
                    };
                    let ok = self.copied(peer, len, r, true);
                    self.engine.on_bulk_read(peer, rreq, len, ok);
                }
                Action::BulkWrite { peer, addr, src, sreq, rreq, off } => {
                    let tr = &mut self.transports[self.route[peer]];
                    let r = tr.bulk_write(peer, addr, src.bytes());
                    let ok = self.copied(peer, src.len(), r, false);
                    self.engine.on_bulk_write(peer, sreq, rreq, off, src.len(), ok);
                }
                Action::Conceal { peer, key } => self.transports[self.route[peer]].conceal(peer, key),
            }
        }
        n
    }

    /// Counts a single-copy `read` (else write) of `len` bytes with `peer` and says whether
    /// it worked.
    fn copied(&mut self, peer: usize, len: usize, r: Result<(), Error>, read: bool) -> bool {
        let c = &mut self.copies;
        match r {
            Ok(()) if read => (c.reads, c.read_bytes) = (c.reads + 1, c.read_bytes + len as u64),
            Ok(()) => (c.writes, c.write_bytes) = (c.writes + 1, c.write_bytes + len as u64),
            Err(e) => {
                c.failed += 1;
                let first = c.failed == 1;
                // A peer that died is reported as such by the wait; this is for the living.
                if first && self.peer_state(peer) == PeerState::Alive {
                    let what = if read { "read from" } else { "write to" };
                    crate::say::say!(
                        "mpr: rank {}: single-copy {what} rank {peer} failed ({e}); large messages with it are \
                         streamed from now on (two copies instead of one)",
                        self.boot.rank
                    );
                }
                return false;
            }
        }
        true
    }

    /// The transport that serves `peer` (none for this rank itself).
    fn transport_of(&self, peer: usize) -> Option<&dyn Transport> {
        match self.route.get(peer) {
            Some(&r) if r != SELF_ROUTE => Some(self.transports[r].as_ref()),
            _ => None,
        }
    }

    fn peer_state(&self, peer: usize) -> PeerState {
        self.transport_of(peer).map_or(PeerState::Alive, |t| t.peer_state(peer))
    }

    /// Checks whether what a wait is for can still complete: an error names a peer it
    /// depends on that is gone (or whose path broke). A request on one peer, or a schedule
    /// (each of its operations is on one peer), fails only if such a peer is gone; a wait on
    /// the whole job (wildcard receives, probes, finalize) ends on any dead or broken peer.
    fn check_peers(&self, target: Target) -> Result<(), Error> {
        let gone = |p: usize| -> Option<Error> {
            if let Some(e) = self.broken.get(p).and_then(|e| e.clone()) {
                return Some(e);
            }
            match self.peer_state(p) {
                PeerState::Dead => {
                    let why = self.transport_of(p).and_then(|t| t.why_dead(p));
                    Some(Error::PeerGone { rank: p, detail: why.unwrap_or_else(|| "the process died".into()) })
                }
                PeerState::Finalized => {
                    Some(Error::PeerGone { rank: p, detail: "it finalized before this operation completed".into() })
                }
                PeerState::Alive => None,
            }
        };
        let peer = match target {
            Target::Req(id) => self.engine.waits_on(id),
            Target::Sched(id) => {
                let ops = self.sched(id).map(|s| s.pending()).unwrap_or_default();
                return ops.iter().filter_map(|&r| self.engine.waits_on(r)).find_map(gone).map_or(Ok(()), Err);
            }
            Target::Peer(p) => Some(p),
            Target::Job => None,
        };
        match peer {
            Some(p) => gone(p).map_or(Ok(()), Err),
            // A peer that finalized cleanly delivered what it sent: only a dead or broken one
            // ends a wait on the job.
            None => (0..self.route.len())
                .find_map(|p| gone(p).filter(|_| self.broken[p].is_some() || self.peer_state(p) == PeerState::Dead))
                .map_or(Ok(()), Err),
        }
    }

    /// Asks to cancel request `id` (see [`Engine::cancel`]); a recall leaves at once.
    pub(crate) fn cancel(&mut self, id: ReqId) {
        self.engine.cancel(id);
        self.flush();
    }

    /// Fails request `id` and retires it (its buffer goes back to the caller); see
    /// [`Runtime::fail_in_flight`].
    fn fail(&mut self, id: ReqId, err: Error) -> Error {
        self.fail_in_flight(id, err.clone(), false);
        let _ = self.engine.take(id);
        err
    }

    /// Fails request `id` so that nothing of it is left in flight, leaving its result for its
    /// handle to collect: its frames queued here and in the engine's outbox are dropped, its
    /// pending single-copy transfers too ([`Engine::fail`]), and an exposed buffer's key is
    /// revoked. If a live peer was given the buffer's address, releasing it would let that
    /// peer read or write freed memory: the job is aborted instead. `rts_unsent`: the
    /// caller holds the send's `Rts`, so its peer was given nothing.
    fn fail_in_flight(&mut self, id: ReqId, err: Error, mut rts_unsent: bool) {
        if let Some(p) = self.engine.waits_on(id) {
            let before = self.pending[p].len();
            self.pending[p].retain(|t| {
                let mine = t.owner == Some(id);
                rts_unsent |= mine && t.is_rts();
                !mine
            });
            self.pending_total -= before - self.pending[p].len();
        }
        rts_unsent |= self.engine.outbox.iter().any(|t| t.owner == Some(id) && t.is_rts());
        match self.engine.fail(id, err.clone()) {
            // Revoked: the peer can no longer read the buffer.
            Some(Exposure::Key(p, key)) => self.transports[self.route[p]].conceal(p, key),
            // The address went in an `Rts` that never left.
            Some(Exposure::Address(_)) if rts_unsent => {}
            Some(Exposure::Address(p)) if self.peer_state(p) != PeerState::Dead => {
                let me = self.boot.rank;
                let msg = format!("rank {me}: {err}; rank {p} may still access the buffer, so the job is aborted");
                crate::say::say!("mpr: {msg}");
                self.boot.abort(1, &msg);
                std::process::exit(1);
            }
            _ => {}
        }
    }

    /// Whether waits spin before yielding the CPU (not when ranks outnumber cores).
    pub(crate) fn spins(&self) -> bool {
        !self.policy.spin.is_zero()
    }

    /// Drives progress until `done(self)` holds. Errors: a peer gone, the time limit, a
    /// transport failure; on an error, request `about` is retired.
    pub(crate) fn wait_until(
        &mut self,
        about: Option<ReqId>,
        done: impl FnMut(&mut Runtime) -> bool,
    ) -> Result<(), Error> {
        self.wait_for(about.map_or(Target::Job, Target::Req), done)
    }

    /// As [`Runtime::wait_until`], for something only world rank `peer` can bring (a probe of
    /// one source), or, for `None`, anything (a wildcard probe).
    pub(crate) fn wait_on_peer(
        &mut self,
        peer: Option<usize>,
        done: impl FnMut(&mut Runtime) -> bool,
    ) -> Result<(), Error> {
        self.wait_for(peer.map_or(Target::Job, Target::Peer), done)
    }

    /// As [`Runtime::wait_until`], for what `target` names: the peers it depends on are the
    /// ones whose loss ends the wait ([`Runtime::check_peers`]).
    fn wait_for(&mut self, target: Target, mut done: impl FnMut(&mut Runtime) -> bool) -> Result<(), Error> {
        let mut idle: u32 = 0;
        // When the current idle stretch began (read every SPIN_CLOCK_EVERY idle polls), and
        // whether it has lasted longer than the spin time.
        let mut idle_since: Option<Instant> = None;
        let mut yielding = self.policy.spin.is_zero();
        let mut iter: u32 = 0;
        let mut start: Option<Instant> = None;
        let mut last_check: Option<Instant> = None;
        loop {
            if done(self) {
                return Ok(());
            }
            if self.progress()? > 0 {
                idle = 0;
                idle_since = None;
                yielding = self.policy.spin.is_zero();
            } else if yielding {
                std::thread::yield_now();
            } else {
                idle = idle.wrapping_add(1);
                std::hint::spin_loop();
                if idle.is_multiple_of(SPIN_CLOCK_EVERY) {
                    let now = Instant::now();
                    yielding = now.duration_since(*idle_since.get_or_insert(now)) >= self.policy.spin;
                }
            }
            // The clock is read every 256 rounds, busy or not.
            iter = iter.wrapping_add(1);
            if !iter.is_multiple_of(256) {
                continue;
            }
            let now = Instant::now();
            let t0 = *start.get_or_insert(now);
            let err = if now.duration_since(*last_check.get_or_insert(now)) >= self.policy.check {
                last_check = Some(now);
                self.check_peers(target).err()
            } else {
                None
            };
            let err =
                err.or_else(|| self.policy.timeout.filter(|limit| now.duration_since(t0) > *limit).map(Error::Timeout));
            if let Some(e) = err {
                // What the peer sent before it left may still be in flight: look once more.
                self.progress()?;
                if done(self) {
                    return Ok(());
                }
                return Err(match target {
                    Target::Req(id) => self.fail(id, e),
                    Target::Sched(_) | Target::Peer(_) | Target::Job => e,
                });
            }
        }
    }

    /// Waits for request `id` and returns its result. On any error the request is retired
    /// from the engine, so its buffer may be released.
    pub(crate) fn wait(&mut self, id: ReqId) -> Result<Status, Error> {
        if let Some(r) = self.engine.take(id) {
            return r;
        }
        if let Err(e) = self.wait_until(Some(id), |rt| rt.engine.is_done(id)) {
            return Err(if self.engine.is_collected(id) { e } else { self.fail(id, e) });
        }
        self.engine
            .take(id)
            .unwrap_or_else(|| Err(Error::Other("the request was already completed and collected by its scope".into())))
    }

    /// One round of progress for a test of request `id`; an error retires the request.
    pub(crate) fn test(&mut self, id: ReqId) -> Option<Result<Status, Error>> {
        if !self.engine.is_done(id) {
            if let Err(e) = self.progress() {
                return Some(Err(if self.engine.is_collected(id) { e } else { self.fail(id, e) }));
            }
        }
        self.engine.take(id)
    }

    /// Starts a nonblocking collective. Infallible once its first operations are in the
    /// engine: the caller must hand the returned handle to a scope, whose wait reports any
    /// error (see the module's rules).
    pub(crate) fn start_sched(&mut self, mut s: Sched) -> SchedId {
        s.advance(&mut self.engine, &mut self.nb_contexts);
        self.sched_gen = self.sched_gen.wrapping_add(1);
        let key = self.scheds.insert((self.sched_gen, s));
        self.flush();
        SchedId { key, gen: self.sched_gen }
    }

    fn sched(&self, id: SchedId) -> Option<&Sched> {
        self.scheds.get(id.key).filter(|(g, _)| *g == id.gen).map(|(_, s)| s)
    }

    /// Whether collective `id` is finished (or was already collected).
    pub(crate) fn sched_done(&self, id: SchedId) -> bool {
        self.sched(id).is_none_or(|s| s.result.is_some() && !s.in_flight(&self.engine))
    }

    /// Takes the result of a finished collective.
    fn take_sched(&mut self, id: SchedId) -> Option<Result<(), Error>> {
        if self.sched(id).is_some() && self.sched_done(id) {
            return self.scheds.remove(id.key).1.result;
        }
        None
    }

    /// Waits for collective `id`; on an error every operation it has in flight is retired.
    pub(crate) fn wait_sched(&mut self, id: SchedId) -> Result<(), Error> {
        if let Err(e) = self.wait_for(Target::Sched(id), |rt| rt.sched_done(id)) {
            return Err(self.abort_sched(id, e));
        }
        self.take_sched(id)
            .unwrap_or_else(|| Err(Error::Other("the collective was already completed and collected".into())))
    }

    /// One round of progress for a test of collective `id`.
    pub(crate) fn test_sched(&mut self, id: SchedId) -> Option<Result<(), Error>> {
        if !self.sched_done(id) {
            if let Err(e) = self.progress() {
                return Some(Err(self.abort_sched(id, e)));
            }
        }
        self.take_sched(id)
    }

    /// Ends collective `id` with `e`, retiring its operations (see [`Runtime::fail`]).
    fn abort_sched(&mut self, id: SchedId, e: Error) -> Error {
        if let Some((_, s)) = self.scheds.get_mut(id.key).filter(|(g, _)| *g == id.gen) {
            for rid in s.fail(&mut self.engine, e.clone()) {
                self.fail(rid, e.clone());
            }
            self.scheds.remove(id.key);
        }
        e
    }

    /// Whether collective `id` was collected.
    pub(crate) fn sched_collected(&self, id: SchedId) -> bool {
        self.sched(id).is_none()
    }

    /// Leaves the job: sends what is queued, marks this rank finalized, tells the launcher.
    pub(crate) fn finalize(&mut self) -> Result<(), Error> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        // Send what is queued, except to peers that are gone (nobody would take it).
        let r = self.wait_until(None, |rt| {
            for p in 0..rt.pending.len() {
                if !rt.pending[p].is_empty() && rt.peer_state(p) != PeerState::Alive {
                    rt.pending_total -= rt.pending[p].len();
                    rt.pending[p].clear();
                }
            }
            rt.pending_total == 0 && rt.engine.outbox.is_empty()
        });
        if crate::env::verbose() && self.route.len() > 1 {
            let c = self.copies;
            crate::say::say!(
                "mpr: rank {}: single copy: {} reads ({} B), {} writes ({} B), {} refused",
                self.boot.rank,
                c.reads,
                c.read_bytes,
                c.writes,
                c.write_bytes,
                c.failed
            );
            let [sn, rn, sr, rr] = self.p2p;
            crate::say::say!(
                "mpr: rank {}: point-to-point: {sn} sends and {rn} receives done as they started, {sr} sends and {rr} \
                 receives by request",
                self.boot.rank
            );
            if self.rma_ops != [0; 5] {
                let [direct, copy, sent, read, write] = self.rma_ops;
                crate::say::say!(
                    "mpr: rank {}: one-sided: {direct} direct in shared memory, {copy} by single copy, {sent} by \
                     message, {read} by RDMA READ, {write} by RDMA WRITE",
                    self.boot.rank
                );
            }
            if self.aside_rounds > 0 {
                crate::say::say!(
                    "mpr: rank {}: progress thread: {} rounds with work",
                    self.boot.rank,
                    self.aside_rounds
                );
            }
        }
        for t in self.transports.iter_mut() {
            t.finalize();
        }
        // Transports that acknowledge in software need the peers' last words (bounded: they
        // give up on a peer that stops answering).
        let limit = Instant::now() + Duration::from_secs(60);
        while !self.transports.iter().all(|t| t.quiescent()) && Instant::now() < limit {
            for t in self.transports.iter_mut() {
                t.flush();
            }
            if self.progress().unwrap_or(0) == 0 {
                std::thread::yield_now();
            }
        }
        self.boot.finalize();
        // A peer whose link died while we left may never have had what we sent it (an eager
        // send completes when the transport takes it): say so, rather than leave in silence.
        r.and_then(|()| self.check_peers(Target::Job))
    }
}

/// Hands frame `t` to transport `tr` (see [`Transport::try_send`]), over any of the peer's
/// paths when its order does not matter.
fn offer(tr: &mut Box<dyn Transport>, t: &Transmit) -> Result<bool, Error> {
    if t.any_order {
        tr.try_send_any_order(t.peer, t.hdr.as_slice(), t.payload.bytes())
    } else {
        tr.try_send(t.peer, t.hdr.as_slice(), t.payload.bytes())
    }
}

#[cfg(test)]
mod tests;
