//! CPU binding: `--bind-to`, `--map-by`, `--report-bindings`, and the `MPR_BINDING` each rank
//! gets. Every rank reports the CPUs the kernel lets it run on (`Cpus_allowed_list` of its
//! shell in /proc), so these tests check what was applied, not what was meant.
#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeMap;

use common::{assert_one_line, code, run, stderr, stdout};

/// A rank's shell prints `RANK HOST CPUS BINDING`.
const SCRIPT: &str = "echo $MPR_RANK $MPR_HOST $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$$/status) \
                      $MPR_BINDING";

/// What one rank saw.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    host: String,
    cpus: Vec<usize>,
    binding: String,
}

/// Parses a kernel CPU list (`0-2,5`).
fn cpulist(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for item in text.trim().split(',').filter(|s| !s.is_empty()) {
        match item.split_once('-') {
            Some((lo, hi)) => cpus.extend(lo.parse::<usize>().unwrap()..=hi.parse().unwrap()),
            None => cpus.push(item.parse().unwrap()),
        }
    }
    cpus
}

/// The CPUs this test may run on (and so mprun, which inherits them).
fn allowed() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap();
    cpulist(line)
}

/// Runs mprun with `args` then `sh -c SCRIPT`; returns each rank's view and mprun's stderr.
fn job(args: &[&str]) -> (BTreeMap<usize, Seen>, String) {
    let mut argv = args.to_vec();
    argv.extend(["sh", "-c", SCRIPT]);
    let out = run(&argv);
    assert_eq!(code(&out), 0, "{argv:?}: {}", stderr(&out));
    let mut seen = BTreeMap::new();
    for line in stdout(&out).lines() {
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words.len(), 4, "{line:?}");
        let rank: usize = words[0].parse().unwrap();
        let view = Seen { host: words[1].into(), cpus: cpulist(words[2]), binding: words[3].into() };
        seen.insert(rank, view);
    }
    (seen, stderr(&out))
}

/// The CPUs in `MPR_BINDING=cores:LIST`.
fn bound_cpus(seen: &Seen) -> Vec<usize> {
    let list = seen.binding.strip_prefix("cores:").unwrap_or_else(|| panic!("not bound: {seen:?}"));
    list.split(',').map(|c| c.parse().unwrap()).collect()
}

/// Whether CPUs `a` and `b` are threads of one core (from /sys; no when unreadable).
fn same_core(a: usize, b: usize) -> bool {
    let path = format!("/sys/devices/system/cpu/cpu{a}/topology/thread_siblings_list");
    std::fs::read_to_string(path).is_ok_and(|t| cpulist(&t).contains(&b))
}

/// Checks that ranks `ranks` are each bound to one core of their own: what the kernel
/// applied is what `MPR_BINDING` says, one core's threads, disjoint from the others.
fn assert_own_cores(seen: &BTreeMap<usize, Seen>, ranks: &[usize]) {
    let mut taken = Vec::new();
    for r in ranks {
        let s = &seen[r];
        assert_eq!(s.cpus, bound_cpus(s), "rank {r}: applied vs MPR_BINDING");
        assert!(!s.cpus.is_empty());
        assert!(s.cpus.iter().all(|&c| same_core(s.cpus[0], c) || s.cpus.len() == 1), "rank {r}: {s:?}");
        assert!(s.cpus.iter().all(|c| !taken.contains(c)), "rank {r} shares a core: {seen:?}");
        taken.extend(s.cpus.iter().copied());
    }
}

/// Checks that every rank runs wherever the test may, with `MPR_BINDING=none`.
fn assert_unbound(seen: &BTreeMap<usize, Seen>, np: usize) {
    assert_eq!(seen.len(), np, "{seen:?}");
    for (r, s) in seen {
        assert_eq!(s.cpus, allowed(), "rank {r}");
        assert_eq!(s.binding, "none", "rank {r}");
    }
}

/// This machine's cores as the kernel sees them (thread-sibling groups of allowed CPUs).
fn cores() -> usize {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for cpu in allowed() {
        if !groups.iter().any(|g| same_core(g[0], cpu)) {
            groups.push(vec![cpu]);
        }
    }
    groups.len()
}

#[test]
fn by_default_two_ranks_get_a_core_each() {
    if cores() < 2 {
        common::cannot_run("fewer than 2 cores allowed");
        return;
    }
    let (seen, err) = job(&["-np", "2"]);
    assert_eq!(seen.len(), 2);
    assert_own_cores(&seen, &[0, 1]);
    assert!(err.is_empty(), "nothing is reported without --report-bindings: {err}");
    if allowed().len() == 2 && cores() == 2 {
        // This 2-core VM: one CPU each.
        assert_eq!(seen[&0].cpus.len() + seen[&1].cpus.len(), 2);
    }
}

#[test]
fn more_ranks_than_cores_are_not_bound() {
    let np = cores() + 2;
    let np_text = np.to_string();
    let (seen, _) = job(&["-np", &np_text]);
    assert_unbound(&seen, np);
}

#[test]
fn bind_to_none_leaves_ranks_unbound() {
    let (seen, _) = job(&["-np", "2", "--bind-to", "none"]);
    assert_unbound(&seen, 2);
}

#[test]
fn report_bindings_prints_a_line_per_rank() {
    let (seen, err) = job(&["-np", "2", "--report-bindings"]);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    for (r, s) in &seen {
        let want = if s.binding == "none" {
            format!("mprun: rank {r} on host {} not bound (", s.host)
        } else {
            format!("mprun: rank {r} on host {} bound to cores {}", s.host, s.binding.trim_start_matches("cores:"))
        };
        assert!(lines.iter().any(|l| l.starts_with(&want)), "no {want:?} in {err}");
    }
    let np = (cores() + 1).to_string();
    let (seen, err) = job(&["-np", &np, "--report-bindings"]);
    let host = &seen[&0].host;
    let unit = if cores() == 1 { "core" } else { "cores" };
    let want = format!("mprun: rank 0 on host {host} not bound ({np} ranks on {} {unit}: oversubscribed)", cores());
    assert!(err.lines().any(|l| l == want), "no {want:?} in {err}");
    let (_, err) = job(&["-np", "1", "--bind-to", "none", "--report-bindings"]);
    assert_eq!(err, format!("mprun: rank 0 on host {host} not bound (--bind-to none)\n"));
}

/// CPU -> NUMA node, from /sys (empty where there is no node directory).
fn nodes() -> BTreeMap<usize, usize> {
    let mut map = BTreeMap::new();
    for entry in std::fs::read_dir("/sys/devices/system/node").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(node) = name.strip_prefix("node").and_then(|n| n.parse::<usize>().ok()) {
            if let Ok(text) = std::fs::read_to_string(entry.path().join("cpulist")) {
                for cpu in cpulist(&text) {
                    map.insert(cpu, node);
                }
            }
        }
    }
    map
}

#[test]
fn bind_to_numa_gives_the_node_cpus() {
    let (seen, err) = job(&["-np", "2", "--bind-to", "numa", "--report-bindings"]);
    let nodes = nodes();
    let allowed = allowed();
    for (r, s) in &seen {
        assert_eq!(s.cpus, bound_cpus(s), "rank {r}: applied vs MPR_BINDING");
        let want: Vec<usize> = match nodes.get(&s.cpus[0]) {
            Some(node) => allowed.iter().copied().filter(|c| nodes.get(c) == Some(node)).collect(),
            None => allowed.clone(),
        };
        assert_eq!(s.cpus, want, "rank {r}: the allowed CPUs of its node");
        assert!(err.contains(&format!("mprun: rank {r} on host {} bound to NUMA node ", s.host)), "{err}");
    }
    // One node (as on this VM): map-by numa binds as map-by core does.
    let node_count = nodes.values().collect::<std::collections::BTreeSet<_>>().len();
    if node_count <= 1 && cores() >= 2 {
        let (seen, _) = job(&["-np", "2", "--map-by", "numa"]);
        assert_own_cores(&seen, &[0, 1]);
    }
}

#[test]
fn bad_binding_values_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["--bind-to", "socket", "true"], "mprun: --bind-to: expected core, numa or none, got 'socket'"),
        (&["--bind-to=", "true"], "mprun: --bind-to: expected core, numa or none, got ''"),
        (&["--map-by", "slot", "true"], "mprun: --map-by: expected core or numa, got 'slot'"),
        (&["-map-by", "node", "true"], "mprun: --map-by: expected core or numa, got 'node'"),
    ];
    for (args, want) in cases {
        let out = run(args);
        assert_eq!(code(&out), 2, "{args:?}");
        assert_one_line(&out, want);
    }
}

#[test]
fn fork_hosts_of_one_machine_share_its_cores() {
    if cores() < 2 {
        common::cannot_run("fewer than 2 cores allowed");
        return;
    }
    // Two hosts of one rank each on this machine (the proxies see one kernel boot id): their
    // ranks take a core each, as two ranks of one host would, not core 0 both.
    let (seen, err) = job(&["--launcher", "fork", "-H", "a:1,b:1", "--report-bindings"]);
    assert_eq!([&seen[&0].host, &seen[&1].host], ["a", "b"]);
    assert_own_cores(&seen, &[0, 1]);
    for (r, s) in &seen {
        let want =
            format!("mprun: rank {r} on host {} bound to cores {}", s.host, s.binding.trim_start_matches("cores:"));
        assert!(err.lines().any(|l| l == want), "no {want:?} in {err}");
    }
    // Ranks of the machine's hosts outnumbering its cores: none bound, and the reason says
    // the machine's hosts are counted together.
    let n = cores() + 1;
    let hosts = format!("a:{},b:1", n - 1);
    let (seen, err) = job(&["--launcher", "fork", "-H", &hosts, "--report-bindings"]);
    assert_unbound(&seen, n);
    let why = format!("not bound ({n} ranks of this machine's hosts on {} cores: oversubscribed)", cores());
    assert!(err.contains(&why), "no {why:?} in {err}");
    // An explicit --bind-to core wraps round the machine's cores, across its hosts.
    let (seen, _) = job(&["--launcher", "fork", "-H", &hosts, "--bind-to", "core"]);
    assert_own_cores(&seen, &(0..n - 1).collect::<Vec<_>>());
    assert_eq!(seen[&(n - 1)].cpus, seen[&0].cpus, "host b's rank wraps round to the first core");
    // The binding options reach the proxies.
    let (seen, _) = job(&["--launcher", "fork", "-H", "a:2,b:2", "--bind-to", "none"]);
    assert_unbound(&seen, 4);
}
