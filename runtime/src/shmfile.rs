//! POSIX shared-memory files (`shm_open`), for the rings of the shared-memory transport and
//! the collectives' segments alike: made with their memory reserved, removed by name.

use std::ffi::CString;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::os::fd::{AsFd, OwnedFd};

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
