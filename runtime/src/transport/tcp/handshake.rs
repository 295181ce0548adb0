//! Proof that a TCP connection belongs to the job: a mutual HMAC-SHA256 challenge keyed by
//! the per-job secret, done before any frame is accepted.
//!
//! ```text
//! connector -> acceptor   HELLO   magic "MPR1", rank u32, nonce_c [16]
//! acceptor  -> connector  CHALL   rank u32, nonce_a [16], mac_a = H(k, "acc" | nonce_c | nonce_a | ranks)
//! connector -> acceptor   PROOF   mac_c = H(k, "con" | nonce_a | nonce_c | ranks)
//! ```
//! Each side checks the other's MAC, so a stray or forged connection (or a connection to the
//! wrong job) fails without ever reaching the engine.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::Error;

const MAGIC: &[u8; 4] = b"MPR1";
const NONCE: usize = 16;
const MAC: usize = 32;

/// The keyed hash over one message of the exchange.
fn keyed(key: &[u8], label: &[u8], n1: &[u8], n2: &[u8], ranks: (u32, u32)) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(label);
    m.update(n1);
    m.update(n2);
    m.update(&ranks.0.to_le_bytes());
    m.update(&ranks.1.to_le_bytes());
    m
}

fn mac(key: &[u8], label: &[u8], n1: &[u8], n2: &[u8], ranks: (u32, u32)) -> [u8; MAC] {
    keyed(key, label, n1, n2, ranks).finalize().into_bytes().into()
}

/// Checks `got` in constant time.
fn verify(key: &[u8], label: &[u8], n1: &[u8], n2: &[u8], ranks: (u32, u32), got: &[u8]) -> bool {
    keyed(key, label, n1, n2, ranks).verify_slice(got).is_ok()
}

fn nonce() -> Result<[u8; NONCE], Error> {
    let mut n = [0u8; NONCE];
    getrandom::getrandom(&mut n).map_err(|e| Error::Transport(format!("no randomness for a nonce: {e}")))?;
    Ok(n)
}

fn io(what: &str, e: std::io::Error) -> Error {
    Error::Transport(format!("TCP handshake {what}: {e}"))
}

/// How the connector's side of a handshake failed.
#[derive(Debug)]
pub(crate) enum Failed {
    /// The connection failed or closed before the exchange was over: worth another try.
    Io(Error),
    /// The listener is not the peer of this job.
    Proof(Error),
}

/// An I/O error of the connector's step `what`.
fn failed(what: &'static str) -> impl Fn(std::io::Error) -> Failed {
    move |e| Failed::Io(io(what, e))
}

/// Connector side: proves we are rank `me` of the job and checks the acceptor is `peer`.
pub(crate) fn connect(s: &mut TcpStream, key: &[u8], me: u32, peer: u32, timeout: Duration) -> Result<(), Failed> {
    s.set_read_timeout(Some(timeout)).map_err(failed("setup"))?;
    let nc = nonce().map_err(Failed::Proof)?;
    let mut hello = Vec::with_capacity(4 + 4 + NONCE);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&me.to_le_bytes());
    hello.extend_from_slice(&nc);
    s.write_all(&hello).map_err(failed("hello"))?;
    let mut chall = [0u8; 4 + NONCE + MAC];
    s.read_exact(&mut chall).map_err(failed("challenge"))?;
    let their = u32::from_le_bytes(chall[..4].try_into().expect("4 bytes"));
    let na = &chall[4..4 + NONCE];
    if their != peer || !verify(key, b"acc", &nc, na, (me, peer), &chall[4 + NONCE..]) {
        return Err(Failed::Proof(Error::Transport(format!(
            "rank {peer}'s listener failed to prove it belongs to this job"
        ))));
    }
    s.write_all(&mac(key, b"con", na, &nc, (me, peer))).map_err(failed("proof"))?;
    s.set_read_timeout(None).map_err(failed("setup"))?;
    Ok(())
}

/// Acceptor side of one connection, driven on a nonblocking socket so that a rank runs the
/// handshakes of all its accepted connections at once: a connection that says nothing, or
/// too little, holds up no other (the caller drops it after its own bound).
#[derive(Debug)]
pub(crate) struct Accepting {
    s: TcpStream,
    /// Bytes of the message being read.
    got: Vec<u8>,
    /// The challenge, and how much of it is written.
    out: Vec<u8>,
    sent: usize,
    /// Once the hello is in: the rank it claims and both nonces.
    claim: Option<(u32, [u8; NONCE], [u8; NONCE])>,
}

/// Where an [`Accepting`] handshake stands after [`Accepting::advance`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Waiting for the connector's bytes (or for room to write).
    Waiting,
    /// The connector proved to be this rank of the job.
    Proved(u32),
}

impl Accepting {
    pub(crate) fn new(s: TcpStream) -> Result<Accepting, Error> {
        s.set_nonblocking(true).map_err(|e| io("setup", e))?;
        Ok(Accepting { s, got: Vec::with_capacity(4 + 4 + NONCE), out: Vec::new(), sent: 0, claim: None })
    }

    /// Moves the handshake on as far as the socket allows without blocking. `expect(rank)`
    /// says whether a connection from that rank is expected. An error ends it (the caller
    /// logs and closes it).
    pub(crate) fn advance(&mut self, key: &[u8], me: u32, expect: impl Fn(u32) -> bool) -> Result<Step, Error> {
        let Some((peer, nc, na)) = self.claim else {
            // The magic first: nonsense shorter than a hello is turned away at once.
            let magic = self.fill(MAGIC.len(), "hello")?;
            if magic && &self.got[..4] != MAGIC {
                return Err(Error::Transport("not an mpr connection (bad magic)".into()));
            }
            if !magic || !self.fill(4 + 4 + NONCE, "hello")? {
                return Ok(Step::Waiting);
            }
            let peer = u32::from_le_bytes(self.got[4..8].try_into().expect("4 bytes"));
            if !expect(peer) {
                return Err(Error::Transport(format!("unexpected connection claiming to be rank {peer}")));
            }
            let nc: [u8; NONCE] = self.got[8..].try_into().expect("a nonce");
            let na = nonce()?;
            self.out.extend_from_slice(&me.to_le_bytes());
            self.out.extend_from_slice(&na);
            self.out.extend_from_slice(&mac(key, b"acc", &nc, &na, (peer, me)));
            self.claim = Some((peer, nc, na));
            self.got.clear();
            return self.advance(key, me, expect);
        };
        while self.sent < self.out.len() {
            match self.s.write(&self.out[self.sent..]) {
                Ok(0) => return Err(Error::Transport("TCP handshake challenge: connection closed".into())),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(Step::Waiting),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io("challenge", e)),
            }
        }
        if !self.fill(MAC, "proof")? {
            return Ok(Step::Waiting);
        }
        if !verify(key, b"con", &na, &nc, (peer, me), &self.got) {
            return Err(Error::Transport(format!("connection claiming to be rank {peer} failed the job-secret proof")));
        }
        Ok(Step::Proved(peer))
    }

    /// Reads until `self.got` holds `want` bytes; false while they are not all in.
    fn fill(&mut self, want: usize, what: &str) -> Result<bool, Error> {
        let mut buf = [0u8; 64];
        while self.got.len() < want {
            let room = (want - self.got.len()).min(buf.len());
            match self.s.read(&mut buf[..room]) {
                Ok(0) => return Err(Error::Transport(format!("TCP handshake {what}: connection closed"))),
                Ok(n) => self.got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(what, e)),
            }
        }
        Ok(true)
    }

    /// The socket of a proved connection.
    pub(crate) fn into_stream(self) -> TcpStream {
        self.s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Instant;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        (c, a)
    }

    const T: Duration = Duration::from_secs(5);

    /// Drives the acceptor side until it ends or `T` passes.
    fn accept(a: TcpStream, key: &'static [u8], me: u32, expect: impl Fn(u32) -> bool) -> Result<u32, Error> {
        let mut h = Accepting::new(a)?;
        let t0 = Instant::now();
        while t0.elapsed() < T {
            if let Step::Proved(r) = h.advance(key, me, &expect)? {
                return Ok(r);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(Error::Transport("timed out".into()))
    }

    #[test]
    fn same_secret_succeeds_both_ways() {
        let (mut c, a) = pair();
        let h = std::thread::spawn(move || accept(a, b"secret", 1, |r| r == 0));
        connect(&mut c, b"secret", 0, 1, T).unwrap();
        assert_eq!(h.join().unwrap().unwrap(), 0);
    }

    #[test]
    fn wrong_secret_fails_on_both_sides() {
        let (mut c, a) = pair();
        let h = std::thread::spawn(move || accept(a, b"secret", 1, |_| true));
        assert!(connect(&mut c, b"guess", 0, 1, T).is_err());
        drop(c);
        assert!(h.join().unwrap().is_err());
    }

    #[test]
    fn garbage_and_unexpected_ranks_are_rejected() {
        let (mut c, a) = pair();
        c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert!(accept(a, b"k", 1, |_| true).is_err());
        let (mut c, a) = pair();
        let h = std::thread::spawn(move || accept(a, b"k", 1, |r| r == 0));
        assert!(connect(&mut c, b"k", 5, 1, T).is_err());
        assert!(h.join().unwrap().is_err());
    }

    /// A silent connection beside a real one: the acceptor waits on neither, the real one
    /// completes, and the silent one waits on a partial hello and ends when it closes.
    #[test]
    fn handshakes_advance_without_blocking() {
        let (mut silent_c, silent_a) = pair();
        let mut silent = Accepting::new(silent_a).unwrap();
        assert_eq!(silent.advance(b"k", 1, |_| true).unwrap(), Step::Waiting);
        let (c, a) = pair();
        let h = std::thread::spawn(move || {
            let mut c = c;
            connect(&mut c, b"k", 0, 1, T)
        });
        let mut real = Accepting::new(a).unwrap();
        let t0 = Instant::now();
        let peer = loop {
            assert!(t0.elapsed() < T, "the real handshake did not finish");
            assert_eq!(silent.advance(b"k", 1, |_| true).unwrap(), Step::Waiting);
            if let Step::Proved(p) = real.advance(b"k", 1, |r| r == 0).unwrap() {
                break p;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(peer, 0);
        h.join().unwrap().unwrap();
        silent_c.write_all(b"MP").unwrap();
        assert_eq!(silent.advance(b"k", 1, |_| true).unwrap(), Step::Waiting, "a partial hello waits");
        drop(silent_c);
        std::thread::sleep(Duration::from_millis(20));
        assert!(silent.advance(b"k", 1, |_| true).is_err(), "a closed connection ends its handshake");
    }
}
