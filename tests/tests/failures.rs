//! The job ends as a whole: failing ranks, dead peers, leftovers.

use std::time::{Duration, Instant};

use mpr_tests::{bin_dir, mprun, processes_with, shm_files, text};

fn ptp() -> String {
    bin_dir().join("ptp").to_str().unwrap().to_string()
}

#[test]
fn rank_exit_code_3_is_mprun_exit_code_and_named() {
    let marker = format!("exit-marker-{}", std::process::id());
    let t0 = Instant::now();
    let out = mprun(&["-np", "3", &ptp(), "exit", &marker], &[("PTP_FAIL_RANK", "1")]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr: {err}");
    assert!(err.contains("rank 1") && err.contains("code 3"), "stderr names rank and code: {err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "others stopped promptly");
    assert!(processes_with(&marker).is_empty(), "left running: {:?}", processes_with(&marker));
}

#[test]
fn sigkilled_rank_stops_job_and_leaves_nothing() {
    let marker = format!("kill-marker-{}", std::process::id());
    // Rank 1 SIGKILLs itself while rank 0 waits on it; rank 0 ignores SIGTERM, so it is
    // still alive to observe the death (then mprun SIGKILLs it after the grace, unless it
    // exited first).
    // Rank 0 waits in a receive, then (second run) in an all-reduce that meets in shared
    // memory.
    for wait_in in ["recv", "allreduce"] {
        let env = [("MPR_KILL_GRACE_MS", "5000"), ("PEER_DIES_IN", wait_in)];
        let out = mprun(&["-np", "3", &ptp(), "peer-dies", &marker], &env);
        let (so, se) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(128 + 9), "{wait_in}: stdout {so} stderr {se}");
        assert!(se.contains("rank 1") && se.contains("SIGKILL"), "names the rank and signal: {se}");
        assert!(so.contains("rank 0 saw: rank 1 is gone: the process died"), "{wait_in}: peer got no error: {so}");
        assert!(processes_with(&marker).is_empty(), "left running: {:?}", processes_with(&marker));
        let id = jobid_of(&so);
        assert!(shm_files(&id).is_empty(), "segment left: {:?}", shm_files(&id));
    }
}

fn jobid_of(stdout: &str) -> String {
    let line = stdout.lines().find(|l| l.starts_with("jobid ")).expect("rank 0 prints its job id");
    let id = line["jobid ".len()..].trim().to_string();
    assert_eq!(id.len(), 16, "job id {id:?}");
    id
}

#[test]
fn segment_removed_after_successful_job() {
    let out = mprun(&["-np", "3", &ptp(), "ring"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = jobid_of(&text(&out.stdout));
    assert!(shm_files(&id).is_empty(), "segment left: {:?}", shm_files(&id));
}

#[test]
fn wait_timeout_is_an_error_not_a_hang() {
    let out = mprun(&["-np", "2", &ptp(), "timeout"], &[("MPR_WAIT_TIMEOUT", "0.5")]);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}\n{}", text(&out.stderr));
    assert!(so.contains("rank 0 timed out after") && so.contains("wait timed out after 0.500 s"), "{so}");
}

#[test]
fn a_timed_out_send_to_self_leaves_no_message_behind() {
    let out = mprun(&["-np", "2", &ptp(), "self-timeout"], &[("MPR_WAIT_TIMEOUT", "0.5")]);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}\n{}", text(&out.stderr));
    for r in 0..2 {
        assert!(so.contains(&format!("rank {r}: the timed-out send to self was withdrawn")), "{so}");
    }
    assert!(so.contains("self-timeout ok"), "{so}");
}

#[test]
fn size_without_launcher_is_a_clear_error() {
    let out = std::process::Command::new(bin_dir().join("ptp")).arg("ring").env("MPR_SIZE", "4").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no PMI_FD"), "{}", text(&out.stderr));
}

/// Runs `mprun ARGS...` in a mount namespace of its own whose /dev/shm holds only `size`
/// (as in a container), or says why it cannot (not root, no `unshare`).
fn mprun_with_small_dev_shm(size: &str, args: &[&str], env: &[(&str, &str)]) -> Option<std::process::Output> {
    let probe = std::process::Command::new("unshare").args(["--mount", "true"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        mpr_tests::cannot_run(&format!("mount namespaces unavailable ({probe:?})"));
        return None;
    }
    let script = format!("mount -t tmpfs -o size={size} mpr-test-shm /dev/shm && exec \"$0\" \"$@\"");
    let mut c = std::process::Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    c.arg(mpr_tests::mprun_path()).args(args).envs(env.iter().copied());
    Some(c.output().expect("run unshare"))
}

#[test]
fn a_dev_shm_too_small_is_a_clear_error_not_a_bus_error() {
    let coll = bin_dir().join("coll");
    let coll = coll.to_str().unwrap();
    // The rings of 4 ranks (~8 MiB) do not fit 1 MiB: every rank says so at start.
    let t0 = Instant::now();
    let Some(out) = mprun_with_small_dev_shm("1m", &["-np", "4", "--timeout", "60", coll], &[]) else { return };
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device (/dev/shm is too small or full)"), "{err}");
    assert!(
        err.contains("could not make this host's shared memory") || err.contains("shared memory: reserving"),
        "{err}"
    );
    assert!(!err.contains("SIGBUS"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(30), "took {:?}", t0.elapsed());
    // The rings of 2 ranks fit 16 MiB, the collectives' segment of 3 slots of 64 MiB does not:
    // a clear error at the first collective.
    let env = [("MPR_COLL_SHM_SLOT", "67108864")];
    let out = mprun_with_small_dev_shm("16m", &["-np", "2", "--timeout", "60", coll], &env).expect("probed above");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("shared memory for collectives: reserving"), "{err}");
    assert!(err.contains("No space left on device (/dev/shm is too small or full)"), "{err}");
    assert!(!err.contains("SIGBUS"), "{err}");
}

#[test]
fn every_numeric_setting_with_a_bad_value_is_a_clear_start_up_error() {
    let ptp = ptp();
    let mut bad: Vec<(String, &str)> = mpr::env::numeric_settings().map(|n| (n.to_string(), "inf")).collect();
    assert!(bad.len() >= 25, "{bad:?}");
    // Values that parse as numbers but are out of range, one of each kind.
    bad.extend([
        ("MPR_WAIT_TIMEOUT".to_string(), "1e30"),
        ("MPR_CONNECT_TIMEOUT".to_string(), "-1"),
        ("MPR_TCP_EAGER".to_string(), "-5"),
        ("MPR_SHM_CMA".to_string(), "2"),
        ("MPR_SOFT_LOSS".to_string(), "1.5"),
        ("MPR_WAIT_SPIN".to_string(), "2.5"),
    ]);
    for (name, value) in &bad {
        // mprun sets MPR_PTRACER for every rank itself: a value of the user's reaches a rank
        // only under another launcher, or none (a singleton, as here).
        let out = if name == "MPR_PTRACER" {
            std::process::Command::new(&ptp).arg("ring").env(name, value).output().unwrap()
        } else {
            mprun(&["-np", "2", "--timeout", "60", &ptp, "ring"], &[(name, value)])
        };
        let err = text(&out.stderr);
        // ptp exits 2 when init fails (a panic would be 101).
        assert_eq!(out.status.code(), Some(2), "{name}={value}: {err}");
        assert!(err.contains(&format!("{name}={value}: expected ")), "{name}={value}: {err}");
        assert!(!err.contains("panicked"), "{name}={value}: {err}");
    }
    // A good value of each kind starts the job.
    let good = [
        ("MPR_WAIT_TIMEOUT", "0.5e3"),
        ("MPR_SHM_CMA", "0"),
        ("MPR_WAIT_SPIN", " 20 "),
        ("MPR_SOFT_LOSS", "0"),
        ("MPR_RDMA_MTU", "4096"),
        ("MPR_RDMA_MR_ACCESS", "local"),
    ];
    let out = mprun(&["-np", "2", "--timeout", "60", &ptp, "ring"], &good);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A rank that exits with code 0 without finalizing leaves its peers waiting for it: mprun
/// names it as the cause (it reported a survivor's failure before), over shared memory and
/// over TCP.
#[test]
fn a_rank_that_exits_0_without_finalizing_is_named() {
    let ptp = ptp();
    for env in [&[][..], &[("MPR_TRANSPORTS", "tcp")][..]] {
        let out = mprun(&["-np", "2", "--timeout", "60", &ptp, "leave"], env);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{env:?}: {err}");
        let first = err.lines().find(|l| l.starts_with("mprun: ")).unwrap_or_default();
        assert!(first.starts_with("mprun: rank 1 (pid "), "{env:?}: {err}");
        assert!(first.ends_with(") exited with code 0 without finalizing MPI; stopping the job"), "{env:?}: {err}");
    }
}
