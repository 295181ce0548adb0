//! POSIX shared-memory files (`shm_open`), for the rings of the shared-memory transport and
//! the collectives' segments alike: made with their memory reserved, removed by name.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::Mode;

/// Creates the shared-memory file `name` (`O_EXCL`, mode 0600) of `len` bytes. On Linux its
/// memory is reserved at once (`posix_fallocate`, as NCCL does), so a /dev/shm too small for
/// it (a container's is 64 MiB by default) is a clear error here instead of a SIGBUS at the
/// first touch of a missing page, later, anywhere. On error the name is removed again; the
/// error says what failed and on what.
pub(crate) fn create(name: &str, len: usize) -> Result<OwnedFd, String> {
    let cname = CString::new(name).map_err(|_| format!("bad shared memory name {name}"))?;
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR;
    let fd = shm_open(cname.as_c_str(), flags, Mode::S_IRUSR | Mode::S_IWUSR)
        .map_err(|e| format!("create of {name}: {e}"))?;
    let sized = nix::unistd::ftruncate(fd.as_fd(), len as libc::off_t).map_err(|e| format!("resize of {name}: {e}"));
    #[cfg(target_os = "linux")]
    let sized = sized.and_then(|()| {
        nix::fcntl::posix_fallocate(fd.as_raw_fd(), 0, len as libc::off_t).map_err(|e| {
            let more = if e == nix::errno::Errno::ENOSPC { " (/dev/shm is too small or full)" } else { "" };
            format!("reserving {} KiB for {name}: {e}{more}", len.div_ceil(1024))
        })
    });
    if let Err(e) = sized {
        let _ = shm_unlink(cname.as_c_str());
        return Err(e);
    }
    Ok(fd)
}

/// Removes the name of shared-memory file `name` (the memory lives on while mapped).
pub(crate) fn unlink(name: &str) {
    if let Ok(c) = CString::new(name) {
        let _ = shm_unlink(c.as_c_str());
    }
}

/// A shared mapping of a whole shared-memory file, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    base: std::ptr::NonNull<u8>,
    len: usize,
}

impl Mapping {
    /// Maps the `len` bytes of `fd` shared, readable and writable.
    pub(crate) fn new(fd: &OwnedFd, len: usize) -> Result<Mapping, String> {
        use nix::sys::mman::{mmap, MapFlags, ProtFlags};
        let nz = std::num::NonZeroUsize::new(len).ok_or("a mapping of 0 bytes")?;
        let prot = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
        // SAFETY: a fresh shared mapping of a file we opened; no Rust object aliases it. The
        // processes that share it reach it through raw pointers and atomics only.
        let p = unsafe { mmap(None, nz, prot, MapFlags::MAP_SHARED, fd.as_fd(), 0) }
            .map_err(|e| format!("mmap of {len} bytes: {e}"))?;
        Ok(Mapping { base: p.cast(), len })
    }

    /// The first byte.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping; every pointer into it is derived from `self` and is not
        // used after `self` is dropped.
        let _ = unsafe { nix::sys::mman::munmap(self.base.cast(), self.len) };
    }
}

/// Opens the existing shared-memory file `name`, which must hold `len` bytes, and maps it.
pub(crate) fn open(name: &str, len: usize) -> Result<Mapping, String> {
    let cname = CString::new(name).map_err(|_| format!("bad shared memory name {name}"))?;
    let fd = shm_open(cname.as_c_str(), OFlag::O_RDWR, Mode::empty()).map_err(|e| format!("open of {name}: {e}"))?;
    let size = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| format!("size of {name}: {e}"))?.st_size;
    if usize::try_from(size).ok() != Some(len) {
        return Err(format!("{name} holds {size} bytes, not {len}"));
    }
    Mapping::new(&fd, len)
}
