//! Windows in shared memory: the ranks of a host reach each other's window directly.
//!
//! `Window::allocate` places the parts of all ranks of one host in one shared-memory segment
//! (made by the host's lowest rank, `/mpr-<jobid>-w<window>-<rank>`, removed by name as soon
//! as every member has mapped it), one part after the other (contiguous, as
//! `MPI_Win_allocate_shared` lays them out), after a header of one cache line per member
//! that holds the member's accumulate lock. An origin on the same host then puts and gets
//! with plain copies, and accumulates under the target's accumulate lock, which the
//! target's engine also takes when it applies an accumulate that came as a frame from
//! another host: so accumulates to one element stay atomic whichever path each origin takes.
//!
//! Making the segment is collective over the window's communicator. If it cannot be made or
//! mapped anywhere, every rank falls back to private memory and the active-message path,
//! and the first rank that failed says why on stderr.

use std::sync::atomic::AtomicU32;

use crate::comm::Comm;
use crate::error::Error;
use crate::shmfile::{self, Mapping};

/// Bytes of the header per member: its accumulate lock, alone on its cache line.
const LINE: usize = 64;
const PAGE: usize = 4096;

/// A host's shared segment of one window, as one member maps it.
#[derive(Debug)]
pub(super) struct HostSeg {
    map: Mapping,
    /// For each comm rank on this host: its index among the members; `None` elsewhere.
    member: Vec<Option<usize>>,
    /// Byte offset and length of each member's part.
    parts: Vec<(usize, usize)>,
}

impl HostSeg {
    /// Makes and maps the segment of this rank's host for window `id`, whose ranks hold
    /// `sizes` bytes each; collective over `comm`. `None`: no two ranks share a host, or the
    /// segment could not be made (everyone then keeps private memory).
    pub(super) fn open(comm: &Comm, id: u64, sizes: &[usize]) -> Result<Option<HostSeg>, Error> {
        let (host, shm, jobid) = {
            let rt = comm.rt().borrow();
            let host: Vec<u32> = comm.group().iter().map(|&w| rt.hosts.of[w]).collect();
            (host, rt.hosts.shm, rt.boot.jobid.clone())
        };
        let me = comm.rank();
        let shared = |r: usize| host.iter().filter(|&&h| h == host[r]).count() > 1;
        // Every rank sees the same hosts: all take the same path from here.
        if !shm || !(0..host.len()).any(shared) {
            return Ok(None);
        }
        let local: Vec<usize> = (0..host.len()).filter(|&r| host[r] == host[me]).collect();
        let mut member = vec![None; host.len()];
        for (i, &r) in local.iter().enumerate() {
            member[r] = Some(i);
        }
        let head = (local.len() * LINE).next_multiple_of(PAGE);
        let mut parts = Vec::with_capacity(local.len());
        let mut end = head;
        for &r in &local {
            parts.push((end, sizes[r]));
            end += sizes[r];
        }
        let len = end.max(head).next_multiple_of(PAGE);
        let leader = local[0];
        let name = format!("/mpr-{jobid}-w{id:x}-{:x}", comm.group()[leader]);
        let alone = local.len() < 2;
        // The leader makes the segment; the others map it once all leaders succeeded.
        let made = if alone || me != leader { Ok(None) } else { make(&name, len).map(Some) };
        if !agree(comm, &made)? {
            return Ok(None);
        }
        let map = match made {
            Ok(Some(m)) => Ok(Some(m)),
            _ if alone => Ok(None),
            _ => shmfile::open(&name, len).map(Some),
        };
        let ok = agree(comm, &map)?;
        if me == leader && !alone {
            shmfile::unlink(&name);
        }
        match map {
            Ok(Some(map)) if ok => Ok(Some(HostSeg { map, member, parts })),
            _ => Ok(None),
        }
    }

    /// The part of comm rank `r` (address and length), if `r` is on this host.
    pub(super) fn part(&self, r: usize) -> Option<(*mut u8, usize)> {
        let (off, len) = self.parts[self.member[r]?];
        // `off + len` lies inside the mapping (see `open`).
        Some((self.map.base().wrapping_add(off), len))
    }

    /// The accumulate lock of comm rank `r`, if `r` is on this host.
    pub(super) fn lock_of(&self, r: usize) -> Option<&AtomicU32> {
        let i = self.member[r]?;
        // SAFETY: the header holds one aligned `u32` per member at `i * LINE`, inside the
        // mapping, which lives as long as `self`; it is only ever accessed atomically.
        Some(unsafe { &*self.map.base().add(i * LINE).cast::<AtomicU32>() })
    }
}

/// Makes segment `name` of `len` bytes and maps it.
fn make(name: &str, len: usize) -> Result<Mapping, String> {
    let fd = shmfile::create(name, len)?;
    Mapping::new(&fd, len).inspect_err(|_| shmfile::unlink(name))
}

/// Whether every rank of `comm` succeeded (`r` is this rank's outcome); the first rank
/// that failed says why.
fn agree<T>(comm: &Comm, r: &Result<T, String>) -> Result<bool, Error> {
    let mut ok = [u8::from(r.is_ok())];
    comm.allreduce_in_place(&mut ok, crate::Min)?;
    if let Err(why) = r {
        crate::say::say!(
            "mpr: rank {}: no shared memory for a window ({why}); its ranks on one host use messages instead",
            comm.rank()
        );
    }
    Ok(ok[0] == 1)
}
