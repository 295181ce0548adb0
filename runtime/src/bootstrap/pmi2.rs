//! PMI-2 client: the wire protocol Slurm's `srun --mpi=pmi2` (and MPICH's hydra) serve.
//!
//! After the PMI-1 style `init` line agrees version 2 (pmi.rs), every command and reply is a
//! 6-character, left-aligned decimal length followed by that many bytes of
//! `cmd=NAME;key=value;...;`. The commands used here: `fullinit` (rank, size), `job-getid`
//! (the job's key-value space), `kvs-put`, `kvs-fence`, `kvs-get`, `info-getjobattr`
//! (`PMI_process_mapping`: which ranks share a node), `finalize` and `abort`.
//!
//! Slurm's server does not take escaped `;` in values (its parser ends a value at the first
//! `;`), so values are escaped here, for mpr's ranks alone: `%` as `%25`, `;` as `%3B`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use crate::error::Error;

/// Longest message either side may send (the length field has 6 digits).
const MAX_LEN: usize = 999_999;

fn err(msg: impl Into<String>) -> Error {
    Error::Bootstrap(msg.into())
}

/// One PMI-2 message: its `cmd` and its other fields in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Msg {
    pub(crate) cmd: String,
    pub(crate) fields: Vec<(String, String)>,
}

impl Msg {
    pub(crate) fn new(cmd: &str) -> Msg {
        Msg { cmd: cmd.into(), fields: Vec::new() }
    }

    pub(crate) fn with(mut self, key: &str, value: impl ToString) -> Msg {
        self.fields.push((key.into(), value.to_string()));
        self
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The message with its length header: `"27    cmd=kvs-fence;..."`.
    pub(crate) fn encode(&self) -> Result<Vec<u8>, Error> {
        let mut body = format!("cmd={};", self.cmd);
        for (k, v) in &self.fields {
            if k.contains([';', '=']) || v.contains(';') {
                return Err(err(format!("PMI-2 field {k}={v}: a key may hold no ';' or '=', a value no ';'")));
            }
            body += &format!("{k}={v};");
        }
        if body.len() > MAX_LEN {
            return Err(err(format!(
                "PMI-2 command {} is {} bytes, above the protocol's {MAX_LEN}",
                self.cmd,
                body.len()
            )));
        }
        let mut out = format!("{:<6}", body.len()).into_bytes();
        out.extend_from_slice(body.as_bytes());
        Ok(out)
    }

    /// Parses a message body (after the length header).
    pub(crate) fn parse(body: &str) -> Result<Msg, Error> {
        let bad = || err(format!("malformed PMI-2 message {body:?}"));
        let mut parts = body.split(';').filter(|p| !p.is_empty());
        let cmd = parts.next().and_then(|p| p.strip_prefix("cmd=")).ok_or_else(bad)?;
        let fields = parts
            .map(|p| p.split_once('=').filter(|(k, _)| !k.is_empty()).map(|(k, v)| (k.to_string(), v.to_string())))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?;
        Ok(Msg { cmd: cmd.into(), fields })
    }
}

/// `value` with `%` and `;` escaped (see the module comment).
pub(crate) fn escape(value: &str) -> String {
    value.replace('%', "%25").replace(';', "%3B")
}

/// The inverse of [`escape`].
pub(crate) fn unescape(value: &str) -> String {
    value.replace("%3B", ";").replace("%25", "%")
}

/// A connection to the launcher's PMI-2 server, past `fullinit`.
#[derive(Debug)]
pub(crate) struct Pmi2 {
    stream: UnixStream,
    jobid: String,
    rank: usize,
    size: usize,
}

impl Pmi2 {
    /// Completes the start-up on `stream` (whose `init` agreed version 2): `fullinit` with
    /// the rank the launcher gave in the environment, then `job-getid`.
    pub(crate) fn start(stream: UnixStream, env_rank: Option<usize>) -> Result<Pmi2, Error> {
        let mut p = Pmi2 { stream, jobid: String::new(), rank: 0, size: 0 };
        // Slurm wants its own job id and the rank back (PMI_JOBID, PMI_RANK); hydra reads
        // the rank alone.
        let mut init = Msg::new("fullinit");
        if let Ok(j) = std::env::var("PMI_JOBID") {
            init = init.with("pmijobid", j);
        }
        if let Some(id) = std::env::var("PMI_ID").ok().filter(|v| !v.is_empty()) {
            init = init.with("pmiid", id);
        } else if let Some(r) = env_rank {
            init = init.with("pmirank", r);
        }
        let r = p.call(init.with("threaded", "FALSE"), "fullinit-response")?;
        p.check(&r, "fullinit")?;
        let num = |k: &str| r.get(k).and_then(|v| v.trim().parse::<usize>().ok());
        let (Some(rank), Some(size)) = (num("rank"), num("size")) else {
            return Err(err(format!("PMI-2 fullinit gave no rank and size: {r:?}")));
        };
        if rank >= size || env_rank.is_some_and(|e| e != rank) {
            return Err(err(format!(
                "PMI-2 fullinit says rank {rank} of {size}, the environment says rank {env_rank:?}"
            )));
        }
        (p.rank, p.size) = (rank, size);
        let r = p.call(Msg::new("job-getid"), "job-getid-response")?;
        p.check(&r, "job-getid")?;
        p.jobid = r.get("jobid").filter(|j| !j.is_empty()).ok_or_else(|| err("PMI-2 job-getid gave no jobid"))?.into();
        Ok(p)
    }

    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The job's key-value space (Slurm: `JOBID.STEPID`).
    pub(crate) fn jobid(&self) -> &str {
        &self.jobid
    }

    fn send(&mut self, m: &Msg) -> Result<(), Error> {
        let bytes = m.encode()?;
        self.stream.write_all(&bytes).map_err(|e| err(format!("lost the launcher's PMI-2 service: {e}")))
    }

    fn recv(&mut self, expect: &str) -> Result<Msg, Error> {
        let mut head = [0u8; 6];
        self.stream.read_exact(&mut head).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => err("the launcher closed the PMI-2 connection"),
            _ => err(format!("PMI-2 read: {e}")),
        })?;
        let text = String::from_utf8_lossy(&head);
        let len: usize =
            text.trim().parse().map_err(|_| err(format!("PMI-2 reply with a bad length field {text:?}")))?;
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).map_err(|e| err(format!("PMI-2 read of a {len}-byte reply: {e}")))?;
        let m = Msg::parse(&String::from_utf8_lossy(&body))?;
        if m.cmd != expect {
            return Err(err(format!("expected PMI-2 reply {expect}, got {:?}", String::from_utf8_lossy(&body))));
        }
        Ok(m)
    }

    fn call(&mut self, m: Msg, expect: &str) -> Result<Msg, Error> {
        self.send(&m)?;
        self.recv(expect)
    }

    fn check(&self, r: &Msg, what: &str) -> Result<(), Error> {
        match r.get("rc").map(str::trim) {
            Some("0") | None => Ok(()),
            Some(rc) => Err(err(format!("PMI-2 {what} failed (rc={rc}): {}", r.get("errmsg").unwrap_or("no message")))),
        }
    }

    /// Publishes `key=value`, visible to every rank after the next fence.
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let r = self.call(Msg::new("kvs-put").with("key", key).with("value", escape(value)), "kvs-put-response")?;
        self.check(&r, &format!("put of {key}"))
    }

    /// Reads the key rank `owner` published before the last fence.
    pub(crate) fn get(&mut self, owner: usize, key: &str) -> Result<String, Error> {
        let m = Msg::new("kvs-get").with("jobid", self.jobid.clone()).with("srcid", owner).with("key", key);
        let r = self.call(m, "kvs-get-response")?;
        self.check(&r, &format!("get of {key}"))?;
        match (r.get("found"), r.get("value")) {
            (Some(f), Some(v)) if f.eq_ignore_ascii_case("TRUE") => Ok(unescape(v)),
            _ => Err(err(format!("PMI-2 get of {key}: no rank published it"))),
        }
    }

    /// Fence: returns when every rank has entered, with every put before it visible.
    pub(crate) fn fence(&mut self) -> Result<(), Error> {
        let r = self.call(Msg::new("kvs-fence"), "kvs-fence-response")?;
        self.check(&r, "fence")
    }

    /// A job attribute the launcher knows (`PMI_process_mapping`, ...), if it has it.
    pub(crate) fn job_attr(&mut self, key: &str) -> Result<Option<String>, Error> {
        let r = self.call(Msg::new("info-getjobattr").with("key", key), "info-getjobattr-response")?;
        self.check(&r, &format!("info-getjobattr of {key}"))?;
        Ok(match (r.get("found"), r.get("value")) {
            (Some(f), Some(v)) if f.eq_ignore_ascii_case("TRUE") => Some(v.to_string()),
            _ => None,
        })
    }

    /// Says goodbye.
    pub(crate) fn finalize(&mut self) -> Result<(), Error> {
        let r = self.call(Msg::new("finalize"), "finalize-response")?;
        self.check(&r, "finalize")
    }

    /// Asks the launcher to end the whole job (no reply comes).
    pub(crate) fn abort(&mut self, msg: &str) {
        let msg: String = msg.chars().map(|c| if c == ';' || c == '\n' { ' ' } else { c }).collect();
        let _ = self.send(&Msg::new("abort").with("isworld", "TRUE").with("msg", msg));
    }
}

/// The node of every rank, from a `PMI_process_mapping` value: `(vector,(N,C,P),...)` says
/// "nodes N..N+C take P consecutive ranks each", blocks in rank order, the whole vector
/// repeated until `size` ranks are placed (a cyclic placement repeats one block).
pub(crate) fn process_mapping(text: &str, size: usize) -> Result<Vec<usize>, Error> {
    let bad = |why: &str| err(format!("PMI_process_mapping {text:?}: {why}"));
    let s: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = s.strip_prefix("(vector,").and_then(|r| r.strip_suffix(')')).ok_or_else(|| bad("not (vector,...)"))?;
    let mut blocks = Vec::new();
    for b in inner.split("),").map(|b| b.trim_start_matches('(').trim_end_matches(')')) {
        let n: Vec<usize> =
            b.split(',').map(|x| x.parse()).collect::<Result<_, _>>().map_err(|_| bad("a block is not numbers"))?;
        match n[..] {
            [start, count, per] if count > 0 && per > 0 => blocks.push((start, count, per)),
            _ => return Err(bad("a block is not (node,count,ranks)")),
        }
    }
    if blocks.is_empty() {
        return Err(bad("no blocks"));
    }
    let mut node = Vec::with_capacity(size);
    while node.len() < size {
        for &(start, count, per) in &blocks {
            for n in start..start + count {
                for _ in 0..per {
                    if node.len() < size {
                        node.push(n);
                    }
                }
            }
        }
    }
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_round_trip() {
        let m = Msg::new("kvs-put").with("key", "mpr-card-0").with("value", "h=n1%3Bp=7");
        let bytes = m.encode().unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(&text[6..], "cmd=kvs-put;key=mpr-card-0;value=h=n1%3Bp=7;");
        assert_eq!(text[..6], format!("{:<6}", text.len() - 6));
        assert_eq!(Msg::new("kvs-fence").encode().unwrap(), b"14    cmd=kvs-fence;");
        assert_eq!(Msg::parse(&text[6..]).unwrap(), m);
        assert!(Msg::new("x").with("k", "a;b").encode().is_err());
        assert!(Msg::parse("key=1;").is_err());
        assert!(Msg::parse("cmd=x;novalue;").is_err());
        assert_eq!(Msg::parse("cmd=kvs-fence-response;rc=0;").unwrap().get("rc"), Some("0"));
    }

    #[test]
    fn values_escape_both_ways() {
        for v in ["h=n1;p=4;t=10.0.0.1:5", "100%;;%3B", ""] {
            assert!(!escape(v).contains(';'));
            assert_eq!(unescape(&escape(v)), v);
        }
    }

    #[test]
    fn process_mappings() {
        // srun -N2 -n4 (3 ranks on the first node, 1 on the second).
        assert_eq!(process_mapping("(vector,(0,1,3),(1,1,1))", 4).unwrap(), [0, 0, 0, 1]);
        // Block: 2 nodes of 2.
        assert_eq!(process_mapping("(vector,(0,2,2))", 4).unwrap(), [0, 0, 1, 1]);
        // Cyclic over 2 nodes: the one-rank block repeats.
        assert_eq!(process_mapping("(vector, (0,2,1))", 5).unwrap(), [0, 1, 0, 1, 0]);
        assert_eq!(process_mapping("(vector,(0,1,1))", 1).unwrap(), [0]);
        for bad in ["", "(vector,)", "(vector,(0,1))", "(vector,(0,0,1))", "(list,(0,1,1))", "(vector,(a,1,1))"] {
            assert!(process_mapping(bad, 2).is_err(), "{bad}");
        }
    }
}
