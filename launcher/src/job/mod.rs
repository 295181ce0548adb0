//! The job: start the ranks (here, and on other hosts through their proxies), serve them,
//! forward their output, and end them as a whole.
//!
//! One mio `Poll` watches this machine's ranks (stdout, stderr, PMI socket), the control
//! connections of the remote hosts' proxies (`remote`), the control listener, the pipe of
//! mprun's stdin when rank 0 is remote, and the signals mprun handles (SIGCHLD, SIGINT,
//! SIGTERM, SIGHUP). Timeouts: `--timeout`, the SIGTERM-to-SIGKILL grace while stopping, and
//! per host the start bound, heartbeats and the silence bound; nothing polls.
//!
//! Invariants:
//! - A local rank is *live* from its start until it is reaped; a remote host is *finished*
//!   once its proxy reported `Done`, or it was lost, or it never started; the job ends when
//!   no local rank is live and every remote host is finished. Then mprun closes the control
//!   connections, which tells the proxies to clean up and exit.
//! - mprun holds the job's one PMI key-value space: remote ranks' PMI lines come through
//!   their proxy and are answered the same way, so a barrier completes when every rank of
//!   every host has entered.
//! - The first failure (a rank exiting non-zero or killed by a signal, a PMI abort, a signal
//!   to mprun, the time limit, a rank that cannot start, a host whose proxy cannot start or
//!   is lost) is the job's [`Cause`]; it is printed once and decides the exit code. Stopping
//!   sends SIGTERM (and SIGCONT) to the process group of every live local rank and `Stop` to
//!   every proxy (which does the same on its host), then SIGKILL / `Kill` after the grace.
//! - After the last local rank is reaped, what is left in its pipes is forwarded and
//!   anything still running in the ranks' process groups is killed; launcher commands still
//!   running are killed too.

mod remote;
mod setup;

use std::collections::HashMap;
use std::io::{self, Stderr, Stdout};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Poll, Token};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

use crate::cause::Cause;
use crate::cli::Options;
use crate::hosts::Planned;
use crate::ids::JobIds;
use crate::pmi::conn::ReadState;
use crate::pmi::server::{Action, Server};
use crate::ranks::{Limit, Ranks, STDERR, STDOUT};
use crate::spawn::{spawn, spawn_error_code, Program, RankStdin, Slot};
use crate::status::{reap, reap_all, signal_name};
use crate::stdio::{say, Sink};
use remote::{Pending, Remote, StdinFeed};

/// Token of the signal pipe.
const SIGNALS: Token = Token(usize::MAX);
/// Token of the control listener.
const LISTENER: Token = Token(usize::MAX - 1);
/// Token of mprun's stdin pipe, when rank 0 is remote.
const STDIN: Token = Token(usize::MAX - 2);
/// Tokens of remote hosts' control connections: `REMOTE_BASE + remote index`.
const REMOTE_BASE: usize = usize::MAX / 2;
/// Tokens of connections that have not proven themselves yet: `PENDING_BASE + id`.
const PENDING_BASE: usize = usize::MAX / 4;

/// What the job runs, decided before it starts.
#[derive(Debug)]
pub(crate) struct Setup<'a> {
    /// The command line.
    pub(crate) opts: &'a Options,
    /// The job's identity.
    pub(crate) ids: &'a JobIds,
    /// The program resolved on this machine, if this machine runs ranks.
    pub(crate) program: Option<PathBuf>,
    /// The hosts and their ranks.
    pub(crate) plan: Vec<Planned>,
}

/// Runs the job to its end and returns mprun's exit code.
pub(crate) fn run(setup: &Setup<'_>) -> io::Result<i32> {
    match Job::new(setup)? {
        Ok(job) => job.run(),
        Err(message) => {
            say(&message);
            Ok(1)
        }
    }
}

/// Where a rank runs, once started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Not started (yet, or ever).
    Nowhere,
    /// On this machine, at this local index.
    Here(usize),
    /// On the remote host with this index.
    Remote(usize),
}

/// The job is being stopped.
#[derive(Debug)]
struct Stopping {
    cause: Cause,
    /// When to send SIGKILL; `None` once sent.
    kill_at: Option<Instant>,
}

/// The running job (not `Debug`: the signal source is not).
struct Job<'a> {
    setup: &'a Setup<'a>,
    opts: &'a Options,
    /// More than one host: messages about ranks name their host.
    multi: bool,
    poll: Poll,
    signals: Signals,
    /// This machine's ranks.
    ranks: Ranks,
    /// This machine's entry in the plan, if it runs ranks.
    local: Option<usize>,
    /// The environment this machine's ranks get.
    local_env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    remotes: Vec<Remote>,
    listener: Option<TcpListener>,
    pending: HashMap<usize, Pending>,
    next_pending: usize,
    /// Where each rank runs.
    place: Vec<Place>,
    /// Each rank's pid, once known.
    pids: Vec<Option<Pid>>,
    server: Server,
    stdout: Sink<Stdout>,
    stderr: Sink<Stderr>,
    /// mprun's stdin on its way to a remote rank 0.
    stdin: Option<StdinFeed>,
    /// Rank 0's stdin when it runs here, until this machine's ranks start.
    local_stdin: Option<RankStdin>,
    /// Every host's ranks were launched (or the job stopped before).
    launched: bool,
    deadline: Option<Instant>,
    stopping: Option<Stopping>,
}

impl<'a> Job<'a> {
    /// Sets the job up; `Ok(Err(message))` for a job that cannot start (no rank started).
    fn new(setup: &'a Setup<'a>) -> io::Result<Result<Self, String>> {
        let opts = setup.opts;
        let poll = Poll::new()?;
        let mut signals = Signals::new([SIGCHLD, SIGINT, SIGTERM, SIGHUP])?;
        poll.registry().register(&mut signals, SIGNALS, mio::Interest::READABLE)?;
        let mut job = Job {
            setup,
            opts,
            multi: setup.plan.len() > 1,
            poll,
            signals,
            ranks: Ranks::new(),
            local: setup.plan.iter().position(|h| h.local),
            local_env: Vec::new(),
            remotes: Vec::new(),
            listener: None,
            pending: HashMap::new(),
            next_pending: 0,
            place: vec![Place::Nowhere; opts.np],
            pids: vec![None; opts.np],
            server: Server::new(opts.np, setup.ids.kvsname()),
            stdout: Sink::new(io::stdout()),
            stderr: Sink::new(io::stderr()),
            stdin: None,
            local_stdin: None,
            launched: false,
            deadline: None,
            stopping: None,
        };
        if let Err(message) = job.prepare() {
            return Ok(Err(message));
        }
        Ok(Ok(job))
    }

    fn verbose(&self, message: impl FnOnce() -> String) {
        if self.opts.verbose {
            say(&message());
        }
    }

    fn run(mut self) -> io::Result<i32> {
        let opts = self.opts;
        self.verbose(|| {
            let hosts: Vec<String> =
                self.setup.plan.iter().map(|h| format!("{} ({} rank(s))", h.name, h.ranks.len())).collect();
            format!(
                "job {}: starting {} rank(s) of {} on {}",
                self.setup.ids.jobid,
                opts.np,
                opts.program.to_string_lossy(),
                hosts.join(", ")
            )
        });
        self.deadline = opts.timeout.map(|(limit, _)| Instant::now() + limit);
        self.start_remotes();
        self.local_stdin = self.stdin_for_rank0();
        self.launch_when_proven();
        self.reap();

        let mut events = Events::with_capacity(256);
        while !self.finished() {
            let timeout = self.next_deadline().map(|d| d.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                self.stop(Cause::Internal(format!("waiting for events failed: {e}")));
                self.kill_now();
                self.wait_blocking();
                break;
            }
            for event in events.iter() {
                self.dispatch(event.token(), event.is_writable());
            }
            let (out, err) = (&mut self.stdout, &mut self.stderr);
            self.ranks.release_partial(Instant::now(), &mut |_, stream, d| write_to(stream, out, err, d));
            self.check_deadlines(Instant::now());
        }

        self.drain();
        for r in 0..self.remotes.len() {
            self.finish(r);
        }
        self.end_launchers();
        Ok(self.stopping.map_or(0, |s| s.cause.exit_code()))
    }

    fn finished(&self) -> bool {
        self.ranks.live() == 0 && self.remotes.iter().all(Remote::finished)
    }

    /// mprun's stdin, for rank 0 if it runs here; otherwise set up to be sent to its proxy
    /// (or, if it cannot be, rank 0's proxy is told to give it `/dev/null`).
    fn stdin_for_rank0(&mut self) -> Option<RankStdin> {
        let remote = self.remotes.iter().position(|r| r.ranks.first() == Some(&0));
        let pipe = match crate::stdin::forward() {
            Ok(Some(pipe)) => Some(pipe),
            Ok(None) => {
                self.verbose(|| "in the background of the terminal: not forwarding stdin".into());
                None
            }
            Err(e) => {
                say(&format!("cannot forward stdin to rank 0: {e}"));
                None
            }
        };
        let Some(r) = remote else {
            return pipe.map(RankStdin::Pipe);
        };
        let fed = pipe.and_then(|pipe| match StdinFeed::new(pipe, r, self.poll.registry(), STDIN) {
            Ok(feed) => Some(feed),
            Err(e) => {
                say(&format!("cannot forward stdin to rank 0: {e}"));
                None
            }
        });
        if fed.is_none() {
            self.remotes[r].no_stdin();
        }
        self.stdin = fed;
        None
    }

    /// Once every remote host's proxy has proven itself (at once when there is none), starts
    /// the ranks of every host, each in its share of its machine: hosts that are namespaces
    /// or containers of one machine (equal ids in the proxies' `Hello`s) map their ranks over
    /// its cores as one host would (`bind`).
    fn launch_when_proven(&mut self) {
        if self.launched || self.stopping.is_some() || !self.remotes.iter().all(Remote::proven) {
            return;
        }
        self.launched = true;
        let here = mpr::bootstrap::machine::id().unwrap_or_default();
        let mut remote = 0;
        let keys: Vec<(String, usize)> = self
            .setup
            .plan
            .iter()
            .map(|h| {
                let id = if h.local {
                    here.clone()
                } else {
                    remote += 1;
                    self.remotes[remote - 1].machine.clone()
                };
                // A host with no machine id is a machine of its own.
                (if id.is_empty() { format!("host {}", h.name) } else { id }, h.ranks.len())
            })
            .collect();
        let keyed: Vec<(&str, usize)> = keys.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        let shares = crate::bind::Share::of_hosts(&keyed);
        let mut remote = 0;
        for (h, share) in self.setup.plan.iter().zip(&shares) {
            if h.local {
                continue;
            }
            if share.machine_ranks > h.ranks.len() {
                self.verbose(|| {
                    let (first, n) = (share.first, h.ranks.len());
                    format!(
                        "host {}: its machine is shared with other hosts: its ranks are {first}..{} of the machine's {}",
                        h.name,
                        first + n,
                        share.machine_ranks
                    )
                });
            }
            self.remotes[remote].launch(*share);
            remote += 1;
        }
        let local = self.local.map(|i| shares[i]).unwrap_or_default();
        let stdin = self.local_stdin.take();
        self.start_local(stdin, local);
        self.pump_stdin();
    }

    /// Starts this machine's ranks; the first that cannot start stops the job.
    fn start_local(&mut self, mut stdin: Option<RankStdin>, share: crate::bind::Share) {
        let Some(host) = self.local else {
            return;
        };
        let plan = &self.setup.plan[host];
        let path = self.setup.program.as_deref().expect("the program is resolved when this machine runs ranks");
        let env = self.local_env.clone();
        if let Err(error) = crate::addr::check_rank_iface(&env) {
            let rank = plan.ranks.first().copied().unwrap_or(0);
            self.stop(Cause::SpawnFailed { rank, host: self.multi.then(|| plan.name.clone()), error, code: 1 });
            return;
        }
        let program = Program { path, argv0: &self.opts.program, args: &self.opts.args, env: &env, cwd: None };
        let bindings = crate::bind::here(&self.opts.binding, share, plan.ranks.len());
        crate::bind::report(&self.opts.binding, &plan.name, &plan.ranks, &bindings);
        for ((local_rank, &rank), binding) in plan.ranks.iter().enumerate().zip(&bindings) {
            // A signal to mprun stops the spawning at once, not after the last rank.
            if let Some(signal) = self.stop_signal() {
                self.on_signal(signal);
            }
            if self.stopping.is_some() {
                break;
            }
            let slot = Slot { rank, size: self.opts.np, local_rank, local_size: plan.ranks.len() };
            let rank_stdin = if rank == 0 { stdin.take().unwrap_or(RankStdin::Null) } else { RankStdin::Null };
            match spawn(&program, slot, binding, rank_stdin) {
                Ok(spawned) => {
                    let pid = spawned.pid;
                    self.pids[rank] = Some(pid);
                    match self.ranks.add(self.poll.registry(), rank, spawned, self.opts.tag_output) {
                        Ok(local) => self.place[rank] = Place::Here(local),
                        Err(e) => self.stop(Cause::Internal(format!("cannot watch rank {rank}: {e}"))),
                    }
                    self.verbose(|| format!("rank {rank}: pid {pid}"));
                }
                Err(e) => {
                    let host = self.multi.then(|| plan.name.clone());
                    let code = spawn_error_code(&e);
                    self.stop(Cause::SpawnFailed { rank, host, error: e.to_string(), code });
                }
            }
        }
    }

    fn dispatch(&mut self, token: Token, writable: bool) {
        match token {
            SIGNALS => {
                let pending: Vec<i32> = self.signals.pending().collect();
                for signal in pending {
                    match signal {
                        SIGCHLD => self.reap(),
                        other => self.on_signal(other),
                    }
                }
            }
            LISTENER => self.accept(),
            STDIN => self.pump_stdin(),
            Token(t) if t >= REMOTE_BASE => self.on_remote(t - REMOTE_BASE, writable),
            Token(t) if t >= PENDING_BASE => self.on_pending(t - PENDING_BASE, writable),
            token => {
                let Some((local, stream)) = self.ranks.which(token) else {
                    return;
                };
                match stream {
                    STDOUT | STDERR => {
                        let (out, err) = (&mut self.stdout, &mut self.stderr);
                        self.ranks.read_output(self.poll.registry(), local, stream, Limit::UntilBlocked, &mut |d| {
                            write_to(stream, out, err, d)
                        });
                    }
                    _ => {
                        if writable {
                            self.ranks.flush_pmi(local);
                        }
                        self.serve_local(local);
                    }
                }
            }
        }
    }

    /// Reads local rank `local`'s PMI socket and answers it.
    fn serve_local(&mut self, local: usize) {
        let rank = self.ranks.rank(local);
        let mut lines = Vec::new();
        let state = self.ranks.read_pmi(local, &mut lines);
        let mut actions = Vec::new();
        for line in &lines {
            self.verbose(|| format!("rank {rank} pmi: {line}"));
            self.server.handle(rank, line, &mut actions);
        }
        self.apply(actions);
        if let ReadState::Garbage(why) = state {
            say(&format!("rank {rank} sent {why}; closing its PMI connection"));
            self.ranks.close_pmi(self.poll.registry(), local);
        }
        if state == ReadState::Closed {
            self.verbose(|| format!("rank {rank} closed its PMI connection"));
            self.ranks.close_pmi(self.poll.registry(), local);
        }
    }

    /// Carries out what the PMI server asked for.
    fn apply(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Reply(to, cmd) => self.reply(to, &cmd.encode()),
                Action::Abort { rank, code, msg } => {
                    let pid = self.pids[rank].unwrap_or(Pid::from_raw(0));
                    let host = self.host_label(rank);
                    self.stop(Cause::Abort { rank, pid, host, code, msg });
                }
                Action::Close(to) => {
                    say(&format!("rank {to} sent a malformed PMI command; closing its PMI connection"));
                    match self.place[to] {
                        Place::Here(local) => self.ranks.close_pmi(self.poll.registry(), local),
                        Place::Remote(r) => {
                            self.remotes[r].send(&crate::control::wire::Msg::PmiClose { rank: to as u32 })
                        }
                        Place::Nowhere => {}
                    }
                }
            }
        }
    }

    /// Sends a PMI line to rank `to`, wherever it runs.
    fn reply(&mut self, to: usize, line: &str) {
        match self.place[to] {
            Place::Here(local) => {
                if !self.ranks.send_pmi(local, line) {
                    say(&format!(
                        "rank {to} leaves its PMI replies unread (over {} KiB queued); closing its PMI connection",
                        crate::pmi::conn::MAX_QUEUED >> 10
                    ));
                    self.ranks.close_pmi(self.poll.registry(), local);
                }
            }
            Place::Remote(r) => {
                self.remotes[r].send(&crate::control::wire::Msg::PmiReply { rank: to as u32, line: line.to_string() })
            }
            Place::Nowhere => {}
        }
    }

    /// The host to name in messages about `rank`: none in a job of one host.
    fn host_label(&self, rank: usize) -> Option<String> {
        if !self.multi {
            return None;
        }
        self.setup.plan.iter().find(|h| h.ranks.contains(&rank)).map(|h| h.name.clone())
    }

    /// Reaps every ended child: local ranks (the first failure stops the job) and launcher
    /// commands.
    fn reap(&mut self) {
        for (pid, exit) in reap_all() {
            if let Some(local) = self.ranks.exited(pid, exit) {
                let rank = self.ranks.rank(local);
                self.verbose(|| format!("rank {rank} (pid {pid}) {exit}"));
                let host = self.host_label(rank);
                if !exit.success() {
                    self.stop(Cause::RankFailed { rank, pid, host, exit });
                } else if self.server.left_unfinalized(rank) {
                    self.stop(Cause::LeftUnfinalized { rank, pid, host });
                }
            } else if let Some(r) = self.remotes.iter().position(|r| r.launcher == Some(pid)) {
                self.launcher_ended(r, exit);
            }
        }
    }

    /// Reads mprun's pending signals outside the event loop (while it resolves names or
    /// spawns ranks): children that ended are reaped; the first SIGINT, SIGTERM or SIGHUP is
    /// returned.
    fn stop_signal(&mut self) -> Option<i32> {
        let pending: Vec<i32> = self.signals.pending().collect();
        let mut stop = None;
        for signal in pending {
            match signal {
                SIGCHLD => self.reap(),
                other => stop = stop.or(Some(other)),
            }
        }
        stop
    }

    fn on_signal(&mut self, signal: i32) {
        if self.stopping.is_none() {
            self.stop(Cause::Signal(signal));
        } else {
            say(&format!("received {} again; killing the job", signal_name(signal)));
            self.kill_now();
        }
    }

    /// Starts stopping the job for `cause`, unless it is already stopping.
    fn stop(&mut self, cause: Cause) {
        if self.stopping.is_some() {
            return;
        }
        say(&cause.message());
        let stopped = self.ranks.signal_live(Signal::SIGTERM);
        self.ranks.signal_live(Signal::SIGCONT);
        self.verbose(|| format!("SIGTERM to the live rank(s) of this machine: {stopped:?}"));
        for r in 0..self.remotes.len() {
            self.stop_remote(r);
        }
        let kill_at = Some(Instant::now() + self.opts.kill_grace);
        self.stopping = Some(Stopping { cause, kill_at });
    }

    fn kill_now(&mut self) {
        let killed = self.ranks.signal_live(Signal::SIGKILL);
        self.verbose(|| format!("SIGKILL to the live rank(s) of this machine: {killed:?}"));
        for remote in &mut self.remotes {
            remote.send(&crate::control::wire::Msg::Kill);
        }
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.kill_at = None;
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let own = match &self.stopping {
            Some(stopping) => stopping.kill_at,
            None => self.deadline,
        };
        let hosts = self.remotes.iter().filter_map(|r| r.next_deadline(self.opts.host_timeout));
        let pending = self.pending.values().map(|p| p.deadline);
        own.into_iter().chain(hosts).chain(pending).chain(self.ranks.partial_due()).min()
    }

    fn check_deadlines(&mut self, now: Instant) {
        match &self.stopping {
            None => {
                if let (Some(deadline), Some((_, secs))) = (self.deadline, self.opts.timeout) {
                    if deadline <= now {
                        self.stop(Cause::Timeout(secs));
                    }
                }
            }
            Some(Stopping { kill_at: Some(at), .. }) if *at <= now => {
                self.verbose(|| "grace period over: sending SIGKILL".into());
                self.kill_now();
            }
            Some(_) => {}
        }
        self.check_remote_deadlines(now);
    }

    /// Blocks until every live local rank is reaped (after SIGKILL, when the event loop
    /// cannot be used).
    fn wait_blocking(&mut self) {
        while self.ranks.live() > 0 {
            let Some((pid, exit)) = reap(true) else {
                return;
            };
            self.ranks.exited(pid, exit);
        }
    }

    /// Forwards what the local ranks left in their pipes.
    fn drain(&mut self) {
        for (local, stream) in self.ranks.open_pipes() {
            let (out, err) = (&mut self.stdout, &mut self.stderr);
            self.ranks
                .read_output(self.poll.registry(), local, stream, Limit::Drain, &mut |d| write_to(stream, out, err, d));
        }
    }
}

fn write_to<O: AsFd, E: AsFd>(stream: usize, stdout: &mut Sink<O>, stderr: &mut Sink<E>, data: &[u8]) {
    match stream {
        STDOUT => stdout.write(data),
        _ => stderr.write(data),
    }
}

/// Seconds for messages: `2`, `0.5`.
fn secs(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}
