//! Starting one rank.
//!
//! A rank is PROGRAM with the job's environment, its own process group (so a signal to the
//! rank reaches everything it started), stdout and stderr on pipes read by its parent (mprun
//! or the host's proxy), stdin on a pipe fed with mprun's stdin for rank 0 and `/dev/null`
//! for the others, and one end of a socket pair on which it speaks PMI-1 to its parent
//! (`PMI_FD`). On Linux a rank is killed if its parent dies, and a bound rank gets its CPU
//! affinity (`bind`) in the child before exec; `MPR_BINDING` says what it is bound to.
//!
//! Every descriptor the parent holds is close-on-exec, so a rank inherits only its own ends.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::unistd::{getpid, setpgid, Pid};

use crate::bind::Binding;

/// What every rank of one host runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Program<'a> {
    /// The resolved program to execute.
    pub(crate) path: &'a Path,
    /// `argv[0]`: the program as the user wrote it.
    pub(crate) argv0: &'a OsStr,
    /// Its arguments.
    pub(crate) args: &'a [OsString],
    /// Environment added to the inherited one, in order (later entries win).
    pub(crate) env: &'a [(OsString, OsString)],
    /// Working directory, if not the current one.
    pub(crate) cwd: Option<&'a Path>,
}

/// Where a rank sits in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Its rank.
    pub(crate) rank: usize,
    /// The number of ranks in the job.
    pub(crate) size: usize,
    /// Its index among the ranks of its host.
    pub(crate) local_rank: usize,
    /// The number of ranks on its host.
    pub(crate) local_size: usize,
}

/// What a rank reads on stdin.
#[derive(Debug)]
pub(crate) enum RankStdin {
    /// `/dev/null`.
    Null,
    /// The read end of a pipe fed by mprun (or the proxy).
    Pipe(OwnedFd),
}

/// A started rank: its pid (also its process group id) and the parent's ends of its pipes
/// and PMI socket, all nonblocking.
#[derive(Debug)]
pub(crate) struct Spawned {
    /// The rank's pid and process group id.
    pub(crate) pid: Pid,
    /// Read end of the rank's stdout.
    pub(crate) stdout: File,
    /// Read end of the rank's stderr.
    pub(crate) stderr: File,
    /// The parent's end of the rank's PMI socket.
    pub(crate) pmi: UnixStream,
}

/// Starts one rank of `program` at `slot`, bound as `binding` says.
pub(crate) fn spawn(program: &Program<'_>, slot: Slot, binding: &Binding, stdin: RankStdin) -> io::Result<Spawned> {
    // Built here: the child may only make async-signal-safe calls.
    #[cfg(target_os = "linux")]
    let cpus = binding.cpu_set()?;
    #[cfg(not(target_os = "linux"))]
    let cpus = ();
    // Both ends are close-on-exec (std sets it on every platform).
    let (ours, theirs) = UnixStream::pair()?;
    let theirs = above_stdio(OwnedFd::from(theirs))?;
    let pmi_fd = theirs.as_raw_fd();
    let size = slot.size.to_string();
    let rank = slot.rank.to_string();

    let parent = getpid();
    let mut command = Command::new(program.path);
    command
        .arg0(program.argv0)
        .args(program.args)
        .envs(program.env.iter().map(|(k, v)| (k, v)))
        .env("MPR_RANK", &rank)
        .env("MPR_SIZE", &size)
        .env("MPR_LOCAL_RANK", slot.local_rank.to_string())
        .env("MPR_LOCAL_SIZE", slot.local_size.to_string())
        .env("PMI_FD", pmi_fd.to_string())
        .env("PMI_RANK", &rank)
        .env("PMI_SIZE", &size)
        .env("MPR_BINDING", binding.env_value())
        // The process every rank of this host descends from: ranks name it as their ptracer,
        // so that they may read each other's memory under Yama (single copy).
        .env("MPR_PTRACER", parent.as_raw().to_string())
        .stdin(match stdin {
            RankStdin::Null => Stdio::null(),
            RankStdin::Pipe(fd) => Stdio::from(fd),
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = program.cwd {
        command.current_dir(dir);
    }
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe system calls (setpgid, prctl, getppid, sched_setaffinity, fcntl,
    // _exit); it does not allocate or take locks (the CPU set was built before fork).
    unsafe {
        command.pre_exec(move || in_child(pmi_fd, parent, &cpus));
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

/// The exit code a shell would give for a program that cannot be started with `e`.
pub(crate) fn spawn_error_code(e: &io::Error) -> i32 {
    match e.kind() {
        io::ErrorKind::NotFound => 127,
        io::ErrorKind::PermissionDenied => 126,
        _ if e.raw_os_error() == Some(libc::ENOEXEC) => 126,
        _ => 1,
    }
}

/// The CPU set a rank is bound to, if any (Linux); nothing elsewhere.
#[cfg(target_os = "linux")]
type CpuMask = Option<nix::sched::CpuSet>;
#[cfg(not(target_os = "linux"))]
type CpuMask = ();

/// Runs in the child between fork and exec.
fn in_child(pmi_fd: RawFd, parent: Pid, cpus: &CpuMask) -> io::Result<()> {
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
        if let Some(set) = cpus {
            nix::sched::sched_setaffinity(Pid::from_raw(0), set)?;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (parent, cpus);
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

/// Sets O_NONBLOCK on `fd`.
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}
