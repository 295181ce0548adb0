//! Reduce-scatter and prefix reductions (MPI 4.1, sections 6.10-6.11).

use bytemuck::Pod;

use super::op::Op;
use crate::comm::Comm;
use crate::error::Error;

impl Comm {
    /// Reduces `send` (p blocks of `recv.len()` elements) with `op` and leaves block `r` of
    /// the result on rank `r` (`MPI_Reduce_scatter_block`).
    pub fn reduce_scatter_block<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O) -> Result<(), Error> {
        let n = recv.len();
        super::check_len("reduce_scatter_block", send.len(), n * self.size())?;
        let counts = vec![n; self.size()];
        self.reduce_scatter(send, recv, &counts, op)
    }

    /// Reduces `send` with `op` and leaves `counts[r]` elements of the result, starting after
    /// the blocks of the ranks before `r`, on rank `r` (`MPI_Reduce_scatter`): a reduction
    /// to rank 0 followed by a scatter, so the result has the reduction's fixed order. On an
    /// inter-communicator, the result is the other group's reduction.
    pub fn reduce_scatter<T: Pod, O: Op<T>>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: O,
    ) -> Result<(), Error> {
        let p = self.size();
        if counts.len() != p {
            return Err(Error::Other(format!("reduce_scatter: {} counts for {p} ranks", counts.len())));
        }
        super::check_len("reduce_scatter", send.len(), counts.iter().sum())?;
        super::check_len("reduce_scatter (own block)", recv.len(), counts[self.rank()])?;
        let displs: Vec<usize> = counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
        if self.is_inter() {
            // The other group's reduction (both groups' inputs are of one length), of which
            // this rank keeps its block.
            let mut full = vec![T::zeroed(); send.len()];
            self.allreduce(send, &mut full, op)?;
            let me = self.rank();
            recv.copy_from_slice(&full[displs[me]..displs[me] + counts[me]]);
            return Ok(());
        }
        let mut full = send.to_vec();
        let tag = self.coll_tag()?;
        super::algo::reduce(self, tag, &mut full, &op, 0)?;
        let root_send = (self.rank() == 0).then_some((&full[..], counts, &displs[..]));
        self.scatterv(root_send, recv, 0)
    }

    /// Inclusive prefix reduction: rank `r` gets `send` of ranks 0..=r combined in rank
    /// order (`MPI_Scan`).
    pub fn scan<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O) -> Result<(), Error> {
        super::check_len("scan", recv.len(), send.len())?;
        let (p, me) = (self.size(), self.rank());
        let tag = self.coll_tag()?;
        recv.copy_from_slice(send);
        if me > 0 {
            let mut before = vec![T::zeroed(); send.len()];
            self.coll_xchg(tag, None, Some((bytemuck::cast_slice_mut(&mut before), me - 1)))?;
            op.apply(&mut before, send);
            recv.copy_from_slice(&before);
        }
        if me + 1 < p {
            self.coll_xchg(tag, Some((bytemuck::cast_slice(recv), me + 1)), None)?;
        }
        Ok(())
    }

    /// Exclusive prefix reduction: rank `r > 0` gets `send` of ranks 0..r combined in rank
    /// order; rank 0's `recv` is left unchanged (`MPI_Exscan`).
    pub fn exscan<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O) -> Result<(), Error> {
        super::check_len("exscan", recv.len(), send.len())?;
        let (p, me) = (self.size(), self.rank());
        let tag = self.coll_tag()?;
        // What goes on: the prefix through this rank.
        let mut through = send.to_vec();
        if me > 0 {
            self.coll_xchg(tag, None, Some((bytemuck::cast_slice_mut(recv), me - 1)))?;
            through.copy_from_slice(recv);
            op.apply(&mut through, send);
        }
        if me + 1 < p {
            self.coll_xchg(tag, Some((bytemuck::cast_slice(&through), me + 1)), None)?;
        }
        Ok(())
    }
}
