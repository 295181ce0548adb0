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

/// Reaps one ended child. Without `block`, returns `None` at once if no child has ended;
/// with it, waits for one. `None` also when there are no children.
pub(crate) fn reap(block: bool) -> Option<(Pid, Exit)> {
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
