//! The control protocol's wire format, version [`VERSION`].
//!
//! A frame is a 4-byte little-endian length `L`, then `L` bytes: a one-byte message kind and
//! its fields. Integers are little-endian; byte strings are a 4-byte length and the bytes;
//! lists are a 4-byte count and the items; text is a UTF-8 byte string. A frame longer than
//! the reader's limit, an unknown kind, a field running past the frame or bytes left over
//! after the last field are errors: the connection is dropped.
//!
//! Every connection starts `Challenge` (mprun) / `Hello` (proxy) / `Welcome` (mprun) /
//! `Launch` (mprun); see `control/mod.rs` for the protocol.

use std::ffi::OsString;
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::bind::{BindTo, MapBy, Policy, Share};

/// Protocol version carried by `Challenge` and `Hello` (2: `Launch` carries the binding; 3:
/// `Hello` carries the proxy's machine id and `Launch` the host's share of its machine).
pub(crate) const VERSION: u16 = 3;
/// Longest frame accepted once a connection is proven.
pub(crate) const MAX_FRAME: usize = 16 << 20;
/// Longest frame accepted before a connection has proven itself (a `Hello` is at most 111
/// bytes).
pub(crate) const MAX_UNPROVEN_FRAME: usize = 256;
/// Length of nonces and proofs.
pub(crate) const NONCE_LEN: usize = 32;

/// A nonce or a proof.
pub(crate) type Bytes32 = [u8; NONCE_LEN];

/// What a proxy needs to start the ranks of its host.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LaunchSpec {
    /// The job id (names the job's shared-memory segments).
    pub(crate) jobid: String,
    /// The host's name as the user gave it.
    pub(crate) host: String,
    /// The program as the user wrote it (looked up through `PATH` on the host).
    pub(crate) program: OsString,
    /// Its arguments.
    pub(crate) args: Vec<OsString>,
    /// Environment every rank of the host gets (the proxy adds the per-rank variables).
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Working directory of the ranks, if it exists on the host.
    pub(crate) cwd: OsString,
    /// The number of ranks in the job.
    pub(crate) size: u32,
    /// The global ranks of this host, in order (local rank = index).
    pub(crate) ranks: Vec<u32>,
    /// Prefix output lines with `[rank] `.
    pub(crate) tag_output: bool,
    /// Report what the proxy does on stderr.
    pub(crate) verbose: bool,
    /// Rank 0 is on this host and its stdin comes as `Stdin` messages.
    pub(crate) stdin: bool,
    /// mprun knows no address for this host: set `MPR_HOST_ADDR` to the proxy's side of its
    /// control connection.
    pub(crate) fill_host_addr: bool,
    /// Milliseconds between SIGTERM and SIGKILL when stopping.
    pub(crate) kill_grace_ms: u64,
    /// How the proxy binds its ranks (from its own host's topology).
    pub(crate) binding: Policy,
    /// Where this host's ranks stand among the ranks of its machine (hosts that are
    /// namespaces or containers of one machine share its cores).
    pub(crate) share: Share,
}

/// One control message; the comment says who sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg {
    /// mprun, first on every connection: prove you know the job secret.
    Challenge { version: u16, nonce: Bytes32 },
    /// Proxy: which host I am, my own nonce, my proof, and the id of the machine I run on
    /// (`mpr::bootstrap::machine`; empty if it has none).
    Hello { version: u16, host: u32, nonce: Bytes32, proof: Bytes32, machine: String },
    /// mprun: its proof over the proxy's nonce.
    Welcome { proof: Bytes32 },
    /// mprun: start these ranks.
    Launch(Box<LaunchSpec>),
    /// Proxy: a rank started.
    Started { rank: u32, pid: u32 },
    /// Proxy: a rank could not be started (`code` is the shell's: 127, 126 or 1).
    SpawnFailed { rank: u32, code: i32, error: String },
    /// Proxy: whole lines a rank wrote on stdout (`stream` 0) or stderr (1).
    Output { rank: u32, stream: u8, data: Vec<u8> },
    /// Proxy: a PMI-1 line from a rank.
    Pmi { rank: u32, line: String },
    /// mprun: a PMI-1 line for a rank.
    PmiReply { rank: u32, line: String },
    /// Proxy: a rank sent something that is not PMI; its PMI connection is closed.
    PmiGarbage { rank: u32 },
    /// mprun: close this rank's PMI connection.
    PmiClose { rank: u32 },
    /// Proxy: a rank ended (`signal`: killed by signal `code`).
    Exited { rank: u32, signal: bool, code: i32 },
    /// mprun: bytes for rank 0's stdin.
    Stdin { data: Vec<u8> },
    /// mprun: end of rank 0's stdin.
    StdinEof,
    /// Proxy: this many stdin bytes were written to rank 0 (or dropped): send more.
    StdinAck { bytes: u32 },
    /// mprun: stop the ranks (SIGTERM, then SIGKILL after the grace).
    Stop,
    /// mprun: SIGKILL the ranks now.
    Kill,
    /// Either side: still here.
    Heartbeat,
    /// Proxy: every rank ended and its output was sent; the proxy exits.
    Done,
}

const CHALLENGE: u8 = 1;
const HELLO: u8 = 2;
const WELCOME: u8 = 3;
const LAUNCH: u8 = 4;
const STARTED: u8 = 5;
const SPAWN_FAILED: u8 = 6;
const OUTPUT: u8 = 7;
const PMI: u8 = 8;
const PMI_REPLY: u8 = 9;
const PMI_GARBAGE: u8 = 10;
const PMI_CLOSE: u8 = 11;
const EXITED: u8 = 12;
const STDIN: u8 = 13;
const STDIN_EOF: u8 = 14;
const STDIN_ACK: u8 = 15;
const STOP: u8 = 16;
const KILL: u8 = 17;
const HEARTBEAT: u8 = 18;
const DONE: u8 = 19;

/// A frame that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WireError(pub(crate) String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Appends `msg` as one frame to `out`.
pub(crate) fn encode(msg: &Msg, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut e = Enc(out);
    match msg {
        Msg::Challenge { version, nonce } => {
            e.u8(CHALLENGE);
            e.u16(*version);
            e.raw(nonce);
        }
        Msg::Hello { version, host, nonce, proof, machine } => {
            e.u8(HELLO);
            e.u16(*version);
            e.u32(*host);
            e.raw(nonce);
            e.raw(proof);
            e.bytes(machine.as_bytes());
        }
        Msg::Welcome { proof } => {
            e.u8(WELCOME);
            e.raw(proof);
        }
        Msg::Launch(spec) => {
            e.u8(LAUNCH);
            e.bytes(spec.jobid.as_bytes());
            e.bytes(spec.host.as_bytes());
            e.bytes(spec.program.as_bytes());
            e.u32(spec.args.len() as u32);
            for a in &spec.args {
                e.bytes(a.as_bytes());
            }
            e.u32(spec.env.len() as u32);
            for (k, v) in &spec.env {
                e.bytes(k.as_bytes());
                e.bytes(v.as_bytes());
            }
            e.bytes(spec.cwd.as_bytes());
            e.u32(spec.size);
            e.u32(spec.ranks.len() as u32);
            for r in &spec.ranks {
                e.u32(*r);
            }
            let flags = u8::from(spec.tag_output)
                | u8::from(spec.verbose) << 1
                | u8::from(spec.stdin) << 2
                | u8::from(spec.fill_host_addr) << 3
                | u8::from(spec.binding.report) << 4;
            e.u8(flags);
            e.u64(spec.kill_grace_ms);
            e.u8(match spec.binding.bind {
                None => 0,
                Some(BindTo::Core) => 1,
                Some(BindTo::Numa) => 2,
                Some(BindTo::None) => 3,
            });
            e.u8(match spec.binding.map {
                MapBy::Core => 0,
                MapBy::Numa => 1,
            });
            e.u32(spec.share.first as u32);
            e.u32(spec.share.machine_ranks as u32);
        }
        Msg::Started { rank, pid } => {
            e.u8(STARTED);
            e.u32(*rank);
            e.u32(*pid);
        }
        Msg::SpawnFailed { rank, code, error } => {
            e.u8(SPAWN_FAILED);
            e.u32(*rank);
            e.u32(*code as u32);
            e.bytes(error.as_bytes());
        }
        Msg::Output { rank, stream, data } => {
            e.u8(OUTPUT);
            e.u32(*rank);
            e.u8(*stream);
            e.bytes(data);
        }
        Msg::Pmi { rank, line } => {
            e.u8(PMI);
            e.u32(*rank);
            e.bytes(line.as_bytes());
        }
        Msg::PmiReply { rank, line } => {
            e.u8(PMI_REPLY);
            e.u32(*rank);
            e.bytes(line.as_bytes());
        }
        Msg::PmiGarbage { rank } => {
            e.u8(PMI_GARBAGE);
            e.u32(*rank);
        }
        Msg::PmiClose { rank } => {
            e.u8(PMI_CLOSE);
            e.u32(*rank);
        }
        Msg::Exited { rank, signal, code } => {
            e.u8(EXITED);
            e.u32(*rank);
            e.u8(u8::from(*signal));
            e.u32(*code as u32);
        }
        Msg::Stdin { data } => {
            e.u8(STDIN);
            e.bytes(data);
        }
        Msg::StdinEof => e.u8(STDIN_EOF),
        Msg::StdinAck { bytes } => {
            e.u8(STDIN_ACK);
            e.u32(*bytes);
        }
        Msg::Stop => e.u8(STOP),
        Msg::Kill => e.u8(KILL),
        Msg::Heartbeat => e.u8(HEARTBEAT),
        Msg::Done => e.u8(DONE),
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Decodes the first frame of `buf`: `Ok(None)` if it is not complete yet, else the message
/// and the number of bytes it took. Frames longer than `max` are errors.
pub(crate) fn decode(buf: &[u8], max: usize) -> Result<Option<(Msg, usize)>, WireError> {
    let Some(head) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
    if len == 0 || len > max {
        return Err(WireError(format!("frame of {len} bytes (limit {max})")));
    }
    let Some(body) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    let mut d = Dec(body);
    let msg = match d.u8()? {
        CHALLENGE => Msg::Challenge { version: d.u16()?, nonce: d.raw()? },
        HELLO => Msg::Hello { version: d.u16()?, host: d.u32()?, nonce: d.raw()?, proof: d.raw()?, machine: d.text()? },
        WELCOME => Msg::Welcome { proof: d.raw()? },
        LAUNCH => {
            let jobid = d.text()?;
            let host = d.text()?;
            let program = d.os()?;
            let args = (0..d.count()?).map(|_| d.os()).collect::<Result<_, _>>()?;
            let env = (0..d.count()?).map(|_| Ok((d.os()?, d.os()?))).collect::<Result<_, _>>()?;
            let cwd = d.os()?;
            let size = d.u32()?;
            let ranks = (0..d.count()?).map(|_| d.u32()).collect::<Result<_, _>>()?;
            let flags = d.u8()?;
            let kill_grace_ms = d.u64()?;
            let bind = match d.u8()? {
                0 => None,
                1 => Some(BindTo::Core),
                2 => Some(BindTo::Numa),
                3 => Some(BindTo::None),
                other => return Err(WireError(format!("unknown binding {other}"))),
            };
            let map = match d.u8()? {
                0 => MapBy::Core,
                1 => MapBy::Numa,
                other => return Err(WireError(format!("unknown mapping {other}"))),
            };
            let binding = Policy { bind, map, report: flags & 16 != 0 };
            let share = Share { first: d.u32()? as usize, machine_ranks: d.u32()? as usize };
            Msg::Launch(Box::new(LaunchSpec {
                jobid,
                host,
                program,
                args,
                env,
                cwd,
                size,
                ranks,
                tag_output: flags & 1 != 0,
                verbose: flags & 2 != 0,
                stdin: flags & 4 != 0,
                fill_host_addr: flags & 8 != 0,
                kill_grace_ms,
                binding,
                share,
            }))
        }
        STARTED => Msg::Started { rank: d.u32()?, pid: d.u32()? },
        SPAWN_FAILED => Msg::SpawnFailed { rank: d.u32()?, code: d.u32()? as i32, error: d.text()? },
        OUTPUT => Msg::Output { rank: d.u32()?, stream: d.u8()?, data: d.bytes()?.to_vec() },
        PMI => Msg::Pmi { rank: d.u32()?, line: d.text()? },
        PMI_REPLY => Msg::PmiReply { rank: d.u32()?, line: d.text()? },
        PMI_GARBAGE => Msg::PmiGarbage { rank: d.u32()? },
        PMI_CLOSE => Msg::PmiClose { rank: d.u32()? },
        EXITED => Msg::Exited { rank: d.u32()?, signal: d.u8()? != 0, code: d.u32()? as i32 },
        STDIN => Msg::Stdin { data: d.bytes()?.to_vec() },
        STDIN_EOF => Msg::StdinEof,
        STDIN_ACK => Msg::StdinAck { bytes: d.u32()? },
        STOP => Msg::Stop,
        KILL => Msg::Kill,
        HEARTBEAT => Msg::Heartbeat,
        DONE => Msg::Done,
        other => return Err(WireError(format!("unknown message kind {other}"))),
    };
    if !d.0.is_empty() {
        return Err(WireError(format!("{} stray bytes after a message", d.0.len())));
    }
    Ok(Some((msg, 4 + len)))
}

struct Enc<'a>(&'a mut Vec<u8>);

impl Enc<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn raw(&mut self, v: &[u8]) {
        self.0.extend_from_slice(v);
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.raw(v);
    }
}

struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError("message cut short".into()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn raw(&mut self) -> Result<Bytes32, WireError> {
        Ok(self.take(NONCE_LEN)?.try_into().expect("32 bytes"))
    }
    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn text(&mut self) -> Result<String, WireError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| WireError("text is not UTF-8".into()))
    }
    fn os(&mut self) -> Result<OsString, WireError> {
        Ok(OsString::from_vec(self.bytes()?.to_vec()))
    }
    /// A list count, checked against what is left (every item takes at least 4 bytes), so a
    /// forged count cannot make the reader allocate.
    fn count(&mut self) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n > self.0.len() / 4 {
            return Err(WireError(format!("list of {n} items in {} bytes", self.0.len())));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Msg> {
        let spec = LaunchSpec {
            jobid: "00ab".into(),
            host: "node-2".into(),
            program: "./a b".into(),
            args: vec!["-n".into(), OsString::from_vec(vec![0xff, b'x'])],
            env: vec![("K".into(), "v=w".into()), ("EMPTY".into(), "".into())],
            cwd: "/tmp".into(),
            size: 10,
            ranks: vec![2, 3, 9],
            tag_output: true,
            verbose: false,
            stdin: true,
            fill_host_addr: true,
            kill_grace_ms: 1500,
            binding: Policy { bind: Some(BindTo::Numa), map: MapBy::Numa, report: true },
            share: Share { first: 3, machine_ranks: 7 },
        };
        vec![
            Msg::Challenge { version: VERSION, nonce: [7; 32] },
            Msg::Hello { version: VERSION, host: 3, nonce: [1; 32], proof: [2; 32], machine: String::new() },
            Msg::Hello { version: VERSION, host: 3, nonce: [1; 32], proof: [2; 32], machine: "ab".repeat(16) },
            Msg::Welcome { proof: [9; 32] },
            Msg::Launch(Box::new(spec)),
            Msg::Launch(Box::default()),
            Msg::Launch(Box::new(LaunchSpec {
                binding: Policy { bind: Some(BindTo::None), map: MapBy::Core, report: false },
                ..LaunchSpec::default()
            })),
            Msg::Started { rank: 4, pid: 99 },
            Msg::SpawnFailed { rank: 1, code: 127, error: "no such file".into() },
            Msg::Output { rank: 5, stream: 1, data: b"line\n".to_vec() },
            Msg::Pmi { rank: 0, line: "cmd=barrier_in".into() },
            Msg::PmiReply { rank: 0, line: "cmd=barrier_out".into() },
            Msg::PmiGarbage { rank: 2 },
            Msg::PmiClose { rank: 2 },
            Msg::Exited { rank: 1, signal: false, code: -3 },
            Msg::Exited { rank: 1, signal: true, code: 9 },
            Msg::Stdin { data: vec![0; 1000] },
            Msg::StdinEof,
            Msg::StdinAck { bytes: 1000 },
            Msg::Stop,
            Msg::Kill,
            Msg::Heartbeat,
            Msg::Done,
        ]
    }

    #[test]
    fn round_trip() {
        let mut stream = Vec::new();
        for msg in samples() {
            encode(&msg, &mut stream);
        }
        let mut at = 0;
        for want in samples() {
            let (got, used) = decode(&stream[at..], MAX_FRAME).unwrap().unwrap();
            assert_eq!(got, want);
            at += used;
        }
        assert_eq!(at, stream.len());
    }

    #[test]
    fn partial_frames_wait_for_more() {
        let mut frame = Vec::new();
        encode(&Msg::Pmi { rank: 1, line: "cmd=get key=x".into() }, &mut frame);
        for cut in 0..frame.len() {
            assert_eq!(decode(&frame[..cut], MAX_FRAME), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn hello_fits_the_unproven_limit() {
        let mut frame = Vec::new();
        let machine = "f".repeat(32);
        encode(&Msg::Hello { version: VERSION, host: 0, nonce: [0; 32], proof: [0; 32], machine }, &mut frame);
        assert!(frame.len() - 4 <= 111);
        assert!(frame.len() - 4 <= MAX_UNPROVEN_FRAME);
        assert!(decode(&frame, MAX_UNPROVEN_FRAME).unwrap().is_some());
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        assert!(decode(&[0, 0, 0, 0], MAX_FRAME).is_err(), "empty frame");
        assert!(decode(&[255, 255, 255, 255], MAX_FRAME).is_err(), "too long");
        assert!(decode(b"GET / HTTP/1.1\r\n\r\n", MAX_UNPROVEN_FRAME).is_err(), "garbage");
        assert!(decode(&[1, 0, 0, 0, 200], MAX_FRAME).is_err(), "unknown kind");
        assert!(decode(&[2, 0, 0, 0, STOP, 0], MAX_FRAME).is_err(), "stray bytes");
        assert!(decode(&[3, 0, 0, 0, STARTED, 1, 0], MAX_FRAME).is_err(), "cut short");
        // A list count larger than the frame could hold.
        let mut frame = Vec::new();
        encode(&Msg::Launch(Box::default()), &mut frame);
        let at = 4 + 1 + 4 + 4 + 4; // kind, jobid, host, program (all empty): the args count
        frame[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&frame, MAX_FRAME).is_err());
        // A binding or mapping code this version does not know (the two bytes before the
        // share).
        for back in [9, 10] {
            let mut frame = Vec::new();
            encode(&Msg::Launch(Box::default()), &mut frame);
            let at = frame.len() - back;
            frame[at] = 9;
            assert!(decode(&frame, MAX_FRAME).is_err(), "byte -{back}");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut valid = Vec::new();
        for msg in samples() {
            encode(&msg, &mut valid);
        }
        for round in 0..20_000 {
            let mut buf = if round % 2 == 0 { valid.clone() } else { vec![0; 64] };
            for _ in 0..8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % buf.len();
                buf[i] = (x >> 32) as u8;
            }
            let mut at = 0;
            while let Ok(Some((_, used))) = decode(&buf[at..], MAX_FRAME) {
                at += used;
            }
        }
    }
}
