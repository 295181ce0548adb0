//! Cartesian topologies: `MPI_Dims_create`, `MPI_Cart_*`, `MPI_Topo_test` and the
//! neighbourhood collectives, on the core's grids (`crate::topo`). A communicator's grid lives in its table entry; `MPI_Comm_dup`
//! copies it, as MPI says.

use std::ffi::{c_int, c_void};

use super::{
    comm_of, errhandler_of, finish, icoll, new_comm, put, with_state, Fail, Res, COMM_WORLD, ERR_ARG, ERR_DIMS,
    ERR_TOPOLOGY, MPI_SUCCESS, PROC_NULL, UNDEFINED,
};
use crate::topo::{dims_create, CartComm, Grid};
use crate::Comm;

// Values shared with include/mpi.h.
const CART: c_int = 2;

/// The communicator of handle `comm` and its grid (`MPI_ERR_TOPOLOGY` if it has none).
pub(super) fn cart_of(name: &str, comm: c_int) -> Res<CartComm> {
    let found = with_state(name, |s| {
        let e = s.entry(comm)?;
        Some((e.comm.clone(), e.grid.clone()))
    })?;
    match found {
        None => Err(super::bad_comm(name, comm)),
        Some((_, None)) => Err(Fail::new(ERR_TOPOLOGY, format!("{name}: communicator {comm} has no Cartesian grid"))),
        Some((c, Some(g))) => Ok(CartComm::from_parts(c, g)),
    }
}

/// Gives handle `comm` the grid `grid` (a new communicator's, or `MPI_Comm_dup`'s copy).
pub(super) fn set_grid(name: &str, comm: c_int, grid: Option<Grid>) -> Res {
    with_state(name, |s| {
        if let Some(e) = s.entry_mut(comm) {
            e.grid = grid;
        }
    })
}

/// The grid of handle `comm`, if it has one.
pub(super) fn grid_of(name: &str, comm: c_int) -> Res<Option<Grid>> {
    with_state(name, |s| s.entry(comm)?.grid.clone())
}

/// `n` ints from `p`, for arrays of extents, periods, coordinates.
///
/// # Safety
/// `p` holds `n` ints, or `n` is 0.
unsafe fn ints<'a>(p: *const c_int, n: usize, what: &str) -> Res<&'a [c_int]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::new(ERR_ARG, format!("a null array of {what}")));
    }
    // SAFETY: not null (checked); this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
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
    let (d, p) = unsafe { (ints(dims, n, "extents")?, ints(periods, n, "periods")?) };
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
            let given = unsafe { ints(dims, n, "extents")? };
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
            set_grid("MPI_Cart_create", unsafe { *comm_cart }, grid)
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
            let kind = if grid_of("MPI_Topo_test", comm)?.is_some() { CART } else { UNDEFINED };
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
            let at = unsafe { ints(coords, c.grid().ndims(), "coordinates")? };
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
            let keep = unsafe { ints(remain_dims, c.grid().ndims(), "dimensions to keep")? };
            let keep: Vec<bool> = keep.iter().map(|&k| k != 0).collect();
            let sub = c.sub(&keep)?;
            // SAFETY: MPI's contract: newcomm points to an MPI_Comm.
            unsafe { new_comm("MPI_Cart_sub", Some(sub.comm().clone()), errhandler_of(comm), newcomm)? };
            // SAFETY: just written.
            set_grid("MPI_Cart_sub", unsafe { *newcomm }, Some(sub.grid().clone()))
        });
        finish("MPI_Cart_sub", comm, r)
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
