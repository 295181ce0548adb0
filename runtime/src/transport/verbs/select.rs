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
//! reaches only the peers whose devices sit on the same subnet).
//!
//! Without `MPR_SOFT_IFACES` a rank opens one device that reaches every peer of its kind.

use std::net::{IpAddr, Ipv4Addr};

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
}

impl Opened {
    fn one(kind: &str, dev: Box<dyn Provider>) -> Opened {
        Opened { kind: kind.into(), devs: vec![dev], links: Vec::new() }
    }
}

/// Opens this rank's device. `Ok(Err(reason))`: no RDMA here (the job may fall back to
/// TCP); `Err`: a setting is wrong.
pub(crate) fn open(bind: IpAddr, rank: usize) -> Result<Result<Opened, String>, Error> {
    let chosen = std::env::var("MPR_VERBS_PROVIDER").unwrap_or_default();
    match chosen.trim() {
        "" | "verbs" => {
            let config = IbvConfig::from_env();
            Ok(Ibv::open(&config).map(|d| Opened::one("verbs", Box::new(d))).map_err(|e| {
                let why = match e {
                    VerbsError::Unavailable(s) => s,
                    e => e.to_string(),
                };
                match &config.device {
                    Some(name) => format!("{why} (device {name}, from MPR_RDMA_DEVICE)"),
                    None => why,
                }
            }))
        }
        kind @ ("soft" | "soft-rc") => {
            let IpAddr::V4(v4) = bind else {
                return Err(Error::Bootstrap(format!("the software RDMA provider needs an IPv4 address, not {bind}")));
            };
            let mut cfg = if kind == "soft" { SoftConfig::new(v4) } else { SoftConfig::rc(v4) };
            // Validated with the other numeric settings at start-up (env::check).
            cfg.loss = crate::env::parsed("MPR_SOFT_LOSS").unwrap_or(cfg.loss);
            cfg.seed = crate::env::parsed::<u64>("MPR_SOFT_SEED").unwrap_or(cfg.seed)
                ^ (rank as u64).wrapping_mul(0x9e37_79b9);
            if let Ok(v) = std::env::var("MPR_SOFT_LIMITS") {
                cfg.limits =
                    Some(parse_limits(&v, &cfg).map_err(|e| Error::Bootstrap(format!("MPR_SOFT_LIMITS={v}: {e}")))?);
            }
            let Ok(list) = std::env::var("MPR_SOFT_IFACES") else {
                return Ok(SoftDevice::open(cfg).map(|d| Opened::one(kind, Box::new(d))).map_err(|e| e.to_string()));
            };
            let links = iface_links(&list)?;
            if links.is_empty() {
                return Ok(Err(format!("MPR_SOFT_IFACES={list}: no interface with an IPv4 address matches")));
            }
            let mut devs: Vec<Box<dyn Provider>> = Vec::new();
            for &(addr, _) in &links {
                match SoftDevice::open(SoftConfig { addr, ..cfg }) {
                    Ok(d) => devs.push(Box::new(d)),
                    Err(e) => return Ok(Err(e.to_string())),
                }
            }
            Ok(Ok(Opened { kind: kind.into(), devs, links }))
        }
        other => Err(Error::Bootstrap(format!(
            "MPR_VERBS_PROVIDER={other}: unknown provider (this build has verbs, soft, soft-rc)"
        ))),
    }
}

/// The IPv4 address and prefix length of every interface `list` names (`NAME` or `PREFIX*`,
/// comma-separated), in the order the system lists them.
fn iface_links(list: &str) -> Result<Vec<(Ipv4Addr, u8)>, Error> {
    let want: Vec<&str> = list.split(',').map(str::trim).filter(|w| !w.is_empty()).collect();
    let named = |name: &str| {
        want.iter().any(|w| match w.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *w,
        })
    };
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Bootstrap(format!("listing interfaces: {e}")))?;
    let mut out = Vec::new();
    for a in addrs.filter(|a| named(&a.interface_name)) {
        let ip = a.address.as_ref().and_then(|s| s.as_sockaddr_in()).map(|s| s.ip());
        let mask = a.netmask.as_ref().and_then(|s| s.as_sockaddr_in()).map(|s| s.ip());
        if let (Some(ip), Some(mask)) = (ip, mask) {
            out.push((ip, u32::from(mask).count_ones() as u8));
        }
    }
    Ok(out)
}

/// Whether two links are on one subnet (the two ends of one cable).
pub(crate) fn same_link(a: (Ipv4Addr, u8), b: (Ipv4Addr, u8)) -> bool {
    let mask = |bits: u8| if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits.min(32))) };
    a.1 == b.1 && u32::from(a.0) & mask(a.1) == u32::from(b.0) & mask(b.1) && a.0 != b.0
}

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
        let lo = iface_links("lo").unwrap();
        assert!(lo.contains(&(Ipv4Addr::LOCALHOST, 8)), "{lo:?}");
        assert_eq!(iface_links("l*").unwrap().iter().filter(|l| l.0 == Ipv4Addr::LOCALHOST).count(), 1);
        assert!(iface_links("no-such-iface0").unwrap().is_empty());
    }
}
