//! Single-producer/single-consumer rings of fixed-size cells in shared memory.
//!
//! A cell is `[flag: u32][len: u32][frame bytes ...]`; `cell_size` is a multiple of the
//! cache line, so a small frame shares the line of its flag and one line moves per message.
//! The producer owns a cell while its flag is 0, fills it, then publishes it with a release
//! store of 1; the consumer reads it after an acquire load of 1 and hands it back with a
//! release store of 0. Head and tail counters are private to each side: only the flags are
//! shared, so no counter line bounces between cores.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes before the frame in every cell.
pub(crate) const CELL_HDR: usize = 8;

/// One side's view of a ring.
#[derive(Debug)]
pub(crate) struct Ring {
    base: NonNull<u8>,
    cells: usize,
    cell_size: usize,
    /// Next cell to fill (producer) or to read (consumer).
    pos: usize,
}

impl Ring {
    /// # Safety
    /// `base` must point to `cells * cell_size` bytes of shared memory that stay mapped for
    /// the life of this `Ring`, laid out as above, 8-byte aligned, with exactly one producer
    /// `Ring` and one consumer `Ring` using it across all processes.
    pub(crate) unsafe fn new(base: NonNull<u8>, cells: usize, cell_size: usize) -> Ring {
        Ring { base, cells, cell_size, pos: 0 }
    }

    /// Largest frame a cell holds.
    pub(crate) fn max_frame(&self) -> usize {
        self.cell_size - CELL_HDR
    }

    fn cell(&self) -> (*mut u8, &AtomicU32) {
        // SAFETY: `pos % cells < cells`, so the cell lies inside the ring (constructor
        // contract); its first 4 bytes are the flag, 8-byte aligned, only accessed atomically.
        unsafe {
            let c = self.base.as_ptr().add((self.pos % self.cells) * self.cell_size);
            (c, &*(c as *const AtomicU32))
        }
    }

    /// Producer: writes `hdr ++ payload` as one frame; false if the ring is full.
    pub(crate) fn push(&mut self, hdr: &[u8], payload: &[u8]) -> bool {
        let n = hdr.len() + payload.len();
        assert!(n <= self.max_frame(), "frame of {n} bytes exceeds the cell");
        let (c, flag) = self.cell();
        if flag.load(Ordering::Acquire) != 0 {
            return false;
        }
        // SAFETY: flag 0 means the consumer has released this cell and will not read it until
        // the release store below; `n` fits in the cell (asserted above).
        unsafe {
            std::ptr::copy_nonoverlapping(hdr.as_ptr(), c.add(CELL_HDR), hdr.len());
            std::ptr::copy_nonoverlapping(payload.as_ptr(), c.add(CELL_HDR + hdr.len()), payload.len());
            (c.add(4) as *mut u32).write(n as u32);
        }
        flag.store(1, Ordering::Release);
        self.pos = self.pos.wrapping_add(1);
        true
    }

    /// Consumer: if a frame is ready, passes it to `f` and releases the cell.
    pub(crate) fn pop<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let (c, flag) = self.cell();
        if flag.load(Ordering::Acquire) == 0 {
            return None;
        }
        // SAFETY: flag 1 (acquired) means the producer finished writing the cell and will not
        // touch it until we store 0. The length comes from the peer, so it is clamped to the cell.
        let frame = unsafe {
            let n = ((c.add(4) as *const u32).read() as usize).min(self.max_frame());
            std::slice::from_raw_parts(c.add(CELL_HDR), n)
        };
        let r = f(frame);
        flag.store(0, Ordering::Release);
        self.pos = self.pos.wrapping_add(1);
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_backpressure() {
        let mut mem = vec![0u64; 4 * 128 / 8];
        let base = NonNull::new(mem.as_mut_ptr() as *mut u8).unwrap();
        // SAFETY: `mem` outlives both rings; one producer and one consumer.
        let (mut tx, mut rx) = unsafe { (Ring::new(base, 4, 128), Ring::new(base, 4, 128)) };
        assert!(rx.pop(|_| ()).is_none());
        for i in 0..4u8 {
            assert!(tx.push(&[i], &[i; 10]));
        }
        assert!(!tx.push(&[9], &[]), "full ring refuses");
        for i in 0..4u8 {
            let f = rx.pop(|f| f.to_vec()).unwrap();
            assert_eq!(f.len(), 11);
            assert_eq!(f[0], i);
        }
        assert!(tx.push(&[7], &[1, 2]));
        assert_eq!(rx.pop(|f| f.to_vec()).unwrap(), vec![7, 1, 2]);
        assert!(rx.pop(|_| ()).is_none());
    }
}
