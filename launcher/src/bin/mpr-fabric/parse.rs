//! Reading a Mac's Thunderbolt links from the tools macOS has (pure: text in, facts out):
//! `system_profiler SPThunderboltDataType -json` (each port's bus, its domain UUID, and the
//! domain UUID of the machine at the other end of its cable), `networksetup
//! -listallhardwareports` (which `enN` is port "Thunderbolt N") and `ifconfig` (each
//! interface's IPv4 address and whether it is active). An RDMA device `rdma_enN` is paired
//! with interface `enN` (Apple TN3205). This is the pairing MLX's `mlx.distributed_config`
//! relies on too.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Deserialize;

/// One Thunderbolt port as `system_profiler` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TbPort {
    /// The receptacle's number: port "Thunderbolt N" in `networksetup`.
    pub(crate) tag: String,
    /// This port's domain UUID.
    pub(crate) uuid: String,
    /// The domain UUID at the other end of its cable, if a machine is there.
    pub(crate) peer: Option<String>,
    /// The other end's name (`device_name_key`), if any.
    pub(crate) peer_name: Option<String>,
    /// The link speed, as reported (`Up to 80 Gb/s`).
    pub(crate) speed: Option<String>,
}

#[derive(Deserialize)]
struct Profile {
    #[serde(rename = "SPThunderboltDataType", default)]
    buses: Vec<Bus>,
}

#[derive(Deserialize)]
struct Bus {
    domain_uuid_key: Option<String>,
    receptacle_1_tag: Option<Receptacle>,
    #[serde(rename = "_items", default)]
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Receptacle {
    receptacle_id_key: Option<String>,
    current_speed_key: Option<String>,
}

#[derive(Deserialize)]
struct Item {
    domain_uuid_key: Option<String>,
    device_name_key: Option<String>,
}

/// Parses `system_profiler SPThunderboltDataType -json`; buses without a domain UUID or a
/// receptacle (internal ones) are left out.
pub(crate) fn system_profiler(json: &str) -> Result<Vec<TbPort>, String> {
    let p: Profile =
        serde_json::from_str(json).map_err(|e| format!("system_profiler output is not what macOS writes: {e}"))?;
    Ok(p.buses
        .into_iter()
        .filter_map(|b| {
            let r = b.receptacle_1_tag?;
            let first = b.items.into_iter().next();
            Some(TbPort {
                tag: r.receptacle_id_key?,
                uuid: b.domain_uuid_key?,
                peer: first.as_ref().and_then(|i| i.domain_uuid_key.clone()),
                peer_name: first.and_then(|i| i.device_name_key),
                speed: r.current_speed_key,
            })
        })
        .collect())
}

/// Parses `networksetup -listallhardwareports`: the interface of each port "Thunderbolt N",
/// by N.
pub(crate) fn networksetup(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut port: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(p) = line.strip_prefix("Hardware Port:") {
            // "Thunderbolt N" is a port; "Thunderbolt Bridge" is not.
            port = p
                .trim()
                .strip_prefix("Thunderbolt ")
                .map(str::trim)
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .map(str::to_string);
        } else if let (Some(dev), Some(n)) = (line.strip_prefix("Device:"), &port) {
            out.insert(n.clone(), dev.trim().to_string());
            port = None;
        }
    }
    out
}

/// One interface as `ifconfig` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Iface {
    /// Its first routable IPv4 address: a 169.254/16 one (which macOS gives every Thunderbolt
    /// interface) names no cable and is not taken.
    pub(crate) addr: Option<(Ipv4Addr, u8)>,
    /// `status: active` (a cable with a live machine at its end).
    pub(crate) active: bool,
    /// `UP` among its flags.
    pub(crate) up: bool,
    /// A bridge's members (`member: en2 flags=...`).
    pub(crate) members: Vec<String>,
}

/// Parses macOS `ifconfig` output: each interface's first routable IPv4 address (the netmask
/// in hex, as macOS prints it), its status, whether it is up, and a bridge's members.
pub(crate) fn ifconfig(text: &str) -> BTreeMap<String, Iface> {
    let mut out: BTreeMap<String, Iface> = BTreeMap::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with([' ', '\t']) && !line.is_empty() {
            cur = line.split(':').next().map(str::to_string);
            if let Some(c) = &cur {
                let up = line
                    .split_once('<')
                    .and_then(|(_, f)| f.split_once('>'))
                    .is_some_and(|(flags, _)| flags.split(',').any(|f| f == "UP"));
                out.entry(c.clone()).or_default().up = up;
            }
            continue;
        }
        let Some(iface) = cur.as_ref().and_then(|c| out.get_mut(c)) else { continue };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["inet", ip, "netmask", mask, ..] if iface.addr.is_none() => {
                let bits = u32::from_str_radix(mask.trim_start_matches("0x"), 16).ok().map(|m| m.count_ones() as u8);
                if let (Ok(ip), Some(bits)) = (ip.parse::<Ipv4Addr>(), bits) {
                    if !ip.is_link_local() {
                        iface.addr = Some((ip, bits));
                    }
                }
            }
            ["status:", s] => iface.active = *s == "active",
            ["member:", m, ..] => iface.members.push(m.to_string()),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Synthetic `system_profiler SPThunderboltDataType -json` of a Mac Studio with three
    /// ports: port 1 cabled to a machine, port 2 cabled to another, port 5 empty.
    /// A port for [`profile`]: its tag, its UUID, and the peer's UUID and name.
    pub(crate) type Port<'a> = (&'a str, &'a str, Option<(&'a str, &'a str)>);

    pub(crate) fn profile(ports: &[Port<'_>]) -> String {
        let buses: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (tag, uuid, peer))| {
                let items = match peer {
                    Some((u, name)) => format!(
                        r#", "_items": [{{"_name": "{name}", "device_name_key": "{name}", "domain_uuid_key": "{u}", "vendor_name_key": "Apple Inc."}}]"#
                    ),
                    None => String::new(),
                };
                format!(
                    r#"{{"_name": "thunderboltusb4_bus_{i}", "device_name_key": "Mac Studio", "domain_uuid_key": "{uuid}",
                        "receptacle_1_tag": {{"current_speed_key": "Up to 80 Gb/s", "receptacle_id_key": "{tag}",
                        "receptacle_status_key": "receptacle_connected"}}, "vendor_name_key": "Apple Inc."{items}}}"#
                )
            })
            .collect();
        format!(r#"{{"SPThunderboltDataType": [{}]}}"#, buses.join(",\n"))
    }

    /// Synthetic `networksetup -listallhardwareports`.
    pub(crate) const NETWORKSETUP: &str = "
Hardware Port: Ethernet
Device: en0
Ethernet Address: 00:00:00:00:00:01

Hardware Port: Thunderbolt 1
Device: en2
Ethernet Address: 00:00:00:00:00:02

Hardware Port: Thunderbolt 2
Device: en3
Ethernet Address: 00:00:00:00:00:03

Hardware Port: Thunderbolt 5
Device: en6
Ethernet Address: 00:00:00:00:00:06

Hardware Port: Thunderbolt Bridge
Device: bridge0
Ethernet Address: 00:00:00:00:00:07
";

    /// Synthetic macOS `ifconfig` of that Mac: en2 addressed and active, en3 active without
    /// an address, en6 inactive.
    pub(crate) const IFCONFIG: &str = "lo0: flags=8049<UP,LOOPBACK,RUNNING,MULTICAST> mtu 16384
\tinet 127.0.0.1 netmask 0xff000000
en0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\tether 00:00:00:00:00:01
\tinet 192.168.1.20 netmask 0xffffff00 broadcast 192.168.1.255
\tstatus: active
en2: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\tinet6 fe80::1%en2 prefixlen 64 scopeid 0x8
\tinet 192.168.200.1 netmask 0xfffffffc broadcast 192.168.200.3
\tmedia: autoselect <full-duplex>
\tstatus: active
en3: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\tstatus: active
en6: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\tstatus: inactive
";

    /// The same Mac as macOS leaves it before set-up: the Thunderbolt Bridge up with en2 and
    /// en3 as members, and 169.254 addresses on the ports.
    pub(crate) const IFCONFIG_BRIDGED: &str = "en2: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\tinet6 fe80::1%en2 prefixlen 64 scopeid 0x8
\tinet 169.254.10.20 netmask 0xffff0000 broadcast 169.254.255.255
\tstatus: active
en3: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\tstatus: active
bridge0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\toptions=63<RXCSUM,TXCSUM,TSO4,TSO6>
\tConfiguration:
\t\tid 0:0:0:0:0:0 priority 0 hellotime 0 fwddelay 0
\tmember: en2 flags=3<LEARNING,DISCOVER>
\t        ifmaxaddr 0 port 8 priority 0 path cost 0
\tmember: en3 flags=3<LEARNING,DISCOVER>
\t        ifmaxaddr 0 port 9 priority 0 path cost 0
\tstatus: active
";

    #[test]
    fn the_ports_and_their_peers_are_read() {
        let json = profile(&[
            ("1", "UUID-A1", Some(("UUID-B1", "mac2"))),
            ("2", "UUID-A2", Some(("UUID-C1", "mac3"))),
            ("5", "UUID-A5", None),
        ]);
        let ports = system_profiler(&json).unwrap();
        assert_eq!(ports.len(), 3);
        assert_eq!(ports[0].tag, "1");
        assert_eq!(ports[0].peer.as_deref(), Some("UUID-B1"));
        assert_eq!(ports[1].peer_name.as_deref(), Some("mac3"));
        assert_eq!(ports[2].peer, None);
        assert_eq!(ports[2].speed.as_deref(), Some("Up to 80 Gb/s"));
        assert!(system_profiler("not json")
            .unwrap_err()
            .starts_with("system_profiler output is not what macOS writes"));
        assert!(system_profiler(r#"{"SPThunderboltDataType": [{"_name": "internal"}]}"#).unwrap().is_empty());
    }

    #[test]
    fn ports_map_to_interfaces_and_interfaces_to_addresses() {
        let map = networksetup(NETWORKSETUP);
        assert_eq!(map.get("1").map(String::as_str), Some("en2"));
        assert_eq!(map.get("5").map(String::as_str), Some("en6"));
        assert_eq!(map.len(), 3, "the bridge is not a port: {map:?}");
        let ifs = ifconfig(IFCONFIG);
        let iface = |addr, active| Iface { addr, active, up: true, members: Vec::new() };
        assert_eq!(ifs["en2"], iface(Some((Ipv4Addr::new(192, 168, 200, 1), 30)), true));
        assert_eq!(ifs["en3"], iface(None, true));
        assert_eq!(ifs["en6"], iface(None, false));
        assert_eq!(ifs["lo0"].addr, Some((Ipv4Addr::LOCALHOST, 8)));
        // Before set-up: a 169.254 address is no address, and the bridge holds the ports.
        let ifs = ifconfig(IFCONFIG_BRIDGED);
        assert_eq!(ifs["en2"], iface(None, true));
        assert_eq!(ifs["bridge0"].members, ["en2", "en3"]);
        assert!(ifs["bridge0"].up && ifs["bridge0"].active);
    }
}
