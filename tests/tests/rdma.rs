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

fn ok(np: usize, prog: &str, scenario: &str, env: &[(&str, &str)]) {
    let args: Vec<&str> = if prog == "ptp" { vec![scenario] } else { vec![] };
    let out = run(np, prog, &args, env);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{prog} {scenario} on {np} ranks {env:?}: {:?}\n{so}\n{se}", out.status);
    let done = so.lines().filter(|l| l.ends_with(&format!("{scenario} ok"))).count();
    assert_eq!(done, np, "every rank reports success:\n{so}\n{se}");
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
    ok(2, "ptp", "many", &env);
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

#[test]
fn one_percent_loss_still_delivers_every_byte() {
    for kind in ["soft", "soft-rc"] {
        let mut e = soft(kind);
        e.extend([("MPR_SOFT_LOSS", "0.01"), ("PTP_MAX", "2000000"), ("MPR_RDMA_RTO_MS", "2")]);
        ok(3, "ptp", "pairs", &e);
    }
    let mut e = soft("soft");
    e.extend([("MPR_SOFT_LOSS", "0.01"), ("COLL_MAX", "5000")]);
    ok(3, "coll", "coll", &e);
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
}

#[test]
fn verbose_names_the_rdma_transport() {
    let out =
        run(2, "ptp", &["ring"], &[("MPR_TRANSPORTS", "rdma"), ("MPR_VERBS_PROVIDER", "soft"), ("MPR_VERBOSE", "1")]);
    let se = text(&out.stderr);
    assert!(out.status.success(), "{se}");
    assert!(se.contains("mpr: rank 0 -> rank 1: rdma (UC)"), "{se}");
}
