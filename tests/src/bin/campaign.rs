//! A fault campaign: jobs of the `ptp` test program, started through `mprun` over shared
//! memory, TCP and the software RDMA provider (with loss), each hit by one fault at a random
//! moment of its life (while mprun starts, while ranks wire up, while they exchange, while
//! they finalize): a rank killed, mprun signalled or killed, a rank stopped under
//! `MPR_WAIT_TIMEOUT`, the ranks' listeners flooded with connections that do not belong to the
//! job. Each run is checked: the job ends the way the fault says it must (every rank's bytes
//! checked when it should succeed, the cause named when it cannot), within the time the fault
//! allows, and leaves no process and no shared-memory file behind.
//!
//! ```text
//! campaign [--runs N] [--seconds S] [--seed X] [--verbose]
//! ```
//!
//! CI runs a few runs of it (tests/tests/campaign.rs); a developer runs it long. The last line
//! counts runs, clean ends, the longest time from fault to end, and leftovers; the exit code
//! is 0 only when every run ended clean. A run that did not is described on a line of its
//! own, with the seed that repeats the campaign.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mpr_tests::{bin_dir, listeners_of, processes_with, shm_files};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// How long a wait on a stopped rank may take before it fails (`MPR_WAIT_TIMEOUT`).
const WAIT_TIMEOUT_S: u64 = 2;
/// How long a rank stays stopped before it is let go on (SIGCONT): longer than the timeout,
/// so that a peer waiting on it fails first.
const STOPPED_FOR: Duration = Duration::from_secs(WAIT_TIMEOUT_S + 1);
/// A job that has not ended this long after its fault is hung: killed, and counted unclean.
const HUNG: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Transport {
    Shm,
    Tcp,
    /// The software RDMA provider (Thunderbolt's UC) with this percentage of frames lost.
    Rdma(u32),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// No fault: the job must succeed (the campaign's control).
    None,
    /// SIGKILL to one rank.
    KillRank,
    /// SIGTERM or SIGINT to mprun.
    Signal(i32),
    /// SIGKILL to mprun: its ranks must die with it.
    KillMprun,
    /// SIGSTOP to one rank, SIGCONT a while later: a peer's wait on it meanwhile fails after
    /// `MPR_WAIT_TIMEOUT` and ends the job; if none waited on it, the job runs to its end.
    StopRank,
    /// Connections that never prove they belong to the job, to every rank's listener: the job
    /// must succeed regardless.
    Flood,
}

impl Fault {
    /// The longest a job may take to end after this fault and still end clean (`succeeded`:
    /// the job ran to its end all the same).
    fn bound(self, succeeded: bool) -> Duration {
        match self {
            // mprun acts on a signal within 1 s (the README's promise), and a rank's death is
            // seen at once.
            Fault::Signal(_) | Fault::KillRank | Fault::KillMprun => Duration::from_secs(1),
            // A peer's wait fails after the timeout and mprun stops the job at once; or the
            // rank goes on and the job finishes its work (slow at 30% loss).
            Fault::StopRank if succeeded => STOPPED_FOR + Duration::from_secs(15),
            Fault::StopRank => STOPPED_FOR + Duration::from_secs(3),
            Fault::None | Fault::Flood => HUNG,
        }
    }
}

struct Run {
    seq: usize,
    transport: Transport,
    fault: Fault,
    np: usize,
    /// Milliseconds after mprun's start at which the fault was aimed.
    at_ms: u64,
}

struct Outcome {
    /// Time from the fault (or from the start, without one) to the job's end and its
    /// processes' disappearance.
    end: Duration,
    /// Whether the fault hit the job (it may have ended first).
    landed: bool,
    /// mprun's exit code.
    code: Option<i32>,
    leftovers: usize,
    /// Why the run was not clean, if it was not.
    trouble: Option<String>,
}

fn main() {
    let mut runs = None;
    let mut seconds = None;
    let mut seed: u64 = rand::random();
    let mut verbose = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> u64 {
            let v = args.next().unwrap_or_default();
            v.parse().unwrap_or_else(|_| usage(&format!("{name} takes a whole number, not {v:?}")))
        };
        match a.as_str() {
            "--runs" => runs = Some(value("--runs")),
            "--seconds" => seconds = Some(value("--seconds")),
            "--seed" => seed = value("--seed"),
            "--verbose" => verbose = true,
            "-h" | "--help" => {
                println!("usage: campaign [--runs N] [--seconds S] [--seed X] [--verbose]");
                return;
            }
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    let runs = runs.unwrap_or(if seconds.is_some() { u64::MAX } else { 20 });
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    println!("campaign: seed {seed}");
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut count, mut clean, mut leftovers) = (0usize, 0usize, 0usize);
    let mut longest: Option<(Duration, String)> = None;
    while (count as u64) < runs && deadline.is_none_or(|d| Instant::now() < d) {
        let run = draw(&mut rng, count);
        let what = format!(
            "run {}: {:?} on {} ranks over {}, aimed at {} ms",
            run.seq,
            run.fault,
            run.np,
            transport_name(run.transport),
            run.at_ms
        );
        let o = execute(&run, &mut rng);
        count += 1;
        leftovers += o.leftovers;
        if o.landed && o.fault_counts(&run) && longest.as_ref().is_none_or(|(d, _)| o.end > *d) {
            longest = Some((o.end, what.clone()));
        }
        match &o.trouble {
            None => {
                clean += 1;
                if verbose {
                    let (end, code) = (o.end.as_secs_f64(), o.code.map_or("none (killed)".into(), |c| c.to_string()));
                    if o.landed {
                        println!("{what}: clean, exit {code}, ended {end:.2} s after the fault");
                    } else {
                        println!("{what}: clean, exit {code}, ran {end:.2} s (before any fault)");
                    }
                }
            }
            Some(t) => println!("{what}: NOT CLEAN: {t}"),
        }
        let _ = std::io::stdout().flush();
    }
    let (end, which) = longest.map(|(d, w)| (d.as_secs_f64(), w)).unwrap_or((0.0, "none".into()));
    println!(
        "campaign: {count} runs, {clean} clean, longest end after a fault {end:.2} s ({which}), {leftovers} leftovers, seed {seed}"
    );
    std::process::exit(if clean == count { 0 } else { 1 });
}

fn usage(why: &str) -> ! {
    eprintln!("campaign: {why}\nusage: campaign [--runs N] [--seconds S] [--seed X] [--verbose]");
    std::process::exit(2)
}

fn transport_name(t: Transport) -> String {
    match t {
        Transport::Shm => "shared memory".into(),
        Transport::Tcp => "TCP".into(),
        Transport::Rdma(p) => format!("soft RDMA at {p}% loss"),
    }
}

impl Outcome {
    /// Whether the run's end time measures a fault (the longest-end figure is about faults).
    fn fault_counts(&self, run: &Run) -> bool {
        !matches!(run.fault, Fault::None | Fault::Flood)
    }
}

/// The run number `seq`: its fault (each kind in turn), transport, size and moment (drawn
/// from `rng`).
fn draw(rng: &mut SmallRng, seq: usize) -> Run {
    let faults = [
        Fault::KillRank,
        Fault::Signal(libc::SIGTERM),
        Fault::StopRank,
        Fault::KillMprun,
        Fault::Flood,
        Fault::KillRank,
        Fault::Signal(libc::SIGINT),
        Fault::None,
    ];
    let fault = faults[seq % faults.len()];
    let transport = if fault == Fault::Flood {
        // Only TCP ranks listen once the job runs.
        Transport::Tcp
    } else {
        *[Transport::Shm, Transport::Tcp, Transport::Rdma(0), Transport::Rdma(5), Transport::Rdma(30)]
            .choose(rng)
            .expect("transports")
    };
    let np = rng.gen_range(2..=4);
    // Half the faults land in the first 150 ms (mprun parsing, spawning, the ranks' start-up
    // and wire-up), the rest anywhere in a run's usual length.
    let at_ms = if rng.gen_bool(0.5) { rng.gen_range(0..150) } else { rng.gen_range(150..1000) };
    Run { seq, transport, fault, np, at_ms }
}

fn execute(run: &Run, rng: &mut SmallRng) -> Outcome {
    let marker = format!("campaign-{}-{}", std::process::id(), run.seq);
    let ptp = bin_dir().join("ptp");
    let mut cmd = Command::new(bin_dir().join("mprun"));
    let np = run.np.to_string();
    cmd.args(["-np", &np, "--timeout", "120", ptp.to_str().expect("path"), "pairs", &marker]);
    cmd.env_remove("LD_LIBRARY_PATH").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // Messages up to 1 MB in every pair's exchange; fewer bytes where frames are lost.
    let max = match run.transport {
        Transport::Rdma(p) if p >= 10 => "60000",
        Transport::Rdma(_) => "300000",
        _ => "1000000",
    };
    cmd.env("PTP_MAX", max);
    match run.transport {
        Transport::Shm => {
            cmd.env("MPR_TRANSPORTS", "shm");
        }
        Transport::Tcp => {
            cmd.env("MPR_TRANSPORTS", "tcp");
        }
        Transport::Rdma(p) => {
            cmd.env("MPR_TRANSPORTS", "rdma").env("MPR_VERBS_PROVIDER", "soft");
            cmd.env("MPR_SOFT_LOSS", format!("{}", p as f64 / 100.0))
                .env("MPR_SOFT_SEED", format!("{}", rng.gen::<u32>()));
        }
    }
    if run.fault == Fault::StopRank {
        cmd.env("MPR_WAIT_TIMEOUT", WAIT_TIMEOUT_S.to_string());
    }
    let start = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                end: Duration::ZERO,
                landed: false,
                code: None,
                leftovers: 0,
                trouble: Some(format!("cannot start mprun: {e}")),
            };
        }
    };
    let out = drain(child.stdout.take().expect("stdout"));
    let err = drain(child.stderr.take().expect("stderr"));
    std::thread::sleep(Duration::from_millis(run.at_ms));
    let mut flood = Vec::new();
    // What was done, and when: `None` when the job ended before the fault could land.
    let mut fault_at = None;
    match run.fault {
        Fault::None => {}
        Fault::KillRank | Fault::StopRank => {
            if let Some(pid) = wait_for_rank(&mut child, &marker, rng) {
                let sig = if run.fault == Fault::KillRank { libc::SIGKILL } else { libc::SIGSTOP };
                signal(pid, sig);
                fault_at = Some(Instant::now());
                if run.fault == Fault::StopRank {
                    std::thread::spawn(move || {
                        std::thread::sleep(STOPPED_FOR);
                        signal(pid, libc::SIGCONT);
                    });
                }
            }
        }
        Fault::Signal(_) | Fault::KillMprun if alive(&mut child) => {
            let sig = if let Fault::Signal(sig) = run.fault { sig } else { libc::SIGKILL };
            signal(child.id() as i32, sig);
            fault_at = Some(Instant::now());
        }
        Fault::Signal(_) | Fault::KillMprun => {}
        Fault::Flood => {
            let ports = wait_for_listeners(&mut child, run.np);
            for port in &ports {
                for k in 0..60 {
                    if let Ok(mut s) = TcpStream::connect(("127.0.0.1", *port)) {
                        match k % 3 {
                            // Silent: connects and says nothing.
                            0 => {}
                            // Garbage where the job's hello should be.
                            1 => {
                                let _ = s.write_all(&[0xde, 0xad, 0xbe, 0xef].repeat(64));
                            }
                            // Connects and leaves at once.
                            _ => continue,
                        }
                        flood.push(s);
                    }
                }
            }
            fault_at = (!ports.is_empty()).then(Instant::now);
        }
    }
    let status = wait_bounded(&mut child, HUNG);
    let ended = Instant::now();
    drop(flood);
    let (so, se) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    // Processes and files of the job: killing mprun leaves the ranks to notice by themselves,
    // so give them the fault's bound to go.
    let settle = Instant::now() + Duration::from_secs(5);
    let mut left = processes_with(&marker);
    while !left.is_empty() && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(20));
        left = processes_with(&marker);
    }
    let gone_at = Instant::now();
    let jobid = so.lines().find_map(|l| l.strip_prefix("jobid ")).map(str::trim).unwrap_or("").to_string();
    let files = shm_files(&jobid);
    let mut trouble = Vec::new();
    if !left.is_empty() {
        trouble.push(format!("left running: {left:?}"));
        for l in &left {
            if let Some(pid) = l.split(':').next().and_then(|p| p.parse().ok()) {
                signal(pid, libc::SIGKILL);
            }
        }
    }
    if !files.is_empty() {
        trouble.push(format!("left in /dev/shm: {files:?}"));
    }
    let end_at = if run.fault == Fault::KillMprun { gone_at.max(ended) } else { ended };
    let end = end_at.saturating_duration_since(fault_at.unwrap_or(start));
    let code = match status {
        Some(s) => s.code(),
        None => {
            trouble.push(format!("no end within {} s: killed", HUNG.as_secs()));
            None
        }
    };
    let oks = so.lines().filter(|l| l.ends_with("pairs ok")).count();
    let succeeded = code == Some(0) && oks == run.np;
    let expect = |ok: bool, what: &str, trouble: &mut Vec<String>| {
        if !ok {
            trouble.push(format!("{what}: exit {code:?}, {oks} ranks ok\nstdout:\n{so}stderr:\n{se}"));
        }
    };
    match (run.fault, fault_at) {
        // No fault landed: the job ran to its end, and must have succeeded.
        (Fault::None | Fault::Flood, _) | (_, None) => expect(succeeded, "the job should have succeeded", &mut trouble),
        (Fault::KillRank, Some(_)) => {
            // The rank was alive when killed; it may have finished its work already.
            let named = code == Some(128 + 9) && se.contains("SIGKILL") && se.contains("rank ");
            expect(succeeded || named, "mprun should name the killed rank (exit 137)", &mut trouble);
        }
        (Fault::Signal(sig), Some(_)) => {
            let name = if sig == libc::SIGTERM { "SIGTERM" } else { "SIGINT" };
            let stopped = code == Some(128 + sig) && se.contains(&format!("mprun: received {name}; stopping the job"));
            // In its first moments, before it takes signals in hand, mprun ends by the signal
            // itself, as any program does: clean when it had started nothing (checked below).
            let before_start = status.and_then(|s| s.signal()) == Some(sig) && so.is_empty();
            expect(
                succeeded || stopped || before_start,
                &format!("mprun should stop on {name} (exit {})", 128 + sig),
                &mut trouble,
            );
        }
        // mprun died without a word: only its ranks' disappearance is checked.
        (Fault::KillMprun, Some(_)) => {}
        (Fault::StopRank, Some(_)) => {
            let timed_out = code == Some(1) && se.contains("wait timed out after");
            expect(succeeded || timed_out, "a wait on the stopped rank should time out and end the job", &mut trouble);
        }
    }
    if fault_at.is_some() && end > run.fault.bound(succeeded) {
        trouble.push(format!(
            "ended {:.2} s after the fault (bound {} s)",
            end.as_secs_f64(),
            run.fault.bound(succeeded).as_secs()
        ));
    }
    let leftovers = left.len() + files.len();
    Outcome {
        end,
        landed: fault_at.is_some(),
        code,
        leftovers,
        trouble: (!trouble.is_empty()).then(|| trouble.join("; ")),
    }
}

/// Reads a pipe to its end on a thread of its own (a full pipe would stall the job).
fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    })
}

fn alive(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The pids of the job's ranks alive now (mprun's children running `ptp` with the marker).
fn ranks(child: &Child, marker: &str) -> Vec<i32> {
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id())).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker) && c.starts_with(b"/"))
        })
        .collect()
}

/// A rank of the job picked at random, once one runs; `None` if the job ends first.
fn wait_for_rank(child: &mut Child, marker: &str, rng: &mut SmallRng) -> Option<i32> {
    loop {
        let r = ranks(child, marker);
        if let Some(&pid) = r.choose(rng) {
            return Some(pid);
        }
        if !alive(child) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The TCP ports the job's ranks listen on, once all `np` listen (or the job ended).
fn wait_for_listeners(child: &mut Child, np: usize) -> Vec<u16> {
    let mut ports = Vec::new();
    while alive(child) {
        ports = listeners_of(child.id()).iter().filter_map(|a| a.rsplit(':').next()?.parse().ok()).collect();
        if ports.len() >= np {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    ports
}

/// Waits for mprun at most `limit`; past it, kills it and returns `None`.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
