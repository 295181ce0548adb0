//! Generalized requests (MPI-3.1 section 12.2: `MPI_Grequest_start`, `MPI_Grequest_complete`):
//! a request for an operation of the program's own, which the program says has completed.
//!
//! Such a request is an entry of the request table like any other ([`super::p2p`]'s
//! `Op::Gen`), so `MPI_Wait`, `MPI_Testany`, `MPI_Waitall` ... take it beside point-to-point
//! and collective requests. What MPI keeps of it (the program's three functions, their
//! argument, whether it completed, whether it was freed) lives here, under a lock of its own:
//! `MPI_Grequest_complete` is the one call mpr takes from any thread. A generalized request
//! stands for work that another thread does (MPI-3.1's example 12.1); under
//! `MPI_THREAD_FUNNELED` that thread could otherwise never complete it, and a wait for it
//! would never end.
//!
//! The program's functions are called with no MPI state borrowed (they may call MPI):
//! `query_fn` and `free_fn` by the call that completes the request (a wait or test), in that
//! order; `query_fn` alone by `MPI_Request_get_status`; `cancel_fn` by `MPI_Cancel`; `free_fn`
//! by `MPI_Request_free` of a request that completed, or, freed before, by
//! `MPI_Grequest_complete` (on its thread), whichever comes last, as MPI says.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{finish, Fail, MpiStatus, Res, COMM_WORLD, ERR_REQUEST};

/// `MPI_Grequest_query_function`.
pub(super) type QueryFn = Option<unsafe extern "C" fn(*mut c_void, *mut MpiStatus) -> c_int>;
/// `MPI_Grequest_free_function`.
pub(super) type FreeFn = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;
/// `MPI_Grequest_cancel_function`.
pub(super) type CancelFn = Option<unsafe extern "C" fn(*mut c_void, c_int) -> c_int>;

/// The program's argument to its functions.
#[derive(Debug, Clone, Copy)]
struct Extra(*mut c_void);

// SAFETY: mpr never reads through the pointer; it only hands it back to the program's
// functions, on the thread MPI names for each (the program's contract with MPI).
unsafe impl Send for Extra {}

/// A generalized request in flight.
#[derive(Debug, Clone, Copy)]
struct Greq {
    query: QueryFn,
    free: FreeFn,
    cancel: CancelFn,
    extra: Extra,
    /// `MPI_Grequest_complete` was called.
    done: bool,
    /// `MPI_Request_free` was called before it completed: its table entry waits, unused,
    /// for `MPI_Grequest_complete` (which still names it).
    freed: bool,
}

/// The generalized requests in flight, by handle.
static GREQS: Mutex<BTreeMap<c_int, Greq>> = Mutex::new(BTreeMap::new());

/// Handles of requests freed before they completed, which have completed since: their
/// table entries, unused, are given back by the next [`start`] (on the thread that owns the
/// table).
static ORPHANS: Mutex<Vec<c_int>> = Mutex::new(Vec::new());

fn greqs() -> MutexGuard<'static, BTreeMap<c_int, Greq>> {
    GREQS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn orphans() -> MutexGuard<'static, Vec<c_int>> {
    ORPHANS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes `h` (its table entry made) a generalized request of the program's functions.
pub(super) fn start(h: c_int, query: QueryFn, free: FreeFn, cancel: CancelFn, extra: *mut c_void) {
    let g = Greq { query, free, cancel, extra: Extra(extra), done: false, freed: false };
    greqs().insert(h, g);
}

/// The handles whose table entries [`start`] may give back now.
pub(super) fn take_orphans() -> Vec<c_int> {
    std::mem::take(&mut *orphans())
}

/// The error of a function of the program's that returned `code` (none for
/// `MPI_SUCCESS`).
fn returned(name: &str, what: &str, code: c_int) -> Option<Fail> {
    (code != super::MPI_SUCCESS)
        .then(|| Fail::new(code, format!("{name}: the generalized request's {what} returned {code}")))
}

fn not_generalized(name: &str, h: c_int) -> Fail {
    Fail::new(ERR_REQUEST, format!("{name}: request {h} is not a generalized request in flight"))
}

/// `query_fn`'s status of completed request `g`, and its error.
fn query(name: &str, g: &Greq) -> (MpiStatus, Option<Fail>) {
    let mut st = super::p2p::empty();
    // SAFETY: the program's function, with its own argument and a status to fill in, as
    // MPI calls it.
    let code = g.query.map_or(super::MPI_SUCCESS, |f| unsafe { f(g.extra.0, &mut st) });
    (st, returned(name, "query function", code))
}

/// Runs `free_fn` of request `g`: its error.
fn run_free(name: &str, g: &Greq) -> Option<Fail> {
    // SAFETY: the program's function, with its own argument, as MPI calls it.
    let code = g.free.map_or(super::MPI_SUCCESS, |f| unsafe { f(g.extra.0) });
    returned(name, "free function", code)
}

/// `MPI_Grequest_complete` of `h`, from any thread: the request completes, and, freed
/// already, ends (its `free_fn` runs here).
pub(super) fn complete(name: &str, h: c_int) -> Res {
    let mut m = greqs();
    let g = m.get_mut(&h).filter(|g| !g.done).ok_or_else(|| not_generalized(name, h))?;
    g.done = true;
    if !g.freed {
        return Ok(());
    }
    let g = m.remove(&h).expect("found above");
    drop(m);
    // Its handle may be taken again once free_fn has returned, not before.
    let freed = run_free(name, &g);
    orphans().push(h);
    freed.map_or(Ok(()), Err)
}

/// Whether generalized request `h` has completed.
pub(super) fn is_done(h: c_int) -> bool {
    greqs().get(&h).is_some_and(|g| g.done)
}

/// Generalized request `h` once it has completed, ended: its status as `query_fn` gives it,
/// then `free_fn` runs, and the error is the last function's that failed (MPI-3.1 12.2: the
/// call returns `free_fn`'s code, which is also the status's in `MPI_Waitall` ...; where
/// `free_fn` succeeds, `query_fn`'s error, as MPICH returns it). `None`: not complete. An
/// error: `h` is no generalized request in flight (one freed by `MPI_Request_free`).
pub(super) fn settle(name: &str, h: c_int) -> Res<Option<(MpiStatus, Option<Fail>)>> {
    let g = {
        let mut m = greqs();
        match m.get(&h) {
            None => return Err(not_generalized(name, h)),
            Some(g) if g.freed => return Err(not_generalized(name, h)),
            Some(g) if !g.done => return Ok(None),
            Some(_) => m.remove(&h).expect("found above"),
        }
    };
    let (mut st, queried) = query(name, &g);
    let fail = run_free(name, &g).or(queried);
    if let Some(f) = &fail {
        st.error = f.class;
    }
    Ok(Some((st, fail)))
}

/// The status of generalized request `h` if it has completed (`MPI_Request_get_status`:
/// `query_fn` runs, the request stays), with `query_fn`'s error.
pub(super) fn peek(name: &str, h: c_int) -> Option<(MpiStatus, Option<Fail>)> {
    let g = greqs().get(&h).filter(|g| g.done).copied()?;
    let (mut st, fail) = query(name, &g);
    if let Some(f) = &fail {
        st.error = f.class;
    }
    Some((st, fail))
}

/// `MPI_Cancel` of generalized request `h`: its `cancel_fn`, told whether it completed.
pub(super) fn cancel(name: &str, h: c_int) -> Res {
    let g = greqs().get(&h).copied().ok_or_else(|| not_generalized(name, h))?;
    // SAFETY: the program's function, with its own argument, as MPI calls it.
    let code = g.cancel.map_or(super::MPI_SUCCESS, |f| unsafe { f(g.extra.0, c_int::from(g.done)) });
    returned(name, "cancel function", code).map_or(Ok(()), Err)
}

/// `MPI_Request_free` of generalized request `h`: if it had completed, it ends, with the
/// result of its `free_fn` (`Some`: its table entry may go); if not (`None`), it ends when
/// `MPI_Grequest_complete` comes, and its table entry waits for that.
pub(super) fn free(name: &str, h: c_int) -> Res<Option<Res>> {
    let g = {
        let mut m = greqs();
        let g = m.get_mut(&h).ok_or_else(|| not_generalized(name, h))?;
        if !g.done {
            g.freed = true;
            return Ok(None);
        }
        m.remove(&h).expect("found above")
    };
    Ok(Some(run_free(name, &g).map_or(Ok(()), Err)))
}

mpi! {
    fn MPI_Grequest_start / PMPI_Grequest_start(
        query_fn: QueryFn,
        free_fn: FreeFn,
        cancel_fn: CancelFn,
        extra_state: *mut c_void,
        request: *mut c_int,
    ) -> c_int {
        let register = |h| start(h, query_fn, free_fn, cancel_fn, extra_state);
        // SAFETY: MPI's contract: the caller's MPI_Request.
        let r = unsafe { super::p2p::new_generalized("MPI_Grequest_start", request, register) };
        finish("MPI_Grequest_start", COMM_WORLD, r)
    }

    fn MPI_Grequest_complete / PMPI_Grequest_complete(request: c_int) -> c_int {
        let r = complete("MPI_Grequest_complete", request);
        match r {
            // From a thread other than MPI_Init's (the call mpr takes from any thread), an
            // error is returned: the error handlers are that thread's to call alone.
            Err(fail) if super::STATE.get().is_none() => super::code_of(&fail),
            r => finish("MPI_Grequest_complete", COMM_WORLD, r),
        }
    }
}
