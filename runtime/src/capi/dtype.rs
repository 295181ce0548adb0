//! Derived datatypes (`MPI_Type_vector` ...): each a [`Layout`] of the core built from its
//! old types' layouts, kept in the datatype table with the arguments that made it
//! (`MPI_Type_get_contents`); and `MPI_Pack` / `MPI_Unpack`, which are the layout's pack and
//! unpack.

use std::cell::Cell;
use std::ffi::{c_int, c_void};

use super::attr;
use super::types::{self, Datatype, Derived, COMBINER_NAMED, FIRST_DERIVED};
use super::{
    comm_of, count_of, finish, ints_at, name_at, put, write_text, Fail, Res, COMM_WORLD, ERR_ARG, ERR_TRUNCATE,
    ERR_TYPE, MAX_OBJECT_NAME,
};
use crate::Layout;

/// `MPI_COMBINER_*` (include/mpi.h; MPICH's values).
const COMBINER_DUP: c_int = 2;
const COMBINER_CONTIGUOUS: c_int = 3;
const COMBINER_VECTOR: c_int = 4;
const COMBINER_HVECTOR: c_int = 6;
const COMBINER_INDEXED: c_int = 7;
const COMBINER_HINDEXED: c_int = 9;
const COMBINER_INDEXED_BLOCK: c_int = 10;
const COMBINER_STRUCT: c_int = 12;
const COMBINER_SUBARRAY: c_int = 13;
const COMBINER_RESIZED: c_int = 18;
const COMBINER_HINDEXED_BLOCK: c_int = 19;
const COMBINER_DARRAY: c_int = 14;

/// `MPI_DISTRIBUTE_BLOCK`, `_CYCLIC`, `_NONE`, `_DFLT_DARG` (include/mpi.h).
const DISTRIBUTE_BLOCK: c_int = 121;
const DISTRIBUTE_CYCLIC: c_int = 122;
const DISTRIBUTE_NONE: c_int = 123;
const DISTRIBUTE_DFLT_DARG: c_int = -49767;

/// A dimension's distribution of `MPI_Type_create_darray`: `distrib` with its `darg`.
fn distribution(distrib: c_int, darg: c_int) -> Res<crate::Distribution> {
    let arg = match darg {
        DISTRIBUTE_DFLT_DARG => None,
        n => Some(usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
            Fail::new(
                ERR_ARG,
                format!("a distribution argument of {n} (neither positive nor MPI_DISTRIBUTE_DFLT_DARG)"),
            )
        })?),
    };
    match distrib {
        DISTRIBUTE_BLOCK => Ok(crate::Distribution::Block(arg)),
        DISTRIBUTE_CYCLIC => Ok(crate::Distribution::Cyclic(arg)),
        DISTRIBUTE_NONE => Ok(crate::Distribution::None),
        d => Err(Fail::new(ERR_ARG, format!("distribution {d}"))),
    }
}

/// `MPI_ORDER_C`, `MPI_ORDER_FORTRAN`.
const ORDER_C: c_int = 56;
const ORDER_FORTRAN: c_int = 57;

/// How a new type was made: its combiner and `MPI_Type_get_contents`' arguments.
struct Made {
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<isize>,
    types: Vec<c_int>,
}

/// A new derived type of `layout` into the table, its handle into `out`. Its basic type is
/// the one all of `made.types` share, if they do.
///
/// # Safety
/// `out` points to an `MPI_Datatype`.
unsafe fn new_type(layout: Layout, made: Made, out: *mut c_int) -> Res {
    let basics: Vec<Option<c_int>> = made.types.iter().map(|&t| basic_of(t)).collect::<Res<_>>()?;
    let basic = match basics.split_first() {
        Some((&first, rest)) if rest.iter().all(|&b| b == first) => first,
        _ => None,
    };
    // Basic elements in one element: of each old type, as many as its data fits.
    let olds: Vec<Datatype> = made.types.iter().map(|&t| Datatype::of(t)).collect::<Res<_>>()?;
    let elements = match &olds[..] {
        [old] if old.size > 0 => layout.size() / old.size * old.elements(),
        [_] => 0,
        // A struct: block length i of type i.
        _ => made.ints[1..].iter().zip(&olds).map(|(&b, t)| b.max(0) as usize * t.elements()).sum(),
    };
    // A duplicate of a value-index pair is one too.
    let pair = match &olds[..] {
        [old] if made.combiner == COMBINER_DUP => old.derived.as_ref().and_then(|d| d.pair),
        _ => None,
    };
    // Made of one value-index pair alone: its elements are that pair.
    let pairs_of = match olds.split_first() {
        Some((first, rest)) => {
            let v = super::types::pairs_in(first);
            v.filter(|_| rest.iter().all(|t| super::types::pairs_in(t) == v))
        }
        None => None,
    };
    let d = Derived {
        layout,
        basic,
        elements,
        combiner: made.combiner,
        ints: made.ints,
        aints: made.aints,
        types: olds,
        committed: Cell::new(false),
        pair,
        pairs_of,
    };
    if out.is_null() {
        return Err(Fail::new(ERR_ARG, "a null datatype pointer"));
    }
    // SAFETY: not null (checked): the caller's MPI_Datatype.
    unsafe { put(out, Datatype::insert(d)) }
}

/// The predefined type every basic element of type `h` is, if one (a predefined type with
/// a layout of its own, `MPI_C_DOUBLE_COMPLEX` say, is its own; a value-index pair is two).
fn basic_of(h: c_int) -> Res<Option<c_int>> {
    let t = Datatype::of(h)?;
    Ok(match &t.derived {
        None => Some(h),
        Some(d) if h < FIRST_DERIVED && d.pair.is_none() => Some(h),
        Some(d) => d.basic,
    })
}

/// The layout of type `h`.
fn layout_of(h: c_int) -> Res<Layout> {
    Ok(Datatype::of(h)?.layout())
}

/// `n` of the caller's `MPI_Aint`s at `p`.
///
/// # Safety
/// `p` points to `n` of them.
unsafe fn aints_at<'a>(p: *const isize, n: usize) -> Res<&'a [isize]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::new(ERR_ARG, "a null array of displacements"));
    }
    // SAFETY: not null (checked): the caller's n MPI_Aints.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Nonnegative counts.
fn counts_of(v: &[c_int]) -> Res<Vec<usize>> {
    v.iter().map(|&c| count_of(c)).collect()
}

thread_local! {
    /// `MPI_Type_set_name`'s names, by handle (a predefined type without one is called by
    /// its MPI name, a derived one by none).
    static NAMES: std::cell::RefCell<std::collections::HashMap<c_int, String>> = Default::default();
}

/// Runs constructor `name` and returns its code.
fn make(name: &str, f: impl FnOnce() -> Res) -> c_int {
    finish(name, COMM_WORLD, f())
}

/// A handle the caller passes by pointer (`MPI_Type_commit`, `MPI_Type_free`).
///
/// # Safety
/// `p` is null (an error) or points to an `MPI_Datatype`.
unsafe fn handle_at(p: *mut c_int) -> Res<c_int> {
    if p.is_null() {
        return Err(Fail::new(ERR_ARG, "a null datatype pointer"));
    }
    // SAFETY: not null (checked).
    Ok(unsafe { *p })
}

mpi! {
    fn MPI_Type_contiguous / PMPI_Type_contiguous(count: c_int, oldtype: c_int, newtype: *mut c_int) -> c_int {
        make("MPI_Type_contiguous", || {
            let l = Layout::contiguous(count_of(count)?, &layout_of(oldtype)?);
            let made = Made { combiner: COMBINER_CONTIGUOUS, ints: vec![count], aints: vec![], types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(l, made, newtype) }
        })
    }

    fn MPI_Type_vector / PMPI_Type_vector(
        count: c_int,
        blocklength: c_int,
        stride: c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_vector", || {
            let old = layout_of(oldtype)?;
            let l = Layout::hvector(count_of(count)?, count_of(blocklength)?, stride as isize * old.extent(), &old);
            let made =
                Made { combiner: COMBINER_VECTOR, ints: vec![count, blocklength, stride], aints: vec![], types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(l, made, newtype) }
        })
    }

    fn MPI_Type_create_hvector / PMPI_Type_create_hvector(
        count: c_int,
        blocklength: c_int,
        stride: isize,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_create_hvector", || {
            let l = Layout::hvector(count_of(count)?, count_of(blocklength)?, stride, &layout_of(oldtype)?);
            let made =
                Made { combiner: COMBINER_HVECTOR, ints: vec![count, blocklength], aints: vec![stride], types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(l, made, newtype) }
        })
    }

    fn MPI_Type_indexed / PMPI_Type_indexed(
        count: c_int,
        blocklengths: *const c_int,
        displacements: *const c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_indexed", || {
            let n = count_of(count)?;
            // SAFETY: MPI's contract: both arrays hold `count` ints.
            let (bl, d) = unsafe { (ints_at(blocklengths, n, "block lengths")?, ints_at(displacements, n, "displacements")?) };
            let old = layout_of(oldtype)?;
            let blocks: Vec<(usize, isize)> =
                counts_of(bl)?.into_iter().zip(d).map(|(b, &d)| (b, d as isize * old.extent())).collect();
            let ints = [&[count][..], bl, d].concat();
            let made = Made { combiner: COMBINER_INDEXED, ints, aints: vec![], types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(Layout::hindexed(&blocks, &old), made, newtype) }
        })
    }

    fn MPI_Type_create_hindexed / PMPI_Type_create_hindexed(
        count: c_int,
        blocklengths: *const c_int,
        displacements: *const isize,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_create_hindexed", || {
            let n = count_of(count)?;
            // SAFETY: MPI's contract: both arrays hold `count` elements.
            let (bl, d) = unsafe { (ints_at(blocklengths, n, "block lengths")?, aints_at(displacements, n)?) };
            let blocks: Vec<(usize, isize)> = counts_of(bl)?.into_iter().zip(d.iter().copied()).collect();
            let made =
                Made { combiner: COMBINER_HINDEXED, ints: [&[count][..], bl].concat(), aints: d.to_vec(), types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(Layout::hindexed(&blocks, &layout_of(oldtype)?), made, newtype) }
        })
    }

    fn MPI_Type_create_indexed_block / PMPI_Type_create_indexed_block(
        count: c_int,
        blocklength: c_int,
        displacements: *const c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_create_indexed_block", || {
            let (n, b) = (count_of(count)?, count_of(blocklength)?);
            // SAFETY: MPI's contract: the array holds `count` ints.
            let d = unsafe { ints_at(displacements, n, "displacements")? };
            let old = layout_of(oldtype)?;
            let blocks: Vec<(usize, isize)> = d.iter().map(|&d| (b, d as isize * old.extent())).collect();
            let ints = [&[count, blocklength][..], d].concat();
            let made = Made { combiner: COMBINER_INDEXED_BLOCK, ints, aints: vec![], types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(Layout::hindexed(&blocks, &old), made, newtype) }
        })
    }

    fn MPI_Type_create_hindexed_block / PMPI_Type_create_hindexed_block(
        count: c_int,
        blocklength: c_int,
        displacements: *const isize,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_create_hindexed_block", || {
            let (n, b) = (count_of(count)?, count_of(blocklength)?);
            // SAFETY: MPI's contract: the array holds `count` MPI_Aints.
            let d = unsafe { aints_at(displacements, n)? };
            let blocks: Vec<(usize, isize)> = d.iter().map(|&d| (b, d)).collect();
            let made = Made {
                combiner: COMBINER_HINDEXED_BLOCK,
                ints: vec![count, blocklength],
                aints: d.to_vec(),
                types: vec![oldtype],
            };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(Layout::hindexed(&blocks, &layout_of(oldtype)?), made, newtype) }
        })
    }

    fn MPI_Type_create_struct / PMPI_Type_create_struct(
        count: c_int,
        blocklengths: *const c_int,
        displacements: *const isize,
        types: *const c_int,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_create_struct", || {
            let n = count_of(count)?;
            // SAFETY: MPI's contract: the three arrays hold `count` elements.
            let (bl, d, t) = unsafe {
                (ints_at(blocklengths, n, "block lengths")?, aints_at(displacements, n)?, ints_at(types, n, "datatypes")?)
            };
            let layouts: Vec<Layout> = t.iter().map(|&t| layout_of(t)).collect::<Res<_>>()?;
            let fields: Vec<(usize, isize, &Layout)> =
                counts_of(bl)?.into_iter().zip(d).zip(&layouts).map(|((b, &d), l)| (b, d, l)).collect();
            let made =
                Made { combiner: COMBINER_STRUCT, ints: [&[count][..], bl].concat(), aints: d.to_vec(), types: t.to_vec() };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(Layout::structure(&fields), made, newtype) }
        })
    }

    fn MPI_Type_create_subarray / PMPI_Type_create_subarray(
        ndims: c_int,
        sizes: *const c_int,
        subsizes: *const c_int,
        starts: *const c_int,
        order: c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_create_subarray", || {
            let n = count_of(ndims)?;
            // SAFETY: MPI's contract: the three arrays hold `ndims` ints.
            let (a, b, c) = unsafe {
                (ints_at(sizes, n, "sizes")?, ints_at(subsizes, n, "subsizes")?, ints_at(starts, n, "starts")?)
            };
            let fortran = match order {
                ORDER_C => false,
                ORDER_FORTRAN => true,
                o => return Err(Fail::new(ERR_ARG, format!("array order {o}"))),
            };
            let l = Layout::subarray(&counts_of(a)?, &counts_of(b)?, &counts_of(c)?, fortran, &layout_of(oldtype)?)
                .ok_or_else(|| Fail::new(ERR_ARG, "a subarray that does not lie within its array"))?;
            let ints = [&[ndims][..], a, b, c, &[order]].concat();
            let made = Made { combiner: COMBINER_SUBARRAY, ints, aints: vec![], types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(l, made, newtype) }
        })
    }

    fn MPI_Type_create_darray / PMPI_Type_create_darray(
        size: c_int,
        rank: c_int,
        ndims: c_int,
        gsizes: *const c_int,
        distribs: *const c_int,
        dargs: *const c_int,
        psizes: *const c_int,
        order: c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_create_darray", || {
            let n = count_of(ndims)?;
            // SAFETY: MPI's contract: the four arrays hold `ndims` ints.
            let (g, d, a, p) = unsafe {
                (
                    ints_at(gsizes, n, "gsizes")?,
                    ints_at(distribs, n, "distribs")?,
                    ints_at(dargs, n, "dargs")?,
                    ints_at(psizes, n, "psizes")?,
                )
            };
            let fortran = match order {
                ORDER_C => false,
                ORDER_FORTRAN => true,
                o => return Err(Fail::new(ERR_ARG, format!("array order {o}"))),
            };
            let dists = d.iter().zip(a).map(|(&d, &a)| distribution(d, a)).collect::<Res<Vec<_>>>()?;
            if n == 0 {
                return Err(Fail::new(ERR_ARG, "a distributed array of no dimensions"));
            }
            let (procs, grid) = (count_of(size)?, counts_of(p)?);
            if grid.iter().try_fold(1usize, |a, &g| a.checked_mul(g)) != Some(procs) {
                return Err(Fail::new(ERR_ARG, format!("a grid of {grid:?} processes for {procs}")));
            }
            let l = Layout::darray(count_of(rank)?, &counts_of(g)?, &dists, &grid, fortran, &layout_of(oldtype)?)
                .map_err(|e| Fail::new(ERR_ARG, e))?;
            let ints = [&[size, rank, ndims][..], g, d, a, p, &[order]].concat();
            let made = Made { combiner: COMBINER_DARRAY, ints, aints: vec![], types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(l, made, newtype) }
        })
    }

    fn MPI_Type_match_size / PMPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut c_int) -> c_int {
        let r = match types::match_size(typeclass, usize::try_from(size).unwrap_or(usize::MAX)) {
            None => Err(Fail::new(ERR_ARG, format!("MPI_Type_match_size: type class {typeclass}"))),
            Some(None) => Err(Fail::new(ERR_ARG, format!("MPI_Type_match_size: no type of its class of {size} bytes"))),
            // SAFETY: MPI's contract: datatype points to an MPI_Datatype.
            Some(Some(h)) => unsafe { put(datatype, h) },
        };
        finish("MPI_Type_match_size", COMM_WORLD, r)
    }

    fn MPI_Type_create_resized / PMPI_Type_create_resized(
        oldtype: c_int,
        lb: isize,
        extent: isize,
        newtype: *mut c_int,
    ) -> c_int {
        make("MPI_Type_create_resized", || {
            let l = layout_of(oldtype)?.resized(lb, extent);
            let made = Made { combiner: COMBINER_RESIZED, ints: vec![], aints: vec![lb, extent], types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(l, made, newtype) }
        })
    }

    fn MPI_Type_dup / PMPI_Type_dup(oldtype: c_int, newtype: *mut c_int) -> c_int {
        make("MPI_Type_dup", || {
            let made = Made { combiner: COMBINER_DUP, ints: vec![], aints: vec![], types: vec![oldtype] };
            // SAFETY: MPI's contract: newtype points to an MPI_Datatype.
            unsafe { new_type(layout_of(oldtype)?, made, newtype) }?;
            // A duplicate is committed if its original is.
            // SAFETY: just written.
            let made = unsafe { *newtype };
            if let Some(d) = Datatype::of(made)?.derived {
                d.committed.set(Datatype::of(oldtype)?.usable().is_ok());
            }
            attr::copy_all("MPI_Type_dup", attr::Object::Type, oldtype, made).inspect_err(|_| {
                // A copy function failed: no duplicate is made.
                let _ = Datatype::free(made);
                // SAFETY: as above.
                unsafe { *newtype = 0 };
            })
        })
    }

    fn MPI_Type_commit / PMPI_Type_commit(datatype: *mut c_int) -> c_int {
        make("MPI_Type_commit", || {
            // SAFETY: MPI's contract: datatype points to an MPI_Datatype.
            let t = Datatype::of(unsafe { handle_at(datatype)? })?;
            if let Some(d) = t.derived {
                d.committed.set(true);
            }
            Ok(())
        })
    }

    fn MPI_Type_free / PMPI_Type_free(datatype: *mut c_int) -> c_int {
        make("MPI_Type_free", || {
            // SAFETY: MPI's contract: datatype points to an MPI_Datatype.
            let h = unsafe { handle_at(datatype)? };
            if h >= FIRST_DERIVED && Datatype::of(h).is_ok() {
                attr::delete_all("MPI_Type_free", attr::Object::Type, h)?;
            }
            Datatype::free(h)?;
            NAMES.with(|n| n.borrow_mut().remove(&h));
            // SAFETY: as above (not null: handle_at checked).
            unsafe { put(datatype, 0) }
        })
    }

    fn MPI_Type_set_name / PMPI_Type_set_name(datatype: c_int, type_name: *const std::ffi::c_char) -> c_int {
        make("MPI_Type_set_name", || {
            Datatype::of(datatype)?;
            // SAFETY: MPI's contract: a NUL-terminated string.
            let text = unsafe { name_at(type_name)? };
            NAMES.with(|n| n.borrow_mut().insert(datatype, text));
            Ok(())
        })
    }

    fn MPI_Type_get_name / PMPI_Type_get_name(datatype: c_int, type_name: *mut std::ffi::c_char, resultlen: *mut c_int) -> c_int {
        make("MPI_Type_get_name", || {
            let t = Datatype::of(datatype)?;
            let given = NAMES.with(|n| n.borrow().get(&datatype).cloned());
            let text = given.unwrap_or_else(|| if datatype < FIRST_DERIVED { t.name.into() } else { String::new() });
            // SAFETY: MPI's contract: type_name holds MPI_MAX_OBJECT_NAME chars.
            unsafe { write_text(&text, type_name, resultlen, MAX_OBJECT_NAME) }
        })
    }

    fn MPI_Type_get_extent / PMPI_Type_get_extent(datatype: c_int, lb: *mut isize, extent: *mut isize) -> c_int {
        make("MPI_Type_get_extent", || {
            let (l, e) = Datatype::of(datatype)?.bounds();
            // SAFETY: MPI's contract: lb and extent point to MPI_Aints.
            unsafe {
                put(lb, l)?;
                put(extent, e)
            }
        })
    }

    fn MPI_Type_get_true_extent / PMPI_Type_get_true_extent(
        datatype: c_int,
        true_lb: *mut isize,
        true_extent: *mut isize,
    ) -> c_int {
        make("MPI_Type_get_true_extent", || {
            let l = Datatype::of(datatype)?.layout();
            // SAFETY: MPI's contract: both point to MPI_Aints.
            unsafe {
                put(true_lb, l.true_lb())?;
                put(true_extent, l.true_extent())
            }
        })
    }

    fn MPI_Type_get_envelope / PMPI_Type_get_envelope(
        datatype: c_int,
        num_integers: *mut c_int,
        num_addresses: *mut c_int,
        num_datatypes: *mut c_int,
        combiner: *mut c_int,
    ) -> c_int {
        make("MPI_Type_get_envelope", || {
            let t = Datatype::of(datatype)?;
            let (ni, na, nd, comb) = match t.derived.as_deref() {
                Some(d) if datatype >= FIRST_DERIVED => (d.ints.len(), d.aints.len(), d.types.len(), d.combiner),
                _ => (0, 0, 0, COMBINER_NAMED),
            };
            // SAFETY: MPI's contract: all four point to ints.
            unsafe {
                put(num_integers, ni as c_int)?;
                put(num_addresses, na as c_int)?;
                put(num_datatypes, nd as c_int)?;
                put(combiner, comb)
            }
        })
    }

    fn MPI_Type_get_contents / PMPI_Type_get_contents(
        datatype: c_int,
        max_integers: c_int,
        max_addresses: c_int,
        max_datatypes: c_int,
        integers: *mut c_int,
        addresses: *mut isize,
        datatypes: *mut c_int,
    ) -> c_int {
        make("MPI_Type_get_contents", || {
            let t = Datatype::of(datatype)?;
            let d = match t.derived.as_deref() {
                Some(d) if datatype >= FIRST_DERIVED => d,
                _ => return Err(Fail::new(ERR_TYPE, "MPI_Type_get_contents of a predefined datatype")),
            };
            /// Whether an array `out` with room for `max` takes `n` elements.
            fn fits<T>(n: usize, out: *const T, max: c_int) -> Res {
                if n > count_of(max)? || (n > 0 && out.is_null()) {
                    return Err(Fail::new(ERR_ARG, "MPI_Type_get_contents: arrays smaller than its envelope"));
                }
                Ok(())
            }
            /// Copies `v` to `out`, which has room for `max`.
            ///
            /// # Safety
            /// `out` points to `max` elements.
            unsafe fn give<T: Copy>(v: &[T], out: *mut T, max: c_int) -> Res {
                fits(v.len(), out, max)?;
                // SAFETY: room for v.len() (checked) at out, not null where v is not empty.
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, v.len()) };
                Ok(())
            }
            // SAFETY: MPI's contract: each array has room for its max.
            unsafe {
                give(&d.ints, integers, max_integers)?;
                give(&d.aints, addresses, max_addresses)?;
            }
            // Checked before any new handle is made (the copy below cannot fail then).
            fits(d.types.len(), datatypes, max_datatypes)?;
            // A predefined type is itself; a derived one a new handle of the same type (MPI:
            // the program frees it), which lives on though the program freed its own handle.
            let handles: Vec<c_int> =
                d.types.iter().map(|t| if t.handle < FIRST_DERIVED { t.handle } else { Datatype::insert_again(t) }).collect();
            // SAFETY: as above.
            unsafe { give(&handles, datatypes, max_datatypes) }
        })
    }

    fn MPI_Pack_size / PMPI_Pack_size(incount: c_int, datatype: c_int, comm: c_int, size: *mut c_int) -> c_int {
        let r = (|| {
            comm_of("MPI_Pack_size", comm)?;
            let n = count_of(incount)? * Datatype::of(datatype)?.size;
            // SAFETY: MPI's contract: size points to an int.
            unsafe { put(size, n as c_int) }
        })();
        finish("MPI_Pack_size", comm, r)
    }

    fn MPI_Pack / PMPI_Pack(
        inbuf: *const c_void,
        incount: c_int,
        datatype: c_int,
        outbuf: *mut c_void,
        outsize: c_int,
        position: *mut c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            comm_of("MPI_Pack", comm)?;
            let t = Datatype::of(datatype)?;
            // SAFETY: MPI's contract: inbuf holds incount elements.
            let data = unsafe { super::bytes(inbuf, count_of(incount)?, &t)? };
            // SAFETY: MPI's contract: position points to an int; outbuf has outsize bytes.
            unsafe { packed_at(outbuf, outsize, position, data.len(), |out| out.copy_from_slice(&data)) }
        })();
        finish("MPI_Pack", comm, r)
    }

    fn MPI_Unpack / PMPI_Unpack(
        inbuf: *const c_void,
        insize: c_int,
        position: *mut c_int,
        outbuf: *mut c_void,
        outcount: c_int,
        datatype: c_int,
        comm: c_int,
    ) -> c_int {
        let r = (|| {
            comm_of("MPI_Unpack", comm)?;
            let t = Datatype::of(datatype)?;
            // SAFETY: MPI's contract: outbuf holds outcount elements.
            let mut out = unsafe { super::bytes_mut(outbuf, count_of(outcount)?, &t)? };
            let n = out.len();
            // SAFETY: MPI's contract: position points to an int; inbuf has insize bytes.
            unsafe { packed_at(inbuf.cast_mut(), insize, position, n, |packed| out.copy_from_slice(packed)) }
        })();
        finish("MPI_Unpack", comm, r)
    }
}

/// Runs `f` on the `n` bytes at `*position` of the packing buffer `buf` of `size` bytes,
/// and moves the position past them (`MPI_ERR_TRUNCATE` if they do not fit).
///
/// # Safety
/// `position` points to an int; `buf` to `size` bytes, writable if `f` writes.
unsafe fn packed_at(buf: *mut c_void, size: c_int, position: *mut c_int, n: usize, f: impl FnOnce(&mut [u8])) -> Res {
    if position.is_null() {
        return Err(Fail::new(ERR_ARG, "a null position"));
    }
    // SAFETY: not null (checked): the caller's int.
    let at = count_of(unsafe { *position })?;
    if at + n > count_of(size)? {
        return Err(Fail::new(ERR_TRUNCATE, format!("{n} bytes from position {at} do not fit a buffer of {size}")));
    }
    if n > 0 {
        // SAFETY: the caller's buffer of `size` bytes, of which at..at+n lie within (checked).
        f(unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>().add(at), n) });
    }
    // SAFETY: as above.
    unsafe { put(position, (at + n) as c_int) }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    /// A derived type's handle, committed.
    fn made(layout: Layout) -> c_int {
        let mut h = 0;
        let made = Made { combiner: COMBINER_CONTIGUOUS, ints: vec![], aints: vec![], types: vec![7] };
        // SAFETY: `h` is an int.
        unsafe { new_type(layout, made, &mut h) }.unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { MPI_Type_commit(&mut h) }, 0);
        h
    }

    #[test]
    fn contiguous_layouts_are_the_callers_memory_and_others_are_packed() {
        let data: Vec<i32> = (0..16).collect();
        let int = Layout::basic(4, 4);
        let cases = [
            // Four ints in a row, and that twice: the caller's memory itself.
            (Layout::contiguous(4, &int), 2, Some(0)),
            // One int 8 bytes in (the data starts there), resized to its size: still in place.
            (Layout::hindexed(&[(1, 8)], &int).resized(8, 4), 3, Some(8)),
            // Every other int: packed.
            (Layout::hvector(4, 1, 8, &int), 1, None),
        ];
        for (layout, count, at) in cases {
            let t = Datatype::of(made(layout)).unwrap();
            // SAFETY: `data` holds every element of each case.
            let b = unsafe { crate::capi::bytes(data.as_ptr().cast(), count, &t) }.unwrap();
            match (b, at) {
                (Cow::Borrowed(b), Some(off)) => {
                    assert_eq!(b.as_ptr(), data.as_ptr().cast::<u8>().wrapping_offset(off))
                }
                (Cow::Owned(v), None) => assert_eq!(v, [0, 2, 4, 6].map(i32::to_ne_bytes).concat()),
                (b, at) => panic!("{:?} for {at:?}", matches!(b, Cow::Borrowed(_))),
            }
        }
        // Not committed: no data moves with it.
        let mut h = 0;
        let m = Made { combiner: COMBINER_CONTIGUOUS, ints: vec![], aints: vec![], types: vec![7] };
        // SAFETY: `h` is an int.
        unsafe { new_type(Layout::contiguous(2, &int), m, &mut h) }.unwrap();
        // SAFETY: as above.
        assert!(unsafe { crate::capi::bytes(data.as_ptr().cast(), 1, &Datatype::of(h).unwrap()) }.is_err());
    }
}
