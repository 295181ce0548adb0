//! `mpr-hpl` through mprun: HPL's matrix, the solve on every grid shape, HPL's check, its
//! HPL.dat and its failures.

#[path = "../../../launcher/tests/common/netns.rs"]
mod netns;

use std::path::PathBuf;
use std::time::Duration;

use mpr_tests::{mprun, text};

/// The binary under test: cargo builds a package's binaries for its integration tests.
fn hpl() -> String {
    env!("CARGO_BIN_EXE_mpr-hpl").to_string()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mpr-hpl-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The scaled residual and verdict of every test in a report.
fn residuals(out: &str) -> Vec<(f64, String)> {
    out.lines()
        .filter_map(|l| l.strip_prefix("||Ax-b||_oo/(eps*(||A||_oo*||x||_oo+||b||_oo)*N)="))
        .map(|r| {
            let (v, verdict) = r.split_once("......").expect("a verdict");
            (v.trim().parse().expect("a number"), verdict.trim().to_string())
        })
        .collect()
}

fn read_x(path: &std::path::Path) -> Vec<f64> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| l.parse().unwrap()).collect()
}

#[test]
fn every_grid_passes_and_agrees_with_one_rank() {
    let dir = scratch("grids");
    // N = 1, N < NB, N not a multiple of NB, and a few blocks.
    for (n, nb) in [(1, 4), (3, 8), (37, 8), (64, 5)] {
        let base = dir.join("x");
        let one = |np: &str, p: &str, q: &str, tag: &str| {
            let x = format!("{}-{tag}", base.display());
            let out = mprun(
                &["-np", np, &hpl(), "-n", &n.to_string(), "--nb", &nb.to_string(), "-p", p, "-q", q, "--write-x", &x],
                &[],
            );
            let so = text(&out.stdout);
            assert!(out.status.success(), "{n}/{nb} {p}x{q}: {so}\n{}", text(&out.stderr));
            let r = residuals(&so);
            assert_eq!(r.len(), 1, "{so}");
            assert!(r[0].0 < 1.0 && r[0].1 == "PASSED", "{n}/{nb} {p}x{q}: residual well under 16: {so}");
            assert!(so.contains("WR11R2R16"), "{so}");
            read_x(&PathBuf::from(format!("{x}.{n}")))
        };
        let reference = one("1", "1", "1", "1x1");
        assert_eq!(reference.len(), n);
        // One rank agrees with a plain solve, written here, of the matrix generated here.
        for (i, (a, b)) in reference.iter().zip(plain_solve(n)).enumerate() {
            assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "N={n} NB={nb} 1x1: x[{i}] {a} vs plain {b}");
        }
        for (np, p, q) in [("2", "1", "2"), ("2", "2", "1"), ("4", "2", "2"), ("3", "1", "3"), ("3", "3", "1")] {
            let x = one(np, p, q, &format!("{p}x{q}"));
            for (i, (a, b)) in x.iter().zip(&reference).enumerate() {
                assert!((a - b).abs() <= 1e-10 * b.abs().max(1.0), "N={n} NB={nb} {p}x{q}: x[{i}] {a} vs {b}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// HPL's [A|b] of order n, column-major (n rows, n + 1 columns), by stepping the LCG from
/// its seed: independent of mpr-hpl's jump-ahead.
fn hpl_matrix(n: usize) -> Vec<f64> {
    let mut x: u64 = 100;
    (0..n * (n + 1))
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            0.5 - (x as f64) / 2f64.powi(64)
        })
        .collect()
}

/// x of A x = b for HPL's matrix of order n, by Gaussian elimination with partial pivoting.
fn plain_solve(n: usize) -> Vec<f64> {
    let mut a = hpl_matrix(n);
    let at = |i: usize, j: usize| i + j * n;
    for k in 0..n {
        let p = (k..n).max_by(|&i, &j| a[at(i, k)].abs().total_cmp(&a[at(j, k)].abs())).unwrap();
        for j in k..=n {
            a.swap(at(k, j), at(p, j));
        }
        for i in k + 1..n {
            let f = a[at(i, k)] / a[at(k, k)];
            for j in k..=n {
                a[at(i, j)] -= f * a[at(k, j)];
            }
        }
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|j| a[at(i, j)] * x[j]).sum();
        x[i] = (a[at(i, n)] - s) / a[at(i, i)];
    }
    x
}

#[test]
fn threads_per_rank_solve_the_same() {
    let out = mprun(&["-np", "2", &hpl(), "-n", "300", "--nb", "32", "-q", "2", "--threads", "2"], &[]);
    let so = text(&out.stdout);
    assert!(out.status.success() && so.contains("2 thread(s) per rank"), "{so}{}", text(&out.stderr));
    assert_eq!(residuals(&so)[0].1, "PASSED", "{so}");
    let out = mprun(&["-np", "1", &hpl(), "-n", "30", "--threads", "9"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--threads"), "{}", text(&out.stderr));
}

#[test]
fn the_matrix_is_hpls_generator_whatever_the_grid() {
    // Independently of mpr-hpl's jump-ahead: step the LCG from the seed, column-major over
    // the N x (N+1) matrix [A|b].
    let n = 10usize;
    let mut want = std::collections::HashMap::new();
    let mut x: u64 = 100;
    for j in 0..=n {
        for i in 0..n {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            want.insert((i, j), 0.5 - (x as f64) / 2f64.powi(64));
        }
    }
    for (np, p, q, nb) in [("1", "1", "1", "4"), ("4", "2", "2", "2"), ("3", "1", "3", "3")] {
        let out = mprun(&["-np", np, &hpl(), "-n", "10", "--nb", nb, "-p", p, "-q", q, "--dump-matrix"], &[]);
        let so = text(&out.stdout);
        assert!(out.status.success(), "{so}{}", text(&out.stderr));
        let mut seen = 0;
        for l in so.lines().filter_map(|l| l.strip_prefix("A(")) {
            let (ij, v) = l.split_once(")= ").unwrap();
            let (i, j) = ij.split_once(',').unwrap();
            let key = (i.parse().unwrap(), j.parse().unwrap());
            assert_eq!(v.parse::<f64>().unwrap(), want[&key], "A{key:?} on a {p}x{q} grid, NB {nb}");
            seen += 1;
        }
        assert_eq!(seen, 16, "{so}");
    }
    // The first entries, as numbers.
    assert_eq!(want[&(0, 0)], -5.159944193766641e-5);
    assert_eq!(want[&(1, 0)], 0.38413122531282284);
}

#[test]
fn every_broadcast_topology_gives_the_same_solution() {
    // A broadcast copies: HPL's six topologies must give x bit for bit alike (with lookahead,
    // where the root's head start differs between them).
    let dir = scratch("bcast");
    for (np, q) in [("3", "3"), ("4", "4")] {
        let mut first: Option<String> = None;
        for top in 0..6 {
            let x = dir.join(format!("x{q}-{top}"));
            let args = ["-np", np, &hpl(), "-n", "203", "--nb", "16", "-p", "1", "-q", q, "--bcast", &top.to_string()];
            let out = mprun(&[&args[..], &["--write-x", x.to_str().unwrap()]].concat(), &[]);
            let so = text(&out.stdout);
            assert!(out.status.success() && so.contains(&format!("WR1{top}R2R16")), "{so}{}", text(&out.stderr));
            let got = std::fs::read_to_string(format!("{}.203", x.display())).unwrap();
            match &first {
                None => first = Some(got),
                Some(f) => assert!(*f == got, "1x{q}: BCAST {top} gave another x than BCAST 0"),
            }
        }
        // Without lookahead: the same solution, up to the rounding of the update's split.
        let x = dir.join(format!("x{q}-depth0"));
        let args = ["-np", np, &hpl(), "-n", "203", "--nb", "16", "-p", "1", "-q", q, "--depth", "0"];
        let out = mprun(&[&args[..], &["--write-x", x.to_str().unwrap()]].concat(), &[]);
        assert!(out.status.success() && text(&out.stdout).contains("WR01R2R16"), "{}", text(&out.stdout));
        let a = read_x(&PathBuf::from(format!("{}.203", x.display())));
        let b: Vec<f64> = first.as_ref().unwrap().lines().map(|l| l.parse().unwrap()).collect();
        for (i, (u, v)) in a.iter().zip(&b).enumerate() {
            assert!((u - v).abs() <= 1e-12 * v.abs().max(1.0), "1x{q}: x[{i}] {u} (depth 0) vs {v} (depth 1)");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_swap_algorithm_gives_the_same_solution() {
    // The swaps only move rows: binary exchange (with the ranks beyond a power of two folded
    // in on 3 process rows), long (the ring) and mix (both, switching at 24 columns) must
    // give x bit for bit alike.
    let dir = scratch("swap");
    for (np, p, q) in [("3", "3", "1"), ("4", "4", "1"), ("4", "2", "2")] {
        let mut first: Option<String> = None;
        for (swap, name) in [(0, "Binary-exchange"), (1, "Spread-roll (long)"), (2, "Mix (threshold = 24)")] {
            let x = dir.join(format!("x{p}{q}-{swap}"));
            let args = ["-np", np, &hpl(), "-n", "157", "--nb", "12", "-p", p, "-q", q, "--swap", &swap.to_string()];
            let extra = ["--swap-threshold", "24", "--write-x", x.to_str().unwrap()];
            let out = mprun(&[&args[..], &extra].concat(), &[]);
            let so = text(&out.stdout);
            assert!(out.status.success(), "{p}x{q} SWAP {swap}: {so}{}", text(&out.stderr));
            assert!(so.contains(&format!("SWAP   : {name}")), "{so}");
            assert!(residuals(&so)[0].1 == "PASSED", "{so}");
            let got = std::fs::read_to_string(format!("{}.157", x.display())).unwrap();
            match &first {
                None => first = Some(got),
                Some(f) => assert!(*f == got, "{p}x{q}: SWAP {swap} gave another x than SWAP 0"),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_panel_factorization_agrees_with_one_rank() {
    // HPL's PFACT x RFACT (left, Crout, right each), with pieces that recurse twice (NB 24,
    // NDIV 3, NBMIN 4) and rows across process rows: PASSED, and x equal to rounding to
    // the right-looking solve on one rank.
    let dir = scratch("pfact");
    let run = |np: &str, p: &str, q: &str, pfact: usize, rfact: usize| {
        let x = dir.join(format!("x{p}{q}-{pfact}{rfact}"));
        let args = ["-np", np, &hpl(), "-n", "203", "--nb", "24", "--nbmin", "4", "--ndiv", "3", "-p", p, "-q", q];
        let variant = ["--pfact", &pfact.to_string(), "--rfact", &rfact.to_string(), "--write-x", x.to_str().unwrap()];
        let out = mprun(&[&args[..], &variant].concat(), &[]);
        let so = text(&out.stdout);
        let code = format!("WR11{}3{}4 ", ['L', 'C', 'R'][rfact], ['L', 'C', 'R'][pfact]);
        assert!(out.status.success() && so.contains(&code), "{p}x{q} {code}: {so}{}", text(&out.stderr));
        let r = residuals(&so);
        assert!(r[0].0 < 1.0 && r[0].1 == "PASSED", "{p}x{q} {code}: {so}");
        read_x(&PathBuf::from(format!("{}.203", x.display())))
    };
    let reference = run("1", "1", "1", 2, 2);
    for (np, p, q) in [("4", "2", "2"), ("3", "3", "1")] {
        for pfact in 0..3 {
            for rfact in 0..3 {
                let x = run(np, p, q, pfact, rfact);
                for (i, (a, b)) in x.iter().zip(&reference).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-10 * b.abs().max(1.0),
                        "{p}x{q} PFACT {pfact} RFACT {rfact}: x[{i}] {a} vs {b}"
                    );
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_perturbed_factor_fails_the_check_and_the_run() {
    let out = mprun(&["-np", "2", &hpl(), "-n", "50", "--nb", "8", "-p", "1", "-q", "2", "--perturb-factor"], &[]);
    let so = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{so}");
    let r = residuals(&so);
    assert!(r.len() == 1 && r[0].1 == "FAILED" && r[0].0 > 16.0, "{so}");
    assert!(so.contains("||A||_oo . . .") && so.contains("1 tests completed and failed residual checks"), "{so}");
}

#[test]
fn hpl_dat_runs_every_combination_and_says_what_it_skipped() {
    let dir = scratch("dat");
    let dat = dir.join("HPL.dat");
    let report = dir.join("HPL.out");
    // The reference file's layout; 2 Ns x 2 NBs x 2 grids x 2 PFACTs x 2 NBMINs x 2 BCASTs x
    // 2 DEPTHs.
    let text_dat = format!(
        "HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
{}      output file name (if any)
8            device out (6=stdout,7=stderr,file)
2            # of problems sizes (N)
20 33        Ns
2            # of NBs
4 8          NBs
1            PMAP process mapping (0=Row-,1=Column-major)
2            # of process grids (P x Q)
1 2          Ps
2 1          Qs
16.0         threshold
2            # of panel fact
2 1          PFACTs (0=left, 1=Crout, 2=Right)
2            # of recursive stopping criterium
8 2          NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
2            RFACTs (0=left, 1=Crout, 2=Right)
2            # of broadcast
0 1          BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
2            # of lookahead depth
0 2          DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
",
        report.display()
    );
    std::fs::write(&dat, text_dat).unwrap();
    let out = mprun(&["-np", "2", &hpl(), dat.to_str().unwrap()], &[]);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    // 128 combinations; those with lookahead depth 2 are skipped: the 64 with depth 0 run,
    // the other 64 are said and skipped.
    let r = residuals(&so);
    assert_eq!(r.len(), 64, "{so}");
    assert!(r.iter().all(|(v, s)| *v < 1.0 && s == "PASSED"), "{so}");
    assert!(so.contains("Finished    128 tests with the following results:"), "{so}");
    assert!(so.contains("    64 tests completed and passed residual checks,"), "{so}");
    assert!(so.contains("    64 tests skipped because of illegal input values."), "{so}");
    assert!(so.contains("WC00R2R2 ") && so.contains("WC00R2R8 "), "both NBMINs ran: {so}");
    assert!(so.contains("WC00R2C8 ") && so.contains("WC00R2C2 "), "the Crout panel ran: {so}");
    assert!(so.contains("WC20R2C8: not implemented yet (lookahead depth 2); skipped"), "{so}");
    // The parameter summary, in HPL's words; what is stored or done otherwise is said.
    assert!(so.contains("PFACT  :    Right    Crout\n") && so.contains("BCAST  :    1ring   1ringM\n"), "{so}");
    assert!(so.contains("DEPTH  :        0        2\n") && so.contains("SWAP   : Mix (threshold = 64)\n"), "{so}");
    assert!(so.contains("L1     : no-transposed form (HPL.dat asks transposed form: not implemented)"), "{so}");
    assert!(so.contains("EQUIL  : no (HPL.dat asks yes: not implemented)"), "{so}");
    assert!(so.contains("ALIGN  : 8 double precision words"), "{so}");
    assert!(so.contains("WC01R2R8 "), "the modified ring ran: {so}");
    assert!(so.contains("WC00R2R8") && so.contains("Column-major process mapping"), "{so}");
    // Device 8: the report also goes to the file HPL.dat names.
    assert_eq!(std::fs::read_to_string(&report).unwrap(), so);
    // A malformed line: one error naming it, nothing run.
    std::fs::write(&dat, std::fs::read_to_string(&dat).unwrap().replace("4 8          NBs", "4 x          NBs"))
        .unwrap();
    let out = mprun(&["-np", "2", &hpl(), dat.to_str().unwrap()], &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}: line 8 (2 NBs): expected 2 NBs, got \"4 x          NBs\"", dat.display())),
        "{err}"
    );
    assert!(residuals(&text(&out.stdout)).is_empty());
    let out = mprun(&["-np", "1", &hpl(), dir.join("missing.dat").to_str().unwrap()], &[]);
    assert!(out.status.code() == Some(2) && text(&out.stderr).contains("cannot read"), "{}", text(&out.stderr));
    // A file without end is refused, not read for ever.
    let out = mprun(&["-np", "1", &hpl(), "/dev/zero"], &[]);
    let err = text(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("/dev/zero: larger than 1024 KiB: not an HPL.dat"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hpl_runs_over_tcp_and_soft_rdma() {
    for env in [
        vec![("MPR_TRANSPORTS", "tcp")],
        vec![("MPR_TRANSPORTS", "rdma"), ("MPR_VERBS_PROVIDER", "soft")],
        vec![("MPR_TRANSPORTS", "rdma"), ("MPR_VERBS_PROVIDER", "soft-rc")],
    ] {
        let out = mprun(&["-np", "4", &hpl(), "-n", "90", "--nb", "8", "-p", "2", "-q", "2"], &env);
        let so = text(&out.stdout);
        assert!(out.status.success(), "{env:?}: {so}{}", text(&out.stderr));
        let r = residuals(&so);
        assert!(r.len() == 1 && r[0].1 == "PASSED" && r[0].0 < 1.0, "{env:?}: {so}");
    }
}

/// An N no rank can hold is one clear line and exit 2 on every rank, before anything is
/// allocated: more than the machine's memory (10^6, 10^9), or more bytes than a 64-bit count
/// holds (a product that would wrap). HPL.dat's sizes take the same check.
#[test]
fn a_matrix_too_large_is_refused_with_one_line() {
    let cases: [(&[&str], &str); 3] = [
        (&["-n", "1000000"], "more than this machine's"),
        (&["-n", "1000000000", "--nb", "1000"], "more than this machine's"),
        (&["-n", "10000000000", "--nb", "1"], "more bytes than a 64-bit count holds"),
    ];
    for (args, why) in cases {
        let mut a = vec!["-np", "2", hpl().leak()];
        a.extend_from_slice(args);
        let out = mprun(&a, &[]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("mpr-hpl: ")).collect();
        assert!(lines.len() == 1 && lines[0].contains(why), "{args:?}: one line saying why: {err}");
        assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{args:?}: {err}");
    }
}

#[test]
fn mem_fraction_picks_n_from_the_machines_memory_counted_once() {
    let kb: f64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    let want = ((0.0005 * kb * 1024.0 / 8.0).sqrt() as usize) / 32 * 32;
    // Two ranks on this machine: its memory counts once.
    for (np, q) in [("1", "1"), ("2", "2")] {
        let out = mprun(&["-np", np, &hpl(), "--mem-fraction", "0.0005", "--nb", "32", "-p", "1", "-q", q], &[]);
        let so = text(&out.stdout);
        assert!(out.status.success(), "{so}{}", text(&out.stderr));
        let line = so.lines().find(|l| l.starts_with("WR")).unwrap_or_else(|| panic!("{so}"));
        assert_eq!(line.split_whitespace().nth(1), Some(want.to_string().as_str()), "{line}");
    }
    let out = mprun(&["-np", "2", &hpl(), "--mem-fraction", "1.5"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("mpr-hpl: --mem-fraction 1.5: expected a fraction between 0 and 1"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_progress_bar_is_drawn_only_where_stderr_is_a_terminal() {
    // A pipe: nothing but the report.
    let args = ["-np", "2", &hpl(), "-n", "300", "--nb", "32"];
    let out = mprun(&args, &[]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", text(&out.stderr));
    // mprun's stderr on a terminal (a pseudo-terminal by `script`): mprun tells the ranks,
    // rank 0 draws the bar in place (ending each draw with `\r`, which mprun forwards at
    // once) and wipes it after the factorization.
    let line = format!("{} {}", mpr_tests::mprun_path().display(), args.join(" "));
    let out = std::process::Command::new("script").args(["-qec", &line, "/dev/null"]).output();
    match out {
        Ok(out) => {
            let all = text(&out.stdout);
            assert!(out.status.success(), "{all}");
            // (The terminal turns each newline into `\r\n`.)
            let bar = all.split('\r').map(|s| s.trim_start_matches('\n')).find(|s| s.contains("100.0%"));
            let bar = bar.unwrap_or_else(|| panic!("no bar: {all:?}"));
            assert!(bar.starts_with("WR11R2R16 N=300 NB=32 1x2 [##############################]"), "{bar:?}");
            assert!(bar.contains("Gflops"), "{bar:?}");
            assert!(all.contains("PASSED"), "the report follows: {all:?}");
        }
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("script (util-linux) is needed: {e}"),
        Err(e) => eprintln!("skipped the terminal half: no `script` ({e})"),
    }
    // The hint alone (a rank whose mprun's stderr is a terminal) draws it too.
    let out = mprun(&args, &[("MPR_STDERR_TTY", "1")]);
    let err = text(&out.stderr);
    assert!(out.status.success() && err.contains("100.0%") && err.ends_with('\r'), "{err:?}");
}

#[test]
fn hpl_runs_across_hosts_of_namespaces() {
    if let Some(why) = netns::unavailable() {
        mpr_tests::cannot_run(&format!("network namespaces unavailable: {why}"));
        return;
    }
    let hosts = netns::NetHosts::create(2);
    let dir = scratch("hosts");
    let x = |tag: &str| dir.join(format!("x-{tag}"));
    // One rank, for the solution to compare with.
    let args = [hpl(), "-n".into(), "301".into(), "--nb".into(), "16".into()];
    let one = x("one");
    let plain: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let out = mprun(&[&["-np", "1"], &plain[..], &["--write-x", one.to_str().unwrap()]].concat(), &[]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let reference = read_x(&PathBuf::from(format!("{}.301", one.display())));
    // 2 hosts x 2 ranks, default flags: a 2x2 grid whose process rows are the hosts (row
    // major), so the panel broadcasts stay in a host and the swaps and U cross hosts; then
    // column major, the other way round.
    for (pmap, tag) in [(None, "row"), (Some("--col-major"), "col")] {
        let xs = x(tag);
        let mut c = std::process::Command::new(mpr_tests::mprun_path());
        c.args([
            "--launcher-exec",
            hosts.launcher_exec(),
            "-H",
            &hosts.host_list(&[2, 2]),
            "--timeout",
            "120",
            "--verbose",
        ]);
        c.args(&args).args(["-p", "2", "-q", "2", "--write-x", xs.to_str().unwrap()]).args(pmap);
        let out = c.output().expect("run mprun");
        let (so, err) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{tag}: {so}{err}");
        assert!(residuals(&so)[0].1 == "PASSED", "{so}");
        assert!(err.contains("rank 0 -> rank 1: shm") && err.contains("rank 0 -> rank 2: tcp"), "{err}");
        let got = read_x(&PathBuf::from(format!("{}.301", xs.display())));
        for (i, (a, b)) in got.iter().zip(&reference).enumerate() {
            assert!((a - b).abs() <= 1e-10 * b.abs().max(1.0), "{tag}: x[{i}] {a} vs {b}");
        }
    }
    assert_eq!(hosts.wait_empty(Duration::from_secs(5)), Vec::<u32>::new());
    let _ = std::fs::remove_dir_all(&dir);
}
