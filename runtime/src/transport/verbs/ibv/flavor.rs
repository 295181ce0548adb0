//! What differs between the verbs libraries, as data ([`Flavor`]: which library, GID, access
//! flags and limits), and the reading of verbs values (MTU codes, port states, link layers,
//! completion statuses). Pure functions only: everything here is tested without a device.

use std::ffi::c_int;

use super::PORT;
use crate::transport::verbs::ffi;
use crate::transport::verbs::provider::{thunderbolt_max_msg, DeviceCaps, MacosVersion, QpType, WcStatus};

/// Which verbs library this is, and the habits that go with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // A build constructs only its host's flavor; the tests construct both.
pub(crate) enum Flavor {
    /// rdma-core's libibverbs (Linux): InfiniBand and RoCE NICs.
    RdmaCore,
    /// Apple's librdma (macOS 26.2+): RDMA over Thunderbolt 5.
    AppleRdma,
}

impl Flavor {
    /// The flavor of this build's host.
    #[cfg(target_os = "macos")]
    pub(crate) const HOST: Flavor = Flavor::AppleRdma;
    /// The flavor of this build's host.
    #[cfg(not(target_os = "macos"))]
    pub(crate) const HOST: Flavor = Flavor::RdmaCore;

    /// The provider's name in reports and logs.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Flavor::RdmaCore => "rdma-core",
            Flavor::AppleRdma => "librdma",
        }
    }

    /// The library files to try, in order. librdma lives in the dyld shared cache (no file on
    /// disk), which `dlopen` of its install path consults; the bare name is what JACCL opens.
    pub(super) fn libraries(self) -> &'static [&'static str] {
        match self {
            Flavor::RdmaCore => &["libibverbs.so.1"],
            Flavor::AppleRdma => &["/usr/lib/librdma.dylib", "librdma.dylib"],
        }
    }

    /// The GRH hop limit: 1 on Thunderbolt (a cable, no routers; JACCL and TN3205); 64 on
    /// rdma-core so that RoCE v2 may cross IP routers (perftest uses 255, ibv_rc_pingpong 1).
    pub(super) fn hop_limit(self) -> u8 {
        match self {
            Flavor::RdmaCore => 64,
            Flavor::AppleRdma => 1,
        }
    }

    /// Access flags of registered memory, unless `MPR_RDMA_MR_ACCESS` says (`local`: local
    /// write only, the least TN3205 asks for; `remote`: local write, remote read and write).
    /// Both flavors register `remote`: rdma-core because RC uses it, librdma because that is
    /// what JACCL and every other public user of the hardware registers.
    pub(super) fn mr_access(self, setting: Option<&str>) -> c_int {
        let local = ffi::IBV_ACCESS_LOCAL_WRITE;
        let remote = local | ffi::IBV_ACCESS_REMOTE_WRITE | ffi::IBV_ACCESS_REMOTE_READ;
        match (self, setting) {
            (_, Some("local")) => local,
            (Flavor::RdmaCore | Flavor::AppleRdma, _) => remote,
        }
    }

    /// The path MTU of a connection (an `IBV_MTU_*` code), unless `MPR_RDMA_MTU` gives one in
    /// bytes: 1024 on Thunderbolt (what JACCL and every public user of librdma set; the
    /// port's own figure is not known to work); the port's active MTU on rdma-core (1024 if
    /// it reports none).
    pub(super) fn path_mtu(self, active_mtu: u32, setting: Option<usize>) -> u32 {
        if let Some(code) = setting.and_then(mtu_code) {
            return code;
        }
        match self {
            Flavor::RdmaCore if mtu_bytes(active_mtu).is_some() => active_mtu,
            Flavor::RdmaCore | Flavor::AppleRdma => ffi::IBV_MTU_1024,
        }
    }

    /// Access flags a queue pair grants its peer (INIT). JACCL passes local write and remote
    /// read/write on Thunderbolt UC queue pairs and that is what is known to work there.
    pub(super) fn qp_access(self, ty: QpType) -> u32 {
        let remote = (ffi::IBV_ACCESS_REMOTE_WRITE | ffi::IBV_ACCESS_REMOTE_READ) as u32;
        let local = ffi::IBV_ACCESS_LOCAL_WRITE as u32;
        match (self, ty) {
            (Flavor::AppleRdma, _) | (Flavor::RdmaCore, QpType::Rc) => local | remote,
            (Flavor::RdmaCore, QpType::Uc) => local,
        }
    }

    /// The capabilities of a device of this flavor, and the completion queue depth that goes
    /// with them (room for every work request of every queue pair, send and receive).
    /// `macos`: the system's version (it bounds librdma's messages; see
    /// [`thunderbolt_max_msg`]).
    pub(super) fn caps(
        self,
        dev: &DevLimits,
        port: &PortInfo,
        page_size: usize,
        macos: Option<MacosVersion>,
    ) -> (DeviceCaps, usize) {
        let (max_wr, qp_budget, mr_budget) = match self {
            Flavor::RdmaCore => {
                (min_known(dev.max_qp_wr, 128), min_known(dev.max_qp, 256), min_known(dev.max_mr, 1 << 20))
            }
            // DESIGN.md: ~10 queue pairs and ~100 regions per device work; more than 32 work
            // requests in flight do not.
            Flavor::AppleRdma => (32, min_known(dev.max_qp, 10), min_known(dev.max_mr, 100)),
        };
        let cq_entries = min_known(dev.max_cqe, 2 * max_wr * qp_budget).max(2 * max_wr);
        let max_qp = qp_budget.min(cq_entries / (2 * max_wr)).max(1);
        let caps = match self {
            Flavor::RdmaCore => DeviceCaps {
                rc: true,
                rdma_read: true,
                rdma_write: true,
                max_qp,
                max_mr: mr_budget,
                max_wr,
                max_msg: if port.max_msg_sz == 0 { 1 << 30 } else { port.max_msg_sz as usize },
                frame: mtu_bytes(port.active_mtu).unwrap_or(1024),
                align: 1,
            },
            Flavor::AppleRdma => DeviceCaps {
                rc: false,
                rdma_read: false,
                rdma_write: false,
                max_qp,
                max_mr: mr_budget,
                max_wr,
                // One 4 KiB frame before macOS 26.3, 4095 from it (DESIGN.md).
                max_msg: thunderbolt_max_msg(macos),
                frame: 4096,
                align: page_size.max(1),
            },
        };
        (caps, cq_entries)
    }
}

/// This Mac's macOS version (`kern.osproductversion`); `None` if it cannot be read.
#[cfg(target_os = "macos")]
pub(super) fn macos_version() -> Option<MacosVersion> {
    let mut buf = [0u8; 32];
    let mut len = buf.len();
    // SAFETY: the name is a NUL-terminated string; `buf` and `len` describe a writable buffer
    // of `len` bytes, which sysctl fills up to `len` (and updates `len`); no new value is set.
    let rc = unsafe {
        libc::sysctlbyname(
            c"kern.osproductversion".as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    crate::transport::verbs::provider::parse_macos_version(std::str::from_utf8(buf.get(..len)?).ok()?)
}

/// Elsewhere there is no macOS version (and no librdma).
#[cfg(not(target_os = "macos"))]
pub(super) fn macos_version() -> Option<MacosVersion> {
    None
}

/// `device` if the device said (non-zero), capped at `cap`; `cap` otherwise.
pub(super) fn min_known(device: usize, cap: usize) -> usize {
    if device == 0 {
        cap
    } else {
        device.min(cap)
    }
}

/// Device limits from `ibv_query_device` (0 where unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct DevLimits {
    pub(super) max_qp: usize,
    pub(super) max_qp_wr: usize,
    pub(super) max_cqe: usize,
    pub(super) max_mr: usize,
    pub(super) max_qp_rd_atom: usize,
    pub(super) max_qp_init_rd_atom: usize,
}

impl DevLimits {
    pub(super) fn from_attr(a: &ffi::ibv_device_attr) -> DevLimits {
        let n = |v: c_int| usize::try_from(v).unwrap_or(0);
        DevLimits {
            max_qp: n(a.max_qp),
            max_qp_wr: n(a.max_qp_wr),
            max_cqe: n(a.max_cqe),
            max_mr: n(a.max_mr),
            max_qp_rd_atom: n(a.max_qp_rd_atom),
            max_qp_init_rd_atom: n(a.max_qp_init_rd_atom),
        }
    }
}

/// What mpr keeps of the port's attributes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PortInfo {
    pub(super) state: u32,
    pub(super) lid: u16,
    pub(super) active_mtu: u32,
    pub(super) link_layer: u8,
    pub(super) gid_tbl_len: usize,
    pub(super) max_msg_sz: u32,
}

impl PortInfo {
    pub(super) fn from_attr(a: &ffi::ibv_port_attr) -> PortInfo {
        PortInfo {
            state: a.state,
            lid: a.lid,
            active_mtu: a.active_mtu,
            link_layer: a.link_layer,
            gid_tbl_len: usize::try_from(a.gid_tbl_len).unwrap_or(0),
            max_msg_sz: a.max_msg_sz,
        }
    }
}

/// Bytes of a verbs MTU code (`IBV_MTU_256` = 1 .. `IBV_MTU_4096` = 5).
pub(crate) fn mtu_bytes(mtu: u32) -> Option<usize> {
    (ffi::IBV_MTU_256..=ffi::IBV_MTU_4096).contains(&mtu).then(|| 128 << mtu)
}

/// The `IBV_MTU_*` code of an MTU in bytes (256 to 4096, a power of two).
pub(crate) fn mtu_code(bytes: usize) -> Option<u32> {
    (ffi::IBV_MTU_256..=ffi::IBV_MTU_4096).find(|&code| mtu_bytes(code) == Some(bytes))
}

/// `ibv_port_state_str`'s names.
pub(crate) fn port_state_name(state: u32) -> &'static str {
    match state {
        ffi::IBV_PORT_NOP => "NOP",
        ffi::IBV_PORT_DOWN => "DOWN",
        ffi::IBV_PORT_INIT => "INIT",
        ffi::IBV_PORT_ARMED => "ARMED",
        ffi::IBV_PORT_ACTIVE => "ACTIVE",
        ffi::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        _ => "unknown",
    }
}

/// `ibv_devinfo`'s names of link layers.
pub(crate) fn link_layer_name(layer: u8) -> &'static str {
    match layer {
        ffi::IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
        ffi::IBV_LINK_LAYER_ETHERNET => "Ethernet",
        ffi::IBV_LINK_LAYER_UNSPECIFIED => "unspecified",
        _ => "unknown",
    }
}

/// `::ffff:a.b.c.d`: the GID of a RoCE or Thunderbolt port for an IPv4 address.
pub(super) fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// One GID table entry as seen when choosing: its index, value and, where sysfs says, whether
/// it is a RoCE v2 GID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GidEntry {
    pub(crate) index: u8,
    pub(crate) gid: [u8; 16],
    pub(crate) roce_v2: Option<bool>,
}

/// The GID index to use when none is configured: the first IPv4-mapped entry (a RoCE v2 one
/// first, where sysfs tells the types apart), else index 0 (an InfiniBand port's only GID, a
/// RoCE port's link-local one). An InfiniBand port uses index 0 (its GIDs are subnet prefix
/// + port GUID).
///
/// On Thunderbolt the entry must hold a routable IPv4 address: macOS gives every Thunderbolt
/// interface a 169.254/16 address and an fe80:: one, neither of which names the cable (every
/// port shares the subnet), and a queue pair on one fails in RTR. `None` there: the
/// interface needs an address (JACCL stops likewise; MLX PR 3468's fallback to index 1 is
/// what failed later).
pub(crate) fn choose_gid(flavor: Flavor, link_layer: u8, table: &[GidEntry]) -> Option<u8> {
    if flavor == Flavor::RdmaCore && link_layer == ffi::IBV_LINK_LAYER_INFINIBAND {
        return Some(0);
    }
    let routable = |e: &&GidEntry| {
        is_ipv4_mapped(&e.gid) && (flavor == Flavor::RdmaCore || !super::super::fabric::link_local_gid(&e.gid))
    };
    let mapped = || table.iter().filter(routable);
    match mapped().find(|e| e.roce_v2 == Some(true)).or_else(|| mapped().next()) {
        Some(e) => Some(e.index),
        None if flavor == Flavor::RdmaCore => Some(0),
        None => None,
    }
}

/// Whether GID `index` of a port of an rdma-core device is RoCE v2 (`None`: sysfs does not
/// say, as for unused entries, InfiniBand ports, or hosts without sysfs).
pub(super) fn roce_v2(device: &str, index: u8) -> Option<bool> {
    let path = format!("/sys/class/infiniband/{device}/ports/{PORT}/gid_attrs/types/{index}");
    std::fs::read_to_string(path).ok().map(|t| t.trim().eq_ignore_ascii_case("RoCE v2"))
}

/// Status of a completion, as the provider seam tells them apart.
pub(super) fn wc_status(status: u32) -> WcStatus {
    match status {
        ffi::IBV_WC_SUCCESS => WcStatus::Success,
        ffi::IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
        ffi::IBV_WC_RETRY_EXC_ERR | ffi::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RetryExceeded,
        ffi::IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccess,
        ffi::IBV_WC_LOC_LEN_ERR => WcStatus::LocalLength,
        other => WcStatus::Other(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(a: u8) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 0, 0, a]);
        g
    }

    fn link_local() -> [u8; 16] {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = 1;
        g
    }

    #[test]
    fn gid_choice_follows_link_layer_and_flavor() {
        let e = |index, gid, roce_v2| GidEntry { index, gid, roce_v2 };
        let ib = ffi::IBV_LINK_LAYER_INFINIBAND;
        let eth = ffi::IBV_LINK_LAYER_ETHERNET;
        // InfiniBand: index 0, whatever the table.
        assert_eq!(choose_gid(Flavor::RdmaCore, ib, &[e(3, mapped(1), None)]), Some(0));
        // RoCE: the IPv4-mapped v2 entry over the v1 one and the link-local ones.
        let mlx5 = [
            e(0, link_local(), Some(false)),
            e(1, link_local(), Some(true)),
            e(2, mapped(1), Some(false)),
            e(3, mapped(1), Some(true)),
        ];
        assert_eq!(choose_gid(Flavor::RdmaCore, eth, &mlx5), Some(3));
        // Types unknown: the first IPv4-mapped entry; none at all: index 0.
        assert_eq!(choose_gid(Flavor::RdmaCore, eth, &[e(0, link_local(), None), e(2, mapped(1), None)]), Some(2));
        assert_eq!(choose_gid(Flavor::RdmaCore, eth, &[e(0, link_local(), None)]), Some(0));
        // Thunderbolt: the routable IPv4-mapped entry wherever it is (here after fe80:: and
        // the 169.254 address macOS gives every Thunderbolt interface); none: no GID.
        let tb = ffi::IBV_LINK_LAYER_UNSPECIFIED;
        let apipa = |i: u8| {
            let mut g = mapped(i);
            (g[12], g[13]) = (169, 254);
            g
        };
        let mac = [e(0, link_local(), None), e(1, apipa(7), None), e(2, mapped(2), None)];
        assert_eq!(choose_gid(Flavor::AppleRdma, tb, &mac), Some(2));
        assert_eq!(choose_gid(Flavor::AppleRdma, tb, &mac[..2]), None);
        assert_eq!(choose_gid(Flavor::AppleRdma, tb, &[e(0, link_local(), None), e(1, link_local(), None)]), None);
        assert_eq!(choose_gid(Flavor::AppleRdma, tb, &[]), None);
    }

    #[test]
    fn caps_per_flavor() {
        let port = PortInfo { active_mtu: ffi::IBV_MTU_4096, max_msg_sz: 1 << 30, ..PortInfo::default() };
        let mlx = DevLimits {
            max_qp: 1 << 18,
            max_qp_wr: 1 << 15,
            max_cqe: 1 << 22,
            max_mr: 1 << 24,
            ..DevLimits::default()
        };
        let (caps, cqe) = Flavor::RdmaCore.caps(&mlx, &port, 4096, None);
        assert!(caps.rc && caps.rdma_read && caps.rdma_write);
        assert_eq!((caps.frame, caps.align, caps.max_wr, caps.max_msg), (4096, 1, 128, 1 << 30));
        assert_eq!(caps.max_qp * 2 * caps.max_wr, cqe, "the CQ has room for every work request");
        // A small device: the CQ bounds the queue pairs.
        let small = DevLimits { max_qp: 64, max_qp_wr: 16, max_cqe: 100, max_mr: 8, ..DevLimits::default() };
        let (caps, cqe) =
            Flavor::RdmaCore.caps(&small, &PortInfo { active_mtu: ffi::IBV_MTU_1024, ..port }, 4096, None);
        assert_eq!((caps.max_wr, cqe, caps.max_qp, caps.max_mr, caps.frame), (16, 100, 3, 8, 1024));

        // Thunderbolt: DESIGN.md's limits, with or without ibv_query_device.
        for dev in
            [DevLimits::default(), DevLimits { max_qp: 64, max_mr: 1000, max_cqe: 1 << 16, ..DevLimits::default() }]
        {
            let (caps, cqe) = Flavor::AppleRdma.caps(&dev, &PortInfo::default(), 16384, Some((26, 3)));
            assert!(!caps.rc && !caps.rdma_read && !caps.rdma_write);
            assert_eq!((caps.max_qp, caps.max_mr, caps.max_wr), (10, 100, 32));
            assert_eq!((caps.frame, caps.align, caps.max_msg), (4096, 16384, 16_773_120));
            assert_eq!(cqe, 640);
            // macOS 26.2, or a version not read: one frame per message.
            for os in [Some((26, 2)), None] {
                assert_eq!(Flavor::AppleRdma.caps(&dev, &PortInfo::default(), 16384, os).0.max_msg, 4096);
            }
        }
    }

    #[test]
    fn mtu_and_access_follow_jaccl_on_thunderbolt_unless_overridden() {
        let (lw, rw, rr) = (ffi::IBV_ACCESS_LOCAL_WRITE, ffi::IBV_ACCESS_REMOTE_WRITE, ffi::IBV_ACCESS_REMOTE_READ);
        // Thunderbolt: 1024 whatever the port says (JACCL), rdma-core: the port's.
        assert_eq!(Flavor::AppleRdma.path_mtu(ffi::IBV_MTU_4096, None), ffi::IBV_MTU_1024);
        assert_eq!(Flavor::AppleRdma.path_mtu(0, None), ffi::IBV_MTU_1024);
        assert_eq!(Flavor::RdmaCore.path_mtu(ffi::IBV_MTU_4096, None), ffi::IBV_MTU_4096);
        assert_eq!(Flavor::RdmaCore.path_mtu(0, None), ffi::IBV_MTU_1024);
        // MPR_RDMA_MTU beats both.
        assert_eq!(Flavor::AppleRdma.path_mtu(ffi::IBV_MTU_1024, Some(4096)), ffi::IBV_MTU_4096);
        assert_eq!(Flavor::RdmaCore.path_mtu(ffi::IBV_MTU_4096, Some(256)), ffi::IBV_MTU_256);
        assert_eq!(
            [256, 512, 1024, 2048, 4096, 1000, 8192].map(mtu_code),
            [Some(1), Some(2), Some(3), Some(4), Some(5), None, None]
        );
        // Registration: LW|RW|RR on both (JACCL's on Thunderbolt), LW alone when asked.
        for f in [Flavor::AppleRdma, Flavor::RdmaCore] {
            assert_eq!(f.mr_access(None), lw | rw | rr);
            assert_eq!(f.mr_access(Some("remote")), lw | rw | rr);
            assert_eq!(f.mr_access(Some("local")), lw);
        }
    }

    #[test]
    fn names_and_codes() {
        assert_eq!([1, 3, 5].map(mtu_bytes), [Some(256), Some(1024), Some(4096)]);
        assert_eq!([0, 6].map(mtu_bytes), [None, None]);
        assert_eq!(port_state_name(ffi::IBV_PORT_ACTIVE), "ACTIVE");
        assert_eq!(port_state_name(99), "unknown");
        assert_eq!(link_layer_name(ffi::IBV_LINK_LAYER_ETHERNET), "Ethernet");
        assert_eq!(wc_status(ffi::IBV_WC_SUCCESS), WcStatus::Success);
        assert_eq!(wc_status(ffi::IBV_WC_WR_FLUSH_ERR), WcStatus::Flushed);
        assert_eq!(wc_status(ffi::IBV_WC_RNR_RETRY_EXC_ERR), WcStatus::RetryExceeded);
        assert_eq!(wc_status(21), WcStatus::Other(21));
        assert!(is_ipv4_mapped(&mapped(7)) && !is_ipv4_mapped(&link_local()));
    }
}
