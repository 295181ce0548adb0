//! The algorithms behind the collectives. All of them speak through [`Team::coll_xchg`]
//! (a blocking send/receive pair on the collective context) with one tag per call, so they
//! run on a whole communicator or on a subset of it (the host leaders of node.rs).

use bytemuck::Pod;

use super::op::Op;
use super::Input;
use crate::comm::Comm;
use crate::comm::LocalCopy;
use crate::copy;
use crate::error::Error;

/// Ranks that run an algorithm together: a communicator, or some of its ranks.
pub(super) trait Team {
    /// This process's index in the team.
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// The communicator rank of member `i` (for errors that name a rank).
    fn comm_rank(&self, i: usize) -> usize;
    /// Sends to and receives from team members (by index), making the local copy `copy`
    /// while the transfers are under way; see [`Comm::coll_xchg_with`].
    fn coll_xchg_with(
        &self,
        tag: i32,
        send: Option<(&[u8], usize)>,
        recv: Option<(&mut [u8], usize)>,
        copy: LocalCopy<'_>,
    ) -> Result<usize, Error>;

    /// Whether some rank of the job shares its CPUs with more ranks than it has CPUs (the
    /// same answer on every rank; see `Hosts::outnumbered`).
    fn outnumbered(&self) -> bool;

    /// The team's members (by index) in the order the ring algorithms pass data: the
    /// fabric's ring (see `coll::ring`), the same on every member.
    fn ring_order(&self) -> Vec<usize>;

    /// This member's place in `order`, and the members before and after it.
    fn ring_neighbours(&self, order: &[usize]) -> (usize, usize, usize) {
        let p = order.len();
        let pos = order.iter().position(|&m| m == self.rank()).expect("a member of its own team");
        (pos, order[(pos + 1) % p], order[(pos + p - 1) % p])
    }

    /// Sends to and receives from team members (by index); see [`Comm::coll_xchg`].
    fn coll_xchg(
        &self,
        tag: i32,
        send: Option<(&[u8], usize)>,
        recv: Option<(&mut [u8], usize)>,
    ) -> Result<usize, Error> {
        self.coll_xchg_with(tag, send, recv, None)
    }
}

impl Team for Comm {
    fn rank(&self) -> usize {
        Comm::rank(self)
    }
    fn size(&self) -> usize {
        Comm::size(self)
    }
    fn comm_rank(&self, i: usize) -> usize {
        i
    }
    fn outnumbered(&self) -> bool {
        Comm::outnumbered(self)
    }
    fn ring_order(&self) -> Vec<usize> {
        self.ring_order_of(self.group().iter().copied())
    }
    fn coll_xchg_with(
        &self,
        tag: i32,
        send: Option<(&[u8], usize)>,
        recv: Option<(&mut [u8], usize)>,
        copy: LocalCopy<'_>,
    ) -> Result<usize, Error> {
        Comm::coll_xchg_with(self, tag, send, recv, copy)
    }
}

/// Some ranks of a communicator (`members`, comm ranks), this process being `members[me]`.
#[derive(Debug)]
pub(super) struct Subset<'a> {
    pub(super) comm: &'a Comm,
    pub(super) members: &'a [usize],
    pub(super) me: usize,
}

impl Team for Subset<'_> {
    fn rank(&self) -> usize {
        self.me
    }
    fn size(&self) -> usize {
        self.members.len()
    }
    fn comm_rank(&self, i: usize) -> usize {
        self.members[i]
    }
    fn outnumbered(&self) -> bool {
        Comm::outnumbered(self.comm)
    }
    fn ring_order(&self) -> Vec<usize> {
        let group = self.comm.group();
        self.comm.ring_order_of(self.members.iter().map(|&m| group[m]))
    }
    fn coll_xchg_with(
        &self,
        tag: i32,
        send: Option<(&[u8], usize)>,
        recv: Option<(&mut [u8], usize)>,
        copy: LocalCopy<'_>,
    ) -> Result<usize, Error> {
        let m = self.members;
        self.comm.coll_xchg_with(tag, send.map(|(b, i)| (b, m[i])), recv.map(|(b, i)| (b, m[i])), copy)
    }
}

thread_local! {
    /// Scratch buffers reused across collectives: a fresh large allocation per call would
    /// cost page faults on every call. A pool, because collectives nest (reduce in bcast).
    static SCRATCH: std::cell::RefCell<Vec<Vec<u64>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Largest scratch buffer kept between calls.
const SCRATCH_KEEP: usize = 64 << 20;

/// Runs `f` on a scratch slice of `len` elements (contents unspecified) that starts at the
/// same offset within a page as `like` (a page boundary for null): the buffer whose peers'
/// copies it receives, so that no copy into it is [`copy::near`].
pub(super) fn with_scratch<T: Pod, R>(len: usize, like: *const T, f: impl FnOnce(&mut [T]) -> R) -> R {
    with_scratch_slack(len, |tmp| f(copy::placed(tmp, len, like)))
}

/// Runs `f` on a scratch slice of `len` elements and [`copy::slack`] more, to be
/// [`copy::placed`] by the caller (contents unspecified).
pub(super) fn with_scratch_slack<T: Pod, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    let len = len + copy::slack::<T>();
    let mut v = SCRATCH.with(|s| s.borrow_mut().pop()).unwrap_or_default();
    let bytes = len * std::mem::size_of::<T>();
    if v.len() * 8 < bytes {
        v.resize(bytes.div_ceil(8), 0);
    }
    let r = match bytemuck::try_cast_slice_mut::<u8, T>(&mut bytemuck::cast_slice_mut::<u64, u8>(&mut v)[..bytes]) {
        Ok(t) => f(t),
        Err(_) => f(&mut vec![T::zeroed(); len]),
    };
    if v.len() * 8 <= SCRATCH_KEEP {
        SCRATCH.with(|s| s.borrow_mut().push(v));
    }
    r
}

/// Block `a` to read and block `b` to write of one buffer (they must not overlap).
pub(super) fn two(buf: &mut [u8], a: std::ops::Range<usize>, b: std::ops::Range<usize>) -> (&[u8], &mut [u8]) {
    let (a, b) = two_mut(buf, a, b);
    (a, b)
}

/// Blocks `a` and `b` of one buffer, both to write (they must not overlap).
pub(super) fn two_mut<T>(buf: &mut [T], a: std::ops::Range<usize>, b: std::ops::Range<usize>) -> (&mut [T], &mut [T]) {
    if a.is_empty() {
        return (Default::default(), &mut buf[b]);
    }
    if b.is_empty() {
        return (&mut buf[a], Default::default());
    }
    assert!(a.end <= b.start || b.end <= a.start, "blocks {a:?} and {b:?} overlap");
    if a.start < b.start {
        let (lo, hi) = buf.split_at_mut(b.start);
        (&mut lo[a], &mut hi[..b.end - b.start])
    } else {
        let (lo, hi) = buf.split_at_mut(a.start);
        (&mut hi[..a.end - a.start], &mut lo[b])
    }
}

/// The ranges `blocks` of `buf` as separate mutable slices, in the order given (empty
/// ranges give empty slices). Panics if two non-empty ranges overlap.
pub(super) fn split_blocks<T>(buf: &mut [T], blocks: impl Iterator<Item = std::ops::Range<usize>>) -> Vec<&mut [T]> {
    let ranges: Vec<_> = blocks.collect();
    let mut order: Vec<usize> = (0..ranges.len()).filter(|&i| !ranges[i].is_empty()).collect();
    order.sort_unstable_by_key(|&i| ranges[i].start);
    let mut out: Vec<&mut [T]> = ranges.iter().map(|_| Default::default()).collect();
    let (mut rest, mut at) = (buf, 0);
    for i in order {
        let r = &ranges[i];
        assert!(r.start >= at, "block {r:?} overlaps the one before");
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - at);
        let (block, tail) = tail.split_at_mut(r.len());
        (out[i], rest, at) = (block, tail, r.end);
    }
    out
}

/// Barrier: dissemination (ceil(log2 p) rounds of empty messages), or, where a team goes
/// [`flat`], linear (Open MPI's choice for 4 to 7 ranks): every rank tells rank 0 it is in,
/// and rank 0 releases them all. That is 2(p-1) messages instead of p ceil(log2 p), each of
/// which may wait for its rank to get a CPU; and rank 0 leaves first, while it runs, so a
/// rooted collective from it that follows finds the others ready (as the segment's barrier does, `node::Arena::barrier`). 4 ranks on
/// 2 cores over TCP: the barrier 0.89x of dissemination's time, a broadcast timed after it
/// 0.37-0.48x up to 32 KiB, an all-reduce 0.82-0.93x up to 32 KiB.
pub(super) fn barrier(c: &impl Team, tag: i32) -> Result<(), Error> {
    let (p, me) = (c.size(), c.rank());
    let linear = match super::settings().barrier_algo.as_deref() {
        Some("linear") => true,
        Some(_) => false,
        None => flat(c),
    };
    if linear {
        return linear_barrier(c, tag);
    }
    let mut k = 1;
    while k < p {
        c.coll_xchg(tag, Some((&[], (me + k) % p)), Some((&mut [], (me + p - k) % p)))?;
        k *= 2;
    }
    Ok(())
}

/// Every rank tells rank 0 it is in; rank 0 then releases them with an empty flat broadcast.
fn linear_barrier(c: &impl Team, tag: i32) -> Result<(), Error> {
    if c.rank() != 0 {
        c.coll_xchg(tag, Some((&[], 0)), None)?;
    } else {
        for r in 1..c.size() {
            c.coll_xchg(tag, None, Some((&mut [], r)))?;
        }
    }
    flat_bcast(c, tag, &mut [], 0)
}

/// Ranks up to which a team goes [`flat`].
const FLAT_MAX: usize = 8;

/// Whether a team of 3 to [`FLAT_MAX`] ranks goes straight through one rank (a broadcast
/// from its root, a barrier through rank 0) instead of a tree: when ranks outnumber cores
/// somewhere, every hop of a tree may wait for its rank to be given a CPU.
fn flat(c: &impl Team) -> bool {
    let p = c.size();
    p > 2 && p <= FLAT_MAX && c.outnumbered()
}

/// Broadcast: binomial tree for small messages; scatter + ring allgather (van de Geijn) for
/// large ones on more than two ranks. When ranks outnumber cores, every hop of a tree or
/// ring may wait for its rank to be given a CPU; where the team goes [`flat`], the root
/// then sends to each (4 ranks on 2 cores over TCP: 0.50-0.89x of the binomial tree's time
/// up to 128 KiB, 0.35-0.74x of scatter + allgather's from 256 KiB).
pub(super) fn bcast(c: &impl Team, tag: i32, buf: &mut [u8], root: usize) -> Result<(), Error> {
    let p = c.size();
    let large = buf.len() >= (256 << 10) && p > 2;
    match super::settings().bcast_algo.as_deref() {
        Some("binomial") => binomial_bcast(c, tag, buf, root),
        Some("scatter-allgather") => scatter_allgather_bcast(c, tag, buf, root),
        Some("flat") => flat_bcast(c, tag, buf, root),
        _ if flat(c) => flat_bcast(c, tag, buf, root),
        _ if large => scatter_allgather_bcast(c, tag, buf, root),
        _ => binomial_bcast(c, tag, buf, root),
    }
}

/// A broadcast's receive into `buf` from member `from` (with `send`, as
/// [`Team::coll_xchg`]): `Ok(None)` if exactly `buf`'s bytes came, `Ok(Some(mismatch))` if
/// another number came (the caller goes on, so the ranks after it are not left waiting, and
/// reports it at the end), the error else.
fn bcast_recv(
    c: &impl Team,
    tag: i32,
    send: Option<(&[u8], usize)>,
    buf: &mut [u8],
    from: usize,
) -> Result<Option<Error>, Error> {
    let buffer = buf.len();
    received(c.coll_xchg(tag, send, Some((buf, from))), buffer, c.comm_rank(from))
}

/// A collective's receive of `buffer` bytes from comm rank `from` that ended with `r` (the
/// bytes that came): `Ok(None)` if exactly `buffer` came, `Ok(Some(mismatch))` if more
/// (truncated) or fewer did, the error else.
pub(super) fn received(r: Result<usize, Error>, buffer: usize, from: usize) -> Result<Option<Error>, Error> {
    let mismatch = |message| Some(Error::Mismatch { from, buffer, message: Some(message) });
    match r {
        Ok(got) if got == buffer => Ok(None),
        Ok(got) => Ok(mismatch(got)),
        Err(Error::Truncate { message, .. }) => Ok(mismatch(message)),
        Err(e) => Err(e),
    }
}

/// What a rank passes on in a broadcast in place of `out` once its own part did not fit:
/// one byte less (one byte if `out` is empty), which the ranks after it that expect what it
/// expected cannot take, so they report the mismatch too (MPICH's error flag does the same).
pub(super) fn marker(out: &[u8]) -> &[u8] {
    match out.len() {
        0 => &[0],
        n => &out[..n - 1],
    }
}

/// A collective's result split for one that goes on after a mismatch of counts: the
/// mismatch as a value, any other error as the error.
pub(super) fn mismatch_of(r: Result<(), Error>) -> Result<Option<Error>, Error> {
    match r {
        Ok(()) => Ok(None),
        Err(e @ Error::Mismatch { .. }) => Ok(Some(e)),
        Err(e) => Err(e),
    }
}

fn binomial_bcast(c: &impl Team, tag: i32, buf: &mut [u8], root: usize) -> Result<(), Error> {
    let (p, me) = (c.size(), c.rank());
    let vr = (me + p - root) % p;
    let real = |v: usize| (v + root) % p;
    let mut mask = 1;
    let mut failed = None;
    while mask < p {
        if vr & mask != 0 {
            failed = bcast_recv(c, tag, None, buf, real(vr - mask))?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    let out: &[u8] = if failed.is_some() { marker(buf) } else { buf };
    while mask > 0 {
        if vr + mask < p {
            c.coll_xchg(tag, Some((out, real(vr + mask))), None)?;
        }
        mask >>= 1;
    }
    failed.map_or(Ok(()), Err)
}

/// The root sends to every other rank in turn (MPICH's and Open MPI's linear broadcast).
fn flat_bcast(c: &impl Team, tag: i32, buf: &mut [u8], root: usize) -> Result<(), Error> {
    let (p, me) = (c.size(), c.rank());
    if me != root {
        return bcast_recv(c, tag, None, buf, root)?.map_or(Ok(()), Err);
    }
    for v in 1..p {
        c.coll_xchg(tag, Some((&*buf, (root + v) % p)), None)?;
    }
    Ok(())
}

/// Block `i` of a buffer of `len` bytes cut into `p` nearly equal blocks.
pub(super) fn block(len: usize, p: usize, i: usize) -> std::ops::Range<usize> {
    let base = len / p;
    let extra = len % p;
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

fn scatter_allgather_bcast(c: &impl Team, tag: i32, buf: &mut [u8], root: usize) -> Result<(), Error> {
    let (p, me) = (c.size(), c.rank());
    // Scatter: the root sends each rank its block (blocks in root-relative order).
    let vr = (me + p - root) % p;
    let real = |v: usize| (v + root) % p;
    // A block that does not fit is a mismatch of counts: it is kept for the end, and the
    // exchanges go on, so no rank waits for ever on this one; what it sends after is a
    // marker, so the ranks after it find it too.
    let mut failed = None;
    if vr == 0 {
        for v in 1..p {
            c.coll_xchg(tag, Some((&buf[block(buf.len(), p, v)], real(v))), None)?;
        }
    } else {
        let r = block(buf.len(), p, vr);
        failed = bcast_recv(c, tag, None, &mut buf[r], root)?;
    }
    // Ring allgather of the blocks, in root-relative numbering.
    let (next, prev) = (real((vr + 1) % p), real((vr + p - 1) % p));
    for step in 0..p - 1 {
        let send_b = (vr + p - step) % p;
        let recv_b = (vr + p - step - 1) % p;
        let (sr, rr) = (block(buf.len(), p, send_b), block(buf.len(), p, recv_b));
        let (out, inn) = two(buf, sr, rr);
        let out = if failed.is_some() { marker(out) } else { out };
        let bad = bcast_recv(c, tag, Some((out, next)), inn, prev)?;
        failed = failed.or(bad);
    }
    // A block tells nothing of the root's whole count.
    let buffer = buf.len();
    failed.map_or(Ok(()), |_| Err(Error::Mismatch { from: c.comm_rank(root), buffer, message: None }))
}

/// Binomial-tree reduction. Commutative operations use a tree rooted at `root`;
/// non-commutative ones reduce to rank 0 in rank order (each combine puts the lower ranks'
/// partial result on the left), and rank 0 forwards the result to `root`.
pub(super) fn reduce<T: Pod, O: Op<T>>(
    c: &impl Team,
    tag: i32,
    acc: &mut [T],
    op: &O,
    root: usize,
) -> Result<(), Error> {
    let (p, me) = (c.size(), c.rank());
    let tree_root = if op.commutative() { root } else { 0 };
    let vr = (me + p - tree_root) % p;
    let real = |v: usize| (v + tree_root) % p;
    with_scratch::<T, _>(acc.len(), acc.as_ptr(), |tmp| {
        let mut mask = 1;
        while mask < p {
            if vr & mask == 0 {
                let src = vr | mask;
                if src < p {
                    c.coll_xchg(tag, None, Some((bytemuck::cast_slice_mut(tmp), real(src))))?;
                    op.apply(acc, tmp);
                }
            } else {
                c.coll_xchg(tag, Some((bytemuck::cast_slice(acc), real(vr & !mask))), None)?;
                break;
            }
            mask <<= 1;
        }
        Ok::<(), Error>(())
    })?;
    if tree_root != root {
        if me == tree_root {
            c.coll_xchg(tag, Some((bytemuck::cast_slice(acc), root)), None)?;
        } else if me == root {
            c.coll_xchg(tag, None, Some((bytemuck::cast_slice_mut(acc), tree_root)))?;
        }
    }
    Ok(())
}

/// All-reduce: recursive doubling for small messages (and whenever the message has fewer
/// elements than ranks), reduce-scatter + allgather around a ring for large ones, reduce +
/// broadcast for non-commutative operations.
pub(super) fn allreduce<T: Pod, O: Op<T>>(
    c: &impl Team,
    tag: i32,
    input: Input<'_, T>,
    buf: &mut [T],
    op: &O,
) -> Result<(), Error> {
    let p = c.size();
    let forced = super::settings().allreduce_algo.as_deref();
    if p == 1 {
        input.fill(buf);
        return Ok(());
    }
    if !op.commutative() || forced == Some("reduce-bcast") {
        input.fill(buf);
        return reduce_bcast(c, tag, buf, op);
    }
    let ring = buf.len() >= p
        && match forced {
            Some("ring") => true,
            Some("recursive-doubling") => false,
            _ => std::mem::size_of_val(buf) >= (16 << 10),
        };
    if ring {
        return ring_allreduce(c, tag, input, buf, op);
    }
    input.fill(buf);
    recursive_doubling(c, tag, buf, op)
}

fn reduce_bcast<T: Pod, O: Op<T>>(c: &impl Team, tag: i32, buf: &mut [T], op: &O) -> Result<(), Error> {
    reduce(c, tag, buf, op, 0)?;
    binomial_bcast(c, tag, bytemuck::cast_slice_mut(buf), 0)
}

/// Recursive doubling with the usual fold for a rank count that is not a power of two: the
/// first `2 * rem` ranks pair up, the even one hands its data to the odd one and waits for
/// the result.
fn recursive_doubling<T: Pod, O: Op<T>>(c: &impl Team, tag: i32, buf: &mut [T], op: &O) -> Result<(), Error> {
    with_scratch::<T, _>(buf.len(), buf.as_ptr(), |tmp| rd_steps(c, tag, buf, op, tmp))
}

/// The shape of recursive doubling over `p` ranks, with MPICH's fold for a rank count that
/// is not a power of two: the first `2 * rem` ranks pair up and the even one of each pair sits
/// the exchange out.
pub(super) struct RecDoubling {
    pof2: usize,
    rem: usize,
}

impl RecDoubling {
    pub(super) fn new(p: usize) -> RecDoubling {
        let pof2 = 1usize << p.ilog2();
        RecDoubling { pof2, rem: p - pof2 }
    }

    /// Whether rank `me` is one of a folded pair (even: hands over, odd: takes over).
    pub(super) fn folded(&self, me: usize) -> bool {
        me < 2 * self.rem
    }

    /// Rank `me`'s place among the `pof2` ranks that exchange, if it takes part.
    pub(super) fn newrank(&self, me: usize) -> Option<usize> {
        match (self.folded(me), me % 2) {
            (true, 0) => None,
            (true, _) => Some(me / 2),
            (false, _) => Some(me - self.rem),
        }
    }

    /// The partner of the exchanging rank `nr` at each step.
    pub(super) fn partners(&self, nr: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.pof2.ilog2()).map(move |k| {
            let nd = nr ^ (1 << k);
            if nd < self.rem {
                nd * 2 + 1
            } else {
                nd + self.rem
            }
        })
    }
}

fn rd_steps<T: Pod, O: Op<T>>(c: &impl Team, tag: i32, buf: &mut [T], op: &O, tmp: &mut [T]) -> Result<(), Error> {
    let me = c.rank();
    let rd = RecDoubling::new(c.size());
    if rd.folded(me) {
        if me.is_multiple_of(2) {
            c.coll_xchg(tag, Some((bytemuck::cast_slice(buf), me + 1)), None)?;
        } else {
            c.coll_xchg(tag, None, Some((bytemuck::cast_slice_mut(&mut *tmp), me - 1)))?;
            // tmp comes from the lower rank: it goes on the left.
            op.apply(tmp, buf);
            buf.copy_from_slice(tmp);
        }
    }
    if let Some(nr) = rd.newrank(me) {
        for dst in rd.partners(nr) {
            c.coll_xchg(tag, Some((bytemuck::cast_slice(buf), dst)), Some((bytemuck::cast_slice_mut(&mut *tmp), dst)))?;
            if dst < me {
                op.apply(tmp, buf);
                buf.copy_from_slice(tmp);
            } else {
                op.apply(buf, tmp);
            }
        }
    }
    if rd.folded(me) {
        if me.is_multiple_of(2) {
            c.coll_xchg(tag, None, Some((bytemuck::cast_slice_mut(buf), me + 1)))?;
        } else {
            c.coll_xchg(tag, Some((bytemuck::cast_slice(buf), me - 1)), None)?;
        }
    }
    Ok(())
}

/// Ring all-reduce: p-1 reduce-scatter steps, then p-1 allgather steps; each rank sends and
/// receives 2(p-1)/p of the buffer. An input of its own is never copied into `buf`: the
/// first step sends this rank's block from it, and each block received is combined with the
/// input's block straight into `buf`; the blocks this rank does not reduce arrive whole.
fn ring_allreduce<T: Pod, O: Op<T>>(
    c: &impl Team,
    tag: i32,
    input: Input<'_, T>,
    buf: &mut [T],
    op: &O,
) -> Result<(), Error> {
    let n = block(buf.len(), c.size(), 0).len();
    with_scratch_slack::<T, _>(n, |tmp| ring_steps(c, tag, input, buf, op, tmp))
}

fn ring_steps<T: Pod, O: Op<T>>(
    c: &impl Team,
    tag: i32,
    input: Input<'_, T>,
    buf: &mut [T],
    op: &O,
    tmp: &mut [T],
) -> Result<(), Error> {
    // Blocks are numbered by ring position: each rank reduces and passes them along the ring.
    let p = c.size();
    let (me, next, prev) = c.ring_neighbours(&c.ring_order());
    let n = buf.len();
    for step in 0..p - 1 {
        let sb = block(n, p, (me + p - step) % p);
        let rb = block(n, p, (me + 2 * p - step - 1) % p);
        // Block `sb` is this rank's own input at step 0 and the block it combined at the
        // step before after that.
        let from = match input {
            Input::From(s) if step == 0 => s,
            _ => &buf[..],
        };
        let out = &from[sb];
        // Block `rb` comes from the same place in the previous rank's buffers: receive it at
        // their offset within a page (as this rank's would be), never near it.
        let t = copy::placed(tmp, rb.len(), from[rb.clone()].as_ptr());
        c.coll_xchg(tag, Some((bytemuck::cast_slice(out), next)), Some((bytemuck::cast_slice_mut(t), prev)))?;
        // The ring serves commutative operations only, so the partial result can be folded
        // into our block in place (no copy back); each block is finished by one rank and
        // then copied to all, so every rank ends with the same bits.
        match input {
            Input::From(s) => op.apply_into(&mut buf[rb.clone()], &s[rb], t),
            Input::InPlace => op.apply(&mut buf[rb], t),
        }
    }
    // Rank `me` now holds the full result of block `me + 1`.
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
    let elem = std::mem::size_of::<T>();
    for step in 0..p - 1 {
        let sb = block(n, p, (me + 1 + p - step) % p);
        let rb = block(n, p, (me + p - step) % p);
        let (out, inn) = two(bytes, sb.start * elem..sb.end * elem, rb.start * elem..rb.end * elem);
        c.coll_xchg(tag, Some((out, next)), Some((inn, prev)))?;
    }
    Ok(())
}

/// Allgather of p blocks of `own.len()` bytes into `buf`, in rank order, chosen as MPICH
/// chooses: recursive doubling in place (log2 p rounds, no copies) on a power-of-two rank
/// count while the whole result is below 512 KiB; Bruck's algorithm (ceil(log2 p) rounds
/// through a scratch buffer) on other counts below 80 KiB; the ring (p-1 rounds, each link
/// busy, in place) above. On two ranks all three are one exchange, done in place.
/// `MPR_ALLGATHER_ALGO=recursive-doubling|bruck|ring` forces one (recursive doubling only
/// where the count is a power of two; elsewhere the choice by size stands).
///
/// `own` is this rank's block as the caller passed it. The first round sends it from there,
/// not from its copy in `buf` (the copy was just written by this core, so a peer's
/// single-copy read of it would first pull every line out of this core's cache), and makes
/// that copy while the peers take the message.
pub(super) fn allgather(c: &impl Team, tag: i32, buf: &mut [u8], own: &[u8]) -> Result<(), Error> {
    if c.size() == 1 {
        buf.copy_from_slice(own);
        return Ok(());
    }
    let pof2 = c.size().is_power_of_two();
    match super::settings().allgather_algo.as_deref() {
        Some("recursive-doubling") if pof2 => allgather_rd(c, tag, buf, own),
        Some("bruck") => allgather_bruck(c, tag, buf, own),
        Some("ring") => allgather_ring(c, tag, buf, own),
        _ if c.size() == 2 => allgather_ring(c, tag, buf, own),
        _ if pof2 && buf.len() < (512 << 10) => allgather_rd(c, tag, buf, own),
        _ if buf.len() < (80 << 10) => allgather_bruck(c, tag, buf, own),
        _ => allgather_ring(c, tag, buf, own),
    }
}

/// Recursive doubling on a power-of-two rank count: in round k each rank swaps the 2^k
/// blocks it holds (one contiguous run of `buf`) with partner `me ^ 2^k`.
fn allgather_rd(c: &impl Team, tag: i32, buf: &mut [u8], own: &[u8]) -> Result<(), Error> {
    let (p, me, blk) = (c.size(), c.rank(), own.len());
    debug_assert!(p.is_power_of_two());
    first_round(c, tag, buf, own, me ^ 1, me ^ 1)?;
    let mut mask = 2;
    while mask < p {
        let peer = me ^ mask;
        let (mine, theirs) = (me & !(mask - 1), peer & !(mask - 1));
        let run = |first: usize| first * blk..(first + mask) * blk;
        let (out, inn) = two(buf, run(mine), run(theirs));
        c.coll_xchg(tag, Some((out, peer)), Some((inn, peer)))?;
        mask <<= 1;
    }
    Ok(())
}

/// The first round of an allgather: sends this rank's block (`own`, from the caller's buffer)
/// to `to`, receives the block of `from` into place, and copies `own` into place meanwhile.
fn first_round(c: &impl Team, tag: i32, buf: &mut [u8], own: &[u8], to: usize, from: usize) -> Result<(), Error> {
    let (me, blk) = (c.rank(), own.len());
    let (mine, inn) = two_mut(buf, me * blk..(me + 1) * blk, from * blk..(from + 1) * blk);
    c.coll_xchg_with(tag, Some((own, to)), Some((inn, from)), Some((own, mine)))?;
    Ok(())
}

/// Bruck: blocks are gathered in rotated order (own block first), doubling each round, then
/// rotated into place.
fn allgather_bruck(c: &impl Team, tag: i32, buf: &mut [u8], own: &[u8]) -> Result<(), Error> {
    let (p, me, blk) = (c.size(), c.rank(), own.len());
    if blk == 0 {
        // Every rank has the same block size, so all of them skip together.
        return Ok(());
    }
    // Every rank's scratch on a page boundary: the blocks go from one to another.
    with_scratch::<u8, _>(p * blk, std::ptr::null(), |tmp| {
        let mut have = 1;
        while have < p {
            let n = have.min(p - have);
            let to = (me + p - have) % p;
            let from = (me + have) % p;
            let (out, inn) = tmp.split_at_mut(have * blk);
            let inn = &mut inn[..n * blk];
            if have == 1 {
                c.coll_xchg_with(tag, Some((own, to)), Some((inn, from)), Some((own, out)))?;
            } else {
                c.coll_xchg(tag, Some((&out[..n * blk], to)), Some((inn, from)))?;
            }
            have += n;
        }
        // tmp block i holds rank (me + i) % p's block.
        for i in 0..p {
            let r = (me + i) % p;
            buf[r * blk..(r + 1) * blk].copy_from_slice(&tmp[i * blk..(i + 1) * blk]);
        }
        Ok(())
    })
}

/// Ring allgather: p-1 rounds, each passing the block received last to the next rank.
fn allgather_ring(c: &impl Team, tag: i32, buf: &mut [u8], own: &[u8]) -> Result<(), Error> {
    let (p, blk) = (c.size(), own.len());
    let order = c.ring_order();
    let (pos, next, prev) = c.ring_neighbours(&order);
    first_round(c, tag, buf, own, next, prev)?;
    for step in 1..p - 1 {
        // The block of the member `step` places back along the ring goes on to the next.
        let sb = order[(pos + p - step) % p];
        let rb = order[(pos + p - step - 1) % p];
        let (out, inn) = two(buf, sb * blk..(sb + 1) * blk, rb * blk..(rb + 1) * blk);
        c.coll_xchg(tag, Some((out, next)), Some((inn, prev)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::block;

    #[test]
    fn blocks_cover_the_buffer() {
        for len in 0..50 {
            for p in 1..9 {
                let mut at = 0;
                for i in 0..p {
                    let b = block(len, p, i);
                    assert_eq!(b.start, at);
                    at = b.end;
                }
                assert_eq!(at, len);
            }
        }
    }
}
