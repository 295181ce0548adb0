//! The probe behind `mpr-info`: every device of the host's verbs library, as `ibv_devinfo`
//! shows them (name, node GUID, limits, and per port its state, link layer, MTU and GIDs).

use super::device::{api, Device, DeviceList};
use super::flavor::Flavor;
use crate::transport::verbs::ffi;
use crate::transport::verbs::provider::VerbsError;

/// One device as `ibv_devinfo` would show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeviceReport {
    /// The provider (library) that lists it.
    pub(crate) provider: &'static str,
    pub(crate) name: String,
    /// Host byte order; `None` if the device could not be queried.
    pub(crate) node_guid: Option<u64>,
    pub(crate) max_qp: Option<u32>,
    pub(crate) max_mr: Option<u32>,
    pub(crate) ports: Vec<PortReport>,
    /// Why the device could not be opened or queried, if it could not.
    pub(crate) error: Option<String>,
}

/// One port of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PortReport {
    pub(crate) port: u8,
    /// `IBV_PORT_*` ([`port_state_name`]).
    pub(crate) state: u32,
    /// `IBV_LINK_LAYER_*` ([`link_layer_name`]).
    pub(crate) link_layer: u8,
    /// `IBV_MTU_*` ([`mtu_bytes`]).
    pub(crate) active_mtu: u32,
    pub(crate) lid: u16,
    /// The non-zero GIDs with their table index.
    pub(crate) gids: Vec<(u8, [u8; 16])>,
}

/// The devices of this host's verbs library; `Unavailable` if there is no library or it
/// cannot list devices (on a kernel without RDMA, `ibv_get_device_list` fails with ENOSYS).
/// A device that cannot be opened is listed with its error.
pub(crate) fn probe() -> Result<Vec<DeviceReport>, VerbsError> {
    let flavor = Flavor::HOST;
    let api = api(flavor)?;
    let list = DeviceList::get(api)?;
    Ok(list.devices().iter().map(|&d| probe_device(flavor, &list, d)).collect())
}

fn probe_device(flavor: Flavor, list: &DeviceList, dev: *mut ffi::ibv_device) -> DeviceReport {
    let mut report = DeviceReport {
        provider: flavor.name(),
        name: list.name(dev),
        node_guid: None,
        max_qp: None,
        max_mr: None,
        ports: Vec::new(),
        error: None,
    };
    let ctx = match list.open(dev) {
        Ok(ctx) => ctx,
        Err(e) => {
            report.error = Some(e.to_string());
            return report;
        }
    };
    let dev = Device { api: list.api, ctx: &ctx };
    let mut port_count = 1;
    match dev.attr() {
        Ok(a) => {
            report.node_guid = Some(u64::from_be(a.node_guid));
            report.max_qp = u32::try_from(a.max_qp).ok();
            report.max_mr = u32::try_from(a.max_mr).ok();
            port_count = a.phys_port_cnt.max(1);
        }
        Err(e) => report.error = Some(e.to_string()),
    }
    for port in 1..=port_count {
        match dev.port(port) {
            Ok(a) => report.ports.push(PortReport {
                port,
                state: a.state,
                link_layer: a.link_layer,
                active_mtu: a.active_mtu,
                lid: a.lid,
                gids: dev.gids(port, usize::try_from(a.gid_tbl_len).unwrap_or(0)),
            }),
            Err(e) => report.error = Some(e.to_string()),
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::verbs::ibv::{Ibv, IbvConfig};

    /// No machine here has RDMA: the library may be missing, or present with a kernel that
    /// answers ENOSYS (`ibv_get_device_list: Function not implemented`), or list no device.
    /// Either way the probe says so and nothing panics; opening a device is `Unavailable`.
    #[test]
    fn probe_reports_unavailable_or_the_devices_without_panicking() {
        match probe() {
            Err(VerbsError::Unavailable(why)) => assert!(!why.is_empty()),
            Err(other) => panic!("the probe fails only as Unavailable, not {other:?}"),
            Ok(devices) => {
                for d in &devices {
                    assert!(!d.name.is_empty());
                    assert_eq!(d.provider, Flavor::HOST.name());
                }
            }
        }
        if !std::path::Path::new("/sys/class/infiniband").exists() && cfg!(target_os = "linux") {
            match probe() {
                Ok(devices) => assert!(devices.is_empty(), "{devices:?}"),
                Err(VerbsError::Unavailable(_)) => {}
                Err(other) => panic!("{other:?}"),
            }
            match Ibv::open(&IbvConfig::default()) {
                Err(VerbsError::Unavailable(_)) => {}
                other => panic!("no device here, yet: {other:?}"),
            }
        }
    }
}
