//! Nonblocking collectives (`MPI_Ibarrier` ...): the Rust API's schedules, started in a
//! scope that waits for nothing ([`crate::unscoped`]: the C program keeps its buffers valid
//! until it waits for the request, as MPI's contract says), their requests in the same
//! table as point-to-point ones. An `MPI_IN_PLACE` input is copied, and the copy lives with
//! the request.

use std::ffi::{c_int, c_void};

use bytemuck::Pod;

use super::p2p::new_coll_request;
use super::types::{Datatype, ReduceOp};
use super::{bytes, bytes_mut, comm_of, count_of, finish, root_of, Fail, Res, ERR_BUFFER, ERR_OP, IN_PLACE};
use crate::op::DynOp;
use crate::{CollRequest, Comm, Error};

/// A copy of `b`, 8-byte aligned (the width of every carrier), and a view of it.
fn held(b: &[u8]) -> (Vec<u64>, &'static [u8]) {
    let (v, view) = held_mut(b);
    (v, view)
}

/// As [`held`], writable (a scratch the collective writes).
fn held_mut(b: &[u8]) -> (Vec<u64>, &'static mut [u8]) {
    let mut v = vec![0u64; b.len().div_ceil(8)];
    let bytes: &mut [u8] = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut v)[..b.len()];
    bytes.copy_from_slice(b);
    // SAFETY: the vector's heap buffer does not move when the vector does, and lives with
    // the request that uses this view (new_coll_request keeps it).
    let view = unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr(), b.len()) };
    (v, view)
}

/// Runs `start` in a scope that waits for nothing and files its request in `*request`.
///
/// # Safety
/// The buffers `start` gives the collective stay valid until its request completes (MPI's
/// contract); `request` points to an `MPI_Request`.
unsafe fn launch(
    name: &str,
    comm: c_int,
    keep: Vec<u64>,
    request: *mut c_int,
    start: impl FnOnce(&Comm, &crate::Scope<'static>) -> Res<CollRequest<'static>>,
) -> c_int {
    let r = (|| {
        let c = comm_of(name, comm)?;
        // SAFETY: this function's contract: the caller's buffers outlive the request.
        let scope = unsafe { crate::unscoped() };
        let req = start(&c, &scope)?;
        // SAFETY: this function's contract.
        unsafe { new_coll_request(name, comm, req, keep, request) }
    })();
    finish(name, comm, r)
}

/// `f` with the reduction of `op` on `ty` carried as the unsigned type of its size; an
/// operand not aligned for it is an error (C's buffers of a type are aligned for it).
fn carried<R>(ty: Datatype, op: ReduceOp, bufs: &[*const u8], f: impl FnOnce(Carrier) -> Result<R, Error>) -> Res<R> {
    let unfit = || Fail::new(ERR_OP, format!("{} does not apply to {}", op.name, ty.name));
    let elem = ty.elem.ok_or_else(unfit)?;
    if bufs.iter().any(|&p| p as usize % ty.size.max(1) != 0) {
        return Err(Fail::new(ERR_BUFFER, format!("a buffer of {} not aligned for it", ty.name)));
    }
    let c = match ty.size {
        1 => Carrier::U8(DynOp::new(op.op, elem).ok_or_else(unfit)?),
        2 => Carrier::U16(DynOp::new(op.op, elem).ok_or_else(unfit)?),
        4 => Carrier::U32(DynOp::new(op.op, elem).ok_or_else(unfit)?),
        8 => Carrier::U64(DynOp::new(op.op, elem).ok_or_else(unfit)?),
        _ => return Err(unfit()),
    };
    f(c).map_err(Fail::from)
}

/// A run-time reduction and the type that carries its elements.
enum Carrier {
    U8(DynOp<u8>),
    U16(DynOp<u16>),
    U32(DynOp<u32>),
    U64(DynOp<u64>),
}

/// Bytes as carriers (aligned: checked by [`carried`]).
fn cast<C: Pod>(b: &'static [u8]) -> &'static [C] {
    bytemuck::cast_slice(b)
}

fn cast_mut<C: Pod>(b: &'static mut [u8]) -> &'static mut [C] {
    bytemuck::cast_slice_mut(b)
}

macro_rules! with_carrier {
    ($c:expr, |$op:ident, $t:ident| $body:expr) => {
        match $c {
            Carrier::U8($op) => {
                type $t = u8;
                $body
            }
            Carrier::U16($op) => {
                type $t = u16;
                $body
            }
            Carrier::U32($op) => {
                type $t = u32;
                $body
            }
            Carrier::U64($op) => {
                type $t = u64;
                $body
            }
        }
    };
}

mpi! {
    fn MPI_Ibarrier / PMPI_Ibarrier(comm: c_int, request: *mut c_int) -> c_int {
        // SAFETY: no buffers; `request` is the caller's MPI_Request.
        unsafe { launch("MPI_Ibarrier", comm, Vec::new(), request, |c, s| Ok(c.ibarrier(s)?)) }
    }

    fn MPI_Ibcast / PMPI_Ibcast(
        buffer: *mut c_void,
        count: c_int,
        datatype: c_int,
        root: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: MPI's contract: the buffer holds `count` elements until the request completes.
        unsafe {
            launch("MPI_Ibcast", comm, Vec::new(), request, |c, s| {
                let root = root_of(c, root)?;
                let buf: &'static mut [u8] = bytes_mut(buffer, count_of(count)?, Datatype::of(datatype)?)?;
                Ok(c.ibcast(s, buf, root)?)
            })
        }
    }

    fn MPI_Iallreduce / PMPI_Iallreduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: c_int,
        op: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let (ty, op) = (Datatype::of(datatype)?, ReduceOp::of(op)?);
            let n = count_of(count)?;
            // SAFETY: MPI's contract: both buffers hold `count` elements until completion.
            let recv: &'static mut [u8] = unsafe { bytes_mut(recvbuf, n, ty)? };
            let (keep, send): (Vec<u64>, &'static [u8]) = if sendbuf == IN_PLACE {
                held(recv)
            } else {
                // SAFETY: as above.
                (Vec::new(), unsafe { bytes(sendbuf, n, ty)? })
            };
            Ok((ty, op, recv, keep, send))
        })();
        let (ty, op, recv, keep, send) = match r {
            Ok(v) => v,
            Err(f) => return finish("MPI_Iallreduce", comm, Err(f)),
        };
        let ptrs = [send.as_ptr(), recv.as_ptr()];
        // SAFETY: the buffers checked above; the in-place copy lives with the request.
        unsafe {
            launch("MPI_Iallreduce", comm, keep, request, |c, s| {
                carried(ty, op, &ptrs, |k| with_carrier!(k, |o, T| c.iallreduce(s, cast::<T>(send), cast_mut::<T>(recv), o)))
            })
        }
    }

    fn MPI_Ireduce / PMPI_Ireduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: c_int,
        op: c_int,
        root: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Ireduce", comm)?;
            let (ty, op) = (Datatype::of(datatype)?, ReduceOp::of(op)?);
            let n = count_of(count)?;
            let root = root_of(&c, root)?;
            let recv: Option<&'static mut [u8]> = if c.rank() == root {
                // SAFETY: MPI's contract: the root's buffer holds `count` elements until completion.
                Some(unsafe { bytes_mut(recvbuf, n, ty)? })
            } else {
                None
            };
            let (keep, send): (Vec<u64>, &'static [u8]) = match (&recv, sendbuf == IN_PLACE) {
                (Some(r), true) => held(r),
                (None, true) => return Err(Fail::new(ERR_BUFFER, "MPI_IN_PLACE at a rank that is not the root")),
                // SAFETY: as above, the send buffer.
                (_, false) => (Vec::new(), unsafe { bytes(sendbuf, n, ty)? }),
            };
            Ok((ty, op, root, recv, keep, send))
        })();
        let (ty, op, root, recv, keep, send) = match r {
            Ok(v) => v,
            Err(f) => return finish("MPI_Ireduce", comm, Err(f)),
        };
        let mut ptrs = vec![send.as_ptr()];
        ptrs.extend(recv.as_ref().map(|r| r.as_ptr()));
        // SAFETY: the buffers checked above; the in-place copy lives with the request.
        unsafe {
            launch("MPI_Ireduce", comm, keep, request, |c, s| {
                carried(ty, op, &ptrs, |k| {
                    with_carrier!(k, |o, T| c.ireduce(s, cast::<T>(send), recv.map(cast_mut::<T>), o, root))
                })
            })
        }
    }

    fn MPI_Iallgather / PMPI_Iallgather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Iallgather", comm)?;
            let rt = Datatype::of(recvtype)?;
            let n = count_of(recvcount)? * rt.size;
            // SAFETY: MPI's contract: recvbuf holds size x recvcount elements until completion.
            let recv: &'static mut [u8] = unsafe { bytes_mut(recvbuf, count_of(recvcount)? * c.size(), rt)? };
            Ok(if sendbuf == IN_PLACE {
                let me = c.rank();
                held(&recv[me * n..(me + 1) * n])
            } else {
                // SAFETY: as above, the send buffer.
                (Vec::new(), unsafe { bytes(sendbuf, count_of(sendcount)?, Datatype::of(sendtype)?)? })
            })
            .map(|(k, s)| (k, s, recv))
        })();
        let (keep, send, recv) = match r {
            Ok(v) => v,
            Err(f) => return finish("MPI_Iallgather", comm, Err(f)),
        };
        // SAFETY: the buffers checked above; the in-place copy lives with the request.
        unsafe { launch("MPI_Iallgather", comm, keep, request, |c, s| Ok(c.iallgather(s, send, recv)?)) }
    }

    fn MPI_Ialltoall / PMPI_Ialltoall(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Ialltoall", comm)?;
            let rt = Datatype::of(recvtype)?;
            // SAFETY: MPI's contract: recvbuf holds size x recvcount elements until completion.
            let recv: &'static mut [u8] = unsafe { bytes_mut(recvbuf, count_of(recvcount)? * c.size(), rt)? };
            Ok(if sendbuf == IN_PLACE {
                held(recv)
            } else {
                let st = Datatype::of(sendtype)?;
                // SAFETY: as above, the send buffer.
                (Vec::new(), unsafe { bytes(sendbuf, count_of(sendcount)? * c.size(), st)? })
            })
            .map(|(k, s)| (k, s, recv))
        })();
        let (keep, send, recv) = match r {
            Ok(v) => v,
            Err(f) => return finish("MPI_Ialltoall", comm, Err(f)),
        };
        // SAFETY: the buffers checked above; the in-place copy lives with the request.
        unsafe { launch("MPI_Ialltoall", comm, keep, request, |c, s| Ok(c.ialltoall(s, send, recv)?)) }
    }

    fn MPI_Igather / PMPI_Igather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        root: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Igather", comm)?;
            let root = root_of(&c, root)?;
            let recv: Option<&'static mut [u8]> = if c.rank() == root {
                let rt = Datatype::of(recvtype)?;
                // SAFETY: MPI's contract: the root's recvbuf holds size x recvcount elements.
                Some(unsafe { bytes_mut(recvbuf, count_of(recvcount)? * c.size(), rt)? })
            } else {
                None
            };
            let (keep, send) = match (&recv, sendbuf == IN_PLACE) {
                (Some(r), true) => {
                    let n = r.len() / c.size();
                    held(&r[root * n..(root + 1) * n])
                }
                (None, true) => return Err(Fail::new(ERR_BUFFER, "MPI_IN_PLACE at a rank that is not the root")),
                (_, false) => {
                    let st = Datatype::of(sendtype)?;
                    // SAFETY: MPI's contract: the send buffer until completion.
                    (Vec::new(), unsafe { bytes(sendbuf, count_of(sendcount)?, st)? })
                }
            };
            Ok((root, recv, keep, send))
        })();
        let (root, recv, keep, send) = match r {
            Ok(v) => v,
            Err(f) => return finish("MPI_Igather", comm, Err(f)),
        };
        // SAFETY: the buffers checked above; the in-place copy lives with the request.
        unsafe { launch("MPI_Igather", comm, keep, request, |c, s| Ok(c.igather(s, send, recv, root)?)) }
    }

    fn MPI_Iscatter / PMPI_Iscatter(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        root: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Iscatter", comm)?;
            let root = root_of(&c, root)?;
            let at_root = c.rank() == root;
            let send: Option<&'static [u8]> = if at_root {
                let st = Datatype::of(sendtype)?;
                // SAFETY: MPI's contract: the root's sendbuf holds size x sendcount elements.
                Some(unsafe { bytes(sendbuf, count_of(sendcount)? * c.size(), st)? })
            } else {
                None
            };
            let (keep, recv): (Vec<u64>, &'static mut [u8]) = if at_root && recvbuf == IN_PLACE.cast_mut() {
                // The root's block stays where it is: the schedule copies it into a scratch.
                let s = send.expect("at the root");
                let n = s.len() / c.size();
                held_mut(&s[root * n..(root + 1) * n])
            } else {
                let rt = Datatype::of(recvtype)?;
                // SAFETY: MPI's contract: recvbuf holds recvcount elements until completion.
                (Vec::new(), unsafe { bytes_mut(recvbuf, count_of(recvcount)?, rt)? })
            };
            Ok((root, send, keep, recv))
        })();
        let (root, send, keep, recv) = match r {
            Ok(v) => v,
            Err(f) => return finish("MPI_Iscatter", comm, Err(f)),
        };
        // SAFETY: the buffers checked above; the in-place scratch lives with the request.
        unsafe { launch("MPI_Iscatter", comm, keep, request, |c, s| Ok(c.iscatter(s, send, recv, root)?)) }
    }
}
