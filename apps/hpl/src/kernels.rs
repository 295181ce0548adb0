//! The local kernels, behind one seam: DGEMM (the trailing update) by the pure-Rust `gemm`
//! crate (run-time dispatch to AVX2/AVX-512/NEON micro-kernels, one thread), and the small
//! unit-lower triangular solve (U's block row) by hand. Column-major throughout.

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
    // The extents gemm will touch, checked here so the call below stays in bounds.
    assert!(lda >= m && ldb >= k && ldc >= m, "leading dimensions");
    assert!(a.len() >= (k - 1) * lda + m, "A is {} long, needs {}", a.len(), (k - 1) * lda + m);
    assert!(b.len() >= (n - 1) * ldb + k, "B is {} long, needs {}", b.len(), (n - 1) * ldb + k);
    assert!(c.len() >= (n - 1) * ldc + m, "C is {} long, needs {}", c.len(), (n - 1) * ldc + m);
    // SAFETY: gemm reads A[i + l*lda] (i < m, l < k), B[l + j*ldb] (l < k, j < n) and
    // reads and writes C[i + j*ldc] (i < m, j < n): all inside the slices (checked above).
    // C is borrowed mutably and does not alias A or B (distinct borrows).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            ldc as isize,
            1,
            true,
            a.as_ptr(),
            lda as isize,
            1,
            b.as_ptr(),
            ldb as isize,
            1,
            1.0,
            -1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// B[jb x n] := L^-1 B with L unit lower triangular (jb x jb, leading dimension `ldl`):
/// recursive halves, so that all but the small diagonal solves are DGEMM.
pub(crate) fn trsm_lower_unit(jb: usize, n: usize, l: &[f64], ldl: usize, b: &mut [f64], ldb: usize) {
    if jb <= 16 {
        for c in 0..n {
            let col = &mut b[c * ldb..c * ldb + jb];
            for i in 0..jb {
                let x = col[i];
                if x != 0.0 {
                    let li = &l[i * ldl..i * ldl + jb];
                    for r in i + 1..jb {
                        col[r] -= li[r] * x;
                    }
                }
            }
        }
        return;
    }
    let h = jb / 2;
    trsm_lower_unit(h, n, l, ldl, b, ldb);
    // B2 -= L21 B1: rows h..jb of B, from rows 0..h (B1 copied out: the two overlap in `b`).
    let b1: Vec<f64> = (0..n).flat_map(|c| b[c * ldb..c * ldb + h].to_vec()).collect();
    gemm_sub(jb - h, n, h, &l[h..], ldl, &b1, h, &mut b[h..], ldb);
    trsm_lower_unit(jb - h, n, &l[h + h * ldl..], ldl, &mut b[h..], ldb);
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
        let jb = 37;
        let l: Vec<f64> =
            (0..jb * jb).map(|i| if i % (jb + 1) == 0 { 1.0 } else { 0.1 * (i as f64 * 0.3).sin() }).collect();
        let x: Vec<f64> = (0..jb * 2).map(|i| i as f64 - 2.5).collect();
        // b = L x (unit diagonal, lower part of l)
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
