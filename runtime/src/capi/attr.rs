//! Attributes of communicators, datatypes and windows (`MPI_Comm_create_keyval`,
//! `MPI_Type_set_attr`, `MPI_Win_get_attr` ...): keys with the program's copy and delete
//! functions, each made for one kind of object, and each object's values. A duplicate
//! (`MPI_Comm_dup`, `MPI_Type_dup`) gets the values the copy functions give it; freeing the
//! object (and `MPI_Finalize`, for `MPI_COMM_SELF`) runs the delete functions. The program's
//! functions run with no state borrowed: they may call MPI.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};

use super::types::Datatype;
use super::win::on_win;
use super::{comm_of, finish, put, with_state, Fail, Res, COMM_WORLD, ERR_ARG, ERR_KEYVAL, MPI_SUCCESS};

/// `MPI_Comm_copy_attr_function` (and the datatype's and window's: their handles are `int`s too).
pub(super) type CopyFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function` (and the datatype's and window's).
pub(super) type DeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;

/// `MPI_KEYVAL_INVALID`, and the first key of the program's (below it: the predefined
/// attributes).
const KEYVAL_INVALID: c_int = 0;
const FIRST_KEYVAL: c_int = 16;

/// The kind of object a key is for (MPI keeps their keys apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Object {
    Comm,
    Type,
    Win,
}

impl Object {
    fn what(self) -> &'static str {
        match self {
            Object::Comm => "communicator",
            Object::Type => "datatype",
            Object::Win => "window",
        }
    }
}

/// A key of the program's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Keyval {
    object: Object,
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    extra: *mut c_void,
    /// `MPI_Comm_free_keyval` (or the datatype's or window's) was called: no new value may
    /// be set.
    freed: bool,
}

/// Attribute values of the objects that have any, by object and handle: each object's in the
/// order they were set.
pub(super) type Attrs = HashMap<(Object, c_int), Vec<(c_int, *mut c_void)>>;

/// Key `k` of `object`s (`MPI_ERR_KEYVAL` if it is none of the program's, or another kind's).
fn keyval(name: &str, object: Object, k: c_int) -> Res<Keyval> {
    let found =
        with_state(name, |s| usize::try_from(k - FIRST_KEYVAL).ok().and_then(|i| s.keyvals.get(i).copied().flatten()))?;
    match found {
        Some(kv) if kv.object == object => Ok(kv),
        Some(kv) => Err(Fail::new(
            ERR_KEYVAL,
            format!("{name}: {k} is a key of {}s, not of {}s", kv.object.what(), object.what()),
        )),
        None => Err(Fail::new(ERR_KEYVAL, format!("{name}: {k} is not a key"))),
    }
}

/// The value of key `k` on `object` `h`, if set.
pub(super) fn get(name: &str, object: Object, h: c_int, k: c_int) -> Res<Option<*mut c_void>> {
    keyval(name, object, k)?;
    with_state(name, |s| s.attrs.get(&(object, h)).and_then(|a| a.iter().find(|(key, _)| *key == k)).map(|&(_, v)| v))
}

/// Runs key `k`'s delete function on `value` of `object` `h`.
fn delete(name: &str, object: Object, h: c_int, k: c_int, value: *mut c_void) -> Res {
    let kv = keyval(name, object, k)?;
    let Some(f) = kv.delete else { return Ok(()) };
    // SAFETY: the program's delete function, called as MPI says, with its own extra state.
    match unsafe { f(h, k, value, kv.extra) } {
        MPI_SUCCESS => Ok(()),
        code => Err(Fail::new(code, format!("{name}: the delete function of key {k} returned {code}"))),
    }
}

/// Sets key `k` on `object` `h` (a handle the caller checked) to `value`, deleting the value
/// set before (`MPI_Comm_set_attr` ...).
pub(super) fn set(name: &str, object: Object, h: c_int, k: c_int, value: *mut c_void) -> Res {
    if keyval(name, object, k)?.freed {
        return Err(Fail::new(ERR_KEYVAL, format!("{name}: key {k} was freed")));
    }
    if let Some(old) = get(name, object, h, k)? {
        delete(name, object, h, k, old)?;
    }
    with_state(name, |s| {
        let a = s.attrs.entry((object, h)).or_default();
        a.retain(|(key, _)| *key != k);
        a.push((k, value));
    })
}

/// Deletes key `k`'s value on `object` `h` (`MPI_Comm_delete_attr` ...); nothing if it has
/// none (as MPICH).
pub(super) fn remove(name: &str, object: Object, h: c_int, k: c_int) -> Res {
    let Some(old) = get(name, object, h, k)? else { return Ok(()) };
    delete(name, object, h, k, old)?;
    with_state(name, |s| {
        if let Some(a) = s.attrs.get_mut(&(object, h)) {
            a.retain(|(key, _)| *key != k);
        }
    })
}

/// Removes every attribute of `object` `h`, running their delete functions (before the
/// object goes), the last set first: MPI orders `MPI_COMM_SELF`'s so at `MPI_Finalize`
/// (MPI-3.1 8.7.1), and every object's go the same way.
pub(super) fn delete_all(name: &str, object: Object, h: c_int) -> Res {
    let mut attrs = with_state(name, |s| s.attrs.remove(&(object, h)).unwrap_or_default())?;
    while let Some(&(k, v)) = attrs.last() {
        if let Err(e) = delete(name, object, h, k, v) {
            // The call fails and the object stays: with the values not deleted.
            with_state(name, |s| s.attrs.insert((object, h), attrs))?;
            return Err(e);
        }
        attrs.pop();
    }
    Ok(())
}

/// Gives new object `new` the attributes `old`'s copy functions make (`MPI_Comm_dup`,
/// `MPI_Type_dup`).
pub(super) fn copy_all(name: &str, object: Object, old: c_int, new: c_int) -> Res {
    let attrs = with_state(name, |s| s.attrs.get(&(object, old)).cloned().unwrap_or_default())?;
    let mut copied = Vec::new();
    for (k, v) in attrs {
        let kv = keyval(name, object, k)?;
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
    if !copied.is_empty() {
        with_state(name, |s| s.attrs.insert((object, new), copied))?;
    }
    Ok(())
}

/// A new key of `object`s into `*out` (`MPI_Comm_create_keyval` ...).
///
/// # Safety
/// `out` points to an int (MPI's contract).
pub(super) unsafe fn create_keyval(
    name: &str,
    object: Object,
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    out: *mut c_int,
    extra: *mut c_void,
) -> Res {
    let k = with_state(name, |s| {
        s.keyvals.push(Some(Keyval { object, copy, delete, extra, freed: false }));
        s.keyvals.len() as c_int - 1 + FIRST_KEYVAL
    })?;
    // SAFETY: this function's contract.
    unsafe { put(out, k) }
}

/// Frees the key of `object`s at `*at` and sets it to `MPI_KEYVAL_INVALID`
/// (`MPI_Comm_free_keyval` ...). Values set with it keep their delete function until deleted.
///
/// # Safety
/// `at` is null (an error) or points to an int (MPI's contract).
pub(super) unsafe fn free_keyval(name: &str, object: Object, at: *mut c_int) -> Res {
    if at.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null pointer")));
    }
    // SAFETY: not null (checked): the caller's int.
    let k = unsafe { *at };
    keyval(name, object, k)?;
    with_state(name, |s| {
        if let Some(Some(kv)) = s.keyvals.get_mut((k - FIRST_KEYVAL) as usize) {
            kv.freed = true;
        }
    })?;
    // SAFETY: as above.
    unsafe { put(at, KEYVAL_INVALID) }
}

/// The value of key `k` on `object` `h` into `*value` and whether there is one into `*flag`
/// (`MPI_Type_get_attr` ...: a key of the program's).
///
/// # Safety
/// `value` points to a pointer and `flag` to an int (MPI's contract).
pub(super) unsafe fn get_into(
    name: &str,
    object: Object,
    h: c_int,
    k: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> Res {
    let found = get(name, object, h, k)?;
    if let Some(v) = found {
        // SAFETY: this function's contract.
        unsafe { put(value.cast::<*mut c_void>(), v)? };
    }
    // SAFETY: this function's contract.
    unsafe { put(flag, found.is_some() as c_int) }
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
        const NAME: &str = "MPI_Comm_create_keyval";
        // SAFETY: MPI's contract: keyval points to an int.
        finish(NAME, COMM_WORLD, unsafe { create_keyval(NAME, Object::Comm, copy, delete, keyval, extra_state) })
    }

    fn MPI_Comm_free_keyval / PMPI_Comm_free_keyval(keyval: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Comm_free_keyval";
        // SAFETY: MPI's contract: keyval points to an int.
        finish(NAME, COMM_WORLD, unsafe { free_keyval(NAME, Object::Comm, keyval) })
    }

    fn MPI_Comm_set_attr / PMPI_Comm_set_attr(comm: c_int, keyval: c_int, attribute_val: *mut c_void) -> c_int {
        const NAME: &str = "MPI_Comm_set_attr";
        let r = comm_of(NAME, comm).and_then(|_| set(NAME, Object::Comm, comm, keyval, attribute_val));
        finish(NAME, comm, r)
    }

    fn MPI_Comm_delete_attr / PMPI_Comm_delete_attr(comm: c_int, keyval: c_int) -> c_int {
        const NAME: &str = "MPI_Comm_delete_attr";
        let r = comm_of(NAME, comm).and_then(|_| remove(NAME, Object::Comm, comm, keyval));
        finish(NAME, comm, r)
    }

    fn MPI_Type_create_keyval / PMPI_Type_create_keyval(
        copy: Option<CopyFn>,
        delete: Option<DeleteFn>,
        keyval: *mut c_int,
        extra_state: *mut c_void,
    ) -> c_int {
        const NAME: &str = "MPI_Type_create_keyval";
        // SAFETY: MPI's contract: keyval points to an int.
        finish(NAME, COMM_WORLD, unsafe { create_keyval(NAME, Object::Type, copy, delete, keyval, extra_state) })
    }

    fn MPI_Type_free_keyval / PMPI_Type_free_keyval(keyval: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Type_free_keyval";
        // SAFETY: MPI's contract: keyval points to an int.
        finish(NAME, COMM_WORLD, unsafe { free_keyval(NAME, Object::Type, keyval) })
    }

    fn MPI_Type_set_attr / PMPI_Type_set_attr(datatype: c_int, keyval: c_int, attribute_val: *mut c_void) -> c_int {
        const NAME: &str = "MPI_Type_set_attr";
        let r = Datatype::of(datatype).and_then(|_| set(NAME, Object::Type, datatype, keyval, attribute_val));
        finish(NAME, COMM_WORLD, r)
    }

    fn MPI_Type_get_attr / PMPI_Type_get_attr(datatype: c_int, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Type_get_attr";
        // SAFETY: MPI's contract: attribute_val points to a pointer, flag to an int.
        let r = Datatype::of(datatype).and_then(|_| unsafe { get_into(NAME, Object::Type, datatype, keyval, attribute_val, flag) });
        finish(NAME, COMM_WORLD, r)
    }

    fn MPI_Type_delete_attr / PMPI_Type_delete_attr(datatype: c_int, keyval: c_int) -> c_int {
        const NAME: &str = "MPI_Type_delete_attr";
        let r = Datatype::of(datatype).and_then(|_| remove(NAME, Object::Type, datatype, keyval));
        finish(NAME, COMM_WORLD, r)
    }

    fn MPI_Win_create_keyval / PMPI_Win_create_keyval(
        copy: Option<CopyFn>,
        delete: Option<DeleteFn>,
        keyval: *mut c_int,
        extra_state: *mut c_void,
    ) -> c_int {
        const NAME: &str = "MPI_Win_create_keyval";
        // SAFETY: MPI's contract: keyval points to an int.
        finish(NAME, COMM_WORLD, unsafe { create_keyval(NAME, Object::Win, copy, delete, keyval, extra_state) })
    }

    fn MPI_Win_free_keyval / PMPI_Win_free_keyval(keyval: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Win_free_keyval";
        // SAFETY: MPI's contract: keyval points to an int.
        finish(NAME, COMM_WORLD, unsafe { free_keyval(NAME, Object::Win, keyval) })
    }

    fn MPI_Win_set_attr / PMPI_Win_set_attr(win: c_int, keyval: c_int, attribute_val: *mut c_void) -> c_int {
        const NAME: &str = "MPI_Win_set_attr";
        on_win(NAME, win, || set(NAME, Object::Win, win, keyval, attribute_val))
    }

    fn MPI_Win_delete_attr / PMPI_Win_delete_attr(win: c_int, keyval: c_int) -> c_int {
        const NAME: &str = "MPI_Win_delete_attr";
        on_win(NAME, win, || remove(NAME, Object::Win, win, keyval))
    }
}
