//! Neighbourhood collectives on a Cartesian grid (MPI 4.1, section 8.6): each rank exchanges
//! blocks with its neighbours only, in MPI's order (along each dimension, the rank a step
//! back, then the one a step forward). A neighbour past a closed edge is absent: nothing is
//! sent to it, and its receive block is left as it was.
//!
//! Every transfer is posted at once. Two messages between the same pair of ranks (both
//! neighbours along a dimension of two points that wraps round, or a rank its own neighbour
//! along a dimension of one) must land by direction: block s of the sender in block s ^ 1
//! of the receiver (MPI-4.0's errata, MPI Forum issue 153). Each collective runs on one
//! schedule with one tag and posts the receives of each dimension in the other order (block
//! 2d + 1's before 2d's), so the first of the two messages, the sender's block 2d, lands in
//! 2d + 1. A blocking form starts its nonblocking one and waits for it.

use std::ops::Range;

use bytemuck::Pod;

use super::vector::{disjoint_layout, layout};
use super::CollRequest;
use crate::error::Error;
use crate::request::Scope;
use crate::topo::CartComm;

impl CartComm {
    /// This rank's neighbours, in MPI's order: along each dimension, the rank a step back,
    /// then the rank a step forward; `None` past the edge of a dimension that does not wrap
    /// round.
    pub fn neighbors(&self) -> Vec<Option<usize>> {
        (0..self.grid().ndims())
            .flat_map(|d| {
                let (back, forward) = self.shift(d, 1).expect("d is a dimension of the grid");
                [back, forward]
            })
            .collect()
    }

    /// Sends `send` to every neighbour and receives a block of the same size from each into
    /// `recv`, block `i` from neighbour `i` (`MPI_Neighbor_allgather`). Collective.
    pub fn neighbor_allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        crate::request::scope(|s| self.ineighbor_allgather(s, send, recv)?.wait())
    }

    /// As [`CartComm::neighbor_allgather`], block `i` of `recv` holding `counts[i]` elements
    /// at `displs[i]` (`MPI_Neighbor_allgatherv`). Collective.
    pub fn neighbor_allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<(), Error> {
        crate::request::scope(|s| self.ineighbor_allgatherv(s, send, recv, counts, displs)?.wait())
    }

    /// Sends block `i` of `send` to neighbour `i` and receives block `i` of `recv` from it,
    /// all blocks of `send.len() / k` elements for `k` neighbours (`MPI_Neighbor_alltoall`).
    /// Collective.
    pub fn neighbor_alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        crate::request::scope(|s| self.ineighbor_alltoall(s, send, recv)?.wait())
    }

    /// As [`CartComm::neighbor_alltoall`], each block of its own size and place
    /// (`MPI_Neighbor_alltoallv`). Collective.
    #[allow(clippy::too_many_arguments)]
    pub fn neighbor_alltoallv<T: Pod>(
        &self,
        send: &[T],
        scounts: &[usize],
        sdispls: &[usize],
        recv: &mut [T],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<(), Error> {
        crate::request::scope(|s| self.ineighbor_alltoallv(s, send, scounts, sdispls, recv, rcounts, rdispls)?.wait())
    }

    /// Starts [`CartComm::neighbor_allgather`] (`MPI_Ineighbor_allgather`).
    pub fn ineighbor_allgather<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        let k = 2 * self.grid().ndims();
        let n = send.len();
        let displs: Vec<usize> = (0..k).map(|i| i * n).collect();
        self.ineighbor_allgatherv(scope, send, recv, &vec![n; k], &displs)
    }

    /// Starts [`CartComm::neighbor_allgatherv`] (`MPI_Ineighbor_allgatherv`).
    pub fn ineighbor_allgatherv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<CollRequest<'a>, Error> {
        let k = 2 * self.grid().ndims();
        disjoint_layout("ineighbor_allgatherv (receive)", counts, displs, k, recv.len())?;
        let n = send.len();
        self.istart(scope, send, |_| 0..n, recv, |i| displs[i]..displs[i] + counts[i])
    }

    /// Starts [`CartComm::neighbor_alltoall`] (`MPI_Ineighbor_alltoall`).
    pub fn ineighbor_alltoall<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        let k = 2 * self.grid().ndims();
        if (k == 0 && !send.is_empty()) || (k > 0 && !send.len().is_multiple_of(k)) || recv.len() != send.len() {
            return Err(Error::Arg(format!(
                "ineighbor_alltoall: {} elements to send and {} to receive, for {k} neighbours",
                send.len(),
                recv.len()
            )));
        }
        let n = send.len() / k.max(1);
        self.istart(scope, send, |i| i * n..(i + 1) * n, recv, |i| i * n..(i + 1) * n)
    }

    /// Starts [`CartComm::neighbor_alltoallv`] (`MPI_Ineighbor_alltoallv`).
    #[allow(clippy::too_many_arguments)]
    pub fn ineighbor_alltoallv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        scounts: &[usize],
        sdispls: &[usize],
        recv: &'a mut [T],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<CollRequest<'a>, Error> {
        let k = 2 * self.grid().ndims();
        layout("ineighbor_alltoallv (send)", scounts, sdispls, k, send.len())?;
        disjoint_layout("ineighbor_alltoallv (receive)", rcounts, rdispls, k, recv.len())?;
        self.istart(scope, send, |i| sdispls[i]..sdispls[i] + scounts[i], recv, |i| rdispls[i]..rdispls[i] + rcounts[i])
    }

    /// Starts sending block `sblock(i)` of `send` to neighbour `i` and receiving block
    /// `rblock(i)` of `recv` from it, on one schedule (the receives of each dimension in the
    /// other order: see the module's notes).
    fn istart<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        sblock: impl Fn(usize) -> Range<usize>,
        recv: &'a mut [T],
        rblock: impl Fn(usize) -> Range<usize>,
    ) -> Result<CollRequest<'a>, Error> {
        let near = self.neighbors();
        let sends = near.iter().enumerate().filter_map(|(i, n)| Some(((*n)?, sblock(i)))).collect();
        let recvs = (0..near.len()).map(|j| j ^ 1).filter_map(|i| Some((near[i]?, rblock(i)))).collect();
        self.comm().iexchange(scope, send, sends, recv, recvs, None)
    }
}
