//! The job's shared-memory segment on one host: layout, creation, attachment, removal.
//!
//! Layout (all offsets page- or cache-line aligned):
//!
//! ```text
//! 0                 SegHeader (one page)
//! PAGE              RankSlot[nlocal]           (one cache line each: pid, state)
//! rings_off         Ring[nlocal * nlocal]      ring (i -> j) at index i * nlocal + j
//! ```
//!
//! The lowest rank on the host creates the segment (`O_EXCL`, mode 0600) before the
//! bootstrap fence; the others open it after. Each rank counts itself in `attached`; the last
//! one removes the name, so a crash after that point leaves nothing in /dev/shm (the launcher
//! removes `mpr-<jobid>*` leftovers from crashes before it).

use std::ffi::CString;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nix::fcntl::OFlag;
use nix::sys::mman::{mmap, munmap, shm_open, MapFlags, ProtFlags};
use nix::sys::stat::Mode;

use crate::error::Error;

const MAGIC: u64 = 0x6d70_725f_7368_6d31; // "mpr_shm1"
const PAGE: usize = 4096;
/// Bytes of a cache line; slots and frames are aligned to it.
pub(crate) const LINE: usize = 64;

/// Rank slot states.
pub(crate) const SLOT_ALIVE: u32 = 1;
pub(crate) const SLOT_FINALIZED: u32 = 2;

#[repr(C)]
struct SegHeader {
    magic: AtomicU64,
    nlocal: AtomicU32,
    ring: AtomicU32,
    frame: AtomicU32,
    attached: AtomicU32,
}

/// Shape of the rings, fixed by the creator and checked by every attacher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) nlocal: usize,
    /// Bytes of frames per ring.
    pub(crate) ring: usize,
    /// Largest frame.
    pub(crate) frame: usize,
}

impl Geometry {
    fn rings_off(&self) -> usize {
        (PAGE + self.nlocal * LINE).div_ceil(PAGE) * PAGE
    }

    pub(crate) fn ring_bytes(&self) -> usize {
        super::ring::ring_bytes(self.ring)
    }

    /// Whether the rings can work: aligned, and room for two of the largest frames.
    fn valid(&self) -> bool {
        self.ring.is_multiple_of(LINE) && self.frame > 0 && self.ring >= super::ring::min_size(self.frame)
    }

    fn total(&self) -> usize {
        self.rings_off() + self.nlocal * self.nlocal * self.ring_bytes()
    }
}

/// A mapped segment.
#[derive(Debug)]
pub(crate) struct Segment {
    base: NonNull<u8>,
    len: usize,
    geo: Geometry,
}

fn os_err(what: &str, name: &str, e: nix::Error) -> Error {
    Error::Bootstrap(format!("shared memory {what} of {name}: {e}"))
}

impl Segment {
    /// Creates and maps segment `name` (e.g. `/mpr-<jobid>-<host>`), mode 0600.
    pub(crate) fn create(name: &str, geo: Geometry) -> Result<Segment, Error> {
        let size = geo.total();
        let fd = crate::shmfile::create(name, size).map_err(|e| Error::Bootstrap(format!("shared memory: {e}")))?;
        let seg = Self::map(fd.as_fd(), size, geo).inspect_err(|_| Self::unlink(name))?;
        let h = seg.header();
        h.nlocal.store(geo.nlocal as u32, Ordering::Relaxed);
        h.ring.store(geo.ring as u32, Ordering::Relaxed);
        h.frame.store(geo.frame as u32, Ordering::Relaxed);
        h.attached.store(0, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Opens and maps a segment made by [`Segment::create`] on this host.
    pub(crate) fn open(name: &str, nlocal: usize) -> Result<Segment, Error> {
        let cname = CString::new(name).map_err(|_| Error::Bootstrap(format!("bad segment name {name}")))?;
        let fd = shm_open(cname.as_c_str(), OFlag::O_RDWR, Mode::empty()).map_err(|e| os_err("open", name, e))?;
        let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| os_err("stat", name, e))?;
        let size = st.st_size as usize;
        if size < PAGE {
            return Err(Error::Bootstrap(format!("{name} is too small to be an mpr segment ({size} bytes)")));
        }
        // Map the header first to learn the geometry, then the whole segment.
        let probe = Self::map(fd.as_fd(), PAGE.min(size.max(1)), Geometry { nlocal: 0, ring: 0, frame: 0 })?;
        let h = probe.header();
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(Error::Bootstrap(format!("{name} is not an mpr segment")));
        }
        let geo = Geometry {
            nlocal: h.nlocal.load(Ordering::Relaxed) as usize,
            ring: h.ring.load(Ordering::Relaxed) as usize,
            frame: h.frame.load(Ordering::Relaxed) as usize,
        };
        drop(probe);
        if !geo.valid() {
            return Err(Error::Bootstrap(format!("{name} has an invalid ring geometry {geo:?}")));
        }
        if geo.nlocal != nlocal || geo.total() != size {
            return Err(Error::Bootstrap(format!(
                "segment {name} was made for {} local ranks ({} bytes), expected {nlocal}",
                geo.nlocal, size
            )));
        }
        Self::map(fd.as_fd(), size, geo)
    }

    fn map(fd: std::os::fd::BorrowedFd<'_>, len: usize, geo: Geometry) -> Result<Segment, Error> {
        let nz = NonZeroUsize::new(len).ok_or_else(|| Error::Bootstrap("empty segment".into()))?;
        // SAFETY: a fresh shared mapping of a file we own; no existing Rust object aliases it.
        // Other processes access it only through atomics and the ring protocol (ring.rs).
        let p = unsafe { mmap(None, nz, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, fd, 0) }
            .map_err(|e| Error::Bootstrap(format!("mmap of {len} bytes: {e}")))?;
        Ok(Segment { base: p.cast(), len, geo })
    }

    fn header(&self) -> &SegHeader {
        // SAFETY: the mapping is at least one page, page-aligned, and SegHeader (atomics only)
        // fits in it; atomics make concurrent access by other processes sound.
        unsafe { &*(self.base.as_ptr() as *const SegHeader) }
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Counts this rank as attached; true if it was the last one (and so must unlink).
    pub(crate) fn attach(&self) -> bool {
        self.header().attached.fetch_add(1, Ordering::AcqRel) + 1 == self.geo.nlocal as u32
    }

    /// The (pid, state) atomics of local rank `i`.
    pub(crate) fn slot(&self, i: usize) -> (&AtomicU32, &AtomicU32) {
        assert!(i < self.geo.nlocal);
        // SAFETY: slot i lies inside the mapping (PAGE + i * LINE < rings_off <= len), is
        // 64-byte aligned, and holds two AtomicU32 accessed only atomically.
        unsafe {
            let p = self.base.as_ptr().add(PAGE + i * LINE) as *const AtomicU32;
            (&*p, &*p.add(1))
        }
    }

    /// Base address of ring (from -> to).
    pub(crate) fn ring(&self, from: usize, to: usize) -> NonNull<u8> {
        assert!(from < self.geo.nlocal && to < self.geo.nlocal);
        let off = self.geo.rings_off() + (from * self.geo.nlocal + to) * self.geo.ring_bytes();
        debug_assert!(off + self.geo.ring_bytes() <= self.len);
        // SAFETY: `off` is inside the mapping (checked by the geometry arithmetic above).
        unsafe { NonNull::new_unchecked(self.base.as_ptr().add(off)) }
    }

    /// Maps in, ahead of use, the pages of the rings this local rank writes and reads, so
    /// its first messages do not each take a page fault (best effort: Linux 5.14 and later;
    /// the contents are left as they are).
    pub(crate) fn populate(&self, me: usize) {
        #[cfg(target_os = "linux")]
        for j in (0..self.geo.nlocal).filter(|&j| j != me) {
            for ring in [self.ring(me, j), self.ring(j, me)] {
                // The pages that hold the ring (neighbours' edges included).
                let off = ring.as_ptr() as usize - self.base.as_ptr() as usize;
                let (start, end) =
                    (off / PAGE * PAGE, (off + self.geo.ring_bytes()).next_multiple_of(PAGE).min(self.len));
                // SAFETY: whole pages inside our mapping; MADV_POPULATE_WRITE only faults them
                // in (as a write would, without writing), so no data changes.
                let _ = unsafe {
                    libc::madvise(self.base.as_ptr().add(start).cast(), end - start, libc::MADV_POPULATE_WRITE)
                };
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = me;
    }

    /// Removes the segment's name (the mapping stays valid).
    pub(crate) fn unlink(name: &str) {
        crate::shmfile::unlink(name);
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is our own mapping; every reference derived from it is
        // borrowed from `self`, so none outlives this drop.
        let _ = unsafe { munmap(self.base.cast(), self.len) };
    }
}
