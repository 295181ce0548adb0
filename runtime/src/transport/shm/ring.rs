//! Single-producer/single-consumer rings of variable-length frames in shared memory.
//!
//! A ring is one control line, then `size` bytes of frames:
//!
//! ```text
//! 0      tail: u64 (bytes the consumer has handed back; written by the consumer alone)
//! LINE   frames, each [word: u32][pad: u32][gap][frame bytes ...] rounded up to half a cache line
//! ```
//!
//! A frame takes what it needs, so small messages are packed two to a line and a ring holds
//! thousands of them. (Two to a line, not one: where moving a line between the cores is
//! slow, streams of messages of up to 8 bytes went 1.4-1.5x faster.) A frame of whole lines
//! starts at a line, so it takes as few lines as its length allows: after a frame that ends
//! half-way through a line, a `PAD` word in the second half sends the consumer to the next
//! line. (A frame of one and a half lines takes two wherever it starts. Unaligned, every
//! message of 9-40 bytes after one odd small frame, a barrier's say, moved two lines instead
//! of one until the lap ended: ping-pong of 16 B took 0.35 us against 0.24.) Positions are
//! byte counts that only grow; a frame at position `p` lies at offset `p % size` and never
//! wraps: a frame that does not fit before the end of the ring is preceded by a `SKIP` word
//! that sends the consumer to the start.
//!
//! A frame whose payload is large ([`ALIGNED_PAYLOAD`]) lies `gap` bytes into its slot, so
//! that its payload starts a line: copied in and out whole lines at a time, it spans one line
//! fewer. (Behind the 8 bytes of the word and a 16-byte header, a payload started 24 or 56
//! bytes into a line; a loop of glibc's memcpy into and out of such a place took 32.1 ns per
//! 1 KiB pair here, 22.6 with the place line-aligned.)
//!
//! The word of a frame says whether it is there: `0` not yet, `READY | gap << 23 | len` a frame
//! of `len` bytes `gap` bytes in, `SKIP` the rest of the lap is unused, `PAD` the rest of the
//! line is. A `PAD` word is published after the frame behind it, so a consumer that sees it
//! finds that frame whole. Before the producer publishes a frame with a release store of its
//! word, the word after the frame (the place of the next one) reads `0`: the producer clears
//! the words of the places ahead of it, a few lines at a time and after a publication, not on
//! its path.
//! So when the consumer reaches a position, its word is `0` or a frame published since: the
//! consumer never writes the frame lines, and never mistakes old bytes for a frame. (UCX's
//! mm FIFO avoids the consumer's writes the same way, with an owner bit per fixed-size
//! element.)
//!
//! Space comes back in batches: the consumer publishes its position in `tail` once per poll
//! of the ring ([`Ring::release`]), not per frame; the producer reads `tail` only when its
//! last reading says the ring is full. So a message moves its own lines from producer to
//! consumer and nothing else: no flag line bounces back per message, no counter per frame.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::segment::LINE;

/// Bytes before the frame in every slot.
pub(crate) const FRAME_HDR: usize = 8;

const READY: u32 = 1 << 31;
/// A frame word's length bits (a frame holds at most 4 MiB, the largest the transport makes).
const LEN: u32 = (1 << 23) - 1;
/// Where a frame word keeps its gap (6 bits: less than a line).
const GAP_SHIFT: u32 = 23;
/// Payloads of at least this many bytes start a line.
const ALIGNED_PAYLOAD: usize = 256;
const SKIP: u32 = u32::MAX;
const PAD: u32 = 1 << 30;

/// Bytes a ring of `size` bytes of frames takes in the segment (its control line too).
pub(crate) fn ring_bytes(size: usize) -> usize {
    LINE + size
}

/// Frames start at multiples of this: half a cache line, so two small messages (up to 8
/// bytes of payload after the engine's 16-byte header) share a line.
const ALIGN: usize = LINE / 2;

/// Bytes ahead of the producer whose frame words it keeps cleared.
const ZERO_AHEAD: usize = 2048;

/// Bytes a frame of `n` bytes takes in the ring.
fn slot_len(n: usize) -> usize {
    (FRAME_HDR + n).next_multiple_of(ALIGN)
}

/// The smallest ring for frames of up to `max_frame` bytes: room for two of the largest
/// (one may follow a skip of almost its size) and the next frame's word.
pub(crate) fn min_size(max_frame: usize) -> usize {
    (2 * slot_len(max_frame) + ALIGN).next_multiple_of(LINE)
}

/// One side's view of a ring.
#[derive(Debug)]
pub(crate) struct Ring {
    /// The control line; the frames start one line after it.
    base: NonNull<u8>,
    size: usize,
    max_frame: usize,
    /// Next position to fill (producer) or to read (consumer).
    pos: u64,
    /// Producer: the consumer's `tail` as last read. Consumer: the position last published.
    tail: u64,
    /// Producer: the word of every frame place from `pos` up to here is 0.
    zeroed: u64,
}

impl Ring {
    /// # Safety
    /// `base` must point to [`ring_bytes`]`(size)` bytes of shared memory that stay mapped for
    /// the life of this `Ring`, cache-line aligned, zeroed before either side first used it,
    /// with exactly one producer `Ring` and one consumer `Ring` using it across all
    /// processes. `size` must be a multiple of [`LINE`] and at least [`min_size`]`(max_frame)`.
    pub(crate) unsafe fn new(base: NonNull<u8>, size: usize, max_frame: usize) -> Ring {
        debug_assert!(size.is_multiple_of(LINE) && size >= min_size(max_frame) && max_frame <= LEN as usize);
        // The ring starts zeroed: every place's word is 0 for a whole lap.
        Ring { base, size, max_frame, pos: 0, tail: 0, zeroed: size as u64 }
    }

    fn tail_word(&self) -> &AtomicU64 {
        // SAFETY: the control line starts the ring (constructor contract), is aligned, and its
        // first 8 bytes are only accessed atomically.
        unsafe { &*(self.base.as_ptr() as *const AtomicU64) }
    }

    /// The frame slot at offset `off` (< size) of the frames.
    fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.size);
        // SAFETY: the frames are the `size` bytes after the control line (constructor contract).
        unsafe { self.base.as_ptr().add(LINE + off) }
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` is a multiple of ALIGN inside the frames, so the slot's first 4 bytes
        // are aligned, inside the ring, and only accessed atomically.
        unsafe { &*(self.at(off) as *const AtomicU32) }
    }

    /// Producer: whether `need` more bytes (and the next frame's word) fit, reading the
    /// consumer's tail again only if the last reading says they do not.
    fn room(&mut self, need: usize) -> bool {
        let fits = |tail: u64| self.pos + (need + ALIGN) as u64 <= tail + self.size as u64;
        if fits(self.tail) {
            return true;
        }
        self.tail = self.tail_word().load(Ordering::Acquire);
        fits(self.tail)
    }

    /// Producer: writes `hdr ++ payload` as one frame; false if the ring is full.
    pub(crate) fn push(&mut self, hdr: &[u8], payload: &[u8]) -> bool {
        let n = hdr.len() + payload.len();
        assert!(n <= self.max_frame, "frame of {n} bytes exceeds the ring's {}", self.max_frame);
        // A large payload starts a line, the frame `gap` bytes into a slot at `off` (where the
        // gap keeps the frame within the largest: the ring's room is counted in those).
        let aligned = payload.len() >= ALIGNED_PAYLOAD && n + LINE <= self.max_frame;
        let gap = |off: usize| if aligned { (LINE - (off + FRAME_HDR + hdr.len()) % LINE) % LINE } else { 0 };
        let off = (self.pos % self.size as u64) as usize;
        let need = slot_len(gap(off) + n);
        // Bytes left unused before the frame: the rest of the lap (`SKIP`) if it does not fit
        // there, else the rest of the line (`PAD`) if the frame would take a line more
        // without (a whole number of lines, from half a line in; not for a frame with a gap,
        // which its gap places).
        let pad = if !aligned && need.is_multiple_of(LINE) { off.next_multiple_of(LINE) - off } else { 0 };
        let wraps = off + pad + need > self.size;
        let (gap, need) = if wraps { (gap(0), slot_len(gap(0) + n)) } else { (gap(off), need) };
        let skip = if wraps { self.size - off } else { pad };
        if !self.room(skip + need) {
            return false;
        }
        // The word after the frame must read 0 before the frame is published (normally
        // cleared ahead already, off the publishing path: see below).
        let end = self.pos + (skip + need) as u64;
        if self.zeroed < end + ALIGN as u64 {
            // Only the words that will be read: after a skip, the one at the lap's start,
            // and the one after the frame (those in between lie inside the frame).
            if wraps && self.zeroed <= self.pos + skip as u64 {
                self.word(0).store(0, Ordering::Relaxed);
            }
            self.word((end % self.size as u64) as usize).store(0, Ordering::Relaxed);
            self.zeroed = end + ALIGN as u64;
        }
        if wraps {
            // The consumer goes on at offset 0, whose word is cleared (above).
            self.word(off).store(SKIP, Ordering::Release);
        }
        let padded = (!wraps && pad > 0).then_some(off);
        self.pos += skip as u64;
        let off = (self.pos % self.size as u64) as usize;
        let c = self.at(off);
        // SAFETY: the slot `off..off + need` lies inside the frames (no wrap, checked above) and
        // in the free part of the ring (`room`): the consumer handed it back and reads it again
        // only after the release store below. `n` fits (asserted).
        unsafe {
            std::ptr::copy_nonoverlapping(hdr.as_ptr(), c.add(FRAME_HDR + gap), hdr.len());
            crate::copy::copy_raw(payload.as_ptr(), c.add(FRAME_HDR + gap + hdr.len()), payload.len());
        }
        self.word(off).store(READY | (gap as u32) << GAP_SHIFT | n as u32, Ordering::Release);
        if let Some(at) = padded {
            // After the frame: until now the consumer saw 0 at `at` and did not look further.
            self.word(at).store(PAD, Ordering::Release);
        }
        self.pos += need as u64;
        // Clear the words of the places ahead in one go, after the frame is out: stores to
        // lines the consumer last read wait for the other core, and on the publishing path
        // they held up every message (ping-pong of 16-64 B: 0.50 us against 0.41).
        // (For small frames: a large one pays for one word beside its copy.)
        if need <= ZERO_AHEAD / 8 && self.zeroed < self.pos + ZERO_AHEAD as u64 / 2 {
            let free = self.tail + self.size as u64;
            self.zero_to((self.pos + ZERO_AHEAD as u64).min(free));
        }
        true
    }

    /// Producer: clears the word of every frame place up to `to` (all in the free part of
    /// the ring: the consumer reads none of them until a frame there is published).
    fn zero_to(&mut self, to: u64) {
        while self.zeroed < to {
            self.word((self.zeroed % self.size as u64) as usize).store(0, Ordering::Relaxed);
            self.zeroed += ALIGN as u64;
        }
    }

    /// Consumer: if a frame is ready, passes it to `f` and moves past it. Its space goes back
    /// to the producer at the next [`Ring::release`].
    pub(crate) fn pop<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let mut off = (self.pos % self.size as u64) as usize;
        let mut w = self.word(off).load(Ordering::Acquire);
        if w == SKIP {
            self.pos += (self.size - off) as u64;
            off = 0;
            w = self.word(0).load(Ordering::Acquire);
        } else if w == PAD && off + ALIGN < self.size {
            // (Never at the lap's last half line, where no frame could follow: the peer's
            // word is not trusted to send us past the ring.)
            self.pos += ALIGN as u64;
            off += ALIGN;
            w = self.word(off).load(Ordering::Acquire);
        }
        if w & READY == 0 {
            return None;
        }
        // The gap and the length come from the peer, so they are clamped to the ring.
        let start = FRAME_HDR + ((w >> GAP_SHIFT) as usize % LINE).min(self.size - off - FRAME_HDR);
        let n = ((w & LEN) as usize).min(self.size - off - start);
        // SAFETY: the word's acquire load saw the producer's release store, made after it wrote
        // the frame; the producer does not touch the slot again until we hand it back.
        let frame = unsafe { std::slice::from_raw_parts(self.at(off).add(start), n) };
        let r = f(frame);
        self.pos += (start + n).next_multiple_of(ALIGN) as u64;
        Some(r)
    }

    /// Consumer: hands back to the producer the space of every frame read so far.
    pub(crate) fn release(&mut self) {
        if self.tail != self.pos {
            self.tail = self.pos;
            self.tail_word().store(self.pos, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zeroed, line-aligned ring of `size` bytes of frames.
    fn mem(size: usize) -> Vec<[u8; LINE]> {
        vec![[0u8; LINE]; ring_bytes(size) / LINE]
    }

    fn pair(m: &mut [[u8; LINE]], size: usize, max: usize) -> (Ring, Ring) {
        let base = NonNull::new(m.as_mut_ptr() as *mut u8).unwrap();
        // SAFETY: `m` outlives both rings in every test; one producer and one consumer.
        unsafe { (Ring::new(base, size, max), Ring::new(base, size, max)) }
    }

    #[test]
    fn fifo_backpressure_and_batched_release() {
        let size = min_size(100);
        let mut m = mem(size);
        let (mut tx, mut rx) = pair(&mut m, size, 100);
        assert!(rx.pop(|_| ()).is_none());
        // Small frames take half a line each.
        let mut sent = 0u8;
        while tx.push(&[sent], &[sent; 10]) {
            sent += 1;
        }
        assert_eq!(sent as usize, size / ALIGN - 1, "half a line per frame, one kept for the next word");
        for i in 0..sent {
            assert_eq!(rx.pop(|f| f.to_vec()).unwrap(), [&[i][..], &[i; 10]].concat());
        }
        assert!(rx.pop(|_| ()).is_none());
        // Nothing comes back until the consumer releases.
        assert!(!tx.push(&[1], &[]));
        rx.release();
        assert!(tx.push(&[7], &[1, 2]));
        assert_eq!(rx.pop(|f| f.to_vec()).unwrap(), vec![7, 1, 2]);
        assert!(rx.pop(|_| ()).is_none());
    }

    #[test]
    fn frames_of_every_size_wrap_in_order() {
        // Many laps of frames of mixed sizes, with skips at the end of each lap, and the
        // consumer draining at varying paces: every frame arrives whole and in order.
        let max = 300;
        let size = min_size(max) + 3 * LINE;
        let mut m = mem(size);
        let (mut tx, mut rx) = pair(&mut m, size, max);
        let frame = |k: u32| -> Vec<u8> {
            let n = (k as usize * 37) % (max + 1);
            (0..n).map(|i| (k as usize + i) as u8).collect()
        };
        let (mut next_tx, mut next_rx) = (0u32, 0u32);
        let mut skips = 0;
        while next_rx < 5000 {
            for _ in 0..(next_tx % 5) + 1 {
                let f = frame(next_tx);
                let before = tx.pos;
                if !tx.push(&f[..f.len().min(3)], &f[f.len().min(3)..]) {
                    break;
                }
                skips += usize::from(tx.pos - before > slot_len(f.len()) as u64);
                next_tx += 1;
            }
            for _ in 0..(next_rx % 3) + 1 {
                match rx.pop(|f| f.to_vec()) {
                    Some(got) => {
                        assert_eq!(got, frame(next_rx), "frame {next_rx}");
                        next_rx += 1;
                    }
                    None => break,
                }
            }
            rx.release();
        }
        assert!(skips > 10, "laps ended in skips ({skips})");
    }

    #[test]
    fn a_frame_takes_as_few_lines_as_its_length_allows() {
        // Small and larger frames mixed, so larger ones often follow a half line: each
        // takes the fewest lines (the consumer passes the pads), whole and in order, lap
        // after lap, the ends of laps included (a pad would leave no room there: a skip).
        let size = min_size(128) + 5 * LINE;
        let mut m = mem(size);
        let frames = m.as_ptr() as usize + LINE;
        let (mut tx, mut rx) = pair(&mut m, size, 128);
        let frame = |k: usize| -> Vec<u8> { vec![k as u8; [1, 40, 3, 60, 100, 5, 24, 120][k % 8]] };
        let (mut pads, mut skips) = (0, 0);
        for k in 0..3000 {
            let f = frame(k);
            let before = tx.pos;
            assert!(tx.push(&f[..1], &f[1..]), "frame {k}");
            let unused = (tx.pos - before) as usize - slot_len(f.len());
            pads += usize::from(unused == ALIGN);
            skips += usize::from(unused > 0 && (tx.pos - slot_len(f.len()) as u64).is_multiple_of(size as u64));
            let (got, at) = rx.pop(|g| (g.to_vec(), g.as_ptr() as usize - FRAME_HDR - frames)).unwrap();
            assert_eq!(got, f, "frame {k}");
            let lines = slot_len(f.len()).div_ceil(LINE);
            assert_eq!((at % LINE + slot_len(f.len())).div_ceil(LINE), lines, "frame {k} at offset {at}");
            assert!(rx.pop(|_| ()).is_none());
            rx.release();
        }
        assert!(pads > 100 && skips > 10, "pads {pads}, skips {skips}");
    }

    #[test]
    fn a_large_payload_starts_a_line_lap_after_lap() {
        // Frames of a 16-byte header and payloads of 0-1500 bytes, laps ending in skips: each
        // arrives whole and in order, and a payload of `ALIGNED_PAYLOAD` or more starts a line
        // of the ring (the frames are one line after its start).
        let max = 1600;
        let size = min_size(max) + 7 * LINE;
        let mut m = mem(size);
        let base = m.as_ptr() as usize;
        let (mut tx, mut rx) = pair(&mut m, size, max);
        let frame = |k: usize| -> Vec<u8> { (0..16 + (k * 211) % 1501).map(|i| (k + i) as u8).collect() };
        let (mut next_tx, mut next_rx, mut aligned) = (0, 0, 0);
        while next_rx < 3000 {
            while next_tx < next_rx + 4 && tx.push(&frame(next_tx)[..16], &frame(next_tx)[16..]) {
                next_tx += 1;
            }
            while let Some((got, at)) = rx.pop(|f| (f.to_vec(), f.as_ptr() as usize + 16 - base)) {
                assert_eq!(got, frame(next_rx), "frame {next_rx}");
                if got.len() - 16 >= ALIGNED_PAYLOAD {
                    assert_eq!(at % LINE, 0, "frame {next_rx}: payload {} bytes into a line", at % LINE);
                    aligned += 1;
                }
                next_rx += 1;
            }
            rx.release();
        }
        assert!(aligned > 2000, "{aligned} payloads of {ALIGNED_PAYLOAD} bytes or more");
    }

    #[test]
    fn old_bytes_are_never_read_as_a_frame() {
        // Frames whose bytes look like ready words: after the producer moves on, the
        // consumer waiting at the next position still sees nothing.
        let size = min_size(200);
        let mut m = mem(size);
        let (mut tx, mut rx) = pair(&mut m, size, 200);
        let fake = (READY | 8).to_le_bytes().repeat(50);
        for lap in 0..20 {
            while tx.push(&[], &fake) {}
            while let Some(f) = rx.pop(|f| f.to_vec()) {
                assert_eq!(f, fake, "lap {lap}");
            }
            assert!(rx.pop(|_| ()).is_none());
            rx.release();
        }
    }

    #[test]
    fn a_length_beyond_the_ring_is_clamped() {
        let size = min_size(64);
        let mut m = mem(size);
        let (_, mut rx) = pair(&mut m, size, 64);
        rx.word(0).store(READY | LEN, Ordering::Release);
        assert_eq!(rx.pop(|f| f.len()), Some(size - FRAME_HDR));
        // A gap too, every bit of the word set but the `PAD` and `SKIP` ones: still inside.
        let (_, mut rx) = pair(&mut m, size, 64);
        rx.word(0).store(READY | 0x1fff_ffff, Ordering::Release);
        assert_eq!(rx.pop(|f| f.len()), Some(size - FRAME_HDR - (LINE - 1)));
    }
}
