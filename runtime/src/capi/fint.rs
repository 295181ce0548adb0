//! Handles between C and Fortran (MPI-3.1 section 17.2.4): `MPI_Comm_c2f`, `MPI_Comm_f2c` and
//! their kin for every handle type, and `MPI_Status_c2f` / `MPI_Status_f2c`. A library with
//! Fortran bindings, or a C program handed a Fortran handle, calls them.
//!
//! mpr's handles are integers, as MPICH's are, and a Fortran `INTEGER` handle is the same
//! integer: each conversion returns its argument. A Fortran status is the C status's
//! integers in order (`MPI_F_STATUS_SIZE` of them; `MPI_F_SOURCE`, `MPI_F_TAG` and
//! `MPI_F_ERROR` say where the public fields are).

use std::ffi::c_int;

use super::{finish, Fail, MpiStatus, Res, COMM_WORLD, ERR_ARG};

/// The integers of a status (`MPI_F_STATUS_SIZE`).
const F_STATUS_SIZE: usize = std::mem::size_of::<MpiStatus>() / std::mem::size_of::<c_int>();
// mpi.h's MPI_F_STATUS_SIZE.
const _: () = assert!(F_STATUS_SIZE == 5);

/// Copies a status's integers from `from` to `to`.
///
/// # Safety
/// Each is null (an error) or points to `F_STATUS_SIZE` integers (an `MPI_Status`, or a
/// Fortran status of `MPI_F_STATUS_SIZE` integers).
unsafe fn copy_status(name: &str, from: *const c_int, to: *mut c_int) -> Res {
    if from.is_null() || to.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null status")));
    }
    // SAFETY: neither is null (checked); this function's contract: both hold
    // F_STATUS_SIZE integers. A program's two statuses do not overlap (or are one).
    unsafe { std::ptr::copy(from, to, F_STATUS_SIZE) };
    Ok(())
}

mpi! {
    fn MPI_Comm_c2f / PMPI_Comm_c2f(comm: c_int) -> c_int { comm }
    fn MPI_Comm_f2c / PMPI_Comm_f2c(comm: c_int) -> c_int { comm }
    fn MPI_Type_c2f / PMPI_Type_c2f(datatype: c_int) -> c_int { datatype }
    fn MPI_Type_f2c / PMPI_Type_f2c(datatype: c_int) -> c_int { datatype }
    fn MPI_Group_c2f / PMPI_Group_c2f(group: c_int) -> c_int { group }
    fn MPI_Group_f2c / PMPI_Group_f2c(group: c_int) -> c_int { group }
    fn MPI_Request_c2f / PMPI_Request_c2f(request: c_int) -> c_int { request }
    fn MPI_Request_f2c / PMPI_Request_f2c(request: c_int) -> c_int { request }
    fn MPI_Op_c2f / PMPI_Op_c2f(op: c_int) -> c_int { op }
    fn MPI_Op_f2c / PMPI_Op_f2c(op: c_int) -> c_int { op }
    fn MPI_Win_c2f / PMPI_Win_c2f(win: c_int) -> c_int { win }
    fn MPI_Win_f2c / PMPI_Win_f2c(win: c_int) -> c_int { win }
    fn MPI_Info_c2f / PMPI_Info_c2f(info: c_int) -> c_int { info }
    fn MPI_Info_f2c / PMPI_Info_f2c(info: c_int) -> c_int { info }
    fn MPI_Errhandler_c2f / PMPI_Errhandler_c2f(errhandler: c_int) -> c_int { errhandler }
    fn MPI_Errhandler_f2c / PMPI_Errhandler_f2c(errhandler: c_int) -> c_int { errhandler }
    fn MPI_Message_c2f / PMPI_Message_c2f(message: c_int) -> c_int { message }
    fn MPI_Message_f2c / PMPI_Message_f2c(message: c_int) -> c_int { message }

    fn MPI_Status_c2f / PMPI_Status_c2f(c_status: *const MpiStatus, f_status: *mut c_int) -> c_int {
        // SAFETY: MPI's contract: an MPI_Status, and MPI_F_STATUS_SIZE integers.
        finish("MPI_Status_c2f", COMM_WORLD, unsafe { copy_status("MPI_Status_c2f", c_status.cast(), f_status) })
    }

    fn MPI_Status_f2c / PMPI_Status_f2c(f_status: *const c_int, c_status: *mut MpiStatus) -> c_int {
        // SAFETY: as above.
        finish("MPI_Status_f2c", COMM_WORLD, unsafe { copy_status("MPI_Status_f2c", f_status, c_status.cast()) })
    }
}
