//! Weights as the file stores them, multiplied without expanding them: each kernel reads a
//! row's blocks (scale, minimum, packed integers) and accumulates against f32 activations.
//! The loops are plain Rust compiled for the CPU's vector unit at run time ([`vectorized`]:
//! AVX-512 or AVX2 here, NEON on Apple silicon).

use std::ops::{Deref, Range};
use std::sync::Arc;

use half::bf16;

use crate::gguf::DType;

/// Runs `f` compiled for the widest vector unit this CPU has; loops inlined into it are
/// vectorized for that unit.
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    pulp::Arch::new().dispatch(f)
}

/// A matrix of `rows` rows of `cols` elements, row-major, in its stored type (a vector is
/// one row): the file's own bytes (memory-mapped), or a copy of some of its columns.
#[derive(Debug, Clone)]
pub(crate) struct Mat {
    pub(crate) dtype: DType,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    data: Bytes,
}

/// Where a matrix's bytes are: a map of exactly its rows in the file (shared by clones), or
/// this process's own copy.
#[derive(Debug, Clone)]
pub(crate) enum Bytes {
    Mapped(Arc<memmap2::Mmap>),
    Owned(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Self {
        Bytes::Owned(v)
    }
}

impl From<memmap2::Mmap> for Bytes {
    fn from(m: memmap2::Mmap) -> Self {
        Bytes::Mapped(Arc::new(m))
    }
}

/// An IEEE half to f32, by its bits: inlined into the block loops (a call there would spill
/// the accumulators), exact for every value (checked against `half` in the tests).
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let (exp, man) = ((h >> 10) & 0x1f, (h & 0x3ff) as u32);
    let bits = match exp {
        0 => {
            // Zero or subnormal: man x 2^-24.
            let v = man as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        0x1f => sign | 0x7f80_0000 | man << 13,
        _ => sign | (exp as u32 + 112) << 23 | man << 13,
    };
    f32::from_bits(bits)
}

#[inline(always)]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// Lane j of `acc` += w[i] x[i] for the i = j (mod 16), `b` holding the w as values of W bytes
/// (`value` reads one): unpacked from fixed-size arrays, so that the loop vectorizes.
#[inline(always)]
fn floats<const W: usize, const B: usize>(b: &[u8], x: &[f32], acc: &mut [f32; 16], value: impl Fn(&[u8; W]) -> f32) {
    const L: usize = 16;
    let mut bc = b.chunks_exact(B);
    let mut xc = x.chunks_exact(L);
    for (blk, x) in (&mut bc).zip(&mut xc) {
        let (blk, x) = (fixed::<B, u8>(blk), fixed::<L, f32>(x));
        for j in 0..L {
            acc[j] += value(fixed::<W, u8>(&blk[j * W..(j + 1) * W])) * x[j];
        }
    }
    for (v, x) in bc.remainder().chunks_exact(W).zip(xc.remainder()) {
        acc[0] += value(fixed::<W, u8>(v)) * x;
    }
}

/// A slice of known length as an array (so its loops need no bounds checks).
#[inline(always)]
fn fixed<const N: usize, T>(s: &[T]) -> &[T; N] {
    s.try_into().expect("a whole block")
}

impl Mat {
    /// `data` holds rows x cols elements of `dtype` (checked).
    pub(crate) fn new(dtype: DType, rows: usize, cols: usize, data: impl Into<Bytes>) -> Mat {
        let data = data.into();
        let (per, bytes) = dtype.block();
        assert!(cols.is_multiple_of(per), "rows of {cols} do not fill blocks of {per}");
        assert_eq!(data.len(), rows * cols / per * bytes, "a {rows}x{cols} {} matrix", dtype.name());
        Mat { dtype, rows, cols, data }
    }

    pub(crate) fn row_bytes(&self) -> usize {
        let (per, bytes) = self.dtype.block();
        self.cols / per * bytes
    }

    /// The bytes the matrix holds.
    pub(crate) fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Row r, columns `cols` (block-aligned), dotted with x (x.len() == cols.len()).
    #[inline(always)]
    pub(crate) fn dot(&self, r: usize, cols: Range<usize>, x: &[f32]) -> f32 {
        let (per, bytes) = self.dtype.block();
        debug_assert!(cols.start.is_multiple_of(per) && cols.end.is_multiple_of(per) && x.len() == cols.len());
        let row = &self.data[r * self.row_bytes()..(r + 1) * self.row_bytes()];
        let b = &row[cols.start / per * bytes..cols.end / per * bytes];
        // Sums kept in independent lanes (a vector register's worth), so that the loops
        // vectorize without reordering any one lane's additions; the lanes are added last.
        const L: usize = 16;
        let mut acc = [0.0f32; L];
        match self.dtype {
            DType::F32 => floats::<4, { 4 * L }>(b, x, &mut acc, |v| f32::from_le_bytes(*v)),
            DType::F16 => floats::<2, { 2 * L }>(b, x, &mut acc, |v| f16_to_f32(u16::from_le_bytes(*v))),
            DType::BF16 => {
                floats::<2, { 2 * L }>(b, x, &mut acc, |v| f32::from_bits((u16::from_le_bytes(*v) as u32) << 16))
            }
            DType::Q8_0 => {
                for (blk, x) in b.chunks_exact(34).zip(x.chunks_exact(32)) {
                    let (d, q, x) = (f16_at(blk, 0), fixed::<32, u8>(&blk[2..34]), fixed::<32, f32>(x));
                    for j in 0..L {
                        acc[j] += d * (q[j] as i8) as f32 * x[j] + d * (q[j + L] as i8) as f32 * x[j + L];
                    }
                }
            }
            DType::Q4_0 => {
                for (blk, x) in b.chunks_exact(18).zip(x.chunks_exact(32)) {
                    let (d, q, x) = (f16_at(blk, 0), fixed::<16, u8>(&blk[2..18]), fixed::<32, f32>(x));
                    for j in 0..L {
                        acc[j] += d * ((q[j] & 15) as f32 - 8.0) * x[j] + d * ((q[j] >> 4) as f32 - 8.0) * x[j + L];
                    }
                }
            }
            DType::Q4_1 => {
                for (blk, x) in b.chunks_exact(20).zip(x.chunks_exact(32)) {
                    let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
                    let (q, x) = (fixed::<16, u8>(&blk[4..20]), fixed::<32, f32>(x));
                    for j in 0..L {
                        acc[j] += (d * (q[j] & 15) as f32 + m) * x[j] + (d * (q[j] >> 4) as f32 + m) * x[j + L];
                    }
                }
            }
        }
        acc.iter().sum()
    }

    /// Row r as f32 (an embedding lookup, a norm's weights).
    pub(crate) fn row(&self, r: usize) -> Vec<f32> {
        let mut out = vec![0.0; self.cols];
        self.dequant(r, 0..self.cols, &mut out);
        out
    }

    /// Row r, columns `cols` (block-aligned), as f32 into `out`: each value computed as the
    /// fused kernels compute it, so that [`Mat::dot`] and [`dot_blocks`] over these agree
    /// to the bit.
    #[inline(always)]
    fn dequant(&self, r: usize, cols: Range<usize>, out: &mut [f32]) {
        let (per, bytes) = self.dtype.block();
        let row = &self.data[r * self.row_bytes()..(r + 1) * self.row_bytes()];
        let b = &row[cols.start / per * bytes..cols.end / per * bytes];
        for (blk, o) in b.chunks_exact(bytes).zip(out.chunks_exact_mut(per)) {
            match self.dtype {
                DType::F32 => o[0] = f32::from_le_bytes(blk.try_into().expect("4")),
                DType::F16 => o[0] = f16_at(blk, 0),
                DType::BF16 => o[0] = bf16::from_bits(u16::from_le_bytes([blk[0], blk[1]])).to_f32(),
                DType::Q8_0 => {
                    let d = f16_at(blk, 0);
                    for j in 0..32 {
                        o[j] = d * (blk[2 + j] as i8) as f32;
                    }
                }
                DType::Q4_0 => {
                    let d = f16_at(blk, 0);
                    for j in 0..16 {
                        o[j] = d * ((blk[2 + j] & 15) as f32 - 8.0);
                        o[j + 16] = d * ((blk[2 + j] >> 4) as f32 - 8.0);
                    }
                }
                DType::Q4_1 => {
                    let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
                    for j in 0..16 {
                        o[j] = d * (blk[4 + j] & 15) as f32 + m;
                        o[j + 16] = d * (blk[4 + j] >> 4) as f32 + m;
                    }
                }
            }
        }
    }

    /// ys[t][i] = row (rows.start + i), columns `cols`, dotted with xs[t] (each cols.len()
    /// long), for every token t: each row's blocks are read once for all the tokens.
    /// No columns (a rank whose share of them is empty): zeros.
    pub(crate) fn matmul(&self, rows: Range<usize>, cols: Range<usize>, xs: &[f32], ys: &mut [f32]) {
        assert!(rows.end <= self.rows && cols.end <= self.cols, "within the matrix");
        if cols.is_empty() {
            ys.fill(0.0);
            return;
        }
        let t = xs.len() / cols.len();
        assert_eq!(ys.len(), t * rows.len(), "outputs");
        pulp::Arch::new().dispatch(MatMul { m: self, rows, cols, xs, ys });
    }
}

/// One [`Mat::matmul`], as pulp runs it: `with_simd` is compiled once per vector unit with
/// that unit's instructions enabled, and everything it calls is inlined into it.
struct MatMul<'b> {
    m: &'b Mat,
    rows: Range<usize>,
    cols: Range<usize>,
    xs: &'b [f32],
    ys: &'b mut [f32],
}

impl pulp::WithSimd for MatMul<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let (k, n) = (self.cols.len(), self.rows.len());
        let t = self.xs.len() / k.max(1);
        let blocks = matches!(self.m.dtype, DType::Q8_0 | DType::Q4_0 | DType::Q4_1);
        if t > 1 && blocks {
            // Several tokens: each row's blocks unpacked once (into one row's worth of
            // scratch), then dotted with every token.
            let mut w = vec![0.0f32; k];
            for (i, r) in self.rows.enumerate() {
                self.m.dequant(r, self.cols.clone(), &mut w);
                for tok in 0..t {
                    self.ys[tok * n + i] = dot_blocks(&w, &self.xs[tok * k..(tok + 1) * k]);
                }
            }
            return;
        }
        for (i, r) in self.rows.enumerate() {
            for tok in 0..t {
                self.ys[tok * n + i] = self.m.dot(r, self.cols.clone(), &self.xs[tok * k..(tok + 1) * k]);
            }
        }
    }
}

/// w . x over blocks of 32, in the lanes and order the fused block kernels use.
#[inline(always)]
fn dot_blocks(w: &[f32], x: &[f32]) -> f32 {
    const L: usize = 16;
    let mut acc = [0.0f32; L];
    for (w, x) in w.chunks_exact(32).zip(x.chunks_exact(32)) {
        let (w, x) = (fixed::<32, f32>(w), fixed::<32, f32>(x));
        for j in 0..L {
            acc[j] += w[j] * x[j] + w[j + L] * x[j + L];
        }
    }
    acc.iter().sum()
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::*;

    /// Blocks of `dtype` for the values `v` (32 per block), with their dequantized values.
    fn quantize(dtype: DType, v: &[f32]) -> (Vec<u8>, Vec<f32>) {
        let mut bytes = Vec::new();
        let mut back = Vec::new();
        for blk in v.chunks(32) {
            let (lo, hi) = blk.iter().fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            match dtype {
                DType::Q8_0 => {
                    let d = f16::from_f32(hi.abs().max(lo.abs()) / 127.0);
                    bytes.extend(d.to_bits().to_le_bytes());
                    for &x in blk {
                        let q = (x / d.to_f32()).round().clamp(-127.0, 127.0) as i8;
                        bytes.push(q as u8);
                        back.push(q as f32 * d.to_f32());
                    }
                }
                DType::Q4_1 | DType::Q4_0 => {
                    let (d, m) = if dtype == DType::Q4_1 {
                        (f16::from_f32((hi - lo) / 15.0), f16::from_f32(lo))
                    } else {
                        (
                            f16::from_f32(hi.abs().max(lo.abs()) / 7.0),
                            f16::from_f32(-8.0 * hi.abs().max(lo.abs()) / 7.0),
                        )
                    };
                    bytes.extend(d.to_bits().to_le_bytes());
                    if dtype == DType::Q4_1 {
                        bytes.extend(m.to_bits().to_le_bytes());
                    }
                    let q: Vec<u8> =
                        blk.iter().map(|&x| ((x - m.to_f32()) / d.to_f32()).round().clamp(0.0, 15.0) as u8).collect();
                    for j in 0..16 {
                        bytes.push(q[j] | q[j + 16] << 4);
                    }
                    back.extend(q.iter().map(|&q| q as f32 * d.to_f32() + m.to_f32()));
                }
                _ => unreachable!(),
            }
        }
        (bytes, back)
    }

    #[test]
    fn halves_convert_exactly() {
        for h in 0..=u16::MAX {
            let (got, want) = (f16_to_f32(h), f16::from_bits(h).to_f32());
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{h:#06x}: {got} vs {want}");
        }
    }

    #[test]
    fn every_type_dots_and_dequantizes_as_its_definition() {
        let (rows, cols) = (3, 64);
        let v: Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.31).sin()).collect();
        let mut cases: Vec<(DType, Vec<u8>, Vec<f32>)> = Vec::new();
        cases.push((DType::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect(), v.clone()));
        let h: Vec<f32> = v.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
        cases.push((DType::F16, v.iter().flat_map(|&x| f16::from_f32(x).to_bits().to_le_bytes()).collect(), h));
        let b: Vec<f32> = v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
        cases.push((DType::BF16, v.iter().flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes()).collect(), b));
        for t in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
            let (bytes, back) = quantize(t, &v);
            cases.push((t, bytes, back));
        }
        for (t, bytes, back) in cases {
            let m = Mat::new(t, rows, cols, bytes.clone());
            for r in 0..rows {
                assert_eq!(m.row(r), back[r * cols..(r + 1) * cols], "{} row {r}", t.name());
                let want: f32 = (0..cols).map(|c| back[r * cols + c] * x[c]).sum();
                let got = m.dot(r, 0..cols, &x);
                assert!((got - want).abs() < 1e-4 * want.abs().max(1.0), "{}: {got} vs {want}", t.name());
                // The second half of the columns alone (a column shard).
                let want: f32 = (32..cols).map(|c| back[r * cols + c] * x[c]).sum();
                let got = m.dot(r, 32..cols, &x[32..]);
                assert!((got - want).abs() < 1e-4 * want.abs().max(1.0), "{} half: {got} vs {want}", t.name());
            }
            let mut ys = vec![0.0; 2 * 2];
            let xs: Vec<f32> = x.iter().chain(x.iter()).copied().collect();
            m.matmul(1..3, 0..cols, &xs, &mut ys);
            assert_eq!(ys[0], m.dot(1, 0..cols, &x));
            assert_eq!(ys[3], m.dot(2, 0..cols, &x));
        }
    }
}
