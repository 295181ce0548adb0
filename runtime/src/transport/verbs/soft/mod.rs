//! The software verbs provider: RDMA over Thunderbolt (or a Linux RC NIC) imitated over UDP,
//! so that the RDMA protocol code runs, across processes and hosts, where there is no RDMA.
//!
//! - `mod.rs` (here): [`SoftConfig`], [`SoftDevice`] and its [`Provider`] methods, the
//!   shared device state.
//! - `qp/`: a queue pair (state and posting, transmit side, receive side).
//! - `mem.rs`: the region table; the only code that reads or writes registered memory.
//! - `wire.rs`: the datagram format (versioned header, frame arithmetic).
//! - `service.rs`: the device's service thread.
//!
//! # The wire
//! Every queue pair binds its own UDP socket on the configured IPv4 address (ephemeral
//! port). Its [`QpAddr`] is `gid` = the IPv4-mapped address (`::ffff:a.b.c.d`), `qpn` = the
//! UDP port, `psn` = a random 24-bit first sequence number, `lid` = 0. `connect` connects the
//! socket, so datagrams from anyone but the peer queue pair are dropped. A message travels
//! as 4096-byte frames, one datagram each (a 40-byte header, `wire.rs`).
//!
//! # Modes
//! [`SoftMode::Uc`] is the Thunderbolt device: UC queue pairs, SEND/RECV only, page-aligned
//! regions, 10 queue pairs, 100 regions, 32 work requests in flight per queue and direction
//! (a request holds its slot until its completion is polled), messages (and receives) of at
//! most one 4 KiB frame as on macOS 26.2, or 16,773,120 bytes when it imitates 26.3 or later
//! ([`SoftConfig::macos`]). A SEND waits for a posted receive (TN3205's credit flow
//! control): the receiver's ACKs carry its receive credit, and a SEND starts only within it
//! (`qp/mod.rs`); a message that finds no receive all the same (sent to a peer silent for
//! a second, which may be stopped rather than dead) is dropped, as there is no
//! receiver-not-ready retry; a
//! message too long for the receive, or spanning another number of 4 KiB frames than the
//! receive (TN3205: a SEND and its RECV span the same frames), completes it with
//! [`WcStatus::LocalLength`]; a message
//! that lost a frame is dropped whole and the receive stays posted. A send completes when
//! its frames went to the socket, also when the peer is dead. Flow control between the two
//! sockets (a window of frames, credited by the receiver) imitates the lossless link: without
//! injected loss no frame is lost to a full socket buffer; if credits stop coming (a dead
//! peer) for 100 ms the sender stops waiting for them until one comes.
//!
//! [`SoftMode::Rc`] is a Linux NIC: RC queue pairs (UC too), reliable in-order delivery by
//! go-back-N (acknowledgements, sequence NAKs, timeouts), receiver-not-ready NAKs retried
//! without limit (a send waits for its receive), a receive too small for its message
//! completed with [`WcStatus::LocalLength`] (the sender's request succeeds: a simplification,
//! a NIC fails both queue pairs), RDMA READ and WRITE into the peer's regions
//! (bounds and rkey checked, else [`WcStatus::RemoteAccess`] and the queue pair fails), any
//! alignment, 256 queue pairs, 1024 regions, 128 work requests, 1 GiB messages. When the peer
//! gives no sign of life for [`SoftConfig::retry_timeout`] with requests outstanding, the
//! oldest completes with [`WcStatus::RetryExceeded`] and the queue pair fails. As on a NIC, a
//! failed queue pair completes its other requests, and every later one, as
//! [`WcStatus::Flushed`].
//!
//! Loss injection drops each data frame (RC: also acknowledgements) with probability
//! [`SoftConfig::loss`], from a generator seeded with [`SoftConfig::seed`].
//!
//! # Threads
//! Each device runs one service thread that reads every socket, assembles messages into
//! posted receives, answers READ and WRITE requests, acknowledges, and retransmits: as with
//! real RDMA the target's CPU need not call in. All device state sits behind one mutex,
//! taken by the thread and by every [`Provider`] method; `poll` also pushes out frames the
//! socket refused earlier (EAGAIN), in order. Registered memory is only touched under that
//! mutex, after checking that it is registered (`mem.rs`). Dropping the device stops and joins
//! the thread before the sockets close.
//!
//! With `MPR_VERBOSE=2` (or [`SoftConfig::debug`]) dropped messages and failures are logged.

mod host;
mod mem;
mod qp;
mod service;
mod wire;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::ffi::IBV_LINK_LAYER_ETHERNET;
use super::ibv::flavor::{choose_gid, Flavor, GidEntry};
use super::provider::{
    thunderbolt_max_msg, Completion, DeviceCaps, MacosVersion, Mr, Opcode, Provider, QpAddr, QpId, QpType, Remote, Sge,
    VerbsError, WcStatus,
};
use mem::Regions;
use qp::{Qp, SendWr};

/// Which device the soft provider imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SoftMode {
    /// RDMA over Thunderbolt: UC, SEND/RECV only, its limits.
    Uc,
    /// A Linux RC NIC: reliable queue pairs, RDMA READ and WRITE.
    Rc,
}

/// Device limits that replace the mode's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SoftLimits {
    pub(crate) max_qp: usize,
    pub(crate) max_mr: usize,
    pub(crate) max_wr: usize,
    pub(crate) max_msg: usize,
}

/// How to open a soft device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SoftConfig {
    /// Local IPv4 address the queue pairs bind (a rank's TCP listening address).
    pub(crate) addr: Ipv4Addr,
    pub(crate) mode: SoftMode,
    /// Probability in [0, 1) that a frame is dropped on the way out.
    pub(crate) loss: f64,
    /// Seed of the loss generator (repeatable runs).
    pub(crate) seed: u64,
    /// Replaces the mode's limits.
    pub(crate) limits: Option<SoftLimits>,
    /// RC: how long a peer may stay silent while requests are outstanding (default 2 s).
    pub(crate) retry_timeout: Duration,
    /// Log drops and failures to stderr (default: `MPR_VERBOSE` at least 2).
    pub(crate) debug: bool,
    /// UC: the macOS version imitated; it bounds messages (one 4 KiB frame before 26.3, see
    /// [`thunderbolt_max_msg`]). Default 26.2, the first with RDMA over Thunderbolt and the
    /// strictest (`MPR_SOFT_MACOS`).
    pub(crate) macos: MacosVersion,
    /// The GID table entry the queue pairs publish (`MPR_RDMA_GID_INDEX`); `None`: chosen as
    /// the real provider chooses (`choose_gid`).
    pub(crate) gid_index: Option<u8>,
}

impl SoftConfig {
    /// A UC (Thunderbolt-like) device on `addr`, no loss.
    pub(crate) fn new(addr: Ipv4Addr) -> SoftConfig {
        SoftConfig {
            addr,
            mode: SoftMode::Uc,
            loss: 0.0,
            seed: 0x5eed,
            limits: None,
            retry_timeout: Duration::from_secs(2),
            debug: crate::env::parsed::<u32>("MPR_VERBOSE").is_some_and(|v| v >= 2),
            macos: (26, 2),
            gid_index: None,
        }
    }

    /// An RC (Linux NIC-like) device on `addr`, no loss.
    pub(crate) fn rc(addr: Ipv4Addr) -> SoftConfig {
        SoftConfig { mode: SoftMode::Rc, ..SoftConfig::new(addr) }
    }

    /// The device's GID table, as the hardware it imitates fills it. UC (Apple's Thunderbolt
    /// ports): the interface's fe80:: address, the 169.254/16 address macOS gives every
    /// Thunderbolt interface, then the IPv4 address (index 2, not 1). RC (a RoCE NIC on
    /// Linux): the fe80:: address, then the IPv4 one. A link-local `addr` is the only IPv4 one.
    pub(crate) fn gid_table(&self) -> Vec<[u8; 16]> {
        let [a, b, c, d] = self.addr.octets();
        let mut fe80 = [0u8; 16];
        fe80[..2].copy_from_slice(&[0xfe, 0x80]);
        fe80[8..].copy_from_slice(&[0x02, a, b, 0xff, 0xfe, c, d, 0x01]);
        let mapped = |ip: Ipv4Addr| ip.to_ipv6_mapped().octets();
        let mut t = vec![fe80];
        if self.mode == SoftMode::Uc && !self.addr.is_link_local() {
            t.push(mapped(Ipv4Addr::new(169, 254, a ^ c, (b ^ d) | 1)));
        }
        t.push(mapped(self.addr));
        t
    }

    /// The GID the queue pairs publish: `gid_index`, or the real provider's choice; an error
    /// where that finds no routable address, as the real provider's.
    fn gid(&self) -> Result<[u8; 16], VerbsError> {
        let table = self.gid_table();
        if let Some(i) = self.gid_index {
            return table.get(usize::from(i)).copied().ok_or_else(|| {
                VerbsError::Invalid(format!("GID index {i}: the device's table has {} entries", table.len()))
            });
        }
        let flavor = if self.mode == SoftMode::Uc { Flavor::AppleRdma } else { Flavor::RdmaCore };
        let entries: Vec<GidEntry> =
            table.iter().enumerate().map(|(i, &gid)| GidEntry { index: i as u8, gid, roce_v2: None }).collect();
        match choose_gid(flavor, IBV_LINK_LAYER_ETHERNET, &entries) {
            Some(i) => Ok(table[usize::from(i)]),
            None => {
                let have: Vec<String> = table.iter().map(super::fabric::gid_text).collect();
                Err(VerbsError::Unavailable(super::fabric::no_address(
                    &self.addr.to_string(),
                    &format!("soft-uc:{}", self.addr),
                    &have,
                )))
            }
        }
    }

    /// What a device of this configuration reports.
    pub(crate) fn caps(&self) -> DeviceCaps {
        let rc = self.mode == SoftMode::Rc;
        let l = self.limits.unwrap_or(if rc {
            SoftLimits { max_qp: 256, max_mr: 1024, max_wr: 128, max_msg: 1 << 30 }
        } else {
            SoftLimits { max_qp: 10, max_mr: 100, max_wr: 32, max_msg: thunderbolt_max_msg(Some(self.macos)) }
        });
        DeviceCaps {
            rc,
            rdma_read: rc,
            rdma_write: rc,
            max_qp: l.max_qp,
            max_mr: l.max_mr,
            max_wr: l.max_wr,
            max_msg: l.max_msg.min(u32::MAX as usize),
            frame: wire::FRAME,
            align: if rc { 1 } else { 4096 },
        }
    }
}

/// Counters of a device, for tests and logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SoftStats {
    /// UC: messages dropped because no receive was posted when they arrived.
    pub(crate) no_recv_drops: u64,
    /// UC: messages dropped because a frame was missing.
    pub(crate) incomplete_drops: u64,
    /// RC: SEND frames refused because no receive was posted (receiver not ready).
    pub(crate) rnr_refused: u64,
    /// RC: receiver-not-ready NAKs received.
    pub(crate) rnr_naks: u64,
    /// Receives completed with an error: a message too long for them, or (UC) spanning
    /// another number of frames.
    pub(crate) failed_recvs: u64,
    /// Frames dropped by loss injection.
    pub(crate) injected_losses: u64,
    /// The longest SEND posted, in bytes (on macOS 26.2 at most one frame).
    pub(crate) largest_send: u64,
    /// RC: frames sent again.
    pub(crate) retransmits: u64,
    /// RC: retransmission timeouts.
    pub(crate) timeouts: u64,
    /// RC: queue pairs failed with retries exceeded.
    pub(crate) retry_exceeded: u64,
    /// Datagrams dropped: not from the peer, malformed, or before `connect`.
    pub(crate) strays: u64,
    /// Sends the socket failed other than with EAGAIN (counted as lost).
    pub(crate) send_errors: u64,
    /// UC: requests for the peer's receive credit (a SEND waited for a posted receive).
    pub(crate) credit_requests: u64,
}

/// A small seeded generator (SplitMix64): loss decisions, keys, first psns.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What the queue pairs share: the device's regions, completion queue and counters.
#[derive(Debug)]
struct Ctx {
    name: String,
    caps: DeviceCaps,
    loss: f64,
    retry_timeout: Duration,
    debug: bool,
    mem: Regions,
    cq: VecDeque<Completion>,
    losses: SplitMix64,
    stats: SoftStats,
}

impl Ctx {
    fn complete(&mut self, qp: QpId, wr_id: u64, op: Opcode, status: WcStatus, byte_len: u32) {
        self.cq.push_back(Completion { wr_id, qp, op, status, byte_len });
    }

    /// Hands a datagram to the socket; false if the socket pushed back (EAGAIN). A datagram
    /// dropped by loss injection or refused with another error counts as sent.
    fn transmit(&mut self, sock: &mio::net::UdpSocket, dgram: &[u8], lossy: bool) -> bool {
        if lossy && self.loss > 0.0 && self.losses.unit() < self.loss {
            self.stats.injected_losses += 1;
            return true;
        }
        loop {
            match sock.send(dgram) {
                Ok(_) => return true,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // ECONNREFUSED from a closed peer port and the like: the frame is lost.
                Err(_) => {
                    self.stats.send_errors += 1;
                    return true;
                }
            }
        }
    }

    fn log(&self, msg: impl FnOnce() -> String) {
        if self.debug {
            crate::say::say!("mpr: {}: {}", self.name, msg());
        }
    }
}

/// The device state behind the mutex.
#[derive(Debug)]
struct Core {
    ctx: Ctx,
    qps: BTreeMap<u32, Qp>,
    next_qp: u32,
    registry: mio::Registry,
    /// One datagram, plus a byte to notice oversized ones.
    buf: Vec<u8>,
    /// First psns of new queue pairs.
    ids: SplitMix64,
}

fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    core.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A soft RDMA device: one protection domain, one completion queue, its queue pairs.
pub(crate) struct SoftDevice {
    config: SoftConfig,
    /// The network interface it models a device of (one per cable), if any.
    iface: Option<String>,
    core: Arc<Mutex<Core>>,
    stop: Arc<AtomicBool>,
    waker: mio::Waker,
    thread: Option<JoinHandle<()>>,
    /// UC on an interface: its share of the host-wide count of queue pairs and regions
    /// (`host.rs`); otherwise each process's device is a Mac of its own.
    host: Option<host::HostShare>,
    /// The GID its queue pairs publish (from [`SoftConfig::gid_table`]).
    gid: [u8; 16],
}

impl fmt::Debug for SoftDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftDevice").field("name", &self.name()).field("config", &self.config).finish_non_exhaustive()
    }
}

impl SoftDevice {
    /// Opens a device on `config.addr` and starts its service thread.
    pub(crate) fn open(config: SoftConfig) -> Result<SoftDevice, VerbsError> {
        if !(0.0..1.0).contains(&config.loss) {
            return Err(VerbsError::Invalid(format!("loss probability {} is not in [0, 1)", config.loss)));
        }
        if config.addr.is_unspecified() {
            return Err(VerbsError::Invalid("a soft device needs a local IPv4 address, not 0.0.0.0".into()));
        }
        std::net::UdpSocket::bind((config.addr, 0))
            .map_err(|e| VerbsError::Unavailable(format!("no UDP socket on {}: {e}", config.addr)))?;
        let gid = config.gid()?;
        let dev_err = |e: std::io::Error| VerbsError::Device(format!("soft device event loop: {e}"));
        let poll = mio::Poll::new().map_err(dev_err)?;
        let registry = poll.registry().try_clone().map_err(dev_err)?;
        let waker = mio::Waker::new(poll.registry(), service::WAKER).map_err(dev_err)?;
        let mut seed = [0u8; 16];
        if getrandom::getrandom(&mut seed).is_err() {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            seed[..8].copy_from_slice(&(t.as_nanos() as u64 ^ std::process::id() as u64).to_le_bytes());
        }
        let (seed_a, seed_b) =
            (u64::from_le_bytes(seed[..8].try_into().unwrap()), u64::from_le_bytes(seed[8..].try_into().unwrap()));
        let caps = config.caps();
        let mode = if caps.rc { "rc" } else { "uc" };
        let core = Core {
            ctx: Ctx {
                name: format!("soft-{mode}:{}", config.addr),
                caps,
                loss: config.loss,
                retry_timeout: config.retry_timeout,
                debug: config.debug,
                mem: Regions::new(caps.max_mr, caps.align, seed_a),
                cq: VecDeque::new(),
                losses: SplitMix64::new(config.seed),
                stats: SoftStats::default(),
            },
            qps: BTreeMap::new(),
            next_qp: 1,
            registry,
            buf: vec![0; wire::DATAGRAM + 1],
            ids: SplitMix64::new(seed_b),
        };
        let core = Arc::new(Mutex::new(core));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (core.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("mpr-soft-verbs".into())
            .spawn(move || service::run(poll, &c, &s))
            .map_err(|e| VerbsError::Device(format!("soft device service thread: {e}")))?;
        Ok(SoftDevice { config, iface: None, core, stop, waker, thread: Some(thread), host: None, gid })
    }

    /// Names the device after the network interface it models a device of. A UC device (a
    /// Thunderbolt port) then counts its queue pairs and regions with every other process's
    /// device on that interface of the host, as Apple's driver does.
    pub(crate) fn on_iface(mut self, name: &str) -> Result<SoftDevice, VerbsError> {
        self.iface = Some(name.to_string());
        if self.config.mode == SoftMode::Uc {
            let mut nonce = [0u8; 8];
            let _ = getrandom::getrandom(&mut nonce);
            self.host =
                Some(host::HostShare::join(name, u64::from_le_bytes(nonce) ^ u64::from(self.config.addr.to_bits()))?);
        }
        Ok(self)
    }

    /// Takes (`+1`) or gives back (`-1`) queue pairs and regions of the host-wide count.
    fn host_count(&mut self, qps: isize, mrs: isize) -> Result<(), VerbsError> {
        let caps = self.config.caps();
        match &mut self.host {
            Some(h) => h.add(qps, mrs, caps.max_qp, caps.max_mr).map(drop),
            None => Ok(()),
        }
    }

    /// A new queue pair's socket, registered with the service thread.
    fn make_qp(&self, ty: QpType) -> Result<(QpId, QpAddr), VerbsError> {
        let mut core = lock(&self.core);
        let io = |what: &str, e: std::io::Error| VerbsError::Device(format!("queue pair socket: {what}: {e}"));
        let sock = std::net::UdpSocket::bind((self.config.addr, 0)).map_err(|e| io("bind", e))?;
        sock.set_nonblocking(true).map_err(|e| io("nonblocking", e))?;
        // Room for a window of frames each way; the kernel caps it at its maximum.
        let _ = nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::RcvBuf, &(4 << 20));
        let _ = nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::SndBuf, &(4 << 20));
        let port = sock.local_addr().map_err(|e| io("address", e))?.port();
        let mut sock = mio::net::UdpSocket::from_std(sock);
        let id = core.next_qp;
        core.registry
            .register(&mut sock, mio::Token(id as usize), mio::Interest::READABLE)
            .map_err(|e| io("register", e))?;
        core.next_qp += 1;
        let psn = core.ids.next() as u32 & 0xff_ffff;
        let local = QpAddr { lid: 0, qpn: port as u32, psn, gid: self.gid };
        core.qps.insert(id, Qp::new(QpId(id), ty, sock, local, Instant::now()));
        Ok((QpId(id), local))
    }

    /// The device's counters.
    pub(crate) fn stats(&self) -> SoftStats {
        lock(&self.core).ctx.stats
    }

    fn post(&mut self, qp: QpId, wr: SendWr, sge: Sge) -> Result<(), VerbsError> {
        let mut core = lock(&self.core);
        let Core { ctx, qps, buf, .. } = &mut *core;
        let q = qps.get_mut(&qp.0).ok_or_else(|| no_qp(qp))?;
        q.can_post_send(ctx.caps.max_wr)?;
        if sge.len as usize > ctx.caps.max_msg {
            return Err(VerbsError::Invalid(format!(
                "{} B is over the device's {} B message limit",
                sge.len, ctx.caps.max_msg
            )));
        }
        check_sge(ctx, sge)?;
        q.post_send(ctx, buf, wr, Instant::now());
        Ok(())
    }

    fn rdma(&mut self, qp: QpId, wr_id: u64, op: Opcode, local: Sge, remote: Remote) -> Result<(), VerbsError> {
        let what = if op == Opcode::Read { "RDMA READ" } else { "RDMA WRITE" };
        if !self.config.caps().rc {
            return Err(VerbsError::Invalid(format!("{what} is not supported: this device has SEND/RECV only")));
        }
        let ty = lock(&self.core).qps.get(&qp.0).map(Qp::ty).ok_or_else(|| no_qp(qp))?;
        if ty != QpType::Rc {
            return Err(VerbsError::Invalid(format!("{what} needs an RC queue pair")));
        }
        self.post(qp, SendWr::new(wr_id, op, local, remote), local)
    }
}

fn no_qp(qp: QpId) -> VerbsError {
    VerbsError::Invalid(format!("no queue pair {}", qp.0))
}

/// A work request's buffer must lie inside a region registered with its lkey.
fn check_sge(ctx: &Ctx, sge: Sge) -> Result<(), VerbsError> {
    if !ctx.mem.local_ok(sge.lkey, sge.addr, sge.len as usize) {
        return Err(VerbsError::Invalid(format!(
            "{} B at {:#x} are not inside a region registered with lkey {:#x}",
            sge.len, sge.addr, sge.lkey
        )));
    }
    Ok(())
}

impl Provider for SoftDevice {
    fn report(&self) -> Option<String> {
        let s = self.stats();
        Some(format!(
            "{} frames lost (injected), {} frames sent again after {} timeouts, {} messages dropped for a missing frame, {} receives failed, largest message {} B, {} SENDs found no receive",
            s.injected_losses,
            s.retransmits,
            s.timeouts,
            s.incomplete_drops,
            s.failed_recvs,
            s.largest_send,
            s.no_recv_drops,
        ))
    }

    fn name(&self) -> String {
        let mode = if self.config.mode == SoftMode::Rc { "rc" } else { "uc" };
        match &self.iface {
            Some(i) => format!("soft-{mode}:{i}"),
            None => format!("soft-{mode}:{}", self.config.addr),
        }
    }

    fn caps(&self) -> DeviceCaps {
        self.config.caps()
    }

    unsafe fn register(&mut self, addr: *mut u8, len: usize) -> Result<Mr, VerbsError> {
        self.host_count(0, 1)?;
        let mr = lock(&self.core).ctx.mem.register(addr, len);
        if mr.is_err() {
            let _ = self.host_count(0, -1);
        }
        mr
    }

    fn deregister(&mut self, mr: Mr) -> Result<(), VerbsError> {
        lock(&self.core).ctx.mem.deregister(mr)?;
        self.host_count(0, -1)
    }

    fn create_qp(&mut self, ty: QpType) -> Result<(QpId, QpAddr), VerbsError> {
        let caps = self.config.caps();
        if ty == QpType::Rc && !caps.rc {
            return Err(VerbsError::Invalid("RC queue pairs are not supported: this device has UC only".into()));
        }
        if lock(&self.core).qps.len() >= caps.max_qp {
            return Err(VerbsError::Limit("queue pairs"));
        }
        self.host_count(1, 0)?;
        let made = self.make_qp(ty);
        if made.is_err() {
            let _ = self.host_count(-1, 0);
        }
        made
    }

    fn connect(&mut self, qp: QpId, peer: &QpAddr) -> Result<(), VerbsError> {
        // As on the hardware, a queue pair cannot reach a link-local GID: RTR fails (MLX's
        // PR 3468 fell back to GID index 1, the 169.254 address, and failed here).
        if super::fabric::link_local_gid(&peer.gid) {
            return Err(VerbsError::Device(format!(
                "modify_qp to RTR: the peer's GID {} is not a routable IPv4 address (a link-local GID \
                 reaches no one; the interface needs an IPv4 address of its own)",
                super::fabric::gid_text(&peer.gid)
            )));
        }
        let ip = match IpAddr::from(peer.gid) {
            IpAddr::V6(v6) => v6.to_ipv4_mapped(),
            IpAddr::V4(v4) => Some(v4),
        };
        let Some(ip) = ip.filter(|_| peer.qpn != 0 && peer.qpn <= u16::MAX as u32) else {
            return Err(VerbsError::Invalid(format!("peer {} is not a soft queue pair", peer.encode())));
        };
        let mut core = lock(&self.core);
        let q = core.qps.get_mut(&qp.0).ok_or_else(|| no_qp(qp))?;
        q.connect(SocketAddr::new(IpAddr::V4(ip), peer.qpn as u16), peer.psn)
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<(), VerbsError> {
        {
            let mut core = lock(&self.core);
            let mut q = core.qps.remove(&qp.0).ok_or_else(|| no_qp(qp))?;
            let _ = core.registry.deregister(&mut q.sock);
            core.ctx.cq.retain(|c| c.qp != qp);
        }
        self.host_count(-1, 0)
    }

    fn post_recv(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<(), VerbsError> {
        let mut core = lock(&self.core);
        let Core { ctx, qps, .. } = &mut *core;
        let q = qps.get_mut(&qp.0).ok_or_else(|| no_qp(qp))?;
        q.can_post_recv(ctx.caps.max_wr)?;
        // A receive for a message the device cannot carry is refused as such a send is.
        if sge.len as usize > ctx.caps.max_msg {
            return Err(VerbsError::Invalid(format!(
                "a {} B receive is over the device's {} B message limit",
                sge.len, ctx.caps.max_msg
            )));
        }
        check_sge(ctx, sge)?;
        q.post_recv(ctx, wr_id, sge);
        Ok(())
    }

    fn post_send(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<(), VerbsError> {
        self.post(qp, SendWr::new(wr_id, Opcode::Send, sge, Remote { addr: 0, rkey: 0 }), sge)?;
        let stats = &mut lock(&self.core).ctx.stats;
        stats.largest_send = stats.largest_send.max(u64::from(sge.len));
        Ok(())
    }

    fn post_read(&mut self, qp: QpId, wr_id: u64, local: Sge, remote: Remote) -> Result<(), VerbsError> {
        self.rdma(qp, wr_id, Opcode::Read, local, remote)
    }

    fn post_write(&mut self, qp: QpId, wr_id: u64, local: Sge, remote: Remote) -> Result<(), VerbsError> {
        self.rdma(qp, wr_id, Opcode::Write, local, remote)
    }

    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> Result<usize, VerbsError> {
        if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            return Err(VerbsError::Device(format!("{}: the service thread stopped", self.name())));
        }
        let mut core = lock(&self.core);
        let Core { ctx, qps, buf, .. } = &mut *core;
        let now = Instant::now();
        for q in qps.values_mut() {
            // Read what arrived here too (as a NIC's completion queue fills without waiting for
            // a thread to be scheduled): the service thread only covers times nobody polls.
            q.receive(ctx, buf, now);
            q.flush(ctx, buf, now);
        }
        let mut n = 0;
        while n < max {
            let Some(c) = ctx.cq.pop_front() else { break };
            if let Some(q) = qps.get_mut(&c.qp.0) {
                q.release_slot(c.op);
            }
            out.push(c);
            n += 1;
        }
        Ok(n)
    }
}

impl Drop for SoftDevice {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The queue pairs' sockets close with the core, which only this handle holds now.
    }
}
