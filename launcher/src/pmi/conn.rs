//! One rank's PMI socket: bytes in, lines out; replies buffered until the socket takes them.
//!
//! Lines may arrive split across reads or several in one read. A line longer than
//! [`MAX_LINE`] or not UTF-8 is a protocol error. Blank lines are ignored.

use std::io::{self, Read, Write};

use mio::net::UnixStream;

/// Longest line accepted from a rank: room for the longest `put` with some to spare.
pub(crate) const MAX_LINE: usize = 16 << 10;

/// What reading the socket found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadState {
    /// The socket is still open.
    Open,
    /// The rank closed its end (or the socket failed).
    Closed,
    /// The rank sent something that is not a line of text.
    Garbage,
}

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

    /// Reads all that is available; appends the complete lines to `lines`.
    pub(crate) fn read_lines(&mut self, lines: &mut Vec<String>) -> ReadState {
        let mut buf = [0u8; 4096];
        let state = loop {
            match self.stream.read(&mut buf) {
                Ok(0) => break ReadState::Closed,
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break ReadState::Open,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break ReadState::Closed,
            }
        };
        match split_lines(&mut self.inbuf, lines) {
            Ok(()) => state,
            Err(()) => ReadState::Garbage,
        }
    }

    /// Queues `line` and sends what the socket takes now.
    pub(crate) fn send(&mut self, line: &str) {
        self.outbuf.extend_from_slice(line.as_bytes());
        self.flush();
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
fn split_lines(inbuf: &mut Vec<u8>, lines: &mut Vec<String>) -> Result<(), ()> {
    let mut start = 0;
    while let Some(len) = inbuf[start..].iter().position(|b| *b == b'\n') {
        let line = std::str::from_utf8(&inbuf[start..start + len]).map_err(|_| ())?;
        let line = line.trim_end_matches('\r');
        if !line.trim().is_empty() {
            lines.push(line.to_string());
        }
        start += len + 1;
    }
    inbuf.drain(..start);
    if inbuf.len() > MAX_LINE {
        return Err(());
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
        assert!(split_lines(&mut vec![0xff, b'\n'], &mut lines).is_err());
        assert!(split_lines(&mut vec![b'x'; MAX_LINE + 1], &mut lines).is_err());
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
        conn.send("cmd=response_to_init rc=0\n");
        let mut got = [0u8; 26];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"cmd=response_to_init rc=0\n");
        drop(peer);
        assert_eq!(conn.read_lines(&mut lines), ReadState::Closed);
    }
}
