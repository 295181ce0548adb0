//! Reduction operations (MPI 4.1, section 6.9.2): built-in arithmetic, bitwise and logical
//! operations, and user-defined ones.
//!
//! An operation folds `x` into `acc` element by element; `acc` holds the contribution of the
//! lower ranks, so non-commutative operations see their operands in rank order.

use bytemuck::Pod;

/// A reduction operation on elements of type `T`.
pub trait Op<T> {
    /// `acc[i] = acc[i] (op) x[i]`, where `acc` comes from lower ranks than `x`.
    fn apply(&self, acc: &mut [T], x: &[T]);

    /// `out[i] = a[i] (op) x[i]`, where `a` comes from lower ranks than `x`: the same bits
    /// as copying `a` into `out` and applying `x`, in one pass over memory.
    fn apply_into(&self, out: &mut [T], a: &[T], x: &[T])
    where
        T: Copy,
    {
        out.copy_from_slice(a);
        self.apply(out, x);
    }

    /// Whether operands may be combined in any order (default: yes).
    fn commutative(&self) -> bool {
        true
    }
}

/// Sum (`MPI_SUM`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sum;
/// Product (`MPI_PROD`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Prod;
/// Minimum (`MPI_MIN`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Min;
/// Maximum (`MPI_MAX`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Max;
/// Bitwise and (`MPI_BAND`).
#[derive(Debug, Clone, Copy, Default)]
pub struct BitAnd;
/// Bitwise or (`MPI_BOR`).
#[derive(Debug, Clone, Copy, Default)]
pub struct BitOr;
/// Bitwise exclusive or (`MPI_BXOR`).
#[derive(Debug, Clone, Copy, Default)]
pub struct BitXor;
/// Logical and (`MPI_LAND`): non-zero is true; the result is 1 or 0.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogicalAnd;
/// Logical or (`MPI_LOR`): non-zero is true; the result is 1 or 0.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogicalOr;

/// Element types the arithmetic operations work on.
pub trait Number: Pod + PartialOrd + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {
    /// Zero of the type.
    const ZERO: Self;
    /// One of the type.
    const ONE: Self;
}

/// Integer element types (bitwise and logical operations).
pub trait Integer:
    Number + std::ops::BitAnd<Output = Self> + std::ops::BitOr<Output = Self> + std::ops::BitXor<Output = Self>
{
}

macro_rules! numbers {
    ($($t:ty => $z:expr, $o:expr, $int:tt);* $(;)?) => {$(
        impl Number for $t {
            const ZERO: Self = $z;
            const ONE: Self = $o;
        }
        numbers!(@int $t, $int);
    )*};
    (@int $t:ty, yes) => { impl Integer for $t {} };
    (@int $t:ty, no) => {};
}

numbers! {
    i8 => 0, 1, yes; i16 => 0, 1, yes; i32 => 0, 1, yes; i64 => 0, 1, yes;
    u8 => 0, 1, yes; u16 => 0, 1, yes; u32 => 0, 1, yes; u64 => 0, 1, yes;
    isize => 0, 1, yes; usize => 0, 1, yes;
    f32 => 0.0, 1.0, no; f64 => 0.0, 1.0, no;
    half::f16 => half::f16::ZERO, half::f16::ONE, no;
    half::bf16 => half::bf16::ZERO, half::bf16::ONE, no;
}

/// A value and its index, for [`MinLoc`] and [`MaxLoc`] (`MPI_2INT`, `MPI_2DOUBLE_PRECISION`:
/// both fields of one type).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
#[repr(C)]
pub struct Loc<T> {
    /// The value compared.
    pub value: T,
    /// Where it came from (e.g. a rank or an element index).
    pub index: T,
}

// SAFETY: `Loc<T>` is `repr(C)` with two fields of the same type `T`, so it has no padding;
// all-zero bytes are a valid `T` (T: Zeroable) for both fields.
unsafe impl<T: bytemuck::Zeroable> bytemuck::Zeroable for Loc<T> {}
// SAFETY: as above: two `T: Pod` fields, same size and alignment, no padding, any bit
// pattern valid; `Copy` and `'static` follow from `T: Pod`.
unsafe impl<T: Pod> Pod for Loc<T> {}

/// Minimum value and the smallest index holding it (`MPI_MINLOC`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MinLoc;
/// Maximum value and the smallest index holding it (`MPI_MAXLOC`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MaxLoc;

impl<T: Number> Op<Loc<T>> for MinLoc {
    fn apply(&self, acc: &mut [Loc<T>], x: &[Loc<T>]) {
        zip(acc, x, |a, b| if b.value < a.value || (b.value == a.value && b.index < a.index) { b } else { a })
    }
}

impl<T: Number> Op<Loc<T>> for MaxLoc {
    fn apply(&self, acc: &mut [Loc<T>], x: &[Loc<T>]) {
        zip(acc, x, |a, b| if b.value > a.value || (b.value == a.value && b.index < a.index) { b } else { a })
    }
}

#[inline(always)]
fn zip<T: Copy>(acc: &mut [T], x: &[T], f: impl Fn(T, T) -> T) {
    for (a, &b) in acc.iter_mut().zip(x) {
        *a = f(*a, b);
    }
}

fn zip_into<T: Copy>(out: &mut [T], a: &[T], x: &[T], f: impl Fn(T, T) -> T) {
    assert!(out.len() == a.len() && a.len() == x.len());
    for ((o, &a), &b) in out.iter_mut().zip(a).zip(x) {
        *o = f(a, b);
    }
}

/// Implements [`Op`] for a built-in operation from its element function.
macro_rules! elementwise {
    ($op:ty, $bound:ident, |$a:ident, $b:ident| $e:expr) => {
        impl<T: $bound> Op<T> for $op {
            #[inline(always)]
            fn apply(&self, acc: &mut [T], x: &[T]) {
                zip(acc, x, |$a: T, $b: T| $e)
            }
            fn apply_into(&self, out: &mut [T], a: &[T], x: &[T]) {
                zip_into(out, a, x, |$a: T, $b: T| $e)
            }
        }
    };
}

elementwise!(Sum, Number, |a, b| a + b);

elementwise!(Prod, Number, |a, b| a * b);

elementwise!(Min, Number, |a, b| if b < a { b } else { a });

elementwise!(Max, Number, |a, b| if b > a { b } else { a });

elementwise!(BitAnd, Integer, |a, b| a & b);

elementwise!(BitOr, Integer, |a, b| a | b);

elementwise!(BitXor, Integer, |a, b| a ^ b);

fn truth<T: Number>(v: bool) -> T {
    if v {
        T::ONE
    } else {
        T::ZERO
    }
}

elementwise!(LogicalAnd, Integer, |a, b| truth(a != T::ZERO && b != T::ZERO));

elementwise!(LogicalOr, Integer, |a, b| truth(a != T::ZERO || b != T::ZERO));

/// A user-defined operation from a function (`MPI_Op_create`).
#[derive(Clone, Copy)]
pub struct UserOp<F> {
    f: F,
    commutative: bool,
}

impl<F> std::fmt::Debug for UserOp<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserOp").field("commutative", &self.commutative).finish()
    }
}

impl<F> UserOp<F> {
    /// An operation calling `f(acc, x)`; `commutative: false` makes reductions combine
    /// operands strictly in rank order.
    pub fn new(f: F, commutative: bool) -> Self {
        UserOp { f, commutative }
    }
}

impl<T: Pod, F: Fn(&mut [T], &[T])> Op<T> for UserOp<F> {
    fn apply(&self, acc: &mut [T], x: &[T]) {
        (self.f)(acc, x)
    }
    fn commutative(&self) -> bool {
        self.commutative
    }
}

/// Logical exclusive or (`MPI_LXOR`): non-zero is true; the result is 1 or 0.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogicalXor;

elementwise!(LogicalXor, Integer, |a, b| truth((a != T::ZERO) != (b != T::ZERO)));

/// Element types a reduction can be chosen for at run time (what MPI's predefined datatypes
/// hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ElemType {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
}

impl ElemType {
    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            ElemType::I8 | ElemType::U8 => 1,
            ElemType::I16 | ElemType::U16 => 2,
            ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
            ElemType::I64 | ElemType::U64 | ElemType::F64 => 8,
        }
    }
}

/// The built-in operations, named at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Builtin {
    Max,
    Min,
    Sum,
    Prod,
    LogicalAnd,
    BitAnd,
    LogicalOr,
    BitOr,
    LogicalXor,
    BitXor,
}

/// A reduction chosen at run time, a built-in operation on an element type, applied to
/// elements carried as `C`: a plain type of the element's size and alignment (u8, u16,
/// u32, u64), so that collectives split buffers between elements. The table behind it is
/// the one place that maps (operation, type) to a kernel, for the C ABI and accumulate.
#[derive(Clone, Copy)]
pub struct DynOp<C> {
    kernel: Kernel<C>,
}

/// A reduction's kernels over carriers: `acc[i] = acc[i] (op) x[i]`, and the same into a
/// third buffer in one pass (`out[i] = a[i] (op) x[i]`, what a ring all-reduce's step does:
/// a copy and then an apply would read and write it twice).
type Kernel<C> = (fn(&mut [C], &[C]), fn(&mut [C], &[C], &[C]));

impl<C> std::fmt::Debug for DynOp<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DynOp")
    }
}

impl<C: Pod> DynOp<C> {
    /// `op` on `ty` carried as `C`; `None` where MPI does not define it (bitwise and logical
    /// operations on floating point) or `C` is not `ty`'s size and alignment.
    pub fn new(op: Builtin, ty: ElemType) -> Option<DynOp<C>> {
        let kernel = match ty {
            ElemType::I8 => integer::<i8, C>(op),
            ElemType::I16 => integer::<i16, C>(op),
            ElemType::I32 => integer::<i32, C>(op),
            ElemType::I64 => integer::<i64, C>(op),
            ElemType::U8 => integer::<u8, C>(op),
            ElemType::U16 => integer::<u16, C>(op),
            ElemType::U32 => integer::<u32, C>(op),
            ElemType::U64 => integer::<u64, C>(op),
            ElemType::F32 => arithmetic::<f32, C>(op),
            ElemType::F64 => arithmetic::<f64, C>(op),
        }?;
        Some(DynOp { kernel })
    }
}

impl<C: Pod> Op<C> for DynOp<C> {
    fn apply(&self, acc: &mut [C], x: &[C]) {
        (self.kernel.0)(acc, x)
    }

    fn apply_into(&self, out: &mut [C], a: &[C], x: &[C]) {
        (self.kernel.1)(out, a, x)
    }
}

/// Whether `C` carries `T`: the same size, and aligned at least as strictly.
fn carries<T, C>() -> bool {
    size_of::<C>() == size_of::<T>() && align_of::<C>() >= align_of::<T>()
}

/// `O` on `T`, over its carrier `C` (checked by [`carries`] before this is handed out).
fn kernel<T: Pod, O: Op<T> + Default, C: Pod>() -> Kernel<C> {
    (
        |acc, x| O::default().apply(bytemuck::cast_slice_mut(acc), bytemuck::cast_slice(x)),
        |out, a, x| {
            O::default().apply_into(bytemuck::cast_slice_mut(out), bytemuck::cast_slice(a), bytemuck::cast_slice(x))
        },
    )
}

/// The arithmetic operations on `T`.
fn arithmetic<T: Number, C: Pod>(op: Builtin) -> Option<Kernel<C>> {
    if !carries::<T, C>() {
        return None;
    }
    Some(match op {
        Builtin::Max => kernel::<T, Max, C>(),
        Builtin::Min => kernel::<T, Min, C>(),
        Builtin::Sum => kernel::<T, Sum, C>(),
        Builtin::Prod => kernel::<T, Prod, C>(),
        _ => return None,
    })
}

/// Every built-in operation on integer `T`.
fn integer<T: Integer, C: Pod>(op: Builtin) -> Option<Kernel<C>> {
    if !carries::<T, C>() {
        return None;
    }
    Some(match op {
        Builtin::LogicalAnd => kernel::<T, LogicalAnd, C>(),
        Builtin::BitAnd => kernel::<T, BitAnd, C>(),
        Builtin::LogicalOr => kernel::<T, LogicalOr, C>(),
        Builtin::BitOr => kernel::<T, BitOr, C>(),
        Builtin::LogicalXor => kernel::<T, LogicalXor, C>(),
        Builtin::BitXor => kernel::<T, BitXor, C>(),
        _ => return arithmetic::<T, C>(op),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_time_table_runs_the_typed_operations() {
        // f64 sums, carried as u64 bits.
        let sum = DynOp::<u64>::new(Builtin::Sum, ElemType::F64).expect("sum of doubles");
        let (mut acc, x) = ([1.5f64.to_bits(), (-2.0f64).to_bits()], [0.25f64.to_bits(), 4.0f64.to_bits()]);
        sum.apply(&mut acc, &x);
        assert_eq!(acc.map(f64::from_bits), [1.75, 2.0]);
        // Into a third buffer, in one pass: the same sums.
        let mut out = [0u64; 2];
        sum.apply_into(&mut out, &[1.5f64.to_bits(), (-2.0f64).to_bits()], &x);
        assert_eq!(out.map(f64::from_bits), [1.75, 2.0]);
        // Signed comparison on i32 carried as u32; logical xor gives 1 or 0.
        let max = DynOp::<u32>::new(Builtin::Max, ElemType::I32).unwrap();
        let mut acc = [(-5i32) as u32, 3];
        max.apply(&mut acc, &[(-7i32) as u32, 9]);
        assert_eq!(acc, [(-5i32) as u32, 9]);
        let lxor = DynOp::<u8>::new(Builtin::LogicalXor, ElemType::I8).unwrap();
        let mut acc = [0u8, 5, 7, 0];
        lxor.apply(&mut acc, &[0, 0, 3, 9]);
        assert_eq!(acc, [0, 1, 0, 1]);
        // Not defined: bitwise on floating point; a carrier of another size.
        assert!(DynOp::<u64>::new(Builtin::BitAnd, ElemType::F64).is_none());
        assert!(DynOp::<u32>::new(Builtin::Sum, ElemType::F64).is_none());
        assert!(DynOp::<u64>::new(Builtin::Sum, ElemType::I32).is_none());
    }
}
