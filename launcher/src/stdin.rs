//! Forwarding mprun's stdin to rank 0, wherever it runs, as hydra does.
//!
//! A thread copies mprun's stdin into a pipe with blocking reads and writes, so mprun never
//! changes the mode of a descriptor it shares with its shell (a terminal, say), and works
//! the same whether stdin is a terminal, a pipe or a file. End of file closes the pipe. If
//! rank 0 runs here, the pipe's read end is its stdin; otherwise the event loop reads the
//! pipe and sends the bytes to rank 0's proxy. The thread ends when stdin ends or nobody
//! reads the pipe any more; a thread still blocked on a terminal ends with mprun. When mprun
//! runs in the background of a terminal, reading it would stop mprun (SIGTTIN), so stdin is
//! not forwarded (rank 0 reads `/dev/null`), as Open MPI does.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;

/// Starts copying mprun's stdin into a new pipe; returns the pipe's read end, or `None` if
/// mprun is in the background of its terminal.
pub(crate) fn forward() -> io::Result<Option<OwnedFd>> {
    if in_background() {
        return Ok(None);
    }
    // std's pipe: close-on-exec on every OS (`pipe2` is Linux's and the BSDs', not macOS's).
    let (read_end, write_end) = std::io::pipe().map(|(r, w)| (OwnedFd::from(r), OwnedFd::from(w)))?;
    std::thread::Builder::new().name("mprun-stdin".into()).spawn(move || copy(File::from(write_end)))?;
    Ok(Some(read_end))
}

/// Whether stdin is a terminal whose foreground process group is not mprun's.
fn in_background() -> bool {
    match nix::unistd::tcgetpgrp(io::stdin()) {
        Ok(foreground) => foreground != nix::unistd::getpgrp(),
        Err(_) => false,
    }
}

fn copy(mut pipe: File) {
    let stdin = io::stdin();
    let fd = stdin.as_raw_fd();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match nix::unistd::read(fd, &mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(_) => return,
        };
        if pipe.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}
