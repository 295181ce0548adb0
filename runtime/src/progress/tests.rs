//! Failure paths of the driver, with a scripted transport: rank 0 is a real [`Runtime`]
//! (driven through the public API), its peers are bare engines stepped inside the
//! transport's `poll`. The script makes `try_send` to one peer refuse frames (back-pressure)
//! and then fail from a chosen call on, or makes a `poll` fail after it delivered. Every
//! test checks what reached the peers, what landed in rank 0's buffers, and that nothing is
//! left in flight.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::*;
use crate::buf::{RawBuf, RawBufMut};
use crate::comm::Comm;
use crate::engine::wire::Frame;
use crate::engine::PeerLimits;
use crate::transport::{Caps, FrameSink, RemoteOp};

/// Eager limit of every path in these tests.
const EAGER: usize = 64;

/// The simulated side of rank 0's transport.
#[derive(Debug, Default)]
struct Wire {
    /// The engines of ranks 1.. (index = world rank; rank 0 is the runtime under test).
    peers: Vec<Option<Engine>>,
    /// Frames rank 0's transport took, per peer, not yet delivered.
    to_peer: Vec<VecDeque<Vec<u8>>>,
    /// Every frame rank 0's transport took: (peer, header and payload).
    sent: Vec<(usize, Vec<u8>)>,
    /// `try_send` calls so far, per peer.
    calls: Vec<usize>,
    /// Per peer: `try_send` says "no room" from this call on (1-based) ...
    stuck_from: Vec<usize>,
    /// ... and fails from this call on.
    fail_from: Vec<usize>,
    /// `poll` calls so far, and the one that fails (after delivering).
    polls: usize,
    poll_fails_at: usize,
    /// Single-copy reads rank 0 performed: (peer, address, length).
    reads: Vec<(usize, u64, usize)>,
    /// The peers answer nothing before this time.
    quiet_until: Option<Instant>,
    /// One-sided transfers started so far; the one that fails to start, and the one whose
    /// completion is an error (1-based).
    remote_calls: usize,
    remote_refused_at: usize,
    remote_fails_at: usize,
    /// Ends of one-sided transfers, delivered at the next poll: (peer, token, error).
    remote_ends: Vec<(usize, u64, Option<Error>)>,
}

impl Wire {
    fn new(n: usize) -> Wire {
        let lim = limits(true);
        Wire {
            peers: (0..n).map(|p| (p > 0).then(|| Engine::new(p, vec![lim; n]))).collect(),
            to_peer: vec![VecDeque::new(); n],
            calls: vec![0; n],
            stuck_from: vec![usize::MAX; n],
            fail_from: vec![usize::MAX; n],
            poll_fails_at: usize::MAX,
            remote_refused_at: usize::MAX,
            remote_fails_at: usize::MAX,
            ..Wire::default()
        }
    }

    fn peer(&mut self, p: usize) -> &mut Engine {
        self.peers[p].as_mut().expect("a simulated peer")
    }

    /// Frames sent to `peer`, decoded.
    fn frames_to(&self, peer: usize) -> Vec<String> {
        self.sent.iter().filter(|(p, _)| *p == peer).map(|(_, f)| format!("{:?}", Frame::decode(f))).collect()
    }

    /// Lets every peer take what rank 0 sent, perform its single-copy transfers (rank 0's
    /// buffers live in this process) and answer; returns the frames for rank 0.
    fn step_peers(&mut self) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        for p in 1..self.peers.len() {
            let e = self.peers[p].as_mut().expect("a simulated peer");
            for f in self.to_peer[p].drain(..) {
                e.on_frame(0, &f).expect("rank 0 sends valid frames");
            }
            for a in std::mem::take(&mut e.actions) {
                match a {
                    Action::BulkRead { peer, addr, mut dst, rreq, .. } => {
                        let n = dst.len();
                        // SAFETY: `addr` is the buffer of a live send of rank 0, announced in
                        // its `Rts` with at least `n` bytes; the test keeps it alive.
                        let src = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
                        assert!(dst.write_at(0, src));
                        e.on_bulk_read(peer, rreq, n, true);
                    }
                    Action::BulkWrite { .. } => unreachable!("no single-copy writes in these tests"),
                    Action::Conceal { .. } => {}
                }
            }
            while let Some(t) = e.outbox.pop_front() {
                assert_eq!(t.peer, 0, "peers talk to rank 0 only");
                let mut f = t.hdr.as_slice().to_vec();
                f.extend_from_slice(t.payload.bytes());
                out.push((p, f));
                if let Some(id) = t.on_sent {
                    e.on_sent(id);
                }
            }
        }
        out
    }
}

/// Rank 0's transport to the simulated peers.
#[derive(Debug)]
struct Scripted {
    wire: Rc<RefCell<Wire>>,
}

impl Transport for Scripted {
    fn caps(&self) -> Caps {
        Caps {
            name: "scripted",
            max_frame: 1 << 20,
            eager_limit: EAGER,
            bulk_read: true,
            expose: false,
            bulk_write: false,
            remote_write: true,
            remote_read: true,
        }
    }

    unsafe fn start_remote(
        &mut self,
        peer: usize,
        op: RemoteOp,
        addr: u64,
        _key: u64,
        token: u64,
    ) -> Result<bool, Error> {
        let mut w = self.wire.borrow_mut();
        w.remote_calls += 1;
        let call = w.remote_calls;
        if call == w.remote_refused_at {
            return Err(Error::Transport("link down".into()));
        }
        if call == w.remote_fails_at {
            w.remote_ends.push((peer, token, Some(Error::Transport("RDMA WRITE failed (RemoteAccess)".into()))));
            return Ok(false);
        }
        // SAFETY: `addr` is a buffer of the test's, of at least the transfer's length, and
        // the caller keeps the local buffer valid until the end is reported.
        unsafe {
            match op {
                RemoteOp::Write(src) => {
                    std::ptr::copy_nonoverlapping(src.addr() as *const u8, addr as *mut u8, src.len())
                }
                RemoteOp::Read(dst) => {
                    std::ptr::copy_nonoverlapping(addr as *const u8, dst.addr_at(0) as *mut u8, dst.len())
                }
            }
        }
        w.remote_ends.push((peer, token, None));
        Ok(false)
    }

    fn try_send(&mut self, peer: usize, hdr: &[u8], payload: &[u8]) -> Result<bool, Error> {
        let mut w = self.wire.borrow_mut();
        w.calls[peer] += 1;
        let call = w.calls[peer];
        if call >= w.fail_from[peer] {
            return Err(Error::Transport("link down".into()));
        }
        if call >= w.stuck_from[peer] {
            return Ok(false);
        }
        let mut f = hdr.to_vec();
        f.extend_from_slice(payload);
        w.sent.push((peer, f.clone()));
        w.to_peer[peer].push_back(f);
        Ok(true)
    }

    fn poll(&mut self, sink: &mut FrameSink<'_>) -> Result<usize, Error> {
        let mut w = self.wire.borrow_mut();
        w.polls += 1;
        if w.quiet_until.is_some_and(|t| Instant::now() < t) {
            return Ok(0);
        }
        for (p, token, err) in std::mem::take(&mut w.remote_ends) {
            sink.remote_done(p, token, err.map_or(Ok(None), Err));
        }
        let frames = w.step_peers();
        let n = frames.len();
        for (p, f) in frames {
            sink.frame(p, &f)?;
        }
        if w.polls == w.poll_fails_at {
            return Err(Error::Transport("poll failed".into()));
        }
        Ok(n)
    }

    fn bulk_read(&mut self, peer: usize, addr: u64, _key: u64, dst: &mut [u8]) -> Result<(), Error> {
        self.wire.borrow_mut().reads.push((peer, addr, dst.len()));
        // SAFETY: `addr` is the buffer of a live send of a simulated peer, announced in its
        // `Rts` with at least `dst.len()` bytes; the test keeps it alive.
        dst.copy_from_slice(unsafe { std::slice::from_raw_parts(addr as *const u8, dst.len()) });
        Ok(())
    }

    fn bulk_write(&mut self, _peer: usize, _addr: u64, _src: &[u8]) -> Result<(), Error> {
        Err(Error::Transport("no single-copy writes".into()))
    }

    fn peer_state(&self, _peer: usize) -> PeerState {
        PeerState::Alive
    }

    fn finalize(&mut self) {}
}

fn limits(bulk_read: bool) -> PeerLimits {
    PeerLimits {
        max_payload: 1 << 19,
        eager: EAGER,
        bulk_read,
        expose: false,
        bulk_write: false,
        split_min: usize::MAX,
        head: 0,
    }
}

fn policy() -> WaitPolicy {
    // A limit on every wait, so that a test of a bug fails instead of hanging.
    WaitPolicy { spin: Duration::ZERO, check: Duration::from_millis(50), timeout: Some(Duration::from_secs(2)) }
}

/// Rank 0 of `n` ranks, whose peers are the engines in the returned wire.
fn job(n: usize) -> (Comm, std::sync::Arc<Shared>, Rc<RefCell<Wire>>) {
    let wire = Rc::new(RefCell::new(Wire::new(n)));
    let mut route = vec![0; n];
    route[0] = SELF_ROUTE;
    let engine = Engine::new(0, vec![limits(true); n]);
    let mut boot = Bootstrap::from_env().expect("a job of one without a launcher");
    (boot.rank, boot.size) = (0, n);
    let tr: Box<dyn Transport> = Box::new(Scripted { wire: wire.clone() });
    let rt = Shared::new(Runtime::new(engine, boot, vec![tr], route, policy())).expect("a shared runtime");
    (Comm::world(rt.clone()), rt, wire)
}

fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn rb(b: &[u8]) -> RawBuf {
    // SAFETY: the tests keep every buffer alive until its peer's request is done.
    unsafe { RawBuf::new(b) }
}

fn rbm(b: &mut [u8]) -> RawBufMut {
    // SAFETY: as for `rb`.
    unsafe { RawBufMut::new(b) }
}

/// Nothing of rank 0 is left in flight: no request, no schedule, no queued frame or transfer.
fn assert_idle(rt: &Shared) {
    let rt = rt.borrow();
    assert_eq!(rt.engine.live_requests(), 0, "requests left in the engine");
    assert!(rt.scheds.is_empty(), "a schedule left in flight");
    assert_eq!(rt.pending_total, 0, "frames left queued");
    assert!(rt.engine.outbox.is_empty() && rt.engine.actions.is_empty(), "work left in the engine");
}

fn is_link_down_to(e: &Error, peer: usize) -> bool {
    matches!(e, Error::Transport(s) if s.contains(&format!("rank {peer}")) && s.contains("link down"))
}

#[test]
fn a_broken_peer_fails_its_operations_and_the_others_complete() {
    let (world, rt, wire) = job(3);
    // Rank 2 takes nothing (its frames stay queued), then its link fails: at the fifth
    // offer (the eager send's at once, then its queued frame's, then twice the queue's).
    {
        let mut w = wire.borrow_mut();
        (w.stuck_from[2], w.fail_from[2]) = (1, 5);
    }
    let (small, large, to_one) = (data(1, 10), data(2, 5000), data(3, 20_000));
    let mut got = vec![0u8; to_one.len()];
    let r1 = wire.borrow_mut().peer(1).irecv(0, Some(0), Some(7), Some(0), rbm(&mut got));
    crate::request::scope(|s| {
        let eager = world.isend(s, &small[..], 2, 1).expect("accepted");
        let rndv = world.isend(s, &large[..], 2, 2).expect("accepted");
        assert_eq!(rt.borrow().pending_total, 2, "rank 2's frames wait for room");
        // A rendezvous send to a healthy peer, read by it in one copy, while rank 2's frames
        // are stuck and its link then fails.
        world.send(&to_one[..], 1, 7).expect("the send to a healthy peer completes");
        assert!(is_link_down_to(&eager.wait().unwrap_err(), 2));
        assert!(is_link_down_to(&rndv.wait().unwrap_err(), 2));
    });
    assert!(wire.borrow_mut().peer(1).take(r1).expect("received").is_ok());
    assert_eq!(got, to_one, "the healthy peer has every byte");
    assert_eq!(wire.borrow().frames_to(2), Vec::<String>::new(), "a frame of a failed send left");
    assert_idle(&rt);
    // Later operations on the broken peer fail at once, without a frame; the healthy peer's
    // traffic goes on.
    let calls = wire.borrow().calls[2];
    assert!(is_link_down_to(&world.send(&large[..], 2, 3).unwrap_err(), 2));
    assert!(is_link_down_to(&world.send(&small[..], 2, 3).unwrap_err(), 2));
    assert_eq!(wire.borrow().calls[2], calls, "a frame was offered to the broken link");
    let mut again = vec![0u8; small.len()];
    let r1 = wire.borrow_mut().peer(1).irecv(0, Some(0), Some(8), Some(0), rbm(&mut again));
    world.send(&small[..], 1, 8).unwrap();
    world.rt().borrow_mut().progress().unwrap();
    assert!(wire.borrow_mut().peer(1).take(r1).expect("received").is_ok());
    assert_eq!(again, small);
    assert_idle(&rt);
}

#[test]
fn no_single_copy_read_lands_after_its_receive_failed() {
    let (world, rt, wire) = job(2);
    let (first, second) = (data(4, 10_000), data(5, 12_000));
    let s1 = wire.borrow_mut().peer(1).isend(0, 1, 1, 0, rb(&first));
    // The first poll delivers the `Rts` (rank 0 queues its read), then fails.
    wire.borrow_mut().poll_fails_at = 1;
    let mut got = vec![0u8; first.len()];
    crate::request::scope(|s| {
        let r = world.irecv(s, &mut got[..], 1, 1).expect("posted");
        assert_eq!(r.wait().unwrap_err(), Error::Transport("poll failed".into()));
    });
    assert_idle(&rt);
    // The same peer's next message is read and arrives whole; the failed one is never read.
    let s2 = wire.borrow_mut().peer(1).isend(0, 1, 2, 0, rb(&second));
    let mut got2 = vec![0u8; second.len()];
    world.recv(&mut got2[..], 1, 2).expect("the next message arrives");
    assert_eq!(got2, second);
    for _ in 0..10 {
        rt.borrow_mut().progress().unwrap();
    }
    assert!(got.iter().all(|&b| b == 0), "bytes landed in the buffer of a failed receive");
    let reads = wire.borrow().reads.clone();
    assert_eq!(reads, [(1, second.as_ptr() as u64, second.len())], "only the second message is read");
    let mut w = wire.borrow_mut();
    assert!(w.peer(1).take(s2).expect("done").is_ok());
    assert!(!w.peer(1).is_done(s1), "the first send was never read (its receiver gave up)");
    drop(w);
    assert_idle(&rt);
}

#[test]
fn a_nonblocking_collective_whose_first_flush_fails_leaves_nothing_in_flight() {
    let (world, rt, wire) = job(3);
    // Ring allgather: rank 0 sends its block to rank 1, whose link fails at once, and
    // receives rank 2's block.
    wire.borrow_mut().fail_from[1] = 1;
    let mine = [0xa0u8; 8];
    let theirs = [0xc2u8; 8];
    let s2 = wire.borrow_mut().peer(2).isend(1, 2, 0, 0, rb(&theirs));
    let mut all = [0u8; 24];
    crate::request::scope(|s| {
        let r = world.iallgather(s, &mine[..], &mut all[..]);
        let e = r.and_then(|r| r.wait()).unwrap_err();
        assert!(is_link_down_to(&e, 1), "{e}");
    });
    assert_idle(&rt);
    assert_eq!(wire.borrow().frames_to(1), Vec::<String>::new(), "a frame reached the broken peer");
    assert_eq!(all[..8], mine, "rank 0's own block");
    assert_eq!(all[16..], theirs, "the healthy peer's block arrived");
    assert_eq!(all[8..16], [0; 8], "the round after the failure never ran");
    assert!(wire.borrow_mut().peer(2).take(s2).expect("done").is_ok());
    // The healthy peer's traffic goes on.
    let mut got = [0u8; 4];
    let r2 = wire.borrow_mut().peer(2).irecv(0, Some(0), Some(9), Some(0), rbm(&mut got));
    world.send(&[1u8, 2, 3, 4][..], 2, 9).unwrap();
    rt.borrow_mut().progress().unwrap();
    assert!(wire.borrow_mut().peer(2).take(r2).expect("received").is_ok());
    assert_eq!(got, [1, 2, 3, 4]);
}

#[test]
fn a_large_send_to_self_that_times_out_leaves_no_message() {
    let (world, rt, _) = job(1);
    rt.borrow_mut().policy.timeout = Some(Duration::from_millis(100));
    let (gone, next) = (data(6, 1000), data(7, 1000));
    assert!(matches!(world.send(&gone[..], 0, 5), Err(Error::Timeout(_))));
    assert_eq!(world.iprobe(0, 5).unwrap(), None, "the timed-out message is still there");
    let mut got = vec![0u8; next.len()];
    crate::request::scope(|s| {
        let q = world.isend(s, &next[..], 0, 5).unwrap();
        let st = world.recv(&mut got[..], 0, 5).expect("the next message, not the withdrawn one");
        assert_eq!(st.bytes, next.len());
        q.wait().unwrap();
    });
    assert_eq!(got, next);
    assert_idle(&rt);
}

#[test]
fn a_broken_peer_does_not_end_a_collective_it_is_not_part_of() {
    let (world, rt, wire) = job(3);
    wire.borrow_mut().fail_from[2] = 1;
    assert!(is_link_down_to(&world.send(&[0u8; 4][..], 2, 1).unwrap_err(), 2));
    // A barrier of ranks 0 and 1 (context 2, its collectives on 3), whose rank 1 answers
    // only after several liveness checks have run.
    let pair = Comm::new(rt.clone(), 2, 0, vec![0, 1]);
    let (s1, r1) = {
        let mut w = wire.borrow_mut();
        w.quiet_until = Some(Instant::now() + Duration::from_millis(300));
        let p1 = w.peer(1);
        (p1.isend(3, 1, 0, 0, RawBuf::EMPTY), p1.irecv(3, Some(0), Some(0), Some(0), RawBufMut::EMPTY))
    };
    let t0 = Instant::now();
    crate::request::scope(|s| pair.ibarrier(s).and_then(|r| r.wait())).expect("the barrier completes");
    assert!(t0.elapsed() >= Duration::from_millis(250), "the barrier did not wait for rank 1");
    let mut w = wire.borrow_mut();
    assert!(w.peer(1).take(s1).expect("done").is_ok() && w.peer(1).take(r1).expect("done").is_ok());
    drop(w);
    assert_idle(&rt);
    // A wait on the whole job (a wildcard receive) does end on the broken peer.
    let mut buf = [0u8; 4];
    let e = world.recv(&mut buf[..], crate::comm::ANY_SOURCE, 4).unwrap_err();
    assert!(is_link_down_to(&e, 2), "{e}");
    assert_idle(&rt);
}

#[test]
fn a_collective_that_times_out_leaves_no_request_behind() {
    let (world, rt, wire) = job(3);
    rt.borrow_mut().policy.timeout = Some(Duration::from_millis(200));
    // Ring allgather: the first round completes (rank 2's block comes), the second waits
    // for a block rank 2 never sends, while its send to rank 1 is done.
    let theirs = [0xc2u8; 8];
    let s2 = wire.borrow_mut().peer(2).isend(1, 2, 0, 0, rb(&theirs));
    let (mine, mut all) = ([0xa0u8; 8], [0u8; 24]);
    crate::request::scope(|s| {
        let e = world.iallgather(s, &mine[..], &mut all[..]).and_then(|r| r.wait()).unwrap_err();
        assert!(matches!(e, Error::Timeout(_)), "{e}");
    });
    assert_idle(&rt);
    assert_eq!(all[16..], theirs);
    assert_eq!(wire.borrow().frames_to(1).len(), 2, "both blocks went to rank 1");
    assert!(wire.borrow_mut().peer(2).take(s2).expect("done").is_ok());
}

/// One-sided transfers through the transport (RDMA WRITE and READ): one that completes moves
/// the bytes and is counted; one whose completion is an error fails its request with it;
/// one the transport refuses to start fails at once and breaks the peer; none leaves a
/// request behind.
#[test]
fn remote_transfers_complete_fail_and_break_their_peer() {
    let (_world, rt, wire) = job(3);
    let target = data(9, 256);
    let mut window = vec![0u8; 256];
    let src = data(3, 256);
    let mut r = rt.borrow_mut();
    // SAFETY: `src` and `window` outlive the transfers, which end before the next step.
    let (id, copied) = unsafe { r.rma_remote(1, RemoteOp::Write(rb(&src)), window.as_mut_ptr() as u64, 7) }.unwrap();
    assert!(!copied);
    r.wait(id).unwrap();
    assert_eq!(window, src, "the write's bytes are in the target's memory");
    let mut got = vec![0u8; 256];
    // SAFETY: as above, for `got` and `target`.
    let (id, _) = unsafe { r.rma_remote(1, RemoteOp::Read(rbm(&mut got)), target.as_ptr() as u64, 7) }.unwrap();
    assert_eq!(r.wait(id).unwrap().bytes, 256);
    assert_eq!(got, target, "the read's bytes are in the buffer");
    assert_eq!(r.engine.rma_awaited(1), (2, 2));

    wire.borrow_mut().remote_fails_at = 3;
    // SAFETY: as above.
    let (id, _) = unsafe { r.rma_remote(1, RemoteOp::Write(rb(&src)), window.as_mut_ptr() as u64, 7) }.unwrap();
    let e = r.wait(id).unwrap_err();
    assert!(matches!(&e, Error::Transport(m) if m.contains("RemoteAccess")), "{e}");
    assert_eq!(r.engine.rma_awaited(1), (3, 3), "the failed one is counted as ended");

    wire.borrow_mut().remote_refused_at = 4;
    // SAFETY: as above.
    let e = unsafe { r.rma_remote(2, RemoteOp::Write(rb(&src)), window.as_mut_ptr() as u64, 7) }.unwrap_err();
    assert!(is_link_down_to(&e, 2), "{e}");
    assert_eq!(r.engine.rma_awaited(2), (1, 1));
    // The peer is broken: the next transfer to it fails at once, without the transport.
    // SAFETY: as above.
    let again = unsafe { r.rma_remote(2, RemoteOp::Write(rb(&src)), window.as_mut_ptr() as u64, 7) };
    assert!(again.is_err_and(|e| is_link_down_to(&e, 2)));
    assert_eq!(wire.borrow().remote_calls, 4);
    drop(r);
    assert_idle(&rt);
}
