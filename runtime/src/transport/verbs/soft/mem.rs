//! Registered memory: the region table, and the only code of the provider that touches
//! registered bytes.
//!
//! Every access names a key and a range and is checked against the live regions in the same
//! call that copies, with the device lock held; deregistration takes the same lock. So a copy
//! only ever touches memory that is registered at that moment, which the `register` contract
//! of the provider keeps valid.

use std::collections::BTreeMap;

use super::super::provider::{Mr, VerbsError};
use super::SplitMix64;

/// The regions of one device.
#[derive(Debug)]
pub(super) struct Regions {
    live: BTreeMap<u32, Mr>,
    by_lkey: BTreeMap<u32, u32>,
    by_rkey: BTreeMap<u32, u32>,
    next_id: u32,
    max: usize,
    align: usize,
    /// Keys are random so that a stale or foreign key is very unlikely to name a live region.
    keys: SplitMix64,
}

impl Regions {
    pub(super) fn new(max: usize, align: usize, seed: u64) -> Regions {
        Regions {
            live: BTreeMap::new(),
            by_lkey: BTreeMap::new(),
            by_rkey: BTreeMap::new(),
            next_id: 1,
            max,
            align,
            keys: SplitMix64::new(seed),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    pub(super) fn register(&mut self, addr: *mut u8, len: usize) -> Result<Mr, VerbsError> {
        let start = addr as u64;
        if addr.is_null() || len == 0 || start.checked_add(len as u64).is_none() {
            return Err(VerbsError::Invalid(format!("cannot register {len} B at {addr:?}")));
        }
        if !start.is_multiple_of(self.align as u64) || !len.is_multiple_of(self.align) {
            return Err(VerbsError::Invalid(format!(
                "memory must be aligned to {} B in address and length ({len} B at {addr:?})",
                self.align
            )));
        }
        if self.live.len() >= self.max {
            return Err(VerbsError::Limit("memory regions"));
        }
        let lkey = self.fresh_key();
        let rkey = self.fresh_key();
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let mr = Mr { id, lkey, rkey, addr: start, len };
        self.live.insert(id, mr);
        self.by_lkey.insert(lkey, id);
        self.by_rkey.insert(rkey, id);
        Ok(mr)
    }

    fn fresh_key(&mut self) -> u32 {
        loop {
            let k = self.keys.next() as u32;
            if k != 0 && !self.by_lkey.contains_key(&k) && !self.by_rkey.contains_key(&k) {
                return k;
            }
        }
    }

    pub(super) fn deregister(&mut self, mr: Mr) -> Result<(), VerbsError> {
        match self.live.get(&mr.id) {
            Some(live) if *live == mr => {
                self.live.remove(&mr.id);
                self.by_lkey.remove(&mr.lkey);
                self.by_rkey.remove(&mr.rkey);
                Ok(())
            }
            _ => Err(VerbsError::Invalid(format!("memory region {} is not registered", mr.id))),
        }
    }

    /// The registered range `[addr, addr + len)` under `key`, if it lies inside the region.
    fn find(&self, key: u32, remote: bool, addr: u64, len: usize) -> Option<u64> {
        let id = if remote { self.by_rkey.get(&key)? } else { self.by_lkey.get(&key)? };
        let mr = self.live.get(id)?;
        let end = addr.checked_add(len as u64)?;
        (addr >= mr.addr && end <= mr.addr + mr.len as u64).then_some(addr)
    }

    /// `len` bytes at `addr` lie inside the region of `lkey`.
    pub(super) fn local_ok(&self, lkey: u32, addr: u64, len: usize) -> bool {
        self.find(lkey, false, addr, len).is_some()
    }

    /// `len` bytes at `addr` lie inside the region of `rkey`.
    pub(super) fn remote_ok(&self, rkey: u32, addr: u64, len: usize) -> bool {
        self.find(rkey, true, addr, len).is_some()
    }

    /// Copies registered bytes at `addr` into `dst`; false (nothing copied) if they are not
    /// registered under `key`.
    pub(super) fn read(&self, key: u32, remote: bool, addr: u64, dst: &mut [u8]) -> bool {
        let Some(at) = self.find(key, remote, addr, dst.len()) else { return false };
        // SAFETY: `find` checked that the `dst.len()` bytes at `at` lie inside a region that
        // is registered now; the caller holds the device lock, so it cannot be deregistered
        // during the copy, and `register`'s contract keeps registered memory valid. `dst` is
        // the provider's own buffer, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(at as usize as *const u8, dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copies `src` into registered bytes at `addr`; false (nothing copied) if they are not
    /// registered under `key`.
    pub(super) fn write(&self, key: u32, remote: bool, addr: u64, src: &[u8]) -> bool {
        let Some(at) = self.find(key, remote, addr, src.len()) else { return false };
        // SAFETY: as in `read`: the target range is registered (checked under the device
        // lock) and valid by `register`'s contract; `src` is the provider's own buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), at as usize as *mut u8, src.len()) };
        true
    }
}
