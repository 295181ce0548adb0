//! The hosts of a batch system's allocation: mprun run inside `salloc`/`sbatch` (Slurm) or a
//! PBS job uses the allocation's hosts when no `--host`/`--hostfile` names any.
//!
//! Slurm says them in `SLURM_JOB_NODELIST` (its compressed host-list form, e.g.
//! `node[01-04,07],gpu1`) and how many tasks each takes in `SLURM_TASKS_PER_NODE`
//! (`2(x3),1`: three nodes of 2, then one of 1). PBS names one host per slot, one per line,
//! in the file `PBS_NODEFILE`. Under Slurm the proxies of other hosts are started with
//! `srun` (see `control::start`), which reaches exactly the allocation's nodes.

use std::net::IpAddr;
use std::process::Command;

use crate::hosts::HostSpec;

/// The batch system an allocation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum System {
    Slurm,
    Pbs,
}

/// An allocation's hosts, in the batch system's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Allocation {
    pub(crate) system: System,
    pub(crate) hosts: Vec<HostSpec>,
}

/// The allocation mprun runs in, if any: Slurm's (a job id and a node list), else PBS's.
pub(crate) fn from_env() -> Result<Option<Allocation>, String> {
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
    if var("SLURM_JOB_ID").is_some() {
        // Inside a job step (mprun run by srun) the step's nodes and tasks, else the job's;
        // a list and its counts always come from the same scope.
        let (list_var, per_var) = if var("SLURM_STEP_NODELIST").is_some() && var("SLURM_STEP_TASKS_PER_NODE").is_some()
        {
            ("SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
        } else {
            ("SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE")
        };
        if let Some(list) = var(list_var) {
            let names = expand_nodelist(&list).map_err(|e| format!("{list_var}={list}: {e}"))?;
            // Tasks per node; an allocation made without -n says CPUs per node instead.
            let (name, per) = match var(per_var) {
                Some(t) => (per_var, t),
                None => ("SLURM_JOB_CPUS_PER_NODE", var("SLURM_JOB_CPUS_PER_NODE").unwrap_or_default()),
            };
            let counts = if per.is_empty() {
                vec![1; names.len()]
            } else {
                expand_counts(&per).map_err(|e| format!("{name}={per}: {e}"))?
            };
            if counts.len() != names.len() {
                return Err(format!(
                    "{name}={per} gives {} counts for the {} nodes of {list_var}={list}",
                    counts.len(),
                    names.len()
                ));
            }
            let hosts = names.iter().zip(counts).map(|(n, c)| HostSpec::new(n, c)).collect();
            return Ok(Some(Allocation { system: System::Slurm, hosts }));
        }
    }
    if let Some(file) = var("PBS_NODEFILE") {
        let text =
            crate::hosts::read_bounded(std::path::Path::new(&file)).map_err(|e| format!("PBS_NODEFILE={file}: {e}"))?;
        // One host per line and slot: the hostfile parser adds up a host named again.
        let hosts = crate::hosts::parse_hostfile(&format!("PBS_NODEFILE {file}"), &text)?;
        if hosts.is_empty() {
            return Err(format!("PBS_NODEFILE={file} names no host"));
        }
        return Ok(Some(Allocation { system: System::Pbs, hosts }));
    }
    Ok(None)
}

/// Expands a Slurm host list: comma-separated names, each with any number of bracketed
/// groups of numbers and ranges (`rack[1-2]-n[01,03]` is four hosts); a range keeps the zero
/// padding of its first bound.
pub(crate) fn expand_nodelist(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut item = String::new();
    let mut depth = 0;
    for c in list.trim().chars().chain(std::iter::once(',')) {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return Err("a ']' without its '['".into()),
            ']' => depth -= 1,
            ',' if depth == 0 => {
                let name = std::mem::take(&mut item);
                if name.trim().is_empty() {
                    return Err("an empty host name".into());
                }
                out.extend(expand_item(name.trim())?);
                continue;
            }
            _ => {}
        }
        if depth > 1 {
            return Err("nested '['".into());
        }
        item.push(c);
    }
    if depth != 0 {
        return Err("a '[' without its ']'".into());
    }
    Ok(out)
}

/// One host-list item: the product of its bracketed groups.
fn expand_item(item: &str) -> Result<Vec<String>, String> {
    let Some(open) = item.find('[') else {
        return Ok(vec![item.to_string()]);
    };
    let close = open + item[open..].find(']').ok_or("a '[' without its ']'")?;
    let (head, group, tail) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let tails = expand_item(tail)?;
    let mut out = Vec::new();
    for part in group.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let bad = || format!("'{part}' in [{group}] is not a number or a range A-B");
        if lo.is_empty() || !lo.bytes().all(|b| b.is_ascii_digit()) || !hi.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
        if b < a {
            return Err(format!("range {part} in [{group}] runs backwards"));
        }
        if b - a > 1 << 20 {
            return Err(format!("range {part} in [{group}] is too long"));
        }
        let width = if lo.starts_with('0') { lo.len() } else { 0 };
        for n in a..=b {
            for t in &tails {
                out.push(format!("{head}{n:0width$}{t}"));
            }
        }
    }
    Ok(out)
}

/// Expands Slurm's per-node counts: `2(x3),1` is 2, 2, 2, 1.
pub(crate) fn expand_counts(text: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim) {
        let bad = || format!("'{part}' is not N or N(xR)");
        let (n, times) = match part.split_once('(') {
            Some((n, rest)) => {
                let r = rest.strip_prefix('x').and_then(|r| r.strip_suffix(')')).ok_or_else(bad)?;
                (n, r.parse::<usize>().map_err(|_| bad())?)
            }
            None => (part, 1),
        };
        let n: usize = n.parse().map_err(|_| bad())?;
        if n == 0 || times == 0 || times > 1 << 20 {
            return Err(bad());
        }
        out.extend(std::iter::repeat_n(n, times));
    }
    Ok(out)
}

/// The address Slurm reaches node `name` at (its `NodeAddr`), for nodes whose names do not
/// resolve; asks `scontrol`.
pub(crate) fn slurm_node_addr(name: &str) -> Option<IpAddr> {
    let out = Command::new("scontrol").args(["-o", "show", "node", name]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let addr = text.split_whitespace().find_map(|w| w.strip_prefix("NodeAddr="))?;
    crate::addr::resolve(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &str) -> Vec<String> {
        expand_nodelist(list).unwrap()
    }

    #[test]
    fn slurm_host_lists() {
        // The forms of Slurm's documentation (hostlist expressions).
        assert_eq!(names("node[01-04,07]"), ["node01", "node02", "node03", "node04", "node07"]);
        assert_eq!(names("n1"), ["n1"]);
        assert_eq!(names("n[1-2],login,gpu[9-11]"), ["n1", "n2", "login", "gpu9", "gpu10", "gpu11"]);
        assert_eq!(names("tux[8-10]"), ["tux8", "tux9", "tux10"]);
        assert_eq!(names("tux[08-10]"), ["tux08", "tux09", "tux10"]);
        assert_eq!(names("rack[1-2]-n[01,03]"), ["rack1-n01", "rack1-n03", "rack2-n01", "rack2-n03"]);
        assert_eq!(names("a[3],b"), ["a3", "b"]);
        assert_eq!(names("node-[001-002].cluster"), ["node-001.cluster", "node-002.cluster"]);
        for bad in ["n[1-", "n]1", "n[a-b]", "n[3-1]", "n[[1]]", "a,,b", "", "n[-2]"] {
            assert!(expand_nodelist(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slurm_task_counts() {
        assert_eq!(expand_counts("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(expand_counts("4").unwrap(), [4]);
        assert_eq!(expand_counts("1,3(x2)").unwrap(), [1, 3, 3]);
        for bad in ["", "x", "2(3)", "2(x0)", "0", "2(x3", "-1"] {
            assert!(expand_counts(bad).is_err(), "{bad}");
        }
    }
}
