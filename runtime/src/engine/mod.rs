//! The progress engine: tag matching, eager and rendezvous protocols, request state machines.
//!
//! Sans-I/O (STYLE.md): the engine never touches a socket, a ring or a clock. Calls go in
//! (`isend`, `irecv`, `on_frame`, `on_sent`, `on_bulk_read`), and what must happen next comes
//! out through two queues the driver drains: [`Engine::outbox`] (frames to hand to a
//! transport, in order per peer) and [`Engine::actions`] (single-copy reads to perform).
//!
//! Invariants:
//! - Messages from one sender on one communicator match receives in the order they were sent
//!   (transports deliver frames of a peer in order; queues here are FIFO).
//! - A receive matches the oldest message that fits its (context, source, tag) selector;
//!   a message matches the oldest posted receive whose selector it fits (MPI 4.1, 3.5).
//! - A send buffer is never touched after its request is `Done`; a receive buffer likewise.

pub(crate) mod request;
pub(crate) mod wire;

use std::collections::VecDeque;

use crate::buf::{RawBuf, RawBufMut};
use crate::error::Error;
use crate::status::Status;
pub(crate) use request::ReqId;
use request::{Requests, State};
use wire::{Header, Kind, FLAG_TRUNCATED, HEADER_LEN};

/// What the engine needs to know about the path to one peer (from its transport's caps).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerLimits {
    /// Largest payload of one frame.
    pub(crate) max_payload: usize,
    /// Messages up to this size go eagerly.
    pub(crate) eager: usize,
    /// The transport can read the peer's memory directly (single copy).
    pub(crate) bulk_read: bool,
}

/// A frame for the driver to hand to the transport of `peer`.
#[derive(Debug)]
pub(crate) struct Transmit {
    pub(crate) peer: usize,
    pub(crate) hdr: [u8; HEADER_LEN],
    pub(crate) payload: RawBuf,
    /// Request to notify (with [`Engine::on_sent`]) once the transport has taken the frame.
    pub(crate) on_sent: Option<ReqId>,
}

/// Work the driver performs for the engine.
#[derive(Debug)]
pub(crate) enum Action {
    /// Read `dst.len()` bytes at `addr` in `peer`'s memory into `dst`, then call
    /// [`Engine::on_bulk_read`].
    BulkRead {
        peer: usize,
        addr: u64,
        dst: RawBufMut,
        rreq: ReqId,
        sreq: u64,
    },
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
    Rts { peer: usize, sreq: u64, addr: u64 },
    SelfSend(ReqId),
}

#[derive(Debug)]
struct Unexpected {
    ctx: u32,
    src: u32,
    tag: i32,
    len: usize,
    body: Body,
}

fn fits(
    ctx: u32,
    src: u32,
    tag: i32,
    want_ctx: u32,
    want_src: Option<u32>,
    want_tag: Option<i32>,
) -> bool {
    ctx == want_ctx && want_src.is_none_or(|s| s == src) && want_tag.is_none_or(|t| t == tag)
}

/// One process's engine.
#[derive(Debug)]
pub(crate) struct Engine {
    me: usize,
    limits: Vec<PeerLimits>,
    reqs: Requests,
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Unexpected>,
    /// Frames to send, oldest first.
    pub(crate) outbox: VecDeque<Transmit>,
    /// Single-copy reads to perform.
    pub(crate) actions: Vec<Action>,
}

impl Engine {
    /// An engine for world rank `me`; `limits[p]` describes the path to world rank `p`.
    pub(crate) fn new(me: usize, limits: Vec<PeerLimits>) -> Engine {
        Engine {
            me,
            limits,
            reqs: Requests::default(),
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            outbox: VecDeque::new(),
            actions: Vec::new(),
        }
    }

    /// Starts sending `buf` to world rank `peer` as `(ctx, src, tag)`.
    pub(crate) fn isend(
        &mut self,
        ctx: u32,
        src: u32,
        tag: i32,
        peer: usize,
        buf: RawBuf,
    ) -> ReqId {
        if peer == self.me {
            return self.send_self(ctx, src, tag, buf);
        }
        let lim = self.limits[peer];
        let mut h = Header::new(Kind::Eager);
        h.ctx = ctx;
        h.src = src;
        h.tag = tag;
        h.len = buf.len() as u64;
        if buf.len() <= lim.eager.min(lim.max_payload) {
            let id = self.reqs.insert(State::SendEager { peer });
            self.outbox.push_back(Transmit {
                peer,
                hdr: h.encode(),
                payload: buf,
                on_sent: Some(id),
            });
            id
        } else {
            let id = self.reqs.insert(State::SendRndv { peer, buf });
            h.kind = Kind::Rts;
            h.a = id.to_wire();
            h.b = if lim.bulk_read { buf.addr() } else { 0 };
            self.outbox.push_back(Transmit {
                peer,
                hdr: h.encode(),
                payload: RawBuf::EMPTY,
                on_sent: None,
            });
            id
        }
    }

    fn send_self(&mut self, ctx: u32, src: u32, tag: i32, buf: RawBuf) -> ReqId {
        let status = Status {
            source: src as usize,
            tag,
            bytes: buf.len(),
        };
        if let Some(i) = self.find_posted(ctx, src, tag) {
            let p = self.posted.remove(i).expect("index from find_posted");
            self.deliver(p.req, status, buf.bytes());
            return self.reqs.insert(State::Done(Ok(status)));
        }
        let lim_eager = self.limits[self.me].eager;
        let len = buf.len();
        if len <= lim_eager {
            let body = Body::Eager(buf.bytes().to_vec());
            self.unexpected.push_back(Unexpected {
                ctx,
                src,
                tag,
                len,
                body,
            });
            self.reqs.insert(State::Done(Ok(status)))
        } else {
            let id = self.reqs.insert(State::SendSelf { buf });
            self.unexpected.push_back(Unexpected {
                ctx,
                src,
                tag,
                len,
                body: Body::SelfSend(id),
            });
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
        let id = self.reqs.insert(State::RecvPosted { buf, peer });
        if let Some(i) = self
            .unexpected
            .iter()
            .position(|u| fits(u.ctx, u.src, u.tag, ctx, src, tag))
        {
            let u = self.unexpected.remove(i).expect("index from position");
            let status = Status {
                source: u.src as usize,
                tag: u.tag,
                bytes: u.len,
            };
            match u.body {
                Body::Eager(data) => self.deliver(id, status, &data),
                Body::Rts { peer, sreq, addr } => self.start_rndv(id, peer, status, sreq, addr),
                Body::SelfSend(sid) => {
                    if let Some(State::SendSelf { buf: sbuf }) = self.reqs.get(sid) {
                        let sbuf = *sbuf;
                        self.deliver(id, status, sbuf.bytes());
                    }
                    self.reqs.complete(sid, Ok(status));
                }
            }
        } else {
            self.posted.push_back(Posted {
                ctx,
                src,
                tag,
                req: id,
            });
        }
        id
    }

    /// The status of the oldest unexpected message that fits the selector (`MPI_Iprobe`).
    pub(crate) fn probe(&self, ctx: u32, src: Option<u32>, tag: Option<i32>) -> Option<Status> {
        self.unexpected
            .iter()
            .find(|u| fits(u.ctx, u.src, u.tag, ctx, src, tag))
            .map(|u| Status {
                source: u.src as usize,
                tag: u.tag,
                bytes: u.len,
            })
    }

    fn find_posted(&self, ctx: u32, src: u32, tag: i32) -> Option<usize> {
        self.posted
            .iter()
            .position(|p| fits(ctx, src, tag, p.ctx, p.src, p.tag))
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
                    })
                }
            }
            _ => return,
        };
        self.reqs.complete(id, result);
    }

    /// Receive `id` matched a rendezvous message from `peer`.
    fn start_rndv(&mut self, id: ReqId, peer: usize, status: Status, sreq: u64, addr: u64) {
        let Some(State::RecvPosted { buf, .. }) = self.reqs.get_mut(id) else {
            return;
        };
        let buf = *buf;
        if status.bytes > buf.len() {
            self.reqs.complete(
                id,
                Err(Error::Truncate {
                    message: status.bytes,
                    buffer: buf.len(),
                }),
            );
            let mut h = Header::new(Kind::Fin);
            h.a = sreq;
            h.flags = FLAG_TRUNCATED;
            self.push_control(peer, h);
            return;
        }
        if let Some(s) = self.reqs.get_mut(id) {
            *s = State::RecvRndv {
                buf,
                peer,
                got: 0,
                status,
            };
        }
        if addr != 0 && self.limits[peer].bulk_read {
            let dst = buf.prefix(status.bytes);
            self.actions.push(Action::BulkRead {
                peer,
                addr,
                dst,
                rreq: id,
                sreq,
            });
        } else {
            self.send_cts(peer, sreq, id);
        }
    }

    fn send_cts(&mut self, peer: usize, sreq: u64, rreq: ReqId) {
        let mut h = Header::new(Kind::Cts);
        h.a = sreq;
        h.b = rreq.to_wire();
        self.push_control(peer, h);
    }

    fn push_control(&mut self, peer: usize, h: Header) {
        self.outbox.push_back(Transmit {
            peer,
            hdr: h.encode(),
            payload: RawBuf::EMPTY,
            on_sent: None,
        });
    }

    /// The driver finished (or failed) a [`Action::BulkRead`].
    pub(crate) fn on_bulk_read(&mut self, peer: usize, rreq: ReqId, sreq: u64, ok: bool) {
        if !ok {
            // No single copy to this peer after all (e.g. ptrace rules): stream instead.
            self.limits[peer].bulk_read = false;
            self.send_cts(peer, sreq, rreq);
            return;
        }
        if let Some(State::RecvRndv { status, .. }) = self.reqs.get(rreq) {
            let status = *status;
            self.reqs.complete(rreq, Ok(status));
        }
        let mut h = Header::new(Kind::Fin);
        h.a = sreq;
        self.push_control(peer, h);
    }

    /// The transport took the frame that named `id` in `on_sent`.
    pub(crate) fn on_sent(&mut self, id: ReqId) {
        let status = match self.reqs.get(id) {
            Some(State::SendEager { .. }) | Some(State::SendStreaming { .. }) => Status {
                source: self.me,
                tag: 0,
                bytes: 0,
            },
            _ => return,
        };
        self.reqs.complete(id, Ok(status));
    }

    /// A frame arrived from world rank `peer`.
    pub(crate) fn on_frame(&mut self, peer: usize, frame: &[u8]) -> Result<(), Error> {
        let (h, payload) = Header::decode(frame)
            .map_err(|e| Error::Transport(format!("bad frame from rank {peer}: {e}")))?;
        match h.kind {
            Kind::Eager | Kind::Rts => {
                let status = Status {
                    source: h.src as usize,
                    tag: h.tag,
                    bytes: h.len as usize,
                };
                if h.kind == Kind::Eager && payload.len() as u64 != h.len {
                    return Err(Error::Transport(format!(
                        "eager frame from rank {peer} carries {} bytes but announces {}",
                        payload.len(),
                        h.len
                    )));
                }
                match self.find_posted(h.ctx, h.src, h.tag) {
                    Some(i) => {
                        let p = self.posted.remove(i).expect("index from find_posted");
                        if h.kind == Kind::Eager {
                            self.deliver(p.req, status, payload);
                        } else {
                            self.start_rndv(p.req, peer, status, h.a, h.b);
                        }
                    }
                    None => {
                        let body = if h.kind == Kind::Eager {
                            Body::Eager(payload.to_vec())
                        } else {
                            Body::Rts {
                                peer,
                                sreq: h.a,
                                addr: h.b,
                            }
                        };
                        let u = Unexpected {
                            ctx: h.ctx,
                            src: h.src,
                            tag: h.tag,
                            len: h.len as usize,
                            body,
                        };
                        self.unexpected.push_back(u);
                    }
                }
            }
            Kind::Cts => {
                let sid = ReqId::from_wire(h.a);
                let Some(State::SendRndv { peer: p, buf }) = self.reqs.get(sid) else {
                    return Err(Error::Transport(format!(
                        "rank {peer} sent a CTS for no pending send"
                    )));
                };
                let (p, buf) = (*p, *buf);
                if let Some(s) = self.reqs.get_mut(sid) {
                    *s = State::SendStreaming { peer: p };
                }
                let chunk = self.limits[p].max_payload.max(1);
                let mut off = 0;
                while off < buf.len() {
                    let n = chunk.min(buf.len() - off);
                    let mut d = Header::new(Kind::Data);
                    d.a = h.b;
                    d.b = off as u64;
                    let last = off + n == buf.len();
                    self.outbox.push_back(Transmit {
                        peer: p,
                        hdr: d.encode(),
                        payload: buf.slice(off, n),
                        on_sent: last.then_some(sid),
                    });
                    off += n;
                }
            }
            Kind::Data => {
                let rid = ReqId::from_wire(h.a);
                let Some(State::RecvRndv {
                    buf, got, status, ..
                }) = self.reqs.get_mut(rid)
                else {
                    return Err(Error::Transport(format!(
                        "rank {peer} sent data for no pending receive"
                    )));
                };
                if h.b as usize + payload.len() > status.bytes
                    || !buf.write_at(h.b as usize, payload)
                {
                    return Err(Error::Transport(format!(
                        "rank {peer} sent data outside the message"
                    )));
                }
                *got += payload.len();
                if *got == status.bytes {
                    let st = *status;
                    self.reqs.complete(rid, Ok(st));
                }
            }
            Kind::Fin => {
                let sid = ReqId::from_wire(h.a);
                match self.reqs.get(sid) {
                    Some(State::SendRndv { .. }) => {
                        let st = Status {
                            source: self.me,
                            tag: 0,
                            bytes: 0,
                        };
                        self.reqs.complete(sid, Ok(st));
                    }
                    _ => {
                        return Err(Error::Transport(format!(
                            "rank {peer} sent a FIN for no pending send"
                        )))
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether request `id` has finished.
    pub(crate) fn is_done(&self, id: ReqId) -> bool {
        matches!(self.reqs.get(id), Some(State::Done(_)) | None)
    }

    /// Whether request `id` was collected with [`Engine::take`] (or never existed).
    pub(crate) fn is_collected(&self, id: ReqId) -> bool {
        self.reqs.get(id).is_none()
    }

    /// Takes the result of a finished request, freeing it. `None` while it is in flight.
    pub(crate) fn take(&mut self, id: ReqId) -> Option<Result<Status, Error>> {
        self.reqs.take_done(id)
    }

    /// The world rank request `id` waits on, if it waits on one peer.
    pub(crate) fn waits_on(&self, id: ReqId) -> Option<usize> {
        match self.reqs.get(id)? {
            State::SendEager { peer }
            | State::SendRndv { peer, .. }
            | State::SendStreaming { peer } => Some(*peer),
            State::RecvPosted { peer, .. } => *peer,
            State::RecvRndv { peer, .. } => Some(*peer),
            State::SendSelf { .. } | State::Done(_) => None,
        }
    }

    /// Fails request `id` (e.g. its peer is gone), removing it from the posted queue.
    pub(crate) fn fail(&mut self, id: ReqId, err: Error) {
        self.posted.retain(|p| p.req != id);
        self.reqs.complete(id, Err(err));
    }

    /// Requests in flight or not yet collected.
    #[cfg(test)]
    pub(crate) fn live_requests(&self) -> usize {
        self.reqs.len()
    }
}

#[cfg(test)]
mod tests;
