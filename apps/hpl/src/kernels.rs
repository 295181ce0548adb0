//! The local kernels, behind one seam, column-major throughout. Two back-ends:
//! - pure Rust (the default, everywhere): DGEMM by the `matrixmultiply` crate (run-time
//!   dispatch to its AVX-512/AVX2/NEON micro-kernels; measured here well ahead of the `gemm`
//!   crate, of faer and of Debian's OpenBLAS 0.3.21 on the trailing update's shapes), the
//!   triangular solve as recursive halves over it;
//! - BLAS (cargo feature `openblas` on Linux, `accelerate` on macOS): `cblas_dgemm` and
//!   `cblas_dtrsm` of that library.
//!
//! The panel's level-1 loops (pivot search, scaling, rank-1 updates) are plain Rust in both,
//! compiled for the CPU's vector unit at run time through `pulp` ([`vectorized`]).

#[cfg(all(feature = "openblas", feature = "accelerate"))]
compile_error!("mpr-hpl: choose one BLAS back-end, `openblas` or `accelerate`");
#[cfg(all(feature = "accelerate", not(target_os = "macos")))]
compile_error!("mpr-hpl: the `accelerate` back-end is Apple's Accelerate framework (macOS only)");

/// The back-end's name, for the report.
pub(crate) const BACKEND: &str = if cfg!(feature = "openblas") {
    "OpenBLAS"
} else if cfg!(feature = "accelerate") {
    "Accelerate"
} else {
    "pure Rust (matrixmultiply)"
};

/// The most threads a rank's DGEMM may use (matrixmultiply's limit).
pub(crate) const MAX_THREADS: usize = 4;

/// Lets this rank's DGEMM use `t` threads. Call it before any other thread exists (it
/// sets the environment matrixmultiply reads once).
pub(crate) fn set_threads(t: usize) {
    let t = t.clamp(1, MAX_THREADS);
    #[cfg(not(any(feature = "openblas", feature = "accelerate")))]
    std::env::set_var("MATMUL_NUM_THREADS", t.to_string());
    #[cfg(feature = "openblas")]
    // SAFETY: OpenBLAS's setter takes any count; it only sizes the library's own pool.
    unsafe {
        blas::openblas_set_num_threads(t as std::ffi::c_int)
    };
    #[cfg(feature = "accelerate")]
    std::env::set_var("VECLIB_MAXIMUM_THREADS", t.to_string());
}

/// Runs `f` compiled for the widest vector unit this CPU has (AVX-512, AVX2+FMA, NEON ...):
/// loops inlined into `f` are vectorized for it. Results do not depend on the choice (no
/// contraction into FMA, no reassociation).
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    pulp::Arch::new().dispatch(f)
}

/// Index of the first entry of largest magnitude (None if empty or all NaN).
#[inline(always)]
pub(crate) fn iamax(x: &[f64]) -> Option<usize> {
    const W: usize = 8;
    let mut lanes = [0.0f64; W];
    let mut chunks = x.chunks_exact(W);
    for c in &mut chunks {
        for i in 0..W {
            let v = c[i].abs();
            lanes[i] = if v > lanes[i] { v } else { lanes[i] };
        }
    }
    let mut m = lanes.iter().fold(0.0f64, |a, &b| if b > a { b } else { a });
    for &v in chunks.remainder() {
        m = if v.abs() > m { v.abs() } else { m };
    }
    x.iter().position(|v| v.abs() == m)
}

/// y -= a x.
#[inline(always)]
pub(crate) fn axpy_sub(y: &mut [f64], a: f64, x: &[f64]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y -= a * *x;
    }
}

/// x *= a.
#[inline(always)]
pub(crate) fn scale(x: &mut [f64], a: f64) {
    for v in x {
        *v *= a;
    }
}

#[cfg(any(feature = "openblas", feature = "accelerate"))]
mod blas {
    use std::ffi::c_int;

    // CBLAS's enumerations (the same values in OpenBLAS and Accelerate).
    pub(super) const COL_MAJOR: c_int = 102;
    pub(super) const NO_TRANS: c_int = 111;
    pub(super) const LOWER: c_int = 122;
    pub(super) const UNIT: c_int = 132;
    pub(super) const LEFT: c_int = 141;

    #[cfg_attr(feature = "openblas", link(name = "openblas"))]
    #[cfg_attr(all(feature = "accelerate", target_os = "macos"), link(name = "Accelerate", kind = "framework"))]
    extern "C" {
        pub(super) fn cblas_dgemm(
            order: c_int,
            transa: c_int,
            transb: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            alpha: f64,
            a: *const f64,
            lda: c_int,
            b: *const f64,
            ldb: c_int,
            beta: f64,
            c: *mut f64,
            ldc: c_int,
        );
        pub(super) fn cblas_dtrsm(
            order: c_int,
            side: c_int,
            uplo: c_int,
            transa: c_int,
            diag: c_int,
            m: c_int,
            n: c_int,
            alpha: f64,
            a: *const f64,
            lda: c_int,
            b: *mut f64,
            ldb: c_int,
        );
    }

    #[cfg(feature = "openblas")]
    #[link(name = "openblas")]
    extern "C" {
        pub(super) fn openblas_set_num_threads(n: c_int);
    }

    /// A dimension as BLAS's int.
    pub(super) fn int(v: usize) -> c_int {
        c_int::try_from(v).expect("a dimension beyond BLAS's 32-bit int")
    }
}

/// C[m x n] -= A[m x k] B[k x n], each with its leading dimension.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_sub(
    m: usize,
    n: usize,
    k: usize,
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    c: &mut [f64],
    ldc: usize,
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    // The extents the kernel will touch, checked here so the call below stays in bounds.
    assert!(lda >= m && ldb >= k && ldc >= m, "leading dimensions");
    assert!(a.len() >= (k - 1) * lda + m, "A is {} long, needs {}", a.len(), (k - 1) * lda + m);
    assert!(b.len() >= (n - 1) * ldb + k, "B is {} long, needs {}", b.len(), (n - 1) * ldb + k);
    assert!(c.len() >= (n - 1) * ldc + m, "C is {} long, needs {}", c.len(), (n - 1) * ldc + m);
    #[cfg(any(feature = "openblas", feature = "accelerate"))]
    {
        use blas::*;
        // SAFETY: DGEMM reads A[i + l*lda] (i < m, l < k), B[l + j*ldb] (l < k, j < n) and
        // reads and writes C[i + j*ldc] (i < m, j < n): all inside the slices (checked
        // above). C is borrowed mutably and does not alias A or B (distinct borrows).
        unsafe {
            cblas_dgemm(
                COL_MAJOR,
                NO_TRANS,
                NO_TRANS,
                int(m),
                int(n),
                int(k),
                -1.0,
                a.as_ptr(),
                int(lda),
                b.as_ptr(),
                int(ldb),
                1.0,
                c.as_mut_ptr(),
                int(ldc),
            )
        }
    }
    #[cfg(not(any(feature = "openblas", feature = "accelerate")))]
    // SAFETY: as above: matrixmultiply reads A (row stride 1, column stride lda) and B
    // (1, ldb) and writes C (1, ldc) inside the checked extents, and C does not alias A or B.
    unsafe {
        matrixmultiply::dgemm(
            m,
            k,
            n,
            -1.0,
            a.as_ptr(),
            1,
            lda as isize,
            b.as_ptr(),
            1,
            ldb as isize,
            1.0,
            c.as_mut_ptr(),
            1,
            ldc as isize,
        )
    }
}

/// B[jb x n] := L^-1 B with L unit lower triangular (jb x jb, leading dimension `ldl`).
pub(crate) fn trsm_lower_unit(jb: usize, n: usize, l: &[f64], ldl: usize, b: &mut [f64], ldb: usize) {
    if jb == 0 || n == 0 {
        return;
    }
    assert!(ldl >= jb && ldb >= jb, "leading dimensions");
    assert!(l.len() >= (jb - 1) * ldl + jb && b.len() >= (n - 1) * ldb + jb, "extents");
    #[cfg(any(feature = "openblas", feature = "accelerate"))]
    {
        use blas::*;
        // SAFETY: DTRSM reads L[i + j*ldl] (i, j < jb) and reads and writes B[i + c*ldb]
        // (i < jb, c < n), inside the slices (checked above); B does not alias L.
        unsafe {
            cblas_dtrsm(
                COL_MAJOR,
                LEFT,
                LOWER,
                NO_TRANS,
                UNIT,
                int(jb),
                int(n),
                1.0,
                l.as_ptr(),
                int(ldl),
                b.as_mut_ptr(),
                int(ldb),
            )
        }
    }
    #[cfg(not(any(feature = "openblas", feature = "accelerate")))]
    trsm_recursive(jb, n, l, ldl, b, ldb);
}

/// The pure-Rust triangular solve: recursive halves, so that all but the small diagonal
/// solves are DGEMM.
#[cfg_attr(any(feature = "openblas", feature = "accelerate"), allow(dead_code))]
fn trsm_recursive(jb: usize, n: usize, l: &[f64], ldl: usize, b: &mut [f64], ldb: usize) {
    if jb <= 16 {
        vectorized(|| {
            for c in 0..n {
                let col = &mut b[c * ldb..c * ldb + jb];
                for i in 0..jb {
                    let x = col[i];
                    if x != 0.0 {
                        axpy_sub(&mut col[i + 1..], x, &l[i * ldl + i + 1..i * ldl + jb]);
                    }
                }
            }
        });
        return;
    }
    let h = jb / 2;
    trsm_recursive(h, n, l, ldl, b, ldb);
    // B2 -= L21 B1: rows h..jb of B, from rows 0..h (B1 copied out: the two overlap in `b`).
    let b1: Vec<f64> = (0..n).flat_map(|c| b[c * ldb..c * ldb + h].to_vec()).collect();
    gemm_sub(jb - h, n, h, &l[h..], ldl, &b1, h, &mut b[h..], ldb);
    trsm_recursive(jb - h, n, &l[h + h * ldl..], ldl, &mut b[h..], ldb);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_sub_matches_the_definition() {
        let (m, n, k, lda, ldb, ldc) = (5, 3, 4, 7, 6, 5);
        let a: Vec<f64> = (0..lda * k).map(|i| (i as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = (0..ldb * n).map(|i| (i as f64 * 0.11).cos()).collect();
        let c0: Vec<f64> = (0..ldc * n).map(|i| i as f64).collect();
        let mut c = c0.clone();
        gemm_sub(m, n, k, &a, lda, &b, ldb, &mut c, ldc);
        for j in 0..n {
            for i in 0..m {
                let want = c0[i + j * ldc] - (0..k).map(|l| a[i + l * lda] * b[l + j * ldb]).sum::<f64>();
                assert!((c[i + j * ldc] - want).abs() < 1e-12, "C({i},{j})");
            }
        }
    }

    #[test]
    fn trsm_solves() {
        for jb in [5, 37] {
            let l: Vec<f64> =
                (0..jb * jb).map(|i| if i % (jb + 1) == 0 { 1.0 } else { 0.1 * (i as f64 * 0.3).sin() }).collect();
            let x: Vec<f64> = (0..jb * 2).map(|i| i as f64 - 2.5).collect();
            // b = L x (unit diagonal, lower part of l); the upper part of l is not read.
            let mut b = vec![0.0; jb * 2];
            for c in 0..2 {
                for r in 0..jb {
                    b[r + c * jb] = x[r + c * jb] + (0..r).map(|i| l[r + i * jb] * x[i + c * jb]).sum::<f64>();
                }
            }
            trsm_lower_unit(jb, 2, &l, jb, &mut b, jb);
            for (g, w) in b.iter().zip(&x) {
                assert!((g - w).abs() < 1e-10 * w.abs().max(1.0), "{g} vs {w}");
            }
        }
    }

    #[test]
    fn iamax_finds_the_first_largest_magnitude() {
        assert_eq!(iamax(&[]), None);
        assert_eq!(iamax(&[0.0, 0.0]), Some(0));
        let mut x: Vec<f64> = (0..37).map(|i| (i as f64 * 0.7).sin()).collect();
        x[29] = -3.0;
        x[33] = 3.0;
        assert_eq!(vectorized(|| iamax(&x)), Some(29));
        x[2] = f64::NAN;
        assert_eq!(iamax(&x), Some(29), "a NaN is passed over");
        x[36] = 4.0;
        assert_eq!(iamax(&x), Some(36), "in the remainder");
    }
}
