//! Queue pairs and memory regions counted per device across every process of a host, as
//! Apple's driver counts them: about 10 queue pairs and 100 regions per `rdma_enN`, whichever
//! process opened it (TN3205). A soft device on an interface (the Thunderbolt model) keeps
//! its share in a small file in `/dev/shm` named after the host's network namespace and the
//! interface: one line per open device, `PID NONCE QPS MRS`. Every change takes the file's
//! lock, drops the lines of processes that are gone (a killed rank frees its share, as the
//! driver frees a dead process's objects), checks the host-wide total against the device's
//! limit, and writes the file back. The last device to leave removes the file.
//!
//! A soft device without an interface (one per rank, over loopback) stands for a Mac of its
//! own, and keeps the per-process count of `mod.rs`.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};

use super::super::provider::VerbsError;

/// One device's share of a host-wide count.
#[derive(Debug)]
pub(super) struct HostShare {
    path: PathBuf,
    pid: u32,
    nonce: u64,
    /// What this device holds.
    qps: usize,
    mrs: usize,
    /// The most queue pairs the host had open at once, as seen by this device's changes.
    pub(super) peak_qps: usize,
}

/// The host-wide totals of a device's file: queue pairs and regions.
type Totals = (usize, usize);

impl HostShare {
    /// The share of the device on `iface` in this network namespace.
    pub(super) fn join(iface: &str, nonce: u64) -> Result<HostShare, VerbsError> {
        let ns = std::fs::read_link("/proc/self/ns/net")
            .map(|p| p.to_string_lossy().chars().filter(char::is_ascii_digit).collect::<String>())
            .unwrap_or_default();
        let name: String = iface.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let share = HostShare {
            path: PathBuf::from(format!("/dev/shm/mpr-soft-device-{ns}-{name}")),
            pid: std::process::id(),
            nonce,
            qps: 0,
            mrs: 0,
            peak_qps: 0,
        };
        sweep(&share.path);
        share.change(0, 0, usize::MAX, usize::MAX)?;
        Ok(share)
    }

    /// Adds `dq` queue pairs and `dm` regions to this device's share if the host's totals
    /// stay within `max_qp` and `max_mr`; the totals after.
    pub(super) fn add(&mut self, dq: isize, dm: isize, max_qp: usize, max_mr: usize) -> Result<Totals, VerbsError> {
        let totals = self.change(dq, dm, max_qp, max_mr)?;
        self.qps = self.qps.saturating_add_signed(dq);
        self.mrs = self.mrs.saturating_add_signed(dm);
        self.peak_qps = self.peak_qps.max(totals.0);
        Ok(totals)
    }

    /// Under the file's lock: drops dead processes' lines, applies the change to this
    /// device's line (created if missing), checks the limits and writes the file.
    fn change(&self, dq: isize, dm: isize, max_qp: usize, max_mr: usize) -> Result<Totals, VerbsError> {
        let io = |what: &str, e: std::io::Error| {
            VerbsError::Device(format!("host-wide device count {}: {what}: {e}", self.path.display()))
        };
        let mut file = loop {
            let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&self.path);
            let f = f.map_err(|e| io("open", e))?;
            let locked = Flock::lock(f, FlockArg::LockExclusive).map_err(|(_, e)| io("lock", e.into()))?;
            // The last device to leave may have removed the file meanwhile: then the lock is
            // on a file nobody else sees, and the path must be opened again.
            let same = match (locked.metadata(), std::fs::metadata(&self.path)) {
                (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                _ => false,
            };
            if same {
                break locked;
            }
        };
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(|e| io("read", e))?;
        let mut lines: Vec<Line> =
            parse(&text).into_iter().filter(|&(pid, ..)| pid == self.pid || alive(pid)).collect();
        let mine = match lines.iter().position(|l| l.0 == self.pid && l.1 == self.nonce) {
            Some(i) => i,
            None => {
                lines.push((self.pid, self.nonce, 0, 0));
                lines.len() - 1
            }
        };
        let (q, m) = (lines[mine].2.saturating_add_signed(dq), lines[mine].3.saturating_add_signed(dm));
        let others = |f: fn(&Line) -> usize| {
            lines.iter().enumerate().filter(|(i, _)| *i != mine).map(|(_, l)| f(l)).sum::<usize>()
        };
        let totals = (others(|l| l.2) + q, others(|l| l.3) + m);
        if dq > 0 && totals.0 > max_qp {
            return Err(VerbsError::Limit("queue pairs (counted across the host's processes)"));
        }
        if dm > 0 && totals.1 > max_mr {
            return Err(VerbsError::Limit("memory regions (counted across the host's processes)"));
        }
        (lines[mine].2, lines[mine].3) = (q, m);
        let body: String = lines.iter().map(|(p, n, q, m)| format!("{p} {n} {q} {m}\n")).collect();
        file.set_len(0).map_err(|e| io("truncate", e))?;
        file.seek(SeekFrom::Start(0)).map_err(|e| io("seek", e))?;
        file.write_all(body.as_bytes()).map_err(|e| io("write", e))?;
        Ok(totals)
    }

    /// Leaves the count: this device's line goes; the file too if it was the last.
    fn leave(&self) -> std::io::Result<()> {
        let f = OpenOptions::new().read(true).write(true).open(&self.path)?;
        let mut file = Flock::lock(f, FlockArg::LockExclusive).map_err(|(_, e)| std::io::Error::from(e))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let rest: String = parse(&text)
            .into_iter()
            .filter(|&(pid, nonce, ..)| !(pid == self.pid && nonce == self.nonce) && alive(pid))
            .map(|(p, n, q, m)| format!("{p} {n} {q} {m}\n"))
            .collect();
        if rest.is_empty() {
            std::fs::remove_file(&self.path)?;
        } else {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(rest.as_bytes())?;
        }
        Ok(())
    }
}

impl Drop for HostShare {
    fn drop(&mut self) {
        let _ = self.leave();
    }
}

/// Removes the count files of other devices whose every process is gone (killed before
/// they could leave: each network namespace host makes names of its own, which no later
/// device would prune). Each is locked first, so a device joining it meanwhile either wrote
/// its line (and the file stays) or finds the file gone and makes it anew.
fn sweep(mine: &std::path::Path) {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return };
    for entry in dir.flatten() {
        let path = entry.path();
        let ours = entry.file_name().to_string_lossy().starts_with("mpr-soft-device-");
        if !ours || path == mine {
            continue;
        }
        let Ok(f) = OpenOptions::new().read(true).write(true).open(&path) else { continue };
        let Ok(mut file) = Flock::lock(f, FlockArg::LockExclusiveNonblock) else { continue };
        let mut text = String::new();
        if file.read_to_string(&mut text).is_err() {
            continue;
        }
        let live = parse(&text).iter().any(|l| alive(l.0));
        if !live {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// One device's line of a count file: pid, nonce, queue pairs, regions.
type Line = (u32, u64, usize, usize);

/// The well-formed lines of a count file.
fn parse(text: &str) -> Vec<Line> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                [p, n, q, m] => Some((p.parse().ok()?, n.parse().ok()?, q.parse().ok()?, m.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

/// Whether process `pid` exists (namespace hosts share the machine's process IDs).
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    !matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH))
}
