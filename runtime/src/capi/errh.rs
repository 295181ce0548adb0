//! Error handlers of the program's (`MPI_Comm_create_errhandler`, `MPI_Win_create_errhandler`),
//! freeing them, and calling an object's handler on a code of the program's
//! (`MPI_Comm_call_errhandler`, `MPI_Win_call_errhandler`). The predefined handlers are
//! `MPI_ERRORS_ARE_FATAL` (1) and `MPI_ERRORS_RETURN` (2); a program's start at 3.

use std::ffi::c_int;

use super::{finish, put, with_state, Fail, Res, State, COMM_WORLD, ERRORS_ARE_FATAL, ERRORS_RETURN, ERR_ARG};

/// `MPI_Comm_errhandler_function` and `MPI_Win_errhandler_function`: the object's handle
/// and the error code, by pointer, then arguments MPI leaves to the implementation (none).
pub(super) type HandlerFn = unsafe extern "C" fn(*mut c_int, *mut c_int, ...);

/// What a handler of the program's is for: MPI lets each be set only on its own kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Comm,
    Win,
}

/// A handler of the program's. It stays in the table once made: `MPI_Errhandler_free`
/// releases one reference of the program's, while the objects it is set on keep theirs
/// (MPI 4.1, 9.3.4), and `MPI_Comm_get_errhandler` hands out new references to it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Handler {
    f: HandlerFn,
    kind: Kind,
}

/// The first handle of a program's handler.
const FIRST: c_int = 3;

/// The function of handler `h` if it is one of the program's.
pub(super) fn user(s: &State, h: c_int) -> Option<HandlerFn> {
    slot(s, h).map(|u| u.f)
}

fn slot(s: &State, h: c_int) -> Option<&Handler> {
    s.errhandlers.get(usize::try_from(h - FIRST).ok()?)?.as_ref()
}

/// Checks that handler `h` may be set on an object of kind `kind` (`MPI_ERR_ARG` if not).
pub(super) fn settable(s: &State, h: c_int, kind: Kind) -> Res {
    if matches!(h, ERRORS_ARE_FATAL | ERRORS_RETURN) {
        return Ok(());
    }
    match slot(s, h) {
        Some(u) if u.kind == kind => Ok(()),
        Some(_) => Err(Fail::new(ERR_ARG, format!("error handler {h} is for another kind of object"))),
        None => Err(Fail::new(ERR_ARG, format!("{h} is not an error handler"))),
    }
}

/// Calls the program's handler `f` on object `object` and code `code` (with no MPI state
/// borrowed: it may make MPI calls).
pub(super) fn call(f: HandlerFn, object: c_int, code: c_int) {
    let (mut object, mut code) = (object, code);
    // SAFETY: `f` is a function the program registered with the MPI type of a handler;
    // both pointers are to locals that outlive the call.
    unsafe { f(&mut object, &mut code) };
}

/// `MPI_Comm_create_errhandler` and `MPI_Win_create_errhandler`.
///
/// # Safety
/// `out` points to an `MPI_Errhandler` (or is null: an error).
unsafe fn create(name: &str, f: Option<HandlerFn>, kind: Kind, out: *mut c_int) -> c_int {
    let r = (|| {
        let f = f.ok_or_else(|| Fail::new(ERR_ARG, format!("{name}: a null function")))?;
        let h = with_state(name, |s| {
            s.errhandlers.push(Some(Handler { f, kind }));
            s.errhandlers.len() as c_int - 1 + FIRST
        })?;
        // SAFETY: this function's contract.
        unsafe { put(out, h) }
    })();
    finish(name, COMM_WORLD, r)
}

mpi! {
    fn MPI_Comm_create_errhandler / PMPI_Comm_create_errhandler(f: Option<HandlerFn>, errhandler: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: errhandler points to an MPI_Errhandler.
        unsafe { create("MPI_Comm_create_errhandler", f, Kind::Comm, errhandler) }
    }

    fn MPI_Win_create_errhandler / PMPI_Win_create_errhandler(f: Option<HandlerFn>, errhandler: *mut c_int) -> c_int {
        // SAFETY: as above.
        unsafe { create("MPI_Win_create_errhandler", f, Kind::Win, errhandler) }
    }

    fn MPI_Errhandler_free / PMPI_Errhandler_free(errhandler: *mut c_int) -> c_int {
        let r = (|| {
            if errhandler.is_null() {
                return Err(Fail::new(ERR_ARG, "a null MPI_Errhandler pointer"));
            }
            // SAFETY: not null (checked); MPI's contract: the caller's MPI_Errhandler.
            let h = unsafe { *errhandler };
            // A predefined handler too: MPI_Comm_get_errhandler hands one out, to be freed.
            let known = with_state("MPI_Errhandler_free", |s| matches!(h, ERRORS_ARE_FATAL | ERRORS_RETURN) || slot(s, h).is_some())?;
            if !known {
                return Err(Fail::new(ERR_ARG, format!("MPI_Errhandler_free: {h} is not an error handler")));
            }
            // SAFETY: as above.
            unsafe { *errhandler = 0 };
            Ok(())
        })();
        finish("MPI_Errhandler_free", COMM_WORLD, r)
    }

    fn MPI_Comm_call_errhandler / PMPI_Comm_call_errhandler(comm: c_int, errorcode: c_int) -> c_int {
        super::call_handler("MPI_Comm_call_errhandler", comm, None, errorcode)
    }

    fn MPI_Win_call_errhandler / PMPI_Win_call_errhandler(win: c_int, errorcode: c_int) -> c_int {
        super::win::call_handler(win, errorcode)
    }
}
