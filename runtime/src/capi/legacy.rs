//! MPI-1's names that later standards retired, which programs written for MPI-1 still call
//! and which MPICH and Open MPI still export: HPL 2.x (and so the HPC Challenge suite)
//! builds its panels with `MPI_Address` and `MPI_Type_struct`.
//!
//! - Deprecated by MPI-2.0, still part of MPI-3.1 (its chapter 15): `MPI_Keyval_create`,
//!   `MPI_Keyval_free`, `MPI_Attr_put`, `MPI_Attr_get`, `MPI_Attr_delete` (with
//!   `MPI_NULL_COPY_FN`, `MPI_NULL_DELETE_FN`, `MPI_DUP_FN` in the header).
//! - Removed by MPI-3.0 (chapter 16), exported for the programs that still use them:
//!   `MPI_Address`, `MPI_Type_extent`, `MPI_Type_lb`, `MPI_Type_ub`, `MPI_Type_hvector`,
//!   `MPI_Type_hindexed`, `MPI_Type_struct`, `MPI_Errhandler_create`, `MPI_Errhandler_get`,
//!   `MPI_Errhandler_set`. The marker types `MPI_LB` and `MPI_UB` are not defined: a program
//!   that uses them fails to compile rather than get other bounds than it asked for.
//!
//! Each is its successor under the old name: it calls the successor's profiling name (so a
//! tool that wraps the successor sees the call once, and an error is reported by the
//! successor, under its name); `MPI_Type_extent`, `_lb` and `_ub` read the datatype's bounds
//! themselves and report under their own names.

use std::ffi::{c_int, c_void};

use super::attr::{CopyFn, DeleteFn};
use super::errh::HandlerFn;
use super::types::Datatype;
use super::{finish, put, COMM_WORLD};

/// One of `datatype`'s bounds (`pick` of its lower bound and extent) into `out`, for the call
/// `name`.
///
/// # Safety
/// `out` points to an `MPI_Aint` (MPI's contract).
unsafe fn bound_into(name: &str, datatype: c_int, out: *mut isize, pick: fn(isize, isize) -> isize) -> c_int {
    let r = Datatype::of(datatype).and_then(|t| {
        let (lb, extent) = t.bounds();
        // SAFETY: this function's contract.
        unsafe { put(out, pick(lb, extent)) }
    });
    finish(name, COMM_WORLD, r)
}

mpi! {
    fn MPI_Keyval_create / PMPI_Keyval_create(
        copy: Option<CopyFn>,
        delete: Option<DeleteFn>,
        keyval: *mut c_int,
        extra_state: *mut c_void,
    ) -> c_int {
        // SAFETY: the same contract, passed on (MPI_Copy_function and MPI_Delete_function
        // are the communicator's attribute functions under their MPI-1 names).
        unsafe { super::attr::PMPI_Comm_create_keyval(copy, delete, keyval, extra_state) }
    }

    fn MPI_Keyval_free / PMPI_Keyval_free(keyval: *mut c_int) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::attr::PMPI_Comm_free_keyval(keyval) }
    }

    fn MPI_Attr_put / PMPI_Attr_put(comm: c_int, keyval: c_int, attribute_val: *mut c_void) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::attr::PMPI_Comm_set_attr(comm, keyval, attribute_val) }
    }

    fn MPI_Attr_get / PMPI_Attr_get(comm: c_int, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::PMPI_Comm_get_attr(comm, keyval, attribute_val, flag) }
    }

    fn MPI_Attr_delete / PMPI_Attr_delete(comm: c_int, keyval: c_int) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::attr::PMPI_Comm_delete_attr(comm, keyval) }
    }

    fn MPI_Address / PMPI_Address(location: *mut c_void, address: *mut isize) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::win::PMPI_Get_address(location, address) }
    }

    fn MPI_Type_extent / PMPI_Type_extent(datatype: c_int, extent: *mut isize) -> c_int {
        // SAFETY: MPI's contract: extent points to an MPI_Aint.
        unsafe { bound_into("MPI_Type_extent", datatype, extent, |_, extent| extent) }
    }

    fn MPI_Type_lb / PMPI_Type_lb(datatype: c_int, displacement: *mut isize) -> c_int {
        // SAFETY: MPI's contract: displacement points to an MPI_Aint.
        unsafe { bound_into("MPI_Type_lb", datatype, displacement, |lb, _| lb) }
    }

    fn MPI_Type_ub / PMPI_Type_ub(datatype: c_int, displacement: *mut isize) -> c_int {
        // SAFETY: MPI's contract: displacement points to an MPI_Aint.
        unsafe { bound_into("MPI_Type_ub", datatype, displacement, |lb, extent| lb + extent) }
    }

    fn MPI_Type_hvector / PMPI_Type_hvector(
        count: c_int,
        blocklength: c_int,
        stride: isize,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::dtype::PMPI_Type_create_hvector(count, blocklength, stride, oldtype, newtype) }
    }

    fn MPI_Type_hindexed / PMPI_Type_hindexed(
        count: c_int,
        blocklengths: *mut c_int,
        displacements: *mut isize,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::dtype::PMPI_Type_create_hindexed(count, blocklengths, displacements, oldtype, newtype) }
    }

    fn MPI_Type_struct / PMPI_Type_struct(
        count: c_int,
        blocklengths: *mut c_int,
        displacements: *mut isize,
        types: *mut c_int,
        newtype: *mut c_int,
    ) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::dtype::PMPI_Type_create_struct(count, blocklengths, displacements, types, newtype) }
    }

    fn MPI_Errhandler_create / PMPI_Errhandler_create(f: Option<HandlerFn>, errhandler: *mut c_int) -> c_int {
        // SAFETY: the same contract, passed on (MPI_Handler_function is the communicator's
        // handler function under its MPI-1 name).
        unsafe { super::errh::PMPI_Comm_create_errhandler(f, errhandler) }
    }

    fn MPI_Errhandler_set / PMPI_Errhandler_set(comm: c_int, errhandler: c_int) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::PMPI_Comm_set_errhandler(comm, errhandler) }
    }

    fn MPI_Errhandler_get / PMPI_Errhandler_get(comm: c_int, errhandler: *mut c_int) -> c_int {
        // SAFETY: the same contract, passed on.
        unsafe { super::PMPI_Comm_get_errhandler(comm, errhandler) }
    }
}
