//! This host's links: on macOS its Thunderbolt ports (from `system_profiler`,
//! `networksetup` and `ifconfig`) with their RDMA devices; on Linux its RDMA NICs (from
//! sysfs) with their interfaces. Where a fact cannot be found, the report says why.

use std::process::Command;

use crate::parse;
use crate::plan::{Bridge, Link, Report};

/// A report from the three macOS outputs and the RDMA devices the system lists.
pub(crate) fn from_outputs(profiler: &str, netsetup: &str, ifcfg: &str, rdma: &[&str]) -> Result<Report, String> {
    let ports = parse::system_profiler(profiler)?;
    let map = parse::networksetup(netsetup);
    let ifs = parse::ifconfig(ifcfg);
    let mut report = Report::default();
    for p in ports {
        let Some(iface) = map.get(&p.tag) else {
            report.notes.push(format!("Thunderbolt port {} has no network interface (networksetup lists none)", p.tag));
            continue;
        };
        let i = ifs.get(iface).cloned().unwrap_or_default();
        let dev = format!("rdma_{iface}");
        report.links.push(Link {
            iface: iface.clone(),
            rdma: rdma.contains(&dev.as_str()).then_some(dev),
            addr: i.addr,
            active: i.active,
            uuid: Some(p.uuid),
            peer: p.peer,
            speed: p.speed,
        });
    }
    // A bridge up with Thunderbolt ports in it (the Thunderbolt Bridge macOS sets up).
    for (name, i) in &ifs {
        let members: Vec<String> = i.members.iter().filter(|m| map.values().any(|v| v == *m)).cloned().collect();
        if i.up && !members.is_empty() {
            report.bridges.push(Bridge { name: name.clone(), members });
        }
    }
    Ok(report)
}

/// A report from a Mac's saved outputs in `dir` (see `mpr-fabric probe --macos-outputs`).
pub(crate) fn from_dir(dir: &std::path::Path) -> Result<Report, String> {
    let read =
        |name: &str| std::fs::read_to_string(dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()));
    let devices = read("rdma_devices.txt").unwrap_or_default();
    let names: Vec<&str> = devices.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let mut r =
        from_outputs(&read("system_profiler.json")?, &read("networksetup.txt")?, &read("ifconfig.txt")?, &names)?;
    r.host = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    r.os = read("sw_vers.txt").map(|v| format!("macOS {}", v.trim())).unwrap_or_else(|_| "macOS".into());
    Ok(r)
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// This host's report.
pub(crate) fn here() -> Report {
    let mut r = probe_os();
    r.host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_default();
    r
}

#[cfg(target_os = "macos")]
fn probe_os() -> Report {
    let devices: Vec<String> = match mpr::info::rdma_devices() {
        Ok(d) => d.into_iter().map(|d| d.name).collect(),
        Err(_) => Vec::new(),
    };
    let names: Vec<&str> = devices.iter().map(String::as_str).collect();
    let outputs = (
        run("system_profiler", &["SPThunderboltDataType", "-json"]),
        run("networksetup", &["-listallhardwareports"]),
        run("ifconfig", &[]),
    );
    let mut r = match outputs {
        (Ok(p), Ok(n), Ok(i)) => {
            from_outputs(&p, &n, &i, &names).unwrap_or_else(|e| Report { notes: vec![e], ..Report::default() })
        }
        (p, n, i) => Report { notes: [p.err(), n.err(), i.err()].into_iter().flatten().collect(), ..Report::default() },
    };
    r.os =
        run("sw_vers", &["-productVersion"]).map(|v| format!("macOS {}", v.trim())).unwrap_or_else(|_| "macOS".into());
    if devices.is_empty() {
        r.notes.push("no RDMA device: RDMA over Thunderbolt is off (`rdma_ctl enable` in recoveryOS) or macOS is older than 26.2".into());
    }
    r
}

#[cfg(not(target_os = "macos"))]
fn probe_os() -> Report {
    let os = run("uname", &["-sr"]).map(|v| v.trim().to_string()).unwrap_or_else(|_| std::env::consts::OS.into());
    let mut r = Report { os, ..Report::default() };
    let addrs: Vec<(String, std::net::Ipv4Addr, u8)> = nix::ifaddrs::getifaddrs()
        .map(|it| {
            it.filter_map(|a| {
                let ip = a.address.as_ref()?.as_sockaddr_in()?.ip();
                let mask = a.netmask.as_ref()?.as_sockaddr_in()?.ip();
                Some((a.interface_name.clone(), ip, u32::from(mask).count_ones() as u8))
            })
            .collect()
        })
        .unwrap_or_default();
    let root = std::path::Path::new("/sys/class/infiniband");
    let Ok(devs) = std::fs::read_dir(root) else {
        r.notes.push("no RDMA device (no /sys/class/infiniband): no RDMA NIC, or its driver is not loaded".into());
        return r;
    };
    let mut names: Vec<String> = devs.flatten().map(|d| d.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    for dev in names {
        let state = std::fs::read_to_string(root.join(&dev).join("ports/1/state")).unwrap_or_default();
        let nets = std::fs::read_dir(root.join(&dev).join("device/net"))
            .map(|it| it.flatten().map(|n| n.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
            .unwrap_or_default();
        if nets.is_empty() {
            r.notes
                .push(format!("{dev}: no network interface (InfiniBand without IPoIB): name it with MPR_RDMA_DEVICE"));
        }
        for iface in nets {
            let addr = addrs.iter().find(|a| a.0 == iface).map(|a| (a.1, a.2));
            r.links.push(Link {
                iface,
                rdma: Some(dev.clone()),
                addr,
                active: state.contains("ACTIVE"),
                uuid: None,
                peer: None,
                speed: std::fs::read_to_string(root.join(&dev).join("ports/1/rate")).ok().map(|s| s.trim().to_string()),
            });
        }
    }
    r.notes.push(
        "Linux: which host each NIC's cable or switch leads to is not visible here; mpr pairs devices by subnet at start-up"
            .into(),
    );
    r
}
