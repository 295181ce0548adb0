//! One-sided communication in the engine: the active-message path that every transport
//! carries (MPI 4.1, chapter 12).
//!
//! The origin sends `Put`, `Get`, `Fetch` and `Cas` frames; the target's engine applies them
//! to its window memory as they arrive, in the order they left the origin (transports keep
//! a peer's frames in order, and these frames never take the any-order lanes). Because one
//! engine applies everything that reaches a window, accumulates to one element are atomic
//! with respect to each other, whichever origin sent them.
//!
//! Synchronisation is `Ctl` frames, and what an origin waits for is a counter that only
//! grows (per window and peer): lock grants, acknowledgements of unlocks and flushes, posts
//! received from targets, completes received from origins. A flush or unlock travels behind
//! the operations it covers, so its acknowledgement means they are applied at the target.
//!
//! The lock manager of each window grants in arrival order: shared locks together, an
//! exclusive lock alone; a request that cannot be granted waits in a FIFO (no starvation of
//! exclusive lockers by a stream of shared ones).
//!
//! Operations whose target is this rank are applied at once, under the same rules.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use super::request::State;
use super::wire::Frame;
use super::{proto_err, Engine, ReqId, Transmit};
use crate::buf::{RawBuf, RawBufMut};
use crate::datatype::{self, Dtype, OpCode};
use crate::error::Error;
use crate::status::Status;

/// What a `Ctl` frame says.
pub(crate) mod ctl {
    /// Origin to target: a shared lock, please.
    pub(crate) const LOCK_SHARED: u8 = 1;
    /// Origin to target: an exclusive lock, please.
    pub(crate) const LOCK_EXCLUSIVE: u8 = 2;
    /// Origin to target: release my lock (after the operations before this frame).
    pub(crate) const UNLOCK: u8 = 3;
    /// Origin to target: acknowledge once the operations before this frame are applied.
    pub(crate) const FLUSH: u8 = 4;
    /// Target to origin: my window is exposed to you (`MPI_Win_post`).
    pub(crate) const POST: u8 = 5;
    /// Origin to target: my access epoch on you is over (`MPI_Win_complete`).
    pub(crate) const COMPLETE: u8 = 6;
    /// Target to origin: your lock is granted.
    pub(crate) const GRANTED: u8 = 7;
    /// Target to origin: your lock is released.
    pub(crate) const UNLOCKED: u8 = 8;
    /// Target to origin: the operations before your flush are applied.
    pub(crate) const FLUSHED: u8 = 9;
    /// Target to origin: I refused one of your puts or accumulates (outside the memory
    /// attached to a dynamic window, which the origin cannot check).
    pub(crate) const REFUSED: u8 = 10;
}

/// On a `Reply`: the target refused the operation (outside its window, or an operation
/// its elements do not define); the origin's request fails.
pub(crate) const REPLY_REFUSED: u8 = 1;

/// Kind of a passive-target lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockKind {
    Shared,
    Exclusive,
}

/// Events this rank has seen from one peer on one window; each only grows, so a waiter
/// remembers the count it started from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Locks the peer (as target) granted us.
    pub(crate) granted: u64,
    /// Unlocks and flushes the peer (as target) acknowledged.
    pub(crate) acked: u64,
    /// Posts from the peer (as target): it exposed its window to us.
    pub(crate) posts: u64,
    /// Completes from the peer (as origin): its access epoch on us is over.
    pub(crate) completes: u64,
    /// Puts and accumulates the peer (as target) refused.
    pub(crate) refused: u64,
}

/// Where a one-sided operation goes: byte `disp` of world rank `peer`'s window `win`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct At {
    pub(crate) win: u64,
    pub(crate) peer: usize,
    pub(crate) disp: u64,
}

/// How an operation combines its elements with the target's: operation and element type
/// codes, and the element's size (operations never split an element across frames).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Combine {
    pub(crate) op: OpCode,
    pub(crate) dtype: Dtype,
    pub(crate) elem: usize,
}

/// The lock that accumulates to a window take where origins on the same host apply theirs
/// directly (a word in the shared segment, see `rma/shm.rs`): the engine takes it too when it
/// applies one that came as a frame, so both paths stay atomic with respect to each other.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AccLock(NonNull<AtomicU32>);

impl AccLock {
    /// # Safety
    /// `word` must stay valid as long as any copy of the lock is used (the window's shared
    /// segment outlives the engine's service of the window).
    pub(crate) unsafe fn new(word: &AtomicU32) -> AccLock {
        AccLock(NonNull::from(word))
    }

    /// Runs `f` holding the lock (held for one operation's copy: a short spin, then the CPU
    /// is given up between tries).
    pub(crate) fn with<R>(self, f: impl FnOnce() -> R) -> R {
        // SAFETY: `new`'s contract keeps the word valid while the lock is in use.
        let word = unsafe { self.0.as_ref() };
        let mut tries = 0u32;
        while word.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            tries += 1;
            if tries < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let r = f();
        word.store(0, Ordering::Release);
        r
    }
}

/// Runs `f` under `lock`, if there is one.
fn guarded<R>(lock: Option<AccLock>, f: impl FnOnce() -> R) -> R {
    match lock {
        Some(l) => l.with(f),
        None => f(),
    }
}

/// One window as this engine serves it.
#[derive(Debug)]
struct Win {
    id: u64,
    /// The window's memory: one region, displacements from its start; or, for a dynamic
    /// window, the regions attached, displacements their addresses.
    regions: Vec<RawBufMut>,
    dynamic: bool,
    /// The accumulate lock of a window in shared memory.
    acc: Option<AccLock>,
    /// Holder of the exclusive lock.
    exclusive: Option<usize>,
    /// Holders of shared locks (world ranks; one entry per lock).
    shared: Vec<usize>,
    /// Lock requests waiting, oldest first.
    waiting: VecDeque<(usize, LockKind)>,
    /// Per world rank.
    counts: Vec<Counts>,
}

impl Win {
    /// The bytes `disp..disp+len` of the window, if they lie in its memory.
    fn locate(&self, disp: u64, len: usize) -> Option<RawBufMut> {
        if !self.dynamic {
            let m = self.regions[0];
            return range(m.len(), disp, len).map(|d| m.window(d, len));
        }
        let addr = usize::try_from(disp).ok()?;
        let end = addr.checked_add(len)?;
        let within = |m: &RawBufMut, at: usize| at.checked_sub(m.addr_at(0) as usize).filter(|&off| off < m.len());
        // Attached regions that follow each other in memory are one run of it: an access
        // may cross from one into the next.
        let mut at = addr;
        while at < end {
            let m = self.regions.iter().find(|m| within(m, at).is_some())?;
            at = m.addr_at(0) as usize + m.len();
        }
        // SAFETY: every byte of `addr..end` lies in a region attached to the window (found
        // above), which the program keeps valid until it detaches it.
        Some(unsafe { RawBufMut::from_raw(addr as *mut u8, len) })
    }
}

/// The windows this engine serves.
#[derive(Debug, Default)]
pub(crate) struct Windows {
    list: Vec<Win>,
    /// Per world rank: one-sided operations of this origin whose end it awaits (transfers
    /// the transport does, RDMA WRITE and READ, which the target's engine never sees; and
    /// operations awaiting their answer, such as gets), started and ended, both only
    /// growing. A flush, unlock, fence or complete waits until the second reaches what the
    /// first was when it started.
    awaited: Vec<(u64, u64)>,
}

impl Windows {
    fn index(&self, id: u64) -> Option<usize> {
        self.list.iter().position(|w| w.id == id)
    }
}

/// The bytes `disp..disp+len` of a window of `size` bytes, if they lie inside it.
fn range(size: usize, disp: u64, len: usize) -> Option<usize> {
    let d = usize::try_from(disp).ok()?;
    (d.checked_add(len)? <= size).then_some(d)
}

impl Engine {
    /// Serves window `id` over `mem` from now on (its accumulates under `acc`, where origins
    /// on the same host apply theirs directly). The caller keeps `mem` valid until
    /// [`Engine::win_remove`].
    pub(crate) fn win_add(&mut self, id: u64, mem: RawBufMut, acc: Option<AccLock>) {
        self.serve_win(id, vec![mem], false, acc);
    }

    /// Serves dynamic window `id` (no memory until [`Engine::win_attach`]).
    pub(crate) fn win_add_dynamic(&mut self, id: u64) {
        self.serve_win(id, Vec::new(), true, None);
    }

    fn serve_win(&mut self, id: u64, regions: Vec<RawBufMut>, dynamic: bool, acc: Option<AccLock>) {
        let counts = vec![Counts::default(); self.limits.len()];
        let waiting = VecDeque::new();
        let w = Win { id, regions, dynamic, acc, exclusive: None, shared: Vec::new(), waiting, counts };
        self.rma.list.push(w);
    }

    /// Attaches `mem` to dynamic window `id`; the caller keeps it valid until it is detached
    /// or the window removed. False if it overlaps memory already attached.
    pub(crate) fn win_attach(&mut self, id: u64, mem: RawBufMut) -> bool {
        let Some(i) = self.rma.index(id) else { return false };
        let (a, b) = (mem.addr_at(0), mem.addr_at(0) + mem.len() as u64);
        let w = &mut self.rma.list[i];
        if w.regions.iter().any(|r| a < r.addr_at(0) + r.len() as u64 && r.addr_at(0) < b) {
            return false;
        }
        w.regions.push(mem);
        true
    }

    /// Detaches the memory attached at address `addr` from dynamic window `id`; false if
    /// none is.
    pub(crate) fn win_detach(&mut self, id: u64, addr: u64) -> bool {
        let Some(i) = self.rma.index(id) else { return false };
        let w = &mut self.rma.list[i];
        let before = w.regions.len();
        w.regions.retain(|r| r.addr_at(0) != addr);
        w.regions.len() < before
    }

    /// Whether bytes `disp..disp+len` lie in this rank's window `id`.
    pub(crate) fn win_covers(&self, id: u64, disp: u64, len: usize) -> bool {
        self.rma.index(id).is_some_and(|i| self.rma.list[i].locate(disp, len).is_some())
    }

    /// Stops serving window `id`: a later frame for it is a protocol error, and no byte of
    /// its memory is touched again (the answers still queued here take copies; the driver
    /// does the same for those it holds).
    pub(crate) fn win_remove(&mut self, id: u64) {
        self.rma.list.retain(|w| w.id != id);
        for t in self.outbox.iter_mut() {
            t.own_payload(id);
        }
    }

    /// What this rank has seen from `peer` on window `id`.
    pub(crate) fn win_counts(&self, id: u64, peer: usize) -> Counts {
        self.rma.index(id).map(|i| self.rma.list[i].counts[peer]).unwrap_or_default()
    }

    fn win_mut(&mut self, id: u64, peer: usize) -> Result<&mut Win, Error> {
        let i = self.rma.index(id).ok_or_else(|| {
            proto_err(peer, &format!("operation on window {id:#x}, which this rank has freed or never created"))
        })?;
        Ok(&mut self.rma.list[i])
    }

    /// Sends synchronisation `what` of window `id` to `peer`; to this rank itself, handles it
    /// at once.
    pub(crate) fn rma_ctl(&mut self, id: u64, peer: usize, what: u8) -> Result<(), Error> {
        if peer == self.me {
            return self.on_ctl(self.me, id, what);
        }
        self.push(peer, Frame::Ctl { win: id, what }, RawBuf::EMPTY, None);
        Ok(())
    }

    /// Writes (`op` replace) or accumulates `data` (elements of `elem` bytes, type `dtype`)
    /// at byte `disp` of `peer`'s window `id`. The request is done when `data` may be
    /// reused (its frames are taken by the transport); the operation is complete at the
    /// target after a flush or unlock.
    pub(crate) fn rma_put(&mut self, at: At, how: Combine, data: RawBuf) -> Result<ReqId, Error> {
        let (At { win: id, peer, disp }, Combine { op, dtype, elem }) = (at, how);
        if data.len() == 0 {
            return Ok(self.nothing_moved());
        }
        if peer == self.me {
            self.apply(self.me, (id, disp), (op, dtype), data.bytes(), false)?;
            return Ok(self.reqs.insert(State::Done(Ok(self.rma_status(data.len())))));
        }
        let id_req = self.reqs.insert(State::SendEager { peer });
        let chunk = self.rma_chunk(peer, elem);
        let mut at = 0;
        loop {
            let k = chunk.min(data.len() - at);
            let last = at + k == data.len();
            let f = Frame::Put { win: id, disp: disp + at as u64, op, dtype };
            self.push_owned(peer, f, data.slice(at, k), id_req, last);
            at += k;
            if last {
                return Ok(id_req);
            }
        }
    }

    /// Reads `dst.len()` bytes at byte `disp` of `peer`'s window `id` into `dst`.
    pub(crate) fn rma_get(&mut self, at: At, mut dst: RawBufMut) -> Result<ReqId, Error> {
        let At { win: id, peer, disp } = at;
        if dst.len() == 0 {
            return Ok(self.nothing_moved());
        }
        if peer == self.me {
            let len = dst.len();
            let w = self.win_mut(id, peer)?;
            let src = w.locate(disp, len).ok_or_else(|| Error::Other("get outside the window".into()))?;
            dst.write_at(0, src.as_read().bytes());
            return Ok(self.reqs.insert(State::Done(Ok(self.rma_status(len)))));
        }
        let len = dst.len() as u64;
        let rid = self.answer_awaited(peer, dst);
        self.push_owned(peer, Frame::Get { win: id, disp, len, oreq: rid.to_wire() }, RawBuf::EMPTY, rid, false);
        Ok(rid)
    }

    /// Accumulates `operand` at byte `disp` of `peer`'s window `id`, and fills `result`
    /// (as long as `operand`) with the elements it replaced, atomically per element
    /// (`MPI_Get_accumulate`, `MPI_Fetch_and_op`).
    pub(crate) fn rma_fetch(
        &mut self,
        at: At,
        how: Combine,
        operand: RawBuf,
        mut result: RawBufMut,
    ) -> Result<ReqId, Error> {
        let (At { win: id, peer, disp }, Combine { op, dtype, elem }) = (at, how);
        if operand.len() == 0 {
            return Ok(self.nothing_moved());
        }
        if peer == self.me {
            let old = self.apply(self.me, (id, disp), (op, dtype), operand.bytes(), true)?;
            result.write_at(0, &old);
            return Ok(self.reqs.insert(State::Done(Ok(self.rma_status(old.len())))));
        }
        let rid = self.answer_awaited(peer, result);
        let chunk = self.rma_chunk(peer, elem);
        let mut at = 0;
        loop {
            let k = chunk.min(operand.len() - at);
            let (oreq, roff) = (rid.to_wire(), at as u64);
            let f = Frame::Fetch { win: id, disp: disp + roff, op, dtype, oreq, roff };
            self.push_owned(peer, f, operand.slice(at, k), rid, false);
            at += k;
            if at == operand.len() {
                return Ok(rid);
            }
        }
    }

    /// Compares the element at byte `disp` of `peer`'s window `id` with the first half of
    /// `pair` and, if equal, replaces it with the second half; `result` gets the element as
    /// it was (`MPI_Compare_and_swap`).
    pub(crate) fn rma_cas(
        &mut self,
        at: At,
        dtype: Dtype,
        pair: RawBuf,
        mut result: RawBufMut,
    ) -> Result<ReqId, Error> {
        let At { win: id, peer, disp } = at;
        if peer == self.me {
            let old = self.cas(self.me, id, disp, dtype, pair.bytes())?;
            result.write_at(0, &old);
            return Ok(self.reqs.insert(State::Done(Ok(self.rma_status(old.len())))));
        }
        let rid = self.answer_awaited(peer, result);
        self.push_owned(peer, Frame::Cas { win: id, disp, dtype, oreq: rid.to_wire() }, pair, rid, false);
        Ok(rid)
    }

    /// A request for a one-sided transfer the transport does to `peer` (a read lands in
    /// `buf`), counted as started.
    pub(crate) fn rma_remote_begin(&mut self, peer: usize, buf: RawBufMut) -> ReqId {
        self.awaited(peer).0 += 1;
        self.reqs.insert(State::RmaRemote { peer, buf })
    }

    /// The transfer of `id` could not start: counted as ended, and its request dropped.
    pub(crate) fn rma_remote_abort(&mut self, peer: usize, id: ReqId) {
        self.awaited(peer).1 += 1;
        self.reqs.complete(id, Ok(self.rma_status(0)));
        self.reqs.take_done(id);
    }

    /// A request awaiting `peer`'s answer into `buf`, counted as started.
    fn answer_awaited(&mut self, peer: usize, buf: RawBufMut) -> ReqId {
        self.awaited(peer).0 += 1;
        self.reqs.insert(State::RmaAnswer { peer, buf, got: 0 })
    }

    /// Nobody will wait for the transfer of `id`: dropped when it ends.
    pub(crate) fn rma_remote_detach(&mut self, id: ReqId) {
        self.reqs.detach(id);
    }

    /// One-sided operations to `peer` whose end this rank awaits, started and ended so far.
    pub(crate) fn rma_awaited(&self, peer: usize) -> (u64, u64) {
        self.rma.awaited.get(peer).copied().unwrap_or_default()
    }

    pub(super) fn awaited(&mut self, peer: usize) -> &mut (u64, u64) {
        if self.rma.awaited.len() <= peer {
            self.rma.awaited.resize(self.limits.len().max(peer + 1), (0, 0));
        }
        &mut self.rma.awaited[peer]
    }

    /// The transport ended transfer `token` to `peer` (see `Sink::remote_done`).
    pub(super) fn on_remote_done(&mut self, peer: usize, token: u64, result: Result<Option<&[u8]>, Error>) {
        self.awaited(peer).1 += 1;
        let id = ReqId::from_wire(token);
        let Some(State::RmaRemote { buf, .. }) = self.reqs.get_mut(id) else {
            // Failed already (its peer was declared gone): nothing waits for it.
            return;
        };
        let len = buf.len();
        if let Ok(Some(bytes)) = result {
            buf.write_at(0, bytes);
        }
        let st = self.rma_status(len);
        let result = result.map(|_| st);
        self.reqs.complete(id, result);
    }

    /// The request of an operation of no bytes: done at once, with no frame (MPI: it has
    /// no effect; a read of nothing would have no answer to wait for).
    fn nothing_moved(&mut self) -> ReqId {
        let st = self.rma_status(0);
        self.reqs.insert(State::Done(Ok(st)))
    }

    fn rma_status(&self, bytes: usize) -> Status {
        Status { source: self.me, tag: 0, bytes }
    }

    /// Largest payload of one operation frame to `peer`: whole elements of `elem` bytes.
    fn rma_chunk(&self, peer: usize, elem: usize) -> usize {
        let max = self.limits[peer].max_payload.min(1 << 30);
        let elem = elem.max(1);
        (max / elem * elem).max(elem)
    }

    /// Applies operation `op` (on elements of type `dtype`) of `data` at byte `disp` of
    /// window `id`, from `origin`; with `fetch`, returns the elements as they were before,
    /// read atomically with the change (else nothing).
    fn apply(
        &mut self,
        origin: usize,
        (id, disp): (u64, u64),
        (op, dtype): (OpCode, Dtype),
        data: &[u8],
        fetch: bool,
    ) -> Result<Vec<u8>, Error> {
        let w = self.win_mut(id, origin)?;
        let refused = |what: &str| proto_err(origin, &format!("{what} at byte {disp} of window {id:#x}"));
        let mut mem = w.locate(disp, data.len()).ok_or_else(|| refused("access outside the window"))?;
        let acc = w.acc;
        let dst = mem.range_mut(0, data.len()).expect("located");
        let mut old = Vec::new();
        let applied = guarded(acc, || {
            if fetch {
                old.extend_from_slice(dst);
            }
            datatype::apply(op, dtype, dst, data)
        });
        if !applied {
            return Err(refused(&format!("operation {op} on element type {dtype}")));
        }
        Ok(old)
    }

    /// Compare and swap of one element at `disp` of window `id`; returns the old element.
    fn cas(&mut self, origin: usize, id: u64, disp: u64, dtype: Dtype, pair: &[u8]) -> Result<Vec<u8>, Error> {
        let n = datatype::size_of(dtype).filter(|&n| pair.len() == 2 * n);
        let w = self.win_mut(id, origin)?;
        let Some((n, mut mem)) = n.and_then(|n| Some((n, w.locate(disp, n)?))) else {
            return Err(proto_err(origin, "compare-and-swap outside the window or of a bad element"));
        };
        let acc = w.acc;
        let cell = mem.range_mut(0, n).expect("located");
        Ok(guarded(acc, || {
            let old = cell.to_vec();
            if old == pair[..n] {
                cell.copy_from_slice(&pair[n..]);
            }
            old
        }))
    }

    /// Queues the bytes of window `win` at `src` as the answer to get `oreq` of `peer`, in
    /// frames that send them from the window in place. MPI makes that safe: the origin's
    /// flush, unlock, fence or complete waits for this answer, so the window cannot be
    /// written legally before it has left; and if the window goes first, the frames still
    /// queued take copies ([`Engine::win_remove`]).
    fn answer_from(&mut self, peer: usize, oreq: u64, win: u64, src: RawBuf) {
        let chunk = self.limits[peer].max_payload.clamp(1, 1 << 30);
        let mut off = 0;
        while off < src.len() {
            let k = chunk.min(src.len() - off);
            let f = Frame::Reply { oreq, off: off as u64, flags: 0 };
            let mut t = Transmit::new(peer, f, src.slice(off, k), None, None);
            t.window = Some(win);
            self.outbox.push_back(t);
            off += k;
        }
    }

    fn refuse(&mut self, peer: usize, oreq: u64) {
        self.push(peer, Frame::Reply { oreq, off: 0, flags: REPLY_REFUSED }, RawBuf::EMPTY, None);
    }

    /// A one-sided frame from `peer` (see the module's notes).
    pub(super) fn on_rma_frame(&mut self, peer: usize, f: Frame, payload: &[u8]) -> Result<(), Error> {
        match f {
            Frame::Put { win, disp, op, dtype } => {
                if let Err(e) = self.apply(peer, (win, disp), (op, dtype), payload, false) {
                    // Only a dynamic window's origin cannot check the range itself.
                    if !self.win_mut(win, peer)?.dynamic {
                        return Err(e);
                    }
                    self.push(peer, Frame::Ctl { win, what: ctl::REFUSED }, RawBuf::EMPTY, None);
                }
            }
            Frame::Get { win, disp, len, oreq } => {
                let w = self.win_mut(win, peer)?;
                let Some(src) = usize::try_from(len).ok().and_then(|len| w.locate(disp, len)) else {
                    self.refuse(peer, oreq);
                    return Ok(());
                };
                self.answer_from(peer, oreq, win, src.as_read());
            }
            Frame::Fetch { win, disp, op, dtype, oreq, roff } => {
                self.win_mut(win, peer)?;
                match self.apply(peer, (win, disp), (op, dtype), payload, true) {
                    Ok(old) => {
                        let f = Frame::Reply { oreq, off: roff, flags: 0 };
                        self.outbox.push_back(Transmit::with_copy(peer, f, old));
                    }
                    Err(_) => self.refuse(peer, oreq),
                }
            }
            Frame::Cas { win, disp, dtype, oreq } => match self.cas(peer, win, disp, dtype, payload) {
                Ok(old) => {
                    self.outbox.push_back(Transmit::with_copy(peer, Frame::Reply { oreq, off: 0, flags: 0 }, old));
                }
                Err(_) => self.refuse(peer, oreq),
            },
            Frame::Reply { oreq, off, flags } => {
                let rid = ReqId::from_wire(oreq);
                let Some(State::RmaAnswer { buf, .. }) = self.reqs.get_mut(rid) else {
                    return Err(proto_err(peer, "answer for no pending one-sided request"));
                };
                if flags & REPLY_REFUSED != 0 {
                    let e = Error::Other(format!("rank {peer} refused the one-sided operation (outside its window)"));
                    self.reqs.complete(rid, Err(e));
                    self.awaited(peer).1 += 1;
                    return Ok(());
                }
                let off = usize::try_from(off).unwrap_or(usize::MAX);
                if !buf.write_at(off, payload) {
                    return Err(proto_err(peer, "answer outside its request"));
                }
                self.answer_landed(peer, rid, payload.len());
            }
            Frame::Ctl { win, what } => self.on_ctl(peer, win, what)?,
            _ => unreachable!("only one-sided frames come here"),
        }
        Ok(())
    }

    /// Where the `n` bytes of an answer to `oreq` from byte `off` on should land, if the
    /// request awaits them there (a stream transport then reads them in place).
    pub(super) fn place_answer(&self, oreq: u64, off: u64, n: usize) -> Option<RawBufMut> {
        let Some(State::RmaAnswer { buf, .. }) = self.reqs.get(ReqId::from_wire(oreq)) else { return None };
        let off = usize::try_from(off).ok()?;
        (off.checked_add(n)? <= buf.len()).then(|| buf.window(off, n))
    }

    /// `n` more bytes of the answer to `rid` from `peer` are in its buffer.
    pub(super) fn answer_landed(&mut self, peer: usize, rid: ReqId, n: usize) {
        let Some(State::RmaAnswer { buf, got, .. }) = self.reqs.get_mut(rid) else { return };
        *got += n;
        if *got < buf.len() {
            return;
        }
        let len = buf.len();
        self.reqs.complete(rid, Ok(self.rma_status(len)));
        self.awaited(peer).1 += 1;
    }

    /// Synchronisation `what` of window `id` from `peer` (or from this rank itself).
    fn on_ctl(&mut self, peer: usize, id: u64, what: u8) -> Result<(), Error> {
        let me = self.me;
        let i = self.rma.index(id).ok_or_else(|| {
            proto_err(peer, &format!("operation on window {id:#x}, which this rank has freed or never created"))
        })?;
        let w = &mut self.rma.list[i];
        let ack = match what {
            ctl::GRANTED => {
                w.counts[peer].granted += 1;
                None
            }
            ctl::UNLOCKED | ctl::FLUSHED => {
                w.counts[peer].acked += 1;
                None
            }
            ctl::POST => {
                w.counts[peer].posts += 1;
                None
            }
            ctl::COMPLETE => {
                w.counts[peer].completes += 1;
                None
            }
            ctl::REFUSED => {
                w.counts[peer].refused += 1;
                None
            }
            ctl::FLUSH => Some(ctl::FLUSHED),
            ctl::LOCK_SHARED | ctl::LOCK_EXCLUSIVE => {
                let kind = if what == ctl::LOCK_SHARED { LockKind::Shared } else { LockKind::Exclusive };
                w.waiting.push_back((peer, kind));
                None
            }
            ctl::UNLOCK => {
                if w.exclusive == Some(peer) {
                    w.exclusive = None;
                } else if let Some(k) = w.shared.iter().position(|&p| p == peer) {
                    w.shared.swap_remove(k);
                } else {
                    return Err(proto_err(peer, "unlock of a window it has not locked"));
                }
                Some(ctl::UNLOCKED)
            }
            _ => return Err(proto_err(peer, &format!("unknown window synchronisation {what}"))),
        };
        match ack {
            Some(_) if peer == me => self.rma.list[i].counts[me].acked += 1,
            Some(a) => self.push(peer, Frame::Ctl { win: id, what: a }, RawBuf::EMPTY, None),
            None => {}
        }
        if matches!(what, ctl::LOCK_SHARED | ctl::LOCK_EXCLUSIVE | ctl::UNLOCK) {
            self.grant_waiting(i);
        }
        Ok(())
    }

    /// Grants the oldest waiting lock requests of window `i` that the holders allow.
    fn grant_waiting(&mut self, i: usize) {
        let me = self.me;
        let id = self.rma.list[i].id;
        loop {
            let w = &mut self.rma.list[i];
            let Some(&(origin, kind)) = w.waiting.front() else { return };
            let free = w.exclusive.is_none() && (kind == LockKind::Shared || w.shared.is_empty());
            if !free {
                return;
            }
            w.waiting.pop_front();
            match kind {
                LockKind::Shared => w.shared.push(origin),
                LockKind::Exclusive => w.exclusive = Some(origin),
            }
            if origin == me {
                w.counts[me].granted += 1;
            } else {
                self.push(origin, Frame::Ctl { win: id, what: ctl::GRANTED }, RawBuf::EMPTY, None);
            }
        }
    }
}
