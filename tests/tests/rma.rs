//! One-sided communication through mprun: every scenario of the `rma` rank program (random
//! traffic against a sequential model under fence, lock_all and post/start, lock-protected
//! and CAS-protected counters, fetch-and-op tickets, concurrent accumulates, types, large
//! transfers, requests, misuse), on shared memory, TCP, soft UC with loss and soft RC.

use mpr_tests::{bin_dir, mprun, text};

const ALL: &[&str] = &[
    "model-fence",
    "model-lock",
    "model-pscw",
    "counter",
    "tickets",
    "caslock",
    "one-element",
    "types",
    "large",
    "requests",
    "errors",
];

/// Runs `scenario` on `np` ranks with `env`; checks that every rank passed. Returns stdout.
fn ok(np: usize, scenario: &str, env: &[(&str, &str)]) -> String {
    let p = bin_dir().join("rma");
    let n = np.to_string();
    let out = mprun(&["-np", &n, "--timeout", "240", p.to_str().unwrap(), scenario], env);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "rma {scenario} on {np} ranks {env:?}: {:?}\n{so}\n{se}", out.status);
    let done = so.lines().filter(|l| l.ends_with(&format!(" {scenario} ok"))).count();
    assert_eq!(done, np, "every rank reports success:\n{so}\n{se}");
    so
}

fn every_scenario(np: usize, env: &[(&str, &str)]) {
    for s in ALL {
        ok(np, s, env);
    }
}

#[test]
fn one_sided_over_shared_memory() {
    every_scenario(3, &[]);
    // A single rank: every operation targets itself.
    for s in ["model-fence", "counter", "tickets", "caslock", "large"] {
        ok(1, s, &[]);
    }
    // Four ranks on a 2-core machine: targets are often descheduled.
    for s in ["model-lock", "caslock", "one-element"] {
        ok(4, s, &[("RMA_ITERS", "40")]);
    }
}

#[test]
fn one_sided_over_tcp() {
    every_scenario(3, &[("MPR_TRANSPORTS", "tcp"), ("RMA_ITERS", "50")]);
}

#[test]
fn one_sided_over_soft_uc_with_loss() {
    let env = [
        ("MPR_TRANSPORTS", "rdma"),
        ("MPR_VERBS_PROVIDER", "soft"),
        ("MPR_SOFT_LOSS", "0.01"),
        ("MPR_RDMA_RTO_MS", "2"),
        ("RMA_ITERS", "30"),
        ("RMA_LARGE", "1000000"),
    ];
    every_scenario(3, &env);
}

#[test]
fn one_sided_over_soft_rc() {
    let env = [("MPR_TRANSPORTS", "rdma"), ("MPR_VERBS_PROVIDER", "soft-rc"), ("RMA_ITERS", "30")];
    every_scenario(3, &env);
}

/// Each misuse reads as what it is.
#[test]
fn one_sided_errors_name_the_misuse() {
    let so = ok(2, "errors", &[]);
    for want in [
        "put outside an epoch: window synchronisation error: put to rank 1 outside an access epoch",
        "unlock without lock: window synchronisation error: unlock of rank 1, which this rank has not locked",
        "put past the end: access to elements 7..9 of the window of rank 1, which holds 8 elements",
        "fence in a lock epoch: window synchronisation error: fence while a lock",
    ] {
        assert!(so.contains(want), "missing {want:?} in:\n{so}");
    }
}
