//! Schedules: nonblocking collectives as rounds of point-to-point operations and local
//! computations, advanced by the progress engine (so they move on inside any wait, as MPI's
//! progress rule requires), not only inside their own `wait`.
//!
//! A round starts its sends and receives after running its computations; the next round
//! starts only when every operation of the current one has completed. Buffers travel as raw
//! views under the same contract as point-to-point requests (the scope keeps them alive);
//! scratch space belongs to the schedule itself.

use std::collections::VecDeque;

use super::idup::NbContexts;
use crate::buf::{RawBuf, RawBufMut};
use crate::engine::{Engine, ReqId};
use crate::error::Error;

/// One thing a round does.
pub(crate) enum Step {
    /// Send `buf` to world rank `peer` on context `ctx`.
    Send { ctx: u32, peer: usize, buf: RawBuf },
    /// Receive into `buf` from communicator rank `src` (world rank `peer`) on context `ctx`.
    Recv { ctx: u32, peer: usize, src: u32, buf: RawBufMut },
    /// A local computation (a reduction or a copy), run before the round's messages.
    Compute(Box<dyn FnMut()>),
    /// A computation that decides what follows (an agreement that may have to run again):
    /// run before the round's messages, with this process's contexts of the nonblocking
    /// agreements (coll/idup.rs); the rounds it returns run next, with the scratch they
    /// point into. An error ends the schedule with it.
    Then(Decide),
}

/// Rounds and the scratch their steps point into.
pub(crate) type Plan = (Vec<Vec<Step>>, Vec<Vec<u64>>);

/// What a [`Step::Then`] runs.
pub(crate) type Decide = Box<dyn FnOnce(&mut NbContexts) -> Result<Plan, Error>>;

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Send { peer, buf, .. } => write!(f, "Send({peer}, {} B)", buf.len()),
            Step::Recv { peer, buf, .. } => write!(f, "Recv({peer}, {} B)", buf.len()),
            Step::Compute(_) => f.write_str("Compute"),
            Step::Then(_) => f.write_str("Then"),
        }
    }
}

/// What a schedule sends in place of `buf` once one of its receives did not fit: one byte
/// less (one byte if `buf` is empty), which the ranks it goes to cannot expect, so they
/// report the mismatch too (as `algo::marker` for the blocking collectives).
fn marker(buf: RawBuf) -> RawBuf {
    static ONE: [u8; 1] = [0];
    match buf.len() {
        // SAFETY: a static, never written.
        0 => unsafe { RawBuf::new(&ONE) },
        n => buf.slice(0, n - 1),
    }
}

/// A collective in flight.
#[derive(Debug)]
pub(crate) struct Sched {
    me: u32,
    tag: i32,
    rounds: VecDeque<Vec<Step>>,
    pending: Vec<ReqId>,
    /// The receives among `pending`, with the bytes each is due and its sender (comm rank).
    due: Vec<(ReqId, usize, u32)>,
    /// Scratch memory the steps point into (freed with the schedule).
    scratch: Vec<Vec<u64>>,
    /// The first operation of the schedule that failed.
    failed: Option<Error>,
    pub(crate) result: Option<Result<(), Error>>,
}

impl Sched {
    /// A schedule as communicator rank `me` (its rank in its own group, on an
    /// inter-communicator), with `tag`; each message names its context.
    pub(crate) fn new(me: u32, tag: i32, rounds: Vec<Vec<Step>>, scratch: Vec<Vec<u64>>) -> Sched {
        Sched {
            me,
            tag,
            rounds: rounds.into(),
            pending: Vec::new(),
            due: Vec::new(),
            scratch,
            failed: None,
            result: None,
        }
    }

    /// Moves the schedule on as far as completed operations allow; returns whether it did
    /// anything. `nb` is this process's contexts of the nonblocking agreements, for the
    /// steps that decide ([`Step::Then`]).
    pub(crate) fn advance(&mut self, engine: &mut Engine, nb: &mut NbContexts) -> bool {
        let mut moved = false;
        while self.result.is_none() {
            if !self.pending.iter().all(|&id| engine.is_done(id)) {
                return moved;
            }
            // A message that did not fit (truncated), or that was shorter than its buffer
            // (every receive of a collective is due a whole buffer: the ranks' counts
            // differ), does not stop the schedule: the ranks that wait for what this one
            // sends next (a tree's children, a group waiting for its leader) would wait for
            // ever. It runs on, and reports the first error when it ends. A broken path stops
            // it at once: what follows would wait for peers that may never send.
            // `due` lists the receives in the order of `pending`.
            let mut due = std::mem::take(&mut self.due).into_iter().peekable();
            for id in self.pending.drain(..) {
                let recv = due.next_if(|d| d.0 == id);
                let Some(r) = engine.take(id) else { continue };
                let r = match recv {
                    Some((_, buffer, from)) => super::algo::received(r.map(|st| st.bytes), buffer, from as usize),
                    None => r.map(|_| None),
                };
                match r {
                    Ok(None) => {}
                    Ok(Some(e)) => {
                        self.failed.get_or_insert(e);
                    }
                    Err(e) => {
                        self.result = Some(Err(e));
                    }
                }
            }
            if self.result.is_some() {
                break;
            }
            let Some(round) = self.rounds.pop_front() else {
                self.result = Some(self.failed.take().map_or(Ok(()), Err));
                break;
            };
            moved = true;
            let mut next: Vec<Vec<Step>> = Vec::new();
            for step in round {
                match step {
                    Step::Compute(mut f) => f(),
                    Step::Then(f) => match f(nb) {
                        Ok((rounds, scratch)) => {
                            next.extend(rounds);
                            self.scratch.extend(scratch);
                        }
                        Err(e) => {
                            self.rounds.clear();
                            self.result = Some(Err(e));
                        }
                    },
                    Step::Send { ctx, peer, buf } => {
                        let buf = if self.failed.is_some() { marker(buf) } else { buf };
                        self.pending.push(engine.isend(ctx, self.me, self.tag, peer, buf))
                    }
                    Step::Recv { ctx, peer, src, buf } => {
                        let len = buf.len();
                        let id = engine.irecv(ctx, Some(src), Some(self.tag), Some(peer), buf);
                        self.pending.push(id);
                        self.due.push((id, len, src));
                    }
                }
            }
            for r in next.into_iter().rev() {
                self.rounds.push_front(r);
            }
        }
        moved
    }

    /// The operations of the current round.
    pub(crate) fn pending(&self) -> &[ReqId] {
        &self.pending
    }

    /// Whether operations of this schedule are still in the engine.
    pub(crate) fn in_flight(&self, engine: &Engine) -> bool {
        self.pending.iter().any(|&id| !engine.is_done(id))
    }

    /// Fails the schedule: collects the operations of its round that are done, and returns
    /// the ones still in flight, for the caller to fail.
    pub(crate) fn fail(&mut self, engine: &mut Engine, err: Error) -> Vec<ReqId> {
        self.rounds.clear();
        self.result = Some(Err(err));
        self.due.clear();
        let mut live = std::mem::take(&mut self.pending);
        live.retain(|&id| engine.take(id).is_none() && !engine.is_collected(id));
        live
    }
}
