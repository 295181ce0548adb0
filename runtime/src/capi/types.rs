//! The C ABI's predefined datatypes and reduction operations, and the reductions they name:
//! a built-in operation on a predefined type runs the core's run-time reduction table
//! ([`crate::op::DynOp`]), over carriers of the element's size so that collectives split
//! buffers between elements.

use std::ffi::{c_int, c_long};

use bytemuck::Pod;

use super::{Fail, Res, ERR_OP, ERR_TYPE};
use crate::op::{Builtin, DynOp, ElemType, Op};
use crate::{Comm, Error};

/// A predefined datatype: its name, size in bytes and, for those reductions apply to, the
/// element type.
#[derive(Debug, Clone, Copy)]
pub(super) struct Datatype {
    pub(super) name: &'static str,
    pub(super) size: usize,
    pub(super) elem: Option<ElemType>,
}

/// A signed C integer type of `bytes` bytes.
const fn signed(bytes: usize) -> ElemType {
    match bytes {
        1 => ElemType::I8,
        2 => ElemType::I16,
        4 => ElemType::I32,
        _ => ElemType::I64,
    }
}

/// An unsigned C integer type of `bytes` bytes.
const fn unsigned(bytes: usize) -> ElemType {
    match bytes {
        1 => ElemType::U8,
        2 => ElemType::U16,
        4 => ElemType::U32,
        _ => ElemType::U64,
    }
}

const LONG: usize = size_of::<c_long>();
const WCHAR: usize = 4;
const AINT: usize = size_of::<isize>();

/// Indexed by handle (include/mpi.h): 0 is `MPI_DATATYPE_NULL`.
const PREDEFINED: [Option<(&str, usize, Option<ElemType>)>; 29] = [
    None,
    Some(("MPI_CHAR", 1, None)),
    Some(("MPI_SIGNED_CHAR", 1, Some(ElemType::I8))),
    Some(("MPI_UNSIGNED_CHAR", 1, Some(ElemType::U8))),
    Some(("MPI_BYTE", 1, Some(ElemType::U8))),
    Some(("MPI_SHORT", 2, Some(ElemType::I16))),
    Some(("MPI_UNSIGNED_SHORT", 2, Some(ElemType::U16))),
    Some(("MPI_INT", 4, Some(ElemType::I32))),
    Some(("MPI_UNSIGNED", 4, Some(ElemType::U32))),
    Some(("MPI_LONG", LONG, Some(signed(LONG)))),
    Some(("MPI_UNSIGNED_LONG", LONG, Some(unsigned(LONG)))),
    Some(("MPI_LONG_LONG_INT", 8, Some(ElemType::I64))),
    Some(("MPI_UNSIGNED_LONG_LONG", 8, Some(ElemType::U64))),
    Some(("MPI_FLOAT", 4, Some(ElemType::F32))),
    Some(("MPI_DOUBLE", 8, Some(ElemType::F64))),
    Some(("MPI_WCHAR", WCHAR, None)),
    Some(("MPI_C_BOOL", 1, Some(ElemType::U8))),
    Some(("MPI_INT8_T", 1, Some(ElemType::I8))),
    Some(("MPI_INT16_T", 2, Some(ElemType::I16))),
    Some(("MPI_INT32_T", 4, Some(ElemType::I32))),
    Some(("MPI_INT64_T", 8, Some(ElemType::I64))),
    Some(("MPI_UINT8_T", 1, Some(ElemType::U8))),
    Some(("MPI_UINT16_T", 2, Some(ElemType::U16))),
    Some(("MPI_UINT32_T", 4, Some(ElemType::U32))),
    Some(("MPI_UINT64_T", 8, Some(ElemType::U64))),
    Some(("MPI_AINT", AINT, Some(signed(AINT)))),
    Some(("MPI_OFFSET", 8, Some(ElemType::I64))),
    Some(("MPI_COUNT", 8, Some(ElemType::I64))),
    Some(("MPI_PACKED", 1, None)),
];

impl Datatype {
    /// Bytes, for buffers whose extent is worked out in bytes already.
    pub(super) const BYTE: Datatype = Datatype { name: "MPI_BYTE", size: 1, elem: Some(ElemType::U8) };

    /// The datatype of handle `h` (`MPI_ERR_TYPE` if it is none).
    pub(super) fn of(h: c_int) -> Res<Datatype> {
        usize::try_from(h)
            .ok()
            .and_then(|i| PREDEFINED.get(i).copied().flatten())
            .map(|(name, size, elem)| Datatype { name, size, elem })
            .ok_or_else(|| Fail::new(ERR_TYPE, format!("{h} is not a datatype")))
    }
}

/// A predefined reduction operation.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReduceOp {
    pub(super) name: &'static str,
    pub(super) op: Builtin,
}

/// Indexed by handle (include/mpi.h): 0 is `MPI_OP_NULL`.
const OPS: [Option<(&str, Builtin)>; 11] = [
    None,
    Some(("MPI_MAX", Builtin::Max)),
    Some(("MPI_MIN", Builtin::Min)),
    Some(("MPI_SUM", Builtin::Sum)),
    Some(("MPI_PROD", Builtin::Prod)),
    Some(("MPI_LAND", Builtin::LogicalAnd)),
    Some(("MPI_BAND", Builtin::BitAnd)),
    Some(("MPI_LOR", Builtin::LogicalOr)),
    Some(("MPI_BOR", Builtin::BitOr)),
    Some(("MPI_LXOR", Builtin::LogicalXor)),
    Some(("MPI_BXOR", Builtin::BitXor)),
];

impl ReduceOp {
    /// The operation of handle `h` (`MPI_ERR_OP` if it is none).
    pub(super) fn of(h: c_int) -> Res<ReduceOp> {
        usize::try_from(h)
            .ok()
            .and_then(|i| OPS.get(i).copied().flatten())
            .map(|(name, op)| ReduceOp { name, op })
            .ok_or_else(|| Fail::new(ERR_OP, format!("{h} is not a reduction operation")))
    }
}

/// `MPI_REPLACE` and `MPI_NO_OP`: operations of one-sided accumulates only.
pub(super) const OP_REPLACE: c_int = 11;
pub(super) const OP_NO_OP: c_int = 12;

/// The accumulate of operation `op` on elements of `ty` (`MPI_ERR_OP` where MPI defines
/// none, `MPI_ERR_TYPE` for a type that is no single element).
pub(super) fn accumulate_of(op: c_int, ty: Datatype) -> Res<crate::DynAcc> {
    let how = match op {
        OP_REPLACE => crate::AccOp::Replace,
        OP_NO_OP => crate::AccOp::NoOp,
        op => crate::AccOp::Builtin(ReduceOp::of(op)?.op),
    };
    let elem = ty.elem.ok_or_else(|| Fail::new(ERR_TYPE, format!("{} is not a type accumulates combine", ty.name)))?;
    crate::DynAcc::new(how, elem)
        .ok_or_else(|| Fail::new(ERR_OP, format!("operation {op} does not apply to {} in an accumulate", ty.name)))
}

/// Which reduction: where the result lands and how the ranks' inputs combine.
#[derive(Debug, Clone, Copy)]
pub(super) enum Reduction {
    /// At `root` (`MPI_Reduce`).
    Root(usize),
    /// Everywhere (`MPI_Allreduce`).
    All,
    /// Rank i gets ranks 0..=i (`MPI_Scan`), or 0..i (`MPI_Exscan`).
    Scan { inclusive: bool },
    /// Rank i gets block i of the reduction (`MPI_Reduce_scatter_block`); in place, `recv`
    /// holds every block's input.
    ScatterBlock,
    /// No communication: `recv (op)= send` (`MPI_Reduce_local`).
    Local,
}

/// Reduces by `op` elements of `ty`, `send` (none: `MPI_IN_PLACE`, the input is in `recv`)
/// into `recv` (present exactly where a result lands), as `how` says.
pub(super) fn reduce(
    comm: &Comm,
    how: Reduction,
    send: Option<&[u8]>,
    recv: Option<&mut [u8]>,
    ty: Datatype,
    op: ReduceOp,
) -> Res {
    let unfit = || Fail::new(ERR_OP, format!("{} does not apply to {}", op.name, ty.name));
    let elem = ty.elem.ok_or_else(unfit)?;
    let r = match ty.size {
        1 => run::<u8>(comm, how, send, recv, elem, op.op),
        2 => run::<u16>(comm, how, send, recv, elem, op.op),
        4 => run::<u32>(comm, how, send, recv, elem, op.op),
        8 => run::<u64>(comm, how, send, recv, elem, op.op),
        _ => None,
    };
    r.ok_or_else(unfit)?.map_err(Fail::from)
}

/// [`reduce`] over carrier `C` (the user's buffers themselves where they are aligned for
/// it, else copies); `None` if `op` does not apply to `elem`.
fn run<C: Pod>(
    comm: &Comm,
    how: Reduction,
    send: Option<&[u8]>,
    recv: Option<&mut [u8]>,
    elem: ElemType,
    op: Builtin,
) -> Option<Result<(), Error>> {
    let op = DynOp::<C>::new(op, elem)?;
    let aligned = |p: *const u8| p as usize % align_of::<C>() == 0;
    let copy: Vec<C>;
    let send: Option<&[C]> = match send {
        Some(s) if aligned(s.as_ptr()) => Some(bytemuck::cast_slice(s)),
        Some(s) => {
            copy = carried(s);
            Some(&copy)
        }
        None => None,
    };
    let body = |recv: Option<&mut [C]>| {
        let Some(r) = recv else {
            return match (how, send) {
                (Reduction::Root(root), Some(s)) => comm.reduce(s, None, op, root),
                _ => Err(Error::Other("a reduction without its receive buffer".into())),
            };
        };
        if let (Reduction::All, None) = (how, send) {
            return comm.allreduce_in_place(r, op);
        }
        // In place: the input is what the receive buffer holds.
        let held;
        let s = match send {
            Some(s) => s,
            None => {
                held = r.to_vec();
                &held
            }
        };
        match how {
            Reduction::Root(root) => comm.reduce(s, Some(r), op, root),
            Reduction::All => comm.allreduce(s, r, op),
            Reduction::Scan { inclusive: true } => comm.scan(s, r, op),
            Reduction::Scan { inclusive: false } => comm.exscan(s, r, op),
            Reduction::ScatterBlock => {
                let n = s.len() / comm.size();
                comm.reduce_scatter_block(s, &mut r[..n], op)
            }
            Reduction::Local => {
                op.apply(r, s);
                Ok(())
            }
        }
    };
    Some(match recv {
        Some(r) if !aligned(r.as_ptr()) => {
            let mut tmp: Vec<C> = carried(r);
            let res = body(Some(&mut tmp));
            r.copy_from_slice(bytemuck::cast_slice(&tmp));
            res
        }
        Some(r) => body(Some(bytemuck::cast_slice_mut(r))),
        None => body(None),
    })
}

/// Bytes copied into carriers (for a buffer not aligned for them).
fn carried<C: Pod>(b: &[u8]) -> Vec<C> {
    let mut v = vec![C::zeroed(); b.len() / size_of::<C>()];
    bytemuck::cast_slice_mut::<C, u8>(&mut v).copy_from_slice(b);
    v
}
