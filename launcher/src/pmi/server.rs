//! The PMI-1 protocol, without I/O: lines in, replies and job events out.
//!
//! Commands served (one line each, see `mpr::bootstrap::wire`):
//! `init`, `get_maxes`, `get_appnum`, `get_my_kvsname`, `get_universe_size`, `put`, `get`,
//! `barrier_in` (answered with `barrier_out` to every rank once all have entered; barriers
//! repeat), `finalize` and `abort`. Any other command is answered `cmd=<cmd>_result rc=-1
//! msg=unknown_command`. Keys are write-once: a second `put` of a key with a different value
//! fails. A put is visible to `get` at once.

use std::collections::HashMap;

use mpr::bootstrap::wire::Command;

/// Longest kvs name, key and value (reported by `get_maxes` and enforced by `put`).
pub(crate) const KVSNAME_MAX: usize = 256;
/// See [`KVSNAME_MAX`].
pub(crate) const KEYLEN_MAX: usize = 256;
/// See [`KVSNAME_MAX`].
pub(crate) const VALLEN_MAX: usize = 4096;

/// What the server asks the event loop to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send this command to this rank.
    Reply(usize, Command),
    /// The rank called abort: the job fails with this exit code.
    Abort {
        /// The rank that aborted.
        rank: usize,
        /// Its `exitcode`, if it gave a valid one.
        code: Option<i32>,
        /// Its `msg`, if any.
        msg: Option<String>,
    },
    /// The rank sent something that is not a PMI command: stop talking to it.
    Close(usize),
}

/// The PMI-1 state of one job.
#[derive(Debug)]
pub(crate) struct Server {
    size: usize,
    kvsname: String,
    kvs: HashMap<String, String>,
    /// Which ranks have entered the current barrier.
    entered: Vec<bool>,
    waiting: usize,
    /// Per rank: it sent `init`, and then `finalize`.
    inited: Vec<bool>,
    finalized: Vec<bool>,
}

impl Server {
    /// A server for `size` ranks sharing the key-value space `kvsname`.
    pub(crate) fn new(size: usize, kvsname: String) -> Self {
        Server {
            size,
            kvsname,
            kvs: HashMap::new(),
            entered: vec![false; size],
            waiting: 0,
            inited: vec![false; size],
            finalized: vec![false; size],
        }
    }

    /// Whether `rank` started MPI (PMI `init`) and never finalized: a rank that exits so,
    /// even with code 0, leaves its peers waiting for it.
    pub(crate) fn left_unfinalized(&self, rank: usize) -> bool {
        self.inited.get(rank).copied().unwrap_or(false) && !self.finalized.get(rank).copied().unwrap_or(true)
    }

    /// Handles one line from `rank`; appends what to do to `out`.
    pub(crate) fn handle(&mut self, rank: usize, line: &str, out: &mut Vec<Action>) {
        let Ok(cmd) = Command::parse(line) else {
            out.push(Action::Close(rank));
            return;
        };
        let reply = |c: Command| Action::Reply(rank, c);
        match cmd.cmd.as_str() {
            "init" => {
                if let Some(i) = self.inited.get_mut(rank) {
                    *i = true;
                }
                let version_ok = !matches!(cmd.get("pmi_version"), Some(v) if v != "1");
                let mut r = Command::new("response_to_init").with("pmi_version", 1).with("pmi_subversion", 1);
                r = if version_ok { r.with("rc", 0) } else { r.with("rc", -1).with("msg", "unsupported_version") };
                out.push(reply(r));
            }
            "get_maxes" => out.push(reply(
                Command::new("maxes")
                    .with("kvsname_max", KVSNAME_MAX)
                    .with("keylen_max", KEYLEN_MAX)
                    .with("vallen_max", VALLEN_MAX)
                    .with("rc", 0),
            )),
            "get_appnum" => out.push(reply(Command::new("appnum").with("appnum", 0).with("rc", 0))),
            "get_my_kvsname" => {
                out.push(reply(Command::new("my_kvsname").with("kvsname", &self.kvsname).with("rc", 0)))
            }
            "get_universe_size" => out.push(reply(Command::new("universe_size").with("size", self.size).with("rc", 0))),
            "put" => out.push(reply(self.put(&cmd))),
            "get" => out.push(reply(self.get(&cmd))),
            "barrier_in" => self.barrier_in(rank, out),
            "finalize" => {
                if let Some(f) = self.finalized.get_mut(rank) {
                    *f = true;
                }
                out.push(reply(Command::new("finalize_ack")))
            }
            "abort" => out.push(Action::Abort {
                rank,
                code: cmd.get("exitcode").and_then(|c| c.parse().ok()),
                msg: cmd.get("msg").map(str::to_string),
            }),
            other => out.push(reply(failure(&format!("{other}_result"), "unknown_command"))),
        }
    }

    fn put(&mut self, cmd: &Command) -> Command {
        const RESULT: &str = "put_result";
        if let Some(err) = self.check_kvsname(cmd) {
            return failure(RESULT, err);
        }
        let (Some(key), Some(value)) = (cmd.get("key"), cmd.get("value")) else {
            return failure(RESULT, "missing_key_or_value");
        };
        if key.is_empty() || key.len() > KEYLEN_MAX {
            return failure(RESULT, "invalid_key");
        }
        if value.len() > VALLEN_MAX {
            return failure(RESULT, "value_too_long");
        }
        match self.kvs.get(key) {
            Some(old) if old != value => failure(RESULT, "duplicate_key"),
            Some(_) => success(RESULT),
            None => {
                self.kvs.insert(key.to_string(), value.to_string());
                success(RESULT)
            }
        }
    }

    fn get(&self, cmd: &Command) -> Command {
        const RESULT: &str = "get_result";
        if let Some(err) = self.check_kvsname(cmd) {
            return failure(RESULT, err);
        }
        match cmd.get("key").and_then(|k| self.kvs.get(k)) {
            Some(value) => success(RESULT).with("value", value),
            None => failure(RESULT, "key_not_found"),
        }
    }

    /// A kvs name, when given, must be the job's.
    fn check_kvsname(&self, cmd: &Command) -> Option<&'static str> {
        match cmd.get("kvsname") {
            Some(name) if name != self.kvsname => Some("unknown_kvsname"),
            _ => None,
        }
    }

    fn barrier_in(&mut self, rank: usize, out: &mut Vec<Action>) {
        if !std::mem::replace(&mut self.entered[rank], true) {
            self.waiting += 1;
        }
        if self.waiting == self.size {
            self.entered.iter_mut().for_each(|e| *e = false);
            self.waiting = 0;
            out.extend((0..self.size).map(|r| Action::Reply(r, Command::new("barrier_out"))));
        }
    }
}

fn success(cmd: &str) -> Command {
    Command::new(cmd).with("rc", 0).with("msg", "success")
}

fn failure(cmd: &str, msg: &str) -> Command {
    Command::new(cmd).with("rc", -1).with("msg", msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `line` from `rank` and returns the replies as encoded lines (rank-tagged).
    fn talk(s: &mut Server, rank: usize, line: &str) -> Vec<String> {
        let mut out = Vec::new();
        s.handle(rank, line, &mut out);
        out.into_iter()
            .map(|a| match a {
                Action::Reply(r, c) => format!("{r}:{}", c.encode().trim_end()),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn answers_the_handshake() {
        let mut s = Server::new(2, "mpr-00".into());
        assert_eq!(
            talk(&mut s, 1, "cmd=init pmi_version=1 pmi_subversion=1\n"),
            ["1:cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"]
        );
        assert_eq!(
            talk(&mut s, 1, "cmd=get_maxes"),
            ["1:cmd=maxes kvsname_max=256 keylen_max=256 vallen_max=4096 rc=0"]
        );
        assert_eq!(talk(&mut s, 0, "cmd=get_appnum"), ["0:cmd=appnum appnum=0 rc=0"]);
        assert_eq!(talk(&mut s, 0, "cmd=get_my_kvsname"), ["0:cmd=my_kvsname kvsname=mpr-00 rc=0"]);
        assert_eq!(talk(&mut s, 0, "cmd=get_universe_size"), ["0:cmd=universe_size size=2 rc=0"]);
        assert!(!s.left_unfinalized(0), "rank 0 never started MPI");
        assert!(s.left_unfinalized(1), "rank 1 started and has not finalized");
        assert_eq!(talk(&mut s, 1, "cmd=finalize"), ["1:cmd=finalize_ack"]);
        assert!(!s.left_unfinalized(1));
        assert!(talk(&mut s, 0, "cmd=init pmi_version=2")[0].contains("rc=-1"));
    }

    #[test]
    fn keys_are_write_once() {
        let mut s = Server::new(2, "k".into());
        let ok = "0:cmd=put_result rc=0 msg=success";
        assert_eq!(talk(&mut s, 0, "cmd=put kvsname=k key=a value=1"), [ok]);
        assert_eq!(talk(&mut s, 0, "cmd=put kvsname=k key=a value=1"), [ok]);
        assert_eq!(talk(&mut s, 0, "cmd=put kvsname=k key=a value=2"), ["0:cmd=put_result rc=-1 msg=duplicate_key"]);
        assert_eq!(talk(&mut s, 1, "cmd=get kvsname=k key=a"), ["1:cmd=get_result rc=0 msg=success value=1"]);
        assert_eq!(talk(&mut s, 1, "cmd=get kvsname=k key=b"), ["1:cmd=get_result rc=-1 msg=key_not_found"]);
        assert!(talk(&mut s, 1, "cmd=get kvsname=other key=a")[0].contains("unknown_kvsname"));
        assert!(talk(&mut s, 1, "cmd=put kvsname=k key=x")[0].contains("rc=-1"));
    }

    #[test]
    fn barriers_repeat() {
        let mut s = Server::new(3, "k".into());
        for _ in 0..3 {
            assert!(talk(&mut s, 2, "cmd=barrier_in").is_empty());
            assert!(talk(&mut s, 2, "cmd=barrier_in").is_empty());
            assert!(talk(&mut s, 0, "cmd=barrier_in").is_empty());
            assert_eq!(
                talk(&mut s, 1, "cmd=barrier_in"),
                ["0:cmd=barrier_out", "1:cmd=barrier_out", "2:cmd=barrier_out"]
            );
        }
    }

    #[test]
    fn bad_input_is_answered_not_fatal() {
        let mut s = Server::new(1, "k".into());
        assert_eq!(talk(&mut s, 0, "cmd=spawn x=1"), ["0:cmd=spawn_result rc=-1 msg=unknown_command"]);
        assert_eq!(talk(&mut s, 0, "hello world"), ["Close(0)"]);
        assert_eq!(
            talk(&mut s, 0, "cmd=abort exitcode=7 msg=oops"),
            ["Abort { rank: 0, code: Some(7), msg: Some(\"oops\") }"]
        );
    }
}
