//! Nonblocking collectives on inter-communicators (MPI 4.1, sections 6.2.2 and 6.12): the
//! blocking ones' algorithms (inter.rs) laid out as schedules. A schedule's messages
//! between the groups go on the inter-communicator's collective context, as the blocking
//! ones' do; its steps within a group run the local group's schedules (a binomial tree, a
//! dissemination barrier) on the local group's point-to-point context, which nothing else
//! uses: its blocking collectives, on the next context, count their tags apart from the
//! inter-communicator's, and the two must never meet. Every rank of both groups takes one
//! tag of the inter-communicator's sequence per collective, as the blocking ones do.

use bytemuck::Pod;

use super::inter::InterRoot;
use super::nonblocking::{blocks, raw, raw_mut, scratch, typed, CollRequest, Lane};
use super::op::Op;
use super::sched::{Plan, Step};
use crate::buf::{RawBuf, RawBufMut};
use crate::comm::Comm;
use crate::error::Error;
use crate::request::Scope;

impl Comm {
    /// The local group `local`'s ranks on its point-to-point context, where the steps
    /// within a group run.
    pub(super) fn in_group(local: &Comm) -> Lane<&[usize]> {
        Lane { ctx: local.context(), rank: local.rank(), peers: local.peers() }
    }

    /// `MPI_Ibarrier` on an inter-communicator: each group meets at its leader, the leaders
    /// swap, and each hands the news on.
    pub(super) fn ibarrier_inter<'a>(&self, scope: &Scope<'a>, local: &Comm) -> CollRequest<'a> {
        let tag = self.next_tag();
        let mut rounds = Comm::in_group(local).barrier_rounds();
        if self.rank() == 0 {
            rounds.push(vec![self.send_step(0, RawBuf::EMPTY), self.recv_step(0, RawBufMut::EMPTY)]);
        }
        rounds.extend(Comm::in_group(local).bcast_rounds(RawBufMut::EMPTY, 0));
        self.launch_tagged(scope, tag, rounds, Vec::new())
    }

    /// Nonblocking [`Comm::inter_bcast`] (`MPI_Ibcast` on an inter-communicator).
    pub fn inter_ibcast<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        buf: &'a mut [T],
        root: InterRoot,
    ) -> Result<CollRequest<'a>, Error> {
        let local = self.inter("MPI_Ibcast")?;
        let tag = self.next_tag();
        let b = raw_mut(buf);
        let rounds = match self.remote_root(root)? {
            InterRoot::Here => vec![vec![self.send_step(0, b.as_read())]],
            InterRoot::Beside => Vec::new(),
            InterRoot::Remote(r) => self.got_from_remote(local, r, b),
        };
        Ok(self.launch_tagged(scope, tag, rounds, Vec::new()))
    }

    /// The rounds of a group that gets `b` from rank `r` of the other group: its leader
    /// receives it, and broadcasts it to the group.
    fn got_from_remote(&self, local: &Comm, r: usize, b: RawBufMut) -> Vec<Vec<Step>> {
        let mut rounds = Vec::new();
        if self.rank() == 0 {
            rounds.push(vec![self.recv_step(r, b)]);
        }
        rounds.extend(Comm::in_group(local).bcast_rounds(b, 0));
        rounds
    }

    /// The rounds that reduce `send` of every rank of the group into `out`, a scratch at
    /// the leader (returned with the plan's scratch).
    fn to_leader<T: Pod, O: Op<T> + 'static>(local: &Comm, send: RawBuf, op: O) -> Result<(Plan, RawBufMut), Error> {
        let (out_store, out) = scratch::<T>(send.len() / size_of::<T>())?;
        let (rounds, mut store) =
            Comm::in_group(local).reduce_rounds::<T, O>(send, (local.rank() == 0).then_some(out), op, 0)?;
        store.push(out_store);
        Ok(((rounds, store), out))
    }

    /// Nonblocking [`Comm::inter_reduce`] (`MPI_Ireduce` on an inter-communicator): the other
    /// group reduces its inputs at its leader, which sends the result to the root.
    pub fn inter_ireduce<'a, T: Pod, O: Op<T> + 'static>(
        &self,
        scope: &Scope<'a>,
        send: Option<&'a [T]>,
        recv: Option<&'a mut [T]>,
        op: O,
        root: InterRoot,
    ) -> Result<CollRequest<'a>, Error> {
        let local = self.inter("MPI_Ireduce")?;
        let tag = self.next_tag();
        let (rounds, store) = match self.remote_root(root)? {
            InterRoot::Here => {
                let recv = recv.ok_or_else(|| Error::Other("ireduce: the root must pass a receive buffer".into()))?;
                (vec![vec![self.recv_step(0, raw_mut(recv))]], Vec::new())
            }
            InterRoot::Beside => (Vec::new(), Vec::new()),
            InterRoot::Remote(r) => {
                let send =
                    send.ok_or_else(|| Error::Other("ireduce: a rank of the other group must pass its input".into()))?;
                let ((mut rounds, store), out) = Comm::to_leader::<T, O>(local, raw(send), op)?;
                if self.rank() == 0 {
                    rounds.push(vec![self.send_step(r, out.as_read())]);
                }
                (rounds, store)
            }
        };
        Ok(self.launch_tagged(scope, tag, rounds, store))
    }

    /// The plan of `MPI_Iallreduce` on an inter-communicator: each group reduces at its
    /// leader, the leaders swap, and each broadcasts the other group's reduction into `recv`.
    fn allreduce_inter_plan<T: Pod, O: Op<T> + 'static>(
        &self,
        local: &Comm,
        send: RawBuf,
        recv: RawBufMut,
        op: O,
    ) -> Result<Plan, Error> {
        let ((mut rounds, store), out) = Comm::to_leader::<T, O>(local, send, op)?;
        if self.rank() == 0 {
            rounds.push(vec![self.send_step(0, out.as_read()), self.recv_step(0, recv)]);
        }
        rounds.extend(Comm::in_group(local).bcast_rounds(recv, 0));
        Ok((rounds, store))
    }

    /// `MPI_Iallreduce` on an inter-communicator: each rank gets the reduction of the other
    /// group's inputs.
    pub(super) fn iallreduce_inter<'a, T: Pod, O: Op<T> + 'static>(
        &self,
        scope: &Scope<'a>,
        local: &Comm,
        send: &'a [T],
        recv: &'a mut [T],
        op: O,
    ) -> Result<CollRequest<'a>, Error> {
        let tag = self.next_tag();
        let (rounds, store) = self.allreduce_inter_plan::<T, O>(local, raw(send), raw_mut(recv), op)?;
        Ok(self.launch_tagged(scope, tag, rounds, store))
    }

    /// `MPI_Ireduce_scatter` on an inter-communicator: the other group's reduction, of the
    /// `counts` (of this group's ranks) laid end to end, shared out by this group's counts.
    pub(super) fn ireduce_scatter_inter<'a, T: Pod, O: Op<T> + 'static>(
        &self,
        scope: &Scope<'a>,
        local: &Comm,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        op: O,
    ) -> Result<CollRequest<'a>, Error> {
        let tag = self.next_tag();
        let (p, me) = (self.size(), self.rank());
        if counts.len() != p {
            return Err(Error::Other(format!("ireduce_scatter: {} counts for {p} ranks", counts.len())));
        }
        let total: usize = counts.iter().sum();
        super::check_len("ireduce_scatter", send.len(), total)?;
        super::check_len("ireduce_scatter", recv.len(), counts[me])?;
        let (all_store, mut all) = scratch::<T>(total)?;
        let (mut rounds, mut store) = self.allreduce_inter_plan::<T, O>(local, raw(send), all, op)?;
        store.push(all_store);
        let at = counts[..me].iter().sum::<usize>();
        let mut out = raw_mut(recv);
        rounds.push(vec![Step::Compute(Box::new(move || {
            let all = typed::<T>(&mut all);
            let out = typed::<T>(&mut out);
            out.copy_from_slice(&all[at..at + out.len()]);
        }))]);
        Ok(self.launch_tagged(scope, tag, rounds, store))
    }

    /// Nonblocking [`Comm::inter_gather`] (`MPI_Igather` on an inter-communicator): each rank
    /// of the other group sends its block to the root.
    pub fn inter_igather<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: Option<&'a [T]>,
        recv: Option<&'a mut [T]>,
        root: InterRoot,
    ) -> Result<CollRequest<'a>, Error> {
        match self.even_blocks("igather", recv.as_deref().filter(|_| root == InterRoot::Here).map(<[T]>::len)) {
            Ok((counts, displs)) => self.inter_igatherv(scope, send, recv.map(|r| (r, &counts[..], &displs[..])), root),
            Err(e) => self.inter_rooted(scope, "MPI_Igather", root, || Err(e), |_| unreachable!("at the root")),
        }
    }

    /// Nonblocking [`Comm::inter_gatherv`] (`MPI_Igatherv` on an inter-communicator).
    pub fn inter_igatherv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: Option<&'a [T]>,
        recv: Option<(&'a mut [T], &[usize], &[usize])>,
        root: InterRoot,
    ) -> Result<CollRequest<'a>, Error> {
        let here = || {
            let (recv, counts, displs) =
                recv.ok_or_else(|| Error::Other("igatherv: the root must pass a receive buffer".into()))?;
            let b = blocks("igatherv", counts, displs, self.peers().len(), recv.len())?;
            let all = raw_mut(recv);
            let at = |r: &std::ops::Range<usize>| all.window(r.start * size_of::<T>(), r.len() * size_of::<T>());
            Ok(b.iter().enumerate().map(|(j, r)| self.recv_step(j, at(r))).collect())
        };
        let there = |r| {
            let send =
                send.ok_or_else(|| Error::Other("igatherv: a rank of the other group must pass its input".into()))?;
            Ok(self.send_step(r, raw(send)))
        };
        self.inter_rooted(scope, "MPI_Igatherv", root, here, there)
    }

    /// Nonblocking [`Comm::inter_scatter`] (`MPI_Iscatter` on an inter-communicator): the
    /// root sends each rank of the other group its block.
    pub fn inter_iscatter<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: Option<&'a [T]>,
        recv: Option<&'a mut [T]>,
        root: InterRoot,
    ) -> Result<CollRequest<'a>, Error> {
        match self.even_blocks("iscatter", send.filter(|_| root == InterRoot::Here).map(<[T]>::len)) {
            Ok((counts, displs)) => {
                self.inter_iscatterv(scope, send.map(|s| (s, &counts[..], &displs[..])), recv, root)
            }
            Err(e) => self.inter_rooted(scope, "MPI_Iscatter", root, || Err(e), |_| unreachable!("at the root")),
        }
    }

    /// Nonblocking [`Comm::inter_scatterv`] (`MPI_Iscatterv` on an inter-communicator).
    pub fn inter_iscatterv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: Option<(&'a [T], &[usize], &[usize])>,
        recv: Option<&'a mut [T]>,
        root: InterRoot,
    ) -> Result<CollRequest<'a>, Error> {
        let here = || {
            let (send, counts, displs) =
                send.ok_or_else(|| Error::Other("iscatterv: the root must pass a send buffer".into()))?;
            let b = blocks("iscatterv", counts, displs, self.peers().len(), send.len())?;
            let all = raw(send);
            let at = |r: &std::ops::Range<usize>| all.slice(r.start * size_of::<T>(), r.len() * size_of::<T>());
            Ok(b.iter().enumerate().map(|(j, r)| self.send_step(j, at(r))).collect())
        };
        let there = |r| {
            let recv =
                recv.ok_or_else(|| Error::Other("iscatterv: a rank of the other group must pass a buffer".into()))?;
            Ok(self.recv_step(r, raw_mut(recv)))
        };
        self.inter_rooted(scope, "MPI_Iscatterv", root, here, there)
    }

    /// The counts and displacements of a root's buffer of `len` elements in even blocks, one
    /// per rank of the other group (none where no length is given: not the root); an error
    /// for `what` where it does not split evenly.
    fn even_blocks(&self, what: &str, len: Option<usize>) -> Result<(Vec<usize>, Vec<usize>), Error> {
        let q = self.peers().len();
        match len {
            Some(len) if !len.is_multiple_of(q) => {
                Err(Error::Other(format!("{what}: the root's {len} elements do not split into {q} blocks")))
            }
            Some(len) => Ok((vec![len / q; q], (0..q).map(|j| j * (len / q)).collect())),
            None => Ok((Vec::new(), Vec::new())),
        }
    }

    /// A rooted collective of one round on an inter-communicator `what`: at the root, the
    /// steps `here` gives (one with each rank of the other group); beside the root, nothing;
    /// in the other group, the step `there` gives with root `r`. Every rank takes its tag.
    fn inter_rooted<'a>(
        &self,
        scope: &Scope<'a>,
        what: &str,
        root: InterRoot,
        here: impl FnOnce() -> Result<Vec<Step>, Error>,
        there: impl FnOnce(usize) -> Result<Step, Error>,
    ) -> Result<CollRequest<'a>, Error> {
        self.inter(what)?;
        let tag = self.next_tag();
        let rounds = match self.remote_root(root)? {
            InterRoot::Here => vec![here()?],
            InterRoot::Beside => Vec::new(),
            InterRoot::Remote(r) => vec![vec![there(r)?]],
        };
        Ok(self.launch_tagged(scope, tag, rounds, Vec::new()))
    }

    /// `MPI_Iallgather` on an inter-communicator: each group gathers its blocks at its
    /// leader, the leaders swap, and each broadcasts the other group's blocks into `recv`.
    pub(super) fn iallgather_inter<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        local: &Comm,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        let tag = self.next_tag();
        let (p, me, blk) = (local.size(), local.rank(), size_of_val(send));
        let lane = Comm::in_group(local);
        let (store, mut all) = scratch::<u8>(blk * p)?;
        let (s, r) = (raw(send), raw_mut(recv));
        let mut rounds = Vec::new();
        if me == 0 {
            let mut gather: Vec<Step> = (1..p).map(|j| lane.recv_step(j, all.window(j * blk, blk))).collect();
            gather.insert(0, Step::Compute(Box::new(move || typed::<u8>(&mut all)[..blk].copy_from_slice(s.bytes()))));
            rounds.push(gather);
        } else {
            rounds.push(vec![lane.send_step(0, s)]);
        }
        if me == 0 {
            rounds.push(vec![self.send_step(0, all.as_read()), self.recv_step(0, r)]);
        }
        rounds.extend(Comm::in_group(local).bcast_rounds(r, 0));
        Ok(self.launch_tagged(scope, tag, rounds, vec![store]))
    }

    /// `MPI_Iallgatherv` on an inter-communicator: each rank sends its block to every rank of
    /// the other group, and gets theirs at `displs`.
    pub(super) fn iallgatherv_inter<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<CollRequest<'a>, Error> {
        let tag = self.next_tag();
        let q = self.peers().len();
        let b = blocks("iallgatherv", counts, displs, q, recv.len())?;
        let sends = (0..q).map(|j| (j, 0..send.len())).collect();
        Ok(self.exchange_round(scope, tag, send, sends, recv, b.into_iter().enumerate().collect(), None))
    }

    /// `MPI_Ialltoall` on an inter-communicator: `MPI_Ialltoallv` of even blocks.
    pub(super) fn ialltoall_inter<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        let q = self.peers().len();
        if !send.len().is_multiple_of(q) || !recv.len().is_multiple_of(q) {
            self.next_tag();
            return Err(Error::Other(format!("ialltoall: the buffers do not split into {q} blocks")));
        }
        let even = |n: usize| (vec![n; q], (0..q).map(|j| j * n).collect::<Vec<_>>());
        let ((sc, sd), (rc, rd)) = (even(send.len() / q), even(recv.len() / q));
        self.ialltoallv_inter(scope, send, &sc, &sd, recv, &rc, &rd)
    }

    /// `MPI_Ialltoallv` on an inter-communicator: block `j` of `send` to rank `j` of the
    /// other group, block `i` of `recv` from its rank `i`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ialltoallv_inter<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        scounts: &[usize],
        sdispls: &[usize],
        recv: &'a mut [T],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<CollRequest<'a>, Error> {
        let tag = self.next_tag();
        let q = self.peers().len();
        let sb = blocks("ialltoallv (send)", scounts, sdispls, q, send.len())?;
        let rb = blocks("ialltoallv (receive)", rcounts, rdispls, q, recv.len())?;
        let (sends, recvs) = (sb.into_iter().enumerate().collect(), rb.into_iter().enumerate().collect());
        Ok(self.exchange_round(scope, tag, send, sends, recv, recvs, None))
    }
}

impl Comm {
    /// The part in a nonblocking rooted collective on an inter-communicator of a rank
    /// beside the root (`MPI_PROC_NULL`): a request complete at once, that has taken its
    /// tag as every rank does.
    pub fn inter_ibeside<'a>(&self, scope: &Scope<'a>, what: &str) -> Result<CollRequest<'a>, Error> {
        let beside = |_| unreachable!("beside the root");
        self.inter_rooted(scope, what, InterRoot::Beside, || unreachable!("beside the root"), beside)
    }
}
