//! One TCP connection to a peer: length-prefixed frames over a nonblocking socket, with
//! bounded send and receive buffers.
//!
//! On the wire every frame is `[len: u32 LE][frame: len bytes]`; `len == 0` is the goodbye a
//! rank sends when it finalizes, so the peer can tell a clean exit from a crash. A frame is
//! either written whole now, or whole into the send buffer (never in part), and the buffer
//! never grows past `wcap`: a full buffer is back-pressure, not memory growth.

use std::io::{ErrorKind, IoSlice, Read, Write};

use mio::net::TcpStream;

use crate::buf::RawBufMut;
use crate::engine::wire::MAX_HEADER;
use crate::error::Error;
use crate::transport::Sink;

/// Frames with payloads up to this size are gathered in the send buffer and written
/// together at the next flush; larger ones are written at once. (Counted without the
/// headers, so a window of 16 KiB messages is gathered too: one write per message made
/// them 0.9x MPICH's and Open MPI's bandwidth, against 4x at 8 KiB.)
const BATCH: usize = 16 << 10;

/// Payloads larger than this are read straight into their destination when the engine can
/// place them (no copy through the receive buffer).
const PLACE_MIN: usize = 32 << 10;

/// Most bytes one read takes into the receive buffer.
const READ_CHUNK: usize = 64 << 10;

/// Most bytes the read after a placed payload takes: a frame's length and the longest header.
/// A large message streams as one large frame after another, and a full `READ_CHUNK` read
/// would take the head of the next payload into the receive buffer, to be copied out again
/// (for 256 KiB frames, a quarter of the bytes); this read takes only the next header.
const HEAD_READ: usize = 4 + MAX_HEADER;

/// A payload being read straight into its destination.
#[derive(Debug)]
struct Direct {
    token: u64,
    dst: RawBufMut,
    done: usize,
}

/// Liveness as seen from the byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    Open,
    /// The peer said goodbye (it finalized).
    Bye,
    /// The stream ended or failed without a goodbye.
    Broken,
}

#[derive(Debug)]
pub(crate) struct Conn {
    sock: TcpStream,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    wcap: usize,
    max_frame: usize,
    pub(crate) link: Link,
    pub(crate) error: Option<String>,
    /// A write failed: nothing more can go to the peer (see [`Conn::write_failed`]).
    wfail: Option<String>,
    direct: Option<Direct>,
    /// Bytes of a payload to skip (its receive was cancelled while it arrived).
    discard: usize,
    /// A placed payload just ended: the next read takes one header only (`HEAD_READ`).
    after_placed: bool,
    /// Rounds spent with output still buffered.
    busy_rounds: u32,
}

impl Conn {
    pub(crate) fn new(sock: TcpStream, max_frame: usize) -> Conn {
        Conn {
            sock,
            rbuf: vec![0u8; 2 * (max_frame + 4)],
            rstart: 0,
            rend: 0,
            wbuf: Vec::new(),
            wpos: 0,
            wcap: 4 * (max_frame + 4),
            max_frame,
            link: Link::Open,
            error: None,
            wfail: None,
            direct: None,
            discard: 0,
            after_placed: false,
            busy_rounds: 0,
        }
    }

    fn pending_out(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    fn broken(&mut self, e: impl std::fmt::Display) {
        if self.link == Link::Open {
            self.link = Link::Broken;
            self.error = Some(e.to_string());
        }
    }

    /// A write failed: the peer closed its end. What was still to go is dropped, and later
    /// sends fail. Whether the peer left cleanly or died is for the reads to tell: a peer that
    /// finalized said goodbye before it closed, and its goodbye may still sit unread in our
    /// receive buffer (marking the link broken here made a clean exit look like a death).
    fn write_failed(&mut self, e: impl std::fmt::Display) {
        self.wfail.get_or_insert_with(|| e.to_string());
    }

    /// Writes buffered bytes; returns whether the buffer is now empty.
    pub(crate) fn flush(&mut self) -> bool {
        while self.pending_out() > 0 {
            match self.sock.write(&self.wbuf[self.wpos..]) {
                Ok(0) => {
                    self.write_failed("connection closed while sending");
                    break;
                }
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.write_failed(e);
                    break;
                }
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        true
    }

    /// Sends one frame (`hdr ++ payload`) whole, now or from the buffer; `Ok(false)` if the
    /// buffer has no room for it (try again later).
    pub(crate) fn send(&mut self, hdr: &[u8], payload: &[u8]) -> Result<bool, Error> {
        let flen = hdr.len() + payload.len();
        debug_assert!(flen <= self.max_frame && flen > 0);
        let lenb = (flen as u32).to_le_bytes();
        let total = 4 + flen;
        if self.link == Link::Broken {
            return Err(Error::Transport(self.error.clone().unwrap_or_else(|| "connection lost".into())));
        }
        if let Some(e) = &self.wfail {
            return Err(Error::Transport(format!("TCP send: {e}")));
        }
        if payload.len() <= BATCH {
            if self.pending_out() + total > self.wcap && !self.flush() {
                return Ok(false);
            }
            // Small frames wait for the next flush, so a burst goes out in one write.
            self.queue(&[&lenb, hdr, payload], 0);
            return Ok(true);
        }
        // A large frame is never copied in whole: it waits with its owner (the caller keeps
        // it queued) until what is buffered has gone; at most the unwritten tail of one
        // frame is copied below.
        if self.pending_out() > 0 && !self.flush() {
            return Ok(false);
        }
        let iov = [IoSlice::new(&lenb), IoSlice::new(hdr), IoSlice::new(payload)];
        let wrote = loop {
            match self.sock.write_vectored(&iov) {
                Ok(n) => break n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break 0,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.write_failed(&e);
                    return Err(Error::Transport(format!("TCP send: {e}")));
                }
            }
        };
        if wrote < total {
            self.queue(&[&lenb, hdr, payload], wrote);
        }
        Ok(true)
    }

    /// Appends the parts, skipping the first `skip` bytes (already written).
    fn queue(&mut self, parts: &[&[u8]], mut skip: usize) {
        for p in parts {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            self.wbuf.extend_from_slice(&p[skip..]);
            skip = 0;
        }
    }

    /// Says goodbye (best effort, blocking briefly until the send buffer drains).
    pub(crate) fn goodbye(&mut self) {
        let _ = self.sock.set_nodelay(true);
        self.wbuf.extend_from_slice(&0u32.to_le_bytes());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !self.flush() && self.link != Link::Broken && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
    }

    /// Reads what has arrived and passes every complete frame to `sink`.
    pub(crate) fn receive(&mut self, peer: usize, sink: &mut dyn Sink) -> Result<usize, Error> {
        let mut frames = 0;
        if self.pending_out() > 0 && !self.flush() {
            // Still sending: the socket is busy with our bytes, and reading it on every
            // round would only contend for its lock; look for input every few rounds.
            self.busy_rounds = self.busy_rounds.wrapping_add(1);
            if !self.busy_rounds.is_multiple_of(16) && self.direct.is_none() {
                return Ok(0);
            }
        }
        // A read that did not fill the buffer took all the kernel had: after delivering its
        // frames, do not spend another system call just to hear "would block".
        let mut drained = false;
        loop {
            if self.direct.is_some() || self.discard > 0 {
                match self.read_direct(peer, sink)? {
                    Some(true) => frames += 1,
                    Some(false) => {}
                    None => return Ok(frames),
                }
                continue;
            }
            // Deliver complete frames.
            while self.rend - self.rstart >= 4 {
                let len = u32::from_le_bytes(self.rbuf[self.rstart..self.rstart + 4].try_into().expect("4 bytes"));
                let len = len as usize;
                if len == 0 {
                    self.link = Link::Bye;
                    self.rstart += 4;
                    continue;
                }
                if len > self.max_frame {
                    self.broken("oversized frame");
                    return Err(Error::Transport(format!(
                        "peer sent a frame of {len} bytes (limit {})",
                        self.max_frame
                    )));
                }
                let have = self.rend - self.rstart - 4;
                if have < len {
                    if len >= PLACE_MIN && self.try_place(peer, sink, len) {
                        // Return before reading the payload, counting the placement as an
                        // event: what it queued (the `Cts` of a rendezvous whose head this
                        // is) then leaves first, and the rest of the message travels while
                        // the head arrives, instead of after it.
                        return Ok(frames + 1);
                    }
                    break;
                }
                let start = self.rstart + 4;
                self.rstart += 4 + len;
                sink.frame(peer, &self.rbuf[start..start + len])?;
                frames += 1;
            }
            if self.rstart == self.rend {
                self.rstart = 0;
                self.rend = 0;
            } else if self.rbuf.len() - self.rend < self.max_frame + 4 {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            }
            if self.link != Link::Open || drained {
                return Ok(frames);
            }
            // Read in modest pieces: the payload of a large frame should land in place, not
            // pass through this buffer.
            let chunk = if std::mem::take(&mut self.after_placed) { HEAD_READ } else { READ_CHUNK };
            let room = (self.rbuf.len() - self.rend).min(chunk);
            match self.sock.read(&mut self.rbuf[self.rend..self.rend + room]) {
                Ok(0) => {
                    self.broken("connection closed by the peer");
                    return Ok(frames);
                }
                Ok(n) => {
                    self.rend += n;
                    drained = n < room;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(frames),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.broken(e);
                    return Ok(frames);
                }
            }
        }
    }

    /// A large frame is partly here: if the engine places its payload, moves what arrived of
    /// it there and switches to reading straight into the destination.
    fn try_place(&mut self, peer: usize, sink: &mut dyn Sink, len: usize) -> bool {
        let head = &self.rbuf[self.rstart + 4..self.rend];
        let Some((hlen, token, mut dst)) = sink.place(peer, head, len) else { return false };
        if head.len() < hlen {
            return false;
        }
        let already = &self.rbuf[self.rstart + 4 + hlen..self.rend];
        if !dst.write_at(0, already) {
            return false;
        }
        self.direct = Some(Direct { token, dst, done: already.len() });
        self.rstart = 0;
        self.rend = 0;
        true
    }

    /// Reads the placed (or discarded) payload; `Some(true)`: a frame finished, `Some(false)`:
    /// more to read, `None`: nothing available now.
    fn read_direct(&mut self, peer: usize, sink: &mut dyn Sink) -> Result<Option<bool>, Error> {
        if let Some(d) = self.direct.as_mut() {
            // The receive may have been failed meanwhile: then its buffer is not ours to fill.
            if !sink.placement_live(d.token) {
                self.discard = d.dst.len() - d.done;
                self.direct = None;
            }
        }
        if let Some(d) = self.direct.as_mut() {
            let n = d.dst.len();
            if d.done == n {
                let (token, n) = (d.token, n);
                self.direct = None;
                self.after_placed = true;
                sink.placed(peer, token, n)?;
                return Ok(Some(true));
            }
            let dst = d.dst.range_mut(d.done, n - d.done).expect("inside the placement");
            match self.sock.read(dst) {
                Ok(0) => {
                    self.broken("connection closed by the peer");
                    Ok(None)
                }
                Ok(k) => {
                    d.done += k;
                    Ok(Some(false))
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => Ok(Some(false)),
                Err(e) => {
                    self.broken(e);
                    Ok(None)
                }
            }
        } else {
            let mut scratch = [0u8; 64 << 10];
            let want = self.discard.min(scratch.len());
            match self.sock.read(&mut scratch[..want]) {
                Ok(0) => {
                    self.broken("connection closed by the peer");
                    Ok(None)
                }
                Ok(k) => {
                    self.discard -= k;
                    Ok(Some(self.discard == 0))
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => Ok(Some(false)),
                Err(e) => {
                    self.broken(e);
                    Ok(None)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeps the frames it is given.
    #[derive(Default)]
    struct Frames(Vec<Vec<u8>>);

    impl Sink for Frames {
        fn frame(&mut self, _peer: usize, frame: &[u8]) -> Result<(), Error> {
            self.0.push(frame.to_vec());
            Ok(())
        }
        fn place(&mut self, _: usize, _: &[u8], _: usize) -> Option<(usize, u64, RawBufMut)> {
            None
        }
        fn placement_live(&self, _: u64) -> bool {
            false
        }
        fn placed(&mut self, _: usize, _: u64, _: usize) -> Result<(), Error> {
            Ok(())
        }
        fn remote_done(&mut self, _: usize, _: u64, _: Result<Option<&[u8]>, Error>) {}
    }

    /// A peer that says goodbye and closes while our frames are still arriving (its kernel
    /// then resets the connection): our writes fail, but the goodbye in our receive buffer
    /// still says it left cleanly, and sends after the failure are errors.
    #[test]
    fn a_write_failing_after_the_peers_goodbye_is_a_clean_exit() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut theirs, _) = listener.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut conn = Conn::new(TcpStream::from_std(ours), 1 << 16);
        // A frame of theirs, then their goodbye; they close without reading what we sent.
        theirs.write_all(&[3, 0, 0, 0, 7, 8, 9, 0, 0, 0, 0]).unwrap();
        assert!(conn.send(&[1; 16], &[2; 1000]).unwrap());
        assert!(conn.flush());
        drop(theirs);
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Write until the reset is seen.
        let mut failed = None;
        for _ in 0..1000 {
            match conn.send(&[1; 16], &[2; 1000]) {
                Ok(_) => {
                    conn.flush();
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(failed.is_some_and(|e| e.to_string().contains("TCP send")), "writes to a closed peer fail");
        assert_eq!(conn.link, Link::Open, "a failed write alone says nothing of how the peer left");
        let mut got = Frames::default();
        conn.receive(1, &mut got).unwrap();
        assert_eq!(got.0, vec![vec![7, 8, 9]]);
        assert_eq!(conn.link, Link::Bye, "its goodbye was read: {:?}", conn.error);
        assert!(conn.send(&[1; 16], &[]).is_err(), "nothing more goes");
    }
}
