//! Buffers that hold messages arriving before their receive (an eager payload, a rendezvous
//! head), kept for reuse, as ob1 keeps its receive fragments in free lists.
//!
//! Without reuse, each unexpected message of a few hundred KiB is a fresh heap allocation
//! and its release may hand the memory back to the system (glibc trims the heap's top above
//! its trim threshold), so the next one faults its pages in again: 4 ranks on 2 cores over
//! TCP, all-reduce of 2 MiB (ring steps of 512 KiB eager messages), ~125 page faults and 3
//! `brk` calls per rank and call.

/// Buffers smaller than this are kept by size class (powers of two from `SMALL_MIN`), so a
/// stream of small messages arriving before their receives allocates nothing per message.
const MIN_KEPT: usize = 4 << 10;
const SMALL_MIN: usize = 64;
/// Size classes below `MIN_KEPT`, and idle buffers kept per class.
const CLASSES: usize = (MIN_KEPT / SMALL_MIN).trailing_zeros() as usize + 1;
const SMALL_COUNT: usize = 256;

/// At most this many bytes of capacity are kept idle, in at most `MAX_COUNT` buffers.
const MAX_BYTES: usize = 32 << 20;
const MAX_COUNT: usize = 64;

/// Idle buffers for unexpected messages.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    free: Vec<Vec<u8>>,
    bytes: usize,
    /// Idle small buffers, by class: capacity `SMALL_MIN << class`.
    small: [Vec<Vec<u8>>; CLASSES],
}

/// The class of a small buffer of `len` bytes (its capacity is the power of two above).
fn class_of(len: usize) -> usize {
    (len.max(SMALL_MIN).next_power_of_two() / SMALL_MIN).trailing_zeros() as usize
}

impl Pool {
    /// A buffer holding a copy of `data`: the smallest idle one it fits in, else a new one.
    pub(crate) fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        if data.len() < MIN_KEPT {
            let c = class_of(data.len());
            let mut buf = self.small[c].pop().unwrap_or_else(|| Vec::with_capacity(SMALL_MIN << c));
            buf.clear();
            buf.extend_from_slice(data);
            return buf;
        }
        let fits = self.free.iter().enumerate().filter(|(_, b)| b.capacity() >= data.len());
        let best = fits.min_by_key(|(_, b)| b.capacity()).map(|(i, _)| i);
        let Some(i) = best else { return data.to_vec() };
        let mut buf = self.free.swap_remove(i);
        self.bytes -= buf.capacity();
        buf.clear();
        buf.extend_from_slice(data);
        buf
    }

    /// Takes back a buffer whose message was delivered. When full, the smallest idle
    /// buffers make room (large messages are the ones worth keeping memory for).
    pub(crate) fn give_back(&mut self, buf: Vec<u8>) {
        let cap = buf.capacity();
        let c = class_of(cap);
        if c < CLASSES && cap == SMALL_MIN << c {
            if self.small[c].len() < SMALL_COUNT {
                self.small[c].push(buf);
            }
            return;
        }
        if !(MIN_KEPT..=MAX_BYTES).contains(&cap) {
            return;
        }
        while self.free.len() >= MAX_COUNT || self.bytes + cap > MAX_BYTES {
            let (i, smallest) = self.free.iter().enumerate().min_by_key(|(_, b)| b.capacity()).expect("not empty");
            if smallest.capacity() >= cap {
                return;
            }
            self.bytes -= self.free.swap_remove(i).capacity();
        }
        self.bytes += cap;
        self.free.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::{class_of, Pool, CLASSES, MAX_BYTES, MAX_COUNT, MIN_KEPT, SMALL_COUNT};

    #[test]
    fn buffers_are_reused_best_fit_and_bounded() {
        let mut pool = Pool::default();
        let big = pool.copy_of(&[7u8; 512 << 10]);
        let mid = pool.copy_of(&[8u8; 64 << 10]);
        let (big_ptr, mid_ptr) = (big.as_ptr(), mid.as_ptr());
        pool.give_back(big);
        pool.give_back(mid);
        // The smallest buffer that fits is taken, and holds exactly the new bytes.
        let a = pool.copy_of(&[1u8; 60 << 10]);
        assert_eq!(a.as_ptr(), mid_ptr);
        assert_eq!(a, vec![1u8; 60 << 10]);
        let b = pool.copy_of(&[2u8; 100 << 10]);
        assert_eq!(b.as_ptr(), big_ptr);
        assert_eq!(b, vec![2u8; 100 << 10]);
        // Nothing idle fits: a new buffer.
        let c = pool.copy_of(&[3u8; 1 << 20]);
        assert_eq!(c.len(), 1 << 20);
        assert!(pool.free.is_empty() && pool.bytes == 0);
        // Small buffers are kept by class, up to a count, and reused.
        pool.give_back(vec![0u8; MIN_KEPT - 1]);
        assert!(pool.free.is_empty() && pool.small.iter().all(Vec::is_empty), "not a class's capacity");
        let small = pool.copy_of(&[5u8; 100]);
        assert_eq!(small.capacity(), 128);
        let small_ptr = small.as_ptr();
        pool.give_back(small);
        let again = pool.copy_of(&[6u8; 65]);
        assert_eq!((again.as_ptr(), &again[..]), (small_ptr, &[6u8; 65][..]), "the idle buffer of the class");
        for _ in 0..SMALL_COUNT + 5 {
            pool.give_back(Vec::with_capacity(64));
        }
        assert_eq!(pool.small[0].len(), SMALL_COUNT, "at most SMALL_COUNT idle per class");
        assert_eq!(class_of(MIN_KEPT - 1), CLASSES - 1);
        // The bounds hold, and the largest buffers stay.
        for _ in 0..MAX_COUNT + 8 {
            pool.give_back(Vec::with_capacity(MIN_KEPT + 1));
        }
        assert_eq!(pool.free.len(), MAX_COUNT);
        for _ in 0..(MAX_BYTES >> 20) + 4 {
            pool.give_back(Vec::with_capacity(1 << 20));
        }
        assert!(pool.bytes <= MAX_BYTES && pool.free.len() <= MAX_COUNT);
        assert_eq!(pool.bytes, pool.free.iter().map(|b| b.capacity()).sum::<usize>());
        assert!(pool.free.iter().all(|b| b.capacity() >= 1 << 20));
    }
}
