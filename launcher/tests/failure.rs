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

/// A rank killed by a signal makes its peers fail (their connections to it reset); when both
/// have ended by the time mprun looks, it names the killed rank, not the echo. mprun is
/// stopped while rank 1 is killed and rank 0 then exits 1, so both are waiting to be reaped,
/// rank 0 (the older child, which the system returns first) among them.
#[test]
fn a_rank_killed_by_a_signal_is_named_before_the_peer_that_failed_after_it() {
    let dir = TempDir::new("sigkill-echo");
    let dead = dir.path().join("dead");
    let script = format!(
        "{}; if [ $MPR_RANK = 0 ]; then while [ ! -f {} ]; do sleep 0.01; done; exit 1; fi; exec sleep 30",
        record_pid(&dir),
        dead.display()
    );
    let child = mprun(&["-np", "2", "sh", "-c", &script]).spawn().unwrap();
    let mprun_pid = Pid::from_raw(child.id() as i32);
    let pids = dir.pids(2);
    kill(mprun_pid, Signal::SIGSTOP).unwrap();
    kill(Pid::from_raw(pids[1]), Signal::SIGKILL).unwrap();
    assert!(gone(pids[1]), "rank 1 survived SIGKILL");
    std::fs::write(&dead, "").unwrap();
    assert!(gone(pids[0]), "rank 0 did not exit");
    kill(mprun_pid, Signal::SIGCONT).unwrap();
    let out = wait(child);
    assert_eq!(code(&out), 137, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!("mprun: rank 1 (pid {}) was killed by signal SIGKILL; stopping the job\n", pids[1])
    );
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

/// A signal while mprun is still forking a large job stops it there: it does not first
/// start the rest. 1,500 ranks take seconds to fork on this machine; SIGTERM after the first
/// have started ends the job within a few seconds, with fewer ranks started than asked
/// (counted from `--verbose`), and none left.
#[test]
fn sigterm_while_spawning_many_ranks_stops_the_spawning() {
    let marker = format!("{}.{}", 30 + std::process::id() % 1000, std::process::id() % 997);
    let dir = TempDir::new("spawn-signal");
    let first = dir.path().join("started");
    // Rank 0 says it runs; every rank then sleeps (the marker names this test's sleeps).
    let script = format!("[ $MPR_RANK = 0 ] && touch {}; exec sleep {marker}", first.display());
    let child = mprun(&["--oversubscribe", "--verbose", "-np", "1500", "sh", "-c", &script]).spawn().unwrap();
    let start = Instant::now();
    while !first.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "rank 0 never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let signalled = Instant::now();
    let out = wait(child);
    let took = signalled.elapsed();
    let err = stderr(&out);
    assert_eq!(code(&out), 128 + 15, "{err}");
    assert!(err.contains("mprun: received SIGTERM; stopping the job\n"), "{err}");
    let started = err.lines().filter(|l| l.starts_with("mprun: rank ") && l.contains(": pid ")).count();
    assert!(started < 1500, "all 1500 ranks were started before the signal was obeyed ({took:?})");
    assert!(took < Duration::from_secs(15), "mprun took {took:?} to stop after SIGTERM");
    // None of its ranks is left.
    let left = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&format!("sleep\0{marker}")))
            })
            .count()
    };
    let until = Instant::now() + Duration::from_secs(5);
    while left() > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(left(), 0, "ranks left running");
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

#[test]
fn stopping_the_job_signals_only_the_ranks_not_yet_reaped() {
    let dir = TempDir::new("early");
    // Rank 0 leaves a child behind and exits at once; once mprun has reaped it (its /proc
    // entry is gone), rank 1 fails; rank 2 runs on until it is stopped.
    let d = dir.str();
    let script = format!(
        "{}; case $MPR_RANK in \
           0) sleep 30 & echo $! > {d}/left.tmp; mv {d}/left.tmp {d}/left; exit 0;; \
           1) {}; while [ -e /proc/$(cat {d}/pid.0) ]; do sleep 0.01; done; exit 3;; \
         esac; sleep 30",
        record_pid(&dir),
        wait_for_ranks(&dir, &[0, 2])
    );
    // Under strace when there is one, to see every signal mprun sends.
    let trace = dir.path().join("trace");
    let strace = std::process::Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success());
    if !strace {
        common::cannot_run("strace not found: the system-call check of this test");
    }
    let mut cmd = if strace {
        let mut c = std::process::Command::new("strace");
        let mprun = env!("CARGO_BIN_EXE_mprun");
        c.args(["-f", "-qq", "-e", "trace=kill,wait4,waitid", "-o", trace.to_str().unwrap(), mprun]);
        c.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        c
    } else {
        mprun(&[])
    };
    cmd.args(["--verbose", "-np", "3", "sh", "-c", &script]);
    let out = run_with(cmd, None);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let err = stderr(&out);
    // The stop signals rank 2 alone: rank 0's and rank 1's process groups are gone, and
    // their ids may already be someone else's.
    assert!(err.contains("mprun: SIGTERM to the live rank(s) of this machine: [2]\n"), "{err}");
    assert!(!err.contains("SIGKILL to the live rank(s)"), "{err}");
    let exited = err.find(&format!("rank 0 (pid {}) exited with code 0", dir.pids(3)[0])).expect("rank 0 reaped");
    assert!(exited < err.find("SIGTERM to the live").unwrap(), "{err}");
    // What rank 0 left in its group was killed when rank 0 was reaped.
    let left: i32 = dir.wait_for("left").parse().unwrap();
    assert_all_gone(&[left]);
    assert_all_gone(&dir.pids(3));
    if strace {
        // Every rank's group is signalled only while the rank is unreaped: a kill of the group
        // before the rank is reaped (its leftovers), none after.
        let trace = std::fs::read_to_string(&trace).unwrap();
        for pid in dir.pids(3) {
            let reaped = trace.lines().position(|l| l.contains(&format!("wait4({pid},"))).expect("reaped");
            let signals: Vec<usize> = trace
                .lines()
                .enumerate()
                .filter(|(_, l)| l.contains(&format!("kill(-{pid},")))
                .map(|(i, _)| i)
                .collect();
            assert!(!signals.is_empty(), "rank pid {pid}: its group was never signalled\n{trace}");
            assert!(
                signals.iter().all(|&i| i < reaped),
                "rank pid {pid}: its group signalled after it was reaped\n{trace}"
            );
        }
    }
}
