//! Line forwarding of the ranks' stdout and stderr.
//!
//! Each rank stream has a [`LineForwarder`] that keeps the incomplete tail of what the rank
//! wrote and releases whole lines (prefixed with `[rank] ` under `--tag-output`). Whatever a
//! forwarder releases is written to mprun's stdout or stderr by one [`Sink::write`] that
//! writes all of it before anything else is written, so lines of different ranks never
//! interleave mid-line. A partial line is released at end of file, and when the rank has
//! added nothing to it for [`PARTIAL_AFTER`] (a prompt waiting for input, text streamed a
//! word at a time: what the rank wrote shows up, as on a terminal). A line longer than
//! [`MAX_PENDING`] is released in pieces so memory stays bounded. A line released in pieces
//! is tagged once, at its start.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// Longest incomplete line kept before it is released in pieces.
const MAX_PENDING: usize = 4 << 20;

/// How long an incomplete line waits for the rest of it before what there is is released.
/// Long next to the gaps inside one buffered write of a line; short to a person watching.
pub(crate) const PARTIAL_AFTER: Duration = Duration::from_millis(20);

/// Splits one rank stream into whole lines. A line ends at a newline, or at a carriage
/// return not followed by one: a progress line a rank redraws in place (`text\r`) is
/// released as it is written, and each redraw is tagged like a line.
#[derive(Debug)]
pub(crate) struct LineForwarder {
    /// `[rank] ` under `--tag-output`.
    prefix: Option<Vec<u8>>,
    /// Bytes after the last line end seen.
    pending: Vec<u8>,
    /// A piece of an overlong line was released: the rest of that line gets no prefix.
    mid_line: bool,
    /// The last byte released was a carriage return: a newline right after it ends that
    /// same line (`\r\n` split between two reads).
    after_cr: bool,
    /// When the rank last added to `pending` (none while it is empty).
    fed: Option<Instant>,
}

/// Where the last line of `data` ends: after its last newline or carriage return.
fn last_line_end(data: &[u8]) -> Option<usize> {
    data.iter().rposition(|b| *b == b'\n' || *b == b'\r').map(|i| i + 1)
}

impl LineForwarder {
    /// A forwarder for `rank`, tagging lines if `tag` is set.
    pub(crate) fn new(rank: usize, tag: bool) -> Self {
        let prefix = tag.then(|| format!("[{rank}] ").into_bytes());
        LineForwarder { prefix, pending: Vec::new(), mid_line: false, after_cr: false, fed: None }
    }

    /// Takes bytes the rank wrote; appends the lines now complete to `out`.
    pub(crate) fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        match last_line_end(data) {
            Some(end) => {
                let (lines, tail) = data.split_at(end);
                if self.pending.is_empty() {
                    self.emit(lines, out);
                } else {
                    let mut joined = std::mem::take(&mut self.pending);
                    joined.extend_from_slice(lines);
                    self.emit(&joined, out);
                }
                self.pending.extend_from_slice(tail);
            }
            None => self.pending.extend_from_slice(data),
        }
        self.fed = (!self.pending.is_empty()).then(Instant::now);
        if self.pending.len() >= MAX_PENDING {
            self.release(out);
        }
    }

    /// End of file: appends the incomplete last line, if any, to `out`.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        let pending = std::mem::take(&mut self.pending);
        self.fed = None;
        self.emit(&pending, out);
    }

    /// When the incomplete line, if there is one, is due to be released.
    pub(crate) fn partial_due(&self) -> Option<Instant> {
        self.fed.map(|at| at + PARTIAL_AFTER)
    }

    /// Appends the incomplete line to `out` if it is due by `now`: the rest of that line,
    /// when it comes, goes out untagged.
    pub(crate) fn release_due(&mut self, now: Instant, out: &mut Vec<u8>) {
        if self.partial_due().is_some_and(|due| due <= now) {
            self.release(out);
        }
    }

    /// Appends the incomplete line to `out`, as a piece of a line.
    fn release(&mut self, out: &mut Vec<u8>) {
        if !self.pending.is_empty() {
            self.finish(out);
            self.mid_line = true;
        }
    }

    fn emit(&mut self, mut text: &[u8], out: &mut Vec<u8>) {
        if self.after_cr && text.first() == Some(&b'\n') {
            out.push(b'\n');
            text = &text[1..];
        }
        while !text.is_empty() {
            // The end of the first line: a newline, or a carriage return not followed by one.
            let end = text
                .iter()
                .enumerate()
                .position(|(i, &b)| b == b'\n' || (b == b'\r' && text.get(i + 1) != Some(&b'\n')))
                .map_or(text.len(), |i| i + 1);
            let (line, rest) = text.split_at(end);
            if let (Some(prefix), false) = (&self.prefix, self.mid_line) {
                out.extend_from_slice(prefix);
            }
            out.extend_from_slice(line);
            self.mid_line = false;
            self.after_cr = line.last() == Some(&b'\r');
            text = rest;
        }
    }
}

/// mprun's stdout or stderr. A sink whose reader went away (EPIPE) drops what it is given.
#[derive(Debug)]
pub(crate) struct Sink<F> {
    fd: F,
    broken: bool,
}

impl<F: AsFd> Sink<F> {
    /// A sink writing to `fd`.
    pub(crate) fn new(fd: F) -> Self {
        Sink { fd, broken: false }
    }

    /// Writes all of `data`, waiting if the descriptor is nonblocking and full.
    pub(crate) fn write(&mut self, data: &[u8]) {
        if self.broken || data.is_empty() {
            return;
        }
        if write_all(self.fd.as_fd(), data).is_err() {
            self.broken = true;
        }
    }
}

/// Writes `data` with as few write calls as the descriptor allows.
fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// One line for mprun's own stderr: `mprun: <message>\n`, written at once.
pub(crate) fn say(message: &str) {
    let line = format!("mprun: {message}\n");
    let _ = write_all(io::stderr().as_fd(), line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(tag: bool, chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut f = LineForwarder::new(7, tag);
        let mut writes = Vec::new();
        for chunk in chunks {
            let mut out = Vec::new();
            f.feed(chunk, &mut out);
            writes.push(out);
        }
        let mut out = Vec::new();
        f.finish(&mut out);
        writes.push(out);
        writes
    }

    #[test]
    fn releases_whole_lines_only() {
        let w = run(false, &[b"ab", b"c\nde", b"f\ng\nh"]);
        assert_eq!(w, vec![b"".to_vec(), b"abc\n".to_vec(), b"def\ng\n".to_vec(), b"h".to_vec()]);
    }

    #[test]
    fn tags_every_line() {
        let w = run(true, &[b"a\n\nb", b"c\n", b"d"]);
        assert_eq!(w.concat(), b"[7] a\n[7] \n[7] bc\n[7] d".to_vec());
    }

    #[test]
    fn a_line_redrawn_in_place_is_released_at_each_carriage_return() {
        // A progress line: each redraw goes out as written, tagged; `\r\n` stays one line
        // end, also when a read splits it.
        let w = run(true, &[b"10%\r", b"20%\r50", b"%\rdone\r", b"\nnext\r\nlast"]);
        assert_eq!(
            w,
            vec![
                b"[7] 10%\r".to_vec(),
                b"[7] 20%\r".to_vec(),
                b"[7] 50%\r[7] done\r".to_vec(),
                b"\n[7] next\r\n".to_vec(),
                b"[7] last".to_vec(),
            ]
        );
        assert_eq!(run(false, &[b"a\rb\r\nc"]).concat(), b"a\rb\r\nc".to_vec());
    }

    #[test]
    fn a_partial_line_is_released_once_the_rank_pauses() {
        let mut f = LineForwarder::new(3, true);
        let mut out = Vec::new();
        f.feed(b"done\n> ", &mut out);
        assert_eq!(out, b"[3] done\n".to_vec());
        let due = f.partial_due().expect("a partial line waits");
        out.clear();
        f.release_due(due - Duration::from_millis(1), &mut out);
        assert!(out.is_empty(), "released before it was due");
        f.release_due(due, &mut out);
        assert_eq!(out, b"[3] > ".to_vec());
        assert_eq!(f.partial_due(), None, "nothing left to release");
        // The rest of that line is not tagged again; the next line is.
        out.clear();
        f.feed(b"Paris\nnext\n", &mut out);
        assert_eq!(out, b"Paris\n[3] next\n".to_vec());
        assert_eq!(f.partial_due(), None);
    }

    #[test]
    fn overlong_lines_are_released_in_pieces() {
        let big = vec![b'x'; MAX_PENDING];
        let mut f = LineForwarder::new(1, true);
        let mut out = Vec::new();
        f.feed(&big, &mut out);
        assert_eq!(out.len(), MAX_PENDING + 4);
        out.clear();
        f.feed(b"y\nz\n", &mut out);
        assert_eq!(out, b"y\n[1] z\n".to_vec());
    }
}
