//! Starting a remote host's proxy: its command line, and the launcher command around it.
//!
//! The proxy is `mprun --proxy --connect IP:PORT --host-index K --host NAME --host-timeout-ms
//! T`, at the path of the running mprun (as hydra assumes, mprun must be at the same path on
//! every host). The launcher command runs it on the host:
//!
//! - `ssh` (default): `ssh -o BatchMode=yes -T -x HOST 'quoted proxy command'` (ssh hands the
//!   command to the remote shell, so every word is quoted);
//! - `srun` (the default inside a Slurm allocation): `srun --nodes=1 --ntasks=1
//!   --nodelist=HOST --overlap --whole --mpi=none --kill-on-bad-exit=1 proxy-words...`, a job
//!   step of one task on that node that may use all of the allocation's CPUs there (the
//!   ranks the proxy starts share its step) and overlaps other steps (two mprun jobs in one
//!   allocation);
//! - `--launcher-exec CMD`: `CMD HOST proxy-words...` (hydra's way; `ip netns exec` is one);
//! - `--launcher fork`: the proxy words alone, on this machine.
//!
//! The job secret is never on a command line: it is written to the launcher's stdin, and the
//! proxy reads it as its first line. The launcher runs in its own process group (a Ctrl-C at
//! the terminal goes to mprun, which stops the job in order) and gets SIGTERM if mprun dies.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::unistd::{getpid, setpgid, Pid};

/// How a remote host's proxy is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Launcher {
    /// `ssh -o BatchMode=yes HOST ...`.
    Ssh,
    /// A one-task Slurm job step on the host, inside mprun's allocation.
    Srun,
    /// On this machine, directly (hosts are only names; useful for tests).
    Fork,
    /// `CMD... HOST proxy-words...`.
    Exec(Vec<OsString>),
}

/// The proxy's command-line arguments (after `--proxy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProxyArgs {
    /// mprun's control listener.
    pub(crate) connect: SocketAddr,
    /// The host's index in mprun's list (proven in `Hello`).
    pub(crate) host_index: u32,
    /// The host's name, for messages.
    pub(crate) host: String,
    /// The bound on connecting, proving and silence.
    pub(crate) timeout: Duration,
}

impl ProxyArgs {
    /// The full proxy command: `exe --proxy ...`.
    pub(crate) fn command(&self, exe: &OsStr) -> Vec<OsString> {
        let mut words: Vec<OsString> = vec![exe.into(), "--proxy".into()];
        for (k, v) in [
            ("--connect", self.connect.to_string()),
            ("--host-index", self.host_index.to_string()),
            ("--host", self.host.clone()),
            ("--host-timeout-ms", self.timeout.as_millis().to_string()),
        ] {
            words.push(k.into());
            words.push(v.into());
        }
        words
    }

    /// Parses the words after `--proxy`.
    pub(crate) fn parse(words: &[OsString]) -> Result<ProxyArgs, String> {
        let (mut connect, mut host_index, mut host, mut timeout) = (None, None, None, None);
        let mut it = words.iter().map(|w| w.to_string_lossy());
        while let Some(key) = it.next() {
            let value = it.next().ok_or_else(|| format!("--proxy: {key} needs a value"))?;
            let bad = || format!("--proxy: bad value '{value}' for {key}");
            match key.as_ref() {
                "--connect" => connect = Some(value.parse().map_err(|_| bad())?),
                "--host-index" => host_index = Some(value.parse().map_err(|_| bad())?),
                "--host" => host = Some(value.to_string()),
                "--host-timeout-ms" => timeout = Some(Duration::from_millis(value.parse().map_err(|_| bad())?)),
                _ => return Err(format!("--proxy: unknown argument '{key}'")),
            }
        }
        match (connect, host_index, host, timeout) {
            (Some(connect), Some(host_index), Some(host), Some(timeout)) => {
                Ok(ProxyArgs { connect, host_index, host, timeout })
            }
            _ => Err("--proxy: needs --connect, --host-index, --host and --host-timeout-ms".into()),
        }
    }
}

/// The launcher command line that runs `proxy` on `host`.
pub(crate) fn command_line(launcher: &Launcher, host: &str, proxy: Vec<OsString>) -> Vec<OsString> {
    match launcher {
        Launcher::Fork => proxy,
        Launcher::Exec(cmd) => {
            let mut words = cmd.clone();
            words.push(host.into());
            words.extend(proxy);
            words
        }
        Launcher::Srun => {
            let nodelist = format!("--nodelist={host}");
            let fixed = ["--nodes=1", "--ntasks=1", &nodelist, "--overlap", "--whole", "--mpi=none"];
            let mut words: Vec<OsString> = std::iter::once("srun")
                .chain(fixed)
                .chain(["--kill-on-bad-exit=1", "--job-name=mprun-proxy"])
                .map(OsString::from)
                .collect();
            words.extend(proxy);
            words
        }
        Launcher::Ssh => {
            let remote: Vec<String> = proxy.iter().map(|w| shell_quote(w)).collect();
            ["ssh", "-o", "BatchMode=yes", "-T", "-x", host, &remote.join(" ")].iter().map(OsString::from).collect()
        }
    }
}

/// `word` quoted for a POSIX shell.
fn shell_quote(word: &OsStr) -> String {
    let text = String::from_utf8_lossy(word.as_bytes());
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Runs `argv` in its own process group with the secret on its stdin; returns its pid.
pub(crate) fn spawn(argv: &[OsString], secret: &str) -> io::Result<Pid> {
    let (program, args) = argv.split_first().ok_or_else(|| io::Error::other("empty launcher command"))?;
    // The launcher's stdout goes to mprun's stderr: mprun's stdout carries only rank output.
    let stdout = Stdio::from(io::stderr().as_fd().try_clone_to_owned()?);
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::piped()).stdout(stdout).stderr(Stdio::inherit());
    let parent = getpid();
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe system calls (setpgid, prctl, getppid, _exit); it does not allocate.
    unsafe {
        command.pre_exec(move || {
            setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
            #[cfg(target_os = "linux")]
            {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)?;
                if nix::unistd::getppid() != parent {
                    // SAFETY: _exit ends the forked child at once; it is async-signal-safe.
                    libc::_exit(1);
                }
            }
            #[cfg(not(target_os = "linux"))]
            let _ = parent;
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        // A launcher that exits at once closes the pipe: its exit is what mprun reports.
        let _ = stdin.write_all(format!("{secret}\n").as_bytes());
    }
    Ok(Pid::from_raw(child.id() as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ProxyArgs {
        ProxyArgs {
            connect: "10.0.0.1:4000".parse().unwrap(),
            host_index: 2,
            host: "node3".into(),
            timeout: Duration::from_millis(2500),
        }
    }

    #[test]
    fn proxy_arguments_round_trip() {
        let words = args().command(OsStr::new("/opt/mpr/bin/mprun"));
        assert_eq!(words[..2], [OsString::from("/opt/mpr/bin/mprun"), "--proxy".into()]);
        assert_eq!(ProxyArgs::parse(&words[2..]).unwrap(), args());
        assert!(ProxyArgs::parse(&["--connect".into()]).is_err());
        assert!(ProxyArgs::parse(&["--bogus".into(), "1".into()]).is_err());
        assert!(ProxyArgs::parse(&words[2..6]).is_err(), "missing arguments");
    }

    #[test]
    fn launcher_command_lines() {
        let proxy: Vec<OsString> = vec!["/x y/mprun".into(), "--proxy".into(), "it's".into()];
        assert_eq!(command_line(&Launcher::Fork, "h", proxy.clone()), proxy);
        let exec = Launcher::Exec(vec!["/t/netns".into(), "-v".into()]);
        let words = command_line(&exec, "h", proxy.clone());
        assert_eq!(words, ["/t/netns", "-v", "h", "/x y/mprun", "--proxy", "it's"].map(OsString::from));
        let words = command_line(&Launcher::Ssh, "node1", proxy);
        let want = ["ssh", "-o", "BatchMode=yes", "-T", "-x", "node1", r"'/x y/mprun' '--proxy' 'it'\''s'"];
        assert_eq!(words, want.map(OsString::from));
    }
}
