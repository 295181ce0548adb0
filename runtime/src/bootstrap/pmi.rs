//! PMI-1 client: the rank's side of the key-value service of its launcher.
//!
//! The launcher (mprun, or MPICH's hydra) passes a connected socket as `PMI_FD`; commands
//! and replies are lines of the PMI-1 wire protocol (wire.rs).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;

use super::wire::Command;
use crate::error::Error;

/// A connection to the launcher's PMI-1 server.
#[derive(Debug)]
pub(crate) struct Pmi {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    kvsname: String,
}

fn err(msg: impl Into<String>) -> Error {
    Error::Bootstrap(msg.into())
}

impl Pmi {
    /// Connects through `PMI_FD`; `None` if the variable is absent (not started by a launcher).
    pub(crate) fn from_env() -> Result<Option<Pmi>, Error> {
        let Ok(v) = std::env::var("PMI_FD") else {
            return Ok(None);
        };
        let fd: RawFd = v.trim().parse().map_err(|_| err(format!("PMI_FD={v} is not a file descriptor")))?;
        if fd < 0 || nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_err() {
            return Err(err(format!("PMI_FD={fd} is not an open file descriptor")));
        }
        // Only a socket can be the launcher's: never take ownership of some other open file
        // that happens to have the number (e.g. PMI_FD inherited by a rank's own child).
        let is_socket =
            nix::sys::stat::fstat(fd).map(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK).unwrap_or(false);
        if !is_socket {
            return Err(err(format!("PMI_FD={fd} is not a socket")));
        }
        // Keep the socket out of any program this rank starts.
        let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
        // SAFETY: the launcher handed this open descriptor to us alone (checked open above);
        // nothing else in the process uses it, so the stream may own and close it.
        let stream = unsafe { UnixStream::from_raw_fd(fd) };
        // Every PMI reply comes within this bound (MPR_PMI_TIMEOUT seconds, default 300), so
        // a hung launcher cannot hang the rank.
        let limit = crate::env::seconds("MPR_PMI_TIMEOUT").unwrap_or(std::time::Duration::from_secs(300));
        let _ = stream.set_read_timeout(Some(limit.max(std::time::Duration::from_millis(1))));
        let writer = stream.try_clone().map_err(|e| err(format!("PMI socket: {e}")))?;
        let mut pmi = Pmi { reader: BufReader::new(stream), writer, kvsname: String::new() };
        let r = pmi.call(Command::new("init").with("pmi_version", 1).with("pmi_subversion", 1), "response_to_init")?;
        if r.get("rc") != Some("0") {
            return Err(err(format!("PMI init refused: {}", r.encode().trim_end())));
        }
        let r = pmi.call(Command::new("get_my_kvsname"), "my_kvsname")?;
        pmi.kvsname = r.get("kvsname").ok_or_else(|| err("PMI gave no kvsname"))?.to_string();
        Ok(Some(pmi))
    }

    /// The key-value space of this job.
    pub(crate) fn kvsname(&self) -> &str {
        &self.kvsname
    }

    fn send(&mut self, c: &Command) -> Result<(), Error> {
        self.writer.write_all(c.encode().as_bytes()).map_err(|e| err(format!("lost the launcher's PMI service: {e}")))
    }

    fn recv(&mut self, expect: &str) -> Result<Command, Error> {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).map_err(|e| err(format!("PMI read: {e}")))?;
        if n == 0 {
            return Err(err("the launcher closed the PMI connection"));
        }
        let c = Command::parse(&line).map_err(|e| err(e.to_string()))?;
        if c.cmd != expect {
            return Err(err(format!("expected PMI reply {expect}, got {}", line.trim_end())));
        }
        Ok(c)
    }

    fn call(&mut self, c: Command, expect: &str) -> Result<Command, Error> {
        self.send(&c)?;
        self.recv(expect)
    }

    /// Publishes `key=value` (`PMI_KVS_Put`).
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let c = Command::new("put").with("kvsname", &self.kvsname).with("key", key).with("value", value);
        let r = self.call(c, "put_result")?;
        if r.get("rc") != Some("0") {
            return Err(err(format!("PMI put of {key} failed: {}", r.get("msg").unwrap_or("?"))));
        }
        Ok(())
    }

    /// Reads a key published by any rank before the last fence (`PMI_KVS_Get`).
    pub(crate) fn get(&mut self, key: &str) -> Result<String, Error> {
        let c = Command::new("get").with("kvsname", &self.kvsname).with("key", key);
        let r = self.call(c, "get_result")?;
        if r.get("rc") != Some("0") {
            return Err(err(format!("PMI get of {key} failed: {}", r.get("msg").unwrap_or("?"))));
        }
        Ok(r.get("value").unwrap_or("").to_string())
    }

    /// Fence: returns when every rank has entered (`PMI_Barrier`).
    pub(crate) fn barrier(&mut self) -> Result<(), Error> {
        self.call(Command::new("barrier_in"), "barrier_out").map(|_| ())
    }

    /// Says goodbye (`PMI_Finalize`).
    pub(crate) fn finalize(&mut self) -> Result<(), Error> {
        self.call(Command::new("finalize"), "finalize_ack").map(|_| ())
    }

    /// Asks the launcher to end the job with `code` (`PMI_Abort`).
    pub(crate) fn abort(&mut self, code: i32, msg: &str) {
        let msg: String = msg.chars().map(|c| if c.is_whitespace() { '_' } else { c }).collect();
        let _ = self.send(&Command::new("abort").with("exitcode", code).with("msg", msg));
    }
}
