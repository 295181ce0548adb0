//! Nonblocking collectives (`MPI_Ibarrier` ...): the Rust API's schedules, started in a
//! scope that waits for nothing ([`crate::unscoped`]: the C program keeps its buffers valid
//! until it waits for the request, as MPI's contract says), their requests in the same
//! table as point-to-point ones. An `MPI_IN_PLACE` input is copied, and the copy lives with
//! the request.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::{c_int, c_void};

use bytemuck::Pod;

use super::inter_root;
use super::p2p::new_coll_request;
use super::types::{self, Datatype, ElemFn, ReduceOp};
use super::{
    blocks, bytes, bytes_mut, comm_of, count_of, distinct, distinct_block, finish, int_at, ints_at, root_of,
    typed_blocks, Blocks, Fail, Landing, Res, ERR_ARG, ERR_BUFFER, ERR_OP, IN_PLACE,
};
use crate::op::DynOp;
use crate::{CollRequest, Comm, Error, InterRoot};

/// What a nonblocking collective works from beside the caller's buffers, kept with its
/// request until it completes: copies (an `MPI_IN_PLACE` input, a packed derived datatype),
/// and landings of derived datatypes, unpacked into the caller's memory when dropped.
#[derive(Debug, Default)]
pub(super) struct Keep {
    copies: Vec<Vec<u64>>,
    landings: Vec<Landing<'static>>,
    /// What completes the result once the communication is done (a reduction by an
    /// operation on whole elements, combined from the gathered inputs).
    finish: Option<Finish>,
    /// What undoes the call where the request does not complete without error (dropped
    /// without [`Keep::complete`]): the handle `MPI_Comm_idup` wrote goes.
    undo: Option<Finish>,
}

/// [`Keep::finish`].
pub(super) struct Finish(Box<dyn FnOnce()>);

impl std::fmt::Debug for Finish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Finish")
    }
}

impl Keep {
    /// The request completed without error: what finishes its result runs, then the
    /// landings unpack it into the caller's memory (as they drop).
    pub(super) fn complete(mut self) {
        self.undo = None;
        if let Some(Finish(f)) = self.finish.take() {
            f();
        }
    }
}

impl Drop for Keep {
    fn drop(&mut self) {
        if let Some(Finish(f)) = self.undo.take() {
            f();
        }
    }
}

thread_local! {
    /// What the collective being started keeps (moved to its request by [`launch`]).
    static KEEP: RefCell<Keep> = RefCell::new(Keep::default());
}

/// A copy of `b`, 8-byte aligned (the width of every carrier), kept with the request.
fn held(b: &[u8]) -> &'static [u8] {
    held_mut(b)
}

/// As [`held`], writable (a scratch the collective writes).
fn held_mut(b: &[u8]) -> &'static mut [u8] {
    let mut v = vec![0u64; b.len().div_ceil(8)];
    let bytes: &mut [u8] = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut v)[..b.len()];
    bytes.copy_from_slice(b);
    // SAFETY: the vector's heap buffer does not move when the vector does, and lives with
    // the request that uses this view (KEEP, then the request's table entry).
    let view = unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr(), b.len()) };
    KEEP.with(|k| k.borrow_mut().copies.push(v));
    view
}

/// `len` zeroed bytes, 8-byte aligned, kept with the request.
fn scratch(len: usize) -> &'static mut [u8] {
    let mut v = vec![0u64; len.div_ceil(8)];
    // SAFETY: the vector's heap buffer does not move when the vector does, and lives with
    // the request that uses this view (KEEP, then the request's table entry).
    let view = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), len) };
    KEEP.with(|k| k.borrow_mut().copies.push(v));
    view
}

/// Which ranks' inputs a rank's result of [`igathered`] combines.
#[derive(Debug, Clone)]
enum Fold {
    /// All, at every rank (`MPI_Iallreduce`).
    All,
    /// All, at the root only (`MPI_Ireduce`).
    Root(usize),
    /// Ranks `0..=me` (`inclusive`, `MPI_Iscan`) or `0..me` (`MPI_Iexscan`).
    Scan { inclusive: bool },
    /// Bytes `range` of the reduction of all (this rank's block of `MPI_Ireduce_scatter`).
    Block(std::ops::Range<usize>),
}

/// A nonblocking reduction by `f`, an operation on whole packed elements, as the blocking
/// ones run it (`types::gathered`): every rank's input is gathered into a scratch kept with
/// the request, and combined in rank order into `recv` when the request completes (so any
/// operation, commutative or not, on elements of any size, gets MPI's order of operands).
fn igathered(
    c: &Comm,
    s: &crate::Scope<'static>,
    fold: Fold,
    send: &'static [u8],
    recv: Option<&'static mut [u8]>,
    f: ElemFn,
) -> Res<CollRequest<'static>> {
    // The inputs that arrive: of every rank, or of an inter-communicator's other group.
    let (q, me, n) = (c.peers().len(), c.rank(), send.len());
    let req = match (&fold, recv) {
        (Fold::Root(root), None) => return Ok(c.igather(s, send, None, *root)?),
        (_, None) => return Err(Fail::new(ERR_OP, "a reduction without its receive buffer")),
        (fold, Some(recv)) => {
            let all = scratch(n * q);
            let (at, len) = (all.as_ptr(), all.len());
            let req = match fold {
                Fold::Root(root) => c.igather(s, send, Some(all), *root)?,
                _ => c.iallgather(s, send, all)?,
            };
            let fold = fold.clone();
            let done = move || {
                // SAFETY: the scratch lives with the request (KEEP), and its collective,
                // which wrote it, has completed: nothing else refers to it.
                let all = unsafe { std::slice::from_raw_parts(at, len) };
                let upto = match fold {
                    Fold::All | Fold::Root(_) | Fold::Block(_) => q,
                    Fold::Scan { inclusive: true } => me + 1,
                    Fold::Scan { inclusive: false } if me > 0 => me,
                    // Rank 0 of an exclusive scan: its result is undefined (untouched).
                    Fold::Scan { inclusive: false } => return,
                };
                let result = types::fold(all, n, upto, &*f);
                match fold {
                    Fold::Block(r) => recv.copy_from_slice(&result[r]),
                    _ => recv.copy_from_slice(&result),
                }
            };
            KEEP.with(|k| k.borrow_mut().finish = Some(Finish(Box::new(done))));
            req
        }
    };
    Ok(req)
}

/// Runs `start` in a scope that waits for nothing and files its request, with what it
/// keeps, in `*request`.
///
/// # Safety
/// The buffers `start` gives the collective stay valid until its request completes (MPI's
/// contract); `request` points to an `MPI_Request`.
unsafe fn launch(
    name: &str,
    comm: c_int,
    request: *mut c_int,
    start: impl FnOnce(&Comm, &crate::Scope<'static>) -> Res<CollRequest<'static>>,
) -> c_int {
    let r = (|| {
        // Checked before the collective starts: once it has, its request must be filed.
        if request.is_null() {
            return Err(Fail::new(ERR_ARG, format!("{name}: a null request pointer")));
        }
        let c = comm_of(name, comm)?;
        // SAFETY: this function's contract: the caller's buffers outlive the request.
        let scope = unsafe { crate::unscoped() };
        let started = start(&c, &scope);
        // What a failed start kept goes now (its landings unpack what they hold, unchanged).
        let keep = KEEP.with(|k| std::mem::take(&mut *k.borrow_mut()));
        // SAFETY: this function's contract.
        unsafe { new_coll_request(name, comm, started?, keep, request) }
    })();
    finish(name, comm, r)
}

/// A send buffer, or (`MPI_IN_PLACE`) a copy of `own`, the caller's part of its receive
/// buffer.
///
/// # Safety
/// Not in place, `buf` holds `count` elements of `ty` until the request completes.
unsafe fn input<'b>(
    buf: *const c_void,
    count: c_int,
    ty: c_int,
    own: impl FnOnce() -> Res<&'b [u8]>,
) -> Res<&'static [u8]> {
    if buf == IN_PLACE {
        return Ok(held(own()?));
    }
    // SAFETY: this function's contract.
    unsafe { input_of(buf, count_of(count)?, &Datatype::of(ty)?) }
}

/// `count` elements of `ty` at `buf` to send: the caller's bytes, or a packed copy kept with
/// the request.
///
/// # Safety
/// `buf` holds them until the request completes.
unsafe fn input_of(buf: *const c_void, count: usize, ty: &Datatype) -> Res<&'static [u8]> {
    // SAFETY: this function's contract.
    Ok(match unsafe { bytes(buf, count, ty)? } {
        Cow::Borrowed(b) => b,
        Cow::Owned(packed) => held(&packed),
    })
}

/// A receive buffer of `count` elements of `ty`.
///
/// # Safety
/// `buf` holds them until the request completes.
unsafe fn output(buf: *mut c_void, count: usize, ty: c_int) -> Res<&'static mut [u8]> {
    // SAFETY: this function's contract.
    unsafe { output_of(buf, count, &Datatype::of(ty)?) }
}

/// As [`output`], of a datatype.
///
/// # Safety
/// As [`output`].
unsafe fn output_of(buf: *mut c_void, count: usize, ty: &Datatype) -> Res<&'static mut [u8]> {
    // SAFETY: this function's contract.
    let mut landing = unsafe { bytes_mut(buf, count, ty)? };
    // SAFETY: the bytes are the caller's (valid until the request completes), or the
    // landing's own, whose heap buffer stays put when it moves to KEEP and lives there, then
    // with the request, until the request completes.
    let view = unsafe { std::slice::from_raw_parts_mut(landing.as_mut_ptr(), landing.len()) };
    if let Landing::Staged { .. } = landing {
        KEEP.with(|k| k.borrow_mut().landings.push(landing));
    }
    Ok(view)
}

/// `MPI_Ialltoallv` and `MPI_Ialltoallw` once the receive buffer's blocks `r` are known, as
/// their blocking forms (`alltoall_blocks`).
///
/// # Safety
/// As `alltoall_blocks`, the buffers valid until the request completes.
unsafe fn ialltoall_blocks(
    c: &Comm,
    s: &crate::Scope<'static>,
    sendbuf: *const c_void,
    send: impl FnOnce() -> Res<Blocks>,
    recvbuf: *mut c_void,
    r: Blocks,
) -> Res<CollRequest<'static>> {
    // SAFETY: this function's contract.
    let recv = unsafe { output_of(recvbuf, r.count, &r.ty)? };
    if sendbuf == IN_PLACE {
        let send = held(recv);
        return Ok(c.ialltoallv(s, send, &r.counts, &r.displs, recv, &r.counts, &r.displs)?);
    }
    let v = send()?;
    // SAFETY: this function's contract.
    let data = unsafe { input_of(sendbuf, v.count, &v.ty)? };
    Ok(c.ialltoallv(s, data, &v.counts, &v.displs, recv, &r.counts, &r.displs)?)
}

/// `MPI_IN_PLACE` where only the root may give it.
fn not_root() -> Fail {
    Fail::new(ERR_BUFFER, "MPI_IN_PLACE at a rank that is not the root")
}

/// Refuses `MPI_IN_PLACE` on an inter-communicator, where no collective takes it.
fn not_in_place(c: &Comm, buf: *const c_void) -> Res {
    if c.is_inter() && buf == IN_PLACE {
        return Err(Fail::new(ERR_BUFFER, "MPI_IN_PLACE on an inter-communicator"));
    }
    Ok(())
}

/// A nonblocking reduction on an inter-communicator by `f`, an operation on whole packed
/// elements: the other group's inputs gathered at the root, and combined there in rank
/// order when the request completes.
fn igathered_inter(
    c: &Comm,
    s: &crate::Scope<'static>,
    root: InterRoot,
    send: Option<&'static [u8]>,
    recv: Option<&'static mut [u8]>,
    f: ElemFn,
) -> Res<CollRequest<'static>> {
    let Some(recv) = recv else { return Ok(c.inter_igather(s, send, None, root)?) };
    let (q, n) = (c.peers().len(), recv.len());
    let all = scratch(n * q);
    let (at, len) = (all.as_ptr(), all.len());
    let req = c.inter_igather(s, None, Some(all), root)?;
    let done = move || {
        // SAFETY: the scratch lives with the request (KEEP), and its collective, which
        // wrote it, has completed: nothing else refers to it.
        let all = unsafe { std::slice::from_raw_parts(at, len) };
        recv.copy_from_slice(&types::fold(all, n, q, &*f));
    };
    KEEP.with(|k| k.borrow_mut().finish = Some(Finish(Box::new(done))));
    Ok(req)
}

/// `f` with the reduction of `op` on `ty` carried as the unsigned type of its size; an
/// operand not aligned for it is an error (C's buffers of a type are aligned for it).
fn carried<R>(ty: &Datatype, op: &ReduceOp, bufs: &[*const u8], f: impl FnOnce(Carrier) -> Result<R, Error>) -> Res<R> {
    let unfit = || Fail::new(ERR_OP, format!("{} does not apply to {}", op.name, ty.name));
    let b = op.builtin().ok_or_else(unfit)?;
    // A derived type's packed data is a run of its basic type's elements.
    let (ty, _) = ty.as_basic(1).filter(|(basic, _)| types::applies(b, basic.handle)).ok_or_else(unfit)?;
    let elem = ty.elem.ok_or_else(unfit)?;
    if bufs.iter().any(|&p| !(p as usize).is_multiple_of(ty.size.max(1))) {
        return Err(Fail::new(ERR_BUFFER, format!("a buffer of {} not aligned for it", ty.name)));
    }
    let c = match ty.size {
        1 => Carrier::U8(DynOp::new(b, elem).ok_or_else(unfit)?),
        2 => Carrier::U16(DynOp::new(b, elem).ok_or_else(unfit)?),
        4 => Carrier::U32(DynOp::new(b, elem).ok_or_else(unfit)?),
        8 => Carrier::U64(DynOp::new(b, elem).ok_or_else(unfit)?),
        _ => return Err(unfit()),
    };
    f(c).map_err(Fail::from)
}

/// Where buffer `b` starts, for [`carried`]'s check of alignment; null (aligned for
/// anything) for an empty one, whose pointer may be any (a count of 0).
fn at(b: &[u8]) -> *const u8 {
    if b.is_empty() {
        std::ptr::null()
    } else {
        b.as_ptr()
    }
}

/// A run-time reduction and the type that carries its elements.
enum Carrier {
    U8(DynOp<u8>),
    U16(DynOp<u16>),
    U32(DynOp<u32>),
    U64(DynOp<u64>),
}

/// Bytes as carriers (aligned: checked by [`carried`]; an empty buffer, whose pointer may
/// be any, as no carriers).
fn cast<C: Pod>(b: &'static [u8]) -> &'static [C] {
    if b.is_empty() {
        return &[];
    }
    bytemuck::cast_slice(b)
}

fn cast_mut<C: Pod>(b: &'static mut [u8]) -> &'static mut [C] {
    if b.is_empty() {
        return &mut [];
    }
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
        unsafe { launch("MPI_Ibarrier", comm, request, |c, s| Ok(c.ibarrier(s)?)) }
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
            launch("MPI_Ibcast", comm, request, |c, s| {
                if c.is_inter() {
                    let root = inter_root(c, root)?;
                    if root == InterRoot::Beside {
                        return Ok(c.inter_ibeside(s, "MPI_Ibcast")?);
                    }
                    return Ok(c.inter_ibcast(s, output(buffer, count_of(count)?, datatype)?, root)?);
                }
                let root = root_of(c, root)?;
                let buf = output(buffer, count_of(count)?, datatype)?;
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
        // SAFETY: MPI's contract: both buffers hold `count` elements until the request
        // completes; the in-place copy lives with the request.
        unsafe {
            launch("MPI_Iallreduce", comm, request, |c, s| {
                not_in_place(c, sendbuf)?;
                distinct_block(sendbuf, count, recvbuf, 0, datatype)?;
                let (ty, op) = (Datatype::of(datatype)?, ReduceOp::of(op)?);
                let recv = output(recvbuf, count_of(count)?, datatype)?;
                let send = input(sendbuf, count, datatype, || Ok(&*recv))?;
                if let Some(f) = types::elementwise(&ty, &op)? {
                    return igathered(c, s, Fold::All, send, Some(recv), f);
                }
                let ptrs = [at(send), at(recv)];
                let req = carried(&ty, &op, &ptrs, |k| {
                    with_carrier!(k, |o, T| c.iallreduce(s, cast::<T>(send), cast_mut::<T>(recv), o))
                })?;
                Ok(req)
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
        // SAFETY: MPI's contract: the buffers hold `count` elements (the receive buffer at
        // the root) until the request completes; the in-place copy lives with the request.
        unsafe {
            launch("MPI_Ireduce", comm, request, |c, s| {
                if c.is_inter() {
                    return ireduce_inter(c, s, sendbuf, recvbuf, count, datatype, op, root);
                }
                let (ty, op) = (Datatype::of(datatype)?, ReduceOp::of(op)?);
                let root = root_of(c, root)?;
                if c.rank() == root {
                    distinct_block(sendbuf, count, recvbuf, 0, datatype)?;
                }
                let recv = if c.rank() == root { Some(output(recvbuf, count_of(count)?, datatype)?) } else { None };
                let send = input(sendbuf, count, datatype, || recv.as_deref().ok_or_else(not_root))?;
                if let Some(f) = types::elementwise(&ty, &op)? {
                    return igathered(c, s, Fold::Root(root), send, recv, f);
                }
                let mut ptrs = vec![at(send)];
                ptrs.extend(recv.as_deref().map(at));
                let req = carried(&ty, &op, &ptrs, |k| {
                    with_carrier!(k, |o, T| c.ireduce(s, cast::<T>(send), recv.map(cast_mut::<T>), o, root))
                })?;
                Ok(req)
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
        // SAFETY: MPI's contract: recvbuf holds size x recvcount elements and sendbuf
        // sendcount until the request completes; the in-place copy lives with the request.
        unsafe {
            launch("MPI_Iallgather", comm, request, |c, s| {
                not_in_place(c, sendbuf)?;
                let own = if c.is_inter() { 0 } else { c.rank() as isize * recvcount as isize };
                distinct_block(sendbuf, sendcount, recvbuf, own, recvtype)?;
                let n = count_of(recvcount)?;
                // Blocks of every rank, or of an inter-communicator's other group.
                let recv = output(recvbuf, n * c.peers().len(), recvtype)?;
                let block = recv.len() / c.size().max(1);
                let me = c.rank();
                let send = input(sendbuf, sendcount, sendtype, || Ok(&recv[me * block..(me + 1) * block]))?;
                Ok(c.iallgather(s, send, recv)?)
            })
        }
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
        // SAFETY: MPI's contract: both buffers hold size x count elements until the request
        // completes; the in-place copy lives with the request.
        unsafe {
            launch("MPI_Ialltoall", comm, request, |c, s| {
                not_in_place(c, sendbuf)?;
                distinct_block(sendbuf, sendcount, recvbuf, 0, recvtype)?;
                let q = c.peers().len();
                let recv = output(recvbuf, count_of(recvcount)? * q, recvtype)?;
                // With MPI_IN_PLACE the send count and type are not looked at.
                let sends = if sendbuf == IN_PLACE { 0 } else { count_of(sendcount)? * q };
                let send = input(sendbuf, sends as c_int, sendtype, || Ok(&*recv))?;
                Ok(c.ialltoall(s, send, recv)?)
            })
        }
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
        // SAFETY: MPI's contract: the root's recvbuf holds size x recvcount elements and
        // sendbuf sendcount until the request completes; the in-place copy lives with it.
        unsafe {
            launch("MPI_Igather", comm, request, |c, s| {
                if c.is_inter() {
                    let (send, recv) = match inter_root(c, root)? {
                        InterRoot::Beside => return Ok(c.inter_ibeside(s, "MPI_Igather")?),
                        InterRoot::Here => {
                            not_in_place(c, recvbuf)?;
                            (None, Some(output(recvbuf, count_of(recvcount)? * c.peers().len(), recvtype)?))
                        }
                        InterRoot::Remote(_) => {
                            not_in_place(c, sendbuf)?;
                            (Some(input_of(sendbuf, count_of(sendcount)?, &Datatype::of(sendtype)?)?), None)
                        }
                    };
                    return Ok(c.inter_igather(s, send, recv, inter_root(c, root)?)?);
                }
                let root = root_of(c, root)?;
                if c.rank() == root {
                    distinct_block(sendbuf, sendcount, recvbuf, root as isize * recvcount as isize, recvtype)?;
                }
                let n = count_of(recvcount)?;
                let recv = if c.rank() == root { Some(output(recvbuf, n * c.size(), recvtype)?) } else { None };
                let send = input(sendbuf, sendcount, sendtype, || {
                    let r = recv.as_deref().ok_or_else(not_root)?;
                    let block = r.len() / c.size();
                    Ok(&r[root * block..(root + 1) * block])
                })?;
                Ok(c.igather(s, send, recv, root)?)
            })
        }
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
        // SAFETY: MPI's contract: the root's sendbuf holds size x sendcount elements and
        // recvbuf recvcount until the request completes; the in-place scratch lives with it.
        unsafe {
            launch("MPI_Iscatter", comm, request, |c, s| {
                if c.is_inter() {
                    let (send, recv) = match inter_root(c, root)? {
                        InterRoot::Beside => return Ok(c.inter_ibeside(s, "MPI_Iscatter")?),
                        InterRoot::Here => {
                            not_in_place(c, sendbuf)?;
                            let n = count_of(sendcount)? * c.peers().len();
                            (Some(input_of(sendbuf, n, &Datatype::of(sendtype)?)?), None)
                        }
                        InterRoot::Remote(_) => {
                            not_in_place(c, recvbuf)?;
                            (None, Some(output(recvbuf, count_of(recvcount)?, recvtype)?))
                        }
                    };
                    return Ok(c.inter_iscatter(s, send, recv, inter_root(c, root)?)?);
                }
                let root = root_of(c, root)?;
                let at_root = c.rank() == root;
                if at_root {
                    distinct_block(recvbuf, recvcount, sendbuf, root as isize * sendcount as isize, sendtype)?;
                }
                let send: Option<&'static [u8]> = if at_root {
                    let n = count_of(sendcount)? * c.size();
                    let no = || Err(Fail::new(ERR_BUFFER, "MPI_IN_PLACE as a send buffer"));
                    Some(input(sendbuf, n as c_int, sendtype, no)?)
                } else {
                    None
                };
                let recv = match send {
                    // The root's block stays where it is: the schedule copies it into a scratch.
                    Some(sb) if recvbuf == IN_PLACE.cast_mut() => {
                        let block = sb.len() / c.size();
                        held_mut(&sb[root * block..(root + 1) * block])
                    }
                    _ => output(recvbuf, count_of(recvcount)?, recvtype)?,
                };
                Ok(c.iscatter(s, send, recv, root)?)
            })
        }
    }

    fn MPI_Igatherv / PMPI_Igatherv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: c_int,
        root: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: MPI's contract: the buffers and (at the root) arrays hold what they say
        // until the request completes; the in-place copy lives with it.
        unsafe {
            launch("MPI_Igatherv", comm, request, |c, s| {
                if c.is_inter() {
                    return match inter_root(c, root)? {
                        InterRoot::Beside => Ok(c.inter_ibeside(s, "MPI_Igatherv")?),
                        InterRoot::Here => {
                            not_in_place(c, recvbuf)?;
                            let v = blocks(recvcounts, displs, c.peers().len(), &Datatype::of(recvtype)?)?;
                            let recv = output_of(recvbuf, v.count, &v.ty)?;
                            Ok(c.inter_igatherv(s, None, Some((recv, &v.counts, &v.displs)), InterRoot::Here)?)
                        }
                        root => {
                            not_in_place(c, sendbuf)?;
                            let send = input_of(sendbuf, count_of(sendcount)?, &Datatype::of(sendtype)?)?;
                            Ok(c.inter_igatherv(s, Some(send), None, root)?)
                        }
                    };
                }
                let root = root_of(c, root)?;
                if c.rank() != root {
                    return Ok(c.igatherv(s, input(sendbuf, sendcount, sendtype, || Err(not_root()))?, None, root)?);
                }
                distinct_block(sendbuf, sendcount, recvbuf, int_at(displs, c.size(), root), recvtype)?;
                let v = blocks(recvcounts, displs, c.size(), &Datatype::of(recvtype)?)?;
                let recv = output_of(recvbuf, v.count, &v.ty)?;
                let own = v.displs[root]..v.displs[root] + v.counts[root];
                let send = input(sendbuf, sendcount, sendtype, || Ok(&recv[own]))?;
                Ok(c.igatherv(s, send, Some((recv, &v.counts, &v.displs)), root)?)
            })
        }
    }

    fn MPI_Iscatterv / PMPI_Iscatterv(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        displs: *const c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        root: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: MPI's contract, as for MPI_Igatherv.
        unsafe {
            launch("MPI_Iscatterv", comm, request, |c, s| {
                if c.is_inter() {
                    return match inter_root(c, root)? {
                        InterRoot::Beside => Ok(c.inter_ibeside(s, "MPI_Iscatterv")?),
                        InterRoot::Here => {
                            not_in_place(c, sendbuf)?;
                            let v = blocks(sendcounts, displs, c.peers().len(), &Datatype::of(sendtype)?)?;
                            let send = input_of(sendbuf, v.count, &v.ty)?;
                            Ok(c.inter_iscatterv(s, Some((send, &v.counts, &v.displs)), None, InterRoot::Here)?)
                        }
                        root => {
                            not_in_place(c, recvbuf)?;
                            Ok(c.inter_iscatterv(s, None, Some(output(recvbuf, count_of(recvcount)?, recvtype)?), root)?)
                        }
                    };
                }
                let root = root_of(c, root)?;
                if c.rank() != root {
                    return Ok(c.iscatterv(s, None, output(recvbuf, count_of(recvcount)?, recvtype)?, root)?);
                }
                distinct_block(recvbuf, recvcount, sendbuf, int_at(displs, c.size(), root), sendtype)?;
                let v = blocks(sendcounts, displs, c.size(), &Datatype::of(sendtype)?)?;
                let send = input_of(sendbuf, v.count, &v.ty)?;
                let recv = if recvbuf == IN_PLACE.cast_mut() {
                    // The root's block stays where it is: the schedule copies it into a scratch.
                    held_mut(&send[v.displs[root]..v.displs[root] + v.counts[root]])
                } else {
                    output(recvbuf, count_of(recvcount)?, recvtype)?
                };
                Ok(c.iscatterv(s, Some((send, &v.counts, &v.displs)), recv, root)?)
            })
        }
    }

    fn MPI_Iallgatherv / PMPI_Iallgatherv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: MPI's contract, as for MPI_Igatherv.
        unsafe {
            launch("MPI_Iallgatherv", comm, request, |c, s| {
                not_in_place(c, sendbuf)?;
                let own = if c.is_inter() { 0 } else { int_at(displs, c.size(), c.rank()) };
                distinct_block(sendbuf, sendcount, recvbuf, own, recvtype)?;
                let v = blocks(recvcounts, displs, c.peers().len(), &Datatype::of(recvtype)?)?;
                let recv = output_of(recvbuf, v.count, &v.ty)?;
                let me = c.rank();
                let send = input(sendbuf, sendcount, sendtype, || Ok(&recv[v.displs[me]..v.displs[me] + v.counts[me]]))?;
                Ok(c.iallgatherv(s, send, recv, &v.counts, &v.displs)?)
            })
        }
    }

    fn MPI_Ialltoallv / PMPI_Ialltoallv(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const c_int,
        recvtype: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: MPI's contract, as for MPI_Igatherv.
        unsafe {
            launch("MPI_Ialltoallv", comm, request, |c, s| {
                not_in_place(c, sendbuf)?;
                distinct(sendbuf, recvbuf)?;
                let p = c.peers().len();
                let r = blocks(recvcounts, rdispls, p, &Datatype::of(recvtype)?)?;
                ialltoall_blocks(c, s, sendbuf, || blocks(sendcounts, sdispls, p, &Datatype::of(sendtype)?), recvbuf, r)
            })
        }
    }

    fn MPI_Ialltoallw / PMPI_Ialltoallw(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const c_int,
        sendtypes: *const c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const c_int,
        recvtypes: *const c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: MPI's contract, as for MPI_Igatherv.
        unsafe {
            launch("MPI_Ialltoallw", comm, request, |c, s| {
                not_in_place(c, sendbuf)?;
                distinct(sendbuf, recvbuf)?;
                let p = c.peers().len();
                let r = typed_blocks(recvcounts, rdispls, recvtypes, p)?;
                ialltoall_blocks(c, s, sendbuf, || typed_blocks(sendcounts, sdispls, sendtypes, p), recvbuf, r)
            })
        }
    }

    fn MPI_Ireduce_scatter_block / PMPI_Ireduce_scatter_block(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcount: c_int,
        datatype: c_int,
        op: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: MPI's contract: sendbuf (in place: recvbuf) holds size x recvcount
        // elements, recvbuf recvcount, until the request completes.
        unsafe {
            launch("MPI_Ireduce_scatter_block", comm, request, |c, s| {
                let n = count_of(recvcount)?;
                let counts = vec![n; c.size()];
                ireduce_scatter(c, s, sendbuf, recvbuf, &counts, datatype, op)
            })
        }
    }

    fn MPI_Ireduce_scatter / PMPI_Ireduce_scatter(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        datatype: c_int,
        op: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: MPI's contract: recvcounts holds size ints; sendbuf (in place: recvbuf)
        // every block, recvbuf this rank's, until the request completes.
        unsafe {
            launch("MPI_Ireduce_scatter", comm, request, |c, s| {
                let counts: Vec<usize> = ints_at(recvcounts, c.size(), "receive counts")?
                    .iter()
                    .map(|&n| count_of(n))
                    .collect::<Res<_>>()?;
                ireduce_scatter(c, s, sendbuf, recvbuf, &counts, datatype, op)
            })
        }
    }

    fn MPI_Comm_idup / PMPI_Comm_idup(comm: c_int, newcomm: *mut c_int, request: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: newcomm and request point to an MPI_Comm and an MPI_Request.
        unsafe { idup("MPI_Comm_idup", comm, newcomm, request) }
    }

    fn MPI_Comm_idup_with_info / PMPI_Comm_idup_with_info(
        comm: c_int,
        info: c_int,
        newcomm: *mut c_int,
        request: *mut c_int,
    ) -> c_int {
        if let Err(fail) = super::info::hints("MPI_Comm_idup_with_info", info) {
            return finish("MPI_Comm_idup_with_info", comm, Err(fail));
        }
        // SAFETY: as for MPI_Comm_idup.
        unsafe { idup("MPI_Comm_idup_with_info", comm, newcomm, request) }
    }

    fn MPI_Iscan / PMPI_Iscan(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: c_int,
        op: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: MPI's contract: both buffers hold `count` elements until the request
        // completes; the in-place copy lives with it.
        unsafe { launch("MPI_Iscan", comm, request, |c, s| iscan(c, s, sendbuf, recvbuf, count, datatype, op, true)) }
    }

    fn MPI_Iexscan / PMPI_Iexscan(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: c_int,
        op: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        // SAFETY: as for MPI_Iscan.
        unsafe { launch("MPI_Iexscan", comm, request, |c, s| iscan(c, s, sendbuf, recvbuf, count, datatype, op, false)) }
    }

    // The nonblocking neighbourhood collectives, on a communicator with a Cartesian grid or
    // a graph (MPI_ERR_TOPOLOGY on another); MPI_IN_PLACE is not among their arguments.
    fn MPI_Ineighbor_allgather / PMPI_Ineighbor_allgather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let recv = (recvbuf, recvcount, recvtype);
        // SAFETY: MPI's contract: sendbuf holds sendcount elements, recvbuf one block of
        // recvcount per neighbour, until the request completes.
        unsafe { ineighbor_blocks("MPI_Ineighbor_allgather", false, (sendbuf, sendcount, sendtype), recv, comm, request) }
    }

    fn MPI_Ineighbor_allgatherv / PMPI_Ineighbor_allgatherv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        const NAME: &str = "MPI_Ineighbor_allgatherv";
        // SAFETY: MPI's contract: the arrays hold one int per neighbour, the buffers what
        // they say, until the request completes.
        unsafe {
            launch(NAME, comm, request, |_, s| {
                let c = super::topo::neighborhood_of(NAME, comm)?;
                let v = blocks(recvcounts, displs, c.sources().len(), &Datatype::of(recvtype)?)?;
                let recv = output_of(recvbuf, v.count, &v.ty)?;
                let send = input_of(sendbuf, count_of(sendcount)?, &Datatype::of(sendtype)?)?;
                Ok(c.ineighbor_allgatherv(s, send, recv, &v.counts, &v.displs)?)
            })
        }
    }

    fn MPI_Ineighbor_alltoall / PMPI_Ineighbor_alltoall(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let recv = (recvbuf, recvcount, recvtype);
        // SAFETY: MPI's contract: each buffer holds one block per neighbour until the
        // request completes.
        unsafe { ineighbor_blocks("MPI_Ineighbor_alltoall", true, (sendbuf, sendcount, sendtype), recv, comm, request) }
    }

    fn MPI_Ineighbor_alltoallv / PMPI_Ineighbor_alltoallv(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const c_int,
        recvtype: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        const NAME: &str = "MPI_Ineighbor_alltoallv";
        // SAFETY: as for MPI_Ineighbor_allgatherv.
        unsafe {
            launch(NAME, comm, request, |_, s| {
                let c = super::topo::neighborhood_of(NAME, comm)?;
                let r = blocks(recvcounts, rdispls, c.sources().len(), &Datatype::of(recvtype)?)?;
                let recv = output_of(recvbuf, r.count, &r.ty)?;
                let v = blocks(sendcounts, sdispls, c.destinations().len(), &Datatype::of(sendtype)?)?;
                let send = input_of(sendbuf, v.count, &v.ty)?;
                Ok(c.ineighbor_alltoallv(s, send, &v.counts, &v.displs, recv, &r.counts, &r.displs)?)
            })
        }
    }

    fn MPI_Ineighbor_alltoallw / PMPI_Ineighbor_alltoallw(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const isize,
        sendtypes: *const c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const isize,
        recvtypes: *const c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        const NAME: &str = "MPI_Ineighbor_alltoallw";
        // SAFETY: MPI's contract: the arrays hold one entry per neighbour, the buffers span
        // every block, until the request completes.
        unsafe {
            launch(NAME, comm, request, |_, s| {
                let c = super::topo::neighborhood_of(NAME, comm)?;
                let r = typed_blocks(recvcounts, rdispls, recvtypes, c.sources().len())?;
                let recv = output_of(recvbuf, r.count, &r.ty)?;
                let v = typed_blocks(sendcounts, sdispls, sendtypes, c.destinations().len())?;
                let send = input_of(sendbuf, v.count, &v.ty)?;
                Ok(c.ineighbor_alltoallv(s, send, &v.counts, &v.displs, recv, &r.counts, &r.displs)?)
            })
        }
    }
}

/// `MPI_Ineighbor_allgather` (one block sent to every neighbour) or, `alltoall`,
/// `MPI_Ineighbor_alltoall` (a block per neighbour): blocks of `count` elements of `datatype`
/// at `buf` for the send `(buf, count, datatype)` and the receive, one per neighbour.
///
/// # Safety
/// The buffers hold what they say until the request completes.
unsafe fn ineighbor_blocks(
    name: &'static str,
    alltoall: bool,
    (sendbuf, sendcount, sendtype): (*const c_void, c_int, c_int),
    (recvbuf, recvcount, recvtype): (*mut c_void, c_int, c_int),
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    // SAFETY: this function's contract.
    unsafe {
        launch(name, comm, request, |_, s| {
            let c = super::topo::neighborhood_of(name, comm)?;
            let recv = output(recvbuf, count_of(recvcount)? * c.sources().len(), recvtype)?;
            let sent = count_of(sendcount)? * if alltoall { c.destinations().len() } else { 1 };
            let send = input_of(sendbuf, sent, &Datatype::of(sendtype)?)?;
            Ok(if alltoall { c.ineighbor_alltoall(s, send, recv)? } else { c.ineighbor_allgather(s, send, recv)? })
        })
    }
}

/// `MPI_Ireduce_scatter` (and `_block`): block `r`, of `counts[r]` elements, to rank `r`.
///
/// # Safety
/// As MPI says for the call: the input (in place: `recvbuf`) holds every block, `recvbuf`
/// this rank's, until the request completes.
unsafe fn ireduce_scatter(
    c: &Comm,
    s: &crate::Scope<'static>,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: &[usize],
    datatype: c_int,
    op: c_int,
) -> Res<CollRequest<'static>> {
    not_in_place(c, sendbuf)?;
    distinct(sendbuf, recvbuf)?;
    let (ty, op) = (Datatype::of(datatype)?, ReduceOp::of(op)?);
    let total: usize = counts.iter().sum();
    let mine = counts[c.rank()];
    let (send, recv) = if sendbuf == IN_PLACE {
        // The input is the whole receive buffer; the result lands at its start.
        let all = output_of(recvbuf, total, &ty)?;
        let send = held(all);
        (send, &mut all[..mine * ty.size])
    } else {
        (input_of(sendbuf, total, &ty)?, output_of(recvbuf, mine, &ty)?)
    };
    if let Some(f) = types::elementwise(&ty, &op)? {
        let at = counts[..c.rank()].iter().sum::<usize>() * ty.size;
        return igathered(c, s, Fold::Block(at..at + mine * ty.size), send, Some(recv), f);
    }
    let ptrs = [at(send), at(recv)];
    carried(&ty, &op, &ptrs, |k| {
        with_carrier!(k, |o, T| {
            let per = ty.size / size_of::<T>();
            let counts: Vec<usize> = counts.iter().map(|&n| n * per).collect();
            c.ireduce_scatter(s, cast::<T>(send), cast_mut::<T>(recv), &counts, o)
        })
    })
}

/// `MPI_Iscan` (`inclusive`) and `MPI_Iexscan`.
///
/// # Safety
/// As MPI says for the call: both buffers hold `count` elements until the request completes.
#[allow(clippy::too_many_arguments)]
unsafe fn iscan(
    c: &Comm,
    s: &crate::Scope<'static>,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    inclusive: bool,
) -> Res<CollRequest<'static>> {
    // MPI defines the prefix reductions on intra-communicators alone.
    c.intra(if inclusive { "MPI_Iscan" } else { "MPI_Iexscan" })?;
    distinct_block(sendbuf, count, recvbuf, 0, datatype)?;
    let (ty, op) = (Datatype::of(datatype)?, ReduceOp::of(op)?);
    let recv = output(recvbuf, count_of(count)?, datatype)?;
    let send = input(sendbuf, count, datatype, || Ok(&*recv))?;
    if let Some(f) = types::elementwise(&ty, &op)? {
        return igathered(c, s, Fold::Scan { inclusive }, send, Some(recv), f);
    }
    let ptrs = [at(send), at(recv)];
    carried(&ty, &op, &ptrs, |k| {
        with_carrier!(k, |o, T| c.iscan_with(s, cast::<T>(send), cast_mut::<T>(recv), o, inclusive))
    })
}

/// `MPI_Ireduce` on an inter-communicator.
///
/// # Safety
/// As MPI says for the call: the root's `recvbuf` holds `count` elements, the other
/// group's `sendbuf` too, until the request completes.
#[allow(clippy::too_many_arguments)]
unsafe fn ireduce_inter(
    c: &Comm,
    s: &crate::Scope<'static>,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    root: c_int,
) -> Res<CollRequest<'static>> {
    let root = inter_root(c, root)?;
    if root == InterRoot::Beside {
        return Ok(c.inter_ibeside(s, "MPI_Ireduce")?);
    }
    let (ty, op) = (Datatype::of(datatype)?, ReduceOp::of(op)?);
    let (send, recv) = match root {
        InterRoot::Here => {
            not_in_place(c, recvbuf)?;
            (None, Some(output_of(recvbuf, count_of(count)?, &ty)?))
        }
        _ => {
            not_in_place(c, sendbuf)?;
            (Some(input_of(sendbuf, count_of(count)?, &ty)?), None)
        }
    };
    if let Some(f) = types::elementwise(&ty, &op)? {
        return igathered_inter(c, s, root, send, recv, f);
    }
    let ptrs: Vec<*const u8> = send.iter().map(|b| at(b)).chain(recv.as_deref().map(at)).collect();
    carried(&ty, &op, &ptrs, |k| {
        with_carrier!(k, |o, T| c.inter_ireduce(s, send.map(cast::<T>), recv.map(cast_mut::<T>), o, root))
    })
}

/// `MPI_Comm_idup`: the agreement starts, and the new handle is written at once, as MPI's
/// calls that make a handle write it (the program may not use it before the request
/// completes): its entry holds the parent until then, and the duplicate from then on.
/// Attributes and the topology are copied now, as `MPI_Comm_dup` copies them.
///
/// # Safety
/// `newcomm` and `request` point to an `MPI_Comm` and an `MPI_Request`.
unsafe fn idup(name: &'static str, comm: c_int, newcomm: *mut c_int, request: *mut c_int) -> c_int {
    // SAFETY: no buffers; the caller's pointers, as this function's contract says.
    unsafe {
        launch(name, comm, request, |c, s| {
            if newcomm.is_null() {
                return Err(Fail::new(ERR_ARG, format!("{name}: a null communicator pointer")));
            }
            let (req, made) = c.idup(s)?.into_parts();
            super::new_comm(name, Some(c.clone()), super::errhandler_of(comm), newcomm)?;
            let h = *newcomm;
            let copied = super::topo::topo_of(name, comm)
                .and_then(|t| super::topo::set_topo(name, h, t))
                .and_then(|()| super::attr::copy_all(name, super::attr::Object::Comm, comm, h));
            if let Err(e) = copied {
                // A copy function failed: no duplicate (the agreement goes on for the others).
                let _ = super::with_state(name, |st| super::free_handle(&mut st.comms, h, 3));
                *newcomm = 0;
                return Err(e);
            }
            // Where the agreement fails, the handle goes: the program's later calls on it
            // get MPI_ERR_COMM, not the parent it held meanwhile.
            let drop_handle = move || {
                let _ = super::with_state(name, |st| super::free_handle(&mut st.comms, h, 3));
            };
            let done = move || {
                let made = made.comm();
                let _ = super::with_state(name, |st| match (made, st.comms.get_mut(h as usize)) {
                    (Ok(made), Some(Some(e))) => e.comm = made,
                    (_, slot) => {
                        if let Some(slot) = slot {
                            *slot = None;
                        }
                    }
                });
            };
            KEEP.with(|k| {
                let mut k = k.borrow_mut();
                k.finish = Some(Finish(Box::new(done)));
                k.undo = Some(Finish(Box::new(drop_handle)));
            });
            Ok(req)
        })
    }
}
