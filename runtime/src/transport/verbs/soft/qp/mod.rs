//! One queue pair: its UDP socket, work queues, frame sequencing and (RC) reliability.
//!
//! - `mod.rs` (here): the state, posting, completions in order, the error state, timers.
//! - `tx.rs`: turning work requests and READ answers into frames under the window;
//!   acknowledgements and NAKs from the peer; RC retransmission (go-back-N).
//! - `rx.rs`: frames from the peer: UC message assembly with drop-on-gap, RC in-order
//!   acceptance, RDMA WRITE and READ service, acknowledging.
//!
//! Invariants: every frame of a direction carries the next psn of that direction, starting
//! at the psn published in [`QpAddr`]. At most [`WINDOW`] frames are sent and not yet
//! acknowledged (UC: the link credit, lifted while the peer is silent; RC: the retransmit
//! window). UC: a SEND starts only when the peer has a receive for it (TN3205's credit flow
//! control): its ACKs carry the receive credit, one past the last message number it can take
//! (messages it has seen, plus the receives it has free); a sender without credit asks for it
//! (saying which messages went out, so that one lost whole gives its credit back), and only a
//! peer silent for [`CREDIT_STALL`] is sent to without it. Send-queue completions come out in
//! posting order. A work request holds its slot until its completion is polled (as with
//! mlx5), so at most `max_wr` are in flight per direction.

mod rx;
mod tx;

use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;

use super::super::provider::{Opcode, QpAddr, QpId, QpType, Remote, Sge, VerbsError, WcStatus};
use super::wire::Kind;
use super::Ctx;

/// Frames sent and not yet acknowledged, per queue pair (fits a default socket buffer).
const WINDOW: u32 = 32;
/// A receiver acknowledges at least every this many frames (and after each batch it reads).
const ACK_EVERY: u32 = 8;
/// UC: a sender blocked on the window this long without a credit stops waiting for them.
const UC_STALL: Duration = Duration::from_millis(100);
/// UC: a sender without receive credit asks for it after this, then after twice as long,
/// doubling up to [`UC_STALL`] (the receiver's credit comes by itself as it posts receives;
/// asking tells it of messages lost whole, and must come after every frame sent before it).
const CREDIT_ASK: Duration = Duration::from_millis(1);
/// UC: a sender waiting this long for receive credit with no ACK at all from the peer (which
/// answers every request for credit, busy or not) takes it for gone and sends without credit
/// until it hears from it again. Long enough that a peer starved of the CPU on a loaded
/// machine is not taken for gone.
const CREDIT_STALL: Duration = Duration::from_secs(1);
/// RC retransmission timeout: first, and the cap of its doubling.
const RTO_MIN: Duration = Duration::from_millis(10);
const RTO_MAX: Duration = Duration::from_millis(200);
/// RC: how long a sender waits after a receiver-not-ready NAK before trying again.
const RNR_DELAY: Duration = Duration::from_millis(1);
/// Retry after this long when the socket refused a frame (EAGAIN).
const BACKLOG_RETRY: Duration = Duration::from_millis(1);
/// `IBV_WC_LOC_PROT_ERR`: a work request's memory was deregistered under it.
pub(super) const LOC_PROT_ERR: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Created, not connected: receives may be posted, nothing moves.
    Init,
    /// Connected (RTS).
    Ready,
    /// Failed: every work request posted completes as flushed.
    Error,
}

/// A posted SEND, RDMA WRITE or RDMA READ.
#[derive(Debug)]
pub(super) struct SendWr {
    wr_id: u64,
    op: Opcode,
    sge: Sge,
    remote: Remote,
    msg: u32,
    /// Frames this request puts on the wire (a READ: its one request frame).
    frames: u32,
    /// Next frame to send.
    next: u32,
    first_psn: u32,
    last_psn: u32,
    /// READ: frames of the answer received.
    got: u32,
    /// Finished; completes once every request before it has.
    done: Option<WcStatus>,
}

impl SendWr {
    pub(super) fn new(wr_id: u64, op: Opcode, sge: Sge, remote: Remote) -> SendWr {
        SendWr { wr_id, op, sge, remote, msg: 0, frames: 0, next: 0, first_psn: 0, last_psn: 0, got: 0, done: None }
    }
}

/// A posted receive.
#[derive(Debug)]
struct RecvWr {
    wr_id: u64,
    sge: Sge,
}

/// An accepted RDMA READ request this queue pair answers.
#[derive(Debug)]
struct ReadResp {
    msg: u32,
    rkey: u32,
    raddr: u64,
    len: u32,
    next: u32,
}

/// UC: a sender waiting for a receive credit.
#[derive(Clone, Copy, Debug)]
struct CreditWait {
    since: Instant,
    /// When to ask the peer for its credit again, and how long after that the next time.
    ask_at: Instant,
    every: Duration,
}

/// The message being received.
#[derive(Debug)]
struct Incoming {
    kind: Kind,
    msg: u32,
    next: u32,
    /// Its frames are thrown away (no receive, too long, or a frame missing).
    discard: bool,
}

#[derive(Debug)]
pub(super) struct Qp {
    id: QpId,
    ty: QpType,
    pub(super) sock: UdpSocket,
    pub(super) local: QpAddr,
    peer: Option<SocketAddr>,
    state: State,
    sq_slots: usize,
    rq_slots: usize,
    /// Send requests not fully on the wire, in posting order.
    pending: VecDeque<SendWr>,
    /// RC: send requests on the wire, waiting for their acknowledgement or READ answer.
    sent: VecDeque<SendWr>,
    rq: VecDeque<RecvWr>,
    resp: VecDeque<ReadResp>,
    next_msg: u32,
    // Transmit sequencing.
    next_psn: u32,
    /// Every frame before this psn is acknowledged (UC: credited).
    acked: u32,
    /// RC: copies of the frames `acked..next_psn`, for retransmission.
    unacked: VecDeque<Vec<u8>>,
    /// RC: go-back-N in progress; index into `unacked` of the next frame to resend.
    resend: Option<usize>,
    /// RC: after a receiver-not-ready NAK, resend only the refused frame until it is taken.
    probe: bool,
    hold_until: Option<Instant>,
    rto: Duration,
    rto_at: Option<Instant>,
    /// RC: last sign of life from the peer while requests were outstanding.
    progress_at: Instant,
    /// UC: when the window filled up.
    blocked_since: Option<Instant>,
    /// UC: no credits came within [`UC_STALL`]; send without a window until one does.
    silent: bool,
    /// UC: the peer's receive credit: messages numbered before it may start.
    recv_credit: u32,
    credit_wait: Option<CreditWait>,
    /// UC: no ACK came within [`CREDIT_STALL`] of waiting for credit; send without it until
    /// one does.
    credit_silent: bool,
    /// UC: when the peer last sent an ACK.
    heard_at: Instant,
    /// The socket refused a frame; retry at this time.
    backlog_at: Option<Instant>,
    // Receive sequencing.
    /// UC: one past the highest psn seen; RC: the next psn to accept.
    expected: u32,
    rx_unacked: u32,
    ack_due: bool,
    nak_sent: bool,
    incoming: Option<Incoming>,
    /// UC: the messages settled, for the receive credit.
    settled: Settled,
}

/// UC receive side: which of the peer's messages are settled, so that the receive credit
/// counts exactly the receives still to be taken: every message before `done` and those in
/// `ahead` arrived (datagrams may overtake one another between the CPUs of a host), or were
/// given up for lost on the sender's word that they went out (`given_up`: one of those that
/// comes after all is too late, and is dropped: its receive was given to another).
#[derive(Debug, Default)]
struct Settled {
    done: u32,
    ahead: BTreeSet<u32>,
    given_up: BTreeSet<u32>,
}

impl Settled {
    /// A frame of message `m` arrived; false if `m` was given up for lost (drop it).
    fn arrive(&mut self, m: u32) -> bool {
        if self.given_up.contains(&m) {
            return false;
        }
        if !before(m, self.done) {
            self.ahead.insert(m);
            self.advance();
        }
        true
    }

    /// The sender says every message before `first` went out: those not arrived are lost.
    fn give_up_before(&mut self, first: u32) {
        while before(self.done, first) {
            if !self.ahead.remove(&self.done) {
                self.given_up.insert(self.done);
            }
            self.done = self.done.wrapping_add(1);
        }
        self.advance();
        // A frame overtaken by so many messages no longer comes.
        let done = self.done;
        self.given_up.retain(|&m| done.wrapping_sub(m) < 1 << 12);
    }

    fn advance(&mut self) {
        while self.ahead.remove(&self.done) {
            self.done = self.done.wrapping_add(1);
        }
    }
}

impl Qp {
    pub(super) fn new(id: QpId, ty: QpType, sock: UdpSocket, local: QpAddr, now: Instant) -> Qp {
        Qp {
            id,
            ty,
            sock,
            local,
            peer: None,
            state: State::Init,
            sq_slots: 0,
            rq_slots: 0,
            pending: VecDeque::new(),
            sent: VecDeque::new(),
            rq: VecDeque::new(),
            resp: VecDeque::new(),
            next_msg: 0,
            next_psn: local.psn,
            acked: local.psn,
            unacked: VecDeque::new(),
            resend: None,
            probe: false,
            hold_until: None,
            rto: RTO_MIN,
            rto_at: None,
            progress_at: now,
            blocked_since: None,
            silent: false,
            recv_credit: 0,
            credit_wait: None,
            credit_silent: false,
            heard_at: now,
            backlog_at: None,
            expected: 0,
            rx_unacked: 0,
            ack_due: false,
            nak_sent: false,
            incoming: None,
            settled: Settled::default(),
        }
    }

    fn rc(&self) -> bool {
        self.ty == QpType::Rc
    }

    pub(super) fn ty(&self) -> QpType {
        self.ty
    }

    /// INIT -> RTR -> RTS: only datagrams from `peer` are taken from now on.
    pub(super) fn connect(&mut self, peer: SocketAddr, peer_psn: u32) -> Result<(), VerbsError> {
        if self.state != State::Init {
            return Err(VerbsError::Invalid(format!("queue pair {} is already connected", self.id.0)));
        }
        self.sock.connect(peer).map_err(|e| VerbsError::Device(format!("connect to {peer}: {e}")))?;
        self.peer = Some(peer);
        self.expected = peer_psn;
        self.state = State::Ready;
        Ok(())
    }

    /// Checks that a send-queue request may be posted now.
    pub(super) fn can_post_send(&self, max_wr: usize) -> Result<(), VerbsError> {
        if self.state == State::Init {
            return Err(VerbsError::Invalid(format!("queue pair {} is not connected", self.id.0)));
        }
        if self.sq_slots >= max_wr {
            return Err(VerbsError::Limit("send queue"));
        }
        Ok(())
    }

    pub(super) fn can_post_recv(&self, max_wr: usize) -> Result<(), VerbsError> {
        if self.rq_slots >= max_wr {
            return Err(VerbsError::Limit("receive queue"));
        }
        Ok(())
    }

    /// Queues a checked send request and puts what the window allows on the wire.
    pub(super) fn post_send(&mut self, ctx: &mut Ctx, buf: &mut [u8], mut wr: SendWr, now: Instant) {
        self.sq_slots += 1;
        if self.state == State::Error {
            ctx.complete(self.id, wr.wr_id, wr.op, WcStatus::Flushed, 0);
            return;
        }
        if !self.outstanding() {
            self.progress_at = now;
        }
        wr.msg = self.next_msg;
        self.next_msg = self.next_msg.wrapping_add(1);
        wr.frames = if wr.op == Opcode::Read { 1 } else { super::wire::frames(wr.sge.len) };
        self.pending.push_back(wr);
        self.flush(ctx, buf, now);
    }

    pub(super) fn post_recv(&mut self, ctx: &mut Ctx, wr_id: u64, sge: Sge) {
        self.rq_slots += 1;
        if self.state == State::Error {
            ctx.complete(self.id, wr_id, Opcode::Recv, WcStatus::Flushed, 0);
        } else {
            self.rq.push_back(RecvWr { wr_id, sge });
            if !self.rc() && self.state == State::Ready {
                self.send_ack(ctx); // The new receive is a credit.
            }
        }
    }

    /// UC: the receive credit this side gives: one past the last message number it can take
    /// (a message not yet settled may still take a receive, so it counts as taken).
    pub(super) fn recv_limit(&self) -> u32 {
        let bound = self.incoming.as_ref().is_some_and(|m| !m.discard);
        let free = self.rq.len() - usize::from(bound);
        self.settled.done.wrapping_add(free as u32)
    }

    /// A completion of this queue pair was polled: its slot is free again.
    pub(super) fn release_slot(&mut self, op: Opcode) {
        match op {
            Opcode::Recv => self.rq_slots = self.rq_slots.saturating_sub(1),
            _ => self.sq_slots = self.sq_slots.saturating_sub(1),
        }
    }

    /// Requests or READ answers are waiting for the peer.
    fn outstanding(&self) -> bool {
        !self.pending.is_empty() || !self.sent.is_empty() || !self.unacked.is_empty()
    }

    /// Completes finished send requests from the front, in posting order.
    fn complete_ready(&mut self, ctx: &mut Ctx) {
        while let Some(status) = self.sent.front().and_then(|w| w.done) {
            let wr = self.sent.pop_front().unwrap();
            ctx.complete(self.id, wr.wr_id, wr.op, status, 0);
        }
    }

    /// The queue pair goes to the error state: every request completes, in order, with the
    /// status it finished with or as flushed; nothing moves any more.
    fn enter_error(&mut self, ctx: &mut Ctx) {
        self.state = State::Error;
        for wr in self.sent.drain(..).chain(self.pending.drain(..)) {
            ctx.complete(self.id, wr.wr_id, wr.op, wr.done.unwrap_or(WcStatus::Flushed), 0);
        }
        for r in self.rq.drain(..) {
            ctx.complete(self.id, r.wr_id, Opcode::Recv, WcStatus::Flushed, 0);
        }
        self.resp.clear();
        self.unacked.clear();
        self.incoming = None;
        (self.resend, self.hold_until, self.rto_at, self.blocked_since, self.backlog_at) =
            (None, None, None, None, None);
        self.credit_wait = None;
        self.probe = false;
    }

    /// A receive failed on local memory: it completes with `status`, then the queue pair fails.
    fn fail_recv(&mut self, ctx: &mut Ctx, status: WcStatus) {
        if let Some(r) = self.rq.pop_front() {
            ctx.complete(self.id, r.wr_id, Opcode::Recv, status, 0);
        }
        self.enter_error(ctx);
    }

    /// Handles the timers due at `now`: RC retransmission and retry exhaustion, UC credit wait.
    pub(super) fn on_timer(&mut self, ctx: &mut Ctx, now: Instant) {
        if self.state != State::Ready {
            return;
        }
        if !self.rc() {
            if self.blocked_since.is_some_and(|t| now >= t + UC_STALL) {
                ctx.log(|| format!("queue pair {}: no credits from the peer; sending without a window", self.id.0));
                self.acked = self.next_psn;
                self.silent = true;
                self.blocked_since = None;
            }
            if let Some(w) = self.credit_wait {
                if now >= w.since + CREDIT_STALL && self.heard_at <= w.since {
                    ctx.log(|| format!("queue pair {}: the peer is silent; sending without its credit", self.id.0));
                    self.credit_silent = true;
                    self.credit_wait = None;
                } else if now >= w.ask_at {
                    self.ask_credit(ctx, now);
                }
            }
            return;
        }
        if self.outstanding() && now >= self.progress_at + ctx.retry_timeout {
            ctx.stats.retry_exceeded += 1;
            ctx.log(|| format!("queue pair {}: the peer stopped answering; retries exceeded", self.id.0));
            let victim = self.sent.iter_mut().find(|w| w.done.is_none()).or(self.pending.front_mut());
            if let Some(wr) = victim {
                wr.done = Some(WcStatus::RetryExceeded);
            }
            self.complete_ready(ctx);
            self.enter_error(ctx);
            return;
        }
        if self.rto_at.is_some_and(|t| now >= t) {
            self.resend = (!self.unacked.is_empty()).then_some(0);
            self.rto = (self.rto * 2).min(RTO_MAX);
            self.rto_at = Some(now + self.rto);
            ctx.stats.timeouts += 1;
        }
    }

    /// When [`Qp::on_timer`] or [`Qp::flush`] next has something to do.
    pub(super) fn deadline(&self, ctx: &Ctx) -> Option<Instant> {
        if self.state != State::Ready {
            return None;
        }
        let mut at = self.backlog_at;
        let mut take = |t: Option<Instant>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        };
        if self.rc() {
            take(self.hold_until);
            take(self.rto_at);
            take(self.outstanding().then(|| self.progress_at + ctx.retry_timeout));
        } else {
            take(self.blocked_since.map(|t| t + UC_STALL));
            take(self.credit_wait.map(|w| w.ask_at.min(w.since + CREDIT_STALL)));
        }
        at
    }
}

/// `a` comes before `b` in wrapping sequence-number order.
fn before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}
