//! The reliability protocol of one RDMA link, sans-I/O: what makes an Unreliable Connected
//! queue pair (Thunderbolt's only kind) deliver every message once, in order, at any loss.
//!
//! The transport owns the buffers and the device; this state machine owns the numbers. Its
//! inputs are the messages the transport sends ([`Link::sent`]), the headers and bodies of
//! the messages that arrive ([`Link::on_ack`], [`Link::arrive`]) and `now`; its outputs are
//! the bodies to deliver, in order ([`Link::arrive`], [`Link::take_ready`]), the send buffers
//! to post again ([`Link::retransmit`]) or to reuse ([`Link::released`]), the
//! acknowledgement every outgoing message carries ([`Link::ack`]), whether one must go out
//! alone ([`Link::ack_alone`]), and whether the peer is dead ([`Link::dead`]). It reads no
//! clock and touches no device, so its tests run two ends in virtual time over a wire that
//! loses, duplicates and reorders (`tests` below).
//!
//! - Numbers: every sequenced message (data, FIN) takes the next `seq`. The receiver
//!   acknowledges cumulatively (`ack`: the next number it wants) and selectively (`sack`: bit
//!   `i` set if it holds `ack + 1 + i`).
//! - Selective repeat: a message that arrives ahead of a gap is kept (a copy; its receive
//!   buffer goes back to the device at once) and delivered when the gap fills, so one loss
//!   costs one message sent again, not a window (go-back-N). A sender has at most `window`
//!   (at most [`MAX_WINDOW`]) messages unacknowledged, so whatever arrives lies within the
//!   receiver's selective acknowledgement.
//! - Loss detection, as RACK (RFC 8985) does it: a message is lost when one sent after it
//!   (later than a reordering allowance, a quarter of the least round trip) is known to have
//!   arrived; and on the retransmission timeout (RFC 6298 from the round trips, Karn's rule,
//!   at least `rto`), which grows by half on each expiry up to [`Link::rto_cap`] and resets
//!   on progress. Not TCP's doubling: a timeout here is mostly a random loss, not
//!   congestion, and where a try fails with probability `p` (its message or the answer
//!   lost: 51% at 30% loss) a factor `f` makes the expected wait finite only while
//!   `p * f < 1`; doubling made 30% loss take 4 to 10 times as long as 20%. On a timeout
//!   every message whose timer ran out goes again (a lossy link loses acknowledgements too,
//!   and a message's whole window may be gone).
//! - Acknowledgements ride on every message; one goes alone at once when a message arrives
//!   out of order or twice (the sender needs to know), or after two polls with messages
//!   unacknowledged, or when half a window is owed.
//! - Liveness: the peer is dead when nothing at all came from it for `dead_after` while
//!   messages of ours wait; any message from it, a repeated acknowledgement included, is a
//!   sign of life. The timeout's cap (`dead_after / 16`) leaves at least that many tries
//!   within the bound.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Most messages unacknowledged: the width of the selective acknowledgement.
pub(crate) const MAX_WINDOW: usize = 32;
/// The timeout's growth per expiry in a row.
const BACKOFF: f64 = 1.5;

/// Protocol settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    /// Messages in flight, at most [`MAX_WINDOW`].
    pub(crate) window: usize,
    /// The least retransmission timeout.
    pub(crate) rto: Duration,
    /// Silence from the peer, with messages waiting, after which it is dead.
    pub(crate) dead_after: Duration,
}

/// The retransmission timeout of one link, from its round trips (RFC 6298): smoothed round
/// trip and its variation, never below the configured timeout. A receiver that does not get
/// the CPU for a while (more ranks than cores) makes round trips long, and the timeout
/// follows, rather than sending a window again that was never lost.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RttEstimate {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The least round trip seen (RACK's reordering allowance is a quarter of it).
    min: Option<Duration>,
}

impl RttEstimate {
    pub(crate) fn sample(&mut self, rtt: Duration) {
        self.min = Some(self.min.map_or(rtt, |m| m.min(rtt)));
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((s * 7 + rtt) / 8);
            }
        }
    }

    /// The timeout before the first retransmission: at least `floor`, at most 64 times it.
    pub(crate) fn rto(&self, floor: Duration) -> Duration {
        self.srtt.map_or(floor, |s| (s + self.rttvar * 4).clamp(floor, floor * 64))
    }
}

/// A message waiting for its acknowledgement.
#[derive(Debug)]
struct Out {
    seq: u32,
    /// The transport's send buffer, and the bytes after its header.
    buf: usize,
    len: usize,
    /// When it last went out.
    sent: Instant,
    /// Times it went out.
    tries: u32,
    /// The receiver holds it (selectively acknowledged).
    sacked: bool,
}

/// A message that arrived ahead of a gap: its kind and body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) kind: u8,
    pub(crate) body: Vec<u8>,
}

/// What became of a message that arrived.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The one wanted next: deliver its body now, then every [`Link::take_ready`].
    InOrder,
    /// Ahead of a gap: a copy is kept until the gap fills.
    Held,
    /// Had already (or outside the window): dropped.
    Duplicate,
}

/// Counters of one link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkStats {
    /// Messages sent again.
    pub(crate) resent: u64,
    /// Messages that arrived ahead of a gap.
    pub(crate) out_of_order: u64,
    /// Messages that arrived again.
    pub(crate) duplicates: u64,
    /// Retransmission timeouts that expired.
    pub(crate) timeouts: u64,
}

/// The protocol state of one link (both directions).
#[derive(Debug)]
pub(crate) struct Link {
    set: Settings,
    // Sending.
    next_seq: u32,
    unacked: VecDeque<Out>,
    rtt: RttEstimate,
    /// Timeouts in a row without progress (the timeout grows with each).
    backoff: u32,
    /// The latest send time of a message known to have arrived (RACK).
    rack: Option<Instant>,
    /// Last sign of life of the peer (or when messages started waiting).
    heard: Instant,
    released: Vec<usize>,
    // Receiving.
    /// Next sequence number wanted.
    expect: u32,
    /// Messages held ahead of a gap: index `i` is `expect + i` (index 0 is always empty).
    held: VecDeque<Option<Held>>,
    /// Messages taken since our acknowledgement last went out.
    owed: usize,
    /// Polls that ended with an acknowledgement owed.
    owed_polls: u32,
    /// An acknowledgement must go at once (a gap or a duplicate).
    ack_now: bool,
    pub(crate) stats: LinkStats,
}

/// Sequence number `a` comes before `b` (wrapping).
pub(crate) fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl Link {
    pub(crate) fn new(set: Settings, now: Instant) -> Link {
        assert!((1..=MAX_WINDOW).contains(&set.window), "window {} out of 1..={MAX_WINDOW}", set.window);
        Link {
            set,
            next_seq: 0,
            unacked: VecDeque::new(),
            rtt: RttEstimate::default(),
            backoff: 0,
            rack: None,
            heard: now,
            released: Vec::new(),
            expect: 0,
            held: VecDeque::new(),
            owed: 0,
            owed_polls: 0,
            ack_now: false,
            stats: LinkStats::default(),
        }
    }

    // ---- Sending ----

    /// Whether another sequenced message may go (fewer than `window` unacknowledged).
    pub(crate) fn can_send(&self) -> bool {
        self.unacked.len() < self.set.window
    }

    /// Records that send buffer `buf` (`len` bytes after its header) went out as the next
    /// sequenced message; its sequence number.
    pub(crate) fn sent(&mut self, buf: usize, len: usize, now: Instant) -> u32 {
        debug_assert!(self.can_send());
        if self.unacked.is_empty() {
            self.heard = now;
        }
        let seq = self.next_seq;
        self.unacked.push_back(Out { seq, buf, len, sent: now, tries: 1, sacked: false });
        self.next_seq = seq.wrapping_add(1);
        seq
    }

    /// The sequence number the next message will take.
    pub(crate) fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// Takes the acknowledgement of a message that arrived from the peer (any kind): `ack`
    /// is the next number it wants, `sack` the ones after that it holds.
    pub(crate) fn on_ack(&mut self, ack: u32, sack: u32, now: Instant) {
        self.heard = now;
        if !before(ack, self.next_seq.wrapping_add(1)) {
            return; // Acknowledges what was never sent: not from this link's peer.
        }
        let mut moved = false;
        while self.unacked.front().is_some_and(|o| before(o.seq, ack)) {
            let o = self.unacked.pop_front().expect("front");
            let newest = self.unacked.front().is_none_or(|n| !before(n.seq, ack));
            self.arrived(&o, newest, now);
            self.released.push(o.buf);
            moved = true;
        }
        // Nothing held ahead of a gap (every message but under loss): no bit to look at.
        for i in 0..if sack == 0 { 0 } else { self.unacked.len() } {
            let o = &self.unacked[i];
            let d = o.seq.wrapping_sub(ack).wrapping_sub(1);
            if o.sacked || d >= 32 || sack & (1 << d) == 0 {
                continue;
            }
            let o = &mut self.unacked[i];
            o.sacked = true;
            let (sent, tries) = (o.sent, o.tries);
            self.mark_arrived(sent, tries, now);
            moved = true;
        }
        if moved {
            self.backoff = 0;
        }
    }

    /// A message of ours that the peer has: a round trip (the newest covered, sent once) and
    /// the RACK time.
    fn arrived(&mut self, o: &Out, newest: bool, now: Instant) {
        if newest && o.tries == 1 && !o.sacked {
            self.rtt.sample(now.duration_since(o.sent));
        }
        self.mark_arrived(o.sent, o.tries, now);
    }

    fn mark_arrived(&mut self, sent: Instant, tries: u32, now: Instant) {
        // A message sent more than once may have arrived by an earlier copy: its last send
        // time counts only if a round trip fits since (else RACK would judge messages sent
        // between the copies lost).
        let min = self.rtt.min.unwrap_or(Duration::ZERO);
        if tries > 1 && now.duration_since(sent) < min {
            return;
        }
        if self.rack.is_none_or(|r| sent > r) {
            self.rack = Some(sent);
        }
    }

    /// The send buffers whose messages the peer acknowledged since the last call.
    pub(crate) fn released(&mut self) -> std::vec::Drain<'_, usize> {
        self.released.drain(..)
    }

    /// The timeout now: the round trips' (at least `rto`), half as long again per expiry in
    /// a row, capped.
    pub(crate) fn current_rto(&self) -> Duration {
        let base = self.rtt.rto(self.set.rto);
        let cap = self.rto_cap();
        base.mul_f64(BACKOFF.powi(self.backoff.min(64) as i32)).min(cap).max(base.min(cap))
    }

    /// The longest timeout: a sixteenth of the dead-peer bound (at least that many tries
    /// before a peer is declared dead), and at most 64 times the least.
    pub(crate) fn rto_cap(&self) -> Duration {
        (self.set.rto * 64).min(self.set.dead_after / 16).max(self.set.rto)
    }

    /// The messages to send again now (`(buf, len)`, at most `room`, oldest first): lost by
    /// RACK, or whose timeout expired. Each is counted as sent now.
    pub(crate) fn retransmit(&mut self, now: Instant, room: usize, out: &mut Vec<(usize, usize)>) {
        if self.unacked.is_empty() {
            return;
        }
        let rto = self.current_rto();
        let reorder = self.rtt.min.map_or(Duration::ZERO, |m| m / 4);
        let mut expired = false;
        for o in self.unacked.iter_mut().filter(|o| !o.sacked) {
            if out.len() >= room {
                break;
            }
            let timed_out = now.duration_since(o.sent) >= rto;
            let overtaken = self.rack.is_some_and(|r| o.sent + reorder < r);
            if !(timed_out || overtaken) {
                continue;
            }
            expired |= timed_out && !overtaken;
            o.sent = now;
            o.tries += 1;
            out.push((o.buf, o.len));
        }
        self.stats.resent += out.len() as u64;
        if expired {
            self.backoff += 1;
            self.stats.timeouts += 1;
        }
    }

    /// Nothing of ours waits for an acknowledgement.
    pub(crate) fn idle(&self) -> bool {
        self.unacked.is_empty()
    }

    /// Messages of ours wait and nothing came from the peer for `dead_after`.
    pub(crate) fn dead(&self, now: Instant) -> bool {
        !self.unacked.is_empty() && now.duration_since(self.heard) > self.set.dead_after
    }

    // ---- Receiving ----

    /// A sequenced message `seq` of `kind` with `body` arrived (its acknowledgement already
    /// taken by [`Link::on_ack`]).
    pub(crate) fn arrive(&mut self, seq: u32, kind: u8, body: &[u8]) -> Arrival {
        let d = seq.wrapping_sub(self.expect) as usize;
        if before(seq, self.expect) || d > MAX_WINDOW {
            self.stats.duplicates += 1;
            self.ack_now = true;
            return Arrival::Duplicate;
        }
        if d == 0 {
            self.advance();
            return Arrival::InOrder;
        }
        if self.held.len() <= d {
            self.held.resize_with(d + 1, || None);
        }
        if self.held[d].is_some() {
            self.stats.duplicates += 1;
            self.ack_now = true;
            return Arrival::Duplicate;
        }
        self.held[d] = Some(Held { kind, body: body.to_vec() });
        self.stats.out_of_order += 1;
        self.ack_now = true;
        Arrival::Held
    }

    /// The next held message, now in order, if any.
    pub(crate) fn take_ready(&mut self) -> Option<Held> {
        let h = self.held.get_mut(0)?.take()?;
        self.advance();
        Some(h)
    }

    fn advance(&mut self) {
        self.expect = self.expect.wrapping_add(1);
        self.held.pop_front();
        self.owed += 1;
    }

    /// The acknowledgement to carry: the next number wanted, and the held ones after it.
    pub(crate) fn ack(&self) -> (u32, u32) {
        let sack =
            self.held.iter().skip(1).take(32).enumerate().fold(0u32, |s, (i, h)| s | (u32::from(h.is_some()) << i));
        (self.expect, sack)
    }

    /// The acknowledgement went out (alone or on a message).
    pub(crate) fn ack_sent(&mut self) {
        self.owed = 0;
        self.owed_polls = 0;
        self.ack_now = false;
    }

    /// At the end of a poll: whether an acknowledgement must go alone now (a gap or a
    /// duplicate seen, half a window owed, or owed since the poll before).
    pub(crate) fn ack_alone(&mut self) -> bool {
        if self.ack_now {
            return true;
        }
        if self.owed == 0 {
            return false;
        }
        self.owed_polls += 1;
        self.owed_polls >= 2 || self.owed * 2 >= self.set.window
    }
}

#[cfg(test)]
mod tests;
