//! The CPUs a rank may run on, as its business card carries them: how a rank tells whether
//! the ranks of its host outnumber the CPUs it shares with them, whatever bound them (mprun's
//! `--bind-to`, another launcher, `taskset`) or if nothing did.

/// The CPUs this process may run on, ascending (`sched_getaffinity`); where that cannot be
/// asked (macOS, which cannot bind a process to CPUs), CPUs `0..n` for the parallelism the
/// standard library reports. mprun maps its bindings onto these too.
pub fn allowed() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    if let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        let cpus: Vec<usize> = (0..nix::sched::CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect();
        if !cpus.is_empty() {
            return cpus;
        }
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n).collect()
}

/// Parses a kernel CPU list (`0-3,8,10-11`, as in `Cpus_allowed_list`; empty for none),
/// ascending and without repeats; `None` if it is not one.
pub fn parse_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for item in text.trim().split(',').filter(|s| !s.is_empty()) {
        let (lo, hi) = match item.split_once('-') {
            Some((lo, hi)) => (lo.parse::<usize>().ok()?, hi.parse::<usize>().ok()?),
            None => {
                let cpu = item.parse::<usize>().ok()?;
                (cpu, cpu)
            }
        };
        // A typo guard: no kernel numbers CPUs past this.
        if lo > hi || hi >= 1 << 16 {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// `cpus` (ascending) as ranges: `0-3,8`.
pub(crate) fn encode(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// The CPUs of a business card's list ([`encode`]); `None` if it is not one, or empty.
pub(crate) fn decode(text: &str) -> Option<Vec<usize>> {
    parse_list(text).filter(|c| !c.is_empty())
}

/// Whether more ranks may run on this rank's CPUs (`mine`; `None`: unknown, taken as all
/// `cores` of the host) than it has CPUs. `host` holds the CPUs of every rank of this host,
/// this one included; an unknown set may run anywhere, so it shares every CPU.
pub(crate) fn outnumbered(mine: Option<&[usize]>, host: &[Option<&[usize]>], cores: usize) -> bool {
    let Some(mine) = mine else { return host.len() > cores };
    host.iter().filter(|o| o.is_none_or(|o| overlap(o, mine))).count() > mine.len()
}

/// [`outnumbered`] for every rank, from everyone's business card: the same on every rank
/// that reads the same cards. Ranks compete with every rank of their machine, also those of
/// other hosts that are namespaces or containers of it (cards of one machine id).
pub(crate) fn outnumbered_ranks(cards: &[super::Card], cores: usize) -> Vec<bool> {
    let mut machines: std::collections::HashMap<&str, Vec<Option<&[usize]>>> = std::collections::HashMap::new();
    for c in cards {
        machines.entry(c.machine_key()).or_default().push(c.cpus.as_deref());
    }
    cards.iter().map(|c| outnumbered(c.cpus.as_deref(), &machines[c.machine_key()], cores)).collect()
}

/// Whether two ascending CPU lists share a CPU.
fn overlap(a: &[usize], b: &[usize]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_round_trip() {
        for cpus in [vec![0], vec![0, 1, 2, 3], vec![0, 2, 3, 4, 9], vec![5, 7]] {
            assert_eq!(decode(&encode(&cpus)).unwrap(), cpus);
        }
        assert_eq!(encode(&[0, 1, 2, 3, 8]), "0-3,8");
        assert!(decode("3-1").is_none());
        assert!(decode("a").is_none());
        assert!(decode("").is_none());
        assert_eq!(decode("5,1-2,2").unwrap(), [1, 2, 5]);
    }

    #[test]
    fn ranks_outnumber_the_cpus_they_share() {
        let (c0, c1, both) = (&[0usize][..], &[1usize][..], &[0usize, 1][..]);
        // Two ranks bound to a core each: not outnumbered.
        assert!(!outnumbered(Some(c0), &[Some(c0), Some(c1)], 2));
        // Four ranks bound round-robin to two cores (`--bind-to core` wrapping): outnumbered.
        assert!(outnumbered(Some(c0), &[Some(c0), Some(c1), Some(c0), Some(c1)], 2));
        // Unbound ranks: four on two CPUs are, two are not.
        assert!(outnumbered(Some(both), &[Some(both); 4], 2));
        assert!(!outnumbered(Some(both), &[Some(both); 2], 2));
        // A rank whose CPUs are unknown shares every CPU; this rank's own unknown: by count.
        assert!(outnumbered(Some(c0), &[Some(c0), None], 2));
        assert!(!outnumbered(None, &[None, None], 2));
        assert!(outnumbered(None, &[None, None, None], 2));
        assert!(!overlap(&[0, 2, 4], &[1, 3, 5]) && overlap(&[0, 2, 4], &[3, 4]));
    }

    #[test]
    fn every_rank_is_judged_on_its_own_host() {
        let card = |host: &str, cpus: &[usize]| super::super::Card {
            host: host.into(),
            machine: None,
            pid: 1,
            tcp: None,
            rdma: None,
            links: Vec::new(),
            named: Vec::new(),
            cpus: Some(cpus.to_vec()),
            qps: None,
        };
        // Host a: two ranks bound to CPU 0 and one to CPU 1; host b: one rank.
        let cards = [card("a", &[0]), card("a", &[1]), card("a", &[0]), card("b", &[0])];
        assert_eq!(outnumbered_ranks(&cards, 2), [true, false, true, false]);
    }

    #[test]
    fn hosts_of_one_machine_share_its_cpus() {
        let card = |host: &str, machine: Option<&str>, cpus: &[usize]| super::super::Card {
            host: host.into(),
            machine: machine.map(String::from),
            pid: 1,
            tcp: None,
            rdma: None,
            links: Vec::new(),
            named: Vec::new(),
            cpus: Some(cpus.to_vec()),
            qps: None,
        };
        let m = Some("5f0e1a3c1b2d4c3e9f000123456789ab");
        // Two namespace hosts of one machine, each binding its first rank to CPU 0.
        let cards = [card("a", m, &[0]), card("b", m, &[0])];
        assert_eq!(outnumbered_ranks(&cards, 2), [true, true]);
        // Spread over the machine's cores, as mprun binds them.
        let cards = [card("a", m, &[0]), card("b", m, &[1])];
        assert_eq!(outnumbered_ranks(&cards, 2), [false, false]);
        // Three unbound ranks on three hosts of a machine with two cores.
        let cards = [card("a", m, &[0, 1]), card("b", m, &[0, 1]), card("c", m, &[0, 1])];
        assert_eq!(outnumbered_ranks(&cards, 2), [true, true, true]);
        // Without machine ids, hosts are machines of their own.
        let cards = [card("a", None, &[0]), card("b", None, &[0])];
        assert_eq!(outnumbered_ranks(&cards, 2), [false, false]);
    }
}
