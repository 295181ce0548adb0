//! Which hosts the job runs on, and which ranks go where.
//!
//! Hosts come from `--host`/`-H` lists (`name[:slots]`, comma-separated, repeatable) or from
//! a `--hostfile` in either common form:
//!
//! ```text
//! # Open MPI                 # MPICH (hydra)
//! node1 slots=4              node1:4
//! node2 slots=2 max_slots=8  node2:2
//! node3                      node3
//! ```
//!
//! A line may also name the RDMA device of its host, `node1 slots=4 rdma_device=rdma_en3`
//! (or `rdma=`): its ranks get `MPR_RDMA_DEVICE`, which beats mprun's `--rdma-device`. Or,
//! where each device reaches one peer host (Thunderbolt: one device per cable), the devices
//! towards each peer host, `PEER:DEV[+DEV...]` comma-separated:
//!
//! ```text
//! mac1 rdma=mac2:rdma_en3,mac3:rdma_en4+rdma_en5
//! mac2 rdma=mac1:rdma_en3
//! mac3 rdma=mac1:rdma_en1+rdma_en2
//! ```
//!
//! A pair of hosts must name each other with as many devices (the k-th on each side are the
//! two ends of the k-th cable); its ranks get `MPR_RDMA_PEERS`. Peers named nowhere are
//! reached over TCP. A JSON hostfile is MLX's (see `mlx_hostfile`).
//!
//! A host without a slot count has one slot (as hydra and `-H` in Open MPI). `#` starts a
//! comment; blank lines are skipped. A host named twice gets the slots of both. Placement is
//! by slot, as mpirun's default mapping: ranks fill the first host's slots, then the next
//! host's, and so on; ranks beyond the total number of slots are dealt out one per host,
//! round-robin. `-ppn N` gives every host N slots. Hosts that get no rank are left out.

use std::path::Path;

/// Most slots one host may declare (a typo guard, not a resource limit).
const MAX_SLOTS: usize = 1 << 16;

/// One host as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostSpec {
    /// The name as written: a host name or an IP address.
    pub(crate) name: String,
    /// How many ranks it takes before the job overflows to round-robin.
    pub(crate) slots: usize,
    /// The RDMA device its ranks use, if the hostfile names one.
    pub(crate) rdma_device: Option<String>,
    /// The RDMA devices towards each peer host, if the hostfile names them.
    pub(crate) rdma_peers: Vec<(String, Vec<String>)>,
    /// The user to log in as (`user@host`), if named: passed to ssh, never used as the name.
    pub(crate) login: Option<String>,
}

impl HostSpec {
    pub(crate) fn new(name: &str, slots: usize) -> HostSpec {
        HostSpec { name: name.into(), slots, rdma_device: None, rdma_peers: Vec::new(), login: None }
    }
}

/// `user@host` split into the user to log in as and the host; a word without `@` is a host.
/// The user takes the characters of a host name (it is passed to ssh, which must not take it
/// for an option).
pub(crate) fn split_login(word: &str) -> Result<(Option<String>, &str), String> {
    match word.split_once('@') {
        None => Ok((None, word)),
        Some((user, host)) => {
            if user.is_empty() || user.starts_with('-') || !plain(user) {
                return Err(format!("'{word}': '{user}' is not a user name (expected USER@HOST)"));
            }
            Ok((Some(user.to_string()), host))
        }
    }
}

/// Parses one `--host` value: `a,b:2,c`.
pub(crate) fn parse_host_list(text: &str) -> Result<Vec<HostSpec>, String> {
    text.split(',')
        .map(|item| {
            let item = item.trim();
            let (name, slots) = match item.rsplit_once(':') {
                Some((name, n)) => (name, Some(parse_slots(n).map_err(|e| format!("--host '{item}': {e}"))?)),
                None => (item, None),
            };
            let (login, name) = split_login(name).map_err(|e| format!("--host {e}"))?;
            check_name(name).map_err(|e| format!("--host '{item}': {e}"))?;
            Ok(HostSpec { login, ..HostSpec::new(name, slots.unwrap_or(1)) })
        })
        .collect()
}

/// Largest file of hosts mprun reads (tens of thousands of lines).
pub(crate) const MAX_FILE: u64 = 1 << 20;

/// The text of a file of hosts, read up to [`MAX_FILE`] bytes: a larger one (a device, a
/// wrong file) is refused rather than read for ever.
pub(crate) fn read_bounded(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE + 1).read_to_string(&mut text))
        .map_err(|e| format!("cannot read it: {e}"))?;
    if text.len() as u64 > MAX_FILE {
        return Err(format!("larger than {} KiB: not a file of hosts", MAX_FILE >> 10));
    }
    Ok(text)
}

/// What a hostfile gives: its hosts, and (MLX's) environment variables for every rank.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Hostfile {
    pub(crate) hosts: Vec<HostSpec>,
    pub(crate) env: Vec<(String, String)>,
}

/// Reads and parses a hostfile, in mpr's text form or MLX's JSON; errors name `FILE:LINE`.
pub(crate) fn read_hostfile(path: &Path) -> Result<Hostfile, String> {
    let text = read_bounded(path).map_err(|e| format!("--hostfile {}: {e}", path.display()))?;
    let file = path.display().to_string();
    let parsed = if text.trim_start().starts_with(['{', '[']) {
        crate::mlx_hostfile::parse(&file, &text)?
    } else {
        Hostfile { hosts: parse_hostfile(&file, &text)?, env: Vec::new() }
    };
    if parsed.hosts.is_empty() {
        return Err(format!("--hostfile {}: names no host", path.display()));
    }
    Ok(parsed)
}

/// The devices hosts name towards each other agree: every peer host named is in the file
/// (and is not the host itself), and names this host back with as many devices (one per
/// cable). Run on the merged hosts (a host may take several lines).
pub(crate) fn check_cables(hosts: &[HostSpec]) -> Result<(), String> {
    for h in hosts {
        for (peer, devs) in &h.rdma_peers {
            if *peer == h.name {
                return Err(format!("host {} names RDMA devices towards itself", h.name));
            }
            let Some(p) = hosts.iter().find(|p| &p.name == peer) else {
                return Err(format!(
                    "host {} names RDMA devices towards {peer}, which is not a host of the file",
                    h.name
                ));
            };
            let back = p.rdma_peers.iter().find(|(n, _)| *n == h.name).map_or(0, |(_, d)| d.len());
            if back != devs.len() {
                return Err(format!(
                    "host {} reaches {peer} through {} device(s) ({}), but {peer} names {back} towards {} \
                     (each cable has a device at both ends)",
                    h.name,
                    devs.len(),
                    devs.join("+"),
                    h.name
                ));
            }
        }
    }
    Ok(())
}

/// Parses hostfile text; `file` names it in errors (`FILE:LINE: what is wrong`).
pub(crate) fn parse_hostfile(file: &str, text: &str) -> Result<Vec<HostSpec>, String> {
    let mut hosts = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        hosts.push(parse_line(line).map_err(|e| format!("{file}:{}: {e}", i + 1))?);
    }
    Ok(hosts)
}

fn parse_line(line: &str) -> Result<HostSpec, String> {
    let mut words = line.split_whitespace();
    let first = words.next().unwrap_or_default();
    let mut rdma_device = None;
    let mut rdma_peers = Vec::new();
    let (name, mut slots) = match first.split_once(':') {
        Some((name, n)) => (name, Some(parse_slots(n)?)),
        None => (first, None),
    };
    let (login, name) = split_login(name)?;
    check_name(name)?;
    for word in words {
        match word.split_once('=') {
            Some(("slots", n)) => {
                if slots.is_some() {
                    return Err(format!("'{name}' has its slots given twice"));
                }
                slots = Some(parse_slots(n)?);
            }
            Some(("max_slots" | "max-slots", n)) => {
                parse_slots(n)?;
            }
            Some(("rdma_device" | "rdma", dev)) => {
                if rdma_device.is_some() || !rdma_peers.is_empty() {
                    return Err(format!("'{name}' has its RDMA device given twice"));
                }
                if dev.contains(':') {
                    rdma_peers = parse_peers(dev)?;
                } else {
                    rdma_device = Some(check_device(dev)?);
                }
            }
            _ => {
                return Err(format!(
                    "unexpected '{word}' (expected 'HOST', 'HOST slots=N' or 'HOST:N', then optionally 'rdma_device=NAME')"
                ));
            }
        }
    }
    Ok(HostSpec { name: name.to_string(), slots: slots.unwrap_or(1), rdma_device, rdma_peers, login })
}

/// `PEER:DEV[+DEV...],...`: the devices towards each peer host.
fn parse_peers(text: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for item in text.split(',') {
        let Some((peer, devs)) = item.split_once(':') else {
            return Err(format!("'{item}': expected PEER:DEVICE[+DEVICE...] (as in rdma=mac2:rdma_en3)"));
        };
        check_name(peer)?;
        if out.iter().any(|(p, _)| p == peer) {
            return Err(format!("peer '{peer}' is named twice in rdma="));
        }
        let devs = devs.split('+').map(check_device).collect::<Result<Vec<_>, _>>()?;
        if let Some(d) = devs.iter().enumerate().find_map(|(i, d)| devs[..i].contains(d).then_some(d)) {
            return Err(format!("device '{d}' is named twice towards '{peer}' (one device per cable)"));
        }
        out.push((peer.to_string(), devs));
    }
    Ok(out)
}

/// `MPR_RDMA_PEERS` for a host's ranks: `PEER:DEV+DEV,...`.
pub(crate) fn peers_env(peers: &[(String, Vec<String>)]) -> String {
    peers.iter().map(|(p, d)| format!("{p}:{}", d.join("+"))).collect::<Vec<_>>().join(",")
}

/// An RDMA device name (`mlx5_0`, `rdma_en3`): letters, digits, `_`, `-`, `.`.
pub(crate) fn check_device(name: &str) -> Result<String, String> {
    if name.is_empty() || !plain(name) {
        return Err(format!("'{name}' is not an RDMA device name (such as mlx5_0 or rdma_en3)"));
    }
    Ok(name.to_string())
}

fn parse_slots(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_SLOTS).contains(&n) => Ok(n),
        _ => Err(format!("expected a slot count from 1 to {MAX_SLOTS}, got '{text}'")),
    }
}

/// A host name or IPv4 address: letters, digits, `-`, `.`, `_`, not starting with `-` (it
/// is passed to the launcher command, which must not take it for an option).
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty host name".into());
    }
    if name.starts_with('-') || !plain(name) {
        return Err(format!("'{name}' is not a host name or IPv4 address"));
    }
    Ok(())
}

/// Letters, digits, `-`, `.` and `_` only.
fn plain(name: &str) -> bool {
    name.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// Merges hosts named more than once (adding their slots), keeping first-seen order.
/// `same` says whether two names are the same host (all names of this machine are one).
/// A host given two different RDMA devices is an error.
pub(crate) fn merge(hosts: Vec<HostSpec>, same: impl Fn(&str, &str) -> bool) -> Result<Vec<HostSpec>, String> {
    let mut merged: Vec<HostSpec> = Vec::new();
    for host in hosts {
        match merged.iter_mut().find(|m| same(&m.name, &host.name)) {
            Some(m) => {
                m.slots = m.slots.saturating_add(host.slots);
                match (&m.rdma_device, host.rdma_device) {
                    (Some(a), Some(b)) if *a != b => {
                        return Err(format!("host '{}' is given two RDMA devices, '{a}' and '{b}'", m.name));
                    }
                    (None, b) => m.rdma_device = b,
                    _ => {}
                }
                match (&m.login, host.login) {
                    (Some(a), Some(b)) if *a != b => {
                        return Err(format!("host '{}' is given two users to log in as, '{a}' and '{b}'", m.name));
                    }
                    (None, b) => m.login = b,
                    _ => {}
                }
                if m.rdma_peers.is_empty() {
                    m.rdma_peers = host.rdma_peers;
                } else if !host.rdma_peers.is_empty() && m.rdma_peers != host.rdma_peers {
                    return Err(format!("host '{}' is given two different lists of RDMA devices per peer", m.name));
                }
            }
            None => merged.push(host),
        }
    }
    Ok(merged)
}

/// The host index of every rank: slots in order, then round-robin one rank per host.
pub(crate) fn place(slots: &[usize], np: usize) -> Vec<usize> {
    let mut host_of = Vec::with_capacity(np);
    'fill: for (host, &n) in slots.iter().enumerate() {
        for _ in 0..n {
            if host_of.len() == np {
                break 'fill;
            }
            host_of.push(host);
        }
    }
    let mut next = 0;
    while host_of.len() < np && !slots.is_empty() {
        host_of.push(next);
        next = (next + 1) % slots.len();
    }
    host_of
}

/// One host of the job and the ranks placed on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    /// The host's name as the user gave it (this machine's host name if none was given).
    pub(crate) name: String,
    /// Whether it is this machine.
    pub(crate) local: bool,
    /// Its ranks, in order: a rank's index here is its local rank.
    pub(crate) ranks: Vec<usize>,
    /// The RDMA device the hostfile names for it.
    pub(crate) rdma_device: Option<String>,
    /// The RDMA devices the hostfile names towards each peer host.
    pub(crate) rdma_peers: Vec<(String, Vec<String>)>,
    /// The user to log in as, if the host was named `user@host`.
    pub(crate) login: Option<String>,
}

impl Planned {
    /// Where the launcher command logs in: `user@host`, or the host.
    pub(crate) fn destination(&self) -> String {
        match &self.login {
            Some(user) => format!("{user}@{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// Places `np` ranks on `hosts` (this machine, named `here`, if there are none); hosts that
/// get no rank are left out.
pub(crate) fn plan(hosts: &[HostSpec], np: usize, is_local: impl Fn(&str) -> bool, here: &str) -> Vec<Planned> {
    if hosts.is_empty() {
        let ranks = (0..np).collect();
        return vec![Planned {
            name: here.into(),
            local: true,
            ranks,
            rdma_device: None,
            rdma_peers: Vec::new(),
            login: None,
        }];
    }
    let slots: Vec<usize> = hosts.iter().map(|h| h.slots).collect();
    let mut ranks = vec![Vec::new(); hosts.len()];
    for (rank, host) in place(&slots, np).into_iter().enumerate() {
        ranks[host].push(rank);
    }
    hosts
        .iter()
        .zip(ranks)
        .filter(|(_, r)| !r.is_empty())
        .map(|(h, ranks)| Planned {
            name: h.name.clone(),
            local: is_local(&h.name),
            ranks,
            rdma_device: h.rdma_device.clone(),
            rdma_peers: h.rdma_peers.clone(),
            login: h.login.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, slots: usize) -> HostSpec {
        HostSpec::new(name, slots)
    }

    fn hd(name: &str, slots: usize, dev: &str) -> HostSpec {
        HostSpec { rdma_device: Some(dev.into()), ..h(name, slots) }
    }

    #[test]
    fn host_lists() {
        assert_eq!(parse_host_list("a,b:2, c").unwrap(), [h("a", 1), h("b", 2), h("c", 1)]);
        assert_eq!(parse_host_list("10.0.0.1:3").unwrap(), [h("10.0.0.1", 3)]);
        for bad in ["", "a,,b", "a:0", "a:x", "-oProxyCommand=x", "a b", ":2", "a:2:3"] {
            assert!(parse_host_list(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_host_list("a:0").unwrap_err(), "--host 'a:0': expected a slot count from 1 to 65536, got '0'");
    }

    #[test]
    fn hosts_named_user_at_host_log_in_as_that_user() {
        let login = |name: &str, slots: usize, user: &str| HostSpec { login: Some(user.into()), ..h(name, slots) };
        assert_eq!(parse_host_list("bob@a:2,b").unwrap(), [login("a", 2, "bob"), h("b", 1)]);
        assert_eq!(parse_hostfile("f", "alice@node1 slots=4\n").unwrap(), [login("node1", 4, "alice")]);
        for bad in ["@a", "-oProxyCommand=x@a", "a b@c", "bob@", "bob@-x", "a@b@c"] {
            assert!(parse_host_list(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_host_list("@a").unwrap_err(), "--host '@a': '' is not a user name (expected USER@HOST)");
        // One host, two users: which one would ssh log in as?
        let two = merge(vec![login("a", 1, "x"), login("a", 1, "y")], |a, b| a == b).unwrap_err();
        assert_eq!(two, "host 'a' is given two users to log in as, 'x' and 'y'");
        let one = merge(vec![h("a", 1), login("a", 1, "x")], |a, b| a == b).unwrap();
        assert_eq!(one, [login("a", 2, "x")]);
        let planned = plan(&one, 1, |_| false, "me");
        assert_eq!(planned[0].destination(), "x@a");
        assert_eq!(plan(&[h("a", 1)], 1, |_| false, "me")[0].destination(), "a");
    }

    #[test]
    fn open_mpi_hostfiles() {
        let text = "# cluster\nnode1 slots=4\n\n  node2   slots=2 max_slots=8  # rack 2\nnode3\n";
        assert_eq!(parse_hostfile("f", text).unwrap(), [h("node1", 4), h("node2", 2), h("node3", 1)]);
    }

    #[test]
    fn hostfiles_name_rdma_devices() {
        let text = "mac1 slots=2 rdma_device=rdma_en3
mac2:1 rdma=rdma_en5
linux1 slots=4 rdma=mlx5_0
plain
";
        let want = [hd("mac1", 2, "rdma_en3"), hd("mac2", 1, "rdma_en5"), hd("linux1", 4, "mlx5_0"), h("plain", 1)];
        assert_eq!(parse_hostfile("f", text).unwrap(), want);
        let p = plan(&want, 8, |_| false, "me");
        assert_eq!(
            p.iter().map(|h| h.rdma_device.as_deref()).collect::<Vec<_>>(),
            [Some("rdma_en3"), Some("rdma_en5"), Some("mlx5_0"), None]
        );
    }

    #[test]
    fn hostfiles_name_rdma_devices_per_peer() {
        let text = "mac1 rdma=mac2:rdma_en3,mac3:rdma_en4+rdma_en5
mac2 rdma=mac1:rdma_en3
mac3 rdma=mac1:rdma_en1+rdma_en2
mac4
";
        let hosts = parse_hostfile("f", text).unwrap();
        assert_eq!(peers_env(&hosts[0].rdma_peers), "mac2:rdma_en3,mac3:rdma_en4+rdma_en5");
        assert_eq!(peers_env(&hosts[2].rdma_peers), "mac1:rdma_en1+rdma_en2");
        assert!(hosts[3].rdma_peers.is_empty() && hosts[0].rdma_device.is_none());
        check_cables(&hosts).unwrap();
        let p = plan(&hosts, 4, |_| false, "me");
        assert_eq!(p[1].rdma_peers, [("mac1".to_string(), vec!["rdma_en3".to_string()])]);
        let lopsided = parse_hostfile("f", "a rdma=b:x+y\nb rdma=a:x\n").unwrap();
        assert_eq!(
            check_cables(&lopsided).unwrap_err(),
            "host a reaches b through 2 device(s) (x+y), but b names 1 towards a (each cable has a device at both ends)"
        );
        let stranger = parse_hostfile("f", "a rdma=c:x\nb\n").unwrap();
        assert_eq!(
            check_cables(&stranger).unwrap_err(),
            "host a names RDMA devices towards c, which is not a host of the file"
        );
        let itself = parse_hostfile("f", "a rdma=a:x\n").unwrap();
        assert_eq!(check_cables(&itself).unwrap_err(), "host a names RDMA devices towards itself");
        // A host on two lines: checked once merged.
        let split = parse_hostfile("f", "a\nb rdma=a:x\na rdma=b:y\n").unwrap();
        check_cables(&merge(split, |x, y| x == y).unwrap()).unwrap();
        for (text, want) in [
            ("a rdma=b:x,b:y\n", "f:1: peer 'b' is named twice in rdma="),
            ("a rdma=b:x,c\n", "f:1: 'c': expected PEER:DEVICE[+DEVICE...] (as in rdma=mac2:rdma_en3)"),
            ("a rdma=b:x+\n", "f:1: '' is not an RDMA device name (such as mlx5_0 or rdma_en3)"),
            ("a rdma=b/c:x\n", "f:1: 'b/c' is not a host name or IPv4 address"),
            ("a rdma=b:x rdma=y\n", "f:1: 'a' has its RDMA device given twice"),
            ("a rdma=b:x+x\n", "f:1: device 'x' is named twice towards 'b' (one device per cable)"),
        ] {
            assert_eq!(parse_hostfile("f", text).unwrap_err(), want, "{text:?}");
        }
    }

    #[test]
    fn mpich_hostfiles() {
        let text = "node1:4\n#node9:9\n\t\nnode2:2\n192.168.1.7\n";
        assert_eq!(parse_hostfile("f", text).unwrap(), [h("node1", 4), h("node2", 2), h("192.168.1.7", 1)]);
        assert!(parse_hostfile("f", "# only comments\n\n").unwrap().is_empty());
    }

    #[test]
    fn malformed_lines_are_named() {
        let cases = [
            ("a\nb slots=x\n", "hf:2: expected a slot count from 1 to 65536, got 'x'"),
            ("a\n\n# c\nb:0\n", "hf:4: expected a slot count from 1 to 65536, got '0'"),
            ("a slots=2 cpus=4\n", "hf:1: unexpected 'cpus=4' (expected 'HOST', 'HOST slots=N' or 'HOST:N', then optionally 'rdma_device=NAME')"),
            ("a b\n", "hf:1: unexpected 'b' (expected 'HOST', 'HOST slots=N' or 'HOST:N', then optionally 'rdma_device=NAME')"),
            ("a rdma_device=\n", "hf:1: '' is not an RDMA device name (such as mlx5_0 or rdma_en3)"),
            ("a rdma=x/y\n", "hf:1: 'x/y' is not an RDMA device name (such as mlx5_0 or rdma_en3)"),
            ("a rdma=x rdma_device=x\n", "hf:1: 'a' has its RDMA device given twice"),
            ("a:2 slots=3\n", "hf:1: 'a' has its slots given twice"),
            ("ok\nbad/name\n", "hf:2: 'bad/name' is not a host name or IPv4 address"),
            (":4\n", "hf:1: empty host name"),
            ("-x slots=1\n", "hf:1: '-x' is not a host name or IPv4 address"),
        ];
        for (text, want) in cases {
            assert_eq!(parse_hostfile("hf", text).unwrap_err(), want, "{text:?}");
        }
    }

    #[test]
    fn hostfiles_from_disk() {
        let path = std::env::temp_dir().join(format!("mprun-hostfile-{}", std::process::id()));
        std::fs::write(&path, "x:2\ny slots=3\n").unwrap();
        assert_eq!(read_hostfile(&path).unwrap().hosts, [h("x", 2), h("y", 3)]);
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(read_hostfile(&path).unwrap_err().ends_with("names no host"));
        std::fs::write(&path, "x\ny:z\n").unwrap();
        let err = read_hostfile(&path).unwrap_err();
        assert_eq!(err, format!("{}:2: expected a slot count from 1 to 65536, got 'z'", path.display()));
        std::fs::remove_file(&path).unwrap();
        assert!(read_hostfile(&path).unwrap_err().contains("cannot read it"));
    }

    #[test]
    fn merging() {
        let merged = merge(vec![h("a", 1), h("b", 2), h("a", 3)], |x, y| x == y).unwrap();
        assert_eq!(merged, [h("a", 4), h("b", 2)]);
        let local = |x: &str| x == "localhost" || x == "me";
        let merged =
            merge(vec![h("localhost", 1), h("b", 1), h("me", 2)], |x, y| x == y || (local(x) && local(y))).unwrap();
        assert_eq!(merged, [h("localhost", 3), h("b", 1)]);
        let merged = merge(vec![h("a", 1), hd("a", 1, "d0"), hd("a", 1, "d0")], |x, y| x == y).unwrap();
        assert_eq!(merged, [hd("a", 3, "d0")]);
        let err = merge(vec![hd("a", 1, "d0"), hd("a", 1, "d1")], |x, y| x == y).unwrap_err();
        assert_eq!(err, "host 'a' is given two RDMA devices, 'd0' and 'd1'");
    }

    #[test]
    fn placement_fills_slots_in_order() {
        assert_eq!(place(&[2, 2, 1], 5), [0, 0, 1, 1, 2]);
        assert_eq!(place(&[2, 2, 1], 3), [0, 0, 1]);
        assert_eq!(place(&[4], 1), [0]);
    }

    #[test]
    fn placement_overflows_round_robin() {
        assert_eq!(place(&[2, 1], 6), [0, 0, 1, 0, 1, 0]);
        assert_eq!(place(&[1, 1, 1], 7), [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn plans() {
        let local = |n: &str| n == "me";
        let p = plan(&[h("a", 2), h("me", 2), h("c", 1)], 3, local, "me");
        assert_eq!(
            p,
            [
                Planned {
                    name: "a".into(),
                    local: false,
                    ranks: vec![0, 1],
                    rdma_device: None,
                    rdma_peers: Vec::new(),
                    login: None,
                },
                Planned {
                    name: "me".into(),
                    local: true,
                    ranks: vec![2],
                    rdma_device: None,
                    rdma_peers: Vec::new(),
                    login: None,
                },
            ]
        );
        let p = plan(&[], 2, local, "here");
        assert_eq!(
            p,
            [Planned {
                name: "here".into(),
                local: true,
                ranks: vec![0, 1],
                rdma_device: None,
                rdma_peers: Vec::new(),
                login: None,
            }]
        );
        let p = plan(&[h("a", 1), h("b", 1)], 5, local, "me");
        assert_eq!(p.iter().map(|h| h.ranks.clone()).collect::<Vec<_>>(), [vec![0, 2, 4], vec![1, 3]]);
    }

    #[test]
    fn placement_with_ppn() {
        // -ppn 2 over three hosts: every host has two slots.
        assert_eq!(place(&[2, 2, 2], 6), [0, 0, 1, 1, 2, 2]);
        assert_eq!(place(&[2, 2, 2], 7), [0, 0, 1, 1, 2, 2, 0]);
        assert!(place(&[], 3).is_empty());
    }
}
