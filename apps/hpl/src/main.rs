//! `mprun -np P*Q mpr-hpl [HPL.dat]`: an HPL-style LINPACK on mpr. HPL's matrix and check,
//! its HPL.dat and its output, a 2D block-cyclic LU with partial pivoting (lu.rs).
//!
//! What runs: panels factored recursively in HPL's three variants (RFACT left, Crout,
//! right, with its NDIV) down to NBMIN columns, factored in its three variants too (PFACT);
//! panels broadcast along process rows in HPL's six topologies (increasing ring, modified
//! ring, two rings, modified two rings, spread-roll, modified spread-roll); rows swapped
//! across process rows by binary exchange, long (ring) or mix (SWAP, with its threshold);
//! lookahead depth 0 or 1. Combinations HPL.dat asks for beyond these (depth 2 and more)
//! are reported and counted as skipped, never run as something else. The local kernels sit
//! behind one seam (kernels.rs).

mod dat;
mod dist;
mod gen;
mod kernels;
mod lu;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "mpr-hpl", about = "HPL-style LINPACK on mpr (run under mprun with P*Q ranks)")]
struct Args {
    /// HPL.dat to read (default: ./HPL.dat, unless -n is given)
    dat: Option<PathBuf>,
    /// Order of the matrix (a quick run instead of HPL.dat)
    #[arg(short = 'n', conflicts_with = "mem_fraction")]
    n: Option<usize>,
    /// A quick run with the largest N (a multiple of NB) whose matrix fills this share of
    /// the memory of the job's machines, as the usual HPL calculators choose it
    #[arg(long, value_name = "F")]
    mem_fraction: Option<f64>,
    /// Block size
    #[arg(long, default_value_t = 128)]
    nb: usize,
    /// Process rows (default: the most square grid of the job's ranks)
    #[arg(short = 'p')]
    p: Option<usize>,
    /// Process columns
    #[arg(short = 'q')]
    q: Option<usize>,
    /// Column-major process mapping (rank = col * P + row; HPL's PMAP 1), instead of row-major
    #[arg(long)]
    col_major: bool,
    /// Panel factorization at the columns: 0=left, 1=Crout, 2=right (HPL's PFACT)
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=2))]
    pfact: u64,
    /// Recursive panel factorization: 0=left, 1=Crout, 2=right (HPL's RFACT)
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=2))]
    rfact: u64,
    /// Panel widths at or below this are factored column by column (HPL's NBMIN)
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    nbmin: u64,
    /// Pieces a wider panel is cut into (HPL's NDIV)
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..))]
    ndiv: u64,
    /// Panel broadcast along process rows: 0=1rg, 1=1rM, 2=2rg, 3=2rM, 4=Lng, 5=LnM (HPL's BCAST)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=5))]
    bcast: u64,
    /// Lookahead depth: 0, or 1 (the next panel factored and sent before the rest of the
    /// update; HPL's DEPTH)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=1))]
    depth: u64,
    /// Row swaps across process rows: 0=bin-exch, 1=long, 2=mix (HPL's SWAP)
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=2))]
    swap: u64,
    /// With --swap 2: binary exchange up to this many columns, long above
    #[arg(long, default_value_t = 64)]
    swap_threshold: usize,
    /// Threads each rank's DGEMM uses, up to 4 (one rank per core and 1 thread is HPL's
    /// usual way)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=kernels::MAX_THREADS as u64))]
    threads: u64,
    /// Residual threshold
    #[arg(long, default_value_t = 16.0)]
    threshold: f64,
    /// Test only: perturb the factor before the solve, so that the check must fail
    #[arg(long, hide = true)]
    perturb_factor: bool,
    /// Test only: print the entries of [A|b] that grid rank 0 holds in its first 4 local
    /// rows and columns, as `A(i,j)= value`
    #[arg(long, hide = true)]
    dump_matrix: bool,
    /// Test only: write each test's solution x to FILE.N (one value a line, exact)
    #[arg(long, hide = true, value_name = "FILE")]
    write_x: Option<PathBuf>,
}

/// `x` as C's `%.{prec}e` prints it: `6.4684e+00`.
fn sci(x: f64, prec: usize) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let s = format!("{x:.prec$e}");
    let (mant, exp) = s.split_once('e').expect("an exponent");
    let e: i32 = exp.parse().expect("a number");
    format!("{mant}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// One combination HPL.dat asks for.
#[derive(Debug, Clone)]
struct Test {
    n: usize,
    nb: usize,
    p: usize,
    q: usize,
    row_major: bool,
    depth: usize,
    bcast: usize,
    rfact: usize,
    ndiv: usize,
    pfact: usize,
    nbmin: usize,
    swap: usize,
    swap_threshold: usize,
}

impl Test {
    /// HPL's encoding of the variant, e.g. `WR00R2R4`.
    fn code(&self) -> String {
        let f = |x: usize| ['L', 'C', 'R'][x];
        format!(
            "W{}{}{}{}{}{}{}",
            if self.row_major { 'R' } else { 'C' },
            self.depth,
            self.bcast,
            f(self.rfact),
            self.ndiv,
            f(self.pfact),
            self.nbmin
        )
    }

    /// Why mpr-hpl cannot run this combination yet, if it cannot.
    fn unsupported(&self) -> Option<String> {
        (self.depth > 1).then(|| format!("lookahead depth {}", self.depth))
    }
}

const RULE: &str = "================================================================================";
const DASH: &str = "--------------------------------------------------------------------------------";

/// Where the report goes: stdout, stderr or a file, as HPL.dat's device says (rank 0 only).
struct Out {
    file: Option<std::fs::File>,
    stderr: bool,
}

impl Out {
    fn line(&mut self, s: &str) {
        if self.stderr {
            eprintln!("{s}");
        } else {
            println!("{s}");
        }
        if let Some(f) = self.file.as_mut() {
            let _ = writeln!(f, "{s}");
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Before mpr starts its threads: the kernels may read the environment.
    kernels::set_threads(args.threads as usize);
    let universe = match mpr::init() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("mpr-hpl: init failed: {e}");
            return ExitCode::from(2);
        }
    };
    let world = universe.world();
    let me = world.rank();
    let mut args = args;
    if let Some(f) = args.mem_fraction {
        match memory_n(&world, f, args.nb) {
            Ok(n) => args.n = Some(n),
            Err(e) => {
                if me == 0 {
                    eprintln!("mpr-hpl: --mem-fraction {f}: {e}");
                }
                let _ = world.barrier();
                return ExitCode::from(2);
            }
        }
    }
    let Plan { tests, threshold, out, forms } = match plan(&args, world.size()) {
        Ok(t) => t,
        Err(e) => {
            // Every rank finds the same fault; rank 0 says it, and nobody leaves before it
            // has (a launcher may stop the job at the first rank that exits).
            if me == 0 {
                eprintln!("mpr-hpl: {e}");
            }
            let _ = world.barrier();
            return ExitCode::from(2);
        }
    };
    // A size no rank can hold is refused by every rank alike, the first that finds it
    // saying why (the machines of a job may differ).
    let fault = tests.iter().find_map(|t| fits(t, machine_memory().map(|m| m.0)).err());
    let mut first = [if fault.is_some() { me as u64 } else { u64::MAX }];
    if let Err(e) = world.allreduce_in_place(&mut first, mpr::Min) {
        eprintln!("mpr-hpl: rank {me}: {e}");
        return ExitCode::from(1);
    }
    if first[0] != u64::MAX {
        if let Some(e) = fault.filter(|_| first[0] == me as u64) {
            eprintln!("mpr-hpl: {e}");
        }
        let _ = world.barrier();
        return ExitCode::from(2);
    }
    let mut out = (me == 0).then(|| {
        let file = out.0.and_then(|name| match std::fs::File::create(&name) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("mpr-hpl: cannot write {name}: {e}; the report goes to stdout only");
                None
            }
        });
        Out { file, stderr: out.1 }
    });
    let say = |out: &mut Option<Out>, s: &str| {
        if let Some(o) = out.as_mut() {
            o.line(s)
        }
    };
    say(&mut out, RULE);
    say(&mut out, "HPLinpack 2.3  --  High-Performance Linpack benchmark  --   mpr-hpl");
    say(&mut out, RULE);
    say(&mut out, "");
    say(&mut out, "An explanation of the input/output parameters follows:");
    say(&mut out, "T/V    : Wall time / encoded variant.");
    say(&mut out, "N      : The order of the coefficient matrix A.");
    say(&mut out, "NB     : The partitioning blocking factor.");
    say(&mut out, "P      : The number of process rows.");
    say(&mut out, "Q      : The number of process columns.");
    say(&mut out, "Time   : Time in seconds to solve the linear system.");
    say(&mut out, "Gflops : Rate of execution for solving the linear system.");
    say(&mut out, "");
    say(&mut out, "The following parameter values will be used:");
    say(&mut out, "");
    let list = |v: Vec<String>| v.join(" ");
    let uniq = |f: &dyn Fn(&Test) -> String| {
        let mut v: Vec<String> = Vec::new();
        for t in &tests {
            let s = f(t);
            if !v.contains(&s) {
                v.push(s);
            }
        }
        list(v)
    };
    say(&mut out, &format!("N      : {}", uniq(&|t| format!("{:>8}", t.n))));
    say(&mut out, &format!("NB     : {}", uniq(&|t| format!("{:>8}", t.nb))));
    say(
        &mut out,
        &format!(
            "PMAP   : {}",
            uniq(&|t| (if t.row_major { "Row-major process mapping" } else { "Column-major process mapping" }).into())
        ),
    );
    say(&mut out, &format!("P      : {}", uniq(&|t| format!("{:>8}", t.p))));
    say(&mut out, &format!("Q      : {}", uniq(&|t| format!("{:>8}", t.q))));
    let swap = |t: &Test| match t.swap {
        0 => "Binary-exchange".to_string(),
        1 => "Spread-roll (long)".to_string(),
        _ => format!("Mix (threshold = {})", t.swap_threshold),
    };
    let fact = |x: usize| format!("{:>8}", ["Left", "Crout", "Right"][x]);
    say(&mut out, &format!("PFACT  : {}", uniq(&|t| fact(t.pfact))));
    say(&mut out, &format!("NBMIN  : {}", uniq(&|t| format!("{:>8}", t.nbmin))));
    say(&mut out, &format!("NDIV   : {}", uniq(&|t| format!("{:>8}", t.ndiv))));
    say(&mut out, &format!("RFACT  : {}", uniq(&|t| fact(t.rfact))));
    let bcast = ["1ring", "1ringM", "2ring", "2ringM", "Blong", "BlongM"];
    say(&mut out, &format!("BCAST  : {}", uniq(&|t| format!("{:>8}", bcast[t.bcast]))));
    say(&mut out, &format!("DEPTH  : {}", uniq(&|t| format!("{:>8}", t.depth))));
    say(&mut out, &format!("SWAP   : {}", uniq(&swap)));
    // mpr-hpl keeps L1 and U as they lie in the matrix (not transposed), does not
    // equilibrate and lets Rust's allocator align: storage choices that leave the results
    // as they are. What HPL.dat asked for is said next to what is done.
    let asked = |i: usize, what: &dyn Fn(usize) -> &'static str| match forms {
        Some(f) if what(f[i]) != what(1) => format!(" (HPL.dat asks {}: not implemented)", what(f[i])),
        _ => String::new(),
    };
    let form = |x: usize| if x == 0 { "transposed form" } else { "no-transposed form" };
    say(&mut out, &format!("L1     : no-transposed form{}", asked(0, &form)));
    say(&mut out, &format!("U      : no-transposed form{}", asked(1, &form)));
    let equil_asked = match forms {
        Some(f) if f[2] == 1 => " (HPL.dat asks yes: not implemented)",
        _ => "",
    };
    say(&mut out, &format!("EQUIL  : no{equil_asked}"));
    if let Some(f) = forms {
        say(
            &mut out,
            &format!("ALIGN  : {} double precision words (HPL.dat's; the allocator's alignment is used)", f[3]),
        );
    }
    say(&mut out, &format!("KERNELS: {}, {} thread(s) per rank", kernels::BACKEND, args.threads));
    say(&mut out, "");
    say(&mut out, "- The matrix A is randomly generated for each test.");
    say(&mut out, "- The following scaled residual check will be computed:");
    say(&mut out, "      ||Ax-b||_oo / ( eps * ( || x ||_oo * || A ||_oo + || b ||_oo ) * N )");
    say(&mut out, &format!("- The relative machine precision (eps) is taken to be      {:e}", f64::EPSILON / 2.0));
    say(&mut out, &format!("- Computational tests pass if scaled residuals are less than {threshold:>16.1}"));
    say(&mut out, "");

    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for t in &tests {
        if let Some(why) = t.unsupported() {
            say(&mut out, &format!("{}: not implemented yet ({why}); skipped", t.code()));
            skipped += 1;
            continue;
        }
        if t.p * t.q > world.size() {
            say(
                &mut out,
                &format!(
                    "{}: a {}x{} grid needs {} ranks, the job has {}; skipped",
                    t.code(),
                    t.p,
                    t.q,
                    t.p * t.q,
                    world.size()
                ),
            );
            skipped += 1;
            continue;
        }
        if args.dump_matrix {
            if let Some(g) = lu::Grid::new(&world, t.p, t.q, t.row_major).ok().flatten() {
                let m = lu::Local::generate(&g, t.n, t.nb);
                if g.world.rank() == 0 {
                    for c in 0..m.nq.min(4) {
                        for l in 0..m.mp.min(4) {
                            let (i, j) = (dist::global(l, t.nb, 0, t.p), dist::global(c, t.nb, 0, t.q));
                            println!("A({i},{j})= {:e}", m.a[l + c * m.ld]);
                        }
                    }
                }
            }
        }
        match run(&world, t, args.perturb_factor) {
            Ok(None) => {}
            Ok(Some((secs, check, x))) => {
                if let Some(base) = &args.write_x {
                    let text: String = x.iter().map(|v| format!("{v:e}\n")).collect();
                    let _ = std::fs::write(format!("{}.{}", base.display(), t.n), text);
                }
                let n = t.n as f64;
                let gflops = (2.0 / 3.0 * n * n * n + 1.5 * n * n) / secs / 1e9;
                say(&mut out, RULE);
                say(&mut out, "T/V                N    NB     P     Q               Time                 Gflops");
                say(&mut out, DASH);
                say(
                    &mut out,
                    &format!(
                        "{:<10}{:>12} {:>5} {:>5} {:>5} {:>18.2}     {:>18}",
                        t.code(),
                        t.n,
                        t.nb,
                        t.p,
                        t.q,
                        secs,
                        sci(gflops, 4)
                    ),
                );
                say(&mut out, DASH);
                let ok = check.scaled < threshold;
                say(
                    &mut out,
                    &format!(
                        "||Ax-b||_oo/(eps*(||A||_oo*||x||_oo+||b||_oo)*N)= {:>15} ...... {}",
                        sci(check.scaled, 8),
                        if ok { "PASSED" } else { "FAILED" }
                    ),
                );
                if !ok {
                    say(
                        &mut out,
                        &format!("||Ax-b||_oo  . . . . . . . . . . . . . . . . . = {:>18}", sci(check.resid, 6)),
                    );
                    say(
                        &mut out,
                        &format!("||A||_oo . . . . . . . . . . . . . . . . . . . = {:>18}", sci(check.norm_a, 6)),
                    );
                    say(
                        &mut out,
                        &format!("||x||_oo . . . . . . . . . . . . . . . . . . . = {:>18}", sci(check.norm_x, 6)),
                    );
                    say(
                        &mut out,
                        &format!("||b||_oo . . . . . . . . . . . . . . . . . . . = {:>18}", sci(check.norm_b, 6)),
                    );
                }
                if ok {
                    passed += 1
                } else {
                    failed += 1
                }
            }
            Err(e) => {
                eprintln!("mpr-hpl: rank {me}: {}: {e}", t.code());
                return ExitCode::from(1);
            }
        }
    }
    say(&mut out, RULE);
    say(&mut out, "");
    say(&mut out, &format!("Finished {:>6} tests with the following results:", passed + failed + skipped));
    say(&mut out, &format!("         {passed:>6} tests completed and passed residual checks,"));
    say(&mut out, &format!("         {failed:>6} tests completed and failed residual checks,"));
    say(&mut out, &format!("         {skipped:>6} tests skipped because of illegal input values."));
    say(&mut out, DASH);
    say(&mut out, "");
    say(&mut out, "End of Tests.");
    say(&mut out, RULE);
    if let Err(e) = universe.finalize() {
        eprintln!("mpr-hpl: finalize failed: {e}");
        return ExitCode::from(1);
    }
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// This machine's memory in bytes and an id for it (the kernel's boot id: network
/// namespaces and containers of one machine share it, and its memory).
fn machine_memory() -> Option<(u64, u64)> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 =
        info.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hash = id.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    Some((kb * 1024, hash))
}

/// The text of HPL.dat, at most 1 MiB of it (HPL's own is a page; a device or a wrong file
/// is refused rather than read for ever).
fn read_dat(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    const MAX: u64 = 1 << 20;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX + 1).read_to_string(&mut text))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if text.len() as u64 > MAX {
        return Err(format!("{}: larger than {} KiB: not an HPL.dat", path.display(), MAX >> 10));
    }
    Ok(text)
}

/// Whether a rank of test `t` can hold its part of the matrix: the products of N, NB, P and
/// Q checked (they come from the user), and the largest part (the grid's first row and
/// column hold the most) within `memory` bytes, this machine's, where it is known.
fn fits(t: &Test, memory: Option<u64>) -> Result<(), String> {
    let what = format!("N = {}, NB = {}, a {}x{} grid", t.n, t.nb, t.p, t.q);
    let part = (|| {
        let rows = dist::count(t.n, t.nb, 0, t.p).max(1) as u64;
        let cols = dist::count(t.n.checked_add(1)?, t.nb, 0, t.q) as u64;
        rows.checked_mul(cols)?.checked_mul(8)
    })()
    .ok_or_else(|| format!("{what}: a rank's part of the matrix has more bytes than a 64-bit count holds"))?;
    match memory {
        Some(m) if part > m => Err(format!(
            "{what}: a rank's part of the matrix takes {:.1} GiB, more than this machine's {:.1} GiB",
            part as f64 / (1u64 << 30) as f64,
            m as f64 / (1u64 << 30) as f64
        )),
        _ => Ok(()),
    }
}

/// The largest N, a multiple of NB, whose N x N doubles fill `fraction` of the memory of
/// the job's machines (each counted once).
fn memory_n(world: &mpr::Comm, fraction: f64, nb: usize) -> Result<usize, String> {
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err("expected a fraction between 0 and 1".into());
    }
    let mine = machine_memory();
    let mut all = vec![0u64; 2 * world.size()];
    let (bytes, id) = mine.unwrap_or((0, 0));
    world.allgather(&[bytes, id], &mut all).map_err(|e| e.to_string())?;
    if all.chunks(2).any(|c| c[0] == 0) {
        return Err("a rank cannot tell its machine's memory (/proc/meminfo)".into());
    }
    let mut seen = Vec::new();
    let mut total = 0u64;
    for c in all.chunks(2) {
        if !seen.contains(&c[1]) {
            seen.push(c[1]);
            total += c[0];
        }
    }
    let n = ((fraction * total as f64 / 8.0).sqrt() as usize) / nb.max(1) * nb.max(1);
    if n == 0 {
        return Err(format!("{total} bytes of memory hold no {nb}-wide block"));
    }
    Ok(n)
}

/// The tests to run, the threshold, and where the report goes (file, to stderr).
#[allow(clippy::type_complexity)]
/// What HPL.dat (or the flags) ask for.
struct Plan {
    tests: Vec<Test>,
    threshold: f64,
    /// The report's file, if any, and whether the report goes to stderr.
    out: (Option<String>, bool),
    /// HPL.dat's storage forms (L1, U: 0 transposed, 1 not), equilibration and alignment.
    forms: Option<[usize; 4]>,
}

fn plan(args: &Args, ranks: usize) -> Result<Plan, String> {
    if let Some(n) = args.n {
        if args.dat.is_some() {
            return Err("give HPL.dat or -n, not both".into());
        }
        if args.nb == 0 {
            return Err("--nb must be at least 1".into());
        }
        let (p, q) = match (args.p, args.q) {
            (Some(p), Some(q)) => (p, q),
            (Some(p), None) => (p, ranks / p.max(1)),
            (None, Some(q)) => (ranks / q.max(1), q),
            (None, None) => {
                let p = (1..=ranks).filter(|p| ranks.is_multiple_of(*p) && p * p <= ranks).max().unwrap_or(1);
                (p, ranks / p)
            }
        };
        if p == 0 || q == 0 {
            return Err(format!("a {p}x{q} grid has no process"));
        }
        let t = Test {
            n,
            nb: args.nb,
            p,
            q,
            row_major: !args.col_major,
            depth: args.depth as usize,
            bcast: args.bcast as usize,
            rfact: args.rfact as usize,
            ndiv: args.ndiv as usize,
            pfact: args.pfact as usize,
            nbmin: args.nbmin as usize,
            swap: args.swap as usize,
            swap_threshold: args.swap_threshold,
        };
        return Ok(Plan { tests: vec![t], threshold: args.threshold, out: (None, false), forms: None });
    }
    let path = args.dat.clone().unwrap_or_else(|| PathBuf::from("HPL.dat"));
    let text = read_dat(&path)?;
    let d = dat::parse(&path.display().to_string(), &text)?;
    let mut tests = Vec::new();
    // HPL's order: grids, then N, NB, DEPTH, BCAST, RFACT, NDIV, NBMIN, PFACT innermost.
    for &(p, q) in &d.grids {
        for &n in &d.ns {
            for &nb in &d.nbs {
                for &depth in &d.depths {
                    for &bcast in &d.bcasts {
                        for &rfact in &d.rfacts {
                            for &ndiv in &d.ndivs {
                                for &nbmin in &d.nbmins {
                                    for &pfact in &d.pfacts {
                                        let row_major = d.row_major;
                                        tests.push(Test {
                                            n,
                                            nb,
                                            p,
                                            q,
                                            row_major,
                                            depth,
                                            bcast,
                                            rfact,
                                            ndiv,
                                            pfact,
                                            nbmin,
                                            swap: d.swap,
                                            swap_threshold: d.swap_threshold,
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let file = (d.device != 6 && d.device != 7).then(|| d.out_file.clone());
    let forms = Some([d.l1_form, d.u_form, d.equil, d.align]);
    Ok(Plan { tests, threshold: d.threshold, out: (file, d.device == 7), forms })
}

/// Runs one test on its grid: the time of factor + solve, the check and x, on grid rank 0;
/// `None` on the others.
fn run(world: &mpr::Comm, t: &Test, perturb: bool) -> Result<Option<(f64, lu::Check, Vec<f64>)>, mpr::Error> {
    let Some(g) = lu::Grid::new(world, t.p, t.q, t.row_major)? else {
        return Ok(None);
    };
    let mut m = lu::Local::generate(&g, t.n, t.nb);
    // The progress bar: on the grid's rank 0, when its stderr ends up on a terminal.
    let mut bar = (g.world.rank() == 0 && mpr::stderr_is_terminal()).then(|| Progress::new(t));
    g.world.barrier()?;
    let t0 = mpr::wtime();
    lu::factor(
        &g,
        &mut m,
        lu::PanelFact {
            nbmin: t.nbmin,
            ndiv: t.ndiv,
            bcast: t.bcast,
            depth: t.depth,
            pfact: t.pfact,
            rfact: t.rfact,
            swap: t.swap,
            swap_threshold: t.swap_threshold,
        },
        &mut |done| {
            if let Some(bar) = bar.as_mut() {
                bar.show(done, mpr::wtime() - t0)
            }
        },
    )?;
    if let Some(bar) = bar.as_mut() {
        bar.clear();
    }
    if perturb && g.myrow == 0 && g.mycol == 0 && m.mp > 0 && m.nq > 0 {
        m.a[0] *= 1.0 + 1e-3;
    }
    let x = lu::solve(&g, &m)?;
    let mut secs = [mpr::wtime() - t0];
    g.world.allreduce_in_place(&mut secs, mpr::Max)?;
    let check = lu::check(&g, t.n, t.nb, &x)?;
    Ok((g.world.rank() == 0).then_some((secs[0], check, x)))
}

/// A progress bar on stderr, redrawn in place at most twice a second: the share of the
/// factorization's flops done and the rate so far.
struct Progress {
    n: f64,
    label: String,
    last: f64,
    drawn: bool,
}

impl Progress {
    fn new(t: &Test) -> Progress {
        Progress {
            n: t.n as f64,
            label: format!("{} N={} NB={} {}x{}", t.code(), t.n, t.nb, t.p, t.q),
            last: 0.0,
            drawn: false,
        }
    }

    /// After `done` columns, `secs` into the run.
    fn show(&mut self, done: usize, secs: f64) {
        if secs - self.last < 0.5 && done < self.n as usize {
            return;
        }
        self.last = secs;
        let left = self.n - done as f64;
        let flops = 2.0 / 3.0 * (self.n.powi(3) - left.powi(3));
        let share = flops / (2.0 / 3.0 * self.n.powi(3)).max(1.0);
        let width = 30;
        let filled = ((share * width as f64) as usize).min(width);
        let bar: String = "#".repeat(filled) + &".".repeat(width - filled);
        let rate = if secs > 0.0 { flops / secs / 1e9 } else { 0.0 };
        eprint!("{} [{bar}] {:5.1}%  {:7.1} s  {:9.2} Gflops\r", self.label, share * 100.0, secs, rate);
        self.drawn = true;
    }

    /// Wipes the bar before the report.
    fn clear(&mut self) {
        if self.drawn {
            eprint!("{}\r", " ".repeat(self.label.len() + 68));
        }
    }
}
