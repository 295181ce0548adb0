//! mprun's side of the remote hosts: starting their proxies, accepting and proving their
//! control connections, relaying their ranks' output, PMI and exits, heartbeats, and
//! rank 0's stdin when it runs on a remote host.
//!
//! A remote host is `Idle` until its launcher command runs, `Starting` until its proxy
//! proves itself (bounded by the host timeout), `Running` while its control connection is
//! up and heard from (any message, or a heartbeat, within the host timeout), and `Finished`
//! once its proxy said `Done`, or it was lost, or it was never started because the job was
//! stopping. Connections that have not proven themselves are `Pending`, each bounded by the
//! host timeout and limited in number and in frame size.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::{secs, write_to, Job, Place, PENDING_BASE, REMOTE_BASE};
use crate::cause::Cause;
use crate::control::link::Link;
use crate::control::start::{self, ProxyArgs};
use crate::control::wire::{Bytes32, LaunchSpec, Msg, MAX_FRAME, MAX_UNPROVEN_FRAME, VERSION};
use crate::control::{auth, heartbeat_interval};
use crate::hosts::Planned;
use crate::spawn::set_nonblocking;
use crate::status::Exit;
use crate::stdio::say;

/// Most connections waiting to prove themselves at once; a new one beyond it closes the
/// oldest (a real proxy proves itself within a round trip, so only strays grow old).
const MAX_PENDING: usize = 64;
/// Longest a connection may take to prove itself (at most the host timeout): a proxy sends
/// its proof as soon as it reads the challenge.
const PROOF_BOUND: Duration = Duration::from_secs(5);
/// Most stdin bytes sent to a proxy and not yet acknowledged.
const STDIN_WINDOW: usize = 256 << 10;
/// How long launcher commands get to end by themselves once the job is over.
const LAUNCHER_WAIT: Duration = Duration::from_secs(1);

/// Where a remote host stands.
#[derive(Debug)]
enum State {
    Idle,
    Starting {
        deadline: Instant,
    },
    /// Connected; `done` once the proxy said all its ranks ended (it then waits for mprun
    /// to close the connection at the end of the job before it cleans up and exits).
    Running {
        link: Link,
        heard: Instant,
        next_beat: Instant,
        done: bool,
    },
    Finished,
}

/// One remote host.
#[derive(Debug)]
pub(super) struct Remote {
    /// Its name as the user gave it.
    pub(super) name: String,
    /// Where its launcher command logs in (`user@host` or the name).
    destination: String,
    /// Its ranks.
    pub(super) ranks: Vec<usize>,
    /// Its launcher command, until reaped.
    pub(super) launcher: Option<Pid>,
    state: State,
    /// Its ranks that were reported ended.
    ended: HashSet<usize>,
    /// What its proxy is sent once every host's proxy has proven itself.
    spec: Option<Box<LaunchSpec>>,
    /// The machine its proxy runs on (`Hello`; empty if it has no id).
    pub(super) machine: String,
}

impl Remote {
    pub(super) fn new(host: &Planned, spec: LaunchSpec) -> Self {
        Remote {
            name: host.name.clone(),
            destination: host.destination(),
            ranks: host.ranks.clone(),
            launcher: None,
            state: State::Idle,
            ended: HashSet::new(),
            spec: Some(Box::new(spec)),
            machine: String::new(),
        }
    }

    /// Rank 0 is here but gets no stdin from mprun: its proxy gives it `/dev/null`.
    pub(super) fn no_stdin(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            spec.stdin = false;
        }
    }

    /// Its proxy has proven itself (and may be waiting for its launch).
    pub(super) fn proven(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    /// Sends the launch, in `share` of its machine, if not sent yet.
    pub(super) fn launch(&mut self, share: crate::bind::Share) {
        if let (State::Running { link, heard, .. }, Some(mut spec)) = (&mut self.state, self.spec.take()) {
            spec.share = share;
            link.send(&Msg::Launch(spec));
            // It was silent while it waited for the launch.
            *heard = Instant::now();
        }
    }

    /// Whether its launch was sent.
    pub(super) fn launched(&self) -> bool {
        self.spec.is_none()
    }

    pub(super) fn finished(&self) -> bool {
        matches!(self.state, State::Finished | State::Running { done: true, .. })
    }

    /// Sends `msg` to the proxy if it is connected.
    pub(super) fn send(&mut self, msg: &Msg) {
        if let State::Running { link, .. } = &mut self.state {
            link.send(msg);
        }
    }

    /// When this host next needs attention.
    pub(super) fn next_deadline(&self, bound: Duration) -> Option<Instant> {
        match &self.state {
            State::Starting { deadline } => Some(*deadline),
            State::Running { heard, next_beat, .. } => Some((*heard + bound).min(*next_beat)),
            State::Idle | State::Finished => None,
        }
    }
}

/// A connection that has not proven itself yet.
#[derive(Debug)]
pub(super) struct Pending {
    link: Link,
    peer: SocketAddr,
    nonce: Bytes32,
    pub(super) deadline: Instant,
}

/// mprun's stdin (a pipe filled by the stdin thread) on its way to a remote rank 0.
#[derive(Debug)]
pub(super) struct StdinFeed {
    file: File,
    remote: usize,
    /// Bytes sent and not yet acknowledged.
    inflight: usize,
}

impl StdinFeed {
    pub(super) fn new(pipe: OwnedFd, remote: usize, registry: &Registry, token: Token) -> io::Result<Self> {
        set_nonblocking(pipe.as_raw_fd())?;
        registry.register(&mut mio::unix::SourceFd(&pipe.as_raw_fd()), token, Interest::READABLE)?;
        Ok(StdinFeed { file: File::from(pipe), remote, inflight: 0 })
    }
}

impl Job<'_> {
    /// Runs every remote host's launcher command.
    pub(super) fn start_remotes(&mut self) {
        let Some(connect) = self.listener.as_ref().and_then(|l| l.local_addr().ok()) else {
            return;
        };
        let exe = std::env::current_exe().map(|p| p.into_os_string()).unwrap_or_else(|_| "mprun".into());
        let timeout = self.opts.host_timeout;
        for r in 0..self.remotes.len() {
            if self.stopping.is_some() {
                break;
            }
            let name = self.remotes[r].name.clone();
            let args = ProxyArgs { connect, host_index: r as u32, host: name.clone(), timeout };
            let dest = match self.opts.launcher {
                // srun places by node name; ssh and the commands standing for it log in.
                start::Launcher::Srun => &name,
                _ => &self.remotes[r].destination,
            };
            let argv = start::command_line(&self.opts.launcher, dest, args.command(&exe));
            self.verbose(|| {
                let words: Vec<_> = argv.iter().map(|w| w.to_string_lossy()).collect();
                format!("host {name}: starting its proxy: {}", words.join(" "))
            });
            match start::spawn(&argv, &self.setup.ids.secret) {
                Ok(pid) => {
                    self.remotes[r].launcher = Some(pid);
                    self.remotes[r].state = State::Starting { deadline: Instant::now() + timeout };
                }
                Err(e) => {
                    self.remotes[r].state = State::Finished;
                    let why = format!("cannot run '{}': {e}", argv[0].to_string_lossy());
                    self.stop(Cause::HostStart { host: name, why });
                }
            }
        }
    }

    /// A launcher command ended: before its proxy connected, that is a failure.
    pub(super) fn launcher_ended(&mut self, r: usize, exit: Exit) {
        let remote = &mut self.remotes[r];
        remote.launcher = None;
        if matches!(remote.state, State::Starting { .. }) {
            remote.state = State::Finished;
            let host = remote.name.clone();
            self.stop(Cause::HostStart {
                host,
                why: format!("its launcher command {exit} before the proxy connected"),
            });
        } else {
            self.verbose(|| format!("host {}: launcher command {exit}", self.remotes[r].name));
        }
    }

    /// Stops remote host `r`'s ranks, or its start.
    pub(super) fn stop_remote(&mut self, r: usize) {
        let remote = &mut self.remotes[r];
        match &mut remote.state {
            State::Running { link, .. } => link.send(&Msg::Stop),
            State::Starting { .. } | State::Idle => {
                if let Some(pid) = remote.launcher {
                    let _ = killpg(pid, Signal::SIGTERM);
                }
                remote.state = State::Finished;
            }
            State::Finished => {}
        }
    }

    /// Takes every waiting connection, as `Pending`, and challenges it.
    pub(super) fn accept(&mut self) {
        loop {
            let Some(listener) = self.listener.as_ref() else {
                return;
            };
            let (stream, peer) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    say(&format!("cannot accept a control connection: {e}"));
                    return;
                }
            };
            if self.pending.len() >= MAX_PENDING {
                if let Some(&oldest) = self.pending.keys().min() {
                    self.reject(oldest, "too many connections waiting to prove themselves, and it was the oldest");
                }
            }
            if let Err(e) = self.challenge(stream, peer) {
                say(&format!("rejected a control connection from {peer}: {e}"));
            }
        }
    }

    fn challenge(&mut self, mut stream: TcpStream, peer: SocketAddr) -> io::Result<()> {
        stream.set_nodelay(true)?;
        let id = self.next_pending;
        self.next_pending += 1;
        self.poll.registry().register(
            &mut stream,
            Token(PENDING_BASE + id),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let nonce = auth::nonce()?;
        let mut link = Link::new(stream, MAX_UNPROVEN_FRAME, Vec::new());
        link.send(&Msg::Challenge { version: VERSION, nonce });
        let deadline = Instant::now() + self.proof_bound();
        self.pending.insert(id, Pending { link, peer, nonce, deadline });
        self.verbose(|| format!("control connection from {peer}: challenged"));
        Ok(())
    }

    /// How long a new control connection has to prove itself.
    fn proof_bound(&self) -> Duration {
        self.opts.host_timeout.min(PROOF_BOUND)
    }

    /// Reads a pending connection: a valid proof for a host waiting for its proxy makes it
    /// that host's control connection; anything else closes it.
    pub(super) fn on_pending(&mut self, id: usize, writable: bool) {
        let Some(pending) = self.pending.get_mut(&id) else {
            return;
        };
        if writable {
            pending.link.flush();
        }
        let mut msgs = Vec::new();
        let result = pending.link.receive(&mut msgs);
        let Some(first) = msgs.into_iter().next() else {
            if let Err(why) = result {
                self.reject(id, &format!("{why} before it proved it belongs to the job"));
            }
            return;
        };
        let Msg::Hello { version, host, nonce, proof, machine } = first else {
            self.reject(id, "it did not start with a proof");
            return;
        };
        if version != VERSION {
            self.reject(id, &format!("it speaks control protocol version {version}, not {VERSION}"));
            return;
        }
        if !auth::check_proxy(&self.setup.ids.secret, &pending.nonce, host, &nonce, &proof) {
            self.reject(id, "wrong proof (it does not know the job secret)");
            return;
        }
        let r = host as usize;
        if !self.remotes.get(r).is_some_and(|h| matches!(h.state, State::Starting { .. })) {
            self.reject(id, &format!("host index {host} is not waiting for a proxy"));
            return;
        }
        self.remotes[r].machine = machine;
        self.promote(id, r, nonce);
    }

    fn reject(&mut self, id: usize, why: &str) {
        if let Some(mut pending) = self.pending.remove(&id) {
            let _ = self.poll.registry().deregister(&mut pending.link.stream);
            say(&format!("rejected a control connection from {}: {why}", pending.peer));
        }
    }

    /// Makes pending connection `id` the control connection of remote host `r`.
    fn promote(&mut self, id: usize, r: usize, proxy_nonce: Bytes32) {
        let Some(Pending { mut link, peer, nonce, .. }) = self.pending.remove(&id) else {
            return;
        };
        link.set_max_frame(MAX_FRAME);
        link.send(&Msg::Welcome { proof: auth::head_proof(&self.setup.ids.secret, &proxy_nonce, &nonce) });
        let remote = &mut self.remotes[r];
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self.poll.registry().reregister(&mut link.stream, Token(REMOTE_BASE + r), interest) {
            remote.state = State::Finished;
            let host = remote.name.clone();
            self.stop(Cause::Internal(format!("cannot watch the control connection of host {host}: {e}")));
            return;
        }
        let now = Instant::now();
        let next_beat = now + heartbeat_interval(self.opts.host_timeout);
        remote.state = State::Running { link, heard: now, next_beat, done: false };
        self.verbose(|| format!("host {}: proxy connected from {peer}", self.remotes[r].name));
        self.launch_when_proven();
    }

    /// Reads remote host `r`'s control connection.
    pub(super) fn on_remote(&mut self, r: usize, writable: bool) {
        let Some(State::Running { link, heard, .. }) = self.remotes.get_mut(r).map(|h| &mut h.state) else {
            return;
        };
        if writable {
            link.flush();
        }
        let mut msgs = Vec::new();
        let result = link.receive(&mut msgs);
        if !msgs.is_empty() {
            *heard = Instant::now();
        }
        for msg in msgs {
            if !matches!(self.remotes[r].state, State::Running { .. }) {
                return;
            }
            self.on_msg(r, msg);
        }
        if let Err(why) = result {
            if matches!(self.remotes[r].state, State::Running { .. }) {
                self.lost(r, format!("lost the control connection to its proxy ({why})"));
            }
        }
    }

    fn on_msg(&mut self, r: usize, msg: Msg) {
        let name = self.remotes[r].name.clone();
        let ours = |job: &Self, rank: u32| job.place.get(rank as usize) == Some(&Place::Remote(r));
        let rank_of = |msg: &Msg| match msg {
            Msg::Started { rank, .. }
            | Msg::SpawnFailed { rank, .. }
            | Msg::Output { rank, .. }
            | Msg::Pmi { rank, .. }
            | Msg::PmiGarbage { rank }
            | Msg::Exited { rank, .. } => Some(*rank),
            _ => None,
        };
        if let Some(rank) = rank_of(&msg) {
            if !ours(self, rank) {
                self.lost(r, format!("its proxy spoke for rank {rank}, which is not on that host"));
                return;
            }
        }
        match msg {
            Msg::Started { rank, pid } => {
                let pid = Pid::from_raw(pid as i32);
                self.pids[rank as usize] = Some(pid);
                self.verbose(|| format!("rank {rank}: pid {pid} on host {name}"));
            }
            Msg::SpawnFailed { rank, code, error } => {
                self.stop(Cause::SpawnFailed { rank: rank as usize, host: Some(name), error, code });
            }
            Msg::Output { stream, data, .. } if stream <= 1 => {
                write_to(stream as usize, &mut self.stdout, &mut self.stderr, &data);
            }
            Msg::Pmi { rank, line } => {
                let rank = rank as usize;
                self.verbose(|| format!("rank {rank} pmi: {line}"));
                let mut actions = Vec::new();
                self.server.handle(rank, &line, &mut actions);
                self.apply(actions);
            }
            Msg::PmiGarbage { rank } => {
                say(&format!(
                    "rank {rank} broke the PMI protocol (a malformed or overlong line, or replies left unread); \
                     closing its PMI connection"
                ));
            }
            Msg::Exited { rank, signal, code } => {
                let rank = rank as usize;
                let exit = if signal { Exit::Signal(code) } else { Exit::Code(code) };
                if !self.remotes[r].ended.insert(rank) {
                    return;
                }
                let pid = self.pids[rank].unwrap_or(Pid::from_raw(0));
                self.verbose(|| format!("rank {rank} (pid {pid} on host {name}) {exit}"));
                if !exit.success() {
                    self.stop(Cause::RankFailed { rank, pid, host: Some(name), exit });
                } else if self.server.left_unfinalized(rank) {
                    self.stop(Cause::LeftUnfinalized { rank, pid, host: Some(name) });
                }
            }
            Msg::StdinAck { bytes } => {
                if let Some(feed) = self.stdin.as_mut() {
                    feed.inflight = feed.inflight.saturating_sub(bytes as usize);
                }
                self.pump_stdin();
            }
            Msg::Heartbeat => {}
            Msg::Done => {
                self.verbose(|| format!("host {name}: all its ranks ended"));
                if let State::Running { done, .. } = &mut self.remotes[r].state {
                    *done = true;
                }
                if self.stdin.as_ref().is_some_and(|f| f.remote == r) {
                    self.close_stdin();
                }
            }
            other => self.lost(r, format!("its proxy broke the control protocol (sent {})", kind(&other))),
        }
    }

    /// Closes remote host `r`'s control connection (at the end of the job, this tells its
    /// proxy to clean up and exit).
    pub(super) fn finish(&mut self, r: usize) {
        if let State::Running { mut link, .. } = std::mem::replace(&mut self.remotes[r].state, State::Finished) {
            let _ = self.poll.registry().deregister(&mut link.stream);
        }
        if self.stdin.as_ref().is_some_and(|f| f.remote == r) {
            self.close_stdin();
        }
    }

    /// Remote host `r` is gone: its proxy will stop its ranks when it notices; the job stops
    /// (unless all its ranks had already ended).
    fn lost(&mut self, r: usize, why: String) {
        let done = matches!(self.remotes[r].state, State::Running { done: true, .. });
        self.finish(r);
        if done {
            self.verbose(|| format!("host {}: {why}", self.remotes[r].name));
            return;
        }
        if let Some(pid) = self.remotes[r].launcher {
            let _ = killpg(pid, Signal::SIGTERM);
        }
        let host = self.remotes[r].name.clone();
        if self.stopping.is_none() {
            self.stop(Cause::HostLost { host, why });
        } else {
            self.verbose(|| format!("host {host}: {why}"));
        }
    }

    /// Start and silence bounds, heartbeats, and pending connections' bounds.
    pub(super) fn check_remote_deadlines(&mut self, now: Instant) {
        let bound = self.opts.host_timeout;
        for r in 0..self.remotes.len() {
            match &mut self.remotes[r].state {
                State::Starting { deadline } if *deadline <= now => {
                    self.stop_remote(r);
                    let host = self.remotes[r].name.clone();
                    let why = format!("its proxy did not connect back within {} s", secs(bound));
                    self.stop(Cause::HostStart { host, why });
                }
                State::Running { heard, .. } if *heard + bound <= now => {
                    let why = format!("no word from its proxy for {} s (host down or unreachable?)", secs(bound));
                    self.lost(r, why);
                }
                State::Running { link, next_beat, .. } if *next_beat <= now => {
                    link.send(&Msg::Heartbeat);
                    *next_beat = now + heartbeat_interval(bound);
                }
                _ => {}
            }
        }
        let expired: Vec<usize> = self.pending.iter().filter(|(_, p)| p.deadline <= now).map(|(id, _)| *id).collect();
        for id in expired {
            let bound = self.proof_bound();
            self.reject(id, &format!("it did not prove it belongs to the job within {} s", secs(bound)));
        }
    }

    /// Sends what mprun's stdin has, while the window allows, to rank 0's proxy.
    pub(super) fn pump_stdin(&mut self) {
        let Some(feed) = self.stdin.as_mut() else {
            return;
        };
        let remote = &mut self.remotes[feed.remote];
        if !remote.launched() {
            return;
        }
        let State::Running { link, .. } = &mut remote.state else {
            return;
        };
        let mut buf = vec![0u8; 64 << 10];
        let ended = loop {
            if feed.inflight >= STDIN_WINDOW {
                break false;
            }
            let want = buf.len().min(STDIN_WINDOW - feed.inflight);
            match feed.file.read(&mut buf[..want]) {
                Ok(0) => break true,
                Ok(n) => {
                    link.send(&Msg::Stdin { data: buf[..n].to_vec() });
                    feed.inflight += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break true,
            }
        };
        if ended {
            link.send(&Msg::StdinEof);
            self.close_stdin();
        }
    }

    fn close_stdin(&mut self) {
        if let Some(feed) = self.stdin.take() {
            let _ = self.poll.registry().deregister(&mut mio::unix::SourceFd(&feed.file.as_raw_fd()));
        }
    }

    /// Gives launcher commands still running a moment to end, then kills them.
    pub(super) fn end_launchers(&mut self) {
        let end = Instant::now() + LAUNCHER_WAIT;
        loop {
            for remote in &mut self.remotes {
                if let Some(pid) = remote.launcher {
                    if !matches!(waitpid(pid, Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive)) {
                        remote.launcher = None;
                    }
                }
            }
            if self.remotes.iter().all(|r| r.launcher.is_none()) || Instant::now() >= end {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for r in 0..self.remotes.len() {
            if let Some(pid) = self.remotes[r].launcher.take() {
                self.verbose(|| format!("host {}: killing its launcher command", self.remotes[r].name));
                let _ = killpg(pid, Signal::SIGKILL);
                let _ = waitpid(pid, None);
            }
        }
    }
}

/// The name of a message kind, for errors.
fn kind(msg: &Msg) -> &'static str {
    match msg {
        Msg::Challenge { .. } => "Challenge",
        Msg::Hello { .. } => "Hello",
        Msg::Welcome { .. } => "Welcome",
        Msg::Launch(_) => "Launch",
        Msg::PmiReply { .. } => "PmiReply",
        Msg::PmiClose { .. } => "PmiClose",
        Msg::Stdin { .. } => "Stdin",
        Msg::StdinEof => "StdinEof",
        Msg::Stop => "Stop",
        Msg::Kill => "Kill",
        Msg::Output { .. } => "Output with a bad stream",
        _ => "an unexpected message",
    }
}
