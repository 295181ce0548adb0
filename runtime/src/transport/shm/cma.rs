//! Single-copy reads and writes of a peer's memory: Linux cross-memory attach (`process_vm_readv`, `process_vm_writev`).
//! Elsewhere (macOS) [`AVAILABLE`] is false and the engine streams through the rings.

use crate::error::Error;

#[cfg(target_os = "linux")]
pub(crate) const AVAILABLE: bool = true;
#[cfg(not(target_os = "linux"))]
pub(crate) const AVAILABLE: bool = false;

/// Reads `dst.len()` bytes at `addr` in process `pid`.
#[cfg(target_os = "linux")]
pub(crate) fn read(pid: u32, addr: u64, dst: &mut [u8]) -> Result<(), Error> {
    use nix::sys::uio::{process_vm_readv, RemoteIoVec};
    use nix::unistd::Pid;
    use std::io::IoSliceMut;

    let mut done = 0;
    while done < dst.len() {
        let remote = [RemoteIoVec { base: addr as usize + done, len: dst.len() - done }];
        let mut local = [IoSliceMut::new(&mut dst[done..])];
        match process_vm_readv(Pid::from_raw(pid as i32), &mut local, &remote) {
            Ok(0) => return Err(Error::Transport(format!("process_vm_readv from pid {pid} read nothing"))),
            Ok(n) => done += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::Transport(format!("process_vm_readv from pid {pid}: {e}"))),
        }
    }
    Ok(())
}

/// Writes `src` to `addr` in process `pid`.
#[cfg(target_os = "linux")]
pub(crate) fn write(pid: u32, addr: u64, src: &[u8]) -> Result<(), Error> {
    use nix::sys::uio::{process_vm_writev, RemoteIoVec};
    use nix::unistd::Pid;
    use std::io::IoSlice;

    let mut done = 0;
    while done < src.len() {
        let remote = [RemoteIoVec { base: addr as usize + done, len: src.len() - done }];
        let local = [IoSlice::new(&src[done..])];
        match process_vm_writev(Pid::from_raw(pid as i32), &local, &remote) {
            Ok(0) => return Err(Error::Transport(format!("process_vm_writev to pid {pid} wrote nothing"))),
            Ok(n) => done += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::Transport(format!("process_vm_writev to pid {pid}: {e}"))),
        }
    }
    Ok(())
}

/// Writes are not available on this OS.
#[cfg(not(target_os = "linux"))]
pub(crate) fn write(_pid: u32, _addr: u64, _src: &[u8]) -> Result<(), Error> {
    Err(Error::Transport("single-copy writes are not available on this OS".into()))
}

/// Reads are not available on this OS.
#[cfg(not(target_os = "linux"))]
pub(crate) fn read(_pid: u32, _addr: u64, _dst: &mut [u8]) -> Result<(), Error> {
    Err(Error::Transport("single-copy reads are not available on this OS".into()))
}
