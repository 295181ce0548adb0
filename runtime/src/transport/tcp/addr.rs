//! Which address a rank listens on: never every address unless asked.
//!
//! In order: `MPR_IFACE=NAME` (that interface's IPv4 address; or `MPR_IFACE=A.B.C.D/N`: the
//! address of this host inside that subnet), `MPR_HOST_ADDR=IP` (set by the
//! launcher: the address it reached the host at), loopback when the whole job is on this
//! host, else the first non-loopback IPv4 address of this host's name, else (under Slurm,
//! whose nodes may be named apart from their host names) the address this host reaches the
//! job's `srun` at (`SLURM_LAUNCH_NODE_IPADDR`).

use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};

use crate::error::Error;

/// Parses `A.B.C.D/N`.
fn parse_subnet(s: &str) -> Option<(Ipv4Addr, u32)> {
    let (a, n) = s.split_once('/')?;
    let n: u32 = n.parse().ok().filter(|n| *n <= 32)?;
    Some((a.parse().ok()?, n))
}

fn in_subnet(ip: Ipv4Addr, (net, bits): (Ipv4Addr, u32)) -> bool {
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    u32::from(ip) & mask == u32::from(net) & mask
}

/// IPv4 address of interface `name`, or this host's address inside subnet `name`
/// (`A.B.C.D/N`).
pub(crate) fn iface_addr(name: &str) -> Result<IpAddr, Error> {
    let subnet = parse_subnet(name);
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Bootstrap(format!("listing interfaces: {e}")))?;
    let mut names = Vec::new();
    for a in addrs {
        if !names.contains(&a.interface_name) {
            names.push(a.interface_name.clone());
        }
        let Some(ip) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()).map(|s| s.ip()) else { continue };
        let hit = match subnet {
            Some(net) => in_subnet(ip, net),
            None => a.interface_name == name,
        };
        if hit {
            return Ok(IpAddr::V4(ip));
        }
    }
    Err(Error::Bootstrap(match subnet {
        Some(_) => format!("no interface here has an IPv4 address in {name}"),
        None => format!("interface {name} has no IPv4 address (interfaces here: {})", names.join(", ")),
    }))
}

/// The address to listen on; `one_host` says whether every rank runs on this host.
pub(crate) fn listen_addr(one_host: bool) -> Result<IpAddr, Error> {
    if let Ok(name) = std::env::var("MPR_IFACE") {
        if !name.is_empty() {
            return iface_addr(&name);
        }
    }
    if let Ok(a) = std::env::var("MPR_HOST_ADDR") {
        if !a.is_empty() {
            return a.trim().parse().map_err(|_| Error::Bootstrap(format!("MPR_HOST_ADDR={a} is not an IP address")));
        }
    }
    if one_host {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_default();
    let found = (host.as_str(), 0)
        .to_socket_addrs()
        .ok()
        .into_iter()
        .flatten()
        .map(|s| s.ip())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback());
    let toward_srun = || {
        let srun: IpAddr = std::env::var("SLURM_LAUNCH_NODE_IPADDR").ok()?.trim().parse().ok()?;
        route_source(srun).ok()
    };
    found.or_else(toward_srun).ok_or_else(|| {
        Error::Bootstrap(format!(
            "cannot tell which address to listen on: host name {host:?} does not resolve to a non-loopback IPv4 \
             address (nor is there a Slurm srun to route to); set MPR_IFACE (mprun --iface) or MPR_HOST_ADDR"
        ))
    })
}

/// The local address the kernel would send from to reach `dest`: a UDP `connect` picks the
/// route and the source address; no packet is sent.
pub(crate) fn route_source(dest: IpAddr) -> std::io::Result<IpAddr> {
    let any = match dest {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    let socket = std::net::UdpSocket::bind((any, 0))?;
    socket.connect((dest, 9))?;
    Ok(socket.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets() {
        let net = parse_subnet("10.213.5.0/24").unwrap();
        assert!(in_subnet("10.213.5.77".parse().unwrap(), net));
        assert!(!in_subnet("10.213.6.1".parse().unwrap(), net));
        assert!(in_subnet("1.2.3.4".parse().unwrap(), parse_subnet("0.0.0.0/0").unwrap()));
        assert!(parse_subnet("10.0.0.0/33").is_none());
        assert!(parse_subnet("eth0").is_none());
    }

    #[test]
    fn loopback_by_name_and_subnet() {
        assert_eq!(iface_addr("lo").unwrap(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(iface_addr("127.0.0.0/8").unwrap(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        let e = iface_addr("no-such-interface0").unwrap_err().to_string();
        assert!(e.contains("no-such-interface0 has no IPv4 address"), "{e}");
        assert!(iface_addr("0.0.0.0/32").is_err(), "no interface has the address 0.0.0.0");
    }

    #[test]
    fn route_toward_loopback() {
        assert_eq!(route_source(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
}
