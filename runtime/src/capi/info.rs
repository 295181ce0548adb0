//! Info objects (`MPI_Info`): ordered (key, value) pairs that calls accept and programs read
//! back. mpr's calls take their hints elsewhere (environment, flags), so an info passed to
//! one is accepted and its keys kept, as MPI allows.

use std::ffi::{c_char, c_int, CStr};

use super::{comm_of, finish, put, with_state, write_text, Fail, Res, COMM_WORLD, ERR_ARG};

const ERR_INFO: c_int = 28;
const ERR_INFO_KEY: c_int = 29;
const ERR_INFO_VALUE: c_int = 30;
const ERR_INFO_NOKEY: c_int = 31;
const MAX_INFO_KEY: usize = 255;
const MAX_INFO_VAL: usize = 1024;
/// `MPI_INFO_ENV`: the info of the environment, read only.
const INFO_ENV: c_int = 1;

/// An info object's pairs, in the order first set.
pub(super) type Pairs = Vec<(String, String)>;

/// The table's first entries: `MPI_INFO_NULL`, `MPI_INFO_ENV` (the command and the job's
/// size, as MPI suggests).
pub(super) fn predefined() -> Vec<Option<Pairs>> {
    let mut env = Pairs::new();
    if let Some(cmd) = std::env::args().next() {
        env.push(("command".into(), cmd));
    }
    if let Ok(n) = std::env::var("MPR_SIZE") {
        env.push(("maxprocs".into(), n));
    }
    vec![None, Some(env)]
}

/// A C string argument, checked against `max` bytes.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn text(p: *const c_char, max: usize, class: c_int, what: &str) -> Res<String> {
    if p.is_null() {
        return Err(Fail::new(class, format!("a null {what}")));
    }
    // SAFETY: not null (checked), NUL-terminated (this function's contract).
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    if s.is_empty() || s.len() > max {
        return Err(Fail::new(class, format!("a {what} of {} bytes (1 to {max})", s.len())));
    }
    Ok(s)
}

/// Runs `f` on the pairs of info `info` (`write`: one the program may change).
fn with_info<R>(name: &str, info: c_int, write: bool, f: impl FnOnce(&mut Pairs) -> Res<R>) -> Res<R> {
    with_state(name, |s| {
        if write && info == INFO_ENV {
            return Err(Fail::new(ERR_INFO, format!("{name}: MPI_INFO_ENV is read only")));
        }
        match usize::try_from(info).ok().and_then(|i| s.infos.get_mut(i)).and_then(Option::as_mut) {
            Some(p) => f(p),
            None => Err(Fail::new(ERR_INFO, format!("{name}: {info} is not an info object"))),
        }
    })?
}

/// A new info holding `pairs`, its handle written to `out`.
///
/// # Safety
/// `out` points to an `MPI_Info`.
unsafe fn new_info(name: &str, pairs: Pairs, out: *mut c_int) -> Res {
    let h = with_state(name, |s| {
        s.infos.push(Some(pairs));
        (s.infos.len() - 1) as c_int
    })?;
    // SAFETY: this function's contract.
    unsafe { put(out, h) }
}

/// Checks that `info` is an info object or `MPI_INFO_NULL` (hints, which mpr takes none of).
pub(super) fn hints(name: &str, info: c_int) -> Res {
    if info == 0 {
        return Ok(());
    }
    with_info(name, info, false, |_| Ok(()))
}

/// A hint MPI defines: its key, its default, and whether a value is one MPI defines for it.
type Hint = (&'static str, &'static str, fn(&str) -> bool);

/// The hints MPI defines for windows (MPI-3.1 11.2.1).
const WINDOW_HINTS: [Hint; 6] = [
    ("no_locks", "false", boolean),
    ("accumulate_ordering", "rar,raw,war,waw", orderings),
    ("accumulate_ops", "same_op_no_op", |v| matches!(v, "same_op" | "same_op_no_op")),
    ("same_size", "false", boolean),
    ("same_disp_unit", "false", boolean),
    // Of windows whose memory the call allocates (MPI-4.1 12.2.2); reported for every
    // window, as MPICH does.
    ("alloc_shared_noncontig", "false", boolean),
];

fn boolean(v: &str) -> bool {
    matches!(v, "true" | "false")
}

/// `accumulate_ordering`'s values: `none`, or a comma-separated list of orderings.
fn orderings(v: &str) -> bool {
    v == "none" || v.split(',').all(|o| matches!(o.trim(), "rar" | "raw" | "war" | "waw"))
}

/// The hints of a new window: MPI's defaults, then the values `info` sets for MPI's keys.
/// mpr relaxes nothing on any of them: its accumulates keep every ordering and combine any
/// operations atomically, and a window always takes locks. So each hint in use is a promise
/// the program made that mpr does not rely on, and `MPI_Win_get_info` reports it as set, as
/// MPICH does. Keys MPI does not define, and values it does not define for a key, are
/// ignored (MPI allows that).
pub(super) fn window_hints(name: &str, info: c_int) -> Res<Pairs> {
    let mut pairs: Pairs = WINDOW_HINTS.iter().map(|&(k, v, _)| (k.to_owned(), v.to_owned())).collect();
    set_window_hints(name, &mut pairs, info)?;
    Ok(pairs)
}

/// `MPI_Win_set_info`: the window's hints `pairs` take the values `info` sets for the keys
/// they hold (as [`window_hints`]); the others stay as they were.
pub(super) fn set_window_hints(name: &str, pairs: &mut Pairs, info: c_int) -> Res {
    if info == 0 {
        return Ok(());
    }
    let given = with_info(name, info, false, |p| Ok(p.clone()))?;
    for (key, value) in given {
        let defined = WINDOW_HINTS.iter().any(|&(k, _, valid)| k == key && valid(&value));
        match pairs.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) if defined => slot.1 = value,
            _ => {}
        }
    }
    Ok(())
}

mpi! {
    // Hints on communicators: checked, and kept by none (MPI-3.1 defines none, and mpr acts
    // on none), so the info of one in use is empty, as MPI allows. Windows keep theirs
    // (`window_hints`).
    fn MPI_Comm_set_info / PMPI_Comm_set_info(comm: c_int, info: c_int) -> c_int {
        let r = comm_of("MPI_Comm_set_info", comm).and_then(|_| hints("MPI_Comm_set_info", info));
        finish("MPI_Comm_set_info", comm, r)
    }

    fn MPI_Comm_get_info / PMPI_Comm_get_info(comm: c_int, info_used: *mut c_int) -> c_int {
        let r = comm_of("MPI_Comm_get_info", comm)
            // SAFETY: MPI's contract: `info_used` points to an MPI_Info.
            .and_then(|_| unsafe { new_info("MPI_Comm_get_info", Pairs::new(), info_used) });
        finish("MPI_Comm_get_info", comm, r)
    }

    fn MPI_Comm_dup_with_info / PMPI_Comm_dup_with_info(comm: c_int, info: c_int, newcomm: *mut c_int) -> c_int {
        if let Err(fail) = hints("MPI_Comm_dup_with_info", info) {
            return finish("MPI_Comm_dup_with_info", comm, Err(fail));
        }
        // SAFETY: MPI's contract, passed on.
        unsafe { super::PMPI_Comm_dup(comm, newcomm) }
    }

    fn MPI_Win_set_info / PMPI_Win_set_info(win: c_int, info: c_int) -> c_int {
        // Errors go to the window's handler.
        super::win::call("MPI_Win_set_info", win, |w| set_window_hints("MPI_Win_set_info", &mut w.hints, info))
    }

    fn MPI_Win_get_info / PMPI_Win_get_info(win: c_int, info_used: *mut c_int) -> c_int {
        super::win::call("MPI_Win_get_info", win, |w| {
            let pairs = w.hints.clone();
            // SAFETY: MPI's contract: `info_used` points to an MPI_Info.
            unsafe { new_info("MPI_Win_get_info", pairs, info_used) }
        })
    }

    fn MPI_Info_create / PMPI_Info_create(info: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: `info` points to an MPI_Info.
        finish("MPI_Info_create", COMM_WORLD, unsafe { new_info("MPI_Info_create", Pairs::new(), info) })
    }

    fn MPI_Info_dup / PMPI_Info_dup(info: c_int, newinfo: *mut c_int) -> c_int {
        let r = with_info("MPI_Info_dup", info, false, |p| Ok(p.clone()))
            // SAFETY: MPI's contract: `newinfo` points to an MPI_Info.
            .and_then(|p| unsafe { new_info("MPI_Info_dup", p, newinfo) });
        finish("MPI_Info_dup", COMM_WORLD, r)
    }

    fn MPI_Info_free / PMPI_Info_free(info: *mut c_int) -> c_int {
        let r = (|| {
            if info.is_null() {
                return Err(Fail::new(ERR_ARG, "MPI_Info_free: a null info pointer"));
            }
            // SAFETY: not null (checked): the caller's MPI_Info.
            let h = unsafe { *info };
            let freed = with_state("MPI_Info_free", |s| super::free_handle(&mut s.infos, h, 2))?;
            if !freed {
                return Err(Fail::new(ERR_INFO, format!("MPI_Info_free: {h} is not an info the program made")));
            }
            // SAFETY: as above.
            unsafe { *info = 0 };
            Ok(())
        })();
        finish("MPI_Info_free", COMM_WORLD, r)
    }

    fn MPI_Info_set / PMPI_Info_set(info: c_int, key: *const c_char, value: *const c_char) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: NUL-terminated strings.
            let (k, v) = unsafe {
                (text(key, MAX_INFO_KEY, ERR_INFO_KEY, "key")?, text(value, MAX_INFO_VAL, ERR_INFO_VALUE, "value")?)
            };
            with_info("MPI_Info_set", info, true, |p| {
                match p.iter_mut().find(|(pk, _)| *pk == k) {
                    Some(pair) => pair.1 = v,
                    None => p.push((k, v)),
                }
                Ok(())
            })
        })();
        finish("MPI_Info_set", COMM_WORLD, r)
    }

    fn MPI_Info_delete / PMPI_Info_delete(info: c_int, key: *const c_char) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: a NUL-terminated string.
            let k = unsafe { text(key, MAX_INFO_KEY, ERR_INFO_KEY, "key")? };
            with_info("MPI_Info_delete", info, true, |p| match p.iter().position(|(pk, _)| *pk == k) {
                Some(i) => {
                    p.remove(i);
                    Ok(())
                }
                None => Err(Fail::new(ERR_INFO_NOKEY, format!("MPI_Info_delete: no key {k:?}"))),
            })
        })();
        finish("MPI_Info_delete", COMM_WORLD, r)
    }

    fn MPI_Info_get / PMPI_Info_get(
        info: c_int,
        key: *const c_char,
        valuelen: c_int,
        value: *mut c_char,
        flag: *mut c_int,
    ) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: a NUL-terminated string.
            let k = unsafe { text(key, MAX_INFO_KEY, ERR_INFO_KEY, "key")? };
            let found = with_info("MPI_Info_get", info, false, |p| {
                Ok(p.iter().find(|(pk, _)| *pk == k).map(|(_, v)| v.clone()))
            })?;
            // SAFETY: MPI's contract: `flag` points to an int, `value` holds valuelen + 1 bytes.
            unsafe {
                put(flag, found.is_some() as c_int)?;
                if let Some(v) = found {
                    let max = usize::try_from(valuelen).map_err(|_| Fail::new(ERR_ARG, "a negative valuelen"))?;
                    let mut len = 0;
                    // At most valuelen characters, and the NUL.
                    write_text(&v, value, &mut len, max + 1)?;
                }
            }
            Ok(())
        })();
        finish("MPI_Info_get", COMM_WORLD, r)
    }

    fn MPI_Info_get_valuelen / PMPI_Info_get_valuelen(
        info: c_int,
        key: *const c_char,
        valuelen: *mut c_int,
        flag: *mut c_int,
    ) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: a NUL-terminated string.
            let k = unsafe { text(key, MAX_INFO_KEY, ERR_INFO_KEY, "key")? };
            let found = with_info("MPI_Info_get_valuelen", info, false, |p| {
                Ok(p.iter().find(|(pk, _)| *pk == k).map(|(_, v)| v.len()))
            })?;
            // SAFETY: MPI's contract: both point to ints.
            unsafe {
                put(flag, found.is_some() as c_int)?;
                if let Some(n) = found {
                    put(valuelen, n as c_int)?;
                }
            }
            Ok(())
        })();
        finish("MPI_Info_get_valuelen", COMM_WORLD, r)
    }

    fn MPI_Info_get_nkeys / PMPI_Info_get_nkeys(info: c_int, nkeys: *mut c_int) -> c_int {
        let r = with_info("MPI_Info_get_nkeys", info, false, |p| Ok(p.len()))
            // SAFETY: MPI's contract: `nkeys` points to an int.
            .and_then(|n| unsafe { put(nkeys, n as c_int) });
        finish("MPI_Info_get_nkeys", COMM_WORLD, r)
    }

    fn MPI_Info_get_nthkey / PMPI_Info_get_nthkey(info: c_int, n: c_int, key: *mut c_char) -> c_int {
        let r = (|| {
            let k = with_info("MPI_Info_get_nthkey", info, false, |p| {
                usize::try_from(n)
                    .ok()
                    .and_then(|i| p.get(i))
                    .map(|(k, _)| k.clone())
                    .ok_or_else(|| Fail::new(ERR_ARG, format!("MPI_Info_get_nthkey: key {n} of {}", p.len())))
            })?;
            let mut len = 0;
            // SAFETY: MPI's contract: `key` holds MPI_MAX_INFO_KEY + 1 bytes.
            unsafe { write_text(&k, key, &mut len, MAX_INFO_KEY + 1) }
        })();
        finish("MPI_Info_get_nthkey", COMM_WORLD, r)
    }
}
