//! The ranks of one host, as the process that started them (mprun or a proxy) sees them:
//! their pids, their output pipes and their PMI sockets.
//!
//! Rank `i` of the host (its local index) has the event-loop tokens `3i` (stdout), `3i + 1`
//! (stderr) and `3i + 2` (PMI); owners keep their own tokens above `3 * MAX_LOCAL`.
//!
//! Invariants: a rank is *live* from its start until it is reaped; every descriptor is
//! deregistered before it is dropped; output is released in whole lines (`LineForwarder`),
//! and a partial line once its rank has paused on it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::time::Instant;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::pmi::conn::{Conn, ReadState};
use crate::spawn::Spawned;
use crate::status::Exit;
use crate::stdio::LineForwarder;

/// Stream number of stdout in tokens and messages.
pub(crate) const STDOUT: usize = 0;
/// Stream number of stderr.
pub(crate) const STDERR: usize = 1;
/// Stream number of the PMI socket.
pub(crate) const PMI: usize = 2;
/// Most ranks one host may run (bounds the token space the ranks use).
pub(crate) const MAX_LOCAL: usize = 1 << 24;

/// Reads of one pipe when draining it after the ranks are gone (bounds the time a
/// grandchild that keeps writing can hold its parent).
const DRAIN_READS: usize = 64;

/// How much of a pipe to read now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// Until it would block or ends.
    UntilBlocked,
    /// At most this many reads.
    Reads(usize),
    /// What is there (a bounded number of reads), then close it: its rank is gone.
    Drain,
}

/// One pipe carrying a rank's stdout or stderr.
#[derive(Debug)]
struct Pipe {
    file: File,
    lines: LineForwarder,
}

/// What the parent knows of one rank.
#[derive(Debug)]
struct Entry {
    rank: usize,
    pid: Pid,
    exit: Option<Exit>,
    pipes: [Option<Pipe>; 2],
    pmi: Option<Conn>,
}

/// The ranks of one host.
#[derive(Debug)]
pub(crate) struct Ranks {
    entries: Vec<Entry>,
    by_pid: HashMap<Pid, usize>,
    live: usize,
    buf: Vec<u8>,
}

impl Ranks {
    /// No ranks yet.
    pub(crate) fn new() -> Self {
        Ranks { entries: Vec::new(), by_pid: HashMap::new(), live: 0, buf: vec![0; 64 << 10] }
    }

    /// The token of local rank `local`'s `stream`.
    pub(crate) fn token(local: usize, stream: usize) -> Token {
        Token(local * 3 + stream)
    }

    /// The local rank and stream of `token`, if it is one of the ranks' tokens.
    pub(crate) fn which(&self, token: Token) -> Option<(usize, usize)> {
        (token.0 < self.entries.len() * 3).then_some((token.0 / 3, token.0 % 3))
    }

    /// Ranks started and not yet reaped.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// The global rank of local rank `local`.
    pub(crate) fn rank(&self, local: usize) -> usize {
        self.entries[local].rank
    }

    /// Takes a started rank (global rank `rank`) in; returns its local index. The rank is
    /// tracked (so it will be stopped and reaped) even if watching its descriptors fails.
    pub(crate) fn add(&mut self, registry: &Registry, rank: usize, spawned: Spawned, tag: bool) -> io::Result<usize> {
        let Spawned { pid, stdout, stderr, pmi } = spawned;
        let local = self.entries.len();
        if local >= MAX_LOCAL {
            let _ = killpg(pid, Signal::SIGKILL);
            return Err(io::Error::other(format!("more than {MAX_LOCAL} ranks on one host")));
        }
        self.entries.push(Entry {
            rank,
            pid,
            exit: None,
            pipes: [
                Some(Pipe { file: stdout, lines: LineForwarder::new(rank, tag) }),
                Some(Pipe { file: stderr, lines: LineForwarder::new(rank, tag) }),
            ],
            pmi: Some(Conn::new(mio::net::UnixStream::from_std(pmi))),
        });
        self.by_pid.insert(pid, local);
        self.live += 1;
        let entry = &mut self.entries[local];
        for (stream, pipe) in entry.pipes.iter().enumerate() {
            if let Some(pipe) = pipe {
                let fd = pipe.file.as_raw_fd();
                registry.register(&mut SourceFd(&fd), Self::token(local, stream), Interest::READABLE)?;
            }
        }
        if let Some(conn) = entry.pmi.as_mut() {
            registry.register(&mut conn.stream, Self::token(local, PMI), Interest::READABLE | Interest::WRITABLE)?;
        }
        Ok(local)
    }

    /// Reads local rank `local`'s `stream` and hands the whole lines to `emit` (in pieces of
    /// at most about 64 KiB). Returns whether the pipe is done for now: it would block, or
    /// it ended (then it is closed, its last partial line released).
    pub(crate) fn read_output(
        &mut self,
        registry: &Registry,
        local: usize,
        stream: usize,
        limit: Limit,
        emit: &mut dyn FnMut(&[u8]),
    ) -> bool {
        let slot = &mut self.entries[local].pipes[stream];
        let Some(pipe) = slot.as_mut() else {
            return true;
        };
        let max_reads = match limit {
            Limit::UntilBlocked => usize::MAX,
            Limit::Reads(n) => n,
            Limit::Drain => DRAIN_READS,
        };
        let mut out = Vec::new();
        let mut eof = false;
        let mut blocked = false;
        for _ in 0..max_reads {
            match pipe.file.read(&mut self.buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => pipe.lines.feed(&self.buf[..n], &mut out),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    blocked = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    eof = true;
                    break;
                }
            }
            if out.len() >= self.buf.len() {
                emit(&out);
                out.clear();
            }
        }
        if eof || limit == Limit::Drain {
            pipe.lines.finish(&mut out);
            let _ = registry.deregister(&mut SourceFd(&pipe.file.as_raw_fd()));
            *slot = None;
        }
        if !out.is_empty() {
            emit(&out);
        }
        eof || blocked || limit == Limit::Drain
    }

    /// When the earliest incomplete line of any rank is due to be released.
    pub(crate) fn partial_due(&self) -> Option<Instant> {
        self.entries.iter().flat_map(|e| e.pipes.iter().flatten()).filter_map(|p| p.lines.partial_due()).min()
    }

    /// Hands each incomplete line due by `now` to `emit` (global rank, stream, bytes).
    pub(crate) fn release_partial(&mut self, now: Instant, emit: &mut dyn FnMut(usize, usize, &[u8])) {
        let mut out = Vec::new();
        for entry in &mut self.entries {
            for (stream, pipe) in entry.pipes.iter_mut().enumerate() {
                if let Some(pipe) = pipe {
                    pipe.lines.release_due(now, &mut out);
                    if !out.is_empty() {
                        emit(entry.rank, stream, &out);
                        out.clear();
                    }
                }
            }
        }
    }

    /// The pipes still open, as (local rank, stream).
    pub(crate) fn open_pipes(&self) -> Vec<(usize, usize)> {
        let mut open = Vec::new();
        for (local, entry) in self.entries.iter().enumerate() {
            for (stream, pipe) in entry.pipes.iter().enumerate() {
                if pipe.is_some() {
                    open.push((local, stream));
                }
            }
        }
        open
    }

    /// Reads local rank `local`'s PMI socket; appends the complete lines to `lines`.
    pub(crate) fn read_pmi(&mut self, local: usize, lines: &mut Vec<String>) -> ReadState {
        match self.entries[local].pmi.as_mut() {
            Some(conn) => conn.read_lines(lines),
            None => ReadState::Closed,
        }
    }

    /// Sends a PMI line (with its newline) to local rank `local`; false if the rank leaves
    /// too many replies unread (see [`crate::pmi::conn::MAX_QUEUED`]).
    #[must_use]
    pub(crate) fn send_pmi(&mut self, local: usize, line: &str) -> bool {
        match self.entries[local].pmi.as_mut() {
            Some(conn) => conn.send(line),
            None => true,
        }
    }

    /// Sends what is queued for local rank `local`'s PMI socket.
    pub(crate) fn flush_pmi(&mut self, local: usize) {
        if let Some(conn) = self.entries[local].pmi.as_mut() {
            conn.flush();
        }
    }

    /// Stops talking PMI to local rank `local`.
    pub(crate) fn close_pmi(&mut self, registry: &Registry, local: usize) {
        if let Some(mut conn) = self.entries[local].pmi.take() {
            let _ = registry.deregister(&mut conn.stream);
        }
    }

    /// Records that process `pid` ended; returns its local index if it is one of the ranks.
    pub(crate) fn exited(&mut self, pid: Pid, exit: Exit) -> Option<usize> {
        let local = *self.by_pid.get(&pid)?;
        let entry = &mut self.entries[local];
        if entry.exit.is_none() {
            entry.exit = Some(exit);
            self.live -= 1;
        }
        Some(local)
    }

    /// Sends `signal` to the process group of every live rank (started and not yet reaped:
    /// the group id of a reaped rank may belong to another process by now); returns the
    /// ranks signalled. What a rank leaves in its group is killed when it is reaped
    /// (`status::reap`).
    pub(crate) fn signal_live(&self, signal: Signal) -> Vec<usize> {
        let live = self.entries.iter().filter(|e| e.exit.is_none());
        live.map(|entry| {
            let _ = killpg(entry.pid, signal);
            entry.rank
        })
        .collect()
    }
}

// Linux's: the test reads /proc.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    /// A child in a process group of its own, as a rank is, with pipes the ranks can watch.
    #[allow(clippy::zombie_processes, reason = "the ranks reap it through status::reap")]
    fn child(script: &str) -> Spawned {
        let mut c = Command::new("sh");
        c.args(["-c", script]).process_group(0).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut ch = c.spawn().expect("start sh");
        let (pmi, _) = std::os::unix::net::UnixStream::pair().unwrap();
        let stdout = File::from(std::os::fd::OwnedFd::from(ch.stdout.take().unwrap()));
        let stderr = File::from(std::os::fd::OwnedFd::from(ch.stderr.take().unwrap()));
        // `ch` is dropped without waiting: reaping is the ranks' business here.
        Spawned { pid: Pid::from_raw(ch.id() as i32), stdout, stderr, pmi }
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    }

    #[test]
    fn a_reaped_rank_is_never_signalled_and_its_leftovers_die_with_it() {
        let poll = mio::Poll::new().unwrap();
        let mut ranks = Ranks::new();
        let dir = std::env::temp_dir().join(format!("mpr-ranks-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let left = dir.join("left");
        // Rank 0 leaves a child in its group and exits; rank 1 runs on.
        let script = format!("sleep 30 & echo $! > {}.tmp; mv {0}.tmp {0}; exit 0", left.display());
        let early = ranks.add(poll.registry(), 0, child(&script), false).unwrap();
        ranks.add(poll.registry(), 1, child("exec sleep 30"), false).unwrap();
        let (pid, exit) = crate::status::reap(true).expect("a child ended");
        assert_eq!(ranks.exited(pid, exit), Some(early));
        assert_eq!(exit, Exit::Code(0));
        let leftover: i32 = std::fs::read_to_string(&left).unwrap().trim().parse().unwrap();
        let t0 = std::time::Instant::now();
        while alive(leftover) && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!alive(leftover), "rank 0's leftover {leftover} outlived it");
        // Stopping the job signals rank 1 alone: rank 0's group id may be someone else's now.
        assert_eq!(ranks.signal_live(Signal::SIGKILL), [1]);
        let (pid, exit) = crate::status::reap(true).expect("rank 1 ended");
        assert_eq!(ranks.exited(pid, exit).map(|l| ranks.rank(l)), Some(1));
        assert_eq!(exit, Exit::Signal(9));
        assert_eq!(ranks.live(), 0);
        assert_eq!(ranks.signal_live(Signal::SIGKILL), Vec::<usize>::new());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
