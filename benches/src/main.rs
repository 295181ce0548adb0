//! mpr-bench: OSU-style micro-benchmarks for mpr, printing the OSU micro-benchmarks' table
//! format (comment lines starting with `#`, then `SIZE VALUE` rows), so scripts that read
//! OSU output read these.
//!
//! `mprun -np 2 mpr-bench latency` - one-way latency (us), ping-pong between ranks 0 and 1.
//! `mprun -np 2 mpr-bench bw`      - windowed bandwidth (MB/s), rank 0 to rank 1.
//! `mprun -np 2 mpr-bench put_latency` (and `get_latency`, `acc_latency`, `fop_latency`,
//! `cas_latency`, `put_bw`, `get_bw`) - one-sided operations of rank 0 on rank 1's window,
//! OSU's one-sided tests: `--win allocate|create` (how the window is made), `--sync
//! flush|lock|fence|pscw` (how each operation, or each window of `--window` operations for
//! the `_bw` tests, is completed; default flush, inside one shared lock).
//!
//! Options: `--min SIZE`, `--max SIZE` (bytes), `--iters N` and `--warmup N` (timed and
//! untimed iterations for every size; by default osu_mini's schedule, see [`schedule`]),
//! `--window N` (bw, default 64), `--slots` (bw: a buffer slot per message of the window
//! instead of OSU's one shared buffer), `--per-rank` (collectives: each rank also prints its
//! own mean and percentiles of one call's time on stderr, which shows a rank that waits
//! where the average hides it).

use mpr::Comm;

mod one_sided;

/// OSU-style micro-benchmarks for mpr (run under mprun: `mprun -np 2 mpr-bench latency`).
#[derive(clap::Parser, Debug)]
#[command(name = "mpr-bench", version, about, long_about = None)]
struct Opts {
    /// What to measure: point-to-point `latency` (us), `bw` and `bibw` (MB/s) between ranks 0
    /// and 1, `mbw_mr` (MB/s and messages/s of several pairs at once), or the mean time of
    /// one collective call (us) over every rank.
    #[arg(value_enum)]
    what: Bench,
    /// Smallest message (bytes).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    min: usize,
    /// Largest message (bytes).
    #[arg(long, default_value_t = 4 << 20, value_name = "BYTES")]
    max: usize,
    /// Timed iterations of every size (default: osu_mini's schedule per size).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    iters: Option<u64>,
    /// Untimed iterations before them (default: osu_mini's schedule per size).
    #[arg(long, value_name = "N")]
    warmup: Option<u64>,
    /// Messages in flight per round of `bw`.
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    window: u64,
    /// Every buffer starts this many bytes past a page boundary (a multiple of 8 below 4096;
    /// 16 is where glibc's malloc puts a block of 128 KiB or more).
    #[arg(long, default_value_t = 0, value_name = "BYTES", value_parser = offset)]
    offset: usize,
    /// `bw`: a buffer slot per message of the window instead of OSU's one shared buffer.
    #[arg(long)]
    slots: bool,
    /// Collectives: each rank also prints its own mean and percentiles of one call's time on
    /// stderr, which shows a rank that waits where the average hides it.
    #[arg(long)]
    per_rank: bool,
    /// `mbw_mr`: sending ranks 0..N, each to its partner N ranks up (default: half the ranks).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pairs: Option<u64>,
    /// One-sided tests: how the window is made.
    #[arg(long, value_enum, default_value_t = WinKind::Allocate)]
    win: WinKind,
    /// One-sided tests: how operations are completed.
    #[arg(long, value_enum, default_value_t = SyncKind::Flush)]
    sync: SyncKind,
}

/// How a one-sided test makes its window (OSU's `-w`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum WinKind {
    /// `Window::allocate` (`MPI_Win_allocate`).
    Allocate,
    /// `Window::create` over the benchmark's own buffer (`MPI_Win_create`).
    Create,
    /// `Window::create_dynamic` with the benchmark's own buffer attached
    /// (`MPI_Win_create_dynamic`, `MPI_Win_attach`).
    Dynamic,
}

/// How a one-sided test completes its operations (OSU's `-s`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum SyncKind {
    /// One shared lock around the test; a flush after each operation (or window of them).
    Flush,
    /// An exclusive lock and unlock around each operation (or window of them).
    Lock,
    /// A fence before and after each operation (or window of them), on both ranks.
    Fence,
    /// Start/complete at the origin, post/wait at the target, around each.
    Pscw,
}

/// The benchmarks.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Bench {
    Latency,
    Bw,
    Bibw,
    #[value(name = "mbw_mr")]
    MbwMr,
    Allreduce,
    Bcast,
    Allgather,
    Alltoall,
    Barrier,
    #[value(name = "put_latency")]
    PutLatency,
    #[value(name = "get_latency")]
    GetLatency,
    #[value(name = "acc_latency")]
    AccLatency,
    #[value(name = "fop_latency")]
    FopLatency,
    #[value(name = "cas_latency")]
    CasLatency,
    #[value(name = "put_bw")]
    PutBw,
    #[value(name = "get_bw")]
    GetBw,
}

impl Bench {
    fn name(self) -> &'static str {
        match self {
            Bench::Latency => "latency",
            Bench::Bw => "bw",
            Bench::Bibw => "bibw",
            Bench::MbwMr => "mbw_mr",
            Bench::Allreduce => "allreduce",
            Bench::Bcast => "bcast",
            Bench::Allgather => "allgather",
            Bench::Alltoall => "alltoall",
            Bench::Barrier => "barrier",
            Bench::PutLatency => "put_latency",
            Bench::GetLatency => "get_latency",
            Bench::AccLatency => "acc_latency",
            Bench::FopLatency => "fop_latency",
            Bench::CasLatency => "cas_latency",
            Bench::PutBw => "put_bw",
            Bench::GetBw => "get_bw",
        }
    }
}

fn sizes(min: usize, max: usize, with_zero: bool) -> Vec<usize> {
    let mut v = Vec::new();
    if with_zero && min == 0 {
        v.push(0);
    }
    let mut s = 1usize;
    while s <= max {
        if s >= min {
            v.push(s);
        }
        match s.checked_mul(2) {
            Some(next) => s = next,
            None => break,
        }
    }
    v
}

/// The bytes of buffers one rank of benchmark `what` holds for messages of up to `max`
/// bytes among `ranks`, if that does not overflow: a send and a receive buffer (a window of
/// each with `--slots`; every rank's block for `alltoall` and `allgather`).
fn buffer_bytes(o: &Opts, ranks: usize) -> Option<u64> {
    let max = o.max as u64;
    let per = match o.what {
        Bench::Bw | Bench::Bibw | Bench::MbwMr if o.slots => max.checked_mul(o.window)?,
        Bench::Alltoall | Bench::Allgather => max.checked_mul(ranks as u64)?,
        _ => max,
    };
    per.checked_mul(2)?.checked_add(2 * 4096)
}

/// This machine's memory in bytes, if the system says.
fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 =
        info.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    kb.checked_mul(1024)
}

/// Refuses sizes whose buffers cannot fit (an overflow, or more than half this machine's
/// memory for one rank), with one line, before a byte is allocated.
fn check_sizes(o: &Opts, ranks: usize) -> Result<(), String> {
    if o.min > o.max {
        return Err(format!("--min {} is above --max {}", o.min, o.max));
    }
    let memory = machine_memory();
    match (buffer_bytes(o, ranks), memory) {
        (None, _) => Err(format!("--max {}: the buffers of one rank would overflow a 64-bit size", o.max)),
        (Some(need), Some(mem)) if need > mem / 2 => Err(format!(
            "--max {}: the buffers of one rank would take {need} bytes, more than half of this machine's {mem}",
            o.max
        )),
        _ => Ok(()),
    }
}

/// Timed and warm-up iterations per size class (up to 8 KiB, up to 64 KiB, beyond) of each
/// benchmark: osu_mini's (`benches/c/osu_mini.c`), so that both time the same number of
/// calls of every size, and the same ones with `--iters`/`--warmup`, which set every size.
const LATENCY: [(usize, usize); 3] = [(10_000, 200), (1000, 20), (100, 10)];
const BANDWIDTH: [(usize, usize); 3] = [(100, 10), (50, 5), (20, 2)];
const COLLECTIVE: [(usize, usize); 3] = [(1000, 100), (200, 20), (50, 5)];

/// (timed, warm-up) iterations for messages of `size` bytes under `table`.
fn schedule(size: usize, table: &[(usize, usize); 3], o: &Opts) -> (usize, usize) {
    let class = usize::from(size > 8 << 10) + usize::from(size > 64 << 10);
    let (iters, warmup) = table[class];
    let given = |n: Option<u64>| n.map(|n| n as usize);
    (given(o.iters).unwrap_or(iters), given(o.warmup).unwrap_or(warmup))
}

fn latency(w: &Comm, o: &Opts) -> mpr::Result<()> {
    let me = w.rank();
    if me == 0 {
        println!("# mpr-bench Latency Test");
        println!("# Size          Latency (us)");
    }
    let (mut s_store, mut r_store) = (Paged::new(o.max, b'a'), Paged::new(o.max, b'b'));
    let (sbuf, rbuf) = (s_store.get(), r_store.get());
    for size in sizes(o.min, o.max, true) {
        let (iters, skip) = schedule(size, &LATENCY, o);
        // As OSU's osu_latency and benches/c/osu_mini.c do: both ranks start each size
        // together, and every implementation's rings and queues hold the same frames before
        // it (without it, 64-byte messages over shared memory took 0.44 us here against 0.39
        // after a barrier's small frames: the position of the ring's frames within cache lines).
        w.barrier()?;
        let mut t0 = 0.0;
        for i in 0..iters + skip {
            if i == skip {
                t0 = mpr::wtime();
            }
            match me {
                0 => {
                    w.send(&sbuf[..size], 1, 1)?;
                    w.recv(&mut rbuf[..size], 1, 1)?;
                }
                1 => {
                    w.recv(&mut rbuf[..size], 0, 1)?;
                    w.send(&sbuf[..size], 0, 1)?;
                }
                _ => {}
            }
        }
        if me == 0 {
            let us = (mpr::wtime() - t0) * 1e6 / (2.0 * iters as f64);
            println!("{size:<10}{us:>18.3}");
        }
        sbuf[..size.min(1)].fill(b'c');
    }
    Ok(())
}

/// Windowed streams, OSU's layouts: `bw` (rank 0 sends a window of nonblocking messages to
/// rank 1, which acknowledges the window with 4 bytes), `bibw` (ranks 0 and 1 each post a
/// window of receives and one of sends to the other, no acknowledgement; both directions
/// count) and `mbw_mr` (ranks 0..N each stream to the rank N up, as `bw`; the rate is the
/// pairs' messages over the slowest sender's time, as MB/s and messages per second).
fn streams(w: &Comm, o: &Opts) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let pairs = match o.what {
        Bench::MbwMr => o.pairs.map_or(p / 2, |n| n as usize),
        _ => 1,
    };
    if 2 * pairs > p {
        eprintln!("mpr-bench {}: {pairs} pairs need {} ranks, the job has {p}", o.what.name(), 2 * pairs);
        std::process::exit(2);
    }
    let bi = o.what == Bench::Bibw;
    // Whom this rank sends to and receives from.
    let (to, from) = match (me < pairs, me >= pairs && me < 2 * pairs) {
        (true, _) => (Some(me + pairs), bi.then_some(me + pairs)),
        (_, true) => (bi.then_some(me - pairs), Some(me - pairs)),
        _ => (None, None),
    };
    if me == 0 {
        match o.what {
            Bench::Bw => println!("# mpr-bench Bandwidth Test\n# Size      Bandwidth (MB/s)"),
            Bench::Bibw => println!("# mpr-bench Bi-Directional Bandwidth Test\n# Size      Bandwidth (MB/s)"),
            _ => println!(
                "# mpr-bench Multiple Bandwidth / Message Rate Test ({pairs} pairs)\n# Size                  MB/s        Messages/s"
            ),
        }
    }
    let win = o.window as usize;
    let max = o.max.max(1);
    // OSU's layout: every message of a window uses the same send buffer, and every receive
    // the same receive buffer (`--slots` gives each message its own slot instead).
    let span = if o.slots { max * win } else { max };
    let (s_store, mut r_store) = (Paged::new(span, b'a'), Paged::new(span, b'b'));
    let (sbuf, rbuf) = (s_store.slice(), r_store.get());
    for size in sizes(o.min.max(1), max, false) {
        let (iters, skip) = schedule(size, &BANDWIDTH, o);
        let slot = |k: usize| if o.slots { k * size } else { 0 };
        w.barrier()?;
        let mut t0 = 0.0;
        for i in 0..iters + skip {
            if i == skip {
                t0 = mpr::wtime();
            }
            let mut reqs = Vec::with_capacity(2 * win);
            if let Some(src) = from {
                let base = rbuf.as_mut_ptr();
                for k in 0..win {
                    // SAFETY: `rbuf` outlives the requests, all waited for below; nothing
                    // else touches it meanwhile (OSU's shared receive buffer).
                    reqs.push(unsafe { w.irecv_unscoped(base.add(slot(k)), size, src, 100) }?);
                }
            }
            if let Some(dst) = to {
                for k in 0..win {
                    // SAFETY: `sbuf` outlives the requests, all waited for below, and is
                    // only read meanwhile.
                    reqs.push(unsafe { w.isend_unscoped(sbuf.as_ptr().add(slot(k)), size, dst, 100) }?);
                }
            }
            mpr::wait_all(reqs)?;
            if !bi {
                match (to, from) {
                    (Some(dst), None) => drop(w.recv(&mut [0u8; 4], dst, 101)?),
                    (None, Some(src)) => w.send(&[0u8; 4], src, 101)?,
                    _ => {}
                }
            }
        }
        let mine = if to.is_some() { mpr::wtime() - t0 } else { 0.0 };
        let mut slowest = [mine];
        w.allreduce_in_place(&mut slowest, mpr::Max)?;
        if me == 0 {
            let directions = if bi { 2 } else { pairs };
            let msgs = (directions * win * iters) as f64 / slowest[0];
            let mbs = msgs * size as f64 / 1e6;
            match o.what {
                Bench::MbwMr => println!("{size:<10}{mbs:>18.3}{msgs:>18.3}"),
                _ => println!("{size:<10}{mbs:>18.3}"),
            }
        }
    }
    Ok(())
}

/// `--offset`: a multiple of 8 below a page.
fn offset(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(b) if b < 4096 && b % 8 == 0 => Ok(b),
        _ => Err("a multiple of 8 below 4096".into()),
    }
}

/// The `--offset` of every buffer (set once, before any is made).
static OFFSET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `n` values starting on a page boundary (or `--offset` bytes past one), as OSU allocates
/// its buffers (posix_memalign), so the copies compare like for like; every page is written
/// before anything is timed.
struct Paged<T> {
    store: Vec<T>,
    at: usize,
    n: usize,
}

impl<T: Copy> Paged<T> {
    fn new(n: usize, v: T) -> Paged<T> {
        const PAGE: usize = 4096;
        let size = size_of::<T>().max(1);
        let off = OFFSET.load(std::sync::atomic::Ordering::Relaxed) / size;
        let store = vec![v; n + PAGE / size + off];
        let addr = store.as_ptr() as usize;
        Paged { at: (addr.next_multiple_of(PAGE) - addr) / size + off, store, n }
    }

    fn get(&mut self) -> &mut [T] {
        &mut self.store[self.at..self.at + self.n]
    }

    fn slice(&self) -> &[T] {
        &self.store[self.at..self.at + self.n]
    }
}

/// Collective latency (us per call, averaged over ranks), OSU style: sizes 4 B to `max`
/// (for allreduce: bytes of f32 summed; for allgather/alltoall: bytes per rank).
fn collective(w: &Comm, what: &str, o: &Opts) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let title = match what {
        "allreduce" => "Allreduce",
        "bcast" => "Broadcast",
        "allgather" => "Allgather",
        "alltoall" => "All-to-All",
        _ => "Barrier",
    };
    if me == 0 {
        println!("# mpr-bench {title} Latency Test");
        println!("# Size       Avg Latency(us)");
    }
    let list = if what == "barrier" { vec![0] } else { sizes(o.min.max(4), o.max, false) };
    for size in list {
        let n = (size / 4).max(1);
        let (iters, skip) = schedule(size, &COLLECTIVE, o);
        let mut a_store = Paged::new(n, 1.0f32);
        let mut b_store = Paged::new(n * if matches!(what, "allgather" | "alltoall") { p } else { 1 }, 0.0f32);
        let big_store = Paged::new(if what == "alltoall" { n * p } else { 0 }, 1.0f32);
        let (a, b, big) = (a_store.get(), b_store.get(), big_store.slice());
        let mut total = 0.0;
        let mut samples: Vec<f64> = Vec::with_capacity(iters);
        w.barrier()?;
        if what == "barrier" {
            // As osu_mini and OSU's osu_barrier: the barriers back to back, timed as a whole
            // (a barrier between two timed ones would be the call measured again).
            let mut t0 = 0.0;
            for i in 0..iters + skip {
                if i == skip {
                    t0 = mpr::wtime();
                }
                w.barrier()?;
            }
            total = mpr::wtime() - t0;
            samples.push(total / iters as f64);
        } else {
            // osu_mini's order for the others: a barrier before the first call (above),
            // then one after each (untimed).
            for i in 0..iters + skip {
                let t0 = mpr::wtime();
                match what {
                    "allreduce" => w.allreduce(a, b, mpr::Sum)?,
                    "bcast" => w.bcast(a, 0)?,
                    "allgather" => w.allgather(a, b)?,
                    _ => w.alltoall(big, b)?,
                }
                let t = mpr::wtime() - t0;
                if i >= skip {
                    samples.push(t);
                    total += t;
                }
                w.barrier()?;
            }
        }
        if o.per_rank {
            samples.sort_by(f64::total_cmp);
            let q = |f: f64| samples[((samples.len() - 1) as f64 * f) as usize] * 1e6;
            eprintln!(
                "# size {size} rank {me}: mean {:.2} p50 {:.2} p90 {:.2} p99 {:.2} max {:.2} (us)",
                total * 1e6 / iters as f64,
                q(0.5),
                q(0.9),
                q(0.99),
                q(1.0)
            );
        }
        let mut avg = [total * 1e6 / iters as f64];
        w.allreduce_in_place(&mut avg, mpr::Sum)?;
        if me == 0 {
            println!("{size:<10}{:>18.3}", avg[0] / p as f64);
        }
    }
    Ok(())
}

fn main() {
    let opts = <Opts as clap::Parser>::parse();
    OFFSET.store(opts.offset, std::sync::atomic::Ordering::Relaxed);
    let what = opts.what.name();
    let universe = mpr::init().unwrap_or_else(|e| {
        eprintln!("mpr-bench: {e}");
        std::process::exit(1)
    });
    let w = universe.world();
    if let Err(e) = check_sizes(&opts, w.size()) {
        eprintln!("mpr-bench {what}: {e}");
        std::process::exit(2);
    }
    if w.size() < 2
        && !matches!(opts.what, Bench::Allreduce | Bench::Bcast | Bench::Allgather | Bench::Alltoall | Bench::Barrier)
    {
        eprintln!("mpr-bench {what}: needs at least 2 ranks (mprun -np 2 mpr-bench {what})");
        std::process::exit(2);
    }
    let r = match opts.what {
        Bench::Latency => latency(&w, &opts),
        Bench::Bw | Bench::Bibw | Bench::MbwMr => streams(&w, &opts),
        Bench::Allreduce | Bench::Bcast | Bench::Allgather | Bench::Alltoall | Bench::Barrier => {
            collective(&w, what, &opts)
        }
        _ => one_sided::run(&w, &opts),
    };
    if let Err(e) = r.and_then(|_| universe.finalize()) {
        eprintln!("mpr-bench: {e}");
        std::process::exit(1);
    }
}
