//! Process topologies: `MPI_Dims_create`, `MPI_Cart_*`, `MPI_Graph_*`, `MPI_Dist_graph_*`,
//! `MPI_Topo_test` and the neighbourhood collectives, on the core's grids and neighbourhoods
//! (`crate::topo`). A communicator's topology lives in its table entry; `MPI_Comm_dup` copies
//! it, as MPI says.

use std::ffi::{c_int, c_void};

use super::{
    comm_of, errhandler_of, finish, icoll, ints_at, new_comm, put, ranks_at, with_state, Fail, Res, COMM_WORLD,
    ERR_ARG, ERR_DIMS, ERR_TOPOLOGY, MPI_SUCCESS, PROC_NULL, UNDEFINED,
};
use crate::topo::{dims_create, graph_neighbors, CartComm, Edge, Grid, Neighborhood};
use crate::Comm;

// Values shared with include/mpi.h.
const GRAPH: c_int = 1;
const CART: c_int = 2;
const DIST_GRAPH: c_int = 3;
/// `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY`: pointers no array lies at, which mpi.h reads
/// from these two (`int *const`: a word, as `usize` is).
const UNWEIGHTED: usize = 2;
const WEIGHTS_EMPTY: usize = 3;
#[no_mangle]
pub(crate) static MPR_UNWEIGHTED: usize = UNWEIGHTED;
#[no_mangle]
pub(crate) static MPR_WEIGHTS_EMPTY: usize = WEIGHTS_EMPTY;

/// A communicator's topology, as the call that made it gave it.
#[derive(Debug, Clone)]
pub(super) enum Topo {
    Cart(Grid),
    /// `MPI_Graph_create`'s graph, whole: node i's neighbours are `edges[index[i - 1]..index[i]]`.
    Graph {
        index: Vec<usize>,
        edges: Vec<usize>,
    },
    /// A distributed graph's neighbours of this rank, and their weights (`weighted`: the
    /// program gave them).
    Dist {
        sources: Vec<usize>,
        destinations: Vec<usize>,
        source_weights: Vec<i32>,
        destination_weights: Vec<i32>,
        weighted: bool,
    },
}

/// The topology of handle `comm`, if it has one.
pub(super) fn topo_of(name: &str, comm: c_int) -> Res<Option<Topo>> {
    with_state(name, |s| s.entry(comm)?.topo.as_deref().cloned())
}

/// Gives handle `comm` the topology `topo` (a new communicator's, or `MPI_Comm_dup`'s copy).
pub(super) fn set_topo(name: &str, comm: c_int, topo: Option<Topo>) -> Res {
    with_state(name, |s| {
        if let Some(e) = s.entry_mut(comm) {
            e.topo = topo.map(Box::new);
        }
    })
}

/// The communicator of handle `comm` and its topology (`MPI_ERR_TOPOLOGY` if it has none).
fn with_topo(name: &str, comm: c_int) -> Res<(Comm, Topo)> {
    let found = with_state(name, |s| {
        let e = s.entry(comm)?;
        Some((e.comm.clone(), e.topo.as_deref().cloned()))
    })?;
    match found {
        None => Err(super::bad_comm(name, comm)),
        Some((_, None)) => Err(Fail::new(ERR_TOPOLOGY, format!("{name}: communicator {comm} has no topology"))),
        Some((c, Some(t))) => Ok((c, t)),
    }
}

/// The communicator of handle `comm` and its grid (`MPI_ERR_TOPOLOGY` if it has none).
pub(super) fn cart_of(name: &str, comm: c_int) -> Res<CartComm> {
    match with_topo(name, comm)? {
        (c, Topo::Cart(g)) => Ok(CartComm::from_parts(c, g)),
        _ => Err(Fail::new(ERR_TOPOLOGY, format!("{name}: communicator {comm} has no Cartesian grid"))),
    }
}

/// The neighbours of this rank on handle `comm`'s grid or graph, for a neighbourhood
/// collective (`MPI_ERR_TOPOLOGY` if it has neither): only its own neighbours are copied out
/// of the table, not the whole graph.
pub(super) fn neighborhood_of(name: &str, comm: c_int) -> Res<Neighborhood> {
    let found = with_state(name, |s| {
        let e = s.entry(comm)?;
        let (c, me) = (e.comm.clone(), e.comm.rank());
        Some(e.topo.as_deref().map(|t| match t {
            Topo::Cart(g) => Ok(CartComm::from_parts(c, g.clone()).neighborhood()),
            Topo::Graph { index, edges } => {
                let near = graph_neighbors(index, edges, me).to_vec();
                Neighborhood::graph(c, near.clone(), near)
            }
            Topo::Dist { sources, destinations, .. } => Neighborhood::graph(c, sources.clone(), destinations.clone()),
        }))
    })?;
    match found {
        None => Err(super::bad_comm(name, comm)),
        Some(None) => Err(Fail::new(ERR_TOPOLOGY, format!("{name}: communicator {comm} has no topology"))),
        Some(Some(made)) => Ok(made?),
    }
}

/// The graph of handle `comm` (`MPI_ERR_TOPOLOGY` if it has none made by `MPI_Graph_create`).
fn graph_of(name: &str, comm: c_int) -> Res<(Vec<usize>, Vec<usize>)> {
    match with_topo(name, comm)? {
        (_, Topo::Graph { index, edges }) => Ok((index, edges)),
        _ => Err(Fail::new(ERR_TOPOLOGY, format!("{name}: communicator {comm} has no graph of MPI_Graph_create's"))),
    }
}

/// The distributed graph of handle `comm` (`MPI_ERR_TOPOLOGY` if it has none).
fn dist_of(name: &str, comm: c_int) -> Res<Topo> {
    match with_topo(name, comm)? {
        (_, t @ Topo::Dist { .. }) => Ok(t),
        _ => Err(Fail::new(ERR_TOPOLOGY, format!("{name}: communicator {comm} has no distributed graph"))),
    }
}

/// `n` weights from `p`: `None` for `MPI_UNWEIGHTED` (all 1, as MPICH reports them), and
/// `MPI_WEIGHTS_EMPTY` or any pointer for no edges.
///
/// # Safety
/// `p` is `MPI_UNWEIGHTED`, `MPI_WEIGHTS_EMPTY`, or holds `n` ints.
unsafe fn weights_at(p: *const c_int, n: usize) -> Res<Option<Vec<i32>>> {
    if p as usize == UNWEIGHTED {
        return Ok(None);
    }
    if n == 0 {
        return Ok(Some(Vec::new()));
    }
    if p as usize == WEIGHTS_EMPTY {
        return Err(Fail::new(ERR_ARG, format!("MPI_WEIGHTS_EMPTY for {n} edges")));
    }
    // SAFETY: this function's contract.
    Ok(Some(unsafe { ints_at(p, n, "weights")? }.to_vec()))
}

/// Node `rank` of a graph of `n` nodes (`MPI_ERR_RANK` if it is none).
fn node_of(name: &str, rank: c_int, n: usize) -> Res<usize> {
    usize::try_from(rank)
        .ok()
        .filter(|&r| r < n)
        .ok_or_else(|| Fail::new(super::ERR_RANK, format!("{name}: {rank} is not a node of a graph of {n}")))
}

/// A degree or count (`MPI_ERR_ARG` if negative).
fn count_arg(n: c_int, what: &str) -> Res<usize> {
    usize::try_from(n).map_err(|_| Fail::new(ERR_ARG, format!("{n} {what}")))
}

/// A number of dimensions (`MPI_ERR_DIMS` if negative).
fn ndims_of(ndims: c_int) -> Res<usize> {
    usize::try_from(ndims).map_err(|_| Fail::new(ERR_DIMS, format!("{ndims} dimensions")))
}

/// The grid of `ndims` extents at `dims`, periodic where `periods` is non-zero.
///
/// # Safety
/// `dims` and `periods` hold `ndims` ints each.
unsafe fn grid_at(ndims: c_int, dims: *const c_int, periods: *const c_int) -> Res<Grid> {
    let n = ndims_of(ndims)?;
    // SAFETY: this function's contract.
    let (d, p) = unsafe { (ints_at(dims, n, "extents")?, ints_at(periods, n, "periods")?) };
    let d: Vec<usize> = d
        .iter()
        .map(|&x| usize::try_from(x).map_err(|_| Fail::new(ERR_DIMS, format!("a dimension of extent {x}"))))
        .collect::<Res<_>>()?;
    let p: Vec<bool> = p.iter().map(|&x| x != 0).collect();
    Ok(Grid::new(&d, &p)?)
}

/// Writes `values` to the caller's array of `max` ints at `out`, as many as fit.
///
/// # Safety
/// `out` holds `max` ints, or `max` is 0.
unsafe fn write_ints(out: *mut c_int, max: usize, values: impl Iterator<Item = c_int>) -> Res {
    if max == 0 {
        return Ok(());
    }
    if out.is_null() {
        return Err(Fail::new(ERR_ARG, "a null output array"));
    }
    for (i, v) in values.take(max).enumerate() {
        // SAFETY: not null (checked); i < max, the caller's length.
        unsafe { *out.add(i) = v };
    }
    Ok(())
}

/// A blocking neighbourhood collective: the request its nonblocking form `started`,
/// waited for (an error names the nonblocking call that met it).
///
/// # Safety
/// The buffers of the call stay valid until this returns (they do: the caller's call has
/// not returned).
unsafe fn wait_for(started: c_int, mut request: c_int) -> c_int {
    if started != MPI_SUCCESS {
        return started;
    }
    // SAFETY: `request` is the handle just made; a null status is MPI_STATUS_IGNORE.
    unsafe { super::p2p::PMPI_Wait(&mut request, std::ptr::null_mut()) }
}

mpi! {
    fn MPI_Dims_create / PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
        let r = (|| {
            let n = ndims_of(ndims)?;
            // SAFETY: MPI's contract: dims holds ndims ints.
            let given = unsafe { ints_at(dims, n, "extents")? };
            let mut d: Vec<usize> = given
                .iter()
                .map(|&x| usize::try_from(x).map_err(|_| Fail::new(ERR_DIMS, format!("a dimension of extent {x}"))))
                .collect::<Res<_>>()?;
            let nodes = usize::try_from(nnodes).map_err(|_| Fail::new(ERR_ARG, format!("{nnodes} ranks")))?;
            dims_create(nodes, &mut d)?;
            // SAFETY: as above (dims not null when n > 0: `ints` checked).
            unsafe { write_ints(dims, n, d.iter().map(|&x| x as c_int)) }
        })();
        finish("MPI_Dims_create", COMM_WORLD, r)
    }

    fn MPI_Cart_create / PMPI_Cart_create(
        comm: c_int,
        ndims: c_int,
        dims: *const c_int,
        periods: *const c_int,
        reorder: c_int,
        comm_cart: *mut c_int,
    ) -> c_int {
        // MPI_COMM_NULL until made, so that a failed call leaves no handle of garbage (as
        // MPICH leaves it); a null pointer is the error below.
        // SAFETY: MPI's contract: comm_cart is null or an MPI_Comm.
        let _ = unsafe { put(comm_cart, 0) };
        let r = (|| {
            let c = comm_of("MPI_Cart_create", comm)?;
            // SAFETY: MPI's contract: dims and periods hold ndims ints.
            let grid = unsafe { grid_at(ndims, dims, periods)? };
            let made = c.cart(&grid, reorder != 0)?;
            let (made, grid) = match made {
                Some(m) => (Some(m.comm().clone()), Some(m.grid().clone())),
                None => (None, None),
            };
            // SAFETY: MPI's contract: comm_cart points to an MPI_Comm.
            unsafe { new_comm("MPI_Cart_create", made, errhandler_of(comm), comm_cart)? };
            // SAFETY: just written.
            set_topo("MPI_Cart_create", unsafe { *comm_cart }, grid.map(Topo::Cart))
        })();
        finish("MPI_Cart_create", comm, r)
    }

    fn MPI_Cart_map / PMPI_Cart_map(
        comm: c_int,
        ndims: c_int,
        dims: *const c_int,
        periods: *const c_int,
        newrank: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c: Comm = comm_of("MPI_Cart_map", comm)?;
            // SAFETY: MPI's contract: dims and periods hold ndims ints.
            let grid = unsafe { grid_at(ndims, dims, periods)? };
            if grid.size() > c.size() {
                return Err(Fail::new(ERR_ARG, format!("MPI_Cart_map: a grid of {} points on {} ranks", grid.size(), c.size())));
            }
            // The ranks keep their order, as MPI_Cart_create lays them out.
            let mine = if c.rank() < grid.size() { c.rank() as c_int } else { UNDEFINED };
            // SAFETY: MPI's contract: newrank points to an int.
            unsafe { put(newrank, mine) }
        })();
        finish("MPI_Cart_map", comm, r)
    }

    fn MPI_Topo_test / PMPI_Topo_test(comm: c_int, status: *mut c_int) -> c_int {
        let r = (|| {
            comm_of("MPI_Topo_test", comm)?;
            let kind = match topo_of("MPI_Topo_test", comm)? {
                Some(Topo::Cart(_)) => CART,
                Some(Topo::Graph { .. }) => GRAPH,
                Some(Topo::Dist { .. }) => DIST_GRAPH,
                None => UNDEFINED,
            };
            // SAFETY: MPI's contract: status points to an int.
            unsafe { put(status, kind) }
        })();
        finish("MPI_Topo_test", comm, r)
    }

    fn MPI_Cartdim_get / PMPI_Cartdim_get(comm: c_int, ndims: *mut c_int) -> c_int {
        let r = cart_of("MPI_Cartdim_get", comm).and_then(|c| {
            // SAFETY: MPI's contract: ndims points to an int.
            unsafe { put(ndims, c.grid().ndims() as c_int) }
        });
        finish("MPI_Cartdim_get", comm, r)
    }

    fn MPI_Cart_get / PMPI_Cart_get(
        comm: c_int,
        maxdims: c_int,
        dims: *mut c_int,
        periods: *mut c_int,
        coords: *mut c_int,
    ) -> c_int {
        let r = cart_of("MPI_Cart_get", comm).and_then(|c| {
            let max = usize::try_from(maxdims).map_err(|_| Fail::new(ERR_ARG, format!("maxdims {maxdims}")))?;
            let g = c.grid();
            // SAFETY: MPI's contract: the three arrays hold maxdims ints.
            unsafe {
                write_ints(dims, max, g.dims().iter().map(|&d| d as c_int))?;
                write_ints(periods, max, g.periods().iter().map(|&p| p as c_int))?;
                write_ints(coords, max, c.coords().into_iter().map(|x| x as c_int))
            }
        });
        finish("MPI_Cart_get", comm, r)
    }

    fn MPI_Cart_rank / PMPI_Cart_rank(comm: c_int, coords: *const c_int, rank: *mut c_int) -> c_int {
        let r = cart_of("MPI_Cart_rank", comm).and_then(|c| {
            // SAFETY: MPI's contract: coords holds one int per dimension.
            let at = unsafe { ints_at(coords, c.grid().ndims(), "coordinates")? };
            let at: Vec<isize> = at.iter().map(|&x| x as isize).collect();
            let found = c.grid().rank(&at)?;
            // SAFETY: MPI's contract: rank points to an int.
            unsafe { put(rank, found as c_int) }
        });
        finish("MPI_Cart_rank", comm, r)
    }

    fn MPI_Cart_coords / PMPI_Cart_coords(comm: c_int, rank: c_int, maxdims: c_int, coords: *mut c_int) -> c_int {
        let r = cart_of("MPI_Cart_coords", comm).and_then(|c| {
            let max = usize::try_from(maxdims).map_err(|_| Fail::new(ERR_ARG, format!("maxdims {maxdims}")))?;
            let at = c.grid().coords(super::peer(rank, false)?.unwrap_or(usize::MAX))?;
            // SAFETY: MPI's contract: coords holds maxdims ints.
            unsafe { write_ints(coords, max, at.into_iter().map(|x| x as c_int)) }
        });
        finish("MPI_Cart_coords", comm, r)
    }

    fn MPI_Cart_shift / PMPI_Cart_shift(
        comm: c_int,
        direction: c_int,
        disp: c_int,
        rank_source: *mut c_int,
        rank_dest: *mut c_int,
    ) -> c_int {
        let r = cart_of("MPI_Cart_shift", comm).and_then(|c| {
            let dim = usize::try_from(direction).map_err(|_| Fail::new(ERR_ARG, format!("direction {direction}")))?;
            let (from, to) = c.shift(dim, disp as isize)?;
            let handle = |r: Option<usize>| r.map_or(PROC_NULL, |r| r as c_int);
            // SAFETY: MPI's contract: both point to an int.
            unsafe {
                put(rank_source, handle(from))?;
                put(rank_dest, handle(to))
            }
        });
        finish("MPI_Cart_shift", comm, r)
    }

    fn MPI_Cart_sub / PMPI_Cart_sub(comm: c_int, remain_dims: *const c_int, newcomm: *mut c_int) -> c_int {
        let r = cart_of("MPI_Cart_sub", comm).and_then(|c| {
            // SAFETY: MPI's contract: remain_dims holds one int per dimension.
            let keep = unsafe { ints_at(remain_dims, c.grid().ndims(), "dimensions to keep")? };
            let keep: Vec<bool> = keep.iter().map(|&k| k != 0).collect();
            let sub = c.sub(&keep)?;
            // SAFETY: MPI's contract: newcomm points to an MPI_Comm.
            unsafe { new_comm("MPI_Cart_sub", Some(sub.comm().clone()), errhandler_of(comm), newcomm)? };
            // SAFETY: just written.
            set_topo("MPI_Cart_sub", unsafe { *newcomm }, Some(Topo::Cart(sub.grid().clone())))
        });
        finish("MPI_Cart_sub", comm, r)
    }

    fn MPI_Graph_create / PMPI_Graph_create(
        comm: c_int,
        nnodes: c_int,
        index: *const c_int,
        edges: *const c_int,
        reorder: c_int,
        comm_graph: *mut c_int,
    ) -> c_int {
        const NAME: &str = "MPI_Graph_create";
        // As MPI_Cart_create's.
        // SAFETY: MPI's contract: comm_graph is null or an MPI_Comm.
        let _ = unsafe { put(comm_graph, 0) };
        let r = (|| {
            let c = comm_of(NAME, comm)?;
            let n = count_arg(nnodes, "nodes")?;
            // A negative entry is an argument error (MPICH's class), not a rank's.
            let arg = |f: Fail| Fail::new(ERR_ARG, f.message.clone());
            // SAFETY: MPI's contract: index holds nnodes ints, edges index[nnodes - 1].
            let index = unsafe { ranks_at(index, n, "graph index") }.map_err(arg)?;
            let nedges = index.last().copied().unwrap_or(0);
            // SAFETY: as above.
            let edges = unsafe { ranks_at(edges, nedges, "edges") }.map_err(arg)?;
            let _ = reorder;
            let made = c.graph(&index, &edges)?;
            let topo = made.is_some().then_some(Topo::Graph { index, edges });
            // SAFETY: MPI's contract: comm_graph points to an MPI_Comm.
            unsafe { new_comm(NAME, made.map(|m| m.comm().clone()), errhandler_of(comm), comm_graph)? };
            // SAFETY: just written.
            set_topo(NAME, unsafe { *comm_graph }, topo)
        })();
        finish(NAME, comm, r)
    }

    fn MPI_Graphdims_get / PMPI_Graphdims_get(comm: c_int, nnodes: *mut c_int, nedges: *mut c_int) -> c_int {
        let r = graph_of("MPI_Graphdims_get", comm).and_then(|(index, edges)| {
            // SAFETY: MPI's contract: both point to an int.
            unsafe {
                put(nnodes, index.len() as c_int)?;
                put(nedges, edges.len() as c_int)
            }
        });
        finish("MPI_Graphdims_get", comm, r)
    }

    fn MPI_Graph_get / PMPI_Graph_get(comm: c_int, maxindex: c_int, maxedges: c_int, index: *mut c_int, edges: *mut c_int) -> c_int {
        let r = graph_of("MPI_Graph_get", comm).and_then(|(i, e)| {
            let (mi, me) = (count_arg(maxindex, "maxindex")?, count_arg(maxedges, "maxedges")?);
            // SAFETY: MPI's contract: the arrays hold maxindex and maxedges ints.
            unsafe {
                write_ints(index, mi, i.iter().map(|&x| x as c_int))?;
                write_ints(edges, me, e.iter().map(|&x| x as c_int))
            }
        });
        finish("MPI_Graph_get", comm, r)
    }

    fn MPI_Graph_neighbors_count / PMPI_Graph_neighbors_count(comm: c_int, rank: c_int, nneighbors: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Graph_neighbors_count";
        let r = graph_of(NAME, comm).and_then(|(index, edges)| {
            let node = node_of(NAME, rank, index.len())?;
            // SAFETY: MPI's contract: nneighbors points to an int.
            unsafe { put(nneighbors, graph_neighbors(&index, &edges, node).len() as c_int) }
        });
        finish(NAME, comm, r)
    }

    fn MPI_Graph_neighbors / PMPI_Graph_neighbors(comm: c_int, rank: c_int, maxneighbors: c_int, neighbors: *mut c_int) -> c_int {
        const NAME: &str = "MPI_Graph_neighbors";
        let r = graph_of(NAME, comm).and_then(|(index, edges)| {
            let node = node_of(NAME, rank, index.len())?;
            let max = count_arg(maxneighbors, "maxneighbors")?;
            // SAFETY: MPI's contract: neighbors holds maxneighbors ints.
            unsafe { write_ints(neighbors, max, graph_neighbors(&index, &edges, node).iter().map(|&x| x as c_int)) }
        });
        finish(NAME, comm, r)
    }

    fn MPI_Graph_map / PMPI_Graph_map(
        comm: c_int,
        nnodes: c_int,
        index: *const c_int,
        edges: *const c_int,
        newrank: *mut c_int,
    ) -> c_int {
        let r = (|| {
            let c = comm_of("MPI_Graph_map", comm)?;
            let n = count_arg(nnodes, "nodes")?;
            let _ = (index, edges);
            if n > c.size() {
                return Err(Fail::new(ERR_ARG, format!("MPI_Graph_map: a graph of {n} nodes on {} ranks", c.size())));
            }
            // The ranks keep their order, as MPI_Graph_create lays them out.
            let mine = if c.rank() < n { c.rank() as c_int } else { UNDEFINED };
            // SAFETY: MPI's contract: newrank points to an int.
            unsafe { put(newrank, mine) }
        })();
        finish("MPI_Graph_map", comm, r)
    }

    fn MPI_Dist_graph_create_adjacent / PMPI_Dist_graph_create_adjacent(
        comm: c_int,
        indegree: c_int,
        sources: *const c_int,
        sourceweights: *const c_int,
        outdegree: c_int,
        destinations: *const c_int,
        destweights: *const c_int,
        info: c_int,
        reorder: c_int,
        comm_dist_graph: *mut c_int,
    ) -> c_int {
        const NAME: &str = "MPI_Dist_graph_create_adjacent";
        let r = (|| {
            let c = comm_of(NAME, comm)?;
            super::info::hints(NAME, info)?;
            let (i, o) = (count_arg(indegree, "sources")?, count_arg(outdegree, "destinations")?);
            // SAFETY: MPI's contract: each array holds its degree's ints (a weight array may
            // be MPI_UNWEIGHTED or MPI_WEIGHTS_EMPTY).
            let (sources, destinations, sw, dw) = unsafe {
                (ranks_at(sources, i, "sources")?, ranks_at(destinations, o, "destinations")?, weights_at(sourceweights, i)?, weights_at(destweights, o)?)
            };
            // MPI_UNWEIGHTED for both or neither (one side without edges aside).
            if sw.is_none() != dw.is_none() && (if sw.is_none() { o > 0 } else { i > 0 }) {
                return Err(Fail::new(ERR_TOPOLOGY, format!("{NAME}: MPI_UNWEIGHTED for one side's edges, weights for the other's")));
            }
            let _ = reorder;
            let made = c.dist_graph_adjacent(&sources, &destinations)?;
            let weighted = sw.is_some() || dw.is_some();
            let topo = Topo::Dist {
                source_weights: sw.unwrap_or_else(|| vec![1; i]),
                destination_weights: dw.unwrap_or_else(|| vec![1; o]),
                sources,
                destinations,
                weighted,
            };
            // SAFETY: MPI's contract: comm_dist_graph points to an MPI_Comm.
            unsafe { new_comm(NAME, Some(made.comm().clone()), errhandler_of(comm), comm_dist_graph)? };
            // SAFETY: just written.
            set_topo(NAME, unsafe { *comm_dist_graph }, Some(topo))
        })();
        finish(NAME, comm, r)
    }

    fn MPI_Dist_graph_create / PMPI_Dist_graph_create(
        comm: c_int,
        n: c_int,
        sources: *const c_int,
        degrees: *const c_int,
        destinations: *const c_int,
        weights: *const c_int,
        info: c_int,
        reorder: c_int,
        comm_dist_graph: *mut c_int,
    ) -> c_int {
        const NAME: &str = "MPI_Dist_graph_create";
        let r = (|| {
            let c = comm_of(NAME, comm)?;
            super::info::hints(NAME, info)?;
            let n = count_arg(n, "source nodes")?;
            // SAFETY: MPI's contract: sources and degrees hold n ints, destinations (and
            // weights, unless MPI_UNWEIGHTED) the sum of the degrees.
            let (from, degrees) = unsafe { (ranks_at(sources, n, "sources")?, ints_at(degrees, n, "degrees")?) };
            let degrees: Vec<usize> = degrees.iter().map(|&d| count_arg(d, "edges of a node")).collect::<Res<_>>()?;
            let total = degrees.iter().sum();
            // SAFETY: as above.
            let (to, w) = unsafe { (ranks_at(destinations, total, "destinations")?, weights_at(weights, total)?) };
            let edges: Vec<Edge> = from
                .iter()
                .zip(&degrees)
                .flat_map(|(&f, &d)| std::iter::repeat_n(f, d))
                .zip(&to)
                .enumerate()
                .map(|(k, (from, &to))| Edge { from, to, weight: w.as_ref().map_or(1, |w| w[k]) })
                .collect();
            let _ = reorder;
            let made = c.dist_graph(&edges)?;
            let hood = &made.neighborhood;
            let every = |v: &[Option<usize>]| v.iter().map(|r| r.expect("a graph's neighbours are ranks")).collect();
            let topo = Topo::Dist {
                sources: every(hood.sources()),
                destinations: every(hood.destinations()),
                source_weights: made.source_weights.clone(),
                destination_weights: made.destination_weights.clone(),
                weighted: w.is_some(),
            };
            // SAFETY: MPI's contract: comm_dist_graph points to an MPI_Comm.
            unsafe { new_comm(NAME, Some(hood.comm().clone()), errhandler_of(comm), comm_dist_graph)? };
            // SAFETY: just written.
            set_topo(NAME, unsafe { *comm_dist_graph }, Some(topo))
        })();
        finish(NAME, comm, r)
    }

    fn MPI_Dist_graph_neighbors_count / PMPI_Dist_graph_neighbors_count(
        comm: c_int,
        indegree: *mut c_int,
        outdegree: *mut c_int,
        weighted: *mut c_int,
    ) -> c_int {
        let r = dist_of("MPI_Dist_graph_neighbors_count", comm).and_then(|t| {
            let Topo::Dist { sources, destinations, weighted: w, .. } = t else { unreachable!("dist_of gives a distributed graph") };
            // SAFETY: MPI's contract: the three point to an int.
            unsafe {
                put(indegree, sources.len() as c_int)?;
                put(outdegree, destinations.len() as c_int)?;
                put(weighted, w as c_int)
            }
        });
        finish("MPI_Dist_graph_neighbors_count", comm, r)
    }

    fn MPI_Dist_graph_neighbors / PMPI_Dist_graph_neighbors(
        comm: c_int,
        maxindegree: c_int,
        sources: *mut c_int,
        sourceweights: *mut c_int,
        maxoutdegree: c_int,
        destinations: *mut c_int,
        destweights: *mut c_int,
    ) -> c_int {
        const NAME: &str = "MPI_Dist_graph_neighbors";
        let r = dist_of(NAME, comm).and_then(|t| {
            let Topo::Dist { sources: s, destinations: d, source_weights: sw, destination_weights: dw, weighted } = t else {
                unreachable!("dist_of gives a distributed graph")
            };
            let (mi, mo) = (count_arg(maxindegree, "maxindegree")?, count_arg(maxoutdegree, "maxoutdegree")?);
            // Weight arrays are written only for a weighted graph (MPI_UNWEIGHTED may stand
            // for them otherwise).
            let real = |p: *mut c_int| weighted && p as usize != UNWEIGHTED && p as usize != WEIGHTS_EMPTY;
            // SAFETY: MPI's contract: each array holds its max's ints.
            unsafe {
                write_ints(sources, mi, s.iter().map(|&x| x as c_int))?;
                write_ints(destinations, mo, d.iter().map(|&x| x as c_int))?;
                if real(sourceweights) {
                    write_ints(sourceweights, mi, sw.into_iter())?;
                }
                if real(destweights) {
                    write_ints(destweights, mo, dw.into_iter())?;
                }
            }
            Ok(())
        });
        finish(NAME, comm, r)
    }

    // Each is its nonblocking form, waited for.
    fn MPI_Neighbor_allgather / PMPI_Neighbor_allgather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        comm: c_int,
    ) -> c_int {
        let mut r = 0;
        // SAFETY: MPI's contract, passed on; the request is waited for before this returns.
        unsafe {
            let started = icoll::PMPI_Ineighbor_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, &mut r);
            wait_for(started, r)
        }
    }

    fn MPI_Neighbor_allgatherv / PMPI_Neighbor_allgatherv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: c_int,
        comm: c_int,
    ) -> c_int {
        let mut r = 0;
        // SAFETY: as above.
        unsafe {
            let started =
                icoll::PMPI_Ineighbor_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, &mut r);
            wait_for(started, r)
        }
    }

    fn MPI_Neighbor_alltoall / PMPI_Neighbor_alltoall(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        comm: c_int,
    ) -> c_int {
        let mut r = 0;
        // SAFETY: as above.
        unsafe {
            let started = icoll::PMPI_Ineighbor_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, &mut r);
            wait_for(started, r)
        }
    }

    fn MPI_Neighbor_alltoallw / PMPI_Neighbor_alltoallw(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const isize,
        sendtypes: *const c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const isize,
        recvtypes: *const c_int,
        comm: c_int,
    ) -> c_int {
        let mut r = 0;
        // SAFETY: as above.
        unsafe {
            let started = icoll::PMPI_Ineighbor_alltoallw(
                sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, &mut r,
            );
            wait_for(started, r)
        }
    }

    fn MPI_Neighbor_alltoallv / PMPI_Neighbor_alltoallv(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const c_int,
        recvtype: c_int,
        comm: c_int,
    ) -> c_int {
        let mut r = 0;
        // SAFETY: as above.
        unsafe {
            let started = icoll::PMPI_Ineighbor_alltoallv(
                sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, &mut r,
            );
            wait_for(started, r)
        }
    }
}
