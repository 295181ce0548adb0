//! Nonblocking duplication (`MPI_Comm_idup`, MPI 4.1 section 7.4.2): the members agree on a
//! context id in a schedule, while each of them goes on with other calls, which may make
//! communicators of their own meanwhile.
//!
//! The blocking calls agree on the largest next free id of the members (create.rs), which
//! holds because nothing else hands out an id while one of them runs. A schedule's
//! agreement is spread out in time, so it takes ids of a range of its own (from
//! [`NB_CONTEXTS`] up; the blocking calls stay below), in blocks of [`BLOCK`], and agrees in
//! two steps, again until both succeed:
//! 1. each member proposes its next block, which no other agreement of its proposes again,
//!    and the members agree on the largest proposal;
//! 2. each member takes that block unless another of its agreements took it first, and the
//!    members agree whether all could. If one could not, those that took it give it back,
//!    and all start again.
//!
//! The proposals of one member's agreements rise in the order the program started them,
//! which is the same order at every member of a communicator: two agreements in flight on
//! one communicator agree on different blocks, whichever decides first. Agreements on
//! different communicators may meet on one block at a member they share; the second to
//! decide there starts again, above it. Each step's messages are a reduction to the first
//! rank and a broadcast back (both binomial trees); on an inter-communicator, a reduction
//! within each group, the leaders' swap, and a broadcast within each group, so that both
//! groups agree.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::nonblocking::{scratch, typed, CollRequest, Lane};
use super::op::{Max, Min, Op};
use super::sched::{Plan, Step};
use crate::buf::RawBufMut;
use crate::comm::Comm;
use crate::error::Error;
use crate::request::Scope;

/// The first context id the nonblocking agreements hand out.
pub(crate) const NB_CONTEXTS: u32 = 1 << 31;

/// The ids one agreement takes: enough for an inter-communicator (its own two and its
/// local group's two); an intra-communicator uses the first two.
const BLOCK: u32 = super::inter::INTER_IDS;

/// One process's blocks of the nonblocking agreements.
#[derive(Debug)]
pub(crate) struct NbContexts {
    /// The next block this process proposes: above every block it proposed or saw agreed.
    next: u32,
    /// The blocks this process took.
    taken: std::collections::HashSet<u32>,
}

impl Default for NbContexts {
    fn default() -> NbContexts {
        NbContexts { next: NB_CONTEXTS, taken: Default::default() }
    }
}

/// A duplicate in the making ([`Comm::idup`]): the request of its agreement, and the
/// communicator once it completes.
/// A duplicate in the making ([`Comm::idup`]): the request of its agreement, and the
/// communicator once it completes.
#[must_use = "a duplication must be waited for"]
#[derive(Debug)]
pub struct PendingComm<'a> {
    req: CollRequest<'a>,
    made: Made,
}

impl<'a> PendingComm<'a> {
    /// Waits for the agreement; the duplicate.
    pub fn wait(self) -> Result<Comm, Error> {
        self.req.wait()?;
        self.made.comm()
    }

    /// The agreement's request and what makes the duplicate once it has completed: apart,
    /// for a caller that keeps the request in a table of its own (the C ABI's).
    pub(crate) fn into_parts(self) -> (CollRequest<'a>, Made) {
        (self.req, self.made)
    }
}

/// What makes a duplicate once its agreement has completed.
#[derive(Debug)]
pub(crate) struct Made {
    parent: Comm,
    /// The agreed context, written by the schedule (0 until then: no block starts there).
    ctx: Arc<AtomicU32>,
}

impl Made {
    /// The duplicate of the parent, on the agreed context.
    pub(crate) fn comm(&self) -> Result<Comm, Error> {
        let ctx = match self.ctx.load(Ordering::Acquire) {
            0 => return Err(Error::Other("MPI_Comm_idup: the agreement has not completed".into())),
            c => c,
        };
        let p = &self.parent;
        Ok(match p.local() {
            Some(_) => Comm::new_inter(p.rt().clone(), ctx, p.rank(), p.group().to_vec(), p.peers().to_vec()),
            None => Comm::new(p.rt().clone(), ctx, p.rank(), p.group().to_vec()),
        })
    }
}

/// One agreement, as its steps keep it: plain data, no communicator (see [`Lane`]).
#[derive(Clone)]
struct Agreement {
    /// The members of this rank's group, on the context of the group's steps.
    group: Lane<Arc<[usize]>>,
    /// On an inter-communicator, the other group, on the context of the leaders' swap.
    other: Option<Lane<Arc<[usize]>>>,
    /// This member's number, the reduction's, the other group's.
    mine: RawBufMut,
    acc: RawBufMut,
    theirs: RawBufMut,
    /// Where the agreed context goes.
    out: Arc<AtomicU32>,
    /// A spread of the proposals of this agreement's second and later tries, in blocks,
    /// told apart from other agreements' (the parent's context): two agreements that keep
    /// meeting on one block at two members that started them in opposite orders part.
    spread: u32,
}

impl Comm {
    /// Starts duplicating this communicator (`MPI_Comm_idup`): collective over it, and the
    /// duplicate is ready when the returned [`PendingComm`] completes.
    pub fn idup<'a>(&self, scope: &Scope<'a>) -> Result<PendingComm<'a>, Error> {
        let (tag, group, other) = match self.local() {
            None => (self.coll_tag()?, owned(self.lane()), None),
            Some(local) => {
                let group = owned(Comm::in_group(local));
                (self.next_tag(), group, Some(owned(self.lane())))
            }
        };
        let (store, slots) = scratch::<u32>(3)?;
        let word = |i: usize| slots.window(4 * i, 4);
        let out = Arc::new(AtomicU32::new(0));
        let spread = self.context() / 2 % 7 + 1;
        let a = Agreement { group, other, mine: word(0), acc: word(1), theirs: word(2), out: out.clone(), spread };
        let req = self.launch_tagged(scope, tag, vec![vec![a.propose(0)]], vec![store]);
        Ok(PendingComm { req, made: Made { parent: self.clone(), ctx: out } })
    }
}

/// A lane that owns its ranks.
fn owned(l: Lane<&[usize]>) -> Lane<Arc<[usize]>> {
    Lane { ctx: l.ctx, rank: l.rank, peers: l.peers.into() }
}

impl Agreement {
    /// Step 1 of try `tries`: this member's next block, and the members' largest of them.
    fn propose(self, tries: u32) -> Step {
        Step::Then(Box::new(move |nb: &mut NbContexts| {
            let mut a = self.clone();
            if tries > 0 {
                nb.next = nb.next.saturating_add(BLOCK * (self.spread * tries % 8));
            }
            typed::<u32>(&mut a.mine)[0] = nb.next;
            // Past the end of the range the proposal stays there, and the agreement fails.
            nb.next = nb.next.saturating_add(BLOCK);
            let (mut rounds, store) = a.agree::<Max>()?;
            rounds.push(vec![self.decide(tries)]);
            Ok((rounds, store))
        }))
    }

    /// Step 2: whether this member could take the agreed block, and whether all could; the
    /// duplicate's id, or step 1 again.
    fn decide(self, tries: u32) -> Step {
        Step::Then(Box::new(move |nb: &mut NbContexts| {
            let mut a = self.clone();
            let agreed = typed::<u32>(&mut a.acc)[0];
            nb.next = nb.next.max(agreed.saturating_add(BLOCK));
            let fits = agreed.checked_add(BLOCK).is_some_and(|end| end <= super::create::SOLO_CONTEXT);
            let took = fits && nb.taken.insert(agreed);
            typed::<u32>(&mut a.mine)[0] = took as u32;
            let (mut rounds, store) = a.agree::<Min>()?;
            rounds.push(vec![Step::Then(Box::new(move |nb: &mut NbContexts| {
                let mut a = self;
                if typed::<u32>(&mut a.acc)[0] == 1 {
                    a.out.store(agreed, Ordering::Release);
                    return Ok((Vec::new(), Vec::new()));
                }
                if took {
                    nb.taken.remove(&agreed);
                }
                if !fits {
                    return Err(Error::Other("MPI_Comm_idup: out of communicator context ids".into()));
                }
                Ok((vec![vec![a.propose(tries + 1)]], Vec::new()))
            }))]);
            Ok((rounds, store))
        }))
    }

    /// The rounds that leave at every member, in `acc`, the reduction by `O` of every
    /// member's `mine` (of both groups, on an inter-communicator).
    fn agree<O: Op<u32> + Default + 'static>(&self) -> Result<Plan, Error> {
        let (mine, acc, theirs, g) = (self.mine, self.acc, self.theirs, &self.group);
        // Reduced at the group's first rank into `acc`.
        let (mut rounds, store) =
            g.reduce_rounds::<u32, O>(mine.as_read(), (g.rank == 0).then_some(acc), O::default(), 0)?;
        if let Some(other) = self.other.as_ref().filter(|_| g.rank == 0) {
            rounds.push(vec![other.send_step(0, acc.as_read()), other.recv_step(0, theirs)]);
            let (mut a, mut t) = (acc, theirs);
            rounds.push(vec![Step::Compute(Box::new(move || {
                let theirs = typed::<u32>(&mut t)[0];
                O::default().apply(typed::<u32>(&mut a), &[theirs]);
            }))]);
        }
        rounds.extend(g.bcast_rounds(acc, 0));
        Ok((rounds, store))
    }
}
