//! Point-to-point conformance through mprun: real processes, shared memory, every scenario
//! of the `ptp` rank program, in the default configuration and in the fallbacks (no
//! single-copy reads; tiny rings that force back-pressure and wrap-around).

use mpr_tests::{bin_dir, mprun, mprun_path, text};

fn run(np: usize, scenario: &str, env: &[(&str, &str)]) -> String {
    let ptp = bin_dir().join("ptp");
    let np = np.to_string();
    let out = mprun(&["-np", &np, "--timeout", "120", ptp.to_str().unwrap(), scenario], env);
    checked(out, &np, scenario, env)
}

/// The stderr of a job that must have passed `scenario` on every one of its `np` ranks.
fn checked(out: std::process::Output, np: &str, scenario: &str, env: &[(&str, &str)]) -> String {
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{scenario} on {np} ranks {env:?} failed: {:?}\nstdout:\n{so}\nstderr:\n{se}",
        out.status
    );
    let oks = so.lines().filter(|l| *l == format!("{scenario} ok")).count();
    assert_eq!(oks, np.parse::<usize>().unwrap(), "every rank reports success:\n{so}\n{se}");
    se
}

/// Each rank's single-copy counters from its verbose end lines ("mpr: rank R: single copy: A
/// reads (B B), C writes (D B), E refused" and "mpr: rank R: shm: F single copies (G B)
/// realigned through the bounce buffer"), by rank: [reads, read bytes, writes, written bytes,
/// refused, realigned, realigned bytes].
fn copies(se: &str, np: usize) -> Vec<[u64; 7]> {
    let numbers = |rest: &str| -> Vec<u64> {
        rest.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect()
    };
    let mut by_rank = vec![(None, None); np];
    for l in se.lines() {
        let Some((rank, rest)) = l.strip_prefix("mpr: rank ").and_then(|l| l.split_once(": ")) else { continue };
        let Ok(rank) = rank.parse::<usize>() else { continue };
        if let Some(rest) = rest.strip_prefix("single copy: ") {
            let n: [u64; 5] = numbers(rest).try_into().unwrap_or_else(|n| panic!("5 counters: {n:?} in {l}"));
            by_rank[rank].0 = Some(n);
        } else if let Some(rest) = rest.strip_prefix("shm: ").filter(|r| r.contains(" realigned ")) {
            let n: [u64; 2] = numbers(rest).try_into().unwrap_or_else(|n| panic!("2 counters: {n:?} in {l}"));
            by_rank[rank].1 = Some(n);
        }
    }
    by_rank
        .into_iter()
        .enumerate()
        .map(|(r, c)| match c {
            (Some(a), Some(b)) => [a[0], a[1], a[2], a[3], a[4], b[0], b[1]],
            _ => panic!("no counters of rank {r}:\n{se}"),
        })
        .collect()
}

const VERBOSE: (&str, &str) = ("MPR_VERBOSE", "1");

const NO_CMA: &[(&str, &str)] = &[("MPR_SHM_CMA", "0")];
const TINY_RINGS: &[(&str, &str)] = &[("MPR_SHM_RING", "2048"), ("MPR_SHM_FRAME", "512"), ("MPR_SHM_CMA", "0")];

#[test]
fn ring_pass() {
    for np in [1, 2, 3, 5] {
        run(np, "ring", &[]);
    }
}

/// The largest eager message over shared memory to a peer read in one copy: 8 KiB while
/// every rank has a core, what a frame holds (64 KiB) where `np` ranks outnumber them.
fn single_copy_eager(np: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if np > cores {
        65536
    } else {
        8192
    }
}

/// By default every rank reads large messages straight from the sender (16 MiB among them).
#[test]
fn pairs_random_sizes_up_to_16mib() {
    let se = run(3, "pairs", &[VERBOSE]);
    for (r, c) in copies(&se, 3).iter().enumerate() {
        assert!(c[0] > 0 && c[1] >= 16 << 20 && c[4] == 0, "rank {r} read by single copy: {c:?}\n{se}");
    }
    let eager = single_copy_eager(3);
    assert!(
        se.contains(&format!(
            "mpr: rank 0 -> rank 1: shm (eager up to {eager} B, large messages by single-copy reads)"
        )),
        "{se}"
    );
}

/// With a core per rank, messages above 8 KiB too are read in one copy (the two copies
/// through the ring cost more from there); every one of them arrives whole.
#[test]
fn mid_size_messages_are_read_in_one_copy() {
    let se = run(2, "pairs", &[("PTP_MAX", "65536"), VERBOSE]);
    let eager = single_copy_eager(2);
    assert!(
        se.contains(&format!(
            "mpr: rank 0 -> rank 1: shm (eager up to {eager} B, large messages by single-copy reads)"
        )),
        "{se}"
    );
    if eager == 65536 {
        return mpr_tests::cannot_run("one core: 2 ranks outnumber it, and messages up to 64 KiB go eagerly");
    }
    for (r, c) in copies(&se, 2).iter().enumerate() {
        // Sizes 8193 to 65536 cross: some read by single copy, none larger than 64 KiB.
        assert!(c[0] > 0 && c[1] <= c[0] * 65536 && c[4] == 0, "rank {r} read by single copy: {c:?}\n{se}");
    }
}

/// A message whose receive buffer lies a short distance past its send buffer modulo a page
/// (where the kernel's `rep movsb` stalls) is read, and with split copies also written,
/// through the bounce buffer: the counters say so, and every byte arrives (the rank program
/// checks them and the bytes around them). Other distances are not bounced: of the 36 mixes
/// of send and receive offsets that `offsets` sends at each size, 12 are 1 to 63 bytes apart
/// (16 past 0, 1 past 4080, 1 past 63 ...), so at most a third of its transfers may be.
#[test]
fn messages_a_short_distance_apart_in_a_page_are_realigned() {
    for (np, split) in [(2, "0"), (3, "1")] {
        let se = run(np, "offsets", &[("MPR_SPLIT_COPY_MIN", split), VERBOSE]);
        for (r, c) in copies(&se, np).iter().enumerate() {
            assert!(c[0] > 0 && c[4] == 0, "rank {r} read by single copy: {c:?}\n{se}");
            if split == "1" {
                assert!(c[2] > 0, "rank {r} wrote by single copy: {c:?}\n{se}");
            }
            if cfg!(target_arch = "x86_64") {
                assert!(c[5] > 0 && c[5] * 3 <= c[0] + c[2], "rank {r} realigned some, not all: {c:?}\n{se}");
            } else {
                assert_eq!(c[5], 0, "rank {r}: no realignment off x86-64: {c:?}\n{se}");
            }
        }
    }
}

#[test]
fn pairs_without_single_copy() {
    let se = run(2, "pairs", &[NO_CMA[0], VERBOSE]);
    for (r, c) in copies(&se, 2).iter().enumerate() {
        assert_eq!(*c, [0; 7], "rank {r} streamed everything:\n{se}");
        let line = format!(
            "-> rank {}: shm (eager up to 65536 B, large messages by pipelined frames, no single copy: MPR_SHM_CMA=0)",
            1 - r
        );
        assert!(se.contains(&format!("mpr: rank {r} {line}")), "{se}");
    }
}

#[test]
fn pairs_single_copy_read_only_and_split_everywhere() {
    // Split copy off: the receiver reads every large message alone.
    let se = run(2, "pairs", &[("MPR_SPLIT_COPY_MIN", "0"), ("PTP_MAX", "4000000"), VERBOSE]);
    for (r, c) in copies(&se, 2).iter().enumerate() {
        assert!(c[0] > 0 && c[2] == 0 && c[4] == 0, "rank {r} only read: {c:?}\n{se}");
    }
    // Split copy from the smallest rendezvous size up (the sender writes half of each).
    let se = run(3, "pairs", &[("MPR_SPLIT_COPY_MIN", "1"), ("PTP_MAX", "4000000"), VERBOSE]);
    for (r, c) in copies(&se, 3).iter().enumerate() {
        assert!(c[0] > 0 && c[2] > 0 && c[4] == 0, "rank {r} read and wrote: {c:?}\n{se}");
        // Every split message is read half and written half: as many bytes each way, within
        // the rounding of the split point, summed over the job.
    }
    let sum = |i: usize| copies(&se, 3).iter().map(|c| c[i]).sum::<u64>();
    let (read, written) = (sum(1), sum(3));
    assert!(written * 10 >= read * 8 && read * 10 >= written * 8, "read {read} B, written {written} B\n{se}");
}

/// A peer the kernel will not let this rank read (here: not dumpable, and the ranks lack
/// CAP_SYS_PTRACE, as under Yama's scope 1 without a common ptracer or between users) is
/// streamed from the start, and the verbose line of the pair says why; one that becomes
/// unreadable after start-up costs one warning, and every byte still arrives.
#[test]
fn a_peer_the_kernel_will_not_let_us_read_is_streamed_and_said_why() {
    let ptp = bin_dir().join("ptp");
    let mprun = mprun_path();
    let job = |when: &str| {
        let untraceable = format!("0:{when}");
        let env = [("PTP_UNTRACEABLE", untraceable.as_str()), ("PTP_MAX", "3000000"), VERBOSE];
        let root = is_root();
        let mut cmd = if root {
            // Root keeps its uid but loses the capability that would let it read anyway.
            let mut c = std::process::Command::new("setpriv");
            c.args(["--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace"]).arg(&mprun);
            c
        } else {
            std::process::Command::new(&mprun)
        };
        cmd.args(["-np", "2", "--timeout", "120", ptp.to_str().unwrap(), "pairs"]).envs(env);
        match cmd.output() {
            Ok(out) => Some(checked(out, "2", "pairs", &env)),
            Err(e) => {
                mpr_tests::cannot_run(&format!("setpriv: {e}"));
                None
            }
        }
    };
    let Some(se) = job("before") else { return };
    assert!(
        se.contains("mpr: rank 1 -> rank 0: shm (eager up to 65536 B, large messages by pipelined frames, no single copy: the kernel refused"),
        "{se}"
    );
    let eager = single_copy_eager(2);
    assert!(
        se.contains(&format!(
            "mpr: rank 0 -> rank 1: shm (eager up to {eager} B, large messages by single-copy reads)"
        )),
        "{se}"
    );
    // Rank 0 may read rank 1, but rank 1's sends offer no address it could not take itself,
    // and rank 0's messages are streamed to rank 1: no single copy either way, none refused.
    let c = copies(&se, 2);
    assert_eq!([c[0][0], c[0][4], c[1][0], c[1][4]], [0; 4], "{c:?}\n{se}");
    assert!(!se.contains("failed"), "{se}");

    let Some(se) = job("after") else { return };
    let warnings =
        se.lines().filter(|l| l.starts_with("mpr: rank 1: single-copy ") && l.contains(" rank 0 failed (")).count();
    assert_eq!(warnings, 1, "one warning, for the first refusal:\n{se}");
    let c = copies(&se, 2);
    assert!(c[1][4] >= 1 && c[0][4] == 0, "rank 1's copies were refused, rank 0's not: {c:?}\n{se}");
}

/// Whether the tests run as root (who may read any process's memory unless it drops
/// CAP_SYS_PTRACE).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:").map(|u| u.split_whitespace().next() == Some("0"))))
        .unwrap_or(false)
}

#[test]
fn pairs_with_tiny_rings() {
    run(3, "pairs", &[("PTP_MAX", "300000"), TINY_RINGS[0], TINY_RINGS[1], TINY_RINGS[2]]);
}

#[test]
fn any_source_any_tag() {
    run(4, "anysource", &[]);
}

#[test]
fn non_overtaking_under_load() {
    run(4, "order", &[]);
    run(2, "order", TINY_RINGS);
}

#[test]
fn probe_then_recv_vec() {
    run(3, "probe", &[]);
}

#[test]
fn truncation_is_an_error_naming_both_sizes() {
    run(2, "truncate", &[]);
    run(2, "truncate", NO_CMA);
}

/// Each rank's point-to-point counters from its verbose end line ("mpr: rank R:
/// point-to-point: A sends and B receives done as they started, C sends and D receives by
/// request"), by rank: [A, B, C, D].
fn p2p_counts(se: &str, np: usize) -> Vec<[u64; 4]> {
    let mut by_rank = vec![None; np];
    for l in se.lines() {
        let Some((rank, rest)) = l.strip_prefix("mpr: rank ").and_then(|l| l.split_once(": point-to-point: ")) else {
            continue;
        };
        let n: Vec<u64> =
            rest.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect();
        assert_eq!(n.len(), 4, "{l}");
        by_rank[rank.parse::<usize>().unwrap()] = Some([n[0], n[1], n[2], n[3]]);
    }
    by_rank
        .into_iter()
        .enumerate()
        .map(|(r, c)| c.unwrap_or_else(|| panic!("no counters of rank {r}:\n{se}")))
        .collect()
}

#[test]
fn thousands_of_outstanding_requests() {
    // 4000 sends of up to 3000 B per rank into rings that hold hundreds of them: most are
    // handed over as they start, with no request; the rest queue behind a full ring.
    let se = run(3, "many", &[VERBOSE]);
    for (r, [sn, rn, sr, rr]) in p2p_counts(&se, 3).into_iter().enumerate() {
        assert!(sn + sr >= 4000 && rn + rr >= 4000, "rank {r}: every operation counted:\n{se}");
        assert!(sn >= 400, "rank {r}: {sn} of {} sends done as they started:\n{se}", sn + sr);
    }
    run(2, "many", TINY_RINGS);
}

/// A probe of one source whose rank has left without sending is an error naming it, over
/// shared memory and over TCP (it waited forever: a peer that finalized ended only a wait
/// on it by request, and a probe has none).
#[test]
fn a_probe_of_a_rank_that_left_is_an_error() {
    for env in [&[][..], &[("MPR_TRANSPORTS", "tcp")][..]] {
        run(2, "probe-gone", env);
    }
}

#[test]
fn send_to_self() {
    run(1, "self", &[]);
    run(2, "self", &[]);
}

#[test]
fn invalid_rank_and_tag() {
    run(2, "badargs", &[]);
}

#[test]
fn singleton_without_launcher() {
    // Started directly, a program is a job of one rank (MPI singleton init).
    let out = std::process::Command::new(bin_dir().join("ptp")).arg("self").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).lines().any(|l| l == "self ok"));
}

/// The whole point-to-point suite again with TCP between every pair of ranks (loopback).
mod over_tcp {
    use super::run;

    const TCP: (&str, &str) = ("MPR_TRANSPORTS", "tcp");

    #[test]
    fn ring_pairs_anysource() {
        run(3, "ring", &[TCP]);
        run(3, "pairs", &[TCP, ("PTP_MAX", "4000000")]);
        run(4, "anysource", &[TCP]);
    }

    #[test]
    fn order_probe_truncate() {
        run(4, "order", &[TCP]);
        run(3, "probe", &[TCP]);
        run(2, "truncate", &[TCP]);
    }

    #[test]
    fn many_self_badargs() {
        run(3, "many", &[TCP]);
        run(2, "self", &[TCP]);
        run(2, "badargs", &[TCP]);
    }

    /// Rendezvous messages carrying their first 512 KiB (or, with small frames, 3000 bytes)
    /// in the request: placed straight into posted receives, kept for late ones, cut short
    /// by a receive too small, and in order with everything else.
    #[test]
    fn rendezvous_heads() {
        const HEAD: (&str, &str) = ("MPR_RNDV_HEAD", "524288");
        run(3, "pairs", &[TCP, HEAD, ("PTP_MAX", "4000000")]);
        run(4, "anysource", &[TCP, HEAD]);
        run(4, "order", &[TCP, HEAD]);
        run(2, "truncate", &[TCP, HEAD]);
        run(3, "probe", &[TCP, HEAD]);
        let small = [TCP, ("MPR_RNDV_HEAD", "3000"), ("MPR_TCP_FRAME", "4096"), ("MPR_TCP_EAGER", "3000")];
        run(3, "pairs", &[small[0], small[1], small[2], small[3], ("PTP_MAX", "1000000")]);
    }

    #[test]
    fn small_frames_and_buffers() {
        // Frames smaller than most messages: everything is streamed in many pieces.
        run(3, "pairs", &[TCP, ("MPR_TCP_FRAME", "4096"), ("MPR_TCP_EAGER", "1000"), ("PTP_MAX", "1000000")]);
    }

    /// Stray and forged connections to the ranks' TCP listeners are closed and logged; the
    /// job is unaffected.
    #[test]
    fn stray_connections_are_turned_away() {
        use std::io::Write;
        let child = idle_over_tcp();
        // Find the ranks' listeners and talk nonsense to them.
        let mut hit = 0;
        let t0 = std::time::Instant::now();
        while hit == 0 && t0.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(300));
            for addr in mpr_tests::listeners_of(child.id()) {
                if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
                    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\nMPR1\x00\x00\x00\x00forged-nonce-xx");
                    hit += 1;
                }
            }
        }
        assert!(hit > 0, "found no rank listener to connect to");
        let out = child.wait_with_output().unwrap();
        let (so, se) = (super::text(&out.stdout), super::text(&out.stderr));
        assert!(out.status.success(), "{so}\n{se}");
        assert_eq!(so.lines().filter(|l| *l == "idle ok").count(), 2, "{so}");
        assert!(se.contains("closed an unexpected TCP connection from 127.0.0.1"), "{se}");
    }

    /// Connections that say nothing, too little, or nonsense to the ranks' listeners while
    /// the job starts (rank 0 comes 2.5 s late, the others wait with their listeners open)
    /// hold up no real peer: the job starts and passes, and each stray is logged.
    #[test]
    fn strays_during_start_up_hold_up_no_peer() {
        use std::io::Write;
        let ptp = super::bin_dir().join("ptp");
        let t0 = std::time::Instant::now();
        let child = std::process::Command::new(super::mprun_path())
            .args(["-np", "3", "--timeout", "60", ptp.to_str().unwrap(), "ring"])
            .env("MPR_TRANSPORTS", "tcp")
            .env("MPR_CONNECT_TIMEOUT", "20")
            .env("PTP_INIT_DELAY_MS", "0:2500")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut strays = Vec::new();
        let mut listeners = std::collections::BTreeSet::new();
        while listeners.len() < 2 && t0.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(50));
            for addr in mpr_tests::listeners_of(child.id()) {
                if !listeners.insert(addr.clone()) {
                    continue;
                }
                // Silence, a hello cut short, and nonsense, each to every listener.
                for words in [&b""[..], b"MPR1\x00", b"GET / HTTP/1.0\r\n\r\n"] {
                    let mut s = std::net::TcpStream::connect(&addr).unwrap();
                    s.write_all(words).unwrap();
                    strays.push(s);
                }
            }
        }
        assert_eq!(listeners.len(), 2, "ranks 1 and 2 listen while rank 0 is late: {listeners:?}");
        let out = child.wait_with_output().unwrap();
        let (so, se) = (super::text(&out.stdout), super::text(&out.stderr));
        assert!(out.status.success(), "{so}\n{se}");
        assert_eq!(so.lines().filter(|l| *l == "ring ok").count(), 3, "{so}");
        let bad_magic =
            se.lines().filter(|l| l.contains("rejected a TCP connection from 127.0.0.1") && l.contains("bad magic"));
        assert_eq!(bad_magic.count(), 2, "{se}");
        // The silent and cut-short ones: dropped after the handshake bound, or when the last
        // peer is in, whichever comes first.
        // The silent and cut-short ones (dropped after the handshake bound, or when the last
        // peer is in) come from the same address within the interval: counted, said once.
        let quiet = se.lines().filter(|l| l.contains("2 more TCP connection(s) from 127.0.0.1 rejected or closed"));
        assert_eq!(quiet.count(), 2, "{se}");
        drop(strays);
    }

    /// A flood of 300 nonsense connections to a rank busy in its own code (3 s without a call
    /// into mpr): the listen queue takes them all (none refused), the job passes, and the
    /// rank says so in two lines, not 300 (the first, and a count of the rest).
    #[test]
    fn a_flood_of_strays_is_summarised_and_refuses_no_one() {
        use std::io::Write;
        let child = idle_over_tcp();
        let t0 = std::time::Instant::now();
        let listeners = both_listeners(&child);
        let (mut sent, mut refused, mut strays) = (0, 0, Vec::new());
        for _ in 0..150 {
            for addr in &listeners {
                match std::net::TcpStream::connect(addr) {
                    Ok(mut s) => {
                        let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
                        sent += 1;
                        strays.push(s);
                    }
                    Err(_) => refused += 1,
                }
            }
        }
        assert!(t0.elapsed() < std::time::Duration::from_millis(2800), "the flood came while rank 1 slept");
        let out = child.wait_with_output().unwrap();
        let (so, se) = (super::text(&out.stdout), super::text(&out.stderr));
        assert!(out.status.success(), "{so}\n{se}");
        assert_eq!(so.lines().filter(|l| *l == "idle ok").count(), 2, "{so}");
        assert_eq!((sent, refused), (300, 0), "the listen queues took the whole flood");
        let about: Vec<&str> = se.lines().filter(|l| l.contains("127.0.0.1")).collect();
        assert!(about.len() <= 4, "at most two lines per rank about the flood: {se}");
        assert!(about.iter().any(|l| l.contains("more TCP connection(s) from 127.0.0.1")), "{se}");
        drop(strays);
    }

    /// A stray connection to a rank busy in its own code (3 s without a call into mpr) is
    /// closed within a second, not when the rank next calls in: a thread of the transport
    /// turns strays away.
    #[test]
    fn a_stray_is_closed_at_once_while_its_rank_computes() {
        use std::io::{Read, Write};
        let child = idle_over_tcp();
        let t0 = std::time::Instant::now();
        let listeners = both_listeners(&child);
        for addr in &listeners {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
            s.set_read_timeout(Some(std::time::Duration::from_secs(1))).unwrap();
            let t = std::time::Instant::now();
            let mut b = [0u8; 16];
            match s.read(&mut b) {
                Ok(0) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                other => panic!("{addr}: the stray stayed open ({other:?} after {:?})", t.elapsed()),
            }
        }
        assert!(t0.elapsed() < std::time::Duration::from_millis(2900), "the strays came while rank 1 slept");
        let out = child.wait_with_output().unwrap();
        let (so, se) = (super::text(&out.stdout), super::text(&out.stderr));
        assert!(out.status.success(), "{so}\n{se}");
        assert_eq!(so.lines().filter(|l| *l == "idle ok").count(), 2, "{so}");
        assert!(se.contains("closed an unexpected TCP connection from 127.0.0.1"), "{se}");
    }

    /// Two ranks over TCP, rank 1 busy in its own code for 3 s (`ptp idle`), their output
    /// piped.
    fn idle_over_tcp() -> std::process::Child {
        let ptp = super::bin_dir().join("ptp");
        std::process::Command::new(super::mprun_path())
            .args(["-np", "2", "--timeout", "60", ptp.to_str().unwrap(), "idle"])
            .env("MPR_TRANSPORTS", "tcp")
            .env("PTP_IDLE_MS", "3000")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The two ranks' listeners of `idle_over_tcp`'s job, once both listen (within 2 s).
    fn both_listeners(child: &std::process::Child) -> Vec<String> {
        let t0 = std::time::Instant::now();
        let mut listeners = Vec::new();
        while listeners.len() < 2 && t0.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            listeners = mpr_tests::listeners_of(child.id());
        }
        assert_eq!(listeners.len(), 2, "{listeners:?}");
        listeners
    }

    #[test]
    fn shm_only() {
        run(3, "pairs", &[("MPR_TRANSPORTS", "shm"), ("PTP_MAX", "100000")]);
    }
}

#[test]
fn unknown_transport_is_a_clear_error() {
    let ptp = bin_dir().join("ptp");
    let out = mprun(&["-np", "2", ptp.to_str().unwrap(), "ring"], &[("MPR_TRANSPORTS", "carrier-pigeon")]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("unknown transport \"carrier-pigeon\""), "{err}");
}

/// Busy loops that load the machine until dropped.
struct Load(Vec<std::process::Child>);

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Every line the runtime prints is written whole (formatted first, one write): 12 ranks on
/// the machine's cores, loaded by two busy loops, print their routes at once, three times
/// over; no line holds the start of another, and each route line of each rank is there once.
#[test]
fn runtime_lines_never_merge_under_load() {
    let load = Load(
        (0..2)
            .map(|_| std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("sh"))
            .collect(),
    );
    let np = 12;
    for round in 0..3 {
        let se = run(np, "ring", &[VERBOSE]);
        for l in se.lines().filter(|l| l.contains("mpr: ")) {
            assert!(
                l.starts_with("mpr: ") && l.matches("mpr: ").count() == 1,
                "round {round}: a merged line: {l:?}\n{se}"
            );
        }
        for r in 0..np {
            for p in (0..np).filter(|&p| p != r) {
                let start = format!("mpr: rank {r} -> rank {p}: ");
                let n = se.lines().filter(|l| l.starts_with(&start)).count();
                assert_eq!(n, 1, "round {round}: rank {r}'s route to {p}:\n{se}");
            }
        }
    }
    drop(load);
}
