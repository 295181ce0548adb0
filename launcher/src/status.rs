//! How a rank ended, and reaping ended ranks.

use std::fmt;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal (this number) killed it.
    Signal(i32),
}

impl Exit {
    /// Whether this is success (exit code 0).
    pub(crate) fn success(self) -> bool {
        self == Exit::Code(0)
    }

    /// The exit code a shell would report: the code, or 128 + the signal number.
    pub(crate) fn shell_code(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exited with code {c}"),
            Exit::Signal(s) => write!(f, "was killed by signal {}", signal_name(*s)),
        }
    }
}

/// `SIGKILL` for 9, `signal 40` for a number without a name.
pub(crate) fn signal_name(signal: i32) -> String {
    match Signal::try_from(signal) {
        Ok(s) => s.as_str().to_string(),
        Err(_) => format!("signal {signal}"),
    }
}

/// Reaps every child that has ended, those killed by a signal first. A rank killed by a
/// signal is most often why its peers failed soon after it (its connections reset under
/// them), and when both have ended by the time mprun looks, the order the system returns them
/// in says nothing: the first failure named must be the death, not its echo.
pub(crate) fn reap_all() -> Vec<(Pid, Exit)> {
    let mut ended: Vec<(Pid, Exit)> = std::iter::from_fn(|| reap(false)).collect();
    ended.sort_by_key(|(_, exit)| !matches!(exit, Exit::Signal(_)));
    ended
}

/// Reaps one ended child. Without `block`, returns `None` at once if no child has ended;
/// with it, waits for one. `None` also when there are no children.
///
/// Every child mprun or a proxy starts leads a process group of its own (ranks and launcher
/// commands). What a child left running in its group is killed when the child is reaped, and
/// only then: on Linux the child is first seen ended but left a zombie (`waitid` with
/// `WNOWAIT`), which keeps its pid, and so its group's id, from being given to any other
/// process while the group is signalled; then it is reaped. Nothing ever signals the group of
/// a child already reaped, whose id may belong to someone else by then. Where `WNOWAIT` is
/// not used (other systems), a child's leftovers are not killed.
pub(crate) fn reap(block: bool) -> Option<(Pid, Exit)> {
    #[cfg(target_os = "linux")]
    {
        let (pid, exit) = ended(block)?;
        // The zombie holds the id: the group is the child's.
        let _ = nix::sys::signal::killpg(pid, Signal::SIGKILL);
        release(pid);
        Some((pid, exit))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let flags = if block { 0 } else { libc::WNOHANG };
        loop {
            let mut status = 0;
            // SAFETY: waitpid only writes the status to the valid local `status`.
            let pid = unsafe { libc::waitpid(-1, &mut status, flags) };
            if pid > 0 {
                let exit = if libc::WIFSIGNALED(status) {
                    Exit::Signal(libc::WTERMSIG(status))
                } else {
                    Exit::Code(libc::WEXITSTATUS(status))
                };
                return Some((Pid::from_raw(pid), exit));
            }
            if pid < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
    }
}

/// The next child that ended, left a zombie (not reaped).
#[cfg(target_os = "linux")]
fn ended(block: bool) -> Option<(Pid, Exit)> {
    let flags = libc::WEXITED | libc::WNOWAIT | if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value of this plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid only writes into the valid local `info`.
        let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) };
        if r == 0 {
            // SAFETY: waitid filled `info` for a child state change (SIGCHLD layout); with
            // WNOHANG and nothing ended, it left the pid zero.
            let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
            if pid == 0 {
                return None;
            }
            let exit = if info.si_code == libc::CLD_EXITED { Exit::Code(status) } else { Exit::Signal(status) };
            return Some((Pid::from_raw(pid), exit));
        }
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

/// Reaps `pid`, which [`ended`] saw ended.
#[cfg(target_os = "linux")]
fn release(pid: Pid) {
    loop {
        match nix::sys::wait::waitpid(pid, None) {
            Err(nix::errno::Errno::EINTR) => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_exits() {
        assert_eq!(Exit::Code(3).to_string(), "exited with code 3");
        assert_eq!(Exit::Signal(9).to_string(), "was killed by signal SIGKILL");
        assert_eq!(Exit::Signal(9).shell_code(), 137);
        assert!(Exit::Code(0).success() && !Exit::Signal(15).success());
    }
}
