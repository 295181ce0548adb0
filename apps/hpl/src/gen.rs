//! HPL's matrix: its 64-bit linear congruential generator (HPL 2.x `HPL_rand`,
//! `HPL_pdmatgen`), X(n+1) = a X(n) + c mod 2^64 with a = 6364136223846793005, c = 1,
//! X(0) = 100 (HPL's seed), and A(i,j) = 0.5 - X(1+i+j*N) / 2^64 over the N x (N+1)
//! augmented matrix [A|b] in column-major order (b is column N). Each rank jumps straight
//! to the entries it owns, so the matrix does not depend on NB, P or Q.

/// HPL's multiplier (`HPL_MULT1:HPL_MULT0`).
pub(crate) const MULT: u64 = 6_364_136_223_846_793_005;
/// HPL's increment (`HPL_IADD1:HPL_IADD0`).
pub(crate) const ADD: u64 = 1;
/// HPL's seed for the matrix (`HPL_ISEED`).
pub(crate) const SEED: u64 = 100;

/// The affine map x -> a x + c applied `k` times, as (a^k, c (a^(k-1) + ... + 1)).
fn jump(k: u64) -> (u64, u64) {
    let (mut ra, mut rc) = (1u64, 0u64);
    let (mut a, mut c) = (MULT, ADD);
    let mut k = k;
    while k > 0 {
        if k & 1 == 1 {
            // r := step ∘ r
            ra = ra.wrapping_mul(a);
            rc = rc.wrapping_mul(a).wrapping_add(c);
        }
        // step := step ∘ step
        c = c.wrapping_mul(a).wrapping_add(c);
        a = a.wrapping_mul(a);
        k >>= 1;
    }
    (ra, rc)
}

/// X(n).
pub(crate) fn state(n: u64) -> u64 {
    let (a, c) = jump(n);
    a.wrapping_mul(SEED).wrapping_add(c)
}

/// The matrix entry a state stands for: 0.5 - X / 2^64, in (-0.5, 0.5].
pub(crate) fn value(x: u64) -> f64 {
    0.5 - (x as f64) / 18_446_744_073_709_551_616.0
}

/// Writes the entries of global column `j` (of an `n`-row matrix) for global rows
/// `rows.start..rows.end` into `out`.
pub(crate) fn column_run(n: usize, j: usize, rows: std::ops::Range<usize>, out: &mut [f64]) {
    let mut x = state(1 + rows.start as u64 + j as u64 * n as u64);
    for o in out.iter_mut().take(rows.len()) {
        *o = value(x);
        x = x.wrapping_mul(MULT).wrapping_add(ADD);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_agree_with_steps() {
        let mut x = SEED;
        for n in 0..1000u64 {
            assert_eq!(state(n), x, "X({n})");
            x = x.wrapping_mul(MULT).wrapping_add(ADD);
        }
        // A far jump agrees with composing two shorter ones.
        let (a1, c1) = jump(123_456_789);
        let (a2, c2) = jump(987_654_321);
        let (a, c) = jump(123_456_789 + 987_654_321);
        assert_eq!((a2.wrapping_mul(a1), c1.wrapping_mul(a2).wrapping_add(c2)), (a, c));
    }
}
