//! Engine tests without processes or transports: engines exchange frames through in-memory
//! pipes of bounded capacity, stepped by hand (virtual time), so every interleaving the test
//! picks is reproducible.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};

use super::*;

/// The limits of a path that streams every rendezvous (no single copy, no head).
fn streamed(eager: usize, max_payload: usize) -> PeerLimits {
    PeerLimits {
        max_payload,
        eager,
        bulk_read: false,
        expose: false,
        bulk_write: false,
        split_min: usize::MAX,
        head: 0,
    }
}

/// N engines joined by FIFO pipes holding at most `cap` frames each.
struct Net {
    engines: Vec<Engine>,
    pipes: Vec<Vec<VecDeque<Vec<u8>>>>,
    held: Vec<VecDeque<Transmit>>,
    cap: usize,
    /// Keys handed out for exposed buffers and not yet concealed, per engine: key -> address.
    keys: Vec<std::collections::HashMap<u64, u64>>,
    next_key: u64,
    /// Largest `Data` payload each engine has sent.
    largest_data: Vec<usize>,
    /// Bytes each engine has sent in `Data` frames, and as the payload of `Rts` frames.
    data_bytes: Vec<usize>,
    rts_bytes: Vec<usize>,
}

impl Net {
    fn new(n: usize, eager: usize, max_payload: usize, cap: usize) -> Net {
        let lim = streamed(eager, max_payload);
        Net {
            engines: (0..n).map(|me| Engine::new(me, vec![lim; n])).collect(),
            pipes: (0..n).map(|_| (0..n).map(|_| VecDeque::new()).collect()).collect(),
            held: (0..n).map(|_| VecDeque::new()).collect(),
            cap,
            keys: (0..n).map(|_| Default::default()).collect(),
            next_key: 1,
            largest_data: vec![0; n],
            data_bytes: vec![0; n],
            rts_bytes: vec![0; n],
        }
    }

    /// The same network with rendezvous heads of the largest size (`MPR_RNDV_HEAD` at the
    /// eager limit).
    fn with_heads(mut self) -> Net {
        for l in self.engines.iter_mut().flat_map(|e| e.limits.iter_mut()) {
            l.head = l.eager.min(l.max_payload);
        }
        self
    }

    /// One round: every engine's frames go into the pipes (as room allows), then every pipe
    /// delivers up to `burst` frames. Returns whether anything moved.
    fn step(&mut self, burst: usize) -> bool {
        let mut moved = false;
        for me in 0..self.engines.len() {
            let e = &mut self.engines[me];
            let out: Vec<Transmit> = e.outbox.drain(..).collect();
            for mut t in out {
                if t.expose {
                    // Like a transport with a budget of keys: every third buffer gets none.
                    let key = e.to_expose(&t).filter(|_| !self.next_key.is_multiple_of(3)).map(|b| {
                        self.keys[me].insert(self.next_key, b.addr());
                        self.next_key
                    });
                    self.next_key += 1;
                    e.on_exposed(&mut t, key);
                }
                self.held[me].push_back(t);
            }
            let mut keep = VecDeque::new();
            while let Some(t) = self.held[me].pop_front() {
                let pipe = &mut self.pipes[me][t.peer];
                // Per-peer order: once a frame to a peer waits, later ones wait behind it.
                if pipe.len() < self.cap && !keep.iter().any(|k: &Transmit| k.peer == t.peer) {
                    let mut f = t.hdr.as_slice().to_vec();
                    f.extend_from_slice(t.payload.bytes());
                    match Frame::decode(&f) {
                        Ok((Frame::Data { .. }, payload)) => {
                            self.largest_data[me] = self.largest_data[me].max(payload.len());
                            self.data_bytes[me] += payload.len();
                        }
                        Ok((Frame::Rts { .. }, payload)) => self.rts_bytes[me] += payload.len(),
                        _ => {}
                    }
                    pipe.push_back(f);
                    if let Some(id) = t.on_sent {
                        e.on_sent(id);
                    }
                    moved = true;
                } else {
                    keep.push_back(t);
                }
            }
            self.held[me] = keep;
        }
        for src in 0..self.engines.len() {
            for dst in 0..self.engines.len() {
                for _ in 0..burst {
                    let Some(f) = self.pipes[src][dst].pop_front() else {
                        break;
                    };
                    self.engines[dst].on_frame(src, &f).expect("valid frame");
                    moved = true;
                }
            }
        }
        moved
    }

    fn run_until(&mut self, mut done: impl FnMut(&Net) -> bool) {
        for _ in 0..1_000_000 {
            if done(self) {
                return;
            }
            assert!(self.step(3) || done(self), "deadlock: nothing moves");
        }
        panic!("did not finish");
    }
}

fn rb(b: &[u8]) -> RawBuf {
    // SAFETY: every buffer in these tests outlives the engines' use of it (the tests wait for
    // completion before the buffers go out of scope).
    unsafe { RawBuf::new(b) }
}

fn rbm(b: &mut [u8]) -> RawBufMut {
    // SAFETY: as for `rb`.
    unsafe { RawBufMut::new(b) }
}

fn data(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(7)) as u8).collect()
}

#[test]
fn eager_and_rendezvous_posted_and_unexpected() {
    for heads in [false, true] {
        let net = Net::new(2, 64, 100, 2);
        eager_and_rendezvous_in(if heads { net.with_heads() } else { net });
    }
}

fn eager_and_rendezvous_in(mut net: Net) {
    let msgs: Vec<Vec<u8>> = [0usize, 10, 64, 65, 1000].iter().enumerate().map(|(i, &n)| data(i, n)).collect();
    let mut bufs: Vec<Vec<u8>> = msgs.iter().map(|m| vec![0u8; m.len()]).collect();
    // The first two receives are posted before the sends, the rest after (unexpected).
    let mut recvs = Vec::new();
    for (i, b) in bufs.iter_mut().enumerate().take(2) {
        recvs.push(net.engines[1].irecv(0, Some(0), Some(i as i32), Some(0), rbm(b)));
    }
    let sends: Vec<ReqId> =
        msgs.iter().enumerate().map(|(i, m)| net.engines[0].isend(0, 0, i as i32, 1, rb(m))).collect();
    for _ in 0..3 {
        net.step(1);
    }
    for (i, b) in bufs.iter_mut().enumerate().skip(2) {
        recvs.push(net.engines[1].irecv(0, Some(0), Some(i as i32), Some(0), rbm(b)));
    }
    net.run_until(|n| recvs.iter().all(|&r| n.engines[1].is_done(r)) && sends.iter().all(|&s| n.engines[0].is_done(s)));
    for (i, r) in recvs.iter().enumerate() {
        let st = net.engines[1].take(*r).unwrap().unwrap();
        assert_eq!((st.source, st.tag, st.bytes), (0, i as i32, msgs[i].len()));
    }
    assert_eq!(bufs, msgs);
    for s in sends {
        net.engines[0].take(s).unwrap().unwrap();
    }
    assert_eq!(net.engines[0].live_requests() + net.engines[1].live_requests(), 0);
}

#[test]
fn an_exchange_streams_in_smaller_frames() {
    let (frame, len) = (1 << 20, 3 * EXCHANGE_CHUNK + 100);
    // Alone, a stream takes frames as large as the peer allows (all the bytes, or all but the
    // first 64, the eager limit, which the `Rts` carried).
    for head in [0, 64] {
        let mut net = Net::new(2, 64, frame, 8);
        if head > 0 {
            net = net.with_heads();
        }
        let m = data(1, len);
        let mut buf = vec![0u8; len];
        let r = net.engines[1].irecv(0, None, None, None, rbm(&mut buf));
        let s = net.engines[0].isend(0, 0, 0, 1, rb(&m));
        net.run_until(|n| n.engines[1].is_done(r) && n.engines[0].is_done(s));
        assert_eq!(buf, m);
        assert_eq!(net.largest_data[0], (len - head).min(frame));
    }
    // Both ways at once, each side streams in `EXCHANGE_CHUNK` frames, and all bytes arrive.
    let mut net = Net::new(2, 64, frame, 8);
    let msgs = [data(2, len), data(3, len)];
    let mut bufs = [vec![0u8; len], vec![0u8; len]];
    let [b0, b1] = &mut bufs;
    let r0 = net.engines[0].irecv(0, None, None, None, rbm(b0));
    let r1 = net.engines[1].irecv(0, None, None, None, rbm(b1));
    let s0 = net.engines[0].isend(0, 0, 0, 1, rb(&msgs[0]));
    let s1 = net.engines[1].isend(0, 1, 0, 0, rb(&msgs[1]));
    net.run_until(|n| [(0, r0), (1, r1), (0, s0), (1, s1)].iter().all(|&(e, id)| n.engines[e].is_done(id)));
    assert_eq!(bufs, [msgs[1].clone(), msgs[0].clone()]);
    assert_eq!(net.largest_data, [EXCHANGE_CHUNK, EXCHANGE_CHUNK]);
}

#[test]
fn a_streamed_send_completes_when_its_last_frame_is_out() {
    // Pipes that take all ten frames at once, and deliver one frame a round.
    let mut net = Net::new(2, 64, 100, 64);
    let m = data(4, 1000);
    let mut buf = vec![0u8; 1000];
    let r = net.engines[1].irecv(0, None, None, None, rbm(&mut buf));
    let s = net.engines[0].isend(0, 0, 0, 1, rb(&m));
    while !net.engines[0].is_done(s) {
        assert!(net.step(1), "deadlock: nothing moves");
    }
    assert!(!net.engines[1].is_done(r), "the sender finished before the receiver had every byte");
    assert!(!net.engines[0].streamed.is_empty(), "the receiver's Fin is still to come");
    net.engines[0].take(s).unwrap().unwrap();
    // The late Fin is dropped, not a protocol error (`step` would panic).
    net.run_until(|n| n.engines[1].is_done(r) && n.engines[0].streamed.is_empty());
    assert_eq!(buf, m);
    net.engines[1].take(r).unwrap().unwrap();
    assert_eq!(net.engines[0].live_requests() + net.engines[1].live_requests(), 0);
}

#[test]
fn truncation_completes_both_sides() {
    for (heads, len) in [(false, 50usize), (false, 500), (true, 50), (true, 500)] {
        let mut net = Net::new(2, 64, 100, 4);
        if heads {
            net = net.with_heads();
        }
        let m = data(1, len);
        let mut small = vec![0u8; 20];
        let r = net.engines[1].irecv(0, None, None, None, rbm(&mut small));
        let s = net.engines[0].isend(0, 0, 0, 1, rb(&m));
        net.run_until(|n| n.engines[1].is_done(r) && n.engines[0].is_done(s));
        assert!(
            matches!(net.engines[1].take(r).unwrap(), Err(Error::Truncate { message, buffer: 20, .. }) if message == len)
        );
        assert!(net.engines[0].take(s).unwrap().is_ok(), "the sender is not told about truncation");
    }
}

#[test]
fn contexts_and_wildcards() {
    let mut net = Net::new(3, 64, 100, 4);
    let (a, b) = (data(1, 8), data(2, 8));
    let s1 = net.engines[0].isend(7, 0, 5, 2, rb(&a)); // other context
    let s2 = net.engines[1].isend(0, 1, 9, 2, rb(&b));
    net.run_until(|n| n.engines[0].is_done(s1) && n.engines[1].is_done(s2));
    // A wildcard receive on context 0 sees only rank 1's message.
    assert_eq!(net.engines[2].probe(0, None, None).map(|s| s.source), Some(1));
    let mut buf = vec![0u8; 8];
    let r = net.engines[2].irecv(0, None, None, None, rbm(&mut buf));
    assert_eq!(net.engines[2].take(r).unwrap().unwrap().source, 1);
    assert_eq!(buf, b);
    let mut buf2 = vec![0u8; 8];
    let r = net.engines[2].irecv(7, Some(0), None, Some(0), rbm(&mut buf2));
    assert_eq!(net.engines[2].take(r).unwrap().unwrap().tag, 5);
    assert_eq!(buf2, a);
}

#[test]
fn random_traffic_keeps_order_and_content() {
    for seed in 0..20u64 {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let n = rng.gen_range(2..5);
        let mut net = Net::new(n, rng.gen_range(0..200), rng.gen_range(1..300), rng.gen_range(1..4));
        if seed % 2 == 1 {
            net = net.with_heads();
        }
        let count = 30;
        // msgs[src][dst][k]
        let msgs: Vec<Vec<Vec<Vec<u8>>>> = (0..n)
            .map(|s| {
                (0..n)
                    .map(|d| (0..count).map(|k| data(s * 1000 + d * 100 + k, rng.gen_range(0..2000))).collect())
                    .collect()
            })
            .collect();
        let mut bufs: Vec<Vec<Vec<Vec<u8>>>> = (0..n)
            .map(|d| (0..n).map(|s| (0..count).map(|k| vec![0u8; msgs[s][d][k].len()]).collect()).collect())
            .collect();
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        // Interleave posting receives, sends and steps at random.
        let mut next_send = vec![vec![0usize; n]; n];
        let mut ops: Vec<(usize, usize, bool)> = Vec::new();
        for s in 0..n {
            for d in 0..n {
                if s != d {
                    for _ in 0..count {
                        ops.push((s, d, true));
                        ops.push((s, d, false));
                    }
                }
            }
        }
        // Receives for one pair are posted in order; so are sends.
        let mut next_recv = vec![vec![0usize; n]; n];
        let mut recv_slices: Vec<Vec<Vec<RawBufMut>>> = bufs
            .iter_mut()
            .map(|per_src| per_src.iter_mut().map(|v| v.iter_mut().map(|b| rbm(b)).collect()).collect())
            .collect();
        while !ops.is_empty() {
            let i = rng.gen_range(0..ops.len());
            let (s, d, is_send) = ops.swap_remove(i);
            if is_send {
                let k = next_send[s][d];
                next_send[s][d] += 1;
                sends.push((s, net.engines[s].isend(0, s as u32, 1, d, rb(&msgs[s][d][k]))));
            } else {
                let k = next_recv[d][s];
                next_recv[d][s] += 1;
                let buf = recv_slices[d][s][k];
                recvs.push((d, s, k, net.engines[d].irecv(0, Some(s as u32), Some(1), Some(s), buf)));
            }
            if rng.gen_bool(0.3) {
                net.step(rng.gen_range(1..4));
            }
        }
        recv_slices.clear();
        net.run_until(|net| {
            sends.iter().all(|&(s, id)| net.engines[s].is_done(id))
                && recvs.iter().all(|&(d, _, _, id)| net.engines[d].is_done(id))
        });
        for &(d, s, k, id) in &recvs {
            let st = net.engines[d].take(id).unwrap().unwrap();
            assert_eq!(st.bytes, msgs[s][d][k].len(), "seed {seed}");
        }
        for d in 0..n {
            for s in 0..n {
                if s != d {
                    assert_eq!(bufs[d][s], msgs[s][d], "seed {seed}: content and order from {s} to {d}");
                }
            }
        }
    }
}

#[test]
fn malformed_frames_are_errors() {
    let lim = PeerLimits { head: 50, ..streamed(50, 100) };
    let mut e = Engine::new(0, vec![lim; 2]);
    assert!(e.on_frame(1, &[1, 2, 3]).is_err());
    let f = |fr: Frame| fr.encode().as_slice().to_vec();
    assert!(e.on_frame(1, &f(Frame::Data { rreq: 12345, off: 0 })).is_err(), "data for no receive");
    assert!(e.on_frame(1, &f(Frame::Fin { sreq: 999, flags: 0 })).is_err(), "fin for no send");
    assert!(e.on_frame(1, &f(Frame::Written { rreq: 5, len: 1 })).is_err(), "write notice for no receive");
    let cts = Frame::Cts { sreq: 1, rreq: 2, off: 0, len: 1, raddr: 0 };
    assert!(e.on_frame(1, &f(cts)).is_err(), "cts for no send");
    // A CTS for bytes beyond the message is rejected.
    let m = vec![0u8; 80];
    let s = e.isend(0, 0, 0, 1, rb(&m));
    let cts = Frame::Cts { sreq: s.to_wire(), rreq: 2, off: 70, len: 20, raddr: 0 };
    assert!(e.on_frame(1, &f(cts)).is_err());
}

impl Net {
    /// Performs every engine's single-copy actions in process (all buffers live here), failing
    /// them instead when `fail` says so.
    fn run_actions(&mut self, fail: bool) -> bool {
        let mut any = false;
        for me in 0..self.engines.len() {
            for a in std::mem::take(&mut self.engines[me].actions) {
                any = true;
                match a {
                    Action::BulkRead { peer, addr, key, mut dst, rreq } => {
                        let n = dst.len();
                        if let Some(k) = self.keys[peer].get(&key) {
                            assert_eq!(*k, addr, "the key opens the announced buffer");
                        }
                        if !fail {
                            // SAFETY: `addr` is the address of a live send buffer of this test
                            // with at least `n` bytes (announced in the RTS).
                            let src = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
                            dst.write_at(0, src);
                        }
                        self.engines[me].on_bulk_read(peer, rreq, n, !fail);
                    }
                    Action::BulkWrite { peer, addr, src, sreq, rreq, off } => {
                        if !fail {
                            // SAFETY: `addr` points into a live receive buffer of this test
                            // with room for `src` (announced in the CTS).
                            let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, src.len()) };
                            dst.copy_from_slice(src.bytes());
                        }
                        self.engines[me].on_bulk_write(peer, sreq, rreq, off, src.len(), !fail);
                    }
                    Action::Conceal { key, .. } => {
                        assert!(self.keys[me].remove(&key).is_some(), "key {key} concealed once, after exposure");
                    }
                }
            }
        }
        any
    }
}

#[test]
fn single_and_split_copy_with_fallback() {
    for (split_min, fail) in [(usize::MAX, false), (8192, false), (8192, true), (usize::MAX, true)] {
        // Heads are set, but go only with streamed messages: here, after a failed read.
        let mut net = Net::new(2, 64, 100, 4).with_heads();
        for e in net.engines.iter_mut() {
            for l in e.limits.iter_mut() {
                *l = PeerLimits { bulk_read: true, bulk_write: true, split_min, ..*l };
            }
        }
        for len in [65usize, 5000, 8192, 20000, 100_003] {
            let m = data(len, len);
            let mut got = vec![0u8; len + 7];
            let r = net.engines[1].irecv(0, Some(0), Some(1), Some(0), rbm(&mut got));
            let s = net.engines[0].isend(0, 0, 1, 1, rb(&m));
            for _ in 0..100_000 {
                if net.engines[1].is_done(r) && net.engines[0].is_done(s) {
                    break;
                }
                let moved = net.step(2) | net.run_actions(fail);
                assert!(moved, "stuck at len {len} split_min {split_min} fail {fail}");
            }
            assert_eq!(net.engines[1].take(r).unwrap().unwrap().bytes, len);
            net.engines[0].take(s).unwrap().unwrap();
            assert_eq!(&got[..len], &m[..], "len {len} split_min {split_min} fail {fail}");
        }
        if !fail {
            // Where the receiver reads the sender's memory, no bytes go with the `Rts`.
            assert_eq!(net.rts_bytes[0], 0, "split_min {split_min}");
        }
    }
}

#[test]
fn exposed_buffers_are_read_by_key_and_concealed_once() {
    for fail in [false, true] {
        let mut net = Net::new(2, 64, 100, 4);
        for e in net.engines.iter_mut() {
            for l in e.limits.iter_mut() {
                *l = PeerLimits { bulk_read: true, expose: true, ..*l };
            }
        }
        let mut sends = Vec::new();
        for (i, len) in [65usize, 5000, 20000, 100_003, 7777, 300].into_iter().enumerate() {
            let m = data(len + i, len);
            let mut got = vec![0u8; len];
            let r = net.engines[1].irecv(0, Some(0), Some(i as i32), Some(0), rbm(&mut got));
            let s = net.engines[0].isend(0, 0, i as i32, 1, rb(&m));
            for _ in 0..100_000 {
                if net.engines[1].is_done(r) && net.engines[0].is_done(s) {
                    break;
                }
                let moved = net.step(2) | net.run_actions(fail);
                assert!(moved, "stuck at len {len} fail {fail}");
            }
            // The conceal action follows the FIN; run it.
            net.run_actions(fail);
            assert_eq!(net.engines[1].take(r).unwrap().unwrap().bytes, len);
            net.engines[0].take(s).unwrap().unwrap();
            assert_eq!(got, m, "len {len} fail {fail}");
            sends.push(s);
        }
        assert!(net.next_key > 5, "every rendezvous send asked for a key");
        assert!(net.keys[0].is_empty(), "keys left exposed: {:?}", net.keys[0]);
    }
    // A send that fails while exposed hands its key back for the driver to revoke.
    let mut net = Net::new(2, 64, 100, 4);
    net.engines[0].limits[1] = PeerLimits { bulk_read: true, expose: true, ..net.engines[0].limits[1] };
    let m = data(1, 5000);
    let s = net.engines[0].isend(0, 0, 1, 1, rb(&m));
    net.next_key = 7;
    net.step(1);
    let key = *net.keys[0].keys().next().expect("exposed");
    assert_eq!(net.engines[0].fail(s, Error::Timeout(std::time::Duration::from_secs(1))), Some(Exposure::Key(1, key)));
}

#[test]
fn eager_messages_land_in_posted_receives() {
    use crate::transport::Sink;
    let lim = PeerLimits { head: 50, ..streamed(1 << 20, 1 << 20) };
    let mut e = Engine::new(0, vec![lim; 2]);
    let head = |tag: i32| Frame::Eager(Envelope { ctx: 0, src: 1, tag }).encode().as_slice().to_vec();
    // A wildcard receive takes the message as its header arrives; the payload goes straight in.
    let mut got = vec![0u8; 100_000];
    let r = e.irecv(0, None, Some(5), None, rbm(&mut got));
    let m = data(3, 70_000);
    let (hlen, token, mut dst) = e.place(1, &head(5), head(5).len() + m.len()).expect("placed");
    assert_eq!((hlen, dst.len()), (head(5).len(), m.len()));
    assert!(dst.write_at(0, &m));
    assert!(e.placement_live(token));
    e.placed(1, token, m.len()).unwrap();
    let st = e.take(r).unwrap().unwrap();
    assert_eq!((st.source, st.tag, st.bytes), (1, 5, m.len()));
    assert_eq!(&got[..m.len()], &m[..]);
    assert!(e.outbox.is_empty(), "nobody to tell for an eager message");
    // Too long for the posted buffer, or nothing posted: the ordinary path takes it.
    let mut small = vec![0u8; 10];
    let r = e.irecv(0, Some(1), Some(6), Some(1), rbm(&mut small));
    assert!(e.place(1, &head(6), head(6).len() + 50).is_none());
    assert!(e.place(1, &head(7), head(7).len() + 50).is_none());
    let mut f = head(6);
    f.extend_from_slice(&[1u8; 50]);
    e.on_frame(1, &f).unwrap();
    assert!(matches!(e.take(r), Some(Err(Error::Truncate { message: 50, buffer: 10, .. }))));
}

#[test]
fn a_streamed_rendezvous_sends_its_head_with_the_rts() {
    for posted_first in [true, false] {
        // Eager limit 64, frames of 100: the `Rts` takes 64 bytes, `Data` frames the rest.
        let mut net = Net::new(2, 64, 100, 4).with_heads();
        let m = data(5, 1000);
        let mut buf = vec![0u8; 1000];
        let r = posted_first.then(|| net.engines[1].irecv(0, None, None, None, rbm(&mut buf)));
        let s = net.engines[0].isend(0, 0, 0, 1, rb(&m));
        for _ in 0..3 {
            net.step(1);
        }
        let r = r.unwrap_or_else(|| net.engines[1].irecv(0, None, None, None, rbm(&mut buf)));
        net.run_until(|n| n.engines[1].is_done(r) && n.engines[0].is_done(s));
        assert_eq!((net.rts_bytes[0], net.data_bytes[0]), (64, 936), "posted first: {posted_first}");
        assert_eq!(net.engines[1].take(r).unwrap().unwrap().bytes, 1000);
        net.engines[0].take(s).unwrap().unwrap();
        net.run_until(|n| n.engines[0].streamed.is_empty());
        assert_eq!(buf, m, "posted first: {posted_first}");
    }
    // Without a head (`head` 0, the default), the `Rts` carries no bytes and all are streamed.
    let mut net = Net::new(2, 64, 100, 4);
    let m = data(6, 1000);
    let mut buf = vec![0u8; 1000];
    let r = net.engines[1].irecv(0, None, None, None, rbm(&mut buf));
    let s = net.engines[0].isend(0, 0, 0, 1, rb(&m));
    net.run_until(|n| n.engines[1].is_done(r) && n.engines[0].is_done(s));
    assert_eq!((net.rts_bytes[0], net.data_bytes[0]), (0, 1000));
    assert_eq!(buf, m);
}

#[test]
fn rendezvous_heads_land_in_posted_receives_and_ask_for_the_rest_at_once() {
    use crate::transport::Sink;
    let lim = PeerLimits { head: 1 << 16, ..streamed(1 << 16, 1 << 20) };
    let mut e = Engine::new(0, vec![lim; 2]);
    let rts = |tag: i32, len: u64| {
        let env = Envelope { ctx: 0, src: 1, tag };
        Frame::Rts { env, len, sreq: 77, saddr: 0, skey: 0 }.encode().as_slice().to_vec()
    };
    let (len, n) = (200_000usize, 1usize << 16);
    let m = data(8, len);
    let mut got = vec![0u8; len + 10];
    let r = e.irecv(0, None, Some(5), None, rbm(&mut got));
    let (hlen, token, mut dst) = e.place(1, &rts(5, len as u64), rts(5, 0).len() + n).expect("placed");
    assert_eq!((hlen, dst.len()), (48, n));
    // The rest is asked for before the head is in.
    let cts = e.outbox.pop_front().expect("a CTS");
    let Ok((Frame::Cts { sreq, rreq, off, len: rest, raddr: 0 }, _)) = Frame::decode(cts.hdr.as_slice()) else {
        panic!("not a CTS: {cts:?}")
    };
    assert_eq!((sreq, rreq, off, rest), (77, token, n as u64, (len - n) as u64));
    assert!(dst.write_at(0, &m[..n]));
    e.placed(1, token, n).unwrap();
    assert!(!e.is_done(r));
    let mut f = Frame::Data { rreq, off: n as u64 }.encode().as_slice().to_vec();
    f.extend_from_slice(&m[n..]);
    e.on_frame(1, &f).unwrap();
    let st = e.take(r).unwrap().unwrap();
    assert_eq!((st.source, st.tag, st.bytes), (1, 5, len));
    assert_eq!(&got[..len], &m[..]);
    let fin = e.outbox.pop_front().expect("a FIN");
    assert!(matches!(Frame::decode(fin.hdr.as_slice()), Ok((Frame::Fin { sreq: 77, flags: 0 }, _))));
    // Too long for the posted buffer, or nothing posted: the ordinary path takes it, and a
    // truncated receive tells the sender so, without asking for the rest.
    let mut small = vec![0u8; 1000];
    let r = e.irecv(0, Some(1), Some(6), Some(1), rbm(&mut small));
    assert!(e.place(1, &rts(6, len as u64), 48 + n).is_none());
    assert!(e.place(1, &rts(7, len as u64), 48 + n).is_none());
    let mut f = rts(6, len as u64);
    f.extend_from_slice(&m[..n]);
    e.on_frame(1, &f).unwrap();
    assert!(matches!(e.take(r), Some(Err(Error::Truncate { message: 200_000, buffer: 1000, .. }))));
    let fin = e.outbox.pop_front().expect("a FIN");
    assert!(matches!(Frame::decode(fin.hdr.as_slice()), Ok((Frame::Fin { flags: FLAG_TRUNCATED, .. }, _))));
    assert!(e.outbox.is_empty());
    // An `Rts` whose payload is the whole message is a protocol error.
    let mut f = rts(8, 10);
    f.extend_from_slice(&[0u8; 10]);
    assert!(e.on_frame(1, &f).is_err());
}

#[test]
fn a_failed_request_leaves_no_frame_and_no_transfer_behind() {
    let timeout = || Error::Timeout(std::time::Duration::from_secs(1));
    // Sends failed before their frames left: no frame of theirs is left to send.
    let mut net = Net::new(2, 64, 100, 4);
    let (small, large) = (data(1, 10), data(2, 1000));
    let eager = net.engines[0].isend(0, 0, 1, 1, rb(&small));
    let rndv = net.engines[0].isend(0, 0, 2, 1, rb(&large));
    let other = net.engines[0].isend(0, 0, 3, 1, rb(&small));
    assert_eq!(net.engines[0].outbox.len(), 3);
    assert_eq!(net.engines[0].fail(eager, timeout()), None);
    assert_eq!(net.engines[0].fail(rndv, timeout()), None);
    let left: Vec<_> = net.engines[0].outbox.iter().map(|t| t.owner).collect();
    assert_eq!(left, [Some(other)]);

    // A single-copy read queued for a receive that then fails is never performed, and a
    // write queued for a send that then fails neither.
    let mut net = Net::new(2, 64, 100, 4);
    for e in net.engines.iter_mut() {
        for l in e.limits.iter_mut() {
            *l = PeerLimits { bulk_read: true, bulk_write: true, split_min: 4096, ..*l };
        }
    }
    let m = data(3, 20_000);
    let mut got = vec![0u8; 20_000];
    let r = net.engines[1].irecv(0, Some(0), Some(1), Some(0), rbm(&mut got));
    let s = net.engines[0].isend(0, 0, 1, 1, rb(&m));
    // The `Rts` arrives: the receiver queues its read and asks the sender to write the tail.
    net.step(1);
    assert!(matches!(net.engines[1].actions[..], [Action::BulkRead { .. }]));
    // The receiver's `Cts` arrives: the sender queues its write.
    net.step(1);
    assert!(matches!(net.engines[0].actions[..], [Action::BulkWrite { .. }]));
    assert_eq!(net.engines[1].fail(r, timeout()), Some(Exposure::Address(0)));
    assert_eq!(net.engines[0].fail(s, timeout()), Some(Exposure::Address(1)));
    assert!(!net.run_actions(false), "a transfer of a failed request was left to perform");
    assert!(got.iter().all(|&b| b == 0), "bytes landed in the buffer of a failed receive");

    // A large send to self that fails withdraws its message: a later receive does not match
    // it (and wait forever on a sender that is gone), but the next message.
    let mut e = Engine::new(0, vec![Net::new(1, 64, 100, 4).engines[0].limits[0]]);
    let (gone, next) = (data(4, 1000), data(5, 1000));
    let s = e.isend(0, 0, 9, 0, rb(&gone));
    assert!(e.probe(0, Some(0), Some(9)).is_some());
    assert_eq!(e.fail(s, timeout()), None);
    assert!(matches!(e.take(s), Some(Err(Error::Timeout(_)))));
    assert!(e.probe(0, Some(0), Some(9)).is_none(), "the failed send's message is still there");
    let s = e.isend(0, 0, 9, 0, rb(&next));
    let mut buf = vec![0u8; 1000];
    let r = e.irecv(0, Some(0), Some(9), Some(0), rbm(&mut buf));
    assert_eq!(e.take(r).expect("matched at once").unwrap().bytes, 1000);
    e.take(s).unwrap().unwrap();
    assert_eq!(buf, next);
    assert_eq!(e.live_requests(), 0);
}

/// One-sided transfers the transport does (RDMA WRITE and READ): a read's staged bytes land
/// in the request's buffer, a failed transfer fails its request with the transport's error,
/// a detached write leaves no request behind, and every end is counted for the flushes.
#[test]
fn remote_transfers_complete_fail_and_count() {
    use crate::transport::Sink;
    let mut e = Net::new(2, 1024, 4096, 8).engines.remove(0);
    let mut dst = [0u8; 4];
    // SAFETY: `dst` outlives the request, which completes below.
    let buf = unsafe { RawBufMut::new(&mut dst) };
    let read = e.rma_remote_begin(1, buf);
    let write = e.rma_remote_begin(1, RawBufMut::EMPTY);
    let detached = e.rma_remote_begin(1, RawBufMut::EMPTY);
    e.rma_remote_detach(detached);
    assert_eq!(e.rma_awaited(1), (3, 0));
    let live = e.live_requests();
    e.remote_done(1, read.to_wire(), Ok(Some(&[1, 2, 3, 4])));
    e.remote_done(1, write.to_wire(), Err(Error::Transport("RDMA WRITE failed (RemoteAccess)".into())));
    e.remote_done(1, detached.to_wire(), Ok(None));
    assert_eq!(e.rma_awaited(1), (3, 3), "every end is counted");
    assert_eq!(e.live_requests(), live - 1, "the detached write is gone");
    assert_eq!(e.reqs.take_done(read).unwrap().unwrap().bytes, 4);
    assert_eq!(dst, [1, 2, 3, 4], "the staged bytes were copied into the buffer");
    match e.reqs.take_done(write) {
        Some(Err(Error::Transport(m))) => assert!(m.contains("RemoteAccess"), "{m}"),
        other => panic!("the failed write's request: {other:?}"),
    }
    // A transfer that could not start is counted as ended, and leaves no request.
    let aborted = e.rma_remote_begin(1, RawBufMut::EMPTY);
    e.rma_remote_abort(1, aborted);
    assert_eq!(e.rma_awaited(1), (4, 4));
    assert!(e.reqs.get(aborted).is_none());
}

/// A get that travels as a message is awaited from its start to its answer (what a flush or
/// fence waits for, even before its request is waited), as is one the target refuses.
#[test]
fn gets_by_message_are_awaited_until_answered() {
    let mut net = Net::new(2, 64, 256, 4);
    let mut window = vec![0u8; 1000];
    window.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    // SAFETY: `window` outlives the engines' use of it (the net is dropped first).
    net.engines[1].win_add(7, unsafe { RawBufMut::new(&mut window) }, None);
    net.engines[0].win_add(7, RawBufMut::EMPTY, None);
    let mut dst = vec![0u8; 700];
    // SAFETY: `dst` outlives the request, which completes below.
    let buf = unsafe { RawBufMut::new(&mut dst) };
    let id = net.engines[0].rma_get(rma::At { win: 7, peer: 1, disp: 100 }, buf).unwrap();
    assert_eq!(net.engines[0].rma_awaited(1), (1, 0));
    net.run_until(|n| n.engines[0].is_done(id));
    assert_eq!(net.engines[0].rma_awaited(1), (1, 1), "answered");
    assert!(net.engines[0].reqs.take_done(id).unwrap().is_ok());
    assert!(dst.iter().enumerate().all(|(i, &b)| b == (i + 100) as u8), "the window's bytes");
    let mut small = [0u8; 8];
    // SAFETY: as above.
    let buf = unsafe { RawBufMut::new(&mut small) };
    let id = net.engines[0].rma_get(rma::At { win: 7, peer: 1, disp: 996 }, buf).unwrap();
    net.run_until(|n| n.engines[0].is_done(id));
    assert_eq!(net.engines[0].rma_awaited(1), (2, 2), "refused, and no longer awaited");
    assert!(net.engines[0].reqs.take_done(id).unwrap().is_err());
    drop(net);
}

/// A get's answer leaves from the window in place; if the window goes while the answer is
/// still queued, the answer takes a copy first, and the memory may be reused at once.
#[test]
fn a_queued_answer_takes_a_copy_when_its_window_goes() {
    let mut net = Net::new(2, 64, 256, 4);
    let mut window: Vec<u8> = (0..1000).map(|i| i as u8).collect();
    // SAFETY: `window` outlives the engine's use of it (until `win_remove` below).
    net.engines[1].win_add(7, unsafe { RawBufMut::new(&mut window) }, None);
    net.engines[0].win_add(7, RawBufMut::EMPTY, None);
    let mut dst = vec![0u8; 900];
    // SAFETY: `dst` outlives the request, which completes below.
    let buf = unsafe { RawBufMut::new(&mut dst) };
    let id = net.engines[0].rma_get(rma::At { win: 7, peer: 1, disp: 50 }, buf).unwrap();
    net.run_until(|n| !n.engines[1].outbox.is_empty());
    assert!(net.engines[1].outbox.iter().all(|t| t.window == Some(7)), "the answer views the window");
    net.engines[1].win_remove(7);
    assert!(net.engines[1].outbox.iter().all(|t| t.window.is_none()), "copied");
    window.fill(0xee);
    net.run_until(|n| n.engines[0].is_done(id));
    assert!(net.engines[0].reqs.take_done(id).unwrap().is_ok());
    assert!(dst.iter().enumerate().all(|(i, &b)| b == (i + 50) as u8), "the bytes as they were at the get");
}

/// A stream transport reads the payload of a get's answer straight into the request's
/// buffer (`Sink::place`): the engine names the spot, and the placed bytes complete it.
#[test]
fn a_get_answer_is_placed_in_its_buffer() {
    use crate::transport::Sink;
    let mut e = Net::new(2, 64, 4096, 4).engines.remove(0);
    e.win_add(7, RawBufMut::EMPTY, None);
    let mut dst = vec![0u8; 3000];
    // SAFETY: `dst` outlives the request, which completes below.
    let buf = unsafe { RawBufMut::new(&mut dst) };
    let id = e.rma_get(rma::At { win: 7, peer: 1, disp: 0 }, buf).unwrap();
    let head = Frame::Reply { oreq: id.to_wire(), off: 1000, flags: 0 }.encode();
    let hlen = head.as_slice().len();
    let (h, token, mut spot) = e.place(1, head.as_slice(), hlen + 2000).expect("placed");
    assert_eq!((h, token, spot.len()), (hlen, id.to_wire(), 2000));
    assert_eq!(spot.addr_at(0), dst.as_ptr() as u64 + 1000, "at its offset in the buffer");
    spot.write_at(0, &[5u8; 2000]);
    e.placed(1, token, 2000).unwrap();
    assert!(!e.is_done(id), "1000 bytes still to come");
    let too_long = Frame::Reply { oreq: id.to_wire(), off: 1000, flags: 0 }.encode();
    assert!(e.place(1, too_long.as_slice(), hlen + 2001).is_none(), "past the buffer's end: not placed");
    let rest = Frame::Reply { oreq: id.to_wire(), off: 0, flags: 0 }.encode();
    let (_, token, mut spot) = e.place(1, rest.as_slice(), hlen + 1000).expect("placed");
    spot.write_at(0, &[6u8; 1000]);
    e.placed(1, token, 1000).unwrap();
    assert!(e.reqs.take_done(id).unwrap().is_ok());
    assert_eq!(e.rma_awaited(1), (1, 1));
    assert!(dst[..1000].iter().all(|&b| b == 6) && dst[1000..].iter().all(|&b| b == 5));
}

#[test]
fn a_synchronous_send_ends_only_once_a_receive_matched_it() {
    for heads in [false, true] {
        let mut net = Net::new(2, 64, 100, 2);
        if heads {
            net = net.with_heads();
        }
        // Empty, small (eager for an ordinary send) and large, each unexpected at first.
        let msgs: Vec<Vec<u8>> = [0usize, 10, 1000].iter().enumerate().map(|(i, &n)| data(i, n)).collect();
        let mut bufs: Vec<Vec<u8>> = msgs.iter().map(|m| vec![0u8; m.len()]).collect();
        let sends: Vec<ReqId> =
            msgs.iter().enumerate().map(|(i, m)| net.engines[0].issend(0, 0, i as i32, 1, rb(m))).collect();
        for _ in 0..20 {
            net.step(3);
        }
        assert!(sends.iter().all(|&s| !net.engines[0].is_done(s)), "no receive yet: no send has ended");
        let recvs: Vec<ReqId> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| net.engines[1].irecv(0, Some(0), Some(i as i32), Some(0), rbm(b)))
            .collect();
        net.run_until(|n| {
            sends.iter().all(|&s| n.engines[0].is_done(s)) && recvs.iter().all(|&r| n.engines[1].is_done(r))
        });
        assert_eq!(bufs, msgs);
        for (i, r) in recvs.into_iter().enumerate() {
            assert_eq!(net.engines[1].take(r).unwrap().unwrap().bytes, msgs[i].len());
        }
        // The sends' requests are freed before they end: they go when they do.
        for s in sends {
            net.engines[0].detach(s);
        }
        assert_eq!(net.engines[0].live_requests() + net.engines[1].live_requests(), 0);
    }
    // To self: parked until the receive, which it then completes.
    let mut e = Engine::new(0, vec![streamed(64, 100)]);
    let m = data(9, 5);
    let s = e.issend(0, 0, 3, 0, rb(&m));
    assert!(!e.is_done(s), "nobody received it yet");
    let mut b = vec![0u8; 5];
    let r = e.irecv(0, Some(0), Some(3), Some(0), rbm(&mut b));
    assert!(e.is_done(s) && e.is_done(r) && b == m);
    // A request freed while in flight leaves nothing once it ends.
    let mut b2 = vec![0u8; 5];
    let r2 = e.irecv(0, Some(0), Some(4), Some(0), rbm(&mut b2));
    e.detach(r2);
    let s2 = e.isend(0, 0, 4, 0, rb(&m));
    assert!(e.is_done(s2) && b2 == m);
    e.take(s).unwrap().unwrap();
    e.take(r).unwrap().unwrap();
    e.take(s2).unwrap().unwrap();
    assert_eq!(e.live_requests(), 0);
}

#[test]
fn a_cancelled_send_is_withdrawn_only_while_nothing_matched_it() {
    // Streamed, with heads, and read by key (the cancelled send's key is concealed).
    for variant in 0..3 {
        let mut net = Net::new(2, 64, 100, 2);
        if variant == 1 {
            net = net.with_heads();
        }
        if variant == 2 {
            for l in net.engines.iter_mut().flat_map(|e| e.limits.iter_mut()) {
                *l = PeerLimits { bulk_read: true, expose: true, ..*l };
            }
        }
        let msgs: Vec<Vec<u8>> = [10usize, 1000, 1000, 10, 500].iter().enumerate().map(|(i, &n)| data(i, n)).collect();
        let e0 = &mut net.engines[0];
        // Tag 0: synchronous; 1, 2: rendezvous; 3: eager; 4: cancelled before its `Rts` left.
        let mut sends = vec![e0.issend(0, 0, 0, 1, rb(&msgs[0]))];
        sends.extend((1..5).map(|t| e0.isend(0, 0, t as i32, 1, rb(&msgs[t]))));
        net.engines[0].cancel(sends[4]);
        for _ in 0..20 {
            net.step(3);
            net.run_actions(false);
        }
        for &t in &[0, 1, 3] {
            net.engines[0].cancel(sends[t]);
        }
        let ended = [0, 1, 3, 4];
        net.run_until(|n| ended.iter().all(|&t| n.engines[0].is_done(sends[t])));
        assert!(!net.engines[0].is_done(sends[2]), "variant {variant}: a send nobody received ended");
        let results: Vec<_> = ended.iter().map(|&t| net.engines[0].take(sends[t]).unwrap()).collect();
        // The eager one had left whole: it is sent, not cancelled.
        assert_eq!(results[2], Ok(net.engines[0].sent_status()), "variant {variant}");
        for t in [0, 1, 3] {
            assert_eq!(results[t], Err(Error::Cancelled), "variant {variant}: tag {}", ended[t]);
        }
        // What is left to receive: tags 2 and 3, nothing of the others.
        let mut bufs = [vec![0u8; 1000], vec![0u8; 1000]];
        let [b2, b3] = &mut bufs;
        let r2 = net.engines[1].irecv(0, Some(0), None, Some(0), rbm(b2));
        let r3 = net.engines[1].irecv(0, Some(0), None, Some(0), rbm(b3));
        for _ in 0..100_000 {
            if net.engines[1].is_done(r2) && net.engines[1].is_done(r3) {
                break;
            }
            assert!(net.step(3) | net.run_actions(false), "variant {variant}: stuck");
        }
        net.run_until(|n| n.engines[0].is_done(sends[2]));
        net.engines[0].take(sends[2]).unwrap().unwrap();
        let st2 = net.engines[1].take(r2).unwrap().unwrap();
        let st3 = net.engines[1].take(r3).unwrap().unwrap();
        assert_eq!((st2.tag, st2.bytes, st3.tag, st3.bytes), (2, 1000, 3, 10));
        assert_eq!((&bufs[0][..], &bufs[1][..10]), (&msgs[2][..], &msgs[3][..]));
        assert_eq!(net.engines[1].probe(0, None, None), None, "variant {variant}: a cancelled message is left");
        net.run_until(|n| n.engines.iter().all(|e| e.outbox.is_empty()));
        net.run_actions(false);
        assert!(net.keys[0].is_empty(), "variant {variant}: a key left exposed");
        assert_eq!(net.engines[0].live_requests() + net.engines[1].live_requests(), 0);
    }
}

#[test]
fn a_recall_that_comes_after_the_match_is_ignored() {
    let mut net = Net::new(2, 64, 100, 2);
    let m = data(5, 1000);
    let s = net.engines[0].issend(0, 0, 0, 1, rb(&m));
    net.run_until(|n| n.engines[1].probe(0, None, None).is_some());
    // The recall is on its way while the receive matches the message.
    net.engines[0].cancel(s);
    let mut buf = vec![0u8; 1000];
    let r = net.engines[1].irecv(0, Some(0), Some(0), Some(0), rbm(&mut buf));
    net.run_until(|n| n.engines[0].is_done(s) && n.engines[1].is_done(r));
    assert!(net.engines[0].take(s).unwrap().is_ok(), "matched first: sent, not cancelled");
    assert_eq!(net.engines[1].take(r).unwrap().unwrap().bytes, 1000);
    assert_eq!(buf, m);
    // A message taken by a matching probe is matched too.
    let s = net.engines[0].issend(0, 0, 1, 1, rb(&m));
    net.run_until(|n| n.engines[1].probe(0, None, None).is_some());
    let (key, _) = net.engines[1].take_matching(0, Some(0), None).unwrap();
    net.engines[0].cancel(s);
    for _ in 0..10 {
        net.step(3);
    }
    assert!(!net.engines[0].is_done(s), "a probed message is not withdrawn");
    let mut buf = vec![0u8; 1000];
    let Some(Started::Req(r)) = net.engines[1].receive_matched(key, Some(0), rbm(&mut buf), false) else {
        panic!("the probed message is there")
    };
    net.run_until(|n| n.engines[0].is_done(s) && n.engines[1].is_done(r));
    assert!(net.engines[0].take(s).unwrap().is_ok());
    assert_eq!(buf, m);
}

#[test]
fn cancelled_receives_and_sends_to_self_complete_at_once() {
    let mut e = Engine::new(0, vec![streamed(64, 100)]);
    let mut b = vec![0u8; 5];
    let r = e.irecv(0, Some(0), Some(3), Some(0), rbm(&mut b));
    e.cancel(r);
    assert_eq!(e.take(r), Some(Err(Error::Cancelled)));
    let m = data(9, 5);
    let s = e.issend(0, 0, 3, 0, rb(&m));
    e.cancel(s);
    assert_eq!(e.take(s), Some(Err(Error::Cancelled)));
    assert_eq!(e.probe(0, None, None), None, "the cancelled message is gone");
    // A receive then waits for the next message, which it gets whole; cancelling a
    // completed request changes nothing.
    let r = e.irecv(0, Some(0), Some(3), Some(0), rbm(&mut b));
    let s = e.isend(0, 0, 3, 0, rb(&m));
    e.cancel(r);
    e.cancel(s);
    assert_eq!(e.take(r).unwrap().unwrap().bytes, 5);
    e.take(s).unwrap().unwrap();
    assert_eq!(b, m);
    assert!(e.outbox.is_empty());
    assert_eq!(e.live_requests(), 0);
}
