//! Bad command lines: one `mprun: ` line on stderr, a non-zero exit, and no rank started.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{assert_one_line, code, mprun, run, run_with, stderr, stdout, TempDir};

#[test]
fn an_unknown_option_is_a_usage_error() {
    let out = run(&["--bogus", "-np", "2", "true"]);
    assert_eq!(code(&out), 2);
    assert_one_line(&out, "mprun: error: unexpected argument '--bogus'");
}

#[test]
fn the_rank_count_must_be_a_positive_number() {
    for bad in ["0", "-1", "two", ""] {
        let out = run(&["-np", bad, "true"]);
        assert_eq!(code(&out), 2, "-np {bad:?}");
        assert_one_line(&out, &format!("mprun: -np: expected a positive number of ranks, got '{bad}'"));
    }
    let out = run(&["-np"]);
    assert_eq!(code(&out), 2);
    assert_one_line(&out, "mprun: error: a value is required for '--np <N>'");
}

#[test]
fn a_missing_program_is_a_usage_error() {
    for args in [&[][..], &["-np", "2"], &["--tag-output", "--"]] {
        let out = run(args);
        assert_eq!(code(&out), 2, "{args:?}");
        assert_one_line(&out, "mprun: missing PROGRAM to run");
    }
}

#[test]
fn a_program_that_does_not_exist_exits_127() {
    let out = run(&["-np", "2", "mprun-no-such-program"]);
    assert_eq!(code(&out), 127);
    assert_one_line(&out, "mprun: mprun-no-such-program: program not found");
    let out = run(&["-np", "2", "./no/such/program"]);
    assert_eq!(code(&out), 127);
    assert_one_line(&out, "mprun: ./no/such/program: program not found");
}

#[test]
fn a_program_that_is_not_executable_exits_126() {
    let dir = TempDir::new("noexec");
    let file = dir.path().join("script");
    std::fs::write(&file, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = file.to_str().unwrap();
    let out = run(&["-np", "2", path]);
    assert_eq!(code(&out), 126);
    assert_one_line(&out, &format!("mprun: {path}: permission denied"));

    // Found through PATH but not executable: also 126, as in a shell.
    let mut cmd = mprun(&["-np", "1", "script"]);
    cmd.env("PATH", dir.path());
    let out = run_with(cmd, None);
    assert_eq!(code(&out), 126);
    assert_one_line(&out, "mprun: script: permission denied");

    let out = run(&["-np", "1", dir.str()]);
    assert_eq!(code(&out), 126);
    assert_one_line(&out, &format!("mprun: {}: is a directory", dir.str()));
}

#[test]
fn programs_are_found_through_path() {
    let dir = TempDir::new("path");
    let file = dir.path().join("hello-mpr");
    std::fs::write(&file, "#!/bin/sh\necho \"hello $MPR_RANK\"\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = mprun(&["-np", "1", "hello-mpr"]);
    cmd.env("PATH", format!("/nonexistent:{}:/bin:/usr/bin", dir.str()));
    let out = run_with(cmd, None);
    assert_eq!(code(&out), 0, "{}", common::stderr(&out));
    assert_eq!(stdout(&out), "hello 0\n");
}

#[test]
fn other_bad_values_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["--timeout", "soon", "true"], "mprun: --timeout: expected a positive number of seconds, got 'soon'"),
        (&["--timeout", "0", "true"], "mprun: --timeout: expected a positive number of seconds"),
        (&["--env", "NOEQUALS", "true"], "mprun: --env: expected K=V, got 'NOEQUALS'"),
        (&["-np", "2", "-np", "3", "true"], "mprun: error: the argument '--np <N>' cannot be used multiple times"),
    ];
    for (args, prefix) in cases {
        let out = run(args);
        assert_eq!(code(&out), 2, "{args:?}");
        assert_one_line(&out, prefix);
    }
    let mut cmd = mprun(&["true"]);
    cmd.env("MPR_KILL_GRACE_MS", "later");
    let out = run_with(cmd, None);
    assert_eq!(code(&out), 2);
    assert_one_line(&out, "mprun: MPR_KILL_GRACE_MS: expected a number of milliseconds, got 'later'");
}

/// A rank count no machine runs (more than 64 per CPU here) is refused before any fork, in
/// one line naming the way round it; `--oversubscribe` lets a small excess through.
#[test]
fn too_many_ranks_for_this_machine_are_refused_before_any_fork() {
    let dir = TempDir::new("toomany");
    let marker = dir.path().join("started");
    let cpus = std::thread::available_parallelism().unwrap().get();
    let start = std::time::Instant::now();
    let out = run(&["-np", "1000000", "touch", marker.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert_one_line(&out, &format!("mprun: -np 1000000: 1000000 ranks on this machine's {cpus} CPU(s) is more than 64 per CPU; add --oversubscribe"));
    assert!(start.elapsed() < std::time::Duration::from_secs(5), "{:?}", start.elapsed());
    assert!(!marker.exists(), "no rank started");
    let np = (64 * cpus + 1).to_string();
    assert_eq!(code(&run(&["-np", &np, "true"])), 2);
    let out = run(&["--oversubscribe", "-np", &np, "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// A hostfile larger than any list of hosts (a device, a wrong file) is refused at once, not
/// read for ever.
#[test]
fn an_endless_hostfile_is_refused() {
    let out = run(&["--hostfile", "/dev/zero", "-np", "1", "true"]);
    assert_eq!(code(&out), 2);
    assert_one_line(&out, "mprun: --hostfile /dev/zero: larger than 1024 KiB: not a file of hosts");
}

/// A transport name the ranks would not know is mprun's usage error, not a rank's failure.
#[test]
fn an_unknown_transport_is_a_usage_error() {
    let out = run(&["--transports", "shm,foo", "-np", "2", "true"]);
    assert_eq!(code(&out), 2);
    assert_one_line(&out, "mprun: --transports: unknown transport 'foo' (expected shm, tcp or rdma)");
}

#[test]
fn no_rank_starts_on_bad_input() {
    let dir = TempDir::new("nostart");
    let marker = dir.path().join("started");
    let marker = marker.to_str().unwrap();
    for bad in [&["--bogus"][..], &["--timeout", "x"], &["-np", "0"], &["--env", "x"]] {
        let mut args = bad.to_vec();
        args.extend(["touch", marker]);
        assert_eq!(code(&run(&args)), 2, "{args:?}");
    }
    assert!(!dir.path().join("started").exists());
}

#[test]
fn help_works() {
    let out = run(&["--help"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(text.contains("Usage: mprun -np N [OPTIONS] PROGRAM [ARGS]..."), "{text}");
    assert!(text.contains("--tag-output") && text.contains("MPR_KILL_GRACE_MS"), "{text}");
}

#[test]
fn options_stop_at_the_program() {
    for np in [&["-np", "2"][..], &["-n", "2"], &["--np", "2"], &["--np=2"], &["-n2"]] {
        let mut args = np.to_vec();
        args.extend(["sh", "-c", "echo \"$MPR_SIZE:$*\"", "sh", "-n", "5", "--np", "--bogus"]);
        let out = run(&args);
        assert_eq!(code(&out), 0, "{args:?}: {}", common::stderr(&out));
        assert_eq!(stdout(&out), "2:-n 5 --np --bogus\n2:-n 5 --np --bogus\n", "{args:?}");
    }
}

#[test]
fn one_rank_by_default() {
    let out = run(&["sh", "-c", "echo $MPR_SIZE"]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out), "1\n");
}
