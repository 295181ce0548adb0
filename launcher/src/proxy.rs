//! The proxy: `mprun --proxy ...`, started on each remote host by the launcher command.
//!
//! It reads the job secret from its stdin, connects to mprun's control listener, proves it
//! knows the secret and checks that mprun does too (`control::auth`), and receives its
//! `Launch`: the ranks of its host and their environment. It starts them exactly as mprun
//! starts local ranks (`spawn`), serves their PMI-1 sockets by relaying every line to mprun
//! (which holds the job's key-value space) and the replies back, forwards their output in
//! whole lines, writes rank 0's stdin, and reports their exits. When they have all ended it
//! says `Done` and waits for mprun to close the connection at the end of the job; then it
//! removes the job's shared-memory segments on its host and exits.
//!
//! It never outlives its job: when the control connection closes or fails, or mprun is not
//! heard from within the host timeout (a dead link), or the proxy gets SIGTERM, SIGINT or
//! SIGHUP, it stops its ranks (SIGTERM, then SIGKILL after the grace) and exits. Its ranks
//! also get SIGKILL if the proxy itself dies.

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

use crate::control::link::Link;
use crate::control::start::ProxyArgs;
use crate::control::wire::{decode, encode, LaunchSpec, Msg, MAX_FRAME, MAX_UNPROVEN_FRAME, VERSION};
use crate::control::{auth, heartbeat_interval};
use crate::pmi::conn::ReadState;
use crate::ranks::{Limit, Ranks, STDERR, STDOUT};
use crate::spawn::{set_nonblocking, spawn, spawn_error_code, Program, RankStdin, Slot};
use crate::status::{reap, reap_all, signal_name, Exit};
use crate::stdio::say;
use crate::{program, shm};

const SIGNALS: Token = Token(usize::MAX);
const CONTROL: Token = Token(usize::MAX - 1);
const STDIN: Token = Token(usize::MAX - 2);

/// Output queued for mprun above which the proxy stops reading its ranks' pipes (they then
/// block on write: backpressure instead of unbounded memory).
const OUTPUT_HIGH_WATER: usize = 4 << 20;
/// Reads of one pipe before the next pipe gets its turn.
const READS_PER_TURN: usize = 4;

/// Runs the proxy (the words after `--proxy`); returns its exit code.
pub(crate) fn main(words: &[OsString]) -> i32 {
    let args = match ProxyArgs::parse(words) {
        Ok(args) => args,
        Err(e) => {
            say(&e);
            return 2;
        }
    };
    let host = args.host.clone();
    let fail = |what: String| {
        say(&format!("proxy for host {host}: {what}"));
        1
    };
    let secret = match read_secret(args.timeout) {
        Ok(secret) => secret,
        Err(e) => return fail(format!("cannot read the job secret on stdin: {e}")),
    };
    let (stream, spec, input) = match handshake(&args, &secret) {
        Ok(Some(done)) => done,
        // The job stopped before this host's ranks were launched: nothing to do.
        Ok(None) => return 0,
        Err(e) => return fail(e),
    };
    match Proxy::new(&args, *spec, stream, input) {
        Ok(proxy) => proxy.run(),
        Err(e) => fail(format!("cannot start: {e}")),
    }
}

/// The first line of stdin, waiting at most `limit`.
fn read_secret(limit: Duration) -> Result<String, String> {
    let end = Instant::now() + limit;
    let stdin = io::stdin();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || line.len() > 1024 {
            return Err("nothing within the host timeout".into());
        }
        let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
        match nix::unistd::read(stdin.as_raw_fd(), &mut byte) {
            Ok(0) => return Err("end of file".into()),
            Ok(_) => line.push(byte[0]),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let text = String::from_utf8(line).map_err(|_| "not text".to_string())?;
    Ok(text.trim().to_string())
}

/// What the handshake gives: the connection, the launch and what was read past it.
type Launched = (TcpStream, Box<LaunchSpec>, Vec<u8>);

/// Connects to mprun, proves itself, checks mprun's proof and receives the launch (mprun
/// sends it once every host's proxy has proven itself); `None` if mprun stops the job
/// before that.
fn handshake(args: &ProxyArgs, secret: &str) -> Result<Option<Launched>, String> {
    let mut stream = TcpStream::connect_timeout(&args.connect, args.timeout)
        .map_err(|e| format!("cannot connect to mprun at {}: {e}", args.connect))?;
    let setup = |s: &TcpStream| -> io::Result<()> {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(args.timeout))?;
        s.set_write_timeout(Some(args.timeout))
    };
    setup(&stream).map_err(|e| e.to_string())?;
    let mut input = Vec::new();
    let Msg::Challenge { version, nonce: head_nonce } = read_msg(&mut stream, &mut input, MAX_UNPROVEN_FRAME)? else {
        return Err(format!("{} did not start with a challenge", args.connect));
    };
    if version != VERSION {
        return Err(format!("mprun speaks control protocol version {version}, this proxy {VERSION}"));
    }
    let nonce = auth::nonce().map_err(|e| e.to_string())?;
    let proof = auth::proxy_proof(secret, &head_nonce, args.host_index, &nonce);
    let mut hello = Vec::new();
    let machine = mpr::bootstrap::machine::id().unwrap_or_default();
    encode(&Msg::Hello { version: VERSION, host: args.host_index, nonce, proof, machine }, &mut hello);
    stream.write_all(&hello).map_err(|e| format!("cannot send to mprun: {e}"))?;
    let Msg::Welcome { proof } = read_msg(&mut stream, &mut input, MAX_UNPROVEN_FRAME)? else {
        return Err("mprun did not welcome this proxy".into());
    };
    if !auth::check_head(secret, &nonce, &head_nonce, &proof) {
        return Err(format!("{} did not prove it knows the job secret", args.connect));
    }
    loop {
        match read_msg(&mut stream, &mut input, MAX_FRAME)? {
            Msg::Launch(spec) => return Ok(Some((stream, spec, input))),
            Msg::Stop | Msg::Kill => return Ok(None),
            // mprun's heartbeats while other hosts' proxies connect.
            Msg::Heartbeat => {}
            _ => return Err("mprun did not send the launch".into()),
        }
    }
}

/// Reads one message (blocking, with the socket's timeout).
fn read_msg(stream: &mut TcpStream, input: &mut Vec<u8>, max: usize) -> Result<Msg, String> {
    let mut buf = [0u8; 16 << 10];
    loop {
        match decode(input, max) {
            Ok(Some((msg, used))) => {
                input.drain(..used);
                return Ok(msg);
            }
            Ok(None) => {}
            Err(e) => return Err(format!("bad message from mprun: {e}")),
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err("mprun closed the connection (it did not accept this proxy)".into()),
            Ok(n) => input.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("no answer from mprun: {e}")),
        }
    }
}

/// Rank 0's stdin: bytes from mprun waiting to be written to its pipe.
#[derive(Debug)]
struct StdinSink {
    /// The pipe's write end; `None` once closed.
    file: Option<File>,
    buf: Vec<u8>,
    eof: bool,
}

impl StdinSink {
    /// Writes what the pipe takes; returns the bytes consumed (written, or dropped because
    /// rank 0 no longer reads).
    fn flush(&mut self, poll: &Poll) -> usize {
        let mut consumed = 0;
        if let Some(file) = self.file.as_mut() {
            while !self.buf.is_empty() {
                match file.write(&self.buf) {
                    Ok(n) => {
                        self.buf.drain(..n);
                        consumed += n;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.close(poll);
                        break;
                    }
                }
            }
        }
        if self.file.is_none() {
            consumed += self.buf.len();
            self.buf.clear();
        }
        if self.eof && self.buf.is_empty() {
            self.close(poll);
        }
        consumed
    }

    fn close(&mut self, poll: &Poll) {
        if let Some(file) = self.file.take() {
            let _ = poll.registry().deregister(&mut SourceFd(&file.as_raw_fd()));
        }
    }
}

/// The running proxy (not `Debug`: the signal source is not).
struct Proxy {
    spec: LaunchSpec,
    host: String,
    poll: Poll,
    signals: Signals,
    ranks: Ranks,
    /// Local index of each global rank started here.
    local_of: HashMap<usize, usize>,
    /// The control connection; `None` once mprun is gone.
    link: Option<Link>,
    bound: Duration,
    heard: Instant,
    next_beat: Instant,
    stdin: Option<StdinSink>,
    /// Rank 0's end of its stdin pipe, until it is started.
    rank0_stdin: Option<RankStdin>,
    env: Vec<(OsString, OsString)>,
    program: Result<std::path::PathBuf, (String, i32)>,
    /// Pipes that may have data to read (edge-triggered events not yet acted on).
    ready: VecDeque<(usize, usize)>,
    stopping: bool,
    kill_at: Option<Instant>,
    /// `Done` was sent.
    done: bool,
    /// mprun went away before the end of the job.
    lost: bool,
}

impl Proxy {
    fn new(args: &ProxyArgs, spec: LaunchSpec, stream: TcpStream, input: Vec<u8>) -> io::Result<Self> {
        if !spec.cwd.is_empty() && Path::new(&spec.cwd).is_dir() {
            let _ = std::env::set_current_dir(&spec.cwd);
        }
        let mut env = spec.env.clone();
        if spec.fill_host_addr {
            env.push(("MPR_HOST_ADDR".into(), stream.local_addr()?.ip().to_string().into()));
        }
        let path =
            env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).or_else(|| std::env::var_os("PATH"));
        let program = program::resolve(&spec.program, path.as_deref()).map_err(|e| (e.message(), e.exit_code()));

        let poll = Poll::new()?;
        let mut signals = Signals::new([SIGCHLD, SIGINT, SIGTERM, SIGHUP])?;
        poll.registry().register(&mut signals, SIGNALS, Interest::READABLE)?;
        stream.set_nonblocking(true)?;
        stream.set_read_timeout(None)?;
        stream.set_write_timeout(None)?;
        let mut link = Link::new(mio::net::TcpStream::from_std(stream), MAX_FRAME, input);
        poll.registry().register(&mut link.stream, CONTROL, Interest::READABLE | Interest::WRITABLE)?;

        let (stdin, rank0_stdin) = if spec.stdin {
            // std's pipe: close-on-exec on every OS (`pipe2` is Linux's and the BSDs', not macOS's).
            let (read_end, write_end) = std::io::pipe().map(|(r, w)| (OwnedFd::from(r), OwnedFd::from(w)))?;
            set_nonblocking(write_end.as_raw_fd())?;
            poll.registry().register(&mut SourceFd(&write_end.as_raw_fd()), STDIN, Interest::WRITABLE)?;
            let sink = StdinSink { file: Some(File::from(write_end)), buf: Vec::new(), eof: false };
            (Some(sink), Some(RankStdin::Pipe(read_end)))
        } else {
            (None, None)
        };
        let now = Instant::now();
        Ok(Proxy {
            host: spec.host.clone(),
            spec,
            poll,
            signals,
            ranks: Ranks::new(),
            local_of: HashMap::new(),
            link: Some(link),
            bound: args.timeout,
            heard: now,
            next_beat: now + heartbeat_interval(args.timeout),
            stdin,
            rank0_stdin,
            env,
            program,
            ready: VecDeque::new(),
            stopping: false,
            kill_at: None,
            done: false,
            lost: false,
        })
    }

    fn verbose(&self, message: impl FnOnce() -> String) {
        if self.spec.verbose {
            say(&format!("host {}: {}", self.host, message()));
        }
    }

    fn send(&mut self, msg: &Msg) {
        if let Some(link) = self.link.as_mut() {
            link.send(msg);
        }
    }

    fn run(mut self) -> i32 {
        self.start_ranks();
        self.reap();
        let mut events = Events::with_capacity(256);
        while self.link.is_some() || self.ranks.live() > 0 {
            if self.ranks.live() == 0 && !self.done {
                self.finish_ranks();
                continue;
            }
            let now = Instant::now();
            let timeout = if !self.ready.is_empty() && self.has_room() {
                Duration::ZERO
            } else {
                self.next_deadline().saturating_duration_since(now)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                say(&format!("host {}: waiting for events failed: {e}; killing the ranks", self.host));
                self.ranks.signal_live(Signal::SIGKILL);
                self.lose("the proxy failed".into());
                while self.ranks.live() > 0 {
                    let Some((pid, exit)) = reap(true) else { break };
                    self.ranks.exited(pid, exit);
                }
                break;
            }
            for event in events.iter() {
                self.dispatch(event.token(), event.is_writable());
            }
            self.read_ready();
            self.release_partial();
            self.check_deadlines(Instant::now());
        }
        if !self.done {
            self.finish_ranks();
        }
        let _ = shm::remove_segments(&self.spec.jobid);
        i32::from(self.lost)
    }

    /// Starts the ranks of this host; the first that cannot start is reported and the rest
    /// are not started (mprun then stops the job).
    fn start_ranks(&mut self) {
        let program = match &self.program {
            Ok(path) => path.clone(),
            Err((message, code)) => {
                let rank = self.spec.ranks.first().copied().unwrap_or(0);
                self.send(&Msg::SpawnFailed { rank, code: *code, error: message.clone() });
                return;
            }
        };
        if let Err(error) = crate::addr::check_rank_iface(&self.env) {
            let rank = self.spec.ranks.first().copied().unwrap_or(0);
            self.send(&Msg::SpawnFailed { rank, code: 1, error });
            return;
        }
        let ranks: Vec<usize> = self.spec.ranks.iter().map(|&r| r as usize).collect();
        let size = self.spec.size as usize;
        let bindings = crate::bind::here(&self.spec.binding, self.spec.share, ranks.len());
        crate::bind::report(&self.spec.binding, &self.host, &ranks, &bindings);
        for ((local_rank, &rank), binding) in ranks.iter().enumerate().zip(&bindings) {
            if self.stopping {
                break;
            }
            let program =
                Program { path: &program, argv0: &self.spec.program, args: &self.spec.args, env: &self.env, cwd: None };
            let slot = Slot { rank, size, local_rank, local_size: ranks.len() };
            let stdin = if rank == 0 { self.rank0_stdin.take().unwrap_or(RankStdin::Null) } else { RankStdin::Null };
            match spawn(&program, slot, binding, stdin) {
                Ok(spawned) => {
                    let pid = spawned.pid;
                    match self.ranks.add(self.poll.registry(), rank, spawned, self.spec.tag_output) {
                        Ok(local) => {
                            self.local_of.insert(rank, local);
                        }
                        Err(e) => {
                            say(&format!("host {}: cannot watch rank {rank}: {e}", self.host));
                            self.stop_ranks();
                        }
                    }
                    self.send(&Msg::Started { rank: rank as u32, pid: pid.as_raw() as u32 });
                }
                Err(e) => {
                    let code = spawn_error_code(&e);
                    self.send(&Msg::SpawnFailed { rank: rank as u32, code, error: e.to_string() });
                    break;
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
                        other => {
                            if self.stopping {
                                self.ranks.signal_live(Signal::SIGKILL);
                            }
                            self.verbose(|| format!("received {}; stopping the ranks", signal_name(other)));
                            self.stop_ranks();
                        }
                    }
                }
            }
            CONTROL => self.on_control(writable),
            STDIN => self.flush_stdin(),
            token => {
                let Some((local, stream)) = self.ranks.which(token) else {
                    return;
                };
                match stream {
                    STDOUT | STDERR => {
                        if !self.ready.contains(&(local, stream)) {
                            self.ready.push_back((local, stream));
                        }
                    }
                    _ => {
                        if writable {
                            self.ranks.flush_pmi(local);
                        }
                        self.serve_pmi(local);
                    }
                }
            }
        }
    }

    fn has_room(&self) -> bool {
        self.link.as_ref().is_none_or(|l| l.queued() < OUTPUT_HIGH_WATER)
    }

    /// Reads the pipes that have data, a few reads each in turn, while mprun keeps up.
    fn read_ready(&mut self) {
        let mut turns = self.ready.len();
        while turns > 0 && self.has_room() {
            turns -= 1;
            let Some((local, stream)) = self.ready.pop_front() else {
                break;
            };
            let rank = self.ranks.rank(local) as u32;
            let link = &mut self.link;
            let done =
                self.ranks.read_output(self.poll.registry(), local, stream, Limit::Reads(READS_PER_TURN), &mut |d| {
                    if let Some(link) = link.as_mut() {
                        link.send(&Msg::Output { rank, stream: stream as u8, data: d.to_vec() });
                    }
                });
            if !done {
                self.ready.push_back((local, stream));
            }
        }
    }

    /// Sends mprun the incomplete lines their ranks have paused on.
    fn release_partial(&mut self) {
        let link = &mut self.link;
        self.ranks.release_partial(Instant::now(), &mut |rank, stream, d| {
            if let Some(link) = link.as_mut() {
                link.send(&Msg::Output { rank: rank as u32, stream: stream as u8, data: d.to_vec() });
            }
        });
    }

    fn serve_pmi(&mut self, local: usize) {
        let rank = self.ranks.rank(local) as u32;
        let mut lines = Vec::new();
        let state = self.ranks.read_pmi(local, &mut lines);
        for line in lines {
            self.send(&Msg::Pmi { rank, line });
        }
        match state {
            ReadState::Open => {}
            ReadState::Closed => self.ranks.close_pmi(self.poll.registry(), local),
            ReadState::Garbage(_) => {
                self.send(&Msg::PmiGarbage { rank });
                self.ranks.close_pmi(self.poll.registry(), local);
            }
        }
    }

    fn on_control(&mut self, writable: bool) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        if writable {
            link.flush();
        }
        let mut msgs = Vec::new();
        let result = link.receive(&mut msgs);
        if !msgs.is_empty() {
            self.heard = Instant::now();
        }
        for msg in msgs {
            self.on_msg(msg);
        }
        if let Err(why) = result {
            self.lose(why);
        }
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::PmiReply { rank, line } => {
                if let Some(&local) = self.local_of.get(&(rank as usize)) {
                    if !self.ranks.send_pmi(local, &line) {
                        self.send(&Msg::PmiGarbage { rank });
                        self.ranks.close_pmi(self.poll.registry(), local);
                    }
                }
            }
            Msg::PmiClose { rank } => {
                if let Some(&local) = self.local_of.get(&(rank as usize)) {
                    self.ranks.close_pmi(self.poll.registry(), local);
                }
            }
            Msg::Stdin { data } => {
                match self.stdin.as_mut() {
                    Some(sink) => sink.buf.extend_from_slice(&data),
                    None => self.send(&Msg::StdinAck { bytes: data.len() as u32 }),
                }
                self.flush_stdin();
            }
            Msg::StdinEof => {
                if let Some(sink) = self.stdin.as_mut() {
                    sink.eof = true;
                }
                self.flush_stdin();
            }
            Msg::Stop => self.stop_ranks(),
            Msg::Kill => {
                self.ranks.signal_live(Signal::SIGKILL);
                self.kill_at = None;
            }
            Msg::Heartbeat => {}
            _ => self.lose("mprun broke the control protocol".into()),
        }
    }

    fn flush_stdin(&mut self) {
        let Some(sink) = self.stdin.as_mut() else {
            return;
        };
        let consumed = sink.flush(&self.poll);
        if consumed > 0 {
            self.send(&Msg::StdinAck { bytes: consumed as u32 });
        }
    }

    /// mprun is gone: stop the ranks and exit once they have ended.
    fn lose(&mut self, why: String) {
        let Some(mut link) = self.link.take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut link.stream);
        if self.done {
            // The end of the job: mprun closed the connection.
            return;
        }
        self.lost = true;
        say(&format!("host {}: lost mprun ({why}); stopping the ranks", self.host));
        self.stop_ranks();
    }

    fn stop_ranks(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.ranks.signal_live(Signal::SIGTERM);
        self.ranks.signal_live(Signal::SIGCONT);
        self.kill_at = Some(Instant::now() + Duration::from_millis(self.spec.kill_grace_ms));
    }

    fn reap(&mut self) {
        for (pid, exit) in reap_all() {
            let Some(local) = self.ranks.exited(pid, exit) else {
                continue;
            };
            let rank = self.ranks.rank(local);
            let (signal, code) = match exit {
                Exit::Code(c) => (false, c),
                Exit::Signal(s) => (true, s),
            };
            self.send(&Msg::Exited { rank: rank as u32, signal, code });
        }
    }

    fn next_deadline(&self) -> Instant {
        let mut next = self.kill_at.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        if self.link.is_some() {
            next = next.min(self.next_beat).min(self.heard + self.bound);
        }
        self.ranks.partial_due().map_or(next, |due| next.min(due))
    }

    fn check_deadlines(&mut self, now: Instant) {
        if self.link.is_some() {
            if self.heard + self.bound <= now {
                self.lose(format!("no word from it for {} s", self.bound.as_secs_f64()));
            } else if self.next_beat <= now {
                self.send(&Msg::Heartbeat);
                self.next_beat = now + heartbeat_interval(self.bound);
            }
        }
        if self.kill_at.is_some_and(|at| at <= now) {
            self.verbose(|| "grace period over: sending SIGKILL".into());
            self.ranks.signal_live(Signal::SIGKILL);
            self.kill_at = None;
        }
    }

    /// Every rank has ended: forward what is left in their pipes, kill what they left
    /// running, and tell mprun.
    fn finish_ranks(&mut self) {
        for (local, stream) in self.ranks.open_pipes() {
            let rank = self.ranks.rank(local) as u32;
            let link = &mut self.link;
            self.ranks.read_output(self.poll.registry(), local, stream, Limit::Drain, &mut |d| {
                if let Some(link) = link.as_mut() {
                    link.send(&Msg::Output { rank, stream: stream as u8, data: d.to_vec() });
                }
            });
        }
        self.ready.clear();
        self.kill_at = None;
        if let Some(sink) = self.stdin.as_mut() {
            sink.close(&self.poll);
        }
        self.send(&Msg::Done);
        self.done = true;
    }
}

/// Whether `words` (after the program name) ask for the proxy.
pub(crate) fn wanted(words: &[OsString]) -> bool {
    words.first().map(OsString::as_os_str) == Some(OsStr::new("--proxy"))
}
