//! Hosts as network namespaces, for tests that run jobs over several "hosts".
//!
//! [`NetHosts::create`]`(n)` makes, with `ip` (needs root):
//! - a bridge in the root namespace with address `10.213.X.1/24` (X picked unused, under a
//!   lock file, so concurrent test processes do not collide);
//! - `n` namespaces, each joined to the bridge by a veth pair, with `eth0` = `10.213.X.(i+2)/24`
//!   and its loopback up;
//! - a `--launcher-exec` script: `script HOST CMD...` runs `ip netns exec <namespace of HOST>
//!   CMD...`, and fails with a message for any other host.
//!
//! [`NetHosts::cable`]`(a, b)` joins two hosts by a point-to-point link of their own, as a
//! Thunderbolt cable joins two Macs: a veth pair straight between the two namespaces, named
//! `tb<peer>` (`tb<peer>x<n>` for a further cable to the same peer) on each side, on a /30
//! subnet of `10.214.X.0/24`.
//!
//! Hosts are named by their addresses, so no host name is ever looked up (no packet leaves
//! the links created here). Everything is removed on drop, also when a test panics; leftovers
//! of test processes that died without unwinding are removed by the next `create`. Names:
//! namespaces `mprt-<pid>-<k>-<i>`, bridge `mb<pid>-<k>`, veths `mv<pid>-<k>-<i>`.
//!
//! The file uses only `std`, so any test crate can include it:
//! `#[path = "../../launcher/tests/common/netns.rs"] mod netns;`
#![allow(dead_code, unreachable_pub)]

use std::fs::OpenOptions;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Hosts made of network namespaces; removed on drop.
#[derive(Debug)]
pub struct NetHosts {
    /// The hosts' names for `--host`/`--hostfile`: their addresses.
    pub names: Vec<String>,
    /// The hosts' addresses.
    pub addrs: Vec<Ipv4Addr>,
    /// The root namespace's address on the bridge (where mprun listens).
    pub head: Ipv4Addr,
    /// The namespaces, one per host.
    pub netns: Vec<String>,
    /// The `--launcher-exec` script.
    pub script: PathBuf,
    /// Root-side veth of each host (bring it down to cut the host off).
    veths: Vec<String>,
    bridge: String,
    dir: PathBuf,
    /// The X of `10.213.X.0/24` (the cables use `10.214.X.0/24`).
    x: u8,
    /// The cables: the two hosts and their interface names.
    pub cables: Vec<(usize, usize, String, String)>,
}

/// Why namespace tests cannot run here, if they cannot (not Linux, not root, or no `ip`).
pub fn unavailable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1));
    match euid {
        None => return Some("no /proc/self/status: network namespaces are Linux-only".into()),
        Some(uid) if uid != "0" => return Some("not root: network namespaces need root".into()),
        Some(_) => {}
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("`ip` (iproute2) is not installed".into()),
    }
}

/// A lock file held while a subnet is picked and taken (`create_new` is atomic); a lock
/// whose owner died is broken.
struct Lock(PathBuf);

impl Lock {
    fn take() -> Lock {
        let path = std::env::temp_dir().join("mprt-netns.lock");
        let start = Instant::now();
        loop {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut file) => {
                    let _ = write!(file, "{}", std::process::id());
                    return Lock(path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = std::fs::read_to_string(&path).ok().and_then(|p| p.trim().parse::<u32>().ok());
                    if owner.is_some_and(|pid| !alive(pid)) || start.elapsed() > Duration::from_secs(10) {
                        let _ = std::fs::remove_file(&path);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("cannot create {}: {e}", path.display()),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `ip ARGS`, returning its stdout; panics with its stderr on failure.
fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `ip ARGS`, ignoring failure (for cleanup).
fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip").args(args).output();
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes namespaces and links left by test processes that are gone.
fn remove_stale() {
    for line in ip(&["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if let Some(pid) = name.strip_prefix("mprt-").and_then(|r| r.split('-').next()?.parse().ok()) {
            if !alive(pid) {
                ip_quiet(&["netns", "del", name]);
            }
        }
    }
    for line in ip(&["-o", "link", "show"]).lines() {
        let Some(name) = line.split(": ").nth(1).map(|n| n.split('@').next().unwrap_or(n)) else {
            continue;
        };
        let pid = ["mb", "mv"]
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !alive(pid) {
                ip_quiet(&["link", "del", name]);
            }
        }
    }
}

/// A free `10.213.X.0/24`, from the addresses in use now.
fn free_subnet(seed: usize) -> u8 {
    let used = ip(&["-4", "-o", "addr", "show"]);
    for step in 0..254 {
        let x = ((seed + step * 7) % 254 + 1) as u8;
        if !used.contains(&format!("10.213.{x}.")) {
            return x;
        }
    }
    panic!("no free 10.213.X.0/24 subnet");
}

impl NetHosts {
    /// Creates `n` hosts (at most 9). Panics (after removing what it made) if it cannot.
    pub fn create(n: usize) -> NetHosts {
        assert!((1..=9).contains(&n), "1 to 9 hosts");
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("mprt-netns-{pid}-{k}"));
        std::fs::create_dir_all(&dir).unwrap();
        let lock = Lock::take();
        remove_stale();
        let x = free_subnet(pid as usize * 31 + k * 13);
        let mut hosts = NetHosts {
            names: Vec::new(),
            addrs: Vec::new(),
            head: Ipv4Addr::new(10, 213, x, 1),
            netns: Vec::new(),
            script: dir.join("launcher-exec"),
            veths: Vec::new(),
            bridge: format!("mb{pid}-{k}"),
            dir,
            x,
            cables: Vec::new(),
        };
        // From here on, a panic drops `hosts`, which removes what was made.
        let bridge = hosts.bridge.clone();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&["addr", "add", &format!("{}/24", hosts.head), "dev", &bridge]);
        ip(&["link", "set", &bridge, "up"]);
        drop(lock);
        for i in 0..n {
            let ns = format!("mprt-{pid}-{k}-{i}");
            let veth = format!("mv{pid}-{k}-{i}");
            let peer = format!("mp{pid}-{k}-{i}");
            let addr = Ipv4Addr::new(10, 213, x, 2 + i as u8);
            ip(&["netns", "add", &ns]);
            hosts.netns.push(ns.clone());
            ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
            hosts.veths.push(veth.clone());
            ip(&["link", "set", &peer, "netns", &ns]);
            ip(&["link", "set", &veth, "master", &bridge]);
            ip(&["link", "set", &veth, "up"]);
            ip(&["-n", &ns, "link", "set", &peer, "name", "eth0"]);
            ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            hosts.names.push(addr.to_string());
            hosts.addrs.push(addr);
        }
        hosts.write_script();
        hosts.wait_until_reachable();
        hosts
    }

    fn write_script(&self) {
        let mut cases = String::new();
        for (name, ns) in self.names.iter().zip(&self.netns) {
            cases.push_str(&format!("  {name}) ns={ns} ;;\n"));
        }
        let text = format!(
            "#!/bin/sh\n# mprun --launcher-exec for test hosts: run CMD in HOST's network namespace.\n\
             host=$1; shift\ncase \"$host\" in\n{cases}  *) echo \"launcher-exec: no test host $host\" >&2; exit 1 ;;\n\
             esac\nexec ip netns exec \"$ns\" \"$@\"\n"
        );
        std::fs::write(&self.script, text).unwrap();
        std::fs::set_permissions(&self.script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Waits (up to 5 s) until the bridge forwards: the veths come up asynchronously.
    fn wait_until_reachable(&self) {
        let start = Instant::now();
        for ns in &self.netns {
            loop {
                let state = ip(&["-n", ns, "-o", "link", "show", "eth0"]);
                if !state.contains("NO-CARRIER") && !state.contains("state DOWN") {
                    break;
                }
                assert!(start.elapsed() < Duration::from_secs(5), "{ns}: eth0 never came up: {state}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Joins hosts `a` and `b` by a cable of their own (see the module's doc); returns the
    /// two ends' addresses.
    pub fn cable(&mut self, a: usize, b: usize) -> (Ipv4Addr, Ipv4Addr) {
        let n = self.cables.len();
        assert!(n < 63, "at most 63 cables");
        let again = self.cables.iter().filter(|c| (c.0, c.1) == (a, b) || (c.0, c.1) == (b, a)).count();
        let name = |peer: usize| if again == 0 { format!("tb{peer}") } else { format!("tb{peer}x{again}") };
        let (ia, ib) = (name(b), name(a));
        let (na, nb) = (self.netns[a].clone(), self.netns[b].clone());
        ip(&["link", "add", &ia, "netns", &na, "type", "veth", "peer", "name", &ib, "netns", &nb]);
        let (aa, ab) =
            (Ipv4Addr::new(10, 214, self.x, 4 * n as u8 + 1), Ipv4Addr::new(10, 214, self.x, 4 * n as u8 + 2));
        for (ns, iface, addr) in [(&na, &ia, aa), (&nb, &ib, ab)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", iface]);
            ip(&["-n", ns, "link", "set", iface, "up"]);
        }
        for (ns, iface) in [(&na, &ia), (&nb, &ib)] {
            let start = Instant::now();
            loop {
                let state = ip(&["-n", ns, "-o", "link", "show", iface]);
                if !state.contains("NO-CARRIER") && !state.contains("state DOWN") {
                    break;
                }
                assert!(start.elapsed() < Duration::from_secs(5), "{ns}: {iface} never came up: {state}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.cables.push((a, b, ia, ib));
        (aa, ab)
    }

    /// Pulls cable `i` out (its end on the first host goes down; nothing tells either end).
    pub fn cable_down(&self, i: usize) {
        let (a, _, iface, _) = &self.cables[i];
        ip(&["-n", &self.netns[*a], "link", "set", iface, "down"]);
    }

    /// The `--launcher-exec` value.
    pub fn launcher_exec(&self) -> &str {
        self.script.to_str().unwrap()
    }

    /// A `--host` value giving host `i` `slots[i]` slots.
    pub fn host_list(&self, slots: &[usize]) -> String {
        let items: Vec<String> = self.names.iter().zip(slots).map(|(n, s)| format!("{n}:{s}")).collect();
        items.join(",")
    }

    /// Cuts host `i` off the bridge (its root-side veth goes down); nothing tells either end.
    pub fn link_down(&self, i: usize) {
        ip(&["link", "set", &self.veths[i], "down"]);
    }

    /// The pids of processes in host `i`'s namespace.
    pub fn pids(&self, i: usize) -> Vec<u32> {
        ip(&["netns", "pids", &self.netns[i]]).split_whitespace().filter_map(|p| p.parse().ok()).collect()
    }

    /// Waits up to `limit` for no process to be left in any of the namespaces; returns what
    /// is left.
    pub fn wait_empty(&self, limit: Duration) -> Vec<u32> {
        let start = Instant::now();
        loop {
            let left: Vec<u32> = (0..self.netns.len()).flat_map(|i| self.pids(i)).collect();
            if left.is_empty() || start.elapsed() >= limit {
                return left;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NetHosts {
    fn drop(&mut self) {
        for i in 0..self.netns.len() {
            for pid in self.pids(i) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).output();
            }
        }
        for ns in &self.netns {
            ip_quiet(&["netns", "del", ns]);
        }
        for veth in &self.veths {
            ip_quiet(&["link", "del", veth]);
        }
        ip_quiet(&["link", "del", &self.bridge]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
