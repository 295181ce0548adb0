//! The RDMA transport: engine frames over any verbs provider, within what the Thunderbolt
//! hardware gives (UC queue pairs, SEND/RECV, page-aligned regions, few work requests).
//!
//! Every peer gets one queue pair per cable that reaches it (a link; one cable is the
//! usual case), on the device at this end of that cable, and per link, in two page-aligned
//! regions registered once per device (two of its ~100), `window + ACK_BUFS` send buffers
//! and as many receive buffers of `chunk` bytes each. A SEND carries a 16-byte header and
//! one or more engine frames, each after its length:
//!
//! ```text
//! kind u8 | 0 u8 | 0 u16 | seq u32 | ack u32 | sack u32 | len u32 | (flen u32 | frame)+  (len bytes)
//! ```
//!
//! - Frames of the wire: on UC (Thunderbolt) a SEND must span as many 4 KiB frames as the
//!   receive it lands in (TN3205), and every receive here is `chunk` bytes, so every SEND is
//!   sent at the length that spans the same frames (`wire_len`: nothing to add at the
//!   default `chunk` of one frame; beyond it, short messages are padded).
//!
//! - Packing: frames handed over in one burst (a window of small sends, a collective's
//!   steps) share a send buffer, which goes out when the next frame does not fit, at the
//!   next poll, or at a flush: one SEND, one credit, one completion and one sequence number
//!   for many messages (a window of 64 small messages takes one or two SENDs instead of 64,
//!   each of which the software provider pays a system call for and Thunderbolt a work
//!   request).
//!
//! - Credits: a peer's receive buffers are always posted (each is posted again as soon as
//!   its message is handed to the engine), and a sender has at most `window` unacknowledged
//!   messages, fewer than the receiver's buffers, so a send finds a posted receive.
//! - Reliability (UC gives none): the sans-I/O protocol of `super::link` numbers the
//!   messages, acknowledges them cumulatively and selectively (`ack`, `sack`, piggybacked on
//!   every message and sent alone when nothing else goes out), keeps what arrives ahead of a
//!   gap, and says which messages to send again (RACK and a timeout from the round trips);
//!   a sender keeps each message's buffer until it is acknowledged. Nothing at all heard
//!   from the peer for `dead_after` while messages wait: the peer is declared dead (a dead
//!   peer gives no error completion). On RC queue pairs the device retransmits; only the
//!   credits remain, and a failed completion means the peer is gone.
//! - Liveness: a side channel (the TCP connection of the pair) tells a crashed process from
//!   a busy one at once, as the kernel closes its sockets; the acknowledgement bound covers
//!   a cut link.
//! - Large messages: on RC devices with RDMA READ, a message of at least `read_min` bytes is
//!   not copied through the bounce buffers. The sender registers its buffer when the
//!   engine's RTS goes out (`expose`: the key is the region's rkey, and the region is
//!   released at the receiver's FIN, or at once if the send fails), and the receiver
//!   registers its own buffer and READs the bytes straight into it, in pieces of at most
//!   `READ_PIECE` bytes, as many at once as the send queue allows. Each side keeps at most
//!   the device's regions minus three (the two bounce regions and one receive) exposed; a
//!   message beyond that goes through the bounce buffers. On UC (Thunderbolt) every message
//!   goes through the bounce buffers, pipelined in frames.
//! - Several cables to one peer (lanes, in the order both ends agree on; see `fabric`):
//!   every frame whose order matters goes over the first; `Data` frames, which name their
//!   place in their message, go round robin over every lane with room, so a large message is
//!   striped over all the cables. Each lane is its own sequenced stream. A lane that dies
//!   ends the pair (the peer is reported dead, naming the device): its unacknowledged frames
//!   cannot be replayed over another lane without the receiver telling what it already had.
//! - Peers without a queue pair (no device of theirs shares a fabric with ours: a ring of
//!   Macs reaches its non-neighbours only over IP) are served by the side channel alone, with
//!   its own capabilities (the runtime sets their limits from it): every frame, liveness and
//!   goodbye of theirs is the side channel's.
//! - Leaving: `finalize` sends a FIN in sequence; the side channel says goodbye only once
//!   every message of ours is acknowledged and every peer's FIN has arrived (or the peer
//!   left), so no message is lost to an early exit.
//!
//! Tunables: `MPR_RDMA_CHUNK` (bytes per message, whole 4 KiB frames: default one frame on UC,
//! where a message that loses one frame is lost whole and macOS before 26.3 takes no more,
//! 64 KiB on RC), `MPR_RDMA_WINDOW` (messages in flight per peer, default 24 on UC and 16 on
//! RC, at most 32 and the device's work requests minus acknowledgement slots), `MPR_RDMA_RTO_MS` (first retransmission timeout, default 5),
//! `MPR_RDMA_TIMEOUT` (seconds without acknowledgement before a peer is declared dead,
//! default 10), `MPR_RDMA_READ_MIN` (smallest message pulled with RDMA READ where the device
//! can, default 512 KiB; `MPR_RDMA_READ=0` turns READ off).

use std::alloc::Layout;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

mod one_sided;

use super::link::{self as proto, Arrival};
use super::provider::{Completion, DeviceCaps, Mr, Opcode, Provider, QpAddr, QpId, QpType, Remote, Sge, WcStatus};
use crate::error::Error;
use crate::transport::{Caps, FrameSink, PeerState, RemoteOp, Sink, Transport};

const THDR: usize = 20;
/// The wire's frame (TN3205): a SEND and its receive span the same number of them.
const FRAME: usize = 4096;
/// Bytes before each frame in a message: its length.
const FHDR: usize = 4;
const DATA: u8 = 1;
const ACK: u8 = 2;
const FIN: u8 = 3;
/// Send buffers per peer kept for acknowledgements (never retransmitted).
const ACK_BUFS: usize = 2;
/// Receive buffers beyond the window: room for acknowledgements and a retransmission.
const RECV_SPARE: usize = 4;
/// Most completions taken per poll.
const POLL_MAX: usize = 64;
/// Largest piece of one RDMA READ work request.
const READ_PIECE: usize = 1 << 20;
/// Marks the `buf` half of a READ's work-request id (the rest: the read's generation).
const READ_TAG: usize = 0x8000_0000;
/// Regions kept for the transport itself: the two bounce regions and one receive buffer.
const OWN_REGIONS: usize = 3;

/// Protocol settings, from the environment and the device's limits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    pub(crate) chunk: usize,
    pub(crate) window: usize,
    pub(crate) rto: Duration,
    pub(crate) dead_after: Duration,
    /// Smallest message pulled with RDMA READ (`usize::MAX`: never).
    pub(crate) read_min: usize,
}

impl Tuning {
    pub(crate) fn from_env(caps: &DeviceCaps) -> Tuning {
        let default = if caps.rc { 64 << 10 } else { FRAME };
        let most_msg = (caps.max_msg / FRAME * FRAME).max(FRAME);
        let chunk = crate::env::parsed::<usize>("MPR_RDMA_CHUNK").unwrap_or(default).clamp(FRAME, most_msg);
        let chunk = chunk.div_ceil(FRAME) * FRAME;
        let most = caps.max_wr.saturating_sub(ACK_BUFS + RECV_SPARE).clamp(1, proto::MAX_WINDOW);
        let window =
            crate::env::parsed::<usize>("MPR_RDMA_WINDOW").unwrap_or(if caps.rc { 16 } else { 24 }).clamp(1, most);
        let rto = Duration::from_millis(crate::env::parsed("MPR_RDMA_RTO_MS").unwrap_or(5u64).max(1));
        let dead_after =
            crate::env::seconds("MPR_RDMA_TIMEOUT").unwrap_or(Duration::from_secs(10)).max(Duration::from_millis(100));
        let read = caps.rc && caps.rdma_read && crate::env::parsed::<u32>("MPR_RDMA_READ").unwrap_or(1) != 0;
        let read_min =
            if read { crate::env::parsed("MPR_RDMA_READ_MIN").unwrap_or(512usize << 10).max(1) } else { usize::MAX };
        Tuning { chunk, window, rto, dead_after, read_min }
    }
}

/// Page-aligned memory for registration.
#[derive(Debug)]
struct Pinned {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Pinned {
    fn new(len: usize, align: usize) -> Pinned {
        let layout = Layout::from_size_align(len.div_ceil(align) * align, align).expect("valid layout");
        // SAFETY: the layout has a non-zero size (callers ask for at least one buffer).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        Pinned { ptr: NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout)), layout }
    }

    fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the transport deregisters the region
        // (so the device stops using it) before its fields drop.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// State towards one peer.
#[derive(Debug)]
struct Link {
    rank: usize,
    /// The device (index in `devs`) whose queue pair reaches the peer.
    dev: usize,
    qp: QpId,
    /// Sequence numbers, acknowledgements, retransmission and liveness (UC).
    rel: proto::Link,
    /// The send buffer being filled with frames, not yet posted, and the bytes in it after
    /// the header.
    open: Option<(usize, usize)>,
    free: Vec<usize>,
    free_ack: Vec<usize>,
    /// Send work requests posted and not completed.
    send_wr: usize,
    /// Posts of each send buffer not yet completed: an acknowledged buffer is rewritten only
    /// when none is left (the device may still be reading a retransmission).
    in_flight: Vec<u32>,
    /// Acknowledged buffers waiting for their posts to complete.
    retired: Vec<bool>,
    fin_sent: bool,
    fin_got: bool,
    dead: Option<String>,
}

/// The RDMA transport of one rank.
#[derive(Debug)]
pub(crate) struct VerbsTransport {
    /// The devices this rank opened (one per cable on Thunderbolt), each reaching its own
    /// peers; all of one kind, so `caps` is theirs.
    devs: Vec<Box<dyn Provider>>,
    caps: DeviceCaps,
    tune: Tuning,
    /// This rank (for its verbose lines).
    me: usize,
    name: &'static str,
    /// Per world rank: its links, one per cable that reaches it, in lane order (the same
    /// order on both sides); empty: not served here. The first carries every frame whose
    /// order matters; `Data` frames go over all of them.
    lanes: Vec<Vec<usize>>,
    /// Per world rank: the lane its next `Data` frame tries first (round robin).
    turn: Vec<usize>,
    links: Vec<Link>,
    send_mem: Pinned,
    recv_mem: Pinned,
    /// The bounce regions as each device registered them (empty until `connect` did).
    send_mr: Vec<Mr>,
    recv_mr: Vec<Mr>,
    side: Box<dyn Transport>,
    comps: Vec<Completion>,
    /// Frames that arrived while a READ was waited for, delivered at the next poll (their
    /// receive buffers went back to the device at once, so the peer is never refused).
    stash: Frames,
    /// Send buffers exposed to peers for READ, by device and key.
    exposed: HashMap<(usize, u64), Mr>,
    /// Generation of the current READ (tells its completions from a given-up one's).
    read_gen: u32,
    /// Messages and bytes pulled with READ (reported by `finalize` under `MPR_VERBOSE`).
    reads: (u64, u64),
    /// Sequenced messages each device sent (not counting retransmissions), reported by
    /// `finalize` under `MPR_VERBOSE`: how the cables shared the traffic.
    carried: Vec<u64>,
    /// Engine frames sent, packed into the `carried` messages.
    frames: u64,
    /// Per device: the queue pairs open on it across the host (set by start-up, which shares
    /// them out), reported by `finalize` under `MPR_VERBOSE`.
    pub(crate) host_qps: Vec<usize>,
    /// One-sided transfers of windows (RDMA WRITE and READ, `one_sided`).
    os: one_sided::OneSided,
    finalizing: bool,
    said_goodbye: bool,
}

/// A queue pair made for `peer` before the exchange of addresses.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) peer: usize,
    /// Which of the peer's cables (0 for its first): the same number at both ends.
    pub(crate) lane: usize,
    dev: usize,
    qp: QpId,
    pub(crate) addr: QpAddr,
}

impl VerbsTransport {
    /// Creates the queue pairs for `peers` (world rank, and the index in `devs` of the device
    /// that reaches it; a rank reached over several cables is listed once per cable, in lane
    /// order); publish each `Pending::addr` to its peer, then call
    /// [`VerbsTransport::connect`] with the peers' addresses. Each device's queue pairs stay
    /// within its own limit.
    pub(crate) fn prepare(devs: &mut [Box<dyn Provider>], peers: &[(usize, usize)]) -> Result<Vec<Pending>, Error> {
        for (d, dev) in devs.iter().enumerate() {
            let need = peers.iter().filter(|p| p.1 == d).count();
            let caps = dev.caps();
            if need > caps.max_qp {
                return Err(Error::Bootstrap(format!(
                    "RDMA: {need} peers need {need} queue pairs, the device {} has {}",
                    dev.name(),
                    caps.max_qp
                )));
            }
        }
        let mut out: Vec<Pending> = Vec::new();
        for &(peer, d) in peers {
            let ty = if devs[d].caps().rc { QpType::Rc } else { QpType::Uc };
            match devs[d].create_qp(ty) {
                Ok((qp, addr)) => {
                    let lane = out.iter().filter(|p| p.peer == peer).count();
                    out.push(Pending { peer, lane, dev: d, qp, addr })
                }
                Err(e) => {
                    for p in &out {
                        let _ = devs[p.dev].destroy_qp(p.qp);
                    }
                    return Err(Error::Bootstrap(format!("RDMA queue pair for rank {peer}: {e}")));
                }
            }
        }
        Ok(out)
    }

    /// Connects the prepared queue pairs to `remote` (the peers' addresses, in the same
    /// order), registers the buffers and posts every receive. `side` is the transport whose
    /// connections to the same peers serve as the liveness side channel.
    pub(crate) fn connect(
        mut devs: Vec<Box<dyn Provider>>,
        me: usize,
        size: usize,
        prepared: Vec<Pending>,
        remote: &[QpAddr],
        side: Box<dyn Transport>,
    ) -> Result<VerbsTransport, Error> {
        let caps = devs.first().ok_or_else(|| Error::Bootstrap("RDMA: no device".into()))?.caps();
        let tune = Tuning::from_env(&caps);
        let per = tune.window + ACK_BUFS;
        let recv_per = tune.window + ACK_BUFS + RECV_SPARE;
        let n = prepared.len().max(1);
        let align = caps.align.max(FRAME);
        let send_mem = Pinned::new(n * per * tune.chunk, align);
        let recv_mem = Pinned::new(n * recv_per * tune.chunk, align);
        let now = Instant::now();
        let set = proto::Settings { window: tune.window, rto: tune.rto, dead_after: tune.dead_after };
        let mut lanes = vec![Vec::new(); size];
        let links = prepared
            .iter()
            .enumerate()
            .map(|(i, p)| {
                lanes[p.peer].push(i);
                Link {
                    rank: p.peer,
                    dev: p.dev,
                    qp: p.qp,
                    rel: proto::Link::new(set, now),
                    open: None,
                    free: (0..tune.window).rev().collect(),
                    in_flight: vec![0; per],
                    retired: vec![false; per],
                    free_ack: (tune.window..per).collect(),
                    send_wr: 0,
                    fin_sent: false,
                    fin_got: false,
                    dead: None,
                }
            })
            .collect();
        let name = if caps.rc { "rdma (RC)" } else { "rdma (UC)" };
        let n_devs = devs.len();
        let mut t = VerbsTransport {
            devs: {
                // Connect first: a failure here must still release the queue pairs.
                for (p, r) in prepared.iter().zip(remote) {
                    if let Err(e) = devs[p.dev].connect(p.qp, r) {
                        for p in &prepared {
                            let _ = devs[p.dev].destroy_qp(p.qp);
                        }
                        return Err(Error::Bootstrap(format!("RDMA connection to rank {}: {e}", p.peer)));
                    }
                }
                devs
            },
            caps,
            tune,
            me,
            name,
            lanes,
            turn: vec![0; size],
            links,
            send_mem,
            recv_mem,
            send_mr: Vec::new(),
            recv_mr: Vec::new(),
            side,
            comps: Vec::with_capacity(POLL_MAX),
            stash: Frames::default(),
            exposed: HashMap::new(),
            read_gen: 0,
            reads: (0, 0),
            carried: vec![0; n_devs],
            host_qps: Vec::new(),
            frames: 0,
            os: Default::default(),
            finalizing: false,
            said_goodbye: false,
        };
        // From here on, Drop releases everything.
        let reg = |dev: &mut Box<dyn Provider>, m: &Pinned| {
            // SAFETY: the region lives in `t` and is deregistered in Drop before it is freed.
            unsafe { dev.register(m.ptr.as_ptr(), m.layout.size()) }
                .map_err(|e| Error::Bootstrap(format!("RDMA memory registration: {e}")))
        };
        for d in 0..t.devs.len() {
            let mr = reg(&mut t.devs[d], &t.send_mem)?;
            t.send_mr.push(mr);
            let mr = reg(&mut t.devs[d], &t.recv_mem)?;
            t.recv_mr.push(mr);
        }
        for l in 0..t.links.len() {
            for b in 0..recv_per {
                t.post_recv(l, b)?;
            }
        }
        Ok(t)
    }

    fn recv_sge(&self, link: usize, buf: usize) -> Sge {
        let per = self.tune.window + ACK_BUFS + RECV_SPARE;
        let mr = self.recv_mr[self.links[link].dev];
        Sge {
            addr: self.recv_mem.addr() + ((link * per + buf) * self.tune.chunk) as u64,
            len: self.tune.chunk as u32,
            lkey: mr.lkey,
        }
    }

    fn send_ptr(&self, link: usize, buf: usize) -> *mut u8 {
        let per = self.tune.window + ACK_BUFS;
        // SAFETY: link < links and buf < per, so the offset is inside `send_mem`.
        unsafe { self.send_mem.ptr.as_ptr().add((link * per + buf) * self.tune.chunk) }
    }

    fn send_sge(&self, link: usize, buf: usize, len: usize) -> Sge {
        let mr = self.send_mr[self.links[link].dev];
        Sge { addr: self.send_ptr(link, buf) as u64, len: len as u32, lkey: mr.lkey }
    }

    fn wr_id(link: usize, buf: usize) -> u64 {
        ((link as u64) << 32) | buf as u64
    }

    fn post_recv(&mut self, link: usize, buf: usize) -> Result<(), Error> {
        let sge = self.recv_sge(link, buf);
        let (qp, d) = (self.links[link].qp, self.links[link].dev);
        self.devs[d]
            .post_recv(qp, Self::wr_id(link, buf), sge)
            .map_err(|e| Error::Transport(format!("RDMA receive: {e}")))
    }

    /// Writes the header of a message into send buffer `buf` of `link`.
    fn header(&self, link: usize, buf: usize, kind: u8, seq: u32, len: usize) {
        let mut h = [0u8; THDR];
        h[0] = kind;
        h[4..8].copy_from_slice(&seq.to_le_bytes());
        h[16..20].copy_from_slice(&(len as u32).to_le_bytes());
        h[8..16].copy_from_slice(&self.ack_bytes(link));
        // SAFETY: every send buffer holds `chunk >= THDR` bytes; the device reads it only
        // after the post that follows.
        unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), self.send_ptr(link, buf), THDR) };
    }

    /// The acknowledgement every message carries (header bytes 8..16): `ack`, `sack`.
    fn ack_bytes(&self, link: usize) -> [u8; 8] {
        let (ack, sack) = self.links[link].rel.ack();
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&ack.to_le_bytes());
        b[4..].copy_from_slice(&sack.to_le_bytes());
        b
    }

    /// The length a message of `len` bytes goes out at: on UC, at least as many frames as the
    /// receives (`chunk`) span, the padding never read.
    fn wire_len(&self, len: usize) -> usize {
        if self.caps.rc {
            len
        } else {
            len.max(self.tune.chunk - FRAME + 1)
        }
    }

    fn post_send(&mut self, link: usize, buf: usize, len: usize) -> Result<(), Error> {
        let sge = self.send_sge(link, buf, self.wire_len(THDR + len));
        let l = &mut self.links[link];
        self.devs[l.dev]
            .post_send(l.qp, Self::wr_id(link, buf), sge)
            .map_err(|e| Error::Transport(format!("RDMA send: {e}")))?;
        l.send_wr += 1;
        l.in_flight[buf] += 1;
        l.rel.ack_sent();
        Ok(())
    }

    /// Whether `link` can take another sequenced message now (a free buffer, a work request).
    fn room(&self, link: usize) -> bool {
        let l = &self.links[link];
        !l.free.is_empty() && l.rel.can_send() && l.send_wr < self.caps.max_wr
    }

    /// Queues a sequenced message (a FIN: no frame) after the frames packed so far; false if
    /// there is no room now.
    fn send_seq(&mut self, link: usize, kind: u8) -> Result<bool, Error> {
        if !self.seal(link)? || !self.room(link) {
            return Ok(false);
        }
        let buf = self.links[link].free.pop().expect("room checked");
        self.post_seq(link, buf, kind, 0)?;
        Ok(true)
    }

    /// Packs frame `hdr ++ payload` into `link`'s open send buffer, posting the buffer first
    /// if the frame does not fit in it; false if there is no room now.
    fn pack(&mut self, link: usize, hdr: &[u8], payload: &[u8]) -> Result<bool, Error> {
        let n = hdr.len() + payload.len();
        debug_assert!(THDR + FHDR + n <= self.tune.chunk);
        let (buf, used) = match self.links[link].open {
            Some((buf, used)) if THDR + used + FHDR + n <= self.tune.chunk => (buf, used),
            _ => {
                if !self.seal(link)? || !self.room(link) {
                    return Ok(false);
                }
                (self.links[link].free.pop().expect("room checked"), 0)
            }
        };
        let dst = THDR + used;
        for (off, part) in [(0, &(n as u32).to_le_bytes()[..]), (FHDR, hdr), (FHDR + hdr.len(), payload)] {
            // SAFETY: the frame fits the buffer after what it holds (checked above); the buffer
            // is ours (taken from `free`) and not posted until `seal`.
            unsafe {
                std::ptr::copy_nonoverlapping(part.as_ptr(), self.send_ptr(link, buf).add(dst + off), part.len())
            };
        }
        self.links[link].open = Some((buf, used + FHDR + n));
        self.frames += 1;
        Ok(true)
    }

    /// Posts `link`'s open send buffer, if any; false if it could not go now (no work request
    /// free: it stays open, and the next poll tries again).
    fn seal(&mut self, link: usize) -> Result<bool, Error> {
        let Some((buf, used)) = self.links[link].open else { return Ok(true) };
        if self.links[link].send_wr >= self.caps.max_wr {
            return Ok(false);
        }
        self.links[link].open = None;
        self.post_seq(link, buf, DATA, used)?;
        Ok(true)
    }

    /// Posts send buffer `buf` of `link`, holding `len` bytes after the header, as the next
    /// sequenced message, kept until acknowledged.
    fn post_seq(&mut self, link: usize, buf: usize, kind: u8, len: usize) -> Result<(), Error> {
        let seq = self.links[link].rel.next_seq();
        self.header(link, buf, kind, seq, len);
        self.post_send(link, buf, len)?;
        let l = &mut self.links[link];
        l.rel.sent(buf, len, Instant::now());
        self.carried[l.dev] += 1;
        Ok(())
    }

    /// Posts every open send buffer that can go now.
    fn seal_all(&mut self) -> Result<(), Error> {
        for link in 0..self.links.len() {
            if self.links[link].open.is_some() && self.links[link].dead.is_none() {
                self.seal(link)?;
            }
        }
        Ok(())
    }

    fn send_ack(&mut self, link: usize) -> Result<(), Error> {
        let l = &self.links[link];
        if l.send_wr >= self.caps.max_wr {
            return Ok(());
        }
        let Some(buf) = self.links[link].free_ack.pop() else { return Ok(()) };
        self.header(link, buf, ACK, 0, 0);
        self.post_send(link, buf, 0)
    }

    /// Takes the acknowledgement `ack` and `sack` from `link`'s peer; the send buffers it
    /// frees go back to `free` (or wait for their posts to complete).
    fn acked(&mut self, link: usize, ack: u32, sack: u32) {
        let l = &mut self.links[link];
        l.rel.on_ack(ack, sack, Instant::now());
        let Link { rel, free, in_flight, retired, .. } = l;
        for b in rel.released() {
            if in_flight[b] == 0 {
                free.push(b);
            } else {
                retired[b] = true;
            }
        }
    }

    fn on_recv(&mut self, link: usize, buf: usize, c: &Completion, sink: &mut FrameSink<'_>) -> Result<usize, Error> {
        let peer = self.links[link].rank;
        if c.status != WcStatus::Success {
            return match c.status {
                WcStatus::Flushed => Ok(0),
                s => Err(Error::Transport(format!("RDMA receive from rank {peer} failed: {s:?}"))),
            };
        }
        let sge = self.recv_sge(link, buf);
        let got = (c.byte_len as usize).min(self.tune.chunk);
        // SAFETY: the device finished writing this buffer (its completion is here) and it is
        // posted again only after this slice's last use below.
        let msg = unsafe { std::slice::from_raw_parts(sge.addr as *const u8, got) };
        if got < THDR {
            return Err(Error::Transport(format!("RDMA: a {got}-byte message from rank {peer} has no header")));
        }
        let word = |at: usize| u32::from_le_bytes(msg[at..at + 4].try_into().expect("4 bytes"));
        let (kind, seq, ack, sack, len) = (msg[0], word(4), word(8), word(12), word(16) as usize);
        if THDR + len > got || !(DATA..=FIN).contains(&kind) {
            return Err(Error::Transport(format!(
                "RDMA: malformed message from rank {peer} (kind {kind}, {len} bytes in {got}, byte_len {})",
                c.byte_len
            )));
        }
        self.acked(link, ack, sack);
        let mut n = 0;
        if kind != ACK {
            let body = &msg[THDR..THDR + len];
            match self.links[link].rel.arrive(seq, kind, body) {
                Arrival::InOrder => {
                    n += self.take(link, kind, body, sink)?;
                    while let Some(h) = self.links[link].rel.take_ready() {
                        n += self.take(link, h.kind, &h.body, sink)?;
                    }
                }
                Arrival::Held | Arrival::Duplicate => {}
            }
        }
        self.post_recv(link, buf)?;
        Ok(n)
    }

    /// A sequenced message of `link`'s peer, in order: its frames to `sink`, or its FIN.
    fn take(&mut self, link: usize, kind: u8, body: &[u8], sink: &mut FrameSink<'_>) -> Result<usize, Error> {
        if kind == FIN {
            self.links[link].fin_got = true;
            return Ok(0);
        }
        unpack(self.links[link].rank, body, sink)
    }

    fn on_send(&mut self, link: usize, buf: usize, c: &Completion) {
        let l = &mut self.links[link];
        l.send_wr = l.send_wr.saturating_sub(1);
        l.in_flight[buf] = l.in_flight[buf].saturating_sub(1);
        if buf >= self.tune.window {
            l.free_ack.push(buf);
        } else if l.in_flight[buf] == 0 && l.retired[buf] {
            l.retired[buf] = false;
            l.free.push(buf);
        }
        // UC: an error completion means the message may be lost; the retransmission covers
        // it. RC: the device gave up on the peer.
        if self.caps.rc && !matches!(c.status, WcStatus::Success | WcStatus::Flushed) && l.dead.is_none() {
            let why = format!("RDMA send through device {} failed ({:?})", self.device_of(link), c.status);
            self.links[link].dead = Some(why);
        }
    }

    /// Handles one completion of a receive or a send (frames go to `sink`); returns the
    /// events it made.
    fn complete(&mut self, c: &Completion, sink: &mut FrameSink<'_>) -> Result<usize, Error> {
        let (link, buf) = ((c.wr_id >> 32) as usize, (c.wr_id & 0xffff_ffff) as usize);
        if link >= self.links.len() {
            return Ok(0);
        }
        match c.op {
            Opcode::Recv => self.on_recv(link, buf, c, sink),
            _ if buf & one_sided::REMOTE_TAG != 0 => {
                self.on_remote(link, buf & !one_sided::REMOTE_TAG, c);
                Ok(1)
            }
            // A READ given up on (its wait ended early): only its queue slot is left.
            _ if buf & READ_TAG != 0 => {
                let l = &mut self.links[link];
                l.send_wr = l.send_wr.saturating_sub(1);
                Ok(0)
            }
            _ => {
                self.on_send(link, buf, c);
                Ok(1)
            }
        }
    }

    /// Whether large messages are pulled with RDMA READ (RC devices that have it).
    fn reads(&self) -> bool {
        self.tune.read_min != usize::MAX
    }

    /// Retransmissions, standalone acknowledgements, the dead-peer bound, and the goodbye.
    fn timers(&mut self) -> Result<(), Error> {
        let now = Instant::now();
        let mut again = Vec::new();
        for link in 0..self.links.len() {
            let l = &mut self.links[link];
            if l.dead.is_some() {
                continue;
            }
            if l.rel.dead(now) {
                let why = format!(
                    "no RDMA acknowledgement through device {} for {:.1} s",
                    self.device_of(link),
                    self.tune.dead_after.as_secs_f64()
                );
                self.links[link].dead = Some(why);
                continue;
            }
            if !self.caps.rc {
                let room = self.caps.max_wr.saturating_sub(l.send_wr);
                again.clear();
                l.rel.retransmit(now, room, &mut again);
                for &(buf, len) in &again {
                    if self.links[link].in_flight[buf] == 0 {
                        // Refresh the piggybacked acknowledgement.
                        let ack = self.ack_bytes(link);
                        // SAFETY: the buffer is ours until acknowledged and no post of it is
                        // in flight (the device reads it no more); bytes 8..16 are `ack`, `sack`.
                        unsafe { std::ptr::copy_nonoverlapping(ack.as_ptr(), self.send_ptr(link, buf).add(8), 8) };
                    }
                    self.post_send(link, buf, len)?;
                }
            }
            if self.links[link].rel.ack_alone() {
                self.send_ack(link)?;
            }
        }
        if self.finalizing && !self.said_goodbye && self.quiet() {
            self.said_goodbye = true;
            self.side.finalize();
        }
        Ok(())
    }

    /// The span of whole alignment units (pages, where the device needs them) around
    /// `len` bytes at `addr`.
    fn span(&self, addr: u64, len: usize) -> (u64, usize) {
        let a = self.caps.align.max(1) as u64;
        let start = addr / a * a;
        let end = (addr + len as u64).div_ceil(a) * a;
        (start, (end - start).max(a) as usize)
    }

    /// READs `dst.len()` bytes at `remote` of `link`'s peer into `dst` (registered as
    /// `lkey`), in pieces, as many in flight as the send queue allows. Other completions
    /// are handled meanwhile, and the frames that arrive are stashed for the next poll.
    fn read_into(&mut self, link: usize, remote: Remote, dst: &mut [u8], lkey: u32) -> Result<(), Error> {
        let peer = self.links[link].rank;
        self.read_gen = self.read_gen.wrapping_add(1) & 0x7fff_ffff;
        let id = Self::wr_id(link, READ_TAG | self.read_gen as usize);
        let piece = READ_PIECE.min(self.caps.max_msg);
        let (base, total) = (dst.as_mut_ptr() as u64, dst.len());
        let (mut off, mut outstanding) = (0usize, 0usize);
        let deadline = Instant::now() + self.tune.dead_after;
        let mut comps = Vec::new();
        while off < total || outstanding > 0 {
            while off < total && self.links[link].send_wr < self.caps.max_wr {
                let k = piece.min(total - off);
                let sge = Sge { addr: base + off as u64, len: k as u32, lkey };
                let at = Remote { addr: remote.addr + off as u64, rkey: remote.rkey };
                self.devs[self.links[link].dev]
                    .post_read(self.links[link].qp, id, sge, at)
                    .map_err(|e| Error::Transport(format!("RDMA READ from rank {peer}: {e}")))?;
                self.links[link].send_wr += 1;
                outstanding += 1;
                off += k;
            }
            comps.clear();
            self.devs[self.links[link].dev]
                .poll(&mut comps, POLL_MAX)
                .map_err(|e| Error::Transport(format!("RDMA poll: {e}")))?;
            let mut failed = None;
            let mut stash = std::mem::take(&mut self.stash);
            let mut err = None;
            for c in comps.drain(..) {
                if c.wr_id != id {
                    if let Err(e) = self.complete(&c, &mut stash) {
                        err.get_or_insert(e);
                    }
                    continue;
                }
                outstanding -= 1;
                let l = &mut self.links[link];
                l.send_wr = l.send_wr.saturating_sub(1);
                if c.status != WcStatus::Success {
                    failed.get_or_insert(c.status);
                }
            }
            self.stash = stash;
            if let Some(e) = err {
                return Err(e);
            }
            if let Some(st) = failed {
                return Err(Error::Transport(format!("RDMA READ from rank {peer} failed ({st:?})")));
            }
            if Instant::now() > deadline {
                return Err(Error::Transport(format!(
                    "RDMA READ from rank {peer} not done after {:.1} s",
                    self.tune.dead_after.as_secs_f64()
                )));
            }
        }
        Ok(())
    }

    /// Registers `len` bytes at `addr` on `link`'s device for its peer's remote access,
    /// within the regions left to expose; the key to announce.
    ///
    /// # Safety
    /// The memory must stay valid until `conceal` of the key, which deregisters it.
    unsafe fn register_at(&mut self, link: usize, addr: u64, len: usize) -> Option<u64> {
        let budget = self.caps.max_mr.saturating_sub(OWN_REGIONS);
        if len == 0 || self.exposed.len() >= budget || self.links[link].dead.is_some() {
            return None;
        }
        let (start, n) = self.span(addr, len);
        let d = self.links[link].dev;
        // SAFETY: the caller keeps the memory valid until `conceal`, which deregisters it.
        let mr = unsafe { self.devs[d].register(start as *mut u8, n) }.ok()?;
        let key = (u64::from(mr.id) << 32) | u64::from(mr.rkey);
        self.exposed.insert((d, key), mr);
        Some(key)
    }

    /// The first link (queue pair) to `peer`, which carries its ordered frames, if it has one.
    fn link_of(&self, peer: usize) -> Option<usize> {
        self.lanes.get(peer).and_then(|l| l.first()).copied()
    }

    /// The first of `peer`'s links that died, with why.
    fn dead_lane(&self, peer: usize) -> Option<&String> {
        self.lanes.get(peer)?.iter().find_map(|&l| self.links[l].dead.as_ref())
    }

    /// The device of link `l` as its messages name it.
    fn device_of(&self, l: usize) -> String {
        self.devs[self.links[l].dev].name()
    }

    /// Every message of ours is acknowledged and every peer said FIN (or is gone: left, or
    /// one of its cables died, which ends the pair).
    fn quiet(&self) -> bool {
        self.links.iter().all(|l| {
            self.peer_state(l.rank) != PeerState::Alive || (l.fin_sent && l.open.is_none() && l.rel.idle() && l.fin_got)
        })
    }
}

/// Hands every frame of a message's body (`(flen u32 | frame)+`) to `sink`; returns how many.
fn unpack(peer: usize, mut body: &[u8], sink: &mut FrameSink<'_>) -> Result<usize, Error> {
    let mut n = 0;
    while !body.is_empty() {
        let flen = body.get(..FHDR).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize);
        let Some(frame) = flen.and_then(|f| body.get(FHDR..FHDR + f)) else {
            return Err(Error::Transport(format!(
                "RDMA: malformed message from rank {peer} (a frame runs past its {} bytes)",
                body.len()
            )));
        };
        sink.frame(peer, frame)?;
        body = &body[FHDR + frame.len()..];
        n += 1;
    }
    Ok(n)
}

impl Transport for VerbsTransport {
    fn caps(&self) -> Caps {
        Caps {
            name: self.name,
            max_frame: self.tune.chunk - THDR - FHDR,
            eager_limit: (self.tune.chunk - THDR - FHDR - crate::engine::wire::MAX_HEADER).min(32 << 10),
            bulk_read: self.reads(),
            expose: true,
            bulk_write: false,
            remote_write: self.caps.rc && self.caps.rdma_write,
            remote_read: self.caps.rc && self.caps.rdma_read,
        }
    }

    fn try_send(&mut self, peer: usize, hdr: &[u8], payload: &[u8]) -> Result<bool, Error> {
        let Some(link) = self.link_of(peer) else {
            return self.side.try_send(peer, hdr, payload);
        };
        if let Some(why) = self.dead_lane(peer) {
            return Err(Error::PeerGone { rank: peer, detail: why.clone() });
        }
        self.pack(link, hdr, payload)
    }

    fn try_send_any_order(&mut self, peer: usize, hdr: &[u8], payload: &[u8]) -> Result<bool, Error> {
        let n = self.lanes.get(peer).map_or(0, Vec::len);
        if n < 2 {
            return self.try_send(peer, hdr, payload);
        }
        if let Some(why) = self.dead_lane(peer) {
            return Err(Error::PeerGone { rank: peer, detail: why.clone() });
        }
        // Round robin over the cables, skipping the full ones.
        for k in 0..n {
            let lane = (self.turn[peer] + k) % n;
            if self.pack(self.lanes[peer][lane], hdr, payload)? {
                self.turn[peer] = (lane + 1) % n;
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn poll(&mut self, sink: &mut FrameSink<'_>) -> Result<usize, Error> {
        // What was packed since the last poll goes out now.
        self.seal_all()?;
        let mut comps = std::mem::take(&mut self.comps);
        comps.clear();
        let mut n = self.stash.0.len() + self.stash.1.len();
        for (peer, f) in self.stash.0.drain(..) {
            sink.frame(peer, &f)?;
        }
        for (peer, token, r) in self.stash.1.drain(..) {
            sink.remote_done(peer, token, r.as_ref().map(|b| b.as_deref()).map_err(Clone::clone));
        }
        let mut err = None;
        for dev in self.devs.iter_mut() {
            if let Err(e) = dev.poll(&mut comps, POLL_MAX) {
                err.get_or_insert(Error::Transport(format!("RDMA poll: {e}")));
            }
        }
        for c in &comps {
            match self.complete(c, sink) {
                Ok(k) => n += k,
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
        self.comps = comps;
        if self.remote_busy() {
            self.remote_pump();
            self.remote_finish(sink);
        }
        if let Some(e) = err {
            return Err(e);
        }
        self.timers()?;
        n += self.side.poll(sink)?;
        Ok(n)
    }

    fn bulk_read(&mut self, peer: usize, addr: u64, key: u64, dst: &mut [u8]) -> Result<(), Error> {
        let Some(link) = self.link_of(peer).filter(|_| self.reads()) else {
            return Err(Error::Transport(format!("RDMA transport to rank {peer} has no RDMA READ")));
        };
        if let Some(why) = &self.links[link].dead {
            return Err(Error::PeerGone { rank: peer, detail: why.clone() });
        }
        let (start, n) = self.span(dst.as_mut_ptr() as u64, dst.len());
        let d = self.links[link].dev;
        // SAFETY: `dst` is borrowed mutably for this call, and the region is deregistered
        // before it returns.
        let mr = unsafe { self.devs[d].register(start as *mut u8, n) }.map_err(|e| {
            Error::Transport(format!("RDMA READ from rank {peer}: registering the receive buffer: {e}"))
        })?;
        let res = self.read_into(link, Remote { addr, rkey: key as u32 }, dst, mr.lkey);
        let _ = self.devs[d].deregister(mr);
        if res.is_ok() {
            self.reads = (self.reads.0 + 1, self.reads.1 + dst.len() as u64);
        }
        if let Err(e) = &res {
            // A failed READ leaves an RC queue pair in the error state: the link is gone.
            self.links[link].dead.get_or_insert_with(|| e.to_string());
        }
        res
    }

    unsafe fn expose(&mut self, peer: usize, addr: u64, len: usize) -> Option<u64> {
        // Point-to-point: the peer READs the message (RC with READ, `MPR_RDMA_READ`).
        let link = self.link_of(peer).filter(|_| self.reads() && len >= self.tune.read_min)?;
        // SAFETY: the caller's contract is `register_at`'s.
        unsafe { self.register_at(link, addr, len) }
    }

    unsafe fn register_region(&mut self, peer: usize, addr: u64, len: usize) -> Option<u64> {
        // One-sided: the peer WRITEs and READs the window (RC with both).
        let link = self.remote_link(peer)?;
        // SAFETY: the caller's contract is `register_at`'s.
        unsafe { self.register_at(link, addr, len) }
    }

    unsafe fn start_remote(
        &mut self,
        peer: usize,
        op: RemoteOp,
        addr: u64,
        key: u64,
        token: u64,
    ) -> Result<bool, Error> {
        // SAFETY: the caller's contract is the trait's.
        unsafe { self.remote_start(peer, op, addr, key, token) }
    }

    fn conceal(&mut self, peer: usize, key: u64) {
        let Some(d) = self.link_of(peer).map(|l| self.links[l].dev) else { return };
        if let Some(mr) = self.exposed.remove(&(d, key)) {
            let _ = self.devs[d].deregister(mr);
        }
    }

    fn bulk_write(&mut self, peer: usize, _addr: u64, _src: &[u8]) -> Result<(), Error> {
        Err(Error::Transport(format!("RDMA transport to rank {peer} has no single-copy writes")))
    }

    fn peer_state(&self, peer: usize) -> PeerState {
        match (self.side.peer_state(peer), self.dead_lane(peer)) {
            (PeerState::Alive, Some(_)) => PeerState::Dead,
            (s, _) => s,
        }
    }

    fn why_dead(&self, peer: usize) -> Option<String> {
        match self.link_of(peer) {
            Some(_) => self.dead_lane(peer).cloned(),
            None => self.side.why_dead(peer),
        }
    }

    fn finalize(&mut self) {
        self.finalizing = true;
        if crate::env::verbose() {
            let (n, bytes) = self.reads;
            let device: String = self
                .devs
                .iter()
                .zip(&self.carried)
                .enumerate()
                .map(|(i, (d, n))| {
                    let more = d.report().map_or(String::new(), |r| format!(", {r}"));
                    let qps = self.host_qps.get(i).copied().unwrap_or(0);
                    format!("; device {}: {n} messages sent, {qps} queue pairs on this host{more}", d.name())
                })
                .collect();
            crate::say::say!(
                "mpr: rank {}: {}: {n} messages ({bytes} B) pulled with RDMA READ, {} sent again, {} received out of order, \
                 {} frames packed in {} messages{device}",
                self.me,
                self.name,
                self.links.iter().map(|l| l.rel.stats.resent).sum::<u64>(),
                self.links.iter().map(|l| l.rel.stats.out_of_order + l.rel.stats.duplicates).sum::<u64>(),
                self.frames,
                self.carried.iter().sum::<u64>()
            );
        }
        for link in 0..self.links.len() {
            if self.links[link].dead.is_none() && !self.links[link].fin_sent {
                // A full queue: the FIN goes out from `flush` once there is room.
                self.links[link].fin_sent = self.send_seq(link, FIN).unwrap_or(true);
            }
        }
    }

    fn flush(&mut self) {
        // An error here is the link's: the next poll reports it.
        let _ = self.seal_all();
        if self.finalizing {
            for link in 0..self.links.len() {
                if !self.links[link].fin_sent && self.links[link].dead.is_none() {
                    self.links[link].fin_sent = self.send_seq(link, FIN).unwrap_or(true);
                }
            }
        }
        self.side.flush();
    }

    fn quiescent(&self) -> bool {
        self.said_goodbye
    }
}

impl Drop for VerbsTransport {
    fn drop(&mut self) {
        for l in &self.links {
            let _ = self.devs[l.dev].destroy_qp(l.qp);
        }
        for ((d, _), mr) in self.exposed.drain() {
            let _ = self.devs[d].deregister(mr);
        }
        self.remote_release();
        // Device d registered send_mr[d] and recv_mr[d].
        for regions in [std::mem::take(&mut self.send_mr), std::mem::take(&mut self.recv_mr)] {
            for (d, mr) in regions.into_iter().enumerate() {
                let _ = self.devs[d].deregister(mr);
            }
        }
    }
}

/// A sink that keeps every frame and the ends of one-sided transfers (for later delivery,
/// and for tests).
#[derive(Debug, Default)]
pub(crate) struct Frames(pub(crate) Vec<(usize, Vec<u8>)>, pub(crate) Vec<RemoteEnd>);

/// The end of a one-sided transfer as `Sink::remote_done` reports it: peer, token, and the
/// result with a staged read's bytes.
pub(crate) type RemoteEnd = (usize, u64, Result<Option<Vec<u8>>, Error>);

impl Sink for Frames {
    fn frame(&mut self, peer: usize, frame: &[u8]) -> Result<(), Error> {
        self.0.push((peer, frame.to_vec()));
        Ok(())
    }
    fn place(&mut self, _: usize, _: &[u8], _: usize) -> Option<(usize, u64, crate::buf::RawBufMut)> {
        None
    }
    fn placement_live(&self, _: u64) -> bool {
        false
    }
    fn placed(&mut self, _: usize, _: u64, _: usize) -> Result<(), Error> {
        Ok(())
    }
    fn remote_done(&mut self, peer: usize, token: u64, result: Result<Option<&[u8]>, Error>) {
        self.1.push((peer, token, result.map(|b| b.map(<[u8]>::to_vec))));
    }
}
