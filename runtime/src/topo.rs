//! Process topologies (MPI 4.1, sections 8.5 and 8.6): a Cartesian grid laid over the ranks
//! of a communicator in row-major order, the grid point of a rank and the rank of a point, the
//! neighbours along a dimension, sub-grids, and a balanced grid for a number of ranks; and
//! graphs, whose neighbours each rank gives (distributed graphs) or all ranks give alike
//! (MPI-1's graphs). Either kind runs the neighbourhood collectives as a [`Neighborhood`].
//!
//! As rsmpi's `CartesianCommunicator`: a communicator with a grid is a type of its own
//! ([`CartComm`]), so a grid question cannot be asked of a communicator without one; it
//! lends its [`Comm`] to every other call.

pub use crate::coll::Neighborhood;
use crate::comm::{sealed, Comm, Communicator};
use crate::error::Error;

/// The shape of a Cartesian grid: each dimension's extent and whether it wraps round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    dims: Vec<usize>,
    periods: Vec<bool>,
}

impl Grid {
    /// A grid of `dims.len()` dimensions, dimension `i` of extent `dims[i]`, periodic
    /// (its last point's neighbour is its first) where `periods[i]`.
    pub fn new(dims: &[usize], periods: &[bool]) -> Result<Grid, Error> {
        if dims.len() != periods.len() {
            return Err(Error::Arg(format!("{} dimensions but {} periodicities", dims.len(), periods.len())));
        }
        if let Some(i) = dims.iter().position(|&d| d == 0) {
            return Err(Error::Dims(format!("dimension {i} of the grid has no points")));
        }
        if dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_none() {
            return Err(Error::Dims(format!("a grid of {dims:?} points has more points than a machine can count")));
        }
        Ok(Grid { dims: dims.to_vec(), periods: periods.to_vec() })
    }

    /// Each dimension's extent.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Whether each dimension wraps round.
    pub fn periods(&self) -> &[bool] {
        &self.periods
    }

    /// The number of dimensions.
    pub fn ndims(&self) -> usize {
        self.dims.len()
    }

    /// The number of points (1 for a grid of no dimensions).
    pub fn size(&self) -> usize {
        self.dims.iter().product()
    }

    /// The point of rank `rank` (`MPI_Cart_coords`): ranks fill the grid in row-major
    /// order, the last dimension fastest.
    pub fn coords(&self, rank: usize) -> Result<Vec<usize>, Error> {
        if rank >= self.size() {
            return Err(Error::Rank { rank, size: self.size() });
        }
        let mut rest = rank;
        let mut at = vec![0; self.ndims()];
        for (c, &d) in at.iter_mut().zip(&self.dims).rev() {
            *c = rest % d;
            rest /= d;
        }
        Ok(at)
    }

    /// The rank at point `coords` (`MPI_Cart_rank`): a coordinate outside its dimension
    /// wraps round a periodic dimension and is an error on another.
    pub fn rank(&self, coords: &[isize]) -> Result<usize, Error> {
        if coords.len() != self.ndims() {
            return Err(Error::Arg(format!("{} coordinates for a grid of {} dimensions", coords.len(), self.ndims())));
        }
        let mut rank = 0;
        for (i, (&c, &d)) in coords.iter().zip(&self.dims).enumerate() {
            let c = self.wrap(i, c).ok_or_else(|| {
                Error::Arg(format!("coordinate {c} of dimension {i} is outside 0..{d}, which does not wrap round"))
            })?;
            rank = rank * d + c;
        }
        Ok(rank)
    }

    /// Coordinate `c` of dimension `dim` inside the grid: wrapped round if it is periodic,
    /// `None` if it is not and `c` lies outside.
    fn wrap(&self, dim: usize, c: isize) -> Option<usize> {
        let d = self.dims[dim] as isize;
        if self.periods[dim] {
            Some(c.rem_euclid(d) as usize)
        } else {
            usize::try_from(c).ok().filter(|&c| c < self.dims[dim])
        }
    }

    /// The ranks `disp` points before and after rank `rank` along dimension `dim`
    /// (`MPI_Cart_shift`): `(source, destination)`, `None` (`MPI_PROC_NULL`) past the edge
    /// of a dimension that does not wrap round.
    pub fn shift(&self, rank: usize, dim: usize, disp: isize) -> Result<(Option<usize>, Option<usize>), Error> {
        if dim >= self.ndims() {
            return Err(Error::Arg(format!("direction {dim} of a grid of {} dimensions", self.ndims())));
        }
        let here: Vec<isize> = self.coords(rank)?.iter().map(|&c| c as isize).collect();
        let along = |to: Option<isize>| {
            let mut at = here.clone();
            at[dim] = self.wrap(dim, to?)? as isize;
            self.rank(&at).ok()
        };
        Ok((along(here[dim].checked_sub(disp)), along(here[dim].checked_add(disp))))
    }
}

/// A communicator whose ranks form a Cartesian grid (`MPI_Cart_create`'s).
#[derive(Debug, Clone)]
pub struct CartComm {
    comm: Comm,
    grid: Grid,
}

impl sealed::Sealed for CartComm {}

impl Communicator for CartComm {
    fn as_comm(&self) -> &Comm {
        &self.comm
    }
}

impl CartComm {
    /// `comm` with the grid `grid` it was made with (the C ABI keeps the two apart).
    pub(crate) fn from_parts(comm: Comm, grid: Grid) -> CartComm {
        debug_assert_eq!(comm.size(), grid.size());
        CartComm { comm, grid }
    }

    /// The communicator, for every call that is not about the grid.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The grid.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// This rank's point of the grid.
    pub fn coords(&self) -> Vec<usize> {
        self.grid.coords(self.rank()).expect("every rank of the communicator is a point of its grid")
    }

    /// The ranks `disp` points before and after this one along dimension `dim`, as
    /// [`Grid::shift`].
    pub fn shift(&self, dim: usize, disp: isize) -> Result<(Option<usize>, Option<usize>), Error> {
        self.grid.shift(self.rank(), dim, disp)
    }

    /// The sub-grids that keep the dimensions where `remain` is true, each a communicator
    /// of its own (`MPI_Cart_sub`). Collective. A rank's sub-grid holds the ranks that
    /// share its coordinates in the dimensions dropped, in the same order.
    pub fn sub(&self, remain: &[bool]) -> Result<CartComm, Error> {
        let g = &self.grid;
        if remain.len() != g.ndims() {
            return Err(Error::Arg(format!("{} dimensions to keep or drop of a grid of {}", remain.len(), g.ndims())));
        }
        let here = self.coords();
        let (mut dims, mut periods, mut color) = (Vec::new(), Vec::new(), 0usize);
        for i in 0..g.ndims() {
            if remain[i] {
                dims.push(g.dims[i]);
                periods.push(g.periods[i]);
            } else {
                color = color * g.dims[i] + here[i];
            }
        }
        let color = u32::try_from(color).map_err(|_| Error::Dims(format!("sub-grid {color} of a grid too large")))?;
        // Row-major order over the dimensions kept is the order of the ranks: the key.
        let comm = self.comm.split(Some(color), self.rank() as i32)?.expect("every rank passes a color");
        Ok(CartComm { comm, grid: Grid { dims, periods } })
    }
}

impl Comm {
    /// The communicator of the first `grid.size()` ranks laid out on `grid`
    /// (`MPI_Cart_create`); the other ranks get `None`. Collective: every rank passes the
    /// same grid. Ranks keep their order (`reorder` permits another, which mpr does not
    /// take).
    pub fn cart(&self, grid: &Grid, reorder: bool) -> Result<Option<CartComm>, Error> {
        let _ = reorder;
        self.intra("a grid")?;
        if grid.size() > self.size() {
            return Err(Error::Arg(format!(
                "a grid of {} points on a communicator of {} ranks",
                grid.size(),
                self.size()
            )));
        }
        let inside = self.rank() < grid.size();
        let made = self.split(inside.then_some(0), self.rank() as i32)?;
        Ok(made.map(|comm| CartComm { comm, grid: grid.clone() }))
    }
}

/// An edge of a graph that a rank gives [`Comm::dist_graph`]: from rank `from` to rank `to`,
/// with a weight (MPI's, kept for the program).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    /// The rank the edge leaves.
    pub from: usize,
    /// The rank it reaches.
    pub to: usize,
    /// Its weight.
    pub weight: i32,
}

/// A graph's neighbourhood as [`Comm::dist_graph`] makes it: the neighbourhood, and the
/// weights of its sources' edges and of its destinations', in their order.
#[derive(Debug, Clone)]
pub struct DistGraph {
    /// The new communicator and this rank's neighbours.
    pub neighborhood: Neighborhood,
    /// The weights of the edges from its sources, in their order.
    pub source_weights: Vec<i32>,
    /// The weights of the edges to its destinations, in their order.
    pub destination_weights: Vec<i32>,
}

impl Comm {
    /// A communicator of the same ranks whose neighbours are a graph's, each rank giving
    /// its own: it receives from `sources` and sends to `destinations`, ranks of this
    /// communicator, in their order (`MPI_Dist_graph_create_adjacent`). Collective; the
    /// edges the ranks give must agree (an edge from a to b is among a's destinations as
    /// often as among b's sources), which is not checked.
    pub fn dist_graph_adjacent(&self, sources: &[usize], destinations: &[usize]) -> Result<Neighborhood, Error> {
        self.intra("a graph")?;
        Neighborhood::graph(self.dup()?, sources.to_vec(), destinations.to_vec())
    }

    /// A communicator of the same ranks whose neighbours are the graph of the `edges` every
    /// rank gives (any edges: each goes to the two ranks it joins) (`MPI_Dist_graph_create`).
    /// Collective. A rank's sources and destinations come in the order of the ranks that
    /// gave their edges, and of the edges each gave.
    pub fn dist_graph(&self, edges: &[Edge]) -> Result<DistGraph, Error> {
        self.intra("a graph")?;
        let p = self.size();
        if let Some(e) = edges.iter().find(|e| e.from >= p || e.to >= p) {
            return Err(Error::Rank { rank: e.from.max(e.to), size: p });
        }
        // To each rank, its edges: (1 for one it is the source of, else 0, the other end, weight).
        let mut to: Vec<Vec<i64>> = vec![Vec::new(); p];
        for e in edges {
            to[e.from].extend([1, e.to as i64, e.weight as i64]);
            to[e.to].extend([0, e.from as i64, e.weight as i64]);
        }
        let scounts: Vec<usize> = to.iter().map(Vec::len).collect();
        let mut rcounts = vec![0usize; p];
        self.alltoall(&scounts, &mut rcounts)?;
        let displs = |c: &[usize]| c.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect::<Vec<_>>();
        let (sdispls, rdispls) = (displs(&scounts), displs(&rcounts));
        let mut got = vec![0i64; rcounts.iter().sum()];
        self.alltoallv(&to.concat(), &scounts, &sdispls, &mut got, &rcounts, &rdispls)?;
        let (mut sources, mut source_weights, mut destinations, mut destination_weights) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for e in got.chunks(3) {
            let (other, weight) = (e[1] as usize, e[2] as i32);
            if e[0] == 1 {
                destinations.push(other);
                destination_weights.push(weight);
            } else {
                sources.push(other);
                source_weights.push(weight);
            }
        }
        let neighborhood = Neighborhood::graph(self.dup()?, sources, destinations)?;
        Ok(DistGraph { neighborhood, source_weights, destination_weights })
    }

    /// The communicator of the first `index.len()` ranks, node `i` joined to the nodes
    /// `edges[index[i - 1]..index[i]]` (`index[-1]` being 0), every rank giving the whole
    /// graph (`MPI_Graph_create`); the other ranks get `None`. Collective. A node's list of
    /// neighbours is both its sources and its destinations.
    pub fn graph(&self, index: &[usize], edges: &[usize]) -> Result<Option<Neighborhood>, Error> {
        self.intra("a graph")?;
        let n = index.len();
        if n > self.size() {
            return Err(Error::Arg(format!("a graph of {n} nodes on a communicator of {} ranks", self.size())));
        }
        if index.windows(2).any(|w| w[0] > w[1]) || index.last().copied().unwrap_or(0) != edges.len() {
            return Err(Error::Arg(format!("graph index {index:?} does not end at its {} edges, rising", edges.len())));
        }
        if let Some(&e) = edges.iter().find(|&&e| e >= n) {
            return Err(Error::Arg(format!("an edge to node {e} of a graph of {n}")));
        }
        let inside = self.rank() < n;
        let Some(comm) = self.split(inside.then_some(0), self.rank() as i32)? else { return Ok(None) };
        let near = graph_neighbors(index, edges, comm.rank()).to_vec();
        Neighborhood::graph(comm, near.clone(), near).map(Some)
    }
}

/// Node `node`'s neighbours in the graph `index`, `edges` of [`Comm::graph`] (MPI-1's
/// layout: `edges[index[node - 1]..index[node]]`, from 0 for node 0).
pub fn graph_neighbors<'a>(index: &[usize], edges: &'a [usize], node: usize) -> &'a [usize] {
    &edges[if node == 0 { 0 } else { index[node - 1] }..index[node]]
}

/// Fills the zero entries of `dims` with the extents of a grid of `nodes` points that are
/// as close to each other as they can be, in non-increasing order; the others stay
/// (`MPI_Dims_create`). Of the grids whose free extents differ least, the one whose
/// smallest extent is largest, then its next smallest, and so on: MPICH's choice (every
/// one of the 75,000 grids its test `topo/dims5` expects).
pub fn dims_create(nodes: usize, dims: &mut [usize]) -> Result<(), Error> {
    let fixed: usize = dims.iter().filter(|&&d| d != 0).product();
    if nodes == 0 || !nodes.is_multiple_of(fixed) {
        return Err(Error::Dims(format!(
            "{nodes} ranks are not a whole number of grids of the {fixed} points the given extents make"
        )));
    }
    let free = dims.iter().filter(|&&d| d == 0).count();
    let left = nodes / fixed;
    if free == 0 {
        return if left == 1 {
            Ok(())
        } else {
            Err(Error::Dims(format!("the extents given make {fixed} points, not {nodes}")))
        };
    }
    let mut best: Option<Vec<usize>> = None;
    // Every factor divides `left`: its divisors, largest first (found up to its square root).
    let mut divisors: Vec<usize> =
        (1..).take_while(|d| d * d <= left).filter(|d| left.is_multiple_of(*d)).flat_map(|d| [d, left / d]).collect();
    divisors.sort_unstable_by(|a, b| b.cmp(a));
    divisors.dedup();
    factorings(&divisors, left, free, left, &mut Vec::with_capacity(free), &mut |f| {
        let better = best.as_ref().is_none_or(|b| {
            let (spread, theirs) = (f[0] - f[free - 1], b[0] - b[free - 1]);
            spread < theirs || (spread == theirs && f.iter().rev().gt(b.iter().rev()))
        });
        if better {
            best = Some(f.to_vec());
        }
    });
    let best = best.expect("a number always factors as itself and ones");
    for (d, f) in dims.iter_mut().filter(|d| **d == 0).zip(best) {
        *d = f;
    }
    Ok(())
}

/// Calls `each` with every way to write `n` as the product of `k` more factors from
/// `divisors` (largest first), each at most `most`, in non-increasing order after those of
/// `prefix`.
fn factorings(
    divisors: &[usize],
    n: usize,
    k: usize,
    most: usize,
    prefix: &mut Vec<usize>,
    each: &mut impl FnMut(&[usize]),
) {
    if k == 1 {
        if n <= most {
            prefix.push(n);
            each(prefix);
            prefix.pop();
        }
        return;
    }
    for &f in divisors.iter().filter(|&&f| f <= most.min(n) && n.is_multiple_of(f)) {
        // The k factors of n are at most f each: f^k >= n, or no ordering fits.
        if f.checked_pow(k as u32).is_some_and(|p| p < n) {
            break;
        }
        prefix.push(f);
        factorings(divisors, n / f, k - 1, f, prefix, each);
        prefix.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_and_ranks_are_row_major_and_inverse() {
        let g = Grid::new(&[2, 3, 4], &[false, true, false]).unwrap();
        assert_eq!(g.size(), 24);
        assert_eq!(g.coords(0).unwrap(), [0, 0, 0]);
        assert_eq!(g.coords(5).unwrap(), [0, 1, 1]);
        assert_eq!(g.coords(23).unwrap(), [1, 2, 3]);
        for r in 0..24 {
            let at: Vec<isize> = g.coords(r).unwrap().iter().map(|&c| c as isize).collect();
            assert_eq!(g.rank(&at).unwrap(), r);
        }
        assert_eq!(g.coords(24).unwrap_err().class(), crate::ErrorClass::Rank);
        // Dimension 1 wraps round; 0 and 2 do not.
        assert_eq!(g.rank(&[0, -1, 0]).unwrap(), g.rank(&[0, 2, 0]).unwrap());
        assert_eq!(g.rank(&[0, 7, 0]).unwrap(), g.rank(&[0, 1, 0]).unwrap());
        assert_eq!(g.rank(&[2, 0, 0]).unwrap_err().class(), crate::ErrorClass::Arg);
        assert_eq!(g.rank(&[0, 0, -1]).unwrap_err().class(), crate::ErrorClass::Arg);
        assert_eq!(g.rank(&[0, 0]).unwrap_err().class(), crate::ErrorClass::Arg);
    }

    #[test]
    fn shifts_wrap_round_periodic_dimensions_and_stop_at_the_edge_of_others() {
        let g = Grid::new(&[3, 4], &[false, true]).unwrap();
        // Rank 4 is (1, 0).
        assert_eq!(g.shift(4, 0, 1).unwrap(), (Some(0), Some(8)));
        assert_eq!(g.shift(4, 0, 2).unwrap(), (None, None));
        assert_eq!(g.shift(4, 1, 1).unwrap(), (Some(7), Some(5)));
        assert_eq!(g.shift(4, 1, -5).unwrap(), (Some(5), Some(7)));
        assert_eq!(g.shift(0, 0, -1).unwrap(), (Some(4), None));
        assert_eq!(g.shift(4, 2, 1).unwrap_err().class(), crate::ErrorClass::Arg);
        assert_eq!(Grid::new(&[2, 0], &[false, false]).unwrap_err().class(), crate::ErrorClass::Dims);
        assert_eq!(Grid::new(&[2], &[false, false]).unwrap_err().class(), crate::ErrorClass::Arg);
    }

    #[test]
    fn balanced_grids_are_mpichs() {
        // Checked against MPICH's MPI_Dims_create.
        let cases: &[(usize, &[usize], &[usize])] = &[
            (12, &[0, 0], &[4, 3]),
            (7, &[0, 0], &[7, 1]),
            (36, &[0, 0, 0], &[4, 3, 3]),
            (72, &[0, 0, 0], &[6, 4, 3]),
            (200, &[0, 0, 0, 0], &[5, 5, 4, 2]),
            (20, &[0, 0, 0, 0], &[5, 2, 2, 1]),
            (42, &[0, 3, 0, 0], &[7, 3, 2, 1]),
            (18, &[2, 0, 0, 0], &[2, 3, 3, 1]),
            (6, &[2, 3], &[2, 3]),
            (1, &[0, 0, 0], &[1, 1, 1]),
            // Large counts take divisors, not every number below them.
            (1_000_003, &[0, 0, 0], &[1_000_003, 1, 1]),
            (1 << 20, &[0; 10], &[4, 4, 4, 4, 4, 4, 4, 4, 4, 4]),
            (720_720, &[0, 0, 0, 0], &[33, 30, 28, 26]),
            // Grids as balanced as others, by their largest and smallest extents: the
            // smallest extents decide (20 x 18 x 14 before).
            (5040, &[0, 0, 0], &[21, 16, 15]),
            (10_800, &[0, 0, 0], &[27, 20, 20]),
            (90_720, &[0, 0, 0, 0], &[21, 18, 16, 15]),
            (691_488, &[0; 6], &[14, 14, 9, 8, 7, 7]),
        ];
        for &(n, given, want) in cases {
            let mut d = given.to_vec();
            dims_create(n, &mut d).unwrap();
            assert_eq!(d, want, "{n} ranks in {given:?}");
        }
        for (n, given) in [(7, vec![0, 3]), (6, vec![2, 2]), (0, vec![0])] {
            let mut d = given.clone();
            assert_eq!(dims_create(n, &mut d).unwrap_err().class(), crate::ErrorClass::Dims, "{n} in {given:?}");
            assert_eq!(d, given, "unchanged on error");
        }
    }
}
