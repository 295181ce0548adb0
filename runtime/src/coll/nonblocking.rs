//! Nonblocking collectives (MPI 4.1, section 6.12): the same algorithms as the blocking
//! ones, laid out as schedules (sched.rs) that the progress engine advances in any wait.
//! Buffers are borrowed for the lifetime of a [`Scope`], like `isend`/`irecv`.

use std::marker::PhantomData;
use std::rc::Rc;

use bytemuck::Pod;

use super::op::Op;
use super::sched::{Plan, Sched, Step};
use crate::buf::{RawBuf, RawBufMut};
use crate::comm::Comm;
use crate::error::Error;
use crate::progress::SchedId;
use crate::request::{Handle, Scope};

/// A nonblocking collective in flight (`MPI_Request` of `MPI_Iallreduce` and friends).
#[must_use = "a collective request must be waited for or tested (the scope waits for it otherwise)"]
pub struct CollRequest<'a> {
    rt: std::sync::Arc<crate::progress::Shared>,
    id: SchedId,
    _marker: PhantomData<&'a ()>,
}

impl std::fmt::Debug for CollRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollRequest").field("id", &self.id).finish()
    }
}

impl<'a> CollRequest<'a> {
    /// Blocks until the collective completes on this rank (`MPI_Wait`).
    pub fn wait(self) -> Result<(), Error> {
        self.rt.borrow_mut().wait_sched(self.id)
    }

    /// Whether the collective has completed on this rank (without collecting it).
    pub fn is_complete(&self) -> bool {
        self.rt.borrow().sched_done(self.id)
    }

    /// Makes progress once; whether the collective has completed (without collecting it).
    pub fn poll(&self) -> Result<bool, Error> {
        self.rt.borrow_mut().progress()?;
        Ok(self.is_complete())
    }

    /// Makes progress once; returns the result if complete, or the request back (`MPI_Test`).
    pub fn test(self) -> Result<Result<(), Error>, CollRequest<'a>> {
        let r = self.rt.borrow_mut().test_sched(self.id);
        match r {
            Some(r) => Ok(r),
            None => Err(self),
        }
    }
}

/// Byte view of a typed slice borrowed for a scope.
pub(super) fn raw<T: Pod>(v: &[T]) -> RawBuf {
    // SAFETY: callers pass slices borrowed for the scope's lifetime 'a; the scope completes
    // the schedule holding this view before 'a ends (see request.rs).
    unsafe { RawBuf::new(bytemuck::cast_slice(v)) }
}

pub(super) fn raw_mut<T: Pod>(v: &mut [T]) -> RawBufMut {
    // SAFETY: as for `raw`.
    unsafe { RawBufMut::new(bytemuck::cast_slice_mut(v)) }
}

/// `len` elements of scratch owned by a schedule; returns the storage and a view of it.
pub(super) fn scratch<T: Pod>(len: usize) -> Result<(Vec<u64>, RawBufMut), Error> {
    if std::mem::align_of::<T>() > 8 {
        return Err(Error::Other("nonblocking reductions support element alignments up to 8 bytes".into()));
    }
    let bytes = len * std::mem::size_of::<T>();
    let mut v = vec![0u64; bytes.div_ceil(8)];
    let view = raw_mut(&mut bytemuck::cast_slice_mut::<u64, u8>(&mut v)[..bytes]);
    Ok((v, view))
}

/// Typed access to a view inside a compute step.
pub(super) fn typed<'x, T: Pod>(v: &mut RawBufMut) -> &'x mut [T] {
    let n = v.len();
    let bytes = v.range_mut(0, n).expect("whole view");
    // SAFETY: the view's memory is valid for the schedule's life (scope or scratch storage),
    // and no other reference to it is used while a compute step runs.
    let bytes: &'x mut [u8] = unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr(), n) };
    bytemuck::cast_slice_mut(bytes)
}

impl Comm {
    fn launch<'a>(
        &self,
        scope: &Scope<'a>,
        rounds: Vec<Vec<Step>>,
        scratch: Vec<Vec<u64>>,
    ) -> Result<CollRequest<'a>, Error> {
        let tag = self.coll_tag()?;
        Ok(self.launch_tagged(scope, tag, rounds, scratch))
    }

    /// Starts the schedule of `rounds` with `tag` (taken by the caller).
    pub(super) fn launch_tagged<'a>(
        &self,
        scope: &Scope<'a>,
        tag: i32,
        rounds: Vec<Vec<Step>>,
        scratch: Vec<Vec<u64>>,
    ) -> CollRequest<'a> {
        let s = Sched::new(self.rank() as u32, tag, rounds, scratch);
        let id = self.rt().borrow_mut().start_sched(s);
        scope.register(self.rt(), Handle::Coll(id));
        CollRequest { rt: self.rt().clone(), id, _marker: PhantomData }
    }

    /// The ranks this communicator's collective steps name, on its collective context: of
    /// this group, or of an inter-communicator's other group.
    pub(super) fn lane(&self) -> Lane<&[usize]> {
        Lane { ctx: self.coll_context(), rank: self.rank(), peers: self.peers() }
    }

    /// A send of `buf` to rank `to` on the collective context (see [`Comm::lane`]).
    pub(super) fn send_step(&self, to: usize, buf: RawBuf) -> Step {
        self.lane().send_step(to, buf)
    }

    /// A receive into `buf` from rank `from`, as [`Comm::send_step`].
    pub(super) fn recv_step(&self, from: usize, buf: RawBufMut) -> Step {
        self.lane().recv_step(from, buf)
    }

    /// Nonblocking barrier (`MPI_Ibarrier`; dissemination).
    pub fn ibarrier<'a>(&self, scope: &Scope<'a>) -> Result<CollRequest<'a>, Error> {
        if let Some(local) = self.local() {
            return Ok(self.ibarrier_inter(scope, local));
        }
        let rounds = self.barrier_rounds();
        self.launch(scope, rounds, Vec::new())
    }

    /// The rounds of a dissemination barrier.
    pub(super) fn barrier_rounds(&self) -> Vec<Vec<Step>> {
        self.lane().barrier_rounds()
    }

    /// The rounds of a binomial-tree broadcast of `b` from `root`.
    pub(super) fn bcast_rounds(&self, b: RawBufMut, root: usize) -> Vec<Vec<Step>> {
        self.lane().bcast_rounds(b, root)
    }

    /// The rounds of a binomial-tree reduction of `src` (elements of `T`) into `out` at
    /// `root`, and the scratch they use.
    pub(super) fn reduce_rounds<T: Pod, O: Op<T> + 'static>(
        &self,
        src: RawBuf,
        out: Option<RawBufMut>,
        op: O,
        root: usize,
    ) -> Result<Plan, Error> {
        self.lane().reduce_rounds::<T, O>(src, out, op, root)
    }

    /// Nonblocking broadcast from `root` (`MPI_Ibcast`; binomial tree).
    pub fn ibcast<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        buf: &'a mut [T],
        root: usize,
    ) -> Result<CollRequest<'a>, Error> {
        super::check_root(self, root)?;
        let rounds = self.bcast_rounds(raw_mut(buf), root);
        self.launch(scope, rounds, Vec::new())
    }

    /// Nonblocking all-reduce (`MPI_Iallreduce`; recursive doubling, operands combined in
    /// rank order, so non-commutative operations work too).
    pub fn iallreduce<'a, T: Pod, O: Op<T> + 'static>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        op: O,
    ) -> Result<CollRequest<'a>, Error> {
        super::check_len("iallreduce", recv.len(), send.len())?;
        if let Some(local) = self.local() {
            return self.iallreduce_inter(scope, local, send, recv, op);
        }
        recv.copy_from_slice(send);
        let (p, me) = (self.size(), self.rank());
        let n = recv.len();
        let acc = raw_mut(recv);
        let (store, tmp) = scratch::<T>(n)?;
        let op = Rc::new(op);
        // tmp (lower ranks) on the left: acc = tmp (op) acc.
        let left = |op: &Rc<O>| -> Step {
            let (op, mut acc, mut tmp) = (op.clone(), acc, tmp);
            Step::Compute(Box::new(move || {
                let t: &mut [T] = typed(&mut tmp);
                op.apply(t, typed(&mut acc));
                typed::<T>(&mut acc).copy_from_slice(t);
            }))
        };
        // acc on the left: acc = acc (op) tmp.
        let right = |op: &Rc<O>| -> Step {
            let (op, mut acc, mut tmp) = (op.clone(), acc, tmp);
            Step::Compute(Box::new(move || op.apply(typed(&mut acc), typed(&mut tmp))))
        };
        let mut rounds: Vec<Vec<Step>> = Vec::new();
        let mut carry: Option<Step> = None;
        let mut round = |carry: &mut Option<Step>, mut steps: Vec<Step>| {
            if let Some(c) = carry.take() {
                steps.insert(0, c);
            }
            rounds.push(steps);
        };
        if p > 1 {
            let rd = super::algo::RecDoubling::new(p);
            if rd.folded(me) {
                if me % 2 == 0 {
                    round(&mut carry, vec![self.send_step(me + 1, acc.as_read())]);
                } else {
                    round(&mut carry, vec![self.recv_step(me - 1, tmp)]);
                    carry = Some(left(&op));
                }
            }
            if let Some(nr) = rd.newrank(me) {
                for dst in rd.partners(nr) {
                    round(&mut carry, vec![self.send_step(dst, acc.as_read()), self.recv_step(dst, tmp)]);
                    carry = Some(if dst < me { left(&op) } else { right(&op) });
                }
            }
            if rd.folded(me) {
                if me % 2 == 0 {
                    round(&mut carry, vec![self.recv_step(me + 1, acc)]);
                } else {
                    round(&mut carry, vec![self.send_step(me - 1, acc.as_read())]);
                }
            }
            if carry.is_some() {
                round(&mut carry, Vec::new());
            }
        }
        // The steps hold the operation's other counts; this one goes before the schedule
        // starts (the progress thread may drop theirs).
        drop(op);
        self.launch(scope, rounds, vec![store])
    }

    /// Nonblocking allgather (`MPI_Iallgather`; ring).
    pub fn iallgather<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        if let Some(local) = self.local() {
            return self.iallgather_inter(scope, local, send, recv);
        }
        let (p, me) = (self.size(), self.rank());
        // Blocks of this rank's receive count. If its send count differs (an erroneous
        // program), it sends its own block as it is, which the next rank cannot take, so
        // the ring reports it on every rank (`sched::marker`), and so does this rank.
        let n = recv.len() / p;
        super::check_len("iallgather", recv.len(), n * p)?;
        let own = &mut recv[me * n..(me + 1) * n];
        let end = super::own_block(send, own, me);
        let blk = n * std::mem::size_of::<T>();
        let all = raw_mut(recv);
        let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
        let rounds = (0..p.saturating_sub(1))
            .map(|step| {
                let sb = (me + p - step) % p;
                let rb = (me + p - step - 1) % p;
                let out = if step == 0 && end.is_some() { raw(send) } else { all.as_read().slice(sb * blk, blk) };
                vec![self.send_step(next, out), self.recv_step(prev, all.window(rb * blk, blk))]
            })
            .collect();
        self.launch(scope, ending(rounds, end), Vec::new())
    }

    /// Nonblocking all-to-all (`MPI_Ialltoall`; all exchanges at once).
    pub fn ialltoall<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        if self.local().is_some() {
            return self.ialltoall_inter(scope, send, recv);
        }
        let (p, me) = (self.size(), self.rank());
        for (what, len) in [("send", send.len()), ("receive", recv.len())] {
            if !len.is_multiple_of(p) {
                return Err(Error::Other(format!("ialltoall: {len} {what} elements do not split into {p} blocks")));
            }
        }
        // Blocks sent as they are and received as this rank's receive count says: if the two
        // counts differ (an erroneous program), every rank reports it.
        let (n, m) = (send.len() / p, recv.len() / p);
        let own = &mut recv[me * m..(me + 1) * m];
        let end = super::own_block(&send[me * n..(me + 1) * n], own, me);
        let (sblk, rblk) = (n * std::mem::size_of::<T>(), m * std::mem::size_of::<T>());
        let (s, r) = (raw(send), raw_mut(recv));
        let mut steps = Vec::new();
        for k in 1..p {
            let to = (me + k) % p;
            let from = (me + p - k) % p;
            steps.push(self.recv_step(from, r.window(from * rblk, rblk)));
            steps.push(self.send_step(to, s.slice(to * sblk, sblk)));
        }
        self.launch(scope, ending(vec![steps], end), Vec::new())
    }

    /// Nonblocking reduction to `root` (`MPI_Ireduce`; binomial tree, rank order for
    /// non-commutative operations as in [`Comm::reduce`]). `recv` is used at the root only.
    pub fn ireduce<'a, T: Pod, O: Op<T> + 'static>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: Option<&'a mut [T]>,
        op: O,
        root: usize,
    ) -> Result<CollRequest<'a>, Error> {
        super::check_root(self, root)?;
        let n = send.len();
        let out = match (self.rank() == root, recv) {
            (true, Some(r)) => {
                super::check_len("ireduce", r.len(), n)?;
                Some(raw_mut(r))
            }
            (true, None) => return Err(Error::Other("ireduce: the root must pass a receive buffer".into())),
            (false, _) => None,
        };
        let (rounds, scratch) = self.reduce_rounds::<T, O>(raw(send), out, op, root)?;
        self.launch(scope, rounds, scratch)
    }

    /// Nonblocking gather to `root` (`MPI_Igather`); `recv` is used at the root only.
    pub fn igather<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: Option<&'a mut [T]>,
        root: usize,
    ) -> Result<CollRequest<'a>, Error> {
        super::check_root(self, root)?;
        let (p, me) = (self.size(), self.rank());
        if me != root {
            return self.launch(scope, vec![vec![self.send_step(root, raw(send))]], Vec::new());
        }
        let recv = recv.ok_or_else(|| Error::Other("igather: the root must pass a receive buffer".into()))?;
        // As `gather`: the root's blocks are its `recv` divided by the ranks.
        let n = recv.len() / p;
        let own = super::own_block(send, &mut recv[me * n..(me + 1) * n], me);
        let end = own.or_else(|| super::check_len("igather", recv.len(), n * p).err());
        let blk = n * std::mem::size_of::<T>();
        let all = raw_mut(recv);
        let steps = (0..p).filter(|&r| r != me).map(|r| self.recv_step(r, all.window(r * blk, blk))).collect();
        self.launch(scope, ending(vec![steps], end), Vec::new())
    }

    /// Nonblocking scatter from `root` (`MPI_Iscatter`); `send` is used at the root only.
    pub fn iscatter<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        root: usize,
    ) -> Result<CollRequest<'a>, Error> {
        super::check_root(self, root)?;
        let (p, me) = (self.size(), self.rank());
        if me != root {
            return self.launch(scope, vec![vec![self.recv_step(root, raw_mut(recv))]], Vec::new());
        }
        let send = send.ok_or_else(|| Error::Other("iscatter: the root must pass a send buffer".into()))?;
        // As `scatter`: the root's blocks are its `send` divided by the ranks.
        let n = send.len() / p;
        let own = super::own_block(&send[me * n..(me + 1) * n], recv, me);
        let end = own.or_else(|| super::check_len("iscatter", send.len(), n * p).err());
        let blk = n * std::mem::size_of::<T>();
        let all = raw(send);
        let steps = (0..p).filter(|&r| r != me).map(|r| self.send_step(r, all.slice(r * blk, blk))).collect();
        self.launch(scope, ending(vec![steps], end), Vec::new())
    }
}

/// `rounds`, then, with error `end`, a last round that ends the schedule with it once their
/// messages went (a rank's own blocks that did not match, [`super::own_block`]), so that no
/// other rank waits for them.
fn ending(mut rounds: Vec<Vec<Step>>, end: Option<Error>) -> Vec<Vec<Step>> {
    if let Some(e) = end {
        rounds.push(vec![Step::Then(Box::new(move |_| Err(e)))]);
    }
    rounds
}

/// Who a schedule's messages go to: the ranks `peers` (world ranks, by communicator rank) on
/// context `ctx`, as rank `rank`. Plain data: a step that makes more steps as it runs
/// ([`Step::Then`], perhaps on the progress thread) keeps a lane, never a communicator,
/// whose counts the application's thread changes without the runtime's lock.
#[derive(Debug, Clone)]
pub(crate) struct Lane<P> {
    pub(crate) ctx: u32,
    pub(crate) rank: usize,
    pub(crate) peers: P,
}

impl<P: std::ops::Deref<Target = [usize]>> Lane<P> {
    /// A send of `buf` to rank `to`.
    pub(crate) fn send_step(&self, to: usize, buf: RawBuf) -> Step {
        Step::Send { ctx: self.ctx, peer: self.peers[to], buf }
    }

    /// A receive into `buf` from rank `from`.
    pub(crate) fn recv_step(&self, from: usize, buf: RawBufMut) -> Step {
        Step::Recv { ctx: self.ctx, peer: self.peers[from], src: from as u32, buf }
    }

    /// The rounds of a dissemination barrier.
    pub(crate) fn barrier_rounds(&self) -> Vec<Vec<Step>> {
        let (p, me) = (self.peers.len(), self.rank);
        let mut rounds = Vec::new();
        let mut k = 1;
        while k < p {
            rounds.push(vec![
                self.send_step((me + k) % p, RawBuf::EMPTY),
                self.recv_step((me + p - k) % p, RawBufMut::EMPTY),
            ]);
            k *= 2;
        }
        rounds
    }

    /// The rounds of a binomial-tree broadcast of `b` from `root`.
    pub(crate) fn bcast_rounds(&self, b: RawBufMut, root: usize) -> Vec<Vec<Step>> {
        let (p, me) = (self.peers.len(), self.rank);
        let vr = (me + p - root) % p;
        let real = |v: usize| (v + root) % p;
        let mut rounds = Vec::new();
        let mut mask = 1;
        while mask < p {
            if vr & mask != 0 {
                rounds.push(vec![self.recv_step(real(vr - mask), b)]);
                break;
            }
            mask <<= 1;
        }
        let mut sends = Vec::new();
        mask >>= 1;
        while mask > 0 {
            if vr + mask < p {
                sends.push(self.send_step(real(vr + mask), b.as_read()));
            }
            mask >>= 1;
        }
        rounds.push(sends);
        rounds
    }

    /// The rounds of a binomial-tree reduction of `src` (elements of `T`) into `out` at
    /// `root`, and the scratch they use.
    pub(crate) fn reduce_rounds<T: Pod, O: Op<T> + 'static>(
        &self,
        src: RawBuf,
        out: Option<RawBufMut>,
        op: O,
        root: usize,
    ) -> Result<Plan, Error> {
        let (p, me) = (self.peers.len(), self.rank);
        let n = src.len() / size_of::<T>();
        let (acc_store, acc) = scratch::<T>(n)?;
        let (tmp_store, tmp) = scratch::<T>(n)?;
        let op = Rc::new(op);
        let tree_root = if op.commutative() { root } else { 0 };
        let vr = (me + p - tree_root) % p;
        let real = |v: usize| (v + tree_root) % p;
        let mut rounds: Vec<Vec<Step>> = Vec::new();
        let (mut a0, s0) = (acc, src);
        let mut carry: Option<Step> = Some(Step::Compute(Box::new(move || {
            typed::<T>(&mut a0).copy_from_slice(bytemuck::cast_slice(s0.bytes()));
        })));
        let mut push = |carry: &mut Option<Step>, mut steps: Vec<Step>| {
            if let Some(c) = carry.take() {
                steps.insert(0, c);
            }
            rounds.push(steps);
        };
        let mut mask = 1;
        while mask < p {
            if vr & mask == 0 {
                if vr | mask < p {
                    push(&mut carry, vec![self.recv_step(real(vr | mask), tmp)]);
                    let (op, mut a, mut t) = (op.clone(), acc, tmp);
                    carry = Some(Step::Compute(Box::new(move || op.apply(typed(&mut a), typed(&mut t)))));
                }
            } else {
                push(&mut carry, vec![self.send_step(real(vr & !mask), acc.as_read())]);
                break;
            }
            mask <<= 1;
        }
        if me == tree_root && tree_root != root {
            push(&mut carry, vec![self.send_step(root, acc.as_read())]);
        }
        if let Some(mut o) = out {
            if tree_root != root {
                push(&mut carry, vec![self.recv_step(tree_root, o)]);
            } else {
                let mut a = acc;
                carry = Some(match carry.take() {
                    Some(Step::Compute(mut f)) => Step::Compute(Box::new(move || {
                        f();
                        typed::<T>(&mut o).copy_from_slice(typed::<T>(&mut a));
                    })),
                    _ => Step::Compute(Box::new(move || typed::<T>(&mut o).copy_from_slice(typed::<T>(&mut a)))),
                });
            }
        }
        if carry.is_some() {
            push(&mut carry, Vec::new());
        }
        Ok((rounds, vec![acc_store, tmp_store]))
    }
}

/// Range `r` of a view, in elements of `T`.
fn elems<T>(r: &std::ops::Range<usize>) -> (usize, usize) {
    let s = std::mem::size_of::<T>();
    (r.start * s, (r.end - r.start) * s)
}

/// The blocks of a vector collective's buffer: (counts, displacements), in elements, checked
/// against its length.
pub(super) fn blocks(
    what: &str,
    counts: &[usize],
    displs: &[usize],
    p: usize,
    len: usize,
) -> Result<Vec<std::ops::Range<usize>>, Error> {
    if counts.len() != p || displs.len() != p {
        return Err(Error::Other(format!(
            "{what}: {} counts and {} displacements for {p} ranks",
            counts.len(),
            displs.len()
        )));
    }
    (0..p)
        .map(|r| {
            let b = displs[r]..displs[r] + counts[r];
            if b.end > len {
                return Err(Error::Other(format!("{what}: block {r} lies outside the buffer of {len} elements")));
            }
            Ok(b)
        })
        .collect()
}

/// Counts laid end to end: their displacements.
pub(super) fn packed(counts: &[usize]) -> Vec<usize> {
    counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect()
}

impl Comm {
    /// One round of transfers: block `s` of `send` to each rank of `sends`, block `r` of
    /// `recv` from each of `recvs`; `own` (send range, receive range) copied at once.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn iexchange<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        sends: Vec<(usize, std::ops::Range<usize>)>,
        recv: &'a mut [T],
        recvs: Vec<(usize, std::ops::Range<usize>)>,
        own: Option<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    ) -> Result<CollRequest<'a>, Error> {
        let own = own.and_then(|(s, r)| super::own_block(&send[s], &mut recv[r], self.rank()));
        let tag = self.coll_tag()?;
        Ok(self.exchange_round(scope, tag, send, sends, recv, recvs, own))
    }

    /// One round of transfers with `tag`: range `s` of `send` to each rank of `sends`, range
    /// `r` of `recv` from each of `recvs` (in elements; ranks of an inter-communicator's
    /// other group on one); then the end of the schedule with error `end`, if any.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exchange_round<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        tag: i32,
        send: &'a [T],
        sends: Vec<(usize, std::ops::Range<usize>)>,
        recv: &'a mut [T],
        recvs: Vec<(usize, std::ops::Range<usize>)>,
        end: Option<Error>,
    ) -> CollRequest<'a> {
        let (s, r) = (raw(send), raw_mut(recv));
        let mut steps: Vec<Step> = recvs
            .into_iter()
            .map(|(from, b)| {
                let (off, len) = elems::<T>(&b);
                self.recv_step(from, r.window(off, len))
            })
            .collect();
        steps.extend(sends.into_iter().map(|(to, b)| {
            let (off, len) = elems::<T>(&b);
            self.send_step(to, s.slice(off, len))
        }));
        self.launch_tagged(scope, tag, ending(vec![steps], end), Vec::new())
    }

    /// Nonblocking gather of blocks of varying size (`MPI_Igatherv`; see [`Comm::gatherv`]).
    pub fn igatherv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: Option<(&'a mut [T], &[usize], &[usize])>,
        root: usize,
    ) -> Result<CollRequest<'a>, Error> {
        super::check_root(self, root)?;
        let (p, me) = (self.size(), self.rank());
        if me != root {
            return self.iexchange(scope, send, vec![(root, 0..send.len())], &mut [], Vec::new(), None);
        }
        let (recv, counts, displs) =
            recv.ok_or_else(|| Error::Other("igatherv: the root must pass a receive buffer".into()))?;
        let b = blocks("igatherv", counts, displs, p, recv.len())?;
        let recvs = (0..p).filter(|&r| r != me).map(|r| (r, b[r].clone())).collect();
        self.iexchange(scope, send, Vec::new(), recv, recvs, Some((0..send.len(), b[me].clone())))
    }

    /// Nonblocking scatter of blocks of varying size (`MPI_Iscatterv`; see [`Comm::scatterv`]).
    pub fn iscatterv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: Option<(&'a [T], &[usize], &[usize])>,
        recv: &'a mut [T],
        root: usize,
    ) -> Result<CollRequest<'a>, Error> {
        super::check_root(self, root)?;
        let (p, me) = (self.size(), self.rank());
        if me != root {
            let n = recv.len();
            return self.iexchange(scope, &[], Vec::new(), recv, vec![(root, 0..n)], None);
        }
        let (send, counts, displs) =
            send.ok_or_else(|| Error::Other("iscatterv: the root must pass a send buffer".into()))?;
        let b = blocks("iscatterv", counts, displs, p, send.len())?;
        let sends = (0..p).filter(|&r| r != me).map(|r| (r, b[r].clone())).collect();
        let n = recv.len();
        self.iexchange(scope, send, sends, recv, Vec::new(), Some((b[me].clone(), 0..n)))
    }

    /// Nonblocking allgather of blocks of varying size (`MPI_Iallgatherv`; all transfers at
    /// once).
    pub fn iallgatherv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<CollRequest<'a>, Error> {
        if self.local().is_some() {
            return self.iallgatherv_inter(scope, send, recv, counts, displs);
        }
        let (p, me) = (self.size(), self.rank());
        let b = blocks("iallgatherv", counts, displs, p, recv.len())?;
        let peers = || (0..p).filter(move |&r| r != me);
        let sends = peers().map(|r| (r, 0..send.len())).collect();
        let recvs = peers().map(|r| (r, b[r].clone())).collect();
        self.iexchange(scope, send, sends, recv, recvs, Some((0..send.len(), b[me].clone())))
    }

    /// Nonblocking all-to-all of blocks of varying size (`MPI_Ialltoallv`; all transfers at
    /// once).
    #[allow(clippy::too_many_arguments)]
    pub fn ialltoallv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        scounts: &[usize],
        sdispls: &[usize],
        recv: &'a mut [T],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<CollRequest<'a>, Error> {
        if self.local().is_some() {
            return self.ialltoallv_inter(scope, send, scounts, sdispls, recv, rcounts, rdispls);
        }
        let (p, me) = (self.size(), self.rank());
        let sb = blocks("ialltoallv (send)", scounts, sdispls, p, send.len())?;
        let rb = blocks("ialltoallv (receive)", rcounts, rdispls, p, recv.len())?;
        let sends = (0..p).filter(|&r| r != me).map(|r| (r, sb[r].clone())).collect();
        let recvs = (0..p).filter(|&r| r != me).map(|r| (r, rb[r].clone())).collect();
        self.iexchange(scope, send, sends, recv, recvs, Some((sb[me].clone(), rb[me].clone())))
    }

    /// Nonblocking reduce-scatter (`MPI_Ireduce_scatter`): rank `r` gets block `r` (of
    /// `counts[r]` elements, the blocks laid end to end in `send`) of the reduction. Every
    /// rank sends each block to its rank and combines what it gets in rank order, so any
    /// operation gets MPI's order of operands.
    pub fn ireduce_scatter<'a, T: Pod, O: Op<T> + 'static>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        op: O,
    ) -> Result<CollRequest<'a>, Error> {
        if let Some(local) = self.local() {
            return self.ireduce_scatter_inter(scope, local, send, recv, counts, op);
        }
        let (p, me) = (self.size(), self.rank());
        let displs = packed(counts);
        let sb = blocks("ireduce_scatter", counts, &displs, p, send.len())?;
        let n = counts[me];
        super::check_len("ireduce_scatter", recv.len(), n)?;
        // Every rank's block `me`, in rank order.
        let (store, all) = scratch::<T>(n * p)?;
        let own = typed::<T>(&mut all.window(me * n * size_of::<T>(), n * size_of::<T>()));
        own.copy_from_slice(&send[sb[me].clone()]);
        let s = raw(send);
        let mut steps: Vec<Step> = Vec::new();
        for r in (0..p).filter(|&r| r != me) {
            let (off, len) = elems::<T>(&sb[r]);
            steps.push(self.send_step(r, s.slice(off, len)));
            steps.push(self.recv_step(r, all.window(r * n * size_of::<T>(), n * size_of::<T>())));
        }
        let (mut a, mut out) = (all, raw_mut(recv));
        let fold = Step::Compute(Box::new(move || {
            let all = typed::<T>(&mut a);
            let out = typed::<T>(&mut out);
            out.copy_from_slice(&all[..n]);
            for r in 1..p {
                op.apply(out, &all[r * n..(r + 1) * n]);
            }
        }));
        self.launch(scope, vec![steps, vec![fold]], vec![store])
    }

    /// Nonblocking inclusive (`MPI_Iscan`) or, not `inclusive`, exclusive (`MPI_Iexscan`:
    /// rank 0's `recv` is left as it is) prefix reduction: a chain in rank order, each rank
    /// combining its predecessor's prefix with its own input and passing it on.
    pub fn iscan_with<'a, T: Pod, O: Op<T> + 'static>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        op: O,
        inclusive: bool,
    ) -> Result<CollRequest<'a>, Error> {
        let (p, me) = (self.size(), self.rank());
        let n = send.len();
        super::check_len(if inclusive { "iscan" } else { "iexscan" }, recv.len(), n)?;
        // The prefix through this rank, which goes on to the next.
        let (store, mut through) = scratch::<T>(n)?;
        let (s, mut r) = (raw(send), raw_mut(recv));
        let mut rounds = Vec::new();
        if me > 0 {
            // The prefix of the ranks before (exclusive: the result itself).
            let before = if inclusive { through } else { r };
            rounds.push(vec![self.recv_step(me - 1, before)]);
        }
        let first = me == 0;
        rounds.push(vec![Step::Compute(Box::new(move || {
            let mine: &[T] = bytemuck::cast_slice(s.bytes());
            let t = typed::<T>(&mut through);
            if first {
                t.copy_from_slice(mine);
            } else {
                if !inclusive {
                    t.copy_from_slice(typed::<T>(&mut r));
                }
                op.apply(t, mine);
            }
            if inclusive {
                typed::<T>(&mut r).copy_from_slice(t);
            }
        }))]);
        if me + 1 < p {
            rounds.push(vec![self.send_step(me + 1, through.as_read())]);
        }
        self.launch(scope, rounds, vec![store])
    }
}
