//! Communicator creation: `dup`, `split` and `create_group` (MPI 4.1, section 7.4.2).
//!
//! A new communicator needs a context id that no communicator of any of its members uses.
//! Every process hands out ids in increasing order (two per communicator: point-to-point and
//! collectives), so the members agree on the largest of their next free ids (an all-reduce
//! over the parent) and all move past it. Communicators made by one `split` share the id:
//! their groups are disjoint, so their messages cannot meet.

use super::op::Max;
use crate::comm::Comm;
use crate::error::Error;

/// The context of [`Comm::solo`] (and the next, its collectives'): the last two ids, which
/// [`Comm::agree_context`] never hands out.
pub(super) const SOLO_CONTEXT: u32 = u32::MAX - 1;

impl Comm {
    fn agree_context(&self) -> Result<u32, Error> {
        let mine = self.rt().borrow().next_ctx;
        let mut ctx = [mine];
        self.allreduce_in_place(&mut ctx, Max)?;
        self.take_context(ctx[0], 2)
    }

    /// As [`Comm::agree_context`], among the ranks `members` of this communicator alone
    /// (`MPI_Comm_create_group`), this rank being `members[me]`: a reduction to the first
    /// member and a broadcast back, both binomial trees, by point-to-point messages on this
    /// communicator's collective context. Their tag is `-1 - tag`: the collectives' tags are
    /// never negative, and the other ranks' collectives' sequence is left as it is.
    pub(crate) fn agree_context_among(&self, members: &[usize], me: usize, tag: i32) -> Result<u32, Error> {
        let (n, tag) = (members.len(), -1 - tag);
        let mut ctx = self.rt().borrow().next_ctx;
        let mut got = [0u8; 4];
        let mut mask = 1;
        while mask < n {
            if me & mask != 0 {
                self.coll_xchg(tag, Some((&ctx.to_le_bytes(), members[me - mask])), None)?;
                break;
            }
            if me + mask < n {
                self.coll_xchg(tag, None, Some((&mut got, members[me + mask])))?;
                ctx = ctx.max(u32::from_le_bytes(got));
            }
            mask <<= 1;
        }
        // The first member has the largest; down the same tree.
        if me != 0 {
            self.coll_xchg(tag, None, Some((&mut got, members[me - (me & me.wrapping_neg())])))?;
            ctx = u32::from_le_bytes(got);
        }
        let mut mask = if me == 0 { n.next_power_of_two() } else { me & me.wrapping_neg() } >> 1;
        while mask > 0 {
            if me + mask < n {
                self.coll_xchg(tag, Some((&ctx.to_le_bytes(), members[me + mask])), None)?;
            }
            mask >>= 1;
        }
        self.take_context(ctx, 2)
    }

    /// Takes `ctx`, which the members agreed on, and moves this process's next id past it
    /// and the `ids - 1` after it (an intra-communicator's collectives' `ctx + 1`, and more
    /// for an inter-communicator: see `inter.rs`).
    pub(super) fn take_context(&self, ctx: u32, ids: u32) -> Result<u32, Error> {
        let next = ctx
            .checked_add(ids)
            .filter(|&n| n <= super::NB_CONTEXTS)
            .ok_or_else(|| Error::Other("out of communicator context ids".into()))?;
        self.rt().borrow_mut().next_ctx = next;
        Ok(ctx)
    }

    /// The communicator of this rank alone (`MPI_COMM_SELF`), made without communication:
    /// its context is reserved for it (no agreed context reaches it), and only this rank
    /// could send on it.
    pub fn solo(&self) -> Comm {
        Comm::new(self.rt().clone(), SOLO_CONTEXT, 0, vec![self.group()[self.rank()]])
    }

    /// A new communicator with the same group and a new context (`MPI_Comm_dup`).
    /// Collective over this communicator.
    pub fn dup(&self) -> Result<Comm, Error> {
        if let Some(local) = self.local() {
            let ctx = self.agree_context_inter(local, super::inter::INTER_IDS)?;
            return Ok(Comm::new_inter(
                self.rt().clone(),
                ctx,
                self.rank(),
                self.group().to_vec(),
                self.peers().to_vec(),
            ));
        }
        let ctx = self.agree_context()?;
        Ok(Comm::new(self.rt().clone(), ctx, self.rank(), self.group().to_vec()))
    }

    /// Splits into communicators of the ranks that can share memory, one per host, ordered
    /// by `key` then rank (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`). Where ranks
    /// may not share memory (`MPR_TRANSPORTS` without `shm`), each rank is alone in its own.
    pub fn split_shared(&self, key: i32) -> Result<Comm, Error> {
        self.intra("a split by host")?;
        let color = {
            let rt = self.rt().borrow();
            let me = self.group()[self.rank()];
            if rt.hosts.shm {
                rt.hosts.of[me]
            } else {
                me as u32
            }
        };
        Ok(self.split(Some(color), key)?.expect("every rank gave a color"))
    }

    /// Splits the ranks by `color` into new communicators, ordered by `key` then by rank
    /// here (`MPI_Comm_split`). `None` as color (`MPI_UNDEFINED`) takes part but gets no
    /// communicator. Collective over this communicator.
    ///
    /// On an inter-communicator, each group splits alike, and the ranks of one color in
    /// both make an inter-communicator (none where either group has no rank of it).
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm>, Error> {
        if let Some(local) = self.local() {
            return self.split_inter(local, color, key);
        }
        let p = self.size();
        // (color + 1, with 0 for none; key; rank)
        let mine = [color.map_or(0i64, |c| c as i64 + 1), key as i64, self.rank() as i64];
        let mut all = vec![0i64; 3 * p];
        self.allgather(&mine, &mut all)?;
        let ctx = self.agree_context()?;
        let Some(c) = color else { return Ok(None) };
        let mut members: Vec<(i64, usize)> =
            all.chunks(3).filter(|e| e[0] == c as i64 + 1).map(|e| (e[1], e[2] as usize)).collect();
        members.sort();
        let group: Vec<usize> = members.iter().map(|&(_, r)| self.group()[r]).collect();
        let rank = members.iter().position(|&(_, r)| r == self.rank()).expect("this rank has this color");
        Ok(Some(Comm::new(self.rt().clone(), ctx, rank, group)))
    }
}
