//! Receive side of a queue pair: datagrams from the socket, message assembly, RDMA service.
//!
//! UC takes frames as they come: a message goes into the receive at the head of the queue
//! when its first frame arrives, or is dropped whole if none is posted (no receiver-not-ready
//! retry), if it is longer than that receive or spans another number of 4 KiB frames (which
//! completes the receive with a length error, TN3205), or if
//! one of its frames is missing (the receive stays posted for the next message). RC takes
//! frames strictly in psn order and NAKs the rest; a SEND finding no receive is refused with
//! a receiver-not-ready NAK and comes again; WRITE and READ requests are checked against the
//! regions' bounds and rkeys and refused with an access NAK.

use std::io::ErrorKind;
use std::time::Instant;

use super::super::super::provider::{Opcode, WcStatus};
use super::super::wire::{frames, Header, Kind, Nak, FRAME};
use super::super::Ctx;
use super::{before, Incoming, Qp, ReadResp, SendWr, State, ACK_EVERY, LOC_PROT_ERR};

/// Datagrams read per call, so that one busy queue pair does not hold the device lock long.
const BATCH: usize = 64;

impl Qp {
    /// Reads and handles datagrams; true if more may be waiting in the socket.
    pub(in super::super) fn receive(&mut self, ctx: &mut Ctx, buf: &mut [u8], now: Instant) -> bool {
        for _ in 0..BATCH {
            let (n, from) = match self.sock.recv_from(buf) {
                Ok(got) => got,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.end_batch(ctx);
                    return false;
                }
                // ECONNREFUSED and the like: an ICMP error about an earlier send, not data.
                Err(_) => continue,
            };
            if self.state != State::Ready || Some(from) != self.peer {
                ctx.stats.strays += 1;
                continue;
            }
            match Header::decode(&buf[..n]) {
                Some((h, payload)) if h.rc == self.rc() => self.on_frame(ctx, &h, payload, now),
                _ => ctx.stats.strays += 1,
            }
        }
        self.end_batch(ctx);
        true
    }

    fn end_batch(&mut self, ctx: &mut Ctx) {
        if self.state == State::Ready && (self.rx_unacked > 0 || self.ack_due) {
            self.send_ack(ctx);
        }
    }

    fn on_frame(&mut self, ctx: &mut Ctx, h: &Header, payload: &[u8], now: Instant) {
        match h.kind {
            Kind::Ack if !self.rc() => self.on_uc_ack(ctx, h, now),
            Kind::Ack => self.on_ack(ctx, h.psn, now),
            Kind::Nak => {
                if let Some(why) = Nak::from_u8(h.code) {
                    self.on_nak(ctx, h.psn, why, now);
                }
            }
            _ if self.rc() => self.rc_frame(ctx, h, payload, now),
            Kind::Send => {
                if !before(h.psn, self.expected) {
                    self.expected = h.psn.wrapping_add(1);
                }
                self.rx_unacked += 1;
                if !self.settled.arrive(h.msg) {
                    // Given up for lost when its sender asked for credit: its receive went to
                    // the credit, so it is lost now.
                    ctx.stats.incomplete_drops += 1;
                    ctx.log(|| format!("queue pair {}: message {} came after it was given up", self.id.0, h.msg));
                    return;
                }
                self.uc_send(ctx, h, payload);
                // After the frame took its receive: the credit the ACK carries counts it.
                if self.rx_unacked >= ACK_EVERY {
                    self.send_ack(ctx);
                }
            }
            _ => ctx.stats.strays += 1,
        }
    }

    fn uc_send(&mut self, ctx: &mut Ctx, h: &Header, payload: &[u8]) {
        let last = h.idx + 1 == frames(h.len);
        if h.idx == 0 {
            if self.incoming.take().is_some_and(|m| !m.discard) {
                self.drop_incomplete(ctx); // The end of the message before went missing.
            }
            if !self.start_message(ctx, h) {
                return;
            }
        } else {
            match &self.incoming {
                Some(m) if m.msg == h.msg && m.discard => {
                    if last {
                        self.incoming = None;
                    }
                    return;
                }
                Some(m) if m.msg == h.msg && m.next == h.idx => {}
                _ => {
                    // A frame of this message went missing, and perhaps the end of the one before.
                    if self.incoming.take().is_some_and(|m| !m.discard && m.msg != h.msg) {
                        self.drop_incomplete(ctx);
                    }
                    self.drop_incomplete(ctx);
                    let discard = Incoming { kind: Kind::Send, msg: h.msg, next: h.idx + 1, discard: true };
                    self.incoming = (!last).then_some(discard);
                    return;
                }
            }
        }
        self.deliver(ctx, h, payload, last);
    }

    fn drop_incomplete(&mut self, ctx: &mut Ctx) {
        ctx.stats.incomplete_drops += 1;
        let n = ctx.stats.incomplete_drops;
        ctx.log(|| format!("queue pair {}: dropped a message with a missing frame ({n} so far)", self.id.0));
    }

    /// The first frame of a SEND: binds the receive at the head of the queue. False if the
    /// message is thrown away instead (no receive, or too long for it).
    fn start_message(&mut self, ctx: &mut Ctx, h: &Header) -> bool {
        let last = h.idx + 1 == frames(h.len);
        let discard = Incoming { kind: h.kind, msg: h.msg, next: 1, discard: true };
        let Some(head) = self.rq.front() else {
            ctx.stats.no_recv_drops += 1;
            let n = ctx.stats.no_recv_drops;
            ctx.log(|| {
                format!(
                    "queue pair {}: dropped message {} of {} B: no receive posted (credit given up to {}; {n} so far)",
                    self.id.0,
                    h.msg,
                    h.len,
                    self.recv_limit()
                )
            });
            self.incoming = (!last).then_some(discard);
            return false;
        };
        // UC is Thunderbolt's (TN3205): a SEND must span as many 4 KiB frames as the receive
        // it lands in, or the receive fails.
        let mismatch = !self.rc() && frames(h.len) != frames(head.sge.len);
        if h.len > head.sge.len || mismatch {
            ctx.stats.failed_recvs += 1;
            let n = ctx.stats.failed_recvs;
            ctx.log(|| {
                format!(
                    "queue pair {}: a SEND of {} B failed the receive of {} B ({} frames to {}; {n} so far)",
                    self.id.0,
                    h.len,
                    head.sge.len,
                    frames(h.len),
                    frames(head.sge.len)
                )
            });
            let r = self.rq.pop_front().unwrap();
            ctx.complete(self.id, r.wr_id, Opcode::Recv, WcStatus::LocalLength, 0);
            self.incoming = (!last).then_some(discard);
            return false;
        }
        self.incoming = Some(Incoming { kind: h.kind, msg: h.msg, next: 0, discard: false });
        true
    }

    /// Copies a SEND frame into the bound receive; completes it on the last frame.
    fn deliver(&mut self, ctx: &mut Ctx, h: &Header, payload: &[u8], last: bool) {
        let Some(head) = self.rq.front() else {
            self.incoming = None;
            return;
        };
        let at = head.sge.addr + h.idx as u64 * FRAME as u64;
        if !ctx.mem.write(head.sge.lkey, false, at, payload) {
            self.fail_recv(ctx, WcStatus::Other(LOC_PROT_ERR));
            return;
        }
        if let Some(m) = &mut self.incoming {
            m.next = h.idx + 1;
        }
        if last {
            let r = self.rq.pop_front().unwrap();
            ctx.complete(self.id, r.wr_id, Opcode::Recv, WcStatus::Success, h.len);
            self.incoming = None;
        }
    }

    /// RC: accepts frame `expected` only; acknowledges, or NAKs what it cannot take.
    fn rc_frame(&mut self, ctx: &mut Ctx, h: &Header, payload: &[u8], now: Instant) {
        let ahead = h.psn.wrapping_sub(self.expected) as i32;
        if ahead < 0 {
            self.ack_due = true; // A duplicate: say again how far we are.
            return;
        }
        if ahead > 0 {
            if !self.nak_sent {
                self.nak_sent = true;
                self.send_nak(ctx, Nak::Seq);
            }
            return;
        }
        self.nak_sent = false;
        match self.rc_accept(ctx, h, payload) {
            Ok(()) => {
                self.expected = self.expected.wrapping_add(1);
                self.progress_at = now;
                self.ack_due = true;
                self.rx_unacked += 1;
                if self.rx_unacked >= ACK_EVERY && self.state == State::Ready {
                    self.send_ack(ctx);
                }
            }
            Err(why) => {
                self.nak_sent = true;
                if why == Nak::Rnr {
                    ctx.stats.rnr_refused += 1;
                }
                self.send_nak(ctx, why);
            }
        }
    }

    fn rc_accept(&mut self, ctx: &mut Ctx, h: &Header, payload: &[u8]) -> Result<(), Nak> {
        let last = h.idx + 1 == frames(h.len);
        match h.kind {
            Kind::Send => {
                if h.idx == 0 {
                    if self.rq.is_empty() {
                        return Err(Nak::Rnr);
                    }
                    if !self.start_message(ctx, h) {
                        return Ok(());
                    }
                } else if !self
                    .incoming
                    .as_ref()
                    .is_some_and(|m| m.kind == Kind::Send && m.msg == h.msg && m.next == h.idx && !m.discard)
                {
                    if last {
                        self.incoming = None;
                    }
                    return Ok(()); // The rest of a message too long for its receive.
                }
                self.deliver(ctx, h, payload, last);
                Ok(())
            }
            Kind::Write => {
                if h.idx == 0 && !ctx.mem.remote_ok(h.rkey, h.raddr, h.len as usize) {
                    return Err(Nak::Access);
                }
                let at = h.raddr.wrapping_add(h.idx as u64 * FRAME as u64);
                if !ctx.mem.write(h.rkey, true, at, payload) {
                    return Err(Nak::Access);
                }
                Ok(())
            }
            Kind::ReadReq => {
                if !ctx.mem.remote_ok(h.rkey, h.raddr, h.len as usize) {
                    return Err(Nak::Access);
                }
                self.resp.push_back(ReadResp { msg: h.msg, rkey: h.rkey, raddr: h.raddr, len: h.len, next: 0 });
                Ok(())
            }
            Kind::ReadResp => {
                self.read_answer(ctx, h, payload);
                Ok(())
            }
            Kind::RespErr => {
                if let Some(wr) = self.reading(h.msg) {
                    wr.done = Some(WcStatus::RemoteAccess);
                    self.complete_ready(ctx);
                    self.enter_error(ctx);
                }
                Ok(())
            }
            Kind::Ack | Kind::Nak => Ok(()),
        }
    }

    /// The unfinished READ request `msg`.
    fn reading(&mut self, msg: u32) -> Option<&mut SendWr> {
        self.sent.iter_mut().find(|w| w.op == Opcode::Read && w.msg == msg && w.done.is_none())
    }

    /// A frame of the answer to one of our READ requests.
    fn read_answer(&mut self, ctx: &mut Ctx, h: &Header, payload: &[u8]) {
        let Some(wr) = self.reading(h.msg) else { return };
        let at = wr.sge.addr + h.idx as u64 * FRAME as u64;
        if h.len != wr.sge.len || !ctx.mem.write(wr.sge.lkey, false, at, payload) {
            wr.done = Some(WcStatus::Other(LOC_PROT_ERR));
            self.complete_ready(ctx);
            self.enter_error(ctx);
            return;
        }
        wr.got += 1;
        if wr.got == frames(h.len) {
            wr.done = Some(WcStatus::Success);
            self.complete_ready(ctx);
        }
    }
}
