//! Why a job is stopped early: what mprun says about it and the exit code it returns.

use nix::unistd::Pid;

use crate::status::{signal_name, Exit};

/// Exit code when the time limit is exceeded (as timeout(1) uses).
pub(crate) const TIMEOUT_EXIT: i32 = 124;

/// The first reason the job is stopped; later ones are not reported.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cause {
    /// A rank exited non-zero or was killed by a signal.
    RankFailed {
        /// The rank.
        rank: usize,
        /// Its pid.
        pid: Pid,
        /// Its host, in a job of several hosts.
        host: Option<String>,
        /// How it ended.
        exit: Exit,
    },
    /// A rank exited with code 0 after starting MPI and before finalizing it.
    LeftUnfinalized {
        /// The rank.
        rank: usize,
        /// Its pid.
        pid: Pid,
        /// Its host, in a job of several hosts.
        host: Option<String>,
    },
    /// A rank called PMI abort.
    Abort {
        /// The rank.
        rank: usize,
        /// Its pid.
        pid: Pid,
        /// Its host, in a job of several hosts.
        host: Option<String>,
        /// The exit code it asked for, if valid.
        code: Option<i32>,
        /// Its message, if any.
        msg: Option<String>,
    },
    /// mprun received SIGINT, SIGTERM or SIGHUP (this number).
    Signal(i32),
    /// The job ran longer than `--timeout` (this many seconds).
    Timeout(f64),
    /// A rank could not be started.
    SpawnFailed {
        /// The rank.
        rank: usize,
        /// Its host, in a job of several hosts.
        host: Option<String>,
        /// Why.
        error: String,
        /// 127 if the program vanished, 126 if it cannot be executed, else 1.
        code: i32,
    },
    /// A host's proxy could not be started or did not connect back in time.
    HostStart {
        /// The host as the user named it.
        host: String,
        /// What went wrong.
        why: String,
    },
    /// A host's proxy died, or its connection broke or went silent.
    HostLost {
        /// The host as the user named it.
        host: String,
        /// What went wrong.
        why: String,
    },
    /// mprun's own event loop failed.
    Internal(String),
}

/// `rank R (pid P)`, or `rank R (pid P on host H)`.
fn who(rank: usize, pid: Pid, host: &Option<String>) -> String {
    match host {
        Some(h) => format!("rank {rank} (pid {pid} on host {h})"),
        None => format!("rank {rank} (pid {pid})"),
    }
}

impl Cause {
    /// The line mprun prints (without `mprun: `).
    pub(crate) fn message(&self) -> String {
        let what = match self {
            Cause::RankFailed { rank, pid, host, exit } => format!("{} {exit}", who(*rank, *pid, host)),
            Cause::LeftUnfinalized { rank, pid, host } => {
                format!("{} exited with code 0 without finalizing MPI", who(*rank, *pid, host))
            }
            Cause::Abort { rank, pid, host, code, msg } => {
                let code = code.map_or_else(|| "?".to_string(), |c| c.to_string());
                let msg = msg.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
                format!("{} aborted the job with code {code}{msg}", who(*rank, *pid, host))
            }
            Cause::Signal(s) => format!("received {}", signal_name(*s)),
            Cause::Timeout(secs) => format!("job exceeded the time limit of {secs} s"),
            Cause::SpawnFailed { rank, host: None, error, .. } => {
                format!("rank {rank} could not be started: {error}")
            }
            Cause::SpawnFailed { rank, host: Some(host), error, .. } => {
                format!("rank {rank} could not be started on host {host}: {error}")
            }
            Cause::HostStart { host, why } => format!("host {host}: cannot start its proxy: {why}"),
            Cause::HostLost { host, why } => format!("host {host}: {why}"),
            Cause::Internal(error) => format!("internal error: {error}"),
        };
        format!("{what}; stopping the job")
    }

    /// mprun's exit code.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Cause::RankFailed { exit, .. } => exit.shell_code(),
            // An abort is a failure even if it asks for 0; codes a process cannot exit
            // with become 1.
            Cause::Abort { code, .. } => code.filter(|c| (1..=255).contains(c)).unwrap_or(1),
            Cause::Signal(s) => 128 + s,
            Cause::Timeout(_) => TIMEOUT_EXIT,
            Cause::SpawnFailed { code, .. } => *code,
            Cause::HostStart { .. } | Cause::HostLost { .. } | Cause::Internal(_) | Cause::LeftUnfinalized { .. } => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_codes() {
        let pid = Pid::from_raw(1234);
        let c = Cause::RankFailed { rank: 1, pid, host: None, exit: Exit::Code(3) };
        assert_eq!(c.message(), "rank 1 (pid 1234) exited with code 3; stopping the job");
        assert_eq!(c.exit_code(), 3);
        let c = Cause::RankFailed { rank: 0, pid, host: None, exit: Exit::Signal(9) };
        assert_eq!(c.message(), "rank 0 (pid 1234) was killed by signal SIGKILL; stopping the job");
        assert_eq!(c.exit_code(), 137);
        assert_eq!(Cause::Signal(2).message(), "received SIGINT; stopping the job");
        assert_eq!(Cause::Signal(15).exit_code(), 143);
        assert_eq!(Cause::Timeout(1.0).message(), "job exceeded the time limit of 1 s; stopping the job");
        assert_eq!(Cause::Timeout(0.5).exit_code(), 124);
        let abort = |code| Cause::Abort { rank: 2, pid, host: None, code, msg: Some("bad".into()) };
        assert_eq!(abort(Some(7)).message(), "rank 2 (pid 1234) aborted the job with code 7: bad; stopping the job");
        assert_eq!(abort(Some(7)).exit_code(), 7);
        assert_eq!(abort(Some(0)).exit_code(), 1);
        assert_eq!(abort(None).exit_code(), 1);
        let c = Cause::RankFailed { rank: 3, pid, host: Some("n2".into()), exit: Exit::Code(4) };
        assert_eq!(c.message(), "rank 3 (pid 1234 on host n2) exited with code 4; stopping the job");
        let c = Cause::HostLost { host: "n2".into(), why: "lost its proxy".into() };
        assert_eq!((c.message().as_str(), c.exit_code()), ("host n2: lost its proxy; stopping the job", 1));
        let c = Cause::HostStart { host: "n3".into(), why: "x".into() };
        assert_eq!(c.message(), "host n3: cannot start its proxy: x; stopping the job");
    }
}
