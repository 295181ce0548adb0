//! Point-to-point beyond the blocking calls: requests (`MPI_Request`), the nonblocking,
//! synchronous, ready and buffered sends, persistent requests, and the Wait/Test family.
//!
//! A request handle is 1 + a slot of the state's request table (0 is `MPI_REQUEST_NULL`),
//! or, for a send or receive of one run of bytes in flight (the common case), negative:
//! -1 - the engine's index of the request, with what the C ABI adds kept at that index
//! ([`Named`]), so that such a request costs no table entry of its own. The request itself
//! is the Rust API's unscoped [`Request`] (or its [`Raw`] form): the C caller keeps the
//! buffer valid until the request completes, as MPI's contract says.

use std::borrow::Cow;
use std::ffi::{c_int, c_void};

use super::types::{Datatype, FIRST_DERIVED};
use super::{
    bytes, bytes_mut, comm_of, comm_ref, count_of, finish, message, peer, plain, plain_mut, put, set_status_raw,
    with_state, Fail, MpiStatus, Res, ANY_SOURCE, ANY_TAG, COMM_WORLD, ERR_ARG, ERR_BUFFER, ERR_IN_STATUS, ERR_REQUEST,
    MPI_SUCCESS, UNDEFINED,
};
use crate::engine::ReqId;
use crate::request::{wait_raw_each, Raw};
use crate::Request;

pub(super) const REQUEST_NULL: c_int = 0;
/// The handle of every nonblocking send that completed as it started (an eager send the
/// transport took whole): it has no entry in the table, so a stream of small sends costs
/// the table nothing. MPICH's built-in complete requests are the same idea; MPI does not
/// promise distinct handles for distinct requests.
const SENT: c_int = c_int::MAX;
/// The bit of a status's upper count word that says its request was cancelled.
pub(super) const CANCELLED: c_int = i32::MIN;
/// `MPI_MESSAGE_NULL`, and `MPI_MESSAGE_NO_PROC` (a matching probe of `MPI_PROC_NULL`).
const MESSAGE_NULL: c_int = 0;
const MESSAGE_NO_PROC: c_int = 1;
/// Bytes of the attached buffer a buffered send takes beyond its message
/// (`MPI_BSEND_OVERHEAD`).
const BSEND_OVERHEAD: usize = 64;

/// How a send is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `MPI_Send`, and `MPI_Rsend` (a ready send may be a standard one).
    Standard,
    /// `MPI_Ssend`: ends once a receive matched it.
    Sync,
    /// `MPI_Bsend`: copied into the attached buffer, ends at once.
    Buffered,
}

/// One operation, as its call named it (a persistent request keeps it to start again).
#[derive(Debug, Clone, Copy)]
struct Call {
    /// `None` for a receive.
    send: Option<Mode>,
    buf: *mut c_void,
    count: c_int,
    datatype: c_int,
    peer: c_int,
    tag: c_int,
    comm: c_int,
}

/// An operation started.
#[derive(Debug)]
enum Op {
    /// A send or receive of one run of bytes (the C ABI's common case): its request
    /// without a reference to the runtime ([`Raw`]), which the table's runtime completes.
    Raw(Raw),
    Live(Request<'static>),
    /// A nonblocking collective, with the copies it works from (an `MPI_IN_PLACE` input);
    /// boxed, so that a table entry is the size of a point-to-point request's.
    Coll(Box<(crate::CollRequest<'static>, super::icoll::Keep)>),
    /// Nothing in flight: to `MPI_PROC_NULL`, or a buffered send (copied).
    Done(MpiStatus),
    /// A generalized request: what MPI keeps of it is in [`super::greq`], by its handle.
    Gen,
}

impl Op {
    /// The operation with a raw request made a whole one, its runtime (the world's: every
    /// communicator's) given back from `comms`: for every path but `MPI_Waitall`'s.
    fn live(self, comms: &[Option<super::CommEntry>]) -> Op {
        match self {
            Op::Raw(r) => Op::Live(r.into_request(world_runtime(comms))),
            op => op,
        }
    }
}

/// The world communicator, from the table of communicators.
fn world(comms: &[Option<super::CommEntry>]) -> &crate::Comm {
    &comms[COMM_WORLD as usize].as_ref().expect("MPI_COMM_WORLD lives until MPI_Finalize").comm
}

/// The runtime of every request of this process (the world communicator's, which all
/// communicators share).
fn world_runtime(comms: &[Option<super::CommEntry>]) -> &std::sync::Arc<crate::progress::Shared> {
    world(comms).runtime()
}

/// A request of the table.
#[derive(Debug)]
pub(super) struct CReq {
    comm: c_int,
    /// `None`: a persistent request not started.
    op: Option<Op>,
    /// A persistent request's operation (boxed, as [`Op::Coll`]).
    persistent: Option<Box<Kept>>,
}

/// A request the engine holds alone, named by a negative handle: what the C ABI keeps of
/// it, at the engine's index of the request.
#[derive(Debug, Clone, Copy)]
pub(super) struct Named {
    id: ReqId,
    comm: c_int,
}

/// The handle of engine request `id`, started on `comm`, its entry made; `None` if its
/// index is beyond what a negative `int` names (the table takes it then).
#[inline(always)]
fn name_request(s: &mut super::State, id: ReqId, comm: c_int) -> Option<c_int> {
    let i = id.index();
    let h = -1 - c_int::try_from(i).ok()?;
    let n = Named { id, comm };
    match s.named.get_mut(i) {
        Some(slot) => *slot = Some(n),
        None => grow(&mut s.named, i, n),
    }
    Some(h)
}

/// Makes room for index `i` of the named requests, `n` there.
#[cold]
#[inline(never)]
fn grow(named: &mut Vec<Option<Named>>, i: usize, n: Named) {
    named.resize(i + 1, None);
    named[i] = Some(n);
}

/// The engine's index that handle `h` names, if it is a named request's handle.
#[inline(always)]
fn named_index(h: c_int) -> Option<usize> {
    (h < 0).then_some(!h as usize)
}

/// Named request `h`'s entry (`i` its index).
fn named_entry<'s>(name: &str, s: &'s mut super::State, i: usize, h: c_int) -> Res<&'s mut Named> {
    s.named.get_mut(i).and_then(Option::as_mut).ok_or_else(|| not_a_request(name, h))
}

/// The buffer of `MPI_Buffer_attach`, and the buffered sends that hold part of it.
#[derive(Debug, Default)]
pub(super) struct Attached {
    buf: Option<(*mut c_void, usize)>,
    /// Each buffered send in flight, with its copy of the message.
    pub(super) sends: Vec<(Request<'static>, Vec<u8>)>,
}

impl Attached {
    /// Bytes of the buffer the buffered sends in flight hold (forgetting those that ended).
    fn used(&mut self) -> usize {
        self.sends.retain(|(r, _)| !r.is_complete());
        self.sends.iter().map(|(_, b)| b.len() + BSEND_OVERHEAD).sum()
    }
}

/// The status of a request that completed with nothing to report (`MPI_Wait` on a send, a
/// null or inactive request).
pub(super) fn empty() -> MpiStatus {
    MpiStatus { source: ANY_SOURCE, tag: ANY_TAG, error: MPI_SUCCESS, count_lo: 0, count_hi: 0 }
}

/// Starts `call`.
///
/// # Safety
/// `call.buf` holds `call.count` elements of its datatype, valid until the operation ends.
unsafe fn start(name: &str, call: &Call) -> Res<Op> {
    if call.send == Some(Mode::Buffered) {
        // A buffered send takes part of the attached buffer, from the state.
        let c = comm_of(name, call.comm)?;
        // SAFETY: this function's contract.
        return unsafe { start_on(name, &c, call) };
    }
    let c = comm_ref(name, call.comm)?;
    // SAFETY: this function's contract.
    unsafe { start_on(name, &c, call) }
}

/// [`start`] on communicator `c`.
///
/// # Safety
/// As [`start`].
#[inline(always)]
unsafe fn start_on(name: &str, c: &crate::Comm, call: &Call) -> Res<Op> {
    // A run of a predefined type's elements from or to a rank (the path of every stream of
    // small messages): the caller's bytes themselves, with no datatype built. Every other
    // case (and every error) takes the general path below.
    match call.send {
        None => {
            let src = if call.peer == ANY_SOURCE { Ok(crate::ANY_SOURCE) } else { usize::try_from(call.peer) };
            // SAFETY: the caller's buffer (this function's contract).
            if let (Some(data), Ok(src)) = (unsafe { plain_mut(call.buf, call.count, call.datatype) }, src) {
                // SAFETY: as above: valid and not otherwise touched until the receive ends.
                return Ok(Op::Raw(unsafe { c.irecv_raw(data.as_mut_ptr(), data.len(), src, call.tag)? }));
            }
        }
        Some(Mode::Standard) => {
            // SAFETY: the caller's buffer (this function's contract).
            let data = unsafe { plain(call.buf, call.count, call.datatype) };
            if let (Some(data), Ok(dest)) = (data, usize::try_from(call.peer)) {
                // SAFETY: as above: valid until the operation ends.
                return Ok(Op::Raw(unsafe { c.isend_raw(data.as_ptr(), data.len(), dest, call.tag)? }));
            }
        }
        Some(Mode::Sync | Mode::Buffered) => {}
    }
    match call.send {
        Some(mode) => {
            // SAFETY: the caller's buffer (this function's contract): `message` reads a
            // predefined type's run without building the datatype.
            let data = unsafe { message(call.buf, call.count, call.datatype)? };
            let Some(dest) = peer(call.peer, false)? else { return Ok(Op::Done(MpiStatus::proc_null())) };
            let sync = mode == Mode::Sync;
            Ok(match (mode, data) {
                (Mode::Buffered, data) => {
                    buffered(name, c, &data, dest, call.tag)?;
                    Op::Done(empty())
                }
                // A derived datatype's packed message: the engine owns it.
                (_, Cow::Owned(packed)) => Op::Live(c.isend_owned(packed, dest, call.tag, sync)?),
                (_, Cow::Borrowed(d)) if sync => {
                    // SAFETY: as above: valid until the operation ends.
                    Op::Live(unsafe { c.issend_unscoped(d.as_ptr(), d.len(), dest, call.tag)? })
                }
                // SAFETY: as above.
                (_, Cow::Borrowed(d)) => Op::Raw(unsafe { c.isend_raw(d.as_ptr(), d.len(), dest, call.tag)? }),
            })
        }
        None => {
            let ty = Datatype::of(call.datatype)?;
            let n = count_of(call.count)?;
            ty.usable()?;
            let Some(src) = peer(call.peer, true)? else { return Ok(Op::Done(MpiStatus::proc_null())) };
            // SAFETY: this function's contract.
            Ok(Op::Live(unsafe { receive(Source::Comm(c, src, call.tag), call.buf, n, &ty)? }))
        }
    }
}

/// Where a nonblocking receive takes its message from.
enum Source<'c> {
    /// The first that matches (source, tag) on a communicator.
    Comm(&'c crate::Comm, usize, c_int),
    /// One a matching probe took (`MPI_Imrecv`).
    Matched(crate::Message),
}

/// Starts receiving from `from` into `n` elements of `ty` at `buf`: in place where they are
/// one run of bytes; else into bytes the engine owns, unpacked into the caller's memory when
/// the receive completes.
///
/// # Safety
/// `buf` holds `n` elements of `ty`, valid and untouched until the receive completes.
unsafe fn receive(from: Source, buf: *mut c_void, n: usize, ty: &Datatype) -> Res<Request<'static>> {
    if let (None, Some(d)) = (ty.contiguous_at(n), &ty.derived) {
        let (d, base) = (d.clone(), SendPtr(buf.cast::<u8>()));
        let unpack = move |got: &[u8]| {
            let base = base;
            // SAFETY: the caller's buffer, valid and untouched until the receive ends (this
            // function's contract), which is when this runs.
            unsafe { d.layout.unpack(got, base.0, n) }
        };
        return Ok(match from {
            Source::Comm(c, src, tag) => c.irecv_staged(n * ty.size, src, tag, unpack)?,
            Source::Matched(m) => m.irecv_staged(n * ty.size, unpack)?,
        });
    }
    // SAFETY: this function's contract.
    let mut data = unsafe { bytes_mut(buf, n, ty)? };
    let (p, len) = (data.as_mut_ptr(), data.len());
    // SAFETY: as above: valid and not otherwise touched until the receive ends.
    Ok(unsafe {
        match from {
            Source::Comm(c, src, tag) => c.irecv_unscoped(p, len, src, tag)?,
            Source::Matched(m) => m.irecv_unscoped(p, len)?,
        }
    })
}

/// A pointer to the caller's memory, carried by a closure the engine runs when a request
/// completes.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);

/// A buffered send (`MPI_Bsend`): `data` copied, within the attached buffer's room, and
/// sent from the copy; the call returns at once.
fn buffered(name: &str, c: &crate::Comm, data: &[u8], dest: usize, tag: c_int) -> Res {
    with_state(name, |s| {
        let room = s.attached.buf.map_or(0, |(_, size)| size);
        let used = s.attached.used();
        if used + data.len() + BSEND_OVERHEAD > room {
            return Err(Fail::new(
                ERR_BUFFER,
                format!(
                    "{name}: {} bytes (+{BSEND_OVERHEAD}) do not fit the attached buffer ({used} of {room} bytes in \
                     use)",
                    data.len()
                ),
            ));
        }
        Ok(())
    })??;
    let copy = data.to_vec();
    // SAFETY: the copy stays in the state's list until the send completes (Attached::used
    // drops it only then; MPI_Buffer_detach and MPI_Finalize wait for it).
    let req = unsafe { c.isend_unscoped(copy.as_ptr(), copy.len(), dest, tag)? };
    with_state(name, |s| s.attached.sends.push((req, copy)))
}

/// A new handle for `req`, written to `out`.
///
/// # Safety
/// `out` points to an `MPI_Request`.
unsafe fn new_request(name: &str, req: CReq, out: *mut c_int) -> Res {
    if out.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null request pointer")));
    }
    let h = with_state(name, |s| s.requests.insert(req) as c_int + 1)?;
    // SAFETY: not null (checked): the caller's MPI_Request.
    unsafe { put(out, h) }
}

/// A new generalized request's table entry (see [`super::greq`]), its handle written to
/// `out` once `register` has made it one. The entries of requests freed before they
/// completed, which have completed since, go back to the table first.
///
/// # Safety
/// `out` points to an `MPI_Request`.
pub(super) unsafe fn new_generalized(name: &str, out: *mut c_int, register: impl FnOnce(c_int)) -> Res {
    if out.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null request pointer")));
    }
    let h = with_state(name, |s| {
        for h in super::greq::take_orphans() {
            s.requests.try_remove(h as usize - 1);
        }
        // Errors of generalized requests go to MPI_COMM_WORLD's handler, as in MPICH.
        s.requests.insert(CReq { comm: COMM_WORLD, op: Some(Op::Gen), persistent: None }) as c_int + 1
    })?;
    register(h);
    // SAFETY: not null (checked): the caller's MPI_Request.
    unsafe { put(out, h) }
}

/// A new request, complete already (a one-sided operation of `MPI_Rput` ..., which the
/// window completes locally before the call returns), written to `out`.
///
/// # Safety
/// `out` points to an `MPI_Request`.
pub(super) unsafe fn done_request(name: &str, out: *mut c_int) -> Res {
    let req = CReq { comm: COMM_WORLD, op: Some(Op::Done(empty())), persistent: None };
    // SAFETY: this function's contract.
    unsafe { new_request(name, req, out) }
}

/// A new request for nonblocking collective `req` on `comm` (keeping `keep` alive while it
/// runs), written to `out`.
///
/// # Safety
/// `out` points to an `MPI_Request`.
pub(super) unsafe fn new_coll_request(
    name: &str,
    comm: c_int,
    req: crate::CollRequest<'static>,
    keep: super::icoll::Keep,
    out: *mut c_int,
) -> Res {
    // SAFETY: this function's contract.
    unsafe { new_request(name, CReq { comm, op: Some(Op::Coll(Box::new((req, keep)))), persistent: None }, out) }
}

/// Starts `call` as a new request in `*request`.
///
/// # Safety
/// As [`start`]; `request` points to an `MPI_Request`.
#[inline(always)]
unsafe fn immediate(name: &str, call: Call, request: *mut c_int) -> c_int {
    // SAFETY: this function's contract.
    match unsafe { quick(&call, request) } {
        Some(Ok(())) => MPI_SUCCESS,
        Some(Err(e)) => finish(name, call.comm, Err(Fail::from(e))),
        // SAFETY: this function's contract.
        None => unsafe { immediate_general(name, call, request) },
    }
}

/// [`immediate`] of every call [`quick`] does not take, and of every error.
///
/// # Safety
/// As [`immediate`].
#[inline(never)]
unsafe fn immediate_general(name: &str, call: Call, request: *mut c_int) -> c_int {
    let r = (|| {
        if request.is_null() {
            return Err(Fail::new(ERR_ARG, format!("{name}: a null request pointer")));
        }
        let entry = |op| CReq { comm: call.comm, op: Some(op), persistent: None };
        let h = if call.send == Some(Mode::Buffered) {
            // SAFETY: this function's contract.
            let op = unsafe { start(name, &call)? };
            with_state(name, |s| s.requests.insert(entry(op)) as c_int + 1)?
        } else {
            // The communicator and the table in one borrow of the state (nothing that
            // starts an operation other than a buffered send reaches the state).
            with_state(name, |s| {
                // SAFETY: this function's contract.
                let op = unsafe { start_on(name, s.comm(name, call.comm)?, &call)? };
                Ok::<_, Fail>(match op {
                    Op::Raw(Raw::Done(_)) if call.send.is_some() => SENT,
                    Op::Raw(Raw::InFlight(id)) => match name_request(s, id, call.comm) {
                        Some(h) => h,
                        None => s.requests.insert(entry(op)) as c_int + 1,
                    },
                    op => s.requests.insert(entry(op)) as c_int + 1,
                })
            })??
        };
        // SAFETY: not null (checked): the caller's MPI_Request.
        unsafe { *request = h };
        Ok(())
    })();
    finish(name, call.comm, r)
}

/// [`immediate`]'s path for a standard send or a receive of a run of a predefined type's
/// elements to or from a rank (the path of every stream of small messages): started in
/// one borrow of the state, a request in flight named ([`name_request`]). `None`, with
/// nothing done, for every other case and every error but the engine's, which the general
/// path reports as it finds them.
///
/// # Safety
/// As [`immediate`].
#[inline(always)]
unsafe fn quick(call: &Call, request: *mut c_int) -> Option<Result<(), crate::Error>> {
    if request.is_null() {
        return None;
    }
    let mut state = super::STATE.get()?.try_borrow_mut().ok()?;
    let s = state.as_mut()?;
    let c = &s.entry(call.comm)?.comm;
    let started = match call.send {
        None => {
            let src = if call.peer == ANY_SOURCE { crate::ANY_SOURCE } else { usize::try_from(call.peer).ok()? };
            // SAFETY: the caller's buffer (this function's contract).
            let data = unsafe { plain_mut(call.buf, call.count, call.datatype)? };
            // SAFETY: as above: valid and not otherwise touched until the receive ends.
            unsafe { c.irecv_raw(data.as_mut_ptr(), data.len(), src, call.tag) }
        }
        Some(Mode::Standard) => {
            let dest = usize::try_from(call.peer).ok()?;
            // SAFETY: the caller's buffer (this function's contract).
            let data = unsafe { plain(call.buf, call.count, call.datatype)? };
            // SAFETY: as above: valid until the operation ends.
            unsafe { c.isend_raw(data.as_ptr(), data.len(), dest, call.tag) }
        }
        Some(Mode::Sync | Mode::Buffered) => return None,
    };
    let h = match started {
        Err(e) => return Some(Err(e)),
        Ok(Raw::Done(_)) if call.send.is_some() => SENT,
        Ok(raw) => {
            let named = match raw {
                Raw::InFlight(id) => name_request(s, id, call.comm),
                Raw::Done(_) => None,
            };
            named.unwrap_or_else(|| {
                let entry = CReq { comm: call.comm, op: Some(Op::Raw(raw)), persistent: None };
                s.requests.insert(entry) as c_int + 1
            })
        }
    };
    // SAFETY: not null (checked): the caller's MPI_Request.
    unsafe { *request = h };
    Some(Ok(()))
}

/// A persistent request's operation. A derived datatype it names is a handle of its own
/// (MPI lets the program free its handle while the request lives, and the slot may name
/// another type afterwards), freed with the request.
#[derive(Debug)]
struct Kept(Call);

impl Kept {
    fn new(mut call: Call) -> Res<Kept> {
        let t = Datatype::of(call.datatype)?;
        if call.datatype >= FIRST_DERIVED {
            call.datatype = Datatype::insert_again(&t);
        }
        Ok(Kept(call))
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if self.0.datatype >= FIRST_DERIVED {
            // The request's own handle, which nothing else frees.
            let _ = Datatype::free(self.0.datatype);
        }
    }
}

/// Makes `call` a persistent request in `*request`, not started.
///
/// # Safety
/// `request` points to an `MPI_Request`.
unsafe fn persistent(name: &str, call: Call, request: *mut c_int) -> c_int {
    let r = (|| {
        comm_of(name, call.comm)?;
        count_of(call.count)?;
        let kept = Box::new(Kept::new(call)?);
        // SAFETY: this function's contract.
        unsafe { new_request(name, CReq { comm: call.comm, op: None, persistent: Some(kept) }, request) }
    })();
    finish(name, call.comm, r)
}

/// A blocking send (`call.send` is its mode).
///
/// # Safety
/// `call.buf` holds `call.count` elements of its datatype.
unsafe fn blocking(name: &str, call: Call) -> c_int {
    let r = (|| {
        let c = comm_of(name, call.comm)?;
        let ty = Datatype::of(call.datatype)?;
        // SAFETY: this function's contract.
        let data = unsafe { bytes(call.buf, count_of(call.count)?, &ty)? };
        let Some(d) = peer(call.peer, false)? else { return Ok(()) };
        match call.send {
            Some(Mode::Sync) => c.ssend(&data, d, call.tag)?,
            Some(Mode::Buffered) => buffered(name, &c, &data, d, call.tag)?,
            _ => c.send(&data, d, call.tag)?,
        }
        Ok(())
    })();
    finish(name, call.comm, r)
}

/// The slot of handle `h` in the table, if it could name one.
fn slot(h: c_int) -> Option<usize> {
    usize::try_from(h.checked_sub(1)?).ok()
}

/// The key of handle `h` in the table.
fn key(name: &str, h: c_int) -> Res<usize> {
    slot(h).ok_or_else(|| not_a_request(name, h))
}

/// The error of a handle that names no request.
#[cold]
#[inline(never)]
fn not_a_request(name: &str, h: c_int) -> Fail {
    Fail::new(ERR_REQUEST, format!("{name}: {h} is not a request"))
}

/// The status of a send that completed as it started (the engine's: this rank of the
/// world, tag 0, no bytes), which a [`SENT`] handle reports.
fn sent_status(s: &super::State) -> crate::Status {
    crate::Status { source: world(&s.comms).rank(), tag: 0, bytes: 0 }
}

/// What [`take_op`] took of a request.
struct Taken {
    /// `None`: a persistent request not started.
    op: Option<Op>,
    comm: c_int,
    /// Whether the request left the table (a request waited for that is not persistent).
    gone: bool,
}

/// Request `h`'s operation, taken out of the table to be tested or (with `wait`) waited
/// for: the table is not borrowed meanwhile. A request waited for that is not persistent
/// leaves the table at once (waiting completes it: one borrow of the state, not two).
/// `None`: a null handle.
fn take_op(name: &str, h: c_int, wait: bool) -> Res<Option<Taken>> {
    if h == REQUEST_NULL {
        return Ok(None);
    }
    if let Some(i) = named_index(h) {
        return with_state(name, |s| {
            let n = *named_entry(name, s, i, h)?;
            if wait {
                s.named[i] = None;
            }
            let op = Op::Live(Raw::InFlight(n.id).into_request(world_runtime(&s.comms)));
            Ok(Some(Taken { op: Some(op), comm: n.comm, gone: wait }))
        })?;
    }
    let k = key(name, h)?;
    with_state(name, |s| {
        if h == SENT {
            return Ok(Some(Taken { op: Some(Op::Done(MpiStatus::of(sent_status(s)))), comm: COMM_WORLD, gone: true }));
        }
        let Some(r) = s.requests.get_mut(k) else {
            return Err(not_a_request(name, h));
        };
        // A generalized request leaves the table when it completes (below, in `settle`).
        let mut taken = if !wait || r.persistent.is_some() || matches!(r.op, Some(Op::Gen)) {
            Taken { op: r.op.take(), comm: r.comm, gone: false }
        } else {
            let r = s.requests.remove(k);
            Taken { op: r.op, comm: r.comm, gone: true }
        };
        taken.op = taken.op.map(|op| op.live(&s.comms));
        Ok(Some(taken))
    })?
}

/// What testing a request found.
enum Outcome {
    /// Not complete.
    Pending,
    /// Complete (or null, or inactive), with its status; an error is in it and beside it.
    Complete(MpiStatus, Option<(Fail, c_int)>),
}

/// Tests request `*h` (with `wait`, waits for it). Complete, a request is freed (`*h`
/// becomes `MPI_REQUEST_NULL`) or, persistent, goes inactive.
///
/// # Safety
/// `h` points to an `MPI_Request`.
unsafe fn settle(name: &str, h: *mut c_int, wait: bool) -> Res<Outcome> {
    if h.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null request pointer")));
    }
    // SAFETY: not null (checked): the caller's MPI_Request.
    let handle = unsafe { *h };
    let Some(Taken { op, comm, gone }) = take_op(name, handle, wait)? else {
        return Ok(Outcome::Complete(empty(), None));
    };
    let result = match op {
        // Persistent and inactive: complete, nothing changes.
        None => return Ok(Outcome::Complete(empty(), None)),
        Some(Op::Done(st)) => Ok(st),
        Some(Op::Raw(_)) => unreachable!("take_op makes a raw request whole"),
        // SAFETY: this function's contract.
        Some(Op::Gen) => return unsafe { settle_generalized(name, h, comm, wait) },
        Some(Op::Live(req)) if wait => req.wait().map(MpiStatus::of),
        Some(Op::Live(req)) => match req.test() {
            Ok(r) => r.map(MpiStatus::of),
            Err(req) => {
                // A named request stays the engine's (its entry untouched).
                if named_index(handle).is_none() {
                    with_state(name, |s| s.requests[handle as usize - 1].op = Some(Op::Live(req)))?;
                }
                return Ok(Outcome::Pending);
            }
        },
        Some(Op::Coll(coll)) if wait => {
            let (req, keep) = *coll;
            req.wait().map(|()| {
                keep.complete();
                empty()
            })
        }
        Some(Op::Coll(coll)) => {
            let (req, keep) = *coll;
            match req.test() {
                Ok(r) => r.map(|()| {
                    keep.complete();
                    empty()
                }),
                Err(req) => {
                    let op = Op::Coll(Box::new((req, keep)));
                    with_state(name, |s| s.requests[handle as usize - 1].op = Some(op))?;
                    return Ok(Outcome::Pending);
                }
            }
        }
    };
    // A request tested complete leaves the table now (or, persistent, goes inactive).
    let persistent = if wait || gone {
        !gone
    } else {
        with_state(name, |s| {
            if let Some(i) = named_index(handle) {
                s.named[i] = None;
                return false;
            }
            let k = handle as usize - 1;
            let p = s.requests[k].persistent.is_some();
            if !p {
                s.requests.remove(k);
            }
            p
        })?
    };
    if !persistent {
        // SAFETY: the caller's MPI_Request (checked above).
        unsafe { *h = REQUEST_NULL };
    }
    Ok(match result {
        Ok(st) => Outcome::Complete(st, None),
        Err(e) => {
            let (st, fail) = failed_status(e);
            Outcome::Complete(st, fail.map(|f| (f, comm)))
        }
    })
}

/// [`settle`] of generalized request `*h` (taken out of its table entry): once it has
/// completed, it leaves the table; with `wait`, progress is made until it has (another
/// thread completes it).
///
/// # Safety
/// `h` points to an `MPI_Request`.
unsafe fn settle_generalized(name: &str, h: *mut c_int, comm: c_int, wait: bool) -> Res<Outcome> {
    // SAFETY: this function's contract.
    let handle = unsafe { *h };
    let k = handle as usize - 1;
    loop {
        // A handle whose request was freed (and has completed, or not) is an error.
        let settled = super::greq::settle(name, handle);
        if let Ok(Some((st, fail))) = settled {
            with_state(name, |s| s.requests.try_remove(k))?;
            // SAFETY: this function's contract.
            unsafe { *h = REQUEST_NULL };
            return Ok(Outcome::Complete(st, fail.map(|f| (f, comm))));
        }
        let progressed = settled.and_then(|_| progress_once(name));
        if !wait || progressed.is_err() {
            with_state(name, |s| s.requests.get_mut(k).map(|r| r.op = Some(Op::Gen)))?;
            progressed?;
            return Ok(Outcome::Pending);
        }
        std::hint::spin_loop();
    }
}

/// The status of a request that ended with `e`, and its failure: none for a request
/// cancelled (`MPI_Cancel`), whose status says so instead (`MPI_Test_cancelled`).
fn failed_status(e: crate::Error) -> (MpiStatus, Option<Fail>) {
    if e == crate::Error::Cancelled {
        return (MpiStatus { count_hi: CANCELLED, ..empty() }, None);
    }
    let st = super::truncated(&e).unwrap_or_else(empty);
    let fail = Fail::from(e);
    (MpiStatus { error: fail.class, ..st }, Some(fail))
}

/// Writes status `st` to `statuses[i]` unless `MPI_STATUSES_IGNORE`.
///
/// # Safety
/// `statuses` is null or holds more than `i` statuses.
unsafe fn store(statuses: *mut MpiStatus, i: usize, st: MpiStatus) {
    if !statuses.is_null() {
        // SAFETY: the caller's array of statuses (this function's contract).
        unsafe { *statuses.add(i) = st };
    }
}

/// The requests `reqs[..count]` as a slice.
///
/// # Safety
/// `reqs` holds `count` requests.
unsafe fn handles<'a>(name: &str, count: c_int, reqs: *mut c_int) -> Res<&'a mut [c_int]> {
    let n = count_of(count)?;
    if n == 0 {
        return Ok(&mut []);
    }
    if reqs.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null array of requests")));
    }
    // SAFETY: the caller's array of `n` requests (this function's contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(reqs, n) })
}

/// Whether request `h` is null, inactive or complete, without progress or collecting it.
fn is_settled(name: &str, h: c_int) -> Res<bool> {
    if h == REQUEST_NULL || h == SENT {
        return Ok(true);
    }
    if let Some(i) = named_index(h) {
        return with_state(name, |s| {
            let id = named_entry(name, s, i, h)?.id;
            Ok(Raw::InFlight(id).is_complete(world_runtime(&s.comms)))
        })?;
    }
    let k = key(name, h)?;
    with_state(name, |s| match s.requests.get(k) {
        Some(r) => Ok(match &r.op {
            None | Some(Op::Done(_)) => true,
            Some(Op::Raw(req)) => req.is_complete(world_runtime(&s.comms)),
            Some(Op::Live(req)) => req.is_complete(),
            Some(Op::Coll(coll)) => coll.0.is_complete(),
            Some(Op::Gen) => super::greq::is_done(h),
        }),
        None => Err(not_a_request(name, h)),
    })?
}

/// Request `h`'s status and error if it is null, inactive or complete, without progress or
/// collecting it (`MPI_Request_get_status`); `None` while it is in flight.
fn peek(name: &str, h: c_int) -> Res<Option<(MpiStatus, Option<Fail>)>> {
    if h == REQUEST_NULL || h == SENT {
        return Ok(Some((empty(), None)));
    }
    let of = |r: Option<Result<crate::Status, crate::Error>>| {
        r.map(|r| match r {
            Ok(st) => (MpiStatus::of(st), None),
            Err(e) => failed_status(e),
        })
    };
    if let Some(i) = named_index(h) {
        return with_state(name, |s| {
            let id = named_entry(name, s, i, h)?.id;
            Ok(of(Raw::InFlight(id).status(world_runtime(&s.comms))))
        })?;
    }
    let k = key(name, h)?;
    let got = with_state(name, |s| {
        let r = s.requests.get(k).ok_or_else(|| not_a_request(name, h))?;
        Ok::<_, Fail>(match &r.op {
            None => Some(Some((empty(), None))),
            Some(Op::Done(st)) => Some(Some((*st, None))),
            Some(Op::Raw(req)) => Some(of(req.status(world_runtime(&s.comms)))),
            Some(Op::Live(req)) => Some(of(req.status())),
            // A collective's failure is reported by the call that completes it.
            Some(Op::Coll(coll)) => Some(coll.0.is_complete().then(|| (empty(), None))),
            // Asked below, with the state free: `query_fn` may call MPI.
            Some(Op::Gen) => None,
        })
    })??;
    Ok(got.unwrap_or_else(|| super::greq::peek(name, h)))
}

/// Makes progress once: through request `h` if it is in flight, else through the runtime
/// (a null, inactive, complete or generalized request: `MPI_Testall` polls its first).
fn poll(name: &str, h: c_int) -> Res {
    if h == REQUEST_NULL || h == SENT {
        return progress_once(name);
    }
    if let Some(i) = named_index(h) {
        let req = with_state(name, |s| {
            let id = named_entry(name, s, i, h)?.id;
            Ok::<_, Fail>(Raw::InFlight(id).into_request(world_runtime(&s.comms)))
        })??;
        return Ok(req.poll().map(|_| ())?);
    }
    let k = key(name, h)?;
    let op = with_state(name, |s| s.requests.get_mut(k).map(|r| r.op.take()).map(|op| op.map(|op| op.live(&s.comms))))?
        .ok_or_else(|| not_a_request(name, h))?;
    let polled = match &op {
        Some(Op::Live(req)) => req.poll().map(|_| ()).map_err(Fail::from),
        Some(Op::Coll(coll)) => coll.0.poll().map(|_| ()).map_err(Fail::from),
        _ => progress_once(name),
    };
    with_state(name, |s| s.requests[k].op = op)?;
    polled
}

/// Makes progress once on every operation in flight.
fn progress_once(name: &str) -> Res {
    let rt = with_state(name, |s| world_runtime(&s.comms).clone())?;
    let r = rt.borrow_mut().progress();
    r.map(|_| ()).map_err(Fail::from)
}

/// Whether request `h` is active (neither null nor an inactive persistent request).
fn is_active(name: &str, h: c_int) -> Res<bool> {
    if h == REQUEST_NULL {
        return Ok(false);
    }
    if h == SENT {
        return Ok(true);
    }
    if let Some(i) = named_index(h) {
        return with_state(name, |s| named_entry(name, s, i, h).map(|_| true))?;
    }
    let k = key(name, h)?;
    with_state(name, |s| s.requests.get(k).map(|r| r.op.is_some()))?.ok_or_else(|| not_a_request(name, h))
}

/// Settles every request of `hs` that is complete, or (with `wait`) all of them; the
/// statuses go to `statuses`. An error: `MPI_ERR_IN_STATUS`, each status telling its own.
///
/// # Safety
/// `statuses` is null or holds `hs.len()` statuses.
unsafe fn settle_all(name: &str, hs: &mut [c_int], statuses: *mut MpiStatus) -> Res<Option<(Fail, c_int)>> {
    // SAFETY: this function's contract.
    if let Some(r) = unsafe { settle_plain(name, hs, statuses) } {
        return r.map(|first| in_status(name, first));
    }
    let mut first: Option<(Fail, c_int)> = None;
    for (i, h) in hs.iter_mut().enumerate() {
        // SAFETY: a handle of the caller's array.
        match unsafe { settle(name, h, true)? } {
            Outcome::Complete(st, e) => {
                // SAFETY: this function's contract.
                unsafe { store(statuses, i, st) };
                if let (None, Some(e)) = (&first, e) {
                    first = Some(e);
                }
            }
            Outcome::Pending => unreachable!("waited for"),
        }
    }
    Ok(in_status(name, first))
}

/// The error of a call on several requests whose first failure was `first`:
/// `MPI_ERR_IN_STATUS`, each status telling its own.
fn in_status(name: &str, first: Option<(Fail, c_int)>) -> Option<(Fail, c_int)> {
    first.map(|(f, comm)| (Fail::new(ERR_IN_STATUS, format!("{name}: a request failed: {}", f.message)), comm))
}

/// [`settle_all`] of requests that are all plain point-to-point operations in flight (not
/// persistent), the path of every window of small messages: they leave the
/// table in one borrow of the state, and are waited for under one lock of the runtime
/// ([`wait_raw_each`]). `None`, with nothing done, if any request is of another kind.
/// The first failure comes back with its communicator.
///
/// # Safety
/// As [`settle_all`].
unsafe fn settle_plain(name: &str, hs: &mut [c_int], statuses: *mut MpiStatus) -> Option<Res<Option<(Fail, c_int)>>> {
    let taken = with_state(name, |s| {
        // (A null request is not plain: the general path passes over it.)
        let plain = |h: c_int| {
            if h == SENT {
                return true;
            }
            if let Some(i) = named_index(h) {
                return s.named.get(i).is_some_and(|n| n.is_some());
            }
            let r = slot(h).and_then(|k| s.requests.get(k));
            r.is_some_and(|r| r.persistent.is_none() && matches!(r.op, Some(Op::Raw(_) | Op::Live(_))))
        };
        if !hs.iter().all(|&h| plain(h)) {
            return None;
        }
        let sent = sent_status(s);
        if hs.iter().all(|&h| h == SENT) {
            // A window of sends that all completed as they started.
            return Some((None, Vec::new(), sent));
        }
        let mut reqs = Vec::with_capacity(hs.len());
        for &h in hs.iter() {
            if h == SENT {
                reqs.push((Raw::Done(sent), COMM_WORLD));
                continue;
            }
            if let Some(i) = named_index(h) {
                // Twice in the array: gone at its first place, as below.
                let Some(n) = s.named[i].take() else { break };
                reqs.push((Raw::InFlight(n.id), n.comm));
                continue;
            }
            // A handle the array holds twice left the table at its first place: the
            // requests before it are waited for, and it is an error, as on the general path.
            let Some(r) = s.requests.try_remove(h as usize - 1) else { break };
            let req = match r {
                CReq { op: Some(Op::Raw(req)), comm, .. } => (req, comm),
                CReq { op: Some(Op::Live(req)), comm, .. } => (req.into_raw(), comm),
                _ => unreachable!("a plain request"),
            };
            reqs.push(req);
        }
        Some((Some(world_runtime(&s.comms).clone()), reqs, sent))
    });
    let (rt, reqs, sent) = match taken {
        Ok(Some(taken)) => taken,
        Ok(None) => return None,
        Err(fail) => return Some(Err(fail)),
    };
    let Some(rt) = rt else {
        let st = MpiStatus::of(sent);
        for (i, h) in hs.iter_mut().enumerate() {
            // SAFETY: `statuses` is null or holds `hs.len()` statuses (this function's contract).
            unsafe { store(statuses, i, st) };
            *h = REQUEST_NULL;
        }
        return Some(Ok(None));
    };
    let taken = reqs.len();
    let (mut i, mut first) = (0, None);
    // The communicator of the request being waited for (for its error's handler).
    let comm = std::cell::Cell::new(COMM_WORLD);
    let reqs = reqs.into_iter().map(|(req, c)| {
        comm.set(c);
        req
    });
    wait_raw_each(&rt, reqs, |res| {
        let st = match res {
            Ok(_) if statuses.is_null() => None,
            Ok(st) => Some(MpiStatus::of(st)),
            Err(e) => {
                let (st, fail) = failed_status(e);
                if let Some(fail) = fail {
                    first.get_or_insert((fail, comm.get()));
                }
                Some(st)
            }
        };
        if let Some(st) = st {
            // SAFETY: `statuses` is null or holds `hs.len()` statuses (this function's contract).
            unsafe { store(statuses, i, st) };
        }
        hs[i] = REQUEST_NULL;
        i += 1;
    });
    Some(match hs.get(taken) {
        Some(&h) => Err(not_a_request(name, h)),
        None => Ok(first),
    })
}

/// The return code of a call on several requests: `fail` under its communicator's handler.
fn finish_many(name: &str, r: Res<Option<(Fail, c_int)>>) -> c_int {
    match r {
        Ok(None) => MPI_SUCCESS,
        Ok(Some((fail, comm))) => finish(name, comm, Err(fail)),
        Err(fail) => finish(name, COMM_WORLD, Err(fail)),
    }
}

/// Waits (or tests) until one of `hs` completes: its index and status, or `None` if all are
/// null or inactive (with `wait`) or none is complete (without).
///
/// # Safety
/// `hs` are the caller's handles.
unsafe fn settle_any(name: &str, hs: &mut [c_int], wait: bool) -> Res<Option<(usize, Outcome)>> {
    loop {
        let mut active = false;
        for (i, h) in hs.iter_mut().enumerate() {
            if !is_active(name, *h)? {
                continue;
            }
            active = true;
            // SAFETY: a handle of the caller's array.
            if let o @ Outcome::Complete(..) = unsafe { settle(name, h, false)? } {
                return Ok(Some((i, o)));
            }
        }
        if !active || !wait {
            return Ok(None);
        }
    }
}

/// Writes what `settle_any` found: `index` (MPI_UNDEFINED if none) and the status.
///
/// # Safety
/// `index` points to an int; `status` is null or points to a status.
unsafe fn report_any(
    found: Option<(usize, Outcome)>,
    index: *mut c_int,
    status: *mut MpiStatus,
) -> Res<Option<(Fail, c_int)>> {
    match found {
        Some((i, Outcome::Complete(st, e))) => {
            // SAFETY: this function's contract.
            unsafe {
                put(index, i as c_int)?;
                set_status_raw(status, st);
            }
            Ok(e)
        }
        _ => {
            // SAFETY: this function's contract.
            unsafe {
                put(index, UNDEFINED)?;
                set_status_raw(status, empty());
            }
            Ok(None)
        }
    }
}

/// Settles every complete request of `hs` (with `wait`, at least one, unless none is
/// active): their indices and statuses into `indices` and `statuses`, their number into
/// `outcount` (`MPI_UNDEFINED` if none is active).
///
/// # Safety
/// `outcount` points to an int; `indices` and `statuses` hold `hs.len()` entries
/// (`statuses` may be null).
unsafe fn settle_some(
    name: &str,
    hs: &mut [c_int],
    wait: bool,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> Res<Option<(Fail, c_int)>> {
    loop {
        let (mut active, mut done, mut first) = (false, 0usize, None);
        for (i, h) in hs.iter_mut().enumerate() {
            if !is_active(name, *h)? {
                continue;
            }
            active = true;
            // SAFETY: a handle of the caller's array.
            if let Outcome::Complete(st, e) = unsafe { settle(name, h, false)? } {
                if indices.is_null() {
                    return Err(Fail::new(ERR_ARG, format!("{name}: a null array of indices")));
                }
                // SAFETY: the caller's arrays of hs.len() entries (this function's contract).
                unsafe {
                    *indices.add(done) = i as c_int;
                    store(statuses, done, st);
                }
                done += 1;
                if first.is_none() {
                    first = e;
                }
            }
        }
        if !active {
            // SAFETY: this function's contract.
            unsafe { put(outcount, UNDEFINED)? };
            return Ok(None);
        }
        if done > 0 || !wait {
            // SAFETY: this function's contract.
            unsafe { put(outcount, done as c_int)? };
            return Ok(in_status(name, first));
        }
    }
}

/// Starts persistent request `h`.
fn start_persistent(name: &str, h: c_int) -> Res<c_int> {
    if h == SENT || named_index(h).is_some() {
        return Err(Fail::new(ERR_REQUEST, format!("{name}: request {h} is not persistent")));
    }
    let k = key(name, h)?;
    let call = with_state(name, |s| {
        let r = s.requests.get_mut(k).ok_or_else(|| not_a_request(name, h))?;
        let Some(call) = r.persistent.as_deref().map(|k| k.0) else {
            return Err(Fail::new(ERR_REQUEST, format!("{name}: request {h} is not persistent")));
        };
        if r.op.is_some() {
            return Err(Fail::new(ERR_REQUEST, format!("{name}: request {h} is active already")));
        }
        if call.send == Some(Mode::Buffered) {
            return Ok(call);
        }
        // One borrow of the state, as `immediate`.
        // SAFETY: MPI's contract: the buffer of a persistent request stays valid while it
        // is active.
        let op = unsafe { start_on(name, s.comm(name, call.comm)?, &call)? };
        s.requests[k].op = Some(op);
        Ok(call)
    })??;
    if call.send == Some(Mode::Buffered) {
        // SAFETY: as above.
        let op = unsafe { start(name, &call)? };
        with_state(name, |s| s.requests[k].op = Some(op))?;
    }
    Ok(call.comm)
}

/// The blocking sends of a mode other than the standard one (MPI_Send is with the blocking
/// point-to-point calls).
macro_rules! blocking_sends {
    ($($name:ident / $pname:ident: $mode:expr;)*) => {$(
        mpi! {
            fn $name / $pname(buf: *const c_void, count: c_int, datatype: c_int, dest: c_int, tag: c_int, comm: c_int) -> c_int {
                let call = Call { send: Some($mode), buf: buf.cast_mut(), count, datatype, peer: dest, tag, comm };
                // SAFETY: MPI's contract: the caller's buffer holds what it says.
                unsafe { blocking(stringify!($name), call) }
            }
        }
    )*};
}

/// A mode's nonblocking send and its persistent request.
macro_rules! send_requests {
    ($($iname:ident / $piname:ident, $init:ident / $pinit:ident: $mode:expr;)*) => {$(
        mpi! {
            fn $iname / $piname(
                buf: *const c_void,
                count: c_int,
                datatype: c_int,
                dest: c_int,
                tag: c_int,
                comm: c_int,
                request: *mut c_int,
            ) -> c_int {
                let call = Call { send: Some($mode), buf: buf.cast_mut(), count, datatype, peer: dest, tag, comm };
                // SAFETY: MPI's contract: the buffer stays valid until the request completes.
                unsafe { immediate(stringify!($iname), call, request) }
            }

            fn $init / $pinit(
                buf: *const c_void,
                count: c_int,
                datatype: c_int,
                dest: c_int,
                tag: c_int,
                comm: c_int,
                request: *mut c_int,
            ) -> c_int {
                let call = Call { send: Some($mode), buf: buf.cast_mut(), count, datatype, peer: dest, tag, comm };
                // SAFETY: MPI's contract: the caller's MPI_Request.
                unsafe { persistent(stringify!($init), call, request) }
            }
        }
    )*};
}

blocking_sends! {
    MPI_Ssend / PMPI_Ssend: Mode::Sync;
    MPI_Rsend / PMPI_Rsend: Mode::Standard;
    MPI_Bsend / PMPI_Bsend: Mode::Buffered;
}

send_requests! {
    MPI_Isend / PMPI_Isend, MPI_Send_init / PMPI_Send_init: Mode::Standard;
    MPI_Issend / PMPI_Issend, MPI_Ssend_init / PMPI_Ssend_init: Mode::Sync;
    MPI_Irsend / PMPI_Irsend, MPI_Rsend_init / PMPI_Rsend_init: Mode::Standard;
    MPI_Ibsend / PMPI_Ibsend, MPI_Bsend_init / PMPI_Bsend_init: Mode::Buffered;
}

mpi! {
    fn MPI_Irecv / PMPI_Irecv(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let call = Call { send: None, buf, count, datatype, peer: source, tag, comm };
        // SAFETY: MPI's contract: the buffer stays valid until the request completes.
        unsafe { immediate("MPI_Irecv", call, request) }
    }

    fn MPI_Recv_init / PMPI_Recv_init(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        request: *mut c_int,
    ) -> c_int {
        let call = Call { send: None, buf, count, datatype, peer: source, tag, comm };
        // SAFETY: MPI's contract: the caller's MPI_Request.
        unsafe { persistent("MPI_Recv_init", call, request) }
    }

    fn MPI_Start / PMPI_Start(request: *mut c_int) -> c_int {
        if request.is_null() {
            return finish("MPI_Start", COMM_WORLD, Err(Fail::new(ERR_ARG, "MPI_Start: a null request pointer")));
        }
        // SAFETY: not null (checked): the caller's MPI_Request.
        match start_persistent("MPI_Start", unsafe { *request }) {
            Ok(_) => MPI_SUCCESS,
            Err(f) => finish("MPI_Start", COMM_WORLD, Err(f)),
        }
    }

    fn MPI_Startall / PMPI_Startall(count: c_int, requests: *mut c_int) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: the caller's array of `count` requests.
            for &h in unsafe { handles("MPI_Startall", count, requests)? }.iter() {
                start_persistent("MPI_Startall", h)?;
            }
            Ok(())
        })();
        finish("MPI_Startall", COMM_WORLD, r)
    }

    fn MPI_Request_free / PMPI_Request_free(request: *mut c_int) -> c_int {
        let r = (|| {
            if request.is_null() {
                return Err(Fail::new(ERR_ARG, "MPI_Request_free: a null request pointer"));
            }
            // SAFETY: not null (checked): the caller's MPI_Request.
            let h = unsafe { *request };
            if h == SENT {
                // SAFETY: as above.
                unsafe { *request = REQUEST_NULL };
                return Ok(());
            }
            if let Some(i) = named_index(h) {
                with_state("MPI_Request_free", |s| {
                    let id = named_entry("MPI_Request_free", s, i, h)?.id;
                    s.named[i] = None;
                    Raw::InFlight(id).into_request(world_runtime(&s.comms)).free();
                    Ok::<_, Fail>(())
                })??;
                // SAFETY: as above.
                unsafe { *request = REQUEST_NULL };
                return Ok(());
            }
            let k = key("MPI_Request_free", h)?;
            let op = with_state("MPI_Request_free", |s| {
                s.requests.get(k).map(|r| (matches!(r.op, Some(Op::Coll(..))), matches!(r.op, Some(Op::Gen))))
            })?
            .ok_or_else(|| not_a_request("MPI_Request_free", h))?;
            match op {
                (true, _) => {
                    return Err(Fail::new(ERR_REQUEST, "MPI_Request_free of a nonblocking collective's request"))
                }
                (_, true) => {
                    // Its `free_fn` runs now if it completed (and its entry goes), or when
                    // MPI_Grequest_complete comes (its entry, unused, waits for that).
                    let ended = super::greq::free("MPI_Request_free", h)?;
                    if ended.is_some() {
                        with_state("MPI_Request_free", |s| s.requests.try_remove(k))?;
                    }
                    // SAFETY: as above.
                    unsafe { *request = REQUEST_NULL };
                    return ended.unwrap_or(Ok(()));
                }
                _ => {}
            }
            with_state("MPI_Request_free", |s| {
                if let Some(op) = s.requests.remove(k).op {
                    if let Op::Live(r) = op.live(&s.comms) {
                        r.free();
                    }
                }
            })?;
            // SAFETY: as above.
            unsafe { *request = REQUEST_NULL };
            Ok(())
        })();
        finish("MPI_Request_free", COMM_WORLD, r)
    }

    fn MPI_Request_get_status / PMPI_Request_get_status(request: c_int, flag: *mut c_int, status: *mut MpiStatus) -> c_int {
        let r = (|| {
            // As MPI_Test, without freeing the request: progress once if it is in flight.
            let got = match peek("MPI_Request_get_status", request)? {
                None => {
                    poll("MPI_Request_get_status", request)?;
                    peek("MPI_Request_get_status", request)?
                }
                done => done,
            };
            let (st, failed) = match got {
                None => (None, None),
                Some((st, fail)) => (Some(st), fail),
            };
            if let Some(st) = st {
                // SAFETY: MPI's contract: null or the caller's MPI_Status.
                unsafe { set_status_raw(status, st) };
            }
            // SAFETY: MPI's contract: the caller's flag.
            unsafe { put(flag, st.is_some() as c_int)? };
            failed.map_or(Ok(()), Err)
        })();
        finish("MPI_Request_get_status", COMM_WORLD, r)
    }

    fn MPI_Wait / PMPI_Wait(request: *mut c_int, status: *mut MpiStatus) -> c_int {
        // SAFETY: MPI's contract: the caller's MPI_Request.
        match unsafe { settle("MPI_Wait", request, true) } {
            Ok(Outcome::Complete(st, e)) => {
                // SAFETY: MPI's contract: null or the caller's MPI_Status.
                unsafe { set_status_raw(status, st) };
                match e {
                    None => MPI_SUCCESS,
                    Some((fail, comm)) => finish("MPI_Wait", comm, Err(fail)),
                }
            }
            Ok(Outcome::Pending) => unreachable!("waited for"),
            Err(fail) => finish("MPI_Wait", COMM_WORLD, Err(fail)),
        }
    }

    fn MPI_Test / PMPI_Test(request: *mut c_int, flag: *mut c_int, status: *mut MpiStatus) -> c_int {
        // SAFETY: MPI's contract: the caller's MPI_Request.
        let r = match unsafe { settle("MPI_Test", request, false) } {
            Ok(Outcome::Complete(st, e)) => {
                // SAFETY: MPI's contract: null or the caller's MPI_Status; the flag.
                unsafe { set_status_raw(status, st) };
                // SAFETY: as above.
                unsafe { put(flag, 1) }.map(|()| e)
            }
            // SAFETY: MPI's contract: the caller's flag.
            Ok(Outcome::Pending) => unsafe { put(flag, 0) }.map(|()| None),
            Err(fail) => Err(fail),
        };
        finish_many("MPI_Test", r)
    }

    fn MPI_Waitall / PMPI_Waitall(count: c_int, requests: *mut c_int, statuses: *mut MpiStatus) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: the caller's arrays of `count` entries.
            let hs = unsafe { handles("MPI_Waitall", count, requests)? };
            // SAFETY: as above.
            unsafe { settle_all("MPI_Waitall", hs, statuses) }
        })();
        finish_many("MPI_Waitall", r)
    }

    fn MPI_Testall / PMPI_Testall(count: c_int, requests: *mut c_int, flag: *mut c_int, statuses: *mut MpiStatus) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: the caller's arrays of `count` entries.
            let hs = unsafe { handles("MPI_Testall", count, requests)? };
            // Progress once, then all or nothing.
            if let Some(&h) = hs.first() {
                poll("MPI_Testall", h)?;
            }
            let all = hs.iter().try_fold(true, |a, &h| is_settled("MPI_Testall", h).map(|d| a && d))?;
            // SAFETY: MPI's contract: the caller's flag.
            unsafe { put(flag, all as c_int)? };
            if !all {
                return Ok(None);
            }
            // SAFETY: as above.
            unsafe { settle_all("MPI_Testall", hs, statuses) }
        })();
        finish_many("MPI_Testall", r)
    }

    fn MPI_Waitany / PMPI_Waitany(count: c_int, requests: *mut c_int, index: *mut c_int, status: *mut MpiStatus) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: the caller's array of `count` requests.
            let hs = unsafe { handles("MPI_Waitany", count, requests)? };
            // SAFETY: the caller's handles, index and status.
            unsafe { report_any(settle_any("MPI_Waitany", hs, true)?, index, status) }
        })();
        finish_many("MPI_Waitany", r)
    }

    fn MPI_Testany / PMPI_Testany(
        count: c_int,
        requests: *mut c_int,
        index: *mut c_int,
        flag: *mut c_int,
        status: *mut MpiStatus,
    ) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: the caller's array of `count` requests.
            let hs = unsafe { handles("MPI_Testany", count, requests)? };
            let any_active = hs.iter().try_fold(false, |a, &h| is_active("MPI_Testany", h).map(|x| a || x))?;
            // SAFETY: the caller's handles.
            let found = unsafe { settle_any("MPI_Testany", hs, false)? };
            // With no active request, the flag is true and the index MPI_UNDEFINED.
            // SAFETY: MPI's contract: the caller's flag.
            unsafe { put(flag, (found.is_some() || !any_active) as c_int)? };
            if found.is_none() && any_active {
                // SAFETY: as above.
                return unsafe { put(index, UNDEFINED) }.map(|()| None);
            }
            // SAFETY: the caller's index and status.
            unsafe { report_any(found, index, status) }
        })();
        finish_many("MPI_Testany", r)
    }

    fn MPI_Waitsome / PMPI_Waitsome(
        incount: c_int,
        requests: *mut c_int,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MpiStatus,
    ) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: the caller's arrays of `incount` entries.
            let hs = unsafe { handles("MPI_Waitsome", incount, requests)? };
            // SAFETY: as above.
            unsafe { settle_some("MPI_Waitsome", hs, true, outcount, indices, statuses) }
        })();
        finish_many("MPI_Waitsome", r)
    }

    fn MPI_Testsome / PMPI_Testsome(
        incount: c_int,
        requests: *mut c_int,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MpiStatus,
    ) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: the caller's arrays of `incount` entries.
            let hs = unsafe { handles("MPI_Testsome", incount, requests)? };
            // SAFETY: as above.
            unsafe { settle_some("MPI_Testsome", hs, false, outcount, indices, statuses) }
        })();
        finish_many("MPI_Testsome", r)
    }

    fn MPI_Buffer_attach / PMPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
        let r = (|| {
            let size = count_of(size)?;
            with_state("MPI_Buffer_attach", |s| match s.attached.buf {
                Some(_) => Err(Fail::new(ERR_BUFFER, "MPI_Buffer_attach: a buffer is attached already")),
                None => {
                    s.attached.buf = Some((buffer, size));
                    Ok(())
                }
            })?
        })();
        finish("MPI_Buffer_attach", COMM_WORLD, r)
    }

    fn MPI_Buffer_detach / PMPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
        let r = (|| {
            // The buffered sends in flight complete first.
            let (buf, sends) = with_state("MPI_Buffer_detach", |s| (s.attached.buf.take(), std::mem::take(&mut s.attached.sends)))?;
            let Some((p, n)) = buf else {
                return Err(Fail::new(ERR_BUFFER, "MPI_Buffer_detach: no buffer is attached"));
            };
            let mut first = None;
            for (req, copy) in sends {
                if let Err(e) = req.wait() {
                    first.get_or_insert(e);
                }
                drop(copy);
            }
            // SAFETY: MPI's contract: `buffer_addr` points to a pointer; `size` to an int.
            unsafe {
                put(buffer_addr.cast::<*mut c_void>(), p)?;
                put(size, n as c_int)?;
            }
            first.map_or(Ok(()), |e| Err(Fail::from(e)))
        })();
        finish("MPI_Buffer_detach", COMM_WORLD, r)
    }

    fn MPI_Sendrecv_replace / PMPI_Sendrecv_replace(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        dest: c_int,
        sendtag: c_int,
        source: c_int,
        recvtag: c_int,
        comm: c_int,
        status: *mut MpiStatus,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Sendrecv_replace", comm)?;
            let ty = Datatype::of(datatype)?;
            // SAFETY: MPI's contract: the caller's buffer of `count` elements.
            let mut data = unsafe { bytes_mut(buf, count_of(count)?, &ty)? };
            let send = data.to_vec();
            let got = super::sendrecv_bytes(&c, &send, dest, sendtag, &mut data, source, recvtag)?;
            // SAFETY: MPI's contract: null or the caller's MPI_Status.
            unsafe { set_status_raw(status, got) };
            Ok(())
        })();
        finish("MPI_Sendrecv_replace", comm, r)
    }
}

/// Files message `m` (none: from `MPI_PROC_NULL`) in the table, its handle into `out`.
///
/// # Safety
/// `out` points to an `MPI_Message`.
unsafe fn new_message(name: &str, m: Option<crate::Message>, out: *mut c_int) -> Res {
    let h = match m {
        None => MESSAGE_NO_PROC,
        Some(m) => with_state(name, |s| s.messages.insert(m) as c_int + 2)?,
    };
    // SAFETY: this function's contract.
    unsafe { put(out, h) }
}

/// Takes message `*h` out of the table (`None`: `MPI_MESSAGE_NO_PROC`) and sets `*h` to
/// `MPI_MESSAGE_NULL`, as a receive of it does.
///
/// # Safety
/// `h` points to an `MPI_Message`.
unsafe fn take_message(name: &str, h: *mut c_int) -> Res<Option<crate::Message>> {
    if h.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null message pointer")));
    }
    // SAFETY: not null (checked).
    let handle = unsafe { *h };
    let m = match handle {
        MESSAGE_NO_PROC => None,
        _ => Some(
            with_state(name, |s| usize::try_from(handle - 2).ok().and_then(|k| s.messages.try_remove(k)))?
                .ok_or_else(|| Fail::new(ERR_REQUEST, format!("{name}: {handle} is not a message")))?,
        ),
    };
    // SAFETY: as above.
    unsafe { put(h, MESSAGE_NULL) }?;
    Ok(m)
}

/// A matching probe (`MPI_Mprobe`, or with `flag` `MPI_Improbe`).
///
/// # Safety
/// The caller's pointers are valid for what the call writes.
unsafe fn mprobe(
    name: &str,
    source: c_int,
    tag: c_int,
    comm: c_int,
    flag: Option<*mut c_int>,
    message: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    let r = (|| {
        let c = comm_of(name, comm)?;
        let found = match peer(source, true)? {
            None => Some(None),
            Some(s) if flag.is_some() => c.improbe(s, tag)?.map(Some),
            Some(s) => Some(Some(c.mprobe(s, tag)?)),
        };
        if let Some(f) = flag {
            // SAFETY: MPI's contract: flag points to an int.
            unsafe { put(f, found.is_some() as c_int) }?;
        }
        let Some(m) = found else { return Ok(()) };
        let st = m.as_ref().map_or(MpiStatus::proc_null(), |m| MpiStatus::of(m.status()));
        // SAFETY: MPI's contract: message points to an MPI_Message, status to an MPI_Status or is ignored.
        unsafe {
            set_status_raw(status, st);
            new_message(name, m, message)
        }
    })();
    finish(name, comm, r)
}

mpi! {
    fn MPI_Mprobe / PMPI_Mprobe(source: c_int, tag: c_int, comm: c_int, message: *mut c_int, status: *mut MpiStatus) -> c_int {
        // SAFETY: MPI's contract for the pointers, passed on.
        unsafe { mprobe("MPI_Mprobe", source, tag, comm, None, message, status) }
    }

    fn MPI_Improbe / PMPI_Improbe(
        source: c_int,
        tag: c_int,
        comm: c_int,
        flag: *mut c_int,
        message: *mut c_int,
        status: *mut MpiStatus,
    ) -> c_int {
        // SAFETY: MPI's contract for the pointers, passed on.
        unsafe { mprobe("MPI_Improbe", source, tag, comm, Some(flag), message, status) }
    }

    fn MPI_Mrecv / PMPI_Mrecv(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        message: *mut c_int,
        status: *mut MpiStatus,
    ) -> c_int {
        let r = (|| {
            let ty = Datatype::of(datatype)?;
            let n = count_of(count)?;
            // SAFETY: MPI's contract: message points to an MPI_Message.
            let st = match unsafe { take_message("MPI_Mrecv", message)? } {
                None => MpiStatus::proc_null(),
                Some(m) => {
                    // SAFETY: MPI's contract: buf holds count elements.
                    let mut data = unsafe { bytes_mut(buf, n, &ty)? };
                    MpiStatus::of(m.recv(&mut data)?)
                }
            };
            // SAFETY: MPI's contract: status is an MPI_Status or ignored.
            unsafe { set_status_raw(status, st) };
            Ok(())
        })();
        finish("MPI_Mrecv", COMM_WORLD, r)
    }

    fn MPI_Imrecv / PMPI_Imrecv(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        message: *mut c_int,
        request: *mut c_int,
    ) -> c_int {
        let r = (|| {
            // Checked before the message is taken: once it is, its request must be filed.
            if request.is_null() {
                return Err(Fail::new(ERR_ARG, "MPI_Imrecv: a null request pointer"));
            }
            let ty = Datatype::of(datatype)?;
            ty.usable()?;
            let n = count_of(count)?;
            // SAFETY: MPI's contract: message points to an MPI_Message.
            let op = match unsafe { take_message("MPI_Imrecv", message)? } {
                None => Op::Done(MpiStatus::proc_null()),
                // SAFETY: MPI's contract: buf holds count elements until the request completes.
                Some(m) => Op::Live(unsafe { receive(Source::Matched(m), buf, n, &ty)? }),
            };
            let req = CReq { comm: COMM_WORLD, op: Some(op), persistent: None };
            // SAFETY: MPI's contract: request points to an MPI_Request.
            unsafe { new_request("MPI_Imrecv", req, request) }
        })();
        finish("MPI_Imrecv", COMM_WORLD, r)
    }

    fn MPI_Cancel / PMPI_Cancel(request: *mut c_int) -> c_int {
        let r = (|| {
            if request.is_null() {
                return Err(Fail::new(ERR_ARG, "MPI_Cancel: a null request pointer"));
            }
            // SAFETY: not null (checked): the caller's MPI_Request.
            let h = unsafe { *request };
            if h == SENT {
                // Complete already: it cannot be cancelled.
                return Ok(());
            }
            if let Some(i) = named_index(h) {
                return with_state("MPI_Cancel", |s| {
                    let rt = world_runtime(&s.comms).clone();
                    let id = named_entry("MPI_Cancel", s, i, h)?.id;
                    Raw::InFlight(id).into_request(&rt).cancel();
                    Ok(())
                })?;
            }
            let k = key("MPI_Cancel", h)?;
            let generalized = with_state("MPI_Cancel", |s| {
                let r = s.requests.get_mut(k).ok_or_else(|| not_a_request("MPI_Cancel", h))?;
                // What nothing matched yet is cancelled; anything else goes on (MPI lets a
                // request complete instead), and its status tells which.
                r.op = r.op.take().map(|op| op.live(&s.comms));
                if let Some(Op::Live(req)) = &r.op {
                    req.cancel();
                }
                Ok::<_, Fail>(matches!(r.op, Some(Op::Gen)))
            })??;
            // The program's cancel function, with the state free (it may call MPI).
            if generalized {
                super::greq::cancel("MPI_Cancel", h)?;
            }
            Ok(())
        })();
        finish("MPI_Cancel", COMM_WORLD, r)
    }

    fn MPI_Test_cancelled / PMPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) -> c_int {
        let r = (|| {
            if status.is_null() {
                return Err(Fail::new(ERR_ARG, "MPI_Test_cancelled of a null status"));
            }
            // SAFETY: not null (checked): the caller's MPI_Status; flag points to an int.
            unsafe { put(flag, ((*status).count_hi & CANCELLED != 0) as c_int) }
        })();
        finish("MPI_Test_cancelled", COMM_WORLD, r)
    }
}
