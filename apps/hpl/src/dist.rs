//! The 2D block-cyclic distribution (ScaLAPACK's and HPL's): global index g in blocks of
//! `nb` dealt round-robin over `p` processes, starting at process 0.

/// How many of `n` indices process `r` of `p` holds (`numroc`).
pub(crate) fn count(n: usize, nb: usize, r: usize, p: usize) -> usize {
    let blocks = n / nb;
    let mut c = (blocks / p) * nb;
    let extra = blocks % p;
    if r < extra {
        c += nb;
    } else if r == extra {
        c += n % nb;
    }
    c
}

/// The process that holds global index `g`.
pub(crate) fn owner(g: usize, nb: usize, p: usize) -> usize {
    (g / nb) % p
}

/// The local index of global index `g` on its owner.
pub(crate) fn local(g: usize, nb: usize, p: usize) -> usize {
    (g / (nb * p)) * nb + g % nb
}

/// The global index of local index `l` on process `r`.
pub(crate) fn global(l: usize, nb: usize, r: usize, p: usize) -> usize {
    ((l / nb) * p + r) * nb + l % nb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_round_trip() {
        for (n, nb, p) in [(10, 3, 2), (1, 4, 3), (17, 4, 3), (64, 8, 1), (5, 8, 2)] {
            let mut seen = vec![0; p];
            for g in 0..n {
                let r = owner(g, nb, p);
                let l = local(g, nb, p);
                assert_eq!(global(l, nb, r, p), g);
                assert_eq!(l, seen[r], "locals are dense, in order");
                seen[r] += 1;
                // Local indices below g on r: the count of the first g indices.
                assert_eq!(count(g, nb, r, p), l);
            }
            for (r, &s) in seen.iter().enumerate() {
                assert_eq!(count(n, nb, r, p), s, "n={n} nb={nb} p={p} r={r}");
            }
        }
    }
}
