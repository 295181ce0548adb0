//! `libmpr`: the C ABI of mpr (`mpi.h`) as a shared library. The functions are the
//! runtime's (`mpr::capi`, `#[no_mangle]`), which a `cdylib` exports from the crates it
//! links; this crate only links them, so that the library is built as one unit with the
//! release profile's link-time optimisation.

extern crate mpr_core;
