//! Request table: generation-checked handles to the state machines of in-flight operations.

use slab::Slab;

use crate::buf::{RawBuf, RawBufMut};
use crate::error::Error;
use crate::status::Status;

/// Handle of a request in the engine. Generation-checked: a stale handle never aliases a
/// newer request that reuses the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ReqId {
    key: u32,
    gen: u32,
}

impl ReqId {
    /// The 64-bit form carried in frames.
    pub(crate) fn to_wire(self) -> u64 {
        ((self.gen as u64) << 32) | self.key as u64
    }

    pub(crate) fn from_wire(v: u64) -> ReqId {
        ReqId { key: v as u32, gen: (v >> 32) as u32 }
    }

    /// The request's slot: small and dense, unique among the requests not yet collected
    /// (the C ABI names its requests by it, keeping the whole id beside).
    pub(crate) fn index(self) -> usize {
        self.key as usize
    }
}

/// Where a request stands.
#[derive(Debug)]
pub(crate) enum State {
    /// An eager send whose frame has not yet been taken by the transport.
    SendEager { peer: usize },
    /// A rendezvous send: its buffer is in use until the receiver's `Fin`. `exposed`: its
    /// address went to the peer, which may read it directly; `key`: the transport's
    /// registration that lets it, to be released when the send ends; `head`: bytes that
    /// went with the `Rts`.
    SendRndv { peer: usize, buf: RawBuf, exposed: bool, key: Option<u64>, head: usize },
    /// A large send to self, parked in the unexpected queue until a receive matches it.
    SendSelf { buf: RawBuf },
    /// A posted receive; `peer` is the world rank of a specific source.
    RecvPosted { buf: RawBufMut, peer: Option<usize> },
    /// A matched rendezvous receive whose bytes are arriving (`got` so far). `exposed`: its
    /// address went to the peer, which may write it directly. `sreq`: the sender's request,
    /// told when all is in; `None` for an eager message the transport places straight into
    /// the buffer (nobody waits on the sending side).
    RecvRndv { buf: RawBufMut, peer: usize, got: usize, status: Status, sreq: Option<u64>, exposed: bool },
    /// A one-sided operation whose answer `peer` sends into `buf` (`got` bytes so far).
    RmaAnswer { peer: usize, buf: RawBufMut, got: usize },
    /// A one-sided transfer the transport does without the peer's CPU (RDMA WRITE or READ);
    /// a read lands in `buf`.
    RmaRemote { peer: usize, buf: RawBufMut },
    /// Finished; waiting for its owner to collect the result.
    Done(Result<Status, Error>),
}

impl State {
    /// The world rank this request waits on, if it waits on one peer alone.
    pub(crate) fn peer(&self) -> Option<usize> {
        match *self {
            State::SendEager { peer }
            | State::SendRndv { peer, .. }
            | State::RecvRndv { peer, .. }
            | State::RmaAnswer { peer, .. }
            | State::RmaRemote { peer, .. } => Some(peer),
            State::RecvPosted { peer, .. } => peer,
            State::SendSelf { .. } | State::Done(_) => None,
        }
    }
}

/// What a staged receive runs on the bytes that arrived.
pub(crate) type Unpack = Box<dyn FnOnce(&[u8])>;

/// Memory a request owns beside its state: the packed bytes of a send (the engine sends
/// from them until the send ends), or the bytes a receive lands in, handed to `unpack` when
/// it completes (a derived datatype's layout; the layout module's hooks).
pub(crate) struct Staging {
    pub(crate) bytes: Vec<u8>,
    pub(crate) unpack: Option<Unpack>,
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging").field("bytes", &self.bytes.len()).field("unpack", &self.unpack.is_some()).finish()
    }
}

impl Staging {
    /// The receive ended with `result`: its bytes go where they belong.
    fn finish(self, result: &Result<Status, Error>) {
        if let (Ok(st), Some(unpack)) = (result, self.unpack) {
            unpack(&self.bytes[..st.bytes.min(self.bytes.len())]);
        }
    }
}

#[derive(Debug)]
struct Slot {
    gen: u32,
    state: State,
    staging: Option<Box<Staging>>,
    /// Nobody will collect the result (`MPI_Request_free`, a one-sided write whose bytes
    /// the transport copied at the start): the slot goes when the request ends.
    detached: bool,
}

/// All live requests of one engine.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    slots: Slab<Slot>,
    next_gen: u32,
}

impl Requests {
    #[inline]
    pub(crate) fn insert(&mut self, state: State) -> ReqId {
        self.next_gen = self.next_gen.wrapping_add(1);
        let gen = self.next_gen;
        let key = self.slots.insert(Slot { gen, state, detached: false, staging: None }) as u32;
        ReqId { key, gen }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: ReqId) -> Option<&mut State> {
        match self.slots.get_mut(id.key as usize) {
            Some(s) if s.gen == id.gen => Some(&mut s.state),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn get(&self, id: ReqId) -> Option<&State> {
        match self.slots.get(id.key as usize) {
            Some(s) if s.gen == id.gen => Some(&s.state),
            _ => None,
        }
    }

    /// Moves the request to `Done(result)`; a detached one is gone instead.
    #[inline(always)]
    pub(crate) fn complete(&mut self, id: ReqId, result: Result<Status, Error>) {
        match self.slots.get_mut(id.key as usize) {
            Some(s) if s.gen == id.gen => {
                if let Some(staging) = s.staging.take() {
                    staging.finish(&result);
                }
                if s.detached {
                    self.slots.remove(id.key as usize);
                } else {
                    s.state = State::Done(result);
                }
            }
            _ => {}
        }
    }

    /// Gives request `id` the memory it works from ([`Staging`]); one that has completed
    /// already (into that memory) unpacks now.
    pub(crate) fn stage(&mut self, id: ReqId, staging: Staging) {
        match self.slots.get_mut(id.key as usize) {
            Some(s) if s.gen == id.gen => match &s.state {
                State::Done(result) => staging.finish(result),
                _ => s.staging = Some(Box::new(staging)),
            },
            _ => {}
        }
    }

    /// Nobody will collect request `id`: dropped now if done, else when it ends.
    pub(crate) fn detach(&mut self, id: ReqId) {
        if self.take_done(id).is_none() {
            if let Some(s) = self.slots.get_mut(id.key as usize).filter(|s| s.gen == id.gen) {
                s.detached = true;
            }
        }
    }

    /// Takes the result of a finished request and frees its slot.
    #[inline]
    pub(crate) fn take_done(&mut self, id: ReqId) -> Option<Result<Status, Error>> {
        if !matches!(self.get(id), Some(State::Done(_))) {
            return None;
        }
        match self.slots.remove(id.key as usize).state {
            State::Done(r) => Some(r),
            _ => unreachable!("checked above"),
        }
    }

    /// Whether a rendezvous send to `peer` is in flight (a scan of the live requests).
    pub(crate) fn sending_to(&self, peer: usize) -> bool {
        self.any(|s| matches!(*s, State::SendRndv { peer: p, .. } if p == peer))
    }

    /// Whether a rendezvous receive from `peer` is in flight (a scan of the live requests).
    pub(crate) fn receiving_from(&self, peer: usize) -> bool {
        self.any(|s| matches!(*s, State::RecvRndv { peer: p, .. } if p == peer))
    }

    /// The requests whose state satisfies `f` (a scan of the live requests).
    pub(crate) fn ids_where(&self, f: impl Fn(&State) -> bool) -> Vec<ReqId> {
        self.slots.iter().filter(|(_, s)| f(&s.state)).map(|(key, s)| ReqId { key: key as u32, gen: s.gen }).collect()
    }

    fn any(&self, f: impl Fn(&State) -> bool) -> bool {
        self.slots.iter().any(|(_, s)| f(&s.state))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}
