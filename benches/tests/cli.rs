//! The benchmark binaries' command lines: help, and the clear errors of bad ones.

use std::process::{Command, Output};

fn run(exe: &str, args: &[&str]) -> Output {
    Command::new(exe).args(args).env_remove("PMI_FD").output().expect("run the benchmark")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const BENCH: &str = env!("CARGO_BIN_EXE_mpr-bench");
const FLOOR: &str = env!("CARGO_BIN_EXE_tcp-floor");

#[test]
fn help_prints_the_usage() {
    for exe in [BENCH, FLOOR] {
        let out = run(exe, &["--help"]);
        let so = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{exe}: {}", text(&out.stderr));
        assert!(so.contains("Usage:") && so.contains("--max <BYTES>") && so.contains("latency"), "{so}");
    }
    let so = text(&run(BENCH, &["--help"]).stdout);
    for what in ["bw", "allreduce", "bcast", "allgather", "alltoall", "barrier", "--window", "--per-rank"] {
        assert!(so.contains(what), "mpr-bench --help does not mention {what}: {so}");
    }
}

#[test]
fn bad_command_lines_are_usage_errors() {
    for (exe, args, says) in [
        (BENCH, &["nonsense"][..], "invalid value 'nonsense'"),
        (BENCH, &[][..], "required"),
        (BENCH, &["latency", "--iters", "0"][..], "--iters"),
        (BENCH, &["bw", "--window", "many"][..], "--window"),
        (BENCH, &["latency", "--bogus"][..], "--bogus"),
        (FLOOR, &["nonsense"][..], "invalid value 'nonsense'"),
        (FLOOR, &["bw", "--max", "x"][..], "--max"),
    ] {
        let out = run(exe, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{exe} {args:?}: {err}");
        assert!(err.contains(says), "{exe} {args:?}: {err}");
    }
}

#[test]
fn point_to_point_needs_two_ranks() {
    // Started alone (no launcher), a job of one rank.
    let out = run(BENCH, &["latency"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("mpr-bench latency: needs at least 2 ranks (mprun -np 2 mpr-bench latency)"));
}
