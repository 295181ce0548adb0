//! The engine's frame headers: the one wire format every transport carries.
//!
//! A frame is a header followed by its payload (only `Eager`, `Rts` and `Data` have one). Every
//! header starts with `[kind: u8][version: u8]`; the rest depends on the kind, all integers
//! little-endian. Small messages use the 16-byte `Eager` header, so a message of up to
//! 40 bytes travels in the same 64-byte cache line as the shared-memory cell's flag.
//!
//! | kind    | bytes | fields after kind, version                                   |
//! |---------|-------|--------------------------------------------------------------|
//! | Eager   | 16    | pad u16, ctx u32, src u32, tag i32                           |
//! | Rts     | 48    | pad u16, ctx u32, src u32, tag i32, len u64, sreq u64, saddr u64, skey u64 |
//! | Cts     | 48    | pad u16 + u32, sreq u64, rreq u64, off u64, len u64, raddr u64 |
//! | Data    | 24    | pad u16 + u32, rreq u64, off u64                             |
//! | Written | 24    | pad u16 + u32, rreq u64, len u64                             |
//! | Fin     | 16    | flags u8, pad u8 + u32, sreq u64                             |
//! | Put     | 24    | op u8, dtype u8, pad u32, win u64, disp u64                  |
//! | Get     | 40    | pad u16 + u32, win u64, disp u64, len u64, oreq u64          |
//! | Fetch   | 40    | op u8, dtype u8, pad u32, win u64, disp u64, oreq u64, roff u64 |
//! | Cas     | 32    | pad u8, dtype u8, pad u32, win u64, disp u64, oreq u64       |
//! | Reply   | 24    | flags u8, pad u8 + u32, oreq u64, off u64                    |
//! | Ctl     | 16    | what u8, pad u8 + u32, win u64                               |
//! | Recall  | 16    | pad u16 + u32, sreq u64                                      |
//!
//! Rendezvous: the sender announces a large message with `Rts`. Where the path allows
//! single-copy reads, the `Rts` carries the sender's buffer address (and the key that opens
//! it, where the path needs one: an RDMA region's rkey); where the bytes are streamed, it
//! carries the message's first bytes as its payload. The receiver, once matched, either
//! reads the bytes itself, or asks with `Cts` for a byte range (those after the `Rts`'s), to
//! be streamed as `Data` frames or (when `raddr` is set) written straight into its memory
//! and then confirmed by `Written`. When all bytes are in, the receiver sends `Fin`: only
//! then may the sender reuse its buffer. A sender that cancels its send (`MPI_Cancel`) sends
//! `Recall`: a receiver still holding the `Rts` unmatched drops it and answers with `Fin`
//! flagged `FLAG_CANCELLED`; one that matched it already ignores the `Recall`, and the
//! transfer ends as usual. (Frames of one peer arrive in order, so the `Rts` is there first.)

//!
//! One-sided operations are active messages its target's engine serves (every transport
//! carries them; see `engine/rma.rs`). `disp` is a byte offset into the target's window
//! `win`; `op` and `dtype` are codes of `crate::datatype`. `Put` writes (or accumulates) its
//! payload; `Get` asks for `len` bytes; `Fetch` accumulates its payload and `Cas` compares
//! and swaps (payload: compare value, then new value), both answering with the elements as
//! they were. Answers are `Reply` frames, at byte `off` of the origin's request `oreq` (a
//! `Fetch` covering part of its request says where its answer goes: `roff`). `Ctl` carries
//! the synchronisation (locks, flushes, post/complete) and its acknowledgements.

/// Version of this format; a frame of another version is rejected.
pub(crate) const WIRE_VERSION: u8 = 5;
/// Bytes of the longest header.
pub(crate) const MAX_HEADER: usize = 48;
/// On `Fin`: the receiver matched the message but it did not fit (the receive failed).
pub(crate) const FLAG_TRUNCATED: u8 = 1;
/// On `Fin`: the receiver dropped the unmatched message its sender recalled.
pub(crate) const FLAG_CANCELLED: u8 = 2;

const EAGER: u8 = 1;
const RTS: u8 = 2;
const CTS: u8 = 3;
const DATA: u8 = 4;
const WRITTEN: u8 = 5;
const FIN: u8 = 6;
const PUT: u8 = 7;
const GET: u8 = 8;
const FETCH: u8 = 9;
const CAS: u8 = 10;
const REPLY: u8 = 11;
const CTL: u8 = 12;
const RECALL: u8 = 13;

/// Matching information of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub(crate) ctx: u32,
    pub(crate) src: u32,
    pub(crate) tag: i32,
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A whole small message; the payload is the message.
    Eager(Envelope),
    /// A large message is ready at the sender (`saddr`: its address for single-copy reads, or
    /// 0; `skey`: the key the transport needs to read it, if any).
    Rts { env: Envelope, len: u64, sreq: u64, saddr: u64, skey: u64 },
    /// Send bytes `off..off+len` of `sreq`: into `raddr + ..` directly if non-zero, else as `Data`.
    Cts { sreq: u64, rreq: u64, off: u64, len: u64, raddr: u64 },
    /// Bytes at `off` of the message received by `rreq`; the payload is the bytes.
    Data { rreq: u64, off: u64 },
    /// The sender wrote `len` bytes straight into `rreq`'s buffer.
    Written { rreq: u64, len: u64 },
    /// The receiver is done with the sender's buffer.
    Fin { sreq: u64, flags: u8 },
    /// Write (`op` replace) or accumulate the payload at byte `disp` of window `win`.
    Put { win: u64, disp: u64, op: u8, dtype: u8 },
    /// Answer `len` bytes at `disp` of window `win` to request `oreq`.
    Get { win: u64, disp: u64, len: u64, oreq: u64 },
    /// Accumulate the payload at `disp`, answering the elements it replaced at `roff` of `oreq`.
    Fetch { win: u64, disp: u64, op: u8, dtype: u8, oreq: u64, roff: u64 },
    /// Compare and swap one element (payload: compare value, new value); answers the old one.
    Cas { win: u64, disp: u64, dtype: u8, oreq: u64 },
    /// Bytes at `off` of the answer to one-sided request `oreq`.
    Reply { oreq: u64, off: u64, flags: u8 },
    /// Synchronisation of window `win` (see `engine::rma::ctl`).
    Ctl { win: u64, what: u8 },
    /// The sender cancels rendezvous send `sreq`: drop its `Rts` if no receive matched it.
    Recall { sreq: u64 },
}

/// Why a frame was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WireError {
    Short { kind: u8, len: usize },
    Version(u8),
    Kind(u8),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Short { kind, len } => write!(f, "frame of kind {kind} cut short at {len} bytes"),
            WireError::Version(v) => write!(f, "frame of wire version {v}, expected {WIRE_VERSION}"),
            WireError::Kind(k) => write!(f, "frame of unknown kind {k}"),
        }
    }
}

/// An encoded header: bytes and length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeaderBytes {
    buf: [u8; MAX_HEADER],
    len: u8,
}

impl HeaderBytes {
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

struct Writer {
    buf: [u8; MAX_HEADER],
    at: usize,
}

impl Writer {
    fn new(kind: u8, flags: u8) -> Writer {
        let mut buf = [0u8; MAX_HEADER];
        buf[0] = kind;
        buf[1] = WIRE_VERSION;
        buf[2] = flags;
        Writer { buf, at: 4 }
    }
    fn byte3(mut self, v: u8) -> Self {
        self.buf[3] = v;
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.buf[self.at..self.at + 4].copy_from_slice(&v.to_le_bytes());
        self.at += 4;
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.at = self.at.next_multiple_of(8);
        self.buf[self.at..self.at + 8].copy_from_slice(&v.to_le_bytes());
        self.at += 8;
        self
    }
    fn env(self, e: &Envelope) -> Self {
        self.u32(e.ctx).u32(e.src).u32(e.tag as u32)
    }
    fn done(self) -> HeaderBytes {
        HeaderBytes { buf: self.buf, len: self.at as u8 }
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> u32 {
        let v = u32::from_le_bytes(self.b[self.at..self.at + 4].try_into().expect("length checked"));
        self.at += 4;
        v
    }
    fn u64(&mut self) -> u64 {
        self.at = self.at.next_multiple_of(8);
        let v = u64::from_le_bytes(self.b[self.at..self.at + 8].try_into().expect("length checked"));
        self.at += 8;
        v
    }
    fn env(&mut self) -> Envelope {
        Envelope { ctx: self.u32(), src: self.u32(), tag: self.u32() as i32 }
    }
}

fn header_len(kind: u8) -> Option<usize> {
    Some(match kind {
        EAGER | FIN | CTL | RECALL => 16,
        DATA | WRITTEN | PUT | REPLY => 24,
        CAS => 32,
        GET | FETCH => 40,
        RTS | CTS => 48,
        _ => return None,
    })
}

/// Bytes of an `Eager` header.
pub(crate) const EAGER_LEN: usize = 16;

/// The `Eager` header of a message with envelope `e`, made in registers: the header of
/// every small message, which a byte-by-byte build would store in pieces and read back
/// whole (a store-forwarding stall per message).
pub(crate) fn eager_header(e: &Envelope) -> [u8; EAGER_LEN] {
    let v = EAGER as u128
        | (WIRE_VERSION as u128) << 8
        | (e.ctx as u128) << 32
        | (e.src as u128) << 64
        | (e.tag as u32 as u128) << 96;
    v.to_le_bytes()
}

impl Frame {
    pub(crate) fn encode(&self) -> HeaderBytes {
        match *self {
            Frame::Eager(e) => {
                let mut buf = [0u8; MAX_HEADER];
                buf[..EAGER_LEN].copy_from_slice(&eager_header(&e));
                HeaderBytes { buf, len: EAGER_LEN as u8 }
            }
            Frame::Rts { env, len, sreq, saddr, skey } => {
                Writer::new(RTS, 0).env(&env).u64(len).u64(sreq).u64(saddr).u64(skey).done()
            }
            Frame::Cts { sreq, rreq, off, len, raddr } => {
                Writer::new(CTS, 0).u64(sreq).u64(rreq).u64(off).u64(len).u64(raddr).done()
            }
            Frame::Data { rreq, off } => Writer::new(DATA, 0).u64(rreq).u64(off).done(),
            Frame::Written { rreq, len } => Writer::new(WRITTEN, 0).u64(rreq).u64(len).done(),
            Frame::Fin { sreq, flags } => Writer::new(FIN, flags).u64(sreq).done(),
            Frame::Put { win, disp, op, dtype } => Writer::new(PUT, op).byte3(dtype).u64(win).u64(disp).done(),
            Frame::Get { win, disp, len, oreq } => Writer::new(GET, 0).u64(win).u64(disp).u64(len).u64(oreq).done(),
            Frame::Fetch { win, disp, op, dtype, oreq, roff } => {
                Writer::new(FETCH, op).byte3(dtype).u64(win).u64(disp).u64(oreq).u64(roff).done()
            }
            Frame::Cas { win, disp, dtype, oreq } => {
                Writer::new(CAS, 0).byte3(dtype).u64(win).u64(disp).u64(oreq).done()
            }
            Frame::Reply { oreq, off, flags } => Writer::new(REPLY, flags).u64(oreq).u64(off).done(),
            Frame::Ctl { win, what } => Writer::new(CTL, what).u64(win).done(),
            Frame::Recall { sreq } => Writer::new(RECALL, 0).u64(sreq).done(),
        }
    }

    /// Splits a frame into its header and payload.
    #[inline]
    pub(crate) fn decode(frame: &[u8]) -> Result<(Frame, &[u8]), WireError> {
        // The frame of every small message, read in one load (the general path below reads
        // the envelope piece by piece).
        if let Some(h) = frame.first_chunk::<EAGER_LEN>() {
            let v = u128::from_le_bytes(*h);
            if v as u16 == u16::from_le_bytes([EAGER, WIRE_VERSION]) {
                let env = Envelope { ctx: (v >> 32) as u32, src: (v >> 64) as u32, tag: (v >> 96) as u32 as i32 };
                return Ok((Frame::Eager(env), &frame[EAGER_LEN..]));
            }
        }
        Frame::decode_any(frame)
    }

    fn decode_any(frame: &[u8]) -> Result<(Frame, &[u8]), WireError> {
        let kind = *frame.first().ok_or(WireError::Short { kind: 0, len: 0 })?;
        let need = header_len(kind).ok_or(WireError::Kind(kind))?;
        if frame.len() < need {
            return Err(WireError::Short { kind, len: frame.len() });
        }
        if frame[1] != WIRE_VERSION {
            return Err(WireError::Version(frame[1]));
        }
        let (flags, byte3) = (frame[2], frame[3]);
        let mut r = Reader { b: frame, at: 4 };
        let f = match kind {
            EAGER => Frame::Eager(r.env()),
            RTS => Frame::Rts { env: r.env(), len: r.u64(), sreq: r.u64(), saddr: r.u64(), skey: r.u64() },
            CTS => Frame::Cts { sreq: r.u64(), rreq: r.u64(), off: r.u64(), len: r.u64(), raddr: r.u64() },
            DATA => Frame::Data { rreq: r.u64(), off: r.u64() },
            WRITTEN => Frame::Written { rreq: r.u64(), len: r.u64() },
            FIN => Frame::Fin { sreq: r.u64(), flags },
            PUT => Frame::Put { win: r.u64(), disp: r.u64(), op: flags, dtype: byte3 },
            GET => Frame::Get { win: r.u64(), disp: r.u64(), len: r.u64(), oreq: r.u64() },
            FETCH => {
                Frame::Fetch { win: r.u64(), disp: r.u64(), op: flags, dtype: byte3, oreq: r.u64(), roff: r.u64() }
            }
            CAS => Frame::Cas { win: r.u64(), disp: r.u64(), dtype: byte3, oreq: r.u64() },
            REPLY => Frame::Reply { oreq: r.u64(), off: r.u64(), flags },
            CTL => Frame::Ctl { win: r.u64(), what: flags },
            RECALL => Frame::Recall { sreq: r.u64() },
            _ => unreachable!("header_len accepted the kind"),
        };
        debug_assert_eq!(r.at, need);
        Ok((f, &frame[need..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random_frame(rng: &mut impl Rng) -> Frame {
        let env = Envelope { ctx: rng.gen(), src: rng.gen(), tag: rng.gen() };
        let (win, disp, oreq) = (rng.gen(), rng.gen(), rng.gen());
        match rng.gen_range(0..13) {
            0 => Frame::Eager(env),
            1 => Frame::Rts { env, len: rng.gen(), sreq: rng.gen(), saddr: rng.gen(), skey: rng.gen() },
            2 => Frame::Cts { sreq: rng.gen(), rreq: rng.gen(), off: rng.gen(), len: rng.gen(), raddr: rng.gen() },
            3 => Frame::Data { rreq: rng.gen(), off: rng.gen() },
            4 => Frame::Written { rreq: rng.gen(), len: rng.gen() },
            5 => Frame::Fin { sreq: rng.gen(), flags: rng.gen() },
            6 => Frame::Put { win, disp, op: rng.gen(), dtype: rng.gen() },
            7 => Frame::Get { win, disp, len: rng.gen(), oreq },
            8 => Frame::Fetch { win, disp, op: rng.gen(), dtype: rng.gen(), oreq, roff: rng.gen() },
            9 => Frame::Cas { win, disp, dtype: rng.gen(), oreq },
            10 => Frame::Reply { oreq, off: rng.gen(), flags: rng.gen() },
            11 => Frame::Ctl { win, what: rng.gen() },
            _ => Frame::Recall { sreq: rng.gen() },
        }
    }

    #[test]
    fn round_trip_random_frames() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for _ in 0..2000 {
            let f = random_frame(&mut rng);
            let mut bytes = f.encode().as_slice().to_vec();
            bytes.extend_from_slice(b"xyz");
            let (d, p) = Frame::decode(&bytes).unwrap();
            assert_eq!(d, f);
            assert_eq!(p, b"xyz");
        }
    }

    #[test]
    fn eager_header_leaves_room_in_a_cache_line() {
        let e = Envelope { ctx: 1, src: 2, tag: 3 };
        assert_eq!(Frame::Eager(e).encode().as_slice().len(), 16);
    }

    #[test]
    fn the_eager_header_is_the_layout_the_table_gives() {
        let e = Envelope { ctx: 0x0403_0201, src: 0x0807_0605, tag: -2 };
        let h = eager_header(&e);
        assert_eq!(h, [EAGER, WIRE_VERSION, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0xfe, 0xff, 0xff, 0xff]);
        assert_eq!(Frame::decode(&h), Ok((Frame::Eager(e), &[][..])));
    }

    #[test]
    fn rejects_bad_frames() {
        assert_eq!(Frame::decode(&[]), Err(WireError::Short { kind: 0, len: 0 }));
        assert_eq!(Frame::decode(&[RTS, 1, 0]), Err(WireError::Short { kind: RTS, len: 3 }));
        let mut f = Frame::Fin { sreq: 1, flags: 0 }.encode().as_slice().to_vec();
        f[1] = 9;
        assert_eq!(Frame::decode(&f), Err(WireError::Version(9)));
        assert_eq!(Frame::decode(&[77; 64]), Err(WireError::Kind(77)));
        // Arbitrary bytes never panic.
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        for n in 0..2000 {
            let mut v: Vec<u8> = (0..n % 64).map(|_| rng.gen()).collect();
            if let Some(b) = v.get_mut(1) {
                *b = WIRE_VERSION;
            }
            let _ = Frame::decode(&v);
        }
    }
}
