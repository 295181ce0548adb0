//! Shared helpers for the test programs (run as ranks) and the integration tests (which
//! launch them through `mprun`).

use std::path::PathBuf;
use std::process::{Command, Output};

/// Deterministic content for message `seq` from `src` to `dst`: a test can check every byte.
pub fn pattern(src: usize, dst: usize, seq: usize, len: usize) -> Vec<u8> {
    let mut x = (src as u64) << 40 ^ (dst as u64) << 20 ^ seq as u64 ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Panics (exit 101 through the rank's panic) unless `got` is the expected pattern.
pub fn check(got: &[u8], src: usize, dst: usize, seq: usize, len: usize) {
    assert_eq!(got.len(), len, "message {seq} from {src} to {dst}: length");
    let want = pattern(src, dst, seq, len);
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        panic!("message {seq} from {src} to {dst} ({len} bytes): first wrong byte at {i}");
    }
}

/// The directory holding the workspace's built binaries (next to the test executable).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("deps dir");
    let dir = if dir.ends_with("deps") { dir.parent().expect("profile dir") } else { dir };
    dir.to_path_buf()
}

/// Path of the `mprun` binary built with the tests.
pub fn mprun_path() -> PathBuf {
    let p = bin_dir().join("mprun");
    assert!(p.exists(), "{} not built: run the tests with `cargo test --workspace`", p.display());
    p
}

/// Runs `mprun ARGS...` with extra environment and returns its output.
pub fn mprun(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(mprun_path());
    c.args(args);
    // A program built with mprcc finds libmpr by the run path mprcc wrote into it, as a
    // user's does; the library path cargo gives tests lists target/release first, whose
    // libmpr a `cargo test` without a `cargo build` leaves stale, and would override it.
    c.env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run mprun")
}

/// Text of an output stream.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts that a job succeeded and that `n` lines of its stdout end with `line` (one per
/// rank).
pub fn assert_all_ok(out: &Output, line: &str, n: usize) {
    let so = text(&out.stdout);
    assert!(out.status.success(), "{line}: exit {:?}\n{so}\n{}", out.status, text(&out.stderr));
    assert_eq!(so.lines().filter(|l| l.ends_with(line)).count(), n, "{line} from every rank:\n{so}");
}

/// Processes still running (not zombies) whose command line mentions `marker`.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let zombie = stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z'));
            if cmd.contains(marker) && !zombie {
                v.push(format!("{name}: {cmd}"));
            }
        }
    }
    v
}

/// A test that cannot run its scenario here: under CI (`CI` set), where `.ci/run` installs
/// everything the tests need, that is a failure; elsewhere the test says it skipped.
pub fn cannot_run(why: &str) {
    assert!(std::env::var("CI").is_err(), "cannot run in CI: {why}");
    // Straight to the process's stderr, past the test harness's capture of passing tests.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{}: skipped: {why}", std::thread::current().name().unwrap_or("test"));
}

/// Files in /dev/shm that belong to the job `jobid` (none for an empty id: a job that never
/// said its id).
pub fn shm_files(jobid: &str) -> Vec<String> {
    if jobid.is_empty() {
        return Vec::new();
    }
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("mpr-{jobid}")))
                .collect()
        })
        .unwrap_or_default()
}

/// The TCP listening addresses (`127.0.0.1:PORT`) of the children of process `parent` (the
/// ranks mprun started), as `ss` names their owners; other jobs' listeners are left out.
pub fn listeners_of(parent: u32) -> Vec<String> {
    let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).unwrap_or_default();
    let ours: Vec<String> = children.split_whitespace().map(|pid| format!("pid={pid},")).collect();
    let ss = Command::new("ss").args(["-ltnpH"]).output().map(|o| o.stdout).unwrap_or_default();
    String::from_utf8_lossy(&ss)
        .lines()
        .filter(|l| ours.iter().any(|p| l.contains(p.as_str())))
        .filter_map(|l| l.split_whitespace().nth(3).map(String::from))
        .collect()
}
