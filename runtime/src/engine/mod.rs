//! The progress engine: tag matching, eager and rendezvous protocols, request state machines.
//!
//! Sans-I/O (STYLE.md): the engine never touches a socket, a ring or a clock. Calls go in
//! (`isend`, `irecv`, `on_frame`, `on_sent`, `on_bulk_read`, `on_bulk_write`), and what must
//! happen next comes out through two queues the driver drains: [`Engine::outbox`] (frames to
//! hand to a transport, in order per peer) and [`Engine::actions`] (single-copy reads and
//! writes of a peer's memory to perform).
//!
//! Protocols, chosen per message from the peer's [`PeerLimits`]:
//! - eager: the message travels in one frame;
//! - rendezvous, single copy: the receiver reads the sender's buffer directly;
//! - rendezvous, split copy: the receiver reads the first part while the sender writes the
//!   rest straight into the receiver's buffer, so two cores copy at once;
//! - rendezvous, streamed: the sender sends `Data` frames (the fallback everywhere). Its
//!   `Rts` may carry the first [`PeerLimits::head`] bytes, which then travel during the
//!   round trip that asks for the rest.
//!
//! Invariants:
//! - Messages from one sender on one communicator match receives in the order they were sent
//!   (transports deliver frames of a peer in order; queues here are FIFO).
//! - A receive matches the oldest message that fits its (context, source, tag) selector;
//!   a message matches the oldest posted receive whose selector it fits (MPI 4.1, 3.5).
//! - A send buffer is never touched after its request is `Done`; a receive buffer likewise.
//!   A rendezvous send is done on the receiver's `Fin`, sent once every byte is in, or, when
//!   it streamed the whole message, once the transport has taken its last frame (every byte
//!   has then left the buffer; the `Fin` that follows is dropped).
//! - A request completes cancelled ([`Engine::cancel`]) only if nothing matched it: no byte
//!   of it moved, and its message is in no queue (a recalled `Rts` is dropped by its
//!   receiver before the `Fin` that says so leaves).
//! - A failed request ([`Engine::fail`]) leaves nothing behind: no frame of it is left in the
//!   outbox, no single-copy transfer of it in the actions, no message of it to be matched.

mod matching;
mod pool;
pub(crate) mod request;
pub(crate) mod rma;
pub(crate) mod wire;

use std::collections::VecDeque;

use crate::buf::{RawBuf, RawBufMut};
use crate::error::Error;
use crate::status::Status;
pub(crate) use request::{ReqId, Staging};
use request::{Requests, State};
use wire::{Envelope, Frame, HeaderBytes, FLAG_CANCELLED, FLAG_TRUNCATED};

/// How an operation started: done at once (nothing in flight, no request), or as a request
/// in the engine.
#[derive(Debug)]
pub(crate) enum Started {
    Done(Status),
    Req(ReqId),
}

/// What the engine needs to know about the path to one peer (from its transport's caps).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerLimits {
    /// Largest payload of one frame.
    pub(crate) max_payload: usize,
    /// Messages up to this size go eagerly.
    pub(crate) eager: usize,
    /// The driver can read the peer's memory directly (single copy).
    pub(crate) bulk_read: bool,
    /// Single-copy reads need the sender's buffer exposed first (registered with the
    /// transport); the key travels in the `Rts`. See [`Transmit::expose`].
    pub(crate) expose: bool,
    /// The driver can write into the peer's memory directly.
    pub(crate) bulk_write: bool,
    /// Messages from this size up are copied by both sides at once (when both directions
    /// of single copy are available).
    pub(crate) split_min: usize,
    /// A rendezvous message to this peer that is streamed sends its first `head` bytes with
    /// its `Rts` (0: none; by default only where ranks outnumber cores), as Open MPI's ob1
    /// does: they travel during the round trip that fetches the rest. At most
    /// `max_payload`, and at most `eager`. See [`PeerLimits::streamed_head`].
    pub(crate) head: usize,
}

impl PeerLimits {
    /// The bytes a rendezvous `Rts` to this peer carries: `head`, or none where the
    /// receiver reads the sender's memory itself (the bytes then never cross as frames).
    pub(crate) fn streamed_head(&self) -> usize {
        if self.bulk_read {
            0
        } else {
            self.head
        }
    }
}

/// A frame for the driver to hand to the transport of `peer`.
#[derive(Debug)]
pub(crate) struct Transmit {
    pub(crate) peer: usize,
    pub(crate) hdr: HeaderBytes,
    pub(crate) payload: RawBuf,
    /// Request to notify (with [`Engine::on_sent`]) once the transport has taken the frame.
    pub(crate) on_sent: Option<ReqId>,
    /// The send request whose buffer the payload points into (dropped if it fails).
    pub(crate) owner: Option<ReqId>,
    /// An `Rts` whose buffer the driver exposes to the peer just before the frame goes out
    /// (so it keeps its place in the peer's order), then reports with [`Engine::on_exposed`].
    pub(crate) expose: bool,
    /// A `Data` frame: it names its place in the message, so it may overtake the peer's
    /// other frames or be overtaken (a transport with several paths to the peer spreads
    /// these over them; see [`crate::transport::Transport::try_send_any_order`]).
    pub(crate) any_order: bool,
    /// Bytes the frame owns (an answer copied out of a window), which `payload` views.
    copy: Vec<u8>,
    /// The window whose memory `payload` views (a get's answer, sent from the window in
    /// place): if the window goes before the frame leaves, the bytes are copied first
    /// ([`Transmit::own_payload`]).
    pub(crate) window: Option<u64>,
}

impl Transmit {
    fn new(peer: usize, f: Frame, payload: RawBuf, on_sent: Option<ReqId>, owner: Option<ReqId>) -> Transmit {
        let any_order = matches!(f, Frame::Data { .. });
        Transmit {
            peer,
            hdr: f.encode(),
            payload,
            on_sent,
            owner,
            expose: false,
            any_order,
            copy: Vec::new(),
            window: None,
        }
    }

    /// A frame whose payload is `bytes`, owned by the frame.
    fn with_copy(peer: usize, f: Frame, bytes: Vec<u8>) -> Transmit {
        // SAFETY: the view is of the vector's heap buffer, which stays in place and unchanged
        // while the vector lives (moving the vector does not move it); the vector lives in
        // this `Transmit` beside the view, and is never modified.
        let payload = unsafe { RawBuf::new(&bytes) };
        let mut t = Transmit::new(peer, f, payload, None, None);
        t.copy = bytes;
        t
    }

    /// Copies the payload into the frame, if it views window `id`'s memory, which is about
    /// to go.
    pub(crate) fn own_payload(&mut self, id: u64) {
        if self.window == Some(id) {
            self.copy = self.payload.bytes().to_vec();
            // SAFETY: as in `with_copy`.
            self.payload = unsafe { RawBuf::new(&self.copy) };
            self.window = None;
        }
    }

    /// Whether this is the `Rts` of a rendezvous send: while it is queued, the peer knows
    /// nothing of the send (neither its buffer's address nor its key).
    pub(crate) fn is_rts(&self) -> bool {
        matches!(Frame::decode(self.hdr.as_slice()), Ok((Frame::Rts { .. }, _)))
    }
}

/// Work the driver performs for the engine.
#[derive(Debug)]
pub(crate) enum Action {
    /// Fill `dst` from address `addr` (opened by `key`) in `peer`'s memory, then call
    /// [`Engine::on_bulk_read`].
    BulkRead { peer: usize, addr: u64, key: u64, dst: RawBufMut, rreq: ReqId },
    /// Write `src` to address `addr` in `peer`'s memory, then call [`Engine::on_bulk_write`].
    BulkWrite { peer: usize, addr: u64, src: RawBuf, sreq: ReqId, rreq: u64, off: usize },
    /// The send that exposed a buffer to `peer` under `key` is over: release the key.
    Conceal { peer: usize, key: u64 },
}

/// What a failed request had given its peer (see [`Engine::fail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exposure {
    /// The buffer's address: the peer may still read or write it.
    Address(usize),
    /// A key of the peer's transport: releasing it (`Transport::conceal`) revokes the access.
    Key(usize, u64),
}

#[derive(Debug)]
struct Posted {
    ctx: u32,
    src: Option<u32>,
    tag: Option<i32>,
    req: ReqId,
}

#[derive(Debug)]
enum Body {
    Eager(Vec<u8>),
    /// `head`: the first bytes of the message, which came with the `Rts`.
    Rts {
        peer: usize,
        offer: Offer,
        head: Vec<u8>,
    },
    SelfSend(ReqId),
}

/// What an `Rts` says of its send: the sender's request, and the address and key that let
/// the receiver read the buffer itself (`saddr` 0: it cannot).
#[derive(Clone, Copy, Debug)]
struct Offer {
    sreq: u64,
    saddr: u64,
    skey: u64,
}

#[derive(Debug)]
struct Unexpected {
    env: Envelope,
    len: usize,
    body: Body,
}

fn fits(e: &Envelope, ctx: u32, src: Option<u32>, tag: Option<i32>) -> bool {
    e.ctx == ctx && src.is_none_or(|s| s == e.src) && tag.is_none_or(|t| t == e.tag)
}

/// The smallest message split between sender and receiver in an exchange (both ways at
/// once between two ranks), where each side is already busy with the other's message.
const EXCHANGE_SPLIT_MIN: usize = 512 << 10;

/// Largest `Data` frame while the peer streams to us too. Both directions then share one
/// connection, and a rank writing a large frame reads nothing meanwhile: TCP on loopback, 2
/// ranks exchanging 2 MiB, 1 MiB frames took ~0.9-1.1 ms against ~0.7 for 256 KiB ones.
/// Alone, a stream keeps the largest frames (256 KiB ones made a 2-4 MiB ping-pong ~1.1-1.2x
/// slower).
const EXCHANGE_CHUNK: usize = 256 << 10;

/// Split point of a message copied by both sides: half, on a page boundary.
fn split_point(len: usize) -> usize {
    (len / 2) & !4095
}

/// One process's engine.
#[derive(Debug)]
pub(crate) struct Engine {
    me: usize,
    limits: Vec<PeerLimits>,
    reqs: Requests,
    posted: matching::Queues<Posted>,
    unexpected: matching::Queues<Unexpected>,
    /// Messages taken out of the unexpected queue by a matching probe (`MPI_Mprobe`), by
    /// key, until a receive of that message (`MPI_Mrecv`) takes them.
    matched: std::collections::HashMap<u64, Unexpected>,
    next_matched: u64,
    /// Buffers for the bytes of unexpected messages, reused.
    pool: pool::Pool,
    /// Frames to send, oldest first.
    pub(crate) outbox: VecDeque<Transmit>,
    /// Single-copy transfers to perform.
    pub(crate) actions: Vec<Action>,
    /// Wire ids of requests failed while the peer may still refer to them: late frames for
    /// these are dropped instead of being protocol errors.
    failed: std::collections::HashSet<u64>,
    /// Wire ids of sends that streamed the whole message and completed when its last frame
    /// went out: the receiver's `Fin` for them is still to come, and is then dropped.
    streamed: std::collections::HashSet<u64>,
    /// The one-sided windows this engine serves.
    rma: rma::Windows,
}

fn proto_err(peer: usize, what: &str) -> Error {
    Error::Transport(format!("protocol error from rank {peer}: {what}"))
}

impl Engine {
    /// An engine for world rank `me`; `limits[p]` describes the path to world rank `p`.
    pub(crate) fn new(me: usize, limits: Vec<PeerLimits>) -> Engine {
        Engine {
            me,
            limits,
            reqs: Requests::default(),
            posted: matching::Queues::default(),
            unexpected: matching::Queues::default(),
            matched: Default::default(),
            next_matched: 0,
            pool: pool::Pool::default(),
            outbox: VecDeque::new(),
            actions: Vec::new(),
            failed: Default::default(),
            streamed: Default::default(),
            rma: Default::default(),
        }
    }

    fn push(&mut self, peer: usize, f: Frame, payload: RawBuf, on_sent: Option<ReqId>) {
        self.outbox.push_back(Transmit::new(peer, f, payload, on_sent, on_sent));
    }

    /// Queues a frame of send `owner`; `done_when_sent`: the send is done once the transport
    /// takes it ([`Engine::on_sent`]).
    fn push_owned(&mut self, peer: usize, f: Frame, payload: RawBuf, owner: ReqId, done_when_sent: bool) {
        let on_sent = done_when_sent.then_some(owner);
        self.outbox.push_back(Transmit::new(peer, f, payload, on_sent, Some(owner)));
    }

    /// The result of a send that is done.
    fn sent(&self) -> Result<Status, Error> {
        Ok(self.sent_status())
    }

    /// The status of a send that is done.
    pub(crate) fn sent_status(&self) -> Status {
        Status { source: self.me, tag: 0, bytes: 0 }
    }

    /// Completes rendezvous send `id` to `peer` with `result`, concealing its buffer if it
    /// was exposed under `key`.
    fn finish_rndv_send(&mut self, id: ReqId, peer: usize, key: Option<u64>, result: Result<Status, Error>) {
        if let Some(key) = key {
            self.actions.push(Action::Conceal { peer, key });
        }
        self.reqs.complete(id, result);
    }

    /// Starts sending `buf` to world rank `peer` as `(ctx, src, tag)`.
    pub(crate) fn isend(&mut self, ctx: u32, src: u32, tag: i32, peer: usize, buf: RawBuf) -> ReqId {
        let env = Envelope { ctx, src, tag };
        if peer == self.me {
            return self.send_self(env, buf, false);
        }
        let lim = self.limits[peer];
        if buf.len() <= lim.eager.min(lim.max_payload) {
            let id = self.reqs.insert(State::SendEager { peer });
            self.push(peer, Frame::Eager(env), buf, Some(id));
            id
        } else {
            self.send_rndv(env, peer, buf)
        }
    }

    /// Starts a synchronous send (`MPI_Issend`): it completes once a receive has matched it,
    /// so it always goes as a rendezvous, whatever its size (the receiver's `Fin` ends it;
    /// to self, it waits in the unexpected queue until a receive takes it).
    pub(crate) fn issend(&mut self, ctx: u32, src: u32, tag: i32, peer: usize, buf: RawBuf) -> ReqId {
        let env = Envelope { ctx, src, tag };
        if peer == self.me {
            return self.send_self(env, buf, true);
        }
        self.send_rndv(env, peer, buf)
    }

    /// A rendezvous send: an `Rts` (with the first bytes, where they stream), the rest when
    /// the receiver asks or reads.
    fn send_rndv(&mut self, env: Envelope, peer: usize, buf: RawBuf) -> ReqId {
        let lim = self.limits[peer];
        // With a key to get first, the address goes in when the driver exposes the buffer.
        let direct = lim.bulk_read && !lim.expose;
        let head = lim.streamed_head().min(buf.len().saturating_sub(1));
        let id = self.reqs.insert(State::SendRndv { peer, buf, exposed: direct, key: None, head });
        let saddr = if direct { buf.addr() } else { 0 };
        let rts = Frame::Rts { env, len: buf.len() as u64, sreq: id.to_wire(), saddr, skey: 0 };
        self.push_owned(peer, rts, buf.slice(0, head), id, false);
        if lim.bulk_read && lim.expose {
            self.outbox.back_mut().expect("just pushed").expose = true;
        }
        id
    }

    /// The header of an eager message to `peer`, if a message of `len` bytes goes eagerly
    /// (for the driver's send-now path, which needs no request).
    pub(crate) fn eager_header(
        &self,
        ctx: u32,
        src: u32,
        tag: i32,
        peer: usize,
        len: usize,
    ) -> Option<[u8; wire::EAGER_LEN]> {
        let lim = &self.limits[peer];
        (peer != self.me && len <= lim.eager.min(lim.max_payload))
            .then(|| wire::eager_header(&Envelope { ctx, src, tag }))
    }

    /// A send to this rank: delivered to a posted receive at once, else copied into the
    /// unexpected queue if small (and not `sync`), else parked there until a receive takes it.
    fn send_self(&mut self, env: Envelope, buf: RawBuf, sync: bool) -> ReqId {
        let status = Status { source: env.src as usize, tag: env.tag, bytes: buf.len() };
        if let Some(i) = self.find_posted(&env) {
            let p = self.posted.take(i);
            self.deliver(p.req, status, buf.bytes());
            return self.reqs.insert(State::Done(Ok(status)));
        }
        let len = buf.len();
        if len <= self.limits[self.me].eager && !sync {
            let body = Body::Eager(self.pool.copy_of(buf.bytes()));
            self.unexpected.push(env.ctx, Some(env.src), Unexpected { env, len, body });
            self.reqs.insert(State::Done(Ok(status)))
        } else {
            let id = self.reqs.insert(State::SendSelf { buf });
            self.unexpected.push(env.ctx, Some(env.src), Unexpected { env, len, body: Body::SelfSend(id) });
            id
        }
    }

    /// Posts a receive into `buf` for `(ctx, src, tag)`; `None` selects any source or tag.
    /// `peer` is the world rank of a specific source (used for liveness).
    pub(crate) fn irecv(
        &mut self,
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
        peer: Option<usize>,
        buf: RawBufMut,
    ) -> ReqId {
        match self.start_recv(ctx, src, tag, peer, buf, false) {
            Started::Req(id) => id,
            Started::Done(_) => unreachable!("a receive started with a request"),
        }
    }

    /// As [`Engine::irecv`]; with `now`, a message already here whole (an eager one) that
    /// fits `buf` is received at once, with no request ([`Started::Done`]).
    pub(crate) fn start_recv(
        &mut self,
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
        peer: Option<usize>,
        buf: RawBufMut,
        now: bool,
    ) -> Started {
        // No message waits (a receive posted in time, the common case): no search. A context
        // keeps its queues once used, empty or not, so `find` would still look them up.
        let found = if self.unexpected.is_empty() {
            None
        } else {
            self.unexpected.find(ctx, src, false, |u| fits(&u.env, ctx, src, tag))
        };
        let Some(i) = found else {
            let id = self.reqs.insert(State::RecvPosted { buf, peer });
            self.posted.push(ctx, src, Posted { ctx, src, tag, req: id });
            return Started::Req(id);
        };
        let u = self.unexpected.take(i);
        self.receive_unexpected(u, peer, buf, now)
    }

    /// Receives unexpected message `u` into `buf` (as [`Engine::start_recv`] once matched).
    fn receive_unexpected(&mut self, u: Unexpected, peer: Option<usize>, buf: RawBufMut, now: bool) -> Started {
        let Unexpected { env, len, body } = u;
        let status = Status { source: env.src as usize, tag: env.tag, bytes: len };
        let body = match body {
            Body::Eager(data) if now && data.len() <= buf.len() => {
                let mut buf = buf;
                buf.write_at(0, &data);
                self.pool.give_back(data);
                return Started::Done(status);
            }
            body => body,
        };
        let id = self.reqs.insert(State::RecvPosted { buf, peer });
        match body {
            Body::Eager(data) => {
                self.deliver(id, status, &data);
                self.pool.give_back(data);
            }
            Body::Rts { peer, offer, head } => {
                self.start_rndv(id, peer, status, offer, &head);
                self.pool.give_back(head);
            }
            Body::SelfSend(sid) => {
                if let Some(State::SendSelf { buf: sbuf }) = self.reqs.get(sid) {
                    let sbuf = *sbuf;
                    self.deliver(id, status, sbuf.bytes());
                }
                self.reqs.complete(sid, Ok(status));
            }
        }
        Started::Req(id)
    }

    /// Takes the oldest unexpected message that fits the selector out of the queue, so that
    /// no other receive matches it (`MPI_Improbe`): its key for [`Engine::receive_matched`],
    /// and its status.
    pub(crate) fn take_matching(&mut self, ctx: u32, src: Option<u32>, tag: Option<i32>) -> Option<(u64, Status)> {
        let u = self.unexpected.take(self.unexpected.find(ctx, src, false, |u| fits(&u.env, ctx, src, tag))?);
        let status = Status { source: u.env.src as usize, tag: u.env.tag, bytes: u.len };
        self.next_matched += 1;
        self.matched.insert(self.next_matched, u);
        Some((self.next_matched, status))
    }

    /// Receives the message a matching probe took (`MPI_Mrecv`); `None` if `key` names none
    /// (received already).
    pub(crate) fn receive_matched(
        &mut self,
        key: u64,
        peer: Option<usize>,
        buf: RawBufMut,
        now: bool,
    ) -> Option<Started> {
        let u = self.matched.remove(&key)?;
        Some(self.receive_unexpected(u, peer, buf, now))
    }

    /// Withdraws request `id` if nothing has matched it yet (`MPI_Cancel`); it then completes
    /// with [`Error::Cancelled`]. A posted receive leaves the posted queue, and a large send
    /// to self the unexpected queue, at once. A rendezvous send recalls its `Rts`: it
    /// completes cancelled when the receiver answers that it dropped it, or as usual if a
    /// receive matched it first. Anything else goes on, as MPI allows: a matched receive, an
    /// eager send (its message may be in the receiver's queue already, and its frame names
    /// no request to recall).
    pub(crate) fn cancel(&mut self, id: ReqId) {
        let withdrawn = match self.reqs.get(id) {
            Some(State::RecvPosted { .. }) => self.posted.remove_where(|p| p.req == id).is_some(),
            // Not in the queue: a matching probe took it (`MPI_Mprobe`), and it goes on.
            Some(State::SendSelf { .. }) => {
                self.unexpected.remove_where(|u| matches!(u.body, Body::SelfSend(s) if s == id)).is_some()
            }
            Some(&State::SendRndv { peer, .. }) => {
                self.push_owned(peer, Frame::Recall { sreq: id.to_wire() }, RawBuf::EMPTY, id, false);
                false
            }
            _ => false,
        };
        if withdrawn {
            self.reqs.complete(id, Err(Error::Cancelled));
        }
    }

    /// `peer` recalls its rendezvous send `sreq`: dropped, with a `Fin` that says so, if its
    /// `Rts` still waits unmatched; else nothing (the transfer ends as usual).
    fn recall(&mut self, peer: usize, sreq: u64) {
        let theirs =
            |u: &Unexpected| matches!(u.body, Body::Rts { peer: p, offer, .. } if p == peer && offer.sreq == sreq);
        let Some(u) = self.unexpected.remove_where(theirs) else { return };
        if let Body::Rts { head, .. } = u.body {
            self.pool.give_back(head);
        }
        self.push(peer, Frame::Fin { sreq, flags: FLAG_CANCELLED }, RawBuf::EMPTY, None);
    }

    /// The status of the oldest unexpected message that fits the selector (`MPI_Iprobe`).
    pub(crate) fn probe(&self, ctx: u32, src: Option<u32>, tag: Option<i32>) -> Option<Status> {
        let u = self.unexpected.get(self.unexpected.find(ctx, src, false, |u| fits(&u.env, ctx, src, tag))?);
        Some(Status { source: u.env.src as usize, tag: u.env.tag, bytes: u.len })
    }

    #[inline(always)]
    fn find_posted(&self, env: &Envelope) -> Option<matching::Slot> {
        self.posted.find(env.ctx, Some(env.src), true, |p| fits(env, p.ctx, p.src, p.tag))
    }

    /// Completes receive `id` with a whole message `data`.
    fn deliver(&mut self, id: ReqId, status: Status, data: &[u8]) {
        let result = match self.reqs.get_mut(id) {
            Some(State::RecvPosted { buf, .. }) => {
                if buf.write_at(0, data) {
                    Ok(status)
                } else {
                    Err(Error::Truncate {
                        message: data.len(),
                        buffer: buf.len(),
                        source: status.source,
                        tag: status.tag,
                    })
                }
            }
            _ => return,
        };
        self.reqs.complete(id, result);
    }

    /// Receive `id` matched a rendezvous message from `peer`, whose `Rts` brought its first
    /// bytes `head`: pick how the rest comes.
    fn start_rndv(&mut self, id: ReqId, peer: usize, status: Status, offer: Offer, head: &[u8]) {
        let Offer { sreq, saddr, skey } = offer;
        let Some(State::RecvPosted { buf, .. }) = self.reqs.get(id) else { return };
        let mut buf = *buf;
        let len = status.bytes;
        if len > buf.len() {
            let e = Error::Truncate { message: len, buffer: buf.len(), source: status.source, tag: status.tag };
            self.reqs.complete(id, Err(e));
            self.push(peer, Frame::Fin { sreq, flags: FLAG_TRUNCATED }, RawBuf::EMPTY, None);
            return;
        }
        if len == 0 {
            // A synchronous send of nothing: matched is all it waits for.
            self.reqs.complete(id, Ok(status));
            self.push(peer, Frame::Fin { sreq, flags: 0 }, RawBuf::EMPTY, None);
            return;
        }
        if let Some(s) = self.reqs.get_mut(id) {
            *s = State::RecvRndv { buf, peer, got: 0, status, sreq: Some(sreq), exposed: false };
        }
        let lim = self.limits[peer];
        let rreq = id.to_wire();
        if saddr == 0 || !lim.bulk_read {
            let off = head.len();
            let cts = Frame::Cts { sreq, rreq, off: off as u64, len: (len - off) as u64, raddr: 0 };
            self.push(peer, cts, RawBuf::EMPTY, None);
            if off > 0 && buf.write_at(0, head) {
                self.add_received(id, off);
            }
            return;
        }
        // In an exchange (a rendezvous send to the same peer in flight) the sender is busy
        // copying our message's twin, so asking it to help costs a round trip and saves no
        // time, except for large messages.
        let split_min = lim.split_min.max(EXCHANGE_SPLIT_MIN);
        let split = if lim.bulk_write && len >= lim.split_min && (len >= split_min || !self.reqs.sending_to(peer)) {
            split_point(len)
        } else {
            len
        };
        if split < len {
            if let Some(State::RecvRndv { exposed, .. }) = self.reqs.get_mut(id) {
                *exposed = true;
            }
            // The sender writes the tail while we read the head.
            let raddr = buf.prefix(len).addr_at(split);
            let cts = Frame::Cts { sreq, rreq, off: split as u64, len: (len - split) as u64, raddr };
            self.push(peer, cts, RawBuf::EMPTY, None);
        }
        self.actions.push(Action::BulkRead { peer, addr: saddr, key: skey, dst: buf.prefix(split), rreq: id });
    }

    /// The buffer a queued `Rts` (with [`Transmit::expose`]) announces, while its send is live.
    pub(crate) fn to_expose(&self, t: &Transmit) -> Option<RawBuf> {
        match t.owner.and_then(|id| self.reqs.get(id)) {
            Some(State::SendRndv { buf, key: None, .. }) if t.expose => Some(*buf),
            _ => None,
        }
    }

    /// The driver exposed the buffer of `t`'s send under `key` (or could not: `None`, and the
    /// bytes are streamed): writes the address and key into the `Rts`.
    pub(crate) fn on_exposed(&mut self, t: &mut Transmit, key: Option<u64>) {
        t.expose = false;
        let Some(k) = key else { return };
        let Some(State::SendRndv { buf, exposed, key, .. }) = t.owner.and_then(|id| self.reqs.get_mut(id)) else {
            return;
        };
        let Ok((Frame::Rts { env, len, sreq, .. }, _)) = Frame::decode(t.hdr.as_slice()) else { return };
        (*exposed, *key) = (true, Some(k));
        t.hdr = Frame::Rts { env, len, sreq, saddr: buf.addr(), skey: k }.encode();
    }

    /// The driver finished (or failed) an [`Action::BulkRead`] of `n` bytes.
    pub(crate) fn on_bulk_read(&mut self, peer: usize, rreq: ReqId, n: usize, ok: bool) {
        let Some(&State::RecvRndv { sreq: Some(sreq), .. }) = self.reqs.get(rreq) else { return };
        if ok {
            self.add_received(rreq, n);
        } else {
            // No single copy to this peer after all (e.g. ptrace rules): have it streamed.
            self.limits[peer].bulk_read = false;
            let cts = Frame::Cts { sreq, rreq: rreq.to_wire(), off: 0, len: n as u64, raddr: 0 };
            self.push(peer, cts, RawBuf::EMPTY, None);
        }
    }

    /// The driver finished (or failed) an [`Action::BulkWrite`] of `n` bytes at `off`.
    pub(crate) fn on_bulk_write(&mut self, peer: usize, sreq: ReqId, rreq: u64, off: usize, n: usize, ok: bool) {
        if ok {
            self.push(peer, Frame::Written { rreq, len: n as u64 }, RawBuf::EMPTY, None);
            return;
        }
        self.limits[peer].bulk_write = false;
        self.stream(peer, sreq, rreq, off, n);
    }

    /// Queues bytes `off..off+n` of send `sreq` as `Data` frames for receive `rreq`: in
    /// frames as large as the peer takes, or, in an exchange (the peer streams to us too), of
    /// at most `EXCHANGE_CHUNK` bytes. When they are the rest of the message (all of it but
    /// the head its `Rts` carried), the send completes as soon as the transport has taken
    /// the last one (see [`Engine::on_sent`]): the receiver already matched it, so only the
    /// receiver's `Fin` is left, and the sender need not wait while the receiver reads (a
    /// broadcast's root, a window of large sends).
    fn stream(&mut self, peer: usize, sreq: ReqId, rreq: u64, off: usize, n: usize) {
        let Some(&State::SendRndv { buf, head, .. }) = self.reqs.get(sreq) else { return };
        let mut chunk = self.limits[peer].max_payload.max(1);
        if self.reqs.receiving_from(peer) {
            chunk = chunk.min(EXCHANGE_CHUNK);
        }
        let (end, whole) = (off + n, off <= head && off + n == buf.len());
        let mut at = off;
        while at < end {
            let k = chunk.min(end - at);
            let last = at + k == end;
            self.push_owned(peer, Frame::Data { rreq, off: at as u64 }, buf.slice(at, k), sreq, whole && last);
            at += k;
        }
    }

    /// `n` more bytes of rendezvous receive `rreq` are in; finishes it when all are.
    fn add_received(&mut self, rreq: ReqId, n: usize) {
        let Some(State::RecvRndv { got, status, peer, sreq, .. }) = self.reqs.get_mut(rreq) else { return };
        *got += n;
        if *got >= status.bytes {
            let (st, peer, sreq) = (*status, *peer, *sreq);
            self.reqs.complete(rreq, Ok(st));
            if let Some(sreq) = sreq {
                self.push(peer, Frame::Fin { sreq, flags: 0 }, RawBuf::EMPTY, None);
            }
        }
    }

    /// The transport took the frame that named `id` in `on_sent`: an eager send's frame, or
    /// the last frame of a send that streamed its whole message.
    pub(crate) fn on_sent(&mut self, id: ReqId) {
        match self.reqs.get(id) {
            Some(State::SendEager { .. }) => self.reqs.complete(id, self.sent()),
            Some(&State::SendRndv { peer, key, .. }) => {
                self.streamed.insert(id.to_wire());
                self.finish_rndv_send(id, peer, key, self.sent());
            }
            _ => {}
        }
    }

    /// A frame arrived from world rank `peer`.
    pub(crate) fn on_frame(&mut self, peer: usize, frame: &[u8]) -> Result<(), Error> {
        let (f, payload) = Frame::decode(frame).map_err(|e| proto_err(peer, &e.to_string()))?;
        if !self.failed.is_empty() {
            let id = match f {
                Frame::Cts { sreq, .. } | Frame::Fin { sreq, .. } => Some(sreq),
                Frame::Data { rreq, .. } | Frame::Written { rreq, .. } => Some(rreq),
                Frame::Reply { oreq, .. } => Some(oreq),
                _ => None,
            };
            if id.is_some_and(|id| self.failed.contains(&id)) {
                return Ok(());
            }
        }
        match f {
            Frame::Eager(env) => {
                let status = Status { source: env.src as usize, tag: env.tag, bytes: payload.len() };
                match self.find_posted(&env) {
                    Some(i) => {
                        let p = self.posted.take(i);
                        self.deliver(p.req, status, payload);
                    }
                    None => {
                        let u = Unexpected { env, len: payload.len(), body: Body::Eager(self.pool.copy_of(payload)) };
                        self.unexpected.push(env.ctx, Some(env.src), u);
                    }
                }
            }
            Frame::Rts { env, len, sreq, saddr, skey } => {
                // (An empty message goes as a rendezvous only when synchronous.)
                if (len > 0 && payload.len() as u64 >= len) || (saddr != 0 && !payload.is_empty()) {
                    return Err(proto_err(peer, "RTS carrying the whole message, or bytes it lets us read"));
                }
                let status = Status { source: env.src as usize, tag: env.tag, bytes: len as usize };
                match self.find_posted(&env) {
                    Some(i) => {
                        let p = self.posted.take(i);
                        self.start_rndv(p.req, peer, status, Offer { sreq, saddr, skey }, payload);
                    }
                    None => {
                        let body =
                            Body::Rts { peer, offer: Offer { sreq, saddr, skey }, head: self.pool.copy_of(payload) };
                        self.unexpected.push(env.ctx, Some(env.src), Unexpected { env, len: len as usize, body });
                    }
                }
            }
            Frame::Cts { sreq, rreq, off, len, raddr } => {
                let sid = ReqId::from_wire(sreq);
                let Some(State::SendRndv { buf, .. }) = self.reqs.get(sid) else {
                    return Err(proto_err(peer, "CTS for no pending send"));
                };
                let buf = *buf;
                let (off, n) = (off as usize, len as usize);
                if off.checked_add(n).is_none_or(|end| end > buf.len()) {
                    return Err(proto_err(peer, "CTS for bytes outside the message"));
                }
                if raddr != 0 && self.limits[peer].bulk_write {
                    let src = buf.slice(off, n);
                    self.actions.push(Action::BulkWrite { peer, addr: raddr, src, sreq: sid, rreq, off });
                } else {
                    self.stream(peer, sid, rreq, off, n);
                }
            }
            Frame::Data { rreq, off } => {
                let rid = ReqId::from_wire(rreq);
                let Some(State::RecvRndv { buf, status, .. }) = self.reqs.get_mut(rid) else {
                    return Err(proto_err(peer, "data for no pending receive"));
                };
                let off = off as usize;
                if off.saturating_add(payload.len()) > status.bytes || !buf.write_at(off, payload) {
                    return Err(proto_err(peer, "data outside the message"));
                }
                self.add_received(rid, payload.len());
            }
            Frame::Written { rreq, len } => {
                let rid = ReqId::from_wire(rreq);
                match self.reqs.get(rid) {
                    Some(State::RecvRndv { got, status, .. }) if *got + len as usize <= status.bytes => {}
                    _ => return Err(proto_err(peer, "write notice for no pending receive")),
                }
                self.add_received(rid, len as usize);
            }
            Frame::Put { .. }
            | Frame::Get { .. }
            | Frame::Fetch { .. }
            | Frame::Cas { .. }
            | Frame::Reply { .. }
            | Frame::Ctl { .. } => return self.on_rma_frame(peer, f, payload),
            Frame::Recall { sreq } => self.recall(peer, sreq),
            Frame::Fin { sreq, flags } => {
                let sid = ReqId::from_wire(sreq);
                match self.reqs.get(sid) {
                    Some(&State::SendRndv { key, .. }) => {
                        let result = if flags & FLAG_CANCELLED != 0 { Err(Error::Cancelled) } else { self.sent() };
                        self.finish_rndv_send(sid, peer, key, result)
                    }
                    _ if self.streamed.remove(&sreq) => {}
                    _ => return Err(proto_err(peer, "FIN for no pending send")),
                }
            }
        }
        Ok(())
    }

    /// Whether request `id` has finished (or was already collected).
    pub(crate) fn is_done(&self, id: ReqId) -> bool {
        matches!(self.reqs.get(id), Some(State::Done(_)) | None)
    }

    /// The result of finished request `id`, left to be collected (`MPI_Request_get_status`);
    /// `None` while it is in flight or once collected.
    pub(crate) fn peek(&self, id: ReqId) -> Option<Result<Status, Error>> {
        match self.reqs.get(id) {
            Some(State::Done(r)) => Some(r.clone()),
            _ => None,
        }
    }

    /// Whether request `id` was collected with [`Engine::take`] (or never existed).
    pub(crate) fn is_collected(&self, id: ReqId) -> bool {
        self.reqs.get(id).is_none()
    }

    /// Takes the result of a finished request, freeing it. `None` while it is in flight.
    pub(crate) fn take(&mut self, id: ReqId) -> Option<Result<Status, Error>> {
        self.reqs.take_done(id)
    }

    /// Gives request `id` the memory it sends from or receives into ([`Staging`]).
    pub(crate) fn stage(&mut self, id: ReqId, staging: Staging) {
        self.reqs.stage(id, staging);
    }

    /// Nobody will collect request `id` (`MPI_Request_free`): it goes on, and is dropped
    /// when it ends.
    pub(crate) fn detach(&mut self, id: ReqId) {
        self.reqs.detach(id);
    }

    /// The world rank request `id` waits on, if it waits on one peer.
    pub(crate) fn waits_on(&self, id: ReqId) -> Option<usize> {
        self.reqs.get(id)?.peer()
    }

    /// Fails request `id` (e.g. its peer is gone or a wait timed out): nothing of it happens
    /// afterwards. It leaves the posted queue; its queued frames are dropped (none leaves
    /// after its failure); its single-copy transfers not yet performed are dropped (no byte
    /// lands in or leaves its buffer); a large send to self leaves the unexpected queue (no
    /// receive matches a message whose sender gave up); later frames for it are ignored.
    /// Returns what the request's peer was given, if anything: that peer may still read or
    /// write the buffer. The request stays, done with `err`, until it is collected.
    pub(crate) fn fail(&mut self, id: ReqId, err: Error) -> Option<Exposure> {
        let exposed = match self.reqs.get(id) {
            Some(&State::SendRndv { peer, key: Some(k), .. }) => Some(Exposure::Key(peer, k)),
            Some(State::SendRndv { peer, exposed: true, .. }) | Some(State::RecvRndv { peer, exposed: true, .. }) => {
                Some(Exposure::Address(*peer))
            }
            _ => None,
        };
        match self.reqs.get(id) {
            Some(&State::RmaAnswer { peer, .. }) => {
                // Its answer will not come: the origin awaits it no more.
                self.awaited(peer).1 += 1;
                self.failed.insert(id.to_wire());
            }
            Some(State::SendRndv { .. } | State::RecvRndv { .. }) => {
                self.failed.insert(id.to_wire());
            }
            Some(State::SendSelf { .. }) => {
                self.unexpected.retain(|u| !matches!(u.body, Body::SelfSend(s) if s == id));
            }
            _ => {}
        }
        self.outbox.retain(|t| t.owner != Some(id));
        self.actions.retain(|a| match *a {
            Action::BulkRead { rreq, .. } => rreq != id,
            Action::BulkWrite { sreq, .. } => sreq != id,
            Action::Conceal { .. } => true,
        });
        self.posted.retain(|p| p.req != id);
        self.reqs.complete(id, Err(err));
        exposed
    }

    /// The requests in flight that wait on `peer` alone (see [`Engine::waits_on`]): what a
    /// broken path to `peer` fails. A scan of the live requests, for the error path.
    pub(crate) fn waiting_on(&self, peer: usize) -> Vec<ReqId> {
        self.reqs.ids_where(|s| s.peer() == Some(peer))
    }

    /// Requests in flight or not yet collected.
    #[cfg(test)]
    pub(crate) fn live_requests(&self) -> usize {
        self.reqs.len()
    }
}

impl Engine {
    /// The first `n` bytes of a message of `len` from `peer` are arriving (an eager message,
    /// `sreq` `None`, or the head of rendezvous send `sreq`): if a posted receive matches it
    /// and has room, the transport may read them straight into that buffer. Matching now
    /// keeps the order, as the frames before this one from `peer` are all delivered. A
    /// rendezvous asks for the rest at once, while the head arrives.
    fn place_head(
        &mut self,
        peer: usize,
        env: Envelope,
        len: usize,
        n: usize,
        sreq: Option<u64>,
    ) -> Option<(u64, RawBufMut)> {
        let i = self.find_posted(&env)?;
        let req = self.posted.get(i).req;
        let Some(&State::RecvPosted { buf, .. }) = self.reqs.get(req) else { return None };
        // Too long for the buffer (or a head that is the whole message): the ordinary path
        // reports it.
        if len > buf.len() || (sreq.is_some() && n >= len) {
            return None;
        }
        self.posted.take(i);
        let status = Status { source: env.src as usize, tag: env.tag, bytes: len };
        *self.reqs.get_mut(req)? = State::RecvRndv { buf, peer, got: 0, status, sreq, exposed: false };
        let rreq = req.to_wire();
        if let Some(sreq) = sreq {
            let cts = Frame::Cts { sreq, rreq, off: n as u64, len: (len - n) as u64, raddr: 0 };
            self.push(peer, cts, RawBuf::EMPTY, None);
        }
        Some((rreq, buf.window(0, n)))
    }
}

impl crate::transport::Sink for Engine {
    fn frame(&mut self, peer: usize, frame: &[u8]) -> Result<(), Error> {
        self.on_frame(peer, frame)
    }

    fn place(&mut self, peer: usize, head: &[u8], frame_len: usize) -> Option<(usize, u64, RawBufMut)> {
        let (f, payload) = Frame::decode(head).ok()?;
        let hlen = head.len() - payload.len();
        let n = frame_len.checked_sub(hlen)?;
        let (rreq, off) = match f {
            Frame::Data { rreq, off } => (rreq, off),
            Frame::Eager(env) => return self.place_head(peer, env, n, n, None).map(|(token, dst)| (hlen, token, dst)),
            Frame::Rts { env, len, sreq, saddr: 0, .. } => {
                let len = usize::try_from(len).ok()?;
                return self.place_head(peer, env, len, n, Some(sreq)).map(|(token, dst)| (hlen, token, dst));
            }
            Frame::Reply { oreq, off, flags: 0 } => {
                return self.place_answer(oreq, off, n).map(|dst| (hlen, oreq, dst))
            }
            _ => return None,
        };
        let Some(State::RecvRndv { buf, status, .. }) = self.reqs.get(ReqId::from_wire(rreq)) else { return None };
        let off = off as usize;
        if off.checked_add(n)? > status.bytes {
            return None;
        }
        let mut buf = *buf;
        buf.range_mut(off, n)?;
        Some((hlen, rreq, buf.window(off, n)))
    }

    fn placement_live(&self, token: u64) -> bool {
        matches!(self.reqs.get(ReqId::from_wire(token)), Some(State::RecvRndv { .. } | State::RmaAnswer { .. }))
    }

    fn placed(&mut self, peer: usize, token: u64, n: usize) -> Result<(), Error> {
        let id = ReqId::from_wire(token);
        match self.reqs.get(id) {
            Some(State::RecvRndv { .. }) => self.add_received(id, n),
            Some(State::RmaAnswer { .. }) => self.answer_landed(peer, id, n),
            _ => return Err(proto_err(peer, "data placed for no pending receive")),
        }
        Ok(())
    }

    fn remote_done(&mut self, peer: usize, token: u64, result: Result<Option<&[u8]>, Error>) {
        self.on_remote_done(peer, token, result);
    }
}

#[cfg(test)]
mod tests;
