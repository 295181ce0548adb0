//! Copies that keep clear of `rep movsb`'s short-distance stall.
//!
//! On x86-64, Linux copies between processes (`process_vm_readv`/`_writev`, the single-copy
//! path of shared memory) with `rep movsb`, and glibc's `memcpy` takes `rep movsb` for copies
//! from about 2 KiB up to its non-temporal threshold. `rep movsb` runs several times slower
//! when the destination lies a few bytes past the source modulo the page size: 4 KiB
//! aliasing between its loads and its stores. Measured on an AMD EPYC (Zen) under Linux 6.x
//! and glibc 2.36, with the destination 8 to 31 bytes past the source modulo 4 KiB,
//! `process_vm_readv` of 128 KiB takes 60-83 us against 13 us, of 1 MiB 650 us against
//! 100-120 us, and `memcpy` of 128 KiB 44 us against 2.7 us.
//!
//! That distance is common, not rare: glibc returns each allocation of 128 KiB or more as
//! its own mapping, 16 bytes past a page boundary, while OSU-style benchmarks and many
//! programs align their buffers to pages, and mpr's shared segments are page-aligned. So a
//! message from a page-aligned buffer into a `malloc`ed one, or from a segment's slot into
//! one, is exactly 16 bytes off.
//!
//! This module names that distance ([`near`]) and copies around it: [`copy`] moves such a
//! pair in pieces below glibc's `rep movsb` threshold (vector loads and stores, which do not
//! stall), and the single-copy transport reads and writes such a pair through a bounce
//! buffer placed at the remote side's offset (`transport::shm`). Scratch buffers of the
//! collectives are placed at the page offset of the buffer they exchange with ([`placed`]),
//! so their copies are never near in the first place.

/// The page size the aliasing follows (the low 12 address bits, on every x86-64 core).
pub(crate) const PAGE: usize = 4096;

/// Whether copying from `src` to `dst` puts the destination a short distance past the source
/// modulo a page: the stall's window, a cache line (measured: 1 to 31 bytes stall). Never
/// on other architectures: no `rep movsb` there.
#[inline]
pub(crate) fn near(dst: usize, src: usize) -> bool {
    cfg!(target_arch = "x86_64") && (1..64).contains(&(dst.wrapping_sub(src) & (PAGE - 1)))
}

/// Pieces [`copy`] splits a near pair into: below glibc's smallest `rep movsb` threshold
/// (2112 bytes, where the CPU has fast short `rep movsb`), so each piece is copied by vector
/// loads and stores.
pub(crate) const PIECE: usize = 2048;

/// Copies `src` into `dst` (same length), in pieces where the pair is [`near`].
#[inline]
pub(crate) fn copy<T: bytemuck::Pod>(dst: &mut [T], src: &[T]) {
    let (dst, src) = (bytemuck::cast_slice_mut::<T, u8>(dst), bytemuck::cast_slice::<T, u8>(src));
    if dst.len() > PIECE && near(dst.as_ptr() as usize, src.as_ptr() as usize) {
        assert_eq!(dst.len(), src.len(), "a copy between slices of different lengths");
        for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
            d.copy_from_slice(s);
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// `std::ptr::copy_nonoverlapping` of `n` bytes, in pieces where the pair is [`near`].
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`: `src` readable and `dst` writable for `n` bytes,
/// the two not overlapping.
#[inline]
pub(crate) unsafe fn copy_raw(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the caller's contract: both ranges valid for `n` bytes, apart.
    let (dst, src) = unsafe { (std::slice::from_raw_parts_mut(dst, n), std::slice::from_raw_parts(src, n)) };
    copy(dst, src);
}

/// `len` elements of `tmp` (which has at least `len + PAGE / size_of::<T>()`) that start at
/// the same offset within a page as `like` does, as nearly as `T`'s alignment allows: a
/// scratch buffer that a peer's buffer shaped like `like` is copied into (or out of) then
/// sits at distance 0, never [`near`]. A null `like` places it on a page boundary.
pub(crate) fn placed<T: bytemuck::Pod>(tmp: &mut [T], len: usize, like: *const T) -> &mut [T] {
    let size = std::mem::size_of::<T>().max(1);
    let gap = (like as usize).wrapping_sub(tmp.as_ptr() as usize) & (PAGE - 1);
    let k = (gap / size).min(tmp.len().saturating_sub(len));
    &mut tmp[k..k + len]
}

/// Elements to add to a scratch buffer of `T` so that [`placed`] can place it anywhere in a page.
pub(crate) const fn slack<T>() -> usize {
    PAGE / if std::mem::size_of::<T>() == 0 { 1 } else { std::mem::size_of::<T>() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_is_the_short_forward_distance_modulo_a_page() {
        let on = cfg!(target_arch = "x86_64");
        assert!(!near(0x1000, 0x1000) && !near(0x1040, 0x1000) && !near(0x1000, 0x1010));
        assert_eq!(near(0x1010, 0x1000), on);
        assert_eq!(near(0x5001, 0x1000), on, "whole pages apart count by their offset");
        assert_eq!(near(0x103f, 0x2000), on);
        assert!(!near(0x0fff, 0x1000), "the destination just before the source is fine");
    }

    /// Every length and distance around the pieces copies every byte and no other.
    #[test]
    fn copies_every_byte_at_every_distance() {
        let src: Vec<u8> = (0..3 * PAGE).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut dst = vec![0u8; 4 * PAGE];
        let base = dst.as_ptr() as usize;
        let s0 = src.as_ptr() as usize;
        for len in [0, 1, PIECE - 1, PIECE, PIECE + 1, 2 * PIECE + 17, 2 * PAGE] {
            for d in [0usize, 1, 8, 16, 33, 63, 64, 100] {
                // A destination `d` bytes past the source modulo a page.
                let at = (s0 + d).wrapping_sub(base) & (PAGE - 1);
                dst.fill(0xee);
                copy(&mut dst[at..at + len], &src[..len]);
                assert_eq!(&dst[at..at + len], &src[..len], "len {len} distance {d}");
                assert!(dst[..at].iter().chain(&dst[at + len..]).all(|&b| b == 0xee), "len {len} distance {d}");
                assert_eq!(near(dst[at..].as_ptr() as usize, s0), (1..64).contains(&d) && cfg!(target_arch = "x86_64"));
            }
        }
    }

    #[test]
    fn placed_takes_the_offset_of_its_model() {
        let mut tmp = vec![0f32; 1000 + slack::<f32>()];
        for off in [0usize, 4, 16, 2048, 4092] {
            let like = (0x7000_0000usize + off) as *const f32;
            let s = placed(&mut tmp, 1000, like);
            assert_eq!(s.len(), 1000);
            assert_eq!(s.as_ptr() as usize % PAGE, off, "offset {off}");
        }
        let s = placed(&mut tmp, 1000, std::ptr::null());
        assert_eq!(s.as_ptr() as usize % PAGE, 0, "null: a page boundary");
    }
}
