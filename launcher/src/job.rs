//! The job: start the ranks, serve them, forward their output, and end them as a whole.
//!
//! One mio `Poll` watches every rank's stdout and stderr pipe, every PMI socket and the
//! signals mprun handles (SIGCHLD, SIGINT, SIGTERM, SIGHUP). The only timeouts are the
//! `--timeout` deadline and, while stopping, the SIGTERM-to-SIGKILL grace; nothing polls.
//!
//! Invariants:
//! - A rank is *live* from its start until it is reaped; the job ends when no rank is live.
//! - The first failure (a rank exiting non-zero or killed by a signal, a PMI abort, a signal
//!   to mprun, the time limit, a rank that cannot start) is the job's [`Cause`]; it is
//!   printed once and decides the exit code. Stopping sends SIGTERM (and SIGCONT) to the
//!   process group of every live rank, then SIGKILL after the grace.
//! - After the last rank is reaped, what is left in the pipes is forwarded, and anything
//!   still running in the ranks' process groups is killed, so a grandchild holding a pipe
//!   cannot keep mprun waiting.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Stderr, Stdout};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Instant;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

use crate::cause::Cause;
use crate::pmi::conn::{Conn, ReadState};
use crate::pmi::server::{Action, Server};
use crate::spawn::{Launch, Spawned};
use crate::status::{reap, signal_name, Exit};
use crate::stdio::{say, LineForwarder, Sink};

/// Token of the signal pipe; rank tokens are `rank * 3 + stream`.
const SIGNALS: Token = Token(usize::MAX);
const STDOUT: usize = 0;
const STDERR: usize = 1;
const PMI: usize = 2;

/// Reads of one pipe when draining it after the ranks are gone (bounds the time a
/// grandchild that keeps writing can hold mprun).
const DRAIN_READS: usize = 64;

/// Runs the job to its end and returns mprun's exit code.
pub(crate) fn run(launch: &Launch<'_>) -> io::Result<i32> {
    Job::new(launch)?.run()
}

/// One pipe carrying a rank's stdout or stderr.
#[derive(Debug)]
struct Pipe {
    file: File,
    lines: LineForwarder,
}

/// What mprun knows of one rank.
#[derive(Debug)]
struct Rank {
    pid: Pid,
    exit: Option<Exit>,
    stdout: Option<Pipe>,
    stderr: Option<Pipe>,
    pmi: Option<Conn>,
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
    launch: &'a Launch<'a>,
    poll: Poll,
    signals: Signals,
    ranks: Vec<Rank>,
    by_pid: HashMap<Pid, usize>,
    live: usize,
    server: Server,
    stdout: Sink<Stdout>,
    stderr: Sink<Stderr>,
    deadline: Option<Instant>,
    stopping: Option<Stopping>,
    buf: Vec<u8>,
}

impl<'a> Job<'a> {
    fn new(launch: &'a Launch<'a>) -> io::Result<Self> {
        let poll = Poll::new()?;
        let mut signals = Signals::new([SIGCHLD, SIGINT, SIGTERM, SIGHUP])?;
        poll.registry().register(&mut signals, SIGNALS, Interest::READABLE)?;
        Ok(Job {
            launch,
            poll,
            signals,
            ranks: Vec::with_capacity(launch.opts.np),
            by_pid: HashMap::new(),
            live: 0,
            server: Server::new(launch.opts.np, launch.ids.kvsname()),
            stdout: Sink::new(io::stdout()),
            stderr: Sink::new(io::stderr()),
            deadline: None,
            stopping: None,
            buf: vec![0; 64 << 10],
        })
    }

    fn verbose(&self, message: impl FnOnce() -> String) {
        if self.launch.opts.verbose {
            say(&message());
        }
    }

    fn run(mut self) -> io::Result<i32> {
        let opts = self.launch.opts;
        self.verbose(|| {
            format!("job {}: starting {} rank(s) of {}", self.launch.ids.jobid, opts.np, self.launch.program.display())
        });
        self.deadline = opts.timeout.map(|(limit, _)| Instant::now() + limit);
        for rank in 0..opts.np {
            match self.launch.spawn(rank) {
                Ok(spawned) => {
                    if let Err(e) = self.add(rank, spawned) {
                        self.stop(Cause::Internal(format!("cannot watch rank {rank}: {e}")));
                        break;
                    }
                }
                Err(e) => {
                    let code = match e.kind() {
                        io::ErrorKind::NotFound => 127,
                        io::ErrorKind::PermissionDenied => 126,
                        _ if e.raw_os_error() == Some(libc::ENOEXEC) => 126,
                        _ => 1,
                    };
                    self.stop(Cause::SpawnFailed { rank, error: e.to_string(), code });
                    break;
                }
            }
        }
        self.reap();

        let mut events = Events::with_capacity(256);
        while self.live > 0 {
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
            self.check_deadlines(Instant::now());
        }

        self.drain();
        self.kill_leftovers();
        Ok(self.stopping.map_or(0, |s| s.cause.exit_code()))
    }

    /// Takes a started rank into the job. The rank is tracked (so it will be stopped and
    /// reaped) even if watching its descriptors fails.
    fn add(&mut self, rank: usize, spawned: Spawned) -> io::Result<()> {
        let Spawned { pid, stdout, stderr, pmi } = spawned;
        self.verbose(|| format!("rank {rank}: pid {pid}"));
        let tag = self.launch.opts.tag_output;
        self.ranks.push(Rank {
            pid,
            exit: None,
            stdout: Some(Pipe { file: stdout, lines: LineForwarder::new(rank, tag) }),
            stderr: Some(Pipe { file: stderr, lines: LineForwarder::new(rank, tag) }),
            pmi: Some(Conn::new(mio::net::UnixStream::from_std(pmi))),
        });
        self.by_pid.insert(pid, rank);
        self.live += 1;

        let registry = self.poll.registry();
        let entry = &mut self.ranks[rank];
        for (pipe, stream) in [(&entry.stdout, STDOUT), (&entry.stderr, STDERR)] {
            if let Some(pipe) = pipe {
                let fd = pipe.file.as_raw_fd();
                registry.register(&mut SourceFd(&fd), token(rank, stream), Interest::READABLE)?;
            }
        }
        if let Some(conn) = entry.pmi.as_mut() {
            let interest = Interest::READABLE | Interest::WRITABLE;
            registry.register(&mut conn.stream, token(rank, PMI), interest)?;
        }
        Ok(())
    }

    fn dispatch(&mut self, token: Token, writable: bool) {
        if token == SIGNALS {
            let pending: Vec<i32> = self.signals.pending().collect();
            for signal in pending {
                match signal {
                    SIGCHLD => self.reap(),
                    other => self.on_signal(other),
                }
            }
            return;
        }
        let (rank, stream) = (token.0 / 3, token.0 % 3);
        match stream {
            STDOUT | STDERR => self.forward(rank, stream, None),
            _ => {
                if writable {
                    if let Some(conn) = self.ranks[rank].pmi.as_mut() {
                        conn.flush();
                    }
                }
                self.serve(rank);
            }
        }
    }

    /// Forwards what rank `rank` wrote on `stream`, closing the pipe at end of file. With
    /// `max_reads`, stops after that many reads (draining).
    fn forward(&mut self, rank: usize, stream: usize, max_reads: Option<usize>) {
        let slot = match stream {
            STDOUT => &mut self.ranks[rank].stdout,
            _ => &mut self.ranks[rank].stderr,
        };
        let Some(pipe) = slot.as_mut() else { return };
        let mut out = Vec::new();
        let mut eof = false;
        let mut reads = 0;
        while reads < max_reads.unwrap_or(usize::MAX) {
            reads += 1;
            match pipe.file.read(&mut self.buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => pipe.lines.feed(&self.buf[..n], &mut out),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    eof = true;
                    break;
                }
            }
            if out.len() >= self.buf.len() {
                write_to(stream, &mut self.stdout, &mut self.stderr, &out);
                out.clear();
            }
        }
        if eof || max_reads.is_some() {
            pipe.lines.finish(&mut out);
            let _ = self.poll.registry().deregister(&mut SourceFd(&pipe.file.as_raw_fd()));
            *slot = None;
        }
        write_to(stream, &mut self.stdout, &mut self.stderr, &out);
    }

    /// Reads rank `rank`'s PMI socket and answers it.
    fn serve(&mut self, rank: usize) {
        let Some(conn) = self.ranks[rank].pmi.as_mut() else {
            return;
        };
        let mut lines = Vec::new();
        let state = conn.read_lines(&mut lines);
        let mut actions = Vec::new();
        for line in &lines {
            self.verbose(|| format!("rank {rank} pmi: {line}"));
            self.server.handle(rank, line, &mut actions);
        }
        if state == ReadState::Garbage {
            actions.push(Action::Close(rank));
        }
        for action in actions {
            match action {
                Action::Reply(to, cmd) => {
                    if let Some(conn) = self.ranks[to].pmi.as_mut() {
                        conn.send(&cmd.encode());
                    }
                }
                Action::Abort { rank, code, msg } => {
                    let pid = self.ranks[rank].pid;
                    self.stop(Cause::Abort { rank, pid, code, msg });
                }
                Action::Close(to) => {
                    say(&format!("rank {to} sent a malformed PMI command; closing its PMI connection"));
                    self.close_pmi(to);
                }
            }
        }
        if state == ReadState::Closed {
            self.verbose(|| format!("rank {rank} closed its PMI connection"));
            self.close_pmi(rank);
        }
    }

    fn close_pmi(&mut self, rank: usize) {
        if let Some(mut conn) = self.ranks[rank].pmi.take() {
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
    }

    /// Reaps every ended rank; the first failure stops the job.
    fn reap(&mut self) {
        while let Some((pid, exit)) = reap(false) {
            let Some(&rank) = self.by_pid.get(&pid) else {
                continue;
            };
            self.ranks[rank].exit = Some(exit);
            self.live -= 1;
            self.verbose(|| format!("rank {rank} (pid {pid}) {exit}"));
            if !exit.success() {
                self.stop(Cause::RankFailed { rank, pid, exit });
            }
        }
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
        self.signal_live(Signal::SIGTERM);
        self.signal_live(Signal::SIGCONT);
        let kill_at = Some(Instant::now() + self.launch.opts.kill_grace);
        self.stopping = Some(Stopping { cause, kill_at });
    }

    fn kill_now(&mut self) {
        self.signal_live(Signal::SIGKILL);
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.kill_at = None;
        }
    }

    /// Sends `signal` to the process group of every live rank.
    fn signal_live(&self, signal: Signal) {
        for rank in self.ranks.iter().filter(|r| r.exit.is_none()) {
            let _ = killpg(rank.pid, signal);
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        match &self.stopping {
            Some(stopping) => stopping.kill_at,
            None => self.deadline,
        }
    }

    fn check_deadlines(&mut self, now: Instant) {
        match &self.stopping {
            None => {
                if let (Some(deadline), Some((_, secs))) = (self.deadline, self.launch.opts.timeout) {
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
    }

    /// Blocks until every live rank is reaped (after SIGKILL, when the event loop cannot be
    /// used).
    fn wait_blocking(&mut self) {
        while self.live > 0 {
            let Some((pid, exit)) = reap(true) else {
                return;
            };
            if let Some(&rank) = self.by_pid.get(&pid) {
                self.ranks[rank].exit = Some(exit);
                self.live -= 1;
            }
        }
    }

    /// Forwards what the ranks left in their pipes.
    fn drain(&mut self) {
        for rank in 0..self.ranks.len() {
            self.forward(rank, STDOUT, Some(DRAIN_READS));
            self.forward(rank, STDERR, Some(DRAIN_READS));
        }
    }

    /// Kills whatever the ranks left running in their process groups.
    fn kill_leftovers(&self) {
        for rank in &self.ranks {
            let _ = killpg(rank.pid, Signal::SIGKILL);
        }
    }
}

fn token(rank: usize, stream: usize) -> Token {
    Token(rank * 3 + stream)
}

fn write_to<O: AsFd, E: AsFd>(stream: usize, stdout: &mut Sink<O>, stderr: &mut Sink<E>, data: &[u8]) {
    match stream {
        STDOUT => stdout.write(data),
        _ => stderr.write(data),
    }
}
