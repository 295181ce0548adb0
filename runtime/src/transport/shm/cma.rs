//! Single-copy reads of a peer's memory: Linux cross-memory attach (`process_vm_readv`).
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
        let remote = [RemoteIoVec {
            base: addr as usize + done,
            len: dst.len() - done,
        }];
        let mut local = [IoSliceMut::new(&mut dst[done..])];
        match process_vm_readv(Pid::from_raw(pid as i32), &mut local, &remote) {
            Ok(0) => {
                return Err(Error::Transport(format!(
                    "process_vm_readv from pid {pid} read nothing"
                )))
            }
            Ok(n) => done += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                return Err(Error::Transport(format!(
                    "process_vm_readv from pid {pid}: {e}"
                )))
            }
        }
    }
    Ok(())
}

/// Reads are not available on this OS.
#[cfg(not(target_os = "linux"))]
pub(crate) fn read(_pid: u32, _addr: u64, _dst: &mut [u8]) -> Result<(), Error> {
    Err(Error::Transport(
        "single-copy reads are not available on this OS".into(),
    ))
}
