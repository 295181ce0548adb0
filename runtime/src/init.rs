//! Start-up: bootstrap, business cards, transports per peer, the engine.

use crate::bootstrap::{Bootstrap, Card};
use crate::engine::{Engine, PeerLimits};
use crate::error::Error;
use crate::progress::{Runtime, WaitPolicy, SELF_ROUTE};
use crate::transport::shm::segment::Segment;
use crate::transport::shm::{ShmConfig, ShmTransport};
use crate::transport::tcp::{addr, TcpListening};
use crate::transport::verbs::{self, provider::QpAddr, transport::VerbsTransport};
use crate::transport::Transport;

/// Which transports this job may use (`MPR_TRANSPORTS`, a comma list of `shm`, `tcp` and
/// `rdma`; default all: shared memory within a host, RDMA between hosts whose devices match,
/// TCP otherwise).
#[derive(Clone, Copy, Debug)]
struct Allowed {
    shm: bool,
    tcp: bool,
    rdma: bool,
}

impl Allowed {
    fn from_env() -> Result<Allowed, Error> {
        let Ok(list) = std::env::var("MPR_TRANSPORTS") else { return Ok(Allowed { shm: true, tcp: true, rdma: true }) };
        let mut a = Allowed { shm: false, tcp: false, rdma: false };
        for t in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            match t {
                "shm" => a.shm = true,
                "tcp" => a.tcp = true,
                "rdma" => a.rdma = true,
                other => {
                    return Err(Error::Bootstrap(format!(
                        "MPR_TRANSPORTS={list}: unknown transport {other:?} (this build has shm, tcp, rdma)"
                    )))
                }
            }
        }
        if !a.shm && !a.tcp && !a.rdma {
            return Err(Error::Bootstrap(format!("MPR_TRANSPORTS={list:?} names no transport")));
        }
        Ok(a)
    }
}

/// Name of the job's segment on `host`: `/mpr-<jobid>-<hash of host>`.
fn segment_name(jobid: &str, host: &str) -> String {
    // FNV-1a: a short, stable tag for the host name.
    let h = host.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    format!("/mpr-{jobid}-{:08x}", h as u32)
}

/// Builds this rank's runtime.
pub(crate) fn start() -> Result<Runtime, Error> {
    crate::env::check()?;
    let mut slot = Some(Bootstrap::from_env()?);
    let started = start_with(&mut slot);
    if let (Err(e), Some(boot)) = (&started, slot.as_mut()) {
        // Under mprun the rank's exit ends the job; a foreign launcher (srun without -K, a
        // PMIx server) may leave the others waiting for it in a fence: end the job.
        if boot.foreign() && boot.size > 1 {
            crate::say::say!("mpr: rank {}: start-up failed: {e}; asking the launcher to end the job", boot.rank);
            // The launcher forwards output apart from its PMI service (srun's I/O and its
            // step daemons): an abort sent at once can end the step before this line reached
            // the user. Give the forwarding a head start.
            std::thread::sleep(std::time::Duration::from_millis(500));
            boot.abort(1, &format!("rank {} start-up failed: {e}", boot.rank));
        }
    }
    started
}

/// Builds the runtime on the bootstrap in `slot`, which it takes once all went well.
fn start_with(slot: &mut Option<Bootstrap>) -> Result<Runtime, Error> {
    let boot = slot.as_mut().expect("a bootstrap to start on");
    let allowed = Allowed::from_env()?;
    let me = boot.rank;
    // Listen before the exchange, so peers can connect as soon as they read our card.
    // An address we cannot determine is only an error if a peer turns out to be remote.
    let (listen_ip, addr_err) = match addr::listen_addr(boot.one_host) {
        Ok(ip) => (ip, None),
        Err(e) => (std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), Some(e)),
    };
    // TCP also carries the liveness side channel of RDMA peers.
    let listening =
        if (allowed.tcp || allowed.rdma) && boot.size > 1 { Some(TcpListening::bind(listen_ip)?) } else { None };
    // RDMA serves peers on other hosts (or every peer, when shared memory is not allowed): a
    // job on one host does not look for a device.
    let want_rdma = allowed.rdma && boot.size > 1 && (!boot.one_host || !allowed.shm);
    let mut rdma = if want_rdma { verbs::select::open(listen_ip, me)? } else { Err("not needed".to_string()) };
    let my_cpus = crate::bootstrap::cpus::allowed();
    // Before the card goes out: a peer that has it may read this rank's memory at once.
    if allowed.shm {
        crate::transport::shm::admit_siblings();
    }
    let card = Card {
        host: boot.host.clone(),
        machine: crate::bootstrap::machine::id(),
        pid: std::process::id(),
        tcp: listening.as_ref().map(|l| l.addr()),
        rdma: rdma.as_ref().ok().map(|o| o.kind.clone()),
        links: rdma.as_ref().map(|o| o.links.clone()).unwrap_or_default(),
        named: rdma.as_ref().map(|o| o.named.clone()).unwrap_or_default(),
        cpus: Some(my_cpus.clone()),
        qps: rdma.as_ref().ok().and_then(|o| o.shared_qps),
    };
    let cards = boot.exchange(&card)?;
    let same_host: Vec<bool> = cards.iter().map(|c| c.host == card.host).collect();
    let locals: Vec<usize> = if allowed.shm { (0..boot.size).filter(|&r| same_host[r]).collect() } else { vec![me] };
    let nlocal = locals.len();

    let mut transports: Vec<Box<dyn Transport>> = Vec::new();
    let mut route = vec![SELF_ROUTE; boot.size];
    let self_limits = PeerLimits {
        max_payload: usize::MAX,
        eager: 64 << 10,
        bulk_read: false,
        expose: false,
        bulk_write: false,
        split_min: usize::MAX,
        head: 0,
    };
    // Ranks of a host compete for its CPUs whatever carries their messages.
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let crowded = crate::bootstrap::cpus::outnumbered_ranks(&cards, cores);
    let outnumbered = crowded[me];
    let split_min = split_min(crate::env::parsed("MPR_SPLIT_COPY_MIN"), outnumbered);
    let mut limits = vec![self_limits; boot.size];
    // Per shared-memory peer that gets no single copy: why (for the verbose line).
    let mut streamed: Vec<Option<String>> = vec![None; boot.size];

    // The segment fence is global (PMI has no per-host fence): every rank enters it when any
    // host has a segment to set up, which every rank can tell from the cards.
    let any_segment =
        allowed.shm && (0..boot.size).any(|r| cards.iter().filter(|c| c.host == cards[r].host).count() > 1);
    let fenced = if any_segment && nlocal <= 1 { Some(boot.fence()) } else { None };
    if let Some(f) = fenced {
        f?;
    }
    if nlocal > 1 {
        let cfg = ShmConfig::from_env(nlocal);
        let name = segment_name(&boot.jobid, &card.host);
        let leader = locals[0] == me;
        let created = if leader { Some(Segment::create(&name, cfg.geometry(nlocal))) } else { None };
        // Everyone fences even if the leader failed, so nobody waits forever on it; the
        // leader's error goes with it, so every rank of the host can say what went wrong.
        let fail_key = format!("mpr-shm-fail-{}", locals[0]);
        if let Some(Err(e)) = &created {
            let why = match e {
                Error::Bootstrap(m) => m.clone(),
                other => other.to_string(),
            };
            let _ = boot.put(&fail_key, &hex(&why));
        }
        let fenced = boot.fence();
        let seg = match created {
            Some(r) => r?,
            None => {
                fenced?;
                Segment::open(&name, nlocal).map_err(|e| {
                    match boot.get(locals[0], &fail_key).ok().and_then(|h| unhex(&h)) {
                        Some(why) => Error::Bootstrap(format!("rank {} could not make this host's {why}", locals[0])),
                        None => e,
                    }
                })?
            }
        };
        if seg.attach() {
            Segment::unlink(&name);
        }
        let shm = ShmTransport::new(seg, &locals, me, boot.size, &cfg);
        let caps = shm.caps();
        let idx = transports.len();
        transports.push(Box::new(shm));
        for &r in locals.iter().filter(|&&r| r != me) {
            route[r] = idx;
            limits[r] = peer_limits(&caps, split_min, outnumbered);
            match cfg.single_copy_to(cards[r].pid) {
                Ok(()) => {
                    // Mid-size messages too go by the receiver's single read.
                    if let Some(eager) = cfg.single_copy_eager(outnumbered) {
                        let l = &mut limits[r];
                        (l.eager, l.head) = (l.eager.min(eager), l.head.min(eager));
                    }
                }
                Err(why) => {
                    limits[r].bulk_read = false;
                    limits[r].bulk_write = false;
                    streamed[r] = Some(why);
                }
            }
        }
    }
    let remote: Vec<usize> = (0..boot.size).filter(|&r| r != me && route[r] == SELF_ROUTE).collect();
    // RDMA between two ranks when both opened a device of the same kind and shared memory
    // does not serve them; every rank can tell from the cards whether any pair does.
    let shm_pair = |a: usize, b: usize| allowed.shm && cards[a].host == cards[b].host;
    // Where a host's ranks share each device's queue pairs (Thunderbolt), they are shared out
    // first; otherwise every pair takes the lanes it has.
    let planned = cards.iter().any(|c| c.qps.is_some()).then(|| verbs::fabric::plan(&cards, |a, b| !shm_pair(a, b)));
    let rdma_pair = |a: usize, b: usize| match &planned {
        Some((plan, _)) => plan[a][b].clone(),
        None if shm_pair(a, b) => Vec::new(),
        None => verbs::fabric::lanes(&cards[a], &cards[b]),
    };
    // Each RDMA peer with the index of this rank's device that reaches it, once per cable
    // (lane), in lane order.
    let rdma_peers: Vec<(usize, usize)> =
        remote.iter().flat_map(|&p| rdma_pair(me, p).into_iter().map(move |d| (p, d))).collect();
    let any_rdma = (0..boot.size).any(|a| (a + 1..boot.size).any(|b| !rdma_pair(a, b).is_empty()));
    if let Some(&p) = remote.iter().find(|&&p| !allowed.tcp && !rdma_peers.iter().any(|r| r.0 == p)) {
        let why = match &rdma {
            Err(e) => e.clone(),
            Ok(o) => match &cards[p].rdma {
                Some(k) if *k == o.kind && !verbs::fabric::lanes(&card, &cards[p]).is_empty() => format!(
                    "the queue pairs of the devices between host {} and host {} are all taken (each holds {} for \
                     all the ranks of its host): run fewer ranks per host, or let TCP serve the other pairs",
                    card.host,
                    cards[p].host,
                    card.qps.or(cards[p].qps).unwrap_or_default()
                ),
                Some(k) if *k == o.kind => format!(
                    "no device of this rank reaches rank {p} (this rank: {}; rank {p}: {})",
                    verbs::fabric::describe(&card),
                    verbs::fabric::describe(&cards[p])
                ),
                Some(k) => format!("rank {p} opened a {k} device, this rank a {} one", o.kind),
                None => format!("rank {p} on host {} has no RDMA device", cards[p].host),
            },
        };
        let allowed_list = std::env::var("MPR_TRANSPORTS").unwrap_or_default();
        return Err(Error::Bootstrap(format!(
            "MPR_TRANSPORTS={allowed_list}: no transport reaches rank {p} on host {} from host {}: RDMA unavailable: {why}",
            cards[p].host, card.host
        )));
    }
    let mut names: Vec<&'static str> = vec![""; boot.size];
    // Per RDMA peer: the devices that reach it (for the verbose line).
    let mut via: Vec<String> = vec![String::new(); boot.size];
    if let Some(&r) = remote.first() {
        let Some(listening) = listening else {
            return Err(Error::Bootstrap(format!(
                "no transport reaches rank {r} on host {} from host {}: MPR_TRANSPORTS allows only shared memory",
                cards[r].host, card.host
            )));
        };
        if let Some(e) = addr_err.filter(|_| remote.iter().any(|&p| cards[p].host != card.host)) {
            return Err(e);
        }
        let mut peers = Vec::new();
        for &p in &remote {
            let a = cards[p].tcp.ok_or_else(|| Error::Bootstrap(format!("rank {p} publishes no TCP address")))?;
            peers.push((p, a));
        }
        let tcp = listening.establish(me, boot.size, &peers, &boot.secret, outnumbered)?;
        let caps = tcp.caps();
        for &p in &remote {
            names[p] = caps.name;
            limits[p] = peer_limits(&caps, usize::MAX, outnumbered);
        }
        let mut tcp: Box<dyn Transport> = Box::new(tcp);
        if any_rdma {
            let devices: Vec<String> =
                rdma.as_ref().map(|o| o.devs.iter().map(|d| d.name()).collect()).unwrap_or_default();
            for &(p, d) in &rdma_peers {
                let sep = if via[p].is_empty() { " via " } else { " + " };
                via[p] += &format!("{sep}{}", devices[d]);
            }
            // Queue pairs open on each device of this host, for the end line: shared out
            // across the host's ranks, or this rank's own.
            let host_qps: Vec<usize> = (0..devices.len())
                .map(|d| match (&planned, card.qps) {
                    (Some((_, used)), Some(_)) => used.get(&(card.host.clone(), d)).copied().unwrap_or(0),
                    _ => rdma_peers.iter().filter(|p| p.1 == d).count(),
                })
                .collect();
            tcp = connect_rdma(boot, &mut rdma, &rdma_peers, tcp, host_qps)?;
            let caps = tcp.caps();
            for &(p, _) in &rdma_peers {
                names[p] = caps.name;
                limits[p] = peer_limits(&caps, usize::MAX, outnumbered);
            }
        }
        let idx = transports.len();
        transports.push(tcp);
        for &p in &remote {
            route[p] = idx;
        }
    } else if any_rdma {
        // Others exchange queue-pair addresses: take part in their fences.
        boot.fence()?;
    }
    if crate::env::verbose() {
        for (peer, &r) in route.iter().enumerate().filter(|&(p, _)| p != me) {
            let c = transports[r].caps();
            let name = if names[peer].is_empty() { c.name } else { names[peer] };
            let l = &limits[peer];
            let bulk = match (l.bulk_read, l.expose) {
                (true, true) => "reads of registered memory",
                (true, false) => "single-copy reads",
                _ => "pipelined frames",
            };
            let why = streamed[peer].as_ref().map_or(String::new(), |w| format!(", no single copy: {w}"));
            let head = match l.streamed_head() {
                0 => String::new(),
                n => format!(", the first {n} B with the request"),
            };
            crate::say::say!(
                "mpr: rank {me} -> rank {peer}: {name} (eager up to {} B, large messages by {bulk}{head}{why}){}",
                l.eager,
                via[peer]
            );
        }
        let cpus = crate::bootstrap::cpus::encode(&my_cpus);
        let waits = if outnumbered { "outnumbered: waits yield at once" } else { "waits spin, then yield" };
        let here = same_host.iter().filter(|&&h| h).count();
        let machine = cards.iter().filter(|c| c.machine_key() == card.machine_key()).count();
        crate::say::say!(
            "mpr: rank {me}: CPUs {cpus}, {here} rank(s) on this host, {machine} on this machine, {waits}"
        );
    }
    let engine = Engine::new(me, limits);
    let boot = slot.take().expect("the bootstrap is still here");
    let mut rt = Runtime::new(engine, boot, transports, route, WaitPolicy::from_env(outnumbered));
    let mut names: Vec<&str> = Vec::new();
    let of: Vec<u32> = cards
        .iter()
        .map(|c| match names.iter().position(|h| *h == c.host) {
            Some(i) => i as u32,
            None => {
                names.push(&c.host);
                (names.len() - 1) as u32
            }
        })
        .collect();
    let ring = if any_rdma { fabric_ring(&of, |a, b| !rdma_pair(a, b).is_empty(), me == 0) } else { Vec::new() };
    rt.hosts = crate::progress::Hosts { of, shm: allowed.shm, outnumbered: crowded.contains(&true), ring };
    Ok(rt)
}

/// Sets up RDMA towards `peers`: queue pairs, their addresses through the key-value service
/// (`mpr-qp-<from>-<to>-<lane>`), connection. `side` (TCP to the same peers and maybe others) becomes
/// the liveness side channel and serves the other peers. Every rank calls this when any pair
/// of ranks uses RDMA (the fence is global).
fn connect_rdma(
    boot: &mut Bootstrap,
    rdma: &mut Result<verbs::select::Opened, String>,
    peers: &[(usize, usize)],
    side: Box<dyn Transport>,
    host_qps: Vec<usize>,
) -> Result<Box<dyn Transport>, Error> {
    let me = boot.rank;
    let prepared = match rdma.as_mut() {
        Ok(o) if !peers.is_empty() => VerbsTransport::prepare(&mut o.devs, peers),
        _ => Ok(Vec::new()),
    };
    let published = prepared.as_ref().map_err(Clone::clone).and_then(|prep| {
        prep.iter().try_for_each(|p| boot.put(&format!("mpr-qp-{me}-{}-{}", p.peer, p.lane), &p.addr.encode()))
    });
    // Everyone fences, also after a failure here, so nobody waits forever.
    let fenced = boot.fence();
    let prepared = prepared?;
    published?;
    fenced?;
    if peers.is_empty() {
        return Ok(side);
    }
    let mut addrs = Vec::new();
    for p in &prepared {
        let key = format!("mpr-qp-{}-{me}-{}", p.peer, p.lane);
        let v = boot.get(p.peer, &key)?;
        addrs.push(QpAddr::decode(&v).ok_or_else(|| Error::Bootstrap(format!("bad queue-pair address {key}={v}")))?);
    }
    let opened = std::mem::replace(rdma, Err("in use".into())).map_err(Error::Bootstrap)?;
    let mut t = VerbsTransport::connect(opened.devs, me, boot.size, prepared, &addrs, side)?;
    t.host_qps = host_qps;
    Ok(Box::new(t))
}

/// The ring the ring collectives follow on a fabric of cables (see `coll::ring`): the
/// position of each rank, or empty for rank order. `host_of`: each rank's host index;
/// `direct(a, b)`: ranks a and b are one hop (RDMA). `say`: print the choice under
/// `MPR_VERBOSE` (one rank does).
fn fabric_ring(host_of: &[u32], direct: impl Fn(usize, usize) -> bool, say: bool) -> Vec<usize> {
    use crate::coll::ring::{self, Ring};
    let host_of: Vec<usize> = host_of.iter().map(|&h| h as usize).collect();
    let n = host_of.iter().max().map_or(0, |&h| h + 1);
    // The first rank of each host stands for it (a host's ranks share its devices).
    let first: Vec<usize> = (0..n).map(|h| host_of.iter().position(|&x| x == h).expect("numbered")).collect();
    let plan = ring::plan(n, |a, b| direct(first[a], first[b]));
    if say && crate::env::verbose() {
        let what = match &plan {
            Ring::OneHop => "every pair of hosts is one hop: ring collectives go in rank order".into(),
            Ring::Follows(order) => {
                let hosts: Vec<String> = order.iter().map(|&h| format!("of rank {}", first[h])).collect();
                format!("ring collectives follow the cables: hosts in the order {}", hosts.join(", "))
            }
            Ring::RankOrder => {
                "ring collectives go in rank order (along the cables, or no ring of cables reaches every host)".into()
            }
        };
        crate::say::say!("mpr: {what}");
    }
    match plan {
        Ring::Follows(order) => ring::positions(&order, &host_of),
        _ => Vec::new(),
    }
}

/// The smallest message copied by sender and receiver at once (`MPR_SPLIT_COPY_MIN`, `set`;
/// 0: never). By default 64 KiB, but never when ranks outnumber cores: the sender's half then
/// waits until it gets a core, and no core is idle for it to use (4 ranks on 2 cores,
/// all-to-all of 128 KiB to 1 MiB blocks: 0.83-0.88x of the time with split copies).
fn split_min(set: Option<usize>, outnumbered: bool) -> usize {
    match set {
        Some(0) => usize::MAX,
        Some(n) => n,
        None if outnumbered => usize::MAX,
        None => 64 << 10,
    }
}

/// What the engine may do towards a peer served by a transport with `caps`.
fn peer_limits(caps: &crate::transport::Caps, split_min: usize, outnumbered: bool) -> PeerLimits {
    let max_payload = caps.max_frame - crate::engine::wire::MAX_HEADER;
    PeerLimits {
        max_payload,
        eager: caps.eager_limit,
        bulk_read: caps.bulk_read,
        expose: caps.expose,
        bulk_write: caps.bulk_write,
        split_min,
        head: rndv_head(crate::env::parsed("MPR_RNDV_HEAD"), caps.eager_limit, max_payload, outnumbered),
    }
}

/// Bytes a streamed rendezvous sends with its `Rts` (`MPR_RNDV_HEAD`, `set`), at most an
/// eager message (the engine sends none where the receiver reads the sender's memory
/// itself: the bytes then never cross as frames). By default as many as an eager message
/// when this rank is `outnumbered`, none otherwise:
/// - where ranks outnumber cores, the round trip that asks for the rest waits for the
///   receiver to get a time slice, and the head travels meanwhile (4 ranks on 2 cores over
///   TCP: all-to-all of 1 MiB blocks 0.55-0.63x of the time without, broadcast of 1-2 MiB
///   0.4-0.8x);
/// - with a core per rank, the round trip is short, and over loopback TCP 512 KiB heads made
///   2-rank ping-pongs of 2-4 MiB 1.4-1.8x slower (cause not found).
fn rndv_head(set: Option<usize>, eager: usize, max_payload: usize, outnumbered: bool) -> usize {
    let want = set.unwrap_or(if outnumbered { eager } else { 0 });
    want.min(eager).min(max_payload)
}

/// `text` (at most 240 bytes of it) as hexadecimal digits, a value the key-value service
/// carries whatever the text holds.
fn hex(text: &str) -> String {
    crate::bootstrap::hex(&text.as_bytes()[..text.len().min(240)])
}

/// The text [`hex`] encoded, if `h` is such.
fn unhex(h: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> =
        (0..h.len() / 2).map(|i| h.get(2 * i..2 * i + 2).and_then(|d| u8::from_str_radix(d, 16).ok())).collect();
    Some(String::from_utf8_lossy(&bytes?).into_owned())
}

#[cfg(test)]
mod tests {
    use super::{rndv_head, split_min};

    #[test]
    fn streamed_rendezvous_heads_are_at_most_an_eager_message() {
        assert_eq!(rndv_head(None, 512 << 10, 1 << 20, false), 0, "off with a core per rank");
        assert_eq!(rndv_head(None, 256 << 10, 1 << 20, true), 256 << 10, "an eager message when outnumbered");
        assert_eq!(rndv_head(None, 64 << 10, 16 << 10, true), 16 << 10, "one frame at most");
        assert_eq!(rndv_head(Some(64 << 10), 64 << 10, 16 << 10, false), 16 << 10, "one frame at most");
        assert_eq!(rndv_head(Some(1 << 30), 512 << 10, 1 << 20, false), 512 << 10);
        assert_eq!(rndv_head(Some(4096), 512 << 10, 1 << 20, true), 4096);
        assert_eq!(rndv_head(Some(0), 512 << 10, 1 << 20, true), 0);
        // Where the receiver reads the sender's memory, no bytes go with the `Rts`: see the
        // engine's `single_and_split_copy_with_fallback`.
    }

    #[test]
    fn copies_are_split_only_when_every_rank_has_a_core() {
        assert_eq!(split_min(None, false), 64 << 10);
        assert_eq!(split_min(None, true), usize::MAX);
        // A size or 0 (never) set in the environment holds either way.
        assert_eq!(split_min(Some(4096), true), 4096);
        assert_eq!(split_min(Some(0), false), usize::MAX);
    }
}
