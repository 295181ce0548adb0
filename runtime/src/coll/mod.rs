//! Collective operations (MPI 4.1, chapter 6) and communicator creation (chapter 7), built on
//! the engine's point-to-point messages in a context of their own (the communicator's
//! context + 1), so they never match user messages.
//!
//! Algorithms are chosen by size and rank count, as MPICH and Open MPI choose them, and can
//! be forced with `MPR_ALLREDUCE_ALGO` (`recursive-doubling`, `ring`, `reduce-bcast`),
//! `MPR_BCAST_ALGO` (`binomial`, `scatter-allgather`, `flat`), `MPR_ALLGATHER_ALGO`
//! (`recursive-doubling`, `bruck`, `ring`), `MPR_ALLTOALL_ALGO` (`pairwise`, `scattered`)
//! and `MPR_BARRIER_ALGO` (`dissemination`, `linear`) for tests and tuning. Every algorithm
//! combines operands in a fixed order, so the same inputs on the same rank count give
//! bit-identical floating-point results on every run.

mod algo;
mod create;
mod idup;
mod inter;
mod inter_nonblocking;
mod neighbor;
pub(crate) mod node;
mod nonblocking;
pub mod op;
mod prefix;
pub(crate) mod ring;
pub(crate) mod sched;
mod vector;

pub use idup::PendingComm;
pub(crate) use idup::{NbContexts, NB_CONTEXTS};
pub use inter::InterRoot;
pub use neighbor::Neighborhood;
pub use nonblocking::CollRequest;

use bytemuck::Pod;

use crate::comm::Comm;
use crate::error::Error;
use op::Op;

/// The collectives' settings from the environment, read once per process (a collective on
/// the fast path must not scan the environment).
#[derive(Debug)]
pub(crate) struct Settings {
    /// `MPR_COLL_SHM` (not `0`): shared-memory collectives.
    shm: bool,
    /// `MPR_COLL_SHM_SLOT`: bytes of a member's slot in the segment (default: the
    /// segment's maker chooses).
    shm_slot: Option<usize>,
    /// `MPR_COLL_SHM_BCAST_MAX`, `MPR_COLL_SHM_REDUCE_MAX`: on one host, the largest
    /// operations that go through the segment (beyond, point-to-point with single-copy
    /// transfers is faster). Reductions: see [`Comm::reduce_plan`] for the default.
    shm_bcast_max: usize,
    shm_reduce_max: Option<usize>,
    /// `MPR_COLL_SHM_GATHER_MAX`: on one host, the largest contribution per rank to an
    /// allgather (its block) or all-to-all (its send buffer) that goes through the segment;
    /// by default what a member's LL lines carry (above, the copies through a slot cost more
    /// than point-to-point messages).
    shm_gather_max: usize,
    /// `MPR_BARRIER_ALGO`, `MPR_BCAST_ALGO`, `MPR_ALLREDUCE_ALGO`, `MPR_ALLGATHER_ALGO`,
    /// `MPR_ALLTOALL_ALGO`: a forced algorithm.
    barrier_algo: Option<String>,
    bcast_algo: Option<String>,
    allreduce_algo: Option<String>,
    allgather_algo: Option<String>,
    alltoall_algo: Option<String>,
}

/// When ranks outnumber cores, the largest all-to-all send buffer that goes through the
/// segment: beyond it, the scattered exchange (each block read once, straight from its
/// sender) beats two copies through the segment (4 ranks on 2 cores, 64 KiB blocks: ~45 us
/// against ~70-90).
const CROWDED_ALLTOALL_MAX: usize = 128 << 10;

pub(crate) fn settings() -> &'static Settings {
    static SETTINGS: std::sync::OnceLock<Settings> = std::sync::OnceLock::new();
    SETTINGS.get_or_init(|| {
        let algo = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());
        Settings {
            shm: std::env::var("MPR_COLL_SHM").map_or(true, |v| v != "0"),
            shm_slot: crate::env::parsed("MPR_COLL_SHM_SLOT"),
            shm_bcast_max: crate::env::parsed("MPR_COLL_SHM_BCAST_MAX").unwrap_or(16 << 10),
            shm_reduce_max: crate::env::parsed("MPR_COLL_SHM_REDUCE_MAX"),
            shm_gather_max: crate::env::parsed("MPR_COLL_SHM_GATHER_MAX").unwrap_or(node::LL_MAX),
            barrier_algo: algo("MPR_BARRIER_ALGO"),
            bcast_algo: algo("MPR_BCAST_ALGO"),
            allreduce_algo: algo("MPR_ALLREDUCE_ALGO"),
            allgather_algo: algo("MPR_ALLGATHER_ALGO"),
            alltoall_algo: algo("MPR_ALLTOALL_ALGO"),
        }
    })
}

/// A reduction's input: already in the result buffer (`MPI_IN_PLACE`), or in a buffer of its
/// own, which the algorithms read where they can instead of first copying it over.
#[derive(Debug, Clone, Copy)]
pub(super) enum Input<'a, T> {
    InPlace,
    From(&'a [T]),
}

impl<'a, T: Pod> Input<'a, T> {
    /// Puts the input in `buf`, for the algorithms that work in place.
    fn fill(self, buf: &mut [T]) {
        if let Input::From(s) = self {
            buf.copy_from_slice(s);
        }
    }

    /// Elements `r` of the input.
    fn part(self, r: std::ops::Range<usize>) -> Input<'a, T> {
        match self {
            Input::From(s) => Input::From(&s[r]),
            Input::InPlace => Input::InPlace,
        }
    }
}

fn bytes<T: Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

fn bytes_mut<T: Pod>(v: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

fn check_root(comm: &Comm, root: usize) -> Result<(), Error> {
    if root < comm.size() {
        Ok(())
    } else {
        Err(Error::Rank { rank: root, size: comm.size() })
    }
}

/// Copies a rank's own block `from` into `to`, as much as fits, zeros after; the mismatch
/// if their lengths differ (the rank's send and receive counts differ: an erroneous
/// program), which the caller reports once the other ranks' blocks went, so that none waits
/// for ever.
pub(super) fn own_block<T: Pod>(from: &[T], to: &mut [T], me: usize) -> Option<Error> {
    let n = from.len().min(to.len());
    to[..n].copy_from_slice(&from[..n]);
    to[n..].fill(T::zeroed());
    let (buffer, message) = (std::mem::size_of_val(to), std::mem::size_of_val(from));
    (buffer != message).then_some(Error::Mismatch { from: me, buffer, message: Some(message) })
}

fn check_len(what: &str, got: usize, want: usize) -> Result<(), Error> {
    if got == want {
        Ok(())
    } else {
        Err(Error::Other(format!("{what}: buffer holds {got} elements, the operation needs {want}")))
    }
}

impl Comm {
    /// Blocks until every rank has entered (`MPI_Barrier`): through the host's segment where
    /// there is one, else dissemination, or linear through rank 0 when ranks outnumber
    /// cores (see `algo::barrier`).
    pub fn barrier(&self) -> Result<(), Error> {
        if let Some(local) = self.local() {
            return self.barrier_inter(local);
        }
        // One rank (`MPI_COMM_SELF`): nothing to wait for.
        if self.size() == 1 {
            return Ok(());
        }
        match self.node_plan().filter(|_| settings().barrier_algo.is_none()) {
            Some(plan) => node::barrier(self, self.coll_tag()?, plan),
            None => algo::barrier(self, self.coll_tag()?),
        }
    }

    /// Broadcasts `buf` from `root` to every rank (`MPI_Bcast`).
    pub fn bcast<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<(), Error> {
        self.intra("a broadcast from a rank (an inter-communicator's is Comm::inter_bcast)")?;
        check_root(self, root)?;
        if self.size() == 1 {
            return Ok(());
        }
        let bytes = bytes_mut(buf);
        let tag = self.coll_tag()?;
        // On one host, large broadcasts go point to point (single-copy reads), unless ranks
        // outnumber cores: then each handshake may wait for a time slice.
        match self.node_plan().filter(|_| settings().bcast_algo.is_none()) {
            Some(plan)
                if !plan.single_host() || bytes.len() <= settings().shm_bcast_max || plan.crowded(self, tag)? =>
            {
                node::bcast(self, tag, plan, bytes, root)
            }
            Some(plan) => node::bcast_apart(self, tag, plan, bytes, root),
            None => algo::bcast(self, tag, bytes, root),
        }
    }

    /// Reduces `send` of every rank with `op` into `recv` at `root` (`MPI_Reduce`); `recv`
    /// is used at the root only (pass `None` elsewhere).
    pub fn reduce<T: Pod, O: Op<T>>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        op: O,
        root: usize,
    ) -> Result<(), Error> {
        check_root(self, root)?;
        let tag = self.coll_tag()?;
        let mut acc = send.to_vec();
        match self.reduce_plan(size_of_val(send), &op, tag)? {
            Some(plan) => node::reduce(self, tag, plan, &mut acc, &op, root)?,
            None => algo::reduce(self, tag, &mut acc, &op, root)?,
        }
        if self.rank() == root {
            let recv = recv.ok_or_else(|| Error::Other("reduce: the root must pass a receive buffer".into()))?;
            check_len("reduce", recv.len(), send.len())?;
            recv.copy_from_slice(&acc);
        }
        Ok(())
    }

    /// Reduces `send` of every rank with `op` into `recv` on every rank (`MPI_Allreduce`).
    pub fn allreduce<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O) -> Result<(), Error> {
        check_len("allreduce", recv.len(), send.len())?;
        self.allreduce_from(Input::From(send), recv, &op)
    }

    /// In-place all-reduce (`MPI_Allreduce` with `MPI_IN_PLACE`).
    pub fn allreduce_in_place<T: Pod, O: Op<T>>(&self, buf: &mut [T], op: O) -> Result<(), Error> {
        self.allreduce_from(Input::InPlace, buf, &op)
    }

    fn allreduce_from<T: Pod, O: Op<T>>(&self, input: Input<'_, T>, buf: &mut [T], op: &O) -> Result<(), Error> {
        if let Some(local) = self.local() {
            return self.allreduce_inter(local, input, buf, op);
        }
        if self.size() == 1 {
            // One rank: the reduction of one input is that input.
            input.fill(buf);
            return Ok(());
        }
        let tag = self.coll_tag()?;
        match self.reduce_plan(size_of_val(buf), op, tag)? {
            Some(plan) => node::allreduce(self, tag, plan, input, buf, op),
            None => algo::allreduce(self, tag, input, buf, op),
        }
    }

    /// Whether the ranks of this host outnumber its cores, as all of them see it (makes the
    /// host's segment on first use: every rank of the collective calls this).
    fn crowded(&self, tag: i32) -> Result<bool, Error> {
        self.node_plan().map_or(Ok(false), |plan| plan.crowded(self, tag))
    }

    /// Whether some rank of the job has more ranks on its CPUs than it has CPUs: the same on
    /// every rank (see `Hosts::outnumbered`), so collectives may choose algorithms by it.
    fn outnumbered(&self) -> bool {
        self.rt().borrow().hosts.outnumbered
    }

    /// The members given by their world ranks `world`, as indices into it, in the order of
    /// the fabric's ring (see `ring`): their own order unless the cables say otherwise.
    fn ring_order_of(&self, world: impl ExactSizeIterator<Item = usize>) -> Vec<usize> {
        let rt = self.rt().borrow();
        let ring = &rt.hosts.ring;
        if ring.is_empty() {
            return (0..world.len()).collect();
        }
        let mut by_pos: Vec<(usize, usize)> = world.enumerate().map(|(m, w)| (ring[w], m)).collect();
        by_pos.sort_unstable();
        by_pos.into_iter().map(|(_, m)| m).collect()
    }

    /// Whether an allgather or all-to-all whose contribution per rank (its block, its send
    /// buffer) is `bytes` goes through the host's segment: on one host, up to
    /// `MPR_COLL_SHM_GATHER_MAX`, or when ranks outnumber cores (point-to-point exchanges
    /// then wait for time slices) up to `crowded_max`. Every rank calls this with the same
    /// `bytes`.
    fn through_segment(&self, plan: &node::Plan, bytes: usize, crowded_max: usize, tag: i32) -> Result<bool, Error> {
        let s = settings();
        Ok(plan.single_host() && (bytes <= s.shm_gather_max || (bytes <= crowded_max && plan.crowded(self, tag)?)))
    }

    /// The shared-memory plan for a reduction of `bytes`, if it should use one: not when an
    /// algorithm is forced, across hosts only for commutative operations (the host order
    /// would not be the rank order), and on one host only up to a size. That size is 64 KiB
    /// for two ranks, whose point-to-point exchange reads each other's memory once where the
    /// segment copies in and out, and 512 KiB for more, where the ring's 2(p-1) steps cost
    /// more than the segment's copies; when ranks outnumber cores, every size (each of
    /// those steps may wait for a scheduler time slice). Every rank of the collective calls
    /// this with the same `bytes` and `tag`.
    #[inline]
    fn reduce_plan<T, O: Op<T>>(&self, bytes: usize, op: &O, tag: i32) -> Result<Option<&node::Plan>, Error> {
        let s = settings();
        let Some(plan) = self.node_plan().filter(|_| s.allreduce_algo.is_none()) else { return Ok(None) };
        if !plan.single_host() {
            return Ok(op.commutative().then_some(plan));
        }
        let fits = match s.shm_reduce_max {
            Some(max) => bytes <= max,
            None if self.size() == 2 => bytes <= 64 << 10,
            None => bytes <= 512 << 10 || plan.crowded(self, tag)?,
        };
        Ok(fits.then_some(plan))
    }

    /// Gathers `send` of every rank, in rank order, into `recv` at `root` (`MPI_Gather`).
    /// The root's blocks are its `recv` divided by the ranks; a rank that sends another
    /// number of bytes (an erroneous program) is reported at the root as
    /// [`Error::Mismatch`], once every rank's block came.
    pub fn gather<T: Pod>(&self, send: &[T], recv: Option<&mut [T]>, root: usize) -> Result<(), Error> {
        check_root(self, root)?;
        let tag = self.coll_tag()?;
        if self.rank() != root {
            return self.coll_xchg(tag, Some((bytes(send), root)), None).map(|_| ());
        }
        let recv = recv.ok_or_else(|| Error::Other("gather: the root must pass a receive buffer".into()))?;
        let p = self.size();
        let n = recv.len() / p;
        let mut failed = None;
        for r in 0..p {
            let chunk = &mut recv[r * n..(r + 1) * n];
            failed = failed.or(if r == root {
                own_block(send, chunk, root)
            } else {
                let buffer = std::mem::size_of_val(chunk);
                algo::received(self.coll_xchg(tag, None, Some((bytes_mut(chunk), r))), buffer, r)?
            });
        }
        failed.map_or_else(|| check_len("gather", recv.len(), n * p), Err)
    }

    /// Scatters consecutive blocks of `send` at `root`, one per rank in rank order, into
    /// `recv` (`MPI_Scatter`); `send` is used at the root only, and its blocks are it
    /// divided by the ranks. A rank whose `recv` holds another number of bytes than its
    /// block (an erroneous program) gets [`Error::Mismatch`].
    pub fn scatter<T: Pod>(&self, send: Option<&[T]>, recv: &mut [T], root: usize) -> Result<(), Error> {
        check_root(self, root)?;
        let tag = self.coll_tag()?;
        if self.rank() != root {
            let buffer = std::mem::size_of_val(recv);
            let r = algo::received(self.coll_xchg(tag, None, Some((bytes_mut(recv), root))), buffer, root)?;
            return r.map_or(Ok(()), Err);
        }
        let send = send.ok_or_else(|| Error::Other("scatter: the root must pass a send buffer".into()))?;
        let p = self.size();
        let n = send.len() / p;
        let mut failed = None;
        for r in 0..p {
            let block = &send[r * n..(r + 1) * n];
            if r == root {
                failed = own_block(block, recv, root);
            } else {
                self.coll_xchg(tag, Some((bytes(block), r)), None)?;
            }
        }
        failed.map_or_else(|| check_len("scatter", send.len(), n * p), Err)
    }

    /// Gathers `send` of every rank, in rank order, into `recv` on every rank
    /// (`MPI_Allgather`; Bruck for small totals, ring for large ones).
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        if let Some(local) = self.local() {
            return self.allgather_inter(local, send, recv);
        }
        let p = self.size();
        // Compared by a product first: a correct call pays no division for this check.
        if send.len() * p != recv.len() && recv.len().is_multiple_of(p) {
            // This rank's send and receive counts differ (an erroneous program): it takes
            // part with a block of its receive count, so that no rank waits for ever, and
            // reports it.
            let mut own = bytemuck::zeroed_vec(recv.len() / p);
            let mismatch = own_block(send, &mut own, self.rank());
            self.allgather(&own, recv)?;
            return mismatch.map_or(Ok(()), Err);
        }
        check_len("allgather", recv.len(), send.len() * p)?;
        let tag = self.coll_tag()?;
        match self.node_plan().filter(|_| settings().allgather_algo.is_none()) {
            Some(plan) if self.through_segment(plan, size_of_val(send), usize::MAX, tag)? => {
                node::allgather(self, tag, plan, bytes(send), bytes_mut(recv))
            }
            _ => algo::allgather(self, tag, bytes_mut(recv), bytes(send)),
        }
    }

    /// Sends block `j` of `send` to rank `j` and receives block `i` of `recv` from rank `i`
    /// (`MPI_Alltoall`; through the host's segment when small, else pairwise or scattered,
    /// see [`Comm::exchange_blocks`]).
    pub fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        if self.is_inter() {
            return self.alltoall_inter(send, recv);
        }
        let p = self.size();
        if send.len() != recv.len() && send.len().is_multiple_of(p) && recv.len().is_multiple_of(p) {
            // As in `allgather`: blocks of this rank's receive count, what fits of each of
            // its send blocks.
            let (sb, rb) = (send.len() / p, recv.len() / p);
            let mut own: Vec<T> = bytemuck::zeroed_vec(recv.len());
            for (o, s) in own.chunks_exact_mut(rb.max(1)).zip(send.chunks_exact(sb.max(1))) {
                own_block(s, o, self.rank());
            }
            self.alltoall(&own, recv)?;
            let (buffer, message) = (rb * size_of::<T>(), sb * size_of::<T>());
            return Err(Error::Mismatch { from: self.rank(), buffer, message: Some(message) });
        }
        check_len("alltoall", send.len(), recv.len())?;
        if !send.len().is_multiple_of(p) {
            return Err(Error::Other(format!("alltoall: {} elements do not split into {p} blocks", send.len())));
        }
        let n = send.len() / p;
        let tag = self.coll_tag()?;
        if let Some(plan) = self.node_plan().filter(|_| settings().alltoall_algo.is_none()) {
            if self.through_segment(plan, size_of_val(send), CROWDED_ALLTOALL_MAX, tag)? {
                return node::alltoall(self, tag, plan, bytes(send), bytes_mut(recv), n * size_of::<T>());
            }
        }
        let block = |r: usize| r * n..(r + 1) * n;
        self.exchange_blocks(tag, send, block, recv, block)
    }
}
