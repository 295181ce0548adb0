//! What differs between the verbs libraries, as data ([`Flavor`]: which library, GID, access
//! flags and limits), and the reading of verbs values (MTU codes, port states, link layers,
//! completion statuses). Pure functions only: everything here is tested without a device.

use std::ffi::c_int;

use super::PORT;
use crate::transport::verbs::ffi;
use crate::transport::verbs::provider::{DeviceCaps, QpType, WcStatus};

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

    /// The GID index used when the table has no IPv4-mapped entry: 0 (the port's default
    /// GID: an InfiniBand port's only one, a RoCE port's link-local one) for rdma-core, 1
    /// (the `rdma_enN` port's own GID) for librdma.
    pub(super) fn gid_fallback(self) -> u8 {
        match self {
            Flavor::RdmaCore => 0,
            Flavor::AppleRdma => 1,
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

    /// Access flags of registered memory: remote read/write where RC can use them; local write
    /// only on Thunderbolt (DESIGN.md; JACCL asks for more, which the device does not use).
    pub(super) fn mr_access(self) -> c_int {
        match self {
            Flavor::RdmaCore => {
                ffi::IBV_ACCESS_LOCAL_WRITE | ffi::IBV_ACCESS_REMOTE_WRITE | ffi::IBV_ACCESS_REMOTE_READ
            }
            Flavor::AppleRdma => ffi::IBV_ACCESS_LOCAL_WRITE,
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
    pub(super) fn caps(self, dev: &DevLimits, port: &PortInfo, page_size: usize) -> (DeviceCaps, usize) {
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
                // 4095 frames of 4 KiB (DESIGN.md).
                max_msg: 16_773_120,
                frame: 4096,
                align: page_size.max(1),
            },
        };
        (caps, cq_entries)
    }
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
pub(super) struct GidEntry {
    pub(super) index: u8,
    pub(super) gid: [u8; 16],
    pub(super) roce_v2: Option<bool>,
}

/// The GID index to use when none is configured: the first IPv4-mapped entry (a RoCE v2 one
/// first, where sysfs tells the types apart), else the flavor's fallback. An InfiniBand port
/// uses index 0 (its GIDs are subnet prefix + port GUID).
pub(super) fn choose_gid(flavor: Flavor, link_layer: u8, table: &[GidEntry]) -> u8 {
    if flavor == Flavor::RdmaCore && link_layer == ffi::IBV_LINK_LAYER_INFINIBAND {
        return 0;
    }
    let mapped = || table.iter().filter(|e| is_ipv4_mapped(&e.gid));
    mapped().find(|e| e.roce_v2 == Some(true)).or_else(|| mapped().next()).map_or(flavor.gid_fallback(), |e| e.index)
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
        assert_eq!(choose_gid(Flavor::RdmaCore, ib, &[e(3, mapped(1), None)]), 0);
        // RoCE: the IPv4-mapped v2 entry over the v1 one and the link-local ones.
        let mlx5 = [
            e(0, link_local(), Some(false)),
            e(1, link_local(), Some(true)),
            e(2, mapped(1), Some(false)),
            e(3, mapped(1), Some(true)),
        ];
        assert_eq!(choose_gid(Flavor::RdmaCore, eth, &mlx5), 3);
        // Types unknown: the first IPv4-mapped entry; none at all: index 0.
        assert_eq!(choose_gid(Flavor::RdmaCore, eth, &[e(0, link_local(), None), e(2, mapped(1), None)]), 2);
        assert_eq!(choose_gid(Flavor::RdmaCore, eth, &[e(0, link_local(), None)]), 0);
        // Thunderbolt: the IPv4-mapped entry wherever it is, else index 1 (JACCL, MLX PR 3468).
        let tb = ffi::IBV_LINK_LAYER_UNSPECIFIED;
        assert_eq!(choose_gid(Flavor::AppleRdma, tb, &[e(0, link_local(), None), e(2, mapped(2), None)]), 2);
        assert_eq!(choose_gid(Flavor::AppleRdma, tb, &[e(0, link_local(), None), e(1, link_local(), None)]), 1);
        assert_eq!(choose_gid(Flavor::AppleRdma, tb, &[]), 1);
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
        let (caps, cqe) = Flavor::RdmaCore.caps(&mlx, &port, 4096);
        assert!(caps.rc && caps.rdma_read && caps.rdma_write);
        assert_eq!((caps.frame, caps.align, caps.max_wr, caps.max_msg), (4096, 1, 128, 1 << 30));
        assert_eq!(caps.max_qp * 2 * caps.max_wr, cqe, "the CQ has room for every work request");
        // A small device: the CQ bounds the queue pairs.
        let small = DevLimits { max_qp: 64, max_qp_wr: 16, max_cqe: 100, max_mr: 8, ..DevLimits::default() };
        let (caps, cqe) = Flavor::RdmaCore.caps(&small, &PortInfo { active_mtu: ffi::IBV_MTU_1024, ..port }, 4096);
        assert_eq!((caps.max_wr, cqe, caps.max_qp, caps.max_mr, caps.frame), (16, 100, 3, 8, 1024));

        // Thunderbolt: DESIGN.md's limits, with or without ibv_query_device.
        for dev in
            [DevLimits::default(), DevLimits { max_qp: 64, max_mr: 1000, max_cqe: 1 << 16, ..DevLimits::default() }]
        {
            let (caps, cqe) = Flavor::AppleRdma.caps(&dev, &PortInfo::default(), 16384);
            assert!(!caps.rc && !caps.rdma_read && !caps.rdma_write);
            assert_eq!((caps.max_qp, caps.max_mr, caps.max_wr), (10, 100, 32));
            assert_eq!((caps.frame, caps.align, caps.max_msg), (4096, 16384, 16_773_120));
            assert_eq!(cqe, 640);
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
