//! One control connection, nonblocking: frames in, frames out, buffered both ways.
//!
//! The event loop calls [`Link::receive`] when the socket is readable and [`Link::flush`]
//! when it is writable. A write error is remembered and reported by the next `receive`, so
//! the reader side is the one place that decides a link is gone.

use std::io::{self, Read, Write};

use mio::net::TcpStream;

use super::wire::{decode, encode, Msg};

/// A framed control connection.
#[derive(Debug)]
pub(crate) struct Link {
    /// The socket, registered with the event loop for reading and writing.
    pub(crate) stream: TcpStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    /// Bytes at the front of `outbuf` already written.
    sent: usize,
    max_frame: usize,
    failed: Option<String>,
}

impl Link {
    /// Wraps a connected nonblocking socket; `input` is what was already read from it.
    pub(crate) fn new(stream: TcpStream, max_frame: usize, input: Vec<u8>) -> Self {
        Link { stream, inbuf: input, outbuf: Vec::new(), sent: 0, max_frame, failed: None }
    }

    /// Changes the longest frame accepted from the peer.
    pub(crate) fn set_max_frame(&mut self, max: usize) {
        self.max_frame = max;
    }

    /// Bytes queued and not yet written.
    pub(crate) fn queued(&self) -> usize {
        self.outbuf.len() - self.sent
    }

    /// Queues `msg` and writes what the socket takes now.
    pub(crate) fn send(&mut self, msg: &Msg) {
        if self.failed.is_some() {
            return;
        }
        encode(msg, &mut self.outbuf);
        self.flush();
    }

    /// Writes queued bytes until the socket is full.
    pub(crate) fn flush(&mut self) {
        while self.failed.is_none() && self.sent < self.outbuf.len() {
            match self.stream.write(&self.outbuf[self.sent..]) {
                Ok(0) => self.failed = Some("the connection accepts no more data".into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.failed = Some(format!("write failed: {e}")),
            }
        }
        if self.sent == self.outbuf.len() {
            self.outbuf.clear();
            self.sent = 0;
        } else if self.sent > (1 << 20) {
            self.outbuf.drain(..self.sent);
            self.sent = 0;
        }
    }

    /// Reads what is available and appends the complete messages to `msgs`. `Err` (with the
    /// reason) when the connection is closed, failed, or sent a bad frame; the messages
    /// before that are still appended.
    pub(crate) fn receive(&mut self, msgs: &mut Vec<Msg>) -> Result<(), String> {
        let mut buf = [0u8; 64 << 10];
        let mut closed = self.failed.clone();
        while closed.is_none() {
            match self.stream.read(&mut buf) {
                Ok(0) => closed = Some("the connection was closed".into()),
                Ok(n) => {
                    self.inbuf.extend_from_slice(&buf[..n]);
                    self.decode(msgs)?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => closed = Some(format!("read failed: {e}")),
            }
        }
        self.decode(msgs)?;
        match closed {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    fn decode(&mut self, msgs: &mut Vec<Msg>) -> Result<(), String> {
        let mut at = 0;
        loop {
            match decode(&self.inbuf[at..], self.max_frame) {
                Ok(Some((msg, used))) => {
                    msgs.push(msg);
                    at += used;
                }
                Ok(None) => break,
                Err(e) => {
                    self.failed = Some(format!("bad frame: {e}"));
                    return Err(format!("sent a bad frame: {e}"));
                }
            }
        }
        self.inbuf.drain(..at);
        Ok(())
    }
}
