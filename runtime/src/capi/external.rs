//! A datatype's basic elements in type-map order, and what needs them: MPI's portable
//! packing (`MPI_Pack_external`, `MPI_Unpack_external`, `MPI_Pack_external_size`: the
//! "external32" representation of MPI-3.1 section 13.5.2, big-endian, of fixed sizes) and
//! the count of basic elements in a message that ends inside a struct (`MPI_Get_elements`).
//!
//! External32 is made from the native packing of the data (the core layout's pack: the type
//! map's basic elements one after another, as `MPI_Pack` writes them), each element then
//! converted in place of order and size; unpacking converts back and unpacks natively.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ops::ControlFlow;

use super::types::{Datatype, COMBINER_NAMED, FIRST_DERIVED};
use super::{count_of, finish, put, Fail, Res, COMM_WORLD, ERR_ARG, ERR_CONVERSION, ERR_TRUNCATE, ERR_TYPE};

/// `MPI_COMBINER_STRUCT`.
const COMBINER_STRUCT: c_int = 12;
/// `MPI_INT`, and the value types of the value-index pairs (`MPI_FLOAT_INT` 29 ...
/// `MPI_SHORT_INT` 33, `MPI_LONG_DOUBLE_INT` 38, `MPI_2INTEGER` 54, whose index is as
/// `MPI_INT`'s).
const INT: c_int = 7;
const PAIR_VALUES: [(c_int, c_int); 7] = [(29, 13), (30, 14), (31, 9), (32, 7), (33, 5), (38, 34), (54, 41)];

/// Calls `f(basic, n)` for the basic elements of `reps` elements of `t`, in type-map order:
/// `n` elements of predefined type `basic` at a time. Only the order of the basic types
/// matters here, not where they lie: every constructor but a struct repeats its one old
/// type's elements, so a type of one old type is that type's sequence, as many times as
/// its data holds.
pub(super) fn each_basic(
    t: &Datatype,
    reps: usize,
    f: &mut impl FnMut(c_int, usize) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let Some(d) = &t.derived else { return f(t.handle, reps) };
    if reps == 0 {
        return ControlFlow::Continue(());
    }
    if t.handle < FIRST_DERIVED && d.combiner == COMBINER_NAMED {
        // A predefined type with a layout: a value-index pair, or one of its own (the long
        // double, the complex types).
        return match PAIR_VALUES.iter().find(|&&(p, _)| p == t.handle) {
            Some(&(_, value)) => (0..reps).try_for_each(|_| {
                f(value, 1)?;
                f(INT, 1)
            }),
            None => f(t.handle, reps),
        };
    }
    if let Some(b) = d.basic.and_then(|b| Datatype::of(b).ok()) {
        // Of one predefined type throughout (never a pair: a pair's elements are two).
        return f(b.handle, reps * t.size / b.size.max(1));
    }
    if d.combiner == COMBINER_STRUCT {
        // ints: the count, then the block lengths, of `types` in order.
        return (0..reps).try_for_each(|_| {
            d.types.iter().zip(&d.ints[1..]).try_for_each(|(old, &n)| each_basic(old, n.max(0) as usize, f))
        });
    }
    match &d.types[..] {
        [old] if old.size > 0 => each_basic(old, reps * t.size / old.size, f),
        _ => ControlFlow::Continue(()),
    }
}

/// Basic elements in the first `bytes` bytes of elements of `t`, if they end at a basic
/// element's end (`MPI_Get_elements` of a message that ends inside an element).
pub(super) fn elements_in_bytes(t: &Datatype, bytes: u64) -> Option<u64> {
    if t.size == 0 {
        return Some(0);
    }
    let whole = bytes / t.size as u64;
    let (mut left, mut n) = (bytes % t.size as u64, whole * t.elements() as u64);
    let _ = each_basic(t, 1, &mut |b, reps| {
        let size = Datatype::of(b).map_or(1, |b| b.size.max(1)) as u64;
        let took = (left / size).min(reps as u64);
        n += took;
        left -= took * size;
        if took < reps as u64 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    (left == 0).then_some(n)
}

/// How a basic type's element is written in external32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conv {
    /// The same size: its bytes in big-endian order, in parts of `part` bytes (a complex
    /// number's two halves).
    Order { part: usize },
    /// An integer of `native` bytes written in `ext` (`MPI_LONG`'s 8 bytes in 4, `MPI_WCHAR`'s
    /// 4 in 2, an `MPI_AINT` of 4 bytes in 8), refused if its value does not fit.
    Int { native: usize, ext: usize, signed: bool },
    /// C's `_Bool`: one byte, 1 for true.
    Bool,
    /// C's long double as the 16 bytes of an IEEE quadruple-precision number, `parts` of
    /// them (a complex number's two).
    LongDouble { parts: usize },
}

/// External32's size of one element of predefined type `h`, and how it is written; `None`
/// for a type external32 does not define.
fn conv(h: c_int) -> Option<(usize, Conv)> {
    // An integer whose native size varies by platform (long, wchar_t, MPI_Aint): `ext`
    // bytes in external32.
    let int = |ext: usize, signed: bool| {
        let native = Datatype::of(h).map_or(ext, |t| t.size);
        (ext, if native == ext { Conv::Order { part: ext } } else { Conv::Int { native, ext, signed } })
    };
    Some(match h {
        // MPI_CHAR ... MPI_BYTE, MPI_INT8_T, MPI_UINT8_T, MPI_PACKED.
        1..=4 | 17 | 21 | 28 => (1, Conv::Order { part: 1 }),
        16 => (1, Conv::Bool),
        5 | 6 | 18 | 22 => (2, Conv::Order { part: 2 }),
        7 | 8 | 13 | 19 | 23 => (4, Conv::Order { part: 4 }),
        9 | 10 => int(4, h == 9),
        11 | 12 | 14 | 20 | 24 | 26 | 27 => (8, Conv::Order { part: 8 }),
        25 => int(8, true),
        15 => int(2, false),
        34 => (16, Conv::LongDouble { parts: 1 }),
        35 => (8, Conv::Order { part: 4 }),
        36 => (16, Conv::Order { part: 8 }),
        37 => (32, Conv::LongDouble { parts: 2 }),
        // Fortran's: CHARACTER, INTEGER1; INTEGER2; LOGICAL, INTEGER, REAL, INTEGER4,
        // REAL4, COMPLEX and COMPLEX8 (of REALs); DOUBLE PRECISION, INTEGER8, REAL8,
        // DOUBLE COMPLEX and COMPLEX16.
        39 | 44 => (1, Conv::Order { part: 1 }),
        45 => (2, Conv::Order { part: 2 }),
        40..=42 | 46 | 48 => (4, Conv::Order { part: 4 }),
        50 | 52 => (8, Conv::Order { part: 4 }),
        43 | 47 | 49 => (8, Conv::Order { part: 8 }),
        51 | 53 => (16, Conv::Order { part: 8 }),
        // C++'s bool and complex types, as C's.
        55 => (1, Conv::Bool),
        56 => (8, Conv::Order { part: 4 }),
        57 => (16, Conv::Order { part: 8 }),
        58 => (32, Conv::LongDouble { parts: 2 }),
        _ => return None,
    })
}

/// External32's bytes of `count` elements of `t`.
fn external_size(name: &str, t: &Datatype, count: usize) -> Res<usize> {
    let (mut total, mut unknown) = (0usize, None);
    let _ = each_basic(t, count, &mut |b, n| match conv(b) {
        Some((size, _)) => {
            total += size * n;
            ControlFlow::Continue(())
        }
        None => {
            unknown = Some(b);
            ControlFlow::Break(())
        }
    });
    match unknown {
        None => Ok(total),
        Some(b) => Err(Fail::new(ERR_TYPE, format!("{name}: external32 has no representation of datatype {b}"))),
    }
}

/// Converts the natively packed elements of `t` in `native` to external32 into `ext` (of
/// [`external_size`] bytes), or back (`to_external` false).
fn convert(name: &str, t: &Datatype, count: usize, native: &mut [u8], ext: &mut [u8], to_external: bool) -> Res {
    let (mut at_n, mut at_e) = (0, 0);
    let mut failed = None;
    let _ = each_basic(t, count, &mut |b, n| {
        let (esize, how) = conv(b).expect("sized by external_size");
        let nsize = Datatype::of(b).map_or(esize, |b| b.size);
        for _ in 0..n {
            let (nb, eb) = (&mut native[at_n..at_n + nsize], &mut ext[at_e..at_e + esize]);
            if let Err(e) = element(how, nb, eb, to_external) {
                failed = Some(Fail::new(ERR_CONVERSION, format!("{name}: {e}")));
                return ControlFlow::Break(());
            }
            (at_n, at_e) = (at_n + nsize, at_e + esize);
        }
        ControlFlow::Continue(())
    });
    failed.map_or(Ok(()), Err)
}

/// Converts one element between its native bytes `nb` and external32's `eb`.
fn element(how: Conv, nb: &mut [u8], eb: &mut [u8], to_external: bool) -> Result<(), String> {
    match how {
        Conv::Order { part } => {
            for (n, e) in nb.chunks_mut(part).zip(eb.chunks_mut(part)) {
                let (from, to) = if to_external { (n, e) } else { (e, n) };
                to.copy_from_slice(from);
                if cfg!(target_endian = "little") {
                    to.reverse();
                }
            }
            Ok(())
        }
        Conv::Int { native, ext, signed } => {
            // Between widths through the value, sign-extended where signed; refused if it
            // does not fit the width it goes to.
            let (from, to) = if to_external { (native, ext) } else { (ext, native) };
            let raw = if to_external {
                native_uint(nb)
            } else {
                let mut v = [0u8; 8];
                v[8 - ext..].copy_from_slice(eb);
                u64::from_be_bytes(v)
            };
            let bits = 8 * from as u32;
            let value = if signed { i128::from((raw << (64 - bits)) as i64 >> (64 - bits)) } else { i128::from(raw) };
            let bits = 8 * to as u32;
            let fits = if signed {
                (-(1i128 << (bits - 1))..1i128 << (bits - 1)).contains(&value)
            } else {
                value < 1i128 << bits
            };
            if !fits {
                let side = if to_external { "external32 gives" } else { "the native type has" };
                return Err(format!("{value} does not fit the {to} bytes {side}"));
            }
            if to_external {
                eb.copy_from_slice(&(value as u64).to_be_bytes()[8 - ext..]);
            } else {
                set_native_uint(nb, value as u64);
            }
            Ok(())
        }
        Conv::Bool => {
            let (from, to) = if to_external { (nb, eb) } else { (eb, nb) };
            to[0] = u8::from(from[0] != 0);
            Ok(())
        }
        Conv::LongDouble { parts } => {
            let n = nb.len() / parts;
            for (nat, e) in nb.chunks_mut(n).zip(eb.chunks_mut(16)) {
                if to_external {
                    e.copy_from_slice(&long_double_to_quad(nat).to_be_bytes());
                } else {
                    let q = u128::from_be_bytes(e.try_into().expect("16 bytes"));
                    quad_to_long_double(q, nat);
                }
            }
            Ok(())
        }
    }
}

/// The native integer of 1, 2, 4 or 8 bytes at `b`, its bits zero-extended.
fn native_uint(b: &[u8]) -> u64 {
    match b.len() {
        1 => u64::from(b[0]),
        2 => u64::from(u16::from_ne_bytes([b[0], b[1]])),
        4 => u64::from(u32::from_ne_bytes(b.try_into().expect("4 bytes"))),
        _ => u64::from_ne_bytes(b.try_into().expect("8 bytes")),
    }
}

/// Writes the low bits of `v` as the native integer of `b`'s size.
fn set_native_uint(b: &mut [u8], v: u64) {
    match b.len() {
        1 => b[0] = v as u8,
        2 => b.copy_from_slice(&(v as u16).to_ne_bytes()),
        4 => b.copy_from_slice(&(v as u32).to_ne_bytes()),
        _ => b.copy_from_slice(&v.to_ne_bytes()),
    }
}

/// C's long double at `b` (native order) as IEEE quadruple precision's bits: x86's 80-bit
/// extended precision (in 16 bytes), a double where long double is one (8 bytes, as on Apple
/// silicon), a quadruple otherwise (16 bytes, as on 64-bit Arm Linux).
fn long_double_to_quad(b: &[u8]) -> u128 {
    match b.len() {
        8 => double_to_quad(f64::from_ne_bytes(b.try_into().expect("8 bytes"))),
        _ if cfg!(target_arch = "x86_64") || cfg!(target_arch = "x86") => {
            extended_to_quad(u64::from_le_bytes(b[..8].try_into().expect("8")), u16::from_le_bytes([b[8], b[9]]))
        }
        _ => u128::from_ne_bytes(b.try_into().expect("16 bytes")),
    }
}

/// The inverse of [`long_double_to_quad`], rounding to nearest where the native type is
/// narrower.
fn quad_to_long_double(q: u128, out: &mut [u8]) {
    match out.len() {
        8 => out.copy_from_slice(&quad_to_double(q).to_ne_bytes()),
        _ if cfg!(target_arch = "x86_64") || cfg!(target_arch = "x86") => {
            let (mantissa, se) = quad_to_extended(q);
            out[..8].copy_from_slice(&mantissa.to_le_bytes());
            out[8..10].copy_from_slice(&se.to_le_bytes());
            out[10..].fill(0);
        }
        _ => out.copy_from_slice(&q.to_ne_bytes()),
    }
}

/// Bits of quadruple precision below the exponent; the exponent's mask.
const QUAD_FRACTION: u32 = 112;
const QUAD_EXP: u128 = 0x7fff;

/// An 80-bit extended-precision number (its 64-bit significand with the explicit integer
/// bit, and its sign and exponent) as quadruple precision: exact, both having 15 bits of
/// exponent of the same bias. A significand shifted up lands its integer bit on the
/// exponent's lowest bit, which only a zero exponent lacks: what was subnormal stays so
/// (or, a pseudo-subnormal, becomes the normal number it equals).
fn extended_to_quad(mantissa: u64, se: u16) -> u128 {
    let sign = u128::from(se >> 15) << 127;
    let exp = u128::from(se & 0x7fff);
    let m = u128::from(mantissa);
    match exp {
        0 => sign | m << 49,
        _ => sign | exp << QUAD_FRACTION | (m & !(1 << 63)) << 49,
    }
}

/// Rounds `frac >> shift` to nearest, ties to even.
fn round_shift(frac: u128, shift: u32) -> u128 {
    if shift == 0 {
        return frac;
    }
    if shift > 127 {
        return 0;
    }
    let (kept, rest, half) = (frac >> shift, frac & ((1 << shift) - 1), 1u128 << (shift - 1));
    kept + u128::from(rest > half || (rest == half && kept & 1 == 1))
}

/// Quadruple precision as 80-bit extended precision (significand, sign and exponent),
/// rounded to nearest.
fn quad_to_extended(q: u128) -> (u64, u16) {
    let sign = ((q >> 127) as u16) << 15;
    let exp = ((q >> QUAD_FRACTION) & QUAD_EXP) as u16;
    let frac = q & ((1 << QUAD_FRACTION) - 1);
    match exp {
        0x7fff => {
            // Infinity, or a NaN that stays one (its payload's top bits, at least the quiet bit).
            let payload = (frac >> 49) as u64 | if frac != 0 { 1 << 62 } else { 0 };
            (1 << 63 | payload, sign | 0x7fff)
        }
        0 => {
            let m = round_shift(frac, 49) as u64;
            // Rounded up into the integer bit: the smallest normal number.
            (m, sign | u16::from(m >> 63 == 1))
        }
        _ => {
            let m = round_shift(frac, 49);
            if m >> 63 == 1 {
                // Rounded up past the significand: the next power of two.
                let exp = exp + 1;
                return if exp == 0x7fff { (1 << 63, sign | 0x7fff) } else { (1 << 63, sign | exp) };
            }
            (1 << 63 | m as u64, sign | exp)
        }
    }
}

/// A double as quadruple precision (exact).
fn double_to_quad(d: f64) -> u128 {
    let bits = d.to_bits();
    let sign = u128::from(bits >> 63) << 127;
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let frac = u128::from(bits & ((1 << 52) - 1));
    match exp {
        0x7ff => sign | QUAD_EXP << QUAD_FRACTION | frac << 60,
        0 if frac == 0 => sign,
        0 => {
            // Subnormal: normalised, its highest set bit the implicit one.
            let top = 127 - frac.leading_zeros() as i64;
            let e = top - 1074 + 16383;
            sign | (e as u128) << QUAD_FRACTION | (frac & !(1 << top)) << (QUAD_FRACTION as i64 - top)
        }
        _ => sign | ((exp - 1023 + 16383) as u128) << QUAD_FRACTION | frac << 60,
    }
}

/// Quadruple precision as a double, rounded to nearest (overflow to infinity, underflow to
/// a subnormal or zero).
fn quad_to_double(q: u128) -> f64 {
    let sign = ((q >> 127) as u64) << 63;
    let exp = ((q >> QUAD_FRACTION) & QUAD_EXP) as i64;
    let frac = q & ((1 << QUAD_FRACTION) - 1);
    if exp == 0x7fff {
        let payload = (frac >> 60) as u64 | if frac != 0 { 1 << 51 } else { 0 };
        return f64::from_bits(sign | 0x7ff << 52 | payload);
    }
    if exp == 0 {
        // A quadruple subnormal is far below a double's smallest: zero.
        return f64::from_bits(sign);
    }
    let e = exp - 16383 + 1023;
    if e >= 0x7ff {
        return f64::from_bits(sign | 0x7ff << 52);
    }
    if e > 0 {
        // Normal: rounding may carry into the exponent, which the addition does.
        let m = round_shift(frac, 60) as u64;
        return f64::from_bits(sign | (((e as u64) << 52) + m));
    }
    // Subnormal: the implicit bit made explicit, shifted down by how far below it lies.
    let shift = 60 + (1 - e) as u32;
    let m = round_shift(frac | 1 << QUAD_FRACTION, shift) as u64;
    f64::from_bits(sign | m)
}

/// The data representation argument, which must be "external32".
///
/// # Safety
/// `datarep` is null or a C string.
unsafe fn external32(name: &str, datarep: *const c_char) -> Res {
    if datarep.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null data representation")));
    }
    // SAFETY: this function's contract.
    let rep = unsafe { CStr::from_ptr(datarep) }.to_bytes();
    match rep {
        b"external32" => Ok(()),
        _ => Err(Fail::new(
            ERR_ARG,
            format!("{name}: data representation {:?} (only \"external32\")", String::from_utf8_lossy(rep)),
        )),
    }
}

/// Where the `n` bytes at `*position` of a buffer `buf` of `size` bytes start
/// (`MPI_ERR_TRUNCATE` if they do not fit).
///
/// # Safety
/// `position` is null (an error) or points to an `MPI_Aint`.
unsafe fn span(name: &str, buf: *const c_void, size: isize, position: *const isize, n: usize) -> Res<usize> {
    if position.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null position")));
    }
    // SAFETY: not null (checked): the caller's MPI_Aint.
    let at = usize::try_from(unsafe { *position })
        .map_err(|_| Fail::new(ERR_ARG, format!("{name}: a negative position")))?;
    let size = usize::try_from(size).map_err(|_| Fail::new(ERR_ARG, format!("{name}: a buffer of {size} bytes")))?;
    if at.checked_add(n).is_none_or(|end| end > size) {
        return Err(Fail::new(
            ERR_TRUNCATE,
            format!("{name}: {n} bytes from position {at} do not fit a buffer of {size}"),
        ));
    }
    if n > 0 && buf.is_null() {
        return Err(Fail::new(ERR_ARG, format!("{name}: a null buffer")));
    }
    Ok(at)
}

mpi! {
    fn MPI_Pack_external_size / PMPI_Pack_external_size(
        datarep: *const c_char,
        incount: c_int,
        datatype: c_int,
        size: *mut isize,
    ) -> c_int {
        let name = "MPI_Pack_external_size";
        let r = (|| {
            // SAFETY: MPI's contract: a C string.
            unsafe { external32(name, datarep)? };
            let n = external_size(name, &Datatype::of(datatype)?, count_of(incount)?)?;
            // SAFETY: MPI's contract: size points to an MPI_Aint.
            unsafe { put(size, n as isize) }
        })();
        finish(name, COMM_WORLD, r)
    }

    fn MPI_Pack_external / PMPI_Pack_external(
        datarep: *const c_char,
        inbuf: *const c_void,
        incount: c_int,
        datatype: c_int,
        outbuf: *mut c_void,
        outsize: isize,
        position: *mut isize,
    ) -> c_int {
        let name = "MPI_Pack_external";
        let r = (|| {
            // SAFETY: MPI's contract: a C string.
            unsafe { external32(name, datarep)? };
            let (t, count) = (Datatype::of(datatype)?, count_of(incount)?);
            let n = external_size(name, &t, count)?;
            // SAFETY: MPI's contract: inbuf holds incount elements.
            let mut native = unsafe { super::bytes(inbuf, count, &t)? }.into_owned();
            // SAFETY: MPI's contract: position points to an MPI_Aint.
            let at = unsafe { span(name, outbuf, outsize, position, n)? };
            if n > 0 {
                // SAFETY: MPI's contract: outbuf has outsize bytes, of which at..at + n lie
                // within (checked), not null (checked).
                let out = unsafe { std::slice::from_raw_parts_mut(outbuf.cast::<u8>().add(at), n) };
                convert(name, &t, count, &mut native, out, true)?;
            }
            // SAFETY: as above.
            unsafe { put(position, (at + n) as isize) }
        })();
        finish(name, COMM_WORLD, r)
    }

    fn MPI_Unpack_external / PMPI_Unpack_external(
        datarep: *const c_char,
        inbuf: *const c_void,
        insize: isize,
        position: *mut isize,
        outbuf: *mut c_void,
        outcount: c_int,
        datatype: c_int,
    ) -> c_int {
        let name = "MPI_Unpack_external";
        let r = (|| {
            // SAFETY: MPI's contract: a C string.
            unsafe { external32(name, datarep)? };
            let (t, count) = (Datatype::of(datatype)?, count_of(outcount)?);
            let n = external_size(name, &t, count)?;
            // SAFETY: MPI's contract: position points to an MPI_Aint.
            let at = unsafe { span(name, inbuf, insize, position, n)? };
            // SAFETY: MPI's contract: outbuf holds outcount elements (unpacked into when
            // `out` drops, for a derived type).
            let mut out = unsafe { super::bytes_mut(outbuf, count, &t)? };
            if n > 0 {
                // SAFETY: MPI's contract: inbuf has insize bytes, of which at..at + n lie
                // within (checked), not null (checked); read only, copied.
                let mut ext = unsafe { std::slice::from_raw_parts(inbuf.cast::<u8>().add(at), n) }.to_vec();
                convert(name, &t, count, &mut out, &mut ext, false)?;
            }
            // SAFETY: as above.
            unsafe { put(position, (at + n) as isize) }
        })();
        finish(name, COMM_WORLD, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_precision_goes_to_quadruple_and_back_exactly() {
        // 1.0, -2.5, the smallest normal, a subnormal, infinity: (significand, sign and exponent).
        let cases =
            [(1u64 << 63, 0x3fffu16), (0xa000_0000_0000_0000, 0xc000), (1 << 63, 1), (12345, 0), (1 << 63, 0x7fff)];
        for (m, se) in cases {
            let q = extended_to_quad(m, se);
            assert_eq!(quad_to_extended(q), (m, se), "{m:#x} {se:#x} -> {q:#x}");
        }
        // 1.0 in quadruple precision: the exponent's bias, nothing else.
        assert_eq!(extended_to_quad(1 << 63, 0x3fff), 0x3fff << 112);
        // A quadruple between two extended numbers rounds to the even one.
        let halfway = (0x3fffu128 << 112) | 1 << 48;
        assert_eq!(quad_to_extended(halfway), (1 << 63, 0x3fff));
        assert_eq!(quad_to_extended(halfway | 1 << 49), (1 << 63 | 2, 0x3fff));
        // A NaN stays a NaN.
        let (m, se) = quad_to_extended(QUAD_EXP << 112 | 1);
        assert_eq!(se, 0x7fff);
        assert_ne!(m << 1, 0);
    }

    #[test]
    fn doubles_go_to_quadruple_and_back_exactly() {
        for d in [1.0, -2.5, f64::MIN_POSITIVE, 5e-324, 1.2345e-310, f64::MAX, f64::INFINITY, 0.0, -0.0, 3.0e100] {
            let q = double_to_quad(d);
            assert_eq!(quad_to_double(q).to_bits(), d.to_bits(), "{d:e} -> {q:#x}");
        }
        assert_eq!(double_to_quad(1.0), 0x3fff << 112);
        assert!(quad_to_double(double_to_quad(f64::NAN)).is_nan());
        // Beyond a double's range: infinity; far below it: zero.
        assert_eq!(quad_to_double(0x7ffe << 112), f64::INFINITY);
        assert_eq!(quad_to_double(1 << 112), 0.0);
    }

    /// Fortran's complex types are two reals, the real part first, each big-endian (MPICH
    /// 4.0.2 swaps a whole `MPI_COMPLEX` instead, which puts the imaginary part first), and
    /// come back as they were.
    #[test]
    fn fortran_complex_numbers_are_two_big_endian_reals() {
        let rep = c"external32".as_ptr();
        let (single, double) = ([1.5f32, -0.25, 8.0, 0.5], [2.5f64, -1e-3]);
        let (mut out, mut pos) = ([0u8; 32], 0isize);
        // SAFETY: two COMPLEX (handle 50) and one DOUBLE COMPLEX (51) in; room for 32 bytes.
        unsafe {
            assert_eq!(
                PMPI_Pack_external(rep, single.as_ptr().cast(), 2, 50, out.as_mut_ptr().cast(), 32, &mut pos),
                0
            );
            assert_eq!(
                PMPI_Pack_external(rep, double.as_ptr().cast(), 1, 51, out.as_mut_ptr().cast(), 32, &mut pos),
                0
            );
        }
        let want: Vec<u8> = single
            .iter()
            .flat_map(|x| x.to_bits().to_be_bytes())
            .chain(double.iter().flat_map(|x| x.to_bits().to_be_bytes()))
            .collect();
        assert_eq!((pos, &out[..]), (32, &want[..]));
        let (mut s, mut d, mut at) = ([0f32; 4], [0f64; 2], 0isize);
        // SAFETY: 32 bytes in; room for two COMPLEX and one DOUBLE COMPLEX out.
        unsafe {
            assert_eq!(PMPI_Unpack_external(rep, out.as_ptr().cast(), 32, &mut at, s.as_mut_ptr().cast(), 2, 50), 0);
            assert_eq!(PMPI_Unpack_external(rep, out.as_ptr().cast(), 32, &mut at, d.as_mut_ptr().cast(), 1, 51), 0);
        }
        assert_eq!((s, d, at), (single, double, 32));
    }

    #[test]
    fn a_struct_of_mixed_types_is_packed_element_by_element() {
        #[repr(C)]
        #[derive(Debug, Clone, Copy, PartialEq)]
        struct Rec {
            a: i32,
            b: f64,
            c: std::ffi::c_long,
        }
        let (lens, disps, types) = ([1, 1, 1], [0isize, 8, 16], [7, 14, 9]);
        let mut t = 0;
        // SAFETY: three of each, and a datatype to write.
        unsafe {
            assert_eq!(
                super::super::dtype::PMPI_Type_create_struct(3, lens.as_ptr(), disps.as_ptr(), types.as_ptr(), &mut t),
                0
            );
            assert_eq!(super::super::dtype::PMPI_Type_commit(&mut t), 0);
        }
        let recs = [Rec { a: -2, b: 1.5, c: 7 }, Rec { a: 3, b: -0.25, c: -1 }];
        let (mut out, mut pos, mut size) = ([0u8; 40], 0isize, 0isize);
        let rep = c"external32".as_ptr();
        // SAFETY: two records in, room for 40 bytes out, the position and size to write.
        unsafe {
            assert_eq!(PMPI_Pack_external_size(rep, 2, t, &mut size), 0);
            assert_eq!(PMPI_Pack_external(rep, recs.as_ptr().cast(), 2, t, out.as_mut_ptr().cast(), 40, &mut pos), 0);
        }
        // Each record: its int, its double, its long in 4 bytes, big-endian.
        let one =
            |r: &Rec| [&r.a.to_be_bytes()[..], &r.b.to_bits().to_be_bytes(), &(r.c as i32).to_be_bytes()].concat();
        assert_eq!((size, pos), (32, 32));
        assert_eq!(out[..32], [one(&recs[0]), one(&recs[1])].concat()[..]);
        let mut back = [Rec { a: 0, b: 0.0, c: 0 }; 2];
        let mut at = 0isize;
        // SAFETY: 32 bytes in, room for two records out.
        let rc = unsafe { PMPI_Unpack_external(rep, out.as_ptr().cast(), 32, &mut at, back.as_mut_ptr().cast(), 2, t) };
        assert_eq!(rc, 0);
        assert_eq!((back, at), (recs, 32));
        // The elements of a message of the first record (20 bytes of data) and the int and
        // double of the second; one that ends inside the double.
        let ty = Datatype::of(t).unwrap();
        assert_eq!(elements_in_bytes(&ty, 20 + 12), Some(5));
        assert_eq!(elements_in_bytes(&ty, 20 + 6), None);
    }

    #[test]
    fn integers_are_big_endian_and_longs_take_four_bytes() {
        let mut ext = [0u8; 4];
        let mut native = 0x0102_0304i32.to_ne_bytes();
        element(Conv::Order { part: 4 }, &mut native, &mut ext, true).unwrap();
        assert_eq!(ext, [1, 2, 3, 4]);
        let narrow = Conv::Int { native: 8, ext: 4, signed: true };
        let mut long = (-5i64).to_ne_bytes();
        element(narrow, &mut long, &mut ext, true).unwrap();
        assert_eq!(ext, (-5i32).to_be_bytes());
        let mut back = [0u8; 8];
        element(narrow, &mut back, &mut ext, false).unwrap();
        assert_eq!(i64::from_ne_bytes(back), -5);
        let mut big = (1i64 << 40).to_ne_bytes();
        assert!(element(narrow, &mut big, &mut ext, true).is_err());
        // A bool is 1 for true, whatever byte stood for it (MPICH's own test expects so).
        let (mut t, mut e) = ([2u8], [9u8]);
        element(Conv::Bool, &mut t, &mut e, true).unwrap();
        assert_eq!(e, [1]);
    }
}
