//! Which address a rank listens on: never every address unless asked.
//!
//! In order: `MPR_IFACE=NAME` (that interface's IPv4 address), `MPR_HOST_ADDR=IP` (set by the
//! launcher: the address it reached the host at), loopback when the whole job is on this
//! host, else the first non-loopback IPv4 address of this host's name.

use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};

use crate::error::Error;

/// IPv4 address of interface `name`.
pub(crate) fn iface_addr(name: &str) -> Result<IpAddr, Error> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| Error::Bootstrap(format!("listing interfaces: {e}")))?;
    let mut names = Vec::new();
    for a in addrs {
        if !names.contains(&a.interface_name) {
            names.push(a.interface_name.clone());
        }
        if a.interface_name == name {
            if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
                return Ok(IpAddr::V4(sin.ip()));
            }
        }
    }
    Err(Error::Bootstrap(format!("interface {name} has no IPv4 address (interfaces here: {})", names.join(", "))))
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
    found.ok_or_else(|| {
        Error::Bootstrap(format!(
            "cannot tell which address to listen on: host name {host:?} does not resolve to a non-loopback IPv4 \
             address; set MPR_IFACE (mprun --iface) or MPR_HOST_ADDR"
        ))
    })
}
