//! A rank that speaks PMI-1 to `mprun` over `PMI_FD`, as MPICH's simple PMI client does.
//!
//! `mprun -np 3 pmi_client` runs the whole conversation: init, maxes, kvs name, universe
//! size, put of its own key, barrier, get of the next rank's key, a second barrier, a get
//! of a missing key, finalize. It exits 0 only if every answer is right. Other modes:
//! `pmi_client abort CODE` asks mprun to abort the job; `pmi_client garbage` sends a line
//! that is not a command, `pmi_client long-line` a line of 1 MiB that never ends, and
//! `pmi_client unread-replies` commands whose replies it does not read until mprun hangs up:
//! each expects mprun to hang up.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

use mpr::bootstrap::wire::Command;

/// The PMI connection: a line writer and a line reader over one socket.
struct Pmi {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Pmi {
    fn from_env() -> Result<Self, String> {
        let fd: i32 = env("PMI_FD")?.parse().map_err(|_| "PMI_FD is not a number".to_string())?;
        // SAFETY: mprun passes PMI_FD as an open socket that this process alone owns.
        let stream = unsafe { UnixStream::from_raw_fd(fd) };
        let reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        Ok(Pmi { writer: stream, reader })
    }

    fn send_raw(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.writer.write_all(bytes).map_err(|e| format!("write: {e}"))
    }

    fn recv(&mut self) -> Result<Command, String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err("mprun closed the PMI connection".into()),
            Ok(_) => Command::parse(&line).map_err(|e| e.to_string()),
            Err(e) => Err(format!("read: {e}")),
        }
    }

    /// Sends `cmd`, reads the reply, checks its `cmd` and (if present) that `rc` is 0.
    fn call(&mut self, cmd: Command, expect: &str) -> Result<Command, String> {
        self.send_raw(cmd.encode().as_bytes())?;
        let reply = self.recv()?;
        if reply.cmd != expect {
            return Err(format!("sent {:?}, expected {expect}, got {reply:?}", cmd.cmd));
        }
        match reply.get("rc") {
            None | Some("0") => Ok(reply),
            Some(_) => Err(format!("{} failed: {reply:?}", cmd.cmd)),
        }
    }
}

/// Sends `bytes` (which mprun must refuse before it has them all), then reads until mprun
/// hangs up: Ok if it does.
fn hung_up(pmi: &mut Pmi, bytes: &[u8]) -> Result<(), String> {
    // A write cut short by the hang-up is what is expected too.
    let _ = pmi.send_raw(bytes);
    loop {
        match pmi.recv() {
            Err(e) if e.contains("closed") || e.contains("reset") => return Ok(()),
            Err(e) => return Err(format!("expected mprun to hang up, got {e}")),
            Ok(_) => {}
        }
    }
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

fn field<'a>(reply: &'a Command, key: &str) -> Result<&'a str, String> {
    reply.get(key).ok_or_else(|| format!("no {key} in {reply:?}"))
}

fn conversation(pmi: &mut Pmi) -> Result<(), String> {
    let rank: usize = env("PMI_RANK")?.parse().map_err(|_| "bad PMI_RANK")?;
    let size: usize = env("PMI_SIZE")?.parse().map_err(|_| "bad PMI_SIZE")?;
    let jobid = env("MPR_JOBID")?;

    let init = Command::new("init").with("pmi_version", 1).with("pmi_subversion", 1);
    let reply = pmi.call(init, "response_to_init")?;
    if field(&reply, "pmi_version")? != "1" {
        return Err(format!("bad version: {reply:?}"));
    }
    let maxes = pmi.call(Command::new("get_maxes"), "maxes")?;
    let vallen_max: usize = field(&maxes, "vallen_max")?.parse().map_err(|_| "bad vallen_max")?;
    if vallen_max < 1024 {
        return Err(format!("vallen_max too small: {maxes:?}"));
    }
    // Two commands in one write, the second split across two writes.
    pmi.send_raw(b"cmd=get_appnum\ncmd=get_univ")?;
    std::thread::sleep(Duration::from_millis(20));
    pmi.send_raw(b"erse_size\n")?;
    let appnum = pmi.recv()?;
    let universe = pmi.recv()?;
    if appnum.cmd != "appnum" || appnum.get("appnum") != Some("0") {
        return Err(format!("bad appnum reply: {appnum:?}"));
    }
    if universe.cmd != "universe_size" || universe.get("size") != Some(size.to_string().as_str()) {
        return Err(format!("bad universe_size reply: {universe:?}"));
    }
    let kvs = pmi.call(Command::new("get_my_kvsname"), "my_kvsname")?;
    let kvsname = field(&kvs, "kvsname")?.to_string();

    let put = |key: String, value: String| {
        Command::new("put").with("kvsname", &kvsname).with("key", key).with("value", value)
    };
    pmi.call(put(format!("card-{rank}"), format!("v{rank}-{jobid}")), "put_result")?;
    pmi.call(Command::new("barrier_in"), "barrier_out")?;

    let peer = (rank + 1) % size;
    let get = |key: String| Command::new("get").with("kvsname", &kvsname).with("key", key);
    let got = pmi.call(get(format!("card-{peer}")), "get_result")?;
    if field(&got, "value")? != format!("v{peer}-{jobid}") {
        return Err(format!("rank {peer}'s card is wrong: {got:?}"));
    }
    // A changed value under an existing key is refused.
    pmi.send_raw(put(format!("card-{rank}"), "other".into()).encode().as_bytes())?;
    if pmi.recv()?.get("rc") == Some("0") {
        return Err("a duplicate key was accepted".into());
    }
    pmi.call(Command::new("barrier_in"), "barrier_out")?;
    pmi.send_raw(get("no-such-key".into()).encode().as_bytes())?;
    let missing = pmi.recv()?;
    if missing.cmd != "get_result" || missing.get("rc") == Some("0") {
        return Err(format!("a missing key was found: {missing:?}"));
    }
    pmi.call(Command::new("finalize"), "finalize_ack")?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = Pmi::from_env().and_then(|mut pmi| match args.first().map(String::as_str) {
        None => conversation(&mut pmi),
        Some("abort") => {
            let code = args.get(1).map_or("1", String::as_str);
            pmi.send_raw(Command::new("abort").with("exitcode", code).with("msg", "giving_up").encode().as_bytes())?;
            std::thread::sleep(Duration::from_secs(30));
            Err("still running after abort".into())
        }
        Some("garbage") => {
            pmi.send_raw(b"this is not a command\n")?;
            match pmi.recv() {
                Err(e) if e.contains("closed") => Ok(()),
                other => Err(format!("expected mprun to hang up, got {other:?}")),
            }
        }
        Some("long-line") => {
            let mut line = b"cmd=put key=a value=".to_vec();
            line.resize(1 << 20, b'x');
            hung_up(&mut pmi, &line)
        }
        Some("unread-replies") => {
            // Commands until mprun hangs up (the kernel's buffers take a deal of replies
            // before any wait in mprun), at most 4 GB of them.
            let batch = "cmd=get_maxes\n".repeat(10_000);
            let cut = (0..30_000).any(|_| pmi.send_raw(batch.as_bytes()).is_err());
            if !cut {
                return Err("mprun took 4 GB of commands whose replies were never read".into());
            }
            hung_up(&mut pmi, b"")
        }
        Some(mode) => Err(format!("unknown mode {mode}")),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmi_client: {e}");
            ExitCode::FAILURE
        }
    }
}
