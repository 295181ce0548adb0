//! The C ABI's predefined datatypes and reduction operations, and the reductions they name:
//! a built-in operation on a predefined type runs the core's run-time reduction table
//! ([`crate::op::DynOp`]), over carriers of the element's size so that collectives split
//! buffers between elements.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_long, c_void};
use std::rc::Rc;

use bytemuck::Pod;

use super::{Fail, Res, ERR_OP, ERR_TYPE};
use crate::op::{Builtin, DynOp, ElemType, Op};
use crate::{Comm, Error, Layout, PairValue};

/// A datatype: its name, the bytes of data in one element and, for those reductions apply
/// to, the basic element type; a derived one (and a pair type of `MPI_MINLOC`) also its
/// layout and how it was made.
#[derive(Debug, Clone)]
pub(super) struct Datatype {
    /// Its handle (0 for a layout outside the table).
    pub(super) handle: c_int,
    pub(super) name: &'static str,
    pub(super) size: usize,
    pub(super) elem: Option<ElemType>,
    pub(super) derived: Option<Rc<Derived>>,
}

/// A datatype made by a constructor (`MPI_Type_vector` ...), or a predefined one whose
/// layout is not plain bytes (the value-index pairs).
#[derive(Debug)]
pub(super) struct Derived {
    pub(super) layout: Layout,
    /// The predefined type every basic element is, if one (reductions apply to it).
    pub(super) basic: Option<c_int>,
    /// Basic elements in one element (`MPI_Get_elements`).
    pub(super) elements: usize,
    /// `MPI_Type_get_envelope`'s combiner and `MPI_Type_get_contents`' arguments.
    pub(super) combiner: c_int,
    pub(super) ints: Vec<c_int>,
    pub(super) aints: Vec<isize>,
    /// The types it was made of (`MPI_Type_get_contents`): held, so that the program may
    /// free its handles of them.
    pub(super) types: Vec<Datatype>,
    pub(super) committed: Cell<bool>,
    /// A value-index pair (`MPI_DOUBLE_INT` ...): the value's type.
    pub(super) pair: Option<PairValue>,
    /// The value of the value-index pair every element is, if one: of a pair type and of
    /// the types made of one alone (accumulates combine their elements as pairs).
    pub(super) pairs_of: Option<PairValue>,
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
/// C's `char`, signed or not as the platform says (signed on x86-64 and Apple's arm64,
/// unsigned on Linux's arm64). MPI defines no reduction on `MPI_CHAR`; MPICH computes them
/// as C would (its "C integer extra" group), and programs tested on it rely on that.
const CHAR: ElemType = if c_char::MIN == 0 { ElemType::U8 } else { ElemType::I8 };
const WCHAR: usize = 4;
const AINT: usize = size_of::<isize>();
/// C's `long double`.
const LONG_DOUBLE: usize = crate::datatype::LONG_DOUBLE_BYTES;

/// Indexed by handle (include/mpi.h): 0 is `MPI_DATATYPE_NULL`; the handles from
/// [`FIRST_LAID_OUT`] to 38 are types with a layout (the table of [`pairs`]), then
/// Fortran's basic types follow, then its types with a layout (50 to 54), then C++'s bool.
const PREDEFINED: [Option<(&str, usize, Option<ElemType>)>; 56] = [
    None,
    Some(("MPI_CHAR", 1, Some(CHAR))),
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
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    Some(("MPI_CHARACTER", 1, None)),
    Some(("MPI_LOGICAL", 4, Some(ElemType::I32))),
    Some(("MPI_INTEGER", 4, Some(ElemType::I32))),
    Some(("MPI_REAL", 4, Some(ElemType::F32))),
    Some(("MPI_DOUBLE_PRECISION", 8, Some(ElemType::F64))),
    Some(("MPI_INTEGER1", 1, Some(ElemType::I8))),
    Some(("MPI_INTEGER2", 2, Some(ElemType::I16))),
    Some(("MPI_INTEGER4", 4, Some(ElemType::I32))),
    Some(("MPI_INTEGER8", 8, Some(ElemType::I64))),
    Some(("MPI_REAL4", 4, Some(ElemType::F32))),
    Some(("MPI_REAL8", 8, Some(ElemType::F64))),
    None,
    None,
    None,
    None,
    None,
    Some(("MPI_CXX_BOOL", 1, Some(ElemType::U8))),
];

/// The size of each predefined datatype, by handle (0: none).
static SIZES: [usize; PREDEFINED.len()] = {
    let mut sizes = [0; PREDEFINED.len()];
    let mut i = 0;
    while i < sizes.len() {
        if let Some((_, size, _)) = PREDEFINED[i] {
            sizes[i] = size;
        }
        i += 1;
    }
    sizes
};

/// The size of datatype `h` if it is a predefined one of a single run of bytes (the
/// small-message path, which needs no more of the type).
#[inline]
pub(super) fn predefined_size(h: c_int) -> Option<usize> {
    // A negative handle, read as unsigned, lies past the table: one comparison for both.
    SIZES.get(h as u32 as usize).copied().filter(|&s| s > 0)
}

/// The first handle of the table of datatypes with a layout (the pair types, then the
/// derived ones).
const FIRST_LAID_OUT: c_int = 29;
/// The first handle of Fortran's types with a layout (`MPI_COMPLEX` ...), after its basic ones.
const FIRST_FORTRAN_LAID_OUT: c_int = 50;
/// The first handle of a derived datatype.
pub(super) const FIRST_DERIVED: c_int = 64;

/// `MPI_COMBINER_NAMED` ... (include/mpi.h).
pub(super) const COMBINER_NAMED: c_int = 1;

thread_local! {
    /// Datatypes with a layout, by handle from [`FIRST_LAID_OUT`].
    static TYPES: RefCell<Vec<Option<Datatype>>> = RefCell::new(pairs());
}

/// The predefined value-index pairs of `MPI_MINLOC` and `MPI_MAXLOC` (include/mpi.h:
/// `MPI_FLOAT_INT` ... ), each a struct of the value and a C int, as C lays it out; then
/// empty slots up to the first derived handle.
fn pairs() -> Vec<Option<Datatype>> {
    let int = Layout::basic(4, 4);
    let pair = |name, value: usize, elem, at| {
        let layout = Layout::structure(&[(1, 0, &Layout::basic(value, value)), (1, at, &int)]);
        Some(Datatype::with(name, Derived::named(layout, None, 2, Some(elem))))
    };
    let data =
        |name, size, align| Some(Datatype::with(name, Derived::named(Layout::basic(size, align), None, 1, None)));
    let num = PairValue::Num;
    let mut v = vec![
        pair("MPI_FLOAT_INT", 4, num(ElemType::F32), 4),
        pair("MPI_DOUBLE_INT", 8, num(ElemType::F64), 8),
        pair("MPI_LONG_INT", LONG, num(signed(LONG)), LONG as isize),
        pair("MPI_2INT", 4, num(ElemType::I32), 4),
        pair("MPI_SHORT_INT", 2, num(ElemType::I16), 4),
        // Reduced and accumulated by the core's kernels of types Rust has no number for
        // (`foreign`).
        data("MPI_LONG_DOUBLE", LONG_DOUBLE, LONG_DOUBLE),
        // `MPI_C_COMPLEX` is its other name, and its name (as MPICH's).
        data("MPI_C_COMPLEX", 8, 4),
        data("MPI_C_DOUBLE_COMPLEX", 16, 8),
        data("MPI_C_LONG_DOUBLE_COMPLEX", 2 * LONG_DOUBLE, LONG_DOUBLE),
        pair("MPI_LONG_DOUBLE_INT", LONG_DOUBLE, PairValue::LongDouble, LONG_DOUBLE as isize),
    ];
    // Fortran's basic types (the predefined table) take the handles up to 49.
    v.resize((FIRST_FORTRAN_LAID_OUT - FIRST_LAID_OUT) as usize, None);
    v.extend([
        data("MPI_COMPLEX", 8, 4),
        data("MPI_DOUBLE_COMPLEX", 16, 8),
        data("MPI_COMPLEX8", 8, 4),
        data("MPI_COMPLEX16", 16, 8),
        pair("MPI_2INTEGER", 4, num(ElemType::I32), 4),
    ]);
    // C++'s bool (the predefined table), then its complex types: laid out as C's.
    v.resize((PREDEFINED.len() as c_int - FIRST_LAID_OUT) as usize, None);
    v.extend([
        data("MPI_CXX_FLOAT_COMPLEX", 8, 4),
        data("MPI_CXX_DOUBLE_COMPLEX", 16, 8),
        data("MPI_CXX_LONG_DOUBLE_COMPLEX", 2 * LONG_DOUBLE, LONG_DOUBLE),
    ]);
    for (i, t) in v.iter_mut().enumerate() {
        if let Some(t) = t {
            t.handle = FIRST_LAID_OUT + i as c_int;
        }
    }
    v.resize((FIRST_DERIVED - FIRST_LAID_OUT) as usize, None);
    v
}

/// A committed datatype of `layout` outside the table (the blocks of a vector collective),
/// whose elements are all `basic` if that is some.
pub(super) fn derived(layout: Layout, basic: Option<c_int>) -> Datatype {
    Datatype::with("a derived datatype", Derived::named(layout, basic, 0, None))
}

impl Derived {
    /// A committed type of `layout` made by no constructor (`MPI_COMBINER_NAMED`).
    fn named(layout: Layout, basic: Option<c_int>, elements: usize, pair: Option<PairValue>) -> Derived {
        Derived {
            layout,
            basic,
            elements,
            combiner: COMBINER_NAMED,
            ints: Vec::new(),
            aints: Vec::new(),
            types: Vec::new(),
            committed: Cell::new(true),
            pair,
            pairs_of: pair,
        }
    }
}

impl Datatype {
    /// Bytes, for buffers whose extent is worked out in bytes already.
    pub(super) const BYTE: Datatype =
        Datatype { handle: 4, name: "MPI_BYTE", size: 1, elem: Some(ElemType::U8), derived: None };

    /// The datatype of handle `h` (`MPI_ERR_TYPE` if it is none).
    #[inline]
    pub(super) fn of(h: c_int) -> Res<Datatype> {
        if let Some(Some((name, size, elem))) = usize::try_from(h).ok().and_then(|i| PREDEFINED.get(i)) {
            return Ok(Datatype { handle: h, name, size: *size, elem: *elem, derived: None });
        }
        Datatype::laid_out(h)
    }

    /// A datatype of the table (a pair type, or a derived one).
    #[cold]
    fn laid_out(h: c_int) -> Res<Datatype> {
        TYPES
            .with(|t| t.borrow().get(usize::try_from(h - FIRST_LAID_OUT).ok()?).cloned().flatten())
            .ok_or_else(|| Fail::new(ERR_TYPE, format!("{h} is not a datatype")))
    }

    /// A datatype of layout `d` named `name`, outside the table (handle 0); its elements'
    /// type is its basic type's.
    fn with(name: &'static str, d: Derived) -> Datatype {
        let elem = d.basic.and_then(|b| Datatype::of(b).ok()).and_then(|b| b.elem);
        Datatype { handle: 0, name, size: d.layout.size(), elem, derived: Some(Rc::new(d)) }
    }

    /// A new derived datatype into the table, its handle.
    pub(super) fn insert(d: Derived) -> c_int {
        Datatype::place(Datatype::with("a derived datatype", d))
    }

    /// A new handle of derived datatype `t` (the same type: its commit is the other
    /// handles' too).
    pub(super) fn insert_again(t: &Datatype) -> c_int {
        Datatype::place(t.clone())
    }

    /// `t` into the first free slot of the table, its handle.
    fn place(mut t: Datatype) -> c_int {
        TYPES.with(|types| {
            let mut types = types.borrow_mut();
            let first = (FIRST_DERIVED - FIRST_LAID_OUT) as usize;
            let i = match types[first..].iter().position(Option::is_none) {
                Some(i) => first + i,
                None => {
                    types.push(None);
                    types.len() - 1
                }
            };
            t.handle = i as c_int + FIRST_LAID_OUT;
            let h = t.handle;
            types[i] = Some(t);
            h
        })
    }

    /// Frees derived datatype `h` (`MPI_ERR_TYPE` for a predefined one or none).
    pub(super) fn free(h: c_int) -> Res {
        TYPES.with(|types| {
            let mut types = types.borrow_mut();
            match usize::try_from(h - FIRST_LAID_OUT).ok().filter(|_| h >= FIRST_DERIVED).and_then(|i| types.get_mut(i))
            {
                Some(slot @ Some(_)) => {
                    *slot = None;
                    Ok(())
                }
                _ => Err(Fail::new(ERR_TYPE, format!("{h} is not a derived datatype"))),
            }
        })
    }

    /// Its layout (a predefined type's: its bytes, aligned as their size).
    pub(super) fn layout(&self) -> Layout {
        match &self.derived {
            Some(d) => d.layout.clone(),
            None => Layout::basic(self.size, self.size.min(8)),
        }
    }

    /// Basic elements in one element.
    pub(super) fn elements(&self) -> usize {
        self.derived.as_ref().map_or(1, |d| d.elements)
    }

    /// Its lower bound and extent.
    pub(super) fn bounds(&self) -> (isize, isize) {
        match &self.derived {
            Some(d) => (d.layout.lb(), d.layout.extent()),
            None => (0, self.size as isize),
        }
    }

    /// The offset of the data of `count` elements in a buffer, if they are one run of bytes
    /// there (sent and received in place); `None` if they need packing.
    #[inline]
    pub(super) fn contiguous_at(&self, count: usize) -> Option<isize> {
        match &self.derived {
            Some(d) => d.layout.contiguous_at(count),
            None => Some(0),
        }
    }

    /// Whether it may carry data: predefined, or derived and committed.
    #[inline]
    pub(super) fn usable(&self) -> Res {
        match &self.derived {
            Some(d) if !d.committed.get() => Err(Fail::new(ERR_TYPE, "a datatype not committed (MPI_Type_commit)")),
            _ => Ok(()),
        }
    }

    /// The predefined type its data is made of, and how many of those `count` elements hold,
    /// for a reduction (`None`: a type mixing basic types).
    pub(super) fn as_basic(&self, count: usize) -> Option<(Datatype, usize)> {
        match &self.derived {
            None => Some((self.clone(), count)),
            Some(d) => {
                let b = Datatype::of(d.basic?).ok()?;
                let n = count * self.size / b.size.max(1);
                Some((b, n))
            }
        }
    }
}

/// A reduction operation: predefined, or made by `MPI_Op_create`.
#[derive(Debug, Clone)]
pub(super) struct ReduceOp {
    pub(super) name: &'static str,
    pub(super) how: Combine,
}

/// How a reduction combines two operands.
#[derive(Debug, Clone)]
pub(super) enum Combine {
    /// Arithmetic, bitwise and logical operations: the core's run-time table.
    Builtin(Builtin),
    /// `MPI_MINLOC` (`min`) and `MPI_MAXLOC`, on value-index pairs.
    Loc { min: bool },
    /// A C function (`MPI_Op_create`).
    User(UserOp),
}

/// `MPI_User_function`: `inoutvec[i] = invec[i] (op) inoutvec[i]` for `*len` elements of
/// `*datatype`.
pub(super) type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut c_int);

/// An operation of `MPI_Op_create`.
#[derive(Debug, Clone, Copy)]
pub(super) struct UserOp {
    pub(super) f: UserFn,
    pub(super) commute: bool,
}

/// `MPI_MINLOC`, `MPI_MAXLOC` (include/mpi.h), and the first handle of a user's operation.
const OP_MINLOC: c_int = 13;
const OP_MAXLOC: c_int = 14;
pub(super) const FIRST_USER_OP: c_int = 32;

thread_local! {
    /// Operations of `MPI_Op_create`, by handle from [`FIRST_USER_OP`].
    static USER_OPS: RefCell<Vec<Option<UserOp>>> = const { RefCell::new(Vec::new()) };
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
        let none = || Fail::new(ERR_OP, format!("{h} is not a reduction operation"));
        match h {
            OP_MINLOC => Ok(ReduceOp { name: "MPI_MINLOC", how: Combine::Loc { min: true } }),
            OP_MAXLOC => Ok(ReduceOp { name: "MPI_MAXLOC", how: Combine::Loc { min: false } }),
            h if h >= FIRST_USER_OP => USER_OPS
                .with(|t| t.borrow().get((h - FIRST_USER_OP) as usize).copied().flatten())
                .map(|u| ReduceOp { name: "a user's operation", how: Combine::User(u) })
                .ok_or_else(none),
            h => usize::try_from(h)
                .ok()
                .and_then(|i| OPS.get(i).copied().flatten())
                .map(|(name, op)| ReduceOp { name, how: Combine::Builtin(op) })
                .ok_or_else(none),
        }
    }

    /// The core's operation, for a predefined arithmetic, bitwise or logical one.
    pub(super) fn builtin(&self) -> Option<Builtin> {
        match self.how {
            Combine::Builtin(b) => Some(b),
            _ => None,
        }
    }

    /// A new operation of `MPI_Op_create`, its handle.
    pub(super) fn insert(op: UserOp) -> c_int {
        USER_OPS.with(|t| {
            let mut t = t.borrow_mut();
            let i = t.iter().position(Option::is_none).unwrap_or_else(|| {
                t.push(None);
                t.len() - 1
            });
            t[i] = Some(op);
            i as c_int + FIRST_USER_OP
        })
    }

    /// Frees operation `h` of `MPI_Op_create` (`MPI_ERR_OP` for another).
    pub(super) fn free(h: c_int) -> Res {
        USER_OPS.with(|t| {
            match usize::try_from(h - FIRST_USER_OP).ok().and_then(|i| t.borrow_mut().get_mut(i).map(Option::take)) {
                Some(Some(_)) => Ok(()),
                _ => Err(Fail::new(ERR_OP, format!("{h} is not an operation of MPI_Op_create"))),
            }
        })
    }
}

/// `MPI_REPLACE` and `MPI_NO_OP`: operations of one-sided accumulates only.
pub(super) const OP_REPLACE: c_int = 11;
pub(super) const OP_NO_OP: c_int = 12;

/// The accumulate of operation `op` on elements of `ty` (`MPI_ERR_OP` where MPI defines
/// none, `MPI_ERR_TYPE` for a type that is no single element).
pub(super) fn accumulate_of(op: c_int, ty: &Datatype) -> Res<crate::DynAcc> {
    let how = match op {
        OP_REPLACE => crate::AccOp::Replace,
        OP_NO_OP => crate::AccOp::NoOp,
        OP_MINLOC => crate::AccOp::MinLoc,
        OP_MAXLOC => crate::AccOp::MaxLoc,
        h => crate::AccOp::Builtin(ReduceOp::of(h)?.builtin().ok_or_else(|| {
            Fail::new(ERR_OP, format!("operation {h} in an accumulate (MPI allows predefined ones only)"))
        })?),
    };
    let undefined = || Fail::new(ERR_OP, format!("operation {op} does not apply to {} in an accumulate", ty.name));
    if let Some(v) = pairs_in(ty) {
        return crate::DynAcc::pair(how, v).ok_or_else(undefined);
    }
    if let Some(acc) = foreign(ty, how) {
        return acc.ok_or_else(undefined);
    }
    let elem = ty.elem.ok_or_else(|| Fail::new(ERR_TYPE, format!("{} is not a type accumulates combine", ty.name)))?;
    if let crate::AccOp::Builtin(b) = how {
        if !applies(b, basic_handle(ty)) {
            return Err(undefined());
        }
    }
    crate::DynAcc::new(how, elem).ok_or_else(undefined)
}

/// The value of `ty` if it is one of C's value-index pairs (or a duplicate of one), whose
/// accumulates combine C's structs whole, as they lie in memory.
pub(super) fn pair_of(ty: &Datatype) -> Option<PairValue> {
    ty.derived.as_ref().and_then(|d| d.pair)
}

/// The value of the value-index pair every element of `ty` is, if one ([`Derived::pairs_of`]).
pub(super) fn pairs_in(ty: &Datatype) -> Option<PairValue> {
    ty.derived.as_ref().and_then(|d| d.pairs_of)
}

/// [`accumulate_of`] where the operation and the datatype are predefined and the type is one
/// of Rust's numbers: the small-message path, which builds neither.
#[inline]
pub(super) fn accumulate_basic(op: c_int, datatype: c_int) -> Option<crate::DynAcc> {
    let (_, _, elem) = PREDEFINED.get(usize::try_from(datatype).ok()?).copied().flatten()?;
    let how = match op {
        OP_REPLACE => crate::AccOp::Replace,
        OP_NO_OP => crate::AccOp::NoOp,
        _ => {
            let b = OPS.get(usize::try_from(op).ok()?).copied().flatten()?.1;
            crate::AccOp::Builtin(applies(b, datatype).then_some(b)?)
        }
    };
    crate::DynAcc::new(how, elem?)
}

/// For a type of complex numbers or of C `long double`s (no Rust number carries them), the
/// core's kernel of `how` on its elements, `Some(None)` where MPI defines none; `None` for
/// any other type.
fn foreign(ty: &Datatype, how: crate::AccOp) -> Option<Option<crate::DynAcc>> {
    Some(match basic_handle(ty) {
        LONG_DOUBLE_HANDLE => crate::DynAcc::long_double(how),
        C_FLOAT_COMPLEX | F_COMPLEX | F_COMPLEX8 | CXX_FLOAT_COMPLEX => crate::DynAcc::complex(how, ElemType::F32),
        C_DOUBLE_COMPLEX | F_DOUBLE_COMPLEX | F_COMPLEX16 | CXX_DOUBLE_COMPLEX => {
            crate::DynAcc::complex(how, ElemType::F64)
        }
        C_LONG_DOUBLE_COMPLEX | CXX_LONG_DOUBLE_COMPLEX => crate::DynAcc::long_double_complex(how),
        _ => return None,
    })
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
    /// `MPI_Reduce` on an inter-communicator: the other group's inputs at the root.
    Inter(crate::InterRoot),
}

/// Reduces by `op` elements of `ty`, `send` (none: `MPI_IN_PLACE`, the input is in `recv`)
/// into `recv` (present exactly where a result lands), as `how` says.
pub(super) fn reduce(
    comm: &Comm,
    how: Reduction,
    send: Option<&[u8]>,
    recv: Option<&mut [u8]>,
    ty: &Datatype,
    op: ReduceOp,
) -> Res {
    if let Some(f) = elementwise(ty, &op)? {
        return gathered(comm, how, send, recv, &*f);
    }
    let unfit = || Fail::new(ERR_OP, format!("{} does not apply to {}", op.name, ty.name));
    let b = op.builtin().ok_or_else(unfit)?;
    // A derived type's packed data is a run of its basic type's elements.
    let (basic, _) = ty.as_basic(1).filter(|(basic, _)| applies(b, basic.handle)).ok_or_else(unfit)?;
    let elem = basic.elem.ok_or_else(unfit)?;
    reduce_basic(comm, how, send, recv, Basic { size: basic.size, elem, op: b, names: (op.name, ty.name) })
}

/// A reduction as a function of whole packed elements, `f(x, acc)`: `acc = x (op) acc`,
/// `x` from the lower ranks.
pub(super) type ElemFn = Rc<dyn Fn(&[u8], &mut [u8])>;

/// `op` on `ty` as an [`ElemFn`], where the carriers do not take it: a program's operation,
/// `MPI_MINLOC` and `MPI_MAXLOC` on value-index pairs, the sum and product of complex
/// numbers, the sum, product, maximum and minimum of `long double`s (the last two by the
/// core's kernels, which accumulates use too); `None` where the carriers do (a predefined
/// operation on Rust's numbers).
pub(super) fn elementwise(ty: &Datatype, op: &ReduceOp) -> Res<Option<ElemFn>> {
    let unfit = || Fail::new(ERR_OP, format!("{} does not apply to {}", op.name, ty.name));
    Ok(Some(match op.how {
        Combine::Builtin(b) => {
            let Some(kernel) = foreign(ty, crate::AccOp::Builtin(b)) else { return Ok(None) };
            let kernel = kernel.ok_or_else(unfit)?;
            // `acc = acc (op) x`: the same as `x (op) acc` for these operations (sums and
            // products commute exactly; C compares long doubles with `x` first either way).
            Rc::new(move |x: &[u8], acc: &mut [u8]| {
                let n = x.len().min(acc.len());
                let whole = kernel.apply(&mut acc[..n], &x[..n]);
                debug_assert!(whole, "packed elements of one type");
            })
        }
        Combine::Loc { min } => {
            let elem = ty.derived.as_ref().and_then(|d| d.pair).ok_or_else(unfit)?;
            // Packed: the index right after the value.
            let n = elem.size();
            Rc::new(move |x: &[u8], acc: &mut [u8]| crate::datatype::pair_loc(min, elem, n, n + 4, x, acc))
        }
        Combine::User(u) => {
            let ty = ty.clone();
            Rc::new(move |x: &[u8], acc: &mut [u8]| call_user(u, &ty, x, acc))
        }
    }))
}

/// The type of class `typeclass` (`MPI_TYPECLASS_REAL`, `_INTEGER`, `_COMPLEX`) whose
/// elements are `size` bytes (`MPI_Type_match_size`): Fortran's sized types, as MPI's
/// example implementation and MPICH return, then C's `long double` and its complex type for
/// the sizes mpr has no Fortran type of (`MPI_REAL16` and `MPI_COMPLEX32` are null). `None`
/// for another class (`Err`) or no such type (`Ok(None)`).
pub(super) fn match_size(typeclass: c_int, size: usize) -> Option<Option<c_int>> {
    const REAL: &[c_int] = &[F_REAL4, F_REAL8, LONG_DOUBLE_HANDLE];
    const INTEGER: &[c_int] = &[F_INTEGER1, F_INTEGER1 + 1, F_INTEGER1 + 2, F_INTEGER1 + 3];
    const COMPLEX: &[c_int] = &[F_COMPLEX8, F_COMPLEX16, C_LONG_DOUBLE_COMPLEX];
    let candidates = match typeclass {
        1 => REAL,
        2 => INTEGER,
        3 => COMPLEX,
        _ => return None,
    };
    Some(candidates.iter().copied().find(|&h| Datatype::of(h).is_ok_and(|t| t.size == size)))
}

/// `MPI_LONG_DOUBLE`, `MPI_C_FLOAT_COMPLEX`, `MPI_C_DOUBLE_COMPLEX` and
/// `MPI_C_LONG_DOUBLE_COMPLEX` (include/mpi.h): the types no Rust number carries.
const LONG_DOUBLE_HANDLE: c_int = 34;
const C_FLOAT_COMPLEX: c_int = 35;
const C_DOUBLE_COMPLEX: c_int = 36;
const C_LONG_DOUBLE_COMPLEX: c_int = 37;
/// `MPI_CHARACTER`, `MPI_LOGICAL`, and Fortran's complex types (include/mpi.h).
const F_CHARACTER: c_int = 39;
const F_LOGICAL: c_int = 40;
/// `MPI_INTEGER1` (`MPI_INTEGER2`, `_4` and `_8` follow it), `MPI_REAL4` and `MPI_REAL8`.
const F_INTEGER1: c_int = 44;
const F_REAL4: c_int = 48;
const F_REAL8: c_int = 49;
const F_COMPLEX: c_int = 50;
const F_DOUBLE_COMPLEX: c_int = 51;
const F_COMPLEX8: c_int = 52;
const F_COMPLEX16: c_int = 53;
/// C++'s `bool` and complex types (include/mpi.h).
const CXX_BOOL: c_int = 55;
const CXX_FLOAT_COMPLEX: c_int = 56;
const CXX_DOUBLE_COMPLEX: c_int = 57;
const CXX_LONG_DOUBLE_COMPLEX: c_int = 58;

/// The predefined type `ty`'s elements are (itself if predefined, a derived type's basic
/// type, 0 for one of mixed types).
fn basic_handle(ty: &Datatype) -> c_int {
    match &ty.derived {
        Some(d) if ty.handle >= FIRST_DERIVED || ty.handle == 0 => d.basic.unwrap_or(0),
        _ => ty.handle,
    }
}

/// A predefined operation on a predefined datatype (or on a derived one's basic type).
#[derive(Debug, Clone, Copy)]
pub(super) struct Basic {
    pub(super) size: usize,
    elem: ElemType,
    op: Builtin,
    /// The operation's and the datatype's, for an error.
    names: (&'static str, &'static str),
}

impl Basic {
    /// The reduction of operation `op` on datatype `datatype`, if both are predefined (and
    /// the type one of numbers): the small-message path, which builds no [`Datatype`].
    #[inline]
    pub(super) fn of(datatype: c_int, op: c_int) -> Option<Basic> {
        let (ty_name, size, elem) = PREDEFINED.get(usize::try_from(datatype).ok()?).copied().flatten()?;
        let (op_name, op) = OPS.get(usize::try_from(op).ok()?).copied().flatten()?;
        applies(op, datatype).then_some(Basic { size, elem: elem?, op, names: (op_name, ty_name) })
    }
}

/// `MPI_BYTE` and `MPI_C_BOOL` (include/mpi.h).
const BYTE: c_int = 4;
const C_BOOL: c_int = 16;

/// Whether MPI defines predefined operation `op` on elements of predefined type `basic`
/// (MPI-3.1 5.9.2): bytes take the bitwise operations only, booleans the logical ones only,
/// though both are carried as unsigned bytes; for the other types the core's kernels say.
#[inline(always)]
pub(super) fn applies(op: Builtin, basic: c_int) -> bool {
    match basic {
        BYTE => matches!(op, Builtin::BitAnd | Builtin::BitOr | Builtin::BitXor),
        C_BOOL | CXX_BOOL | F_LOGICAL => matches!(op, Builtin::LogicalAnd | Builtin::LogicalOr | Builtin::LogicalXor),
        F_CHARACTER => false,
        _ => true,
    }
}

/// [`reduce`] of a predefined operation on runs of a basic type's elements.
pub(super) fn reduce_basic(
    comm: &Comm,
    how: Reduction,
    send: Option<&[u8]>,
    recv: Option<&mut [u8]>,
    basic: Basic,
) -> Res {
    let Basic { elem, op, .. } = basic;
    let r = match basic.size {
        1 => run::<u8>(comm, how, send, recv, elem, op),
        2 => run::<u16>(comm, how, send, recv, elem, op),
        4 => run::<u32>(comm, how, send, recv, elem, op),
        8 => run::<u64>(comm, how, send, recv, elem, op),
        _ => None,
    };
    match r {
        Some(r) => r.map_err(Fail::from),
        None => Err(Fail::new(ERR_OP, format!("{} does not apply to {}", basic.names.0, basic.names.1))),
    }
}

/// [`reduce_basic`] of `MPI_Allreduce`'s common case, kept short: separate buffers of
/// whole elements, aligned for the type's carrier. `None` where the case is another (the
/// general path takes it, and gives any error).
pub(super) fn allreduce_aligned(comm: &Comm, send: &[u8], recv: &mut [u8], basic: Basic) -> Option<Res> {
    fn all<C: Pod>(comm: &Comm, send: &[u8], recv: &mut [u8], basic: Basic) -> Option<Res> {
        let op = DynOp::<C>::new(basic.op, basic.elem)?;
        let (s, r) = (bytemuck::try_cast_slice(send).ok()?, bytemuck::try_cast_slice_mut(recv).ok()?);
        Some(comm.allreduce(s, r, op).map_err(Fail::from))
    }
    match basic.size {
        1 => all::<u8>(comm, send, recv, basic),
        2 => all::<u16>(comm, send, recv, basic),
        4 => all::<u32>(comm, send, recv, basic),
        8 => all::<u64>(comm, send, recv, basic),
        _ => None,
    }
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
    let aligned = |p: *const u8| (p as usize).is_multiple_of(align_of::<C>());
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
                (Reduction::Inter(root), s) => comm.inter_reduce(s, None, op, root),
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
            Reduction::Inter(root) => comm.inter_reduce(None, Some(r), op, root),
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
    bytemuck::pod_collect_to_vec(b)
}

/// A reduction whose operation works on whole packed elements (`f(x, acc)`:
/// `acc = x (op) acc`, `x` from the lower ranks): every rank's input is gathered and
/// combined in rank order, so any operation, commutative or not, on elements of any size,
/// gets MPI's order of operands.
fn gathered(
    comm: &Comm,
    how: Reduction,
    send: Option<&[u8]>,
    recv: Option<&mut [u8]>,
    f: &dyn Fn(&[u8], &mut [u8]),
) -> Res {
    let r = match (how, recv) {
        (Reduction::Local, Some(r)) => {
            f(send.ok_or_else(|| Fail::new(ERR_OP, "MPI_Reduce_local without its input"))?, r);
            return Ok(());
        }
        (_, Some(r)) => r,
        // A rank of MPI_Reduce that is not the root: its input goes to the root.
        (Reduction::Root(root), None) => {
            let s = send.ok_or_else(|| Fail::new(ERR_OP, "a reduction without its input"))?;
            return Ok(comm.gather(s, None, root)?);
        }
        (Reduction::Inter(root), None) => return Ok(comm.inter_gather(send, None, root)?),
        _ => return Err(Fail::new(ERR_OP, "a reduction without its receive buffer")),
    };
    let input: Vec<u8> = send.unwrap_or(r).to_vec();
    // The inputs come from the ranks of the group, or of an inter-communicator's other one.
    let (p, me, n) = (comm.peers().len(), comm.rank(), input.len());
    let mut all = vec![0u8; n * p];
    match how {
        Reduction::Root(root) => comm.gather(&input, Some(&mut all), root)?,
        Reduction::Inter(root) => comm.inter_gather(None, Some(&mut all), root)?,
        _ => comm.allgather(&input, &mut all)?,
    }
    let fold = |upto: usize| fold(&all, n, upto, f);
    match how {
        Reduction::Root(_) | Reduction::Inter(_) | Reduction::All => r.copy_from_slice(&fold(p)),
        Reduction::Scan { inclusive: true } => r.copy_from_slice(&fold(me + 1)),
        Reduction::Scan { inclusive: false } if me > 0 => r.copy_from_slice(&fold(me)),
        Reduction::Scan { inclusive: false } => {}
        Reduction::ScatterBlock => {
            // This rank's block of the whole, which its group shares out.
            let block = n / comm.size();
            r[..block].copy_from_slice(&fold(p)[me * block..(me + 1) * block]);
        }
        Reduction::Local => unreachable!("handled above"),
    }
    Ok(())
}

/// The reduction by `f` of the inputs of ranks `0..upto`, each `n` bytes of `all` in rank
/// order, combined in that order.
pub(super) fn fold(all: &[u8], n: usize, upto: usize, f: &dyn Fn(&[u8], &mut [u8])) -> Vec<u8> {
    let mut acc = all[..n].to_vec();
    for i in 1..upto {
        let mut next = all[i * n..(i + 1) * n].to_vec();
        f(&acc, &mut next);
        acc = next;
    }
    acc
}

/// A user's operation on packed elements of `ty`: `acc = x (op) acc`. The function sees the
/// elements as they lie in memory: a type with gaps is unpacked into its layout first, and
/// the result packed back.
fn call_user(u: UserOp, ty: &Datatype, x: &[u8], acc: &mut [u8]) {
    let n = x.len() / ty.size.max(1);
    let (mut len, mut h) = (n as c_int, ty.handle);
    let Some(d) = ty.derived.as_ref().filter(|d| d.layout.contiguous_at(n) != Some(0)) else {
        // SAFETY: MPI's contract for MPI_User_function: both vectors hold `len` elements of
        // `h`, which they do (packed data of a type without gaps is its memory).
        unsafe { (u.f)(x.as_ptr().cast_mut().cast(), acc.as_mut_ptr().cast(), &mut len, &mut h) };
        return;
    };
    let l = &d.layout;
    let last = (n.max(1) as isize - 1) * l.extent();
    let (lo, hi) = (last.min(0) + l.true_lb(), last.max(0) + l.true_lb() + l.true_extent());
    let words = ((hi - lo) as usize).div_ceil(8);
    let (mut xm, mut am) = (vec![0u64; words], vec![0u64; words]);
    // Each element's memory, aligned as the widest basic type most need.
    let xb = xm.as_mut_ptr().cast::<u8>().wrapping_offset(-lo);
    let ab = am.as_mut_ptr().cast::<u8>().wrapping_offset(-lo);
    // SAFETY: xm and am cover every run of the n elements from xb and ab (lo..hi).
    unsafe {
        l.unpack(x, xb, n);
        l.unpack(acc, ab, n);
        (u.f)(xb.cast(), ab.cast(), &mut len, &mut h);
        l.pack(ab, n, acc);
    }
}
