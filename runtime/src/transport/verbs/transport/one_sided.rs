//! One-sided transfers of windows on RC queue pairs: RDMA WRITE and READ into memory a peer
//! registered once for the window's life (`register_region`), started by `start_remote`
//! and finished through `poll` (see `Transport::start_remote`). The target's CPU takes no
//! part.
//!
//! - The origin's bytes: a transfer of at most `SLOT` bytes goes through a slot of a staging
//!   region registered once per device (a write's bytes are copied in at the start, so the
//!   caller's buffer is free at once; a read's are handed to the sink at the end). A larger
//!   one, or one that finds every slot taken, registers the caller's buffer for its
//!   duration: one registration per large transfer, never per window access of the target.
//! - Pieces of at most `READ_PIECE` bytes, as many in flight as the send queue takes while
//!   it keeps room for the link's frames and acknowledgements. What does not fit waits, in
//!   order, and later polls post it as completions free the queue.
//! - RC completes a WRITE once the responder acknowledged it, so its bytes are in the
//!   target's memory: the end of a transfer is its completion at the target, as a flush
//!   needs. A failed completion leaves the queue pair in the error state: the link is dead,
//!   and every transfer on it ends with the error.

use std::collections::VecDeque;

use slab::Slab;

use super::{Pinned, VerbsTransport, READ_PIECE};
use crate::error::Error;
use crate::transport::verbs::provider::{Completion, Mr, Remote, Sge, WcStatus};
use crate::transport::{FrameSink, RemoteOp};

/// Marks a one-sided transfer's work requests (the rest of the `buf` half: its key).
pub(super) const REMOTE_TAG: usize = 0x4000_0000;
/// Bytes of one staging slot, and slots per device.
const SLOT: usize = 16 << 10;
const SLOTS: usize = 32;
/// Send work requests a link keeps for its frames and acknowledgements.
const KEEP_WR: usize = 4;

/// A staging region of one device.
#[derive(Debug)]
struct Stage {
    mem: Pinned,
    mr: Mr,
    free: Vec<usize>,
}

/// A device's staging region, made at its first transfer.
#[derive(Debug, Default)]
enum Staging {
    #[default]
    NotYet,
    /// The device refused the registration: transfers register their own buffers.
    Refused,
    Ready(Stage),
}

/// Where a transfer's local bytes are, as the device sees them.
#[derive(Debug)]
enum Local {
    /// In staging slot `slot` of the link's device.
    Slot(usize),
    /// The caller's buffer, registered for this transfer.
    Own(Mr),
}

#[derive(Debug)]
struct Xfer {
    token: u64,
    peer: usize,
    link: usize,
    read: bool,
    /// Address of the local bytes the device uses, and their key.
    addr: u64,
    lkey: u32,
    local: Local,
    len: usize,
    remote: Remote,
    /// Bytes posted so far, and work requests not yet completed.
    posted: usize,
    out: usize,
    failed: Option<String>,
}

/// The one-sided transfers of a transport.
#[derive(Debug, Default)]
pub(super) struct OneSided {
    xfers: Slab<Xfer>,
    /// Transfers with bytes not yet posted, oldest first.
    queue: VecDeque<usize>,
    /// Transfers that are over (every piece completed, or failed with none in flight), to
    /// report at the next poll.
    over: Vec<usize>,
    /// Per device: its staging region.
    stage: Vec<Staging>,
    /// Writes and reads finished, and their bytes (for the verbose end line).
    pub(super) done: (u64, u64, u64),
}

impl VerbsTransport {
    /// Whether `peer` is reached by a queue pair with RDMA WRITE and READ.
    pub(super) fn remote_link(&self, peer: usize) -> Option<usize> {
        self.link_of(peer).filter(|_| self.caps.rc && self.caps.rdma_read && self.caps.rdma_write)
    }

    /// See [`crate::transport::Transport::start_remote`].
    ///
    /// # Safety
    /// Its contract.
    pub(super) unsafe fn remote_start(
        &mut self,
        peer: usize,
        op: RemoteOp,
        addr: u64,
        key: u64,
        token: u64,
    ) -> Result<bool, Error> {
        let Some(link) = self.remote_link(peer) else {
            return Err(Error::Transport(format!("RDMA transport to rank {peer} has no one-sided access")));
        };
        if let Some(why) = &self.links[link].dead {
            return Err(Error::PeerGone { rank: peer, detail: why.clone() });
        }
        let (read, ptr, len) = match op {
            RemoteOp::Write(b) => (false, b.addr(), b.len()),
            RemoteOp::Read(b) => (true, b.addr_at(0), b.len()),
        };
        let d = self.links[link].dev;
        let (local, at, lkey) = match self.stage_slot(d, len) {
            Some((slot, at, lkey)) => {
                if !read {
                    // SAFETY: the caller's buffer is valid for `len` bytes (the contract),
                    // and the slot holds `SLOT >= len` bytes the device does not use now.
                    unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, at as *mut u8, len) };
                }
                (Local::Slot(slot), at, lkey)
            }
            None => {
                let (start, n) = self.span(ptr, len);
                // SAFETY: the contract keeps the buffer valid until the transfer ends, when
                // `finish` deregisters it.
                let mr = unsafe { self.devs[d].register(start as *mut u8, n) }.map_err(|e| {
                    Error::Transport(format!("one-sided transfer with rank {peer}: registering the local buffer: {e}"))
                })?;
                (Local::Own(mr), ptr, mr.lkey)
            }
        };
        let copied = !read && matches!(local, Local::Slot(_));
        let remote = Remote { addr, rkey: key as u32 };
        let x = Xfer { token, peer, link, read, addr: at, lkey, local, len, remote, posted: 0, out: 0, failed: None };
        let k = self.os.xfers.insert(x);
        self.os.queue.push_back(k);
        self.remote_pump();
        Ok(copied)
    }

    /// A free staging slot of device `d` for `len` bytes: (slot, its address, its key).
    fn stage_slot(&mut self, d: usize, len: usize) -> Option<(usize, u64, u32)> {
        if len > SLOT {
            return None;
        }
        if self.os.stage.len() <= d {
            self.os.stage.resize_with(d + 1, Staging::default);
        }
        if let Staging::NotYet = self.os.stage[d] {
            let mem = Pinned::new(SLOT * SLOTS, self.caps.align.max(4096));
            // SAFETY: `mem` lives in the stage until the transport's drop, which deregisters
            // the region first.
            self.os.stage[d] = match unsafe { self.devs[d].register(mem.ptr.as_ptr(), mem.layout.size()) } {
                Ok(mr) => Staging::Ready(Stage { mem, mr, free: (0..SLOTS).rev().collect() }),
                Err(_) => Staging::Refused,
            };
        }
        let Staging::Ready(s) = &mut self.os.stage[d] else { return None };
        let slot = s.free.pop()?;
        Some((slot, s.mem.addr() + (slot * SLOT) as u64, s.mr.lkey))
    }

    /// Posts what the send queues take of the waiting transfers, oldest first.
    pub(super) fn remote_pump(&mut self) {
        let piece = READ_PIECE.min(self.caps.max_msg);
        let mut i = 0;
        while i < self.os.queue.len() {
            let k = self.os.queue[i];
            let x = &mut self.os.xfers[k];
            let link = x.link;
            if let Some(why) = &self.links[link].dead {
                x.failed.get_or_insert_with(|| why.clone());
            }
            while x.posted < x.len && x.failed.is_none() && self.links[link].send_wr + KEEP_WR < self.caps.max_wr {
                let n = piece.min(x.len - x.posted);
                let sge = Sge { addr: x.addr + x.posted as u64, len: n as u32, lkey: x.lkey };
                let at = Remote { addr: x.remote.addr + x.posted as u64, rkey: x.remote.rkey };
                let (qp, dev) = (self.links[link].qp, self.links[link].dev);
                let id = Self::wr_id(link, REMOTE_TAG | k);
                let posted = match x.read {
                    true => self.devs[dev].post_read(qp, id, sge, at),
                    false => self.devs[dev].post_write(qp, id, sge, at),
                };
                match posted {
                    Ok(()) => {
                        self.links[link].send_wr += 1;
                        x.out += 1;
                        x.posted += n;
                    }
                    Err(e) => {
                        x.failed = Some(format!("posting an RDMA {}: {e}", if x.read { "READ" } else { "WRITE" }))
                    }
                }
            }
            if x.posted == x.len || x.failed.is_some() {
                self.os.queue.remove(i);
                if x.out == 0 {
                    // Empty, or failed before any piece went out: nothing will complete.
                    self.os.over.push(k);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Reports the transfers that are over: every piece completed, or failed with none left
    /// in flight (an empty transfer is over at once).
    pub(super) fn remote_finish(&mut self, sink: &mut FrameSink<'_>) {
        while let Some(k) = self.os.over.pop() {
            // A transfer that failed on completion with pieces unposted is listed twice: by
            // its completion and by the pump that drops it from the queue.
            let Some(x) = self.os.xfers.try_remove(k) else { continue };
            self.os.queue.retain(|&q| q != k);
            let d = self.links[x.link].dev;
            let result = match &x.failed {
                Some(why) => Err(Error::Transport(format!("one-sided transfer with rank {}: {why}", x.peer))),
                None => Ok(()),
            };
            if result.is_ok() {
                let (w, r, b) = self.os.done;
                self.os.done = (w + u64::from(!x.read), r + u64::from(x.read), b + x.len as u64);
            }
            match x.local {
                Local::Slot(slot) => {
                    let staged = x.read && result.is_ok();
                    // SAFETY: the slot's `len` bytes were filled by the READ that completed;
                    // the slot is not reused before it is freed below.
                    let bytes = staged.then(|| unsafe { std::slice::from_raw_parts(x.addr as *const u8, x.len) });
                    sink.remote_done(x.peer, x.token, result.map(|()| bytes));
                    if let Some(Staging::Ready(s)) = self.os.stage.get_mut(d) {
                        s.free.push(slot);
                    }
                }
                Local::Own(mr) => {
                    let _ = self.devs[d].deregister(mr);
                    sink.remote_done(x.peer, x.token, result.map(|()| None));
                }
            }
        }
    }

    /// A completion of one-sided transfer `k` on `link`.
    pub(super) fn on_remote(&mut self, link: usize, k: usize, c: &Completion) {
        let l = &mut self.links[link];
        l.send_wr = l.send_wr.saturating_sub(1);
        let Some(x) = self.os.xfers.get_mut(k) else { return };
        x.out = x.out.saturating_sub(1);
        if c.status != WcStatus::Success && x.failed.is_none() {
            let what = if x.read { "READ" } else { "WRITE" };
            let why = format!("RDMA {what} through device {} failed ({:?})", self.devs[l.dev].name(), c.status);
            x.failed = Some(why.clone());
            // The queue pair is in the error state: nothing more passes on this link.
            l.dead.get_or_insert(why);
        }
        if x.out == 0 && (x.posted == x.len || x.failed.is_some()) {
            self.os.over.push(k);
        }
    }

    /// Whether one-sided transfers are still in flight or waiting.
    pub(super) fn remote_busy(&self) -> bool {
        !self.os.xfers.is_empty()
    }

    /// Releases every registration of the one-sided transfers (at the transport's drop).
    pub(super) fn remote_release(&mut self) {
        for x in self.os.xfers.drain() {
            if let Local::Own(mr) = x.local {
                let _ = self.devs[self.links[x.link].dev].deregister(mr);
            }
        }
        for (d, s) in self.os.stage.iter_mut().enumerate() {
            if let Staging::Ready(s) = std::mem::take(s) {
                let _ = self.devs[d].deregister(s.mr);
                drop(s.mem);
            }
        }
    }
}
