//! Reading the topology from sysfs: `devices/system/cpu/cpuN/topology/{physical_package_id,
//! thread_siblings_list}` and `devices/system/node/nodeN/cpulist`, under a root that is
//! `/sys` on a real host and a temporary tree in tests.
//!
//! A core is a set of thread siblings; its processing units are the siblings this process
//! may run on. A CPU whose topology files cannot be read is a core of its own in package 0;
//! a CPU that no node lists belongs to an extra node after the others; a host without
//! `devices/system/node` (a kernel without NUMA) is one node. If `devices/system/cpu` cannot
//! be read at all (no `/sys`, or a sandbox that hides it), the topology is
//! [`Topology::flat`]. This reads only files that every network namespace sees (`ip netns
//! exec` remounts `/sys`, which keeps `devices/`).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::{parse_cpulist, Topology};

/// The topology under `root` (normally `/sys`), restricted to the CPUs in `allowed`.
pub(crate) fn read(root: &Path, allowed: &[usize]) -> Topology {
    let cpu_dir = root.join("devices/system/cpu");
    if fs::read_dir(&cpu_dir).is_err() {
        return Topology::flat(allowed);
    }
    // Thread siblings (all of them, allowed or not) identify the core; value: (package, pus).
    let mut cores: BTreeMap<Vec<usize>, (i64, Vec<usize>)> = BTreeMap::new();
    for &cpu in allowed {
        let dir = cpu_dir.join(format!("cpu{cpu}/topology"));
        let package = read_text(&dir.join("physical_package_id")).and_then(|t| t.trim().parse::<i64>().ok());
        let siblings = read_text(&dir.join("thread_siblings_list")).and_then(|t| parse_cpulist(&t).ok());
        let (package, siblings) = match (package, siblings) {
            (Some(p), Some(s)) if s.contains(&cpu) => (p, s),
            _ => (0, vec![cpu]),
        };
        cores.entry(siblings).or_insert((package, Vec::new())).1.push(cpu);
    }
    let node_of = node_map(root);
    // Packages in the order of their first allowed CPU, cores in the order of theirs.
    let mut package_first: BTreeMap<i64, usize> = BTreeMap::new();
    for (package, pus) in cores.values() {
        let first = package_first.entry(*package).or_insert(usize::MAX);
        *first = (*first).min(pus[0]);
    }
    let mut list: Vec<(usize, Vec<usize>, Option<usize>)> = cores
        .into_values()
        .map(|(package, mut pus)| {
            pus.sort_unstable();
            let node = node_of.as_ref().map_or(Some(0), |m| m.get(&pus[0]).copied());
            (package_first[&package], pus, node)
        })
        .collect();
    list.sort_by_key(|(package, pus, _)| (*package, pus[0]));
    Topology::from_cores(list.into_iter().map(|(_, pus, node)| (pus, node)).collect())
}

/// CPU -> kernel node number, from `devices/system/node/node*/cpulist`; `None` if there is no
/// node directory (one node).
fn node_map(root: &Path) -> Option<BTreeMap<usize, usize>> {
    let entries = fs::read_dir(root.join("devices/system/node")).ok()?;
    let mut map = BTreeMap::new();
    let mut any = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(node) = name.to_str().and_then(|n| n.strip_prefix("node")).and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let Some(cpus) = read_text(&entry.path().join("cpulist")).and_then(|t| parse_cpulist(&t).ok()) else {
            continue;
        };
        any = true;
        for cpu in cpus {
            map.entry(cpu).or_insert(node);
        }
    }
    any.then_some(map)
}

fn read_text(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::topo::Core;

    /// A fake sysfs tree, removed on drop.
    struct FakeSys(PathBuf);

    impl FakeSys {
        fn new() -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let root = std::env::temp_dir().join(format!("mprun-fake-sys-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(root.join("devices/system/cpu")).unwrap();
            FakeSys(root)
        }

        fn file(&self, path: &str, text: &str) {
            let path = self.0.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }

        fn cpu(&self, cpu: usize, package: usize, siblings: &str) {
            self.file(&format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id"), &format!("{package}\n"));
            self.file(&format!("devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"), &format!("{siblings}\n"));
        }

        fn node(&self, node: usize, cpulist: &str) {
            self.file(&format!("devices/system/node/node{node}/cpulist"), &format!("{cpulist}\n"));
        }
    }

    impl Drop for FakeSys {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn core(id: usize, pus: &[usize], numa: usize) -> Core {
        Core { id, pus: pus.to_vec(), numa }
    }

    /// 2 packages x 2 cores x 2 threads, numbered as Intel does (first threads 0-3, second
    /// threads 4-7), one NUMA node per package.
    fn two_by_two_by_two() -> FakeSys {
        let sys = FakeSys::new();
        for cpu in 0..8 {
            let first = cpu % 4;
            sys.cpu(cpu, first / 2, &format!("{first},{}", first + 4));
        }
        sys.node(0, "0-1,4-5");
        sys.node(1, "2-3,6-7");
        sys.file("devices/system/node/online", "0-1\n");
        sys
    }

    #[test]
    fn packages_cores_threads_and_nodes() {
        let sys = two_by_two_by_two();
        let t = read(&sys.0, &(0..8).collect::<Vec<_>>());
        let want = [core(0, &[0, 4], 0), core(1, &[1, 5], 0), core(2, &[2, 6], 1), core(3, &[3, 7], 1)];
        assert_eq!(t, Topology { cores: want.to_vec(), numa_nodes: 2 });
        assert_eq!(t.node_pus(1), [2, 3, 6, 7]);
    }

    #[test]
    fn restricted_to_the_allowed_cpus() {
        let sys = two_by_two_by_two();
        let t = read(&sys.0, &[0, 1, 4, 6]);
        assert_eq!(t, Topology { cores: vec![core(0, &[0, 4], 0), core(1, &[1], 0), core(2, &[6], 1)], numa_nodes: 2 });
        // Only node 1's CPUs: one node, dense index 0.
        let t = read(&sys.0, &[3, 7]);
        assert_eq!(t, Topology { cores: vec![core(0, &[3, 7], 0)], numa_nodes: 1 });
    }

    #[test]
    fn packages_ordered_by_their_first_cpu() {
        // Package ids need not follow CPU numbers: package 1 holds CPU 0.
        let sys = FakeSys::new();
        sys.cpu(0, 1, "0");
        sys.cpu(1, 0, "1");
        sys.cpu(2, 1, "2");
        sys.cpu(3, 0, "3");
        let t = read(&sys.0, &[0, 1, 2, 3]);
        let pus: Vec<Vec<usize>> = t.cores.iter().map(|c| c.pus.clone()).collect();
        assert_eq!(pus, [vec![0], vec![2], vec![1], vec![3]]);
        assert_eq!(t.numa_nodes, 1, "no node directory: one node");
    }

    #[test]
    fn missing_sys_is_flat() {
        let t = read(Path::new("/nonexistent/sys"), &[0, 1, 3]);
        assert_eq!(t, Topology { cores: vec![core(0, &[0], 0), core(1, &[1], 0), core(2, &[3], 0)], numa_nodes: 1 });
    }

    #[test]
    fn unreadable_pieces_degrade_per_cpu() {
        let sys = FakeSys::new();
        sys.cpu(0, 0, "0-1");
        sys.cpu(1, 0, "0-1");
        // cpu2 has no topology files; cpu3 claims siblings that do not include it.
        sys.cpu(3, 0, "garbage");
        sys.node(0, "0-1");
        let t = read(&sys.0, &[0, 1, 2, 3]);
        let pus: Vec<Vec<usize>> = t.cores.iter().map(|c| c.pus.clone()).collect();
        assert_eq!(pus, [vec![0, 1], vec![2], vec![3]]);
        // CPUs 2 and 3 are in no node: an extra node after node 0.
        assert_eq!(t.cores.iter().map(|c| c.numa).collect::<Vec<_>>(), [0, 1, 1]);
        assert_eq!(t.numa_nodes, 2);
    }

    #[test]
    fn this_host_from_sys() {
        let allowed = super::super::allowed_cpus();
        let t = read(Path::new("/sys"), &allowed);
        let mut pus: Vec<usize> = t.cores.iter().flat_map(|c| c.pus.clone()).collect();
        pus.sort_unstable();
        assert_eq!(pus, allowed);
    }
}
