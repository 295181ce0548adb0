//! One-sided communication: windows, put/get/accumulate, and their synchronisation
//! (MPI 4.1, chapter 12).
//!
//! A [`Window`] exposes memory of every rank of a communicator. Operations on a target need
//! an access epoch that covers it: a [`Window::fence`], a passive-target lock
//! ([`Window::lock`], [`Window::lock_all`]) or a [`Window::start`] naming it; anything else is
//! an [`Error::RmaSync`]. An access outside the target's window is an [`Error::RmaRange`] at
//! the origin, and nothing reaches the target.
//!
//! Completion, as MPI defines it, with what this implementation adds:
//! - [`Window::put`] and [`Window::accumulate`] return when the origin's buffer may be
//!   reused (local completion); they are complete at the target at the end of the epoch or
//!   at a flush.
//! - [`Window::get`], [`Window::get_accumulate`], [`Window::fetch_and_op`] and
//!   [`Window::compare_and_swap`] return with the data (a round trip each). To overlap many,
//!   use the request forms ([`Window::rget`], ...) inside a [`crate::scope`].
//! - Accumulates to one element are atomic with respect to each other, from any origin.
//!
//! Element types: `put` and `get` move any plain-old-data `T`; accumulates take the types of
//! [`Elem`] and the predefined operations of [`RmaOp`] (as MPI, no user-defined operation).
//! Displacements count elements of `T` from the start of the target's window.
//!
//! Today every operation is an active message that the target's engine applies while it is
//! in an mpr call (any call that waits: a wait, a collective, a flush, ...). A target that
//! computes for long without calling mpr delays the origins that wait on it.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::atomic::{fence, Ordering};

use bytemuck::Pod;

use crate::buf::{RawBuf, RawBufMut};
use crate::comm::Comm;
use crate::datatype::code;
pub use crate::datatype::{AccOp, DynAcc, Elem, NoOp, PairValue, Replace, RmaOp};
use crate::engine::rma::{ctl, AccLock, At, Combine, Counts};
use crate::error::Error;
use crate::request::{Request, Scope};
use crate::transport::RemoteOp;

mod shm;

/// Kind of a passive-target lock (`MPI_LOCK_SHARED`, `MPI_LOCK_EXCLUSIVE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockType {
    /// Several origins may hold it at once.
    Shared,
    /// One origin holds it alone.
    Exclusive,
}

/// What the program promises about a synchronisation call (`MPI_MODE_*`), so that it may
/// do less. Combine with `|`. A promise the program breaks makes its outcome undefined, as
/// in MPI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Assert(u32);

impl Assert {
    /// No promise.
    pub const NONE: Assert = Assert(0);
    /// `lock`/`lock_all`: no other origin holds or asks for a conflicting lock, so none is
    /// taken at the target (no round trip). `start`/`post`: the matching posts are done
    /// before the start; given to both sides, no message is exchanged.
    pub const NOCHECK: Assert = Assert(1);
    /// `post`, `fence`: the local window was not written by local stores since the last
    /// synchronisation (accepted; nothing to skip here).
    pub const NOSTORE: Assert = Assert(2);
    /// `post`, `fence`: the local window will not be written by puts or accumulates until
    /// the next synchronisation (accepted; nothing to skip here).
    pub const NOPUT: Assert = Assert(4);
    /// `fence`: no operation of this rank precedes it (nothing to complete). Every rank
    /// must give it if one does.
    pub const NOPRECEDE: Assert = Assert(8);
    /// `fence`: no operation follows it (no epoch is opened: an operation before the next
    /// fence is an error). Every rank must give it if one does.
    pub const NOSUCCEED: Assert = Assert(16);

    /// Whether every promise of `other` is made here.
    pub fn contains(self, other: Assert) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Assert {
    type Output = Assert;
    fn bitor(self, rhs: Assert) -> Assert {
        Assert(self.0 | rhs.0)
    }
}

/// The paths an operation takes, as counted for `MPR_VERBOSE` (`Runtime::rma_ops`): a copy
/// into a segment shared with the target, a single copy into its memory by the OS, a
/// message its engine serves, an RDMA READ, an RDMA WRITE.
const DIRECT: usize = 0;
const COPY: usize = 1;
const MESSAGE: usize = 2;
const READ: usize = 3;
const WRITE: usize = 4;

/// How puts and gets reach one target's part of a window without its engine (accumulates
/// always go through the target: see the module's notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    /// Messages only (or the shared segment, which `Window::direct` tells).
    Message,
    /// Single copy by the OS into the target's memory, its part starting at this address
    /// (a window over user memory on the same host), for operations of at least
    /// `MPR_RMA_COPY_MIN` bytes (64 KiB by default): below, a system call costs more than
    /// the two copies through the shared-memory rings.
    Copy(u64),
    /// RDMA WRITE and READ into the target's part, registered once at this address under
    /// this key.
    Rdma(u64, u64),
}

/// What became of a put or get offered to the paths that bypass the target's engine.
enum Moved {
    /// No such path: it goes as a message.
    No,
    /// Done (at the target for a put, in the buffer for a get).
    Done,
    /// Under way: the request ends when the caller's buffer is free (a put) or filled (a
    /// get).
    Pending(crate::engine::ReqId),
}

/// How a put combines: it replaces bytes, whatever `T` is.
const PUT: Combine = Combine { op: code::REPLACE, dtype: <u8 as Elem>::DTYPE, elem: 1 };

/// How an accumulate of `T` with `O` combines.
fn combine<T: Elem, O: RmaOp<T>>() -> Combine {
    Combine { op: O::CODE, dtype: T::DTYPE, elem: size_of::<T>() }
}

/// This rank's epochs on one window, as origin and as target.
#[derive(Debug, Default)]
struct Epoch {
    /// A fence opened an access and exposure epoch on every rank.
    fence: bool,
    /// Lock held on each rank (by comm rank).
    locks: Vec<Option<LockType>>,
    /// `lock_all` holds a shared lock on every rank.
    all: bool,
    /// Per rank: its lock (or `lock_all`'s) was taken with [`Assert::NOCHECK`], so the
    /// target holds none to release.
    nocheck: Vec<bool>,
    /// The group of an access epoch opened by `start`.
    access: Option<Vec<usize>>,
    /// The group of an exposure epoch opened by `post`.
    exposure: Option<Vec<usize>>,
    /// Ranks with puts or accumulates not yet known to be complete there.
    dirty: Vec<bool>,
    /// The engine's counts (by comm rank) already consumed by this window's waits.
    seen: Vec<Counts>,
}

/// Memory of every rank of a communicator, open to one-sided operations (`MPI_Win`).
///
/// Borrows its local memory for `'a` ([`Window::create`]) or owns it
/// ([`Window::allocate`]). The local memory is read and written with
/// [`Window::read_local`] and [`Window::write_local`] (or, by the rules of MPI's
/// synchronisation, through one-sided operations to this rank itself). Free it with
/// [`Window::free`], a collective call; dropping it without stops serving it at once.
pub struct Window<'a, T: Pod> {
    comm: Comm,
    id: u64,
    mem: RawBufMut,
    /// Backing store of a window from `allocate` in private memory (`mem` views it).
    _owned: Option<Vec<T>>,
    /// The shared segment of this host's ranks, for a window from `allocate` (`mem` views
    /// this rank's part of it). Dropped after the engine stops serving the window.
    seg: Option<shm::HostSeg>,
    /// Elements in the window of each rank (0 for a dynamic window).
    sizes: Vec<usize>,
    /// A window from `create_dynamic`: memory is attached later, displacements are addresses.
    dynamic: bool,
    epoch: RefCell<Epoch>,
    /// Operations by path (see `Runtime::rma_ops`).
    ops: Cell<[u64; 5]>,
    /// Per comm rank: how puts and gets reach its part.
    reach: Vec<Cell<Reach>>,
    /// This rank's part registered for RDMA: (world rank of the peer, key).
    keys: Vec<(usize, u64)>,
    /// Smallest put or get that goes by single copy (see [`Reach::Copy`]).
    copy_min: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<T: Pod> std::fmt::Debug for Window<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window").field("id", &self.id).field("sizes", &self.sizes).finish()
    }
}

fn sync_err(msg: String) -> Error {
    Error::RmaSync(msg)
}

/// Has the engine serve window `id` over `mem` (and, while it does, the progress thread run
/// where it is needed).
fn register(comm: &Comm, id: u64, mem: RawBufMut, acc: Option<AccLock>) {
    comm.rt().borrow_mut().engine.win_add(id, mem, acc);
    comm.rt().serve();
}

/// Undoes [`register`].
fn unregister(comm: &Comm, id: u64) {
    comm.rt().borrow_mut().win_remove(id);
    comm.rt().unserve();
}

/// An operation applied by the origin straight to a target's memory on the same host.
enum Direct<'x> {
    Put(&'x [u8]),
    Get(&'x mut [u8]),
    /// Accumulate (operation and type codes, operand), filling the result with the old
    /// elements if there is one.
    Acc(Combine, &'x [u8], Option<&'x mut [u8]>),
    /// Compare and swap (type, compare value then new value, result).
    Cas(&'x [u8], &'x mut [u8]),
}

impl<'a, T: Pod> Window<'a, T> {
    /// Opens `mem` of every rank of `comm` to one-sided operations (`MPI_Win_create`);
    /// collective. The window borrows `mem` until it is freed or dropped.
    pub fn create(comm: &Comm, mem: &'a mut [T]) -> Result<Window<'a, T>, Error> {
        // SAFETY: the window borrows `mem` for 'a and stops the engine from touching it
        // (`win_remove`) before that borrow ends, in `free` or `drop`.
        let raw = unsafe { RawBufMut::new(bytemuck::cast_slice_mut(mem)) };
        let id = comm.next_win_id()?;
        // Served before the others learn of it: a rank that leaves the exchange below may
        // operate on it at once.
        register(comm, id, raw, None);
        let mut sizes = vec![0u64; comm.size()];
        if let Err(e) = comm.allgather(&[mem.len() as u64], &mut sizes) {
            unregister(comm, id);
            return Err(e);
        }
        let mut win = Window::build(comm, id, raw, None, None, sizes);
        win.share_keys()?;
        Ok(win)
    }

    /// The window, once the engine serves it (see [`register`]).
    fn build(
        comm: &Comm,
        id: u64,
        mem: RawBufMut,
        owned: Option<Vec<T>>,
        seg: Option<shm::HostSeg>,
        sizes: Vec<u64>,
    ) -> Window<'a, T> {
        let n = comm.size();
        let epoch = Epoch {
            locks: vec![None; n],
            nocheck: vec![false; n],
            dirty: vec![false; n],
            seen: vec![Counts::default(); n],
            ..Default::default()
        };
        Window {
            comm: comm.clone(),
            id,
            mem,
            _owned: owned,
            seg,
            sizes: sizes.into_iter().map(|s| s as usize).collect(),
            dynamic: false,
            epoch: RefCell::new(epoch),
            ops: Default::default(),
            reach: vec![Cell::new(Reach::Message); n],
            copy_min: crate::env::parsed("MPR_RMA_COPY_MIN").unwrap_or(64 << 10),
            keys: Vec::new(),
            _borrow: PhantomData,
        }
    }

    /// Frees the window (`MPI_Win_free`); collective. Every epoch of this rank must be
    /// closed (a fence epoch may stay open: its operations are completed here).
    pub fn free(self) -> Result<(), Error> {
        self.may_free()?;
        self.flush_dirty(self.all())?;
        self.comm.barrier()
        // Dropping stops the engine serving it.
    }

    /// Whether [`Window::free`] may free the window now: [`Error::RmaSync`] while a lock,
    /// start or post epoch of this rank is open (a caller that must keep the window on that
    /// error asks first).
    pub fn may_free(&self) -> Result<(), Error> {
        let e = self.epoch.borrow();
        if e.locks.iter().any(Option::is_some) || e.all || e.access.is_some() || e.exposure.is_some() {
            return Err(sync_err("window freed with a lock, start or post epoch still open".into()));
        }
        Ok(())
    }

    /// The communicator of the window.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// Elements in the window of `rank`.
    pub fn len_of(&self, rank: usize) -> Option<usize> {
        self.sizes.get(rank).copied()
    }

    /// Where `rank`'s part of the window lies in this process's memory, and its length in
    /// elements, if this rank may load from and store to it directly (`MPI_Win_shared_query`):
    /// a window from [`Window::allocate_shared`], or from [`Window::allocate`] for the ranks
    /// of this host; `None` otherwise.
    ///
    /// The pointer stays valid while the window lives. Loads and stores through it are
    /// `unsafe` and follow MPI's rules for shared windows: separate them from conflicting
    /// accesses of other ranks with the window's synchronisation (or a barrier and
    /// [`Window::sync`]). A part of no elements lies nowhere: its pointer is null.
    pub fn shared_query(&self, rank: usize) -> Option<(*mut T, usize)> {
        let at = if rank == self.comm.rank() && self.comm.size() == 1 {
            self.mem.addr_at(0) as *mut T
        } else {
            self.seg.as_ref()?.part(rank)?.0.cast()
        };
        let n = self.sizes[rank];
        Some((if n == 0 { std::ptr::null_mut() } else { at }, n))
    }

    /// Where this rank's memory in the window starts (null if it has none): what
    /// `MPI_Win_allocate` gives the program. Loads and stores through it are `unsafe` and
    /// follow MPI's rules for local accesses to a window (separated from the others' by
    /// its synchronisation).
    pub fn local_ptr(&self) -> *mut T {
        if self.local_len() == 0 {
            return std::ptr::null_mut();
        }
        self.mem.addr_at(0) as *mut T
    }

    /// Elements in this rank's window.
    pub fn local_len(&self) -> usize {
        self.sizes[self.comm.rank()]
    }

    /// Copies elements `disp..disp+out.len()` of this rank's window into `out` (not for a
    /// dynamic window: its memory is the caller's own).
    pub fn read_local(&self, disp: usize, out: &mut [T]) -> Result<(), Error> {
        self.fixed("read_local")?;
        let me = self.comm.rank();
        let at = self.check_range(me, disp, out.len())?;
        // Under the runtime's lock: the progress thread may be applying an operation.
        let _rt = self.comm.rt().borrow_mut();
        let src = self.mem.window(at, size_of_val(out)).as_read();
        bytemuck::cast_slice_mut::<T, u8>(out).copy_from_slice(src.bytes());
        Ok(())
    }

    /// Copies `data` into elements `disp..` of this rank's window (not for a dynamic window).
    pub fn write_local(&self, disp: usize, data: &[T]) -> Result<(), Error> {
        self.fixed("write_local")?;
        let me = self.comm.rank();
        let at = self.check_range(me, disp, data.len())?;
        let _rt = self.comm.rt().borrow_mut();
        let mut mem = self.mem;
        mem.write_at(at, bytemuck::cast_slice(data));
        Ok(())
    }

    /// Tells every peer how it may put into and get from this rank's part without its
    /// engine, and learns the same of theirs; collective. Single copy where the OS copies
    /// between the two processes (the same host, a window over user memory); RDMA where the
    /// path writes and reads registered memory (an RC device), with the part registered
    /// once for each such peer. `MPR_RMA_NATIVE=0` leaves every operation to messages.
    fn share_keys(&mut self) -> Result<(), Error> {
        let (n, me) = (self.comm.size(), self.comm.rank());
        let native = crate::env::parsed::<u32>("MPR_RMA_NATIVE").unwrap_or(1) != 0;
        let mut out = vec![0u64; 3 * n];
        if native {
            let mut rt = self.comm.rt().borrow_mut();
            let (base, len) = (self.mem.addr_at(0), self.mem.len());
            for r in (0..n).filter(|&r| r != me && self.seg.as_ref().is_none_or(|s| s.part(r).is_none())) {
                let peer = self.comm.group()[r];
                if rt.rma_single_copy(peer) {
                    out[3 * r..3 * r + 3].copy_from_slice(&[base, 0, 2]);
                } else if rt.rma_remote_access(peer) {
                    // SAFETY: the part stays valid while the window lives, and `drop`
                    // releases every key before it goes.
                    if let Some(key) = unsafe { rt.rma_register(peer, base, len) } {
                        out[3 * r..3 * r + 3].copy_from_slice(&[base, key, 1]);
                        self.keys.push((peer, key));
                    }
                }
            }
        }
        let mut got = vec![0u64; 3 * n];
        self.comm.alltoall(&out, &mut got)?;
        for (r, reach) in self.reach.iter().enumerate() {
            reach.set(match got[3 * r + 2] {
                1 => Reach::Rdma(got[3 * r], got[3 * r + 1]),
                2 => Reach::Copy(got[3 * r]),
                _ => Reach::Message,
            });
        }
        Ok(())
    }

    /// Offers a put (`RemoteOp::Write`) or get at `at` of `target`'s part to the paths that
    /// bypass the target's engine: single copy or RDMA (see [`Reach`]).
    ///
    /// # Safety
    /// The bytes of `op` must stay valid (a get's untouched) until the request of
    /// [`Moved::Pending`] completes.
    unsafe fn native(&self, target: usize, at: At, op: RemoteOp) -> Result<Moved, Error> {
        let (len, path) = match op {
            RemoteOp::Write(b) => (b.len(), WRITE),
            RemoteOp::Read(b) => (b.len(), READ),
        };
        // The message path takes the runtime's lock once, in the engine's call that follows.
        match self.reach[target].get() {
            Reach::Copy(base) if len >= self.copy_min.max(1) => {
                match self.comm.rt().borrow_mut().rma_copy(at.peer, base + at.disp, op) {
                    Ok(()) => {
                        self.count(COPY);
                        Ok(Moved::Done)
                    }
                    Err(e) => {
                        // The OS refused (it allowed it at start-up): messages from now on.
                        if crate::env::verbose() {
                            crate::say::say!(
                                "mpr: one-sided single copy to rank {target} refused ({e}); messages from now on"
                            );
                        }
                        self.reach[target].set(Reach::Message);
                        Ok(Moved::No)
                    }
                }
            }
            Reach::Rdma(base, key) if len > 0 => {
                // SAFETY: the caller's contract.
                let (id, copied) = unsafe { self.comm.rt().borrow_mut().rma_remote(at.peer, op, base + at.disp, key)? };
                self.count(path);
                Ok(if copied { Moved::Done } else { Moved::Pending(id) })
            }
            _ => Ok(Moved::No),
        }
    }

    /// Waits until the operations this rank started to the ranks `ranks` that end here have
    /// ended: RDMA transfers (complete at the target: RC acknowledges a WRITE
    /// once its bytes are placed), and gets and other operations awaiting an answer, which a
    /// flush, unlock, fence or complete must finish too (a request form may not have been
    /// waited for yet).
    fn land(&self, ranks: impl IntoIterator<Item = usize>) -> Result<(), Error> {
        // Operations on a part in the host's shared segment are done when they return.
        let direct = |r: usize| self.seg.as_ref().is_some_and(|s| s.part(r).is_some());
        let targets: Vec<usize> = ranks.into_iter().filter(|&r| r != self.comm.rank() && !direct(r)).collect();
        if targets.is_empty() {
            return Ok(());
        }
        let marks: Vec<(usize, u64)> = {
            let rt = self.comm.rt().borrow();
            targets
                .into_iter()
                .map(|r| (self.world(r), rt.engine.rma_awaited(self.world(r))))
                .filter(|(_, (started, ended))| ended < started)
                .map(|(p, (started, _))| (p, started))
                .collect()
        };
        if marks.is_empty() {
            return Ok(());
        }
        let target = (marks.len() == 1).then(|| marks[0].0);
        self.comm
            .rt()
            .borrow_mut()
            .wait_on_peer(target, |rt| marks.iter().all(|&(p, m)| rt.engine.rma_awaited(p).1 >= m))
    }

    fn fixed(&self, what: &str) -> Result<(), Error> {
        match self.dynamic {
            true => Err(Error::Other(format!("{what} on a dynamic window (its memory is the attached slices)"))),
            false => Ok(()),
        }
    }

    /// A window with no memory yet at every rank of `comm` (`MPI_Win_create_dynamic`);
    /// collective. Each rank attaches memory with [`Window::attach`], which returns the
    /// displacement origins use to reach it: an address, in bytes (MPI's displacement unit
    /// 1), which the owner sends them. An access to memory not attached fails at the origin:
    /// at once for this rank's own window, else at the next flush, unlock, fence or
    /// request's completion.
    pub fn create_dynamic(comm: &Comm) -> Result<Window<'a, T>, Error> {
        let id = comm.next_win_id()?;
        comm.rt().borrow_mut().engine.win_add_dynamic(id);
        comm.rt().serve();
        if let Err(e) = comm.barrier() {
            unregister(comm, id);
            return Err(e);
        }
        let mut w = Window::build(comm, id, RawBufMut::EMPTY, None, None, vec![0; comm.size()]);
        w.dynamic = true;
        Ok(w)
    }

    /// Attaches `mem` to this rank's dynamic window (`MPI_Win_attach`): from now on origins
    /// reach it at the returned displacement (its address). `mem` stays borrowed while the
    /// window lives, even after [`Window::detach`].
    pub fn attach(&self, mem: &'a mut [T]) -> Result<usize, Error> {
        if !self.dynamic {
            return Err(Error::Other("attach to a window that is not dynamic".into()));
        }
        // SAFETY: `mem` is borrowed for 'a, which outlives the window; the engine stops
        // touching it at `detach` or when the window is dropped.
        let raw = unsafe { RawBufMut::new(bytemuck::cast_slice_mut(mem)) };
        if !self.comm.rt().borrow_mut().engine.win_attach(self.id, raw) {
            return Err(Error::Other("attach of memory that overlaps memory already attached".into()));
        }
        Ok(raw.addr_at(0) as usize)
    }

    /// Detaches the memory attached at displacement `disp` (`MPI_Win_detach`).
    pub fn detach(&self, disp: usize) -> Result<(), Error> {
        match self.dynamic && self.comm.rt().borrow_mut().engine.win_detach(self.id, disp as u64) {
            true => Ok(()),
            false => Err(Error::Other(format!("detach of {disp:#x}, where no memory is attached to this window"))),
        }
    }

    /// Fails if one of `peers` refused puts or accumulates (outside the memory attached to
    /// its dynamic window) since the last check. Its refusal came before the
    /// acknowledgement the caller waited for.
    fn check_refused(&self, peers: &[usize]) -> Result<(), Error> {
        if !self.dynamic {
            return Ok(());
        }
        let rt = self.comm.rt().borrow();
        let mut e = self.epoch.borrow_mut();
        for &r in peers {
            let now = rt.engine.win_counts(self.id, self.world(r)).refused;
            let n = now - e.seen[r].refused;
            if n > 0 {
                e.seen[r].refused = now;
                return Err(Error::Other(format!(
                    "rank {r} refused {n} puts or accumulates outside the memory attached to its dynamic window"
                )));
            }
        }
        Ok(())
    }

    /// The byte offset of elements `disp..disp+len` of `target`'s window, if they lie in it.
    #[inline(always)]
    fn check_range(&self, target: usize, disp: usize, len: usize) -> Result<usize, Error> {
        let size = *self.sizes.get(target).ok_or(Error::Rank { rank: target, size: self.sizes.len() })?;
        if self.dynamic {
            // An address: only the target knows what is attached there (this rank checks
            // its own memory; another target refuses, see `check_refused`).
            let bytes = len * size_of::<T>();
            let mine = target == self.comm.rank() && bytes > 0;
            if mine && !self.comm.rt().borrow().engine.win_covers(self.id, disp as u64, bytes) {
                return Err(Error::RmaRange { target, disp, len, size: 0 });
            }
            return Ok(disp);
        }
        if disp.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::RmaRange { target, disp, len, size });
        }
        Ok(disp * size_of::<T>())
    }

    /// Checks an operation on `target`'s elements `disp..disp+len`: an epoch covers it and
    /// the elements lie in the window. Returns where it goes.
    #[inline(always)]
    fn access(&self, what: &str, target: usize, disp: usize, len: usize) -> Result<At, Error> {
        let at = self.check_range(target, disp, len)?;
        let e = self.epoch.borrow();
        let covered =
            e.fence || e.all || e.locks[target].is_some() || e.access.as_ref().is_some_and(|g| g.contains(&target));
        if !covered {
            return Err(sync_err(format!(
                "{what} to rank {target} outside an access epoch (no fence, lock or start covers it)"
            )));
        }
        Ok(At { win: self.id, peer: self.comm.group()[target], disp: at as u64 })
    }

    /// Every rank of the window.
    fn all(&self) -> std::ops::Range<usize> {
        0..self.comm.size()
    }

    fn world(&self, rank: usize) -> usize {
        self.comm.group()[rank]
    }

    /// Applies `op` at `at` straight to `target`'s memory if this rank reaches it (a window
    /// in a segment shared with the target); returns whether it did.
    fn direct(&self, target: usize, at: At, op: Direct<'_>) -> bool {
        let Some(seg) = &self.seg else { return false };
        let (Some((base, len)), Some(word)) = (seg.part(target), seg.lock_of(target)) else { return false };
        let n = match &op {
            Direct::Put(b) | Direct::Acc(_, b, _) => b.len(),
            Direct::Get(b) => b.len(),
            Direct::Cas(p, _) => p.len() / 2,
        };
        let off = at.disp as usize;
        debug_assert!(off + n <= len, "`access` checked the range");
        // SAFETY: `access` checked that bytes `off..off + n` lie in the target's part, which
        // the segment maps while the window lives. Other processes write it concurrently
        // only in ways MPI calls erroneous (conflicting accesses in one epoch), except
        // accumulates, which every path applies under the target's accumulate lock.
        let mem = unsafe { std::slice::from_raw_parts_mut(base.add(off), n) };
        // SAFETY: the word lives in the segment's header while the window does; the lock is
        // used only within this call.
        let lock = unsafe { AccLock::new(word) };
        match op {
            Direct::Put(src) => {
                mem.copy_from_slice(src);
                fence(Ordering::Release);
            }
            Direct::Get(dst) => {
                fence(Ordering::Acquire);
                dst.copy_from_slice(mem);
            }
            Direct::Acc(how, src, old) => {
                let applied = lock.with(|| {
                    if let Some(old) = old {
                        old.copy_from_slice(mem);
                    }
                    crate::datatype::apply(how.op, how.dtype, mem, src)
                });
                // `Elem` and `RmaOp` admit only pairs the table has, and `access` sized both.
                assert!(applied, "an accumulate the types allow is in the kernel table");
            }
            Direct::Cas(pair, old) => lock.with(|| {
                old.copy_from_slice(mem);
                if *old == pair[..n] {
                    mem.copy_from_slice(&pair[n..]);
                }
            }),
        }
        self.count(DIRECT);
        true
    }

    /// Counts an operation taking `path` ([`DIRECT`], [`MESSAGE`] or [`READ`]).
    fn count(&self, path: usize) {
        let mut c = self.ops.get();
        c[path] += 1;
        self.ops.set(c);
    }

    /// A request already complete (an operation done directly), in `scope`.
    fn done<'s>(&self, _scope: &Scope<'s>, bytes: usize) -> Request<'s> {
        Request::done(crate::status::Status { source: self.comm.rank(), tag: 0, bytes })
    }

    /// One round of progress if nobody else makes it now: a rank that spins on direct
    /// atomics (a lock made of compare-and-swap) must still serve the others' messages.
    fn poll(&self) {
        if let Some(mut rt) = self.comm.rt().try_borrow_mut() {
            rt.progress_aside();
        }
    }

    /// Marks `target` as holding operations not yet known complete.
    fn dirty(&self, target: usize) {
        self.epoch.borrow_mut().dirty[target] = true;
    }

    /// Starts an operation through `start` (which gets the engine) and waits for it.
    fn run(
        &self,
        start: impl FnOnce(&mut crate::engine::Engine) -> Result<crate::engine::ReqId, Error>,
    ) -> Result<(), Error> {
        self.count(MESSAGE);
        let mut rt = self.comm.rt().borrow_mut();
        let id = start(&mut rt.engine)?;
        if rt.engine.is_done(id) {
            // Done at once (its target is this rank): one round of progress all the same, as
            // a rank spinning on its own window must still serve the others.
            if let Err(e) = rt.progress() {
                let _ = rt.wait(id);
                return Err(e);
            }
        } else {
            // Frames to the transport, without polling: a small one waits in its buffer for
            // the next poll, so the flush or unlock that usually follows leaves in the same
            // write (over TCP, a write costs about what the round trip does).
            rt.flush();
        }
        rt.wait(id).map(|_| ())
    }

    /// Writes `data` into elements `disp..` of `target`'s window (`MPI_Put`). Returns when
    /// `data` may be reused; complete at the target at the end of the epoch or a flush.
    pub fn put(&self, data: &[T], target: usize, disp: usize) -> Result<(), Error> {
        let at = self.access("put", target, disp, data.len())?;
        if self.direct(target, at, Direct::Put(bytemuck::cast_slice(data))) {
            return Ok(());
        }
        // SAFETY: `data` stays borrowed until the request completes: both paths wait for it.
        let src = unsafe { RawBuf::new(bytemuck::cast_slice(data)) };
        // SAFETY: see above.
        match unsafe { self.native(target, at, RemoteOp::Write(src))? } {
            Moved::Done => return Ok(()),
            Moved::Pending(id) => return self.comm.rt().borrow_mut().wait(id).map(|_| ()),
            Moved::No => {}
        }
        self.dirty(target);
        self.run(|e| e.rma_put(at, PUT, src))
    }

    /// Reads elements `disp..disp+buf.len()` of `target`'s window into `buf` (`MPI_Get`);
    /// returns with the data.
    pub fn get(&self, buf: &mut [T], target: usize, disp: usize) -> Result<(), Error> {
        let at = self.access("get", target, disp, buf.len())?;
        if self.direct(target, at, Direct::Get(bytemuck::cast_slice_mut(buf))) {
            return Ok(());
        }
        // SAFETY: `buf` stays borrowed until the request completes: both paths wait for it.
        let dst = unsafe { RawBufMut::new(bytemuck::cast_slice_mut(buf)) };
        // SAFETY: see above.
        match unsafe { self.native(target, at, RemoteOp::Read(dst))? } {
            Moved::Done => Ok(()),
            Moved::Pending(id) => self.comm.rt().borrow_mut().wait(id).map(|_| ()),
            Moved::No => self.run(|e| e.rma_get(at, dst)),
        }
    }

    /// Starts a put (`MPI_Rput`); the request completes when `data` may be reused.
    pub fn rput<'s>(&self, scope: &Scope<'s>, data: &'s [T], target: usize, disp: usize) -> Result<Request<'s>, Error> {
        let at = self.access("put", target, disp, data.len())?;
        if self.direct(target, at, Direct::Put(bytemuck::cast_slice(data))) {
            return Ok(self.done(scope, size_of_val(data)));
        }
        // SAFETY: `data` is borrowed for 's, the lifetime of `scope`, which completes the
        // request before 's ends.
        let src = unsafe { RawBuf::new(bytemuck::cast_slice(data)) };
        // SAFETY: see above.
        match unsafe { self.native(target, at, RemoteOp::Write(src))? } {
            Moved::Done => return Ok(self.done(scope, size_of_val(data))),
            Moved::Pending(id) => return Ok(Request::new(self.comm.rt(), scope, id)),
            Moved::No => {}
        }
        self.dirty(target);
        self.begin(scope, |e| e.rma_put(at, PUT, src))
    }

    /// Starts a get (`MPI_Rget`); the request completes when the data is in `buf`.
    pub fn rget<'s>(
        &self,
        scope: &Scope<'s>,
        buf: &'s mut [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'s>, Error> {
        let at = self.access("get", target, disp, buf.len())?;
        let bytes = size_of_val(buf);
        if self.direct(target, at, Direct::Get(bytemuck::cast_slice_mut(buf))) {
            return Ok(self.done(scope, bytes));
        }
        // SAFETY: `buf` is borrowed for 's, the lifetime of `scope`, which completes the
        // request before 's ends.
        let dst = unsafe { RawBufMut::new(bytemuck::cast_slice_mut(buf)) };
        // SAFETY: see above.
        match unsafe { self.native(target, at, RemoteOp::Read(dst))? } {
            Moved::Done => Ok(self.done(scope, bytes)),
            Moved::Pending(id) => Ok(Request::new(self.comm.rt(), scope, id)),
            Moved::No => self.begin(scope, |e| e.rma_get(at, dst)),
        }
    }

    /// Starts an operation through `start` (which gets the engine) as a request of `scope`.
    fn begin<'s>(
        &self,
        scope: &Scope<'s>,
        start: impl FnOnce(&mut crate::engine::Engine) -> Result<crate::engine::ReqId, Error>,
    ) -> Result<Request<'s>, Error> {
        self.count(MESSAGE);
        let rt = self.comm.rt();
        let id = {
            let mut r = rt.borrow_mut();
            let id = start(&mut r.engine)?;
            r.flush();
            id
        };
        Ok(Request::new(rt, scope, id))
    }
}

impl<T: Pod> Window<'static, T> {
    /// A window of `len` elements (zeroed) owned by mpr, at every rank of `comm`
    /// (`MPI_Win_allocate`); collective.
    ///
    /// The ranks of one host share one segment of memory (see `rma/shm.rs`): they put, get
    /// and accumulate there directly, without a message. Where no segment can be made (or
    /// `MPR_TRANSPORTS` excludes shared memory), the window is private memory.
    pub fn allocate(comm: &Comm, len: usize) -> Result<Window<'static, T>, Error> {
        let id = comm.next_win_id()?;
        let mut sizes = vec![0u64; comm.size()];
        comm.allgather(&[len as u64], &mut sizes)?;
        let bytes: Vec<usize> = sizes.iter().map(|&s| s as usize * size_of::<T>()).collect();
        let seg = shm::HostSeg::open(comm, id, &bytes)?;
        let me = comm.rank();
        let mut win = match seg.as_ref().and_then(|s| Some((s.part(me)?, s.lock_of(me)?))) {
            Some(((base, n), word)) => {
                // SAFETY: this rank's part of the segment, which the window keeps mapped and
                // stops the engine from touching before unmapping it (`drop`); its word of
                // the header likewise.
                let (mem, acc) = unsafe { (RawBufMut::from_raw(base, n), AccLock::new(word)) };
                register(comm, id, mem, Some(acc));
                Window::build(comm, id, mem, None, seg, sizes)
            }
            None => {
                let mut v = vec![T::zeroed(); len];
                // SAFETY: the vector's heap buffer stays in place while the window owns it,
                // and the window stops the engine from touching it before dropping it.
                let mem = unsafe { RawBufMut::new(bytemuck::cast_slice_mut(&mut v)) };
                register(comm, id, mem, None);
                Window::build(comm, id, mem, Some(v), None, sizes)
            }
        };
        // Nobody operates on the window before every rank serves it (the exchange of keys
        // is collective too).
        win.share_keys()?;
        Ok(win)
    }

    /// A window of `len` elements (zeroed) at every rank of `comm`, all in one segment of
    /// shared memory that every rank may load from and store to through
    /// [`Window::shared_query`] (`MPI_Win_allocate_shared`); collective. The parts lie one
    /// after the other in rank order, as MPI lays them out by default. Every rank of `comm`
    /// must be on one host (see [`Comm::split_shared`]).
    pub fn allocate_shared(comm: &Comm, len: usize) -> Result<Window<'static, T>, Error> {
        let one_host = {
            let rt = comm.rt().borrow();
            let host = |r: usize| rt.hosts.of[comm.group()[r]];
            (rt.hosts.shm || comm.size() == 1) && (0..comm.size()).all(|r| host(r) == host(0))
        };
        if !one_host {
            return Err(Error::Other(
                "allocate_shared on a communicator whose ranks cannot share memory (several hosts, or \
                 MPR_TRANSPORTS without shm): make it with split_shared"
                    .into(),
            ));
        }
        let win = Window::allocate(comm, len)?;
        if comm.size() > 1 && win.seg.is_none() {
            return Err(Error::Other("allocate_shared: the shared segment could not be made (see above)".into()));
        }
        Ok(win)
    }
}

impl<T: Elem> Window<'_, T> {
    /// Combines `data` into elements `disp..` of `target`'s window with `op`
    /// (`MPI_Accumulate`), atomically per element. Returns when `data` may be reused.
    pub fn accumulate<O: RmaOp<T>>(&self, data: &[T], target: usize, disp: usize, _op: O) -> Result<(), Error> {
        self.accumulate_as(combine::<T, O>(), data, target, disp)
    }

    /// Starts an accumulate (`MPI_Raccumulate`); the request completes when `data` may be
    /// reused.
    pub fn raccumulate<'s, O: RmaOp<T>>(
        &self,
        scope: &Scope<'s>,
        data: &'s [T],
        target: usize,
        disp: usize,
        _op: O,
    ) -> Result<Request<'s>, Error> {
        let at = self.access("accumulate", target, disp, data.len())?;
        if self.direct(target, at, Direct::Acc(combine::<T, O>(), bytemuck::cast_slice(data), None)) {
            return Ok(self.done(scope, size_of_val(data)));
        }
        self.dirty(target);
        // SAFETY: `data` is borrowed for 's, the lifetime of `scope`, which completes the
        // request before 's ends.
        let src = unsafe { RawBuf::new(bytemuck::cast_slice(data)) };
        self.begin(scope, |e| e.rma_put(at, combine::<T, O>(), src))
    }

    /// Combines `data` into elements `disp..` of `target`'s window with `op` and returns
    /// in `result` the elements as they were, atomically per element
    /// (`MPI_Get_accumulate`; [`NoOp`] reads atomically).
    pub fn get_accumulate<O: RmaOp<T>>(
        &self,
        data: &[T],
        result: &mut [T],
        target: usize,
        disp: usize,
        op: O,
    ) -> Result<(), Error> {
        let at = self.fetch_access("get_accumulate", target, disp, data.len(), result.len())?;
        self.fetch(target, at, data, result, op)
    }

    /// [`Window::access`] for an operation of `len` elements that returns `out` elements.
    fn fetch_access(&self, what: &str, target: usize, disp: usize, len: usize, out: usize) -> Result<At, Error> {
        if len != out {
            return Err(Error::Other(format!("{what} of {len} elements into a result of {out}")));
        }
        self.access(what, target, disp, len)
    }

    /// Starts a get_accumulate (`MPI_Rget_accumulate`); the request completes when the old
    /// elements are in `result`.
    pub fn rget_accumulate<'s, O: RmaOp<T>>(
        &self,
        scope: &Scope<'s>,
        data: &'s [T],
        result: &'s mut [T],
        target: usize,
        disp: usize,
        _op: O,
    ) -> Result<Request<'s>, Error> {
        let at = self.fetch_access("rget_accumulate", target, disp, data.len(), result.len())?;
        let how = combine::<T, O>();
        let bytes = size_of_val(data);
        if self.direct(target, at, Direct::Acc(how, bytemuck::cast_slice(data), Some(bytemuck::cast_slice_mut(result))))
        {
            return Ok(self.done(scope, bytes));
        }
        // SAFETY: both are borrowed for 's, the lifetime of `scope`, which completes the
        // request before 's ends.
        let (src, dst) =
            unsafe { (RawBuf::new(bytemuck::cast_slice(data)), RawBufMut::new(bytemuck::cast_slice_mut(result))) };
        self.begin(scope, |e| e.rma_fetch(at, how, src, dst))
    }

    fn fetch<O: RmaOp<T>>(&self, target: usize, at: At, data: &[T], result: &mut [T], _op: O) -> Result<(), Error> {
        self.fetch_as(combine::<T, O>(), target, at, data, result)
    }

    /// Combines `value` into element `disp` of `target`'s window with `op` and returns the
    /// element as it was, atomically (`MPI_Fetch_and_op`).
    pub fn fetch_and_op<O: RmaOp<T>>(&self, value: T, target: usize, disp: usize, op: O) -> Result<T, Error> {
        let at = self.access("fetch_and_op", target, disp, 1)?;
        let mut old = [T::zeroed()];
        self.fetch(target, at, &[value], &mut old, op)?;
        Ok(old[0])
    }

    /// Replaces element `disp` of `target`'s window with `value` if it equals `compare`
    /// (bit for bit), and returns the element as it was, atomically
    /// (`MPI_Compare_and_swap`).
    pub fn compare_and_swap(&self, value: T, compare: T, target: usize, disp: usize) -> Result<T, Error> {
        let at = self.access("compare_and_swap", target, disp, 1)?;
        let mut old = [T::zeroed()];
        self.cas_as(T::DTYPE, target, at, &[compare, value], &mut old)?;
        Ok(old[0])
    }
}

/// The operations whose operation and element type come at run time (`DynAcc`), and the
/// typed ones, through the same paths.
impl<T: Pod> Window<'_, T> {
    fn accumulate_as(&self, how: Combine, data: &[T], target: usize, disp: usize) -> Result<(), Error> {
        let at = self.access("accumulate", target, disp, data.len())?;
        if self.direct(target, at, Direct::Acc(how, bytemuck::cast_slice(data), None)) {
            return Ok(());
        }
        self.dirty(target);
        // SAFETY: `data` stays borrowed until the request completes: `run` waits for it.
        let src = unsafe { RawBuf::new(bytemuck::cast_slice(data)) };
        self.run(|e| e.rma_put(at, how, src))
    }

    fn fetch_as(&self, how: Combine, target: usize, at: At, data: &[T], result: &mut [T]) -> Result<(), Error> {
        if self.direct(target, at, Direct::Acc(how, bytemuck::cast_slice(data), Some(bytemuck::cast_slice_mut(result))))
        {
            self.poll();
            return Ok(());
        }
        // Not marked for a flush: its answer comes once the target has applied it.
        // SAFETY: both stay borrowed until the request completes: `run` waits for it.
        let (src, dst) =
            unsafe { (RawBuf::new(bytemuck::cast_slice(data)), RawBufMut::new(bytemuck::cast_slice_mut(result))) };
        self.run(|e| e.rma_fetch(at, how, src, dst))
    }

    /// Compare-and-swap of one element of type `dtype`: `pair` is the comparand then the
    /// value, `old` gets the element as it was.
    fn cas_as(&self, dtype: u8, target: usize, at: At, pair: &[T], old: &mut [T]) -> Result<(), Error> {
        if self.direct(target, at, Direct::Cas(bytemuck::cast_slice(pair), bytemuck::cast_slice_mut(old))) {
            self.poll();
            return Ok(());
        }
        // SAFETY: both stay borrowed until the request completes: `run` waits for it.
        let (src, dst) =
            unsafe { (RawBuf::new(bytemuck::cast_slice(pair)), RawBufMut::new(bytemuck::cast_slice_mut(old))) };
        self.run(|e| e.rma_cas(at, dtype, src, dst))
    }
}

/// A window of bytes, whose accumulates name their operation and element type at run time
/// (the C ABI's windows): displacements are in bytes, operands whole elements.
impl Window<'_, u8> {
    fn dyn_combine(how: DynAcc, len: usize) -> Result<Combine, Error> {
        let elem = how.elem();
        if !how.whole(len) {
            return Err(Error::Other(format!("an accumulate of {len} bytes, not whole elements of {elem}")));
        }
        Ok(Combine { op: how.op, dtype: how.dtype, elem })
    }

    /// [`Window::accumulate`] with `how` chosen at run time; `disp` in bytes.
    pub fn accumulate_dyn(&self, how: DynAcc, data: &[u8], target: usize, disp: usize) -> Result<(), Error> {
        self.accumulate_as(Self::dyn_combine(how, data.len())?, data, target, disp)
    }

    /// [`Window::get_accumulate`] with `how` chosen at run time; `disp` in bytes.
    pub fn get_accumulate_dyn(
        &self,
        how: DynAcc,
        data: &[u8],
        result: &mut [u8],
        target: usize,
        disp: usize,
    ) -> Result<(), Error> {
        let c = Self::dyn_combine(how, data.len())?;
        let at = self.fetch_access("get_accumulate", target, disp, data.len(), result.len())?;
        self.fetch_as(c, target, at, data, result)
    }

    /// [`Window::compare_and_swap`] of one element of `how`'s type (its operation is
    /// ignored), `compare`, `value` and `old` each its bytes; `disp` in bytes.
    pub fn compare_and_swap_dyn(
        &self,
        how: DynAcc,
        value: &[u8],
        compare: &[u8],
        old: &mut [u8],
        target: usize,
        disp: usize,
    ) -> Result<(), Error> {
        let n = how.elem();
        if value.len() != n || compare.len() != n || old.len() != n {
            return Err(Error::Other(format!("compare_and_swap of elements of {n} bytes")));
        }
        let at = self.access("compare_and_swap", target, disp, n)?;
        self.cas_as(how.dtype, target, at, &[compare, value].concat(), old)
    }
}

/// Synchronisation.
impl<T: Pod> Window<'_, T> {
    /// Waits until `done` holds for this window's counts from each of `peers` (comm ranks),
    /// then consumes one event each (`field` picks the count).
    fn await_each(&self, peers: &[usize], field: fn(&mut Counts) -> &mut u64) -> Result<(), Error> {
        let worlds: Vec<usize> = peers.iter().map(|&r| self.world(r)).collect();
        let want: Vec<u64> = {
            let mut e = self.epoch.borrow_mut();
            peers
                .iter()
                .map(|&r| {
                    let f = field(&mut e.seen[r]);
                    *f += 1;
                    *f
                })
                .collect()
        };
        let id = self.id;
        let target = (worlds.len() == 1).then(|| worlds[0]);
        let r = self.comm.rt().borrow_mut().wait_on_peer(target, |rt| {
            worlds.iter().zip(&want).all(|(&p, &w)| *field(&mut rt.engine.win_counts(id, p)) >= w)
        });
        if r.is_err() {
            // Not consumed after all.
            let mut e = self.epoch.borrow_mut();
            for &p in peers {
                *field(&mut e.seen[p]) -= 1;
            }
        }
        r
    }

    /// Sends synchronisation `what` to each of `peers` (comm ranks).
    fn send_ctl(&self, peers: &[usize], what: u8) -> Result<(), Error> {
        let mut rt = self.comm.rt().borrow_mut();
        for &p in peers {
            rt.engine.rma_ctl(self.id, self.world(p), what)?;
        }
        rt.flush();
        Ok(())
    }

    /// Flushes those of the ranks `ranks` with operations not yet known complete, all at
    /// once. (Only the ranks given are looked at: a flush of one target costs the same on a
    /// job of any size.)
    fn flush_dirty(&self, ranks: impl IntoIterator<Item = usize, IntoIter: Clone>) -> Result<(), Error> {
        let ranks = ranks.into_iter();
        // Direct operations are complete once visible: order them before what follows.
        fence(Ordering::SeqCst);
        self.land(ranks.clone())?;
        let peers: Vec<usize> = {
            let e = self.epoch.borrow();
            ranks.filter(|&r| e.dirty[r]).collect()
        };
        if peers.is_empty() {
            return Ok(());
        }
        self.send_ctl(&peers, ctl::FLUSH)?;
        self.await_each(&peers, |c| &mut c.acked)?;
        {
            let mut e = self.epoch.borrow_mut();
            for &p in &peers {
                e.dirty[p] = false;
            }
        }
        self.check_refused(&peers)
    }

    /// Ends one fence epoch and starts the next (`MPI_Win_fence`); collective. When it
    /// returns, every operation of the epoch is complete at its target, and every
    /// operation on this rank's window is applied.
    pub fn fence(&self) -> Result<(), Error> {
        self.fence_with(Assert::NONE)
    }

    /// [`Window::fence`] with promises ([`Assert::NOPRECEDE`]: nothing to complete;
    /// [`Assert::NOSUCCEED`]: no epoch follows).
    pub fn fence_with(&self, assert: Assert) -> Result<(), Error> {
        {
            let e = self.epoch.borrow();
            if e.locks.iter().any(Option::is_some) || e.all || e.access.is_some() || e.exposure.is_some() {
                return Err(sync_err("fence while a lock, start or post epoch is open".into()));
            }
        }
        if !assert.contains(Assert::NOPRECEDE) {
            self.flush_dirty(self.all())?;
        }
        self.comm.barrier()?;
        self.epoch.borrow_mut().fence = !assert.contains(Assert::NOSUCCEED);
        Ok(())
    }

    fn check_no_epoch_to(&self, target: usize, what: &str) -> Result<(), Error> {
        let e = self.epoch.borrow();
        if e.all || e.locks[target].is_some() {
            return Err(sync_err(format!("{what} of rank {target}, which this rank has locked already")));
        }
        if e.access.is_some() {
            return Err(sync_err(format!("{what} inside a start/complete epoch")));
        }
        Ok(())
    }

    /// Locks `target`'s window (`MPI_Win_lock`): returns once the lock is granted.
    pub fn lock(&self, kind: LockType, target: usize) -> Result<(), Error> {
        self.lock_with(kind, target, Assert::NONE)
    }

    /// [`Window::lock`] with promises ([`Assert::NOCHECK`]: no lock is taken at the
    /// target, only the epoch opened here).
    pub fn lock_with(&self, kind: LockType, target: usize, assert: Assert) -> Result<(), Error> {
        self.check_range(target, 0, 0)?;
        self.check_no_epoch_to(target, "lock")?;
        let nocheck = assert.contains(Assert::NOCHECK);
        if !nocheck {
            let what = if kind == LockType::Shared { ctl::LOCK_SHARED } else { ctl::LOCK_EXCLUSIVE };
            self.send_ctl(&[target], what)?;
            self.await_each(&[target], |c| &mut c.granted)?;
        }
        let mut e = self.epoch.borrow_mut();
        e.locks[target] = Some(kind);
        e.nocheck[target] = nocheck;
        e.fence = false;
        Ok(())
    }

    /// Unlocks `target`'s window (`MPI_Win_unlock`): returns once every operation of the
    /// epoch is complete at the target.
    pub fn unlock(&self, target: usize) -> Result<(), Error> {
        self.check_range(target, 0, 0)?;
        if self.epoch.borrow().locks[target].is_none() {
            return Err(sync_err(format!("unlock of rank {target}, which this rank has not locked")));
        }
        if self.epoch.borrow().nocheck[target] {
            // No lock at the target: complete the epoch's operations there.
            self.flush_dirty([target])?;
        } else {
            // The lock is released only after the RDMA transfers of the epoch are placed.
            self.land([target])?;
            self.send_ctl(&[target], ctl::UNLOCK)?;
            self.await_each(&[target], |c| &mut c.acked)?;
        }
        {
            let mut e = self.epoch.borrow_mut();
            e.locks[target] = None;
            e.dirty[target] = false;
        }
        self.check_refused(&[target])
    }

    /// Takes a shared lock on every rank's window (`MPI_Win_lock_all`).
    pub fn lock_all(&self) -> Result<(), Error> {
        self.lock_all_with(Assert::NONE)
    }

    /// [`Window::lock_all`] with promises ([`Assert::NOCHECK`]: no lock is taken at the
    /// targets).
    pub fn lock_all_with(&self, assert: Assert) -> Result<(), Error> {
        let all: Vec<usize> = self.all().collect();
        for &t in &all {
            self.check_no_epoch_to(t, "lock_all")?;
        }
        let nocheck = assert.contains(Assert::NOCHECK);
        if !nocheck {
            self.send_ctl(&all, ctl::LOCK_SHARED)?;
            self.await_each(&all, |c| &mut c.granted)?;
        }
        let mut e = self.epoch.borrow_mut();
        e.all = true;
        e.nocheck.iter_mut().for_each(|n| *n = nocheck);
        e.fence = false;
        Ok(())
    }

    /// Releases the locks of [`Window::lock_all`] (`MPI_Win_unlock_all`), once every
    /// operation of the epoch is complete at its target.
    pub fn unlock_all(&self) -> Result<(), Error> {
        if !self.epoch.borrow().all {
            return Err(sync_err("unlock_all without lock_all".into()));
        }
        let all: Vec<usize> = self.all().collect();
        if self.epoch.borrow().nocheck.iter().all(|&n| n) {
            self.flush_dirty(all.iter().copied())?;
        } else {
            self.land(all.iter().copied())?;
            self.send_ctl(&all, ctl::UNLOCK)?;
            self.await_each(&all, |c| &mut c.acked)?;
        }
        {
            let mut e = self.epoch.borrow_mut();
            e.all = false;
            e.dirty.iter_mut().for_each(|d| *d = false);
        }
        self.check_refused(&all)
    }

    #[inline(always)]
    pub(crate) fn check_passive(&self, target: usize, what: &str) -> Result<(), Error> {
        self.check_range(target, 0, 0)?;
        let e = self.epoch.borrow();
        if !e.all && e.locks[target].is_none() {
            return Err(sync_err(format!("{what} of rank {target} outside a lock epoch on it")));
        }
        Ok(())
    }

    /// Completes every operation to `target` at the target (`MPI_Win_flush`); inside a
    /// lock epoch on it.
    pub fn flush(&self, target: usize) -> Result<(), Error> {
        self.check_passive(target, "flush")?;
        self.flush_dirty([target])
    }

    /// [`Window::flush`] for every rank (`MPI_Win_flush_all`).
    pub fn flush_all(&self) -> Result<(), Error> {
        let locked = self.locked();
        if !locked.iter().any(|&l| l) {
            return Err(sync_err("flush_all outside a lock epoch".into()));
        }
        self.flush_dirty((0..locked.len()).filter(|&r| locked[r]))
    }

    /// Completes every operation to `target` at this rank: their buffers may be reused
    /// (`MPI_Win_flush_local`).
    pub fn flush_local(&self, target: usize) -> Result<(), Error> {
        self.check_passive(target, "flush_local")?;
        let peer = self.world(target);
        // An RDMA transfer's buffer is free once the transfer is over.
        self.land([target])?;
        self.comm.rt().borrow_mut().wait_on_peer(Some(peer), |rt| !rt.queued_to(peer))
    }

    /// [`Window::flush_local`] for every rank (`MPI_Win_flush_local_all`).
    pub fn flush_local_all(&self) -> Result<(), Error> {
        let locked = self.locked();
        (0..locked.len()).filter(|&r| locked[r]).try_for_each(|r| self.flush_local(r))
    }

    /// Per rank: whether this rank holds a lock on it (its own, or `lock_all`'s).
    fn locked(&self) -> Vec<bool> {
        let e = self.epoch.borrow();
        e.locks.iter().map(|l| e.all || l.is_some()).collect()
    }

    /// Makes this rank's view of its window and the window's memory agree
    /// (`MPI_Win_sync`): a memory fence (the engine writes the memory in this process).
    pub fn sync(&self) -> Result<(), Error> {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn check_group(&self, group: &[usize]) -> Result<(), Error> {
        match group.iter().find(|&&r| r >= self.comm.size()) {
            Some(&rank) => Err(Error::Rank { rank, size: self.comm.size() }),
            None => Ok(()),
        }
    }

    /// Exposes this rank's window to the ranks of `group` (`MPI_Win_post`), until
    /// [`Window::wait`].
    pub fn post(&self, group: &[usize]) -> Result<(), Error> {
        self.post_with(group, Assert::NONE)
    }

    /// [`Window::post`] with promises ([`Assert::NOCHECK`], given to the matching starts
    /// too: they are known to come after this post, which sends nothing).
    pub fn post_with(&self, group: &[usize], assert: Assert) -> Result<(), Error> {
        self.check_group(group)?;
        if self.epoch.borrow().exposure.is_some() {
            return Err(sync_err("post while an exposure epoch is open".into()));
        }
        if !assert.contains(Assert::NOCHECK) {
            self.send_ctl(group, ctl::POST)?;
        }
        self.epoch.borrow_mut().exposure = Some(group.to_vec());
        Ok(())
    }

    /// Opens an access epoch on the ranks of `group` (`MPI_Win_start`): returns once each
    /// has posted.
    pub fn start(&self, group: &[usize]) -> Result<(), Error> {
        self.start_with(group, Assert::NONE)
    }

    /// [`Window::start`] with promises ([`Assert::NOCHECK`], given to the matching posts
    /// too: this start waits for none).
    pub fn start_with(&self, group: &[usize], assert: Assert) -> Result<(), Error> {
        self.check_group(group)?;
        {
            let e = self.epoch.borrow();
            if e.access.is_some() || e.all || e.locks.iter().any(Option::is_some) {
                return Err(sync_err("start while an access epoch is open".into()));
            }
        }
        if !assert.contains(Assert::NOCHECK) {
            self.await_each(group, |c| &mut c.posts)?;
        }
        let mut e = self.epoch.borrow_mut();
        e.access = Some(group.to_vec());
        e.fence = false;
        Ok(())
    }

    /// Closes the access epoch of [`Window::start`] (`MPI_Win_complete`).
    pub fn complete(&self) -> Result<(), Error> {
        let Some(group) = self.epoch.borrow_mut().access.take() else {
            return Err(sync_err("complete without start".into()));
        };
        // Each `Complete` travels behind the operations it closes, after the RDMA transfers
        // of the epoch are placed.
        if let Err(e) = self.land(group.iter().copied()) {
            self.epoch.borrow_mut().access = Some(group);
            return Err(e);
        }
        self.send_ctl(&group, ctl::COMPLETE)?;
        let mut e = self.epoch.borrow_mut();
        for r in group {
            e.dirty[r] = false;
        }
        Ok(())
    }

    /// Closes the exposure epoch of [`Window::post`] (`MPI_Win_wait`): returns once every
    /// rank of its group has completed, with its operations applied here.
    pub fn wait(&self) -> Result<(), Error> {
        let Some(group) = self.epoch.borrow().exposure.clone() else {
            return Err(sync_err("wait without post".into()));
        };
        self.await_each(&group, |c| &mut c.completes)?;
        self.epoch.borrow_mut().exposure = None;
        Ok(())
    }

    /// [`Window::wait`] without blocking (`MPI_Win_test`): whether the exposure epoch is
    /// over (and then it is closed).
    pub fn test(&self) -> Result<bool, Error> {
        let Some(group) = self.epoch.borrow().exposure.clone() else {
            return Err(sync_err("test without post".into()));
        };
        let mut rt = self.comm.rt().borrow_mut();
        rt.progress()?;
        let e = self.epoch.borrow();
        let done = group.iter().all(|&r| rt.engine.win_counts(self.id, self.world(r)).completes > e.seen[r].completes);
        drop(e);
        drop(rt);
        if done {
            self.await_each(&group, |c| &mut c.completes)?;
            self.epoch.borrow_mut().exposure = None;
        }
        Ok(done)
    }
}

impl<T: Pod> Drop for Window<'_, T> {
    fn drop(&mut self) {
        // From here on the engine never touches the memory (answers still queued from it
        // take copies).
        let mut rt = self.comm.rt().borrow_mut();
        rt.win_remove(self.id);
        // No peer reads the memory with RDMA READ from here on.
        for &(peer, key) in &self.keys {
            rt.rma_unregister(peer, key);
        }
        let ops = self.ops.get();
        for (total, mine) in rt.rma_ops.iter_mut().zip(ops) {
            *total += mine;
        }
        drop(rt);
        self.comm.rt().unserve();
    }
}
