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

use std::cell::Cell;
use std::rc::Rc;

use super::nonblocking::{scratch, typed, CollRequest};
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
    ctx: Rc<Cell<Option<u32>>>,
}

impl Made {
    /// The duplicate of the parent, on the agreed context.
    pub(crate) fn comm(&self) -> Result<Comm, Error> {
        let ctx =
            self.ctx.get().ok_or_else(|| Error::Other("MPI_Comm_idup: out of communicator context ids".into()))?;
        let p = &self.parent;
        Ok(match p.local() {
            Some(_) => Comm::new_inter(p.rt().clone(), ctx, p.rank(), p.group().to_vec(), p.peers().to_vec()),
            None => Comm::new(p.rt().clone(), ctx, p.rank(), p.group().to_vec()),
        })
    }
}

/// Where one agreement keeps its numbers: this member's, the reduction's, the other group's.
#[derive(Clone, Copy)]
struct Slots {
    mine: RawBufMut,
    acc: RawBufMut,
    theirs: RawBufMut,
}

impl Comm {
    /// Starts duplicating this communicator (`MPI_Comm_idup`): collective over it, and the
    /// duplicate is ready when the returned [`PendingComm`] completes.
    pub fn idup<'a>(&self, scope: &Scope<'a>) -> Result<PendingComm<'a>, Error> {
        let tag = match self.local() {
            None => self.coll_tag()?,
            Some(_) => self.next_tag(),
        };
        let (store, slots) = scratch::<u32>(3)?;
        let word = |i: usize| slots.window(4 * i, 4);
        let slots = Slots { mine: word(0), acc: word(1), theirs: word(2) };
        let ctx = Rc::new(Cell::new(None));
        let first = self.propose(slots, ctx.clone());
        let req = self.launch_tagged(scope, tag, vec![vec![first]], vec![store]);
        Ok(PendingComm { req, made: Made { parent: self.clone(), ctx } })
    }

    /// Step 1: this member's next block, and the members' largest of them.
    fn propose(&self, slots: Slots, out: Rc<Cell<Option<u32>>>) -> Step {
        let c = self.clone();
        Step::Then(Box::new(move |nb: &mut NbContexts| {
            let mut s = slots;
            typed::<u32>(&mut s.mine)[0] = nb.next;
            // Past the end of the range the proposal stays there, and the agreement fails.
            nb.next = nb.next.saturating_add(BLOCK);
            let (mut rounds, store) = c.agree::<Max>(slots);
            rounds.push(vec![c.decide(slots, out)]);
            (rounds, store)
        }))
    }

    /// Step 2: whether this member could take the agreed block, and whether all could; the
    /// duplicate's id, or step 1 again.
    fn decide(&self, slots: Slots, out: Rc<Cell<Option<u32>>>) -> Step {
        let c = self.clone();
        Step::Then(Box::new(move |nb: &mut NbContexts| {
            let mut s = slots;
            let agreed = typed::<u32>(&mut s.acc)[0];
            nb.next = nb.next.max(agreed.saturating_add(BLOCK));
            let fits = agreed.checked_add(BLOCK).is_some_and(|end| end <= super::create::SOLO_CONTEXT);
            let took = fits && nb.taken.insert(agreed);
            typed::<u32>(&mut s.mine)[0] = took as u32;
            let (mut rounds, store) = c.agree::<Min>(slots);
            let c2 = c.clone();
            rounds.push(vec![Step::Then(Box::new(move |nb: &mut NbContexts| {
                let mut s = slots;
                if typed::<u32>(&mut s.acc)[0] == 1 {
                    out.set(Some(agreed));
                    return (Vec::new(), Vec::new());
                }
                if took {
                    nb.taken.remove(&agreed);
                }
                if !fits {
                    // No block left: the request fails (its wait says so).
                    return (Vec::new(), Vec::new());
                }
                (vec![vec![c2.propose(slots, out)]], Vec::new())
            }))]);
            (rounds, store)
        }))
    }

    /// The rounds that leave at every member, in `acc`, the reduction by `O` of every
    /// member's `mine` (of both groups, on an inter-communicator).
    fn agree<O: Op<u32> + Default + 'static>(&self, slots: Slots) -> Plan {
        let Slots { mine, acc, theirs } = slots;
        let (group, inter) = match self.local() {
            Some(local) => (local, true),
            None => (self, false),
        };
        // Reduced at the group's first rank into `acc`; the scratch it needs.
        let (mut rounds, store) = group
            .reduce_rounds::<u32, O>(mine.as_read(), (group.rank() == 0).then_some(acc), O::default(), 0)
            .expect("four-byte elements");
        if inter {
            rounds = Comm::in_group(group, rounds);
            if self.rank() == 0 {
                rounds.push(vec![self.send_step(0, acc.as_read()), self.recv_step(0, theirs)]);
                let (mut a, mut t) = (acc, theirs);
                rounds.push(vec![Step::Compute(Box::new(move || {
                    let theirs = typed::<u32>(&mut t)[0];
                    O::default().apply(typed::<u32>(&mut a), &[theirs]);
                }))]);
            }
        }
        let bcast = group.bcast_rounds(acc, 0);
        rounds.extend(if inter { Comm::in_group(group, bcast) } else { bcast });
        (rounds, store)
    }
}
