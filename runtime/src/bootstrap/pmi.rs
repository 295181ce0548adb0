//! The rank's side of its launcher's key-value service: PMI-1 or PMI-2, as agreed, or PMIx.
//!
//! The launcher (mprun, MPICH's hydra, Slurm's `srun --mpi=pmi2`) passes a connected socket
//! as `PMI_FD`. The first line is PMI-1's `init`, which also agrees the version: mpr asks for
//! PMI-2 where Slurm's plugin started it (`PMI_JOBID` is set, `MPR_RANK` is not), else
//! PMI-1, unless `MPR_PMI=1|2` says; it speaks what the launcher answers. Hydra also serves
//! PMI-2, but its `kvs-fence` returns at once (its `kvs-get` waits instead), which is no
//! barrier; so under hydra mpr speaks PMI-1. Without `PMI_FD`, a launcher that sets
//! `PMIX_NAMESPACE` and `PMIX_RANK` is a PMIx server, reached through its library (pmix.rs). PMI-1 commands and replies are lines (wire.rs); PMI-2
//! messages are length-prefixed (pmi2.rs).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;

use super::pmi2::Pmi2;
use super::pmix::Pmix;
use super::wire::Command;
use crate::error::Error;

/// The launcher's key-value service, in the version it agreed.
#[derive(Debug)]
pub(crate) enum Pmi {
    V1(Pmi1),
    V2(Pmi2),
    /// PMIx, through the launcher's library (no `PMI_FD`).
    X(Pmix),
}

/// Which ranks share this rank's node, as the launcher says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The ranks on this node, this one included.
    pub(crate) local: Vec<usize>,
    /// How many nodes the job spans, where the launcher says.
    pub(crate) nodes: Option<usize>,
}

/// A connection to a PMI-1 server.
#[derive(Debug)]
pub(crate) struct Pmi1 {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    kvsname: String,
}

fn err(msg: impl Into<String>) -> Error {
    Error::Bootstrap(msg.into())
}

/// The launcher's socket named by `PMI_FD`; `None` if the variable is absent.
fn launcher_socket() -> Result<Option<UnixStream>, Error> {
    let Ok(v) = std::env::var("PMI_FD") else {
        return Ok(None);
    };
    let fd: RawFd = v.trim().parse().map_err(|_| err(format!("PMI_FD={v} is not a file descriptor")))?;
    if fd < 0 || nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_err() {
        return Err(err(format!("PMI_FD={fd} is not an open file descriptor")));
    }
    // Only a socket can be the launcher's: never take ownership of some other open file
    // that happens to have the number (e.g. PMI_FD inherited by a rank's own child).
    let is_socket = nix::sys::stat::fstat(fd).map(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK).unwrap_or(false);
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
    Ok(Some(stream))
}

/// The PMI version to ask for: `MPR_PMI` if set, else 2 under Slurm's PMI-2 plugin (the one
/// launcher that sets `PMI_JOBID`; mprun's ranks in a Slurm job inherit it but have
/// `MPR_RANK`), else 1.
fn wanted_version() -> Result<u32, Error> {
    let slurm = std::env::var_os("PMI_JOBID").is_some() && std::env::var_os("MPR_RANK").is_none();
    match std::env::var("MPR_PMI").ok().as_deref().map(str::trim) {
        Some("1") => Ok(1),
        Some("2") => Ok(2),
        Some("") | None => Ok(if slurm { 2 } else { 1 }),
        Some(other) => Err(err(format!("MPR_PMI={other}: expected 1 or 2"))),
    }
}

impl Pmi {
    /// Connects through `PMI_FD` and agrees a version; `None` if the variable is absent (not
    /// started by a launcher). `env_rank` is the rank the environment gives, if any.
    pub(crate) fn from_env(env_rank: Option<usize>) -> Result<Option<Pmi>, Error> {
        let Some(stream) = launcher_socket()? else {
            return if Pmix::launched() { Pmix::start().map(|p| Some(Pmi::X(p))) } else { Ok(None) };
        };
        let want = wanted_version()?;
        let mut reader = BufReader::new(stream.try_clone().map_err(|e| err(format!("PMI socket: {e}")))?);
        let mut writer = stream;
        let init = match want {
            2 => Command::new("init").with("pmi_version", 2).with("pmi_subversion", 0),
            _ => Command::new("init").with("pmi_version", 1).with("pmi_subversion", 1),
        };
        writer.write_all(init.encode().as_bytes()).map_err(|e| err(format!("lost the launcher's PMI service: {e}")))?;
        let r = Pmi1::read_reply(&mut reader, "response_to_init")?;
        if r.get("rc") != Some("0") {
            return Err(err(format!(
                "the launcher refused PMI-{want} (MPR_PMI chooses 1 or 2): {}",
                r.encode().trim_end()
            )));
        }
        match r.get("pmi_version") {
            Some("2") => {
                // Nothing but the reply was sent, so the reader holds no buffered bytes.
                drop(reader);
                Ok(Some(Pmi::V2(Pmi2::start(writer, env_rank)?)))
            }
            _ => {
                let mut p = Pmi1 { reader, writer, kvsname: String::new() };
                let r = p.call(Command::new("get_my_kvsname"), "my_kvsname")?;
                p.kvsname = r.get("kvsname").ok_or_else(|| err("PMI gave no kvsname"))?.to_string();
                Ok(Some(Pmi::V1(p)))
            }
        }
    }

    /// The service's name: `PMI-1`, `PMI-2` or `PMIx`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Pmi::V1(_) => "PMI-1",
            Pmi::V2(_) => "PMI-2",
            Pmi::X(_) => "PMIx",
        }
    }

    /// Whether Slurm's own service (its PMI-2 or PMIx plugin) started this rank.
    pub(crate) fn is_slurms(&self) -> bool {
        match self {
            Pmi::V1(_) => false,
            Pmi::V2(_) => std::env::var_os("PMI_JOBID").is_some() && std::env::var_os("SLURM_STEP_ID").is_some(),
            Pmi::X(p) => p.nspace().starts_with("slurm.pmix."),
        }
    }

    /// The job's key-value space name (the job id of a foreign launcher).
    pub(crate) fn kvsname(&self) -> &str {
        match self {
            Pmi::V1(p) => &p.kvsname,
            Pmi::V2(p) => p.jobid(),
            Pmi::X(p) => p.nspace(),
        }
    }

    /// The rank and size the launcher's PMI-2 `fullinit` or PMIx gave (PMI-1 gives them in
    /// the environment alone).
    pub(crate) fn rank_size(&self) -> Option<(usize, usize)> {
        match self {
            Pmi::V1(_) => None,
            Pmi::V2(p) => Some((p.rank(), p.size())),
            Pmi::X(p) => Some((p.rank(), p.size())),
        }
    }

    /// The host's name, where the launcher says (PMIx's `pmix.hname`).
    pub(crate) fn hostname(&mut self) -> Option<String> {
        match self {
            Pmi::X(p) => p.hostname(),
            _ => None,
        }
    }

    /// Which ranks share rank `rank`'s node, if the launcher says (PMI-2's
    /// `PMI_process_mapping`, PMIx's `pmix.lpeers`).
    pub(crate) fn placement(&mut self, rank: usize, size: usize) -> Result<Option<Placement>, Error> {
        match self {
            Pmi::V1(_) => Ok(None),
            Pmi::V2(p) => match p.job_attr("PMI_process_mapping")? {
                Some(v) => {
                    let node = super::pmi2::process_mapping(&v, size)?;
                    let local = (0..size).filter(|&r| node[r] == node[rank]).collect();
                    Ok(Some(Placement { local, nodes: node.iter().max().map(|m| m + 1) }))
                }
                None => Ok(None),
            },
            Pmi::X(p) => Ok(p
                .local_peers()?
                .filter(|l| l.contains(&rank) && l.iter().all(|&r| r < size))
                .map(|local| Placement { local, nodes: None })),
        }
    }

    /// Publishes `key=value`, visible to every rank after the next fence.
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        match self {
            Pmi::V1(p) => p.put(key, value),
            Pmi::V2(p) => p.put(key, value),
            Pmi::X(p) => p.put(key, value),
        }
    }

    /// Reads the key rank `owner` published before the last fence.
    pub(crate) fn get(&mut self, owner: usize, key: &str) -> Result<String, Error> {
        match self {
            Pmi::V1(p) => p.get(key),
            Pmi::V2(p) => p.get(owner, key),
            Pmi::X(p) => p.get(owner, key),
        }
    }

    /// Fence: returns when every rank has entered.
    pub(crate) fn barrier(&mut self) -> Result<(), Error> {
        match self {
            Pmi::V1(p) => p.barrier(),
            Pmi::V2(p) => p.fence(),
            Pmi::X(p) => p.fence(),
        }
    }

    pub(crate) fn finalize(&mut self) -> Result<(), Error> {
        match self {
            Pmi::V1(p) => p.finalize(),
            Pmi::V2(p) => p.finalize(),
            Pmi::X(p) => p.finalize(),
        }
    }

    /// Asks the launcher to end the job with `code`.
    pub(crate) fn abort(&mut self, code: i32, msg: &str) {
        match self {
            Pmi::V1(p) => p.abort(code, msg),
            Pmi::V2(p) => p.abort(msg),
            Pmi::X(p) => p.abort(code, msg),
        }
    }
}

impl Pmi1 {
    fn read_reply(reader: &mut BufReader<UnixStream>, expect: &str) -> Result<Command, Error> {
        let mut line = String::new();
        let n = reader.read_line(&mut line).map_err(|e| err(format!("PMI read: {e}")))?;
        if n == 0 {
            return Err(err("the launcher closed the PMI connection"));
        }
        let c = Command::parse(&line).map_err(|e| err(e.to_string()))?;
        if c.cmd != expect {
            return Err(err(format!("expected PMI reply {expect}, got {}", line.trim_end())));
        }
        Ok(c)
    }

    fn send(&mut self, c: &Command) -> Result<(), Error> {
        self.writer.write_all(c.encode().as_bytes()).map_err(|e| err(format!("lost the launcher's PMI service: {e}")))
    }

    fn recv(&mut self, expect: &str) -> Result<Command, Error> {
        Self::read_reply(&mut self.reader, expect)
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
