//! Single-copy reads and writes of a peer's memory: Linux cross-memory attach (`process_vm_readv`, `process_vm_writev`).
//! Elsewhere (macOS) [`AVAILABLE`] is false and the engine streams through the rings.
//!
//! The kernel lets a process read another's memory only where it could ptrace it. Under Yama's
//! `ptrace_scope=1` (Ubuntu's default) that is a descendant, or a process that named the
//! reader, or an ancestor of it, its ptracer: each rank names the launcher process that
//! started the ranks of its host ([`admit_siblings`]), so its sibling ranks, and no other
//! process, may read it (Open MPI names any process instead, `PR_SET_PTRACER_ANY`). Whether a
//! peer can be read at all is asked of the kernel once per pair ([`probe`]), so that a pair
//! the kernel refuses streams from the start and the verbose output says why.

#[cfg(target_os = "linux")]
use crate::copy;
use crate::error::Error;

#[cfg(target_os = "linux")]
pub(crate) const AVAILABLE: bool = true;
#[cfg(not(target_os = "linux"))]
pub(crate) const AVAILABLE: bool = false;

/// Names the process that started this host's ranks (`MPR_PTRACER`, which mprun and its
/// proxies set; else the parent, as under a foreign launcher's per-host proxy) as this
/// process's ptracer, which Yama extends to its descendants: the sibling ranks. Without Yama
/// the call fails (EINVAL) and changes nothing, which is as good.
#[cfg(target_os = "linux")]
pub(crate) fn admit_siblings() {
    let tracer = crate::env::parsed::<u32>("MPR_PTRACER").unwrap_or_else(|| nix::unistd::getppid().as_raw() as u32);
    // SAFETY: prctl(PR_SET_PTRACER, pid, 0, 0, 0) takes integers only and touches no memory
    // of ours; its only effect is the Yama exception for `tracer` and its descendants.
    unsafe {
        libc::prctl(
            libc::PR_SET_PTRACER,
            tracer as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
}

/// Nothing to admit where there is no cross-memory attach.
#[cfg(not(target_os = "linux"))]
pub(crate) fn admit_siblings() {}

/// Whether the kernel lets this process read and write the memory of process `pid`; the
/// error says why not, for the verbose line of the pair. It asks for one byte at address 0:
/// the kernel checks the access to the process before it touches its memory, so an allowed
/// probe fails with EFAULT and a refused one with EPERM, and no byte is ever read.
#[cfg(target_os = "linux")]
pub(crate) fn probe(pid: u32) -> Result<(), String> {
    use nix::errno::Errno;
    use nix::sys::uio::{process_vm_readv, RemoteIoVec};
    use nix::unistd::Pid;
    use std::io::IoSliceMut;

    let mut byte = [0u8; 1];
    let remote = [RemoteIoVec { base: 0, len: 1 }];
    match process_vm_readv(Pid::from_raw(pid as i32), &mut [IoSliceMut::new(&mut byte)], &remote) {
        Ok(_) | Err(Errno::EFAULT) => Ok(()),
        Err(Errno::EPERM) | Err(Errno::EACCES) => Err(refused(yama_scope())),
        Err(Errno::ENOSYS) => Err("process_vm_readv is not available (a seccomp filter, as in some containers, \
                                   or a kernel without cross-memory attach)"
            .into()),
        Err(e) => Err(format!("process_vm_readv: {e}")),
    }
}

/// Single copy is never possible where there is no cross-memory attach.
#[cfg(not(target_os = "linux"))]
pub(crate) fn probe(_pid: u32) -> Result<(), String> {
    Err("this OS has no cross-memory attach".into())
}

/// Yama's `ptrace_scope`, where the kernel has Yama.
#[cfg(target_os = "linux")]
fn yama_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok()?.trim().parse().ok()
}

/// Why the kernel refused to let this rank read a peer, given Yama's scope.
#[cfg(any(target_os = "linux", test))]
pub(crate) fn refused(scope: Option<u32>) -> String {
    match scope {
        Some(n @ 2..) => format!(
            "the kernel refused (Yama ptrace_scope={n} lets only processes with CAP_SYS_PTRACE read another's memory; \
             at 1 or 0 the job's ranks may read each other)"
        ),
        Some(1) => "the kernel refused (Yama ptrace_scope=1: the ranks of this host were not started by one \
                    launcher process that both name as ptracer; set MPR_PTRACER to its pid)"
            .into(),
        _ => "the kernel refused (EPERM: the peer runs as another user, is not dumpable, or a security module \
              forbids it)"
            .into(),
    }
}

/// Reads `dst.len()` bytes at `addr` in process `pid`; through the bounce buffer where the
/// pair is [`copy::near`], which the answer says (true).
#[cfg(target_os = "linux")]
pub(crate) fn read(pid: u32, addr: u64, dst: &mut [u8]) -> Result<bool, Error> {
    if dst.len() <= copy::PIECE || !copy::near(dst.as_ptr() as usize, addr as usize) {
        return read_all(pid, addr, dst).map(|()| false);
    }
    bounced(dst.len(), addr, |b, part, at| {
        read_all(pid, at, b)?;
        copy::copy(&mut dst[part], b);
        Ok(())
    })
}

/// Writes `src` to `addr` in process `pid`; through the bounce buffer where the pair is
/// [`copy::near`], which the answer says (true).
#[cfg(target_os = "linux")]
pub(crate) fn write(pid: u32, addr: u64, src: &[u8]) -> Result<bool, Error> {
    if src.len() <= copy::PIECE || !copy::near(addr as usize, src.as_ptr() as usize) {
        return write_all(pid, addr, src).map(|()| false);
    }
    bounced(src.len(), addr, |b, part, at| {
        copy::copy(b, &src[part]);
        write_all(pid, at, b)
    })
}

/// The bounce buffer's chunk: small enough to stay in a core's L2 between the kernel's copy
/// and ours.
#[cfg(target_os = "linux")]
const BOUNCE: usize = 64 << 10;

#[cfg(target_os = "linux")]
thread_local! {
    static BOUNCE_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Moves `len` bytes at remote `addr` in chunks through this thread's bounce buffer:
/// `step(bounce, part, at)` for each, `part` the chunk's range of the local buffer, `at` its
/// remote address, `bounce` its room placed at `at`'s offset in a page ([`copy::placed`]).
#[cfg(target_os = "linux")]
fn bounced(
    len: usize,
    addr: u64,
    mut step: impl FnMut(&mut [u8], std::ops::Range<usize>, u64) -> Result<(), Error>,
) -> Result<bool, Error> {
    BOUNCE_BUF.with(|b| {
        let mut b = b.borrow_mut();
        b.resize(BOUNCE + copy::slack::<u8>(), 0);
        let mut done = 0;
        while done < len {
            let n = BOUNCE.min(len - done);
            let at = addr + done as u64;
            step(copy::placed(&mut b, n, at as usize as *const u8), done..done + n, at)?;
            done += n;
        }
        Ok(true)
    })
}

#[cfg(target_os = "linux")]
fn read_all(pid: u32, addr: u64, dst: &mut [u8]) -> Result<(), Error> {
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

#[cfg(target_os = "linux")]
fn write_all(pid: u32, addr: u64, src: &[u8]) -> Result<(), Error> {
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
pub(crate) fn write(_pid: u32, _addr: u64, _src: &[u8]) -> Result<bool, Error> {
    Err(Error::Transport("single-copy writes are not available on this OS".into()))
}

/// Reads are not available on this OS.
#[cfg(not(target_os = "linux"))]
pub(crate) fn read(_pid: u32, _addr: u64, _dst: &mut [u8]) -> Result<bool, Error> {
    Err(Error::Transport("single-copy reads are not available on this OS".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason names what the user can change: the scope, the ptracer, or the peer.
    #[test]
    fn a_refusal_says_what_stands_in_the_way() {
        assert!(refused(Some(2)).contains("ptrace_scope=2") && refused(Some(2)).contains("CAP_SYS_PTRACE"));
        assert!(refused(Some(3)).contains("ptrace_scope=3"));
        assert!(refused(Some(1)).contains("MPR_PTRACER"));
        assert!(refused(None).contains("EPERM") && refused(Some(0)).contains("EPERM"));
    }

    /// This process may read its child (same user), and the probe reads no byte to say so;
    /// a process that does not exist is an error.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_probe_asks_the_kernel_without_reading() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert_eq!(probe(child.id()), Ok(()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(probe(child.id()).is_err(), "a reaped process cannot be read");
    }
}
