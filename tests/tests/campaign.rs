//! The fault campaign (`campaign`, tests/src/bin/campaign.rs), briefly: jobs over shared
//! memory, TCP and the software RDMA provider at up to 30% loss, each hit at a random moment
//! by a killed rank, a signalled or killed mprun, a stopped rank or a flood of connections.
//! Every run must end clean: the job's outcome right (bytes checked, or the cause named), in
//! time, nothing left. A developer runs it long: `target/release/campaign --seconds 3600`.

use std::process::Command;

use mpr_tests::{bin_dir, text};

#[test]
fn every_run_of_a_short_fault_campaign_ends_clean() {
    if Command::new("ss").arg("-V").output().is_err() {
        // The floods find the ranks' listeners with `ss`: without it they would not land.
        mpr_tests::cannot_run("no `ss` (iproute2) to find the ranks' listeners");
        return;
    }
    let runs = 24;
    let out = Command::new(bin_dir().join("campaign"))
        .args(["--runs", &runs.to_string(), "--verbose"])
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run campaign");
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    let last = so.lines().last().unwrap_or_default();
    assert!(
        out.status.success() && last.starts_with(&format!("campaign: {runs} runs, {runs} clean,")),
        "exit {:?}\n{so}\n{se}",
        out.status
    );
    assert!(last.contains(", 0 leftovers,"), "{so}");
    // The runs did hit their jobs: faults landed, and each kind at least once.
    for kind in ["KillRank", "Signal", "KillMprun", "StopRank", "None"] {
        assert!(so.lines().any(|l| l.contains(&format!(": {kind}"))), "no {kind} run:\n{so}");
    }
}
