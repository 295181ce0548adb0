//! The RDMA transport through the software verbs provider (`MPR_VERBS_PROVIDER=soft`, which
//! behaves like RDMA over Thunderbolt: UC, SEND/RECV, few work requests; `soft-rc` like a
//! Linux NIC), between processes of this host: the point-to-point and collective suites,
//! injected loss, a peer killed mid-transfer, and the clear errors when RDMA is forced but
//! impossible.

use mpr_tests::{bin_dir, mprun, text};

fn run(np: usize, prog: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let p = bin_dir().join(prog);
    let n = np.to_string();
    let mut a = vec!["-np", &n, "--timeout", "240", p.to_str().unwrap()];
    a.extend_from_slice(args);
    mprun(&a, env)
}

/// Runs `prog` and checks that every rank passed; returns the job's stderr.
fn ok(np: usize, prog: &str, scenario: &str, env: &[(&str, &str)]) -> String {
    let args: Vec<&str> = if prog == "ptp" { vec![scenario] } else { vec![] };
    let out = run(np, prog, &args, env);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{prog} {scenario} on {np} ranks {env:?}: {:?}\n{so}\n{se}", out.status);
    let done = so.lines().filter(|l| l.ends_with(&format!("{scenario} ok"))).count();
    assert_eq!(done, np, "every rank reports success:\n{so}\n{se}");
    se
}

fn soft(kind: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![("MPR_TRANSPORTS", "rdma"), ("MPR_VERBS_PROVIDER", kind)]
}

#[test]
fn point_to_point_over_soft_uc() {
    let env = soft("soft");
    for (np, scenario) in [(2, "ring"), (3, "pairs"), (4, "anysource"), (2, "order"), (2, "probe"), (2, "truncate")] {
        let mut e = env.clone();
        e.push(("PTP_MAX", "4000000"));
        ok(np, "ptp", scenario, &e);
    }
    // 4000 messages of up to 3000 B in flight: a burst of frames shares each SEND (of one
    // 4 KiB frame: about two of 1500 B on average), and no receive failed.
    let mut e = env.clone();
    e.push(("MPR_VERBOSE", "1"));
    let se = ok(2, "ptp", "many", &e);
    for (r, (t, d)) in rdma_counts(&se, 2).iter().enumerate() {
        let (frames, messages) = (t[4], t[5]);
        assert!(
            frames >= 4000 && 2 * frames >= 3 * messages,
            "rank {r} packed {frames} frames in {messages} messages:\n{se}"
        );
        assert_eq!(d[4], 0, "rank {r}: receives failed:\n{se}");
        // The device imitates macOS 26.2 by default: no SEND above one frame.
        assert!(d[5] > 0 && d[5] <= 4096, "rank {r}: largest message {} B:\n{se}", d[5]);
        // Over loopback each rank's device stands for a Mac of its own: one queue pair.
        assert_eq!(d[6], 1, "rank {r}: queue pairs:\n{se}");
        // Every SEND waited for its receive (TN3205's credits): none was dropped for want of one.
        assert_eq!(d[7], 0, "rank {r}: SENDs found no receive:\n{se}");
    }
}

/// macOS decides how large a Thunderbolt message may be: one 4 KiB frame before 26.3. The
/// transport sizes its messages by the device, so a job runs on both, with a larger
/// `MPR_RDMA_CHUNK` too (on 26.2 it cannot go above the frame; on 26.3 it pads short
/// messages to their receives' frames); the counters show the largest SEND, and no receive
/// failed. A version that is not one is a clear error.
#[test]
fn message_sizes_follow_the_macos_version_of_the_device() {
    for (macos, chunk, largest) in [("26.2", "65536", 4096), ("26.3", "65536", 65536), ("26.3", "4096", 4096)] {
        let mut e = soft("soft");
        e.extend([("MPR_SOFT_MACOS", macos), ("MPR_RDMA_CHUNK", chunk), ("PTP_MAX", "300000"), ("MPR_VERBOSE", "1")]);
        let se = ok(2, "ptp", "pairs", &e);
        for (r, (_, d)) in rdma_counts(&se, 2).iter().enumerate() {
            assert_eq!(d[4], 0, "macOS {macos}, chunk {chunk}: rank {r}: receives failed:\n{se}");
            // Whole messages of the chunk, but for the few bytes a full one leaves unused.
            assert!(d[5] <= largest && d[5] > largest - 64, "macOS {macos}, chunk {chunk}: rank {r}: largest:\n{se}");
        }
    }
    let mut e = soft("soft");
    e.push(("MPR_SOFT_MACOS", "Tahoe"));
    let out = run(2, "ptp", &["ring"], &e);
    let se = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{se}");
    assert!(se.contains("MPR_SOFT_MACOS=Tahoe: expected a macOS version such as 26.2 or 26.3"), "{se}");
}

#[test]
fn point_to_point_over_soft_rc() {
    let env = soft("soft-rc");
    for (np, scenario) in [(3, "ring"), (3, "pairs"), (3, "anysource"), (2, "order")] {
        let mut e = env.clone();
        e.push(("PTP_MAX", "4000000"));
        ok(np, "ptp", scenario, &e);
    }
}

#[test]
fn collectives_over_soft_uc_and_rc() {
    for kind in ["soft", "soft-rc"] {
        let mut e = soft(kind);
        e.push(("COLL_MAX", "70000"));
        ok(3, "coll", "coll", &e);
    }
}

/// Each rank's RDMA counters from the transport's verbose end line ("mpr: rank K: rdma (UC):
/// N messages (B B) pulled with RDMA READ, R sent again, O received out of order, F frames
/// packed in P messages; device NAME: M messages sent, Q queue pairs on this host, L frames
/// lost (injected), S frames sent again after T timeouts, D messages dropped ..., X receives
/// failed, largest message M B, W SENDs found no receive"), by rank: [N, B, R, O, F, P] of
/// the transport, [L, S, T, D, X, M, Q, W] of the device.
fn rdma_counts(se: &str, np: usize) -> Vec<([u64; 6], [u64; 8])> {
    let numbers = |s: &str| -> Vec<u64> {
        s.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect()
    };
    let mut by_rank = vec![None; np];
    for (rank, l) in se.lines().filter_map(|l| {
        let (rank, rest) = l.strip_prefix("mpr: rank ")?.split_once(": ")?;
        let rest = rest.strip_prefix("rdma (UC): ").or_else(|| rest.strip_prefix("rdma (RC): "))?;
        Some((rank.parse::<usize>().ok()?, rest))
    }) {
        by_rank[rank] = Some({
            let (ours, device) = l.split_once("; device ").unwrap_or_else(|| panic!("no device counts: {l}"));
            let (t, d) = (numbers(ours), numbers(device.split_once(": ").expect("device name").1));
            assert!(t.len() == 6 && d.len() == 9, "{l}");
            ([t[0], t[1], t[2], t[3], t[4], t[5]], [d[2], d[3], d[4], d[5], d[6], d[7], d[1], d[8]])
        });
    }
    by_rank
        .into_iter()
        .enumerate()
        .map(|(r, c)| c.unwrap_or_else(|| panic!("no RDMA counters of rank {r}:\n{se}")))
        .collect()
}

/// Injected loss of 1% of the frames: every byte still arrives, and the counters show that
/// frames were lost and sent again (by mpr's go-back-N over UC, by the device over RC).
#[test]
fn one_percent_loss_still_delivers_every_byte() {
    for kind in ["soft", "soft-rc"] {
        let mut e = soft(kind);
        e.extend([("MPR_SOFT_LOSS", "0.01"), ("PTP_MAX", "2000000"), ("MPR_RDMA_RTO_MS", "2"), ("MPR_VERBOSE", "1")]);
        let se = ok(3, "ptp", "pairs", &e);
        let c = rdma_counts(&se, 3);
        // Over the job: frames the device lost, messages mpr sent again, frames the device sent again.
        let (lost, by_mpr, by_device) = c.iter().fold((0, 0, 0), |s, (t, d)| (s.0 + d[0], s.1 + t[2], s.2 + d[1]));
        assert!(lost > 0, "{kind}: frames were lost: {c:?}");
        if kind == "soft" {
            assert!(by_mpr > 0 && by_device == 0, "{kind}: mpr sent them again: {c:?}");
        } else {
            assert!(by_device > 0 && by_mpr == 0, "{kind}: the device sent them again: {c:?}");
        }
    }
    let mut e = soft("soft");
    e.extend([("MPR_SOFT_LOSS", "0.01"), ("COLL_MAX", "5000")]);
    ok(3, "coll", "coll", &e);
}

/// Thunderbolt's UC gives no retransmission: mpr's link protocol alone delivers every byte,
/// in order, where 5, 10 and 30% of the frames (acknowledgements too) are lost, on 2, 4 and
/// 8 ranks; the counters show the loss, the messages sent again, and that no receive failed
/// (every SEND spanned its receive's frames). RC (a Linux NIC's) retransmits in the device,
/// RDMA READ of large messages included, at 10 and 30%. The collectives pass at 10%.
#[test]
fn heavy_loss_still_delivers_every_byte() {
    let cases = [
        ("soft", 2, "0.05", "2000000"),
        ("soft", 4, "0.10", "400000"),
        ("soft", 2, "0.30", "2000000"),
        ("soft", 4, "0.30", "100000"),
        ("soft", 8, "0.30", "20000"),
        ("soft-rc", 2, "0.10", "2000000"),
        ("soft-rc", 2, "0.30", "300000"),
    ];
    for (kind, np, loss, max) in cases {
        let mut e = soft(kind);
        e.extend([("MPR_SOFT_LOSS", loss), ("PTP_MAX", max), ("MPR_VERBOSE", "1")]);
        let t = std::time::Instant::now();
        let se = ok(np, "ptp", "pairs", &e);
        let c = rdma_counts(&se, np);
        let sum = |f: fn(&([u64; 6], [u64; 8])) -> u64| c.iter().map(f).sum::<u64>();
        let (lost, by_mpr, by_device, failed) = (sum(|c| c.1[0]), sum(|c| c.0[2]), sum(|c| c.1[1]), sum(|c| c.1[4]));
        let what = format!("{kind}, loss {loss} on {np} ranks");
        assert!(lost > 0, "{what}: frames were lost: {c:?}");
        if kind == "soft" {
            assert!(by_mpr > 0 && by_device == 0, "{what}: mpr sent them again: {c:?}");
        } else {
            assert!(by_device > 0 && by_mpr == 0, "{what}: the device sent them again: {c:?}");
        }
        assert_eq!(failed, 0, "{what}: no receive failed: {c:?}");
        if kind == "soft-rc" && max == "2000000" {
            assert!(c.iter().any(|c| c.0[0] > 0), "{what}: large messages were READ: {c:?}");
        }
        eprintln!("{what}, messages up to {max} B: {:.1} s, {lost} frames lost", t.elapsed().as_secs_f64());
    }
    let mut e = soft("soft");
    e.extend([("MPR_SOFT_LOSS", "0.10"), ("COLL_MAX", "5000")]);
    ok(4, "coll", "coll", &e);
}

#[test]
fn a_peer_killed_mid_transfer_is_an_error_not_a_hang() {
    let marker = format!("rdma-kill-{}", std::process::id());
    let mut e = soft("soft");
    e.push(("MPR_KILL_GRACE_MS", "5000"));
    let out = run(3, "ptp", &["peer-dies", &marker], &e);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(128 + 9), "stdout {so} stderr {se}");
    assert!(so.contains("rank 0 saw: rank 1 is gone"), "the waiting peer got an error: {so}\n{se}");
}

/// A job in which some pairs have RDMA and others only TCP (here one rank finds no device, as
/// a Mac in a ring has no cable to its non-neighbours): every pair takes its own route, named
/// in the verbose lines, the point-to-point and collective suites pass, and a TCP-only peer
/// that dies is seen through its own route.
#[test]
fn a_job_of_rdma_and_tcp_pairs_routes_each_pair_its_own_way() {
    let dir = std::env::temp_dir().join(format!("mpr-mixed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrap = dir.join("wrap");
    // Rank $TCP_ONLY asks for the real provider, which finds no device here.
    std::fs::write(
        &wrap,
        "#!/bin/sh\n[ \"$MPR_RANK\" = \"$TCP_ONLY\" ] && export MPR_VERBS_PROVIDER=verbs\nexec \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&wrap, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let wrapped = |tcp_only: &'static str, prog: &str, args: &[&str], extra: &[(&str, &str)]| {
        let p = bin_dir().join(prog);
        let mut a = vec!["-np", "3", "--timeout", "120", wrap.to_str().unwrap(), p.to_str().unwrap()];
        a.extend_from_slice(args);
        let mut e = vec![("MPR_TRANSPORTS", "tcp,rdma"), ("MPR_VERBS_PROVIDER", "soft"), ("TCP_ONLY", tcp_only)];
        e.extend_from_slice(extra);
        mprun(&a, &e)
    };
    let passes = |out: std::process::Output, scenario: &str| {
        let (so, se) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{scenario}: {so}\n{se}");
        assert_eq!(so.lines().filter(|l| l.ends_with(&format!("{scenario} ok"))).count(), 3, "{so}\n{se}");
        se
    };
    let se = passes(wrapped("2", "ptp", &["ring"], &[("MPR_VERBOSE", "1")]), "ring");
    for (from, to, route) in
        [(0, 1, "rdma (UC)"), (1, 0, "rdma (UC)"), (0, 2, "tcp"), (2, 0, "tcp"), (1, 2, "tcp"), (2, 1, "tcp")]
    {
        assert!(se.contains(&format!("mpr: rank {from} -> rank {to}: {route} (")), "{from} -> {to} by {route}:\n{se}");
    }
    for scenario in ["pairs", "anysource", "order", "probe"] {
        passes(wrapped("2", "ptp", &[scenario], &[("PTP_MAX", "2000000")]), scenario);
    }
    passes(wrapped("1", "coll", &[], &[("COLL_MAX", "70000")]), "coll");
    // Rank 1, reached by TCP alone, dies while rank 0 waits for it.
    let marker = format!("mixed-kill-{}", std::process::id());
    let out = wrapped("1", "ptp", &["peer-dies", &marker], &[("MPR_KILL_GRACE_MS", "5000")]);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(128 + 9), "stdout {so} stderr {se}");
    assert!(so.contains("rank 0 saw: rank 1 is gone"), "the waiting peer got an error: {so}\n{se}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn forcing_rdma_without_a_device_is_a_clear_error() {
    // No RDMA hardware here: the real provider is probed and found missing.
    let out = run(2, "ptp", &["ring"], &[("MPR_TRANSPORTS", "rdma")]);
    let se = text(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("MPR_TRANSPORTS=rdma") && se.contains("RDMA unavailable"), "{se}");
    let out = run(2, "ptp", &["ring"], &[("MPR_TRANSPORTS", "rdma"), ("MPR_VERBS_PROVIDER", "carrier-pigeon")]);
    let se = text(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("MPR_VERBS_PROVIDER=carrier-pigeon: unknown provider"), "{se}");
    // Devices named per peer: a malformed list, and an interface that is not there.
    let mut env = soft("soft");
    env.push(("MPR_RDMA_PEERS", "mac2"));
    let se = text(&run(2, "ptp", &["ring"], &env).stderr);
    assert!(se.contains("MPR_RDMA_PEERS=mac2: 'mac2': expected HOST:DEVICE[+DEVICE...]"), "{se}");
    let mut env = soft("soft");
    env.push(("MPR_RDMA_PEERS", "other:no-such-iface0"));
    let out = run(2, "ptp", &["ring"], &env);
    let se = text(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("RDMA unavailable: interfaces no-such-iface0: none has an IPv4 address"), "{se}");
    // The GID forced to index 1, the 169.254 address of the device's table (what MLX fell
    // back to): the queue pairs cannot reach it, and RTR fails with the reason, at start-up.
    let mut env = soft("soft");
    env.push(("MPR_RDMA_GID_INDEX", "1"));
    let out = run(2, "ptp", &["ring"], &env);
    let se = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{se}");
    assert!(se.contains("modify_qp to RTR: the peer's GID 169.254.") && se.contains("not a routable IPv4"), "{se}");
}

#[test]
fn verbose_names_the_rdma_transport() {
    let out =
        run(2, "ptp", &["ring"], &[("MPR_TRANSPORTS", "rdma"), ("MPR_VERBS_PROVIDER", "soft"), ("MPR_VERBOSE", "1")]);
    let se = text(&out.stderr);
    assert!(out.status.success(), "{se}");
    assert!(se.contains("mpr: rank 0 -> rank 1: rdma (UC)"), "{se}");
    assert!(se.contains("large messages by pipelined frames"), "UC has no RDMA READ: {se}");
    let env = [("MPR_TRANSPORTS", "rdma"), ("MPR_VERBS_PROVIDER", "soft-rc"), ("MPR_VERBOSE", "1")];
    let out = run(2, "ptp", &["ring"], &env);
    let se = text(&out.stderr);
    assert!(out.status.success(), "{se}");
    assert!(se.contains("rdma (RC) (eager up to 32768 B, large messages by reads of registered memory)"), "{se}");
}

#[test]
fn large_messages_over_rc_are_read_and_can_be_streamed_instead() {
    // RDMA READ from 64 KiB up (the default is 512 KiB), and with READ turned off: the same
    // bytes either way, and each rank's count of what it pulled says which path was taken.
    for read in ["1", "0"] {
        let mut e = soft("soft-rc");
        e.extend([("PTP_MAX", "3000000"), ("MPR_RDMA_READ_MIN", "65536"), ("MPR_RDMA_READ", read)]);
        ok(2, "ptp", "truncate", &e);
        e.push(("MPR_VERBOSE", "1"));
        let se = ok(3, "ptp", "pairs", &e);
        let pulled: Vec<u64> = rdma_counts(&se, 3).iter().map(|c| c.0[0]).collect();
        if read == "0" {
            assert_eq!(pulled, [0; 3], "MPR_RDMA_READ=0 reads nothing:\n{se}");
        } else {
            // pairs sends 7 messages from 64 KiB up per peer pair and direction at least
            // (the fixed sizes 65536 and PTP_MAX among them).
            assert!(pulled.iter().all(|&n| n >= 4), "every rank read its large messages: {pulled:?}\n{se}");
        }
    }
}

#[test]
fn a_device_with_few_resources_slows_the_job_but_never_breaks_it() {
    // 48 messages of up to 1.5 MB in flight at once per rank, on devices shrunk to a few
    // work requests and regions: RC keeps at most mr - 3 buffers exposed for READ (here 2)
    // and streams the rest; UC lives in its two bounce regions with a window of one.
    for (kind, limits) in [("soft-rc", "mr=5,wr=10"), ("soft-rc", "mr=3"), ("soft", "mr=2,wr=7")] {
        let mut e = soft(kind);
        e.extend([("MPR_SOFT_LIMITS", limits), ("PTP_MANY", "48,1500000"), ("MPR_RDMA_READ_MIN", "100000")]);
        ok(3, "ptp", "many", &e);
    }
    // Too few queue pairs for the peers: a clear error at start-up.
    let mut e = soft("soft-rc");
    e.push(("MPR_SOFT_LIMITS", "qp=1"));
    let out = run(3, "ptp", &["ring"], &e);
    let se = text(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("RDMA: 2 peers need 2 queue pairs, the device soft-rc:127.0.0.1 has 1"), "{se}");
    let mut e = soft("soft");
    e.push(("MPR_SOFT_LIMITS", "wr=x"));
    let out = run(2, "ptp", &["ring"], &e);
    let se = text(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("MPR_SOFT_LIMITS=wr=x: 'wr=x': expected a count above 0"), "{se}");
}

#[test]
fn the_rdma_device_comes_from_the_hostfile_or_the_flag() {
    // No device here: the error each rank reports names the device it was told to open.
    let exe = bin_dir().join("ptp");
    let exe = exe.to_str().unwrap();
    let env = [("MPR_TRANSPORTS", "rdma")];
    let out = mprun(&["-np", "2", "--rdma-device", "rdma_en9", exe, "ring"], &env);
    let se = text(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("(device rdma_en9, from MPR_RDMA_DEVICE)"), "{se}");
    let hostfile = std::env::temp_dir().join(format!("mpr-rdma-hostfile-{}", std::process::id()));
    std::fs::write(&hostfile, "localhost slots=2 rdma_device=mlx5_7\n").unwrap();
    let out =
        mprun(&["-np", "2", "--hostfile", hostfile.to_str().unwrap(), "--rdma-device", "rdma_en9", exe, "ring"], &env);
    let se = text(&out.stderr);
    std::fs::remove_file(&hostfile).unwrap();
    assert!(
        se.contains("(device mlx5_7, from MPR_RDMA_DEVICE)") && !se.contains("rdma_en9"),
        "the hostfile wins: {se}"
    );
    let out = mprun(&["-np", "2", "--rdma-device", "en/9", exe, "ring"], &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--rdma-device: 'en/9' is not an RDMA device name"));
}
