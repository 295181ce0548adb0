//! Which verbs provider a rank opens: `MPR_VERBS_PROVIDER=soft|soft-rc` picks the software
//! provider (never chosen on its own), otherwise the real one (rdma-core on Linux, Apple's
//! librdma on macOS) if a device is there.
//!
//! The software provider's knobs: `MPR_SOFT_LOSS` (probability that a wire frame is dropped,
//! default 0), `MPR_SOFT_SEED` (seed of the loss generator, mixed with the rank),
//! `MPR_SOFT_LIMITS` (a smaller device, to test how the transport lives within it:
//! `qp=N,mr=N,wr=N,msg=N`, each optional, the rest from the mode) and `MPR_SOFT_IFACES`
//! (a fabric of point-to-point links, as Thunderbolt cables are: one device per network
//! interface named in the list, `NAME` or `PREFIX*`, on the interface's IPv4 address; it
//! reaches only the peers whose devices sit on the same subnet) and `MPR_SOFT_MACOS` (the
//! macOS version a UC device imitates, default 26.2: one 4 KiB frame per message before
//! 26.3).
//!
//! Without `MPR_SOFT_IFACES` a rank opens one device that reaches every peer of its kind.

use std::net::{IpAddr, Ipv4Addr};

use super::fabric;
use super::ibv::{Ibv, IbvConfig};
use super::provider::{Provider, VerbsError};
use super::soft::{SoftConfig, SoftDevice, SoftLimits};
use crate::error::Error;

/// The devices a rank opened, all of the kind peers must share to connect to them.
#[derive(Debug)]
pub(crate) struct Opened {
    /// `soft`, `soft-rc` or `verbs` (what the business card says).
    pub(crate) kind: String,
    pub(crate) devs: Vec<Box<dyn Provider>>,
    /// Per device: the link it sits on (its IPv4 address and prefix length), which reaches
    /// the peers with a device on the same subnet; empty: the one device reaches every peer
    /// of its kind.
    pub(crate) links: Vec<(Ipv4Addr, u8)>,
    /// Devices named per peer host (`MPR_RDMA_PEERS`; see [`super::fabric`]): beats `links`.
    pub(crate) named: fabric::Named,
    /// Queue pairs each device holds for all the ranks of the host together (Thunderbolt,
    /// and the software provider's model of it on interfaces); `None`: each rank's own.
    pub(crate) shared_qps: Option<usize>,
}

/// Opened devices and, per device, its link.
type DevicesOnLinks = (Vec<Box<dyn Provider>>, Vec<(Ipv4Addr, u8)>);

impl Opened {
    /// One device that reaches every peer of its kind; `shared_qps` as the field says.
    fn one(kind: &str, dev: Box<dyn Provider>, shared_qps: Option<usize>) -> Opened {
        Opened { kind: kind.into(), devs: vec![dev], links: Vec::new(), named: Vec::new(), shared_qps }
    }
}

/// Opens this rank's devices. `Ok(Err(reason))`: no RDMA here (the job may fall back to
/// TCP); `Err`: a setting is wrong.
pub(crate) fn open(bind: IpAddr, rank: usize) -> Result<Result<Opened, String>, Error> {
    let chosen = std::env::var("MPR_VERBS_PROVIDER").unwrap_or_default();
    let named = match std::env::var("MPR_RDMA_PEERS") {
        Ok(v) if !v.trim().is_empty() => {
            Some(fabric::parse_named(&v).map_err(|e| Error::Bootstrap(format!("MPR_RDMA_PEERS={v}: {e}")))?)
        }
        _ => None,
    };
    match chosen.trim() {
        "" | "verbs" => Ok(open_verbs(named)),
        kind @ ("soft" | "soft-rc") => {
            let IpAddr::V4(v4) = bind else {
                return Err(Error::Bootstrap(format!("the software RDMA provider needs an IPv4 address, not {bind}")));
            };
            let mut cfg = if kind == "soft" { SoftConfig::new(v4) } else { SoftConfig::rc(v4) };
            // Validated with the other numeric settings at start-up (env::check).
            cfg.loss = crate::env::parsed("MPR_SOFT_LOSS").unwrap_or(cfg.loss);
            cfg.gid_index = crate::env::parsed("MPR_RDMA_GID_INDEX");
            cfg.seed = crate::env::parsed::<u64>("MPR_SOFT_SEED").unwrap_or(cfg.seed)
                ^ (rank as u64).wrapping_mul(0x9e37_79b9);
            if let Ok(v) = std::env::var("MPR_SOFT_MACOS") {
                cfg.macos = super::provider::parse_macos_version(&v).ok_or_else(|| {
                    Error::Bootstrap(format!("MPR_SOFT_MACOS={v}: expected a macOS version such as 26.2 or 26.3"))
                })?;
            }
            if let Ok(v) = std::env::var("MPR_SOFT_LIMITS") {
                cfg.limits =
                    Some(parse_limits(&v, &cfg).map_err(|e| Error::Bootstrap(format!("MPR_SOFT_LIMITS={v}: {e}")))?);
            }
            // A soft device per interface: the ones named per peer, or MPR_SOFT_IFACES.
            let (wanted, named) = match (named, std::env::var("MPR_SOFT_IFACES")) {
                (Some((devices, named)), _) => (devices.join(","), named),
                (None, Ok(list)) => (list, Vec::new()),
                (None, Err(_)) => {
                    // Without interfaces each rank's device stands for a Mac of its own.
                    return Ok(SoftDevice::open(cfg)
                        .map(|d| Opened::one(kind, Box::new(d), None))
                        .map_err(|e| e.to_string()));
                }
            };
            let (ifaces, local_only) = interfaces(&wanted)?;
            // An interface with link-local addresses only, as macOS leaves a Thunderbolt port
            // that was not set up: the same error as the real provider's.
            let unset = |name: &str| {
                let have: Vec<String> = local_only.iter().filter(|i| i.0 == name).map(|i| i.1.to_string()).collect();
                fabric::no_address(name, &format!("soft-uc:{name}"), &have)
            };
            if ifaces.is_empty() {
                return Ok(Err(match local_only.first() {
                    Some((name, _)) => unset(name),
                    None => format!("interfaces {wanted}: none has an IPv4 address"),
                }));
            }
            if !named.is_empty() {
                // Each named device must be there, in the order named.
                let order: Vec<&str> = wanted.split(',').collect();
                if let Some(missing) = order.iter().find(|n| !ifaces.iter().any(|i| i.0 == **n)) {
                    if local_only.iter().any(|i| i.0 == *missing) {
                        return Ok(Err(unset(missing)));
                    }
                    return Ok(Err(format!("no interface {missing} with an IPv4 address (named by MPR_RDMA_PEERS)")));
                }
            }
            let order: Vec<String> = if named.is_empty() {
                // One device per interface (on its first address, as `find` below takes it).
                let mut names: Vec<String> = Vec::new();
                for (n, _, _) in &ifaces {
                    if !names.contains(n) {
                        names.push(n.clone());
                    }
                }
                names
            } else {
                wanted.split(',').map(String::from).collect()
            };
            let (mut devs, mut links): DevicesOnLinks = (Vec::new(), Vec::new());
            for name in &order {
                let (_, addr, bits) = ifaces.iter().find(|i| &i.0 == name).cloned().expect("checked above");
                match SoftDevice::open(SoftConfig { addr, ..cfg }).and_then(|d| d.on_iface(name)) {
                    Ok(d) => devs.push(Box::new(d)),
                    Err(e) => return Ok(Err(e.to_string())),
                }
                links.push((addr, bits));
            }
            if !named.is_empty() {
                links.clear();
            }
            // A UC device on an interface is a Thunderbolt port: its queue pairs are the host's.
            let shared_qps = (kind == "soft").then(|| cfg.caps().max_qp);
            Ok(Ok(Opened { kind: kind.into(), devs, links, named, shared_qps }))
        }
        other => Err(Error::Bootstrap(format!(
            "MPR_VERBS_PROVIDER={other}: unknown provider (this build has verbs, soft, soft-rc)"
        ))),
    }
}

/// The real provider's devices: those named per peer; the one `MPR_RDMA_DEVICE` names; on
/// Thunderbolt, every active one whose interface has a routable IPv4 address, each on the
/// link that address sits on (each reaches one Mac; none: no RDMA, saying which interface
/// lacks an address and how to give it one);
/// elsewhere the first active device, which reaches every peer (a NIC on a switch; several
/// NICs per host are named per peer in the hostfile).
fn open_verbs(named: Option<(Vec<String>, fabric::Named)>) -> Result<Opened, String> {
    let config = IbvConfig::from_env();
    let why = |e: VerbsError, dev: Option<&str>, from: &str| {
        let why = match e {
            VerbsError::Unavailable(s) => s,
            e => e.to_string(),
        };
        match dev {
            Some(name) => format!("{why} (device {name}, from {from})"),
            None => why,
        }
    };
    let open = |name: &str| Ibv::open(&IbvConfig { device: Some(name.into()), ..config.clone() });
    if let Some((devices, named)) = named {
        let mut devs: Vec<Box<dyn Provider>> = Vec::new();
        for d in &devices {
            devs.push(Box::new(open(d).map_err(|e| why(e, Some(d), "MPR_RDMA_PEERS"))?));
        }
        let shared_qps = devs.first().and_then(|d| verbs_shared_qps(d.as_ref()));
        return Ok(Opened { kind: "verbs".into(), devs, links: Vec::new(), named, shared_qps });
    }
    if let Some(name) = &config.device {
        return Ibv::open(&config)
            .map(|d| {
                let q = verbs_shared_qps(&d);
                Opened::one("verbs", Box::new(d), q)
            })
            .map_err(|e| why(e, Some(name), "MPR_RDMA_DEVICE"));
    }
    let first = || {
        Ibv::open(&config)
            .map(|d| {
                let q = verbs_shared_qps(&d);
                Opened::one("verbs", Box::new(d), q)
            })
            .map_err(|e| why(e, None, ""))
    };
    if super::ibv::Flavor::HOST != super::ibv::Flavor::AppleRdma {
        return first();
    }
    // Each device is opened once: the context that finds its port active is the device's.
    let (opened, _) = Ibv::open_active(&config).map_err(|e| why(e, None, ""))?;
    let active: Vec<String> =
        opened.iter().map(|d| d.as_ref().map_or_else(|e| e.0.clone(), |d| d.device().to_string())).collect();
    let (ifaces, _) = interfaces("*").map_err(|e| e.to_string())?;
    let (mut devs, mut links): DevicesOnLinks = (Vec::new(), Vec::new());
    let mut unusable = Vec::new();
    for d in opened {
        // A port whose interface has no routable IPv4 address (a cable to no Mac of the job,
        // or one not set up) names no link and is left out; if every port is so, that is why
        // there is no RDMA.
        let d = match d {
            Ok(d) => d,
            Err((name, e)) => {
                unusable.push(why(e, Some(&name), "the device list"));
                continue;
            }
        };
        if let Some(&(_, ip, bits)) = d.ipv4().and_then(|ip| ifaces.iter().find(|i| i.1 == ip)) {
            links.push((ip, bits));
            devs.push(Box::new(d));
        }
    }
    if devs.is_empty() {
        return Err(if unusable.is_empty() {
            format!("no active RDMA device has its interface's IPv4 address (devices: {})", active.join(", "))
        } else {
            unusable.join("; ")
        });
    }
    let shared_qps = devs.first().and_then(|d| verbs_shared_qps(d.as_ref()));
    Ok(Opened { kind: "verbs".into(), devs, links, named: Vec::new(), shared_qps })
}

/// The queue pairs a real device holds for every process of its host: Apple's librdma
/// counts them per device, not per process (TN3205); an rdma-core NIC holds far more than
/// a job uses, and is left to its per-process budget.
fn verbs_shared_qps(dev: &dyn Provider) -> Option<usize> {
    (super::ibv::Flavor::HOST == super::ibv::Flavor::AppleRdma).then(|| dev.caps().max_qp)
}

/// The name, IPv4 address and prefix length of every interface `list` names (`NAME` or
/// `PREFIX*`, comma-separated; `*` for all), in the order the system lists them; and apart,
/// the link-local (169.254/16) addresses, which name no cable: macOS gives one to every
/// Thunderbolt interface, so every port would seem to share a subnet with every other.
fn interfaces(list: &str) -> Result<(Vec<Iface>, Vec<LinkLocal>), Error> {
    let want: Vec<&str> = list.split(',').map(str::trim).filter(|w| !w.is_empty()).collect();
    let named = |name: &str| {
        want.iter().any(|w| match w.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *w,
        })
    };
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Bootstrap(format!("listing interfaces: {e}")))?;
    let (mut out, mut local_only) = (Vec::new(), Vec::new());
    for a in addrs.filter(|a| named(&a.interface_name)) {
        let ip = a.address.as_ref().and_then(|s| s.as_sockaddr_in()).map(|s| s.ip());
        let mask = a.netmask.as_ref().and_then(|s| s.as_sockaddr_in()).map(|s| s.ip());
        match (ip, mask) {
            (Some(ip), _) if ip.is_link_local() => local_only.push((a.interface_name.clone(), ip)),
            (Some(ip), Some(mask)) => out.push((a.interface_name.clone(), ip, u32::from(mask).count_ones() as u8)),
            _ => {}
        }
    }
    // Kept apart only where the interface has no other address.
    local_only.retain(|(n, _)| !out.iter().any(|o: &Iface| &o.0 == n));
    Ok((out, local_only))
}

/// An interface's name, IPv4 address and prefix length.
type Iface = (String, Ipv4Addr, u8);

/// An interface's name and a link-local (169.254/16) address of it.
type LinkLocal = (String, Ipv4Addr);

/// `qp=N,mr=N,wr=N,msg=N` (any subset) over the limits of `cfg`'s mode.
fn parse_limits(text: &str, cfg: &SoftConfig) -> Result<SoftLimits, String> {
    let c = cfg.caps();
    let mut l = SoftLimits { max_qp: c.max_qp, max_mr: c.max_mr, max_wr: c.max_wr, max_msg: c.max_msg };
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item.split_once('=').ok_or_else(|| format!("expected KEY=N, got '{item}'"))?;
        let n = v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("'{item}': expected a count above 0"))?;
        match k.trim() {
            "qp" => l.max_qp = n,
            "mr" => l.max_mr = n,
            "wr" => l.max_wr = n,
            "msg" => l.max_msg = n,
            other => return Err(format!("unknown limit '{other}' (qp, mr, wr, msg)")),
        }
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::verbs::fabric::same_link;

    #[test]
    fn soft_limits_parse_over_the_modes() {
        let uc = SoftConfig::new(std::net::Ipv4Addr::LOCALHOST);
        let l = parse_limits("wr=8, mr=3", &uc).unwrap();
        assert_eq!((l.max_qp, l.max_mr, l.max_wr, l.max_msg), (10, 3, 8, uc.caps().max_msg));
        let rc = SoftConfig::rc(std::net::Ipv4Addr::LOCALHOST);
        assert_eq!(parse_limits("", &rc).unwrap().max_mr, 1024);
        assert_eq!(parse_limits("qp=2,msg=4096", &rc).unwrap().max_qp, 2);
        assert_eq!(parse_limits("wr", &uc).unwrap_err(), "expected KEY=N, got 'wr'");
        assert_eq!(parse_limits("wr=0", &uc).unwrap_err(), "'wr=0': expected a count above 0");
        assert_eq!(parse_limits("cq=4", &uc).unwrap_err(), "unknown limit 'cq' (qp, mr, wr, msg)");
    }

    #[test]
    fn the_two_ends_of_a_cable_share_a_subnet() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert!(same_link((ip("10.9.1.1"), 30), (ip("10.9.1.2"), 30)));
        assert!(!same_link((ip("10.9.1.1"), 30), (ip("10.9.1.5"), 30)), "the next /30 is another cable");
        assert!(!same_link((ip("10.9.1.1"), 30), (ip("10.9.1.2"), 24)), "prefixes differ");
        assert!(!same_link((ip("10.9.1.1"), 30), (ip("10.9.1.1"), 30)), "an address is not its own peer");
        assert!(same_link((ip("10.9.1.1"), 0), (ip("192.168.0.1"), 0)));
    }

    #[test]
    fn interfaces_are_named_or_prefixed() {
        // Loopback has 127.0.0.1/8 everywhere this runs.
        let (lo, _) = interfaces("lo").unwrap();
        assert!(lo.contains(&("lo".into(), Ipv4Addr::LOCALHOST, 8)), "{lo:?}");
        assert_eq!(interfaces("l*").unwrap().0.iter().filter(|l| l.1 == Ipv4Addr::LOCALHOST).count(), 1);
        assert!(interfaces("*").unwrap().0.iter().any(|l| l.1 == Ipv4Addr::LOCALHOST));
        let none = interfaces("no-such-iface0").unwrap();
        assert!(none.0.is_empty() && none.1.is_empty());
    }
}
