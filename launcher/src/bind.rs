//! CPU binding of ranks: `--bind-to core|numa|none`, `--map-by core|numa`,
//! `--report-bindings`.
//!
//! Each host decides the binding of its own ranks from its own topology (`topo`), on the host
//! where they run: mprun for this machine's ranks, the proxy for a remote host's. The ranks
//! of a host are mapped in order of their local rank: by core, local rank `i` goes to core
//! `i` (in hwloc's logical order); by NUMA node, consecutive ranks go round-robin over the
//! nodes, each taking the next core of its node. A rank bound to a core may run on that
//! core's processing units; a rank bound to a NUMA node may run on every allowed CPU of the
//! node that its mapped core belongs to.
//!
//! Hosts that are network namespaces or containers of one machine (the same kernel boot id,
//! `mpr::bootstrap::machine`) share its cores: mprun hands each such host its [`Share`] of the
//! machine's ranks, and the ranks of all of them are mapped as the ranks of one host would
//! be (the first host's from core 0, the next host's after them), so that two namespace hosts
//! of one rank each do not both take core 0.
//!
//! Default (no `--bind-to`): bind to cores when the ranks of the machine do not outnumber its
//! cores (the cores of the CPUs mprun may run on), leave them unbound otherwise, as Open MPI
//! does. An explicit `--bind-to core` with more ranks than cores wraps around (ranks share
//! cores), as MPICH's hydra does. macOS cannot bind threads to CPUs: there the options are
//! accepted and reported as not applied.
//!
//! Every rank gets `MPR_BINDING`: `cores:LIST` (the OS CPU numbers it may run on, as in
//! `Cpus_allowed_list`, comma-separated) or `none`. The CPU set is built before fork and set
//! with `sched_setaffinity` in the child before exec (`spawn`).

use crate::stdio::say;
use crate::topo::{self, format_cpus, Topology};

/// What a rank is bound to (`--bind-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BindTo {
    /// The processing units of one core.
    Core,
    /// The CPUs of one NUMA node.
    Numa,
    /// Nothing: the rank runs wherever mprun may.
    None,
}

/// How consecutive ranks of a host are spread (`--map-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum MapBy {
    /// Local rank `i` on core `i`.
    #[default]
    Core,
    /// Round-robin over NUMA nodes.
    Numa,
}

/// The binding options of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Policy {
    /// `--bind-to`; `None` for the default (cores unless oversubscribed).
    pub(crate) bind: Option<BindTo>,
    /// `--map-by`.
    pub(crate) map: MapBy,
    /// `--report-bindings`.
    pub(crate) report: bool,
}

impl BindTo {
    /// Parses a `--bind-to` value.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        match text {
            "core" => Ok(BindTo::Core),
            "numa" => Ok(BindTo::Numa),
            "none" => Ok(BindTo::None),
            _ => Err(format!("--bind-to: expected core, numa or none, got '{text}'")),
        }
    }
}

impl MapBy {
    /// Parses a `--map-by` value.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        match text {
            "core" => Ok(MapBy::Core),
            "numa" => Ok(MapBy::Numa),
            _ => Err(format!("--map-by: expected core or numa, got '{text}'")),
        }
    }
}

/// Where the ranks of one host stand among the ranks of its machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Share {
    /// The machine-wide index of the host's first rank.
    pub(crate) first: usize,
    /// The ranks of every host on the machine (0: only this host's).
    pub(crate) machine_ranks: usize,
}

impl Share {
    /// The share of a host that has its machine to itself.
    pub(crate) fn alone() -> Share {
        Share::default()
    }

    /// The shares of hosts in order, each with its machine's key (hosts with equal keys are
    /// one machine) and its number of ranks.
    pub(crate) fn of_hosts(hosts: &[(&str, usize)]) -> Vec<Share> {
        hosts
            .iter()
            .enumerate()
            .map(|(i, (key, _))| {
                let same = |h: &&(&str, usize)| h.0 == *key;
                let first = hosts[..i].iter().filter(same).map(|h| h.1).sum();
                let machine_ranks = hosts.iter().filter(same).map(|h| h.1).sum();
                Share { first, machine_ranks }
            })
            .collect()
    }
}

/// The binding of one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Binding {
    /// Bound to these CPUs (OS numbers, ascending); `node` when bound to a NUMA node.
    Bound {
        /// The CPUs the rank may run on.
        cpus: Vec<usize>,
        /// The NUMA node (dense index) under `--bind-to numa`.
        node: Option<usize>,
    },
    /// Not bound; the text says why (`--bind-to none`, oversubscribed, ...).
    Unbound(String),
}

impl Binding {
    /// The value of `MPR_BINDING`.
    pub(crate) fn env_value(&self) -> String {
        match self {
            Binding::Bound { cpus, .. } => format!("cores:{}", format_cpus(cpus)),
            Binding::Unbound(_) => "none".into(),
        }
    }

    /// What `--report-bindings` says after `rank R on host H `.
    pub(crate) fn describe(&self) -> String {
        match self {
            Binding::Bound { cpus, node: None } => format!("bound to cores {}", format_cpus(cpus)),
            Binding::Bound { cpus, node: Some(n) } => format!("bound to NUMA node {n} (cores {})", format_cpus(cpus)),
            Binding::Unbound(why) => why.clone(),
        }
    }

    /// The CPU set to give `sched_setaffinity` in the child, built before fork (building it
    /// is not async-signal-safe in general); `None` when the rank is not bound.
    #[cfg(target_os = "linux")]
    pub(crate) fn cpu_set(&self) -> std::io::Result<Option<nix::sched::CpuSet>> {
        let Binding::Bound { cpus, .. } = self else {
            return Ok(None);
        };
        let mut set = nix::sched::CpuSet::new();
        for &cpu in cpus {
            set.set(cpu).map_err(|e| std::io::Error::other(format!("cannot bind to CPU {cpu}: {e}")))?;
        }
        Ok(Some(set))
    }
}

/// The bindings of the `n` ranks of this host under `policy`, from this host's topology,
/// given the host's `share` of its machine.
pub(crate) fn here(policy: &Policy, share: Share, n: usize) -> Vec<Binding> {
    if policy.bind == Some(BindTo::None) {
        return vec![Binding::Unbound("not bound (--bind-to none)".into()); n];
    }
    if cfg!(target_os = "macos") {
        return vec![Binding::Unbound("binding not applied (macOS cannot bind)".into()); n];
    }
    plan_share(&topo::read(), policy, share, n)
}

/// The bindings of the `n` ranks of a host that holds `share` of its machine's ranks: those
/// of the machine's ranks from `share.first` in [`plan`] of all of them.
pub(crate) fn plan_share(topology: &Topology, policy: &Policy, share: Share, n: usize) -> Vec<Binding> {
    let total = share.machine_ranks.max(share.first + n);
    if total == n {
        return plan(topology, policy, n);
    }
    let mut all = plan(topology, policy, total);
    for b in &mut all {
        if let Binding::Unbound(why) = b {
            *why = why.replace(" ranks on ", " ranks of this machine's hosts on ");
        }
    }
    all.drain(share.first..share.first + n).collect()
}

/// Under `--report-bindings`, prints one line per rank of `host` on stderr.
pub(crate) fn report(policy: &Policy, host: &str, ranks: &[usize], bindings: &[Binding]) {
    if policy.report {
        for (rank, binding) in ranks.iter().zip(bindings) {
            say(&format!("rank {rank} on host {host} {}", binding.describe()));
        }
    }
}

/// The bindings of `n` ranks on `topology` under `policy` (Linux semantics).
pub(crate) fn plan(topology: &Topology, policy: &Policy, n: usize) -> Vec<Binding> {
    let cores = topology.cores.len();
    let bind = match policy.bind {
        Some(BindTo::None) => return vec![Binding::Unbound("not bound (--bind-to none)".into()); n],
        _ if cores == 0 => return vec![Binding::Unbound("not bound (no CPU topology)".into()); n],
        Some(bind) => bind,
        None if n <= cores => BindTo::Core,
        None => {
            let unit = if cores == 1 { "core" } else { "cores" };
            let why = format!("not bound ({n} ranks on {cores} {unit}: oversubscribed)");
            return vec![Binding::Unbound(why); n];
        }
    };
    let order = core_order(topology, policy.map);
    (0..n)
        .map(|i| {
            let core = &topology.cores[order[i % order.len()]];
            match bind {
                BindTo::Numa => Binding::Bound { cpus: topology.node_pus(core.numa), node: Some(core.numa) },
                _ => Binding::Bound { cpus: core.pus.clone(), node: None },
            }
        })
        .collect()
}

/// The cores (indices) in the order consecutive ranks take them: logical order by core;
/// round-robin over the nodes by NUMA node, each node's cores in logical order.
fn core_order(topology: &Topology, map: MapBy) -> Vec<usize> {
    let logical: Vec<usize> = (0..topology.cores.len()).collect();
    if map == MapBy::Core || topology.numa_nodes <= 1 {
        return logical;
    }
    let per_node: Vec<Vec<usize>> = (0..topology.numa_nodes)
        .map(|n| logical.iter().copied().filter(|&c| topology.cores[c].numa == n).collect())
        .collect();
    let rounds = per_node.iter().map(Vec::len).max().unwrap_or(0);
    (0..rounds).flat_map(|r| per_node.iter().filter_map(move |cores| cores.get(r).copied())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::Core;

    /// 2 NUMA nodes x 2 cores x 2 threads, numbered as in `topo::sys`'s tests.
    fn two_nodes() -> Topology {
        let cores = (0..4).map(|id| Core { id, pus: vec![id, id + 4], numa: id / 2 }).collect();
        Topology { cores, numa_nodes: 2 }
    }

    fn policy(bind: Option<BindTo>, map: MapBy) -> Policy {
        Policy { bind, map, report: false }
    }

    fn cpus(b: &Binding) -> Vec<usize> {
        match b {
            Binding::Bound { cpus, .. } => cpus.clone(),
            Binding::Unbound(why) => panic!("unbound: {why}"),
        }
    }

    #[test]
    fn parses_values() {
        assert_eq!(BindTo::parse("numa"), Ok(BindTo::Numa));
        assert_eq!(MapBy::parse("core"), Ok(MapBy::Core));
        assert_eq!(BindTo::parse("socket").unwrap_err(), "--bind-to: expected core, numa or none, got 'socket'");
        assert_eq!(MapBy::parse("").unwrap_err(), "--map-by: expected core or numa, got ''");
    }

    #[test]
    fn default_binds_cores_unless_oversubscribed() {
        let t = two_nodes();
        let b = plan(&t, &Policy::default(), 3);
        assert_eq!(b.iter().map(cpus).collect::<Vec<_>>(), [vec![0, 4], vec![1, 5], vec![2, 6]]);
        assert_eq!(b[0].env_value(), "cores:0,4");
        assert_eq!(b[0].describe(), "bound to cores 0,4");
        let b = plan(&t, &Policy::default(), 5);
        assert_eq!(b[4], Binding::Unbound("not bound (5 ranks on 4 cores: oversubscribed)".into()));
        assert_eq!(b[0].env_value(), "none");
    }

    #[test]
    fn explicit_core_binding_wraps_around() {
        let b = plan(&two_nodes(), &policy(Some(BindTo::Core), MapBy::Core), 6);
        assert_eq!(cpus(&b[4]), [0, 4]);
        assert_eq!(cpus(&b[5]), [1, 5]);
    }

    #[test]
    fn map_by_numa_goes_round_robin() {
        let b = plan(&two_nodes(), &policy(None, MapBy::Numa), 4);
        assert_eq!(b.iter().map(cpus).collect::<Vec<_>>(), [vec![0, 4], vec![2, 6], vec![1, 5], vec![3, 7]]);
        // Uneven nodes: the larger node's extra cores come last.
        let mut t = two_nodes();
        t.cores[1].numa = 1;
        assert_eq!(core_order(&t, MapBy::Numa), [0, 1, 2, 3]);
        t.cores[2].numa = 0;
        assert_eq!(core_order(&t, MapBy::Numa), [0, 1, 2, 3]);
        t.cores[0].numa = 1;
        assert_eq!(core_order(&t, MapBy::Numa), [2, 0, 1, 3]);
    }

    #[test]
    fn numa_binding_takes_the_node() {
        let b = plan(&two_nodes(), &policy(Some(BindTo::Numa), MapBy::Core), 3);
        assert_eq!(b[0], Binding::Bound { cpus: vec![0, 1, 4, 5], node: Some(0) });
        assert_eq!(b[1], b[0]);
        assert_eq!(b[2], Binding::Bound { cpus: vec![2, 3, 6, 7], node: Some(1) });
        assert_eq!(b[2].describe(), "bound to NUMA node 1 (cores 2,3,6,7)");
        let b = plan(&two_nodes(), &policy(Some(BindTo::Numa), MapBy::Numa), 2);
        assert_eq!(b[0], Binding::Bound { cpus: vec![0, 1, 4, 5], node: Some(0) });
        assert_eq!(b[1], Binding::Bound { cpus: vec![2, 3, 6, 7], node: Some(1) });
    }

    #[test]
    fn hosts_of_one_machine_take_its_cores_in_turn() {
        let t = two_nodes();
        // Hosts a (2 ranks) and b (1 rank) on one machine, c on another.
        let shares = Share::of_hosts(&[("m1", 2), ("m1", 1), ("m2", 1)]);
        assert_eq!(shares[0], Share { first: 0, machine_ranks: 3 });
        assert_eq!(shares[1], Share { first: 2, machine_ranks: 3 });
        assert_eq!(shares[2], Share { first: 0, machine_ranks: 1 });
        let a = plan_share(&t, &Policy::default(), shares[0], 2);
        let b = plan_share(&t, &Policy::default(), shares[1], 1);
        let c = plan_share(&t, &Policy::default(), shares[2], 1);
        assert_eq!(a.iter().map(cpus).collect::<Vec<_>>(), [vec![0, 4], vec![1, 5]]);
        assert_eq!(cpus(&b[0]), [2, 6], "after host a's ranks, not on core 0 again");
        assert_eq!(cpus(&c[0]), [0, 4], "another machine starts from core 0");
        // Five ranks of the machine's hosts on four cores: none bound, and the reason says so.
        let shares = Share::of_hosts(&[("m", 3), ("m", 2)]);
        let b = plan_share(&t, &Policy::default(), shares[1], 2);
        assert_eq!(b[1].describe(), "not bound (5 ranks of this machine's hosts on 4 cores: oversubscribed)");
        // A host alone on its machine (or an old share of 0) is planned as before.
        assert_eq!(plan_share(&t, &Policy::default(), Share::alone(), 3), plan(&t, &Policy::default(), 3));
    }

    #[test]
    fn none_and_empty() {
        let b = plan(&two_nodes(), &policy(Some(BindTo::None), MapBy::Numa), 2);
        assert_eq!(b, vec![Binding::Unbound("not bound (--bind-to none)".into()); 2]);
        let b = plan(&Topology::flat(&[3]), &Policy::default(), 2);
        assert_eq!(b[1].describe(), "not bound (2 ranks on 1 core: oversubscribed)");
        let b = plan(&Topology::default(), &Policy::default(), 1);
        assert_eq!(b[0].describe(), "not bound (no CPU topology)");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn cpu_sets() {
        let set = Binding::Bound { cpus: vec![1, 3], node: None }.cpu_set().unwrap().unwrap();
        assert!(set.is_set(1).unwrap() && set.is_set(3).unwrap() && !set.is_set(2).unwrap());
        assert!(Binding::Unbound("x".into()).cpu_set().unwrap().is_none());
        assert!(Binding::Bound { cpus: vec![1 << 20], node: None }.cpu_set().is_err());
    }
}
