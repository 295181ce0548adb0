//! The verbs provider seam: what the RDMA transport needs of a device, in verbs terms.
//!
//! Three providers implement [`Provider`]: rdma-core on Linux and Apple's `librdma` on macOS
//! (one FFI layer over the verbs ABI, loaded at run time), and a software provider that
//! behaves like the Thunderbolt hardware across processes. The protocol code above sees only
//! this trait and [`DeviceCaps`]; it never asks which provider it has (libfabric's
//! `fi_info` habit: capabilities, not names).
//!
//! The model is a verbs device reduced to what mpr uses: one protection domain, one
//! completion queue shared by every queue pair, memory regions, and UC or RC queue pairs.
//! Work requests carry one scatter-gather entry. A provider releases everything it created
//! when dropped, also after errors (leaked regions and queue pairs wedge Apple's driver).

use std::fmt;

/// What a device can do. Limits are per device (per provider instance).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceCaps {
    /// Reliable Connected queue pairs work (Linux NICs); otherwise UC only (Thunderbolt).
    pub(crate) rc: bool,
    /// RDMA READ on RC queue pairs.
    pub(crate) rdma_read: bool,
    /// RDMA WRITE on RC queue pairs.
    pub(crate) rdma_write: bool,
    /// Most queue pairs that can exist at once.
    pub(crate) max_qp: usize,
    /// Most memory regions that can be registered at once.
    pub(crate) max_mr: usize,
    /// Most work requests in flight per queue pair and direction (posted, not yet completed).
    pub(crate) max_wr: usize,
    /// Largest message one work request may carry.
    pub(crate) max_msg: usize,
    /// Wire frame (path MTU): a message travels as ceil(len / frame) frames.
    pub(crate) frame: usize,
    /// Registered memory must start and end on this alignment (1 if the device does not care).
    pub(crate) align: usize,
}

/// A macOS version, (major, minor), as `kern.osproductversion` gives it.
pub(crate) type MacosVersion = (u32, u32);

/// The first macOS whose librdma takes messages of more than one 4 KiB frame: JACCL posts
/// nothing larger before it (MLX PR 3094).
pub(crate) const MACOS_MULTI_FRAME: MacosVersion = (26, 3);

/// The largest message a Thunderbolt device carries on macOS `version`: one frame before
/// [`MACOS_MULTI_FRAME`] (and when the version is not known), 4095 frames from it.
pub(crate) fn thunderbolt_max_msg(version: Option<MacosVersion>) -> usize {
    match version {
        Some(v) if v >= MACOS_MULTI_FRAME => 4095 * 4096,
        _ => 4096,
    }
}

/// `26.2`, `26.3.1`: the major and minor numbers of a macOS version.
pub(crate) fn parse_macos_version(text: &str) -> Option<MacosVersion> {
    let mut parts = text.trim().trim_end_matches('\0').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = match parts.next() {
        Some(m) => m.parse().ok()?,
        None => 0,
    };
    parts.all(|p| p.parse::<u32>().is_ok()).then_some((major, minor))
}

/// A registered memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mr {
    /// Provider's handle, unique among live regions of the device.
    pub(crate) id: u32,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    /// Start address and length as registered.
    pub(crate) addr: u64,
    pub(crate) len: usize,
}

/// A queue pair of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct QpId(pub(crate) u32);

/// Queue pair transport type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpType {
    /// Unreliable Connected: SEND/RECV, lost frames lose the message silently.
    Uc,
    /// Reliable Connected: in-order, retransmitted by the device; READ/WRITE if the caps say.
    Rc,
}

/// What a peer needs to connect to a queue pair (published through the bootstrap service).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QpAddr {
    pub(crate) lid: u16,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    /// For RoCE and Thunderbolt the IPv4-mapped address of the paired interface.
    pub(crate) gid: [u8; 16],
}

/// One scatter-gather entry inside a registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sge {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) lkey: u32,
}

/// Where an RDMA READ or WRITE goes on the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Remote {
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
}

/// The operation a completion is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opcode {
    Send,
    Recv,
    Read,
    Write,
}

/// Completion status (the subset of `ibv_wc_status` mpr tells apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WcStatus {
    Success,
    /// The queue pair went to the error state; outstanding requests are flushed.
    Flushed,
    /// RC retries exhausted: the peer is unreachable or dead.
    RetryExceeded,
    /// The remote side refused the access (bad rkey, bounds).
    RemoteAccess,
    /// A receive was too small for the message, or another local error.
    LocalLength,
    /// Any other status, as the device's code.
    Other(u32),
}

/// One work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    pub(crate) wr_id: u64,
    pub(crate) qp: QpId,
    pub(crate) op: Opcode,
    pub(crate) status: WcStatus,
    /// Bytes received (receives only).
    pub(crate) byte_len: u32,
}

/// Errors of a provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum VerbsError {
    /// No library, no device, or the kernel says no (ENOSYS): fall back to another transport.
    Unavailable(String),
    /// A device limit was hit (queue pairs, regions, work requests in flight).
    Limit(&'static str),
    /// A request the device rejects (alignment, operation not supported, wrong state).
    Invalid(String),
    /// A call into the device failed.
    Device(String),
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::Unavailable(s) => write!(f, "RDMA unavailable: {s}"),
            VerbsError::Limit(what) => write!(f, "RDMA device limit reached: {what}"),
            VerbsError::Invalid(s) => write!(f, "RDMA request rejected: {s}"),
            VerbsError::Device(s) => write!(f, "RDMA device error: {s}"),
        }
    }
}

/// An opened RDMA device with its protection domain and completion queue.
pub(crate) trait Provider: fmt::Debug + Send {
    /// Which provider and device, for logs and `--verbose` (never matched on).
    fn name(&self) -> String;

    fn caps(&self) -> DeviceCaps;

    /// The device's own counts of what went wrong on the wire (frames lost, sent again), for
    /// the transport's verbose end line; `None` where the provider keeps none (a real device
    /// has its counters in its driver's tools).
    fn report(&self) -> Option<String> {
        None
    }

    /// Registers `len` bytes at `addr` (local write, plus remote read/write on RC devices).
    ///
    /// # Safety
    /// The memory must stay valid and must not be freed until [`Provider::deregister`] of the
    /// returned region or the provider's drop, whichever comes first.
    unsafe fn register(&mut self, addr: *mut u8, len: usize) -> Result<Mr, VerbsError>;

    fn deregister(&mut self, mr: Mr) -> Result<(), VerbsError>;

    /// Creates a queue pair (in the INIT state) and returns what the peer needs to connect.
    fn create_qp(&mut self, ty: QpType) -> Result<(QpId, QpAddr), VerbsError>;

    /// Connects `qp` to the peer's queue pair: INIT -> RTR -> RTS.
    fn connect(&mut self, qp: QpId, peer: &QpAddr) -> Result<(), VerbsError>;

    /// Destroys `qp`; its outstanding work requests complete no more.
    fn destroy_qp(&mut self, qp: QpId) -> Result<(), VerbsError>;

    /// Posts a receive buffer. A message is at most `sge.len` bytes.
    fn post_recv(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<(), VerbsError>;

    /// Posts a SEND of `sge`. Its completion means the buffer may be reused, not delivery.
    fn post_send(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<(), VerbsError>;

    /// RDMA READ of `local.len` bytes at `remote` into `local` (RC with `caps().rdma_read`).
    fn post_read(&mut self, qp: QpId, wr_id: u64, local: Sge, remote: Remote) -> Result<(), VerbsError>;

    /// RDMA WRITE of `local` to `remote` (RC with `caps().rdma_write`).
    fn post_write(&mut self, qp: QpId, wr_id: u64, local: Sge, remote: Remote) -> Result<(), VerbsError>;

    /// Appends up to `max` completions to `out`; returns how many.
    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> Result<usize, VerbsError>;
}

impl QpAddr {
    /// Text form for a business card: `lid.qpn.psn.gid-hex`.
    pub(crate) fn encode(&self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!("{:x}.{:x}.{:x}.{gid}", self.lid, self.qpn, self.psn)
    }

    pub(crate) fn decode(s: &str) -> Option<QpAddr> {
        let mut it = s.split('.');
        let lid = u16::from_str_radix(it.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(it.next()?, 16).ok()?;
        let psn = u32::from_str_radix(it.next()?, 16).ok()?;
        let hex = it.next()?;
        if it.next().is_some() || hex.len() != 32 {
            return None;
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(QpAddr { lid, qpn, psn, gid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_addr_round_trips_and_rejects_garbage() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 0, 0, 2]);
        let a = QpAddr { lid: 7, qpn: 0x1234, psn: 0xabcdef, gid };
        assert_eq!(QpAddr::decode(&a.encode()), Some(a));
        for bad in ["", "1.2.3", "1.2.3.00", "x.2.3.00000000000000000000000000000000", "1.2.3.4.5"] {
            assert_eq!(QpAddr::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn macos_versions_gate_the_message_size() {
        assert_eq!(parse_macos_version("26.2"), Some((26, 2)));
        assert_eq!(parse_macos_version("26.3.1\0"), Some((26, 3)));
        assert_eq!(parse_macos_version("27"), Some((27, 0)));
        for bad in ["", "x", "26.x", "26.2.y", "-1.0"] {
            assert_eq!(parse_macos_version(bad), None, "{bad}");
        }
        // Before 26.3, and when unknown: one frame (JACCL, MLX PR 3094); from 26.3: 4095.
        for (v, max) in [
            (Some((26, 2)), 4096),
            (Some((26, 2)), 4096),
            (None, 4096),
            (Some((15, 7)), 4096),
            (Some((26, 3)), 16_773_120),
            (Some((27, 0)), 16_773_120),
        ] {
            assert_eq!(thunderbolt_max_msg(v), max, "{v:?}");
        }
    }
}
