//! Starting one rank.
//!
//! A rank is PROGRAM with the job's environment, its own process group (so a signal to the
//! rank reaches everything it started), stdout and stderr on pipes read by mprun, stdin from
//! mprun for rank 0 and `/dev/null` for the others, and one end of a socket pair on which it
//! speaks PMI-1 to mprun (`PMI_FD`). On Linux a rank is killed if mprun dies.
//!
//! Every descriptor mprun holds is close-on-exec, so a rank inherits only its own ends.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::unistd::{getpid, setpgid, Pid};

use crate::cli::Options;
use crate::ids::JobIds;

/// What every rank of the job shares.
#[derive(Debug)]
pub(crate) struct Launch<'a> {
    /// The resolved program to execute.
    pub(crate) program: &'a Path,
    /// The command line.
    pub(crate) opts: &'a Options,
    /// The job's identity.
    pub(crate) ids: &'a JobIds,
}

/// A started rank: its pid (also its process group id) and mprun's ends of its pipes and
/// PMI socket, all nonblocking.
#[derive(Debug)]
pub(crate) struct Spawned {
    /// The rank's pid and process group id.
    pub(crate) pid: Pid,
    /// Read end of the rank's stdout.
    pub(crate) stdout: File,
    /// Read end of the rank's stderr.
    pub(crate) stderr: File,
    /// mprun's end of the rank's PMI socket.
    pub(crate) pmi: UnixStream,
}

impl Launch<'_> {
    /// Starts rank `rank`.
    pub(crate) fn spawn(&self, rank: usize) -> io::Result<Spawned> {
        // Both ends are close-on-exec (std sets it on every platform).
        let (ours, theirs) = UnixStream::pair()?;
        let theirs = above_stdio(OwnedFd::from(theirs))?;
        let pmi_fd = theirs.as_raw_fd();
        let np = self.opts.np.to_string();
        let rank_text = rank.to_string();

        let mut command = Command::new(self.program);
        command
            .arg0(&self.opts.program)
            .args(&self.opts.args)
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .env("MPR_RANK", &rank_text)
            .env("MPR_SIZE", &np)
            .env("MPR_LOCAL_RANK", &rank_text)
            .env("MPR_LOCAL_SIZE", &np)
            .env("MPR_JOBID", &self.ids.jobid)
            .env("MPR_SECRET", &self.ids.secret)
            .env("PMI_FD", pmi_fd.to_string())
            .env("PMI_RANK", &rank_text)
            .env("PMI_SIZE", &np)
            .stdin(if rank == 0 { Stdio::inherit() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let parent = getpid();
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe system calls (setpgid, prctl, getppid, fcntl, _exit); it does
        // not allocate or take locks.
        unsafe {
            command.pre_exec(move || in_child(pmi_fd, parent));
        }
        let mut child = command.spawn()?;
        drop(theirs);

        let pid = Pid::from_raw(child.id() as i32);
        let stdout = File::from(OwnedFd::from(child.stdout.take().expect("stdout is piped")));
        let stderr = File::from(OwnedFd::from(child.stderr.take().expect("stderr is piped")));
        set_nonblocking(stdout.as_raw_fd())?;
        set_nonblocking(stderr.as_raw_fd())?;
        ours.set_nonblocking(true)?;
        Ok(Spawned { pid, stdout, stderr, pmi: ours })
    }
}

/// Runs in the child between fork and exec.
fn in_child(pmi_fd: RawFd, parent: Pid) -> io::Result<()> {
    setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
        // mprun may have died before the line above: then nobody will ever kill us.
        if nix::unistd::getppid() != parent {
            // SAFETY: _exit ends the forked child at once, without running anything of the
            // parent's (no destructors, no atexit handlers); it is async-signal-safe.
            unsafe { libc::_exit(1) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    fcntl(pmi_fd, FcntlArg::F_SETFD(FdFlag::empty()))?;
    Ok(())
}

/// Moves `fd` to a number above 2 if it is not already, so it cannot collide with the
/// rank's stdin, stdout or stderr (possible only if mprun started with one of them closed).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    let moved = fcntl(fd.as_raw_fd(), FcntlArg::F_DUPFD_CLOEXEC(3))?;
    // SAFETY: fcntl just returned `moved` as a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}
