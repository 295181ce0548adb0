//! The "v" collectives (MPI 4.1, sections 6.5-6.8): every rank's block has its own count and
//! displacement (in elements).

use bytemuck::Pod;

use super::{bytes, bytes_mut, check_root};
use crate::comm::Comm;
use crate::error::Error;

/// Counts and displacements of `p` blocks within a buffer of `len` elements.
fn layout(what: &str, counts: &[usize], displs: &[usize], p: usize, len: usize) -> Result<(), Error> {
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
        let tag = self.coll_tag();
        if self.rank() != root {
            return self.coll_xchg(tag, Some((bytes(send), root)), None).map(|_| ());
        }
        let (recv, counts, displs) =
            recv.ok_or_else(|| Error::Other("gatherv: the root must pass a receive buffer".into()))?;
        layout("gatherv", counts, displs, self.size(), recv.len())?;
        for r in 0..self.size() {
            let block = &mut recv[displs[r]..displs[r] + counts[r]];
            if r == root {
                super::check_len("gatherv (root's own block)", send.len(), counts[r])?;
                block.copy_from_slice(send);
            } else {
                let got = self.coll_xchg(tag, None, Some((bytes_mut(block), r)))?;
                super::check_len("gatherv", got / std::mem::size_of::<T>().max(1), counts[r])?;
            }
        }
        Ok(())
    }

    /// Scatters blocks of varying size from `root` (`MPI_Scatterv`).
    pub fn scatterv<T: Pod>(
        &self,
        send: Option<(&[T], &[usize], &[usize])>,
        recv: &mut [T],
        root: usize,
    ) -> Result<(), Error> {
        check_root(self, root)?;
        let tag = self.coll_tag();
        if self.rank() != root {
            return self.coll_xchg(tag, None, Some((bytes_mut(recv), root))).map(|_| ());
        }
        let (send, counts, displs) =
            send.ok_or_else(|| Error::Other("scatterv: the root must pass a send buffer".into()))?;
        layout("scatterv", counts, displs, self.size(), send.len())?;
        for r in 0..self.size() {
            let block = &send[displs[r]..displs[r] + counts[r]];
            if r == root {
                super::check_len("scatterv (root's own block)", recv.len(), counts[r])?;
                recv.copy_from_slice(block);
            } else {
                self.coll_xchg(tag, Some((bytes(block), r)), None)?;
            }
        }
        Ok(())
    }

    /// Gathers blocks of varying size on every rank (`MPI_Allgatherv`; ring).
    pub fn allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<(), Error> {
        let (p, me) = (self.size(), self.rank());
        layout("allgatherv", counts, displs, p, recv.len())?;
        super::check_len("allgatherv (own block)", send.len(), counts[me])?;
        recv[displs[me]..displs[me] + counts[me]].copy_from_slice(send);
        let tag = self.coll_tag();
        let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
        for step in 0..p.saturating_sub(1) {
            let sb = (me + p - step) % p;
            let rb = (me + p - step - 1) % p;
            let out: Vec<T> = recv[displs[sb]..displs[sb] + counts[sb]].to_vec();
            let inn = &mut recv[displs[rb]..displs[rb] + counts[rb]];
            self.coll_xchg(tag, Some((bytes(&out), next)), Some((bytes_mut(inn), prev)))?;
        }
        Ok(())
    }

    /// Personalized all-to-all with blocks of varying size (`MPI_Alltoallv`; pairwise).
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
        let (p, me) = (self.size(), self.rank());
        layout("alltoallv (send)", scounts, sdispls, p, send.len())?;
        layout("alltoallv (receive)", rcounts, rdispls, p, recv.len())?;
        super::check_len("alltoallv (own block)", rcounts[me], scounts[me])?;
        recv[rdispls[me]..rdispls[me] + rcounts[me]].copy_from_slice(&send[sdispls[me]..sdispls[me] + scounts[me]]);
        let tag = self.coll_tag();
        for step in 1..p {
            let to = (me + step) % p;
            let from = (me + p - step) % p;
            let out = &send[sdispls[to]..sdispls[to] + scounts[to]];
            let inn = &mut recv[rdispls[from]..rdispls[from] + rcounts[from]];
            self.coll_xchg(tag, Some((bytes(out), to)), Some((bytes_mut(inn), from)))?;
        }
        Ok(())
    }
}
