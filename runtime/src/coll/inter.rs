//! Inter-communicators (MPI 4.1, section 7.6): two disjoint groups, each of whose messages
//! name a rank of the other; made by `MPI_Intercomm_create`, merged into one group by
//! `MPI_Intercomm_merge`, and their collectives (section 6.2.2), where one group's data
//! goes to the other.
//!
//! An inter-communicator of context `c` sends its point-to-point messages on `c`, its
//! collectives' messages between the groups on `c + 1`, and keeps each local group as an
//! intra-communicator of its own on `c + 2` (and `c + 3`, its collectives): the local steps
//! of a collective (gathering a group's data to its first rank, say) run there, those of a
//! nonblocking one on `c + 2` (inter_nonblocking.rs). Both groups
//! call the collectives of an inter-communicator in the same order, so its collective tags
//! agree as an intra-communicator's do. The collectives here follow MPICH's: a group's data
//! meets at its first rank (the leader), the two leaders swap, and each leader hands what it
//! got on to its group.

use bytemuck::Pod;

use super::op::{Max, Op};
use super::{bytes, bytes_mut, Input};
use crate::comm::Comm;
use crate::error::Error;

/// Ids an inter-communicator takes: its own two and its local group's two.
pub(super) const INTER_IDS: u32 = 4;

/// Where the root of a rooted collective on an inter-communicator is, as this rank sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterRoot {
    /// This rank is the root (`MPI_ROOT`).
    Here,
    /// The root is in this rank's group, and is another rank (`MPI_PROC_NULL`).
    Beside,
    /// The root is rank `r` of the other group.
    Remote(usize),
}

impl Comm {
    /// An inter-communicator between this communicator's group and another, disjoint group
    /// (`MPI_Intercomm_create`). Collective over this communicator. Its rank `leader` talks
    /// to the other group's leader through `peer`: a communicator both leaders are in and
    /// the other leader's rank there (needed at `leader` alone), with `tag`.
    pub fn intercomm(&self, leader: usize, peer: Option<(&Comm, usize)>, tag: i32) -> Result<Comm, Error> {
        self.intra("MPI_Intercomm_create's local communicator")?;
        if leader >= self.size() {
            return Err(Error::Rank { rank: leader, size: self.size() });
        }
        if !(0..=crate::TAG_UB).contains(&tag) {
            return Err(Error::Tag(tag));
        }
        let mut ctx = [self.rt().borrow().next_ctx as u64];
        self.allreduce_in_place(&mut ctx, Max)?;
        // At the leader: what it tells its group, [context (0: failed), remote size], then
        // the remote group's world ranks.
        let mut told = vec![0u64; 2];
        let mut failure = None;
        if self.rank() == leader {
            match self.meet(ctx[0], peer, tag) {
                Ok(v) => told = v,
                Err(e) => failure = Some(e),
            }
        }
        let mut head = [told[0], told.len() as u64 - 2];
        self.bcast(&mut head, leader)?;
        told.resize(head[1] as usize + 2, 0);
        self.bcast(&mut told[2..], leader)?;
        if let Some(e) = failure {
            return Err(e);
        }
        if head[0] == 0 {
            return Err(Error::Other("MPI_Intercomm_create failed at the local leader".into()));
        }
        let ctx = self.take_context(head[0] as u32, INTER_IDS)?;
        let remote = told[2..].iter().map(|&w| w as usize).collect();
        Ok(Comm::new_inter(self.rt().clone(), ctx, self.rank(), self.group().to_vec(), remote))
    }

    /// The leader's part of [`Comm::intercomm`]: swaps (this group's largest next context
    /// id, its world ranks) with the other leader, and returns [the context both take, 0,
    /// the other group's world ranks].
    fn meet(&self, ctx: u64, peer: Option<(&Comm, usize)>, tag: i32) -> Result<Vec<u64>, Error> {
        let (peer, r) = peer.ok_or_else(|| Error::Arg("the local leader needs the peer communicator".into()))?;
        let mine: Vec<u64> = std::iter::once(ctx).chain(self.group().iter().map(|&w| w as u64)).collect();
        let theirs = crate::request::scope(|s| {
            let q = peer.isend(s, &mine, r, tag)?;
            let (v, _) = peer.recv_vec::<u64>(r, tag)?;
            q.wait()?;
            Ok::<_, Error>(v)
        })?;
        let Some((&their_ctx, remote)) = theirs.split_first() else {
            return Err(Error::Other("the remote leader sent no group".into()));
        };
        if let Some(w) = remote.iter().find(|&&w| self.group().contains(&(w as usize))) {
            return Err(Error::Comm(format!("the two groups share world rank {w}")));
        }
        let mut told = vec![ctx.max(their_ctx), 0];
        told.extend_from_slice(remote);
        Ok(told)
    }

    /// One intra-communicator of both groups (`MPI_Intercomm_merge`): the group that passes
    /// `high` false first; where both pass the same, the group of the lower first world rank
    /// first. Collective over this inter-communicator.
    pub fn merge(&self, high: bool) -> Result<Comm, Error> {
        let Some(local) = self.local() else {
            return Err(Error::Comm("MPI_Intercomm_merge of an intra-communicator".into()));
        };
        let theirs = self.swap(&[high as u8])?;
        let their_high = theirs.first().is_some_and(|&h| h != 0);
        let first = if high == their_high { self.group()[0] < self.peers()[0] } else { !high };
        let ctx = self.agree_context_inter(local, 2)?;
        let (group, rank) = if first {
            ([self.group(), self.peers()].concat(), self.rank())
        } else {
            ([self.peers(), self.group()].concat(), self.peers().len() + self.rank())
        };
        Ok(Comm::new(self.rt().clone(), ctx, rank, group))
    }

    /// A context id for a new communicator of (some of) both groups of this
    /// inter-communicator, taking `ids` ids: the largest next id of either group.
    pub(super) fn agree_context_inter(&self, local: &Comm, ids: u32) -> Result<u32, Error> {
        let mut ctx = [self.rt().borrow().next_ctx];
        local.allreduce_in_place(&mut ctx, Max)?;
        let theirs = self.swap(&ctx[0].to_le_bytes())?;
        let theirs =
            theirs.try_into().map(u32::from_le_bytes).map_err(|_| Error::Other("a context id of no 4 bytes".into()))?;
        self.take_context(ctx[0].max(theirs), ids)
    }

    /// The inter-communicators `MPI_Comm_split` makes of this one: of each color, this
    /// group's ranks of it with the other group's ranks of it (none where either has none).
    pub(super) fn split_inter(&self, local: &Comm, color: Option<u32>, key: i32) -> Result<Option<Comm>, Error> {
        // (color + 1, with 0 for none; key; rank), of every rank of this group.
        let mine = [color.map_or(0i64, |c| c as i64 + 1), key as i64, self.rank() as i64];
        let mut all = vec![0i64; 3 * local.size()];
        local.allgather(&mine, &mut all)?;
        let theirs: Vec<i64> = bytemuck::pod_collect_to_vec(&self.swap(bytes(&all))?);
        let ctx = self.agree_context_inter(local, INTER_IDS)?;
        let Some(c) = color else { return Ok(None) };
        let of_color = |table: &[i64], world: &[usize]| {
            let mut m: Vec<(i64, usize)> =
                table.chunks(3).filter(|e| e[0] == c as i64 + 1).map(|e| (e[1], e[2] as usize)).collect();
            m.sort();
            m.into_iter().map(|(_, r)| (r, world[r])).collect::<Vec<_>>()
        };
        let (ours, remote) = (of_color(&all, self.group()), of_color(&theirs, self.peers()));
        if remote.is_empty() {
            return Ok(None);
        }
        let rank = ours.iter().position(|&(r, _)| r == self.rank()).expect("this rank has this color");
        let world = |m: Vec<(usize, usize)>| m.into_iter().map(|(_, w)| w).collect();
        Ok(Some(Comm::new_inter(self.rt().clone(), ctx, rank, world(ours), world(remote))))
    }

    /// The inter-communicator of `members` (world ranks, in order: some of this group's)
    /// and the members the other group names likewise (`MPI_Comm_create` on an
    /// inter-communicator); `None` outside `members`, or where either side names none.
    pub(crate) fn create_inter(&self, local: &Comm, members: &[usize]) -> Result<Option<Comm>, Error> {
        let mine: Vec<u64> = members.iter().map(|&w| w as u64).collect();
        let theirs: Vec<u64> = bytemuck::pod_collect_to_vec(&self.swap(bytes(&mine))?);
        let ctx = self.agree_context_inter(local, INTER_IDS)?;
        let me = self.group()[self.rank()];
        let Some(rank) = members.iter().position(|&w| w == me) else { return Ok(None) };
        if theirs.is_empty() {
            return Ok(None);
        }
        let remote = theirs.iter().map(|&w| w as usize).collect();
        Ok(Some(Comm::new_inter(self.rt().clone(), ctx, rank, members.to_vec(), remote)))
    }

    /// The leaders swap `mine` (the leader's; the others' is not read), and each hands what
    /// it got to its whole group: every rank returns the other leader's bytes.
    fn swap(&self, mine: &[u8]) -> Result<Vec<u8>, Error> {
        let local = self.local().expect("an inter-communicator");
        let tag = self.next_tag();
        // The length the leader tells its group; `FAILED`: its swap failed, and the whole
        // group fails with it (none goes on to a step the leader is not in).
        const FAILED: u64 = u64::MAX;
        let mut len = [0u64];
        let mut got = Vec::new();
        let mut swapped = Ok(());
        if self.rank() == 0 {
            let mut n = [0u8; 8];
            swapped =
                self.coll_xchg(tag, Some((&(mine.len() as u64).to_le_bytes(), 0)), Some((&mut n, 0))).and_then(|_| {
                    got = vec![0u8; u64::from_le_bytes(n) as usize];
                    self.coll_xchg(tag, Some((mine, 0)), Some((&mut got, 0))).map(|_| ())
                });
            len[0] = if swapped.is_ok() { got.len() as u64 } else { FAILED };
        }
        local.bcast(&mut len, 0)?;
        if len[0] == FAILED {
            swapped?;
            return Err(Error::Other("the group's leader failed to reach the other group".into()));
        }
        got.resize(len[0] as usize, 0);
        local.bcast(&mut got, 0)?;
        Ok(got)
    }

    /// `MPI_Barrier` on an inter-communicator: returns once every rank of both groups has
    /// entered.
    pub(super) fn barrier_inter(&self, local: &Comm) -> Result<(), Error> {
        local.barrier()?;
        self.swap(&[]).map(|_| ())
    }

    /// The part in a rooted collective on an inter-communicator of a rank beside the root
    /// (`MPI_PROC_NULL`): nothing, but the collectives' count, as every rank keeps it.
    pub fn inter_beside(&self, what: &str) -> Result<(), Error> {
        self.inter(what)?;
        self.next_tag();
        Ok(())
    }

    /// Checks `root` against the other group's size.
    pub(super) fn remote_root(&self, root: InterRoot) -> Result<InterRoot, Error> {
        match root {
            InterRoot::Remote(r) if r >= self.peers().len() => Err(Error::Rank { rank: r, size: self.peers().len() }),
            root => Ok(root),
        }
    }

    /// Broadcasts `buf` from the root to every rank of the other group (`MPI_Bcast` on an
    /// inter-communicator): the root sends, the other group receives, and the root's own
    /// group does nothing else.
    pub fn inter_bcast<T: Pod>(&self, buf: &mut [T], root: InterRoot) -> Result<(), Error> {
        let local = self.inter("MPI_Bcast")?;
        let tag = self.next_tag();
        match self.remote_root(root)? {
            InterRoot::Here => self.coll_xchg(tag, Some((bytes(buf), 0)), None).map(|_| ()),
            InterRoot::Beside => Ok(()),
            InterRoot::Remote(r) => {
                // The leader's failure leaves its group's step to run (whatever the buffer
                // holds), so that none of them waits for it.
                let got = match self.rank() {
                    0 => self.coll_xchg(tag, None, Some((bytes_mut(buf), r))).map(|_| ()),
                    _ => Ok(()),
                };
                let shared = local.bcast(buf, 0);
                got.and(shared)
            }
        }
    }

    /// Reduces with `op` the `send` of every rank of the other group into `recv` at the root
    /// (`MPI_Reduce` on an inter-communicator); `recv` at the root alone, `send` in the
    /// other group alone.
    pub fn inter_reduce<T: Pod, O: Op<T>>(
        &self,
        send: Option<&[T]>,
        recv: Option<&mut [T]>,
        op: O,
        root: InterRoot,
    ) -> Result<(), Error> {
        self.up_to_root("MPI_Reduce", recv, root, |local| {
            let send =
                send.ok_or_else(|| Error::Other("reduce: a rank of the other group must pass its input".into()))?;
            let mut acc = (self.rank() == 0).then(|| send.to_vec());
            local.reduce(send, acc.as_deref_mut(), op, 0)?;
            Ok(acc)
        })
    }

    /// A rooted collective whose data goes from the other group to the root: there, every
    /// rank runs `combine` on its group (as an intra-communicator), which gives the leader
    /// the message, and the leader sends it; the root receives it into `recv`.
    fn up_to_root<T: Pod>(
        &self,
        what: &str,
        recv: Option<&mut [T]>,
        root: InterRoot,
        combine: impl FnOnce(&Comm) -> Result<Option<Vec<T>>, Error>,
    ) -> Result<(), Error> {
        let local = self.inter(what)?;
        let tag = self.next_tag();
        match self.remote_root(root)? {
            InterRoot::Here => {
                let recv = recv.ok_or_else(|| Error::Other(format!("{what}: the root must pass a receive buffer")))?;
                self.coll_xchg(tag, None, Some((bytes_mut(recv), 0))).map(|_| ())
            }
            InterRoot::Beside => Ok(()),
            InterRoot::Remote(r) => match combine(local)? {
                Some(v) => self.coll_xchg(tag, Some((bytes(&v), r)), None).map(|_| ()),
                None => Ok(()),
            },
        }
    }

    /// `MPI_Allreduce` on an inter-communicator: each rank gets the reduction of the other
    /// group's inputs.
    pub(super) fn allreduce_inter<T: Pod, O: Op<T>>(
        &self,
        local: &Comm,
        input: Input<'_, T>,
        buf: &mut [T],
        op: &O,
    ) -> Result<(), Error> {
        let tag = self.next_tag();
        let mine = match input {
            Input::From(s) => s.to_vec(),
            Input::InPlace => buf.to_vec(),
        };
        let mut acc = (self.rank() == 0).then(|| mine.clone());
        local.reduce(&mine, acc.as_deref_mut(), ByRef(op), 0)?;
        // As in inter_bcast, a failed swap still lets the group's step run.
        let swapped = match acc {
            Some(acc) => self.coll_xchg(tag, Some((bytes(&acc), 0)), Some((bytes_mut(buf), 0))).map(|_| ()),
            None => Ok(()),
        };
        let shared = local.bcast(buf, 0);
        swapped.and(shared)
    }

    /// Gathers the `send` of every rank of the other group, in rank order, into `recv` at the
    /// root (`MPI_Gather` on an inter-communicator).
    pub fn inter_gather<T: Pod>(
        &self,
        send: Option<&[T]>,
        recv: Option<&mut [T]>,
        root: InterRoot,
    ) -> Result<(), Error> {
        self.up_to_root("MPI_Gather", recv, root, |local| {
            let send =
                send.ok_or_else(|| Error::Other("gather: a rank of the other group must pass its input".into()))?;
            let mut all = (self.rank() == 0).then(|| send.repeat(local.size()));
            local.gather(send, all.as_deref_mut(), 0)?;
            Ok(all)
        })
    }

    /// Scatters consecutive blocks of `send` at the root, one per rank of the other group,
    /// into their `recv` (`MPI_Scatter` on an inter-communicator).
    pub fn inter_scatter<T: Pod>(
        &self,
        send: Option<&[T]>,
        recv: Option<&mut [T]>,
        root: InterRoot,
    ) -> Result<(), Error> {
        let local = self.inter("MPI_Scatter")?;
        let tag = self.next_tag();
        match self.remote_root(root)? {
            InterRoot::Here => {
                let send = send.ok_or_else(|| Error::Other("scatter: the root must pass a send buffer".into()))?;
                self.coll_xchg(tag, Some((bytes(send), 0)), None).map(|_| ())
            }
            InterRoot::Beside => Ok(()),
            InterRoot::Remote(r) => {
                let recv =
                    recv.ok_or_else(|| Error::Other("scatter: a rank of the other group must pass a buffer".into()))?;
                let mut all = (self.rank() == 0).then(|| recv.repeat(local.size()));
                let got = match all.as_deref_mut() {
                    Some(all) => self.coll_xchg(tag, None, Some((bytes_mut(all), r))).map(|_| ()),
                    None => Ok(()),
                };
                let shared = local.scatter(all.as_deref(), recv, 0);
                got.and(shared)
            }
        }
    }

    /// `MPI_Allgather` on an inter-communicator: each rank gets the `send` of every rank
    /// of the other group, in rank order.
    pub(super) fn allgather_inter<T: Pod>(&self, local: &Comm, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        let tag = self.next_tag();
        let mut all = (self.rank() == 0).then(|| send.repeat(local.size()));
        local.gather(send, all.as_deref_mut(), 0)?;
        let swapped = match all {
            Some(all) => self.coll_xchg(tag, Some((bytes(&all), 0)), Some((bytes_mut(recv), 0))).map(|_| ()),
            None => Ok(()),
        };
        let shared = local.bcast(recv, 0);
        swapped.and(shared)
    }

    /// `MPI_Alltoall` on an inter-communicator: block `j` of `send` to rank `j` of the other
    /// group, block `i` of `recv` from its rank `i`.
    pub(super) fn alltoall_inter<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        let q = self.peers().len();
        if !send.len().is_multiple_of(q) || !recv.len().is_multiple_of(q) {
            return Err(Error::Other(format!("alltoall: the buffers do not split into {q} blocks")));
        }
        // Even blocks, in order: the v-form's.
        let even = |n: usize| (vec![n; q], (0..q).map(|j| j * n).collect::<Vec<_>>());
        let ((sc, sd), (rc, rd)) = (even(send.len() / q), even(recv.len() / q));
        self.alltoallv_inter(send, &sc, &sd, recv, &rc, &rd)
    }

    /// Gathers blocks of varying size of the other group's ranks at the root (`MPI_Gatherv`
    /// on an inter-communicator): rank `j`'s `send` lands at `displs[j]` of the root's `recv`,
    /// and must hold `counts[j]` elements. Each rank sends its own block to the root.
    pub fn inter_gatherv<T: Pod>(
        &self,
        send: Option<&[T]>,
        recv: Option<(&mut [T], &[usize], &[usize])>,
        root: InterRoot,
    ) -> Result<(), Error> {
        self.inter("MPI_Gatherv")?;
        let tag = self.next_tag();
        match self.remote_root(root)? {
            InterRoot::Here => {
                let (recv, counts, displs) =
                    recv.ok_or_else(|| Error::Other("gatherv: the root must pass a receive buffer".into()))?;
                let mut recvs = self.blocks_of("gatherv", recv, counts, displs)?;
                self.coll_xchg_all(tag, &[], &mut recvs, None)
            }
            InterRoot::Beside => Ok(()),
            InterRoot::Remote(r) => {
                let send =
                    send.ok_or_else(|| Error::Other("gatherv: a rank of the other group must pass its input".into()))?;
                self.coll_xchg(tag, Some((bytes(send), r)), None).map(|_| ())
            }
        }
    }

    /// Scatters blocks of varying size from the root to the other group's ranks
    /// (`MPI_Scatterv` on an inter-communicator).
    pub fn inter_scatterv<T: Pod>(
        &self,
        send: Option<(&[T], &[usize], &[usize])>,
        recv: Option<&mut [T]>,
        root: InterRoot,
    ) -> Result<(), Error> {
        self.inter("MPI_Scatterv")?;
        let tag = self.next_tag();
        match self.remote_root(root)? {
            InterRoot::Here => {
                let (send, counts, displs) =
                    send.ok_or_else(|| Error::Other("scatterv: the root must pass a send buffer".into()))?;
                super::vector::layout("scatterv", counts, displs, self.peers().len(), send.len())?;
                let sends: Vec<(&[u8], usize)> =
                    (0..counts.len()).map(|j| (bytes(&send[displs[j]..displs[j] + counts[j]]), j)).collect();
                self.coll_xchg_all(tag, &sends, &mut [], None)
            }
            InterRoot::Beside => Ok(()),
            InterRoot::Remote(r) => {
                let recv =
                    recv.ok_or_else(|| Error::Other("scatterv: a rank of the other group must pass a buffer".into()))?;
                self.coll_xchg(tag, None, Some((bytes_mut(recv), r))).map(|_| ())
            }
        }
    }

    /// `MPI_Allgatherv` on an inter-communicator: each rank sends its block to every rank of
    /// the other group, and gets theirs at `displs`.
    pub(super) fn allgatherv_inter<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<(), Error> {
        let mut recvs = self.blocks_of("allgatherv", recv, counts, displs)?;
        let tag = self.next_tag();
        let sends: Vec<(&[u8], usize)> = (0..self.peers().len()).map(|j| (bytes(send), j)).collect();
        self.coll_xchg_all(tag, &sends, &mut recvs, None)
    }

    /// `MPI_Alltoallv` on an inter-communicator: block `j` of `send` to rank `j` of the other
    /// group, block `i` of `recv` from its rank `i`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn alltoallv_inter<T: Pod>(
        &self,
        send: &[T],
        scounts: &[usize],
        sdispls: &[usize],
        recv: &mut [T],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<(), Error> {
        super::vector::layout("alltoallv (send)", scounts, sdispls, self.peers().len(), send.len())?;
        let mut recvs = self.blocks_of("alltoallv (receive)", recv, rcounts, rdispls)?;
        let tag = self.next_tag();
        let sends: Vec<(&[u8], usize)> =
            (0..scounts.len()).map(|j| (bytes(&send[sdispls[j]..sdispls[j] + scounts[j]]), j)).collect();
        self.coll_xchg_all(tag, &sends, &mut recvs, None)
    }

    /// The blocks of `recv` the other group's ranks fill, each with its rank, once their
    /// counts and displacements are checked.
    fn blocks_of<'b, T: Pod>(
        &self,
        what: &str,
        recv: &'b mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<Vec<(&'b mut [u8], usize)>, Error> {
        super::vector::disjoint_layout(what, counts, displs, self.peers().len(), recv.len())?;
        let blocks = super::algo::split_blocks(recv, (0..counts.len()).map(|j| displs[j]..displs[j] + counts[j]));
        Ok(blocks.into_iter().map(bytes_mut).zip(0..).collect())
    }

    /// This inter-communicator's local group, or [`Error::Comm`] for `what` on an
    /// intra-communicator.
    pub(super) fn inter(&self, what: &str) -> Result<&Comm, Error> {
        self.local()
            .ok_or_else(|| Error::Comm(format!("{what} with an inter-communicator's root on an intra-communicator")))
    }
}

/// An operation borrowed, as an operation (the local step of [`Comm::allreduce_inter`]).
struct ByRef<'o, O>(&'o O);

impl<T, O: Op<T>> Op<T> for ByRef<'_, O> {
    fn apply(&self, acc: &mut [T], x: &[T]) {
        self.0.apply(acc, x)
    }

    fn apply_into(&self, out: &mut [T], a: &[T], x: &[T])
    where
        T: Copy,
    {
        self.0.apply_into(out, a, x)
    }

    fn commutative(&self) -> bool {
        self.0.commutative()
    }
}
