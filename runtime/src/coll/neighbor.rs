//! Neighbourhood collectives (MPI 4.1, section 8.6): each rank exchanges blocks with its
//! neighbours only, a Cartesian grid's (along each dimension, the rank a step back, then the
//! one a step forward; a neighbour past a closed edge is absent: nothing is sent to it, and
//! its receive block is left as it was) or a graph's (blocks go to its destinations and come
//! from its sources, in their order). Both are a [`Neighborhood`], which runs them.
//!
//! Every transfer is posted at once. Two messages between the same pair of ranks (both
//! neighbours along a dimension of two points that wraps round, or a rank its own neighbour
//! along a dimension of one) must land by direction: block s of the sender in block s ^ 1
//! of the receiver (MPI-4.0's errata, MPI Forum issue 153). Each collective runs on one
//! schedule with one tag and posts a grid's receives of each dimension in the other order
//! (block 2d + 1's before 2d's), so the first of the two messages, the sender's block 2d,
//! lands in 2d + 1. A graph's go in its sources' order: the k-th message from a rank lands
//! in the block of its k-th appearance among them. A blocking form starts its nonblocking
//! one and waits for it.

use std::ops::Range;

use bytemuck::Pod;

use super::vector::{disjoint_layout, layout};
use super::CollRequest;
use crate::comm::{sealed, Comm, Communicator};
use crate::error::Error;
use crate::request::Scope;
use crate::topo::CartComm;

/// A communicator with the neighbours each rank exchanges blocks with: a Cartesian grid's
/// ([`CartComm::neighborhood`]) or a graph's ([`Comm::dist_graph_adjacent`] and the others).
#[derive(Debug, Clone)]
pub struct Neighborhood {
    comm: Comm,
    /// Where each block of this rank's goes (`None`: past a grid's closed edge, nowhere).
    destinations: Vec<Option<usize>>,
    /// Where each block this rank receives comes from.
    sources: Vec<Option<usize>>,
    /// A grid's: the two neighbours of each dimension in pairs, whose receives are posted
    /// in the other order (see the module's notes).
    paired: bool,
}

impl sealed::Sealed for Neighborhood {}

impl Communicator for Neighborhood {
    fn as_comm(&self) -> &Comm {
        &self.comm
    }
}

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

    /// The grid's neighbourhood, which runs its neighbourhood collectives.
    pub fn neighborhood(&self) -> Neighborhood {
        let near = self.neighbors();
        Neighborhood { comm: self.comm().clone(), destinations: near.clone(), sources: near, paired: true }
    }

    /// Sends `send` to every neighbour and receives a block of the same size from each into
    /// `recv`, block `i` from neighbour `i` (`MPI_Neighbor_allgather`). Collective.
    pub fn neighbor_allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        self.neighborhood().neighbor_allgather(send, recv)
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
        self.neighborhood().neighbor_allgatherv(send, recv, counts, displs)
    }

    /// Sends block `i` of `send` to neighbour `i` and receives block `i` of `recv` from it,
    /// all blocks of `send.len() / k` elements for `k` neighbours (`MPI_Neighbor_alltoall`).
    /// Collective.
    pub fn neighbor_alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        self.neighborhood().neighbor_alltoall(send, recv)
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
        self.neighborhood().neighbor_alltoallv(send, scounts, sdispls, recv, rcounts, rdispls)
    }

    /// Starts [`CartComm::neighbor_allgather`] (`MPI_Ineighbor_allgather`).
    pub fn ineighbor_allgather<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        self.neighborhood().ineighbor_allgather(scope, send, recv)
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
        self.neighborhood().ineighbor_allgatherv(scope, send, recv, counts, displs)
    }

    /// Starts [`CartComm::neighbor_alltoall`] (`MPI_Ineighbor_alltoall`).
    pub fn ineighbor_alltoall<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        self.neighborhood().ineighbor_alltoall(scope, send, recv)
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
        self.neighborhood().ineighbor_alltoallv(scope, send, scounts, sdispls, recv, rcounts, rdispls)
    }
}

impl Neighborhood {
    /// `comm` with a graph's neighbours of this rank: it sends block `i` to rank
    /// `destinations[i]` and receives block `j` from rank `sources[j]` of `comm`.
    pub(crate) fn graph(comm: Comm, sources: Vec<usize>, destinations: Vec<usize>) -> Result<Neighborhood, Error> {
        if let Some(&r) = sources.iter().chain(&destinations).find(|&&r| r >= comm.size()) {
            return Err(Error::Rank { rank: r, size: comm.size() });
        }
        let some = |v: Vec<usize>| v.into_iter().map(Some).collect();
        Ok(Neighborhood { comm, destinations: some(destinations), sources: some(sources), paired: false })
    }

    /// The communicator, for every call that is not about the neighbours.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The ranks blocks come from, in order (`None`: a grid's missing neighbour).
    pub fn sources(&self) -> &[Option<usize>] {
        &self.sources
    }

    /// The ranks blocks go to, in order (`None`: a grid's missing neighbour).
    pub fn destinations(&self) -> &[Option<usize>] {
        &self.destinations
    }

    /// Sends `send` to every destination and receives a block of the same size from each
    /// source into `recv`, block `j` from source `j` (`MPI_Neighbor_allgather`). Collective.
    pub fn neighbor_allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        crate::request::scope(|s| self.ineighbor_allgather(s, send, recv)?.wait())
    }

    /// As [`Neighborhood::neighbor_allgather`], block `j` of `recv` holding `counts[j]`
    /// elements at `displs[j]` (`MPI_Neighbor_allgatherv`). Collective.
    pub fn neighbor_allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<(), Error> {
        crate::request::scope(|s| self.ineighbor_allgatherv(s, send, recv, counts, displs)?.wait())
    }

    /// Sends block `i` of `send` to destination `i` and receives block `j` of `recv` from
    /// source `j`, all blocks of one size (`MPI_Neighbor_alltoall`). Collective.
    pub fn neighbor_alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        crate::request::scope(|s| self.ineighbor_alltoall(s, send, recv)?.wait())
    }

    /// As [`Neighborhood::neighbor_alltoall`], each block of its own size and place
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

    /// Starts [`Neighborhood::neighbor_allgather`] (`MPI_Ineighbor_allgather`).
    pub fn ineighbor_allgather<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        let (k, n) = (self.sources.len(), send.len());
        let displs: Vec<usize> = (0..k).map(|i| i * n).collect();
        self.ineighbor_allgatherv(scope, send, recv, &vec![n; k], &displs)
    }

    /// Starts [`Neighborhood::neighbor_allgatherv`] (`MPI_Ineighbor_allgatherv`).
    pub fn ineighbor_allgatherv<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<CollRequest<'a>, Error> {
        disjoint_layout("ineighbor_allgatherv (receive)", counts, displs, self.sources.len(), recv.len())?;
        let n = send.len();
        self.istart(scope, send, |_| 0..n, recv, |j| displs[j]..displs[j] + counts[j])
    }

    /// Starts [`Neighborhood::neighbor_alltoall`] (`MPI_Ineighbor_alltoall`).
    pub fn ineighbor_alltoall<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>, Error> {
        let (out, inn) = (self.destinations.len(), self.sources.len());
        // The block size, from whichever side has blocks.
        let n = send.len().checked_div(out).unwrap_or(recv.len() / inn.max(1));
        if send.len() != n * out || recv.len() != n * inn {
            return Err(Error::Arg(format!(
                "ineighbor_alltoall: {} elements to send to {out} neighbours and {} to receive from {inn}",
                send.len(),
                recv.len()
            )));
        }
        self.istart(scope, send, |i| i * n..(i + 1) * n, recv, |j| j * n..(j + 1) * n)
    }

    /// Starts [`Neighborhood::neighbor_alltoallv`] (`MPI_Ineighbor_alltoallv`).
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
        layout("ineighbor_alltoallv (send)", scounts, sdispls, self.destinations.len(), send.len())?;
        disjoint_layout("ineighbor_alltoallv (receive)", rcounts, rdispls, self.sources.len(), recv.len())?;
        self.istart(scope, send, |i| sdispls[i]..sdispls[i] + scounts[i], recv, |j| rdispls[j]..rdispls[j] + rcounts[j])
    }

    /// Starts sending block `sblock(i)` of `send` to destination `i` and receiving block
    /// `rblock(j)` of `recv` from source `j`, on one schedule (a grid's receives of each
    /// dimension in the other order: see the module's notes).
    fn istart<'a, T: Pod>(
        &self,
        scope: &Scope<'a>,
        send: &'a [T],
        sblock: impl Fn(usize) -> Range<usize>,
        recv: &'a mut [T],
        rblock: impl Fn(usize) -> Range<usize>,
    ) -> Result<CollRequest<'a>, Error> {
        let sends = self.destinations.iter().enumerate().filter_map(|(i, n)| Some(((*n)?, sblock(i)))).collect();
        let order = |j: usize| if self.paired { j ^ 1 } else { j };
        let recvs = (0..self.sources.len()).map(order).filter_map(|j| Some((self.sources[j]?, rblock(j)))).collect();
        self.comm.iexchange(scope, send, sends, recv, recvs, None)
    }
}
