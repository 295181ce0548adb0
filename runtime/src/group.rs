//! Process groups (MPI 4.1, section 7.3) and communicators made from them.

use crate::comm::Comm;
use crate::error::Error;

/// An ordered set of processes (identified by world rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    world: Vec<usize>,
}

impl Group {
    /// Number of processes (`MPI_Group_size`).
    pub fn size(&self) -> usize {
        self.world.len()
    }

    /// The rank in this group of the process with world rank `w`, if it is a member.
    pub fn rank_of_world(&self, w: usize) -> Option<usize> {
        self.world.iter().position(|&x| x == w)
    }

    /// The group of the members at `ranks`, in that order (`MPI_Group_incl`).
    pub fn incl(&self, ranks: &[usize]) -> Result<Group, Error> {
        let mut world = Vec::with_capacity(ranks.len());
        for &r in ranks {
            let w = *self.world.get(r).ok_or(Error::Rank { rank: r, size: self.size() })?;
            if world.contains(&w) {
                return Err(Error::Arg(format!("group incl: rank {r} named twice")));
            }
            world.push(w);
        }
        Ok(Group { world })
    }

    /// The group without the members at `ranks`, order kept (`MPI_Group_excl`).
    pub fn excl(&self, ranks: &[usize]) -> Result<Group, Error> {
        if let Some(&r) = ranks.iter().find(|&&r| r >= self.size()) {
            return Err(Error::Rank { rank: r, size: self.size() });
        }
        let world = self.world.iter().enumerate().filter(|(i, _)| !ranks.contains(i)).map(|(_, &w)| w).collect();
        Ok(Group { world })
    }

    /// The members of this group, then those of `other` that are not in it
    /// (`MPI_Group_union`).
    pub fn union(&self, other: &Group) -> Group {
        let extra = other.world.iter().filter(|w| !self.world.contains(w));
        Group { world: self.world.iter().chain(extra).copied().collect() }
    }

    /// The members of this group that are in `other`, in this group's order
    /// (`MPI_Group_intersection`).
    pub fn intersection(&self, other: &Group) -> Group {
        Group { world: self.world.iter().filter(|w| other.world.contains(w)).copied().collect() }
    }

    /// The members of this group that are not in `other`, in this group's order
    /// (`MPI_Group_difference`).
    pub fn difference(&self, other: &Group) -> Group {
        Group { world: self.world.iter().filter(|w| !other.world.contains(w)).copied().collect() }
    }

    /// The ranks that `(first, last, stride)` triplets name, in order
    /// (`MPI_Group_range_incl`'s and `_excl`'s): `first`, `first + stride`, ... up to
    /// `last` (down to it for a negative stride).
    pub fn ranges(&self, ranges: &[(i64, i64, i64)]) -> Result<Vec<usize>, Error> {
        let mut ranks = Vec::new();
        for &(first, last, stride) in ranges {
            if stride == 0 {
                return Err(Error::Arg(format!("range {first}..{last} with a stride of 0")));
            }
            for r in [first, last] {
                if usize::try_from(r).map_or(true, |r| r >= self.size()) {
                    // MPICH's class for a range that leaves the group (MPI names none).
                    let size = self.size();
                    return Err(Error::Arg(format!("range {first}..{last} leaves the group of {size} ranks at {r}")));
                }
            }
            let mut r = first;
            while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
                ranks.push(r as usize);
                r += stride;
            }
        }
        Ok(ranks)
    }

    /// For each of `ranks` in this group, its rank in `other`, if it is a member there
    /// (`MPI_Group_translate_ranks`; `None` is `MPI_UNDEFINED`).
    pub fn translate_ranks(&self, ranks: &[usize], other: &Group) -> Result<Vec<Option<usize>>, Error> {
        ranks
            .iter()
            .map(|&r| {
                let w = *self.world.get(r).ok_or(Error::Rank { rank: r, size: self.size() })?;
                Ok(other.rank_of_world(w))
            })
            .collect()
    }
}

impl Comm {
    /// The group of this communicator (`MPI_Comm_group`): an inter-communicator's local
    /// group.
    pub fn comm_group(&self) -> Group {
        Group { world: self.group().to_vec() }
    }

    /// An inter-communicator's other group (`MPI_Comm_remote_group`); `None` for an
    /// intra-communicator.
    pub fn remote_group(&self) -> Option<Group> {
        self.is_inter().then(|| Group { world: self.peers().to_vec() })
    }

    /// A communicator of the members of `group`, which must be a subset of this
    /// communicator's group (`MPI_Comm_create`). Collective over this communicator; the
    /// members of a group pass the same group, and groups passed by different ranks are
    /// the same or disjoint (MPI-2.2's form: one call makes a communicator of each);
    /// non-members get `None`.
    ///
    /// On an inter-communicator, `group` is some of this rank's group, and the new
    /// inter-communicator joins it to the group the other side passes.
    pub fn create(&self, group: &Group) -> Result<Option<Comm>, Error> {
        let mine = self.group();
        if let Some(&w) = group.world.iter().find(|w| !mine.contains(w)) {
            return Err(Error::Other(format!("create: world rank {w} is not in this communicator")));
        }
        if let Some(local) = self.local() {
            return self.create_inter(local, &group.world);
        }
        let me_world = mine[self.rank()];
        // Disjoint groups have distinct least members: the least names the group.
        let least = group.world.iter().min().map_or(0, |&w| w as u32);
        let color = group.rank_of_world(me_world).map(|_| least);
        // Order by the group's order: the key is the rank in the group.
        let key = group.rank_of_world(me_world).map_or(0, |r| r as i32);
        self.split(color, key)
    }

    /// A communicator of the members of `group`, a subset of this communicator's group, made
    /// by its members alone (`MPI_Comm_create_group`): collective over `group`, so the other
    /// ranks need not call it; `tag` tells apart calls that could run at once. A rank outside
    /// `group` gets `None` at once.
    pub fn create_group(&self, group: &Group, tag: i32) -> Result<Option<Comm>, Error> {
        self.intra("MPI_Comm_create_group")?;
        if !(0..=crate::TAG_UB).contains(&tag) {
            return Err(Error::Tag(tag));
        }
        let mine = self.group();
        // Each member's rank here, in the group's order.
        let ranks = group
            .world
            .iter()
            .map(|w| {
                mine.iter()
                    .position(|m| m == w)
                    .ok_or_else(|| Error::Other(format!("create_group: world rank {w} is not in this communicator")))
            })
            .collect::<Result<Vec<usize>, Error>>()?;
        let Some(me) = group.rank_of_world(mine[self.rank()]) else { return Ok(None) };
        let ctx = self.agree_context_among(&ranks, me, tag)?;
        Ok(Some(Comm::new(self.rt().clone(), ctx, me, group.world.clone())))
    }
}
