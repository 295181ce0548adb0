//! Addresses: which host names mean this machine, what a host's address is, and which local
//! address mprun's control listener uses.
//!
//! Nothing here sends a packet: the route to a host is found by `connect` on a UDP socket
//! (which only asks the kernel for a route), and a name is resolved only if it is not an IP
//! address literal.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

/// This machine's host name (`localhost` if it has none).
pub(crate) fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Whether `name` is this machine: `localhost`, its host name (full or short), a loopback
/// address, or one of its own addresses.
pub(crate) fn is_local(name: &str) -> bool {
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Ok(ip) = name.parse::<IpAddr>() {
        // Binding succeeds only for an address of this machine (in this network namespace).
        return ip.is_loopback() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok();
    }
    let me = hostname();
    let short = |h: &str| h.split('.').next().unwrap_or_default().to_ascii_lowercase();
    name.eq_ignore_ascii_case(&me) || (!name.contains('.') && short(&me) == name.to_ascii_lowercase())
}

/// The address of host `name`: the name itself if it is an IP address, else its first
/// resolved address (IPv4 preferred); `None` if it does not resolve.
pub(crate) fn resolve(name: &str) -> Option<IpAddr> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Some(ip);
    }
    let found: Vec<IpAddr> = (name, 0).to_socket_addrs().ok()?.map(|a| a.ip()).collect();
    found.iter().find(|ip| ip.is_ipv4()).or(found.first()).copied()
}

/// The local address the kernel would send from to reach `dest` (the runtime's lookup).
pub(crate) fn route_source(dest: IpAddr) -> io::Result<IpAddr> {
    mpr::bootstrap::route_source(dest)
}

/// The interface a host's ranks were told to listen on (`MPR_IFACE` in their environment),
/// checked on the host before any of them starts: `--iface` names an interface (or subnet)
/// every host must have, and one that lacks it is an error naming it, not ranks that
/// quietly listen elsewhere or fail one by one.
pub(crate) fn check_rank_iface(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> Result<(), String> {
    let Some((_, iface)) = env.iter().find(|(k, _)| k == "MPR_IFACE") else { return Ok(()) };
    let iface = iface.to_string_lossy();
    if iface.is_empty() {
        return Ok(());
    }
    iface_ipv4(&iface).map(drop).map_err(|e| format!("--iface {iface}: {e}"))
}

/// The IPv4 address of interface `name`, or this machine's address inside subnet `name`
/// (`A.B.C.D/N`): the same lookup the ranks make.
pub(crate) fn iface_ipv4(name: &str) -> io::Result<IpAddr> {
    mpr::bootstrap::interface_address(name).map_err(|e| {
        let msg = match e {
            mpr::Error::Bootstrap(m) => m,
            other => other.to_string(),
        };
        io::Error::new(io::ErrorKind::NotFound, msg)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_names() {
        assert!(is_local("localhost") && is_local("LOCALHOST"));
        assert!(is_local("127.0.0.1") && is_local("127.3.4.5") && is_local("::1"));
        assert!(is_local(&hostname()));
        assert!(!is_local("192.0.2.200"), "TEST-NET addresses are nobody's");
        assert!(!is_local("no-such-host-mpr.invalid"));
    }

    #[test]
    fn literals_resolve_without_lookup() {
        assert_eq!(resolve("10.1.2.3"), Some("10.1.2.3".parse().unwrap()));
        assert_eq!(resolve("localhost").map(|ip| ip.is_loopback()), Some(true));
    }

    #[test]
    fn routes_and_interfaces() {
        assert_eq!(route_source("127.0.0.1".parse().unwrap()).unwrap(), "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(iface_ipv4("lo").unwrap(), "127.0.0.1".parse::<IpAddr>().unwrap());
        let err = iface_ipv4("no-such-if0").unwrap_err().to_string();
        assert!(err.contains("no-such-if0") && err.contains("lo"), "{err}");
    }
}
