//! Attributes of communicators (`MPI_Comm_create_keyval`, `MPI_Comm_set_attr` ...): keys
//! with the program's copy and delete functions, and each communicator's values. A duplicate
//! gets the values the copy functions give it; freeing a communicator (and `MPI_Finalize`,
//! for `MPI_COMM_SELF`) runs the delete functions. The program's functions run with no
//! state borrowed: they may call MPI.

use std::ffi::{c_int, c_void};

use super::{comm_of, finish, put, with_state, Fail, Res, COMM_WORLD, ERR_ARG, ERR_KEYVAL, ERR_OTHER, MPI_SUCCESS};

/// `MPI_Comm_copy_attr_function`.
pub(super) type CopyFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function`.
pub(super) type DeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;

/// `MPI_KEYVAL_INVALID`, and the first key of the program's (below it: the predefined
/// attributes).
const KEYVAL_INVALID: c_int = 0;
const FIRST_KEYVAL: c_int = 16;

/// A key of the program's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Keyval {
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    extra: *mut c_void,
    /// `MPI_Comm_free_keyval` was called: no new value may be set.
    freed: bool,
}

/// A communicator's attribute values, by key.
pub(super) type Attrs = Vec<(c_int, *mut c_void)>;

/// Key `k` (`MPI_ERR_KEYVAL` if it is none of the program's).
fn keyval(name: &str, k: c_int) -> Res<Keyval> {
    with_state(name, |s| usize::try_from(k - FIRST_KEYVAL).ok().and_then(|i| s.keyvals.get(i).copied().flatten()))?
        .ok_or_else(|| Fail::new(ERR_KEYVAL, format!("{name}: {k} is not a key")))
}

/// The value of key `k` on `comm`, if set.
pub(super) fn get(name: &str, comm: c_int, k: c_int) -> Res<Option<*mut c_void>> {
    keyval(name, k)?;
    with_state(name, |s| {
        let e = s.comms.get(comm as usize).and_then(Option::as_ref).expect("checked by comm_of");
        e.attrs.iter().find(|(key, _)| *key == k).map(|&(_, v)| v)
    })
}

/// Runs key `k`'s delete function on `value` of `comm`.
fn delete(name: &str, comm: c_int, k: c_int, value: *mut c_void) -> Res {
    let kv = keyval(name, k)?;
    let Some(f) = kv.delete else { return Ok(()) };
    // SAFETY: the program's delete function, called as MPI says, with its own extra state.
    match unsafe { f(comm, k, value, kv.extra) } {
        MPI_SUCCESS => Ok(()),
        code => Err(Fail::new(code, format!("{name}: the delete function of key {k} returned {code}"))),
    }
}

/// Removes every attribute of `comm`, running their delete functions (before the
/// communicator goes), the last set first: MPI orders `MPI_COMM_SELF`'s so at
/// `MPI_Finalize` (MPI-3.1 8.7.1), and every communicator's go the same way.
pub(super) fn delete_all(name: &str, comm: c_int) -> Res {
    let attrs = with_state(name, |s| {
        s.comms
            .get_mut(comm as usize)
            .and_then(Option::as_mut)
            .map(|e| std::mem::take(&mut e.attrs))
            .unwrap_or_default()
    })?;
    attrs.into_iter().rev().try_for_each(|(k, v)| delete(name, comm, k, v))
}

/// Gives new communicator `new` the attributes `old`'s copy functions make (`MPI_Comm_dup`).
pub(super) fn copy_all(name: &str, old: c_int, new: c_int) -> Res {
    let attrs = with_state(name, |s| s.comms[old as usize].as_ref().map(|e| e.attrs.clone()).unwrap_or_default())?;
    let mut copied = Attrs::new();
    for (k, v) in attrs {
        let kv = keyval(name, k)?;
        let Some(f) = kv.copy else { continue };
        let (mut out, mut flag): (*mut c_void, c_int) = (std::ptr::null_mut(), 0);
        // SAFETY: the program's copy function, called as MPI says (the new value and the
        // flag are ours).
        let code = unsafe { f(old, k, kv.extra, v, (&mut out as *mut *mut c_void).cast(), &mut flag) };
        if code != MPI_SUCCESS {
            return Err(Fail::new(code, format!("{name}: the copy function of key {k} returned {code}")));
        }
        if flag != 0 {
            copied.push((k, out));
        }
    }
    with_state(name, |s| s.comms[new as usize].as_mut().expect("just made").attrs = copied)
}

/// `MPI_COMM_DUP_FN`: the duplicate gets the same value.
///
/// # Safety
/// `out` points to a pointer and `flag` to an int (MPI's contract for copy functions).
#[no_mangle]
pub(crate) unsafe extern "C" fn MPR_Comm_dup_fn(
    _comm: c_int,
    _keyval: c_int,
    _extra: *mut c_void,
    value: *mut c_void,
    out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: this function's contract.
    unsafe {
        *out.cast::<*mut c_void>() = value;
        *flag = 1;
    }
    MPI_SUCCESS
}

mpi! {
    fn MPI_Comm_create_keyval / PMPI_Comm_create_keyval(
        copy: Option<CopyFn>,
        delete: Option<DeleteFn>,
        keyval: *mut c_int,
        extra_state: *mut c_void,
    ) -> c_int {
        let r = (|| {
            let k = with_state("MPI_Comm_create_keyval", |s| {
                s.keyvals.push(Some(Keyval { copy, delete, extra: extra_state, freed: false }));
                s.keyvals.len() as c_int - 1 + FIRST_KEYVAL
            })?;
            // SAFETY: MPI's contract: keyval points to an int.
            unsafe { put(keyval, k) }
        })();
        finish("MPI_Comm_create_keyval", COMM_WORLD, r)
    }

    fn MPI_Comm_free_keyval / PMPI_Comm_free_keyval(keyval: *mut c_int) -> c_int {
        let r = (|| {
            if keyval.is_null() {
                return Err(Fail::new(ERR_ARG, "MPI_Comm_free_keyval: a null pointer"));
            }
            // SAFETY: not null (checked): the caller's int.
            let k = unsafe { *keyval };
            self::keyval("MPI_Comm_free_keyval", k)?;
            // Values set with it keep their delete function until deleted.
            with_state("MPI_Comm_free_keyval", |s| {
                if let Some(Some(kv)) = s.keyvals.get_mut((k - FIRST_KEYVAL) as usize) {
                    kv.freed = true;
                }
            })?;
            // SAFETY: as above.
            unsafe { put(keyval, KEYVAL_INVALID) }
        })();
        finish("MPI_Comm_free_keyval", COMM_WORLD, r)
    }

    fn MPI_Comm_set_attr / PMPI_Comm_set_attr(comm: c_int, keyval: c_int, attribute_val: *mut c_void) -> c_int {
        let r = (|| {
            comm_of("MPI_Comm_set_attr", comm)?;
            if self::keyval("MPI_Comm_set_attr", keyval)?.freed {
                return Err(Fail::new(ERR_KEYVAL, format!("MPI_Comm_set_attr: key {keyval} was freed")));
            }
            // A value set before is deleted first.
            if let Some(old) = get("MPI_Comm_set_attr", comm, keyval)? {
                delete("MPI_Comm_set_attr", comm, keyval, old)?;
            }
            with_state("MPI_Comm_set_attr", |s| {
                let e = s.comms[comm as usize].as_mut().expect("checked by comm_of");
                e.attrs.retain(|(k, _)| *k != keyval);
                e.attrs.push((keyval, attribute_val));
            })
        })();
        finish("MPI_Comm_set_attr", comm, r)
    }

    fn MPI_Comm_delete_attr / PMPI_Comm_delete_attr(comm: c_int, keyval: c_int) -> c_int {
        let r = (|| {
            comm_of("MPI_Comm_delete_attr", comm)?;
            let old = get("MPI_Comm_delete_attr", comm, keyval)?
                .ok_or_else(|| Fail::new(ERR_OTHER, format!("MPI_Comm_delete_attr: key {keyval} has no value here")))?;
            delete("MPI_Comm_delete_attr", comm, keyval, old)?;
            with_state("MPI_Comm_delete_attr", |s| {
                s.comms[comm as usize].as_mut().expect("checked by comm_of").attrs.retain(|(k, _)| *k != keyval)
            })
        })();
        finish("MPI_Comm_delete_attr", comm, r)
    }
}
