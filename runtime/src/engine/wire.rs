//! The engine's frame header: the one wire format every transport carries.
//!
//! Layout (version 1, little-endian, 40 bytes), followed by the frame's payload:
//!
//! | bytes | field   | meaning per kind                                              |
//! |-------|---------|---------------------------------------------------------------|
//! | 0     | kind    | [`Kind`]                                                      |
//! | 1     | version | [`WIRE_VERSION`]                                              |
//! | 2     | flags   | [`FLAG_TRUNCATED`] on `Fin`                                   |
//! | 3     | -       | zero                                                          |
//! | 4..8  | ctx     | communicator context (Eager, Rts)                             |
//! | 8..12 | src     | sender's rank in that communicator (Eager, Rts)               |
//! | 12..16| tag     | message tag (Eager, Rts)                                      |
//! | 16..24| len     | total message length in bytes (Eager, Rts)                    |
//! | 24..32| a       | Rts/Cts/Fin: sender's request; Data: receiver's request       |
//! | 32..40| b       | Rts: sender buffer address (0: none); Cts: receiver's request; Data: offset |

/// Version of this header layout; a frame with another version is rejected.
pub(crate) const WIRE_VERSION: u8 = 1;
/// Bytes of every header.
pub(crate) const HEADER_LEN: usize = 40;
/// On `Fin`: the receiver matched the message but it did not fit (the receive failed).
pub(crate) const FLAG_TRUNCATED: u8 = 1;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// A whole small message; payload = the message.
    Eager = 1,
    /// Request to send a large message (rendezvous); no payload.
    Rts = 2,
    /// Receiver matched an Rts and wants the data streamed in `Data` frames.
    Cts = 3,
    /// A piece of a rendezvous message; payload = the bytes at `offset`.
    Data = 4,
    /// Receiver has finished with the sender's buffer (single-copy read done, or truncated).
    Fin = 5,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Eager,
            2 => Kind::Rts,
            3 => Kind::Cts,
            4 => Kind::Data,
            5 => Kind::Fin,
            _ => return None,
        })
    }
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: Kind,
    pub(crate) flags: u8,
    pub(crate) ctx: u32,
    pub(crate) src: u32,
    pub(crate) tag: i32,
    pub(crate) len: u64,
    pub(crate) a: u64,
    pub(crate) b: u64,
}

/// Why a frame was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WireError {
    Short(usize),
    Version(u8),
    Kind(u8),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Short(n) => write!(f, "frame of {n} bytes is shorter than a header"),
            WireError::Version(v) => {
                write!(f, "frame of wire version {v}, expected {WIRE_VERSION}")
            }
            WireError::Kind(k) => write!(f, "frame of unknown kind {k}"),
        }
    }
}

impl Header {
    pub(crate) fn new(kind: Kind) -> Header {
        Header {
            kind,
            flags: 0,
            ctx: 0,
            src: 0,
            tag: 0,
            len: 0,
            a: 0,
            b: 0,
        }
    }

    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut o = [0u8; HEADER_LEN];
        o[0] = self.kind as u8;
        o[1] = WIRE_VERSION;
        o[2] = self.flags;
        o[4..8].copy_from_slice(&self.ctx.to_le_bytes());
        o[8..12].copy_from_slice(&self.src.to_le_bytes());
        o[12..16].copy_from_slice(&self.tag.to_le_bytes());
        o[16..24].copy_from_slice(&self.len.to_le_bytes());
        o[24..32].copy_from_slice(&self.a.to_le_bytes());
        o[32..40].copy_from_slice(&self.b.to_le_bytes());
        o
    }

    /// Splits a frame into its header and payload.
    pub(crate) fn decode(frame: &[u8]) -> Result<(Header, &[u8]), WireError> {
        if frame.len() < HEADER_LEN {
            return Err(WireError::Short(frame.len()));
        }
        let (h, payload) = frame.split_at(HEADER_LEN);
        if h[1] != WIRE_VERSION {
            return Err(WireError::Version(h[1]));
        }
        let kind = Kind::from_u8(h[0]).ok_or(WireError::Kind(h[0]))?;
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        Ok((
            Header {
                kind,
                flags: h[2],
                ctx: u32_at(4),
                src: u32_at(8),
                tag: u32_at(12) as i32,
                len: u64_at(16),
                a: u64_at(24),
                b: u64_at(32),
            },
            payload,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn round_trip_random_headers() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let kinds = [Kind::Eager, Kind::Rts, Kind::Cts, Kind::Data, Kind::Fin];
        for _ in 0..1000 {
            let h = Header {
                kind: kinds[rng.gen_range(0..kinds.len())],
                flags: rng.gen(),
                ctx: rng.gen(),
                src: rng.gen(),
                tag: rng.gen(),
                len: rng.gen(),
                a: rng.gen(),
                b: rng.gen(),
            };
            let mut frame = h.encode().to_vec();
            frame.extend_from_slice(b"xyz");
            let (d, p) = Header::decode(&frame).unwrap();
            assert_eq!(d, h);
            assert_eq!(p, b"xyz");
        }
    }

    #[test]
    fn rejects_bad_frames() {
        assert_eq!(Header::decode(&[1, 1, 0]), Err(WireError::Short(3)));
        let mut f = Header::new(Kind::Eager).encode();
        f[1] = 9;
        assert_eq!(Header::decode(&f), Err(WireError::Version(9)));
        let mut f = Header::new(Kind::Eager).encode();
        f[0] = 77;
        assert_eq!(Header::decode(&f), Err(WireError::Kind(77)));
        // Arbitrary bytes never panic.
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        for n in 0..200 {
            let v: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            let _ = Header::decode(&v);
        }
    }
}
