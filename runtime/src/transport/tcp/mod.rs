//! TCP transport: any two hosts, one connection per peer pair.
//!
//! At start-up every rank listens on one address (addr.rs: `MPR_IFACE`, `MPR_HOST_ADDR`, or
//! loopback for a one-host job) and publishes it in its business card. After the card
//! exchange, each rank connects to the peers of higher rank and accepts those of lower rank;
//! every connection passes the job-secret challenge (handshake.rs) before it carries a frame.
//! Strays and forgeries are logged and closed; the job goes on. Frames move over nonblocking
//! sockets with bounded buffers (conn.rs); large messages are streamed by the engine in
//! frames of at most `max_frame` bytes.
//!
//! Tunables: `MPR_TCP_EAGER` (largest eager message, default 524288: below that, the
//! rendezvous round trip costs more than the receiver's copy out of its buffer when the
//! message comes unexpected; on loopback, 512 KiB went 0.92x of the rendezvous time
//! ping-pong and 0.86x in a 2-rank all-to-all; 262144 where ranks outnumber cores, see
//! [`CROWDED_EAGER`]), `MPR_TCP_FRAME` (largest
//! frame, default 1048576; the engine streams at most 256 KiB per frame while the peer
//! streams to us too), `MPR_TCP_BUF` (socket buffers, default 2 MiB where the system
//! allows; 0: the kernel's sizing), `MPR_CONNECT_TIMEOUT` (seconds, default 30).

pub(crate) mod addr;
mod conn;
mod handshake;
mod rejects;
mod strays;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use conn::{Conn, Link};

use super::{Caps, FrameSink, PeerState, Transport};
use crate::engine::wire::MAX_HEADER;
use crate::error::Error;

/// Longest an accepted connection may take over its handshake at start-up: a real peer
/// sends its hello as soon as it connects and answers the challenge at once.
const HANDSHAKE_BOUND: Duration = Duration::from_secs(5);

/// Most handshakes a rank runs at once at start-up; beyond it the oldest is dropped.
const MAX_HANDSHAKES: usize = 256;

fn io_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Transport(format!("TCP {what}: {e}"))
}

/// The default eager limit of a rank that shares its cores with more ranks than it has
/// (`outnumbered`). Its peers then often are not running when a message comes, and a large
/// eager one waits in their socket and is copied twice more (into a buffer for unexpected
/// messages, then into the receive): 4 ranks on 2 cores, all-reduce of 2 MiB (ring steps of
/// 512 KiB) 0.55-0.56x of the time with this limit, and at 4 MiB (1 MiB steps) eager was
/// 1.45x the time of rendezvous; 256 KiB steps went as fast either way.
const CROWDED_EAGER: usize = 256 << 10;

/// The TCP transport of one rank.
#[derive(Debug)]
pub(crate) struct TcpTransport {
    conns: Vec<Option<Conn>>,
    /// The listener, kept open by a thread of its own that closes late strays at once (also
    /// while the application computes) and counts them, rather than a silent refusal.
    strays: strays::Strays,
    caps: Caps,
    next: usize,
}

/// A bound listener waiting for the card exchange.
#[derive(Debug)]
pub(crate) struct TcpListening {
    listener: TcpListener,
    addr: SocketAddr,
}

impl TcpListening {
    /// Listens on `ip` (any free port).
    pub(crate) fn bind(ip: std::net::IpAddr) -> Result<TcpListening, Error> {
        let listener = TcpListener::bind((ip, 0)).map_err(|e| io_err(&format!("listen on {ip}"), e))?;
        // A deeper queue than std's 128 (the system's most, `somaxconn`): a flood of
        // connections while the rank computes leaves room for the real peers.
        let _ = nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::MAXCONN);
        let addr = listener.local_addr().map_err(|e| io_err("listener address", e))?;
        Ok(TcpListening { listener, addr })
    }

    /// The address to publish.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connects to and accepts from every peer in `peers` (world rank, address), proving
    /// membership with `key`; `outnumbered`: this rank has fewer cores than ranks that may
    /// run on them.
    pub(crate) fn establish(
        self,
        me: usize,
        world: usize,
        peers: &[(usize, SocketAddr)],
        key: &[u8],
        outnumbered: bool,
    ) -> Result<TcpTransport, Error> {
        let timeout =
            crate::env::seconds("MPR_CONNECT_TIMEOUT").unwrap_or(Duration::from_secs(30)).max(Duration::from_millis(1));
        let max_frame = crate::env::parsed::<usize>("MPR_TCP_FRAME").unwrap_or(1 << 20).clamp(4096, 16 << 20);
        let eager = crate::env::parsed::<usize>("MPR_TCP_EAGER")
            .unwrap_or(if outnumbered { CROWDED_EAGER } else { 512 << 10 })
            .min(max_frame - MAX_HEADER);
        let deadline = Instant::now() + timeout;
        let buffers = socket_buffers();
        let mut conns: Vec<Option<Conn>> = (0..world).map(|_| None).collect();
        let setup = |s: TcpStream| -> Result<Conn, Error> {
            s.set_nodelay(true).map_err(|e| io_err("nodelay", e))?;
            keepalive(&s);
            if let Some(b) = buffers {
                // Best effort: a refusal leaves the kernel's own sizing.
                let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::SndBuf, &b);
                let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &b);
            }
            s.set_nonblocking(true).map_err(|e| io_err("nonblocking", e))?;
            Ok(Conn::new(mio::net::TcpStream::from_std(s), max_frame))
        };
        // Connect to higher ranks (they only accept from us), then accept from lower ones.
        for &(peer, addr) in peers.iter().filter(|(p, _)| *p > me) {
            let s = loop {
                let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
                let mut s = connect_retry(addr, deadline)
                    .map_err(|e| io_err(&format!("connect to rank {peer} at {addr}"), e))?;
                match handshake::connect(&mut s, key, me as u32, peer as u32, left) {
                    Ok(()) => break s,
                    // The peer dropped the connection before it answered (it was flooded by
                    // strays, say): again, within the deadline.
                    Err(handshake::Failed::Io(_)) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(handshake::Failed::Io(e) | handshake::Failed::Proof(e)) => return Err(e),
                }
            };
            conns[peer] = Some(setup(s)?);
        }
        // Accept from lower ranks, every handshake at once: a stray that says nothing (or
        // too little) is dropped after HANDSHAKE_BOUND and holds up no real peer meanwhile.
        let mut waiting: Vec<usize> = peers.iter().map(|p| p.0).filter(|&p| p < me).collect();
        let mut shaking: Vec<(handshake::Accepting, SocketAddr, Instant)> = Vec::new();
        let mut rejects = rejects::Rejects::new(me);
        self.listener.set_nonblocking(true).map_err(|e| io_err("listener", e))?;
        while !waiting.is_empty() {
            let mut moved = false;
            loop {
                match self.listener.accept() {
                    Ok((s, from)) => {
                        moved = true;
                        if shaking.len() >= MAX_HANDSHAKES {
                            // The oldest goes: a real peer proves itself within a round trip.
                            let (_, old, _) = shaking.remove(0);
                            let what = format!("rejected a TCP connection from {old}: too many handshakes at once");
                            rejects.note(old.ip(), &what, Instant::now());
                        }
                        match handshake::Accepting::new(s) {
                            Ok(h) => shaking.push((h, from, Instant::now())),
                            Err(e) => {
                                let what = format!("rejected a TCP connection from {from}: {e}");
                                rejects.note(from.ip(), &what, Instant::now());
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_err("accept", e)),
                }
            }
            let now = Instant::now();
            let mut i = 0;
            while i < shaking.len() {
                let (h, from, since) = &mut shaking[i];
                let step = match h.advance(key, me as u32, |r| waiting.contains(&(r as usize))) {
                    Err(e) => Err(e.to_string()),
                    Ok(handshake::Step::Waiting) if now.duration_since(*since) > HANDSHAKE_BOUND => {
                        Err(format!("no handshake within {} s", HANDSHAKE_BOUND.as_secs()))
                    }
                    Ok(step) => Ok(step),
                };
                match step {
                    Ok(handshake::Step::Waiting) => i += 1,
                    Ok(handshake::Step::Proved(peer)) => {
                        moved = true;
                        let (h, from, _) = shaking.remove(i);
                        let peer = peer as usize;
                        if waiting.contains(&peer) {
                            waiting.retain(|&p| p != peer);
                            conns[peer] = Some(setup(h.into_stream())?);
                        } else {
                            let what =
                                format!("rejected a TCP connection from {from}: rank {peer} is connected already");
                            rejects.note(from.ip(), &what, now);
                        }
                    }
                    Err(why) => {
                        moved = true;
                        let what = format!("rejected a TCP connection from {from}: {why}");
                        rejects.note(from.ip(), &what, now);
                        shaking.remove(i);
                    }
                }
            }
            if waiting.is_empty() {
                break;
            }
            if now > deadline {
                return Err(Error::Transport(format!(
                    "timed out after {:.0} s waiting for TCP connections from ranks {waiting:?}",
                    timeout.as_secs_f64()
                )));
            }
            if !moved {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        // Handshakes still running are strays (every peer is in): closed as they are dropped.
        for (_, from, _) in &shaking {
            let what = format!("closed a TCP connection from {from} that had not proved itself");
            rejects.note(from.ip(), &what, Instant::now());
        }
        rejects.flush();
        let caps = Caps {
            name: "tcp",
            max_frame,
            eager_limit: eager,
            bulk_read: false,
            expose: false,
            bulk_write: false,
            remote_write: false,
            remote_read: false,
        };
        let strays = strays::Strays::start(self.listener, rejects);
        Ok(TcpTransport { conns, strays, caps, next: 0 })
    }
}

/// The socket buffer size to ask for (`MPR_TCP_BUF`, default 2 MiB; 0: the kernel's own
/// sizing). Over loopback, all-reduces of 512 KiB to 1 MiB took 15-30% less time with 2 MiB than
/// with loopback's autotuning. Asked only where the system's maxima allow it: above them the
/// kernel would cap the buffers below what its autotuning reaches.
fn socket_buffers() -> Option<usize> {
    let want = crate::env::parsed::<usize>("MPR_TCP_BUF").unwrap_or(2 << 20);
    let max = |name: &str| std::fs::read_to_string(name).ok().and_then(|t| t.trim().parse::<usize>().ok());
    buffer_size(want, max("/proc/sys/net/core/wmem_max"), max("/proc/sys/net/core/rmem_max"))
}

/// `want` if it is set and the send and receive maxima (unknown: not Linux) allow it.
fn buffer_size(want: usize, wmem_max: Option<usize>, rmem_max: Option<usize>) -> Option<usize> {
    match (wmem_max, rmem_max) {
        (Some(w), Some(r)) if want > 0 && want <= w.min(r) => Some(want),
        _ => None,
    }
}

/// Connects, retrying refusals until `deadline` (the peer may not listen yet on a slow host).
fn connect_retry(addr: SocketAddr, deadline: Instant) -> std::io::Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(10))) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline && e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Turns on TCP keep-alive with short timers, so a silently dead link shows up as an error.
fn keepalive(s: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = setsockopt(s, sockopt::KeepAlive, &true);
    #[cfg(target_os = "linux")]
    {
        let _ = setsockopt(s, sockopt::TcpKeepIdle, &5);
        let _ = setsockopt(s, sockopt::TcpKeepInterval, &1);
        let _ = setsockopt(s, sockopt::TcpKeepCount, &5);
    }
}

impl TcpTransport {
    fn conn(&mut self, peer: usize) -> Result<&mut Conn, Error> {
        self.conns
            .get_mut(peer)
            .and_then(|c| c.as_mut())
            .ok_or_else(|| Error::Transport(format!("no TCP connection to rank {peer}")))
    }
}

impl Transport for TcpTransport {
    fn caps(&self) -> Caps {
        self.caps
    }

    fn try_send(&mut self, peer: usize, hdr: &[u8], payload: &[u8]) -> Result<bool, Error> {
        self.conn(peer)?.send(hdr, payload)
    }

    fn poll(&mut self, sink: &mut FrameSink<'_>) -> Result<usize, Error> {
        let n = self.conns.len();
        let mut got = 0;
        for k in 0..n {
            let peer = (self.next + k) % n;
            if let Some(c) = self.conns[peer].as_mut() {
                got += c.receive(peer, sink)?;
            }
        }
        self.next = (self.next + 1) % n.max(1);
        Ok(got)
    }

    fn flush(&mut self) {
        for c in self.conns.iter_mut().flatten() {
            c.flush();
        }
    }

    fn bulk_read(&mut self, _peer: usize, _addr: u64, _key: u64, _dst: &mut [u8]) -> Result<(), Error> {
        Err(Error::Transport("TCP has no single-copy reads".into()))
    }

    fn bulk_write(&mut self, _peer: usize, _addr: u64, _src: &[u8]) -> Result<(), Error> {
        Err(Error::Transport("TCP has no single-copy writes".into()))
    }

    fn peer_state(&self, peer: usize) -> PeerState {
        match self.conns.get(peer).and_then(|c| c.as_ref()).map(|c| c.link) {
            Some(Link::Bye) => PeerState::Finalized,
            Some(Link::Broken) => PeerState::Dead,
            _ => PeerState::Alive,
        }
    }

    fn finalize(&mut self) {
        self.strays.stop();
        for c in self.conns.iter_mut().flatten() {
            c.goodbye();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::buffer_size;

    #[test]
    fn socket_buffers_only_where_the_system_allows() {
        assert_eq!(buffer_size(2 << 20, Some(4 << 20), Some(32 << 20)), Some(2 << 20));
        // Debian's default maxima (212992): asking would cap the buffers below autotuning.
        assert_eq!(buffer_size(2 << 20, Some(212_992), Some(212_992)), None);
        assert_eq!(buffer_size(0, Some(4 << 20), Some(4 << 20)), None);
        assert_eq!(buffer_size(2 << 20, None, None), None);
    }
}
