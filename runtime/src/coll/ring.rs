//! The order of the ring algorithms (ring allreduce, ring allgather) on a fabric where not
//! every pair of hosts is one hop: a ring of Macs reaches its neighbours over Thunderbolt
//! RDMA and the others only over IP, so a ring in rank order may send every step over the
//! slow path. Every rank computes the same order from the business cards at start-up: a
//! cycle through the hosts along direct links (RDMA, or the hosts' shared memory), each
//! host's ranks in a row. Where every pair of hosts is direct (a mesh, one switch), or no
//! such cycle exists, the ring stays in rank order.

/// Most steps of the cycle search (a fabric of a few Macs needs a handful).
const SEARCH_STEPS: usize = 100_000;

/// What the fabric makes of the ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ring {
    /// Every pair of hosts is one hop: rank order is as good as any.
    OneHop,
    /// A cycle of hosts (by index) along direct links, not in host order.
    Follows(Vec<usize>),
    /// Some pairs are not direct and no cycle of direct links visits every host (or the
    /// cycle is host order itself): rank order.
    RankOrder,
}

/// The ring over hosts `0..n` where `direct(a, b)` says whether hosts a and b are one hop.
pub(crate) fn plan(n: usize, direct: impl Fn(usize, usize) -> bool) -> Ring {
    let d: Vec<Vec<bool>> = (0..n).map(|a| (0..n).map(|b| a != b && direct(a, b)).collect()).collect();
    if (0..n).all(|a| (0..n).all(|b| a == b || d[a][b])) {
        return Ring::OneHop;
    }
    let mut path = vec![0];
    let mut used = vec![false; n];
    used[0] = true;
    let mut steps = 0;
    if n >= 3 && cycle(&d, &mut path, &mut used, &mut steps) {
        if path.iter().enumerate().all(|(i, &h)| h == i) {
            return Ring::RankOrder;
        }
        return Ring::Follows(path);
    }
    Ring::RankOrder
}

/// Depth-first search for a Hamiltonian cycle from `path` (host 0 first, so the answer is
/// the same on every rank); the lowest-numbered next host first.
fn cycle(d: &[Vec<bool>], path: &mut Vec<usize>, used: &mut [bool], steps: &mut usize) -> bool {
    let last = *path.last().expect("starts at host 0");
    if path.len() == d.len() {
        return d[last][path[0]];
    }
    for next in 0..d.len() {
        *steps += 1;
        if *steps > SEARCH_STEPS {
            return false;
        }
        if !used[next] && d[last][next] {
            used[next] = true;
            path.push(next);
            if cycle(d, path, used, steps) {
                return true;
            }
            path.pop();
            used[next] = false;
        }
    }
    false
}

/// The ring position of each rank: hosts in `order`, each host's ranks in rank order
/// (`host_of[r]`: the host index of rank r).
pub(crate) fn positions(order: &[usize], host_of: &[usize]) -> Vec<usize> {
    let mut pos = vec![0; host_of.len()];
    let mut k = 0;
    for &h in order {
        for (r, _) in host_of.iter().enumerate().filter(|&(_, &x)| x == h) {
            pos[r] = k;
            k += 1;
        }
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cables(list: &[(usize, usize)]) -> impl Fn(usize, usize) -> bool + '_ {
        move |a, b| list.contains(&(a, b)) || list.contains(&(b, a))
    }

    #[test]
    fn a_mesh_is_one_hop_and_a_ring_in_rank_order_stays() {
        let mesh = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)];
        assert_eq!(plan(4, cables(&mesh)), Ring::OneHop);
        assert_eq!(plan(2, cables(&[(0, 1)])), Ring::OneHop);
        assert_eq!(plan(4, cables(&[(0, 1), (1, 2), (2, 3), (3, 0)])), Ring::RankOrder);
    }

    #[test]
    fn a_ring_cabled_out_of_rank_order_is_followed() {
        // Cables 0-2, 2-1, 1-3, 3-0.
        assert_eq!(plan(4, cables(&[(0, 2), (2, 1), (1, 3), (3, 0)])), Ring::Follows(vec![0, 2, 1, 3]));
        // Eight Macs in a ring 0-7-6-5-4-3-2-1 reversed is rank order.
        let rev: Vec<(usize, usize)> = (0..8).map(|i| (i, (i + 7) % 8)).collect();
        assert_eq!(plan(8, cables(&rev)), Ring::RankOrder);
    }

    #[test]
    fn a_chain_has_no_ring() {
        assert_eq!(plan(4, cables(&[(0, 1), (1, 2), (2, 3)])), Ring::RankOrder);
        assert_eq!(plan(3, |_, _| false), Ring::RankOrder);
    }

    #[test]
    fn ranks_of_a_host_sit_in_a_row() {
        // Ranks 0,1 on host 0, 2,3 on host 1, 4 on host 2; hosts ordered 0, 2, 1.
        assert_eq!(positions(&[0, 2, 1], &[0, 0, 1, 1, 2]), [0, 1, 3, 4, 2]);
    }
}
