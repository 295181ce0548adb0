//! Transmit side of a queue pair: frames out under the window, acknowledgements in, RC
//! go-back-N retransmission.
//!
//! A frame's payload is copied from registered memory when the frame is sent, so a request
//! waiting behind the window reads its buffer late, as a device does. UC completes a send
//! request when its last frame went to the socket; RC when its last frame is acknowledged
//! (READ: when its answer has arrived).

use std::time::Instant;

use super::super::super::provider::{Opcode, WcStatus};
use super::super::wire::{payload_len, Header, Kind, Nak, CREDIT_REQUEST, FRAME, HEADER};
use super::super::Ctx;
use super::{
    before, CreditWait, Qp, State, BACKLOG_RETRY, CREDIT_ASK, LOC_PROT_ERR, RNR_DELAY, RTO_MIN, UC_STALL, WINDOW,
};

impl Qp {
    fn window_full(&self) -> bool {
        self.next_psn.wrapping_sub(self.acked) >= WINDOW && (self.rc() || !self.silent)
    }

    /// Puts frames on the wire until the window is full, the socket pushes back or nothing
    /// is left: first RC retransmissions, then READ answers, then send requests in order.
    pub(in super::super) fn flush(&mut self, ctx: &mut Ctx, buf: &mut [u8], now: Instant) {
        if self.state != State::Ready {
            return;
        }
        self.backlog_at = None;
        if self.hold_until.is_some_and(|t| now < t) {
            return;
        }
        self.hold_until = None;
        while let Some(i) = self.resend {
            if self.probe && i > 0 {
                return; // Wait for the receiver to take the refused frame.
            }
            let Some(frame) = self.unacked.get(i) else {
                self.resend = None;
                break;
            };
            if !ctx.transmit(&self.sock, frame, true) {
                self.backlog_at = Some(now + BACKLOG_RETRY);
                return;
            }
            ctx.stats.retransmits += 1;
            self.resend = Some(i + 1);
        }
        while self.state == State::Ready {
            if self.window_full() {
                if !self.rc() {
                    self.blocked_since.get_or_insert(now);
                }
                return;
            }
            if self.needs_credit() {
                self.credit_wait.get_or_insert(CreditWait {
                    since: now,
                    ask_at: now + CREDIT_ASK,
                    every: CREDIT_ASK * 2,
                });
                return;
            }
            self.credit_wait = None;
            let Some(n) = self.build(ctx, buf) else { return };
            if !ctx.transmit(&self.sock, &buf[..HEADER + n], true) {
                self.backlog_at = Some(now + BACKLOG_RETRY);
                return;
            }
            self.sent_frame(ctx, &buf[..HEADER + n], now);
        }
    }

    /// Writes the next frame into `buf`; returns its payload length. `None` if there is none,
    /// or if a send request's memory is gone (it failed, and the queue pair with it).
    fn build(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<usize> {
        let (head, body) = buf.split_at_mut(HEADER);
        let head: &mut [u8; HEADER] = head.try_into().unwrap();
        let rc = self.rc();
        if let Some(r) = self.resp.front() {
            let n = payload_len(r.len, r.next);
            let at = r.raddr.wrapping_add(r.next as u64 * FRAME as u64);
            let mut h = Header::new(Kind::ReadResp, rc);
            (h.psn, h.msg, h.idx, h.len) = (self.next_psn, r.msg, r.next, r.len);
            if ctx.mem.read(r.rkey, true, at, &mut body[..n]) {
                h.encode(head);
                return Some(n);
            }
            // The region went away while the answer was being sent: tell the reader.
            let mut e = Header::new(Kind::RespErr, rc);
            (e.psn, e.msg) = (self.next_psn, r.msg);
            e.encode(head);
            return Some(0);
        }
        let wr = self.pending.front()?;
        let mut h = Header::new(Kind::Send, rc);
        (h.psn, h.msg, h.idx, h.len) = (self.next_psn, wr.msg, wr.next, wr.sge.len);
        let n = match wr.op {
            Opcode::Read => {
                (h.kind, h.rkey, h.raddr) = (Kind::ReadReq, wr.remote.rkey, wr.remote.addr);
                0
            }
            op => {
                if op == Opcode::Write {
                    (h.kind, h.rkey, h.raddr) = (Kind::Write, wr.remote.rkey, wr.remote.addr);
                }
                let n = payload_len(wr.sge.len, wr.next);
                let at = wr.sge.addr + wr.next as u64 * FRAME as u64;
                if !ctx.mem.read(wr.sge.lkey, false, at, &mut body[..n]) {
                    self.pending.front_mut().unwrap().done = Some(WcStatus::Other(LOC_PROT_ERR));
                    self.complete_ready(ctx);
                    self.enter_error(ctx);
                    return None;
                }
                n
            }
        };
        h.encode(head);
        Some(n)
    }

    /// Books the frame just sent: its psn, the retransmit copy, the request's progress.
    fn sent_frame(&mut self, ctx: &mut Ctx, frame: &[u8], now: Instant) {
        let psn = self.next_psn;
        self.next_psn = psn.wrapping_add(1);
        if self.rc() {
            self.unacked.push_back(frame.to_vec());
            self.rto_at.get_or_insert(now + self.rto);
        }
        if let Some(r) = self.resp.front_mut() {
            r.next += 1;
            let failed = frame[3] == Kind::RespErr as u8;
            if failed || r.next >= super::super::wire::frames(r.len) {
                self.resp.pop_front();
            }
            return;
        }
        let wr = self.pending.front_mut().unwrap();
        if wr.next == 0 {
            wr.first_psn = psn;
        }
        wr.last_psn = psn;
        wr.next += 1;
        if wr.next < wr.frames {
            return;
        }
        let wr = self.pending.pop_front().unwrap();
        if self.rc() {
            self.sent.push_back(wr);
        } else {
            ctx.complete(self.id, wr.wr_id, wr.op, WcStatus::Success, 0);
        }
    }

    /// UC: the next frame starts a SEND the peer has no receive for (as far as this side knows).
    fn needs_credit(&self) -> bool {
        !self.rc()
            && !self.credit_silent
            && self.pending.front().is_some_and(|w| w.next == 0 && !before(w.msg, self.recv_credit))
    }

    /// UC: asks the peer for its receive credit, telling it the first message not yet started.
    pub(super) fn ask_credit(&mut self, ctx: &mut Ctx, now: Instant) {
        let Some(first) = self.pending.front().map(|w| w.msg) else { return };
        let mut h = Header::new(Kind::Ack, false);
        (h.psn, h.code, h.msg) = (self.expected, CREDIT_REQUEST, first);
        let mut d = [0u8; HEADER];
        h.encode(&mut d);
        ctx.transmit(&self.sock, &d, false);
        ctx.stats.credit_requests += 1;
        if let Some(w) = &mut self.credit_wait {
            w.ask_at = now + w.every;
            w.every = (w.every * 2).min(UC_STALL);
        }
    }

    /// UC: an ACK: a link credit (every frame before `h.psn` arrived) with the receive
    /// credit, or the peer's request for this side's receive credit.
    pub(super) fn on_uc_ack(&mut self, ctx: &mut Ctx, h: &Header, now: Instant) {
        self.on_ack(ctx, h.psn, now);
        (self.heard_at, self.credit_silent) = (now, false);
        if h.code == CREDIT_REQUEST {
            // Every message before `h.msg` went out: one never seen was lost whole, and the
            // receive it would have taken is free for the next.
            self.settled.give_up_before(h.msg);
            self.send_ack(ctx);
        } else if before(self.recv_credit, h.msg) {
            self.recv_credit = h.msg;
        }
    }

    /// UC credit or RC acknowledgement: every frame before `psn` arrived.
    pub(super) fn on_ack(&mut self, ctx: &mut Ctx, psn: u32, now: Instant) {
        if !self.rc() {
            if before(self.acked, psn) && !before(self.next_psn, psn) {
                self.acked = psn;
            }
            self.silent = false;
            if !self.window_full() {
                self.blocked_since = None;
            }
            return;
        }
        let n = psn.wrapping_sub(self.acked) as i32;
        if n <= 0 || n as usize > self.unacked.len() {
            return;
        }
        self.unacked.drain(..n as usize);
        self.acked = psn;
        self.resend = self.resend.map(|i| i.saturating_sub(n as usize));
        self.probe = false;
        self.progress_at = now;
        self.rto = RTO_MIN;
        self.rto_at = (!self.unacked.is_empty()).then(|| now + self.rto);
        for wr in self.sent.iter_mut().filter(|w| w.op != Opcode::Read && w.done.is_none()) {
            if before(wr.last_psn, psn) {
                wr.done = Some(WcStatus::Success);
            }
        }
        self.complete_ready(ctx);
    }

    /// RC: the peer took every frame before `psn` and refused frame `psn`.
    pub(super) fn on_nak(&mut self, ctx: &mut Ctx, psn: u32, why: Nak, now: Instant) {
        if !self.rc() {
            return;
        }
        self.on_ack(ctx, psn, now);
        if psn != self.acked {
            return; // Stale.
        }
        match why {
            Nak::Seq => self.resend = (!self.unacked.is_empty()).then_some(0),
            Nak::Rnr => {
                ctx.stats.rnr_naks += 1;
                self.progress_at = now;
                self.hold_until = Some(now + RNR_DELAY);
                self.rto_at = Some(now + RNR_DELAY + self.rto);
                self.resend = (!self.unacked.is_empty()).then_some(0);
                self.probe = true;
            }
            Nak::Access => {
                let hit = |w: &&mut super::SendWr| {
                    w.done.is_none() && (w.next > 0) && !before(psn, w.first_psn) && !before(w.last_psn, psn)
                };
                let Some(wr) = self.sent.iter_mut().chain(self.pending.iter_mut()).find(hit) else { return };
                wr.done = Some(WcStatus::RemoteAccess);
                self.complete_ready(ctx);
                self.enter_error(ctx);
            }
        }
    }

    /// Sends an acknowledgement of everything received so far.
    pub(super) fn send_ack(&mut self, ctx: &mut Ctx) {
        let mut h = Header::new(Kind::Ack, self.rc());
        h.psn = self.expected;
        if !self.rc() {
            h.msg = self.recv_limit();
        }
        let mut d = [0u8; HEADER];
        h.encode(&mut d);
        // UC credits model link-level flow control, which loses nothing; RC acks can be lost.
        ctx.transmit(&self.sock, &d, self.rc());
        (self.rx_unacked, self.ack_due) = (0, false);
    }

    pub(super) fn send_nak(&mut self, ctx: &mut Ctx, why: Nak) {
        let mut h = Header::new(Kind::Nak, true);
        (h.psn, h.code) = (self.expected, why as u8);
        let mut d = [0u8; HEADER];
        h.encode(&mut d);
        ctx.transmit(&self.sock, &d, true);
        (self.rx_unacked, self.ack_due) = (0, false);
    }
}
