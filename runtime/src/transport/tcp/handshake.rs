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

/// Connector side: proves we are rank `me` of the job and checks the acceptor is `peer`.
pub(crate) fn connect(s: &mut TcpStream, key: &[u8], me: u32, peer: u32, timeout: Duration) -> Result<(), Error> {
    s.set_read_timeout(Some(timeout)).map_err(|e| io("setup", e))?;
    let nc = nonce()?;
    let mut hello = Vec::with_capacity(4 + 4 + NONCE);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&me.to_le_bytes());
    hello.extend_from_slice(&nc);
    s.write_all(&hello).map_err(|e| io("hello", e))?;
    let mut chall = [0u8; 4 + NONCE + MAC];
    s.read_exact(&mut chall).map_err(|e| io("challenge", e))?;
    let their = u32::from_le_bytes(chall[..4].try_into().expect("4 bytes"));
    let na = &chall[4..4 + NONCE];
    if their != peer || !verify(key, b"acc", &nc, na, (me, peer), &chall[4 + NONCE..]) {
        return Err(Error::Transport(format!("rank {peer}'s listener failed to prove it belongs to this job")));
    }
    s.write_all(&mac(key, b"con", na, &nc, (me, peer))).map_err(|e| io("proof", e))?;
    s.set_read_timeout(None).map_err(|e| io("setup", e))?;
    Ok(())
}

/// Acceptor side: returns the rank the connector proved to be. `expect(rank)` says whether a
/// connection from that rank is expected.
pub(crate) fn accept(
    s: &mut TcpStream,
    key: &[u8],
    me: u32,
    expect: impl Fn(u32) -> bool,
    timeout: Duration,
) -> Result<u32, Error> {
    s.set_read_timeout(Some(timeout)).map_err(|e| io("setup", e))?;
    let mut hello = [0u8; 4 + 4 + NONCE];
    s.read_exact(&mut hello).map_err(|e| io("hello", e))?;
    if &hello[..4] != MAGIC {
        return Err(Error::Transport("not an mpr connection (bad magic)".into()));
    }
    let peer = u32::from_le_bytes(hello[4..8].try_into().expect("4 bytes"));
    if !expect(peer) {
        return Err(Error::Transport(format!("unexpected connection claiming to be rank {peer}")));
    }
    let nc = &hello[8..];
    let na = nonce()?;
    let mut chall = Vec::with_capacity(4 + NONCE + MAC);
    chall.extend_from_slice(&me.to_le_bytes());
    chall.extend_from_slice(&na);
    chall.extend_from_slice(&mac(key, b"acc", nc, &na, (peer, me)));
    s.write_all(&chall).map_err(|e| io("challenge", e))?;
    let mut proof = [0u8; MAC];
    s.read_exact(&mut proof).map_err(|e| io("proof", e))?;
    if !verify(key, b"con", &na, nc, (peer, me), &proof) {
        return Err(Error::Transport(format!("connection claiming to be rank {peer} failed the job-secret proof")));
    }
    s.set_read_timeout(None).map_err(|e| io("setup", e))?;
    Ok(peer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        (c, a)
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn same_secret_succeeds_both_ways() {
        let (mut c, mut a) = pair();
        let h = std::thread::spawn(move || accept(&mut a, b"secret", 1, |r| r == 0, T));
        connect(&mut c, b"secret", 0, 1, T).unwrap();
        assert_eq!(h.join().unwrap().unwrap(), 0);
    }

    #[test]
    fn wrong_secret_fails_on_both_sides() {
        let (mut c, mut a) = pair();
        let h = std::thread::spawn(move || accept(&mut a, b"secret", 1, |_| true, T));
        assert!(connect(&mut c, b"guess", 0, 1, T).is_err());
        drop(c);
        assert!(h.join().unwrap().is_err());
    }

    #[test]
    fn garbage_and_unexpected_ranks_are_rejected() {
        let (mut c, mut a) = pair();
        c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert!(accept(&mut a, b"k", 1, |_| true, T).is_err());
        let (mut c, mut a) = pair();
        let h = std::thread::spawn(move || accept(&mut a, b"k", 1, |r| r == 0, T));
        assert!(connect(&mut c, b"k", 5, 1, T).is_err());
        assert!(h.join().unwrap().is_err());
    }
}
