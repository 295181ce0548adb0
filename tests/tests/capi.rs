//! The C ABI (`mpi.h`, `libmpr`, `mprcc`): C programs of tests/c built with `mprcc` (and as
//! C++ with `mprcxx`) and run under `mprun`, against the same programs built with MPICH's
//! `mpicc` and run with its `mpiexec`: the outputs must be the same.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mpr_tests::{bin_dir, mprun, text};

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c").join(name)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mpr-capi-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// MPICH's compiler and launcher, if installed.
fn mpich() -> bool {
    let found = Command::new("mpicc.mpich").arg("-show").output().is_ok_and(|o| o.status.success());
    if !found {
        mpr_tests::cannot_run("MPICH's mpicc.mpich not installed (apt-get install mpich libmpich-dev)");
    }
    found
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    out
}

fn built(out: Output, what: &str) {
    assert!(out.status.success(), "{what}: {}{}", text(&out.stdout), text(&out.stderr));
}

fn sorted(out: &Output) -> Vec<String> {
    let mut l: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    l.sort();
    l
}

/// Builds tests/c/`name` with mprcc (and as C++ with mprcxx) and with MPICH's mpicc, runs
/// each on every `np` of `nps` (mpr's also with each of `options`, on the first `np`), and
/// checks mpr's output lines are MPICH's. An option set comes with the text of lines it
/// changes by design (compared neither side), or "".
fn same_as_mpich(name: &str, nps: &[&str], options: &[(&[&str], &str)]) {
    if !mpich() {
        return;
    }
    let dir = scratch(name);
    let (mpr_c, mpr_cxx, ref_c) = (dir.join("c.mpr"), dir.join("cxx.mpr"), dir.join("c.mpich"));
    let src = source(name);
    let mprcc = bin_dir().join("mprcc");
    built(run(Command::new(&mprcc).args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"]).arg(&mpr_c).arg(&src)), "mprcc");
    // The header is C++-safe: the same program as C++.
    let mprcxx = bin_dir().join("mprcxx");
    built(run(Command::new(&mprcxx).args(["-O2", "-Wall", "-x", "c++", "-o"]).arg(&mpr_cxx).arg(&src)), "mprcxx");
    built(run(Command::new("mpicc.mpich").args(["-O2", "-o"]).arg(&ref_c).arg(&src)), "mpicc.mpich");
    for np in nps {
        let reference = run(Command::new("timeout").args(["120", "mpiexec.mpich", "-n", np]).arg(&ref_c));
        assert!(reference.status.success(), "{name} on MPICH: {}", text(&reference.stderr));
        let want = sorted(&reference);
        assert!(want.len() > 20, "{want:?}");
        let mut runs: Vec<(&PathBuf, &[&str], &str)> = vec![(&mpr_c, &[], ""), (&mpr_cxx, &[], "")];
        if np == &nps[0] {
            runs.extend(options.iter().map(|&(o, skip)| (&mpr_c, o, skip)));
        }
        for (program, opts, skip) in runs {
            let out = mprun(&[opts, &["-np", np, program.to_str().unwrap()]].concat(), &[]);
            let what = format!("{name} ({} {opts:?}) on {np}", program.display());
            assert!(out.status.success(), "{what}: {}", text(&out.stderr));
            let kept = |l: &Vec<String>| -> Vec<String> {
                l.iter().filter(|l| skip.is_empty() || !l.contains(skip)).cloned().collect()
            };
            let (want, got) = (kept(&want), kept(&sorted(&out)));
            let differ: Vec<_> = want.iter().zip(&got).filter(|(a, b)| a != b).take(10).collect();
            assert!(got == want, "{what}: lines differ from MPICH's (MPICH, mpr): {differ:#?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn environment_point_to_point_reductions_and_errors_as_on_mpich() {
    same_as_mpich("basics.c", &["3"], &[]);
}

#[test]
fn collectives_and_communicators_as_on_mpich() {
    // Blocking and nonblocking collectives over TCP and RDMA too (ranks that may not share
    // memory make a shared communicator each).
    same_as_mpich(
        "coll.c",
        &["3", "4"],
        &[
            (&["--transports", "tcp"], "shared size"),
            (&["--transports", "rdma", "--env", "MPR_VERBS_PROVIDER=soft"], "shared size"),
        ],
    );
}

#[test]
fn windows_and_one_sided_operations_as_on_mpich() {
    // Over shared memory (a window from MPI_Win_allocate in one segment), TCP, and RDMA
    // through the software provider of an RC NIC (puts and gets by RDMA WRITE and READ).
    same_as_mpich(
        "rma.c",
        &["3", "4"],
        &[
            // Ranks that may not share memory make a shared communicator each: its lines
            // differ by design.
            (&["--transports", "tcp"], "shared:"),
            (&["--transports", "shm,rdma", "--env", "MPR_VERBS_PROVIDER=soft-rc"], ""),
        ],
    );
}

#[test]
fn requests_and_send_modes_as_on_mpich() {
    // Over shared memory, TCP, and RDMA through the software providers (Thunderbolt's UC
    // device, and an RC NIC's, whose receiver reads large messages itself).
    same_as_mpich(
        "p2p.c",
        &["3", "4"],
        &[
            (&["--transports", "tcp"], ""),
            (&["--transports", "rdma", "--env", "MPR_VERBS_PROVIDER=soft"], ""),
            (&["--transports", "rdma", "--env", "MPR_VERBS_PROVIDER=soft-rc"], ""),
        ],
    );
}

#[test]
fn derived_datatypes_user_operations_and_packing_as_on_mpich() {
    // Derived datatypes through every transport: packed sends the engine owns, receives
    // it unpacks when they complete (a rendezvous among them), strided one-sided targets.
    same_as_mpich(
        "types.c",
        &["3", "4"],
        &[
            (&["--transports", "tcp"], ""),
            (&["--transports", "rdma", "--env", "MPR_VERBS_PROVIDER=soft"], ""),
            (&["--transports", "shm,rdma", "--env", "MPR_VERBS_PROVIDER=soft-rc"], ""),
        ],
    );
}

#[test]
fn cartesian_grids_as_on_mpich() {
    // Grids over shared memory and TCP: the halo exchange and the sub-grids' reductions
    // run on the communicators the grids made.
    same_as_mpich("topo.c", &["4", "6"], &[(&["--transports", "tcp"], "")]);
}

#[test]
fn mpi_1_names_as_on_mpich() {
    // What programs written for MPI-1 call (HPL 2.x's panels among them), over shared
    // memory and TCP.
    same_as_mpich("legacy.c", &["3"], &[(&["--transports", "tcp"], "")]);
}

#[test]
fn attributes_of_datatypes_and_windows_and_added_error_classes_as_on_mpich() {
    same_as_mpich("keys.c", &["2"], &[(&["--transports", "tcp"], "")]);
}

#[test]
fn inter_communicators_as_on_mpich() {
    // Groups of 3 and 2 (the larger group low), of 2 and 2, of 2 and 1 (a split color the
    // other group lacks), and of 1 and 1; the collectives' steps within each group over TCP
    // and RDMA too.
    same_as_mpich(
        "inter.c",
        &["5", "4", "3", "2"],
        &[(&["--transports", "tcp"], ""), (&["--transports", "rdma", "--env", "MPR_VERBS_PROVIDER=soft"], "")],
    );
}

#[test]
fn corners_mpichs_test_suite_checks_as_on_mpich() {
    // Over shared memory and TCP (where each rank's shared window is its own: those lines
    // differ by design).
    same_as_mpich("corners.c", &["4", "3"], &[(&["--transports", "tcp"], "shared parts")]);
}

#[test]
fn sends_nothing_matched_are_cancelled_on_every_transport() {
    // MPICH and Open MPI wait for ever on this program's first cancelled send: each rank's
    // lines are checked against what MPI-3.1 3.8.4 lets it print.
    let dir = scratch("cancel");
    let exe = dir.join("cancel");
    built(run(Command::new(bin_dir().join("mprcc")).arg("-o").arg(&exe).arg(source("cancel.c"))), "mprcc");
    let transports: [&[&str]; 4] = [
        &[],
        &["--transports", "tcp"],
        &["--transports", "rdma", "--env", "MPR_VERBS_PROVIDER=soft"],
        &["--transports", "rdma", "--env", "MPR_VERBS_PROVIDER=soft-rc"],
    ];
    for (np, opts) in [(3, transports[0]), (2, transports[0])].into_iter().chain(transports.iter().map(|&o| (3, o))) {
        let out = mprun(&[opts, &["-np", &np.to_string(), exe.to_str().unwrap()]].concat(), &[]);
        assert!(out.status.success(), "{opts:?} np {np}: {}", text(&out.stderr));
        let mut want: Vec<String> = (0..np)
            .flat_map(|r| {
                [
                    "large send cancelled = 1, request null 1",
                    "synchronous send cancelled = 1",
                    "cancelled messages arrived: 0 0",
                    "eager send: cancelled, or received: 1",
                    "matched send cancelled = 0, bad 0",
                    "persistent send cancelled = 1, kept 1",
                    "started again: cancelled 0, bad 0",
                    "waitall: success 1, cancelled 1 1 0, got 1",
                    "get_status: cancelled 1, request kept 1",
                    "then wait: cancelled 1",
                    "send to self cancelled = 1, arrived 0",
                    "done",
                ]
                .map(|l| format!("{r}: {l}"))
            })
            .collect();
        want.sort();
        assert_eq!(sorted(&out), want, "{opts:?} np {np}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_library_exports_what_the_header_declares() {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/include/mpi.h")).unwrap();
    let mut declared: Vec<&str> = header
        .lines()
        .filter_map(|l| {
            // The return types of mpi.h's functions: handles too (MPI_Comm_f2c and its kin).
            let types = ["int ", "double ", "MPI_Aint ", "MPI_Fint ", "MPI_Comm ", "MPI_Datatype ", "MPI_Group "];
            let more = ["MPI_Request ", "MPI_Op ", "MPI_Win ", "MPI_Info ", "MPI_Errhandler ", "MPI_Message "];
            types.iter().chain(&more).find_map(|t| l.strip_prefix(t))
        })
        .filter_map(|l| l.split('(').next())
        .filter(|n| n.starts_with("MPI_") || n.starts_with("PMPI_"))
        .collect();
    declared.sort_unstable();
    // Where mprcc links it from (cargo test leaves it in deps).
    let lib = mpr::info::c_abi(&bin_dir()).lib.expect("libmpr built").join(mpr::info::C_LIBRARY);
    let nm = run(Command::new("nm").args(["-D", "--defined-only"]).arg(&lib));
    assert!(nm.status.success(), "nm {}: {}", lib.display(), text(&nm.stderr));
    let listing = text(&nm.stdout);
    let mut exported: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|n| n.starts_with("MPI_") || n.starts_with("PMPI_"))
        .collect();
    exported.sort_unstable();
    assert_eq!(declared, exported, "mpi.h's functions and libmpr's exports");
    // Each MPI name has its profiling name.
    let mpi: Vec<&&str> = declared.iter().filter(|n| n.starts_with("MPI_")).collect();
    assert!(mpi.len() > 40 && mpi.len() * 2 == declared.len(), "{declared:?}");
}

#[test]
fn an_error_under_errors_are_fatal_ends_the_job_naming_the_rank() {
    let dir = scratch("fatal");
    let mine = dir.join("fatal.mpr");
    built(run(Command::new(bin_dir().join("mprcc")).arg("-o").arg(&mine).arg(source("fatal.c"))), "mprcc");
    let ours = mprun(&["-np", "3", mine.to_str().unwrap()], &[]);
    let mut jobs = vec![("mpr", ours.clone())];
    // MPICH ends the same program too (checked where it is installed).
    if mpich() {
        let reference = dir.join("fatal.mpich");
        built(run(Command::new("mpicc.mpich").arg("-o").arg(&reference).arg(source("fatal.c"))), "mpicc.mpich");
        jobs.push(("MPICH", run(Command::new("timeout").args(["120", "mpiexec.mpich", "-n", "3"]).arg(&reference))));
    }
    for (who, out) in &jobs {
        assert!(!out.status.success(), "{who}: the job went on: {}", text(&out.stdout));
        assert!(!text(&out.stdout).contains("not reached"), "{who}: {}", text(&out.stdout));
    }
    let err = text(&ours.stderr);
    assert!(err.contains("rank 1") && err.contains("MPI_Send") && err.contains("invalid rank 99"), "{err}");
    assert_eq!(ours.status.code(), Some(6), "MPI_ERR_RANK as the exit code: {err}");
    // MPI_Abort: the job ends with the program's code, the rank named.
    let aborted = mprun(&["-np", "3", mine.to_str().unwrap(), "abort"], &[]);
    let err = text(&aborted.stderr);
    assert_eq!(aborted.status.code(), Some(7), "MPI_Abort's code as the job's: {err}");
    assert!(err.contains("rank 1") && err.contains("aborted the job with code 7"), "{err}");
    assert!(!text(&aborted.stdout).contains("not reached"), "{}", text(&aborted.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_call_from_a_thread_other_than_mpi_inits_ends_the_job() {
    let dir = scratch("threads");
    let exe = dir.join("threads");
    built(
        run(Command::new(bin_dir().join("mprcc")).arg("-pthread").arg("-o").arg(&exe).arg(source("threads.c"))),
        "mprcc",
    );
    let out = mprun(&["-np", "2", exe.to_str().unwrap()], &[]);
    let (stdout, err) = (text(&out.stdout), text(&out.stderr));
    // Both ranks were told the truth about the thread level before the error.
    for rank in 0..2 {
        assert!(stdout.contains(&format!("{rank}: provided funneled, main 1")), "{stdout}");
    }
    assert!(!stdout.contains("not reached"), "{stdout}");
    assert!(!out.status.success(), "the job went on: {stdout}");
    assert!(err.contains("MPI_Comm_size from a thread other than MPI_Init's"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn erroneous_calls_mpich_lets_through_get_their_error_classes() {
    let dir = scratch("refusals");
    let exe = dir.join("refusals");
    built(run(Command::new(bin_dir().join("mprcc")).arg("-o").arg(&exe).arg(source("refusals.c"))), "mprcc");
    let out = mprun(&["-np", "2", exe.to_str().unwrap()], &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    // Error classes as include/mpi.h numbers them (MPICH's numbers).
    let (truncate, keyval, rma_sync, op, topology, dims, request) = (14, 48, 50, 9, 10, 11, 19);
    for rank in 0..2 {
        let refused = format!("{rank}: in a fence epoch: class {rma_sync}, null 1\n");
        assert_eq!(stdout.matches(&refused).count(), 4, "{stdout}");
        assert!(stdout.contains(&format!("{rank}: in a lock epoch: 0\n")), "{stdout}");
        let pack = format!("{rank}: pack overflow: class {truncate}, position 0, buffer abcd\n");
        assert!(stdout.contains(&pack), "{stdout}");
        assert!(stdout.contains(&format!("{rank}: set_attr of a freed key: class {keyval}\n")), "{stdout}");
        // Refused, and the target's zeroed window unchanged.
        let max = format!("{rank}: max of complex numbers: class {op}, target 0 0\n");
        assert!(stdout.contains(&max), "{stdout}");
        let pairs = format!("{rank}: sum of pairs: class {op}, minloc of ints: class {op}\n");
        assert!(stdout.contains(&pairs), "{stdout}");
        // From the other rank: (rank 1 % 2) at 1 into rank 0, (0 % 2) at 0 into rank 1.
        let from = (rank + 1) % 2;
        let small = format!("{rank}: a window of one pair's bytes: {} at {from}\n", from % 2);
        assert!(stdout.contains(&small), "{stdout}");
        let assert = 53;
        let bytes = format!(
            "{rank}: sum of bytes: class {op}, assertion 1<<20: class {assert}, window key 12345: class {keyval}\n"
        );
        assert!(stdout.contains(&bytes), "{stdout}");
        let info = 28;
        assert!(stdout.contains(&format!("{rank}: window info 12345: class {info}\n")), "{stdout}");
        let made =
            format!("{rank}: info 12345 making a window: class {info}, null 1; allocating: class {info}, null 1\n");
        assert!(stdout.contains(&made), "{stdout}");
        let zero = format!("{rank}: grid with a dimension of no points: class {dims}, null 1\n");
        assert!(stdout.contains(&zero), "{stdout}");
        assert!(
            stdout.contains(&format!("{rank}: grid of a communicator without one: class {topology}\n")),
            "{stdout}"
        );
        let kinds =
            format!("{rank}: a window's handler on a communicator: class 12, a communicator's on a window: class 12\n");
        assert!(stdout.contains(&kinds), "{stdout}");
        let nd = format!("{rank}: dimensions of a communicator without a grid: class {topology}, -1\n");
        assert!(stdout.contains(&nd), "{stdout}");
        let stale = format!(
            "{rank}: a completed request's handle: got {}, classes {request} {request} {request} {request}, \
             a made-up handle: class {request}\n",
            (rank + 1) % 2 + 40
        );
        assert!(stdout.contains(&stale), "{stdout}");
        let win = 45;
        let bogus = format!("{rank}: a made-up window: classes {win} {win} {win} {win} {win} {win}\n");
        assert!(stdout.contains(&bogus), "{stdout}");
        let added = format!("{rank}: error code of no class: class 12; text for a predefined class: class 12\n");
        assert!(stdout.contains(&added), "{stdout}");
        let comm = 5;
        let remote = format!(
            "{rank}: remote size of an intra-communicator: class {comm}, -1; its remote group: class {comm}, null 1\n"
        );
        assert!(stdout.contains(&remote), "{stdout}");
        let inter = format!(
            "{rank}: on an inter-communicator: scan class {comm}, iscan class {comm}, window class {comm}, \
             grid class {comm}; null 1 1 1\n"
        );
        assert!(stdout.contains(&inter), "{stdout}");
        let leader = format!("{rank}: an inter-communicator's remote leader out of range: class 6, null 1\n");
        assert!(stdout.contains(&leader), "{stdout}");
        let status = format!("{rank}: a null status to Fortran: class 12, from Fortran: class 12\n");
        assert!(stdout.contains(&status), "{stdout}");
        let darray = format!(
            "{rank}: a darray of a grid of 4 for 5 processes: class 12; undistributed over 2: class 12; null 1 1\n"
        );
        assert!(stdout.contains(&darray), "{stdout}");
        let twice = format!("{rank}: a generalized request completed twice: class {request}, frees 1\n");
        assert!(stdout.contains(&twice), "{stdout}");
        assert!(stdout.contains(&format!("{rank}: freed before it completed: frees 1 then 2\n")), "{stdout}");
        // free_fn returned MPI_ERR_ARG (12); query_fn MPI_ERR_COUNT (2), and free_fn still ran.
        let codes = format!(
            "{rank}: free_fn's code: wait class 12, waitall class 17, status class 12; query_fn's: class 2, frees 5\n"
        );
        assert!(stdout.contains(&codes), "{stdout}");
        let (arg, conversion) = (12, 23);
        let external = format!(
            "{rank}: external32: native class {arg}, too small {truncate}, unpacked past the end {truncate}, \
             a long of 2^40 {conversion}; positions 0 0 0 0\n"
        );
        assert!(stdout.contains(&external), "{stdout}");
        assert!(stdout.contains(&format!("{rank}: max of CHARACTERs: class {op}, result --\n")), "{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mprcc_shows_compiles_and_links_in_steps() {
    let dir = scratch("steps");
    let mprcc = bin_dir().join("mprcc");
    let show = run(Command::new(&mprcc).args(["-show", "-o", "x", "x.c"]));
    let line = text(&show.stdout);
    assert!(show.status.success() && line.starts_with("cc -I") && line.contains(" -lmpr"), "{line}");
    let include = line.split_whitespace().find_map(|w| w.strip_prefix("-I")).unwrap();
    assert!(Path::new(include).join("mpi.h").is_file(), "{line}");
    // -c compiles without linking; the object then links through mprcc.
    let (obj, exe) = (dir.join("fatal.o"), dir.join("fatal"));
    let compile = run(Command::new(&mprcc).args(["-show", "-c"]).arg(source("fatal.c")));
    assert!(!text(&compile.stdout).contains("-lmpr"), "{}", text(&compile.stdout));
    built(run(Command::new(&mprcc).arg("-c").arg(source("fatal.c")).arg("-o").arg(&obj)), "mprcc -c");
    built(run(Command::new(&mprcc).arg(&obj).arg("-o").arg(&exe)), "mprcc link");
    // -E preprocesses: MPI_COMM_WORLD is mpr's handle 1.
    let pre = run(Command::new(&mprcc).arg("-E").arg(source("fatal.c")));
    assert!(pre.status.success() && text(&pre.stdout).contains("((MPI_Comm)1)"), "{}", text(&pre.stderr));
    // A compiler error is the compiler's exit code.
    std::fs::write(dir.join("bad.c"), "int main(void) { return undeclared; }\n").unwrap();
    let bad = run(Command::new(&mprcc).arg("-c").arg(dir.join("bad.c")).arg("-o").arg(dir.join("bad.o")));
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// tests/c/build, copied to a scratch directory.
fn build_project(name: &str) -> PathBuf {
    let dir = scratch(name);
    for f in ["ring.c", "Makefile", "configure.ac", "Makefile.conf.in", "CMakeLists.txt"] {
        std::fs::copy(source("build").join(f), dir.join(f)).unwrap();
    }
    dir
}

/// Whether build tool `tool` (a Debian package of that name) runs here; says it cannot
/// run the test if not (an error under `CI=true`).
fn installed(tool: &str) -> bool {
    let found = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        mpr_tests::cannot_run(&format!("{tool} not installed (apt-get install {tool})"));
    }
    found
}

fn ring_runs(dir: &Path, np: &str) {
    let out = mprun(&["-np", np, dir.join("ring").to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let want = format!("token came back as {} after {np} ranks\n", 1 << (np.parse::<u32>().unwrap() - 1));
    assert_eq!(text(&out.stdout), want);
}

#[test]
fn a_makefile_builds_with_cc_mprcc() {
    let dir = build_project("make");
    let mprcc = bin_dir().join("mprcc");
    let out = run(Command::new("make").arg(format!("CC={}", mprcc.display())).current_dir(&dir));
    built(out, "make CC=mprcc");
    ring_runs(&dir, "3");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_autoconf_configure_probes_compile_link_and_run_with_mprcc() {
    if !installed("autoconf") {
        return;
    }
    let dir = build_project("autoconf");
    built(run(Command::new("autoconf").current_dir(&dir)), "autoconf");
    let mprcc = bin_dir().join("mprcc");
    let out = run(Command::new("./configure").arg(format!("CC={}", mprcc.display())).current_dir(&dir));
    let log = text(&out.stdout);
    built(out, "./configure CC=mprcc");
    // Its compile probe (mpi.h), link probes (a function there, one absent) and run probe.
    for line in [
        "checking for mpi.h... yes",
        "checking for library containing MPI_Init... none required",
        "checking for MPI_Win_allocate... yes",
        "checking for MPI_File_open... no",
        "checking for MPI 3... yes",
    ] {
        assert!(log.contains(line), "{line:?} not in:\n{log}");
    }
    built(run(Command::new("make").args(["-f", "Makefile.conf"]).current_dir(&dir)), "make");
    ring_runs(&dir, "4");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cmake_find_package_mpi_finds_mpr_through_mprcc() {
    if !installed("cmake") {
        return;
    }
    let dir = build_project("cmake");
    let mprcc = bin_dir().join("mprcc");
    let out = run(Command::new("cmake")
        .arg("-S")
        .arg(&dir)
        .arg("-B")
        .arg(dir.join("build"))
        .arg(format!("-DMPI_C_COMPILER={}", mprcc.display())));
    let log = text(&out.stdout);
    built(out, "cmake -DMPI_C_COMPILER=mprcc");
    // FindMPI asked mprcc, not another MPI of this machine, for the library and the header.
    assert!(log.contains("Found MPI_C: ") && log.contains("found suitable version \"3.1\""), "{log}");
    let libs = log.lines().find_map(|l| l.strip_prefix("-- MPI_C_LIBRARIES: ")).unwrap_or_default();
    let includes = log.lines().find_map(|l| l.strip_prefix("-- MPI_C_INCLUDE_DIRS: ")).unwrap_or_default();
    assert!(libs.split(';').any(|l| l.ends_with("/libmpr.so")), "MPI_C_LIBRARIES: {libs:?}\n{log}");
    assert!(
        includes
            .split(';')
            .any(|d| std::fs::read_to_string(Path::new(d).join("mpi.h")).is_ok_and(|h| h.contains("MPR_C_ABI"))),
        "MPI_C_INCLUDE_DIRS: {includes:?}\n{log}"
    );
    built(run(Command::new("cmake").arg("--build").arg(dir.join("build"))), "cmake --build");
    std::fs::rename(dir.join("build").join("ring"), dir.join("ring")).unwrap();
    ring_runs(&dir, "3");
    let _ = std::fs::remove_dir_all(&dir);
}
