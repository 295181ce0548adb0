//! The C ABI (`mpi.h`, `libmpr`): MPI's C bindings over the Rust API, thin. Each function
//! converts handles and buffers, calls the Rust API, and turns its error into an MPI error
//! code under the communicator's error handler. Every function is exported under its
//! profiling name (`PMPI_Send`) and its MPI name (`MPI_Send`, which calls the former), so a
//! profiling library can wrap the MPI names.
//!
//! Handles are small integers (`include/mpi.h` numbers them): communicators index a table
//! of this process; predefined datatypes and operations are fixed. The state lives with the
//! thread that called `MPI_Init` (`MPI_THREAD_FUNNELED`): a call from another thread is an
//! error.
//!
//! Error codes: an error's class, plus 256 x a slot in a small ring of recent messages, so
//! that `MPI_Error_string` gives the message and `MPI_Error_class` the class.

// The exported functions take C's raw pointers; each dereference is checked against null
// where MPI allows null, and otherwise trusts the caller as C's MPI does.
#![allow(clippy::missing_safety_doc)]

mod types;

use std::borrow::Cow;
use std::cell::{Ref, RefCell, UnsafeCell};
use std::ffi::{c_char, c_int, c_void};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::thread::ThreadId;

use crate::{Comm, Error, ErrorClass, Group, Layout, Status, Universe};
use types::{Datatype, ReduceOp, Reduction};

// Values shared with include/mpi.h.
const MPI_SUCCESS: c_int = 0;
const ERR_BUFFER: c_int = 1;
const ERR_COUNT: c_int = 2;
const ERR_TYPE: c_int = 3;
const ERR_TAG: c_int = 4;
const ERR_COMM: c_int = 5;
const ERR_RANK: c_int = 6;
const ERR_ROOT: c_int = 7;
const ERR_OP: c_int = 9;
const ERR_TOPOLOGY: c_int = 10;
const ERR_DIMS: c_int = 11;
const ERR_ARG: c_int = 12;
const ERR_UNKNOWN: c_int = 13;
const ERR_TRUNCATE: c_int = 14;
const ERR_OTHER: c_int = 15;
const ERR_INTERN: c_int = 16;
const ERR_IN_STATUS: c_int = 17;
const ERR_REQUEST: c_int = 19;
const ERR_CONVERSION: c_int = 23;
const ERR_NO_MEM: c_int = 34;
const ERR_WIN: c_int = 45;
const ERR_SIZE: c_int = 51;
const ERR_DISP: c_int = 52;
const ERR_RMA_SYNC: c_int = 50;
const ERR_RMA_RANGE: c_int = 55;
const ERR_KEYVAL: c_int = 48;
const ERR_LOCKTYPE: c_int = 47;
const ERR_ASSERT: c_int = 53;
const ERRX_PROC_FAILED: c_int = 101;
const COMM_WORLD: c_int = 1;
const COMM_SELF: c_int = 2;
const ERRORS_ARE_FATAL: c_int = 1;
const ERRORS_RETURN: c_int = 2;
const ANY_SOURCE: c_int = -1;
const PROC_NULL: c_int = -2;
/// `MPI_ROOT`: the root of a rooted collective on an inter-communicator.
const ROOT: c_int = -3;
const ANY_TAG: c_int = -1;
const UNDEFINED: c_int = -32766;
const COMM_TYPE_SHARED: c_int = 1;
const GROUP_EMPTY: c_int = 1;
const ERR_GROUP: c_int = 8;
const IDENT: c_int = 0;
const CONGRUENT: c_int = 1;
const SIMILAR: c_int = 2;
const UNEQUAL: c_int = 3;
const MAX_OBJECT_NAME: usize = 128;
const KEY_TAG_UB: c_int = 1;
const KEY_WTIME_IS_GLOBAL: c_int = 2;
const KEY_HOST: c_int = 3;
const KEY_IO: c_int = 4;
const KEY_UNIVERSE_SIZE: c_int = 5;
const KEY_LASTUSEDCODE: c_int = 6;
const KEY_APPNUM: c_int = 7;
const THREAD_FUNNELED: c_int = 1;
const MAX_PROCESSOR_NAME: usize = 256;
const MAX_ERROR_STRING: usize = 512;
const MAX_LIBRARY_VERSION_STRING: usize = 8192;
/// `MPI_IN_PLACE`: `(void *)-1`.
const IN_PLACE: *const c_void = usize::MAX as *const c_void;

/// An MPI error on its way to a return code: its class and what happened (boxed: a
/// `Res` of the small-message path stays a word wider than its value).
#[derive(Debug)]
struct Fail(Box<Failure>);

#[derive(Debug)]
struct Failure {
    class: c_int,
    message: String,
}

impl Fail {
    #[cold]
    #[inline(never)]
    fn new(class: c_int, message: impl Into<String>) -> Fail {
        Fail(Box::new(Failure { class, message: message.into() }))
    }
}

impl std::ops::Deref for Fail {
    type Target = Failure;
    fn deref(&self) -> &Failure {
        &self.0
    }
}

impl From<Error> for Fail {
    #[cold]
    #[inline(never)]
    fn from(e: Error) -> Fail {
        let class = match e.class() {
            ErrorClass::Truncate => ERR_TRUNCATE,
            ErrorClass::Rank => ERR_RANK,
            ErrorClass::Tag => ERR_TAG,
            ErrorClass::Count => ERR_COUNT,
            ErrorClass::ProcFailed => ERRX_PROC_FAILED,
            ErrorClass::RmaSync => ERR_RMA_SYNC,
            ErrorClass::RmaRange => ERR_RMA_RANGE,
            ErrorClass::Arg => ERR_ARG,
            ErrorClass::Dims => ERR_DIMS,
            ErrorClass::Comm => ERR_COMM,
            ErrorClass::Bootstrap | ErrorClass::Transport | ErrorClass::Timeout | ErrorClass::Other => ERR_OTHER,
        };
        Fail::new(class, e.to_string())
    }
}

type Res<T = ()> = Result<T, Fail>;

/// A communicator of the table and its error handler. A cache line each: the common call
/// finds its communicator by one shift of the handle, and reads one line.
#[derive(Debug)]
#[repr(align(64))]
struct CommEntry {
    comm: Comm,
    errhandler: c_int,
    /// `MPI_Comm_set_name`'s.
    name: String,
    /// The topology of a communicator `MPI_Cart_create`, `MPI_Cart_sub`, `MPI_Graph_create`
    /// or `MPI_Dist_graph_create(_adjacent)` made (boxed: the table of entries, which every
    /// call indexes, stays small).
    topo: Option<Box<topo::Topo>>,
}

/// This process's MPI state, owned by the thread that called `MPI_Init`.
#[derive(Debug)]
struct State {
    universe: Universe,
    /// Indexed by handle: 0 is `MPI_COMM_NULL`, 1 `MPI_COMM_WORLD`, 2 `MPI_COMM_SELF`.
    comms: Vec<Option<CommEntry>>,
    /// Indexed by handle: 0 is `MPI_GROUP_NULL`, 1 `MPI_GROUP_EMPTY`.
    groups: Vec<Option<Group>>,
    /// Handle h is slot h - 1 (0 is `MPI_REQUEST_NULL`).
    requests: slab::Slab<p2p::CReq>,
    /// The requests the engine holds alone (sends and receives of one run of bytes in
    /// flight), by the engine's index: handle h (negative) is index -1 - h.
    named: Vec<Option<p2p::Named>>,
    /// `MPI_Buffer_attach`'s buffer and the buffered sends in flight.
    attached: p2p::Attached,
    /// Indexed by handle: 0 is `MPI_WIN_NULL` (boxed: a call takes its window out and puts it back).
    wins: Vec<Option<Box<win::WinEntry>>>,
    /// Indexed by handle: 0 is `MPI_INFO_NULL`, 1 `MPI_INFO_ENV`.
    infos: Vec<Option<info::Pairs>>,
    /// Messages of matching probes: handle h is slot h - 2 (0 is `MPI_MESSAGE_NULL`, 1
    /// `MPI_MESSAGE_NO_PROC`).
    messages: slab::Slab<crate::Message>,
    /// Keys of attributes, by handle from 16 (`MPI_Comm_create_keyval`).
    keyvals: Vec<Option<attr::Keyval>>,
    /// Attribute values of communicators, datatypes and windows.
    attrs: attr::Attrs,
    /// Error handlers of the program's, by handle from 3.
    errhandlers: Vec<Option<errh::Handler>>,
}

/// The [`State`], reached only from the thread that called `MPI_Init` (MPICH's way: one
/// process-wide state and a check of the calling thread, rather than a thread-local, whose
/// lookup in a shared library is a call of its own on every MPI call).
static STATE: Owned = Owned { owner: AtomicUsize::new(0), cell: UnsafeCell::new(RefCell::new(None)) };

/// A cell that one thread owns: the first to call [`Owned::claim`].
struct Owned {
    /// `pthread_self()` of the owner, 0 before one claims it.
    owner: AtomicUsize,
    cell: UnsafeCell<RefCell<Option<State>>>,
}

// SAFETY: the cell is reached only through `Owned::with`, on the thread that owns it, so
// its contents (not `Send`: `Rc`s) are never used by two threads.
unsafe impl Sync for Owned {}

impl Owned {
    /// This thread: a word no other living thread has. Where the C library keeps the
    /// thread's pointer in a register, that register, read in place (as mimalloc reads its
    /// thread id): `pthread_self` is a call, and every argument of an MPI call would have to
    /// be saved around it; elsewhere `pthread_self`.
    #[inline(always)]
    fn me() -> usize {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            let tp: usize;
            // SAFETY: on x86-64 Linux (glibc and musl alike, the TLS ABI) %fs holds the
            // thread's control block, whose first word is its own address (what
            // `pthread_self` returns); a load of one word, no other effect.
            unsafe {
                std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags, pure))
            };
            tp
        }
        #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
        {
            let tp: usize;
            // SAFETY: on aarch64 Linux TPIDR_EL0 holds the thread's pointer, set by the C
            // library for each thread; reading a register, no other effect.
            unsafe {
                std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags, pure))
            };
            tp
        }
        #[cfg(all(target_arch = "aarch64", target_vendor = "apple"))]
        {
            let tp: usize;
            // SAFETY: on Apple's aarch64 systems TPIDRRO_EL0 holds the thread's own data
            // (what `pthread_self` is built on; older kernels kept the CPU's number in its low
            // three bits, masked off); reading a register, no other effect.
            unsafe {
                std::arch::asm!("mrs {}, tpidrro_el0", out(reg) tp, options(nomem, nostack, preserves_flags, pure))
            };
            tp & !7
        }
        #[cfg(not(any(
            all(target_arch = "x86_64", target_os = "linux"),
            all(target_arch = "aarch64", target_os = "linux"),
            all(target_arch = "aarch64", target_vendor = "apple")
        )))]
        {
            // SAFETY: pthread_self has no preconditions and always succeeds.
            unsafe { libc::pthread_self() as usize }
        }
    }

    /// Makes this thread the owner, unless one is already.
    fn claim(&self) -> bool {
        self.owner.compare_exchange(0, Owned::me(), Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The cell, on the owning thread; `None` on any other. (A `&RefCell` is not `Send`: the
    /// reference stays on this thread.)
    #[inline]
    fn get(&'static self) -> Option<&'static RefCell<Option<State>>> {
        if self.owner.load(Ordering::Acquire) != Owned::me() {
            return None;
        }
        // SAFETY: this is the owning thread (checked), the only one that reaches the cell,
        // and the owner never changes once claimed; the RefCell guards re-entry.
        Some(unsafe { &*self.cell.get() })
    }

    /// `f` of the cell, on the owning thread; `None` on any other.
    #[inline]
    fn with<R>(&'static self, f: impl FnOnce(&RefCell<Option<State>>) -> R) -> Option<R> {
        self.get().map(f)
    }
}

static INITIALIZED: AtomicBool = AtomicBool::new(false);
static FINALIZED: AtomicBool = AtomicBool::new(false);
static MAIN_THREAD: std::sync::OnceLock<ThreadId> = std::sync::OnceLock::new();
static PROVIDED: AtomicI32 = AtomicI32::new(0);

/// The recent error messages that codes point at (slot = code / 256 - 1).
static MESSAGES: std::sync::Mutex<(usize, Vec<String>)> = std::sync::Mutex::new((0, Vec::new()));
const MESSAGE_SLOTS: usize = 64;

/// An error code for `fail`: its class, and a slot holding its message.
fn code_of(fail: &Fail) -> c_int {
    // A code already (one the program added, or a function of the program's returned):
    // passed on as it is.
    if fail.class > 0xff {
        return fail.class;
    }
    let mut m = MESSAGES.lock().unwrap_or_else(|p| p.into_inner());
    let slot = m.0 % MESSAGE_SLOTS;
    m.0 += 1;
    if m.1.len() <= slot {
        m.1.resize(slot + 1, String::new());
    }
    m.1[slot] = fail.message.clone();
    fail.class + 256 * (slot as c_int + 1)
}

/// The error classes and codes the program added (`MPI_Add_error_class`,
/// `MPI_Add_error_code`): value [`ADDED_FROM`] + i is entry i, its class (its own value for a
/// class) and the text `MPI_Add_error_string` gave it.
static ADDED: std::sync::Mutex<Vec<(c_int, String)>> = std::sync::Mutex::new(Vec::new());
/// The first value of an added class or code: above `MPI_ERR_LASTCODE` (as MPI asks), past
/// every code of mpr's own (a class, and a message's slot above it).
const ADDED_FROM: c_int = 0x4000_0000;
/// `MPI_LASTUSEDCODE`'s value: the last value added, `MPI_ERR_LASTCODE` before any.
static LAST_USED: AtomicI32 = AtomicI32::new(ADDED_FROM - 1);
/// `MPI_APPNUM`'s value.
static APPNUM: c_int = 0;

/// The class and text of added class or code `code`, if it is one.
fn added(code: c_int) -> Option<(c_int, String)> {
    let i = usize::try_from(code.checked_sub(ADDED_FROM)?).ok()?;
    ADDED.lock().unwrap_or_else(|p| p.into_inner()).get(i).cloned()
}

/// Adds a class (`None`) or a code of class `class`, and gives its value (an error once
/// every value up to `c_int`'s largest is taken).
fn add_error(class: Option<c_int>) -> Res<c_int> {
    let mut a = ADDED.lock().unwrap_or_else(|p| p.into_inner());
    let value = c_int::try_from(a.len())
        .ok()
        .and_then(|n| ADDED_FROM.checked_add(n))
        .ok_or_else(|| Fail::new(ERR_OTHER, "no error code is left to add"))?;
    a.push((class.unwrap_or(value), String::new()));
    LAST_USED.store(value, Ordering::SeqCst);
    Ok(value)
}

/// The class of error code `code` (`MPI_ERR_UNKNOWN` for one mpr does not know).
fn error_class(code: c_int) -> c_int {
    if code >= ADDED_FROM {
        return added(code).map_or(ERR_UNKNOWN, |(class, _)| class);
    }
    let class = code & 0xff;
    if class_text(class) == "unknown error" {
        ERR_UNKNOWN
    } else {
        class
    }
}

/// The text of an error class.
fn class_text(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "no error",
        ERR_BUFFER => "invalid buffer pointer",
        ERR_COUNT => "invalid count argument",
        ERR_TYPE => "invalid datatype",
        ERR_TAG => "invalid tag",
        ERR_COMM => "invalid communicator",
        ERR_RANK => "invalid rank",
        ERR_ROOT => "invalid root",
        ERR_GROUP => "invalid group",
        ERR_OP => "invalid reduce operation",
        ERR_TOPOLOGY => "invalid topology",
        ERR_DIMS => "invalid dimension argument",
        ERR_ARG => "invalid argument",
        ERR_TRUNCATE => "message truncated",
        ERR_OTHER => "other error",
        ERR_INTERN => "internal error",
        ERR_IN_STATUS => "error code is in status",
        18 => "pending request",
        ERR_REQUEST => "invalid request",
        ERR_NO_MEM => "out of memory",
        28 => "invalid info object",
        29 => "invalid info key",
        30 => "invalid info value",
        31 => "no such info key",
        20 => "permission denied",
        21 => "invalid file access mode",
        22 => "invalid file name",
        23 => "data conversion failed",
        24 => "data representation already defined",
        25 => "file exists",
        26 => "file in use",
        27 => "invalid file handle",
        32 => "input/output error",
        33 => "invalid name",
        35 => "collective argument not identical on all processes",
        36 => "no space left",
        37 => "no such file",
        38 => "invalid port",
        39 => "quota exceeded",
        40 => "read-only file or file system",
        41 => "invalid service name",
        42 => "spawn failed",
        43 => "unsupported data representation",
        44 => "unsupported operation",
        46 => "invalid base address",
        ERR_LOCKTYPE => "invalid lock type",
        ERR_KEYVAL => "invalid attribute key",
        49 => "conflicting accesses to a window",
        ERR_ASSERT => "invalid assertion",
        56 => "memory cannot be attached",
        57 => "memory cannot be shared",
        58 => "operation not allowed for this window's flavor",
        ERR_WIN => "invalid window",
        ERR_SIZE => "invalid size",
        ERR_DISP => "invalid displacement",
        ERR_RMA_SYNC => "wrong synchronization of RMA calls",
        ERR_RMA_RANGE => "target memory is not part of the window",
        ERRX_PROC_FAILED => "process failure",
        c if c >= ADDED_FROM => "an error class of the program's",
        _ => "unknown error",
    }
}

/// Runs `f` with the state; outside `MPI_Init`..`MPI_Finalize` or on another thread, the
/// error every MPI call then gets.
fn with_state<R>(name: &str, f: impl FnOnce(&mut State) -> R) -> Result<R, Fail> {
    let Some(cell) = STATE.get() else { return Err(no_state(name)) };
    let Ok(mut state) = cell.try_borrow_mut() else { return Err(reentered(name)) };
    state.as_mut().map(f).ok_or_else(|| no_state(name))
}

/// The error of an MPI call made while another holds the state: from a function of the
/// program's that an MPI call runs (a reduction's, an attribute's), where MPI allows none
/// but the simplest.
#[cold]
#[inline(never)]
fn reentered(name: &str) -> Fail {
    Fail::new(ERR_OTHER, format!("{name} from inside a function of the program's that an MPI call runs"))
}

/// Why [`with_state`] found no state.
#[cold]
#[inline(never)]
fn no_state(name: &str) -> Fail {
    if FINALIZED.load(Ordering::SeqCst) {
        Fail::new(ERR_OTHER, format!("{name} after MPI_Finalize"))
    } else if INITIALIZED.load(Ordering::SeqCst) {
        Fail::new(ERR_OTHER, format!("{name} from a thread other than MPI_Init's (mpr provides MPI_THREAD_FUNNELED)"))
    } else {
        Fail::new(ERR_OTHER, format!("{name} before MPI_Init"))
    }
}

/// The communicator of handle `comm` (a clone: the table is not borrowed while it works).
#[inline]
fn comm_of(name: &str, comm: c_int) -> Res<Comm> {
    comm_ref(name, comm).map(|c| c.clone())
}

/// The communicator of handle `comm`, borrowed from the table: for a call that changes no
/// table while it works (on the small-message path, the clone of [`comm_of`] costs as much
/// as the rest of the call).
#[inline(always)]
fn comm_ref(name: &str, comm: c_int) -> Res<Ref<'static, Comm>> {
    comm_at(comm).ok_or_else(|| no_comm(name, comm))
}

/// The communicator of handle `comm`, borrowed from the table, or `None` (for whatever
/// reason: a quick path's test, whose general path tells the error).
#[inline(always)]
fn comm_at(comm: c_int) -> Option<Ref<'static, Comm>> {
    let s = STATE.get()?.try_borrow().ok()?;
    Ref::filter_map(s, |s| Some(&s.as_ref()?.entry(comm)?.comm)).ok()
}

/// Why [`comm_of`] found no communicator.
#[cold]
#[inline(never)]
fn no_comm(name: &str, comm: c_int) -> Fail {
    match STATE.get().map(|s| s.try_borrow().map(|s| s.is_some())) {
        None | Some(Ok(false)) => no_state(name),
        Some(Err(_)) => reentered(name),
        Some(Ok(true)) => bad_comm(name, comm),
    }
}

/// The communicator of handle `comm`, which must be an intra-communicator: for the calls
/// mpr offers on intra-communicators alone, refused before any count or displacement of
/// the other group's size is read.
fn intra_of(name: &str, comm: c_int) -> Res<Comm> {
    let c = comm_of(name, comm)?;
    c.intra(name)?;
    Ok(c)
}

/// The error of a call that needs an inter-communicator on an intra-communicator.
#[cold]
fn intra_only(name: &str) -> Fail {
    Fail::new(ERR_COMM, format!("{name} of an intra-communicator"))
}

/// The root of a rooted collective on an inter-communicator: `MPI_ROOT`, `MPI_PROC_NULL`
/// (another rank of the root's group), or a rank of the other group.
fn inter_root(c: &Comm, root: c_int) -> Res<crate::InterRoot> {
    match root {
        ROOT => Ok(crate::InterRoot::Here),
        PROC_NULL => Ok(crate::InterRoot::Beside),
        r => usize::try_from(r).ok().filter(|&r| r < c.peers().len()).map(crate::InterRoot::Remote).ok_or_else(|| {
            Fail::new(ERR_ROOT, format!("invalid root {root}: the other group has {} ranks", c.peers().len()))
        }),
    }
}

/// The error of a handle `comm` that names no communicator.
#[cold]
#[inline(never)]
fn bad_comm(name: &str, comm: c_int) -> Fail {
    Fail::new(ERR_COMM, format!("{name}: {comm} is not a communicator"))
}

impl State {
    /// The table's entry of communicator handle `comm`, if it names one.
    #[inline(always)]
    fn entry(&self, comm: c_int) -> Option<&CommEntry> {
        // A negative handle, read as unsigned, lies past the table: one comparison for both.
        self.comms.get(comm as u32 as usize)?.as_ref()
    }

    /// As [`State::entry`], to change.
    fn entry_mut(&mut self, comm: c_int) -> Option<&mut CommEntry> {
        self.comms.get_mut(usize::try_from(comm).ok()?)?.as_mut()
    }

    /// The communicator of handle `comm`, for a call that works within its borrow of the
    /// state (one borrow where [`comm_ref`] and then [`with_state`] would take two).
    #[inline(always)]
    fn comm(&self, name: &str, comm: c_int) -> Res<&Comm> {
        self.entry(comm).map(|e| &e.comm).ok_or_else(|| bad_comm(name, comm))
    }
}

/// The return code of MPI function `name` on `comm` for `result`: an error goes through
/// the communicator's error handler (`MPI_ERRORS_ARE_FATAL` ends the job, naming the rank
/// and the error; `MPI_ERRORS_RETURN` returns its code).
#[inline]
fn finish(name: &str, comm: c_int, result: Res) -> c_int {
    finish_under(name, comm, None, result)
}

/// As [`finish`], under window `win`'s error handler if given (its handle, its handler)
/// rather than `comm`'s.
#[inline]
fn finish_under(name: &str, comm: c_int, win: Option<(c_int, c_int)>, result: Res) -> c_int {
    match result {
        Ok(()) => MPI_SUCCESS,
        Err(fail) => failed(name, comm, win, fail),
    }
}

/// Where an error on `comm` (or on window `win`: its handle and handler) goes: the
/// handler, the object it is called on, the communicator a fatal one aborts, this rank, and
/// the function if the handler is the program's. An error on no valid communicator goes
/// to `MPI_COMM_WORLD`'s handler. `None` without MPI state.
fn handler_of(
    comm: c_int,
    win: Option<(c_int, c_int)>,
) -> Option<(c_int, c_int, Comm, usize, Option<errh::HandlerFn>)> {
    STATE
        .with(|s| {
            let s = s.try_borrow().ok()?;
            let s = s.as_ref()?;
            let (comm, entry) = match s.entry(comm) {
                Some(e) => (comm, e),
                None => (COMM_WORLD, s.comms[COMM_WORLD as usize].as_ref()?),
            };
            let (object, handler) = win.unwrap_or((comm, entry.errhandler));
            Some((handler, object, entry.comm.clone(), s.universe.world().rank(), errh::user(s, handler)))
        })
        .flatten()
}

/// [`finish_under`] of an error.
#[cold]
#[inline(never)]
fn failed(name: &str, comm: c_int, win: Option<(c_int, c_int)>, fail: Fail) -> c_int {
    match handler_of(comm, win) {
        Some((ERRORS_RETURN, ..)) => code_of(&fail),
        Some((_, object, _, _, Some(f))) => {
            // The program's handler, then the code returned, as MPI says.
            let code = code_of(&fail);
            errh::call(f, object, code);
            code
        }
        Some((_, _, comm, rank, None)) => fatal(name, &comm, rank, &fail),
        None => {
            // No MPI state (before MPI_Init, after MPI_Finalize, another thread): fatal.
            crate::say::say!("mpr: fatal error in {name}: {}", fail.message);
            std::process::exit(fail.class)
        }
    }
}

/// Ends the job for error `fail` in `name`, naming this rank.
fn fatal(name: &str, comm: &Comm, rank: usize, fail: &Fail) -> ! {
    crate::say::say!("mpr: rank {rank}: fatal error in {name}: {} ({})", fail.message, class_text(fail.class));
    // The launcher's line names the call; the message is in the line above (PMI carries
    // no spaces).
    // An exit status keeps 8 bits: a class of the program's (above them) ends the job with 1.
    comm.abort_because(if (1..=255).contains(&fail.class) { fail.class } else { 1 }, name)
}

/// `MPI_Comm_call_errhandler` and `MPI_Win_call_errhandler`: the handler of `comm` (or of
/// window `win`) on the program's code `code`. `MPI_SUCCESS` once the handler returns.
fn call_handler(name: &str, comm: c_int, win: Option<(c_int, c_int)>, code: c_int) -> c_int {
    if win.is_none() {
        if let Err(fail) = comm_ref(name, comm).map(drop) {
            return failed(name, COMM_WORLD, None, fail);
        }
    }
    match handler_of(comm, win) {
        Some((ERRORS_RETURN, ..)) => MPI_SUCCESS,
        Some((_, object, _, _, Some(f))) => {
            errh::call(f, object, code);
            MPI_SUCCESS
        }
        Some((_, _, comm, rank, None)) => {
            let class = error_class(code);
            let text =
                added(code).map(|(_, t)| t).filter(|t| !t.is_empty()).map_or(String::new(), |t| format!(": {t}"));
            fatal(name, &comm, rank, &Fail::new(class, format!("the program's error code {code}{text}")))
        }
        None => failed(name, comm, None, no_state(name)),
    }
}

/// A rank argument: `MPI_ANY_SOURCE`, `MPI_PROC_NULL` (None) or a rank (checked by the
/// Rust API against the communicator).
fn peer(rank: c_int, any_ok: bool) -> Res<Option<usize>> {
    match rank {
        PROC_NULL => Ok(None),
        ANY_SOURCE if any_ok => Ok(Some(crate::ANY_SOURCE)),
        r if r >= 0 => Ok(Some(r as usize)),
        r => Err(Fail::new(ERR_RANK, format!("invalid rank {r}"))),
    }
}

fn count_of(count: c_int) -> Res<usize> {
    usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, format!("negative count {count}")))
}

/// The message `count` elements of `ty` at `buf` make: the caller's bytes where they are
/// one run, else a packed copy.
///
/// # Safety
/// `buf` must point to `count` elements of `ty` (MPI's contract with the caller).
#[inline]
unsafe fn bytes<'a>(buf: *const c_void, count: usize, ty: &Datatype) -> Res<Cow<'a, [u8]>> {
    if buf == IN_PLACE {
        return Err(in_place_here());
    }
    let n = count * ty.size;
    let off = match &ty.derived {
        None => 0,
        // SAFETY: this function's contract.
        Some(_) => return unsafe { derived_bytes(buf, count, ty) },
    };
    // SAFETY: this function's contract, and `off` is where the one run of data starts.
    unsafe { run_at(buf, off, n) }
}

/// The message `count` elements of datatype `datatype` at `buf` make, as [`bytes`].
///
/// # Safety
/// As [`bytes`].
#[inline(always)]
unsafe fn message<'a>(buf: *const c_void, count: c_int, datatype: c_int) -> Res<Cow<'a, [u8]>> {
    let n = count_of(count)?;
    match types::predefined_size(datatype) {
        // SAFETY: this function's contract: `n` elements of `size` bytes from `buf`.
        Some(size) => unsafe { run_at(buf, 0, n * size) },
        // SAFETY: this function's contract.
        None => unsafe { bytes(buf, n, &Datatype::of(datatype)?) },
    }
}

/// Where a message for `count` elements of datatype `datatype` at `buf` lands, as
/// [`bytes_mut`].
///
/// # Safety
/// As [`bytes_mut`].
#[inline(always)]
unsafe fn landing<'a>(buf: *mut c_void, count: c_int, datatype: c_int) -> Res<Landing<'a>> {
    let n = count_of(count)?;
    match types::predefined_size(datatype) {
        // SAFETY: this function's contract: `n` writable elements of `size` bytes from
        // `buf`, not otherwise borrowed.
        Some(size) => Ok(Landing::Direct(unsafe { raw_mut(buf, n * size)? })),
        // SAFETY: this function's contract.
        None => unsafe { bytes_mut(buf, n, &Datatype::of(datatype)?) },
    }
}

/// The bytes of `count` elements of a predefined datatype at `buf`: a blocking send's or
/// receive's common case, checked in a few instructions. `None` for any other case (a derived
/// or pair type, a negative count, a null buffer for data), which [`message`] takes and which
/// gives any error.
///
/// # Safety
/// As [`bytes`].
#[inline(always)]
unsafe fn plain<'a>(buf: *const c_void, count: c_int, datatype: c_int) -> Option<&'a [u8]> {
    let n = plain_len(count, datatype)?;
    if buf.is_null() {
        return (n == 0).then_some(&[]);
    }
    // SAFETY: the caller promises `count` readable elements (`n` bytes) at `buf`, not null
    // (checked).
    Some(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) })
}

/// The bytes of `count` elements of a predefined datatype of a single run, or `None` (a
/// negative count, any other type). The product needs no check: a count below 2^31 times
/// a size of a few bytes fits 64 bits.
#[inline(always)]
fn plain_len(count: c_int, datatype: c_int) -> Option<usize> {
    let size = types::predefined_size(datatype)?;
    usize::try_from(u64::from(u32::try_from(count).ok()?) * size as u64).ok()
}

/// As [`plain`], for data to be written (a receive's buffer; [`landing`] takes other cases).
///
/// # Safety
/// As [`bytes_mut`].
#[inline(always)]
unsafe fn plain_mut<'a>(buf: *mut c_void, count: c_int, datatype: c_int) -> Option<&'a mut [u8]> {
    let n = plain_len(count, datatype)?;
    if buf.is_null() {
        return if n == 0 { Some(&mut []) } else { None };
    }
    // SAFETY: the caller promises room for `count` elements (`n` bytes) at `buf`, not null
    // (checked), which nothing else refers to during the call.
    Some(unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) })
}

/// The buffers of an all-gather or all-to-all of predefined types, as [`plain`] and
/// [`plain_mut`]: `send_blocks` runs of `sendcount` elements of `sendtype` at `sendbuf`,
/// `recv_blocks` of `recvcount` of `recvtype` at `recvbuf`. `None` for any other case
/// (`MPI_IN_PLACE`, a derived type, a negative count, a null buffer for data).
///
/// # Safety
/// As [`plain`] for the send buffer and [`plain_mut`] for the receive buffer, which do not
/// overlap (MPI's contract).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn plain_pair<'a>(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    send_blocks: usize,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    recv_blocks: usize,
) -> Option<(&'a [u8], &'a mut [u8])> {
    let bytes = |count: c_int, ty: c_int, blocks: usize| plain_len(count, ty)?.checked_mul(blocks);
    if sendbuf == IN_PLACE {
        return None;
    }
    let (sn, rn) = (bytes(sendcount, sendtype, send_blocks)?, bytes(recvcount, recvtype, recv_blocks)?);
    if (sn > 0 && sendbuf.is_null()) || (rn > 0 && recvbuf.is_null()) {
        return None;
    }
    // Overlapping buffers (erroneous; the general path refuses them).
    let (s, r) = (sendbuf as usize, recvbuf as usize);
    if sn > 0 && rn > 0 && s < r.wrapping_add(rn) && r < s.wrapping_add(sn) {
        return None;
    }
    // SAFETY: not null where not empty (checked); the caller's `sn` readable bytes at
    // `sendbuf` and `rn` writable ones at `recvbuf`, apart (checked).
    unsafe {
        Some((
            if sn == 0 { &[] } else { std::slice::from_raw_parts(sendbuf.cast::<u8>(), sn) },
            if rn == 0 { &mut [] } else { std::slice::from_raw_parts_mut(recvbuf.cast::<u8>(), rn) },
        ))
    }
}

/// MPI forbids a collective's input to lie in its output short of `MPI_IN_PLACE` (MPI-3.1
/// 5.2.3). An input `send` that starts where the output `recv` does is refused with
/// `MPI_ERR_BUFFER`, as MPICH refuses it, before any message goes: a rank that alone makes
/// the mistake gets its error rather than a hang, and no data is read while it is written.
fn distinct(send: *const c_void, recv: *const c_void) -> Res {
    if send == recv && !send.is_null() && send != IN_PLACE {
        return Err(aliased());
    }
    Ok(())
}

/// [`distinct`] of a buffer `part` of `count` elements (none: nothing to check) and a buffer
/// `whole` of blocks, also refused where `part` starts at the caller's own block of `whole`,
/// `own` elements of type `ty` in.
fn distinct_block(part: *const c_void, count: c_int, whole: *const c_void, own: isize, ty: c_int) -> Res {
    if count == 0 || whole == IN_PLACE {
        return Ok(());
    }
    distinct(part, whole)?;
    if own != 0 && !part.is_null() {
        let extent = Datatype::of(ty).map_or(0, |t| t.bounds().1);
        distinct(part, whole.wrapping_byte_offset(own.wrapping_mul(extent)))?;
    }
    Ok(())
}

/// The error of `MPI_IN_PLACE` given for a buffer of data, where the call takes none in
/// place (it would be read or written as memory).
#[cold]
#[inline(never)]
fn in_place_here() -> Fail {
    Fail::new(ERR_BUFFER, "MPI_IN_PLACE where the call takes a buffer of data")
}

/// [`distinct`]'s error.
#[cold]
#[inline(never)]
fn aliased() -> Fail {
    Fail::new(ERR_BUFFER, "the input lies in the output (MPI_IN_PLACE says where it does)")
}

/// Element `i` of the caller's array of `n` ints at `p`, or 0 where the array is not there
/// (the call's own check of it tells that error).
///
/// # Safety
/// `p` is null or holds `n` ints.
unsafe fn int_at(p: *const c_int, n: usize, i: usize) -> isize {
    // SAFETY: this function's contract.
    unsafe { ints_at(p, n, "") }.ok().and_then(|a| a.get(i).copied()).unwrap_or(0) as isize
}

/// `n` bytes of data at `off` from `buf`, as a message.
///
/// # Safety
/// As [`bytes`]: the caller's data is `n` readable bytes from `buf + off`.
#[inline(always)]
unsafe fn run_at<'a>(buf: *const c_void, off: isize, n: usize) -> Res<Cow<'a, [u8]>> {
    if n == 0 {
        return Ok(Cow::Borrowed(&[]));
    }
    let at = buf.cast::<u8>().wrapping_offset(off);
    if at.is_null() {
        return Err(Fail::new(ERR_BUFFER, "a null buffer for a non-empty message"));
    }
    if buf == IN_PLACE {
        return Err(in_place_here());
    }
    // SAFETY: the caller promises `n` readable bytes of data from `at`, not null (checked).
    Ok(Cow::Borrowed(unsafe { std::slice::from_raw_parts(at, n) }))
}

/// [`bytes`] of a derived datatype.
///
/// # Safety
/// As [`bytes`].
#[inline(never)]
unsafe fn derived_bytes<'a>(buf: *const c_void, count: usize, ty: &Datatype) -> Res<Cow<'a, [u8]>> {
    ty.usable()?;
    let n = count * ty.size;
    match (ty.contiguous_at(count), &ty.derived) {
        // SAFETY: this function's contract.
        (Some(off), _) => unsafe { run_at(buf, off, n) },
        (None, _) if n == 0 => Ok(Cow::Borrowed(&[])),
        (None, Some(d)) => {
            let mut v = vec![0u8; n];
            // SAFETY: the caller promises the elements' data is readable.
            unsafe { d.layout.pack(buf.cast(), count, &mut v) };
            Ok(Cow::Owned(v))
        }
        (None, None) => unreachable!("a predefined type is contiguous"),
    }
}

/// `n` bytes at `buf` (a window's memory).
///
/// # Safety
/// `buf` must point to `n` writable bytes, not otherwise borrowed while the slice lives.
#[inline(always)]
unsafe fn raw_mut<'a>(buf: *mut c_void, n: usize) -> Res<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(Fail::new(ERR_BUFFER, "a null buffer of a non-empty size"));
    }
    if buf.cast_const() == IN_PLACE {
        return Err(in_place_here());
    }
    // SAFETY: the caller promises `n` writable bytes at `buf`, not null (checked), that
    // nothing else refers to while the slice lives.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) })
}

/// Where a message for `count` elements of `ty` at `buf` lands: the caller's bytes where
/// they are one run, else a copy of their data that goes back into them when dropped
/// ([`Landing`]).
///
/// # Safety
/// As [`bytes`], and the data must be writable and not otherwise borrowed while the
/// landing lives.
#[inline]
unsafe fn bytes_mut<'a>(buf: *mut c_void, count: usize, ty: &Datatype) -> Res<Landing<'a>> {
    // SAFETY: this function's contract.
    Ok(match unsafe { bytes(buf, count, ty)? } {
        // SAFETY: the caller promises the bytes writable and not otherwise borrowed.
        Cow::Borrowed(b) => Landing::Direct(unsafe { std::slice::from_raw_parts_mut(b.as_ptr().cast_mut(), b.len()) }),
        Cow::Owned(bytes) => Landing::Staged {
            bytes,
            base: buf.cast(),
            count,
            derived: ty.derived.clone().expect("only a derived type is packed"),
        },
    })
}

/// The bytes a message lands in: the caller's own, or a packed copy of a derived datatype's
/// data (taken when made, so what the message does not cover stays as it was), unpacked into
/// the caller's memory when dropped.
#[derive(Debug)]
enum Landing<'a> {
    Direct(&'a mut [u8]),
    Staged { bytes: Vec<u8>, base: *mut u8, count: usize, derived: Rc<types::Derived> },
}

impl std::ops::Deref for Landing<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Landing::Direct(b) => b,
            Landing::Staged { bytes, .. } => bytes,
        }
    }
}

impl std::ops::DerefMut for Landing<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Landing::Direct(b) => b,
            Landing::Staged { bytes, .. } => bytes,
        }
    }
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        if let Landing::Staged { bytes, base, count, derived } = self {
            // SAFETY: made by bytes_mut, whose caller promised the data writable and not
            // otherwise borrowed while this lives.
            unsafe { derived.layout.unpack(bytes, *base, *count) };
        }
    }
}

/// Writes `st` to `*status` unless that is `MPI_STATUS_IGNORE`: the status of a call that
/// completes one operation, whose error field it leaves as it was (MPI-3.1 section 3.2.5:
/// only the calls that return many statuses set it; MPICH leaves it too).
///
/// # Safety
/// `status` is null or points to an `MPI_Status`.
unsafe fn set_status_raw(status: *mut MpiStatus, st: MpiStatus) {
    if !status.is_null() {
        // SAFETY: the caller passed a valid MPI_Status or null (checked); each field is
        // written through the pointer, none read (the program's may be uninitialized).
        unsafe {
            (*status).source = st.source;
            (*status).tag = st.tag;
            (*status).count_lo = st.count_lo;
            (*status).count_hi = st.count_hi;
        }
    }
}

/// Fills `*status` (if not `MPI_STATUS_IGNORE`) from a completed receive or probe.
///
/// # Safety
/// `status` is null or points to an `MPI_Status`.
unsafe fn set_status(status: *mut MpiStatus, st: Status) {
    // SAFETY: this function's contract.
    unsafe { set_status_raw(status, MpiStatus::of(st)) }
}

/// Datatype `datatype` and the bytes of the message `status` tells of, for the call `name`
/// (`MPI_ERR_ARG` for `MPI_STATUS_IGNORE`).
///
/// # Safety
/// `status` is null (an error) or the caller's `MPI_Status`.
unsafe fn typed_bytes(name: &str, status: *const MpiStatus, datatype: c_int) -> Res<(Datatype, u64)> {
    let t = Datatype::of(datatype)?;
    // SAFETY: this function's contract: null or the caller's MPI_Status.
    let st = unsafe { status.as_ref() }.ok_or_else(|| Fail::new(ERR_ARG, format!("{name} of MPI_STATUS_IGNORE")))?;
    Ok((t, st.bytes()))
}

/// The elements of `datatype` in the message `status` tells of (`MPI_UNDEFINED` if not a
/// whole number of them), into `count`.
///
/// # Safety
/// `status` is null (an error) or the caller's status; `count` points to an int.
unsafe fn count_in(name: &str, status: *const MpiStatus, datatype: c_int, count: *mut c_int) -> c_int {
    // SAFETY: this function's contract.
    let r = unsafe { typed_bytes(name, status, datatype) }.and_then(|(t, bytes)| {
        let n = match t.size as u64 {
            0 => 0,
            size if bytes % size == 0 => c_int::try_from(bytes / size).unwrap_or(UNDEFINED),
            _ => UNDEFINED,
        };
        // SAFETY: this function's contract.
        unsafe { put(count, n) }
    });
    finish(name, COMM_WORLD, r)
}

/// The basic elements of `datatype` that `status`'s message held (`MPI_Get_elements`):
/// whole elements of the type, and then of its one basic type; `None` (`MPI_UNDEFINED`) if
/// they are no whole number.
///
/// # Safety
/// `status` is null (an error) or the caller's `MPI_Status`.
unsafe fn elements_in(name: &str, status: *const MpiStatus, datatype: c_int) -> Res<Option<u64>> {
    // SAFETY: this function's contract.
    let (t, bytes) = unsafe { typed_bytes(name, status, datatype)? };
    let (size, basic) = (t.size as u64, t.as_basic(1).map_or(0, |(b, _)| b.size as u64));
    Ok(match size {
        0 => Some(0),
        _ if bytes.is_multiple_of(size) => Some(bytes / size * t.elements() as u64),
        _ if basic > 0 && bytes.is_multiple_of(basic) => Some(bytes / basic),
        // Of several basic types (a struct): counted along its type map.
        _ if basic == 0 => external::elements_in_bytes(&t, bytes),
        _ => None,
    })
}

/// `MPI_Sendrecv`'s exchange of bytes, either side of which may be `MPI_PROC_NULL`.
fn sendrecv_bytes(
    c: &Comm,
    send: &[u8],
    dest: c_int,
    sendtag: c_int,
    recv: &mut [u8],
    source: c_int,
    recvtag: c_int,
) -> Res<MpiStatus> {
    Ok(match (peer(dest, false)?, peer(source, true)?) {
        (Some(d), Some(s)) => MpiStatus::of(c.sendrecv(send, d, sendtag, recv, s, recvtag)?),
        (Some(d), None) => {
            c.send(send, d, sendtag)?;
            MpiStatus::proc_null()
        }
        (None, Some(s)) => MpiStatus::of(c.recv(recv, s, recvtag)?),
        (None, None) => MpiStatus::proc_null(),
    })
}

/// `MPI_Status` as include/mpi.h lays it out.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct MpiStatus {
    source: c_int,
    tag: c_int,
    error: c_int,
    count_lo: c_int,
    count_hi: c_int,
}

impl MpiStatus {
    fn of(st: Status) -> MpiStatus {
        let bytes = st.bytes as u64;
        MpiStatus {
            source: st.source as c_int,
            tag: st.tag,
            error: MPI_SUCCESS,
            count_lo: bytes as u32 as c_int,
            count_hi: (bytes >> 32) as c_int,
        }
    }

    /// What a receive from `MPI_PROC_NULL` reports.
    fn proc_null() -> MpiStatus {
        MpiStatus { source: PROC_NULL, tag: ANY_TAG, error: MPI_SUCCESS, count_lo: 0, count_hi: 0 }
    }

    /// The size of the message (without the bit that says it was cancelled).
    fn bytes(&self) -> u64 {
        (self.count_lo as u32 as u64) | (((self.count_hi & !p2p::CANCELLED) as u32 as u64) << 32)
    }
}

/// Writes `text` into C buffer `out` (NUL-terminated, at most `max` bytes with the NUL) and
/// its length into `len`.
///
/// # Safety
/// `out` holds `max` bytes; `len` points to an int.
/// An object's name from the caller (`MPI_Comm_set_name` and its kin), cut to what
/// `MPI_MAX_OBJECT_NAME` holds.
///
/// # Safety
/// `name` is null (an error) or a NUL-terminated string.
unsafe fn name_at(name: *const c_char) -> Res<String> {
    if name.is_null() {
        return Err(Fail::new(ERR_ARG, "a null name"));
    }
    // SAFETY: not null (checked); this function's contract.
    let text = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
    Ok(text.chars().take(MAX_OBJECT_NAME - 1).collect())
}

unsafe fn write_text(text: &str, out: *mut c_char, len: *mut c_int, max: usize) -> Res {
    if out.is_null() || len.is_null() {
        return Err(Fail::new(ERR_ARG, "a null output argument"));
    }
    let n = text.len().min(max - 1);
    // SAFETY: `out` holds `max` bytes (MPI's contract: MPI_MAX_... sized), n + 1 <= max.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), out, n);
        *out.add(n) = 0;
        *len = n as c_int;
    }
    Ok(())
}

/// Stores `value` through an output pointer.
///
/// # Safety
/// `out` is null (an error) or points to a `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Res {
    if out.is_null() {
        return Err(Fail::new(ERR_ARG, "a null output argument"));
    }
    // SAFETY: not null (checked); the caller passed a valid pointer.
    unsafe { out.write(value) };
    Ok(())
}

/// `MPI_Send` of what its quick path does not take: a derived type, `MPI_PROC_NULL`, an
/// argument in error.
///
/// # Safety
/// MPI's contract for `MPI_Send`.
#[cold]
#[inline(never)]
unsafe fn send_general(
    buf: *const c_void,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    let r = (|| {
        let c = comm_ref("MPI_Send", comm)?;
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        let data = unsafe { message(buf, count, datatype)? };
        match peer(dest, false)? {
            None => Ok(()),
            Some(d) => Ok(c.send(&data, d, tag)?),
        }
    })();
    finish("MPI_Send", comm, r)
}

/// `MPI_Bcast` of what its quick path does not take, as [`send_general`].
///
/// # Safety
/// MPI's contract for `MPI_Bcast`.
#[cold]
#[inline(never)]
unsafe fn bcast_general(buffer: *mut c_void, count: c_int, datatype: c_int, root: c_int, comm: c_int) -> c_int {
    let r = (|| {
        let c = comm_ref("MPI_Bcast", comm)?;
        if c.is_inter() {
            let root = inter_root(&c, root)?;
            // The root's group beside it reads no other argument (MPI calls them
            // insignificant there): it keeps the collectives' count alone.
            if root == crate::InterRoot::Beside {
                return Ok(c.inter_beside("MPI_Bcast")?);
            }
            // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
            let mut data = unsafe { landing(buffer, count, datatype)? };
            return Ok(c.inter_bcast(&mut data, root)?);
        }
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        let mut data = unsafe { landing(buffer, count, datatype)? };
        let root = root_of(&c, root)?;
        Ok(c.bcast(&mut data, root)?)
    })();
    finish("MPI_Bcast", comm, r)
}

/// The buffers of `MPI_Gather` (`scatter` false) or `MPI_Scatter` on an inter-communicator,
/// as `root` says which count: the root's all-ranks buffer holds a block for each rank of
/// the other group; the other group's ranks give or take one block; the rest, nothing.
///
/// # Safety
/// MPI's contract for the call's buffers.
#[allow(clippy::type_complexity)]
unsafe fn rooted_inter<'a>(
    c: &Comm,
    root: crate::InterRoot,
    (sendbuf, sendcount, sendtype): (*const c_void, c_int, c_int),
    (recvbuf, recvcount, recvtype): (*mut c_void, c_int, c_int),
    scatter: bool,
) -> Res<(Option<Cow<'a, [u8]>>, Option<Landing<'a>>)> {
    let (all, one) = match root {
        crate::InterRoot::Beside => return Ok((None, None)),
        crate::InterRoot::Here => (c.peers().len(), 0),
        crate::InterRoot::Remote(_) => (0, 1),
    };
    let (sends, recvs) = if scatter { (all, one) } else { (one, all) };
    if sendbuf == IN_PLACE || recvbuf == IN_PLACE.cast_mut() {
        return Err(Fail::new(ERR_BUFFER, "MPI_IN_PLACE on an inter-communicator"));
    }
    let send = match sends {
        0 => None,
        // SAFETY: MPI's contract: sendbuf holds sendcount elements for each rank it serves.
        k => Some(unsafe { bytes(sendbuf, count_of(sendcount)? * k, &Datatype::of(sendtype)?)? }),
    };
    let recv = match recvs {
        0 => None,
        // SAFETY: as above, for recvbuf.
        k => Some(unsafe { bytes_mut(recvbuf, count_of(recvcount)? * k, &Datatype::of(recvtype)?)? }),
    };
    Ok((send, recv))
}

/// `MPI_Allgather` of what its quick path does not take, as [`send_general`].
///
/// # Safety
/// MPI's contract for `MPI_Allgather`.
#[cold]
#[inline(never)]
unsafe fn allgather_general(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let r = (|| {
        let c = comm_of("MPI_Allgather", comm)?;
        let own = if c.is_inter() { 0 } else { c.rank() as isize * recvcount as isize };
        distinct_block(sendbuf, sendcount, recvbuf, own, recvtype)?;
        let rt = Datatype::of(recvtype)?;
        let n = count_of(recvcount)?;
        // SAFETY: MPI's contract: recvbuf holds (remote) size x recvcount elements.
        let mut recv = unsafe { bytes_mut(recvbuf, n * c.peers().len(), &rt)? };
        if sendbuf == IN_PLACE {
            c.intra("MPI_Allgather in place")?;
            let me = c.rank();
            let mine = recv[me * n * rt.size..(me + 1) * n * rt.size].to_vec();
            return Ok(c.allgather(&mine, &mut recv)?);
        }
        let st = Datatype::of(sendtype)?;
        // SAFETY: MPI's contract for sendbuf.
        let send = unsafe { bytes(sendbuf, count_of(sendcount)?, &st)? };
        Ok(c.allgather(&send, &mut recv)?)
    })();
    finish("MPI_Allgather", comm, r)
}

/// `MPI_Alltoall` of what its quick path does not take, as [`send_general`].
///
/// # Safety
/// MPI's contract for `MPI_Alltoall`.
#[cold]
#[inline(never)]
unsafe fn alltoall_general(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let r = (|| {
        let c = comm_of("MPI_Alltoall", comm)?;
        distinct_block(sendbuf, sendcount, recvbuf, 0, recvtype)?;
        let rt = Datatype::of(recvtype)?;
        // SAFETY: MPI's contract: recvbuf holds (remote) size x recvcount elements.
        let mut recv = unsafe { bytes_mut(recvbuf, count_of(recvcount)? * c.peers().len(), &rt)? };
        if sendbuf == IN_PLACE {
            c.intra("MPI_Alltoall in place")?;
            let mine = recv.to_vec();
            return Ok(c.alltoall(&mine, &mut recv)?);
        }
        let st = Datatype::of(sendtype)?;
        // SAFETY: MPI's contract: sendbuf holds (remote) size x sendcount elements.
        let send = unsafe { bytes(sendbuf, count_of(sendcount)? * c.peers().len(), &st)? };
        Ok(c.alltoall(&send, &mut recv)?)
    })();
    finish("MPI_Alltoall", comm, r)
}

/// `MPI_Recv` of what its quick path does not take, as [`send_general`].
///
/// # Safety
/// MPI's contract for `MPI_Recv`.
#[cold]
#[inline(never)]
unsafe fn recv_general(
    buf: *mut c_void,
    count: c_int,
    datatype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    status: *mut MpiStatus,
) -> c_int {
    let r = (|| {
        let c = comm_ref("MPI_Recv", comm)?;
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        let mut data = unsafe { landing(buf, count, datatype)? };
        let st = match peer(source, true)? {
            None => MpiStatus::proc_null(),
            Some(s) => match c.recv(&mut data, s, tag) {
                Ok(st) => MpiStatus::of(st),
                Err(e) => {
                    if let Some(st) = truncated(&e) {
                        // SAFETY: MPI's contract: status is an MPI_Status or MPI_STATUS_IGNORE.
                        unsafe { set_status_raw(status, st) };
                    }
                    return Err(e.into());
                }
            },
        };
        // SAFETY: as above.
        unsafe { set_status_raw(status, st) };
        Ok(())
    })();
    finish("MPI_Recv", comm, r)
}

/// `MPI_Recv`'s code for its receive's error `e`, its status filled as [`truncated`] says.
///
/// # Safety
/// `status` is an `MPI_Status` or `MPI_STATUS_IGNORE`.
#[cold]
#[inline(never)]
unsafe fn recv_failed(status: *mut MpiStatus, comm: c_int, e: crate::Error) -> c_int {
    if let Some(st) = truncated(&e) {
        // SAFETY: this function's contract.
        unsafe { set_status_raw(status, st) };
    }
    finish("MPI_Recv", comm, Err(e.into()))
}

/// The status of a receive that failed with `e`, if it tells anything: a message too large
/// for the buffer still tells its sender and tag (none of it is stored: a count of 0), as
/// MPICH's does.
fn truncated(e: &crate::Error) -> Option<MpiStatus> {
    match *e {
        crate::Error::Truncate { source, tag, .. } => Some(MpiStatus { source: source as c_int, tag, ..p2p::empty() }),
        _ => None,
    }
}

/// Exports `fn PMPI_x(..)` with `body`, and `fn MPI_x(..)` calling it.
macro_rules! mpi {
    ($(fn $name:ident / $pname:ident ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block)*) => {$(
        #[no_mangle]
        pub(crate) unsafe extern "C" fn $pname($($arg: $ty),*) -> $ret $body

        #[no_mangle]
        pub(crate) unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the same contract, passed on.
            unsafe { $pname($($arg),*) }
        }
    )*};
}

mod attr;
mod count;
mod dtype;
mod errh;
mod external;
mod fint;
mod greq;
mod icoll;
mod info;
mod legacy;
mod p2p;
mod topo;
mod win;

fn init(name: &str, required: c_int) -> Res {
    if INITIALIZED.swap(true, Ordering::SeqCst) {
        return Err(Fail::new(ERR_OTHER, format!("{name}: MPI is already initialized")));
    }
    let universe = crate::init()?;
    let world = universe.world();
    let solo = world.solo();
    UNIVERSE_SIZE.store(world.size() as c_int, Ordering::SeqCst);
    let empty = world.comm_group().excl(&(0..world.size()).collect::<Vec<_>>())?;
    let entry =
        |comm, name: &str| Some(CommEntry { comm, errhandler: ERRORS_ARE_FATAL, name: name.into(), topo: None });
    let _ = MAIN_THREAD.set(std::thread::current().id());
    if !STATE.claim() {
        return Err(Fail::new(ERR_OTHER, format!("{name}: MPI is already initialized")));
    }
    PROVIDED.store(required.clamp(0, THREAD_FUNNELED), Ordering::SeqCst);
    // MPI_COMM_NULL, MPI_COMM_WORLD, MPI_COMM_SELF.
    STATE.with(|s| {
        *s.borrow_mut() = Some(State {
            universe,
            comms: vec![None, entry(world, "MPI_COMM_WORLD"), entry(solo, "MPI_COMM_SELF")],
            groups: vec![None, Some(empty)],
            requests: slab::Slab::new(),
            named: Vec::new(),
            attached: p2p::Attached::default(),
            wins: vec![None],
            infos: info::predefined(),
            messages: slab::Slab::new(),
            keyvals: Vec::new(),
            attrs: attr::Attrs::new(),
            errhandlers: Vec::new(),
        })
    });
    Ok(())
}

/// A reduction (`how`) by operation `op` of `count` elements of datatype `datatype` per rank (per block for
/// `MPI_Reduce_scatter_block`), from `send` (or, `MPI_IN_PLACE`, from `recv`) into `recv`.
///
/// # Safety
/// The buffers hold what MPI's contract says for this reduction.
unsafe fn reduce(
    comm: &Comm,
    how: Reduction,
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
) -> Res {
    let count = count_of(count)?;
    let lands = match how {
        Reduction::Root(r) => r == comm.rank(),
        Reduction::Inter(root) => root == crate::InterRoot::Here,
        _ => true,
    };
    // On an inter-communicator, the root's group gives no input.
    let gives = !matches!(how, Reduction::Inter(crate::InterRoot::Here | crate::InterRoot::Beside));
    let in_place = send == IN_PLACE || !gives;
    if send == IN_PLACE && (!lands || matches!(how, Reduction::Local)) {
        return Err(Fail::new(ERR_BUFFER, "MPI_IN_PLACE where this call takes no in-place input"));
    }
    if lands && recv.cast_const() == IN_PLACE {
        return Err(Fail::new(ERR_BUFFER, "MPI_IN_PLACE as the output (it stands for the input)"));
    }
    if lands && gives && count > 0 {
        distinct(send, recv)?;
    }
    let (send_n, recv_n) = match how {
        Reduction::ScatterBlock => (count * comm.size(), if in_place { count * comm.size() } else { count }),
        _ => (count, count),
    };
    if let Some(basic) = types::Basic::of(datatype, op) {
        // A predefined operation on a predefined datatype: the buffers are runs of its
        // elements, and nothing of either needs building.
        // SAFETY: MPI's contract: recv holds recv_n elements where the result lands; send
        // holds send_n, unless it is MPI_IN_PLACE.
        let recv = if lands { Some(unsafe { raw_mut(recv, recv_n * basic.size)? }) } else { None };
        // SAFETY: as above.
        let send = if in_place { None } else { Some(unsafe { run_at(send, 0, send_n * basic.size)? }) };
        return types::reduce_basic(comm, how, send.as_deref(), recv, basic);
    }
    let (ty, op) = (Datatype::of(datatype)?, ReduceOp::of(op)?);
    // SAFETY: as above, in elements of ty.
    let mut recv = if lands { Some(unsafe { bytes_mut(recv, recv_n, &ty)? }) } else { None };
    // SAFETY: as above.
    let send = if in_place { None } else { Some(unsafe { bytes(send, send_n, &ty)? }) };
    types::reduce(comm, how, send.as_deref(), recv.as_deref_mut(), &ty, op)
}

/// `MPI_Allreduce`'s common case, kept short: a predefined operation on two distinct,
/// non-empty buffers of a predefined type, aligned for it. `None` where the call is another case
/// (the general path takes it, and gives any error).
///
/// # Safety
/// As [`reduce`] (which takes every other case).
#[inline(always)]
unsafe fn allreduce_basic(
    comm: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
) -> Option<Res> {
    let basic = types::Basic::of(datatype, op)?;
    let n = usize::try_from(count).ok()?.checked_mul(basic.size)?;
    if n == 0 || send == IN_PLACE || send.is_null() || recv.is_null() || send == recv.cast_const() {
        return None;
    }
    // SAFETY: not null (checked); MPI's contract: `count` elements at each, the two
    // buffers apart.
    let (s, r) = unsafe {
        (std::slice::from_raw_parts(send.cast::<u8>(), n), std::slice::from_raw_parts_mut(recv.cast::<u8>(), n))
    };
    types::allreduce_aligned(comm, s, r, basic)
}

/// `n` C ints at `p` (counts or displacements).
///
/// # Safety
/// `p` points to `n` ints (MPI's contract for count and displacement arrays).
unsafe fn ints_at<'a, T>(p: *const T, n: usize, what: &str) -> Res<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::new(ERR_ARG, format!("a null array of {what}")));
    }
    // SAFETY: not null (checked); the caller's array of n integers.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The blocks of a vector collective's buffer (`MPI_Gatherv` ...), as the Rust API takes
/// them: `count` elements of `ty` at the buffer hold every block's data, which is at `displs`
/// and `counts` bytes of that data. For a type of plain bytes, the buffer's bytes up to the
/// furthest block; for another, the blocks packed in order (a layout of every block).
struct Blocks {
    ty: Datatype,
    count: usize,
    counts: Vec<usize>,
    displs: Vec<usize>,
}

/// [`Blocks`] of `n` blocks of `ty`, `counts` elements each at `displs` extents.
///
/// # Safety
/// `counts` and `displs` point to `n` ints each (MPI's contract).
unsafe fn blocks(counts: *const c_int, displs: *const c_int, n: usize, ty: &Datatype) -> Res<Blocks> {
    // SAFETY: this function's contract.
    let (c, d) = unsafe { (ints_at(counts, n, "counts")?, ints_at(displs, n, "displacements")?) };
    let counts: Vec<usize> = c.iter().map(|&c| count_of(c).map(|c| c * ty.size)).collect::<Res<_>>()?;
    let Some(derived) = &ty.derived else {
        return byte_blocks(counts, d, ty.size);
    };
    let ext = derived.layout.extent();
    let parts: Vec<(usize, isize)> = c.iter().zip(d).map(|(&c, &d)| (c.max(0) as usize, d as isize * ext)).collect();
    let ty = types::derived(Layout::hindexed(&parts, &derived.layout), derived.basic);
    Ok(Blocks { ty, count: 1, displs: packed(&counts), counts })
}

/// [`Blocks`] of plain bytes: block `i` is `counts[i]` bytes at `displs[i]` units of `unit`
/// bytes.
fn byte_blocks<D: Displacement>(counts: Vec<usize>, displs: &[D], unit: usize) -> Res<Blocks> {
    let displs: Vec<usize> = displs
        .iter()
        .map(|&d| d.bytes())
        .map(|d| usize::try_from(d).map(|d| d * unit).map_err(|_| Fail::new(ERR_ARG, format!("displacement {d}"))))
        .collect::<Res<_>>()?;
    let count = counts.iter().zip(&displs).map(|(c, d)| c + d).max().unwrap_or(0);
    Ok(Blocks { ty: Datatype::BYTE, count, counts, displs })
}

/// A displacement of a vector collective's block: an `int` (most) or an `MPI_Aint`
/// (`MPI_Neighbor_alltoallw`'s).
trait Displacement: Copy {
    fn bytes(self) -> isize;
}

impl Displacement for c_int {
    fn bytes(self) -> isize {
        self as isize
    }
}

impl Displacement for isize {
    fn bytes(self) -> isize {
        self
    }
}

/// Where blocks of `counts` bytes lie packed one after another.
fn packed(counts: &[usize]) -> Vec<usize> {
    counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect()
}

/// [`Blocks`] of an `MPI_Alltoallw` buffer (or `MPI_Neighbor_alltoallw`'s, whose
/// displacements are `MPI_Aint`s): block `i` is `counts[i]` elements of datatype `types[i]`
/// at `displs[i]` bytes. Where every type is a predefined one of plain bytes, the buffer's
/// bytes up to the furthest block; else the blocks packed in order (a struct of every block).
///
/// # Safety
/// `counts`, `displs` and `types` point to `n` integers each (MPI's contract).
unsafe fn typed_blocks<D: Displacement>(
    counts: *const c_int,
    displs: *const D,
    types: *const c_int,
    n: usize,
) -> Res<Blocks> {
    // SAFETY: this function's contract.
    let (c, d, t) = unsafe {
        (ints_at(counts, n, "counts")?, ints_at(displs, n, "displacements")?, ints_at(types, n, "datatypes")?)
    };
    let types: Vec<Datatype> = t.iter().map(|&h| Datatype::of(h)).collect::<Res<_>>()?;
    let elems: Vec<usize> = c.iter().map(|&c| count_of(c)).collect::<Res<_>>()?;
    let counts: Vec<usize> = elems.iter().zip(&types).map(|(c, t)| c * t.size).collect();
    if types.iter().all(|t| t.derived.is_none()) {
        return byte_blocks(counts, d, 1);
    }
    types.iter().try_for_each(Datatype::usable)?;
    let layouts: Vec<Layout> = types.iter().map(Datatype::layout).collect();
    let fields: Vec<(usize, isize, &Layout)> =
        elems.iter().zip(d).zip(&layouts).map(|((&n, &d), l)| (n, d.bytes(), l)).collect();
    Ok(Blocks { ty: types::derived(Layout::structure(&fields), None), count: 1, displs: packed(&counts), counts })
}

/// `MPI_Alltoallv` and `MPI_Alltoallw` once the receive buffer's blocks `r` are known: the
/// send buffer's (from `send`), or with `MPI_IN_PLACE` the receive buffer's data itself.
///
/// # Safety
/// `recvbuf` spans the blocks of `r`, `sendbuf` (unless `MPI_IN_PLACE`) those `send` gives.
unsafe fn alltoall_blocks(
    c: &Comm,
    sendbuf: *const c_void,
    send: impl FnOnce() -> Res<Blocks>,
    recvbuf: *mut c_void,
    r: Blocks,
) -> Res {
    // SAFETY: this function's contract.
    let mut recv = unsafe { bytes_mut(recvbuf, r.count, &r.ty)? };
    if sendbuf == IN_PLACE {
        c.intra("an all-to-all in place")?;
        let mine = recv.to_vec();
        return Ok(c.alltoallv(&mine, &r.counts, &r.displs, &mut recv, &r.counts, &r.displs)?);
    }
    let s = send()?;
    // SAFETY: this function's contract.
    let data = unsafe { bytes(sendbuf, s.count, &s.ty)? };
    Ok(c.alltoallv(&data, &s.counts, &s.displs, &mut recv, &r.counts, &r.displs)?)
}

/// A new communicator into the table (inheriting `errhandler`), its handle into `out`.
///
/// # Safety
/// `out` is null (an error) or points to an `MPI_Comm`.
unsafe fn new_comm(name: &str, made: Option<Comm>, errhandler: c_int, out: *mut c_int) -> Res {
    let handle = match made {
        None => 0,
        Some(comm) => with_state(name, |s| {
            s.comms.push(Some(CommEntry { comm, errhandler, name: String::new(), topo: None }));
            (s.comms.len() - 1) as c_int
        })?,
    };
    // SAFETY: the caller's MPI_Comm, or null (put checks).
    unsafe { put(out, handle) }
}

fn errhandler_of(comm: c_int) -> c_int {
    STATE
        .with(|s| {
            let s = s.try_borrow().ok()?;
            s.as_ref()?.entry(comm).map(|e| e.errhandler)
        })
        .flatten()
        .unwrap_or(ERRORS_ARE_FATAL)
}

/// Frees handle `h` of `table`, if it is one the program made (handles below `first` are
/// predefined); whether it was.
fn free_handle<T>(table: &mut [Option<T>], h: c_int, first: usize) -> bool {
    match usize::try_from(h).ok().filter(|&i| i >= first).and_then(|i| table.get_mut(i)) {
        Some(slot @ Some(_)) => {
            *slot = None;
            true
        }
        _ => false,
    }
}

/// The group of handle `group` (a clone).
fn group_of(name: &str, group: c_int) -> Res<Group> {
    with_state(name, |s| {
        usize::try_from(group)
            .ok()
            .and_then(|i| s.groups.get(i))
            .and_then(Option::as_ref)
            .cloned()
            .ok_or_else(|| Fail::new(ERR_GROUP, format!("{name}: {group} is not a group")))
    })?
}

/// A new group into the table, its handle into `out`.
///
/// # Safety
/// `out` is null (an error) or points to an `MPI_Group`.
unsafe fn new_group(name: &str, group: Group, out: *mut c_int) -> Res {
    // An empty group is MPI_GROUP_EMPTY itself (as MPICH and Open MPI hand it out: programs
    // compare with it), which MPI_Group_free takes back like any other.
    let handle = if group.size() == 0 {
        GROUP_EMPTY
    } else {
        with_state(name, |s| {
            s.groups.push(Some(group));
            (s.groups.len() - 1) as c_int
        })?
    };
    // SAFETY: the caller's MPI_Group, or null (put checks).
    unsafe { put(out, handle) }
}

/// `MPI_Group_union` and its kin: the group `how` makes of groups `a` and `b`, into `out`.
///
/// # Safety
/// `out` points to an `MPI_Group` (or is null: an error).
unsafe fn group_pair(name: &str, a: c_int, b: c_int, out: *mut c_int, how: fn(&Group, &Group) -> Group) -> c_int {
    let r = (|| {
        let made = how(&group_of(name, a)?, &group_of(name, b)?);
        // SAFETY: this function's contract.
        unsafe { new_group(name, made, out) }
    })();
    finish(name, COMM_WORLD, r)
}

/// `MPI_Group_range_incl` and `_excl`: the group `how` makes of group `group` and the ranks
/// of `n` triplets at `ranges`, into `out`.
///
/// # Safety
/// `ranges` holds `n` triplets; `out` points to an `MPI_Group`.
unsafe fn group_ranges(
    name: &str,
    group: c_int,
    n: c_int,
    ranges: *const [c_int; 3],
    out: *mut c_int,
    how: fn(&Group, &[usize]) -> Result<Group, Error>,
) -> c_int {
    let r = (|| {
        let g = group_of(name, group)?;
        let n = count_of(n)?;
        if n > 0 && ranges.is_null() {
            return Err(Fail::new(ERR_ARG, "a null array of ranges"));
        }
        // SAFETY: not null when n > 0 (checked); this function's contract.
        let triplets = if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(ranges, n) } };
        let triplets: Vec<(i64, i64, i64)> = triplets.iter().map(|t| (t[0] as i64, t[1] as i64, t[2] as i64)).collect();
        let made = how(&g, &g.ranges(&triplets)?)?;
        // SAFETY: this function's contract.
        unsafe { new_group(name, made, out) }
    })();
    finish(name, COMM_WORLD, r)
}

/// This process's rank in `group`, or `MPI_UNDEFINED`.
fn my_rank_in(name: &str, group: &Group) -> Res<c_int> {
    let me = with_state(name, |s| s.universe.world().rank())?;
    Ok(group.rank_of_world(me).map_or(UNDEFINED, |r| r as c_int))
}

/// How two groups compare (`MPI_IDENT`, `MPI_SIMILAR`, `MPI_UNEQUAL`).
fn compare_groups(a: &Group, b: &Group) -> Res<c_int> {
    if a == b {
        return Ok(IDENT);
    }
    let all: Vec<usize> = (0..a.size()).collect();
    let same_members = a.size() == b.size() && a.translate_ranks(&all, b)?.iter().all(Option::is_some);
    Ok(if same_members { SIMILAR } else { UNEQUAL })
}

/// `n` ranks at `p` (`what`, for the error of a null array), checked non-negative.
///
/// # Safety
/// `p` points to `n` ints, or `n` is 0.
unsafe fn ranks_at(p: *const c_int, n: usize, what: &str) -> Res<Vec<usize>> {
    // SAFETY: this function's contract.
    let v = unsafe { ints_at(p, n, what)? };
    v.iter()
        .map(|&r| usize::try_from(r).map_err(|_| Fail::new(ERR_RANK, format!("invalid rank {r} among the {what}"))))
        .collect()
}

/// The value of a predefined attribute, kept for the life of the process (MPI hands out
/// pointers to it).
static ATTRIBUTES: [c_int; 4] = [crate::TAG_UB, 0, PROC_NULL, ANY_SOURCE];
/// `MPI_UNIVERSE_SIZE`'s value: the processes of the job (an atomic int has an int's layout).
static UNIVERSE_SIZE: AtomicI32 = AtomicI32::new(0);

mpi! {
    fn MPI_Init / PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
        finish("MPI_Init", COMM_WORLD, init("MPI_Init", THREAD_FUNNELED))
    }

    fn MPI_Init_thread / PMPI_Init_thread(
        _argc: *mut c_int,
        _argv: *mut *mut *mut c_char,
        required: c_int,
        provided: *mut c_int,
    ) -> c_int {
        let r = init("MPI_Init_thread", required);
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        let r = r.and_then(|()| unsafe { put(provided, PROVIDED.load(Ordering::SeqCst)) });
        finish("MPI_Init_thread", COMM_WORLD, r)
    }

    fn MPI_Finalize / PMPI_Finalize() -> c_int {
        // Attributes of MPI_COMM_SELF are deleted first, their delete functions run (MPI's
        // hook for work at the end).
        let r = attr::delete_all("MPI_Finalize", attr::Object::Comm, COMM_SELF).and_then(|()| {
            let state = STATE.with(|s| s.borrow_mut().take()).flatten().expect("checked above");
            // Buffered sends complete (MPI_Finalize waits for them, as MPI_Buffer_detach).
            let mut first = None;
            for (req, _copy) in state.attached.sends {
                if let Err(e) = req.wait() {
                    first.get_or_insert(e);
                }
            }
            // The requests, windows and communicators go before the universe that drives
            // them.
            drop(state.requests);
            drop(state.wins);
            drop(state.comms);
            FINALIZED.store(true, Ordering::SeqCst);
            state.universe.finalize().map_err(Fail::from)?;
            first.map_or(Ok(()), |e| Err(Fail::from(e)))
        });
        finish("MPI_Finalize", COMM_WORLD, r)
    }

    fn MPI_Initialized / PMPI_Initialized(flag: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        finish("MPI_Initialized", COMM_WORLD, unsafe { put(flag, INITIALIZED.load(Ordering::SeqCst) as c_int) })
    }

    fn MPI_Finalized / PMPI_Finalized(flag: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        finish("MPI_Finalized", COMM_WORLD, unsafe { put(flag, FINALIZED.load(Ordering::SeqCst) as c_int) })
    }

    fn MPI_Abort / PMPI_Abort(comm: c_int, errorcode: c_int) -> c_int {
        match comm_of("MPI_Abort", comm).or_else(|_| comm_of("MPI_Abort", COMM_WORLD)) {
            Ok(c) => c.abort(errorcode),
            Err(_) => std::process::exit(errorcode),
        }
    }

    fn MPI_Query_thread / PMPI_Query_thread(provided: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        finish("MPI_Query_thread", COMM_WORLD, unsafe { put(provided, PROVIDED.load(Ordering::SeqCst)) })
    }

    fn MPI_Is_thread_main / PMPI_Is_thread_main(flag: *mut c_int) -> c_int {
        let main = MAIN_THREAD.get() == Some(&std::thread::current().id());
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        finish("MPI_Is_thread_main", COMM_WORLD, unsafe { put(flag, main as c_int) })
    }

    fn MPI_Wtime / PMPI_Wtime() -> f64 {
        crate::wtime()
    }

    fn MPI_Wtick / PMPI_Wtick() -> f64 {
        1e-9
    }

    fn MPI_Get_processor_name / PMPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> c_int {
        let host = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        finish("MPI_Get_processor_name", COMM_WORLD, unsafe {
            write_text(&host, name, resultlen, MAX_PROCESSOR_NAME)
        })
    }

    fn MPI_Get_version / PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        let r = unsafe { put(version, 3).and_then(|()| put(subversion, 1)) };
        finish("MPI_Get_version", COMM_WORLD, r)
    }

    fn MPI_Get_library_version / PMPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) -> c_int {
        let text = concat!("mpr ", env!("CARGO_PKG_VERSION"), " (MPI 3.1 C ABI)");
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        finish("MPI_Get_library_version", COMM_WORLD, unsafe {
            write_text(text, version, resultlen, MAX_LIBRARY_VERSION_STRING)
        })
    }

    fn MPI_Error_string / PMPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) -> c_int {
        if let Some((_, text)) = added(errorcode) {
            // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
            return finish("MPI_Error_string", COMM_WORLD, unsafe { write_text(&text, string, resultlen, MAX_ERROR_STRING) });
        }
        let (class, slot) = (errorcode & 0xff, errorcode >> 8);
        let detail = (slot > 0).then(|| {
            let m = MESSAGES.lock().unwrap_or_else(|p| p.into_inner());
            m.1.get(slot as usize - 1).cloned().unwrap_or_default()
        });
        let text = match detail {
            Some(d) if !d.is_empty() => format!("{}: {d}", class_text(class)),
            _ => class_text(class).to_string(),
        };
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        finish("MPI_Error_string", COMM_WORLD, unsafe { write_text(&text, string, resultlen, MAX_ERROR_STRING) })
    }

    fn MPI_Error_class / PMPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
        let r = if errorcode < 0 {
            Err(Fail::new(ERR_ARG, format!("{errorcode} is not an error code")))
        } else {
            // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
            unsafe { put(errorclass, error_class(errorcode)) }
        };
        finish("MPI_Error_class", COMM_WORLD, r)
    }

    fn MPI_Add_error_class / PMPI_Add_error_class(errorclass: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Add_error_class";
        // SAFETY: MPI's contract: errorclass points to an int.
        let r = with_state(NAME, |_| ()).and_then(|()| unsafe { put(errorclass, add_error(None)?) });
        finish(NAME, COMM_WORLD, r)
    }

    fn MPI_Add_error_code / PMPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Add_error_code";
        let r = with_state(NAME, |_| ()).and_then(|()| {
            // A predefined class, or one the program added (whose own value is its class).
            let predefined = errorclass == ERR_UNKNOWN || (errorclass < ADDED_FROM && class_text(errorclass) != "unknown error");
            if !predefined && added(errorclass).is_none_or(|(class, _)| class != errorclass) {
                return Err(Fail::new(ERR_ARG, format!("{NAME}: {errorclass} is not an error class")));
            }
            // SAFETY: MPI's contract: errorcode points to an int.
            unsafe { put(errorcode, add_error(Some(errorclass))?) }
        });
        finish(NAME, COMM_WORLD, r)
    }

    fn MPI_Add_error_string / PMPI_Add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
        const NAME: &str = "MPI_Add_error_string";
        let r = with_state(NAME, |_| ()).and_then(|()| {
            if string.is_null() {
                return Err(Fail::new(ERR_ARG, format!("{NAME}: a null string")));
            }
            // SAFETY: not null (checked); MPI's contract: a NUL-terminated string.
            let text = unsafe { std::ffi::CStr::from_ptr(string) }.to_string_lossy().into_owned();
            if text.len() >= MAX_ERROR_STRING {
                return Err(Fail::new(ERR_ARG, format!("{NAME}: a string of {} bytes (MPI_MAX_ERROR_STRING is {MAX_ERROR_STRING})", text.len())));
            }
            let mut a = ADDED.lock().unwrap_or_else(|p| p.into_inner());
            match usize::try_from(errorcode - ADDED_FROM).ok().and_then(|i| a.get_mut(i)) {
                Some(entry) => {
                    entry.1 = text;
                    Ok(())
                }
                None => Err(Fail::new(ERR_ARG, format!("{NAME}: {errorcode} is not an error class or code the program added"))),
            }
        });
        finish(NAME, COMM_WORLD, r)
    }

    fn MPI_Comm_set_errhandler / PMPI_Comm_set_errhandler(comm: c_int, errhandler: c_int) -> c_int {
        let r = with_state("MPI_Comm_set_errhandler", |s| {
            errh::settable(s, errhandler, errh::Kind::Comm)?;
            let entry = s.entry_mut(comm).ok_or_else(|| Fail::new(ERR_COMM, format!("{comm} is not a communicator")))?;
            entry.errhandler = errhandler;
            Ok(())
        });
        finish("MPI_Comm_set_errhandler", comm, r.and_then(|r| r))
    }

    fn MPI_Comm_get_errhandler / PMPI_Comm_get_errhandler(comm: c_int, errhandler: *mut c_int) -> c_int {
        let r = with_state("MPI_Comm_get_errhandler", |s| {
            s.entry(comm).map(|e| e.errhandler).ok_or_else(|| Fail::new(ERR_COMM, format!("{comm} is not a communicator")))
        });
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        finish("MPI_Comm_get_errhandler", comm, r.and_then(|r| r).and_then(|h| unsafe { put(errhandler, h) }))
    }

    fn MPI_Comm_rank / PMPI_Comm_rank(comm: c_int, rank: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        let r = comm_ref("MPI_Comm_rank", comm).and_then(|c| unsafe { put(rank, c.rank() as c_int) });
        finish("MPI_Comm_rank", comm, r)
    }

    fn MPI_Comm_size / PMPI_Comm_size(comm: c_int, size: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        let r = comm_ref("MPI_Comm_size", comm).and_then(|c| unsafe { put(size, c.size() as c_int) });
        finish("MPI_Comm_size", comm, r)
    }

    fn MPI_Type_size / PMPI_Type_size(datatype: c_int, size: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        let r = Datatype::of(datatype).and_then(|t| unsafe { put(size, t.size as c_int) });
        finish("MPI_Type_size", COMM_WORLD, r)
    }

    fn MPI_Get_count / PMPI_Get_count(status: *const MpiStatus, datatype: c_int, count: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
        unsafe { count_in("MPI_Get_count", status, datatype, count) }
    }

    fn MPI_Get_elements / PMPI_Get_elements(status: *const MpiStatus, datatype: c_int, count: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's status (or null: an error) and count.
        let r = unsafe { elements_in("MPI_Get_elements", status, datatype) }
            // SAFETY: as above.
            .and_then(|n| unsafe { put(count, n.and_then(|n| c_int::try_from(n).ok()).unwrap_or(UNDEFINED)) });
        finish("MPI_Get_elements", COMM_WORLD, r)
    }

    fn MPI_Send / PMPI_Send(
        buf: *const c_void,
        count: c_int,
        datatype: c_int,
        dest: c_int,
        tag: c_int,
        comm: c_int,
    ) -> c_int {
        // A run of a predefined type's elements to a rank, in this frame; every other case
        // and every argument error out of line (`send_general`), so that the common call
        // keeps no registers for theirs.
        // SAFETY: MPI's contract: `count` elements of `datatype` at `buf`.
        if let (Some(data), Ok(d), Some(c)) = (unsafe { plain(buf, count, datatype) }, usize::try_from(dest), comm_at(comm)) {
            let r = c.send(data, d, tag);
            drop(c);
            return match r {
                Ok(()) => MPI_SUCCESS,
                Err(e) => finish("MPI_Send", comm, Err(e.into())),
            };
        }
        // SAFETY: the same contract, passed on.
        unsafe { send_general(buf, count, datatype, dest, tag, comm) }
    }

    fn MPI_Recv / PMPI_Recv(
        buf: *mut c_void,
        count: c_int,
        datatype: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        status: *mut MpiStatus,
    ) -> c_int {
        let src = match source {
            ANY_SOURCE => Ok(crate::ANY_SOURCE),
            s => usize::try_from(s),
        };
        // As MPI_Send: the common case in this frame, the others in `recv_general`.
        // SAFETY: MPI's contract: room for `count` elements of `datatype` at `buf`.
        if let (Some(data), Ok(s), Some(c)) = (unsafe { plain_mut(buf, count, datatype) }, src, comm_at(comm)) {
            let r = c.recv(data, s, tag);
            drop(c);
            return match r {
                Ok(st) => {
                    // SAFETY: MPI's contract: status is an MPI_Status or MPI_STATUS_IGNORE.
                    unsafe { set_status_raw(status, MpiStatus::of(st)) };
                    MPI_SUCCESS
                }
                // SAFETY: as above.
                Err(e) => unsafe { recv_failed(status, comm, e) },
            };
        }
        // SAFETY: the same contract, passed on.
        unsafe { recv_general(buf, count, datatype, source, tag, comm, status) }
    }

    fn MPI_Sendrecv / PMPI_Sendrecv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        dest: c_int,
        sendtag: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        source: c_int,
        recvtag: c_int,
        comm: c_int,
        status: *mut MpiStatus,
    ) -> c_int {
        let r = (|| {
            let c = comm_ref("MPI_Sendrecv", comm)?;
            // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
            let send = unsafe { message(sendbuf, sendcount, sendtype)? };
            // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
            let mut recv = unsafe { landing(recvbuf, recvcount, recvtype)? };
            let got = sendrecv_bytes(&c, &send, dest, sendtag, &mut recv, source, recvtag)?;
            // SAFETY: MPI's contract: status is an MPI_Status or MPI_STATUS_IGNORE.
            unsafe { set_status_raw(status, got) };
            Ok(())
        })();
        finish("MPI_Sendrecv", comm, r)
    }

    fn MPI_Probe / PMPI_Probe(source: c_int, tag: c_int, comm: c_int, status: *mut MpiStatus) -> c_int {
        let r = (|| {
            let c = comm_ref("MPI_Probe", comm)?;
            match peer(source, true)? {
                None => {
                    if !status.is_null() {
                        // SAFETY: the caller's MPI_Status (not null, checked).
                        unsafe { *status = MpiStatus::proc_null() };
                    }
                }
                // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
                Some(s) => unsafe { set_status(status, c.probe(s, tag)?) },
            }
            Ok(())
        })();
        finish("MPI_Probe", comm, r)
    }

    fn MPI_Iprobe / PMPI_Iprobe(source: c_int, tag: c_int, comm: c_int, flag: *mut c_int, status: *mut MpiStatus) -> c_int {
        let r = (|| {
            let c = comm_ref("MPI_Iprobe", comm)?;
            let found = match peer(source, true)? {
                None => {
                    if !status.is_null() {
                        // SAFETY: the caller's MPI_Status (not null, checked).
                        unsafe { *status = MpiStatus::proc_null() };
                    }
                    true
                }
                Some(s) => match c.iprobe(s, tag)? {
                    Some(st) => {
                        // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
                        unsafe { set_status(status, st) };
                        true
                    }
                    None => false,
                },
            };
            // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
            unsafe { put(flag, found as c_int) }
        })();
        finish("MPI_Iprobe", comm, r)
    }

    fn MPI_Barrier / PMPI_Barrier(comm: c_int) -> c_int {
        finish("MPI_Barrier", comm, comm_ref("MPI_Barrier", comm).and_then(|c| Ok(c.barrier()?)))
    }

    fn MPI_Bcast / PMPI_Bcast(buffer: *mut c_void, count: c_int, datatype: c_int, root: c_int, comm: c_int) -> c_int {
        // As MPI_Send: a run of a predefined type's elements from a valid root in this
        // frame, every other case and every argument error in `bcast_general`.
        // SAFETY: MPI's contract: `count` elements of `datatype` at `buffer`.
        if let (Some(data), Ok(r), Some(c)) = (unsafe { plain_mut(buffer, count, datatype) }, usize::try_from(root), comm_at(comm)) {
            if r < c.size() && !c.is_inter() {
                let res = c.bcast(data, r);
                drop(c);
                return match res {
                    Ok(()) => MPI_SUCCESS,
                    Err(e) => finish("MPI_Bcast", comm, Err(e.into())),
                };
            }
        }
        // SAFETY: the same contract, passed on.
        unsafe { bcast_general(buffer, count, datatype, root, comm) }
    }

    fn MPI_Reduce / PMPI_Reduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: c_int,
        op: c_int,
        root: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_ref("MPI_Reduce", comm)?;
            let how = match c.is_inter() {
                true => match inter_root(&c, root)? {
                    // As MPI_Bcast's: no other argument is read.
                    crate::InterRoot::Beside => return Ok(c.inter_beside("MPI_Reduce")?),
                    root => Reduction::Inter(root),
                },
                false => Reduction::Root(root_of(&c, root)?),
            };
            // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
            unsafe { reduce(&c, how, sendbuf, recvbuf, count, datatype, op) }
        })();
        finish("MPI_Reduce", comm, r)
    }

    fn MPI_Allreduce / PMPI_Allreduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: c_int,
        op: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_ref("MPI_Allreduce", comm)?;
            // SAFETY: MPI's contract: the caller's pointers are valid for what the call reads or writes.
            if let Some(done) = unsafe { allreduce_basic(&c, sendbuf, recvbuf, count, datatype, op) } {
                return done;
            }
            // SAFETY: as above.
            unsafe { reduce(&c, Reduction::All, sendbuf, recvbuf, count, datatype, op) }
        })();
        finish("MPI_Allreduce", comm, r)
    }

    fn MPI_Scan / PMPI_Scan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, comm: c_int) -> c_int {
        let r = (|| {
            let c = intra_of("MPI_Scan", comm)?;
            // SAFETY: MPI's contract for the buffers, passed on.
            unsafe { reduce(&c, Reduction::Scan { inclusive: true }, sendbuf, recvbuf, count, datatype, op) }
        })();
        finish("MPI_Scan", comm, r)
    }

    fn MPI_Exscan / PMPI_Exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int, comm: c_int) -> c_int {
        let r = (|| {
            let c = intra_of("MPI_Exscan", comm)?;
            // SAFETY: MPI's contract for the buffers, passed on.
            unsafe { reduce(&c, Reduction::Scan { inclusive: false }, sendbuf, recvbuf, count, datatype, op) }
        })();
        finish("MPI_Exscan", comm, r)
    }

    fn MPI_Reduce_scatter_block / PMPI_Reduce_scatter_block(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcount: c_int,
        datatype: c_int,
        op: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Reduce_scatter_block", comm)?;
            // SAFETY: MPI's contract for the buffers, passed on.
            unsafe { reduce(&c, Reduction::ScatterBlock, sendbuf, recvbuf, recvcount, datatype, op) }
        })();
        finish("MPI_Reduce_scatter_block", comm, r)
    }

    fn MPI_Reduce_scatter / PMPI_Reduce_scatter(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        datatype: c_int,
        op: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Reduce_scatter", comm)?;
            distinct(sendbuf, recvbuf)?;
            let (ty, op) = (Datatype::of(datatype)?, ReduceOp::of(op)?);
            // SAFETY: MPI's contract: recvcounts holds size ints.
            let counts = unsafe { ints_at(recvcounts, c.size(), "receive counts")? };
            let counts: Vec<usize> = counts.iter().map(|&n| count_of(n)).collect::<Res<_>>()?;
            let (total, me) = (counts.iter().sum::<usize>(), c.rank());
            let at = counts[..me].iter().sum::<usize>() * ty.size;
            // The whole reduction, of which this rank keeps its block (in place: the input
            // is the receive buffer, all blocks of it).
            let input = if sendbuf == IN_PLACE { recvbuf.cast_const() } else { sendbuf };
            // SAFETY: MPI's contract: the input holds every block's elements.
            let input = unsafe { bytes(input, total, &ty)?.into_owned() };
            let mut all = vec![0u8; input.len()];
            types::reduce(&c, Reduction::All, Some(&input), Some(&mut all), &ty, op)?;
            // SAFETY: MPI's contract: recvbuf holds this rank's count of elements.
            let mut mine = unsafe { bytes_mut(recvbuf, counts[me], &ty)? };
            let n = mine.len();
            mine.copy_from_slice(&all[at..at + n]);
            Ok(())
        })();
        finish("MPI_Reduce_scatter", comm, r)
    }

    fn MPI_Op_create / PMPI_Op_create(user_fn: Option<types::UserFn>, commute: c_int, op: *mut c_int) -> c_int {
        let r = (|| {
            let f = user_fn.ok_or_else(|| Fail::new(ERR_ARG, "MPI_Op_create: a null function"))?;
            // SAFETY: MPI's contract: op points to an MPI_Op.
            unsafe { put(op, ReduceOp::insert(types::UserOp { f, commute: commute != 0 })) }
        })();
        finish("MPI_Op_create", COMM_WORLD, r)
    }

    fn MPI_Op_free / PMPI_Op_free(op: *mut c_int) -> c_int {
        let r = (|| {
            if op.is_null() {
                return Err(Fail::new(ERR_ARG, "MPI_Op_free: a null pointer"));
            }
            // SAFETY: not null (checked): the caller's MPI_Op.
            ReduceOp::free(unsafe { *op })?;
            // SAFETY: as above.
            unsafe { put(op, 0) }
        })();
        finish("MPI_Op_free", COMM_WORLD, r)
    }

    fn MPI_Op_commutative / PMPI_Op_commutative(op: c_int, commute: *mut c_int) -> c_int {
        let r = ReduceOp::of(op).and_then(|o| {
            let yes = match o.how {
                types::Combine::User(u) => u.commute,
                _ => true,
            };
            // SAFETY: MPI's contract: commute points to an int.
            unsafe { put(commute, yes as c_int) }
        });
        finish("MPI_Op_commutative", COMM_WORLD, r)
    }

    fn MPI_Reduce_local / PMPI_Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count: c_int, datatype: c_int, op: c_int) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Reduce_local", COMM_WORLD)?;
            // SAFETY: MPI's contract for the buffers, passed on.
            unsafe { reduce(&c, Reduction::Local, inbuf, inoutbuf, count, datatype, op) }
        })();
        finish("MPI_Reduce_local", COMM_WORLD, r)
    }

    fn MPI_Gather / PMPI_Gather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        root: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Gather", comm)?;
            if c.is_inter() {
                let root = inter_root(&c, root)?;
                // SAFETY: MPI's contract for the buffers, passed on.
                let (send, mut recv) = unsafe { rooted_inter(&c, root, (sendbuf, sendcount, sendtype), (recvbuf, recvcount, recvtype), false)? };
                return Ok(c.inter_gather(send.as_deref(), recv.as_deref_mut(), root)?);
            }
            let root = root_of(&c, root)?;
            let at_root = c.rank() == root;
            if at_root {
                distinct_block(sendbuf, sendcount, recvbuf, root as isize * recvcount as isize, recvtype)?;
            }
            if sendbuf == IN_PLACE && at_root {
                let rt = Datatype::of(recvtype)?;
                let n = count_of(recvcount)?;
                // SAFETY: MPI's contract: the root's recvbuf holds size x recvcount elements.
                let mut recv = unsafe { bytes_mut(recvbuf, n * c.size(), &rt)? };
                let mine = recv[root * n * rt.size..(root + 1) * n * rt.size].to_vec();
                return Ok(c.gather(&mine, Some(&mut recv), root)?);
            }
            let st = Datatype::of(sendtype)?;
            // SAFETY: MPI's contract for sendbuf.
            let send = unsafe { bytes(sendbuf, count_of(sendcount)?, &st)? };
            let mut recv = if at_root {
                let rt = Datatype::of(recvtype)?;
                // SAFETY: MPI's contract: the root's recvbuf holds size x recvcount elements.
                Some(unsafe { bytes_mut(recvbuf, count_of(recvcount)? * c.size(), &rt)? })
            } else {
                None
            };
            Ok(c.gather(&send, recv.as_deref_mut(), root)?)
        })();
        finish("MPI_Gather", comm, r)
    }

    fn MPI_Scatter / PMPI_Scatter(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        root: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Scatter", comm)?;
            if c.is_inter() {
                let root = inter_root(&c, root)?;
                // SAFETY: MPI's contract for the buffers, passed on.
                let (send, mut recv) = unsafe { rooted_inter(&c, root, (sendbuf, sendcount, sendtype), (recvbuf, recvcount, recvtype), true)? };
                return Ok(c.inter_scatter(send.as_deref(), recv.as_deref_mut(), root)?);
            }
            let root = root_of(&c, root)?;
            let at_root = c.rank() == root;
            if at_root {
                distinct_block(recvbuf, recvcount, sendbuf, root as isize * sendcount as isize, sendtype)?;
            }
            let send = if at_root {
                let st = Datatype::of(sendtype)?;
                // SAFETY: MPI's contract: the root's sendbuf holds size x sendcount elements.
                Some(unsafe { bytes(sendbuf, count_of(sendcount)? * c.size(), &st)? })
            } else {
                None
            };
            if recvbuf == IN_PLACE.cast_mut() && at_root {
                // The root's own block stays where it is.
                let n = send.as_ref().map_or(0, |s| s.len() / c.size());
                let mut own = vec![0u8; n];
                return Ok(c.scatter(send.as_deref(), &mut own, root)?);
            }
            let rt = Datatype::of(recvtype)?;
            // SAFETY: MPI's contract for recvbuf.
            let mut recv = unsafe { bytes_mut(recvbuf, count_of(recvcount)?, &rt)? };
            Ok(c.scatter(send.as_deref(), &mut recv, root)?)
        })();
        finish("MPI_Scatter", comm, r)
    }

    fn MPI_Allgather / PMPI_Allgather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        comm: c_int,
    ) -> c_int {
        // As MPI_Send: runs of predefined types' elements in this frame, every other case
        // and every argument error in `allgather_general`.
        if let Some(c) = comm_at(comm) {
            // The ranks whose blocks arrive: an inter-communicator's other group.
            let p = c.peers().len();
            // SAFETY: MPI's contract: the caller's buffers hold what the call reads or writes.
            let bufs = unsafe { plain_pair(sendbuf, sendcount, sendtype, 1, recvbuf, recvcount, recvtype, p) };
            if let Some((send, recv)) = bufs {
                let r = c.allgather(send, recv);
                drop(c);
                return match r {
                    Ok(()) => MPI_SUCCESS,
                    Err(e) => finish("MPI_Allgather", comm, Err(e.into())),
                };
            }
        }
        // SAFETY: the same contract, passed on.
        unsafe { allgather_general(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) }
    }

    fn MPI_Alltoall / PMPI_Alltoall(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        comm: c_int,
    ) -> c_int {
        // As MPI_Send: runs of predefined types' elements in this frame, every other case
        // and every argument error in `alltoall_general`.
        if let Some(c) = comm_at(comm) {
            // The ranks a block goes to and comes from: an inter-communicator's other group.
            let p = c.peers().len();
            // SAFETY: MPI's contract: the caller's buffers hold what the call reads or writes.
            let bufs = unsafe { plain_pair(sendbuf, sendcount, sendtype, p, recvbuf, recvcount, recvtype, p) };
            if let Some((send, recv)) = bufs {
                let r = c.alltoall(send, recv);
                drop(c);
                return match r {
                    Ok(()) => MPI_SUCCESS,
                    Err(e) => finish("MPI_Alltoall", comm, Err(e.into())),
                };
            }
        }
        // SAFETY: the same contract, passed on.
        unsafe { alltoall_general(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) }
    }

    fn MPI_Gatherv / PMPI_Gatherv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: c_int,
        root: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Gatherv", comm)?;
            if c.is_inter() {
                let root = inter_root(&c, root)?;
                if sendbuf == IN_PLACE || recvbuf == IN_PLACE.cast_mut() {
                    return Err(Fail::new(ERR_BUFFER, "MPI_IN_PLACE on an inter-communicator"));
                }
                let st = (root == crate::InterRoot::Here).then(|| Datatype::of(recvtype)).transpose()?;
                let mut recv = None;
                if let Some(ty) = st {
                    // SAFETY: MPI's contract: the root's arrays hold the other group's size of
                    // ints, recvbuf spans every block.
                    let v = unsafe { blocks(recvcounts, displs, c.peers().len(), &ty)? };
                    // SAFETY: as above.
                    recv = Some((unsafe { bytes_mut(recvbuf, v.count, &v.ty)? }, v));
                }
                let send = match root {
                    // SAFETY: MPI's contract for sendbuf.
                    crate::InterRoot::Remote(_) => Some(unsafe { bytes(sendbuf, count_of(sendcount)?, &Datatype::of(sendtype)?)? }),
                    _ => None,
                };
                let recv = recv.as_mut().map(|(b, v)| (&mut b[..], &v.counts[..], &v.displs[..]));
                return Ok(c.inter_gatherv(send.as_deref(), recv, root)?);
            }
            let root = root_of(&c, root)?;
            if c.rank() == root {
                // SAFETY: MPI's contract: the root's displacements hold size ints.
                let own = unsafe { int_at(displs, c.size(), root) };
                distinct_block(sendbuf, sendcount, recvbuf, own, recvtype)?;
            } else {
                let st = Datatype::of(sendtype)?;
                // SAFETY: MPI's contract for sendbuf.
                let send = unsafe { bytes(sendbuf, count_of(sendcount)?, &st)? };
                return Ok(c.gatherv(&send, None, root)?);
            }
            // SAFETY: MPI's contract: the root's arrays hold size ints.
            let v = unsafe { blocks(recvcounts, displs, c.size(), &Datatype::of(recvtype)?)? };
            let (counts, displs) = (&v.counts, &v.displs);
            // SAFETY: MPI's contract: recvbuf spans every block.
            let mut recv = unsafe { bytes_mut(recvbuf, v.count, &v.ty)? };
            let mine = if sendbuf == IN_PLACE {
                recv[displs[root]..displs[root] + counts[root]].to_vec()
            } else {
                // SAFETY: MPI's contract for sendbuf.
                unsafe { bytes(sendbuf, count_of(sendcount)?, &Datatype::of(sendtype)?)? }.to_vec()
            };
            Ok(c.gatherv(&mine, Some((&mut recv, counts, displs)), root)?)
        })();
        finish("MPI_Gatherv", comm, r)
    }

    fn MPI_Scatterv / PMPI_Scatterv(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        displs: *const c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        root: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Scatterv", comm)?;
            if c.is_inter() {
                let root = inter_root(&c, root)?;
                if sendbuf == IN_PLACE || recvbuf == IN_PLACE.cast_mut() {
                    return Err(Fail::new(ERR_BUFFER, "MPI_IN_PLACE on an inter-communicator"));
                }
                let send = match root {
                    crate::InterRoot::Here => {
                        // SAFETY: MPI's contract: the root's arrays hold the other group's size
                        // of ints, sendbuf spans every block.
                        let v = unsafe { blocks(sendcounts, displs, c.peers().len(), &Datatype::of(sendtype)?)? };
                        // SAFETY: as above.
                        Some((unsafe { bytes(sendbuf, v.count, &v.ty)? }, v))
                    }
                    _ => None,
                };
                let mut recv = match root {
                    // SAFETY: MPI's contract for recvbuf.
                    crate::InterRoot::Remote(_) => Some(unsafe { bytes_mut(recvbuf, count_of(recvcount)?, &Datatype::of(recvtype)?)? }),
                    _ => None,
                };
                let send = send.as_ref().map(|(b, v)| (&b[..], &v.counts[..], &v.displs[..]));
                return Ok(c.inter_scatterv(send, recv.as_deref_mut(), root)?);
            }
            let root = root_of(&c, root)?;
            let send = if c.rank() == root {
                // SAFETY: MPI's contract: the root's displacements hold size ints.
                let own = unsafe { int_at(displs, c.size(), root) };
                distinct_block(recvbuf, recvcount, sendbuf, own, sendtype)?;
                // SAFETY: MPI's contract: the root's arrays hold size ints.
                let v = unsafe { blocks(sendcounts, displs, c.size(), &Datatype::of(sendtype)?)? };
                // SAFETY: MPI's contract: sendbuf spans every block.
                let buf = unsafe { bytes(sendbuf, v.count, &v.ty)? };
                Some((buf, v.counts, v.displs))
            } else {
                None
            };
            let send_ref = send.as_ref().map(|(b, c, d)| (&b[..], &c[..], &d[..]));
            if recvbuf == IN_PLACE.cast_mut() && c.rank() == root {
                let n = send.as_ref().map_or(0, |(_, counts, _)| counts[root]);
                let mut own = vec![0u8; n];
                return Ok(c.scatterv(send_ref, &mut own, root)?);
            }
            // SAFETY: MPI's contract for recvbuf.
            let mut recv = unsafe { bytes_mut(recvbuf, count_of(recvcount)?, &Datatype::of(recvtype)?)? };
            Ok(c.scatterv(send_ref, &mut recv, root)?)
        })();
        finish("MPI_Scatterv", comm, r)
    }

    fn MPI_Allgatherv / PMPI_Allgatherv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Allgatherv", comm)?;
            if sendbuf == IN_PLACE {
                c.intra("MPI_Allgatherv in place")?;
            }
            // SAFETY: MPI's contract: the displacements hold (the other group's) size ints.
            let own = if c.is_inter() { 0 } else { unsafe { int_at(displs, c.size(), c.rank()) } };
            distinct_block(sendbuf, sendcount, recvbuf, own, recvtype)?;
            // SAFETY: MPI's contract: the arrays hold (the other group's) size ints.
            let v = unsafe { blocks(recvcounts, displs, c.peers().len(), &Datatype::of(recvtype)?)? };
            let (counts, displs) = (&v.counts, &v.displs);
            // SAFETY: MPI's contract: recvbuf spans every block.
            let mut recv = unsafe { bytes_mut(recvbuf, v.count, &v.ty)? };
            let me = c.rank();
            let mine = if sendbuf == IN_PLACE {
                recv[displs[me]..displs[me] + counts[me]].to_vec()
            } else {
                // SAFETY: MPI's contract for sendbuf.
                unsafe { bytes(sendbuf, count_of(sendcount)?, &Datatype::of(sendtype)?)? }.to_vec()
            };
            Ok(c.allgatherv(&mine, &mut recv, counts, displs)?)
        })();
        finish("MPI_Allgatherv", comm, r)
    }

    fn MPI_Alltoallv / PMPI_Alltoallv(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const c_int,
        recvtype: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Alltoallv", comm)?;
            distinct(sendbuf, recvbuf)?;
            // The ranks blocks go to and come from: an inter-communicator's other group.
            let p = c.peers().len();
            // SAFETY: MPI's contract: the arrays hold size ints, the buffers span every block.
            unsafe {
                let r = blocks(recvcounts, rdispls, p, &Datatype::of(recvtype)?)?;
                alltoall_blocks(&c, sendbuf, || blocks(sendcounts, sdispls, p, &Datatype::of(sendtype)?), recvbuf, r)
            }
        })();
        finish("MPI_Alltoallv", comm, r)
    }

    fn MPI_Alltoallw / PMPI_Alltoallw(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const c_int,
        sendtypes: *const c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const c_int,
        recvtypes: *const c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Alltoallw", comm)?;
            distinct(sendbuf, recvbuf)?;
            // The ranks blocks go to and come from: an inter-communicator's other group.
            let p = c.peers().len();
            // SAFETY: MPI's contract: the arrays hold size elements, the buffers span every
            // block.
            unsafe {
                let r = typed_blocks(recvcounts, rdispls, recvtypes, p)?;
                alltoall_blocks(&c, sendbuf, || typed_blocks(sendcounts, sdispls, sendtypes, p), recvbuf, r)
            }
        })();
        finish("MPI_Alltoallw", comm, r)
    }

    fn MPI_Comm_dup / PMPI_Comm_dup(comm: c_int, newcomm: *mut c_int) -> c_int {
        let r = comm_of("MPI_Comm_dup", comm).and_then(|c| {
            let made = c.dup()?;
            // SAFETY: MPI's contract: newcomm points to an MPI_Comm.
            unsafe { new_comm("MPI_Comm_dup", Some(made), errhandler_of(comm), newcomm) }?;
            // SAFETY: just written.
            let made = unsafe { *newcomm };
            topo::set_topo("MPI_Comm_dup", made, topo::topo_of("MPI_Comm_dup", comm)?)?;
            attr::copy_all("MPI_Comm_dup", attr::Object::Comm, comm, made).inspect_err(|_| {
                // A copy function failed: no duplicate is made.
                let _ = with_state("MPI_Comm_dup", |s| free_handle(&mut s.comms, made, 3));
                // SAFETY: as above.
                unsafe { *newcomm = 0 };
            })
        });
        finish("MPI_Comm_dup", comm, r)
    }

    fn MPI_Comm_split / PMPI_Comm_split(comm: c_int, color: c_int, key: c_int, newcomm: *mut c_int) -> c_int {
        let r = comm_of("MPI_Comm_split", comm).and_then(|c| {
            let color = match color {
                UNDEFINED => None,
                c if c >= 0 => Some(c as u32),
                c => return Err(Fail::new(ERR_ARG, format!("MPI_Comm_split: color {c}"))),
            };
            let made = c.split(color, key)?;
            // SAFETY: MPI's contract: newcomm points to an MPI_Comm.
            unsafe { new_comm("MPI_Comm_split", made, errhandler_of(comm), newcomm) }
        });
        finish("MPI_Comm_split", comm, r)
    }

    fn MPI_Comm_split_type / PMPI_Comm_split_type(comm: c_int, split_type: c_int, key: c_int, info: c_int, newcomm: *mut c_int) -> c_int {
        let r = comm_of("MPI_Comm_split_type", comm).and_then(|c| {
            c.intra("MPI_Comm_split_type")?;
            info::hints("MPI_Comm_split_type", info)?;
            let made = match split_type {
                COMM_TYPE_SHARED => Some(c.split_shared(key)?),
                // Taking part in the same split as the others, with no color.
                UNDEFINED => c.split(None, key)?,
                t => return Err(Fail::new(ERR_ARG, format!("MPI_Comm_split_type: split type {t}"))),
            };
            // SAFETY: MPI's contract: newcomm points to an MPI_Comm.
            unsafe { new_comm("MPI_Comm_split_type", made, errhandler_of(comm), newcomm) }
        });
        finish("MPI_Comm_split_type", comm, r)
    }

    fn MPI_Comm_group / PMPI_Comm_group(comm: c_int, group: *mut c_int) -> c_int {
        let r = comm_of("MPI_Comm_group", comm).and_then(|c| {
            // SAFETY: MPI's contract: group points to an MPI_Group.
            unsafe { new_group("MPI_Comm_group", c.comm_group(), group) }
        });
        finish("MPI_Comm_group", comm, r)
    }

    fn MPI_Group_size / PMPI_Group_size(group: c_int, size: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: size points to an int.
        let r = group_of("MPI_Group_size", group).and_then(|g| unsafe { put(size, g.size() as c_int) });
        finish("MPI_Group_size", COMM_WORLD, r)
    }

    fn MPI_Group_rank / PMPI_Group_rank(group: c_int, rank: *mut c_int) -> c_int {
        let r = group_of("MPI_Group_rank", group).and_then(|g| {
            let mine = my_rank_in("MPI_Group_rank", &g)?;
            // SAFETY: MPI's contract: rank points to an int.
            unsafe { put(rank, mine) }
        });
        finish("MPI_Group_rank", COMM_WORLD, r)
    }

    fn MPI_Group_incl / PMPI_Group_incl(group: c_int, n: c_int, ranks: *const c_int, newgroup: *mut c_int) -> c_int {
        let r = group_of("MPI_Group_incl", group).and_then(|g| {
            // SAFETY: MPI's contract: ranks holds n ints; newgroup points to an MPI_Group.
            let made = g.incl(&unsafe { ranks_at(ranks, count_of(n)?, "ranks")? })?;
            // SAFETY: as above.
            unsafe { new_group("MPI_Group_incl", made, newgroup) }
        });
        finish("MPI_Group_incl", COMM_WORLD, r)
    }

    // `int MPI_Pcontrol(const int level, ...)` in mpi.h: a Rust function cannot take a
    // variable argument list, and this one reads none. Every ABI mpr builds for passes the
    // named argument of a variadic call where a plain call passes it (x86-64 and aarch64
    // Linux: the same registers; Apple's arm64: the named ones in registers, the rest on
    // the stack), so ignoring the rest is sound. The library makes no use of the level
    // (MPI-3.1 14.2.4): it is for a profiling layer's MPI_Pcontrol.
    fn MPI_Pcontrol / PMPI_Pcontrol(level: c_int) -> c_int {
        let _ = level;
        MPI_SUCCESS
    }

    fn MPI_Group_union / PMPI_Group_union(group1: c_int, group2: c_int, newgroup: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: newgroup points to an MPI_Group.
        unsafe { group_pair("MPI_Group_union", group1, group2, newgroup, Group::union) }
    }

    fn MPI_Group_intersection / PMPI_Group_intersection(group1: c_int, group2: c_int, newgroup: *mut c_int) -> c_int {
        // SAFETY: as above.
        unsafe { group_pair("MPI_Group_intersection", group1, group2, newgroup, Group::intersection) }
    }

    fn MPI_Group_difference / PMPI_Group_difference(group1: c_int, group2: c_int, newgroup: *mut c_int) -> c_int {
        // SAFETY: as above.
        unsafe { group_pair("MPI_Group_difference", group1, group2, newgroup, Group::difference) }
    }

    fn MPI_Group_range_incl / PMPI_Group_range_incl(group: c_int, n: c_int, ranges: *const [c_int; 3], newgroup: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: ranges holds n triplets; newgroup points to an MPI_Group.
        unsafe { group_ranges("MPI_Group_range_incl", group, n, ranges, newgroup, Group::incl) }
    }

    fn MPI_Group_range_excl / PMPI_Group_range_excl(group: c_int, n: c_int, ranges: *const [c_int; 3], newgroup: *mut c_int) -> c_int {
        // SAFETY: as above.
        unsafe { group_ranges("MPI_Group_range_excl", group, n, ranges, newgroup, Group::excl) }
    }

    fn MPI_Group_excl / PMPI_Group_excl(group: c_int, n: c_int, ranks: *const c_int, newgroup: *mut c_int) -> c_int {
        let r = group_of("MPI_Group_excl", group).and_then(|g| {
            // SAFETY: MPI's contract: ranks holds n ints; newgroup points to an MPI_Group.
            let made = g.excl(&unsafe { ranks_at(ranks, count_of(n)?, "ranks")? })?;
            // SAFETY: as above.
            unsafe { new_group("MPI_Group_excl", made, newgroup) }
        });
        finish("MPI_Group_excl", COMM_WORLD, r)
    }

    fn MPI_Group_translate_ranks / PMPI_Group_translate_ranks(
        group1: c_int,
        n: c_int,
        ranks1: *const c_int,
        group2: c_int,
        ranks2: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let (a, b) = (group_of("MPI_Group_translate_ranks", group1)?, group_of("MPI_Group_translate_ranks", group2)?);
            // SAFETY: MPI's contract: ranks1 holds n ints.
            let given = unsafe { ints_at(ranks1, count_of(n)?, "ranks")? };
            // MPI_PROC_NULL translates to itself; every other rank must be one of group1's.
            let from = given
                .iter()
                .filter(|&&r| r != PROC_NULL)
                .map(|&r| usize::try_from(r).map_err(|_| Fail::new(ERR_RANK, format!("invalid rank {r}"))))
                .collect::<Res<Vec<usize>>>()?;
            let mut to = a.translate_ranks(&from, &b)?.into_iter();
            if !given.is_empty() && ranks2.is_null() {
                return Err(Fail::new(ERR_ARG, "a null array for the translated ranks"));
            }
            for (i, &r) in given.iter().enumerate() {
                let t = if r == PROC_NULL { PROC_NULL } else { to.next().flatten().map_or(UNDEFINED, |r| r as c_int) };
                // SAFETY: MPI's contract: ranks2 holds n ints (not null, checked).
                unsafe { *ranks2.add(i) = t };
            }
            Ok(())
        })();
        finish("MPI_Group_translate_ranks", COMM_WORLD, r)
    }

    fn MPI_Group_compare / PMPI_Group_compare(group1: c_int, group2: c_int, result: *mut c_int) -> c_int {
        let r = (|| {
            let (a, b) = (group_of("MPI_Group_compare", group1)?, group_of("MPI_Group_compare", group2)?);
            // SAFETY: MPI's contract: result points to an int.
            unsafe { put(result, compare_groups(&a, &b)?) }
        })();
        finish("MPI_Group_compare", COMM_WORLD, r)
    }

    fn MPI_Group_free / PMPI_Group_free(group: *mut c_int) -> c_int {
        if group.is_null() {
            return finish("MPI_Group_free", COMM_WORLD, Err(Fail::new(ERR_ARG, "a null MPI_Group pointer")));
        }
        // SAFETY: not null (checked): the caller's MPI_Group.
        let h = unsafe { *group };
        let r = with_state("MPI_Group_free", |s| h == GROUP_EMPTY || free_handle(&mut s.groups, h, GROUP_EMPTY as usize + 1)).and_then(|freed| {
            freed.then_some(()).ok_or_else(|| Fail::new(ERR_GROUP, format!("MPI_Group_free: {h} is not a group this program made")))
        });
        if r.is_ok() {
            // SAFETY: as above.
            unsafe { *group = 0 };
        }
        finish("MPI_Group_free", COMM_WORLD, r)
    }

    fn MPI_Comm_create / PMPI_Comm_create(comm: c_int, group: c_int, newcomm: *mut c_int) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Comm_create", comm)?;
            let g = group_of("MPI_Comm_create", group)?;
            let made = c.create(&g)?;
            // SAFETY: MPI's contract: newcomm points to an MPI_Comm.
            unsafe { new_comm("MPI_Comm_create", made, errhandler_of(comm), newcomm) }
        })();
        finish("MPI_Comm_create", comm, r)
    }

    fn MPI_Comm_create_group / PMPI_Comm_create_group(comm: c_int, group: c_int, tag: c_int, newcomm: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Comm_create_group";
        let r = (|| {
            let c = comm_of(NAME, comm)?;
            let g = group_of(NAME, group)?;
            let made = c.create_group(&g, tag)?;
            // SAFETY: MPI's contract: newcomm points to an MPI_Comm.
            unsafe { new_comm(NAME, made, errhandler_of(comm), newcomm) }
        })();
        finish(NAME, comm, r)
    }

    fn MPI_Comm_test_inter / PMPI_Comm_test_inter(comm: c_int, flag: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: flag points to an int.
        let r = comm_of("MPI_Comm_test_inter", comm).and_then(|c| unsafe { put(flag, c.is_inter() as c_int) });
        finish("MPI_Comm_test_inter", comm, r)
    }

    fn MPI_Comm_remote_size / PMPI_Comm_remote_size(comm: c_int, size: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Comm_remote_size";
        let r = comm_of(NAME, comm).and_then(|c| {
            let g = c.remote_group().ok_or_else(|| intra_only(NAME))?;
            // SAFETY: MPI's contract: size points to an int.
            unsafe { put(size, g.size() as c_int) }
        });
        finish(NAME, comm, r)
    }

    fn MPI_Comm_remote_group / PMPI_Comm_remote_group(comm: c_int, group: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Comm_remote_group";
        let r = comm_of(NAME, comm).and_then(|c| {
            let g = c.remote_group().ok_or_else(|| intra_only(NAME))?;
            // SAFETY: MPI's contract: group points to an MPI_Group.
            unsafe { new_group(NAME, g, group) }
        });
        finish(NAME, comm, r)
    }

    fn MPI_Intercomm_create / PMPI_Intercomm_create(
        local_comm: c_int,
        local_leader: c_int,
        peer_comm: c_int,
        remote_leader: c_int,
        tag: c_int,
        newintercomm: *mut c_int,
    ) -> c_int {
        const NAME: &str = "MPI_Intercomm_create";
        let r = (|| {
            let c = intra_of(NAME, local_comm)?;
            let leader = usize::try_from(local_leader)
                .ok()
                .filter(|&l| l < c.size())
                .ok_or_else(|| Fail::new(ERR_RANK, format!("invalid local leader {local_leader}")))?;
            // The peer communicator and the remote leader count at the local leader alone. A
            // leader that finds them wrong still takes part (with no peer), so that its whole
            // group fails, none left waiting for it.
            let peer = (c.rank() == leader).then(|| {
                let p = comm_of(NAME, peer_comm)?;
                let r = usize::try_from(remote_leader)
                    .ok()
                    .filter(|&r| r < p.peers().len())
                    .ok_or_else(|| Fail::new(ERR_RANK, format!("invalid remote leader {remote_leader}")))?;
                Ok::<_, Fail>((p, r))
            });
            let made = c.intercomm(leader, peer.as_ref().and_then(|p| p.as_ref().ok()).map(|(p, r)| (p, *r)), tag);
            if let Some(Err(fail)) = peer {
                return Err(fail);
            }
            let made = made?;
            // SAFETY: MPI's contract: newintercomm points to an MPI_Comm.
            unsafe { new_comm(NAME, Some(made), errhandler_of(local_comm), newintercomm) }
        })();
        finish(NAME, local_comm, r)
    }

    fn MPI_Intercomm_merge / PMPI_Intercomm_merge(intercomm: c_int, high: c_int, newintracomm: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Intercomm_merge";
        let r = (|| {
            let made = comm_of(NAME, intercomm)?.merge(high != 0)?;
            // SAFETY: MPI's contract: newintracomm points to an MPI_Comm.
            unsafe { new_comm(NAME, Some(made), errhandler_of(intercomm), newintracomm) }
        })();
        finish(NAME, intercomm, r)
    }

    fn MPI_Comm_get_parent / PMPI_Comm_get_parent(parent: *mut c_int) -> c_int {
        // No process is started by MPI_Comm_spawn (mpr has none): the parent is always
        // MPI_COMM_NULL (0).
        // SAFETY: MPI's contract: parent points to an MPI_Comm.
        let r = with_state("MPI_Comm_get_parent", |_| ()).and_then(|()| unsafe { put(parent, 0) });
        finish("MPI_Comm_get_parent", COMM_WORLD, r)
    }

    fn MPI_Comm_compare / PMPI_Comm_compare(comm1: c_int, comm2: c_int, result: *mut c_int) -> c_int {
        let r = (|| {
            let (a, b) = (comm_of("MPI_Comm_compare", comm1)?, comm_of("MPI_Comm_compare", comm2)?);
            // An inter-communicator's remote groups count too; one of each kind is UNEQUAL.
            let remote = match (a.remote_group(), b.remote_group()) {
                (None, None) => IDENT,
                (Some(x), Some(y)) => compare_groups(&x, &y)?,
                _ => UNEQUAL,
            };
            let how = match compare_groups(&a.comm_group(), &b.comm_group())?.max(remote) {
                IDENT if comm1 == comm2 => IDENT,
                IDENT => CONGRUENT,
                other => other,
            };
            // SAFETY: MPI's contract: result points to an int.
            unsafe { put(result, how) }
        })();
        finish("MPI_Comm_compare", comm1, r)
    }

    fn MPI_Comm_set_name / PMPI_Comm_set_name(comm: c_int, name: *const c_char) -> c_int {
        let r = (|| {
            // SAFETY: MPI's contract: a NUL-terminated string.
            let text = unsafe { name_at(name)? };
            with_state("MPI_Comm_set_name", |s| {
                match s.entry_mut(comm) {
                    Some(e) => {
                        e.name = text;
                        Ok(())
                    }
                    None => Err(Fail::new(ERR_COMM, format!("{comm} is not a communicator"))),
                }
            })?
        })();
        finish("MPI_Comm_set_name", comm, r)
    }

    fn MPI_Comm_get_name / PMPI_Comm_get_name(comm: c_int, name: *mut c_char, resultlen: *mut c_int) -> c_int {
        let r = (|| {
            let text = with_state("MPI_Comm_get_name", |s| {
                s.entry(comm).map(|e| e.name.clone())
            })?
            .ok_or_else(|| Fail::new(ERR_COMM, format!("{comm} is not a communicator")))?;
            // SAFETY: MPI's contract: name holds MPI_MAX_OBJECT_NAME chars.
            unsafe { write_text(&text, name, resultlen, MAX_OBJECT_NAME) }
        })();
        finish("MPI_Comm_get_name", comm, r)
    }

    fn MPI_Comm_get_attr / PMPI_Comm_get_attr(comm: c_int, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
        let r = (|| {
            comm_of("MPI_Comm_get_attr", comm)?;
            let found: Option<*const c_void> = match keyval {
                KEY_TAG_UB | KEY_WTIME_IS_GLOBAL | KEY_HOST | KEY_IO => {
                    Some((&ATTRIBUTES[(keyval - 1) as usize] as *const c_int).cast())
                }
                KEY_UNIVERSE_SIZE => Some((&UNIVERSE_SIZE as *const AtomicI32).cast()),
                KEY_LASTUSEDCODE => Some((&LAST_USED as *const AtomicI32).cast()),
                // mprun starts one program (no MPMD form): every rank's is application 0.
                KEY_APPNUM => Some((&APPNUM as *const c_int).cast()),
                k => attr::get("MPI_Comm_get_attr", attr::Object::Comm, comm, k)?.map(|v| v.cast_const()),
            };
            if let Some(v) = found {
                // SAFETY: MPI's contract: value points to a pointer, which gets the
                // attribute's value (a predefined one's: the address of a static, which
                // outlives every use).
                unsafe { put(value.cast::<*const c_void>(), v)? };
            }
            // SAFETY: MPI's contract: flag points to an int.
            unsafe { put(flag, found.is_some() as c_int) }
        })();
        finish("MPI_Comm_get_attr", comm, r)
    }

    fn MPI_Comm_free / PMPI_Comm_free(comm: *mut c_int) -> c_int {
        if comm.is_null() {
            return finish("MPI_Comm_free", COMM_WORLD, Err(Fail::new(ERR_ARG, "a null MPI_Comm pointer")));
        }
        // SAFETY: not null (checked): the caller's MPI_Comm.
        let h = unsafe { *comm };
        // Handles 0..=2 are MPI_COMM_NULL, MPI_COMM_WORLD and MPI_COMM_SELF.
        let ours = h > COMM_SELF && comm_of("MPI_Comm_free", h).is_ok();
        let deleted = if ours { attr::delete_all("MPI_Comm_free", attr::Object::Comm, h) } else { Ok(()) };
        let r = deleted.and_then(|()| with_state("MPI_Comm_free", |s| free_handle(&mut s.comms, h, 3))).and_then(|freed| {
            freed
                .then_some(())
                .ok_or_else(|| Fail::new(ERR_COMM, format!("MPI_Comm_free: {h} is not a communicator this program made")))
        });
        if r.is_ok() {
            // SAFETY: as above.
            unsafe { *comm = 0 };
        }
        finish("MPI_Comm_free", h, r)
    }
}

/// A root argument, checked against the communicator (`MPI_ERR_ROOT`).
fn root_of(c: &Comm, root: c_int) -> Res<usize> {
    c.intra("a rooted collective of this kind")?;
    usize::try_from(root)
        .ok()
        .filter(|&r| r < c.size())
        .ok_or_else(|| Fail::new(ERR_ROOT, format!("invalid root {root}: the communicator has {} ranks", c.size())))
}
