//! From each host's report to the fabric: which link of which host is cabled to which of
//! another (a Thunderbolt port's peer UUID is the other end's own UUID), what is wrong with
//! each cable in plain words, a /30 subnet per cable, and the hostfile mprun reads.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// What `mpr-fabric probe --json` says about one host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Report {
    /// The name it was reached by (set by whoever gathers the reports).
    #[serde(default)]
    pub(crate) host: String,
    /// `macOS 26.2`, `Linux 6.12.0`.
    pub(crate) os: String,
    pub(crate) links: Vec<Link>,
    /// What the probe could not find out, in plain words.
    #[serde(default)]
    pub(crate) notes: Vec<String>,
    /// Bridges up with Thunderbolt ports as members (macOS's Thunderbolt Bridge, `bridge0`).
    #[serde(default)]
    pub(crate) bridges: Vec<Bridge>,
}

/// A bridge that is up and holds Thunderbolt ports: while it does, connecting their queue
/// pairs fails (RTR; mlx issue 3207), so it must come down.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Bridge {
    /// `bridge0`.
    pub(crate) name: String,
    /// Its Thunderbolt members (`en2`).
    pub(crate) members: Vec<String>,
}

impl Bridge {
    /// The commands that take it down: its Thunderbolt members out, then the bridge down (as
    /// MLX's set-up does; until the Mac restarts or the Thunderbolt Bridge service is used).
    pub(crate) fn down_commands(&self) -> Vec<String> {
        let mut cmds: Vec<String> =
            self.members.iter().map(|m| format!("sudo ifconfig {} deletem {m}", self.name)).collect();
        cmds.push(format!("sudo ifconfig {} down", self.name));
        cmds
    }
}

/// One port (Thunderbolt) or RDMA NIC of a host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Link {
    /// Its IP interface (`en3`).
    pub(crate) iface: String,
    /// Its RDMA device, if the system lists one (`rdma_en3`; none: RDMA not enabled).
    pub(crate) rdma: Option<String>,
    /// Its IPv4 address and prefix length.
    pub(crate) addr: Option<(Ipv4Addr, u8)>,
    /// Whether the port is up with a machine at the other end.
    pub(crate) active: bool,
    /// Thunderbolt: this port's domain UUID and the one at the other end of its cable.
    pub(crate) uuid: Option<String>,
    pub(crate) peer: Option<String>,
    /// The link speed as the system reports it.
    pub(crate) speed: Option<String>,
}

/// One cable: (host index, link index) at each end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cable {
    pub(crate) a: (usize, usize),
    pub(crate) b: (usize, usize),
}

/// The cables between `hosts`, each once (its end on the lower host first), in host and
/// link order; plus the links that lead to no host of the list, in plain words.
pub(crate) fn cables(hosts: &[Report]) -> (Vec<Cable>, Vec<String>) {
    let (mut out, mut loose) = (Vec::new(), Vec::new());
    for (h, r) in hosts.iter().enumerate() {
        for (l, link) in r.links.iter().enumerate() {
            let Some(peer) = &link.peer else { continue };
            let other = hosts.iter().enumerate().find_map(|(g, s)| {
                s.links.iter().position(|m| m.uuid.as_ref() == Some(peer) && m.peer == link.uuid).map(|k| (g, k))
            });
            match other {
                Some((g, k)) if (g, k) > (h, l) => out.push(Cable { a: (h, l), b: (g, k) }),
                Some(_) => {}
                None => loose.push(format!(
                    "{} {}: cabled to a machine that is not one of the hosts (or whose report does not name this cable)",
                    r.host, link.iface
                )),
            }
        }
    }
    (out, loose)
}

fn end(hosts: &[Report], e: (usize, usize)) -> (&Report, &Link) {
    (&hosts[e.0], &hosts[e.0].links[e.1])
}

/// Whether two addresses are the two ends of one subnet.
fn one_subnet(a: (Ipv4Addr, u8), b: (Ipv4Addr, u8)) -> bool {
    let mask = |bits: u8| if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits.min(32))) };
    a.1 == b.1 && a.0 != b.0 && u32::from(a.0) & mask(a.1) == u32::from(b.0) & mask(b.1)
}

/// What is wrong with each cable (empty: ready), and across the hosts, in plain words.
pub(crate) fn check(hosts: &[Report], cables: &[Cable]) -> Vec<String> {
    let mut out = Vec::new();
    let mut os: Vec<&str> = hosts.iter().map(|h| h.os.as_str()).collect();
    os.sort_unstable();
    os.dedup();
    if os.len() > 1 {
        let each: Vec<String> = hosts.iter().map(|h| format!("{} runs {}", h.host, h.os)).collect();
        out.push(format!(
            "the hosts run different systems ({}): RDMA over Thunderbolt needs the same macOS on both ends",
            each.join(", ")
        ));
    }
    for h in hosts {
        for b in &h.bridges {
            out.push(format!(
                "{}: {} is up with Thunderbolt ports {} as members: their RDMA connections fail while it is \
                 (`mpr-fabric setup` takes it down: {})",
                h.host,
                b.name,
                b.members.join(", "),
                b.down_commands().join("; ")
            ));
        }
    }
    for c in cables {
        let ((ra, la), (rb, lb)) = (end(hosts, c.a), end(hosts, c.b));
        let name = format!("{} {} <-> {} {}", ra.host, la.iface, rb.host, lb.iface);
        for (r, l) in [(ra, la), (rb, lb)] {
            if l.rdma.is_none() {
                out.push(format!(
                    "{name}: RDMA is not enabled on {} (no rdma_{}): run `rdma_ctl enable` in recoveryOS, then restart",
                    r.host, l.iface
                ));
            }
            if !l.active {
                out.push(format!(
                    "{name}: port {} of {} is not active (cable loose, or the other Mac asleep)",
                    l.iface, r.host
                ));
            }
            if l.addr.is_none() {
                out.push(format!(
                    "{name}: {} {} has no IPv4 address (mpr-fabric setup --assign gives each cable a /30)",
                    r.host, l.iface
                ));
            }
        }
        if let (Some(a), Some(b)) = (la.addr, lb.addr) {
            if !one_subnet(a, b) {
                out.push(format!(
                    "{name}: the two ends are not on one subnet ({}/{} and {}/{}): mpr would not pair them",
                    a.0, a.1, b.0, b.1
                ));
            }
        }
    }
    out
}

/// A /30 per cable out of `base` (a /24): cable k gets `base + 4k + 1` at its first end and
/// `+ 2` at its second. Returns (host, iface, address) per end.
pub(crate) fn assign(
    hosts: &[Report],
    cables: &[Cable],
    base: Ipv4Addr,
) -> Result<Vec<(String, String, Ipv4Addr)>, String> {
    if cables.len() > 63 {
        return Err(format!("{} cables do not fit one /24 in /30s (63 do)", cables.len()));
    }
    let b = u32::from(base) & !0xff;
    let mut out = Vec::new();
    for (k, c) in cables.iter().enumerate() {
        for (e, off) in [(c.a, 1), (c.b, 2)] {
            let (r, l) = end(hosts, e);
            out.push((r.host.clone(), l.iface.clone(), Ipv4Addr::from(b + 4 * k as u32 + off)));
        }
    }
    Ok(out)
}

/// The hostfile for `hosts` over `cables`: one line per host, its RDMA devices towards each
/// peer (`rdma=PEER:DEV+DEV`, the k-th cable of a pair k-th on both ends, in cable order).
pub(crate) fn hostfile(hosts: &[Report], cables: &[Cable]) -> String {
    let mut text = String::from("# Written by mpr-fabric: one line per host, its RDMA devices towards each peer.\n");
    for (h, r) in hosts.iter().enumerate() {
        let mut peers: Vec<(usize, Vec<String>)> = Vec::new();
        for c in cables {
            let (mine, theirs) = match (c.a.0 == h, c.b.0 == h) {
                (true, _) => (c.a, c.b),
                (_, true) => (c.b, c.a),
                _ => continue,
            };
            let dev = r.links[mine.1].rdma.clone().unwrap_or_else(|| format!("rdma_{}", r.links[mine.1].iface));
            match peers.iter_mut().find(|p| p.0 == theirs.0) {
                Some(p) => p.1.push(dev),
                None => peers.push((theirs.0, vec![dev])),
            }
        }
        peers.sort_by_key(|p| p.0);
        let list: Vec<String> = peers.iter().map(|(g, d)| format!("{}:{}", hosts[*g].host, d.join("+"))).collect();
        if list.is_empty() {
            text += &format!("{}\n", r.host);
        } else {
            text += &format!("{} rdma={}\n", r.host, list.join(","));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::tests::{profile, Port, IFCONFIG, NETWORKSETUP};

    fn link(iface: &str, uuid: &str, peer: Option<&str>, addr: Option<&str>) -> Link {
        Link {
            iface: iface.into(),
            rdma: Some(format!("rdma_{iface}")),
            addr: addr.map(|a| (a.parse().unwrap(), 30)),
            active: peer.is_some(),
            uuid: Some(uuid.into()),
            peer: peer.map(String::from),
            speed: None,
        }
    }

    fn host(name: &str, links: Vec<Link>) -> Report {
        Report { host: name.into(), os: "macOS 26.2".into(), links, ..Report::default() }
    }

    /// Two Macs, two cables between them (synthetic): both are found, each once, and the
    /// hostfile lists both devices in the same cable order at both ends.
    #[test]
    fn two_macs_with_two_cables() {
        let hosts = [
            host(
                "mac1",
                vec![
                    link("en2", "A1", Some("B2"), Some("192.168.200.1")),
                    link("en3", "A2", Some("B1"), Some("192.168.200.5")),
                ],
            ),
            host(
                "mac2",
                vec![
                    link("en4", "B1", Some("A2"), Some("192.168.200.6")),
                    link("en5", "B2", Some("A1"), Some("192.168.200.2")),
                ],
            ),
        ];
        let (c, loose) = cables(&hosts);
        assert!(loose.is_empty(), "{loose:?}");
        assert_eq!(c, [Cable { a: (0, 0), b: (1, 1) }, Cable { a: (0, 1), b: (1, 0) }]);
        assert!(check(&hosts, &c).is_empty(), "{:?}", check(&hosts, &c));
        assert_eq!(
            hostfile(&hosts, &c),
            "# Written by mpr-fabric: one line per host, its RDMA devices towards each peer.\n\
             mac1 rdma=mac2:rdma_en2+rdma_en3\nmac2 rdma=mac1:rdma_en5+rdma_en4\n"
        );
    }

    /// Four Macs in a full mesh built from recorded-style outputs (synthetic), through the
    /// parsers: six cables, a /30 each, and a hostfile mprun accepts.
    #[test]
    fn four_macs_in_a_mesh_from_their_outputs() {
        // Mac i's port t (1-based tag among "1", "2", "5") goes to Mac j; UUID "Mi-t".
        let tags = ["1", "2", "5"];
        let peers_of = |i: usize| (0..4).filter(move |&j| j != i).collect::<Vec<_>>();
        let port_to = |i: usize, j: usize| tags[peers_of(i).iter().position(|&p| p == j).unwrap()];
        let hosts: Vec<Report> = (0..4)
            .map(|i| {
                // (tag, own UUID, peer UUID, peer name) per port.
                let ports: Vec<[String; 4]> = peers_of(i)
                    .into_iter()
                    .map(|j| {
                        let t = port_to(i, j);
                        [t.to_string(), format!("M{i}-{t}"), format!("M{j}-{}", port_to(j, i)), format!("mac{}", j + 1)]
                    })
                    .collect();
                let refs: Vec<Port<'_>> =
                    ports.iter().map(|[t, u, p, n]| (t.as_str(), u.as_str(), Some((p.as_str(), n.as_str())))).collect();
                let json = profile(&refs);
                let mut r =
                    crate::probe::from_outputs(&json, NETWORKSETUP, IFCONFIG, &["rdma_en2", "rdma_en3", "rdma_en6"])
                        .unwrap();
                r.host = format!("mac{}", i + 1);
                r.os = "macOS 26.2".into();
                r
            })
            .collect();
        let (c, loose) = cables(&hosts);
        assert!(loose.is_empty(), "{loose:?}");
        assert_eq!(c.len(), 6);
        // The synthetic ifconfig gives every Mac the same en2 address and en3/en6 none.
        let problems = check(&hosts, &c);
        assert!(problems.iter().any(|p| p.contains("has no IPv4 address")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("is not active")), "en6 is inactive: {problems:?}");
        let addrs = assign(&hosts, &c, "192.168.200.0".parse().unwrap()).unwrap();
        assert_eq!(addrs.len(), 12);
        assert_eq!(addrs[0], ("mac1".into(), "en2".into(), "192.168.200.1".parse().unwrap()));
        assert_eq!(addrs[1].2, "192.168.200.2".parse::<Ipv4Addr>().unwrap());
        assert_eq!(addrs[11].2, "192.168.200.22".parse::<Ipv4Addr>().unwrap());
        let text = hostfile(&hosts, &c);
        assert!(text.contains("\nmac1 rdma=mac2:rdma_en2,mac3:rdma_en3,mac4:rdma_en6\n"), "{text}");
        assert!(text.ends_with("\nmac4 rdma=mac1:rdma_en2,mac2:rdma_en3,mac3:rdma_en6\n"), "{text}");
    }

    #[test]
    fn problems_are_said_in_plain_words() {
        let mut a = host("mac1", vec![link("en2", "A1", Some("B1"), Some("192.168.200.1"))]);
        let mut b = host("mac2", vec![link("en4", "B1", Some("A1"), Some("192.168.201.2"))]);
        b.os = "macOS 26.1".into();
        b.links[0].rdma = None;
        a.links.push(link("en3", "A2", Some("Z9"), None));
        let hosts = [a, b];
        let (c, loose) = cables(&hosts);
        assert_eq!(c.len(), 1);
        assert_eq!(
            loose,
            ["mac1 en3: cabled to a machine that is not one of the hosts (or whose report does not name this cable)"]
        );
        let p = check(&hosts, &c);
        assert!(
            p[0].starts_with("the hosts run different systems (mac1 runs macOS 26.2, mac2 runs macOS 26.1)"),
            "{p:?}"
        );
        assert!(p.contains(&"mac1 en2 <-> mac2 en4: RDMA is not enabled on mac2 (no rdma_en4): run `rdma_ctl enable` in recoveryOS, then restart".to_string()), "{p:?}");
        assert!(p.iter().any(|x| x.contains("not on one subnet (192.168.200.1/30 and 192.168.201.2/30)")), "{p:?}");
    }

    #[test]
    fn a_thunderbolt_bridge_that_is_up_is_a_problem_with_its_fix() {
        let mut a = host("mac1", vec![link("en2", "A1", Some("B1"), Some("192.168.200.1"))]);
        let b = host("mac2", vec![link("en4", "B1", Some("A1"), Some("192.168.200.2"))]);
        a.bridges.push(Bridge { name: "bridge0".into(), members: vec!["en2".into(), "en3".into()] });
        let hosts = [a, b];
        let (c, _) = cables(&hosts);
        assert_eq!(
            check(&hosts, &c),
            ["mac1: bridge0 is up with Thunderbolt ports en2, en3 as members: their RDMA connections fail while it \
              is (`mpr-fabric setup` takes it down: sudo ifconfig bridge0 deletem en2; sudo ifconfig bridge0 \
              deletem en3; sudo ifconfig bridge0 down)"]
        );
    }
}
