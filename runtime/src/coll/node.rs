//! Collectives among the ranks of a communicator that share a host: they meet in a shared
//! segment of their own instead of sending each other messages, and for a communicator that
//! spans hosts one leader per host speaks for the others over the network (the hierarchical
//! scheme of MPICH's node-aware collectives and Open MPI's coll/han over coll/sm or xhc).
//!
//! The segment of a communicator on one host holds, for each of its `n` local members, a
//! slot for its contribution and three counters (each on its own cache line); plus one
//! result region. Every operation on the segment is numbered `k = 1, 2, ...` (all members do
//! the same operations in the same order), and the counters say how far each member got:
//!
//! - `input = k`: it entered operation `k` (so it finished every earlier one) and, if the
//!   operation takes contributions, its slot holds it;
//! - `red = k`: its block of the result region is reduced (all-reduce);
//! - `done = k`: it read all it needed of operation `k`.
//!
//! A member overwrites its slot only once every member is `done` with the previous
//! operation, and writes the result region only once every member has entered the current
//! one. A broadcast, and an allgather or all-to-all that fits half a slot, go through the
//! next part of the slot instead (they take turns around it), so they only wait for the
//! readers of the last operation that used that part, long done; the broadcast's root copies it in
//! pieces and advances a fourth counter, `prog = k << 32 | bytes`, after each, so readers
//! copy a piece out while the root copies the next one in. Contributions of up to 56 bytes travel in the line of their sequence number instead
//! (one line per operation parity; written once every member entered the operation before),
//! so a reader waits for and fetches one cache line. Reductions combine contributions in rank order, so results are bit-identical on
//! every run (and non-commutative operations are exact on one host).
//!
//! The segment is made on first use by the lowest local rank (`/mpr-<jobid>-n<ctx>-<rank>`,
//! mode 0600), which tells the others by message; the last one to attach removes the name.
//! `MPR_COLL_SHM=0` turns all of this off; `MPR_COLL_SHM_SLOT` sets the slot size (default
//! 128 KiB, 1 MiB when ranks outnumber cores; larger operations go through it in pieces).

use std::cell::{Cell, OnceCell};
use std::ffi::CString;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bytemuck::Pod;
use nix::fcntl::OFlag;
use nix::sys::mman::{mmap, munmap, shm_open, MapFlags, ProtFlags};
use nix::sys::stat::Mode;

use super::algo::{self, Subset};
use super::op::Op;
use super::Input;
use crate::comm::Comm;
use crate::copy;
use crate::error::Error;
use crate::shmfile;

const PAGE: usize = 4096;
const LINE: usize = 64;
const MAGIC: u64 = 0x6d70_725f_636f_6c32; // "mpr_col2"
/// Counters per member, each on its own cache line.
const INPUT: usize = 0;
const RED: usize = 1;
const DONE: usize = 2;
/// A broadcast root's progress through its slot: `k << 32 | bytes copied in`.
const PROG: usize = 3;
/// The rest of a member's `PROG` line says the lengths of its last `TOLD` broadcasts through
/// the slots ([`Arena::told_word`]): a reader finds the root's count in the line it waits on.
const TOLD: u64 = 7;
/// Lines per member: the four counters, then two lines (by operation parity) that carry a
/// small contribution next to its sequence number, so a reader fetches both at once.
const LINES: usize = 6;
const INLINE: usize = 4;
/// Bytes of contribution an inline line holds (after its 8-byte sequence number).
const INLINE_MAX: usize = LINE - 8;
/// An inline line's sequence number is `k << INLINE_BITS | bytes`: the operation, and the
/// bytes the line carries, so a broadcast's reader can tell the root's count from its own.
const INLINE_BITS: u32 = 8;
/// An LL line's is `k << LL_BITS | bytes`, the bytes of the member's whole contribution.
const LL_BITS: u32 = 16;
/// The flag of an inline line's byte count that says its 8 bytes are no data but the length
/// of a broadcast its root sends point to point ([`Arena::announce`]).
const APART: u64 = 1 << (INLINE_BITS - 1);
/// Broadcasts up to `LL_LINES` inline lines (560 B) go through lines of their own, each
/// holding the operation's number next to 56 bytes of data (the LL protocol of NCCL and
/// Open MPI's xhc): a reader waits on the lines themselves, so the flag and the data come in
/// one transfer. `LL_WAYS` sets of lines per member are used in turn.
const LL_LINES: usize = 10;
const LL_WAYS: usize = 4;
/// Most bytes a member's LL lines carry in one operation.
pub(crate) const LL_MAX: usize = LL_LINES * INLINE_MAX;
const _: () = assert!((INLINE_MAX as u64) < APART && LL_MAX < 1 << LL_BITS);
/// All-reduce contributions up to this size are reduced whole by every member (one
/// synchronization); larger ones are split into blocks, one per member (two).
const FULL_MAX: usize = 8 << 10;
/// A member's slot, by default. When ranks outnumber cores, a larger one: every operation
/// through the segment may wait for a member to get a time slice, so fewer and larger ones
/// go faster (4 ranks on 2 cores: bcast of 512 KiB ~52 us instead of ~85, all-reduce of
/// 1 MiB ~460 instead of ~590). Small operations still take turns around the first
/// `SLOT` bytes (`next_part`), which stay in cache.
const SLOT: usize = 128 << 10;
const CROWDED_SLOT: usize = 1 << 20;
/// Most bytes of the reason the segment's maker sends when it could not make it.
const WHY_MAX: usize = 240;
/// Parts up to this size take turns around the first `SLOT` bytes of a slot only.
const SMALL_PART: usize = 64 << 10;

/// What a broadcast's root sent in one operation, as a reader finds it.
#[derive(Debug, Clone, Copy)]
enum Sent {
    /// Bytes through the segment.
    Here(usize),
    /// The length of a broadcast it sends point to point ([`Arena::announce`]).
    Apart(usize),
}

/// How a communicator's ranks sit on hosts, and its segment on this host.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Comm ranks on this host, ascending.
    local: Vec<usize>,
    /// This process's index in `local`.
    me: usize,
    /// The leader (lowest comm rank) of each host, ascending.
    leaders: Vec<usize>,
    /// Index in `leaders` of each comm rank's host.
    host_of: Vec<usize>,
    arena: OnceCell<Arena>,
}

impl Plan {
    /// The plan of `c`, or `None` if no two of its ranks share memory (or it is turned off).
    pub(crate) fn new(c: &Comm) -> Option<Plan> {
        if !super::settings().shm || c.size() < 2 {
            return None;
        }
        let rt = c.rt().borrow();
        if !rt.hosts.shm {
            return None;
        }
        let hw: Vec<u32> = c.group().iter().map(|&w| rt.hosts.of[w]).collect();
        let mut leaders: Vec<usize> = Vec::new();
        let mut host_of = Vec::with_capacity(hw.len());
        for &h in &hw {
            match leaders.iter().position(|&l| hw[l] == h) {
                Some(i) => host_of.push(i),
                None => {
                    host_of.push(leaders.len());
                    leaders.push(host_of.len() - 1);
                }
            }
        }
        if leaders.len() == hw.len() {
            return None;
        }
        let mine = host_of[c.rank()];
        let local: Vec<usize> = (0..hw.len()).filter(|&r| host_of[r] == mine).collect();
        let me = local.iter().position(|&r| r == c.rank()).expect("a rank is on its own host");
        Some(Plan { local, me, leaders, host_of, arena: OnceCell::new() })
    }

    /// Whether all ranks are on this host.
    pub(super) fn single_host(&self) -> bool {
        self.leaders.len() == 1
    }

    fn leader(&self) -> bool {
        self.me == 0
    }

    fn my_host(&self) -> usize {
        self.host_of[self.local[self.me]]
    }

    fn leader_team<'a>(&'a self, c: &'a Comm) -> Subset<'a> {
        Subset { comm: c, members: &self.leaders, me: self.my_host() }
    }

    /// Whether this host's members outnumber its cores, as all of them see it (makes the
    /// segment: every local member calls this in the same collective).
    pub(super) fn crowded(&self, c: &Comm, tag: i32) -> Result<bool, Error> {
        Ok(self.arena(c, tag)?.is_some_and(|a| a.crowded))
    }

    /// The segment of this host, made on first use (`None` if this rank is alone here).
    /// Every local member calls this in the same collective.
    fn arena(&self, c: &Comm, tag: i32) -> Result<Option<&Arena>, Error> {
        if self.local.len() < 2 {
            return Ok(None);
        }
        if let Some(a) = self.arena.get() {
            return Ok(Some(a));
        }
        let name = {
            let rt = c.rt().borrow();
            format!("/mpr-{}-n{:x}-{:x}", rt.boot.jobid, c.coll_context(), c.group()[self.local[0]])
        };
        let n = self.local.len();
        // The maker tells the others whether it made the segment, whether the members
        // outnumber the cores (its view, so that all take the same paths) and the slot size
        // it chose: [made, crowded, slot (4 bytes, little-endian)], then why it failed if it
        // did (text).
        let mut made = if self.leader() {
            let crowded = !c.rt().borrow().spins();
            let slot = super::settings()
                .shm_slot
                .unwrap_or(if crowded { CROWDED_SLOT } else { SLOT })
                .clamp(PAGE, 1 << 30)
                .div_ceil(PAGE)
                * PAGE;
            let made = Arena::create(&name, n, slot);
            let mut msg = vec![u8::from(made.is_ok()), u8::from(crowded)];
            msg.extend_from_slice(&(slot as u32).to_le_bytes());
            if let Err(Error::Other(why)) = &made {
                msg.extend(why.bytes().take(WHY_MAX));
            }
            for &r in &self.local[1..] {
                if let Err(e) = c.coll_xchg(tag, Some((&msg, r)), None) {
                    // A member is gone: nobody else may come to unlink the segment.
                    if made.is_ok() {
                        shmfile::unlink(&name);
                    }
                    return Err(e);
                }
            }
            let mut made = made?;
            made.crowded = crowded;
            made
        } else {
            let mut msg = [0u8; 6 + WHY_MAX];
            let got = c.coll_xchg(tag, None, Some((&mut msg, self.local[0])))?;
            if msg[0] != 1 {
                let why = String::from_utf8_lossy(&msg[6..got.max(6)]);
                return Err(Error::Other(format!(
                    "rank {} could not make the {why} (MPR_COLL_SHM=0 turns it off)",
                    self.local[0]
                )));
            }
            let slot = u32::from_le_bytes(msg[2..6].try_into().expect("4 bytes")) as usize;
            let mut made = Arena::open(&name, n, slot)?;
            made.crowded = msg[1] == 1;
            made
        };
        if made.header().attached.fetch_add(1, Ordering::AcqRel) + 1 == n as u32 {
            shmfile::unlink(&name);
        }
        made.me = self.me;
        Ok(Some(self.arena.get_or_init(|| made)))
    }
}

#[repr(C)]
struct Header {
    magic: AtomicU64,
    n: AtomicU32,
    slot: AtomicU32,
    attached: AtomicU32,
}

/// One host's shared segment of a communicator.
#[derive(Debug)]
struct Arena {
    base: NonNull<u8>,
    len: usize,
    n: usize,
    me: usize,
    slot: usize,
    /// Number of the last operation this member started.
    seq: Cell<u64>,
    /// Every member is known to have entered this operation.
    seen: Cell<u64>,
    /// Every member is known to be done with this operation.
    done_seen: Cell<u64>,
    /// For each page of a slot: the last operation that used it (all members keep the same
    /// numbers, as they do the same operations).
    page_used: Vec<Cell<u64>>,
    /// Where the next broadcast starts in the root's slot (broadcasts take turns around it).
    cursor: Cell<usize>,
    /// The members outnumber the cores (as the segment's maker saw it: all members must
    /// choose their paths alike).
    crowded: bool,
}

fn os_err(what: &str, name: &str, e: nix::Error) -> Error {
    Error::Other(format!("shared memory for collectives: {what} of {name}: {e}"))
}

impl Arena {
    fn data_off(n: usize) -> usize {
        (Self::ll_off(n) + n * LL_WAYS * LL_LINES * LINE).div_ceil(PAGE) * PAGE
    }

    /// Start of the LL lines, after the counter lines.
    fn ll_off(n: usize) -> usize {
        PAGE + n * LINES * LINE
    }

    /// LL line `j` of member `i`'s set `way`: its sequence number and its data.
    fn ll_line(&self, i: usize, way: usize, j: usize) -> (&AtomicU64, *mut u8) {
        assert!(i < self.n && way < LL_WAYS && j < LL_LINES);
        let off = Self::ll_off(self.n) + ((i * LL_WAYS + way) * LL_LINES + j) * LINE;
        // SAFETY: inside the LL area (before data_off), 64-byte aligned; the first 8 bytes are
        // only accessed atomically, the data follows in the same line.
        unsafe {
            let p = self.base.as_ptr().add(off);
            (&*(p as *const AtomicU64), p.add(8))
        }
    }

    /// Writes `data` (at most `LL_MAX` bytes) to this member's LL lines for operation `k`.
    fn ll_put(&self, c: &Comm, k: u64, data: &[u8]) -> Result<(), Error> {
        debug_assert!(data.len() <= LL_MAX);
        let way = (k % LL_WAYS as u64) as usize;
        // The set was last used at k - LL_WAYS or before.
        self.all_done(c, k.saturating_sub(LL_WAYS as u64))?;
        for (j, part) in data.chunks(INLINE_MAX).enumerate() {
            let (seq, line) = self.ll_line(self.me, way, j);
            // SAFETY: the part fits the line's data; every member is done with the last
            // operation that used this set, and none reads the line before `seq = k`.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), line, part.len()) };
            seq.store(k << LL_BITS | data.len() as u64, Ordering::Release);
        }
        Ok(())
    }

    /// Reads bytes `at..at + out.len()` of what member `from` put in its LL lines for
    /// operation `k`, each line as soon as it is in.
    fn ll_get(&self, c: &Comm, from: usize, k: u64, at: usize, out: &mut [u8]) -> Result<(), Error> {
        let way = (k % LL_WAYS as u64) as usize;
        let mut done = 0;
        while done < out.len() {
            let pos = at + done;
            let (j, off) = (pos / INLINE_MAX, pos % INLINE_MAX);
            let n = (INLINE_MAX - off).min(out.len() - done);
            let (seq, line) = self.ll_line(from, way, j);
            wait(c, || seq.load(Ordering::Acquire) >= k << LL_BITS)?;
            // SAFETY: `from` wrote this line for operation k (`seq`) and rewrites it only
            // after every member says `done = k`; `off + n` stays inside the line's data.
            unsafe { std::ptr::copy_nonoverlapping(line.add(off), out[done..].as_mut_ptr(), n) };
            done += n;
        }
        Ok(())
    }

    /// A broadcast of at most `LL_MAX` bytes through LL lines.
    fn bcast_ll(&self, c: &Comm, tag: i32, buf: &mut [u8], from: usize, root: usize) -> Result<(), Error> {
        let k = self.begin();
        self.publish(INPUT, k);
        if self.me == from {
            self.ll_put(c, k, buf)?;
        } else {
            // The first line says how many bytes the root sends.
            let seq = self.ll_line(from, (k % LL_WAYS as u64) as usize, 0).0;
            if self.stamp_from(c, from, k, seq, LL_BITS)? != Some(buf.len() as u64) {
                return self.follow(c, tag, from, root, k, buf);
            }
            self.ll_get(c, from, k, 0, buf)?;
        }
        self.publish(DONE, k);
        Ok(())
    }

    /// Waits for `cond`, on what member `from` broadcasts in operation `k`: true once it
    /// holds; false if `from` finished operation `k` without making it hold (it broadcast
    /// another number of bytes, maybe by another path).
    fn wait_from(&self, c: &Comm, from: usize, k: u64, mut cond: impl FnMut() -> bool) -> Result<bool, Error> {
        let done = self.ctl(from, DONE);
        let (mut tries, mut came) = (0u32, true);
        wait(c, || {
            if cond() {
                return true;
            }
            // Looked at only once the wait is long (past `wait`'s spins), and then now and
            // then, so a reader that waits as usual does not pull the root's counter line
            // away from it. The root's bytes are in before its `done = k` (release,
            // acquire), so `cond` is checked once more after it.
            tries += 1;
            if tries > 64 && tries % 8 == 0 && done.load(Ordering::Acquire) >= k && !cond() {
                came = false;
                return true;
            }
            false
        })?;
        Ok(came)
    }

    /// The byte count of line sequence number `seq` (`k << bits | count`) once member `from`
    /// stamps it for operation `k`; `None` if `from` finished `k` without (see `wait_from`).
    fn stamp_from(&self, c: &Comm, from: usize, k: u64, seq: &AtomicU64, bits: u32) -> Result<Option<u64>, Error> {
        let mut s = 0;
        let came = self.wait_from(c, from, k, || {
            s = seq.load(Ordering::Acquire);
            s >= k << bits
        })?;
        Ok(came.then(|| s & ((1 << bits) - 1)))
    }

    /// The byte count in sequence number `s` (`k << bits | count`) if it is operation `k`'s.
    fn count_of(s: u64, k: u64, bits: u32) -> Option<u64> {
        (s >> bits == k).then(|| s & ((1 << bits) - 1))
    }

    /// The length member `from` announced in its inline line for operation `k`
    /// ([`Arena::announce`]; it published `k` with 8 bytes).
    fn announced(&self, from: usize, k: u64) -> usize {
        // SAFETY: `from` published k with 8 bytes (the caller saw its count).
        let bytes = unsafe { self.inline_view::<u8>(from, k, 8) };
        u64::from_le_bytes(bytes.try_into().expect("8 bytes")) as usize
    }

    /// What member `from` broadcast in operation `k`: from its inline line, its first LL
    /// line or the words of its `PROG` line, whichever holds `k` (each is rewritten only
    /// after every member is done with `k`, and the caller is not). `None` if none does.
    fn root_sent(&self, from: usize, k: u64) -> Option<Sent> {
        match Self::count_of(self.inline(from, k).0.load(Ordering::Acquire), k, INLINE_BITS) {
            Some(count) if count == APART | 8 => return Some(Sent::Apart(self.announced(from, k))),
            Some(count) => return Some(Sent::Here(count as usize)),
            None => {}
        }
        let s = self.ll_line(from, (k % LL_WAYS as u64) as usize, 0).0.load(Ordering::Acquire);
        if let Some(count) = Self::count_of(s, k, LL_BITS) {
            return Some(Sent::Here(count as usize));
        }
        let told = self.told_word(from, k).load(Ordering::Acquire);
        (told >> 40 == k & 0xff_ffff).then_some(Sent::Here((told & ((1 << 40) - 1)) as usize))
    }

    /// For a member whose broadcast (begun as operation `k`, entered) turned out to hold
    /// another number of bytes than the root's (an erroneous program): takes the root's
    /// operations to their end as the root made them, so that this member's count of
    /// operations and its slots' turns stay those of every other member; copies what fits of
    /// the root's bytes; and returns the mismatch (`root`: the root's comm rank), after
    /// taking part in the root's point-to-point broadcast ([`join`]) if it sent that instead.
    #[cold]
    #[inline(never)]
    fn follow(&self, c: &Comm, tag: i32, from: usize, root: usize, k: u64, buf: &mut [u8]) -> Result<(), Error> {
        let sent = self.root_sent(from, k);
        let message = match sent {
            Some(Sent::Apart(bytes)) => {
                self.publish(DONE, k);
                return join(c, tag, buf, bytes, root);
            }
            Some(Sent::Here(bytes)) => Some(bytes),
            None => None,
        };
        let mismatch = Error::Mismatch { from: root, buffer: buf.len(), message };
        let mut last = k;
        match message {
            None => {}
            Some(total) if Self::fits_inline::<u8>(total) => {
                let n = total.min(buf.len());
                // SAFETY: `from` published k with `total` bytes, of which we read `n`.
                buf[..n].copy_from_slice(unsafe { self.inline_view::<u8>(from, k, n) });
            }
            Some(total) if total <= LL_MAX => {
                let n = total.min(buf.len());
                self.ll_get(c, from, k, 0, &mut buf[..n])?;
            }
            Some(total) => {
                let cap = self.slot / 2;
                for start in (0..total).step_by(cap) {
                    if start > 0 {
                        self.publish(DONE, last);
                        last = self.begin();
                        self.publish(INPUT, last);
                    }
                    let len = cap.min(total - start);
                    let (at, _) = self.next_part(len, last);
                    let prog = self.ctl(from, PROG);
                    // Either the whole chunk is in, or the root is done with it.
                    self.wait_from(c, from, last, || prog.load(Ordering::Acquire) >= last << 32 | len as u64)?;
                    if start < buf.len() {
                        let n = len.min(buf.len() - start);
                        // SAFETY: the root copied its chunk into this part (`prog`, or its
                        // `done`) and rewrites it only after every member says `done` for
                        // it; `n` bytes fit both the part and `buf`.
                        unsafe { copy::copy_raw(self.slot_ptr(from).add(at), buf[start..].as_mut_ptr(), n) };
                    }
                }
            }
        }
        self.publish(DONE, last);
        Err(mismatch)
    }

    fn total(n: usize, slot: usize) -> usize {
        Self::data_off(n) + (n + 1) * slot
    }

    fn create(name: &str, n: usize, slot: usize) -> Result<Arena, Error> {
        let len = Self::total(n, slot);
        let fd = shmfile::create(name, len).map_err(|e| Error::Other(format!("shared memory for collectives: {e}")))?;
        let a = Self::map(fd.as_fd(), len, n, slot).inspect_err(|_| shmfile::unlink(name))?;
        let h = a.header();
        h.n.store(n as u32, Ordering::Relaxed);
        h.slot.store(slot as u32, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(a)
    }

    fn open(name: &str, n: usize, slot: usize) -> Result<Arena, Error> {
        let cname = CString::new(name).map_err(|_| Error::Other(format!("bad segment name {name}")))?;
        let fd = shm_open(cname.as_c_str(), OFlag::O_RDWR, Mode::empty()).map_err(|e| os_err("open", name, e))?;
        let len = Self::total(n, slot);
        let size = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| os_err("stat", name, e))?.st_size as usize;
        if size != len {
            return Err(Error::Other(format!("{name} has {size} bytes, expected {len}")));
        }
        let a = Self::map(fd.as_fd(), len, n, slot)?;
        let h = a.header();
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.n.load(Ordering::Relaxed) as usize != n
            || h.slot.load(Ordering::Relaxed) as usize != slot
        {
            return Err(Error::Other(format!("{name} is not this communicator's collective segment")));
        }
        Ok(a)
    }

    fn map(fd: std::os::fd::BorrowedFd<'_>, len: usize, n: usize, slot: usize) -> Result<Arena, Error> {
        let nz = NonZeroUsize::new(len).expect("a segment has a header");
        // SAFETY: a fresh shared mapping of a file we opened; no Rust object aliases it. Other
        // processes touch it through the counters (atomics) and the slot protocol above.
        let p = unsafe { mmap(None, nz, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, fd, 0) }
            .map_err(|e| Error::Other(format!("mmap of {len} bytes for collectives: {e}")))?;
        Ok(Arena {
            base: p.cast(),
            len,
            n,
            me: 0,
            slot,
            seq: Cell::new(0),
            seen: Cell::new(0),
            done_seen: Cell::new(0),
            page_used: (0..slot / PAGE).map(|_| Cell::new(0)).collect(),
            cursor: Cell::new(0),
            crowded: false,
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a page for the header (atomics only, page-aligned).
        unsafe { &*(self.base.as_ptr() as *const Header) }
    }

    fn ctl(&self, i: usize, which: usize) -> &AtomicU64 {
        assert!(i < self.n && which < LINES);
        // SAFETY: counter lines lie between the header page and data_off, 64-byte aligned;
        // their first 8 bytes are only accessed atomically.
        unsafe { &*(self.base.as_ptr().add(PAGE + (i * LINES + which) * LINE) as *const AtomicU64) }
    }

    /// Where member `i` also says the length of a broadcast through the slots that it
    /// begins as operation `k`: word `1 + k % TOLD` of its `PROG` line, written before the
    /// first `prog` of `k` (release), rewritten at operation `k + TOLD`, which waits until
    /// every member is done with `k`.
    fn told_word(&self, i: usize, k: u64) -> &AtomicU64 {
        let prog = self.ctl(i, PROG);
        // SAFETY: the counter lines are 64 bytes each, words 1 to TOLD of this one are only
        // accessed atomically, as these words.
        unsafe { &*(prog as *const AtomicU64).add(1 + (k % TOLD) as usize) }
    }

    /// What that word holds for `bytes` begun as operation `k`: `(k mod 2^24) << 40 |
    /// bytes` (counts of 2^40 bytes or more all read as 2^40 - 1).
    fn told(k: u64, bytes: usize) -> u64 {
        (k & 0xff_ffff) << 40 | (bytes as u64).min((1 << 40) - 1)
    }

    /// The inline line of member `i` for operation `k`: its sequence number and its data.
    fn inline(&self, i: usize, k: u64) -> (&AtomicU64, *mut u8) {
        let seq = self.ctl(i, INLINE + (k % 2) as usize);
        // SAFETY: the data follows the sequence number inside the same 64-byte line.
        (seq, unsafe { (seq as *const AtomicU64 as *mut u8).add(8) })
    }

    /// Whether a contribution of `T`s of `bytes` fits an inline line.
    fn fits_inline<T>(bytes: usize) -> bool {
        bytes <= INLINE_MAX && align_of::<T>() <= 8
    }

    /// Before writing inline line `k % 2`: every member must have entered operation `k - 1`,
    /// so none still reads what operation `k - 2` left in that line.
    fn inline_ready(&self, c: &Comm, k: u64) -> Result<(), Error> {
        self.all_entered(c, k - 1)
    }

    /// Waits until every member has entered operation `k` (remembered: `seen`).
    fn all_entered(&self, c: &Comm, k: u64) -> Result<(), Error> {
        if self.seen.get() < k {
            wait(c, || self.all(INPUT, k))?;
            self.seen.set(k);
        }
        Ok(())
    }

    fn put_inline(&self, c: &Comm, k: u64, data: &[u8]) -> Result<(), Error> {
        self.put_stamped(c, k, data, data.len() as u64)
    }

    /// As `put_inline`, the line's byte count (and flag) given.
    fn put_stamped(&self, c: &Comm, k: u64, data: &[u8], count: u64) -> Result<(), Error> {
        assert!(data.len() <= INLINE_MAX);
        self.inline_ready(c, k)?;
        let (seq, p) = self.inline(self.me, k);
        // SAFETY: `data` fits the line (asserted); nobody reads this line until its sequence
        // number says k below (inline_ready).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        seq.store(k << INLINE_BITS | count, Ordering::Release);
        self.publish(INPUT, k);
        Ok(())
    }

    /// Before a broadcast that goes point to point: the root (member `from`, comm rank
    /// `root`) says its length in its inline line, so a member whose count differs learns
    /// the root's before any message, and the segment's operations stay in step. `Ok` if
    /// the counts agree (the broadcast goes on); else [`Error::Mismatch`], once this member
    /// took part in the root's broadcast with the root's count ([`join`]), or followed it
    /// through the segment (its count is small).
    fn announce(&self, c: &Comm, tag: i32, buf: &mut [u8], from: usize, root: usize) -> Result<(), Error> {
        let k = self.begin();
        if self.me == from {
            self.put_stamped(c, k, &(buf.len() as u64).to_le_bytes(), APART | 8)?;
        } else {
            self.publish(INPUT, k);
            if self.stamp_from(c, from, k, self.inline(from, k).0, INLINE_BITS)? != Some(APART | 8) {
                return self.follow(c, tag, from, root, k, buf);
            }
            let theirs = self.announced(from, k);
            if theirs != buf.len() {
                self.publish(DONE, k);
                return join(c, tag, buf, theirs, root);
            }
        }
        self.publish(DONE, k);
        Ok(())
    }

    /// Member `i`'s inline contribution to operation `k` (published: its sequence is `k`).
    ///
    /// # Safety
    /// `len` elements must fit the line, and member `i` must have published `k`.
    unsafe fn inline_view<T: Pod>(&self, i: usize, k: u64, len: usize) -> &[T] {
        // SAFETY: 8-byte aligned (fits_inline checks T's alignment), in the line, and not
        // rewritten before every member entered operation k + 1 (inline_ready).
        unsafe { std::slice::from_raw_parts(self.inline(i, k).1 as *const T, len) }
    }

    fn allreduce_inline<T: Pod, O: Op<T>>(&self, c: &Comm, buf: &mut [T], op: &O) -> Result<(), Error> {
        let k = self.begin();
        self.put_inline(c, k, bytemuck::cast_slice(buf))?;
        wait(c, || (0..self.n).all(|i| self.inline(i, k).0.load(Ordering::Acquire) >= k << INLINE_BITS))?;
        // SAFETY: all members published k (waited above); the length is ours, which fits.
        buf.copy_from_slice(unsafe { self.inline_view::<T>(0, k, buf.len()) });
        for i in 1..self.n {
            // SAFETY: as above, for member i.
            op.apply(buf, unsafe { self.inline_view::<T>(i, k, buf.len()) });
        }
        self.seen.set(k);
        self.publish(DONE, k);
        Ok(())
    }

    /// All-reduce of at most `LL_MAX` bytes through the LL lines: no member waits for
    /// another to finish the operation before (the lines of four operations take turns).
    fn allreduce_ll<T: Pod, O: Op<T>>(&self, c: &Comm, buf: &mut [T], op: &O) -> Result<(), Error> {
        let k = self.begin();
        self.publish(INPUT, k);
        let bytes = size_of_val(buf);
        self.ll_put(c, k, bytemuck::cast_slice(buf))?;
        // Word arrays, so the bytes can be seen as `T`s (alignment at most 8, checked).
        let mut own = [0u64; LL_MAX.div_ceil(8)];
        let mut theirs = [0u64; LL_MAX.div_ceil(8)];
        let own = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut own)[..bytes];
        own.copy_from_slice(bytemuck::cast_slice(buf));
        let theirs = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut theirs)[..bytes];
        // Combined in member order, so every member computes the same bits.
        for i in 0..self.n {
            let part: &[u8] = if i == self.me {
                own
            } else {
                self.ll_get(c, i, k, 0, theirs)?;
                theirs
            };
            if i == 0 {
                copy::copy(buf, bytemuck::cast_slice(part));
            } else {
                op.apply(buf, bytemuck::cast_slice(part));
            }
        }
        self.publish(DONE, k);
        Ok(())
    }

    fn bcast_inline(&self, c: &Comm, tag: i32, buf: &mut [u8], from: usize, root: usize) -> Result<(), Error> {
        let k = self.begin();
        if self.me == from {
            self.put_inline(c, k, buf)?;
        } else {
            self.publish(INPUT, k);
            if self.stamp_from(c, from, k, self.inline(from, k).0, INLINE_BITS)? != Some(buf.len() as u64) {
                return self.follow(c, tag, from, root, k, buf);
            }
            // SAFETY: `from` published k with our length, which fits.
            buf.copy_from_slice(unsafe { self.inline_view::<u8>(from, k, buf.len()) });
        }
        self.publish(DONE, k);
        Ok(())
    }

    /// Allgather of `own` from every member into `buf`, in member order: through the inline
    /// lines, the LL lines or the slots (in pieces of a slot), by size.
    fn allgather(&self, c: &Comm, own: &[u8], buf: &mut [u8]) -> Result<(), Error> {
        if own.len() > LL_MAX {
            return self.allgather_slots(c, own, buf);
        }
        self.swap_small(c, own, 0, own, buf)
    }

    /// Every member puts `data` (at most `LL_MAX` bytes) in its inline or LL lines; block `i`
    /// of `out` (blocks of `mine.len()` bytes) gets bytes `at..` of member `i`'s data, and
    /// this member's own block is `mine`. Allgather and all-to-all of small buffers.
    fn swap_small(&self, c: &Comm, data: &[u8], at: usize, mine: &[u8], out: &mut [u8]) -> Result<(), Error> {
        let blk = mine.len();
        let k = self.begin();
        let inline = Self::fits_inline::<u8>(data.len());
        if inline {
            self.put_inline(c, k, data)?;
        } else {
            self.publish(INPUT, k);
            self.ll_put(c, k, data)?;
        }
        for (i, b) in out.chunks_exact_mut(blk.max(1)).enumerate() {
            if i == self.me {
                b.copy_from_slice(mine);
            } else if inline {
                let seq = self.inline(i, k).0;
                wait(c, || seq.load(Ordering::Acquire) >= k << INLINE_BITS)?;
                // SAFETY: member i published k, with data of our length (the callers'
                // operations give every member the same sizes).
                b.copy_from_slice(&unsafe { self.inline_view::<u8>(i, k, data.len()) }[at..at + blk]);
            } else {
                self.ll_get(c, i, k, at, b)?;
            }
        }
        self.publish(DONE, k);
        Ok(())
    }

    /// Allgather through the slots: each member's part holds a piece of its own block.
    fn allgather_slots(&self, c: &Comm, own: &[u8], buf: &mut [u8]) -> Result<(), Error> {
        self.swap_parts(c, 1, 0, own, buf, |r, p| {
            // SAFETY: `swap_parts` hands us room for one piece of `r.len()` bytes.
            unsafe { copy::copy_raw(own[r.clone()].as_ptr(), p, r.len()) }
        })
    }

    /// All-to-all of `send` (one block of `blk` bytes per member): block `j` of member `i`
    /// lands in block `i` of member `j`'s `recv`.
    fn alltoall(&self, c: &Comm, send: &[u8], recv: &mut [u8], blk: usize) -> Result<(), Error> {
        if send.len() > LL_MAX {
            return self.alltoall_slots(c, send, recv, blk);
        }
        let at = self.me * blk;
        self.swap_small(c, send, at, &send[at..at + blk], recv)
    }

    /// All-to-all through the slots: each member's part holds the same piece of each of its
    /// blocks, in member order; a member reads the piece meant for it.
    fn alltoall_slots(&self, c: &Comm, send: &[u8], recv: &mut [u8], blk: usize) -> Result<(), Error> {
        let own = &send[self.me * blk..(self.me + 1) * blk];
        self.swap_parts(c, self.n, self.me, own, recv, |r, p| {
            // This member's own piece is never read from the slot.
            for j in (0..self.n).filter(|&j| j != self.me) {
                let piece = &send[j * blk + r.start..j * blk + r.end];
                // SAFETY: `swap_parts` hands us room for n pieces of `r.len()` bytes; piece j
                // lies at j * len.
                unsafe { copy::copy_raw(piece.as_ptr(), p.add(j * r.len()), r.len()) };
            }
        })
    }

    /// Allgather and all-to-all through the slots. Each operation moves bytes `r` of every
    /// block (blocks of `own.len()` bytes): this member's `fill(r, part)` writes `per`
    /// pieces of `r.len()` bytes to the next part of its slot, and block `i` of `out` gets
    /// piece `pick` of member `i`'s part; this member's own block is `own`. Blocks whose
    /// pieces fit half a slot go whole, so operations take turns around the slot; larger ones
    /// go a slot's worth at a time.
    fn swap_parts(
        &self,
        c: &Comm,
        per: usize,
        pick: usize,
        own: &[u8],
        out: &mut [u8],
        fill: impl Fn(std::ops::Range<usize>, *mut u8),
    ) -> Result<(), Error> {
        let blk = own.len();
        let piece = if per * blk <= self.slot / 2 { blk } else { (self.slot / per).max(1) };
        for at in (0..blk).step_by(piece.max(1)) {
            let len = piece.min(blk - at);
            let k = self.begin();
            let part = self.put_part(c, k, per * len, |p| fill(at..at + len, p))?;
            for (i, b) in out.chunks_exact_mut(blk).enumerate() {
                let b = &mut b[at..at + len];
                if i == self.me {
                    copy::copy(b, &own[at..at + len]);
                } else {
                    copy::copy(b, self.part_of(c, i, k, part, pick * len..(pick + 1) * len)?);
                }
            }
            self.publish(DONE, k);
        }
        Ok(())
    }

    /// Start of member `i`'s slot; `i == n` is the result region.
    fn slot_ptr(&self, i: usize) -> *mut u8 {
        assert!(i <= self.n);
        let off = Self::data_off(self.n) + i * self.slot;
        debug_assert!(off + self.slot <= self.len);
        // SAFETY: in bounds by the layout arithmetic (total() = data_off + (n + 1) * slot).
        unsafe { self.base.as_ptr().add(off) }
    }

    /// Elements `r` of member `i`'s slot (or of the result region) as `T`s.
    ///
    /// # Safety
    /// The protocol must guarantee that nobody writes that range while the slice lives.
    unsafe fn view<T: Pod>(&self, i: usize, r: std::ops::Range<usize>) -> &[T] {
        assert!(r.end * size_of::<T>() <= self.slot);
        // SAFETY: in bounds (checked above), aligned (slots are page-aligned and the range is
        // in whole elements), and not written meanwhile (the caller's promise).
        unsafe { std::slice::from_raw_parts((self.slot_ptr(i) as *const T).add(r.start), r.len()) }
    }

    fn begin(&self) -> u64 {
        let k = self.seq.get() + 1;
        self.seq.set(k);
        k
    }

    fn all(&self, which: usize, k: u64) -> bool {
        (0..self.n).all(|i| self.ctl(i, which).load(Ordering::Acquire) >= k)
    }

    fn publish(&self, which: usize, k: u64) {
        self.ctl(self.me, which).store(k, Ordering::Release);
    }

    /// Waits until every member is done with operation `k` (known at once when all entered
    /// `k + 1`).
    fn all_done(&self, c: &Comm, k: u64) -> Result<(), Error> {
        if self.done_seen.get().max(self.seen.get().saturating_sub(1)) < k {
            wait(c, || self.all(DONE, k))?;
            self.done_seen.set(k);
        }
        Ok(())
    }

    /// Puts this member's contribution for operation `k` in its slot and enters `k`.
    fn put(&self, c: &Comm, k: u64, data: &[u8]) -> Result<(), Error> {
        self.put_except(c, k, data, 0..0)
    }

    /// As `put`, leaving out the bytes `skip` (a part no other member reads).
    fn put_except(&self, c: &Comm, k: u64, data: &[u8], skip: std::ops::Range<usize>) -> Result<(), Error> {
        assert!(data.len() <= self.slot && skip.start <= skip.end && skip.end <= data.len());
        self.put_with(c, k, |slot| {
            for r in [0..skip.start, skip.end..data.len()] {
                // SAFETY: `put_with` hands us the slot while nobody reads it; it holds `slot`
                // bytes (asserted above).
                unsafe { copy::copy_raw(data[r.clone()].as_ptr(), slot.add(r.start), r.len()) };
            }
        })
    }

    /// Lets `fill` write this member's slot (`slot` bytes from the pointer it gets) for
    /// operation `k`, once every member is done with the operation before, and enters `k`.
    fn put_with(&self, c: &Comm, k: u64, fill: impl FnOnce(*mut u8)) -> Result<(), Error> {
        self.page_used.iter().for_each(|h| h.set(k));
        self.all_done(c, k - 1)?;
        // Every member is done with operation k - 1 and none reads this slot again before we
        // publish `input = k` below.
        fill(self.slot_ptr(self.me));
        self.publish(INPUT, k);
        Ok(())
    }

    /// The part of a slot for `len` bytes (whole pages) of operation `k`: the next one
    /// around the slot, so the one used longest ago. Returns its offset and the last
    /// operation that used any of its pages, which every member must be done with before
    /// the part is rewritten. Every member calls this for the same operations with the same
    /// lengths, so all agree on the offsets.
    fn next_part(&self, len: usize, k: u64) -> (usize, u64) {
        let len = len.next_multiple_of(PAGE);
        let room = if len <= SMALL_PART { self.slot.min(SLOT) } else { self.slot };
        let at = Some(self.cursor.get()).filter(|&a| a + len <= room).unwrap_or(0);
        self.cursor.set(at + len);
        let last = self.page_used[at / PAGE..(at + len) / PAGE].iter().map(|p| p.replace(k)).max().unwrap_or(0);
        (at, last)
    }

    /// Lets `fill` write `len` bytes of this member's slot for operation `k`, in the next
    /// part of it, and enters `k`; returns the part's offset. Unlike `put_with`, this waits
    /// only for the members still reading the last operation that used the part, not for
    /// every member to finish operation `k - 1` (when ranks outnumber cores, that wait is
    /// for a member to get a time slice), as long as `len` leaves room for other parts.
    fn put_part(&self, c: &Comm, k: u64, len: usize, fill: impl FnOnce(*mut u8)) -> Result<usize, Error> {
        assert!(len <= self.slot);
        let (at, last) = self.next_part(len, k);
        self.all_done(c, last)?;
        // SAFETY: the part lies inside this member's slot (`next_part`); every member is done
        // with the last operation that used it, and none reads it before `input = k` below.
        fill(unsafe { self.slot_ptr(self.me).add(at) });
        self.publish(INPUT, k);
        Ok(at)
    }

    /// Bytes `r` of what member `i` put in the part at `at` of its slot for operation `k`
    /// (`put_part`), once it is in.
    fn part_of(&self, c: &Comm, i: usize, k: u64, at: usize, r: std::ops::Range<usize>) -> Result<&[u8], Error> {
        assert!(at + r.end <= self.slot);
        wait(c, || self.ctl(i, INPUT).load(Ordering::Acquire) >= k)?;
        // SAFETY: member i put this part for k (`input`), and it is rewritten only after
        // every member says `done = k` (`put_part`, `put_with`).
        Ok(unsafe { std::slice::from_raw_parts(self.slot_ptr(i).add(at + r.start), r.len()) })
    }

    /// With a core per member, every member waits on all the `input` counters (one hop).
    /// When members outnumber cores, member 0 alone waits on them and then releases the
    /// others (its `done = k`), so it always leaves first: it is running then, and the next
    /// operation finds it ahead instead of every member that left first waiting a time slice
    /// for it (4 ranks on 2 cores, a broadcast from rank 0 after a barrier: ~0.1 us per rank
    /// instead of ~1.3; all-reduce, allgather and all-to-all up to 8 KiB after a barrier
    /// ~25% less).
    fn barrier(&self, c: &Comm) -> Result<(), Error> {
        let k = self.begin();
        self.publish(INPUT, k);
        if self.crowded && self.me != 0 {
            // Member 0 says `done = k` once every member entered k.
            wait(c, || self.ctl(0, DONE).load(Ordering::Acquire) >= k)?;
            self.seen.set(k);
        } else {
            self.all_entered(c, k)?;
        }
        self.publish(DONE, k);
        Ok(())
    }

    /// Copies `buf` of member `from` (comm rank `root`) to every member: through its inline
    /// line, its LL lines, or half a slot at a time, each half in pieces the readers take as
    /// soon as they are in, through the next part of the slot. A member whose buffer holds
    /// another number of bytes than the root's (an erroneous program) gets
    /// [`Error::Mismatch`], in step with the others ([`Arena::follow`]).
    fn bcast(&self, c: &Comm, tag: i32, buf: &mut [u8], from: usize, root: usize) -> Result<(), Error> {
        if Self::fits_inline::<u8>(buf.len()) {
            return self.bcast_inline(c, tag, buf, from, root);
        }
        if buf.len() <= LL_MAX {
            return self.bcast_ll(c, tag, buf, from, root);
        }
        let total = buf.len();
        for start in (0..total).step_by(self.slot / 2) {
            let k = self.begin();
            let len = (self.slot / 2).min(total - start);
            let piece = (len / 4).clamp(4 << 10, 16 << 10);
            let prog = self.ctl(from, PROG);
            self.publish(INPUT, k);
            // The root's first piece in, and its told word saying it sends as many bytes as
            // this member expects (written before that piece's `prog`).
            if self.me != from && start == 0 {
                let first = k << 32 | piece.min(len) as u64;
                let came = self.wait_from(c, from, k, || prog.load(Ordering::Acquire) >= first)?;
                if !came || self.told_word(from, k).load(Ordering::Relaxed) != Self::told(k, total) {
                    return self.follow(c, tag, from, root, k, buf);
                }
            }
            let (at, last) = self.next_part(len, k);
            // SAFETY: the part (`len` bytes) lies inside member `from`'s slot.
            let base = unsafe { self.slot_ptr(from).add(at) };
            let chunk = &mut buf[start..start + len];
            if self.me == from {
                // The told word is rewritten at k + TOLD.
                self.all_done(c, if start == 0 { last.max(k.saturating_sub(TOLD)) } else { last })?;
                for (i, p) in chunk.chunks(piece).enumerate() {
                    // SAFETY: every member is done with the last operation that used this
                    // half, and none reads these bytes before `prog` says they are in.
                    unsafe { copy::copy_raw(p.as_ptr(), base.add(i * piece), p.len()) };
                    if start == 0 && i == 0 {
                        // Read after `prog` says the first piece is in (release); stored
                        // right before it, so that both take the line from its readers once.
                        self.told_word(from, k).store(Self::told(k, total), Ordering::Relaxed);
                    }
                    prog.store(k << 32 | (i * piece + p.len()) as u64, Ordering::Release);
                }
            } else {
                for (i, p) in chunk.chunks_mut(piece).enumerate() {
                    let want = k << 32 | (i * piece + p.len()) as u64;
                    wait(c, || prog.load(Ordering::Acquire) >= want)?;
                    // SAFETY: the root copied these bytes in (`prog`) and rewrites this half
                    // only after every member says `done = k`.
                    unsafe { copy::copy_raw(base.add(i * piece), p.as_mut_ptr(), p.len()) };
                }
            }
            self.publish(DONE, k);
        }
        Ok(())
    }

    /// Reduces elements `r` of every member's slot, in member order, into `dst`.
    fn fold<T: Pod, O: Op<T>>(&self, dst: &mut [T], r: std::ops::Range<usize>, op: &O) {
        self.fold_with(dst, r, op, None);
    }

    /// As `fold`, with this member's elements `r` taken from `mine` instead of its slot
    /// (`dst` must not be `mine`).
    fn fold_with<T: Pod, O: Op<T>>(&self, dst: &mut [T], r: std::ops::Range<usize>, op: &O, mine: Option<&[T]>) {
        let part = |i: usize| match mine {
            Some(m) if i == self.me => m,
            // SAFETY: every member published this operation's contribution, and rewrites its
            // slot only after all members say `done` for it.
            _ => unsafe { self.view::<T>(i, r.clone()) },
        };
        copy::copy(dst, part(0));
        for i in 1..self.n {
            op.apply(dst, part(i));
        }
    }

    /// Reduces every member's `buf` into `buf` of member `to`.
    fn reduce<T: Pod, O: Op<T>>(&self, c: &Comm, buf: &mut [T], op: &O, to: usize) -> Result<(), Error> {
        for chunk in buf.chunks_mut((self.slot / size_of::<T>()).max(1)) {
            let k = self.begin();
            self.put(c, k, bytemuck::cast_slice(chunk))?;
            if self.me == to {
                self.all_entered(c, k)?;
                self.fold(chunk, 0..chunk.len(), op);
            }
            self.publish(DONE, k);
        }
        Ok(())
    }

    /// All-reduce of `input` into `buf`; an input of its own is read where it is (never
    /// copied into `buf` first).
    fn allreduce<T: Pod, O: Op<T>>(&self, c: &Comm, input: Input<'_, T>, buf: &mut [T], op: &O) -> Result<(), Error> {
        if Self::fits_inline::<T>(size_of_val(buf)) {
            input.fill(buf);
            return self.allreduce_inline(c, buf, op);
        }
        // Through the LL lines up to half their capacity, or all of it when ranks outnumber
        // cores: there the slots' wait for every member to finish the operation before (a
        // scheduler time slice when one is not running) costs more than the lines' smaller
        // copies, while with a core each, every member reading the lines that all the others
        // are still writing costs more than one copy through the slots.
        let ll_max = if self.crowded { LL_MAX } else { LL_MAX / 2 };
        if size_of_val(buf) <= ll_max && align_of::<T>() <= 8 {
            input.fill(buf);
            return self.allreduce_ll(c, buf, op);
        }
        let step = (self.slot / size_of::<T>()).max(1);
        for (i, chunk) in buf.chunks_mut(step).enumerate() {
            let k = self.begin();
            let full = size_of_val(chunk) <= FULL_MAX;
            let r = algo::block(chunk.len(), self.n, self.me);
            // Above FULL_MAX this member reduces block `r` itself, from its own buffer: the
            // others never read that part of its slot.
            let skip = if full { 0..0 } else { r.start * size_of::<T>()..r.end * size_of::<T>() };
            let mine = match input.part(i * step..i * step + chunk.len()) {
                Input::From(s) => s,
                Input::InPlace => &*chunk,
            };
            self.put_except(c, k, bytemuck::cast_slice(mine), skip)?;
            self.all_entered(c, k)?;
            if full {
                self.fold(chunk, 0..chunk.len(), op);
            } else {
                // SAFETY: block `r` of the result region is written by this member alone,
                // and only now: every member entered operation k, so all finished reading
                // the result of k - 1; they read it again after `red = k` below.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut((self.slot_ptr(self.n) as *mut T).add(r.start), r.len()) };
                self.fold_with(dst, r.clone(), op, Some(&mine[r]));
                self.publish(RED, k);
                wait(c, || self.all(RED, k))?;
                // SAFETY: every block is reduced (`red = k`) and is rewritten only after all
                // members entered operation k + 1, which needs our `done = k` first.
                copy::copy(chunk, unsafe { self.view::<T>(self.n, 0..chunk.len()) });
            }
            self.publish(DONE, k);
        }
        Ok(())
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: our own mapping; every reference into it is borrowed from `self`.
        let _ = unsafe { munmap(self.base.cast(), self.len) };
    }
}

/// Waits for `cond` (another member's counter), making progress and watching for dead peers
/// and the wait time limit meanwhile.
fn wait(c: &Comm, mut cond: impl FnMut() -> bool) -> Result<(), Error> {
    if cond() {
        return Ok(());
    }
    // Spin a little before the full wait, unless ranks outnumber cores: then the member we
    // wait for needs this core.
    if c.rt().borrow().spins() {
        for _ in 0..64 {
            std::hint::spin_loop();
            if cond() {
                return Ok(());
            }
        }
    }
    c.rt().borrow_mut().wait_until(None, |_| cond())
}

/// Allgather through the segment, for a communicator on one host whose blocks fit a slot
/// (the caller checks).
pub(super) fn allgather(c: &Comm, tag: i32, plan: &Plan, own: &[u8], buf: &mut [u8]) -> Result<(), Error> {
    debug_assert!(plan.single_host());
    plan.arena(c, tag)?.expect("a single-host plan has company").allgather(c, own, buf)
}

/// All-to-all through the segment, for a communicator on one host whose send buffer fits a
/// slot (the caller checks).
pub(super) fn alltoall(c: &Comm, tag: i32, plan: &Plan, send: &[u8], recv: &mut [u8], blk: usize) -> Result<(), Error> {
    debug_assert!(plan.single_host());
    plan.arena(c, tag)?.expect("a single-host plan has company").alltoall(c, send, recv, blk)
}

pub(super) fn barrier(c: &Comm, tag: i32, plan: &Plan) -> Result<(), Error> {
    let arena = plan.arena(c, tag)?;
    if plan.single_host() {
        return arena.expect("a single-host plan has company").barrier(c);
    }
    let Some(a) = arena else { return algo::barrier(&plan.leader_team(c), tag) };
    let k = a.begin();
    a.publish(INPUT, k);
    if plan.leader() {
        wait(c, || a.all(INPUT, k))?;
        algo::barrier(&plan.leader_team(c), tag)?;
    } else {
        wait(c, || a.ctl(0, DONE).load(Ordering::Acquire) >= k)?;
    }
    a.publish(DONE, k);
    Ok(())
}

/// A broadcast: through the segment on one host; else through the root's host's segment,
/// between the hosts' leaders, then through each other host's segment ([`bcast_hosts`]).
pub(super) fn bcast(c: &Comm, tag: i32, plan: &Plan, buf: &mut [u8], root: usize) -> Result<(), Error> {
    let arena = plan.arena(c, tag)?;
    if plan.single_host() {
        // On one host a member's index is its rank.
        debug_assert_eq!(plan.local[root], root);
        return arena.expect("a single-host plan has company").bcast(c, tag, buf, root, root);
    }
    bcast_hosts(c, tag, plan, arena, buf, root)
}

/// A broadcast over several hosts. A rank whose count differs from what reaches it gets
/// [`Error::Mismatch`]; a leader that got one passes on a length its host's members cannot
/// expect ([`algo::marker`]), so they report it too.
fn bcast_hosts(
    c: &Comm,
    tag: i32,
    plan: &Plan,
    arena: Option<&Arena>,
    buf: &mut [u8],
    root: usize,
) -> Result<(), Error> {
    let root_host = plan.host_of[root];
    let here = plan.my_host() == root_host;
    let mut failed = None;
    if let (true, Some(a)) = (here, arena) {
        let from = plan.local.iter().position(|&r| r == root).expect("root is local");
        failed = algo::mismatch_of(a.bcast(c, tag, buf, from, root))?;
    }
    // What this rank passes on: its buffer, or after a mismatch a marker (read only: this
    // rank is the root of the steps below).
    let mut marker = failed.is_some().then(|| algo::marker(buf).to_vec());
    if plan.leader() {
        let out = marker.as_deref_mut().unwrap_or(&mut *buf);
        let r = algo::bcast(&plan.leader_team(c), tag, out, root_host);
        failed = failed.or(algo::mismatch_of(r)?);
    }
    if let (false, Some(a)) = (here, arena) {
        if failed.is_some() && marker.is_none() {
            marker = Some(algo::marker(buf).to_vec());
        }
        let out = marker.as_deref_mut().unwrap_or(&mut *buf);
        let r = a.bcast(c, tag, out, 0, plan.local[0]);
        failed = failed.or(algo::mismatch_of(r)?);
    }
    failed.map_or(Ok(()), Err)
}

/// A broadcast on one host that goes point to point (large, single-copy reads): the root
/// first says its length through the segment ([`Arena::announce`]), so a rank whose count
/// differs takes part with the root's ([`join`]) and reports the mismatch, and no rank
/// waits for a message that will not come.
pub(super) fn bcast_apart(c: &Comm, tag: i32, plan: &Plan, buf: &mut [u8], root: usize) -> Result<(), Error> {
    debug_assert!(plan.single_host() && plan.local[root] == root);
    let a = plan.arena(c, tag)?.expect("a single-host plan has company");
    a.announce(c, tag, buf, root, root)?;
    algo::bcast(c, tag, buf, root)
}

/// Takes part in a point-to-point broadcast of `bytes` from `root` that this rank expected
/// another count of: receives and passes on all of them, keeps what fits in `buf`, and
/// returns the mismatch.
#[cold]
#[inline(never)]
fn join(c: &Comm, tag: i32, buf: &mut [u8], bytes: usize, root: usize) -> Result<(), Error> {
    let mut all = vec![0u8; bytes];
    algo::bcast(c, tag, &mut all, root)?;
    let n = bytes.min(buf.len());
    buf[..n].copy_from_slice(&all[..n]);
    Err(Error::Mismatch { from: root, buffer: buf.len(), message: Some(bytes) })
}

/// Reduce to `root`: commutative operations on any plan, others on one host only.
pub(super) fn reduce<T: Pod, O: Op<T>>(
    c: &Comm,
    tag: i32,
    plan: &Plan,
    acc: &mut [T],
    op: &O,
    root: usize,
) -> Result<(), Error> {
    let arena = plan.arena(c, tag)?;
    let local_root = plan.local.iter().position(|&r| r == root);
    if plan.single_host() {
        return arena.expect("a single-host plan has company").reduce(c, acc, op, local_root.expect("one host"));
    }
    if let Some(a) = arena {
        a.reduce(c, acc, op, 0)?;
    }
    if plan.leader() {
        algo::reduce(&plan.leader_team(c), tag, acc, op, plan.host_of[root])?;
    }
    if let (Some(a), true) = (arena, local_root.is_some_and(|i| i != 0)) {
        // The result is at this host's leader; hand it to the root.
        a.bcast(c, tag, bytemuck::cast_slice_mut(acc), 0, plan.local[0])?;
    }
    Ok(())
}

/// All-reduce: commutative operations on any plan, others on one host only.
pub(super) fn allreduce<T: Pod, O: Op<T>>(
    c: &Comm,
    tag: i32,
    plan: &Plan,
    input: Input<'_, T>,
    buf: &mut [T],
    op: &O,
) -> Result<(), Error> {
    let arena = plan.arena(c, tag)?;
    if plan.single_host() {
        return arena.expect("a single-host plan has company").allreduce(c, input, buf, op);
    }
    input.fill(buf);
    if let Some(a) = arena {
        a.reduce(c, buf, op, 0)?;
    }
    if plan.leader() {
        algo::allreduce(&plan.leader_team(c), tag, Input::InPlace, buf, op)?;
    }
    if let Some(a) = arena {
        a.bcast(c, tag, bytemuck::cast_slice_mut(buf), 0, plan.local[0])?;
    }
    Ok(())
}
