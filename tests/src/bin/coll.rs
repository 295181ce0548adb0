//! Collective conformance checks, run as the ranks of a job: `mprun -np N coll`.
//! Every result is compared with a sequential reference computed here from the same
//! deterministic inputs; any mismatch panics (non-zero exit) with the details.

use mpr::{Comm, Max, Min, Prod, Sum, UserOp};

/// Input element `i` of rank `r` (small integers, so float sums are exact too).
fn input(r: usize, i: usize) -> i64 {
    ((r * 7919 + i * 104_729) % 1000) as i64 - 500
}

fn sizes() -> Vec<usize> {
    let max: usize = std::env::var("COLL_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(300_000);
    [0usize, 1, 2, 7, 100, 5000, 70_000, max].into_iter().filter(|&n| n <= max).collect()
}

fn main() -> mpr::Result<()> {
    let universe = mpr::init()?;
    let w = universe.world();
    let (me, p) = (w.rank(), w.size());

    w.barrier()?;
    check_bcast(&w)?;
    check_reduce_allreduce(&w)?;
    check_gather_scatter(&w)?;
    check_alltoall(&w)?;
    check_noncommutative(&w)?;
    check_reproducible(&w)?;
    check_communicators(&w)?;
    w.barrier()?;
    println!("rank {me} of {p}: coll ok");
    universe.finalize()
}

fn check_bcast(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    for n in sizes() {
        for root in [0, p - 1, p / 2] {
            let want: Vec<u8> = (0..n).map(|i| (input(root, i) & 0xff) as u8).collect();
            let mut buf = if me == root { want.clone() } else { vec![0u8; n] };
            w.bcast(&mut buf, root)?;
            assert!(buf == want, "bcast of {n} bytes from {root}: wrong content on rank {me}");
        }
    }
    Ok(())
}

fn check_reduce_allreduce(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    for n in sizes() {
        let mine: Vec<i64> = (0..n).map(|i| input(me, i)).collect();
        let sum: Vec<i64> = (0..n).map(|i| (0..p).map(|r| input(r, i)).sum()).collect();
        let max: Vec<i64> = (0..n).map(|i| (0..p).map(|r| input(r, i)).max().unwrap()).collect();
        let mut out = vec![0i64; n];
        w.allreduce(&mine, &mut out, Sum)?;
        assert!(out == sum, "allreduce sum i64 n={n} on rank {me}");
        w.allreduce(&mine, &mut out, Max)?;
        assert!(out == max, "allreduce max i64 n={n} on rank {me}");
        // f64 and in place; i32 min; u8 bitwise or
        let mut f: Vec<f64> = mine.iter().map(|&x| x as f64).collect();
        w.allreduce_in_place(&mut f, Sum)?;
        assert!(f.iter().zip(&sum).all(|(a, &b)| *a == b as f64), "allreduce f64 n={n} on rank {me}");
        let m32: Vec<i32> = mine.iter().map(|&x| x as i32).collect();
        let mut o32 = vec![0i32; n];
        w.allreduce(&m32, &mut o32, Min)?;
        assert!(o32.iter().enumerate().all(|(i, &v)| v as i64 == (0..p).map(|r| input(r, i)).min().unwrap()));
        let bits: Vec<u8> = (0..n).map(|i| 1u8 << ((me + i) % 8)).collect();
        let mut ob = vec![0u8; n];
        w.allreduce(&bits, &mut ob, mpr::BitOr)?;
        for (i, &v) in ob.iter().enumerate() {
            let want = (0..p).fold(0u8, |a, r| a | 1u8 << ((r + i) % 8));
            assert_eq!(v, want, "bor n={n} i={i}");
        }
        // reduce to every root
        for root in 0..p {
            let mut r = vec![0i64; n];
            w.reduce(&mine, if me == root { Some(&mut r[..]) } else { None }, Sum, root)?;
            if me == root {
                assert!(r == sum, "reduce sum n={n} root {root}");
            }
        }
        // products of small numbers
        let small: Vec<i64> = (0..n.min(100)).map(|i| ((me + i) % 3) as i64 + 1).collect();
        let mut prod = vec![0i64; small.len()];
        w.allreduce(&small, &mut prod, Prod)?;
        for (i, &v) in prod.iter().enumerate() {
            assert_eq!(v, (0..p).map(|r| ((r + i) % 3) as i64 + 1).product::<i64>());
        }
    }
    Ok(())
}

fn check_gather_scatter(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    for n in sizes().into_iter().filter(|&n| n <= 70_000) {
        let mine: Vec<i64> = (0..n).map(|i| input(me, i)).collect();
        let all: Vec<i64> = (0..p).flat_map(|r| (0..n).map(move |i| input(r, i))).collect();
        let mut out = vec![0i64; n * p];
        w.allgather(&mine, &mut out)?;
        assert!(out == all, "allgather n={n} on rank {me}");
        for root in [0, p - 1] {
            let mut g = vec![0i64; n * p];
            w.gather(&mine, if me == root { Some(&mut g[..]) } else { None }, root)?;
            if me == root {
                assert!(g == all, "gather n={n} root {root}");
            }
            let mut s = vec![0i64; n];
            w.scatter(if me == root { Some(&all[..]) } else { None }, &mut s, root)?;
            assert!(s == mine, "scatter n={n} root {root} on rank {me}");
        }
    }
    Ok(())
}

fn check_alltoall(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    for n in [0usize, 1, 3, 1000, 20_000] {
        // block j of rank r holds (r, j, i)
        let val = |r: usize, j: usize, i: usize| (r * 1_000_000 + j * 10_000 + i % 10_000) as i64;
        let send: Vec<i64> = (0..p).flat_map(|j| (0..n).map(move |i| val(me, j, i))).collect();
        let mut recv = vec![0i64; n * p];
        w.alltoall(&send, &mut recv)?;
        let want: Vec<i64> = (0..p).flat_map(|i_src| (0..n).map(move |i| val(i_src, me, i))).collect();
        assert!(recv == want, "alltoall n={n} on rank {me}");
    }
    Ok(())
}

/// A non-commutative operation: 2x2 integer matrix products, which must come out in rank order.
fn check_noncommutative(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let mat = |r: usize| -> [i64; 4] { [1, (r % 3) as i64, (r % 2) as i64, 1] };
    let mul = |a: &[i64], b: &[i64]| {
        [a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]]
    };
    let op = UserOp::new(
        |acc: &mut [i64], x: &[i64]| {
            for (a, b) in acc.chunks_mut(4).zip(x.chunks(4)) {
                let m = mul(a, b);
                a.copy_from_slice(&m);
            }
        },
        false,
    );
    let want = (1..p).fold(mat(0), |acc, r| mul(&acc, &mat(r)));
    let mut out = [0i64; 4];
    w.allreduce(&mat(me), &mut out, op)?;
    assert_eq!(out, want, "non-commutative allreduce on rank {me}");
    for root in 0..p {
        let mut r = [0i64; 4];
        w.reduce(&mat(me), if me == root { Some(&mut r[..]) } else { None }, op, root)?;
        if me == root {
            assert_eq!(r, want, "non-commutative reduce to {root}");
        }
    }
    Ok(())
}

/// Float sums: bit-identical on every rank and on every repetition.
fn check_reproducible(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    for n in [3usize, 5000, 100_000] {
        let mine: Vec<f64> =
            (0..n).map(|i| ((me * 31 + i * 17) as f64).sin() * 1e-3 + 1e3 / (1.0 + i as f64)).collect();
        let mut first = vec![0f64; n];
        w.allreduce(&mine, &mut first, Sum)?;
        for _ in 0..3 {
            let mut again = vec![0f64; n];
            w.allreduce(&mine, &mut again, Sum)?;
            assert!(first.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "repeat differs n={n}");
        }
        let digest: u64 = first.iter().fold(0u64, |h, x| h.rotate_left(5) ^ x.to_bits());
        let mut all = vec![0u64; p];
        w.allgather(&[digest], &mut all)?;
        assert!(all.iter().all(|&d| d == digest), "ranks disagree on the bits of the sum n={n}");
    }
    Ok(())
}

fn check_communicators(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    // dup: same tag and peers, different communicator: never cross.
    let d = w.dup()?;
    assert_eq!((d.rank(), d.size()), (me, p));
    if p >= 2 {
        if me == 0 {
            d.send(&[222u32], 1, 5)?;
            w.send(&[111u32], 1, 5)?;
        } else if me == 1 {
            let mut a = [0u32];
            w.recv(&mut a, 0, 5)?;
            assert_eq!(a[0], 111, "world receive matched a message of the dup");
            d.recv(&mut a, 0, mpr::ANY_TAG)?;
            assert_eq!(a[0], 222);
        }
    }
    // split by parity, reversed order; undefined color for the last rank when p > 2.
    let color = if p > 2 && me == p - 1 { None } else { Some((me % 2) as u32) };
    let s = w.split(color, -(me as i32))?;
    match (color, s) {
        (None, None) => {}
        (Some(c), Some(s)) => {
            let members: Vec<usize> = (0..p).filter(|&r| !(p > 2 && r == p - 1) && r % 2 == c as usize).rev().collect();
            assert_eq!(s.size(), members.len());
            assert_eq!(members[s.rank()], me, "split order by key");
            let mut v = [me as u64];
            s.bcast(&mut v, 0)?;
            assert_eq!(v[0], members[0] as u64, "bcast within the split");
            let mut sum = [0u64];
            s.allreduce(&[me as u64], &mut sum, Sum)?;
            assert_eq!(sum[0], members.iter().map(|&r| r as u64).sum::<u64>());
            let sd = s.dup()?;
            sd.barrier()?;
        }
        (c, s) => panic!("split gave {:?} for color {c:?}", s.map(|s| s.size())),
    }
    d.barrier()?;
    Ok(())
}
