//! Layouts of data in memory: MPI's derived datatypes as the runs of bytes they cover (what
//! MPICH's dataloops and UCX's generic datatypes describe), and the pack and unpack that
//! turn them into a message and back.
//!
//! A layout is built from others by the constructors MPI names (contiguous, vector, indexed,
//! struct, subarray, resized). It keeps its type map as the runs of contiguous bytes it
//! covers, in type-map order, neighbouring runs merged, so a layout whose `count` elements
//! make one run is sent from and received into the caller's memory directly
//! ([`Layout::contiguous_at`]); any other is packed into a message and unpacked from one.
//! The engine owns a packed send's bytes and a staged receive's, and unpacks when the
//! receive completes ([`crate::Comm::isend_owned`], [`crate::Comm::irecv_staged`]).

/// One run of bytes: at `off` from the element's start, `len` long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    off: isize,
    len: usize,
}

/// Where the bytes of one element of a datatype lie, relative to its start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    runs: Vec<Run>,
    size: usize,
    /// MPI's lower bound and upper bound (the extent is `ub - lb`; resized types set both).
    lb: isize,
    ub: isize,
    /// The lowest and highest byte the data covers.
    true_lb: isize,
    true_ub: isize,
    /// The largest alignment of the basic elements within (a struct's extent is rounded to it).
    align: usize,
}

impl Layout {
    /// A basic element of `size` bytes aligned to `align` (a predefined datatype).
    pub fn basic(size: usize, align: usize) -> Layout {
        let runs = if size > 0 { vec![Run { off: 0, len: size }] } else { Vec::new() };
        let ub = size as isize;
        Layout { runs, size, lb: 0, ub, true_lb: 0, true_ub: ub, align: align.max(1) }
    }

    /// Bytes of data in one element (`MPI_Type_size`).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Lower bound (`MPI_Type_get_extent`'s `lb`).
    pub fn lb(&self) -> isize {
        self.lb
    }

    /// Distance from one element to the next (`MPI_Type_get_extent`'s `extent`).
    pub fn extent(&self) -> isize {
        self.ub - self.lb
    }

    /// The lowest byte the data covers (`MPI_Type_get_true_extent`'s `true_lb`).
    pub fn true_lb(&self) -> isize {
        self.true_lb
    }

    /// From the lowest byte the data covers to past the highest (`true_extent`).
    pub fn true_extent(&self) -> isize {
        self.true_ub - self.true_lb
    }

    /// The largest alignment of the basic elements within.
    pub fn align(&self) -> usize {
        self.align
    }

    /// Runs of one element.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The offset of the one run `count` elements cover, if they cover one with no gap (the
    /// caller's memory is then the message itself).
    pub fn contiguous_at(&self, count: usize) -> Option<isize> {
        match self.runs[..] {
            _ if count == 0 || self.size == 0 => Some(0),
            [r] if count == 1 || self.extent() == r.len as isize => Some(r.off),
            _ => None,
        }
    }

    /// The runs of `count` elements, in order, as (offset from the buffer, length).
    pub fn runs_of(&self, count: usize) -> impl Iterator<Item = (isize, usize)> + '_ {
        let ext = self.extent();
        (0..count).flat_map(move |i| self.runs.iter().map(move |r| (i as isize * ext + r.off, r.len)))
    }

    /// A layout made of the runs of `parts`: each a layout, where its first element starts
    /// and how many elements follow one another from there. MPI's bounds: the lowest lower
    /// bound and highest upper bound of the parts.
    fn of_parts<'a>(parts: impl IntoIterator<Item = (&'a Layout, isize, usize)>) -> Layout {
        let mut out = Layout {
            runs: Vec::new(),
            size: 0,
            lb: isize::MAX,
            ub: isize::MIN,
            true_lb: isize::MAX,
            true_ub: isize::MIN,
            align: 1,
        };
        for (old, at, n) in parts {
            if n == 0 {
                continue;
            }
            let ext = old.extent();
            for (off, len) in old.runs_of(n) {
                out.push(Run { off: at + off, len });
            }
            let (first, last) = (at, at + (n as isize - 1) * ext);
            out.lb = out.lb.min(first.min(last) + old.lb);
            out.ub = out.ub.max(first.max(last) + old.ub);
            if old.size > 0 {
                out.true_lb = out.true_lb.min(first.min(last) + old.true_lb);
                out.true_ub = out.true_ub.max(first.max(last) + old.true_ub);
            }
            out.size += n * old.size;
            out.align = out.align.max(old.align);
        }
        if out.lb > out.ub {
            (out.lb, out.ub) = (0, 0);
        }
        if out.true_lb > out.true_ub {
            (out.true_lb, out.true_ub) = (0, 0);
        }
        out
    }

    /// Appends a run, merged with the last where they touch.
    fn push(&mut self, r: Run) {
        if r.len == 0 {
            return;
        }
        match self.runs.last_mut() {
            Some(last) if last.off + last.len as isize == r.off => last.len += r.len,
            _ => self.runs.push(r),
        }
    }

    /// `count` elements of `old` one after another (`MPI_Type_contiguous`).
    pub fn contiguous(count: usize, old: &Layout) -> Layout {
        Layout::of_parts([(old, 0, count)])
    }

    /// `count` blocks of `blocklen` elements of `old`, `stride` bytes apart
    /// (`MPI_Type_create_hvector`; `MPI_Type_vector` is the stride in extents).
    pub fn hvector(count: usize, blocklen: usize, stride: isize, old: &Layout) -> Layout {
        Layout::of_parts((0..count).map(|i| (old, i as isize * stride, blocklen)))
    }

    /// Blocks of `old`, each (length in elements, displacement in bytes)
    /// (`MPI_Type_create_hindexed`; indexed and the block forms reduce to it).
    pub fn hindexed(blocks: &[(usize, isize)], old: &Layout) -> Layout {
        Layout::of_parts(blocks.iter().map(|&(n, at)| (old, at, n)))
    }

    /// Fields, each (length in elements, displacement in bytes, layout)
    /// (`MPI_Type_create_struct`). The extent is rounded up to the largest alignment of a
    /// field, as C lays out a struct.
    pub fn structure(fields: &[(usize, isize, &Layout)]) -> Layout {
        let mut out = Layout::of_parts(fields.iter().map(|&(n, at, old)| (old, at, n)));
        let align = out.align as isize;
        let ext = out.extent();
        if ext % align != 0 {
            out.ub += align - ext.rem_euclid(align);
        }
        out
    }

    /// A block of an n-dimensional array of `old`: the array's `sizes`, the block's `subsizes`
    /// from `starts`, in C order (the last dimension varies fastest) or Fortran order
    /// (`MPI_Type_create_subarray`). The extent is the whole array's. `None` if the block
    /// does not lie within the array.
    pub fn subarray(
        sizes: &[usize],
        subsizes: &[usize],
        starts: &[usize],
        fortran: bool,
        old: &Layout,
    ) -> Option<Layout> {
        let d = sizes.len();
        if subsizes.len() != d
            || starts.len() != d
            || (0..d).any(|i| subsizes[i] == 0 || starts[i] + subsizes[i] > sizes[i])
        {
            return None;
        }
        // Dimensions from the fastest varying to the slowest.
        let order: Vec<usize> = if fortran { (0..d).collect() } else { (0..d).rev().collect() };
        let ext = old.extent();
        let mut layout = old.clone();
        let mut stride = ext;
        let mut origin = 0isize;
        for (k, &dim) in order.iter().enumerate() {
            origin += starts[dim] as isize * stride;
            layout = if k == 0 {
                Layout::contiguous(subsizes[dim], &layout)
            } else {
                Layout::hvector(subsizes[dim], 1, stride, &layout)
            };
            stride *= sizes[dim] as isize;
        }
        let mut out = Layout::of_parts([(&layout, origin, 1)]);
        (out.lb, out.ub) = (0, stride);
        Some(out)
    }

    /// The part of an n-dimensional array of `old` (`gsizes` elements along each dimension,
    /// in C order, the last varying fastest, or Fortran order) that process `rank` of a grid
    /// of `psizes` processes holds, each dimension spread over the grid's as `dists` says
    /// (`MPI_Type_create_darray`, MPI-3.1 section 4.1.4). The processes are numbered in
    /// row-major order whatever the array's; the extent is the whole array's. An error tells
    /// which argument does not fit.
    pub fn darray(
        rank: usize,
        gsizes: &[usize],
        dists: &[Distribution],
        psizes: &[usize],
        fortran: bool,
        old: &Layout,
    ) -> Result<Layout, String> {
        let d = gsizes.len();
        if dists.len() != d || psizes.len() != d {
            return Err(format!("{} distributions and {} grid sizes for {d} dimensions", dists.len(), psizes.len()));
        }
        let procs = psizes.iter().try_fold(1usize, |a, &p| a.checked_mul(p)).unwrap_or(0);
        if rank >= procs {
            return Err(format!("rank {rank} of a grid of {procs} processes"));
        }
        // This process's coordinates in the grid, row-major.
        let mut coords = vec![0; d];
        let mut left = rank;
        for i in (0..d).rev() {
            coords[i] = left % psizes[i];
            left /= psizes[i];
        }
        let order: Vec<usize> = if fortran { (0..d).collect() } else { (0..d).rev().collect() };
        let mut layout = old.resized(0, old.extent());
        let mut stride = old.extent();
        for dim in order {
            let (g, p, c) = (gsizes[dim], psizes[dim], coords[dim]);
            // This process's runs of indices along the dimension: (first, length).
            let runs: Vec<(usize, usize)> = match dists[dim] {
                Distribution::None if p != 1 => {
                    return Err(format!("dimension {dim} is not distributed but spread over {p} processes"));
                }
                Distribution::None => vec![(0, g)],
                Distribution::Block(b) => {
                    let b = b.unwrap_or_else(|| g.div_ceil(p));
                    if b == 0 && g > 0 || b.saturating_mul(p) < g {
                        return Err(format!("blocks of {b} over {p} processes leave some of dimension {dim}'s {g}"));
                    }
                    let first = c * b;
                    vec![(first, b.min(g.saturating_sub(first)))]
                }
                Distribution::Cyclic(k) => {
                    let k = k.unwrap_or(1);
                    if k == 0 {
                        return Err(format!("cyclic blocks of 0 elements in dimension {dim}"));
                    }
                    (c * k..g).step_by(k * p).map(|first| (first, k.min(g - first))).collect()
                }
            };
            let blocks: Vec<(usize, isize)> =
                runs.into_iter().filter(|&(_, n)| n > 0).map(|(first, n)| (n, first as isize * stride)).collect();
            stride *= g as isize;
            layout = Layout::hindexed(&blocks, &layout).resized(0, stride);
        }
        Ok(layout)
    }

    /// This layout with MPI's bounds set to `lb` and `lb + extent` (`MPI_Type_create_resized`).
    pub fn resized(&self, lb: isize, extent: isize) -> Layout {
        Layout { lb, ub: lb + extent, ..self.clone() }
    }

    /// Copies the data of `count` elements at `base` into `out` (`count * size` bytes).
    ///
    /// # Safety
    /// Every run of the `count` elements at `base` must be readable.
    pub unsafe fn pack(&self, base: *const u8, count: usize, out: &mut [u8]) {
        assert_eq!(out.len(), count * self.size, "pack: the output holds count elements' data");
        let mut at = 0;
        for (off, len) in self.runs_of(count) {
            // SAFETY: the caller promises the run is readable; `out` has room (asserted).
            unsafe { crate::copy::copy_raw(base.offset(off), out.as_mut_ptr().add(at), len) };
            at += len;
        }
    }

    /// Copies `data` (at most `count * size` bytes, the start of the packed form of `count`
    /// elements) into the runs of the elements at `base`, as far as it goes.
    ///
    /// # Safety
    /// Every run of the `count` elements at `base` must be writable, and not overlap `data`.
    pub unsafe fn unpack(&self, data: &[u8], base: *mut u8, count: usize) {
        let mut at = 0;
        for (off, len) in self.runs_of(count) {
            let n = len.min(data.len() - at);
            // SAFETY: the caller promises the run is writable and apart from `data`; `n`
            // bytes of `data` remain from `at`.
            unsafe { crate::copy::copy_raw(data.as_ptr().add(at), base.offset(off), n) };
            at += n;
            if at == data.len() {
                break;
            }
        }
    }
}

/// How [`Layout::darray`] spreads a dimension over the processes of the grid's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// In one block of the given size (`MPI_DISTRIBUTE_BLOCK`; by default the dimension's
    /// size over the processes', rounded up).
    Block(Option<usize>),
    /// In blocks of the given size (by default 1) dealt in turn (`MPI_DISTRIBUTE_CYCLIC`).
    Cyclic(Option<usize>),
    /// Whole at every process (`MPI_DISTRIBUTE_NONE`).
    None,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int() -> Layout {
        Layout::basic(4, 4)
    }

    #[test]
    fn bounds_extents_and_runs_follow_mpi() {
        let v = Layout::hvector(3, 2, 5 * 4, &int());
        assert_eq!((v.size(), v.lb(), v.extent(), v.runs()), (24, 0, 48, 3));
        assert_eq!(v.contiguous_at(1), None);
        // A vector whose stride is its block merges into one run.
        let c = Layout::hvector(4, 2, 8, &int());
        assert_eq!((c.runs(), c.contiguous_at(3)), (1, Some(0)));
        // struct { char; double; }: padded to 16 as C lays it out.
        let s = Layout::structure(&[(1, 0, &Layout::basic(1, 1)), (1, 8, &Layout::basic(8, 8))]);
        assert_eq!((s.size(), s.extent(), s.true_extent(), s.runs()), (9, 16, 16, 2));
        // Resized: the same data, other bounds.
        let r = Layout::hindexed(&[(1, 8)], &int()).resized(0, 16);
        assert_eq!((r.lb(), r.extent(), r.true_lb(), r.true_extent()), (0, 16, 8, 4));
        assert_eq!((r.contiguous_at(1), r.contiguous_at(2)), (Some(8), None));
        // Negative displacements move the lower bound.
        let n = Layout::hindexed(&[(1, -8), (2, 4)], &int());
        assert_eq!((n.lb(), n.extent(), n.size()), (-8, 20, 12));
    }

    #[test]
    fn a_distributed_array_holds_the_grid_processes_part() {
        // A 4x6 array of ints over a 2x2 grid: rows in blocks, columns in cycles of 2.
        let a: Vec<i32> = (0..24).collect();
        let dists = [Distribution::Block(None), Distribution::Cyclic(Some(2))];
        let part = |rank, fortran| {
            let l = Layout::darray(rank, &[4, 6], &dists, &[2, 2], fortran, &int()).unwrap();
            let mut out = vec![0u8; l.size()];
            // SAFETY: the runs lie within `a` (the part is within the 4x6 array).
            unsafe { l.pack(a.as_ptr().cast(), 1, &mut out) };
            (l.extent(), bytemuck::pod_collect_to_vec::<u8, i32>(&out))
        };
        // Rank 1 is at (0, 1): rows 0-1, columns 2-3; rank 2 at (1, 0): rows 2-3, columns
        // 0-1 and 4-5.
        assert_eq!(part(1, false), (96, vec![2, 3, 8, 9]));
        assert_eq!(part(2, false), (96, vec![12, 13, 16, 17, 18, 19, 22, 23]));
        // In Fortran order the first index varies fastest: a 4x6 array's element (i, j) is
        // at i + 4j; rank 1's rows 0-1 of columns 2-3.
        assert_eq!(part(1, true), (96, vec![8, 9, 12, 13]));
        // Blocks too small to cover a dimension, a spread undistributed dimension, a rank
        // the grid lacks.
        let fails = |dists: &[Distribution], rank| Layout::darray(rank, &[4, 6], dists, &[2, 2], false, &int());
        assert!(fails(&[Distribution::Block(Some(1)), Distribution::None], 0).is_err());
        assert!(fails(&[Distribution::Block(None), Distribution::None], 0).is_err());
        assert!(fails(&dists, 4).is_err());
    }

    #[test]
    fn a_subarray_packs_its_block_and_unpacks_back() {
        // The 2x3 block at (1, 1) of a 4x5 array of ints, in C order.
        let a: Vec<i32> = (0..20).collect();
        let l = Layout::subarray(&[4, 5], &[2, 3], &[1, 1], false, &int()).unwrap();
        assert_eq!((l.size(), l.extent(), l.runs()), (24, 80, 2));
        let mut out = vec![0u8; 24];
        // SAFETY: the runs lie within `a` (the subarray is within the 4x5 array).
        unsafe { l.pack(a.as_ptr().cast(), 1, &mut out) };
        let got: Vec<i32> = out.chunks_exact(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, [6, 7, 8, 11, 12, 13]);
        // Fortran order: the first index varies fastest.
        let f = Layout::subarray(&[4, 5], &[2, 3], &[1, 1], true, &int()).unwrap();
        // SAFETY: as above.
        unsafe { f.pack(a.as_ptr().cast(), 1, &mut out) };
        let got: Vec<i32> = out.chunks_exact(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, [5, 6, 9, 10, 13, 14]);
        let mut b = vec![-1i32; 20];
        // A short message fills the first runs only.
        // SAFETY: as above, into `b`.
        unsafe { l.unpack(&out[..16], b.as_mut_ptr().cast(), 1) };
        assert_eq!(&b[5..14], &[-1, 5, 6, 9, -1, -1, 10, -1, -1]);
        assert!(Layout::subarray(&[4], &[3], &[2], false, &int()).is_none());
    }
}
