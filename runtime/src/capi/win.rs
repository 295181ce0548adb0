//! One-sided communication: windows (`MPI_Win`) over the Rust API's [`Window`] of bytes.
//! A displacement is `disp x` the target's displacement unit (every rank's unit is learnt
//! when the window is made); an accumulate names its operation and element type at run
//! time ([`crate::DynAcc`], the same kernels the typed API uses). `MPI_Alloc_mem`,
//! `MPI_Free_mem` and `MPI_Get_address` are here too.

use std::borrow::Cow;
use std::ffi::{c_int, c_void};

use std::cell::Ref;

use super::info::{hints, window_hints};
use super::types::{accumulate_basic, accumulate_of, pair_of, pairs_in, predefined_size, Datatype};
use super::{
    bytes, bytes_mut, comm_of, count_of, finish, finish_under, group_of, landing, message, name_at, put, raw_mut,
    with_state, write_text, Fail, Res, COMM_WORLD, ERRORS_ARE_FATAL, ERR_ARG, ERR_ASSERT, ERR_DISP, ERR_NO_MEM,
    ERR_OTHER, ERR_RANK, ERR_SIZE, ERR_WIN, MAX_OBJECT_NAME, PROC_NULL, STATE,
};
use crate::coll::op::ElemType;
use crate::rma::{Assert, LockType, Window};
use crate::{Comm, DynAcc, PairValue};

const WIN_BASE: c_int = 10;
const WIN_SIZE: c_int = 11;
const WIN_DISP_UNIT: c_int = 12;
const WIN_CREATE_FLAVOR: c_int = 13;
const WIN_MODEL: c_int = 14;
/// `MPI_WIN_FLAVOR_*` (include/mpi.h, MPICH's values): how a window was made.
const FLAVOR_CREATE: c_int = 1;
const FLAVOR_ALLOCATE: c_int = 2;
const FLAVOR_DYNAMIC: c_int = 3;
const FLAVOR_SHARED: c_int = 4;
/// `MPI_WIN_UNIFIED`: every window's memory is the one copy that both local loads and stores
/// and the other ranks' puts and gets reach (the engine writes and reads the caller's memory
/// itself, and a registered region is that memory), so MPI's unified model.
static WIN_UNIFIED: c_int = 2;
const LOCK_EXCLUSIVE: c_int = 234;
const LOCK_SHARED: c_int = 235;
/// `MPI_MODE_*`, as include/mpi.h numbers them.
const MODES: [(c_int, Assert); 5] =
    [(1, Assert::NOCHECK), (2, Assert::NOSTORE), (4, Assert::NOPUT), (8, Assert::NOPRECEDE), (16, Assert::NOSUCCEED)];

/// A window of the table.
#[derive(Debug)]
pub(super) struct WinEntry {
    win: Window<'static, u8>,
    /// Each rank's displacement unit, by rank in the window's communicator.
    units: Vec<usize>,
    /// What `MPI_Win_get_attr` points at: this rank's base, size and unit, and the flavor
    /// (the table boxes every entry, and moves only the box: the values stay put while
    /// the window lives).
    base: *mut c_void,
    size: isize,
    unit: c_int,
    /// `MPI_WIN_FLAVOR_*`: which call made the window.
    flavor: c_int,
    /// `MPI_Win_set_errhandler`'s (a window's errors go to it, not to a communicator's).
    errhandler: c_int,
    /// `MPI_Win_set_name`'s.
    name: String,
    /// The hints in use (`info::window_hints`).
    pub(super) hints: super::info::Pairs,
}

/// The assertion of a `MPI_MODE_*` combination.
fn assert_of(bits: c_int) -> Res<Assert> {
    let known: c_int = MODES.iter().map(|m| m.0).sum();
    if bits & !known != 0 {
        return Err(Fail::new(ERR_ASSERT, format!("assertion {bits:#x} names no MPI_MODE_ flag mpr knows")));
    }
    Ok(MODES.iter().filter(|m| bits & m.0 != 0).fold(Assert::NONE, |a, m| a | m.1))
}

/// Runs `f` on window `win` of the table (taken out meanwhile, so that `f` may use the
/// state: groups, communicators).
fn with_win<R>(name: &str, win: c_int, f: impl FnOnce(&mut WinEntry) -> Res<R>) -> Res<R> {
    let slot = usize::try_from(win).ok().filter(|&i| i > 0);
    let mut entry = with_state(name, |s| slot.and_then(|i| s.wins.get_mut(i)).and_then(Option::take))?
        .ok_or_else(|| Fail::new(ERR_WIN, format!("{name}: {win} is not a window")))?;
    let r = f(&mut entry);
    with_state(name, |s| s.wins[win as usize] = Some(entry))?;
    r
}

/// Window `win` of the table, borrowed: for a call that uses no other part of the state
/// (the one-sided operations and synchronisation, on the small-message path).
#[inline(always)]
fn win_ref(name: &str, win: c_int) -> Res<Ref<'static, WinEntry>> {
    win_at(win).ok_or_else(|| no_win(name, win))
}

/// Window `win` of the table, borrowed, or `None` (for whatever reason: a quick path's
/// test, whose general path tells the error).
#[inline(always)]
fn win_at(win: c_int) -> Option<Ref<'static, WinEntry>> {
    let s = STATE.get()?.try_borrow().ok()?;
    // A negative handle, read as unsigned, lies past the table; slot 0 (`MPI_WIN_NULL`)
    // is always empty.
    Ref::filter_map(s, |s| s.as_ref()?.wins.get(win as u32 as usize)?.as_deref()).ok()
}

/// A window call's common case in the caller's frame, as `MPI_Send`'s: window `win`
/// borrowed and what `check` finds in the arguments for the Rust API's call, or `None`
/// where they need the general path (which also tells every argument's error; a handle
/// that names no window, too). The caller makes the call and returns [`done`] of it, so
/// that no path leads from the call to the general one, which would keep every argument
/// alive across it.
#[inline(always)]
fn quick<A>(win: c_int, check: impl FnOnce(&WinEntry) -> Option<A>) -> Option<(Ref<'static, WinEntry>, A)> {
    let w = win_at(win)?;
    let a = check(&w)?;
    Some((w, a))
}

/// The code of a [`quick`] call's result `r`: `MPI_SUCCESS`, or the error under the
/// window's handler.
#[inline(always)]
fn done(name: &str, win: c_int, w: Ref<'static, WinEntry>, r: Result<(), crate::Error>) -> c_int {
    if r.is_ok() {
        return super::MPI_SUCCESS;
    }
    failed_on(name, win, w, r)
}

/// [`quick`]'s error: `r` under window `win`'s handler.
#[cold]
#[inline(never)]
fn failed_on(name: &str, win: c_int, w: Ref<'static, WinEntry>, r: Result<(), crate::Error>) -> c_int {
    let errhandler = w.errhandler;
    drop(w);
    super::finish_under(name, COMM_WORLD, Some((win, errhandler)), r.map_err(Fail::from))
}

/// Where `count` elements of a predefined datatype of a single run at displacement `disp`
/// lie in target `target`'s window, if they are `bytes` bytes (the origin's: `origin`
/// (count, datatype), whose bytes the caller found): the target and the offset. `None`
/// for any other case, which [`target_of`] takes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn plain_target(
    w: &WinEntry,
    target: c_int,
    disp: isize,
    count: c_int,
    datatype: c_int,
    origin: (c_int, c_int),
    bytes: usize,
) -> Option<(usize, usize)> {
    // The target's data as the origin's (the usual call) needs no second look at the type.
    if (count, datatype) != origin && super::plain_len(count, datatype)? != bytes {
        return None;
    }
    // A negative rank, read as unsigned, lies past the window's ranks.
    let t = target as u32 as usize;
    let at = usize::try_from(disp).ok()?.checked_mul(*w.units.get(t)?)?;
    Some((t, at))
}

/// Why [`win_ref`] found no window.
#[cold]
#[inline(never)]
fn no_win(name: &str, win: c_int) -> Fail {
    match with_state(name, |_| ()) {
        Err(fail) => fail,
        Ok(()) => Fail::new(ERR_WIN, format!("{name}: {win} is not a window")),
    }
}

/// Where `count` elements of datatype `datatype` at displacement `disp` lie in target
/// `target`'s window, as [`target_runs`]; a predefined type's without building it.
#[inline(always)]
fn target_of(w: &WinEntry, target: c_int, disp: isize, count: c_int, datatype: c_int) -> Res<Target> {
    match predefined_size(datatype) {
        Some(size) => {
            let (t, at) = target_at(w, target, disp)?;
            let bytes = count_of(count)? * size;
            Ok(Target { rank: t, runs: Runs::One((at, bytes)), bytes })
        }
        None => target_runs(w, target, disp, count, &Datatype::of(datatype)?),
    }
}

/// Target `target` (checked against the window) and the byte offset of displacement
/// `disp` in its window.
#[inline(always)]
fn target_at(w: &WinEntry, target: c_int, disp: isize) -> Res<(usize, usize)> {
    let t = usize::try_from(target)
        .ok()
        .filter(|&t| t < w.units.len())
        .ok_or_else(|| Fail::new(ERR_RANK, format!("invalid target rank {target} of {}", w.units.len())))?;
    let at = usize::try_from(disp)
        .ok()
        .and_then(|d| d.checked_mul(w.units[t]))
        .ok_or_else(|| Fail::new(ERR_DISP, format!("invalid displacement {disp}")))?;
    Ok((t, at))
}

/// The accumulate of operation `op` on target datatype `datatype`, and where `count` of its
/// elements at displacement `disp` lie in target `target`'s window: from the static tables
/// for a predefined operation on a predefined type of numbers, else from the built type.
/// Of value-index pairs, also how the target's runs hold them ([`Pairs`]).
#[inline(always)]
fn accumulate_at(
    w: &WinEntry,
    op: c_int,
    target: c_int,
    disp: isize,
    count: c_int,
    datatype: c_int,
) -> Res<(DynAcc, Target, Option<Pairs>)> {
    match accumulate_basic(op, datatype) {
        Some(how) => Ok((how, target_of(w, target, disp, count, datatype)?, None)),
        None => {
            let ty = Datatype::of(datatype)?;
            let how = accumulate_of(op, &ty)?;
            if let Some(value) = pairs_in(&ty) {
                let (t, at) = target_at(w, target, disp)?;
                let (runs, pairs) = Pairs::at(value, at, count_of(count)?, &ty)?;
                let bytes = runs.iter().map(|r| r.1).sum();
                let runs = match *runs {
                    [run] => Runs::One(run),
                    _ => Runs::Many(runs),
                };
                return Ok((how, Target { rank: t, runs, bytes }, Some(pairs)));
            }
            Ok((how, target_runs(w, target, disp, count, &ty)?, None))
        }
    }
}

/// Value-index pairs at an accumulate's target. The kernels combine them as C lays its
/// structs out, so each of the target's runs holds structs `stride` bytes apart, the last
/// one's trailing padding not in the run; and the operands go as those runs' bytes. A type
/// packs each pair as its value then its index, and an operand of any type of pairs is
/// rearranged from that.
struct Pairs {
    value: PairValue,
    /// How many structs each run of the target holds.
    structs: Vec<usize>,
}

impl Pairs {
    /// The runs (offset in the window, bytes) of `count` elements of `ty`, each a pair of
    /// `value`, from offset `at`, and how many structs each holds: of a pair type (or a
    /// duplicate), one run of them all; else a struct starts where the type's packed data
    /// reaches a multiple of a pair's packed size, and structs a struct's size apart share a
    /// run.
    fn at(value: PairValue, at: usize, count: usize, ty: &Datatype) -> Res<(Vec<(usize, usize)>, Pairs)> {
        if pair_of(ty).is_some() {
            return Ok((vec![(at, value.span(count))], Pairs { value, structs: vec![count] }));
        }
        let (unit, (_, stride)) = (value.size() + 4, value.c_struct());
        let bad = || Fail::new(ERR_DISP, format!("{} reaches before the window", ty.name));
        // (first struct's offset, structs) of each run.
        let (mut groups, mut pos) = (Vec::<(usize, usize)>::new(), 0usize);
        for (off, len) in ty.layout().runs_of(count) {
            let mut next = pos.next_multiple_of(unit);
            while next < pos + len {
                let s = at.checked_add_signed(off + (next - pos) as isize).ok_or_else(bad)?;
                match groups.last_mut() {
                    Some((first, k)) if *first + *k * stride == s => *k += 1,
                    _ => groups.push((s, 1)),
                }
                next += unit;
            }
            pos += len;
        }
        let runs = groups.iter().map(|&(s, k)| (s, value.span(k))).collect();
        Ok((runs, Pairs { value, structs: groups.into_iter().map(|g| g.1).collect() }))
    }

    /// Whether an operand or result of `count` elements of `datatype` lies as the target's
    /// runs want it already: pairs of the same value, in one run.
    fn direct(&self, count: c_int, datatype: c_int) -> bool {
        let named = || Datatype::of(datatype).ok().and_then(|t| pair_of(&t));
        matches!(*self.structs, [k] if usize::try_from(count) == Ok(k)) && named() == Some(self.value)
    }

    /// The runs' bytes of `packed` pairs (each its value then its index).
    fn structs(&self, name: &str, packed: &[u8]) -> Res<Vec<u8>> {
        let (n, (at, stride)) = (self.value.size(), self.value.c_struct());
        same(name, packed.len(), self.structs.iter().sum::<usize>() * (n + 4))?;
        let mut out = Vec::new();
        let mut pairs = packed.chunks_exact(n + 4);
        for &k in &self.structs {
            let run = out.len();
            out.resize(run + self.value.span(k), 0);
            for (i, p) in (&mut pairs).take(k).enumerate() {
                let s = run + i * stride;
                out[s..s + n].copy_from_slice(&p[..n]);
                out[s + at..s + at + 4].copy_from_slice(&p[n..]);
            }
        }
        Ok(out)
    }

    /// The pairs, packed, of the runs' bytes `runs` (as [`Pairs::structs`] made them).
    fn packed(&self, runs: &[u8]) -> Vec<u8> {
        let (n, (at, stride)) = (self.value.size(), self.value.c_struct());
        let mut out = Vec::with_capacity(self.structs.iter().sum::<usize>() * (n + 4));
        let mut run = 0;
        for &k in &self.structs {
            for i in 0..k {
                let s = run + i * stride;
                out.extend_from_slice(&runs[s..s + n]);
                out.extend_from_slice(&runs[s + at..s + at + 4]);
            }
            run += self.value.span(k);
        }
        out
    }
}

/// An accumulate's operand of `count` elements of `datatype` at `buf`: as [`message`]
/// packs them; of value-index pairs, as the target's runs hold them ([`Pairs`]): the
/// caller's bytes where they lie so already.
///
/// # Safety
/// As [`message`].
unsafe fn operand<'a>(
    name: &str,
    buf: *const c_void,
    count: c_int,
    datatype: c_int,
    pairs: Option<&Pairs>,
) -> Res<Cow<'a, [u8]>> {
    match pairs {
        // SAFETY: this function's contract: `count` elements of the pair type at `buf`,
        // whose data spans these bytes.
        Some(p) if p.direct(count, datatype) => unsafe { super::run_at(buf, 0, p.value.span(count_of(count)?)) },
        // SAFETY: this function's contract.
        Some(p) => Ok(Cow::Owned(p.structs(name, &unsafe { message(buf, count, datatype) }?)?)),
        // SAFETY: this function's contract.
        None => unsafe { message(buf, count, datatype) },
    }
}

/// Where an accumulate's result of `count` elements of `datatype` at `buf` lands, as
/// [`landing`]; of value-index pairs, the target's runs' bytes, the caller's where they lie
/// so already (the kernels write no padding), else a copy that [`Fetched::land`] unpacks.
///
/// # Safety
/// As [`landing`].
unsafe fn result_of<'a, 'p>(
    buf: *mut c_void,
    count: c_int,
    datatype: c_int,
    pairs: Option<&'p Pairs>,
    bytes: usize,
) -> Res<Fetched<'a, 'p>> {
    Ok(match pairs {
        Some(p) if !p.direct(count, datatype) => {
            Fetched::Pairs { runs: vec![0; bytes], pairs: p, buf, count, datatype }
        }
        Some(p) => {
            // SAFETY: this function's contract: `count` writable elements of the pair type.
            Fetched::Bytes(super::Landing::Direct(unsafe { super::raw_mut(buf, p.value.span(count_of(count)?))? }))
        }
        // SAFETY: this function's contract.
        None => Fetched::Bytes(unsafe { landing(buf, count, datatype)? }),
    })
}

/// Where an accumulate's result lands ([`result_of`]).
enum Fetched<'a, 'p> {
    Bytes(super::Landing<'a>),
    /// Of value-index pairs: the target's runs' bytes, unpacked into `count` elements of
    /// `datatype` at `buf` when done.
    Pairs {
        runs: Vec<u8>,
        pairs: &'p Pairs,
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
    },
}

impl Fetched<'_, '_> {
    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Fetched::Bytes(l) => l,
            Fetched::Pairs { runs, .. } => runs,
        }
    }

    /// Puts the result where the caller wants it.
    ///
    /// # Safety
    /// As [`result_of`]'s.
    unsafe fn land(self, name: &str) -> Res {
        if let Fetched::Pairs { runs, pairs, buf, count, datatype } = self {
            // SAFETY: this function's contract.
            let mut l = unsafe { landing(buf, count, datatype)? };
            let packed = pairs.packed(&runs);
            same(name, packed.len(), l.len())?;
            l.copy_from_slice(&packed);
        }
        Ok(())
    }
}

/// Makes a window: every rank's displacement unit is exchanged, the handle written to `out`.
///
/// # Safety
/// `out` points to an `MPI_Win`.
unsafe fn new_win(
    name: &str,
    comm: &Comm,
    win: Window<'static, u8>,
    hints: super::info::Pairs,
    unit: c_int,
    flavor: c_int,
    out: *mut c_int,
) -> Res {
    let unit = usize::try_from(unit)
        .ok()
        .filter(|&u| u > 0)
        .ok_or_else(|| Fail::new(ERR_ARG, format!("{name}: displacement unit {unit}")))?;
    let mut units = vec![0u64; comm.size()];
    comm.allgather(&[unit as u64], &mut units)?;
    let (base, size) = (win.local_ptr().cast::<c_void>(), win.local_len() as isize);
    let units = units.into_iter().map(|u| u as usize).collect();
    let entry = WinEntry {
        win,
        units,
        base,
        size,
        unit: unit as c_int,
        flavor,
        errhandler: ERRORS_ARE_FATAL,
        name: String::new(),
        hints,
    };
    let h = with_state(name, |s| {
        s.wins.push(Some(Box::new(entry)));
        (s.wins.len() - 1) as c_int
    })?;
    // SAFETY: this function's contract.
    unsafe { put(out, h) }
}

/// Where `count` elements of `ty` at displacement `disp` lie in target `target`'s window:
/// the target, the runs of bytes (offset in the window, length) in the order of the type
/// map, and their total.
fn target_runs(w: &WinEntry, target: c_int, disp: isize, count: c_int, ty: &Datatype) -> Res<Target> {
    let (t, at) = target_at(w, target, disp)?;
    let bad = || Fail::new(ERR_DISP, format!("invalid displacement {disp}"));
    ty.usable()?;
    let count = count_of(count)?;
    let runs = match (&ty.derived, ty.contiguous_at(count)) {
        (_, Some(off)) => Runs::One((at.checked_add_signed(off).ok_or_else(bad)?, count * ty.size)),
        (Some(d), None) => Runs::Many(
            d.layout
                .runs_of(count)
                .map(|(off, len)| Ok((at.checked_add_signed(off).ok_or_else(bad)?, len)))
                .collect::<Res<_>>()?,
        ),
        (None, None) => unreachable!("a predefined type is contiguous"),
    };
    Ok(Target { rank: t, runs, bytes: count * ty.size })
}

/// The runs of bytes a target's data lies in: one (no allocation on the common path), or
/// a derived type's several.
enum Runs {
    One((usize, usize)),
    Many(Vec<(usize, usize)>),
}

impl Runs {
    fn as_slice(&self) -> &[(usize, usize)] {
        match self {
            Runs::One(run) => std::slice::from_ref(run),
            Runs::Many(v) => v,
        }
    }
}

/// The target of a one-sided operation ([`target_runs`]).
struct Target {
    rank: usize,
    runs: Runs,
    bytes: usize,
}

impl Target {
    /// Runs `f` on each run of the target with the origin's bytes for it (the origin's
    /// packed data, `origin` bytes, must match the target's).
    #[inline(always)]
    fn each(&self, name: &str, origin: usize, mut f: impl FnMut(std::ops::Range<usize>, usize) -> Res) -> Res {
        same(name, origin, self.bytes)?;
        match &self.runs {
            // The common path: one call, its range the whole origin, nothing read back from
            // a list.
            &Runs::One((at, len)) => f(0..len, at),
            Runs::Many(runs) => {
                let mut pos = 0;
                for &(at, len) in runs {
                    f(pos..pos + len, at)?;
                    pos += len;
                }
                Ok(())
            }
        }
    }
}

/// Checks that an origin of `origin` bytes matches a target of `target` bytes (both sides'
/// data must agree in size).
#[inline(always)]
fn same(name: &str, origin: usize, target: usize) -> Res {
    if origin != target {
        return Err(differ(name, origin, target));
    }
    Ok(())
}

/// [`same`]'s error.
#[cold]
#[inline(never)]
fn differ(name: &str, origin: usize, target: usize) -> Fail {
    Fail::new(ERR_ARG, format!("{name}: {origin} bytes at the origin, {target} at the target"))
}

/// A target rank argument (the window checks it against its communicator).
fn rank_arg(rank: c_int) -> Res<usize> {
    usize::try_from(rank).map_err(|_| Fail::new(ERR_RANK, format!("invalid rank {rank}")))
}

/// `MPI_Win_lock`'s type.
fn lock_type(t: c_int) -> Res<LockType> {
    match t {
        LOCK_EXCLUSIVE => Ok(LockType::Exclusive),
        LOCK_SHARED => Ok(LockType::Shared),
        // MPI_ERR_ARG as MPICH gives (MPI defines MPI_ERR_LOCKTYPE, which it does not use).
        _ => Err(Fail::new(ERR_ARG, format!("lock type {t}"))),
    }
}

/// The ranks of `group` in the window's communicator (for post and start).
fn ranks_in(name: &str, w: &WinEntry, group: c_int) -> Res<Vec<usize>> {
    let g = group_of(name, group)?;
    let all: Vec<usize> = (0..g.size()).collect();
    g.translate_ranks(&all, &w.win.comm().comm_group())?
        .into_iter()
        .map(|r| r.ok_or_else(|| Fail::new(ERR_RANK, format!("{name}: the group has a rank outside the window"))))
        .collect()
}

/// Runs window call `name` on `win` and returns its code, an error under the window's
/// error handler (`MPI_COMM_WORLD`'s for a handle that is no window).
fn call_ref(name: &str, win: c_int, f: impl FnOnce(&WinEntry) -> Res) -> c_int {
    let (r, errhandler) = match win_ref(name, win) {
        Ok(w) => (f(&w), Some((win, w.errhandler))),
        Err(fail) => (Err(fail), None),
    };
    finish_under(name, COMM_WORLD, errhandler, r)
}

/// As [`call_ref`], with the window taken out of the table meanwhile (so that `f` may use
/// the state, or change the entry).
pub(super) fn call(name: &str, win: c_int, f: impl FnOnce(&mut WinEntry) -> Res) -> c_int {
    let mut errhandler = None;
    let r = with_win(name, win, |w| {
        errhandler = Some((win, w.errhandler));
        f(w)
    });
    finish_under(name, COMM_WORLD, errhandler, r)
}

/// `f` for window `win`, which must exist, with nothing of the state borrowed (`f` may run
/// functions of the program's), its error under the window's handler.
pub(super) fn on_win(name: &str, win: c_int, f: impl FnOnce() -> Res) -> c_int {
    let handler = win_ref(name, win).map(|w| w.errhandler);
    match handler {
        Ok(h) => finish_under(name, COMM_WORLD, Some((win, h)), f()),
        Err(fail) => finish_under(name, COMM_WORLD, None, Err(fail)),
    }
}

/// `MPI_Win_call_errhandler`: window `win`'s handler on the program's code `code`.
pub(super) fn call_handler(win: c_int, code: c_int) -> c_int {
    const NAME: &str = "MPI_Win_call_errhandler";
    match win_ref(NAME, win).map(|w| w.errhandler) {
        Ok(h) => super::call_handler(NAME, COMM_WORLD, Some((win, h)), code),
        Err(fail) => finish(NAME, COMM_WORLD, Err(fail)),
    }
}

/// `MPI_Put` in general: derived types, and every argument's error.
///
/// # Safety
/// MPI's contract: the origin buffer holds what its arguments say.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn put_general(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
) -> c_int {
    call_ref("MPI_Put", win, |w| {
        // MPI_PROC_NULL is a valid target of every one-sided operation, which then does
        // nothing (MPI-3.1 11.3); so in each below.
        if target_rank == PROC_NULL {
            return Ok(());
        }
        // SAFETY: this function's contract.
        let data = unsafe { message(origin_addr, origin_count, origin_datatype)? };
        let t = target_of(w, target_rank, target_disp, target_count, target_datatype)?;
        t.each("MPI_Put", data.len(), |r, at| Ok(w.win.put(&data[r], t.rank, at)?))
    })
}

/// `MPI_Get` in general, as [`put_general`].
///
/// # Safety
/// MPI's contract: room at the origin for what its arguments say.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn get_general(
    origin_addr: *mut c_void,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
) -> c_int {
    call_ref("MPI_Get", win, |w| {
        if target_rank == PROC_NULL {
            return Ok(());
        }
        // SAFETY: this function's contract.
        let mut buf = unsafe { landing(origin_addr, origin_count, origin_datatype)? };
        let t = target_of(w, target_rank, target_disp, target_count, target_datatype)?;
        t.each("MPI_Get", buf.len(), |r, at| Ok(w.win.get(&mut buf[r], t.rank, at)?))
    })
}

/// The code of a call on handle `win`, which names no window (or the state cannot be
/// reached), as [`call_ref`] gives it.
#[cold]
#[inline(never)]
fn not_a_window(name: &str, win: c_int) -> c_int {
    finish_under(name, COMM_WORLD, None, Err(no_win(name, win)))
}

/// A flush of target `rank` (`MPI_Win_flush`, `MPI_Win_flush_local`), as `MPI_Put`: a rank
/// that may be one, in the caller's frame; a bad rank or window out of line.
#[inline(always)]
fn flush_one(
    name: &str,
    rank: c_int,
    win: c_int,
    flush: fn(&Window<'static, u8>, usize) -> Result<(), crate::Error>,
) -> c_int {
    if let Some((w, r)) = quick(win, |_| usize::try_from(rank).ok()) {
        let res = flush(&w.win, r);
        return done(name, win, w, res);
    }
    flush_general(name, rank, win, flush)
}

/// A flush of every target (`MPI_Win_flush_all`, `MPI_Win_flush_local_all`).
#[inline(always)]
fn flush_every(name: &str, win: c_int, flush: fn(&Window<'static, u8>) -> Result<(), crate::Error>) -> c_int {
    match win_at(win) {
        Some(w) => {
            let res = flush(&w.win);
            done(name, win, w, res)
        }
        None => not_a_window(name, win),
    }
}

/// A flush of one target in general (`MPI_Win_flush`, `MPI_Win_flush_local`): a bad rank
/// or window, and its error.
#[cold]
#[inline(never)]
fn flush_general(
    name: &str,
    rank: c_int,
    win: c_int,
    flush: fn(&Window<'static, u8>, usize) -> Result<(), crate::Error>,
) -> c_int {
    call_ref(name, win, |w| match rank {
        // No operation to MPI_PROC_NULL is ever outstanding.
        PROC_NULL => Ok(()),
        _ => Ok(flush(&w.win, rank_arg(rank)?)?),
    })
}

mpi! {
    fn MPI_Win_create / PMPI_Win_create(
        base: *mut c_void,
        size: isize,
        disp_unit: c_int,
        info: c_int,
        comm: c_int,
        win: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Win_create", comm)?;
            let in_use = window_hints("MPI_Win_create", info)?;
            let n = usize::try_from(size).map_err(|_| Fail::new(ERR_SIZE, format!("MPI_Win_create: size {size}")))?;
            // SAFETY: MPI's contract: `base` holds `size` bytes, valid until the window is
            // freed (the window stops the engine touching them then).
            let mem: &'static mut [u8] = unsafe { raw_mut(base, n)? };
            let w = Window::create(&c, mem)?;
            // SAFETY: MPI's contract: `win` points to an MPI_Win.
            unsafe { new_win("MPI_Win_create", &c, w, in_use, disp_unit, FLAVOR_CREATE, win) }
        })();
        finish("MPI_Win_create", comm, r)
    }

    fn MPI_Win_allocate / PMPI_Win_allocate(
        size: isize,
        disp_unit: c_int,
        info: c_int,
        comm: c_int,
        baseptr: *mut c_void,
        win: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Win_allocate", comm)?;
            let in_use = window_hints("MPI_Win_allocate", info)?;
            let n = usize::try_from(size).map_err(|_| Fail::new(ERR_SIZE, format!("MPI_Win_allocate: size {size}")))?;
            let w = Window::<u8>::allocate(&c, n)?;
            let base = w.local_ptr().cast::<c_void>();
            // SAFETY: MPI's contract: `baseptr` points to a pointer, `win` to an MPI_Win.
            unsafe {
                put(baseptr.cast::<*mut c_void>(), base)?;
                new_win("MPI_Win_allocate", &c, w, in_use, disp_unit, FLAVOR_ALLOCATE, win)
            }
        })();
        finish("MPI_Win_allocate", comm, r)
    }

    fn MPI_Win_allocate_shared / PMPI_Win_allocate_shared(
        size: isize,
        disp_unit: c_int,
        info: c_int,
        comm: c_int,
        baseptr: *mut c_void,
        win: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Win_allocate_shared", comm)?;
            let in_use = window_hints("MPI_Win_allocate_shared", info)?;
            let n = usize::try_from(size)
                .map_err(|_| Fail::new(ERR_SIZE, format!("MPI_Win_allocate_shared: size {size}")))?;
            let w = Window::<u8>::allocate_shared(&c, n)?;
            let base = w.local_ptr().cast::<c_void>();
            // SAFETY: MPI's contract: `baseptr` points to a pointer, `win` to an MPI_Win.
            unsafe {
                put(baseptr.cast::<*mut c_void>(), base)?;
                new_win("MPI_Win_allocate_shared", &c, w, in_use, disp_unit, FLAVOR_SHARED, win)
            }
        })();
        finish("MPI_Win_allocate_shared", comm, r)
    }

    fn MPI_Win_shared_query / PMPI_Win_shared_query(
        win: c_int,
        rank: c_int,
        size: *mut isize,
        disp_unit: *mut c_int,
        baseptr: *mut c_void,
    ) -> c_int {
        call("MPI_Win_shared_query", win, |w| {
            let not_shared = |r| Fail::new(ERR_OTHER, format!("MPI_Win_shared_query: rank {r}'s memory is not shared"));
            let (r, (p, n)) = if rank == PROC_NULL {
                // The segment of the lowest rank that has memory (MPI-3.1 11.2.3); none: a
                // null base of size 0.
                let mut first = None;
                for r in 0..w.units.len() {
                    let seg = w.win.shared_query(r).ok_or_else(|| not_shared(r))?;
                    if seg.1 > 0 {
                        first = Some((r, seg));
                        break;
                    }
                }
                first.unwrap_or((0, (std::ptr::null_mut(), 0)))
            } else {
                let r = usize::try_from(rank)
                    .ok()
                    .filter(|&r| r < w.units.len())
                    .ok_or_else(|| Fail::new(ERR_RANK, format!("MPI_Win_shared_query: rank {rank}")))?;
                (r, w.win.shared_query(r).ok_or_else(|| not_shared(r))?)
            };
            // SAFETY: MPI's contract: the caller's output pointers.
            unsafe {
                put(size, n as isize)?;
                put(disp_unit, w.units[r] as c_int)?;
                put(baseptr.cast::<*mut c_void>(), p.cast::<c_void>())
            }
        })
    }

    fn MPI_Win_create_dynamic / PMPI_Win_create_dynamic(info: c_int, comm: c_int, win: *mut c_int) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Win_create_dynamic", comm)?;
            let in_use = window_hints("MPI_Win_create_dynamic", info)?;
            let w = Window::create_dynamic(&c)?;
            // SAFETY: MPI's contract: `win` points to an MPI_Win.
            unsafe { new_win("MPI_Win_create_dynamic", &c, w, in_use, 1, FLAVOR_DYNAMIC, win) }
        })();
        finish("MPI_Win_create_dynamic", comm, r)
    }

    fn MPI_Win_attach / PMPI_Win_attach(win: c_int, base: *mut c_void, size: isize) -> c_int {
        call("MPI_Win_attach", win, |w| {
            let n = usize::try_from(size).map_err(|_| Fail::new(ERR_SIZE, format!("MPI_Win_attach: size {size}")))?;
            // SAFETY: MPI's contract: `base` holds `size` bytes, valid until detached (the
            // window stops the engine touching them then).
            let mem: &'static mut [u8] = unsafe { raw_mut(base, n)? };
            w.win.attach(mem)?;
            Ok(())
        })
    }

    fn MPI_Win_detach / PMPI_Win_detach(win: c_int, base: *const c_void) -> c_int {
        call("MPI_Win_detach", win, |w| Ok(w.win.detach(base as usize)?))
    }

    fn MPI_Win_free / PMPI_Win_free(win: *mut c_int) -> c_int {
        if win.is_null() {
            return finish("MPI_Win_free", COMM_WORLD, Err(Fail::new(ERR_ARG, "MPI_Win_free: a null window pointer")));
        }
        // SAFETY: not null (checked): the caller's MPI_Win.
        let h = unsafe { *win };
        // Errors go to the window's handler; one with an epoch open stays as it was.
        on_win("MPI_Win_free", h, || {
            win_ref("MPI_Win_free", h)?.win.may_free()?;
            super::attr::delete_all("MPI_Win_free", super::attr::Object::Win, h)?;
            let entry = with_state("MPI_Win_free", |s| s.wins.get_mut(h as usize).and_then(Option::take))?
                .ok_or_else(|| Fail::new(ERR_WIN, format!("MPI_Win_free: {h} is not a window")))?;
            entry.win.free()?;
            // SAFETY: as above.
            unsafe { *win = 0 };
            Ok(())
        })
    }

    fn MPI_Win_get_group / PMPI_Win_get_group(win: c_int, group: *mut c_int) -> c_int {
        call("MPI_Win_get_group", win, |w| {
            let g = w.win.comm().comm_group();
            // SAFETY: MPI's contract: `group` points to an MPI_Group.
            unsafe { super::new_group("MPI_Win_get_group", g, group) }
        })
    }

    fn MPI_Win_set_errhandler / PMPI_Win_set_errhandler(win: c_int, errhandler: c_int) -> c_int {
        call("MPI_Win_set_errhandler", win, |w| {
            with_state("MPI_Win_set_errhandler", |s| super::errh::settable(s, errhandler, super::errh::Kind::Win))??;
            w.errhandler = errhandler;
            Ok(())
        })
    }

    fn MPI_Win_get_errhandler / PMPI_Win_get_errhandler(win: c_int, errhandler: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: `errhandler` points to an MPI_Errhandler.
        call("MPI_Win_get_errhandler", win, |w| unsafe { put(errhandler, w.errhandler) })
    }

    fn MPI_Win_get_attr / PMPI_Win_get_attr(win: c_int, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) -> c_int {
        call("MPI_Win_get_attr", win, |w| {
            let value: *mut c_void = match keyval {
                WIN_BASE => w.base,
                WIN_SIZE => (&w.size as *const isize).cast_mut().cast(),
                WIN_DISP_UNIT => (&w.unit as *const c_int).cast_mut().cast(),
                WIN_CREATE_FLAVOR => (&w.flavor as *const c_int).cast_mut().cast(),
                WIN_MODEL => (&WIN_UNIFIED as *const c_int).cast_mut().cast(),
                // SAFETY: MPI's contract: `attribute_val` points to a pointer, `flag` to an int.
                k => return unsafe { super::attr::get_into("MPI_Win_get_attr", super::attr::Object::Win, win, k, attribute_val, flag) },
            };
            // SAFETY: MPI's contract: `attribute_val` points to a pointer, `flag` to an int;
            // the values pointed at live as long as the window.
            unsafe {
                put(attribute_val.cast::<*mut c_void>(), value)?;
                put(flag, 1)
            }
        })
    }

    fn MPI_Put / PMPI_Put(
        origin_addr: *const c_void,
        origin_count: c_int,
        origin_datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        target_count: c_int,
        target_datatype: c_int,
        win: c_int,
    ) -> c_int {
        // A run of a predefined type's elements on both sides, in this frame; every other
        // case and every argument error out of line (`put_general`).
        let found = quick(win, |w| {
            // SAFETY: MPI's contract: the origin buffer holds what it says.
            let data = unsafe { super::plain(origin_addr, origin_count, origin_datatype)? };
            let n = data.len();
            Some((data, plain_target(w, target_rank, target_disp, target_count, target_datatype, (origin_count, origin_datatype), n)?))
        });
        if let Some((w, (data, (t, at)))) = found {
            let r = w.win.put(data, t, at);
            return done("MPI_Put", win, w, r);
        }
        // SAFETY: the same contract, passed on.
        unsafe { put_general(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win) }
    }

    fn MPI_Get / PMPI_Get(
        origin_addr: *mut c_void,
        origin_count: c_int,
        origin_datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        target_count: c_int,
        target_datatype: c_int,
        win: c_int,
    ) -> c_int {
        // As MPI_Put: the common case here, the others in `get_general`.
        let found = quick(win, |w| {
            // SAFETY: MPI's contract: room for what the origin's arguments say.
            let buf = unsafe { super::plain_mut(origin_addr, origin_count, origin_datatype)? };
            let n = buf.len();
            Some((buf, plain_target(w, target_rank, target_disp, target_count, target_datatype, (origin_count, origin_datatype), n)?))
        });
        if let Some((w, (buf, (t, at)))) = found {
            let r = w.win.get(buf, t, at);
            return done("MPI_Get", win, w, r);
        }
        // SAFETY: the same contract, passed on.
        unsafe { get_general(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win) }
    }

    fn MPI_Accumulate / PMPI_Accumulate(
        origin_addr: *const c_void,
        origin_count: c_int,
        origin_datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        target_count: c_int,
        target_datatype: c_int,
        op: c_int,
        win: c_int,
    ) -> c_int {
        call_ref("MPI_Accumulate", win, |w| {
            if target_rank == PROC_NULL {
                return Ok(());
            }
            let (how, t, pairs) = accumulate_at(w, op, target_rank, target_disp, target_count, target_datatype)?;
            // SAFETY: MPI's contract: the origin buffer holds what it says.
            let data = unsafe { operand("MPI_Accumulate", origin_addr, origin_count, origin_datatype, pairs.as_ref())? };
            t.each("MPI_Accumulate", data.len(), |r, at| Ok(w.win.accumulate_dyn(how, &data[r], t.rank, at)?))
        })
    }

    fn MPI_Get_accumulate / PMPI_Get_accumulate(
        origin_addr: *const c_void,
        origin_count: c_int,
        origin_datatype: c_int,
        result_addr: *mut c_void,
        result_count: c_int,
        result_datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        target_count: c_int,
        target_datatype: c_int,
        op: c_int,
        win: c_int,
    ) -> c_int {
        call_ref("MPI_Get_accumulate", win, |w| {
            if target_rank == PROC_NULL {
                return Ok(());
            }
            const NAME: &str = "MPI_Get_accumulate";
            let (how, t, pairs) = accumulate_at(w, op, target_rank, target_disp, target_count, target_datatype)?;
            // SAFETY: MPI's contract: the result buffer holds what it says.
            let mut result = unsafe { result_of(result_addr, result_count, result_datatype, pairs.as_ref(), t.bytes)? };
            // With MPI_NO_OP the origin is not read (and may be null): zeros stand in.
            let data = if op == super::types::OP_NO_OP {
                Cow::Owned(vec![0u8; t.bytes])
            } else {
                // SAFETY: MPI's contract: the origin buffer holds what it says.
                unsafe { operand(NAME, origin_addr, origin_count, origin_datatype, pairs.as_ref())? }
            };
            let out = result.bytes();
            same(NAME, out.len(), t.bytes)?;
            t.each(NAME, data.len(), |r, at| Ok(w.win.get_accumulate_dyn(how, &data[r.clone()], &mut out[r], t.rank, at)?))?;
            // SAFETY: as result_of's above.
            unsafe { result.land(NAME) }
        })
    }

    fn MPI_Fetch_and_op / PMPI_Fetch_and_op(
        origin_addr: *const c_void,
        result_addr: *mut c_void,
        datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        op: c_int,
        win: c_int,
    ) -> c_int {
        call_ref("MPI_Fetch_and_op", win, |w| {
            if target_rank == PROC_NULL {
                return Ok(());
            }
            let (how, t, pairs) = accumulate_at(w, op, target_rank, target_disp, 1, datatype)?;
            // SAFETY: MPI's contract: the result holds one element.
            let mut result = unsafe { result_of(result_addr, 1, datatype, pairs.as_ref(), t.bytes)? };
            // With MPI_NO_OP the origin is not read (and may be null): zeros stand in (as
            // many as the largest element, C's struct of a long double and an int).
            let zeros = [0u8; 32];
            let data = if op == super::types::OP_NO_OP {
                Cow::Borrowed(&zeros[..t.bytes.min(32)])
            } else {
                // SAFETY: MPI's contract: the origin holds one element.
                unsafe { operand("MPI_Fetch_and_op", origin_addr, 1, datatype, pairs.as_ref())? }
            };
            let out = result.bytes();
            t.each("MPI_Fetch_and_op", data.len(), |r, at| {
                Ok(w.win.get_accumulate_dyn(how, &data[r.clone()], &mut out[r], t.rank, at)?)
            })?;
            // SAFETY: as result_of's above.
            unsafe { result.land("MPI_Fetch_and_op") }
        })
    }

    fn MPI_Compare_and_swap / PMPI_Compare_and_swap(
        origin_addr: *const c_void,
        compare_addr: *const c_void,
        result_addr: *mut c_void,
        datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        win: c_int,
    ) -> c_int {
        call_ref("MPI_Compare_and_swap", win, |w| {
            if target_rank == PROC_NULL {
                return Ok(());
            }
            let ty = Datatype::of(datatype)?;
            // MPI compares and swaps integers, logicals, multi-language types and bytes
            // (MPI-3.1 11.3.4): no floating-point or complex number, no derived type.
            let float = matches!(ty.elem, Some(ElemType::F32 | ElemType::F64));
            if ty.elem.is_none() || float || ty.handle >= super::types::FIRST_DERIVED {
                return Err(Fail::new(super::ERR_TYPE, format!("MPI_Compare_and_swap on {}", ty.name)));
            }
            let how = accumulate_of(super::types::OP_REPLACE, &ty)?;
            // SAFETY: MPI's contract: each holds one element.
            let (value, compare, mut result) =
                unsafe { (bytes(origin_addr, 1, &ty)?, bytes(compare_addr, 1, &ty)?, bytes_mut(result_addr, 1, &ty)?) };
            let t = target_runs(w, target_rank, target_disp, 1, &ty)?;
            match *t.runs.as_slice() {
                [(at, _)] => Ok(w.win.compare_and_swap_dyn(how, &value, &compare, &mut result, t.rank, at)?),
                _ => Err(Fail::new(super::ERR_TYPE, "MPI_Compare_and_swap on a type of more than one element")),
            }
        })
    }

    fn MPI_Rput / PMPI_Rput(
        origin_addr: *const c_void,
        origin_count: c_int,
        origin_datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        target_count: c_int,
        target_datatype: c_int,
        win: c_int,
        request: *mut c_int,
    ) -> c_int {
        let rc = passive("MPI_Rput", win, target_rank);
        let rc = if rc != super::MPI_SUCCESS {
            rc
        } else {
            // SAFETY: MPI's contract for the arguments, passed on.
            unsafe {
            PMPI_Put(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
        }
        };
        // SAFETY: MPI's contract: request points to an MPI_Request.
        unsafe { with_request("MPI_Rput", win, rc, request) }
    }

    fn MPI_Rget / PMPI_Rget(
        origin_addr: *mut c_void,
        origin_count: c_int,
        origin_datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        target_count: c_int,
        target_datatype: c_int,
        win: c_int,
        request: *mut c_int,
    ) -> c_int {
        let rc = passive("MPI_Rget", win, target_rank);
        let rc = if rc != super::MPI_SUCCESS {
            rc
        } else {
            // SAFETY: MPI's contract for the arguments, passed on.
            unsafe {
            PMPI_Get(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
        }
        };
        // SAFETY: MPI's contract: request points to an MPI_Request.
        unsafe { with_request("MPI_Rget", win, rc, request) }
    }

    fn MPI_Raccumulate / PMPI_Raccumulate(
        origin_addr: *const c_void,
        origin_count: c_int,
        origin_datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        target_count: c_int,
        target_datatype: c_int,
        op: c_int,
        win: c_int,
        request: *mut c_int,
    ) -> c_int {
        let rc = passive("MPI_Raccumulate", win, target_rank);
        let rc = if rc != super::MPI_SUCCESS {
            rc
        } else {
            // SAFETY: MPI's contract for the arguments, passed on.
            unsafe {
            PMPI_Accumulate(
                origin_addr,
                origin_count,
                origin_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                op,
                win,
            )
        }
        };
        // SAFETY: MPI's contract: request points to an MPI_Request.
        unsafe { with_request("MPI_Raccumulate", win, rc, request) }
    }

    fn MPI_Rget_accumulate / PMPI_Rget_accumulate(
        origin_addr: *const c_void,
        origin_count: c_int,
        origin_datatype: c_int,
        result_addr: *mut c_void,
        result_count: c_int,
        result_datatype: c_int,
        target_rank: c_int,
        target_disp: isize,
        target_count: c_int,
        target_datatype: c_int,
        op: c_int,
        win: c_int,
        request: *mut c_int,
    ) -> c_int {
        let rc = passive("MPI_Rget_accumulate", win, target_rank);
        let rc = if rc != super::MPI_SUCCESS {
            rc
        } else {
            // SAFETY: MPI's contract for the arguments, passed on.
            unsafe {
            PMPI_Get_accumulate(
                origin_addr,
                origin_count,
                origin_datatype,
                result_addr,
                result_count,
                result_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                op,
                win,
            )
        }
        };
        // SAFETY: MPI's contract: request points to an MPI_Request.
        unsafe { with_request("MPI_Rget_accumulate", win, rc, request) }
    }

    fn MPI_Win_fence / PMPI_Win_fence(assert: c_int, win: c_int) -> c_int {
        call_ref("MPI_Win_fence", win, |w| Ok(w.win.fence_with(assert_of(assert)?)?))
    }

    fn MPI_Win_lock / PMPI_Win_lock(lock_kind: c_int, rank: c_int, assert: c_int, win: c_int) -> c_int {
        call_ref("MPI_Win_lock", win, |w| {
            let (kind, assert) = (lock_type(lock_kind)?, assert_of(assert)?);
            // A lock of MPI_PROC_NULL (as MPICH and Open MPI take it): an epoch of no target,
            // in which every operation is to MPI_PROC_NULL and does nothing.
            if rank == PROC_NULL {
                return Ok(());
            }
            Ok(w.win.lock_with(kind, rank_arg(rank)?, assert)?)
        })
    }

    fn MPI_Win_unlock / PMPI_Win_unlock(rank: c_int, win: c_int) -> c_int {
        call_ref("MPI_Win_unlock", win, |w| match rank {
            PROC_NULL => Ok(()),
            _ => Ok(w.win.unlock(rank_arg(rank)?)?),
        })
    }

    fn MPI_Win_lock_all / PMPI_Win_lock_all(assert: c_int, win: c_int) -> c_int {
        call_ref("MPI_Win_lock_all", win, |w| Ok(w.win.lock_all_with(assert_of(assert)?)?))
    }

    fn MPI_Win_unlock_all / PMPI_Win_unlock_all(win: c_int) -> c_int {
        call_ref("MPI_Win_unlock_all", win, |w| Ok(w.win.unlock_all()?))
    }

    fn MPI_Win_set_name / PMPI_Win_set_name(win: c_int, win_name: *const std::ffi::c_char) -> c_int {
        call("MPI_Win_set_name", win, |w| {
            // SAFETY: MPI's contract: a NUL-terminated string.
            w.name = unsafe { name_at(win_name)? };
            Ok(())
        })
    }

    fn MPI_Win_get_name / PMPI_Win_get_name(win: c_int, win_name: *mut std::ffi::c_char, resultlen: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: win_name holds MPI_MAX_OBJECT_NAME chars.
        call_ref("MPI_Win_get_name", win, |w| unsafe { write_text(&w.name, win_name, resultlen, MAX_OBJECT_NAME) })
    }

    fn MPI_Win_flush / PMPI_Win_flush(rank: c_int, win: c_int) -> c_int {
        flush_one("MPI_Win_flush", rank, win, Window::flush)
    }

    fn MPI_Win_flush_all / PMPI_Win_flush_all(win: c_int) -> c_int {
        flush_every("MPI_Win_flush_all", win, Window::flush_all)
    }

    fn MPI_Win_flush_local / PMPI_Win_flush_local(rank: c_int, win: c_int) -> c_int {
        flush_one("MPI_Win_flush_local", rank, win, Window::flush_local)
    }

    fn MPI_Win_flush_local_all / PMPI_Win_flush_local_all(win: c_int) -> c_int {
        flush_every("MPI_Win_flush_local_all", win, Window::flush_local_all)
    }

    fn MPI_Win_sync / PMPI_Win_sync(win: c_int) -> c_int {
        call_ref("MPI_Win_sync", win, |w| Ok(w.win.sync()?))
    }

    fn MPI_Win_post / PMPI_Win_post(group: c_int, assert: c_int, win: c_int) -> c_int {
        call("MPI_Win_post", win, |w| Ok(w.win.post_with(&ranks_in("MPI_Win_post", w, group)?, assert_of(assert)?)?))
    }

    fn MPI_Win_start / PMPI_Win_start(group: c_int, assert: c_int, win: c_int) -> c_int {
        call("MPI_Win_start", win, |w| Ok(w.win.start_with(&ranks_in("MPI_Win_start", w, group)?, assert_of(assert)?)?))
    }

    fn MPI_Win_complete / PMPI_Win_complete(win: c_int) -> c_int {
        call_ref("MPI_Win_complete", win, |w| Ok(w.win.complete()?))
    }

    fn MPI_Win_wait / PMPI_Win_wait(win: c_int) -> c_int {
        call_ref("MPI_Win_wait", win, |w| Ok(w.win.wait()?))
    }

    fn MPI_Win_test / PMPI_Win_test(win: c_int, flag: *mut c_int) -> c_int {
        call_ref("MPI_Win_test", win, |w| {
            let done = w.win.test()?;
            // SAFETY: MPI's contract: `flag` points to an int.
            unsafe { put(flag, done as c_int) }
        })
    }

    fn MPI_Get_address / PMPI_Get_address(location: *const c_void, address: *mut isize) -> c_int {
        // SAFETY: MPI's contract: `address` points to an MPI_Aint.
        finish("MPI_Get_address", COMM_WORLD, unsafe { put(address, location as isize) })
    }

    fn MPI_Aint_add / PMPI_Aint_add(base: isize, disp: isize) -> isize {
        // Addresses as MPI_Get_address gives them: the sum of an address and a displacement.
        base.wrapping_add(disp)
    }

    fn MPI_Aint_diff / PMPI_Aint_diff(addr1: isize, addr2: isize) -> isize {
        addr1.wrapping_sub(addr2)
    }

    fn MPI_Alloc_mem / PMPI_Alloc_mem(size: isize, info: c_int, baseptr: *mut c_void) -> c_int {
        let r = (|| {
            hints("MPI_Alloc_mem", info)?;
            let n = usize::try_from(size).map_err(|_| Fail::new(ERR_SIZE, format!("MPI_Alloc_mem: size {size}")))?;
            // SAFETY: malloc of at least one byte (MPI allows size 0; a valid pointer is
            // returned all the same); checked for failure below.
            let p = unsafe { libc::malloc(n.max(1)) };
            if p.is_null() {
                return Err(Fail::new(ERR_NO_MEM, format!("MPI_Alloc_mem: {n} bytes")));
            }
            // SAFETY: MPI's contract: `baseptr` points to a pointer.
            unsafe { put(baseptr.cast::<*mut c_void>(), p) }
        })();
        finish("MPI_Alloc_mem", COMM_WORLD, r)
    }

    fn MPI_Free_mem / PMPI_Free_mem(base: *mut c_void) -> c_int {
        // SAFETY: MPI's contract: `base` came from MPI_Alloc_mem (malloc), or is null.
        unsafe { libc::free(base) };
        0
    }
}

/// `MPI_Rput` and the other request-based operations are for passive-target epochs only
/// (MPI-3.1 11.3.5): `MPI_ERR_RMA_SYNC` unless a lock (or lock-all) epoch covers `target`.
fn passive(name: &str, win: c_int, target: c_int) -> c_int {
    call_ref(
        name,
        win,
        |w| if target == PROC_NULL { Ok(()) } else { Ok(w.win.check_passive(rank_arg(target)?, name)?) },
    )
}

/// The request of a request-based one-sided operation that returned `rc`: the window
/// completes the operation locally before it returns, so its request is complete (waiting
/// for it costs nothing; the target sees the data at the next flush or unlock, as MPI says).
/// Failed, `MPI_REQUEST_NULL`.
///
/// # Safety
/// `request` points to an `MPI_Request`.
unsafe fn with_request(name: &str, win: c_int, rc: c_int, request: *mut c_int) -> c_int {
    if rc != super::MPI_SUCCESS {
        // SAFETY: this function's contract (a null pointer is left alone).
        let _ = unsafe { put(request, super::p2p::REQUEST_NULL) };
        return rc;
    }
    // SAFETY: this function's contract.
    call(name, win, |_| unsafe { super::p2p::done_request(name, request) })
}
