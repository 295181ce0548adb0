//! The soft provider's wire format (version 1): one UDP datagram per frame, a fixed
//! [`HEADER`]-byte little-endian header, then at most one [`FRAME`] of payload.
//!
//! ```text
//!  0 u16 magic "SV"     2 u8 version    3 u8 kind
//!  4 u8 qp type (0 UC, 1 RC)    5 u8 code (NAK: reason; ACK: 1 asks for the receive credit)
//!  6 u16 zero
//!  8 u32 psn: the sender's frame sequence number (ACK, NAK: the next psn the receiver expects)
//! 12 u32 msg: message sequence number (READ_RESP, RESP_ERR: the READ request's; UC ACK: the
//!     receive credit, messages before it may start; UC ACK asking for it: the asker's first
//!     message not yet started)
//! 16 u32 idx: frame index within the message
//! 20 u32 len: message length in bytes (READ_REQ: bytes to read)
//! 24 u32 rkey    28 u32 zero    32 u64 raddr: remote start address (WRITE, READ_REQ)
//! 40 payload: bytes idx*FRAME .. of the message (SEND, WRITE, READ_RESP only)
//! ```
//!
//! A message of `len` bytes travels as [`frames`]`(len)` frames (one for an empty message).
//! [`Header::decode`] checks everything a later step relies on: magic, version, kind, qp
//! type, that `idx` lies inside the message and that the payload has exactly the length the
//! header implies.

/// Wire frame: payload bytes per datagram (the device's path MTU).
pub(super) const FRAME: usize = 4096;
/// Header bytes in front of every datagram.
pub(super) const HEADER: usize = 40;
/// Largest datagram.
pub(super) const DATAGRAM: usize = HEADER + FRAME;

const MAGIC: u16 = u16::from_le_bytes(*b"SV");
const VERSION: u8 = 1;

/// What a datagram is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A frame of a SEND message.
    Send = 1,
    /// A frame of an RDMA WRITE (`rkey`, `raddr` of the whole message's start).
    Write = 2,
    /// An RDMA READ request of `len` bytes at `raddr` (no payload).
    ReadReq = 3,
    /// A frame of the answer to READ request `msg`.
    ReadResp = 4,
    /// The responder could not finish READ request `msg` (its region went away).
    RespErr = 5,
    /// Every frame before `psn` arrived (UC: a link credit, and the receive credit in `msg`;
    /// RC: an acknowledgement).
    Ack = 6,
    /// RC: frames before `psn` arrived, frame `psn` was not accepted for reason `code`.
    Nak = 7,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Send,
            2 => Kind::Write,
            3 => Kind::ReadReq,
            4 => Kind::ReadResp,
            5 => Kind::RespErr,
            6 => Kind::Ack,
            7 => Kind::Nak,
            _ => return None,
        })
    }

    /// Carries message bytes.
    pub(super) fn has_payload(self) -> bool {
        matches!(self, Kind::Send | Kind::Write | Kind::ReadResp)
    }

    /// Consumes a psn of the sender's frame stream (everything but ACK and NAK).
    pub(super) fn sequenced(self) -> bool {
        !matches!(self, Kind::Ack | Kind::Nak)
    }
}

/// Why an RC receiver refused frame `psn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Nak {
    /// A frame before it is missing: go back to `psn`.
    Seq = 1,
    /// Receiver not ready (no receive posted): wait, then go back to `psn`.
    Rnr = 2,
    /// Bad rkey or out of bounds: the request fails with a remote access error.
    Access = 3,
}

impl Nak {
    pub(super) fn from_u8(b: u8) -> Option<Nak> {
        Some(match b {
            1 => Nak::Seq,
            2 => Nak::Rnr,
            3 => Nak::Access,
            _ => return None,
        })
    }
}

/// The header of one datagram; fields a kind does not use are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) kind: Kind,
    /// The sending queue pair is RC (a UC and an RC queue pair never talk).
    pub(super) rc: bool,
    /// NAK reason ([`Nak`] as u8).
    pub(super) code: u8,
    pub(super) psn: u32,
    pub(super) msg: u32,
    pub(super) idx: u32,
    pub(super) len: u32,
    pub(super) rkey: u32,
    pub(super) raddr: u64,
}

/// ACK `code`: the sender waits for a receive credit and asks for it (UC); `msg` is its first
/// message not yet started (every one before it is on the wire).
pub(super) const CREDIT_REQUEST: u8 = 1;

/// Frames a message of `len` bytes takes (an empty message still takes one).
pub(super) fn frames(len: u32) -> u32 {
    (len as usize).div_ceil(FRAME).max(1) as u32
}

/// Payload bytes of frame `idx` of a message of `len` bytes.
pub(super) fn payload_len(len: u32, idx: u32) -> usize {
    (len as usize).saturating_sub(idx as usize * FRAME).min(FRAME)
}

impl Header {
    /// A header of `kind` with every other field zero.
    pub(super) fn new(kind: Kind, rc: bool) -> Header {
        Header { kind, rc, code: 0, psn: 0, msg: 0, idx: 0, len: 0, rkey: 0, raddr: 0 }
    }

    pub(super) fn encode(&self, out: &mut [u8; HEADER]) {
        out.fill(0);
        out[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        out[2] = VERSION;
        out[3] = self.kind as u8;
        out[4] = self.rc as u8;
        out[5] = self.code;
        out[8..12].copy_from_slice(&self.psn.to_le_bytes());
        out[12..16].copy_from_slice(&self.msg.to_le_bytes());
        out[16..20].copy_from_slice(&self.idx.to_le_bytes());
        out[20..24].copy_from_slice(&self.len.to_le_bytes());
        out[24..28].copy_from_slice(&self.rkey.to_le_bytes());
        out[32..40].copy_from_slice(&self.raddr.to_le_bytes());
    }

    /// Parses a datagram into its header and payload; `None` for anything malformed.
    pub(super) fn decode(dgram: &[u8]) -> Option<(Header, &[u8])> {
        let (head, payload) = dgram.split_at_checked(HEADER)?;
        let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap());
        if head[0..2] != MAGIC.to_le_bytes() || head[2] != VERSION || head[4] > 1 {
            return None;
        }
        if head[6..8] != [0, 0] || head[28..32] != [0; 4] {
            return None;
        }
        let h = Header {
            kind: Kind::from_u8(head[3])?,
            rc: head[4] == 1,
            code: head[5],
            psn: u32_at(8),
            msg: u32_at(12),
            idx: u32_at(16),
            len: u32_at(20),
            rkey: u32_at(24),
            raddr: u64::from_le_bytes(head[32..40].try_into().unwrap()),
        };
        let code_ok = match h.kind {
            Kind::Nak => Nak::from_u8(h.code).is_some(),
            Kind::Ack => h.code == 0 || (h.code == CREDIT_REQUEST && !h.rc),
            _ => h.code == 0,
        };
        if !code_ok {
            return None;
        }
        let want = if h.kind.has_payload() {
            if h.idx >= frames(h.len) {
                return None;
            }
            payload_len(h.len, h.idx)
        } else {
            0
        };
        (payload.len() == want).then_some((h, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const KINDS: [Kind; 7] =
        [Kind::Send, Kind::Write, Kind::ReadReq, Kind::ReadResp, Kind::RespErr, Kind::Ack, Kind::Nak];

    fn random_header(rng: &mut impl Rng) -> Header {
        let kind = KINDS[rng.gen_range(0..KINDS.len())];
        let len = match rng.gen_range(0..4) {
            0 => 0,
            1 => rng.gen_range(1..=FRAME as u32),
            2 => rng.gen_range(1..64 * FRAME as u32),
            _ => rng.gen(),
        };
        let rc = rng.gen();
        Header {
            kind,
            rc,
            code: match kind {
                Kind::Nak => rng.gen_range(1..=3),
                Kind::Ack if !rc => rng.gen_range(0..=1),
                _ => 0,
            },
            psn: rng.gen(),
            msg: rng.gen(),
            idx: if kind.has_payload() { rng.gen_range(0..frames(len)) } else { rng.gen() },
            len,
            rkey: rng.gen(),
            raddr: rng.gen(),
        }
    }

    fn datagram(h: &Header) -> Vec<u8> {
        let mut head = [0u8; HEADER];
        h.encode(&mut head);
        let mut d = head.to_vec();
        if h.kind.has_payload() {
            d.extend((0..payload_len(h.len, h.idx)).map(|i| i as u8));
        }
        d
    }

    #[test]
    fn headers_round_trip() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        for _ in 0..10_000 {
            let h = random_header(&mut rng);
            let d = datagram(&h);
            let (back, payload) = Header::decode(&d).expect("decodes");
            assert_eq!(back, h);
            assert_eq!(payload, &d[HEADER..]);
        }
    }

    #[test]
    fn frame_arithmetic() {
        assert_eq!((frames(0), payload_len(0, 0)), (1, 0));
        assert_eq!((frames(1), payload_len(1, 0)), (1, 1));
        assert_eq!((frames(4096), payload_len(4096, 0)), (1, 4096));
        assert_eq!((frames(4097), payload_len(4097, 1)), (2, 1));
        assert_eq!(frames(16_773_120), 4095);
    }

    #[test]
    fn malformed_datagrams_are_refused() {
        let mut h = Header::new(Kind::Send, false);
        h.len = 5000;
        h.idx = 1;
        let good = datagram(&h);
        assert!(Header::decode(&good).is_some());
        // Truncated header or payload, and one byte too many.
        for cut in [0, 1, HEADER - 1, good.len() - 1] {
            assert!(Header::decode(&good[..cut]).is_none(), "cut at {cut}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(Header::decode(&long).is_none());
        // Bad magic, version, kind, qp type, reserved bytes, NAK code.
        for (at, v) in [(0, b'x'), (2, 2), (3, 0), (3, 8), (4, 2), (6, 1), (29, 1), (5, 1)] {
            let mut d = good.clone();
            d[at] = v;
            assert!(Header::decode(&d).is_none(), "byte {at} = {v}");
        }
        // A frame index past the message's end.
        h.idx = 2;
        let mut head = [0u8; HEADER];
        h.encode(&mut head);
        assert!(Header::decode(&head).is_none());
        // A NAK without a known reason.
        let mut n = Header::new(Kind::Nak, true);
        n.code = 9;
        n.encode(&mut head);
        assert!(Header::decode(&head).is_none());
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(2);
        for _ in 0..20_000 {
            let n = rng.gen_range(0..2 * HEADER);
            let mut d: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            if d.len() >= 4 && rng.gen() {
                d[0..2].copy_from_slice(&MAGIC.to_le_bytes());
                d[2] = VERSION;
            }
            let _ = Header::decode(&d);
        }
    }
}
