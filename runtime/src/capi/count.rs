//! MPI-3's calls of counts and sizes as `MPI_Count` (a 64-bit integer: `MPI_Type_size_x`,
//! `MPI_Type_get_extent_x`, `MPI_Type_get_true_extent_x`, `MPI_Get_elements_x`), and the
//! setters of a status's count and cancellation (`MPI_Status_set_elements`, `_x`,
//! `MPI_Status_set_cancelled`), which a layer above MPI uses to fill in statuses of its own.

use std::ffi::c_int;

use super::p2p::CANCELLED;
use super::types::Datatype;
use super::{elements_in, finish, put, Fail, MpiStatus, Res, COMM_WORLD, ERR_ARG, ERR_COUNT, ERR_TYPE, UNDEFINED};

/// `MPI_Count`.
type Count = i64;

/// The status at `status`, to write (`MPI_ERR_ARG` if null).
///
/// # Safety
/// `status` is null or the caller's `MPI_Status`.
unsafe fn status_mut<'a>(name: &str, status: *mut MpiStatus) -> Res<&'a mut MpiStatus> {
    // SAFETY: this function's contract.
    unsafe { status.as_mut() }.ok_or_else(|| Fail::new(ERR_ARG, format!("{name} of a null status")))
}

/// Sets `status` to say its message held `count` basic elements of `datatype` (what
/// `MPI_Get_elements` then gives back): whole elements of the type where `count` makes them,
/// else elements of its one basic type.
///
/// # Safety
/// `status` is null (an error) or the caller's `MPI_Status`.
unsafe fn set_elements(name: &str, status: *mut MpiStatus, datatype: c_int, count: Count) -> c_int {
    let r = (|| {
        let t = Datatype::of(datatype)?;
        let n = u64::try_from(count).map_err(|_| Fail::new(ERR_COUNT, format!("{name}: count {count}")))?;
        let per = t.elements() as u64;
        let basic = t.as_basic(1).map_or(0, |(b, _)| b.size as u64);
        let bytes = if per > 0 && n.is_multiple_of(per) {
            n / per * t.size as u64
        } else if basic > 0 {
            n * basic
        } else {
            return Err(Fail::new(ERR_TYPE, format!("{name}: {count} elements are no whole number of {}", t.name)));
        };
        // SAFETY: this function's contract.
        let st = unsafe { status_mut(name, status)? };
        st.count_lo = bytes as u32 as c_int;
        st.count_hi = ((bytes >> 32) as c_int & !CANCELLED) | (st.count_hi & CANCELLED);
        Ok(())
    })();
    finish(name, COMM_WORLD, r)
}

mpi! {
    fn MPI_Type_size_x / PMPI_Type_size_x(datatype: c_int, size: *mut Count) -> c_int {
        // SAFETY: MPI's contract: size points to an MPI_Count.
        let r = Datatype::of(datatype).and_then(|t| unsafe { put(size, t.size as Count) });
        finish("MPI_Type_size_x", COMM_WORLD, r)
    }

    fn MPI_Type_get_extent_x / PMPI_Type_get_extent_x(datatype: c_int, lb: *mut Count, extent: *mut Count) -> c_int {
        let r = Datatype::of(datatype).and_then(|t| {
            let (l, e) = t.bounds();
            // SAFETY: MPI's contract: both point to MPI_Counts.
            unsafe {
                put(lb, l as Count)?;
                put(extent, e as Count)
            }
        });
        finish("MPI_Type_get_extent_x", COMM_WORLD, r)
    }

    fn MPI_Type_get_true_extent_x / PMPI_Type_get_true_extent_x(
        datatype: c_int,
        true_lb: *mut Count,
        true_extent: *mut Count,
    ) -> c_int {
        let r = Datatype::of(datatype).and_then(|t| {
            let l = t.layout();
            // SAFETY: MPI's contract: both point to MPI_Counts.
            unsafe {
                put(true_lb, l.true_lb() as Count)?;
                put(true_extent, l.true_extent() as Count)
            }
        });
        finish("MPI_Type_get_true_extent_x", COMM_WORLD, r)
    }

    fn MPI_Get_elements_x / PMPI_Get_elements_x(status: *const MpiStatus, datatype: c_int, count: *mut Count) -> c_int {
        // SAFETY: MPI's contract: the caller's status (or null: an error) and count.
        let r = unsafe { elements_in("MPI_Get_elements_x", status, datatype) }
            // SAFETY: as above.
            .and_then(|n| unsafe { put(count, n.map_or(Count::from(UNDEFINED), |n| n as Count)) });
        finish("MPI_Get_elements_x", COMM_WORLD, r)
    }

    fn MPI_Status_set_elements / PMPI_Status_set_elements(status: *mut MpiStatus, datatype: c_int, count: c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's status.
        unsafe { set_elements("MPI_Status_set_elements", status, datatype, Count::from(count)) }
    }

    fn MPI_Status_set_elements_x / PMPI_Status_set_elements_x(status: *mut MpiStatus, datatype: c_int, count: Count) -> c_int {
        // SAFETY: MPI's contract: the caller's status.
        unsafe { set_elements("MPI_Status_set_elements_x", status, datatype, count) }
    }

    fn MPI_Status_set_cancelled / PMPI_Status_set_cancelled(status: *mut MpiStatus, flag: c_int) -> c_int {
        // SAFETY: MPI's contract: the caller's status.
        let r = unsafe { status_mut("MPI_Status_set_cancelled", status) }.map(|st| {
            st.count_hi = if flag != 0 { st.count_hi | CANCELLED } else { st.count_hi & !CANCELLED };
        });
        finish("MPI_Status_set_cancelled", COMM_WORLD, r)
    }
}
