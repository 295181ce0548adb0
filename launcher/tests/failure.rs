//! The job ends as a whole: the first failure stops every rank, names its cause, and sets
//! mprun's exit code; nothing is left running.

mod common;

use std::time::{Duration, Instant};

use common::{code, gone, mprun, record_pid, run, run_with, stderr, wait, TempDir};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Shell snippet: wait until ranks `others` have recorded their pids.
fn wait_for_ranks(dir: &TempDir, others: &[usize]) -> String {
    let missing: Vec<String> = others.iter().map(|r| format!("[ ! -f {}/pid.{r} ]", dir.str())).collect();
    format!("while {}; do sleep 0.01; done", missing.join(" || "))
}

fn assert_all_gone(pids: &[i32]) {
    for pid in pids {
        assert!(gone(*pid), "rank process {pid} is still running");
    }
}

#[test]
fn a_failing_rank_stops_the_job_with_its_code() {
    let dir = TempDir::new("fail");
    let script = format!(
        "{}; if [ $MPR_RANK = 1 ]; then {}; exit 3; fi; sleep 30",
        record_pid(&dir),
        wait_for_ranks(&dir, &[0, 2])
    );
    let start = Instant::now();
    let out = run(&["-np", "3", "sh", "-c", &script]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let pids = dir.pids(3);
    assert_eq!(stderr(&out), format!("mprun: rank 1 (pid {}) exited with code 3; stopping the job\n", pids[1]));
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_all_gone(&pids);
}

#[test]
fn a_rank_killed_by_a_signal_stops_the_job_with_128_plus_the_signal() {
    let dir = TempDir::new("sigkill");
    let script = format!(
        "{}; if [ $MPR_RANK = 1 ]; then {}; kill -9 $$; fi; sleep 30",
        record_pid(&dir),
        wait_for_ranks(&dir, &[0, 2])
    );
    let out = run(&["-np", "3", "sh", "-c", &script]);
    assert_eq!(code(&out), 137, "{}", stderr(&out));
    let pids = dir.pids(3);
    assert_eq!(
        stderr(&out),
        format!("mprun: rank 1 (pid {}) was killed by signal SIGKILL; stopping the job\n", pids[1])
    );
    assert_all_gone(&pids);
}

#[test]
fn a_rank_ignoring_sigterm_is_killed_after_the_grace() {
    let dir = TempDir::new("ignore-term");
    let script = format!(
        "trap '' TERM; {}; if [ $MPR_RANK = 1 ]; then {}; exit 5; fi; sleep 30",
        record_pid(&dir),
        wait_for_ranks(&dir, &[0])
    );
    let mut cmd = mprun(&["--verbose", "-np", "2", "sh", "-c", &script]);
    cmd.env("MPR_KILL_GRACE_MS", "300");
    let start = Instant::now();
    let out = run_with(cmd, None);
    let elapsed = start.elapsed();
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("exited with code 5; stopping the job"), "{err}");
    assert!(err.contains("sending SIGKILL"), "{err}");
    assert!(elapsed >= Duration::from_millis(300), "SIGKILL came before the grace: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(10));
    assert_all_gone(&dir.pids(2));
}

/// Starts a 2-rank sleeping job, sends `signal` to mprun once both ranks run, and checks
/// the job is stopped with 128 + the signal.
fn signal_to_mprun(signal: Signal, name: &str) {
    let dir = TempDir::new("signal");
    let script = format!("{}; sleep 30", record_pid(&dir));
    let child = mprun(&["-np", "2", "sh", "-c", &script]).spawn().unwrap();
    let pids = dir.pids(2);
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let out = wait(child);
    assert_eq!(code(&out), 128 + signal as i32, "{}", stderr(&out));
    assert_eq!(stderr(&out), format!("mprun: received {name}; stopping the job\n"));
    assert_all_gone(&pids);
}

#[test]
fn sigterm_to_mprun_stops_the_job() {
    signal_to_mprun(Signal::SIGTERM, "SIGTERM");
}

#[test]
fn sigint_to_mprun_stops_the_job() {
    signal_to_mprun(Signal::SIGINT, "SIGINT");
}

#[cfg(target_os = "linux")]
#[test]
fn ranks_die_with_a_killed_mprun() {
    let dir = TempDir::new("mprun-killed");
    // `exec`: the rank itself sleeps (a child of the rank would outlive it; only ranks
    // get the parent-death signal).
    let script = format!("{}; exec sleep 30", record_pid(&dir));
    let child = mprun(&["-np", "2", "sh", "-c", &script]).spawn().unwrap();
    let pids = dir.pids(2);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let out = wait(child);
    assert!(out.status.code().is_none());
    assert_all_gone(&pids);
}

#[test]
fn the_time_limit_stops_the_job_with_124() {
    let start = Instant::now();
    let out = run(&["--timeout", "1", "-np", "2", "sleep", "30"]);
    let elapsed = start.elapsed();
    assert_eq!(code(&out), 124, "{}", stderr(&out));
    assert_eq!(stderr(&out), "mprun: job exceeded the time limit of 1 s; stopping the job\n");
    assert!(elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[test]
fn a_rank_finishing_early_is_not_a_failure() {
    let out = run(&["-np", "2", "sh", "-c", "[ $MPR_RANK = 0 ] && exit 0; sleep 0.3; echo late"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(common::stdout(&out), "late\n");
}

#[test]
fn a_rank_that_cannot_start_stops_the_job() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("no-interpreter");
    let script = dir.path().join("script");
    std::fs::write(&script, "#!/nonexistent/interpreter\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(&["-np", "2", script.to_str().unwrap()]);
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "mprun: rank 0 could not be started: No such file or directory (os error 2); stopping the job\n"
    );
}
