//! The solve: [A|b] distributed 2D block-cyclic over a P x Q grid, right-looking blocked LU
//! with partial row pivoting (HPL_pdgesv's structure), then the upper triangular solve, then
//! HPL's residual check on a regenerated [A|b].
//!
//! Per panel of NB columns: the process column that holds it factors it column by column
//! (the pivot found by a MAXLOC all-reduce down the process column, the pivot row swapped
//! into place and broadcast down the column); the panel and its pivots go along each process
//! row by an increasing ring; every process column applies the row swaps to its trailing
//! columns; the process row that holds the panel's rows solves for U's block row and sends
//! it down each process column by an increasing ring; everyone updates its trailing part.
//! b rides along as column N, so the factorization leaves y = L^-1 P b there.

use mpr::{Comm, Error, Loc, Max, MaxLoc, Sum};

use crate::dist::{count, global, owner};
use crate::gen;

/// The P x Q process grid and its row and column communicators.
#[derive(Debug)]
pub(crate) struct Grid {
    pub(crate) world: Comm,
    /// The ranks of this process row (size Q, rank = my column).
    pub(crate) row: Comm,
    /// The ranks of this process column (size P, rank = my row).
    pub(crate) col: Comm,
    pub(crate) p: usize,
    pub(crate) q: usize,
    pub(crate) myrow: usize,
    pub(crate) mycol: usize,
    pub(crate) row_major: bool,
}

impl Grid {
    /// The grid of the first P*Q ranks of `world` (row-major: rank = row*Q + col, or
    /// column-major); `None` on the ranks left over.
    pub(crate) fn new(world: &Comm, p: usize, q: usize, row_major: bool) -> Result<Option<Grid>, Error> {
        let r = world.rank();
        let inside = r < p * q;
        let color = inside.then_some(0);
        let Some(world) = world.split(color, r as i32)? else { return Ok(None) };
        let (myrow, mycol) = if row_major { (r / q, r % q) } else { (r % p, r / p) };
        let row = world.split(Some(myrow as u32), mycol as i32)?.expect("a row");
        let col = world.split(Some(mycol as u32), myrow as i32)?.expect("a column");
        Ok(Some(Grid { world, row, col, p, q, myrow, mycol, row_major }))
    }
}

/// This rank's part of [A|b]: `mp` local rows by `nq` local columns, column-major.
#[derive(Debug)]
pub(crate) struct Local {
    pub(crate) n: usize,
    pub(crate) nb: usize,
    pub(crate) mp: usize,
    pub(crate) nq: usize,
    pub(crate) ld: usize,
    pub(crate) a: Vec<f64>,
}

impl Local {
    /// Generates this rank's part of HPL's [A|b] for order `n`.
    pub(crate) fn generate(g: &Grid, n: usize, nb: usize) -> Local {
        let mp = count(n, nb, g.myrow, g.p);
        let nq = count(n + 1, nb, g.mycol, g.q);
        let ld = mp.max(1);
        let mut a = vec![0.0; ld * nq];
        for lc in 0..nq {
            let j = global(lc, nb, g.mycol, g.q);
            // Runs of consecutive global rows: one local block each.
            let mut l = 0;
            while l < mp {
                let len = (nb - l % nb).min(mp - l);
                let i = global(l, nb, g.myrow, g.p);
                gen::column_run(n, j, i..i + len, &mut a[l + lc * ld..l + lc * ld + len]);
                l += len;
            }
        }
        Local { n, nb, mp, nq, ld, a }
    }

    fn at(&mut self, l: usize, c: usize) -> &mut f64 {
        &mut self.a[l + c * self.ld]
    }
}

/// How a panel is factored (HPL.dat's NBMIN and NDIV, with RFACT = PFACT = right).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PanelFact {
    /// Columns at or below which a piece is factored column by column.
    pub(crate) nbmin: usize,
    /// Pieces a wider piece is cut into.
    pub(crate) ndiv: usize,
    /// HPL's BCAST: the topology of the panel broadcast along process rows (0 to 5).
    pub(crate) bcast: usize,
    /// Lookahead depth (0 or 1).
    pub(crate) depth: usize,
    /// HPL's PFACT and RFACT: LEFT, CROUT or RIGHT.
    pub(crate) pfact: usize,
    pub(crate) rfact: usize,
    /// HPL's SWAP: how rows are exchanged across process rows: 0 binary exchange, 1 long
    /// (ring), 2 mix (binary exchange up to `swap_threshold` columns, long above).
    pub(crate) swap: usize,
    pub(crate) swap_threshold: usize,
}

/// The panel of global columns k0..k0+jb, held at local columns lc0.. by its process column.
struct Panel {
    k0: usize,
    jb: usize,
    lc0: usize,
}

impl Panel {
    fn lc(&self, j: usize) -> usize {
        self.lc0 + (j - self.k0)
    }

    /// Factors the panel's columns j0..j0+w, recursively: a piece wider than NBMIN is cut
    /// into NDIV pieces factored in turn, in HPL's RFACT variant:
    /// - right-looking: each piece, once factored, updates all the pieces to its right;
    /// - left-looking: each piece is first updated by all the pieces to its left;
    /// - Crout: each piece is first updated below its top by the pieces to its left (their
    ///   U rows are final), and once factored computes its own U rows across the pieces to
    ///   its right.
    ///
    /// On entry the columns hold every update from the panel's columns left of j0 (and U
    /// above j0); on exit they are factored. Pivots go in `piv` (indexed from k0).
    fn factor(
        &self,
        g: &Grid,
        m: &mut Local,
        j0: usize,
        w: usize,
        pf: PanelFact,
        piv: &mut [f64],
    ) -> Result<(), Error> {
        if w <= pf.nbmin.max(1) {
            return self.columns(g, m, j0, w, pf.pfact, piv);
        }
        let step = w.div_ceil(pf.ndiv.max(2));
        let end = j0 + w;
        let mut j = j0;
        while j < end {
            let wj = step.min(end - j);
            if j > j0 {
                match pf.rfact {
                    LEFT => self.update(g, m, j0, j - j0, j, wj, true)?,
                    CROUT => self.update(g, m, j0, j - j0, j, wj, false)?,
                    _ => {}
                }
            }
            self.factor(g, m, j, wj, pf, piv)?;
            if j + wj < end {
                match pf.rfact {
                    CROUT => self.crout_rows(g, m, j0, j, wj, j + wj, end - (j + wj)),
                    LEFT => {}
                    _ => self.update(g, m, j, wj, j + wj, end - (j + wj), true)?,
                }
            }
            j += wj;
        }
        Ok(())
    }

    /// Updates panel columns c0..c0+w2 below row j+w1 with the factored columns j..j+w1:
    /// their rows j..j+w1 (solved by L11 first if `solve`, else final already) are U, sent
    /// down the process column from the process row that holds them; the rows below by DGEMM.
    #[allow(clippy::too_many_arguments)]
    fn update(
        &self,
        g: &Grid,
        m: &mut Local,
        j: usize,
        w1: usize,
        c0: usize,
        w2: usize,
        solve: bool,
    ) -> Result<(), Error> {
        let (nb, ld) = (m.nb, m.ld);
        let oj = owner(j, nb, g.p);
        let (lcj, lcc) = (self.lc(j), self.lc(c0));
        let mut u = vec![0.0; w1 * w2];
        if oj == g.myrow {
            let lj = crate::dist::local(j, nb, g.p);
            let (left, right) = m.a.split_at_mut(lcc * ld);
            if solve {
                crate::kernels::trsm_lower_unit(w1, w2, &left[lj + lcj * ld..], ld, &mut right[lj..], ld);
            }
            for k in 0..w2 {
                u[k * w1..(k + 1) * w1].copy_from_slice(&right[lj + k * ld..lj + w1 + k * ld]);
            }
        }
        g.col.bcast(&mut u, oj)?;
        let rs = count(j + w1, nb, g.myrow, g.p);
        if rs < m.mp {
            let (left, right) = m.a.split_at_mut(lcc * ld);
            crate::kernels::gemm_sub(m.mp - rs, w2, w1, &left[rs + lcj * ld..], ld, &u, w1, &mut right[rs..], ld);
        }
        Ok(())
    }

    /// Crout's U rows: rows j..j+wj of columns c0..c0+w2 less L(j.., j0..j) U(j0..j, c0..),
    /// then solved by the piece's L11. All on the process row holding the panel's diagonal
    /// block (rows j0..j+wj lie in it).
    #[allow(clippy::too_many_arguments)]
    fn crout_rows(&self, g: &Grid, m: &mut Local, j0: usize, j: usize, wj: usize, c0: usize, w2: usize) {
        let (nb, ld) = (m.nb, m.ld);
        if owner(j, nb, g.p) != g.myrow {
            return;
        }
        let (l0, lj, lcc) = (crate::dist::local(j0, nb, g.p), crate::dist::local(j, nb, g.p), self.lc(c0));
        // U(j0..j, c0..) copied out: it shares its columns with the rows it updates.
        let k = j - j0;
        let u: Vec<f64> = (0..w2).flat_map(|c| m.a[l0 + (lcc + c) * ld..l0 + k + (lcc + c) * ld].to_vec()).collect();
        let (left, right) = m.a.split_at_mut(lcc * ld);
        crate::kernels::gemm_sub(wj, w2, k, &left[lj + self.lc(j0) * ld..], ld, &u, k, &mut right[lj..], ld);
        crate::kernels::trsm_lower_unit(wj, w2, &left[lj + self.lc(j) * ld..], ld, &mut right[lj..], ld);
    }

    /// Factors columns j0..j0+w one by one, in HPL's PFACT variant: per column the pivot by
    /// a MAXLOC down the process column, its row swapped in across the whole panel, the
    /// column scaled by it; right-looking, the pivot row goes down the column and updates
    /// the columns to its right (up to j0+w); left-looking and Crout, the column is first
    /// updated by those to its left (left-looking solving its U part first, Crout computing
    /// the pivot row's U part across the columns to its right once pivoted).
    fn columns(
        &self,
        g: &Grid,
        m: &mut Local,
        j0: usize,
        w: usize,
        pfact: usize,
        piv: &mut [f64],
    ) -> Result<(), Error> {
        crate::kernels::vectorized(|| self.columns_in(g, m, j0, w, pfact, piv))
    }

    #[inline(always)]
    fn columns_in(
        &self,
        g: &Grid,
        m: &mut Local,
        j0: usize,
        w: usize,
        pfact: usize,
        piv: &mut [f64],
    ) -> Result<(), Error> {
        let (nb, ld, mp) = (m.nb, m.ld, m.mp);
        let top = owner(j0, nb, g.p);
        // Rows j0..j0+w lie in one block, on process row `top`, from local row `l0`.
        let l0 = crate::dist::local(j0, nb, g.p);
        let end = j0 + w;
        for j in j0..end {
            let lc = self.lc(j);
            let lrj = count(j, nb, g.myrow, g.p);
            if pfact != RIGHT && j > j0 {
                // Column j less L(j.., j0..j) U(j0..j, j), U sent down from `top`.
                let k = j - j0;
                let mut uj = vec![0.0; k];
                if g.myrow == top {
                    let (left, right) = m.a.split_at_mut(lc * ld);
                    let col = &mut right[l0..l0 + k];
                    if pfact == LEFT {
                        // Solve for U(j0..j, j) by the unit lower L of j0..j.
                        for i in 0..k {
                            let x = col[i];
                            if x != 0.0 {
                                let off = self.lc(j0 + i) * ld;
                                crate::kernels::axpy_sub(&mut col[i + 1..], x, &left[l0 + i + 1 + off..l0 + k + off]);
                            }
                        }
                    }
                    uj.copy_from_slice(col);
                }
                g.col.bcast(&mut uj, top)?;
                let (left, right) = m.a.split_at_mut(lc * ld);
                let cj = &mut right[lrj..mp];
                for (i, &u) in uj.iter().enumerate() {
                    if u != 0.0 {
                        let off = self.lc(j0 + i) * ld;
                        crate::kernels::axpy_sub(cj, u, &left[lrj + off..mp + off]);
                    }
                }
            }
            let col = &m.a[lrj + lc * ld..mp + lc * ld];
            let best = match crate::kernels::iamax(col) {
                Some(i) => Loc { value: col[i].abs(), index: global(lrj + i, nb, g.myrow, g.p) as f64 },
                None => Loc { value: -1.0, index: f64::MAX },
            };
            let mut found = [best];
            g.col.allreduce_in_place(&mut found, MaxLoc)?;
            let p = found[0].index as usize;
            piv[j - self.k0] = p as f64;
            swap_rows(g, m, j, p, self.lc0..self.lc0 + self.jb)?;
            // The pivot row, from this column to the piece's end (right-looking) or only its
            // pivot, down the process column.
            let oj = owner(j, nb, g.p);
            let mut prow = vec![0.0; if pfact == RIGHT { end - j } else { 1 }];
            if oj == g.myrow {
                let lj = crate::dist::local(j, nb, g.p);
                for (c, v) in prow.iter_mut().enumerate() {
                    *v = m.a[lj + (lc + c) * ld];
                }
            }
            g.col.bcast(&mut prow, oj)?;
            let below = count(j + 1, nb, g.myrow, g.p);
            let pivot = prow[0];
            if pivot != 0.0 {
                crate::kernels::scale(&mut m.a[below + lc * ld..mp + lc * ld], 1.0 / pivot);
            }
            if pfact == RIGHT {
                let (left, right) = m.a.split_at_mut((lc + 1) * ld);
                let lcol = &left[below + lc * ld..mp + lc * ld];
                for (c, &u) in prow.iter().enumerate().skip(1) {
                    if u != 0.0 {
                        let off = (c - 1) * ld;
                        crate::kernels::axpy_sub(&mut right[below + off..mp + off], u, lcol);
                    }
                }
            } else if pfact == CROUT && g.myrow == top {
                // Row j of U across the columns to its right: less L(j, j0..j) U(j0..j, c).
                let lj = l0 + (j - j0);
                for c in j + 1..end {
                    let lcc = self.lc(c);
                    let mut v = m.a[lj + lcc * ld];
                    for i in j0..j {
                        v -= m.a[lj + self.lc(i) * ld] * m.a[l0 + (i - j0) + lcc * ld];
                    }
                    m.a[lj + lcc * ld] = v;
                }
            }
        }
        Ok(())
    }
}

/// HPL's panel factorization variants (PFACT and RFACT).
pub(crate) const LEFT: usize = 0;
pub(crate) const CROUT: usize = 1;
pub(crate) const RIGHT: usize = 2;

const TAG_SWAP: i32 = 11;
const TAG_PANEL: i32 = 12;
// (TAG_PANEL + 1 also: the second ring of the two-ring broadcasts; + 2 and + 3 for the odd
// panels, so that a panel sent ahead never meets the receive of the one before.)

/// Passes `buf` along `chain` (its first member has it).
fn relay(c: &Comm, buf: &mut [f64], chain: &[usize], tag: i32) -> Result<(), Error> {
    let Some(i) = chain.iter().position(|&r| r == c.rank()) else { return Ok(()) };
    if i > 0 {
        c.recv(buf, chain[i - 1], tag)?;
    }
    if let Some(&next) = chain.get(i + 1) {
        c.send(buf, next, tag)?;
    }
    Ok(())
}

/// Spread-roll among `members` (the first has `buf`): pieces scattered, then rolled around
/// the ring until everyone has all (HPL's `long`).
fn spread_roll(c: &Comm, buf: &mut [f64], members: &[usize], tag: i32) -> Result<(), Error> {
    let m = members.len();
    let Some(k) = members.iter().position(|&r| r == c.rank()) else { return Ok(()) };
    if m < 2 {
        return Ok(());
    }
    let len = buf.len();
    let chunk = len.div_ceil(m).max(1);
    let piece = |i: usize| (i * chunk).min(len)..((i + 1) * chunk).min(len);
    if k == 0 {
        for (i, &r) in members.iter().enumerate().skip(1) {
            c.send(&buf[piece(i)], r, tag)?;
        }
    } else {
        let range = piece(k);
        c.recv(&mut buf[range], members[0], tag)?;
    }
    let (next, prev) = (members[(k + 1) % m], members[(k + m - 1) % m]);
    for s in 0..m - 1 {
        let out = piece((k + m - s) % m);
        let inn = piece((k + 2 * m - s - 1) % m);
        let send = buf[out].to_vec();
        c.sendrecv(&send, next, tag, &mut buf[inn], prev, tag)?;
    }
    Ok(())
}

/// The panel broadcast along a process row, in HPL's topologies: 0 increasing ring, 1
/// modified ring (the next process, which factors the next panel, first and apart), 2 two
/// rings, 3 modified two rings, 4 spread-roll (long), 5 modified spread-roll.
pub(crate) fn panel_bcast(c: &Comm, buf: &mut [f64], root: usize, top: usize, tag: i32) -> Result<(), Error> {
    let n = c.size();
    if n == 1 {
        return Ok(());
    }
    let rel: Vec<usize> = (0..n).map(|i| (root + i) % n).collect();
    // The modified forms: the next process gets it straight from the root, then the rest.
    let rest = if top % 2 == 1 && n > 2 {
        relay(c, buf, &rel[..2], tag)?;
        std::iter::once(root).chain(rel[2..].iter().copied()).collect::<Vec<_>>()
    } else {
        rel
    };
    match top {
        0 | 1 => relay(c, buf, &rest, tag),
        2 | 3 => {
            // Two rings: the root starts each half.
            let others = &rest[1..];
            let h = others.len().div_ceil(2);
            let first: Vec<usize> = std::iter::once(root).chain(others[..h].iter().copied()).collect();
            let second: Vec<usize> = std::iter::once(root).chain(others[h..].iter().copied()).collect();
            relay(c, buf, &first, tag)?;
            relay(c, buf, &second, tag + 1)
        }
        _ => spread_roll(c, buf, &rest, tag),
    }
}

/// Swaps global rows `j` and `p` over local columns `cols`, between the process rows that
/// hold them (down the process column).
fn swap_rows(g: &Grid, m: &mut Local, j: usize, p: usize, cols: std::ops::Range<usize>) -> Result<(), Error> {
    if j == p || cols.is_empty() {
        return Ok(());
    }
    let (oj, op) = (owner(j, m.nb, g.p), owner(p, m.nb, g.p));
    let (lj, lp) = (crate::dist::local(j, m.nb, g.p), crate::dist::local(p, m.nb, g.p));
    if oj == g.myrow && op == g.myrow {
        for c in cols {
            m.a.swap(lj + c * m.ld, lp + c * m.ld);
        }
        return Ok(());
    }
    let (mine, peer) = match (oj == g.myrow, op == g.myrow) {
        (true, _) => (lj, op),
        (_, true) => (lp, oj),
        _ => return Ok(()),
    };
    let out: Vec<f64> = cols.clone().map(|c| m.a[mine + c * m.ld]).collect();
    let mut got = vec![0.0; out.len()];
    g.col.sendrecv(&out, peer, TAG_SWAP, &mut got, peer, TAG_SWAP)?;
    for (c, v) in cols.zip(got) {
        *m.at(mine, c) = v;
    }
    Ok(())
}

/// Factors [A|b] in place: U (and y in column N) above the diagonal of the global matrix.
/// `progress` hears the number of columns done after each panel.
pub(crate) fn factor(g: &Grid, m: &mut Local, pf: PanelFact, progress: &mut dyn FnMut(usize)) -> Result<(), Error> {
    let (n, nb) = (m.n, m.nb);
    // With lookahead, the next panel's process column factors it, and its root starts
    // sending it, before it updates the rest of its trailing columns.
    let mut ready: Option<Vec<f64>> = None;
    let mut k0 = 0;
    let mut k = 0usize;
    while k0 < n {
        let jb = nb.min(n - k0);
        let pc = owner(k0, nb, g.q);
        let lr0 = count(k0, nb, g.myrow, g.p);
        let rows = m.mp - lr0;
        let tag = TAG_PANEL + 2 * (k % 2) as i32;
        let sent = ready.is_some();
        let mut panel = match ready.take() {
            Some(p) => p,
            None => {
                let mut panel = vec![0.0; rows * jb + jb * jb + jb];
                if g.mycol == pc {
                    factor_panel(g, m, k0, jb, pf, &mut panel)?;
                }
                panel
            }
        };
        // (A root that sent it during the last step has nothing more to do here.)
        if !(sent && g.mycol == pc) {
            panel_bcast(&g.row, &mut panel, pc, pf.bcast, tag)?;
        }
        let (lpanel, rest) = panel.split_at(rows * jb);
        let (l11, pivots) = rest.split_at(jb * jb);
        // The row swaps on the trailing columns (b included) and U's block row,
        // L11^-1 A12, on every process row.
        let ct = count(k0 + jb, nb, g.mycol, g.q);
        let width = m.nq - ct;
        let u = if g.p == 1 {
            // One process row: the swaps column by column in one pass (as LAPACK's dlaswp),
            // the solve in place.
            let ld = m.ld;
            for col in m.a[ct * ld..].chunks_mut(ld).take(width) {
                for (i, &p) in pivots.iter().enumerate() {
                    col.swap(k0 + i, p as usize);
                }
            }
            let mut u = vec![0.0; jb * width];
            if width > 0 {
                crate::kernels::trsm_lower_unit(jb, width, l11, jb, &mut m.a[lr0 + ct * ld..], ld);
                for (k, c) in (ct..m.nq).enumerate() {
                    u[k * jb..(k + 1) * jb].copy_from_slice(&m.a[lr0 + c * ld..lr0 + jb + c * ld]);
                }
            }
            u
        } else {
            swap_rows_and_u(g, m, k0, jb, pivots, l11, ct, pf)?
        };
        // The trailing update, A22 -= L21 U12: with lookahead, the next panel's columns
        // first, then that panel is factored and its broadcast started, then the rest.
        let rs = count(k0 + jb, nb, g.myrow, g.p);
        let update = |m: &mut Local, cols: std::ops::Range<usize>| {
            if rs < m.mp && !cols.is_empty() {
                let ld = m.ld;
                let (c0, w) = (cols.start, cols.len());
                crate::kernels::gemm_sub(
                    m.mp - rs,
                    w,
                    jb,
                    &lpanel[rs - lr0..],
                    rows,
                    &u[(c0 - ct) * jb..],
                    jb,
                    &mut m.a[rs + c0 * ld..],
                    ld,
                );
            }
        };
        let next = k0 + jb;
        if pf.depth > 0 && next < n && g.mycol == owner(next, nb, g.q) {
            let jbn = nb.min(n - next);
            update(m, ct..ct + jbn);
            let rows_n = m.mp - count(next, nb, g.myrow, g.p);
            let mut np = vec![0.0; rows_n * jbn + jbn * jbn + jbn];
            factor_panel(g, m, next, jbn, pf, &mut np)?;
            let tag_n = TAG_PANEL + 2 * ((k + 1) % 2) as i32;
            mpr::scope(|s| -> Result<(), Error> {
                let mut started = Vec::new();
                if pf.bcast <= 3 {
                    for (dest, off) in root_sends(g.row.size(), g.mycol, pf.bcast) {
                        started.push(g.row.isend(s, &np, dest, tag_n + off)?);
                    }
                }
                update(m, ct + jbn..m.nq);
                for r in started {
                    r.wait()?;
                }
                Ok(())
            })?;
            if pf.bcast > 3 {
                // The spread-roll's root takes part in the roll: no head start.
                panel_bcast(&g.row, &mut np, g.mycol, pf.bcast, tag_n)?;
            }
            ready = Some(np);
        } else {
            update(m, ct..m.nq);
        }
        k0 += jb;
        k += 1;
        progress(k0);
    }
    Ok(())
}

/// The row swaps of panel k0..k0+jb on the trailing columns ct.. across process rows, and
/// U's block row on every process row (HPL_pdlaswp's job). Each process row contributes the
/// pivot rows it holds, and the panel's process row also the rows k0..k0+jb they displace
/// (W); everyone gathers all contributions along the process column (by binary exchange
/// or a ring, as `pf.swap` says), then assembles U, writes the displaced rows it holds from
/// W, and solves U := L11^-1 U. The sizes follow from the pivots, which everyone has.
#[allow(clippy::too_many_arguments)]
fn swap_rows_and_u(
    g: &Grid,
    m: &mut Local,
    k0: usize,
    jb: usize,
    pivots: &[f64],
    l11: &[f64],
    ct: usize,
    pf: PanelFact,
) -> Result<Vec<f64>, Error> {
    let (nb, ld) = (m.nb, m.ld);
    let width = m.nq - ct;
    let pr = owner(k0, nb, g.p);
    // Where each row touched by the swaps takes its content from.
    let mut origin = std::collections::HashMap::new();
    for (i, &p) in pivots.iter().enumerate() {
        let (a, p) = (k0 + i, p as usize);
        if a != p {
            let (oa, op) = (*origin.get(&a).unwrap_or(&a), *origin.get(&p).unwrap_or(&p));
            origin.insert(a, op);
            origin.insert(p, oa);
        }
    }
    let src = |i: usize| *origin.get(&(k0 + i)).unwrap_or(&(k0 + i));
    let end = k0 + jb;
    // Each process row's slots of U (rows from below the block), then W on the panel's row.
    let slots: Vec<Vec<usize>> =
        (0..g.p).map(|r| (0..jb).filter(|&i| src(i) >= end && owner(src(i), nb, g.p) == r).collect()).collect();
    let mut offs = vec![0];
    for (r, s) in slots.iter().enumerate() {
        offs.push(offs[r] + (s.len() + if r == pr { jb } else { 0 }) * width);
    }
    let mut buf = vec![0.0; offs[g.p]];
    // Rows are packed row by row (each `width` long).
    let pack = |buf: &mut [f64], at: usize, row: usize, a: &[f64]| {
        for (c, v) in buf[at..at + width].iter_mut().enumerate() {
            *v = a[row + (ct + c) * ld];
        }
    };
    let mut at = offs[g.myrow];
    for &i in &slots[g.myrow] {
        pack(&mut buf, at, crate::dist::local(src(i), nb, g.p), &m.a);
        at += width;
    }
    let w_at = offs[pr] + slots[pr].len() * width;
    if g.myrow == pr {
        for i in 0..jb {
            pack(&mut buf, at, crate::dist::local(k0 + i, nb, g.p), &m.a);
            at += width;
        }
    }
    let binary = pf.swap == 0 || (pf.swap == 2 && width <= pf.swap_threshold);
    allgather_pieces(&g.col, &mut buf, &offs, binary, TAG_SWAP)?;
    // U, column-major (jb x width).
    let mut u = vec![0.0; jb * width];
    for i in 0..jb {
        let s = src(i);
        let from = if s >= end {
            let r = owner(s, nb, g.p);
            offs[r] + slots[r].iter().position(|&x| x == i).expect("a slot") * width
        } else {
            w_at + (s - k0) * width
        };
        for (c, &v) in buf[from..from + width].iter().enumerate() {
            u[i + c * jb] = v;
        }
    }
    // The displaced rows this process row holds, from W.
    for (&b, &o) in &origin {
        if b >= end && owner(b, nb, g.p) == g.myrow {
            let (lb, from) = (crate::dist::local(b, nb, g.p), w_at + (o - k0) * width);
            for (c, &v) in buf[from..from + width].iter().enumerate() {
                m.a[lb + (ct + c) * ld] = v;
            }
        }
    }
    crate::kernels::trsm_lower_unit(jb, width, l11, jb, &mut u, jb);
    if g.myrow == pr {
        let lr0 = count(k0, nb, g.myrow, g.p);
        for c in 0..width {
            m.a[lr0 + (ct + c) * ld..lr0 + jb + (ct + c) * ld].copy_from_slice(&u[c * jb..(c + 1) * jb]);
        }
    }
    Ok(u)
}

/// Every rank's piece to every rank along `c`: piece r is `buf[offs[r]..offs[r + 1]]`, filled
/// on rank r. `binary`: recursive doubling (HPL's binary exchange; ranks beyond the largest
/// power of two fold into a partner first and get the result last), else a ring (HPL's
/// long: each piece rolled around).
fn allgather_pieces(c: &Comm, buf: &mut [f64], offs: &[usize], binary: bool, tag: i32) -> Result<(), Error> {
    let (n, me) = (c.size(), c.rank());
    if n == 1 {
        return Ok(());
    }
    let span = |a: usize, b: usize| offs[a.min(n)]..offs[b.min(n)];
    if !binary {
        let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
        for s in 0..n - 1 {
            let (out, inn) = ((me + n - s) % n, (me + 2 * n - s - 1) % n);
            let send = buf[span(out, out + 1)].to_vec();
            c.sendrecv(&send, next, tag, &mut buf[span(inn, inn + 1)], prev, tag)?;
        }
        return Ok(());
    }
    let p2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    if me >= p2 {
        c.send(&buf[span(me, me + 1)], me - p2, tag)?;
        c.recv(buf, me - p2, tag)?;
        return Ok(());
    }
    if me + p2 < n {
        c.recv(&mut buf[span(me + p2, me + p2 + 1)], me + p2, tag)?;
    }
    // Rank r holds the pieces of r and r + p2; at step d it holds those of its group of d.
    let mut d = 1;
    while d < p2 {
        let (base, peer) = (me & !(d - 1), me ^ d);
        let pbase = peer & !(d - 1);
        for shift in [0, p2] {
            let send = buf[span(base + shift, base + shift + d)].to_vec();
            let got = span(pbase + shift, pbase + shift + d);
            c.sendrecv(&send, peer, tag, &mut buf[got], peer, tag)?;
        }
        d *= 2;
    }
    if me + p2 < n {
        c.send(buf, me + p2, tag)?;
    }
    Ok(())
}

/// The panel's process column factors panel k0..k0+jb and packs it into `out`: its local
/// rows from k0 on, column by column, then L11 (jb x jb), then the pivots.
fn factor_panel(g: &Grid, m: &mut Local, k0: usize, jb: usize, pf: PanelFact, out: &mut [f64]) -> Result<(), Error> {
    let nb = m.nb;
    let lr0 = count(k0, nb, g.myrow, g.p);
    let rows = m.mp - lr0;
    let lc0 = count(k0, nb, g.mycol, g.q);
    let at = Panel { k0, jb, lc0 };
    let (cols, rest) = out.split_at_mut(rows * jb);
    let (l11, pivots) = rest.split_at_mut(jb * jb);
    at.factor(g, m, k0, jb, pf, pivots)?;
    for i in 0..jb {
        cols[i * rows..(i + 1) * rows].copy_from_slice(&m.a[lr0 + (lc0 + i) * m.ld..m.mp + (lc0 + i) * m.ld]);
    }
    // L11 (the panel's top jb x jb, on the panel's process row) to the whole process column:
    // every process row solves for U itself.
    let pr = owner(k0, nb, g.p);
    if g.myrow == pr {
        for i in 0..jb {
            l11[i * jb..(i + 1) * jb].copy_from_slice(&cols[i * rows..i * rows + jb]);
        }
    }
    g.col.bcast(l11, pr)?;
    Ok(())
}

/// Where the root of a panel broadcast sends the whole panel, in the ring topologies (0 to
/// 3), with the tag offset of each chain: the heads of the chains `panel_bcast` relays along.
fn root_sends(n: usize, root: usize, top: usize) -> Vec<(usize, i32)> {
    if n == 1 {
        return Vec::new();
    }
    let rel: Vec<usize> = (0..n).map(|i| (root + i) % n).collect();
    let mut out = Vec::new();
    let rest: &[usize] = if top % 2 == 1 && n > 2 {
        out.push((rel[1], 0));
        &rel[2..]
    } else {
        &rel[1..]
    };
    match top {
        0 | 1 => out.extend(rest.first().map(|&r| (r, 0))),
        _ => {
            let h = rest.len().div_ceil(2);
            out.extend(rest.first().map(|&r| (r, 0)));
            out.extend(rest.get(h).map(|&r| (r, 1)));
        }
    }
    out
}

/// Solves U x = y after [`factor`]; every rank gets all of x.
pub(crate) fn solve(g: &Grid, m: &Local) -> Result<Vec<f64>, Error> {
    let (n, nb) = (m.n, m.nb);
    // y (column N) on every rank.
    let mut y = vec![0.0; n];
    let qb = owner(n, nb, g.q);
    if g.mycol == qb {
        let lb = count(n, nb, qb, g.q);
        for l in 0..m.mp {
            y[global(l, nb, g.myrow, g.p)] = m.a[l + lb * m.ld];
        }
    }
    g.world.allreduce_in_place(&mut y, Sum)?;
    // Back substitution, block by block from the last: the sums of U(i, solved) x over each
    // rank's columns are added up along the block's process row at its diagonal owner.
    let mut x = vec![0.0; n];
    let mut acc = vec![0.0; m.mp];
    let blocks = n.div_ceil(nb);
    for kb in (0..blocks).rev() {
        let k0 = kb * nb;
        let jb = nb.min(n - k0);
        let (pr, pc) = (kb % g.p, kb % g.q);
        let mut xb = vec![0.0; jb];
        if g.myrow == pr {
            let lr0 = count(k0, nb, g.myrow, g.p);
            let mut part = acc[lr0..lr0 + jb].to_vec();
            g.row.allreduce_in_place(&mut part, Sum)?;
            if g.mycol == pc {
                let lc0 = count(k0, nb, g.mycol, g.q);
                for i in (0..jb).rev() {
                    let mut s = y[k0 + i] - part[i];
                    for (r, &v) in xb.iter().enumerate().skip(i + 1) {
                        s -= m.a[lr0 + i + (lc0 + r) * m.ld] * v;
                    }
                    xb[i] = s / m.a[lr0 + i + (lc0 + i) * m.ld];
                }
            }
        }
        let root = grid_rank(g, pr, pc);
        g.world.bcast(&mut xb, root)?;
        x[k0..k0 + jb].copy_from_slice(&xb);
        if g.mycol == pc {
            let lc0 = count(k0, nb, g.mycol, g.q);
            let above = count(k0, nb, g.myrow, g.p);
            for (i, &v) in xb.iter().enumerate() {
                let col = &m.a[(lc0 + i) * m.ld..(lc0 + i) * m.ld + m.mp];
                for l in 0..above {
                    acc[l] += col[l] * v;
                }
            }
        }
    }
    Ok(x)
}

/// The grid communicator's rank of grid position (r, c).
fn grid_rank(g: &Grid, r: usize, c: usize) -> usize {
    if g.row_major {
        r * g.q + c
    } else {
        c * g.p + r
    }
}

/// HPL's check on a regenerated [A|b]: the norms it prints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Check {
    pub(crate) resid: f64,
    pub(crate) norm_a: f64,
    pub(crate) norm_x: f64,
    pub(crate) norm_b: f64,
    /// ||Ax-b||_oo / (eps * (||A||_oo * ||x||_oo + ||b||_oo) * N).
    pub(crate) scaled: f64,
}

pub(crate) fn check(g: &Grid, n: usize, nb: usize, x: &[f64]) -> Result<Check, Error> {
    let m = Local::generate(g, n, nb);
    let mut r = vec![0.0; m.mp];
    let mut rowsum = vec![0.0; m.mp];
    let mut norm_b: f64 = 0.0;
    for c in 0..m.nq {
        let j = global(c, nb, g.mycol, g.q);
        let col = &m.a[c * m.ld..c * m.ld + m.mp];
        if j == n {
            for (l, &b) in col.iter().enumerate() {
                r[l] -= b;
                norm_b = norm_b.max(b.abs());
            }
        } else {
            for (l, &v) in col.iter().enumerate() {
                r[l] += v * x[j];
                rowsum[l] += v.abs();
            }
        }
    }
    g.row.allreduce_in_place(&mut r, Sum)?;
    g.row.allreduce_in_place(&mut rowsum, Sum)?;
    let mut norms =
        [r.iter().fold(0.0f64, |a, v| a.max(v.abs())), rowsum.iter().fold(0.0f64, |a, v| a.max(*v)), norm_b];
    g.world.allreduce_in_place(&mut norms, Max)?;
    let [resid, norm_a, norm_b] = norms;
    let norm_x = x.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    let eps = f64::EPSILON / 2.0;
    // (A solution with a NaN or an infinity fails, whatever the maxima above made of it.)
    let finite = x.iter().all(|v| v.is_finite());
    let scaled = if finite { resid / (eps * (norm_a * norm_x + norm_b) * n as f64) } else { f64::NAN };
    Ok(Check { resid, norm_a, norm_x, norm_b, scaled })
}
