//! Which pairs of ranks reach each other over RDMA, and over which cables.
//!
//! Thunderbolt RDMA is point to point: a Mac has one device per port, and each reaches only
//! the Mac at the other end of its cable. Every rank's business card says what it opened,
//! and every rank decides for every pair from the cards alone (so all agree on which pairs
//! use RDMA), in one of three ways:
//! - named: the hostfile names, per host and per peer host, the devices that reach it
//!   (`rdma=mac2:rdma_en2,mac3:rdma_en3+rdma_en4`, passed to ranks as `MPR_RDMA_PEERS`). The
//!   k-th device one end names towards the other is the k-th cable of the pair on both
//!   ends, as in MLX's hostfile.
//! - links: each device sits on an IPv4 link (Thunderbolt pairs `rdma_enN` with `enN`, and
//!   its GID is the interface's address); two devices on one subnet are the two ends of a
//!   cable. Cables are ordered by their lower address, which both ends see alike.
//! - one device each (a NIC on a switched fabric): it reaches every peer of its kind.
//!
//! A pair with several cables has several lanes: the first carries the frames whose order
//! matters, and large messages are striped over all of them.

use std::net::Ipv4Addr;

use crate::bootstrap::Card;

/// Whether two links are on one subnet (the two ends of one cable).
pub(crate) fn same_link(a: (Ipv4Addr, u8), b: (Ipv4Addr, u8)) -> bool {
    let mask = |bits: u8| if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits.min(32))) };
    a.1 == b.1 && u32::from(a.0) & mask(a.1) == u32::from(b.0) & mask(b.1) && a.0 != b.0
}

/// The lanes of the pair (`a`, `b`), as indices of `a`'s devices, in lane order (the same
/// order `b` computes for its own end); empty: the pair does not use RDMA.
pub(crate) fn lanes(a: &Card, b: &Card) -> Vec<usize> {
    if a.rdma.is_none() || a.rdma != b.rdma {
        return Vec::new();
    }
    if !a.named.is_empty() || !b.named.is_empty() {
        let towards = |c: &Card, host: &str| c.named.iter().find(|(h, _)| h == host).map(|(_, d)| d.clone());
        return match (towards(a, &b.host), towards(b, &a.host)) {
            (Some(mine), Some(theirs)) => mine.into_iter().take(theirs.len()).collect(),
            _ => Vec::new(),
        };
    }
    match (a.links.is_empty(), b.links.is_empty()) {
        (true, true) => vec![0],
        (false, false) => {
            // Every pair of devices on one subnet, keyed by its two addresses (lower first),
            // which both ends compute alike; then each device takes part in one cable at
            // most, in key order, so both ends pair the same devices even where several
            // devices of a host sit on one subnet.
            let mut candidates: Vec<((u32, u32), usize, usize)> = Vec::new();
            for (i, &la) in a.links.iter().enumerate() {
                for (j, &lb) in b.links.iter().enumerate().filter(|&(_, &lb)| same_link(la, lb)) {
                    let (x, y) = (u32::from(la.0), u32::from(lb.0));
                    candidates.push(((x.min(y), x.max(y)), i, j));
                }
            }
            candidates.sort_unstable();
            let (mut used_a, mut used_b, mut lanes) = (Vec::new(), Vec::new(), Vec::new());
            for (_, i, j) in candidates {
                if !used_a.contains(&i) && !used_b.contains(&j) {
                    used_a.push(i);
                    used_b.push(j);
                    lanes.push(i);
                }
            }
            lanes
        }
        _ => Vec::new(),
    }
}

/// The lanes of every pair of ranks once each device's queue pairs are shared out: `[a][b]`
/// are the lanes of `a` towards `b` (indices of `a`'s devices, in lane order, as
/// [`lanes`]), empty where the pair does not use RDMA. `apart(a, b)`: the pair may use RDMA
/// (shared memory does not serve it).
///
/// A card whose `qps` is set says its host's devices hold that many queue pairs each, for
/// all the host's ranks together (Thunderbolt: about 10 per `rdma_enN`, whichever process
/// opens them): each lane takes one queue pair on a device at each end, and a lane whose
/// device is full at either end is left out, so a pair may keep fewer cables or none (it
/// then goes over TCP). Each pair gets one lane before any gets a second. Pairs are served
/// in an order every rank computes alike: first the
/// pairs of the hosts' first ranks (the leaders, which carry the hierarchical collectives),
/// then by the higher of the two local ranks, then the lower, then rank order. Cards without
/// `qps` (a device per process, or a NIC's thousands) keep every lane.
pub(crate) fn plan(cards: &[Card], apart: impl Fn(usize, usize) -> bool) -> (Vec<Vec<Vec<usize>>>, HostQps) {
    let n = cards.len();
    let local: Vec<usize> = (0..n).map(|r| cards[..r].iter().filter(|c| c.host == cards[r].host).count()).collect();
    let mut pairs: Vec<(usize, usize)> = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b))).collect();
    pairs.sort_by_key(|&(a, b)| (local[a].max(local[b]), local[a].min(local[b]), a, b));
    let all: Vec<(usize, usize, Vec<usize>, Vec<usize>)> = pairs
        .into_iter()
        .filter(|&(a, b)| apart(a, b))
        .map(|(a, b)| (a, b, lanes(&cards[a], &cards[b]), lanes(&cards[b], &cards[a])))
        .filter(|p| !p.2.is_empty())
        .collect();
    let mut used = HostQps::new();
    // Per pair, the lane numbers kept.
    let mut kept: Vec<Vec<usize>> = vec![Vec::new(); all.len()];
    // One lane per pair first, on the first cable with room at both ends, so that a second
    // cable serves more pairs before any pair gets two; then the other lanes where room is left.
    for one in [true, false] {
        for (i, (a, b, la, lb)) in all.iter().enumerate() {
            let ends = |k: usize| ((cards[*a].host.clone(), la[k]), (cards[*b].host.clone(), lb[k]));
            let load = |used: &HostQps, e: &(String, usize)| used.get(e).copied().unwrap_or(0);
            let room = |used: &HostQps, c: &Card, e: &(String, usize)| c.qps.is_none_or(|cap| load(used, e) < cap);
            // The lanes with room at both ends, the least loaded first (so a pair's first
            // lane spreads the pairs over the cables).
            let mut open: Vec<usize> = (0..la.len().min(lb.len()))
                .filter(|k| !kept[i].contains(k))
                .filter(|&k| {
                    let (ea, eb) = ends(k);
                    room(&used, &cards[*a], &ea) && room(&used, &cards[*b], &eb)
                })
                .collect();
            open.sort_by_key(|&k| {
                let (ea, eb) = ends(k);
                (load(&used, &ea).max(load(&used, &eb)), k)
            });
            if one {
                open.truncate(usize::from(kept[i].is_empty()));
            }
            for k in open {
                let (ea, eb) = ends(k);
                if room(&used, &cards[*a], &ea) && room(&used, &cards[*b], &eb) {
                    *used.entry(ea).or_default() += 1;
                    *used.entry(eb).or_default() += 1;
                    kept[i].push(k);
                }
            }
        }
    }
    let mut out = vec![vec![Vec::new(); n]; n];
    for ((a, b, la, lb), mut ks) in all.into_iter().zip(kept) {
        ks.sort_unstable();
        out[a][b] = ks.iter().map(|&k| la[k]).collect();
        out[b][a] = ks.iter().map(|&k| lb[k]).collect();
    }
    (out, used)
}

/// Queue pairs per device of a host, `(host, device index)`: what [`plan`] gave out.
pub(crate) type HostQps = std::collections::HashMap<(String, usize), usize>;

/// A card's RDMA devices, for messages.
pub(crate) fn describe(c: &Card) -> String {
    if !c.named.is_empty() {
        let each = |(h, d): &(String, Vec<usize>)| format!("{} device(s) towards {h}", d.len());
        return format!("devices named in the hostfile: {}", c.named.iter().map(each).collect::<Vec<_>>().join(", "));
    }
    if c.links.is_empty() {
        return "one device, no link named".into();
    }
    c.links.iter().map(|(ip, bits)| format!("{ip}/{bits}")).collect::<Vec<_>>().join(", ")
}

/// Per peer host, the indices of a rank's devices that reach it, in lane order.
pub(crate) type Named = Vec<(String, Vec<usize>)>;

/// Parses `MPR_RDMA_PEERS`: `HOST:DEV[+DEV...]` per peer host, comma-separated (what mprun
/// makes of the hostfile's per-peer `rdma=`). Returns the devices to open (each once, in
/// the order first named) and, per peer host, the indices of its devices among them.
pub(crate) fn parse_named(text: &str) -> Result<(Vec<String>, Named), String> {
    let mut devices: Vec<String> = Vec::new();
    let mut named: Named = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((host, devs)) = item.rsplit_once(':').filter(|(h, d)| !h.is_empty() && !d.is_empty()) else {
            return Err(format!("'{item}': expected HOST:DEVICE[+DEVICE...]"));
        };
        if named.iter().any(|(h, _)| h == host) {
            return Err(format!("host {host} is named twice"));
        }
        let mut idx = Vec::new();
        for d in devs.split('+').map(str::trim) {
            if d.is_empty() {
                return Err(format!("'{item}': an empty device name"));
            }
            let i = devices.iter().position(|x| x == d).unwrap_or_else(|| {
                devices.push(d.to_string());
                devices.len() - 1
            });
            if idx.contains(&i) {
                return Err(format!("'{item}': device {d} named twice for one peer"));
            }
            idx.push(i);
        }
        named.push((host.to_string(), idx));
    }
    Ok((devices, named))
}

/// The address of a GID that holds an IPv4 address (`::ffff:a.b.c.d`, as Thunderbolt and
/// RoCE v2 over IPv4 give).
pub(crate) fn gid_ipv4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    (gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff)
        .then(|| Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
}

/// Whether a GID holds a link-local address: fe80::/10, or IPv4 169.254/16 (which macOS
/// gives every Thunderbolt interface: every port shares that subnet, so it names no cable).
pub(crate) fn link_local_gid(gid: &[u8; 16]) -> bool {
    (gid[0] == 0xfe && gid[1] & 0xc0 == 0x80) || gid_ipv4(gid).is_some_and(|ip| ip.is_link_local())
}

/// A GID as an address: dotted IPv4 when it is IPv4-mapped, else IPv6.
pub(crate) fn gid_text(gid: &[u8; 16]) -> String {
    match gid_ipv4(gid) {
        Some(ip) => ip.to_string(),
        None => std::net::Ipv6Addr::from(*gid).to_string(),
    }
}

/// The error of a Thunderbolt interface without a routable IPv4 address (`have`: the
/// addresses it has), with the command that gives it one.
pub(crate) fn no_address(iface: &str, device: &str, have: &[String]) -> String {
    format!(
        "interface {iface} (device {device}) has no IPv4 address but link-local ones ({}): give both ends of \
         its cable an address on a subnet of their own (`sudo ifconfig {iface} inet 192.168.200.1/30` here, \
         .2 at the other end), or run `mpr-fabric setup --assign`",
        if have.is_empty() { "none".to_string() } else { have.join(", ") }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(host: &str, links: &[(&str, u8)]) -> Card {
        Card {
            host: host.into(),
            machine: None,
            pid: 1,
            tcp: None,
            rdma: Some("soft".into()),
            links: links.iter().map(|&(ip, b)| (ip.parse().unwrap(), b)).collect(),
            named: Vec::new(),
            cpus: None,
            qps: None,
        }
    }

    #[test]
    fn two_cables_give_two_lanes_in_the_same_order_on_both_ends() {
        // a's second device and b's first are cable 10.9.1.0/30; a's first and b's second
        // are 10.9.2.0/30: both ends order them by the lower address.
        let a = card("a", &[("10.9.2.1", 30), ("10.9.1.1", 30), ("10.9.3.1", 30)]);
        let b = card("b", &[("10.9.1.2", 30), ("10.9.2.2", 30)]);
        assert_eq!(lanes(&a, &b), [1, 0]);
        assert_eq!(lanes(&b, &a), [0, 1]);
        let c = card("c", &[("10.9.3.2", 30)]);
        assert_eq!(lanes(&a, &c), [2]);
        assert!(lanes(&b, &c).is_empty(), "no cable between b and c");
    }

    #[test]
    fn devices_sharing_a_subnet_pair_one_to_one_alike_at_both_ends() {
        // Two devices of d on one /24 against one of e: one cable, the same at both ends.
        let d = card("d", &[("10.7.0.5", 24), ("10.7.0.1", 24)]);
        let e = card("e", &[("10.7.0.9", 24)]);
        assert_eq!(lanes(&d, &e), [1]);
        assert_eq!(lanes(&e, &d), [0]);
        // Two against two on one subnet: two lanes, and lane k joins the same pair of
        // devices from both sides.
        let f = card("f", &[("10.7.0.2", 24), ("10.7.0.8", 24)]);
        let (df, fd) = (lanes(&d, &f), lanes(&f, &d));
        assert_eq!((df.len(), fd.len()), (2, 2));
        for k in 0..2 {
            let (x, y) = (d.links[df[k]].0, f.links[fd[k]].0);
            assert!(same_link(d.links[df[k]], f.links[fd[k]]), "lane {k}: {x} and {y}");
        }
        assert_ne!(df[0], df[1]);
    }

    #[test]
    fn one_device_each_reaches_every_peer_of_its_kind() {
        let (a, mut b) = (card("a", &[]), card("b", &[]));
        assert_eq!(lanes(&a, &b), [0]);
        b.rdma = Some("verbs".into());
        assert!(lanes(&a, &b).is_empty(), "devices of other kinds");
        assert_eq!(lanes(&a, &card("a", &[])), [0], "one host, when shared memory does not serve it");
        assert!(lanes(&a, &card("c", &[("10.9.1.2", 30)])).is_empty(), "one device against links");
    }

    #[test]
    fn devices_named_per_peer_beat_the_links() {
        let mut a = card("mac1", &[("10.9.1.1", 30)]);
        let mut b = card("mac2", &[("10.9.1.2", 30)]);
        let mut c = card("mac3", &[]);
        a.named = vec![("mac2".into(), vec![0, 1]), ("mac3".into(), vec![2])];
        b.named = vec![("mac1".into(), vec![1, 0])];
        c.named = vec![("mac1".into(), vec![0])];
        assert_eq!(lanes(&a, &b), [0, 1]);
        assert_eq!(lanes(&b, &a), [1, 0]);
        assert_eq!(lanes(&a, &c), [2]);
        assert!(lanes(&b, &c).is_empty(), "neither names the other");
        b.named = vec![("mac1".into(), vec![1])];
        assert_eq!(lanes(&a, &b), [0], "as many lanes as the shorter list");
        assert!(describe(&a).contains("2 device(s) towards mac2"), "{}", describe(&a));
    }

    #[test]
    fn named_devices_parse_with_clear_errors() {
        let (devs, named) = parse_named("mac2:rdma_en2, mac3:rdma_en3+rdma_en4,mac4:rdma_en2").unwrap();
        assert_eq!(devs, ["rdma_en2", "rdma_en3", "rdma_en4"]);
        assert_eq!(named, [("mac2".into(), vec![0]), ("mac3".into(), vec![1, 2]), ("mac4".into(), vec![0])]);
        assert_eq!(parse_named("mac2").unwrap_err(), "'mac2': expected HOST:DEVICE[+DEVICE...]");
        assert_eq!(parse_named("mac2:").unwrap_err(), "'mac2:': expected HOST:DEVICE[+DEVICE...]");
        assert_eq!(parse_named("mac2:a+").unwrap_err(), "'mac2:a+': an empty device name");
        assert_eq!(parse_named("m:a,m:b").unwrap_err(), "host m is named twice");
        assert_eq!(parse_named("m:a+a").unwrap_err(), "'m:a+a': device a named twice for one peer");
    }

    #[test]
    fn an_ipv4_gid_gives_its_address() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 9, 1, 2]);
        assert_eq!(gid_ipv4(&gid), Some(Ipv4Addr::new(10, 9, 1, 2)));
        gid[0] = 0xfe;
        gid[1] = 0x80;
        assert_eq!(gid_ipv4(&gid), None, "link-local IPv6");
    }

    /// Two Macs with 4 ranks each and 10 queue pairs per device for the whole host: 10 of the
    /// 16 pairs get RDMA, the leaders' first; no device holds more than 10. With two cables
    /// every pair gets one, 8 pairs per cable, and the room left (2 per device) gives the first
    /// pairs (4, the leaders among them) their second cable.
    #[test]
    fn queue_pairs_are_shared_out_per_device_across_the_ranks_of_a_host() {
        let mac = |host: &str, links: &[(&str, u8)]| Card { qps: Some(10), ..card(host, links) };
        let mut cards: Vec<Card> = (0..4).map(|_| mac("a", &[("10.9.1.1", 30)])).collect();
        cards.extend((0..4).map(|_| mac("b", &[("10.9.1.2", 30)])));
        let apart = |a: usize, b: usize| (a < 4) != (b < 4);
        let (p, used) = plan(&cards, apart);
        let rdma: Vec<(usize, usize)> =
            (0..4).flat_map(|a| (4..8).map(move |b| (a, b))).filter(|&(a, b)| !p[a][b].is_empty()).collect();
        assert_eq!(rdma.len(), 10, "{rdma:?}");
        assert!(rdma.contains(&(0, 4)), "the leaders' pair: {rdma:?}");
        assert!(!rdma.contains(&(3, 7)), "the last pair: {rdma:?}");
        assert_eq!(used[&("a".to_string(), 0)], 10);
        assert_eq!(used[&("b".to_string(), 0)], 10);
        for (a, row) in p.iter().enumerate() {
            for (b, lanes) in row.iter().enumerate() {
                assert_eq!(lanes.is_empty(), p[b][a].is_empty(), "{a} {b}");
                assert!(apart(a, b) || lanes.is_empty(), "{a} {b}");
            }
        }
        // Two cables: every pair, one lane each, 8 queue pairs per device.
        let two = |host: &str, x: &str, y: &str| mac(host, &[(x, 30), (y, 30)]);
        let mut cards: Vec<Card> = (0..4).map(|_| two("a", "10.9.1.1", "10.9.2.1")).collect();
        cards.extend((0..4).map(|_| two("b", "10.9.1.2", "10.9.2.2")));
        let (p, used) = plan(&cards, apart);
        assert!((0..4).all(|a| (4..8).all(|b| !p[a][b].is_empty() && p[a][b].len() == p[b][a].len())), "{p:?}");
        assert_eq!(used.values().copied().collect::<Vec<_>>(), [10; 4]);
        assert_eq!(p[0][4], [0, 1], "the leaders stripe over both cables");
        let two_lanes = (0..4).flat_map(|a| (4..8).map(move |b| (a, b))).filter(|&(a, b)| p[a][b].len() == 2).count();
        assert_eq!(two_lanes, 4, "{p:?}");
        // Without a host-wide count (a device per process), every lane stays.
        let mut cards: Vec<Card> = (0..4).map(|_| card("a", &[("10.9.1.1", 30), ("10.9.2.1", 30)])).collect();
        cards.extend((0..4).map(|_| card("b", &[("10.9.1.2", 30), ("10.9.2.2", 30)])));
        let (p, _) = plan(&cards, apart);
        assert!((0..4).all(|a| (4..8).all(|b| p[a][b].len() == 2)));
    }
}
