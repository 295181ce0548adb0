//! Reading the topology through hwloc (cargo feature `hwloc`, with the `hwlocality` crate;
//! the older `hwloc` crate crashes on hwloc 2.x).
//!
//! hwloc's topology is restricted to the CPUs of the process's cgroup, not to its affinity
//! mask, so the cores are restricted here to `allowed` as `sys` does. Cores come in hwloc's
//! logical order; a core's node is the NUMA node whose CPU set holds its first processing
//! unit. A machine where hwloc reports no cores (some virtual machines) gets one core per
//! processing unit, as hwloc's own binding does.

use hwlocality::object::types::ObjectType;
use hwlocality::object::TopologyObject;

use super::Topology;

/// The topology of this host as hwloc sees it, restricted to the CPUs in `allowed`.
pub(crate) fn read(allowed: &[usize]) -> Result<Topology, String> {
    let hw = hwlocality::Topology::new().map_err(|e| format!("hwloc cannot read the topology: {e}"))?;
    let cpus = |obj: &TopologyObject| -> Vec<usize> {
        let mut cpus: Vec<usize> = obj
            .cpuset()
            .map(|set| set.iter_set().map(usize::from).filter(|c| allowed.contains(c)).collect())
            .unwrap_or_default();
        cpus.sort_unstable();
        cpus
    };
    let nodes: Vec<(usize, Vec<usize>)> =
        hw.objects_with_type(ObjectType::NUMANode).map(|n| (n.os_index().unwrap_or(0), cpus(n))).collect();
    let node_of = |pu: usize| nodes.iter().find(|(_, cpus)| cpus.contains(&pu)).map(|(node, _)| *node);
    let mut list: Vec<(Vec<usize>, Option<usize>)> = hw
        .objects_with_type(ObjectType::Core)
        .map(cpus)
        .filter(|pus| !pus.is_empty())
        .map(|pus| {
            let node = node_of(pus[0]);
            (pus, node)
        })
        .collect();
    if list.is_empty() {
        list = hw
            .objects_with_type(ObjectType::PU)
            .map(cpus)
            .filter(|pus| !pus.is_empty())
            .map(|pus| {
                let node = node_of(pus[0]);
                (pus, node)
            })
            .collect();
    }
    Ok(Topology::from_cores(list))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::topo::{allowed_cpus, sys};

    #[test]
    fn hwloc_and_sys_agree_on_this_host() {
        let allowed = allowed_cpus();
        let from_hwloc = read(&allowed).expect("hwloc reads this host");
        let from_sys = sys::read(Path::new("/sys"), &allowed);
        assert_eq!(from_hwloc, from_sys);
        // A narrower mask (as under taskset) restricts both alike.
        let first = &allowed[..1];
        assert_eq!(read(first).unwrap(), sys::read(Path::new("/sys"), first));
    }
}
