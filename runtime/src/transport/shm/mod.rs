//! Shared-memory transport between ranks of one host.
//!
//! One segment per job and host (segment.rs) holds a ring per ordered pair of local ranks
//! (ring.rs). Frames go through the rings (two copies: into the ring, out of it); large
//! messages are read by the receiver straight from the sender's memory in one copy where the
//! OS allows it (cma.rs: Linux `process_vm_readv`), and otherwise stream through the rings
//! in frames of the largest size (the engine's pipelined fallback).
//!
//! Tunables (environment): `MPR_SHM_FRAME` (largest frame, default 64 KiB of payload and the
//! engine's header, down to 8 KiB with many ranks on a host), `MPR_SHM_RING` (bytes of frames
//! per ring, default room for 16 of the largest: 1 MiB, less with many ranks),
//! `MPR_SHM_EAGER` (largest eager message, default: 8 KiB to a peer read in one copy while
//! every rank has a core, else what one frame holds), `MPR_SHM_CMA=0` (disable single-copy
//! reads).

mod cma;
pub(crate) use cma::admit_siblings;
mod ring;
pub(crate) mod segment;

use std::sync::atomic::Ordering;

use nix::sys::signal::kill;
use nix::unistd::Pid;

use super::{Caps, FrameSink, PeerState, Transport};
use crate::engine::wire::MAX_HEADER;
use crate::error::Error;
use ring::Ring;
use segment::{Geometry, Segment, SLOT_ALIVE, SLOT_FINALIZED};

/// Default largest frame: 64 KiB of payload and the engine's header, so messages up to 64 KiB
/// go eagerly to a peer this rank cannot read in one copy (see [`SINGLE_COPY_EAGER`]).
const DEFAULT_FRAME: usize = (64 << 10) + MAX_HEADER;

/// Default largest eager message to a peer read in one copy, while every rank has a core:
/// above it the receiver's single read beats the two copies through the ring. 2 ranks, the
/// medians of 2-3 runs of each (2 cores): ping-pong of 16 KiB 1.8 us against 3.1 eagerly,
/// 64 KiB 3.5 against 9.1; an exchange (`sendrecv`) of 16 KiB 2.9 against 4.3-4.9, of 64
/// KiB 5.1-5.6 against 9.1-11.5; streams (`bw`) of 64 KiB 25 GB/s against 15, of 16 KiB
/// 13 against 16 (the cost); at 8 KiB the streams lose too much (8.5 GB/s against 14).
/// Where ranks outnumber cores the round trip waits for the receiver's time slice, and
/// messages go eagerly up to what a frame holds, as before.
const SINGLE_COPY_EAGER: usize = 8 << 10;

/// The smallest default frame, where many ranks share a host: 8 KiB of payload.
const SMALL_FRAME: usize = (8 << 10) + MAX_HEADER;

/// Default ring: room for this many of the largest frames (thousands of small ones).
const DEFAULT_RING_FRAMES: usize = 16;

/// Ring shape and protocol thresholds, from the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShmConfig {
    /// Bytes of frames per ring.
    pub(crate) ring: usize,
    /// Largest frame (engine header and payload).
    pub(crate) frame: usize,
    pub(crate) eager: Option<usize>,
    pub(crate) cma: bool,
}

impl ShmConfig {
    pub(crate) fn from_env(nlocal: usize) -> ShmConfig {
        // Keep the whole segment within ~256 MiB however many ranks share the host: with
        // many, smaller rings of smaller frames (64 KiB frames up to 16 ranks).
        let fit = (256usize << 20) / (nlocal * nlocal).max(1);
        let frame = crate::env::parsed::<usize>("MPR_SHM_FRAME")
            .unwrap_or_else(|| (fit / DEFAULT_RING_FRAMES + MAX_HEADER).clamp(SMALL_FRAME, DEFAULT_FRAME))
            .clamp(2 * MAX_HEADER, 1 << 22);
        let least = ring::min_size(frame);
        let default = (DEFAULT_RING_FRAMES * (frame + ring::FRAME_HDR)).min(fit);
        let ring = crate::env::parsed::<usize>("MPR_SHM_RING").unwrap_or(default).clamp(least, 1 << 30);
        ShmConfig {
            ring: ring.next_multiple_of(segment::LINE),
            frame,
            eager: crate::env::parsed::<usize>("MPR_SHM_EAGER"),
            cma: cma::AVAILABLE && std::env::var("MPR_SHM_CMA").map(|v| v != "0").unwrap_or(true),
        }
    }

    /// The largest eager message to a peer whose memory this rank reads in one copy, if
    /// lower than what a frame holds: by default [`SINGLE_COPY_EAGER`], unless this rank's
    /// host has more ranks than cores or `MPR_SHM_EAGER` says otherwise.
    pub(crate) fn single_copy_eager(&self, outnumbered: bool) -> Option<usize> {
        (self.eager.is_none() && !outnumbered).then_some(SINGLE_COPY_EAGER)
    }

    /// Whether this rank may read and write the memory of the local rank with process id
    /// `pid` in one copy; the error says why not, for the verbose line of the pair.
    pub(crate) fn single_copy_to(&self, pid: u32) -> Result<(), String> {
        if !cma::AVAILABLE {
            return Err("this OS has no cross-memory attach".into());
        }
        if !self.cma {
            return Err("MPR_SHM_CMA=0".into());
        }
        cma::probe(pid)
    }

    pub(crate) fn geometry(&self, nlocal: usize) -> Geometry {
        Geometry { nlocal, ring: self.ring, frame: self.frame }
    }
}

/// The shared-memory transport of one rank.
#[derive(Debug)]
pub(crate) struct ShmTransport {
    seg: Segment,
    me: usize,
    /// World rank of each local rank.
    world_of: Vec<usize>,
    /// Local index of each world rank (`usize::MAX`: not on this host).
    local_of: Vec<usize>,
    tx: Vec<Option<Ring>>,
    rx: Vec<Option<Ring>>,
    caps: Caps,
    next_poll: usize,
    /// Single copies moved through the bounce buffer (their pair was `copy::near`), and
    /// their bytes.
    realigned: (u64, u64),
}

impl ShmTransport {
    /// Counts a single copy of `len` bytes if it went through the bounce buffer.
    fn count_realigned(&mut self, bounced: bool, len: usize) {
        if bounced {
            self.realigned = (self.realigned.0 + 1, self.realigned.1 + len as u64);
        }
    }

    /// Wraps an attached segment. `locals` are the world ranks on this host in order (the
    /// segment's local indices); `me` is this rank's world rank.
    pub(crate) fn new(seg: Segment, locals: &[usize], me: usize, world_size: usize, cfg: &ShmConfig) -> ShmTransport {
        let geo = seg.geometry();
        let mut local_of = vec![usize::MAX; world_size];
        for (i, &w) in locals.iter().enumerate() {
            local_of[w] = i;
        }
        let me_local = local_of[me];
        let (pid, state) = seg.slot(me_local);
        pid.store(std::process::id(), Ordering::Relaxed);
        state.store(SLOT_ALIVE, Ordering::Release);
        let mk = |from: usize, to: usize| {
            // SAFETY: ring (from -> to) lies inside the segment, which `self.seg` keeps mapped
            // for as long as the rings live, zeroed at creation; its geometry was checked by
            // `Segment::open` or made by `ShmConfig`; this rank is the only producer of its
            // outgoing rings and the only consumer of its incoming ones.
            (from != to).then(|| unsafe { Ring::new(seg.ring(from, to), geo.ring, geo.frame) })
        };
        seg.populate(me_local);
        let tx = (0..geo.nlocal).map(|j| mk(me_local, j)).collect();
        let rx = (0..geo.nlocal).map(|i| mk(i, me_local)).collect();
        let max_frame = geo.frame;
        let eager = cfg.eager.unwrap_or(max_frame - MAX_HEADER).min(max_frame - MAX_HEADER);
        ShmTransport {
            seg,
            me: me_local,
            world_of: locals.to_vec(),
            local_of,
            realigned: (0, 0),
            tx,
            rx,
            caps: Caps {
                name: "shm",
                max_frame,
                eager_limit: eager,
                bulk_read: cfg.cma,
                expose: false,
                bulk_write: cfg.cma,
                remote_write: false,
                remote_read: false,
            },
            next_poll: 0,
        }
    }

    fn local(&self, peer: usize) -> Result<usize, Error> {
        match self.local_of.get(peer) {
            Some(&i) if i != usize::MAX => Ok(i),
            _ => Err(Error::Transport(format!("rank {peer} is not reachable through shared memory"))),
        }
    }
}

impl Transport for ShmTransport {
    fn caps(&self) -> Caps {
        self.caps
    }

    #[inline]
    fn try_send(&mut self, peer: usize, hdr: &[u8], payload: &[u8]) -> Result<bool, Error> {
        let j = self.local(peer)?;
        match self.tx[j].as_mut() {
            Some(r) => Ok(r.push(hdr, payload)),
            None => Err(Error::Transport("shared-memory send to self".into())),
        }
    }

    #[inline]
    fn poll(&mut self, sink: &mut FrameSink<'_>) -> Result<usize, Error> {
        let n = self.rx.len();
        let mut got = 0;
        for k in 0..n {
            let i = (self.next_poll + k) % n;
            let Some(r) = self.rx[i].as_mut() else {
                continue;
            };
            let peer = self.world_of[i];
            let mut res = Ok(());
            for _ in 0..64 {
                match r.pop(|f| sink.frame(peer, f)) {
                    Some(Ok(())) => got += 1,
                    Some(Err(e)) => {
                        res = Err(e);
                        break;
                    }
                    None => break,
                }
            }
            r.release();
            res?;
        }
        self.next_poll = (self.next_poll + 1) % n.max(1);
        Ok(got)
    }

    fn bulk_read(&mut self, peer: usize, addr: u64, _key: u64, dst: &mut [u8]) -> Result<(), Error> {
        let i = self.local(peer)?;
        let pid = self.seg.slot(i).0.load(Ordering::Acquire);
        let bounced = cma::read(pid, addr, dst)?;
        self.count_realigned(bounced, dst.len());
        Ok(())
    }

    fn bulk_write(&mut self, peer: usize, addr: u64, src: &[u8]) -> Result<(), Error> {
        let i = self.local(peer)?;
        let pid = self.seg.slot(i).0.load(Ordering::Acquire);
        let bounced = cma::write(pid, addr, src)?;
        self.count_realigned(bounced, src.len());
        Ok(())
    }

    fn peer_state(&self, peer: usize) -> PeerState {
        let Ok(i) = self.local(peer) else {
            return PeerState::Alive;
        };
        let (pid, state) = self.seg.slot(i);
        match state.load(Ordering::Acquire) {
            SLOT_FINALIZED => PeerState::Finalized,
            SLOT_ALIVE => {
                let pid = pid.load(Ordering::Relaxed);
                if kill(Pid::from_raw(pid as i32), None) == Err(nix::errno::Errno::ESRCH) {
                    PeerState::Dead
                } else {
                    PeerState::Alive
                }
            }
            _ => PeerState::Alive, // not attached yet
        }
    }

    fn finalize(&mut self) {
        self.seg.slot(self.me).1.store(SLOT_FINALIZED, Ordering::Release);
        if crate::env::verbose() {
            let (n, bytes) = self.realigned;
            crate::say::say!(
                "mpr: rank {}: shm: {n} single copies ({bytes} B) realigned through the bounce buffer",
                self.world_of[self.me]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default rings: 64 KiB eager frames while few ranks share a host; with many, smaller
    /// frames and rings, every ring valid, the host's rings within the budget.
    #[test]
    fn default_rings_shrink_with_many_ranks_and_stay_valid() {
        let two = ShmConfig::from_env(2);
        assert_eq!(
            (two.frame, two.ring),
            (DEFAULT_FRAME, (DEFAULT_RING_FRAMES * (DEFAULT_FRAME + ring::FRAME_HDR)).next_multiple_of(segment::LINE))
        );
        assert_eq!(ShmConfig::from_env(16).frame, DEFAULT_FRAME);
        assert!(ShmConfig::from_env(32).frame < DEFAULT_FRAME);
        assert_eq!(ShmConfig::from_env(128).frame, SMALL_FRAME);
        for n in 1..=128 {
            let c = ShmConfig::from_env(n);
            assert!(c.ring >= ring::min_size(c.frame) && c.ring.is_multiple_of(segment::LINE), "{n} ranks: {c:?}");
            assert!(c.frame - MAX_HEADER >= 8 << 10, "{n} ranks: 8 KiB messages stay eager");
            let rings = n * n * ring::ring_bytes(c.ring);
            assert!(
                rings <= (256 << 20) + n * n * (ring::min_size(c.frame) + segment::LINE),
                "{n} ranks: {rings} bytes of rings"
            );
        }
    }
}
