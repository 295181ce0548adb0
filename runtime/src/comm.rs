//! Communicators and point-to-point communication (MPI 4.1, chapters 3 and 7).

use std::rc::Rc;
use std::sync::Arc;

use bytemuck::Pod;

use crate::buf::{RawBuf, RawBufMut};
use crate::engine::{ReqId, Staging};
use crate::error::Error;
use crate::progress::{Runtime, Shared, Started};
use crate::request::{Raw, Request, Scope};
use crate::status::Status;

/// Receive from any source (`MPI_ANY_SOURCE`).
pub const ANY_SOURCE: usize = usize::MAX;
/// Receive with any tag (`MPI_ANY_TAG`).
pub const ANY_TAG: i32 = -1;
/// Largest valid tag (`MPI_TAG_UB`). Negative tags are reserved for the runtime.
pub const TAG_UB: i32 = i32::MAX;

/// A validated receive selector: comm source, its world rank, tag (`None`: any).
type Selector = (Option<u32>, Option<usize>, Option<i32>);

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// What every communicator offers (sealed: implemented by mpr's communicator types).
pub trait Communicator: sealed::Sealed {
    /// The underlying communicator.
    fn as_comm(&self) -> &Comm;

    /// This process's rank in the communicator (`MPI_Comm_rank`).
    fn rank(&self) -> usize {
        self.as_comm().inner.rank
    }

    /// The world rank of rank `r` of this communicator (of an inter-communicator's local
    /// group, whose ranks [`Communicator::rank`] and [`Communicator::size`] tell too; its
    /// messages name ranks of the other group, [`Comm::remote_group`]).
    fn world_rank(&self, r: usize) -> Option<usize> {
        self.as_comm().inner.group.get(r).copied()
    }

    /// Number of ranks in the communicator (`MPI_Comm_size`).
    fn size(&self) -> usize {
        self.as_comm().inner.group.len()
    }
}

#[derive(Debug)]
struct CommInner {
    rt: Arc<Shared>,
    /// Context id: messages of different communicators never match. The collectives of the
    /// communicator use `ctx + 1`, so they never match its point-to-point messages either.
    ctx: u32,
    rank: usize,
    /// World rank of each rank of this communicator (an inter-communicator's local group).
    group: Rc<[usize]>,
    /// World rank of each rank a message on this communicator names as its destination or
    /// source: the group itself, or an inter-communicator's remote group.
    peers: Rc<[usize]>,
    /// An inter-communicator's local group as an intra-communicator of its own (context
    /// `ctx + 2`), for the local steps of its collectives; `None` for an intra-communicator.
    local: Option<Comm>,
    /// Collectives started so far (all ranks call them in the same order): their tag.
    coll_seq: std::cell::Cell<u32>,
    /// Windows created so far on this communicator (all ranks create them in the same order).
    win_seq: std::cell::Cell<u32>,
    /// How the ranks sit on hosts, for collectives in shared memory (made on first use).
    node: std::cell::OnceCell<Option<crate::coll::node::Plan>>,
}

/// A communicator: a group of ranks and a private context for their messages.
///
/// Cheap to clone (shared handle). Not `Send`: one thread drives communication
/// (`MPI_THREAD_FUNNELED`).
#[derive(Clone, Debug)]
pub struct Comm {
    inner: Rc<CommInner>,
}

impl sealed::Sealed for Comm {}

impl Communicator for Comm {
    fn as_comm(&self) -> &Comm {
        self
    }
}

impl Comm {
    pub(crate) fn world(rt: Arc<Shared>) -> Comm {
        let (rank, size) = {
            let r = rt.borrow();
            (r.boot.rank, r.boot.size)
        };
        Comm::new(rt, 0, rank, (0..size).collect())
    }

    pub(crate) fn new(rt: Arc<Shared>, ctx: u32, rank: usize, group: Vec<usize>) -> Comm {
        let group: Rc<[usize]> = group.into();
        Comm::with_peers(rt, ctx, rank, group.clone(), group, None)
    }

    /// An inter-communicator (MPI 4.1, section 7.6) of context `ctx` (and the next three:
    /// its collectives', then its local group's two), this rank being `rank` of `group`;
    /// its messages go to and come from the ranks of `remote`.
    pub(crate) fn new_inter(rt: Arc<Shared>, ctx: u32, rank: usize, group: Vec<usize>, remote: Vec<usize>) -> Comm {
        let group: Rc<[usize]> = group.into();
        let local = Comm::with_peers(rt.clone(), ctx + 2, rank, group.clone(), group.clone(), None);
        let c = Comm::with_peers(rt, ctx, rank, group, remote.into(), Some(local));
        // The ranks of the two groups never meet in one host's segment as one communicator.
        let _ = c.inner.node.set(None);
        c
    }

    fn with_peers(
        rt: Arc<Shared>,
        ctx: u32,
        rank: usize,
        group: Rc<[usize]>,
        peers: Rc<[usize]>,
        local: Option<Comm>,
    ) -> Comm {
        Comm {
            inner: Rc::new(CommInner {
                rt,
                ctx,
                rank,
                group,
                peers,
                local,
                coll_seq: std::cell::Cell::new(0),
                win_seq: std::cell::Cell::new(0),
                node: Default::default(),
            }),
        }
    }

    /// Whether this is an inter-communicator (`MPI_Comm_test_inter`).
    pub fn is_inter(&self) -> bool {
        self.inner.local.is_some()
    }

    /// An inter-communicator's local group as an intra-communicator; `None` for an
    /// intra-communicator.
    pub(crate) fn local(&self) -> Option<&Comm> {
        self.inner.local.as_ref()
    }

    /// The world ranks a message on this communicator names: its group, or an
    /// inter-communicator's remote group.
    pub(crate) fn peers(&self) -> &[usize] {
        &self.inner.peers
    }

    /// Fails with [`Error::Comm`] on an inter-communicator: for the operations MPI defines
    /// on intra-communicators alone (or that mpr offers on them alone).
    pub(crate) fn intra(&self, what: &str) -> Result<(), Error> {
        match self.inner.local {
            None => Ok(()),
            Some(_) => Err(Error::Comm(format!("{what} on an inter-communicator"))),
        }
    }

    pub(crate) fn rt(&self) -> &Arc<Shared> {
        &self.inner.rt
    }

    pub(crate) fn group(&self) -> &[usize] {
        &self.inner.group
    }

    /// Where this communicator's ranks meet in shared memory, if any two share a host.
    pub(crate) fn node_plan(&self) -> Option<&crate::coll::node::Plan> {
        self.inner.node.get_or_init(|| crate::coll::node::Plan::new(self)).as_ref()
    }

    /// The context of this communicator's point-to-point messages.
    pub(crate) fn context(&self) -> u32 {
        self.inner.ctx
    }

    /// The context of this communicator's collectives.
    pub(crate) fn coll_context(&self) -> u32 {
        self.inner.ctx + 1
    }

    /// The id of the next window on this communicator: the same at every rank of it, and
    /// unique in the process (contexts are).
    /// [`Error::Comm`] on an inter-communicator, which takes no windows.
    pub(crate) fn next_win_id(&self) -> Result<u64, Error> {
        self.intra("a window")?;
        let s = self.inner.win_seq.get();
        self.inner.win_seq.set(s.wrapping_add(1));
        Ok(((self.inner.ctx as u64) << 32) | s as u64)
    }

    /// The tag of the next collective on this intra-communicator; [`Error::Comm`] on an
    /// inter-communicator, whose collectives are those of `coll/inter.rs`.
    pub(crate) fn coll_tag(&self) -> Result<i32, Error> {
        self.intra("an intra-communicator's collective")?;
        Ok(self.next_tag())
    }

    /// The tag of the next collective on this communicator, whatever its kind.
    pub(crate) fn next_tag(&self) -> i32 {
        let s = self.inner.coll_seq.get();
        self.inner.coll_seq.set(s.wrapping_add(1));
        (s & TAG_UB as u32) as i32
    }

    /// Collective building block: sends `send.0` to rank `send.1` and receives into `recv.0`
    /// from rank `recv.1` (either may be absent), on the collective context with `tag`.
    /// Returns the bytes received.
    pub(crate) fn coll_xchg(
        &self,
        tag: i32,
        send: Option<(&[u8], usize)>,
        recv: Option<(&mut [u8], usize)>,
    ) -> Result<usize, Error> {
        self.coll_xchg_with(tag, send, recv, None)
    }

    /// As [`Comm::coll_xchg`], making the local copy `copy` (source, destination: a rank's own
    /// block, say) once both transfers are posted and before waiting for them, so the peer
    /// handles our request meanwhile (see [`local_copy`]).
    pub(crate) fn coll_xchg_with(
        &self,
        tag: i32,
        send: Option<(&[u8], usize)>,
        recv: Option<(&mut [u8], usize)>,
        copy: LocalCopy<'_>,
    ) -> Result<usize, Error> {
        let mut rt = self.inner.rt.borrow_mut();
        // The send goes first: a receive that matches a rendezvous message at once then
        // knows it is half of an exchange (see `Engine::start_rndv`). Nothing is polled in
        // between, so an eager message from the peer still finds the receive posted.
        let s = send.and_then(|(buf, dest)| self.post_coll_send(&mut rt, tag, buf, dest));
        let r = recv.map(|(buf, src)| self.post_coll_recv(&mut rt, tag, buf, src));
        let progress = local_copy(&mut rt, copy);
        let got = r.map(|id| rt.wait(id));
        let sent = s.map(|id| rt.wait(id));
        if let Some(e) = sent.and_then(|r| r.err()) {
            return Err(e);
        }
        let got = match got {
            Some(r) => r?.bytes,
            None => 0,
        };
        progress.map(|()| got)
    }

    /// As [`Comm::coll_xchg_with`] for many peers at once: posts every send of `sends` and
    /// every receive of `recvs` (peers by rank), makes `copy`, and waits for all of them, so
    /// each transfer moves as soon as both of its ends are in, none waiting for another to
    /// finish first (the scattered exchange of MPICH's all-to-all). Every request is waited
    /// for even if one fails; the first error is returned.
    pub(crate) fn coll_xchg_all(
        &self,
        tag: i32,
        sends: &[(&[u8], usize)],
        recvs: &mut [(&mut [u8], usize)],
        copy: LocalCopy<'_>,
    ) -> Result<(), Error> {
        let mut rt = self.inner.rt.borrow_mut();
        let mut ids: Vec<ReqId> =
            sends.iter().filter_map(|&(buf, dest)| self.post_coll_send(&mut rt, tag, buf, dest)).collect();
        ids.extend(recvs.iter_mut().map(|(buf, src)| self.post_coll_recv(&mut rt, tag, buf, *src)));
        let mut first_err = local_copy(&mut rt, copy).err();
        for id in ids {
            if let Err(e) = rt.wait(id) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Starts sending `buf` to rank `dest` on the collective context with `tag`: handed to
    /// the transport at once when it goes eagerly (no request), else a request, which the
    /// caller must wait for before `buf` is released.
    fn post_coll_send(&self, rt: &mut Runtime, tag: i32, buf: &[u8], dest: usize) -> Option<ReqId> {
        let (ctx, me, world) = (self.inner.ctx + 1, self.inner.rank as u32, self.inner.peers[dest]);
        if rt.send_now(ctx, me, tag, world, buf).unwrap_or(false) {
            return None;
        }
        // SAFETY: the caller keeps `buf` borrowed until it has waited for the request.
        let id = rt.engine.isend(ctx, me, tag, world, unsafe { RawBuf::new(buf) });
        // A transport error fails the request, which the caller's wait reports.
        rt.flush();
        Some(id)
    }

    /// Posts a receive into `buf` from rank `src` on the collective context with `tag`; the
    /// caller must wait for it before `buf` is released.
    fn post_coll_recv(&self, rt: &mut Runtime, tag: i32, buf: &mut [u8], src: usize) -> ReqId {
        // SAFETY: the caller keeps `buf` borrowed until it has waited for the request.
        let b = unsafe { RawBufMut::new(buf) };
        rt.engine.irecv(self.inner.ctx + 1, Some(src as u32), Some(tag), Some(self.inner.peers[src]), b)
    }

    /// This process's rank in the communicator (`MPI_Comm_rank`).
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Number of ranks in the communicator (`MPI_Comm_size`).
    pub fn size(&self) -> usize {
        self.inner.group.len()
    }

    fn check_dest(&self, dest: usize, tag: i32) -> Result<usize, Error> {
        if !(0..=TAG_UB).contains(&tag) {
            return Err(Error::Tag(tag));
        }
        self.inner.peers.get(dest).copied().ok_or(Error::Rank { rank: dest, size: self.inner.peers.len() })
    }

    /// Validates a receive selector: (comm source or any, world source or any, tag or any).
    fn check_src(&self, src: usize, tag: i32) -> Result<Selector, Error> {
        let tag = match tag {
            ANY_TAG => None,
            t if (0..=TAG_UB).contains(&t) => Some(t),
            t => return Err(Error::Tag(t)),
        };
        if src == ANY_SOURCE {
            return Ok((None, None, tag));
        }
        let world =
            self.inner.peers.get(src).copied().ok_or(Error::Rank { rank: src, size: self.inner.peers.len() })?;
        Ok((Some(src as u32), Some(world), tag))
    }

    /// Starts a send. Errors only on bad arguments, before the engine takes the send; once
    /// taken, the send's request is returned whatever happens to its frames, and its wait
    /// reports a transport error (which is what lets the caller's scope complete it).
    /// `blocking`: the caller waits for the send (`MPI_Send`), so a message handed over at
    /// once is also written out at once.
    fn start_send(&self, bytes: RawBuf, dest: usize, tag: i32, blocking: bool) -> Result<Started, Error> {
        let peer = self.check_dest(dest, tag)?;
        self.inner.rt.borrow_mut().isend(self.inner.ctx, self.inner.rank as u32, tag, peer, bytes, blocking)
    }

    fn start_recv(&self, bytes: RawBufMut, src: usize, tag: i32) -> Result<Started, Error> {
        let (s, peer, t) = self.check_src(src, tag)?;
        Ok(self.inner.rt.borrow_mut().irecv(self.inner.ctx, s, t, peer, bytes))
    }

    /// Sends `buf` to rank `dest` with `tag`; returns when `buf` may be reused (`MPI_Send`).
    pub fn send<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<(), Error> {
        // SAFETY: `buf` stays borrowed until the request completes: we wait for it here.
        match self.start_send(unsafe { RawBuf::new(bytemuck::cast_slice(buf)) }, dest, tag, true)? {
            Started::Done(_) => Ok(()),
            Started::Req(id) => self.inner.rt.borrow_mut().wait(id).map(|_| ()),
        }
    }

    fn start_ssend(&self, bytes: RawBuf, dest: usize, tag: i32) -> Result<ReqId, Error> {
        let peer = self.check_dest(dest, tag)?;
        Ok(self.inner.rt.borrow_mut().issend(self.inner.ctx, self.inner.rank as u32, tag, peer, bytes))
    }

    /// Sends `buf` to rank `dest` with `tag` in synchronous mode (`MPI_Ssend`): returns once
    /// a receive on `dest` has matched it (and `buf` may be reused).
    pub fn ssend<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<(), Error> {
        // SAFETY: `buf` stays borrowed until the request completes: we wait for it here.
        let id = self.start_ssend(unsafe { RawBuf::new(bytemuck::cast_slice(buf)) }, dest, tag)?;
        self.inner.rt.borrow_mut().wait(id).map(|_| ())
    }

    /// Starts a synchronous send (`MPI_Issend`); `buf` stays borrowed until the scope ends.
    pub fn issend<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        buf: &'a [T],
        dest: usize,
        tag: i32,
    ) -> Result<Request<'a>, Error> {
        // SAFETY: `buf` is borrowed for 'a, the lifetime of `scope`, which completes the request
        // before 'a ends (see request.rs).
        let id = self.start_ssend(unsafe { RawBuf::new(bytemuck::cast_slice(buf)) }, dest, tag)?;
        Ok(Request::new(&self.inner.rt, scope, id))
    }

    /// As [`Comm::isend_unscoped`], in synchronous mode (`MPI_Issend`).
    ///
    /// # Safety
    /// As [`Comm::isend_unscoped`].
    pub unsafe fn issend_unscoped<T: Pod>(
        &self,
        buf: *const T,
        count: usize,
        dest: usize,
        tag: i32,
    ) -> Result<Request<'static>, Error> {
        // SAFETY: the caller guarantees validity until completion (this function's contract).
        let id = self.start_ssend(unsafe { raw_parts(buf, count) }, dest, tag)?;
        Ok(Request::started(&self.inner.rt, None, Started::Req(id)))
    }

    /// Receives into `buf` from `src` (or [`ANY_SOURCE`]) with `tag` (or [`ANY_TAG`])
    /// (`MPI_Recv`). A message larger than `buf` is an [`Error::Truncate`].
    pub fn recv<T: Pod>(&self, buf: &mut [T], src: usize, tag: i32) -> Result<Status, Error> {
        // SAFETY: `buf` stays borrowed until the request completes: we wait for it here.
        match self.start_recv(unsafe { RawBufMut::new(bytemuck::cast_slice_mut(buf)) }, src, tag)? {
            Started::Done(st) => Ok(st),
            Started::Req(id) => self.inner.rt.borrow_mut().wait(id),
        }
    }

    /// Receives a message of any size from `src` with `tag` into a new vector.
    /// A size that is not a whole number of `T` is an [`Error::Count`].
    pub fn recv_vec<T: Pod>(&self, src: usize, tag: i32) -> Result<(Vec<T>, Status), Error> {
        let st = self.probe(src, tag)?;
        let elem = std::mem::size_of::<T>();
        let n = st.count::<T>().ok_or(Error::Count { bytes: st.bytes, elem })?;
        let mut v = vec![T::zeroed(); n];
        let st = self.recv(&mut v[..], st.source, st.tag)?;
        Ok((v, st))
    }

    /// Sends and receives in one call, without deadlock between pairs (`MPI_Sendrecv`).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<T: Pod, U: Pod>(
        &self,
        sendbuf: &[T],
        dest: usize,
        sendtag: i32,
        recvbuf: &mut [U],
        src: usize,
        recvtag: i32,
    ) -> Result<Status, Error> {
        crate::request::scope(|s| {
            let r = self.irecv(s, recvbuf, src, recvtag)?;
            let q = self.isend(s, sendbuf, dest, sendtag)?;
            let st = r.wait();
            q.wait()?;
            st
        })
    }

    /// Starts sending `buf` (`MPI_Isend`); `buf` stays borrowed until the scope ends.
    pub fn isend<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        buf: &'a [T],
        dest: usize,
        tag: i32,
    ) -> Result<Request<'a>, Error> {
        // SAFETY: `buf` is borrowed for 'a, the lifetime of `scope`, which completes the request
        // before 'a ends (see request.rs).
        let started = self.start_send(unsafe { RawBuf::new(bytemuck::cast_slice(buf)) }, dest, tag, false)?;
        Ok(Request::started(&self.inner.rt, Some(scope), started))
    }

    /// Starts receiving into `buf` (`MPI_Irecv`); `buf` stays borrowed until the scope ends.
    pub fn irecv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        buf: &'a mut [T],
        src: usize,
        tag: i32,
    ) -> Result<Request<'a>, Error> {
        // SAFETY: `buf` is borrowed for 'a, the lifetime of `scope`, which completes the request
        // before 'a ends (see request.rs).
        let started = self.start_recv(unsafe { RawBufMut::new(bytemuck::cast_slice_mut(buf)) }, src, tag)?;
        Ok(Request::started(&self.inner.rt, Some(scope), started))
    }

    /// Starts sending `count` elements at `buf` without a scope (the form a C binding or an
    /// OSU-style benchmark needs). The request must be waited for.
    ///
    /// # Safety
    /// `buf..buf+count` must be valid for reads and must not be written until the returned
    /// request has completed (waited for or tested complete), even if it is dropped.
    pub unsafe fn isend_unscoped<T: Pod>(
        &self,
        buf: *const T,
        count: usize,
        dest: usize,
        tag: i32,
    ) -> Result<Request<'static>, Error> {
        // SAFETY: the caller guarantees validity until completion (this function's contract).
        let started = self.start_send(unsafe { raw_parts(buf, count) }, dest, tag, false)?;
        Ok(Request::started(&self.inner.rt, None, started))
    }

    /// Starts receiving into `count` elements at `buf` without a scope. Several such receives
    /// may target the same memory (as MPI allows and OSU's bandwidth test does); the content
    /// is then that of whichever completes last.
    ///
    /// # Safety
    /// `buf..buf+count` must be valid for writes, and not be read or written by anything but
    /// mpr until the returned request has completed, even if it is dropped.
    pub unsafe fn irecv_unscoped<T: Pod>(
        &self,
        buf: *mut T,
        count: usize,
        src: usize,
        tag: i32,
    ) -> Result<Request<'static>, Error> {
        // SAFETY: the caller guarantees validity and exclusivity until completion.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, count * std::mem::size_of::<T>()) };
        // SAFETY: as above.
        let started = self.start_recv(unsafe { RawBufMut::new(bytes) }, src, tag)?;
        Ok(Request::started(&self.inner.rt, None, started))
    }

    /// As [`Comm::irecv_unscoped`] of `len` bytes, its request raw (the C ABI's).
    ///
    /// # Safety
    /// As [`Comm::irecv_unscoped`].
    #[inline(always)]
    pub(crate) unsafe fn irecv_raw(&self, buf: *mut u8, len: usize, src: usize, tag: i32) -> Result<Raw, Error> {
        // SAFETY: the caller guarantees validity and exclusivity until completion.
        let bytes = unsafe { RawBufMut::new(std::slice::from_raw_parts_mut(buf, len)) };
        Ok(Raw::of(self.start_recv(bytes, src, tag)?))
    }

    /// As [`Comm::isend_unscoped`] of `len` bytes, its request raw (the C ABI's).
    ///
    /// # Safety
    /// As [`Comm::isend_unscoped`].
    #[inline(always)]
    pub(crate) unsafe fn isend_raw(&self, buf: *const u8, len: usize, dest: usize, tag: i32) -> Result<Raw, Error> {
        // SAFETY: the caller guarantees validity until completion.
        Ok(Raw::of(self.start_send(unsafe { raw_parts(buf, len) }, dest, tag, false)?))
    }

    /// The runtime this communicator's operations run in.
    pub(crate) fn runtime(&self) -> &Arc<Shared> {
        &self.inner.rt
    }

    /// Starts sending `bytes`, which the engine owns until the send ends: nothing of the
    /// caller's stays borrowed (a message packed from a derived datatype, see
    /// [`crate::Layout`]). `sync`: a synchronous send (`MPI_Issend`).
    pub fn isend_owned(&self, bytes: Vec<u8>, dest: usize, tag: i32, sync: bool) -> Result<Request<'static>, Error> {
        // SAFETY: the bytes move into the request's staging below and stay there until it
        // ends (a vector's heap memory does not move with it); a send done at once was
        // copied by the transport.
        let raw = unsafe { RawBuf::new(&bytes) };
        let started = if sync {
            Started::Req(self.start_ssend(raw, dest, tag)?)
        } else {
            self.start_send(raw, dest, tag, false)?
        };
        if let Started::Req(id) = started {
            self.inner.rt.borrow_mut().engine.stage(id, Staging { bytes, unpack: None });
        }
        Ok(Request::started(&self.inner.rt, None, started))
    }

    /// Starts receiving a message of up to `len` bytes into memory the engine owns, and hands
    /// the bytes that arrived to `unpack` when the receive completes, before any wait or test
    /// reports it (a derived datatype's receive, see [`crate::Layout::unpack`]). A receive
    /// that fails hands over nothing.
    pub fn irecv_staged(
        &self,
        len: usize,
        src: usize,
        tag: i32,
        unpack: impl FnOnce(&[u8]) + 'static,
    ) -> Result<Request<'static>, Error> {
        staged(&self.inner.rt, len, unpack, |raw| self.start_recv(raw, src, tag))
    }

    /// Returns the status of a matching message without receiving it, if one has arrived
    /// (`MPI_Iprobe`).
    pub fn iprobe(&self, src: usize, tag: i32) -> Result<Option<Status>, Error> {
        let (s, _, t) = self.check_src(src, tag)?;
        let mut rt = self.inner.rt.borrow_mut();
        rt.progress()?;
        Ok(rt.engine.probe(self.inner.ctx, s, t))
    }

    /// Blocks until a matching message has arrived and returns its status (`MPI_Probe`).
    pub fn probe(&self, src: usize, tag: i32) -> Result<Status, Error> {
        let (s, world, t) = self.check_src(src, tag)?;
        let ctx = self.inner.ctx;
        let mut rt = self.inner.rt.borrow_mut();
        let mut found = None;
        // A probe of one source ends when that peer is gone, as a receive from it does.
        rt.wait_on_peer(world, |rt| {
            found = rt.engine.probe(ctx, s, t);
            found.is_some()
        })?;
        Ok(found.expect("wait_until returned on success"))
    }

    /// Blocks until a matching message has arrived and takes it out of the queue, so that
    /// only a receive of it gets its bytes (`MPI_Mprobe`; threads that probe and receive the
    /// same selector cannot take each other's messages).
    pub fn mprobe(&self, src: usize, tag: i32) -> Result<Message, Error> {
        let (s, world, t) = self.check_src(src, tag)?;
        let ctx = self.inner.ctx;
        let mut rt = self.inner.rt.borrow_mut();
        let mut found = None;
        rt.wait_on_peer(world, |rt| {
            found = rt.engine.take_matching(ctx, s, t);
            found.is_some()
        })?;
        drop(rt);
        Ok(self.message(found.expect("wait_on_peer returned on success")))
    }

    /// As [`Comm::mprobe`], if a matching message has arrived (`MPI_Improbe`).
    pub fn improbe(&self, src: usize, tag: i32) -> Result<Option<Message>, Error> {
        let (s, _, t) = self.check_src(src, tag)?;
        let mut rt = self.inner.rt.borrow_mut();
        rt.progress()?;
        let found = rt.engine.take_matching(self.inner.ctx, s, t);
        drop(rt);
        Ok(found.map(|f| self.message(f)))
    }

    fn message(&self, (key, status): (u64, Status)) -> Message {
        Message { rt: self.inner.rt.clone(), key, status, peer: self.inner.peers.get(status.source).copied() }
    }

    /// Ends the whole job with `code` (`MPI_Abort`): tells the launcher, then exits.
    pub fn abort(&self, code: i32) -> ! {
        self.abort_because(code, "MPI_Abort")
    }

    /// Ends the whole job with `code`, telling the launcher `why` (an error judged fatal).
    pub fn abort_because(&self, code: i32, why: &str) -> ! {
        self.inner.rt.borrow_mut().boot.abort(code, why);
        std::process::exit(code)
    }
}

/// A copy a collective makes on its own while its transfers are under way: `(source,
/// destination)`, of equal length.
pub(crate) type LocalCopy<'a> = Option<(&'a [u8], &'a mut [u8])>;

/// Local copies larger than this go in pieces of this size, with a round of progress after
/// each, so a peer's request that arrives meanwhile is answered at once (its bytes then move
/// while we copy) instead of after the whole copy.
const COPY_PIECE: usize = 128 << 10;

/// Makes `copy` in pieces, progressing between them. An error from progress ends the
/// progressing (the copy is still made whole) and is returned, after the copy.
fn local_copy(rt: &mut Runtime, copy: LocalCopy<'_>) -> Result<(), Error> {
    let Some((src, dst)) = copy else { return Ok(()) };
    assert_eq!(src.len(), dst.len(), "a local copy between buffers of different lengths");
    let mut result = Ok(());
    let mut pieces = dst.chunks_mut(COPY_PIECE).zip(src.chunks(COPY_PIECE)).peekable();
    while let Some((d, s)) = pieces.next() {
        crate::copy::copy(d, s);
        if pieces.peek().is_some() && result.is_ok() {
            result = rt.progress().map(|_| ());
        }
    }
    result
}

/// `count` elements at `buf` as the engine's view of a send buffer.
///
/// # Safety
/// `buf..buf+count` is valid for reads until the operation using the view has completed.
unsafe fn raw_parts<T: Pod>(buf: *const T, count: usize) -> RawBuf {
    // SAFETY: this function's contract.
    unsafe { RawBuf::new(std::slice::from_raw_parts(buf.cast::<u8>(), count * std::mem::size_of::<T>())) }
}

/// A message a matching probe took out of the queue ([`Comm::mprobe`]): only a receive of
/// it gets its bytes. Dropped without one, the message is lost.
#[must_use = "a matched message is received by Message::recv (or an irecv)"]
#[derive(Debug)]
pub struct Message {
    rt: Arc<Shared>,
    key: u64,
    status: Status,
    /// The sender's world rank (for liveness).
    peer: Option<usize>,
}

impl Message {
    /// Its source, tag and size.
    pub fn status(&self) -> Status {
        self.status
    }

    fn start(self, buf: RawBufMut) -> Started {
        let mut rt = self.rt.borrow_mut();
        rt.engine.receive_matched(self.key, self.peer, buf, true).expect("a message is received once (it moves)")
    }

    /// Receives the message into `buf` (`MPI_Mrecv`); one larger than `buf` is an
    /// [`Error::Truncate`].
    pub fn recv<T: Pod>(self, buf: &mut [T]) -> Result<Status, Error> {
        let rt = self.rt.clone();
        // SAFETY: `buf` stays borrowed until the request completes: we wait for it here.
        match self.start(unsafe { RawBufMut::new(bytemuck::cast_slice_mut(buf)) }) {
            Started::Done(st) => Ok(st),
            Started::Req(id) => rt.borrow_mut().wait(id),
        }
    }

    /// Starts receiving the message into `count` elements at `buf` (`MPI_Imrecv`).
    ///
    /// # Safety
    /// As [`Comm::irecv_unscoped`].
    pub unsafe fn irecv_unscoped<T: Pod>(self, buf: *mut T, count: usize) -> Result<Request<'static>, Error> {
        let rt = self.rt.clone();
        // SAFETY: the caller guarantees validity and exclusivity until completion.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, count * std::mem::size_of::<T>()) };
        // SAFETY: as above.
        Ok(Request::started(&rt, None, self.start(unsafe { RawBufMut::new(bytes) })))
    }

    /// As [`Comm::irecv_staged`], for this message.
    pub fn irecv_staged(self, len: usize, unpack: impl FnOnce(&[u8]) + 'static) -> Result<Request<'static>, Error> {
        let rt = self.rt.clone();
        staged(&rt, len, unpack, |raw| Ok(self.start(raw)))
    }
}

/// Starts a receive (`start`) of up to `len` bytes into memory its request owns, handed to
/// `unpack` when it completes ([`Comm::irecv_staged`]).
fn staged(
    rt: &Arc<Shared>,
    len: usize,
    unpack: impl FnOnce(&[u8]) + 'static,
    start: impl FnOnce(RawBufMut) -> Result<Started, Error>,
) -> Result<Request<'static>, Error> {
    let mut bytes = vec![0u8; len];
    // SAFETY: the bytes move into the request's staging below and stay there until it
    // ends (a vector's heap memory does not move with it); nothing else touches them.
    let started = start(unsafe { RawBufMut::new(&mut bytes) })?;
    match started {
        Started::Done(st) => unpack(&bytes[..st.bytes.min(len)]),
        Started::Req(id) => rt.borrow_mut().engine.stage(id, Staging { bytes, unpack: Some(Box::new(unpack)) }),
    }
    Ok(Request::started(rt, None, started))
}
