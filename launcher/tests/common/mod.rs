//! Helpers for running `mprun` in tests: a command, a bounded wait, temp dirs, pid checks.
#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest any single mprun run may take in a test before it is killed and the test fails.
pub const LIMIT: Duration = Duration::from_secs(30);

/// `mprun` with the given arguments, stdin closed, stdout and stderr captured.
pub fn mprun(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mprun"));
    c.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Runs `command` to its end (feeding `stdin` if given), failing the test after [`LIMIT`].
pub fn run_with(mut command: Command, stdin: Option<&[u8]>) -> Output {
    if stdin.is_some() {
        command.stdin(Stdio::piped());
    }
    let mut child = command.spawn().expect("mprun starts");
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(data).unwrap();
    }
    wait(child)
}

/// Runs `mprun args...`.
pub fn run(args: &[&str]) -> Output {
    run_with(mprun(args), None)
}

/// Waits for a started mprun, failing the test after [`LIMIT`].
pub fn wait(child: Child) -> Output {
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(out) => out.expect("wait for mprun"),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            panic!("mprun did not finish within {LIMIT:?}");
        }
    }
}

/// mprun's stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// mprun's stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// mprun's exit code (panics if it was killed by a signal).
pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or_else(|| panic!("mprun was killed: {:?}; stderr: {}", out.status, stderr(out)))
}

/// A directory removed on drop, unique per test run.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mprun-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The path as a string, for shell scripts.
    pub fn str(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// Waits (up to 10 s) for `name` to exist and returns its trimmed contents.
    pub fn wait_for(&self, name: &str) -> String {
        let path = self.0.join(name);
        let start = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&path) {
                if text.ends_with('\n') {
                    return text.trim().to_string();
                }
            }
            assert!(start.elapsed() < Duration::from_secs(10), "{name} never appeared");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The pids written by ranks to files `pid.<rank>`.
    pub fn pids(&self, np: usize) -> Vec<i32> {
        (0..np).map(|r| self.wait_for(&format!("pid.{r}")).parse().unwrap()).collect()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Shell snippet a rank runs first: records its pid in `DIR/pid.<rank>` (atomically).
pub fn record_pid(dir: &TempDir) -> String {
    format!("echo $$ > {0}/pid.$MPR_RANK.tmp && mv {0}/pid.$MPR_RANK.tmp {0}/pid.$MPR_RANK", dir.str())
}

/// Whether process `pid` is gone (or a zombie), waiting up to 2 s for it to go.
pub fn gone(pid: i32) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        if !running(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn running(pid: i32) -> bool {
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
        return false;
    }
    // A zombie waits for a parent to reap it but runs nothing.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => cfg!(not(target_os = "linux")),
    }
}

/// Asserts that stderr is exactly one line and starts with `prefix`.
pub fn assert_one_line(out: &Output, prefix: &str) {
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "expected one stderr line, got: {err:?}");
    assert!(err.starts_with(prefix), "expected stderr to start with {prefix:?}, got: {err:?}");
    assert!(err.ends_with('\n'));
}

/// A test that cannot run its scenario here: under CI (`CI` set), where `.ci/run` installs
/// everything the tests need, that is a failure; elsewhere the test says it skipped.
pub fn cannot_run(why: &str) {
    assert!(std::env::var("CI").is_err(), "cannot run in CI: {why}");
    // Straight to the process's stderr, past the test harness's capture of passing tests.
    let _ = writeln!(std::io::stderr(), "{}: skipped: {why}", std::thread::current().name().unwrap_or("test"));
}
