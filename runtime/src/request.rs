//! Nonblocking requests and the scopes that keep their buffers alive (rsmpi's model).
//!
//! A nonblocking call borrows its buffer for the lifetime `'a` of a [`Scope`]. The scope is
//! only available inside [`scope`], and when that call returns (or unwinds), every request
//! started in it has completed: the scope waits for the ones its caller did not. So a buffer
//! can never be freed or reused while the engine still reads or writes it, even if a request
//! is leaked with `mem::forget`.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::engine::ReqId;
use crate::error::Error;
use crate::progress::{Runtime, SchedId, Shared, Started};
use crate::status::Status;

/// The region within which nonblocking operations may borrow buffers for `'a`.
pub struct Scope<'a> {
    started: RefCell<Vec<(Arc<Shared>, Handle)>>,
    /// Whether it waits, when it ends, for what started in it (all but [`unscoped`]'s).
    waits: bool,
    // Invariant in 'a, so the borrow cannot be shortened after the fact.
    _marker: PhantomData<&'a mut &'a ()>,
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("started", &self.started.borrow().len()).finish()
    }
}

/// Runs `f` with a [`Scope`] for nonblocking operations; returns once all of them completed.
///
/// ```no_run
/// # fn main() -> mpr::Result<()> {
/// let universe = mpr::init()?;
/// let world = universe.world();
/// let send = vec![1u32; 4];
/// let mut recv = vec![0u32; 4];
/// let peer = (world.rank() + 1) % world.size();
/// let from = (world.rank() + world.size() - 1) % world.size();
/// mpr::scope(|s| -> mpr::Result<()> {
///     let r = world.irecv(s, &mut recv[..], from, 7)?;
///     let q = world.isend(s, &send[..], peer, 7)?;
///     mpr::wait_all(vec![r, q])?;
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
pub fn scope<'a, R>(f: impl FnOnce(&Scope<'a>) -> R) -> R {
    let s = Scope { started: RefCell::new(Vec::new()), waits: true, _marker: PhantomData };
    f(&s)
    // `s` drops here (also on unwind) and completes what is still in flight.
}

/// A scope that waits for nothing, for operations whose buffers their caller keeps valid
/// itself (the C ABI's nonblocking collectives, whose requests MPI's program waits for).
///
/// # Safety
/// Every buffer given to an operation started in this scope must stay valid (and, for a
/// buffer the operation writes, untouched by anything else) until the operation's request
/// has completed, even if the request is dropped.
pub unsafe fn unscoped() -> Scope<'static> {
    Scope { started: RefCell::new(Vec::new()), waits: false, _marker: PhantomData }
}

/// What a scope waits for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Handle {
    P2p(ReqId),
    Coll(SchedId),
}

impl Handle {
    fn collected(&self, rt: &Runtime) -> bool {
        match *self {
            Handle::P2p(id) => rt.engine.is_collected(id),
            Handle::Coll(id) => rt.sched_collected(id),
        }
    }
}

impl Scope<'_> {
    pub(crate) fn register(&self, rt: &Arc<Shared>, h: Handle) {
        if !self.waits {
            return;
        }
        let mut v = self.started.borrow_mut();
        // Forget requests already collected, so long-running scopes stay small.
        if v.len() >= 64 && v.len().is_power_of_two() {
            v.retain(|(rt, h)| !h.collected(&rt.borrow()));
        }
        v.push((rt.clone(), h));
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        for (rt, h) in self.started.get_mut().drain(..) {
            let mut rt = rt.borrow_mut();
            if h.collected(&rt) {
                continue;
            }
            // The buffer must not be released while in flight: wait even after an error
            // (an error retires the operation from the engine first).
            let _ = match h {
                Handle::P2p(id) => rt.wait(id).map(|_| ()),
                Handle::Coll(id) => rt.wait_sched(id),
            };
        }
    }
}

/// A nonblocking operation in flight, borrowing its buffer for `'a` (`MPI_Request`).
#[must_use = "a request must be waited for or tested (the scope waits for it otherwise)"]
pub struct Request<'a> {
    state: Live,
    _marker: PhantomData<&'a ()>,
}

/// An operation in the engine, or one that completed as it started (nothing in flight:
/// waiting for it touches no shared state).
enum Live {
    InFlight { rt: Arc<Shared>, id: ReqId },
    Done(Status),
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.state {
            Live::InFlight { id, .. } => f.debug_struct("Request").field("id", id).finish(),
            Live::Done(st) => f.debug_struct("Request").field("done", st).finish(),
        }
    }
}

impl<'a> Request<'a> {
    pub(crate) fn new(rt: &Arc<Shared>, scope: &Scope<'a>, id: ReqId) -> Request<'a> {
        scope.register(rt, Handle::P2p(id));
        Request { state: Live::InFlight { rt: rt.clone(), id }, _marker: PhantomData }
    }

    /// The request of an operation as it started: one in flight is handed to `scope` (if
    /// any) to be completed before the scope ends; one that is done touches nothing shared.
    pub(crate) fn started(rt: &Arc<Shared>, scope: Option<&Scope<'a>>, started: Started) -> Request<'a> {
        match (started, scope) {
            (Started::Done(st), _) => Request::done(st),
            (Started::Req(id), Some(scope)) => Request::new(rt, scope, id),
            (Started::Req(id), None) => Request { state: Live::InFlight { rt: rt.clone(), id }, _marker: PhantomData },
        }
    }

    /// A request for an operation that completed as it started, with `status`.
    pub(crate) fn done(status: Status) -> Request<'a> {
        Request { state: Live::Done(status), _marker: PhantomData }
    }

    /// Blocks until the operation completes (`MPI_Wait`).
    pub fn wait(self) -> Result<Status, Error> {
        match self.state {
            Live::InFlight { rt, id } => rt.borrow_mut().wait(id),
            Live::Done(st) => Ok(st),
        }
    }

    /// Makes progress once; returns the status if complete, or the request back
    /// (`MPI_Test`).
    pub fn test(self) -> Result<Result<Status, Error>, Request<'a>> {
        let Live::InFlight { rt, id } = &self.state else {
            let Live::Done(st) = self.state else { unreachable!("not in flight") };
            return Ok(Ok(st));
        };
        let r = rt.borrow_mut().test(*id);
        r.ok_or(self)
    }

    /// Makes progress once; whether the operation has completed (without collecting it).
    pub fn poll(&self) -> Result<bool, Error> {
        if let Live::InFlight { rt, .. } = &self.state {
            rt.borrow_mut().progress()?;
        }
        Ok(self.is_complete())
    }

    /// Whether the operation has completed (without collecting it).
    pub fn is_complete(&self) -> bool {
        match &self.state {
            Live::InFlight { rt, id } => rt.borrow().engine.is_done(*id),
            Live::Done(_) => true,
        }
    }

    /// The result of the completed operation, without collecting it (`MPI_Request_get_status`):
    /// `None` while it is in flight. No progress is made.
    pub fn status(&self) -> Option<Result<Status, Error>> {
        match &self.state {
            Live::InFlight { rt, id } => rt.borrow().engine.peek(*id),
            Live::Done(st) => Some(Ok(*st)),
        }
    }

    /// Asks to cancel the operation (`MPI_Cancel`): one that nothing has matched yet then
    /// completes with [`Error::Cancelled`] (no byte of it moved); one already matched, or
    /// past recalling, completes as usual. A receive not yet matched, or a large send to
    /// this rank, is cancelled at once; a rendezvous send (a synchronous one, or one above
    /// the eager size) once its receiver drops the announcement, which it does whenever it
    /// makes progress (so the wait for it ends when the receiver next calls into mpr, not
    /// on this rank alone as MPI would have it); an eager send is not cancelled (its message
    /// may be queued at the receiver already). Waiting for the request is still needed.
    pub fn cancel(&self) {
        if let Live::InFlight { rt, id } = &self.state {
            rt.borrow_mut().cancel(*id);
        }
    }

    /// The runtime and id of a request in flight.
    fn in_flight(&self) -> Option<(&Arc<Shared>, ReqId)> {
        match &self.state {
            Live::InFlight { rt, id } => Some((rt, *id)),
            Live::Done(_) => None,
        }
    }
}

/// An unscoped operation's request without the reference to its runtime that a
/// [`Request`] holds: the C ABI's request table keeps these, so that a stream of small
/// messages pays no reference count (two atomic operations) per message. Its runtime is
/// given back to complete it ([`Raw::into_request`], [`wait_raw_each`]).
#[derive(Debug)]
pub(crate) enum Raw {
    InFlight(ReqId),
    /// Completed as it started (an eager send, a receive of a message that was waiting).
    Done(Status),
}

impl Raw {
    pub(crate) fn of(started: Started) -> Raw {
        match started {
            Started::Done(st) => Raw::Done(st),
            Started::Req(id) => Raw::InFlight(id),
        }
    }

    /// Whether the operation has completed (without collecting it).
    pub(crate) fn is_complete(&self, rt: &Shared) -> bool {
        match self {
            Raw::InFlight(id) => rt.borrow().engine.is_done(*id),
            Raw::Done(_) => true,
        }
    }

    /// As [`Request::status`], its runtime `rt` given back.
    pub(crate) fn status(&self, rt: &Shared) -> Option<Result<Status, Error>> {
        match self {
            Raw::InFlight(id) => rt.borrow().engine.peek(*id),
            Raw::Done(st) => Some(Ok(*st)),
        }
    }

    /// The request, its runtime `rt` given back.
    pub(crate) fn into_request(self, rt: &Arc<Shared>) -> Request<'static> {
        match self {
            Raw::InFlight(id) => Request { state: Live::InFlight { rt: rt.clone(), id }, _marker: PhantomData },
            Raw::Done(st) => Request::done(st),
        }
    }
}

/// Waits for each raw request of runtime `rt` in turn, handing `f` each one's result in
/// order (what `MPI_Waitall` reports request by request). The lock is taken at the first
/// request in flight and held to the end, as [`wait_all`] does, so `f` runs under it: `f`
/// must not call mpr. `reqs` may be lazy: each is taken after the one before completed.
pub(crate) fn wait_raw_each(
    rt: &Shared,
    reqs: impl IntoIterator<Item = Raw>,
    mut f: impl FnMut(Result<Status, Error>),
) {
    let mut guard = None;
    for r in reqs {
        f(match r {
            Raw::Done(st) => Ok(st),
            Raw::InFlight(id) => guard.get_or_insert_with(|| rt.borrow_mut()).wait(id),
        });
    }
}

impl Request<'static> {
    /// The request without its reference to the runtime (which [`Raw::into_request`] takes
    /// back).
    pub(crate) fn into_raw(self) -> Raw {
        match self.state {
            Live::InFlight { id, .. } => Raw::InFlight(id),
            Live::Done(st) => Raw::Done(st),
        }
    }

    /// Lets the operation go on with nobody waiting for it (`MPI_Request_free`): it
    /// completes in the background, and its result is dropped. Only an unscoped request
    /// (whose buffer its caller keeps valid) can be freed: a scope waits for its own.
    pub fn free(self) {
        if let Live::InFlight { rt, id } = self.state {
            rt.borrow_mut().engine.detach(id);
        }
    }
}

/// Waits for all requests (`MPI_Waitall`); every request is completed even if one fails, and
/// the first error is returned. The runtime's lock is taken once for all the requests of
/// one runtime, not once per request (a window of small messages waits in one call).
pub fn wait_all(reqs: Vec<Request<'_>>) -> Result<Vec<Status>, Error> {
    let mut out = Vec::with_capacity(reqs.len());
    let mut first_err = None;
    let shared = reqs.iter().find_map(|r| r.in_flight().map(|(rt, _)| rt.clone()));
    let mut guard = shared.as_ref().map(|rt| rt.borrow_mut());
    for r in reqs {
        let res = match r.state {
            Live::Done(st) => Ok(st),
            Live::InFlight { rt, id } => match (&mut guard, &shared) {
                (Some(g), Some(s)) if Arc::ptr_eq(s, &rt) => g.wait(id),
                _ => rt.borrow_mut().wait(id),
            },
        };
        match res {
            Ok(s) => out.push(s),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    drop(guard);
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Waits until any one request completes, removes it from `reqs` and returns its former
/// index and result (`MPI_Waitany`). An empty list is an error.
pub fn wait_any(reqs: &mut Vec<Request<'_>>) -> Result<(usize, Status), Error> {
    if reqs.is_empty() {
        return Err(Error::Other("wait_any on an empty list of requests".into()));
    }
    let mut found = reqs.iter().position(|r| r.in_flight().is_none());
    if let (None, Some((rt, _))) = (found, reqs[0].in_flight()) {
        let rt = rt.clone();
        let ids: Vec<ReqId> = reqs.iter().filter_map(|r| r.in_flight().map(|(_, id)| id)).collect();
        rt.borrow_mut().wait_until(None, |rt| {
            found = ids.iter().position(|&id| rt.engine.is_done(id));
            found.is_some()
        })?;
    }
    let i = found.expect("wait_until returned on success");
    let r = reqs.remove(i);
    r.wait().map(|s| (i, s))
}

/// Progresses once and, if every request is complete, collects them all (`MPI_Testall`).
pub fn test_all(reqs: &mut Vec<Request<'_>>) -> Result<Option<Vec<Status>>, Error> {
    if let Some((rt, _)) = reqs.iter().find_map(|r| r.in_flight()) {
        let rt = rt.clone();
        rt.borrow_mut().progress()?;
    }
    if !reqs.iter().all(|r| r.is_complete()) {
        return Ok(None);
    }
    wait_all(std::mem::take(reqs)).map(Some)
}
