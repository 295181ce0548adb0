//! The CPU topology of the host mprun (or a proxy) runs on: its cores, the processing units
//! (hardware threads) of each, and the NUMA node each core belongs to, restricted to the CPUs
//! this process may run on (`sched_getaffinity`), as hwloc restricts its topology to the
//! allowed CPUs.
//!
//! - `sys`: the default reader, from `/sys/devices/system/{cpu,node}` (Linux); it degrades to
//!   "every allowed CPU is a core, one NUMA node" where `/sys` cannot be read.
//! - `hwloc` (cargo feature `hwloc`): the same struct read through hwloc (`hwlocality`);
//!   [`read`] uses it first and falls back to `sys` if hwloc fails.
//!
//! Invariants of a [`Topology`]: cores are in hwloc's logical order (packages in the order of
//! their first CPU, then the cores of each package in the order of their first CPU); a
//! core's `id` is its index in that order; its `pus` are ascending OS CPU numbers, never
//! empty; `numa` is a dense index (`0..numa_nodes`) ordered by the kernel's node number, and
//! every node counted has at least one core.

#[cfg(feature = "hwloc")]
pub(crate) mod hwloc;
pub(crate) mod sys;

use std::io;

/// One core: its processing units and its NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Core {
    /// Its logical index among the host's cores.
    pub(crate) id: usize,
    /// Its processing units (OS CPU numbers, ascending) that this process may run on.
    pub(crate) pus: Vec<usize>,
    /// Its NUMA node (dense index).
    pub(crate) numa: usize,
}

/// The cores of a host that this process may run on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Topology {
    /// The cores, in logical order.
    pub(crate) cores: Vec<Core>,
    /// The number of NUMA nodes that hold at least one of the cores.
    pub(crate) numa_nodes: usize,
}

impl Topology {
    /// Every CPU of `cpus` a core of its own, one NUMA node: what is known without `/sys`.
    pub(crate) fn flat(cpus: &[usize]) -> Self {
        let cores: Vec<Core> = cpus.iter().enumerate().map(|(id, &cpu)| Core { id, pus: vec![cpu], numa: 0 }).collect();
        let numa_nodes = usize::from(!cores.is_empty());
        Topology { cores, numa_nodes }
    }

    /// Builds a topology from cores in logical order, each given as its processing units
    /// (ascending, not empty) and its node's kernel number (`None`: in no node). Nodes get
    /// dense indices in the order of their kernel numbers; cores in no node share one more
    /// node, after the others.
    pub(crate) fn from_cores(list: Vec<(Vec<usize>, Option<usize>)>) -> Self {
        let mut nodes: Vec<Option<usize>> = list.iter().map(|(_, node)| *node).collect();
        nodes.sort_by_key(|n| n.unwrap_or(usize::MAX));
        nodes.dedup();
        let cores = list
            .into_iter()
            .enumerate()
            .map(|(id, (pus, node))| Core { id, pus, numa: nodes.iter().position(|n| *n == node).unwrap_or(0) })
            .collect();
        Topology { cores, numa_nodes: nodes.len() }
    }

    /// The processing units of every core of NUMA node `node`, ascending.
    pub(crate) fn node_pus(&self, node: usize) -> Vec<usize> {
        let mut pus: Vec<usize> =
            self.cores.iter().filter(|c| c.numa == node).flat_map(|c| c.pus.iter().copied()).collect();
        pus.sort_unstable();
        pus
    }
}

/// The topology of this host, as the default reader sees it (hwloc with the `hwloc`
/// feature, else `/sys`).
pub(crate) fn read() -> Topology {
    let allowed = allowed_cpus();
    #[cfg(feature = "hwloc")]
    match hwloc::read(&allowed) {
        Ok(topology) if !topology.cores.is_empty() => return topology,
        _ => {}
    }
    sys::read(std::path::Path::new("/sys"), &allowed)
}

/// The CPUs this process may run on, ascending (see [`mpr::bootstrap::cpus::allowed`]).
pub(crate) fn allowed_cpus() -> Vec<usize> {
    mpr::bootstrap::cpus::allowed()
}

/// Parses a kernel CPU list (`0-3,8,10-11`; empty for none).
pub(crate) fn parse_cpulist(text: &str) -> io::Result<Vec<usize>> {
    mpr::bootstrap::cpus::parse_list(text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("bad CPU list '{}'", text.trim())))
}

/// Formats CPUs as a plain comma-separated list (`0,1,4`).
pub(crate) fn format_cpus(cpus: &[usize]) -> String {
    cpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n").unwrap(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist("5").unwrap(), [5]);
        assert!(parse_cpulist("\n").unwrap().is_empty());
        assert_eq!(parse_cpulist("3,1-2,2").unwrap(), [1, 2, 3]);
        for bad in ["x", "1-", "3-1", "0-99999", "1;2"] {
            assert!(parse_cpulist(bad).is_err(), "{bad:?}");
        }
        assert_eq!(format_cpus(&[0, 1, 4]), "0,1,4");
    }

    #[test]
    fn flat_topologies() {
        let t = Topology::flat(&[2, 5]);
        assert_eq!(t.numa_nodes, 1);
        assert_eq!(t.cores[1], Core { id: 1, pus: vec![5], numa: 0 });
        assert_eq!(Topology::flat(&[]).numa_nodes, 0);
        assert_eq!(t.node_pus(0), [2, 5]);
    }

    #[test]
    fn this_host_has_cores() {
        let allowed = allowed_cpus();
        let t = read();
        assert!(!t.cores.is_empty());
        let mut pus: Vec<usize> = t.cores.iter().flat_map(|c| c.pus.clone()).collect();
        pus.sort_unstable();
        assert_eq!(pus, allowed, "every allowed CPU is in exactly one core");
        assert!(t.cores.iter().all(|c| c.numa < t.numa_nodes));
    }
}
