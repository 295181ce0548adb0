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
    for what in [
        "bw",
        "bibw",
        "mbw_mr",
        "--pairs",
        "allreduce",
        "bcast",
        "allgather",
        "alltoall",
        "barrier",
        "--window",
        "--per-rank",
    ] {
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

/// `mprun`, built beside the benchmark in the workspace.
fn mprun(args: &[&str]) -> Output {
    let dir = std::path::Path::new(BENCH).parent().expect("a directory");
    Command::new(dir.join("mprun")).args(args).output().expect("run mprun")
}

/// OSU's windowed streams under mprun: a row per size with a positive figure (two for
/// `mbw_mr`: MB/s and messages/s, in the ratio of the size), and too many pairs for the job
/// is a clear error.
#[test]
fn the_stream_benchmarks_print_a_row_per_size() {
    for (np, what, cols) in [("2", "bw", 1), ("2", "bibw", 1), ("4", "mbw_mr", 2)] {
        let out = mprun(&["-np", np, BENCH, what, "--max", "64", "--iters", "5", "--warmup", "1"]);
        let so = text(&out.stdout);
        assert!(out.status.success(), "{what}: {so}\n{}", text(&out.stderr));
        let rows: Vec<Vec<f64>> = so
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
            .collect();
        assert_eq!(rows.iter().map(|r| r[0] as usize).collect::<Vec<_>>(), [1, 2, 4, 8, 16, 32, 64], "{so}");
        for r in &rows {
            assert_eq!(r.len(), 1 + cols, "{what}: {r:?}");
            assert!(r[1] > 0.0, "{what}: {r:?}");
            if cols == 2 {
                let rate_from_mbs = r[1] * 1e6 / r[0];
                assert!((rate_from_mbs / r[2] - 1.0).abs() < 0.01, "{what}: {r:?}");
            }
        }
    }
    let out = mprun(&["-np", "3", BENCH, "mbw_mr", "--pairs", "2", "--max", "8"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("mpr-bench mbw_mr: 2 pairs need 4 ranks, the job has 3"));
}

/// Sizes whose buffers cannot fit are one line and exit 2 before anything is allocated (a
/// `--max` near 2^64 looped for ever doubling the size, or aborted on the allocation).
#[test]
fn sizes_that_cannot_fit_are_refused() {
    for (args, says) in [
        (&["allreduce", "--max", "18446744073709551615"][..], "the buffers of one rank would overflow a 64-bit size"),
        (&["allreduce", "--max", "1125899906842624"][..], "more than half of this machine's"),
        (&["alltoall", "--max", "9223372036854775807"][..], "would overflow"),
        (&["barrier", "--min", "64", "--max", "8"][..], "--min 64 is above --max 8"),
    ] {
        let out = run(BENCH, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}
