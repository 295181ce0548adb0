//! HPL.dat, in the reference's line layout: each line's leading values, the rest of the line
//! a comment.
//!
//! ```text
//!  1-2  two title lines
//!  3    output file name           4  device out (6=stdout, 7=stderr, else the file)
//!  5    # of Ns                    6  Ns
//!  7    # of NBs                   8  NBs
//!  9    PMAP (0=row-, 1=column-major)
//! 10    # of grids                11  Ps            12  Qs
//! 13    threshold
//! 14    # of PFACTs               15  PFACTs (0=left, 1=Crout, 2=right)
//! 16    # of NBMINs               17  NBMINs
//! 18    # of NDIVs                19  NDIVs
//! 20    # of RFACTs               21  RFACTs
//! 22    # of BCASTs               23  BCASTs (0=1rg, 1=1rM, 2=2rg, 3=2rM, 4=Lng, 5=LnM)
//! 24    # of DEPTHs               25  DEPTHs
//! 26    SWAP (0=bin-exch, 1=long, 2=mix)   27  swapping threshold
//! 28    L1 form   29  U form   30  equilibration   31  memory alignment
//! ```

/// Everything HPL.dat says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dat {
    pub(crate) out_file: String,
    pub(crate) device: i64,
    pub(crate) ns: Vec<usize>,
    pub(crate) nbs: Vec<usize>,
    pub(crate) row_major: bool,
    pub(crate) grids: Vec<(usize, usize)>,
    pub(crate) threshold: f64,
    pub(crate) pfacts: Vec<usize>,
    pub(crate) nbmins: Vec<usize>,
    pub(crate) ndivs: Vec<usize>,
    pub(crate) rfacts: Vec<usize>,
    pub(crate) bcasts: Vec<usize>,
    pub(crate) depths: Vec<usize>,
    pub(crate) swap: usize,
    pub(crate) swap_threshold: usize,
    pub(crate) l1_form: usize,
    pub(crate) u_form: usize,
    pub(crate) equil: usize,
    pub(crate) align: usize,
}

struct Lines<'a> {
    lines: Vec<&'a str>,
    file: &'a str,
}

impl Lines<'_> {
    fn err(&self, line: usize, what: &str) -> String {
        let text = self.lines.get(line - 1).map_or("(missing)", |l| l.trim_end());
        format!("{}: line {line} ({what}): expected {what}, got {text:?}", self.file)
    }

    /// The first `k` whitespace-separated values of line `line` (1-based).
    fn values<T: std::str::FromStr>(&self, line: usize, k: usize, what: &str) -> Result<Vec<T>, String> {
        let text = self.lines.get(line - 1).ok_or_else(|| self.err(line, what))?;
        let words: Vec<&str> = text.split_whitespace().take(k).collect();
        if words.len() < k {
            return Err(self.err(line, what));
        }
        words.iter().map(|w| w.parse::<T>().map_err(|_| self.err(line, what))).collect()
    }

    fn one<T: std::str::FromStr>(&self, line: usize, what: &str) -> Result<T, String> {
        Ok(self.values(line, 1, what)?.remove(0))
    }

    /// A count on line `line` and that many values on the next, each checked by `ok`.
    fn list(&self, line: usize, what: &str, ok: impl Fn(usize) -> bool) -> Result<Vec<usize>, String> {
        let n: usize = self.one(line, &format!("the number of {what}"))?;
        if n == 0 || n > 20 {
            return Err(self.err(line, &format!("the number of {what}, 1 to 20")));
        }
        let v: Vec<usize> = self.values(line + 1, n, &format!("{n} {what}"))?;
        if let Some(bad) = v.iter().find(|&&x| !ok(x)) {
            return Err(format!("{}: line {} ({what}): {bad} is not a valid value", self.file, line + 1));
        }
        Ok(v)
    }
}

/// Parses HPL.dat text; errors name the file and the line.
pub(crate) fn parse(file: &str, text: &str) -> Result<Dat, String> {
    let l = Lines { lines: text.lines().collect(), file };
    let out_file: String = l.one(3, "an output file name")?;
    let device: i64 = l.one(4, "a device number")?;
    let ns = l.list(5, "Ns", |_| true)?;
    let nbs = l.list(7, "NBs", |x| x > 0)?;
    let pmap: usize = l.one(9, "PMAP, 0 or 1")?;
    if pmap > 1 {
        return Err(l.err(9, "PMAP, 0 or 1"));
    }
    let ngrids: usize = l.one(10, "the number of process grids")?;
    if ngrids == 0 || ngrids > 20 {
        return Err(l.err(10, "the number of process grids, 1 to 20"));
    }
    let ps: Vec<usize> = l.values(11, ngrids, &format!("{ngrids} Ps"))?;
    let qs: Vec<usize> = l.values(12, ngrids, &format!("{ngrids} Qs"))?;
    if ps.iter().chain(&qs).any(|&x| x == 0) {
        return Err(format!("{file}: lines 11-12 (Ps, Qs): every P and Q must be at least 1"));
    }
    let threshold: f64 = l.one(13, "a threshold")?;
    let pfacts = l.list(14, "PFACTs", |x| x <= 2)?;
    let nbmins = l.list(16, "NBMINs", |x| x >= 1)?;
    let ndivs = l.list(18, "NDIVs", |x| x >= 2)?;
    let rfacts = l.list(20, "RFACTs", |x| x <= 2)?;
    let bcasts = l.list(22, "BCASTs", |x| x <= 5)?;
    let depths = l.list(24, "DEPTHs", |_| true)?;
    let swap: usize = l.one(26, "SWAP, 0 to 2")?;
    if swap > 2 {
        return Err(l.err(26, "SWAP, 0 to 2"));
    }
    let dat = Dat {
        out_file,
        device,
        ns,
        nbs,
        row_major: pmap == 0,
        grids: ps.into_iter().zip(qs).collect(),
        threshold,
        pfacts,
        nbmins,
        ndivs,
        rfacts,
        bcasts,
        depths,
        swap,
        swap_threshold: l.one(27, "a swapping threshold")?,
        l1_form: l.one(28, "the L1 form, 0 or 1")?,
        u_form: l.one(29, "the U form, 0 or 1")?,
        equil: l.one(30, "equilibration, 0 or 1")?,
        align: l.one(31, "a memory alignment")?,
    };
    Ok(dat)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const REFERENCE: &str = "HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
6            device out (6=stdout,7=stderr,file)
4            # of problems sizes (N)
29 30 34 35  Ns
4            # of NBs
1 2 3 4      NBs
0            PMAP process mapping (0=Row-,1=Column-major)
3            # of process grids (P x Q)
2 1 4        Ps
2 4 1        Qs
16.0         threshold
3            # of panel fact
0 1 2        PFACTs (0=left, 1=Crout, 2=Right)
2            # of recursive stopping criterium
2 4          NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
3            # of recursive panel fact.
0 1 2        RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
0            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
0            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
";

    #[test]
    fn the_reference_file() {
        let d = parse("HPL.dat", REFERENCE).unwrap();
        assert_eq!(d.ns, [29, 30, 34, 35]);
        assert_eq!(d.nbs, [1, 2, 3, 4]);
        assert_eq!(d.grids, [(2, 2), (1, 4), (4, 1)]);
        assert!(d.row_major && d.threshold == 16.0 && d.device == 6 && d.out_file == "HPL.out");
        assert_eq!((d.pfacts.len(), d.nbmins.clone(), d.ndivs.clone(), d.rfacts.len()), (3, vec![2, 4], vec![2], 3));
        assert_eq!((d.bcasts.clone(), d.depths.clone(), d.swap, d.swap_threshold), (vec![0], vec![0], 2, 64));
        assert_eq!((d.l1_form, d.u_form, d.equil, d.align), (0, 0, 1, 8));
    }

    #[test]
    fn malformed_files_name_the_line() {
        let with = |line: usize, text: &str| {
            let mut v: Vec<&str> = REFERENCE.lines().collect();
            v[line - 1] = text;
            parse("HPL.dat", &v.join("\n")).unwrap_err()
        };
        assert_eq!(with(6, "29 30 x"), "HPL.dat: line 6 (4 Ns): expected 4 Ns, got \"29 30 x\"");
        assert!(with(5, "0   # of Ns").starts_with("HPL.dat: line 5 (the number of Ns, 1 to 20)"));
        assert!(with(8, "0 2 3 4").contains("line 8 (NBs): 0 is not a valid value"));
        assert!(with(9, "2").contains("line 9 (PMAP, 0 or 1)"));
        assert!(with(12, "2 4").contains("line 12 (3 Qs)"));
        assert!(with(23, "7").contains("line 23 (BCASTs): 7 is not a valid value"));
        assert!(with(26, "3").contains("line 26 (SWAP, 0 to 2)"));
        let short: String = REFERENCE.lines().take(20).collect::<Vec<_>>().join("\n");
        assert!(parse("HPL.dat", &short).unwrap_err().contains("line 21"), "{}", parse("HPL.dat", &short).unwrap_err());
    }
}
