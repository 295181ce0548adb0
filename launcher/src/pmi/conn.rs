//! One rank's PMI socket: bytes in, lines out; replies buffered until the socket takes them.
//!
//! Lines may arrive split across reads or several in one read. A line longer than
//! [`MAX_LINE`] or not UTF-8 is a protocol error, found as the bytes come (a rank that never
//! sends a newline costs at most [`MAX_LINE`] bytes). Blank lines are ignored. Replies a rank
//! does not read are queued up to [`MAX_QUEUED`] bytes; beyond that the rank is in breach.

use std::io::{self, Read, Write};

use mio::net::UnixStream;

/// Longest line accepted from a rank: room for the longest `put` with some to spare.
pub(crate) const MAX_LINE: usize = 16 << 10;

/// Most reply bytes queued for a rank: it waits for each reply before its next command, so
/// a rank that lets this much pile up is not reading them.
pub(crate) const MAX_QUEUED: usize = 64 << 10;

/// What reading the socket found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadState {
    /// The socket is still open.
    Open,
    /// The rank closed its end (or the socket failed).
    Closed,
    /// The rank sent something that is not a line of text (what, for the message).
    Garbage(&'static str),
}

/// Why a line was refused.
const TOO_LONG: &str = "a PMI line longer than 16384 bytes";
const _: () = assert!(MAX_LINE == 16384, "TOO_LONG names MAX_LINE");
const NOT_TEXT: &str = "a PMI line that is not UTF-8 text";

/// mprun's end of one rank's PMI socket.
#[derive(Debug)]
pub(crate) struct Conn {
    /// The socket, registered with the event loop.
    pub(crate) stream: UnixStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
}

impl Conn {
    /// Wraps a connected nonblocking socket.
    pub(crate) fn new(stream: UnixStream) -> Self {
        Conn { stream, inbuf: Vec::new(), outbuf: Vec::new() }
    }

    /// Reads all that is available; appends the complete lines to `lines`. Lines are split
    /// off after every read, so an overlong one is refused as soon as it is too long.
    pub(crate) fn read_lines(&mut self, lines: &mut Vec<String>) -> ReadState {
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return ReadState::Closed,
                Ok(n) => {
                    self.inbuf.extend_from_slice(&buf[..n]);
                    if let Err(why) = split_lines(&mut self.inbuf, lines) {
                        return ReadState::Garbage(why);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadState::Open,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return ReadState::Closed,
            }
        }
    }

    /// Queues `line` and sends what the socket takes now; false if more than [`MAX_QUEUED`]
    /// bytes of replies now wait for the rank to read them.
    #[must_use]
    pub(crate) fn send(&mut self, line: &str) -> bool {
        self.outbuf.extend_from_slice(line.as_bytes());
        self.flush();
        self.outbuf.len() <= MAX_QUEUED
    }

    /// Sends queued replies until the socket is full (the event loop calls this again when
    /// it becomes writable). Errors are left for the read side to notice.
    pub(crate) fn flush(&mut self) {
        while !self.outbuf.is_empty() {
            match self.stream.write(&self.outbuf) {
                Ok(0) => return,
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }
}

/// Moves the complete lines of `inbuf` (without their newline) to `lines`.
fn split_lines(inbuf: &mut Vec<u8>, lines: &mut Vec<String>) -> Result<(), &'static str> {
    let mut start = 0;
    while let Some(len) = inbuf[start..].iter().position(|b| *b == b'\n') {
        if len > MAX_LINE {
            return Err(TOO_LONG);
        }
        let line = std::str::from_utf8(&inbuf[start..start + len]).map_err(|_| NOT_TEXT)?;
        let line = line.trim_end_matches('\r');
        if !line.trim().is_empty() {
            lines.push(line.to_string());
        }
        start += len + 1;
    }
    inbuf.drain(..start);
    if inbuf.len() > MAX_LINE {
        return Err(TOO_LONG);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_lines_across_reads() {
        let mut buf = b"cmd=a\ncmd=b x=1\n\ncmd=".to_vec();
        let mut lines = Vec::new();
        split_lines(&mut buf, &mut lines).unwrap();
        assert_eq!(lines, ["cmd=a", "cmd=b x=1"]);
        assert_eq!(buf, b"cmd=");
        buf.extend_from_slice(b"c\r\n");
        split_lines(&mut buf, &mut lines).unwrap();
        assert_eq!(lines, ["cmd=a", "cmd=b x=1", "cmd=c"]);
        assert!(buf.is_empty());
    }

    #[test]
    fn refuses_garbage() {
        let mut lines = Vec::new();
        assert_eq!(split_lines(&mut vec![0xff, b'\n'], &mut lines), Err(NOT_TEXT));
        assert_eq!(split_lines(&mut vec![b'x'; MAX_LINE + 1], &mut lines), Err(TOO_LONG));
        let mut long = vec![b'x'; MAX_LINE + 1];
        long.push(b'\n');
        assert_eq!(split_lines(&mut long, &mut lines), Err(TOO_LONG), "a long line that ends is still too long");
        assert!(lines.is_empty());
    }

    #[test]
    fn talks_over_a_socket() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut conn = Conn::new(UnixStream::from_std(a));
        let mut peer = b;
        peer.write_all(b"cmd=init\ncmd=get").unwrap();
        let mut lines = Vec::new();
        assert_eq!(conn.read_lines(&mut lines), ReadState::Open);
        assert_eq!(lines, ["cmd=init"]);
        assert!(conn.send("cmd=response_to_init rc=0\n"));
        let mut got = [0u8; 26];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"cmd=response_to_init rc=0\n");
        drop(peer);
        assert_eq!(conn.read_lines(&mut lines), ReadState::Closed);
    }
}
