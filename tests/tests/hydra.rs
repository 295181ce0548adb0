//! Ranks started by another PMI-1 launcher: MPICH's `mpiexec.hydra` (Debian `mpich`).

use std::process::Command;

use mpr_tests::{bin_dir, text};

fn hydra() -> Option<&'static str> {
    let found = Command::new("mpiexec.hydra").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        mpr_tests::cannot_run("mpiexec.hydra not installed (apt-get install mpich)");
        return None;
    }
    Some("mpiexec.hydra")
}

fn run(np: &str, scenario: &str, env: &[(&str, &str)]) {
    let Some(h) = hydra() else { return };
    let out = Command::new("timeout")
        .args(["120", h, "-n", np, bin_dir().join("ptp").to_str().unwrap(), scenario])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let so = text(&out.stdout);
    assert!(out.status.success(), "{scenario}: {so}\n{}", text(&out.stderr));
    let oks = so.lines().filter(|l| *l == format!("{scenario} ok")).count();
    assert_eq!(oks.to_string(), np, "every rank reports success:\n{so}");
}

#[test]
fn hydra_launches_mpr_ranks_over_shared_memory() {
    run("3", "ring", &[]);
    run("3", "pairs", &[("PTP_MAX", "2000000")]);
}

#[test]
fn hydra_launches_mpr_ranks_over_tcp() {
    run("3", "anysource", &[("MPR_TRANSPORTS", "tcp")]);
    run("2", "many", &[("MPR_TRANSPORTS", "tcp")]);
}

#[test]
fn without_a_secret_from_hydra_rank_0_draws_one_and_says_so_once() {
    let Some(h) = hydra() else { return };
    let ptp = bin_dir().join("ptp");
    let job = |genv: &[&str]| {
        let mut c = Command::new("timeout");
        c.args(["120", h]).args(genv).args(["-n", "3", ptp.to_str().unwrap(), "ring"]);
        c.env("MPR_TRANSPORTS", "tcp").env("MPR_VERBOSE", "1").env_remove("MPR_SECRET");
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout).matches("ring ok").count(), 3, "{}", text(&out.stdout));
        text(&out.stderr)
    };
    // The TCP connections are keyed with a secret rank 0 drew and shared through hydra's
    // key-value service, never with the job's name (which anyone may guess).
    let drawn = "mpr: no MPR_SECRET from the launcher: rank 0 drew a 128-bit job secret";
    let err = job(&[]);
    assert_eq!(err.matches(drawn).count(), 1, "{err}");
    assert!(err.contains("started through the launcher's PMI-1 service"), "{err}");
    // A secret passed by the user is used as it is: nothing is drawn.
    let err = job(&["-genv", "MPR_SECRET", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"]);
    assert!(!err.contains(drawn) && err.contains("started through the launcher's PMI-1 service"), "{err}");
}
