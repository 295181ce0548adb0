//! Two ends of a link in virtual time, over a wire that loses, duplicates and reorders
//! messages (acknowledgements included): every message arrives once, in order, unchanged, no
//! live peer is declared dead, and the time grows smoothly with the loss.

use super::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DATA: u8 = 1;
const ACK: u8 = 2;
/// Virtual time of one step (a poll of each end).
const STEP: Duration = Duration::from_micros(20);

#[derive(Clone, Debug)]
struct Packet {
    kind: u8,
    seq: u32,
    ack: u32,
    sack: u32,
    body: Vec<u8>,
}

/// What the wire does to each message.
#[derive(Clone, Copy, Debug)]
struct Wire {
    loss: f64,
    dup: f64,
    /// Delay: `base` plus up to `jitter` (reordering when it exceeds a step).
    base: Duration,
    jitter: Duration,
}

/// One end: the protocol, its send buffers, what it must send and what it got.
struct End {
    link: Link,
    bufs: Vec<Vec<u8>>,
    free: Vec<usize>,
    to_send: VecDeque<Vec<u8>>,
    got: Vec<Vec<u8>>,
    acks_sent: u64,
}

impl End {
    fn new(set: Settings, now: Instant, msgs: Vec<Vec<u8>>) -> End {
        End {
            link: Link::new(set, now),
            bufs: vec![Vec::new(); set.window],
            free: (0..set.window).collect(),
            to_send: msgs.into(),
            got: Vec::new(),
            acks_sent: 0,
        }
    }

    fn packet(&mut self, kind: u8, seq: u32, body: Vec<u8>) -> Packet {
        let (ack, sack) = self.link.ack();
        self.link.ack_sent();
        Packet { kind, seq, ack, sack, body }
    }

    fn take(&mut self, p: &Packet, now: Instant) {
        self.link.on_ack(p.ack, p.sack, now);
        for b in self.link.released() {
            self.free.push(b);
        }
        if p.kind == ACK {
            return;
        }
        match self.link.arrive(p.seq, p.kind, &p.body) {
            Arrival::InOrder => {
                self.got.push(p.body.clone());
                while let Some(h) = self.link.take_ready() {
                    assert_eq!(h.kind, DATA);
                    self.got.push(h.body);
                }
            }
            Arrival::Held | Arrival::Duplicate => {}
        }
    }

    /// One poll's sending: new messages while there is room, what must go again, and an
    /// acknowledgement alone if one is due.
    fn send(&mut self, now: Instant, out: &mut Vec<Packet>) {
        while self.link.can_send() && !self.to_send.is_empty() {
            let buf = self.free.pop().expect("a free buffer per window slot");
            self.bufs[buf] = self.to_send.pop_front().unwrap();
            let seq = self.link.next_seq();
            let p = self.packet(DATA, seq, self.bufs[buf].clone());
            assert_eq!(self.link.sent(buf, p.body.len(), now), seq);
            out.push(p);
        }
        let mut again = Vec::new();
        self.link.retransmit(now, usize::MAX, &mut again);
        for (buf, len) in again {
            assert_eq!(self.bufs[buf].len(), len);
            // The sequence number of a buffer: the one the link recorded (found by content).
            let seq = self.seq_of(buf);
            let p = self.packet(DATA, seq, self.bufs[buf].clone());
            out.push(p);
        }
        if self.link.ack_alone() {
            let p = self.packet(ACK, 0, Vec::new());
            self.acks_sent += 1;
            out.push(p);
        }
    }

    fn seq_of(&self, buf: usize) -> u32 {
        self.link.unacked.iter().find(|o| o.buf == buf).expect("an unacknowledged buffer").seq
    }
}

/// Messages of a few sizes whose bytes name their sender and number.
fn messages(who: u8, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| (0..(i % 7) * 5 + 4).map(|k| who ^ (i as u8).wrapping_mul(31) ^ k as u8).collect()).collect()
}

struct Outcome {
    /// Virtual time until both ends had everything and nothing waited.
    took: Duration,
    resent: u64,
    timeouts: u64,
}

/// Runs two ends sending `n` messages each over `wire`; checks that each got the other's
/// messages exactly, in order, and that neither declared the other dead.
fn run(wire: Wire, n: usize, seed: u64) -> Outcome {
    let set = Settings { window: 16, rto: Duration::from_millis(1), dead_after: Duration::from_secs(10) };
    let t0 = Instant::now();
    let mut rng = SmallRng::seed_from_u64(seed);
    let (ma, mb) = (messages(0xa5, n), messages(0x5a, n));
    let mut ends = [End::new(set, t0, ma.clone()), End::new(set, t0, mb.clone())];
    // In flight: (arrival time, destination, packet).
    let mut flying: Vec<(Instant, usize, Packet)> = Vec::new();
    let mut now = t0;
    let limit = Duration::from_secs(60);
    loop {
        // Deliver what is due, in order of arrival time.
        flying.sort_by_key(|f| f.0);
        let due = flying.iter().take_while(|f| f.0 <= now).count();
        for (_, to, p) in flying.drain(..due).collect::<Vec<_>>() {
            ends[to].take(&p, now);
        }
        for (from, end) in ends.iter_mut().enumerate() {
            let mut out = Vec::new();
            end.send(now, &mut out);
            for p in out {
                let copies = if rng.gen_bool(wire.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    if rng.gen_bool(wire.loss) {
                        continue;
                    }
                    let delay = wire.base + wire.jitter.mul_f64(rng.gen::<f64>());
                    flying.push((now + delay, 1 - from, p.clone()));
                }
            }
            assert!(!end.link.dead(now), "end {from} declared its live peer dead at {:?} ({wire:?})", now - t0);
        }
        let done = ends.iter().all(|e| e.to_send.is_empty() && e.link.idle())
            && ends[0].got.len() == n
            && ends[1].got.len() == n;
        if done {
            break;
        }
        assert!(
            now - t0 < limit,
            "not done after {limit:?} ({wire:?}): got {} and {} of {n}",
            ends[0].got.len(),
            ends[1].got.len()
        );
        now += STEP;
    }
    assert!(ends[1].got == ma, "end 1 got end 0's messages in order, each once ({wire:?})");
    assert!(ends[0].got == mb, "end 0 got end 1's messages in order, each once ({wire:?})");
    let stats = |f: fn(&LinkStats) -> u64| ends.iter().map(|e| f(&e.link.stats)).sum::<u64>();
    Outcome { took: now - t0, resent: stats(|s| s.resent), timeouts: stats(|s| s.timeouts) }
}

fn lossy(loss: f64) -> Wire {
    Wire { loss, dup: 0.0, base: Duration::from_micros(30), jitter: Duration::ZERO }
}

#[test]
fn a_clean_wire_sends_nothing_twice() {
    let o = run(lossy(0.0), 2000, 1);
    assert_eq!((o.resent, o.timeouts), (0, 0));
}

#[test]
fn every_message_arrives_in_order_at_every_loss_up_to_thirty_percent() {
    let mut took = Vec::new();
    for loss in [0.01, 0.05, 0.10, 0.20, 0.30] {
        // Several seeds per rate: the time is a median, the correctness holds for each.
        let mut t: Vec<Duration> = (0..5)
            .map(|seed| {
                let o = run(lossy(loss), 2000, seed);
                assert!(o.resent > 0, "loss {loss}: messages were sent again");
                o.took
            })
            .collect();
        t.sort();
        took.push((loss, t[2]));
    }
    // The time grows smoothly with the loss: no rate takes more than a few times the one
    // before it (go-back-N over a window took 100 times longer at 30% than at 5%).
    for w in took.windows(2) {
        assert!(w[1].1 <= w[0].1 * 4, "time by loss: {took:?}");
    }
    let clean = run(lossy(0.0), 2000, 0).took;
    eprintln!("virtual time for 2 x 2000 messages: clean {clean:?}, by loss {took:?}");
    assert!(took[4].1 <= clean * 40, "30% loss took {:?}, a clean wire {clean:?}: {took:?}", took[4].1);
}

#[test]
fn duplicates_and_reordering_are_delivered_once_in_order() {
    for (loss, seed) in [(0.0, 3), (0.05, 4), (0.30, 5)] {
        let wire = Wire { loss, dup: 0.2, base: Duration::from_micros(20), jitter: Duration::from_micros(200) };
        run(wire, 1500, seed);
    }
}

#[test]
fn a_silent_peer_is_dead_after_the_bound_and_not_before() {
    let set = Settings { window: 4, rto: Duration::from_millis(5), dead_after: Duration::from_secs(2) };
    let t0 = Instant::now();
    let mut l = Link::new(set, t0);
    l.sent(0, 10, t0);
    let mut out = Vec::new();
    let mut t = t0;
    let mut tries = 0;
    while !l.dead(t) {
        l.retransmit(t, 8, &mut out);
        tries += out.drain(..).count();
        t += Duration::from_millis(1);
        // Repeated acknowledgements that move nothing still prove the peer alive.
        if t - t0 < Duration::from_secs(1) {
            l.on_ack(0, 0, t);
        }
    }
    let at = t - t0;
    // The last sign of life came at 0.999 s: dead 2 s after it, not before.
    assert!(at >= Duration::from_millis(2999) && at < Duration::from_millis(3010), "dead at {at:?}");
    assert!(tries >= 16, "{tries} tries within the bound");
    assert!(l.current_rto() <= set.dead_after / 16);
}

#[test]
fn the_timeout_follows_the_round_trips_within_its_bounds() {
    let floor = Duration::from_millis(5);
    let mut e = RttEstimate::default();
    assert_eq!(e.rto(floor), floor, "no sample yet");
    e.sample(Duration::from_millis(1));
    assert_eq!(e.rto(floor), floor, "fast round trips keep the floor");
    for _ in 0..20 {
        e.sample(Duration::from_millis(20));
    }
    let rto = e.rto(floor);
    assert!(rto > Duration::from_millis(20) && rto < Duration::from_millis(40), "{rto:?}");
    for _ in 0..50 {
        e.sample(Duration::from_secs(10));
    }
    assert_eq!(e.rto(floor), floor * 64, "at most 64 times the floor");
}

#[test]
fn selective_acknowledgements_name_the_held_messages() {
    let set = Settings { window: 8, rto: Duration::from_millis(5), dead_after: Duration::from_secs(2) };
    let t0 = Instant::now();
    let mut rx = Link::new(set, t0);
    assert_eq!(rx.arrive(0, DATA, b"a"), Arrival::InOrder);
    assert_eq!(rx.arrive(2, DATA, b"c"), Arrival::Held);
    assert_eq!(rx.arrive(4, DATA, b"e"), Arrival::Held);
    assert_eq!(rx.arrive(2, DATA, b"c"), Arrival::Duplicate);
    assert_eq!(rx.ack(), (1, 0b101));
    assert!(rx.ack_alone(), "a gap is acknowledged at once");
    rx.ack_sent();
    assert_eq!(rx.arrive(1, DATA, b"b"), Arrival::InOrder);
    assert_eq!(rx.take_ready(), Some(Held { kind: DATA, body: b"c".to_vec() }));
    assert_eq!(rx.take_ready(), None);
    assert_eq!(rx.ack(), (3, 0b1));
    assert_eq!(rx.arrive(0, DATA, b"a"), Arrival::Duplicate);

    // The sender sends again only what the receiver lacks.
    let mut tx = Link::new(set, t0);
    for b in 0..5 {
        tx.sent(b, 1, t0);
    }
    let t1 = t0 + Duration::from_micros(100);
    tx.on_ack(1, 0b101, t1); // Has 0, 2 and 4.
    assert_eq!(tx.released().collect::<Vec<_>>(), vec![0]);
    let mut out = Vec::new();
    tx.retransmit(t1 + set.rto, 8, &mut out);
    assert_eq!(out, vec![(1, 1), (3, 1)]);
}
