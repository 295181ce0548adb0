//! The "v" collectives (MPI 4.1, sections 6.5-6.8): every rank's block has its own count and
//! displacement (in elements).

use bytemuck::Pod;

use super::algo::{received, split_blocks, two_mut};
use super::{bytes, bytes_mut, check_root, own_block};
use crate::comm::Comm;
use crate::error::Error;

/// Counts and displacements of `p` blocks within a buffer of `len` elements.
pub(super) fn layout(what: &str, counts: &[usize], displs: &[usize], p: usize, len: usize) -> Result<(), Error> {
    if counts.len() != p || displs.len() != p {
        return Err(Error::Other(format!(
            "{what}: {} counts and {} displacements for {p} ranks",
            counts.len(),
            displs.len()
        )));
    }
    for (r, (&c, &d)) in counts.iter().zip(displs).enumerate() {
        if d.checked_add(c).is_none_or(|end| end > len) {
            return Err(Error::Other(format!(
                "{what}: block {r} ({c} elements at {d}) lies outside the buffer of {len} elements"
            )));
        }
    }
    Ok(())
}

/// As [`layout`], for a buffer the blocks are written to: they must not overlap either.
pub(super) fn disjoint_layout(
    what: &str,
    counts: &[usize],
    displs: &[usize],
    p: usize,
    len: usize,
) -> Result<(), Error> {
    layout(what, counts, displs, p, len)?;
    let mut blocks: Vec<(usize, usize, usize)> =
        (0..p).filter(|&r| counts[r] > 0).map(|r| (displs[r], displs[r] + counts[r], r)).collect();
    blocks.sort_unstable();
    match blocks.windows(2).find(|w| w[1].0 < w[0].1) {
        Some(w) => Err(Error::Other(format!("{what}: the blocks of ranks {} and {} overlap", w[0].2, w[1].2))),
        None => Ok(()),
    }
}

impl Comm {
    /// Gathers blocks of varying size at `root` (`MPI_Gatherv`): rank `r`'s `send` lands at
    /// `displs[r]` of the root's `recv`, and must hold `counts[r]` elements.
    pub fn gatherv<T: Pod>(
        &self,
        send: &[T],
        recv: Option<(&mut [T], &[usize], &[usize])>,
        root: usize,
    ) -> Result<(), Error> {
        check_root(self, root)?;
        let tag = self.coll_tag()?;
        if self.rank() != root {
            return self.coll_xchg(tag, Some((bytes(send), root)), None).map(|_| ());
        }
        let (recv, counts, displs) =
            recv.ok_or_else(|| Error::Other("gatherv: the root must pass a receive buffer".into()))?;
        layout("gatherv", counts, displs, self.size(), recv.len())?;
        // A rank that sends another number of bytes than its count (an erroneous program)
        // is reported once every block came.
        let mut failed = None;
        for r in 0..self.size() {
            let block = &mut recv[displs[r]..displs[r] + counts[r]];
            failed = failed.or(if r == root {
                own_block(send, block, root)
            } else {
                let buffer = std::mem::size_of_val(block);
                received(self.coll_xchg(tag, None, Some((bytes_mut(block), r))), buffer, r)?
            });
        }
        failed.map_or(Ok(()), Err)
    }

    /// Scatters blocks of varying size from `root` (`MPI_Scatterv`).
    pub fn scatterv<T: Pod>(
        &self,
        send: Option<(&[T], &[usize], &[usize])>,
        recv: &mut [T],
        root: usize,
    ) -> Result<(), Error> {
        check_root(self, root)?;
        let tag = self.coll_tag()?;
        if self.rank() != root {
            let buffer = std::mem::size_of_val(recv);
            return received(self.coll_xchg(tag, None, Some((bytes_mut(recv), root))), buffer, root)?
                .map_or(Ok(()), Err);
        }
        let (send, counts, displs) =
            send.ok_or_else(|| Error::Other("scatterv: the root must pass a send buffer".into()))?;
        layout("scatterv", counts, displs, self.size(), send.len())?;
        let mut failed = None;
        for r in 0..self.size() {
            let block = &send[displs[r]..displs[r] + counts[r]];
            if r == root {
                failed = own_block(block, recv, root);
            } else {
                self.coll_xchg(tag, Some((bytes(block), r)), None)?;
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Gathers blocks of varying size on every rank (`MPI_Allgatherv`; ring).
    pub fn allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<(), Error> {
        if self.is_inter() {
            return self.allgatherv_inter(send, recv, counts, displs);
        }
        let (p, me) = (self.size(), self.rank());
        disjoint_layout("allgatherv", counts, displs, p, recv.len())?;
        super::check_len("allgatherv (own block)", send.len(), counts[me])?;
        let tag = self.coll_tag()?;
        let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
        let block = |r: usize| displs[r]..displs[r] + counts[r];
        if p == 1 {
            recv[block(me)].copy_from_slice(send);
        }
        for step in 0..p.saturating_sub(1) {
            let sb = (me + p - step) % p;
            let rb = (me + p - step - 1) % p;
            let (out, inn) = two_mut(recv, block(sb), block(rb));
            if step == 0 {
                // Our block goes from `send`, and is copied into place meanwhile.
                let copy = Some((bytes(send), bytes_mut(out)));
                self.coll_xchg_with(tag, Some((bytes(send), next)), Some((bytes_mut(inn), prev)), copy)?;
            } else {
                self.coll_xchg(tag, Some((bytes(out), next)), Some((bytes_mut(inn), prev)))?;
            }
        }
        Ok(())
    }

    /// Personalized all-to-all with blocks of varying size (`MPI_Alltoallv`; see [`Comm::exchange_blocks`]).
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        scounts: &[usize],
        sdispls: &[usize],
        recv: &mut [T],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<(), Error> {
        if self.is_inter() {
            return self.alltoallv_inter(send, scounts, sdispls, recv, rcounts, rdispls);
        }
        let (p, me) = (self.size(), self.rank());
        layout("alltoallv (send)", scounts, sdispls, p, send.len())?;
        disjoint_layout("alltoallv (receive)", rcounts, rdispls, p, recv.len())?;
        super::check_len("alltoallv (own block)", rcounts[me], scounts[me])?;
        let tag = self.coll_tag()?;
        self.exchange_blocks(
            tag,
            send,
            |r| sdispls[r]..sdispls[r] + scounts[r],
            recv,
            |r| rdispls[r]..rdispls[r] + rcounts[r],
        )
    }

    /// All-to-all exchange: block `sblock(r)` of `send` goes to rank `r`, and block
    /// `rblock(r)` of `recv` comes from rank `r`. This rank's own block is copied while the
    /// first peer takes its message.
    ///
    /// Pairwise (in step s, to rank me + s and from rank me - s), except when ranks outnumber
    /// the cores of a host: then every transfer is posted at once (scattered), so a running
    /// rank moves whatever its peers have posted instead of waiting, step by step, for the
    /// one peer of the step to get a time slice. `MPR_ALLTOALL_ALGO` forces either.
    pub(super) fn exchange_blocks<T: Pod>(
        &self,
        tag: i32,
        send: &[T],
        sblock: impl Fn(usize) -> std::ops::Range<usize>,
        recv: &mut [T],
        rblock: impl Fn(usize) -> std::ops::Range<usize>,
    ) -> Result<(), Error> {
        let (p, me) = (self.size(), self.rank());
        let own = &send[sblock(me)];
        if p == 1 {
            recv[rblock(me)].copy_from_slice(own);
            return Ok(());
        }
        let scattered = match super::settings().alltoall_algo.as_deref() {
            Some("pairwise") => false,
            Some("scattered") => true,
            // When ranks outnumber cores, each step of the pairwise exchange waits for its
            // partner to get a CPU; posting every transfer at once waits once. On one host
            // the segment says so (`crowded`, which every local rank must call); with no
            // segment (TCP, several hosts), the business cards do (4 ranks on 2 cores over
            // TCP: 0.56-0.78x of pairwise's time from 4 B to 512 KiB, 1.15x at 1 MiB).
            _ => p > 2 && (self.crowded(tag)? || self.outnumbered()),
        };
        if scattered {
            let sends: Vec<(&[u8], usize)> =
                (1..p).map(|s| (me + s) % p).map(|r| (bytes(&send[sblock(r)]), r)).collect();
            let mut blocks = split_blocks(recv, (0..p).map(&rblock));
            let mine = std::mem::take(&mut blocks[me]);
            let mut recvs: Vec<(&mut [u8], usize)> =
                (1..p).map(|s| (me + p - s) % p).map(|r| (bytes_mut(std::mem::take(&mut blocks[r])), r)).collect();
            return self.coll_xchg_all(tag, &sends, &mut recvs, Some((bytes(own), bytes_mut(mine))));
        }
        for step in 1..p {
            let to = (me + step) % p;
            let from = (me + p - step) % p;
            let out = bytes(&send[sblock(to)]);
            let (mine, inn) = two_mut(recv, rblock(me), rblock(from));
            if step == 1 {
                self.coll_xchg_with(
                    tag,
                    Some((out, to)),
                    Some((bytes_mut(inn), from)),
                    Some((bytes(own), bytes_mut(mine))),
                )?;
            } else {
                self.coll_xchg(tag, Some((out, to)), Some((bytes_mut(inn), from)))?;
            }
        }
        Ok(())
    }
}
