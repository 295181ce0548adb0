//! Collective conformance checks, run as the ranks of a job: `mprun -np N coll`.
//! Every result is compared with a sequential reference computed here from the same
//! deterministic inputs; any mismatch panics (non-zero exit) with the details.

use mpr::topo::{dims_create, Edge, Grid};
use mpr::{Comm, Communicator, Max, Min, Prod, Sum, UserOp};

/// Input element `i` of rank `r` (small integers, so float sums are exact too).
fn input(r: usize, i: usize) -> i64 {
    ((r * 7919 + i * 104_729) % 1000) as i64 - 500
}

fn sizes() -> Vec<usize> {
    let max: usize = std::env::var("COLL_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(300_000);
    [0usize, 1, 2, 7, 30, 100, 5000, 70_000, max].into_iter().filter(|&n| n <= max).collect()
}

fn main() -> mpr::Result<()> {
    let universe = mpr::init()?;
    let w = universe.world();
    let (me, p) = (w.rank(), w.size());

    w.barrier()?;
    check_barrier(&w)?;
    check_bcast(&w)?;
    check_bcast_mismatch(&w)?;
    check_rooted_mismatch(&w)?;
    check_reduce_allreduce(&w)?;
    check_page_offsets(&w)?;
    check_gather_scatter(&w)?;
    check_alltoall(&w)?;
    check_noncommutative(&w)?;
    check_reproducible(&w)?;
    check_communicators(&w)?;
    check_vector_variants(&w)?;
    check_prefix_and_reduce_scatter(&w)?;
    check_loc_and_half(&w)?;
    check_groups(&w)?;
    check_nonblocking(&w)?;
    check_idup(&w)?;
    check_cartesian(&w)?;
    w.barrier()?;
    println!("rank {me} of {p}: coll ok");
    universe.finalize()
}

/// A barrier holds every rank until the last one enters: the first rank and the last one
/// come late in turn, and each other rank must wait for it.
///
/// Not under injected loss (`MPR_SOFT_LOSS`): a lost message can hold a rank in the first
/// barrier for a retransmission timeout longer than the late rank sleeps, and the times then
/// cannot tell that from a barrier that let it go early.
fn check_barrier(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    if std::env::var("MPR_SOFT_LOSS").ok().and_then(|v| v.parse::<f64>().ok()).is_some_and(|l| l > 0.0) {
        return w.barrier();
    }
    let late = std::time::Duration::from_millis(100);
    for slow in [p - 1, 0] {
        w.barrier()?;
        if me == slow {
            std::thread::sleep(late);
        }
        let t0 = std::time::Instant::now();
        w.barrier()?;
        let waited = t0.elapsed();
        if me != slow {
            assert!(waited >= late / 2, "rank {me} left the barrier after {waited:?}, rank {slow} came {late:?} late");
        }
    }
    Ok(())
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
    // Back to back, every size class of the shared-memory path (inline line, LL lines,
    // slot parts taking turns), roots changing, with all-reduces (which use the slots too)
    // in between: every buffer must arrive whole, whichever part of the segment it went by.
    for i in 0..96usize {
        let n = [57, 300, 560, 561, 3000, 9000, 40_000, 65_536, 56, 8][i % 10];
        let root = (i * 7) % p;
        let want: Vec<u8> = (0..n).map(|j| (input(root, i + j) & 0xff) as u8).collect();
        let mut buf = if me == root { want.clone() } else { vec![0u8; n] };
        w.bcast(&mut buf, root)?;
        assert!(buf == want, "bcast #{i} of {n} bytes from {root}: wrong content on rank {me}");
        if i % 3 == 0 {
            let mut v = vec![(me + i) as u64; 1 + i * 50];
            w.allreduce_in_place(&mut v, mpr::Sum)?;
            let sum: u64 = (0..p).map(|r| (r + i) as u64).sum();
            assert!(v.iter().all(|&x| x == sum), "allreduce #{i} between broadcasts on rank {me}");
        }
        // Allgathers and all-to-alls of every size class too (inline, LL lines, slots).
        if i % 3 == 1 {
            let m = [1, 7, 8, 40, 70, 200][(i / 3) % 6];
            let mine: Vec<u64> = (0..m).map(|j| (me * 1000 + i + j) as u64).collect();
            let mut all = vec![0u64; m * p];
            w.allgather(&mine, &mut all)?;
            let want: Vec<u64> = (0..p).flat_map(|r| (0..m).map(move |j| (r * 1000 + i + j) as u64)).collect();
            assert!(all == want, "allgather #{i} of {m} elements between broadcasts on rank {me}");
            let send: Vec<u64> = (0..p * m).map(|j| (me * 100_000 + i * 100 + j) as u64).collect();
            let mut got = vec![0u64; p * m];
            w.alltoall(&send, &mut got)?;
            let want: Vec<u64> =
                (0..p).flat_map(|r| (0..m).map(move |j| (r * 100_000 + i * 100 + me * m + j) as u64)).collect();
            assert!(got == want, "alltoall #{i} of {m} elements per block between broadcasts on rank {me}");
        }
    }
    Ok(())
}

/// Broadcasts whose ranks' counts differ (an erroneous program, which MPI lets an
/// implementation report): every rank whose count differs from the root's gets
/// `Error::Mismatch` (never a hang, never silence), for every pair of the paths a broadcast
/// takes (inline line, LL lines, slot parts, in several turns, point to point), blocking and
/// nonblocking; and every rank stays in step, so the collectives after it work.
fn check_bcast_mismatch(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    if p == 1 {
        return Ok(());
    }
    let lens = [4usize, 40, 400, 3000, 100_000];
    let mut pairs: Vec<(usize, usize)> =
        lens.iter().flat_map(|&a| lens.iter().filter(move |&&b| b != a).map(move |&b| (a, b))).collect();
    pairs.extend([(300_000, 100_000), (100_000, 300_000), (0, 8), (8, 0)]);
    for (i, &(theirs, ours)) in pairs.iter().enumerate() {
        let root = [0, p - 1][i % 2];
        // Every other rank wrong, or (odd pairs) only the rank after the root.
        let wrong = |r: usize| r != root && (i % 4 < 2 || r == (root + 1) % p);
        let n = if me == root || !wrong(me) { theirs } else { ours };
        let mut buf: Vec<u8> = (0..n).map(|j| if me == root { (j % 251) as u8 } else { 0 }).collect();
        let r = if i % 3 == 2 { mpr::scope(|s| w.ibcast(s, &mut buf, root)?.wait()) } else { w.bcast(&mut buf, root) };
        let ok = r.is_ok();
        match r {
            Err(mpr::Error::Mismatch { from, buffer, message }) => {
                assert_eq!(buffer, n, "rank {me}, pair {i}: the mismatch's buffer");
                assert!(from < p && message != Some(n), "rank {me}, pair {i}: {from} {message:?}");
            }
            Err(e) => panic!("rank {me}, pair {i} ({theirs} B from {root}, {n} B here): {e}"),
            Ok(()) => assert!(!wrong(me), "rank {me}, pair {i}: {n} B here, {theirs} B from {root}: no error"),
        }
        if ok && me != root {
            assert!(buf.iter().enumerate().all(|(j, &b)| b == (j % 251) as u8), "rank {me}, pair {i}: the bytes");
        }
        in_step(w, root, i as u8, &format!("pair {i}"))?;
    }
    Ok(())
}

/// That the ranks are still in step after a collective that failed (`after`): a broadcast
/// of `mark` from `root` and an all-reduce are right on every rank.
fn in_step(w: &Comm, root: usize, mark: u8, after: &str) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let mut v: Vec<u8> = if me == root { vec![mark; 100] } else { vec![0; 100] };
    w.bcast(&mut v, root)?;
    assert!(v.iter().all(|&b| b == mark), "rank {me}: the broadcast after {after}");
    let mut sum = [me as u64];
    w.allreduce_in_place(&mut sum, mpr::Sum)?;
    assert_eq!(sum[0], (p * (p - 1) / 2) as u64, "rank {me}: the all-reduce after {after}");
    Ok(())
}

/// Gathers and scatters (blocking, nonblocking, v-forms), allgathers and all-to-alls whose
/// ranks' counts differ: the ranks that can see it (a gather's root, a scatter's receivers,
/// a rank whose own two counts differ) get `Mismatch`, every other rank its blocks, and none
/// waits for ever.
fn check_rooted_mismatch(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    if p == 1 {
        return Ok(());
    }
    let byte = |r: usize, j: usize| (r * 7 + j % 251) as u8;
    let pairs = [(4usize, 40usize), (40, 4), (100_000, 4000), (4000, 100_000), (0, 8), (8, 0)];
    for (i, &(theirs, ours)) in pairs.iter().enumerate() {
        let root = [0, p - 1][i % 2];
        for kind in 0..15 {
            // Kinds 0-5: every other rank but the root is wrong (gather, igather, gatherv,
            // scatter, iscatter, scatterv); 6-14: only the root's own counts differ (gather,
            // scatter, igatherv, iscatterv, an iallgatherv whose every rank sees it, an
            // allgather and an all-to-all where only the root does, an iallgather and an
            // ialltoall where every rank does).
            let own = kind >= 6;
            let wrong = |r: usize| if own { r == root } else { r != root && r % 2 == 1 };
            let n = if wrong(me) { ours } else { theirs };
            let counts = vec![theirs; p];
            let displs: Vec<usize> = (0..p).map(|r| r * theirs).collect();
            let gather = matches!(kind, 0..=2 | 6 | 8);
            let r = if kind == 10 {
                let send: Vec<u8> = (0..n).map(|j| byte(me, j)).collect();
                let mut recv = vec![0u8; theirs * p];
                let r = mpr::scope(|s| w.iallgatherv(s, &send, &mut recv, &counts, &displs)?.wait());
                for q in (0..p).filter(|&q| !wrong(q)) {
                    let block = &recv[q * theirs..(q + 1) * theirs];
                    assert!(
                        block.iter().enumerate().all(|(j, &b)| b == byte(q, j)),
                        "rank {me}, pair {i}, kind {kind}: block {q}"
                    );
                }
                r
            } else if kind >= 11 {
                // Allgather: rank q's block holds byte(q, ..); all-to-all: its block j holds
                // byte(q, ..) ^ j.
                let mut recv = vec![0u8; theirs * p];
                let gathered: Vec<u8> = (0..n).map(|j| byte(me, j)).collect();
                let spread: Vec<u8> = (0..n * p).map(|x| byte(me, x % n.max(1)) ^ (x / n.max(1)) as u8).collect();
                let r = match kind {
                    11 => w.allgather(&gathered, &mut recv),
                    12 => w.alltoall(&spread, &mut recv),
                    13 => mpr::scope(|s| w.iallgather(s, &gathered, &mut recv)?.wait()),
                    _ => mpr::scope(|s| w.ialltoall(s, &spread, &mut recv)?.wait()),
                };
                let to = if kind % 2 == 1 { 0 } else { me as u8 };
                // The iallgather's ring passes the mismatch on instead of the blocks.
                for q in (0..p).filter(|&q| !wrong(q) && kind != 13) {
                    let block = &recv[q * theirs..(q + 1) * theirs];
                    assert!(
                        block.iter().enumerate().all(|(j, &b)| b == byte(q, j) ^ to),
                        "rank {me}, pair {i}, kind {kind}: block {q}"
                    );
                }
                r
            } else if gather {
                let send: Vec<u8> = (0..n).map(|j| byte(me, j)).collect();
                let mut recv = vec![0u8; if me == root { theirs * p } else { 0 }];
                let out = (me == root).then_some(&mut recv[..]);
                let r = match kind {
                    1 => mpr::scope(|s| w.igather(s, &send, out, root)?.wait()),
                    2 => w.gatherv(&send, out.map(|o| (o, &counts[..], &displs[..])), root),
                    8 => mpr::scope(|s| w.igatherv(s, &send, out.map(|o| (o, &counts[..], &displs[..])), root)?.wait()),
                    _ => w.gather(&send, out, root),
                };
                if me == root {
                    for q in (0..p).filter(|&q| !wrong(q)) {
                        let block = &recv[q * theirs..(q + 1) * theirs];
                        assert!(
                            block.iter().enumerate().all(|(j, &b)| b == byte(q, j)),
                            "rank {me}, pair {i}, kind {kind}: block {q}"
                        );
                    }
                }
                r
            } else {
                let send: Vec<u8> = (0..theirs * p).map(|j| byte(j / theirs.max(1), j % theirs.max(1))).collect();
                let mut recv = vec![0u8; n];
                let input = (me == root).then_some(&send[..]);
                let r = match kind {
                    4 => mpr::scope(|s| w.iscatter(s, input, &mut recv, root)?.wait()),
                    5 => w.scatterv(input.map(|s| (s, &counts[..], &displs[..])), &mut recv, root),
                    9 => mpr::scope(|s| {
                        w.iscatterv(s, input.map(|s| (s, &counts[..], &displs[..])), &mut recv, root)?.wait()
                    }),
                    _ => w.scatter(input, &mut recv, root),
                };
                if !wrong(me) {
                    assert!(
                        recv.iter().enumerate().all(|(j, &b)| b == byte(me, j)),
                        "rank {me}, pair {i}, kind {kind}: the block"
                    );
                }
                r
            };
            // Who sees the mismatch: the root of a gather (of another rank's count, or its
            // own), the wrong ranks of a scatter (the root, of its own counts), every rank of
            // the iallgatherv (the root of its own counts, the others of its block), the root
            // of the allgather and the all-to-all (the others get its block padded or cut),
            // every rank of the iallgather and the ialltoall (its blocks as they are).
            let sees = if kind == 10 || kind >= 13 {
                true
            } else if gather {
                me == root && (0..p).any(wrong)
            } else {
                wrong(me)
            };
            match r {
                Err(mpr::Error::Mismatch { from, buffer, message }) => {
                    assert!(sees, "rank {me}, pair {i}, kind {kind}: a mismatch it cannot see");
                    assert!(
                        from < p && message.is_some() && message != Some(buffer),
                        "rank {me}, pair {i}, kind {kind}: {from} {buffer} {message:?}"
                    );
                }
                Err(e) => panic!("rank {me}, pair {i}, kind {kind}: {e}"),
                Ok(()) => assert!(!sees, "rank {me}, pair {i}, kind {kind}: no error"),
            }
            in_step(w, root, kind as u8, &format!("pair {i}, kind {kind}"))?;
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

/// `n` elements of `store` starting `off` bytes past a page boundary.
fn at_offset<T: Copy + Default>(store: &mut Vec<T>, n: usize, off: usize) -> &mut [T] {
    let size = std::mem::size_of::<T>();
    *store = vec![T::default(); n + (4096 + off) / size + 1];
    let addr = store.as_ptr() as usize;
    let at = (addr.next_multiple_of(4096) - addr) / size + off / size;
    &mut store[at..at + n]
}

/// Collectives between buffers at different offsets within a page on each rank (the copies a
/// short distance apart go in pieces, `copy::near`): the results are those of the reference,
/// through every path by size (inline lines, LL lines, slots, ring).
fn check_page_offsets(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let offsets = [0usize, 16, 4080, 8, 48];
    let max: usize = std::env::var("COLL_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(300_000);
    for (round, n) in [300usize, 5000, 70_000, max].into_iter().filter(|&n| n <= max).enumerate() {
        let (so, ro) = (offsets[(me + round) % offsets.len()], offsets[(me + 2 * round + 1) % offsets.len()]);
        let (mut ss, mut rs) = (Vec::new(), Vec::new());
        let send = at_offset::<i64>(&mut ss, n, so);
        for (i, x) in send.iter_mut().enumerate() {
            *x = input(me, i);
        }
        let recv = at_offset::<i64>(&mut rs, n, ro);
        w.allreduce(send, recv, Sum)?;
        assert!(
            recv.iter().enumerate().all(|(i, &v)| v == (0..p).map(|r| input(r, i)).sum::<i64>()),
            "allreduce of {n} i64 from offset {so} into offset {ro} on rank {me}"
        );
        w.allreduce_in_place(send, Max)?;
        assert!(
            send.iter().enumerate().all(|(i, &v)| v == (0..p).map(|r| input(r, i)).max().unwrap()),
            "in-place allreduce of {n} i64 at offset {so} on rank {me}"
        );
        let bytes = n * 8;
        let mut bs = Vec::new();
        let b = at_offset::<u8>(&mut bs, bytes, ro);
        let root = round % p;
        for (i, x) in b.iter_mut().enumerate() {
            *x = if me == root { (i * 31 + root) as u8 } else { 0 };
        }
        w.bcast(b, root)?;
        assert!(b.iter().enumerate().all(|(i, &x)| x == (i * 31 + root) as u8), "bcast of {bytes} B at offset {ro}");
        let blk = (bytes / p).min(64 << 10);
        let mut gs = Vec::new();
        let mine: Vec<u8> = (0..blk).map(|i| (i + me * 7) as u8).collect();
        let all = at_offset::<u8>(&mut gs, blk * p, so);
        w.allgather(&mine, all)?;
        for r in 0..p {
            assert!(
                all[r * blk..(r + 1) * blk].iter().enumerate().all(|(i, &x)| x == (i + r * 7) as u8),
                "allgather block {r} of {blk} B at offset {so} on rank {me}"
            );
        }
        let mut ts = Vec::new();
        let out: Vec<u8> = (0..blk * p).map(|i| (i / blk * 13 + me * 5 + i % blk) as u8).collect();
        let got = at_offset::<u8>(&mut ts, blk * p, ro);
        w.alltoall(&out, got)?;
        for r in 0..p {
            assert!(
                got[r * blk..(r + 1) * blk].iter().enumerate().all(|(i, &x)| x == (me * 13 + r * 5 + i) as u8),
                "alltoall block from {r} of {blk} B at offset {ro} on rank {me}"
            );
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
    for n in [0usize, 1, 3, 20, 1000, 20_000] {
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

fn check_vector_variants(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    // Rank r contributes r*3+1 elements; blocks laid out with a gap of 2 between them.
    let counts: Vec<usize> = (0..p).map(|r| r * 3 + 1).collect();
    let displs: Vec<usize> = counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c + 2))).collect();
    let total = displs[p - 1] + counts[p - 1];
    let mine: Vec<i64> = (0..counts[me]).map(|i| input(me, i)).collect();
    let mut want = vec![-1i64; total];
    for r in 0..p {
        for i in 0..counts[r] {
            want[displs[r] + i] = input(r, i);
        }
    }
    let mut all = vec![-1i64; total];
    w.allgatherv(&mine, &mut all, &counts, &displs)?;
    assert!(all == want, "allgatherv on rank {me}");
    // The same blocks laid out in reverse rank order.
    let rev: Vec<usize> = (0..p).map(|r| total - displs[r] - counts[r]).collect();
    let mut all = vec![-1i64; total];
    w.allgatherv(&mine, &mut all, &counts, &rev)?;
    for r in 0..p {
        let block: Vec<i64> = (0..counts[r]).map(|i| input(r, i)).collect();
        assert!(all[rev[r]..rev[r] + counts[r]] == block[..], "allgatherv (reversed) block {r} on rank {me}");
    }
    // Overlapping blocks are refused on every rank, before anything is sent.
    if p > 1 {
        let mut over = displs.clone();
        over[1] = displs[0];
        let e = w.allgatherv(&mine, &mut all, &counts, &over).expect_err("overlapping allgatherv blocks");
        assert!(e.to_string().contains("the blocks of ranks 0 and 1 overlap"), "{e}");
    }
    for root in [0, p - 1] {
        let mut g = vec![-1i64; total];
        w.gatherv(&mine, if me == root { Some((&mut g[..], &counts[..], &displs[..])) } else { None }, root)?;
        if me == root {
            assert!(g == want, "gatherv root {root}");
        }
        let mut s = vec![0i64; counts[me]];
        w.scatterv(if me == root { Some((&want[..], &counts[..], &displs[..])) } else { None }, &mut s, root)?;
        assert!(s == mine, "scatterv root {root} on rank {me}");
    }
    // alltoallv: rank r sends (r + j) % 3 + 1 elements to rank j.
    let cnt = |r: usize, j: usize| (r + j) % 3 + 1;
    let scounts: Vec<usize> = (0..p).map(|j| cnt(me, j)).collect();
    let sdispls: Vec<usize> = scounts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
    let rcounts: Vec<usize> = (0..p).map(|i| cnt(i, me)).collect();
    let rdispls: Vec<usize> = rcounts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
    let send: Vec<i64> = (0..p).flat_map(|j| (0..cnt(me, j)).map(move |k| (me * 100 + j * 10 + k) as i64)).collect();
    let mut recv = vec![0i64; rcounts.iter().sum()];
    w.alltoallv(&send, &scounts, &sdispls, &mut recv, &rcounts, &rdispls)?;
    let want: Vec<i64> = (0..p).flat_map(|i| (0..cnt(i, me)).map(move |k| (i * 100 + me * 10 + k) as i64)).collect();
    assert!(recv == want, "alltoallv on rank {me}");
    // The same blocks received in reverse rank order, those from rank 1 left out (zero count).
    let rcounts: Vec<usize> = (0..p).map(|i| if i == 1 { 0 } else { cnt(i, me) }).collect();
    let mut rdispls = vec![0; p];
    let mut at = 0;
    for i in (0..p).rev() {
        rdispls[i] = at;
        at += rcounts[i];
    }
    let scounts: Vec<usize> = (0..p).map(|j| if me == 1 { 0 } else { cnt(me, j) }).collect();
    let mut recv = vec![-1i64; at];
    w.alltoallv(&send, &scounts, &sdispls, &mut recv, &rcounts, &rdispls)?;
    let want: Vec<i64> = (0..p)
        .rev()
        .filter(|&i| i != 1)
        .flat_map(|i| (0..cnt(i, me)).map(move |k| (i * 100 + me * 10 + k) as i64))
        .collect();
    assert!(recv == want, "alltoallv (blocks in reverse order) on rank {me}");
    Ok(())
}

fn check_prefix_and_reduce_scatter(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let n = 5;
    let mine: Vec<i64> = (0..n * p).map(|i| input(me, i)).collect();
    let mut block = vec![0i64; n];
    w.reduce_scatter_block(&mine, &mut block, Sum)?;
    for (k, &v) in block.iter().enumerate() {
        assert_eq!(v, (0..p).map(|r| input(r, me * n + k)).sum::<i64>(), "reduce_scatter_block");
    }
    let counts: Vec<usize> = (0..p).map(|r| r + 1).collect();
    let total: usize = counts.iter().sum();
    let mine: Vec<i64> = (0..total).map(|i| input(me, i)).collect();
    let mut part = vec![0i64; counts[me]];
    w.reduce_scatter(&mine, &mut part, &counts, Sum)?;
    let start: usize = counts[..me].iter().sum();
    for (k, &v) in part.iter().enumerate() {
        assert_eq!(v, (0..p).map(|r| input(r, start + k)).sum::<i64>(), "reduce_scatter");
    }
    // Scans with a non-commutative op: the result lists the ranks in order.
    let concat = UserOp::new(|acc: &mut [u64], x: &[u64]| acc[0] = acc[0] * 10 + x[0], false);
    let mut s = [0u64];
    w.scan(&[me as u64 + 1], &mut s, concat)?;
    let want = (1..=me as u64 + 1).fold(0, |a, d| a * 10 + d);
    assert_eq!(s[0], want, "scan on rank {me}");
    let mut e = [777u64];
    w.exscan(&[me as u64 + 1], &mut e, concat)?;
    if me == 0 {
        assert_eq!(e[0], 777, "exscan leaves rank 0 alone");
    } else {
        assert_eq!(e[0], (1..=me as u64).fold(0, |a, d| a * 10 + d), "exscan on rank {me}");
    }
    Ok(())
}

fn check_loc_and_half(w: &Comm) -> mpr::Result<()> {
    use mpr::half::{bf16, f16};
    use mpr::{Loc, MaxLoc, MinLoc};
    let (me, p) = (w.rank(), w.size());
    let v = |r: usize| ((r * 37) % 5) as f64;
    let mut lo = [Loc::default()];
    w.allreduce(&[Loc { value: v(me), index: me as f64 }], &mut lo, MinLoc)?;
    let min = (0..p).map(v).fold(f64::MAX, f64::min);
    assert_eq!(lo[0], Loc { value: min, index: (0..p).find(|&r| v(r) == min).unwrap() as f64 }, "minloc");
    let mut hi = [Loc::default()];
    w.allreduce(&[Loc { value: v(me) as i32, index: me as i32 }], &mut hi, MaxLoc)?;
    let max = (0..p).map(|r| v(r) as i32).max().unwrap();
    assert_eq!(hi[0], Loc { value: max, index: (0..p).find(|&r| v(r) as i32 == max).unwrap() as i32 }, "maxloc");
    // Half-precision sums of small integers are exact.
    let mut h = [f16::ZERO; 3];
    w.allreduce(&[f16::from_f32(me as f32); 3], &mut h, Sum)?;
    assert!(h.iter().all(|x| x.to_f32() == (0..p).sum::<usize>() as f32), "f16 sum");
    let mut b = [bf16::ZERO; 3];
    w.allreduce(&[bf16::from_f32(1.0); 3], &mut b, Sum)?;
    assert!(b.iter().all(|x| x.to_f32() == p as f32), "bf16 sum");
    Ok(())
}

fn check_groups(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let g = w.comm_group();
    assert_eq!(g.size(), p);
    // Every other rank, in reverse order.
    let picks: Vec<usize> = (0..p).filter(|r| r % 2 == 0).rev().collect();
    let sub = g.incl(&picks)?;
    let rest = g.excl(&picks)?;
    assert_eq!(sub.size() + rest.size(), p);
    let t = g.translate_ranks(&(0..p).collect::<Vec<_>>(), &sub)?;
    for (r, tr) in t.iter().enumerate() {
        assert_eq!(*tr, picks.iter().position(|&x| x == r), "translate rank {r}");
    }
    assert!(g.incl(&[p]).is_err(), "incl of a rank out of range is an error");
    // Set operations keep the first group's order, then the second's.
    let all: Vec<usize> = (0..p).collect();
    let in_world = |h: &mpr::Group| -> Vec<usize> {
        h.translate_ranks(&(0..h.size()).collect::<Vec<_>>(), &g).unwrap().into_iter().map(Option::unwrap).collect()
    };
    let odds: Vec<usize> = all.iter().copied().filter(|r| r % 2 == 1).collect();
    assert_eq!(in_world(&sub.union(&g)), picks.iter().copied().chain(odds.iter().copied()).collect::<Vec<_>>());
    assert_eq!(in_world(&g.intersection(&sub)), all.iter().copied().filter(|r| r % 2 == 0).collect::<Vec<_>>());
    assert_eq!(in_world(&g.difference(&sub)), odds);
    assert_eq!(in_world(&rest), odds);
    let down = g.ranges(&[(p as i64 - 1, 0, -2)])?;
    assert_eq!(down, (0..p).rev().step_by(2).collect::<Vec<_>>());
    assert_eq!(g.ranges(&[(0, 0, 0)]).unwrap_err().class(), mpr::ErrorClass::Arg, "a stride of 0");
    assert_eq!(g.ranges(&[(0, p as i64, 1)]).unwrap_err().class(), mpr::ErrorClass::Arg, "past the end");
    match w.create(&sub)? {
        Some(c) => {
            assert_eq!(c.rank(), picks.iter().position(|&x| x == me).unwrap(), "create keeps the group order");
            let mut s = [0u64];
            c.allreduce(&[me as u64], &mut s, Sum)?;
            assert_eq!(s[0], picks.iter().map(|&r| r as u64).sum::<u64>());
        }
        None => assert!(me % 2 == 1, "rank {me} is a member but got no communicator"),
    }
    Ok(())
}

fn check_nonblocking(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    for n in [0usize, 1, 7, 5000, 70_000] {
        let mine: Vec<i64> = (0..n).map(|i| input(me, i)).collect();
        let sum: Vec<i64> = (0..n).map(|i| (0..p).map(|r| input(r, i)).sum()).collect();
        let all: Vec<i64> = (0..p).flat_map(|r| (0..n).map(move |i| input(r, i))).collect();
        let mut red = vec![0i64; n];
        let mut gat = vec![0i64; n * p];
        let mut bc: Vec<i64> = if me == p / 2 { all[..n].to_vec() } else { vec![0; n] };
        let a2a_send: Vec<i64> = (0..p).flat_map(|j| (0..n).map(move |i| (me * 1000 + j) as i64 + i as i64)).collect();
        let mut a2a = vec![0i64; n * p];
        mpr::scope(|s| -> mpr::Result<()> {
            // Several collectives in flight at once, completed in another order.
            let r1 = w.iallreduce(s, &mine, &mut red, Sum)?;
            let r2 = w.iallgather(s, &mine, &mut gat)?;
            let r3 = w.ibcast(s, &mut bc, p / 2)?;
            let r4 = w.ialltoall(s, &a2a_send, &mut a2a)?;
            let r5 = w.ibarrier(s)?;
            r5.wait()?;
            r3.wait()?;
            let mut r2 = r2;
            loop {
                match r2.test() {
                    Ok(r) => break r?,
                    Err(back) => r2 = back,
                }
            }
            r4.wait()?;
            r1.wait()
        })?;
        assert!(red == sum, "iallreduce n={n} on rank {me}");
        assert!(gat == all, "iallgather n={n} on rank {me}");
        assert!(bc == all[..n], "ibcast n={n} on rank {me}");
        let want: Vec<i64> = (0..p).flat_map(|i| (0..n).map(move |k| (i * 1000 + me) as i64 + k as i64)).collect();
        assert!(a2a == want, "ialltoall n={n} on rank {me}");
    }
    // Non-commutative (2x2 matrix products), in rank order.
    let mat = |r: usize| -> [i64; 4] { [1, (r % 3) as i64, (r % 2) as i64, 1] };
    let mul = |a: &[i64], b: &[i64]| {
        [a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]]
    };
    let matop = UserOp::new(
        move |acc: &mut [i64], x: &[i64]| {
            let m = mul(acc, x);
            acc.copy_from_slice(&m);
        },
        false,
    );
    let mut out = [0i64; 4];
    let mine = mat(me);
    mpr::scope(|s| w.iallreduce(s, &mine, &mut out, matop)?.wait())?;
    let want = (1..p).fold(mat(0), |acc, r| mul(&acc, &mat(r)));
    assert_eq!(out, want, "non-commutative iallreduce");
    for root in [0, p - 1] {
        let mut r = [0i64; 4];
        mpr::scope(|s| w.ireduce(s, &mine, if me == root { Some(&mut r[..]) } else { None }, matop, root)?.wait())?;
        if me == root {
            assert_eq!(r, want, "non-commutative ireduce to {root}");
        }
    }
    for n in [0usize, 3, 5000] {
        let v: Vec<i64> = (0..n).map(|i| input(me, i)).collect();
        let sum: Vec<i64> = (0..n).map(|i| (0..p).map(|r| input(r, i)).sum()).collect();
        let all: Vec<i64> = (0..p).flat_map(|r| (0..n).map(move |i| input(r, i))).collect();
        for root in 0..p {
            let mut r = vec![0i64; n];
            let mut g = vec![0i64; n * p];
            let mut sc = vec![0i64; n];
            mpr::scope(|s| -> mpr::Result<()> {
                let a = w.ireduce(s, &v, if me == root { Some(&mut r[..]) } else { None }, Sum, root)?;
                let b = w.igather(s, &v, if me == root { Some(&mut g[..]) } else { None }, root)?;
                let c = w.iscatter(s, if me == root { Some(&all[..]) } else { None }, &mut sc, root)?;
                c.wait()?;
                b.wait()?;
                a.wait()
            })?;
            if me == root {
                assert!(r == sum, "ireduce n={n} root {root}");
                assert!(g == all, "igather n={n} root {root}");
            }
            assert!(sc == v, "iscatter n={n} root {root} on rank {me}");
        }
    }
    // Progress inside other waits: rank 0 blocks in a receive that rank 1 sends only after
    // its own iallreduce completed, which needs rank 0's part to move meanwhile.
    if p >= 2 {
        let mut out = [0u64];
        mpr::scope(|s| -> mpr::Result<()> {
            let r = w.iallreduce(s, &[1u64], &mut out, Sum)?;
            if me == 0 {
                w.recv(&mut [0u8], 1, 4242)?;
                r.wait()
            } else {
                r.wait()?;
                if me == 1 {
                    w.send(&[1u8], 0, 4242)?;
                }
                Ok(())
            }
        })?;
        assert_eq!(out[0], p as u64);
    }
    Ok(())
}

/// A balanced 2-D grid over every rank, periodic in its second dimension: each rank's point
/// and rank agree, a halo exchange along each dimension hears the neighbour the grid names
/// (none past a closed edge), the rows and columns reduce over the ranks that share them,
/// and a grid of fewer points leaves the last rank out.
fn check_cartesian(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let mut dims = [0, 0];
    dims_create(p, &mut dims)?;
    assert_eq!(dims[0] * dims[1], p);
    assert!(dims[0] >= dims[1], "{dims:?}");
    let grid = Grid::new(&dims, &[false, true])?;
    let cart = w.cart(&grid, false)?.expect("every rank is a point of a grid of p points");
    let at = cart.coords();
    assert_eq!(grid.rank(&[at[0] as isize, at[1] as isize])?, cart.rank());
    for dim in 0..2 {
        let (from, to) = cart.shift(dim, 1)?;
        // Row-major: one step along dimension 1 is one rank; along 0, a row.
        let step = if dim == 0 { dims[1] } else { 1 };
        let expect_from =
            if dim == 0 { (at[0] > 0).then(|| me - step) } else { Some(me - at[1] + (at[1] + dims[1] - 1) % dims[1]) };
        assert_eq!(from, expect_from, "rank {me} at {at:?}, dimension {dim}");
        let mut got = [usize::MAX];
        mpr::scope(|s| -> mpr::Result<()> {
            let mut reqs = Vec::new();
            if let Some(t) = to {
                reqs.push(cart.comm().isend(s, std::slice::from_ref(&me), t, 11)?);
            }
            if let Some(f) = from {
                reqs.push(cart.comm().irecv(s, &mut got, f, 11)?);
            }
            mpr::wait_all(reqs).map(drop)
        })?;
        assert_eq!(from.map_or(usize::MAX, |f| f), got[0], "rank {me} heard along dimension {dim}");
    }
    for keep in 0..2 {
        let sub = cart.sub(&[keep == 0, keep == 1])?;
        assert_eq!(sub.grid().dims(), &[dims[keep]]);
        assert_eq!(sub.size(), dims[keep]);
        assert_eq!(sub.rank(), at[keep]);
        let mut sum = [0u64];
        sub.comm().allreduce(&[me as u64], &mut sum, Sum)?;
        let members = (0..p).filter(|&r| grid.coords(r).map(|c| c[1 - keep] == at[1 - keep]).unwrap_or(false));
        assert_eq!(sum[0], members.map(|r| r as u64).sum::<u64>(), "rank {me}, keeping dimension {keep}");
    }
    // Neighbourhood exchanges: block s a rank sends lands in block s ^ 1 of the neighbour
    // (MPI-4.0 errata), also where both neighbours along the periodic dimension are one
    // rank (2 points) or the rank itself (1 point).
    let near = cart.neighbors();
    assert_eq!(near.len(), 4);
    assert_eq!((near[0], near[1]), cart.shift(0, 1)?);
    let mut all = vec![usize::MAX; 4];
    cart.neighbor_allgather(&[me], &mut all)?;
    let want: Vec<usize> = near.iter().map(|n| n.unwrap_or(usize::MAX)).collect();
    assert_eq!(all, want, "rank {me}: neighbour allgather");
    let value = |r: usize, s: usize, j: usize| (r * 100 + s * 10 + j) as i64;
    let scounts: Vec<usize> = (0..4).map(|s| 1 + s % 2).collect();
    let sdispls: Vec<usize> = scounts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
    let send: Vec<i64> = (0..4).flat_map(|s| (0..scounts[s]).map(move |j| value(me, s, j))).collect();
    let rcounts: Vec<usize> = (0..4).map(|i| scounts[i ^ 1]).collect();
    let rdispls: Vec<usize> = rcounts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
    let mut got = vec![-1i64; 6];
    cart.neighbor_alltoallv(&send, &scounts, &sdispls, &mut got, &rcounts, &rdispls)?;
    for (i, n) in near.iter().enumerate() {
        for j in 0..rcounts[i] {
            let want = n.map_or(-1, |n| value(n, i ^ 1, j));
            assert_eq!(got[rdispls[i] + j], want, "rank {me}: block {i} from {n:?}, element {j}");
        }
    }
    // The nonblocking form, on one schedule (one tag): the same blocks land.
    let mut igot = vec![-1i64; 6];
    mpr::scope(|sc| -> mpr::Result<()> {
        cart.ineighbor_alltoallv(sc, &send, &scounts, &sdispls, &mut igot, &rcounts, &rdispls)?.wait()
    })?;
    assert_eq!(igot, got, "rank {me}: ineighbor_alltoallv against neighbor_alltoallv");
    let line = Grid::new(&[p.max(2) - 1], &[false])?;
    match w.cart(&line, true)? {
        Some(l) => {
            assert!(me < p.max(2) - 1);
            assert_eq!(l.size(), line.size());
        }
        None => assert_eq!(me, p - 1, "only the last rank is left out"),
    }
    assert!(w.cart(&Grid::new(&[p + 1], &[true])?, false).is_err(), "a grid larger than the communicator");
    graphs(w)
}

/// Graphs of the Rust API: a rank's own neighbours (to the next two ranks, from the previous
/// two), the same graph from edges rank 0 alone gives, and MPI-1's star; the neighbourhood
/// collectives on each.
fn graphs(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let (ahead, behind) = ([(me + 1) % p, (me + 2) % p], [(me + p - 1) % p, (me + p - 2) % p]);
    let hood = w.dist_graph_adjacent(&behind, &ahead)?;
    assert_eq!(hood.size(), p);
    // Block i (of i + 1 elements) to destination i; source j sent its block j.
    let send = [me as i64, 1000 + me as i64, 2000 + me as i64];
    let mut got = [-1i64; 3];
    hood.neighbor_alltoallv(&send, &[1, 2], &[0, 1], &mut got, &[1, 2], &[0, 1])?;
    assert_eq!(got, [behind[0] as i64, 1000 + behind[1] as i64, 2000 + behind[1] as i64], "rank {me}");
    let mut heard = [usize::MAX; 2];
    hood.neighbor_allgather(&[me], &mut heard)?;
    assert_eq!(heard, behind, "rank {me}: allgather from the sources, in their order");
    // The same graph given whole by rank 0, with weights: each rank learns its own edges.
    let edges: Vec<Edge> = if me == 0 {
        (0..p)
            .flat_map(|r| (1..3).map(move |k| Edge { from: r, to: (r + k) % p, weight: (10 * r + k) as i32 }))
            .collect()
    } else {
        Vec::new()
    };
    let given = w.dist_graph(&edges)?;
    let dests: Vec<usize> = given.neighborhood.destinations().iter().map(|d| d.unwrap()).collect();
    assert_eq!(dests, ahead, "rank {me}: destinations in the order rank 0 gave them");
    assert_eq!(given.destination_weights, [10 * me as i32 + 1, 10 * me as i32 + 2]);
    let mut sources: Vec<(usize, i32)> =
        given.neighborhood.sources().iter().map(|s| s.unwrap()).zip(given.source_weights.iter().copied()).collect();
    sources.sort_unstable();
    let mut want: Vec<(usize, i32)> =
        (1..3).map(|k| ((me + p - k) % p, (10 * ((me + p - k) % p) + k) as i32)).collect();
    want.sort_unstable();
    assert_eq!(sources, want, "rank {me}: sources and their weights");
    // MPI-1's star of every rank but the last: node 0 joined to all the others.
    let n = p.max(2) - 1;
    let edges: Vec<usize> = (1..n).chain(std::iter::repeat_n(0, n - 1)).collect();
    let index: Vec<usize> = (0..n).map(|i| if i == 0 { n - 1 } else { n - 1 + i }).collect();
    match w.graph(&index, &edges)? {
        None => assert_eq!(me, p - 1, "only the last rank is left out"),
        Some(star) => {
            let k = if me == 0 { n - 1 } else { 1 };
            let mut around = vec![usize::MAX; k];
            star.neighbor_allgather(&[me], &mut around)?;
            let want: Vec<usize> = if me == 0 { (1..n).collect() } else { vec![0] };
            assert_eq!(around, want, "rank {me}: the star's neighbours");
        }
    }
    assert!(w.graph(&[1], &[5]).is_err(), "an edge to no node");
    if p >= 2 {
        inter(w)?;
    }
    Ok(())
}

/// Nonblocking duplicates: three of the world in flight at once beside a barrier, while
/// communicators of overlapping groups are made by blocking calls (a split, a duplicate of
/// the split); every context is new (a message on one is not received on another), and each
/// duplicate's collectives work. Then duplicates of an inter-communicator, the same way.
fn check_idup(w: &Comm) -> mpr::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let half = w.split(Some((me % 2) as u32), 0)?.unwrap();
    let (dups, made) = mpr::scope(|s| -> mpr::Result<_> {
        let pending: Vec<_> = (0..3).map(|_| w.idup(s)).collect::<mpr::Result<_>>()?;
        let b = w.ibarrier(s)?;
        // Blocking creations while the agreements are in flight.
        let made = (half.dup()?, half.split(Some(0), -(me as i32))?.unwrap());
        b.wait()?;
        let dups = pending.into_iter().map(|d| d.wait()).collect::<mpr::Result<Vec<_>>>()?;
        Ok((dups, made))
    })?;
    let all: Vec<&Comm> = dups.iter().chain([w, &half, &made.0, &made.1]).collect();
    // Each rank sends its rank and the communicator's index to the next rank on every
    // communicator of the world's group, tag 0, then receives them in reverse order.
    let whole: Vec<usize> = (0..all.len()).filter(|&i| all[i].size() == p).collect();
    let msgs: Vec<[usize; 2]> = whole.iter().map(|&i| [me, i]).collect();
    mpr::scope(|s| -> mpr::Result<()> {
        let sent: Vec<_> = whole.iter().zip(&msgs).map(|(&i, m)| all[i].isend(s, m, (me + 1) % p, 0)).collect();
        for &i in whole.iter().rev() {
            let mut got = [usize::MAX; 2];
            all[i].recv(&mut got, (me + p - 1) % p, 0)?;
            assert_eq!(got, [(me + p - 1) % p, i], "rank {me}: communicator {i}'s message");
        }
        sent.into_iter().try_for_each(|q| q?.wait().map(|_| ()))
    })?;
    for (i, d) in dups.iter().enumerate() {
        assert_eq!((d.rank(), d.size()), (me, p));
        let mut sum = [0usize];
        d.allreduce(&[me + i], &mut sum, Sum)?;
        assert_eq!(sum[0], p * (p - 1) / 2 + p * i, "rank {me}: duplicate {i}'s all-reduce");
    }
    if p >= 2 {
        let h = p / 2;
        let low = me < h;
        let side = w.split(Some(low as u32), 0)?.unwrap();
        let ic = side.intercomm(0, Some((w, if low { h } else { 0 })), 9)?;
        let idups = mpr::scope(|s| -> mpr::Result<_> {
            let pending: Vec<_> = (0..2).map(|_| ic.idup(s)).collect::<mpr::Result<_>>()?;
            let blocking = ic.dup()?;
            let mut got = pending.into_iter().map(|d| d.wait()).collect::<mpr::Result<Vec<_>>>()?;
            got.push(blocking);
            Ok(got)
        })?;
        let theirs: usize = if low { (h..p).sum() } else { (0..h).sum() };
        for (i, d) in idups.iter().enumerate() {
            assert!(d.is_inter(), "rank {me}: duplicate {i} of an inter-communicator");
            let mut sum = [0usize];
            d.allreduce(&[me], &mut sum, Sum)?;
            assert_eq!(sum[0], theirs, "rank {me}: inter duplicate {i}'s all-reduce");
        }
    }
    Ok(())
}

/// An inter-communicator of the Rust API between the first `p / 2` ranks (low) and the
/// rest: messages, collectives, its duplicate, split and merge, and the intra-communicator's
/// collectives refused.
fn inter(w: &Comm) -> mpr::Result<()> {
    use mpr::InterRoot;
    let (me, p, h) = (w.rank(), w.size(), w.size() / 2);
    let low = me < h;
    let half = w.split(Some(low as u32), 0)?.unwrap();
    let ic = half.intercomm(0, Some((w, if low { h } else { 0 })), 5)?;
    let (theirs, mine): (Vec<usize>, Vec<usize>) =
        if low { ((h..p).collect(), (0..h).collect()) } else { ((0..h).collect(), (h..p).collect()) };
    assert!(ic.is_inter() && !half.is_inter());
    assert_eq!((ic.rank(), ic.size()), (half.rank(), mine.len()));
    assert_eq!(ic.remote_group().unwrap().size(), theirs.len());
    // Each rank to every rank of the other group: its world rank, tag = that rank.
    mpr::scope(|s| -> mpr::Result<()> {
        let sent: Vec<_> = (0..theirs.len()).map(|j| ic.isend(s, std::slice::from_ref(&me), j, j as i32)).collect();
        for (j, &t) in theirs.iter().enumerate() {
            let mut got = [usize::MAX];
            let st = ic.recv(&mut got, j, ic.rank() as i32)?;
            assert_eq!((got[0], st.source), (t, j), "rank {me}");
        }
        sent.into_iter().try_for_each(|q| q?.wait().map(|_| ()))
    })?;
    ic.barrier()?;
    // From the low group's first rank to the other group.
    let mut v = [me as u64 + 7; 2];
    let root = if !low {
        InterRoot::Remote(0)
    } else if me == 0 {
        InterRoot::Here
    } else {
        InterRoot::Beside
    };
    ic.inter_bcast(&mut v, root)?;
    assert_eq!(v, [if low { me as u64 + 7 } else { 7 }; 2], "rank {me}");
    let mut sum = [0usize];
    ic.allreduce(&[me], &mut sum, Sum)?;
    assert_eq!(sum[0], theirs.iter().sum::<usize>(), "rank {me}: the other group's sum");
    let mut at_root = [usize::MAX];
    let here = (root == InterRoot::Here).then_some(&mut at_root[..]);
    ic.inter_reduce(Some(&[me]), here, Max, root)?;
    if root == InterRoot::Here {
        assert_eq!(at_root[0], p - 1);
    }
    let mut all = vec![usize::MAX; theirs.len()];
    ic.inter_gather(Some(&[me]), (root == InterRoot::Here).then_some(&mut all[..]), root)?;
    if root == InterRoot::Here {
        assert_eq!(all, theirs);
    }
    let blocks: Vec<usize> = (0..theirs.len()).map(|j| 100 * me + j).collect();
    let mut one = [usize::MAX];
    ic.inter_scatter((root == InterRoot::Here).then_some(&blocks[..]), (!low).then_some(&mut one[..]), root)?;
    if !low {
        assert_eq!(one[0], ic.rank(), "rank {me}: its block from rank 0");
    }
    let mut gathered = vec![usize::MAX; theirs.len()];
    ic.allgather(&[me], &mut gathered)?;
    assert_eq!(gathered, theirs);
    let mut swapped = vec![usize::MAX; theirs.len()];
    ic.dup()?.alltoall(&blocks, &mut swapped)?;
    let want: Vec<usize> = theirs.iter().map(|&t| 100 * t + ic.rank()).collect();
    assert_eq!(swapped, want, "rank {me}: alltoall on the duplicate");
    // The v-forms: rank j of a group gives j + 1 elements.
    let n = |j: usize| j + 1;
    let counts: Vec<usize> = (0..theirs.len()).map(n).collect();
    let displs: Vec<usize> = (0..theirs.len()).map(|j| j * (j + 1) / 2).collect();
    let total: usize = counts.iter().sum();
    let want: Vec<usize> = theirs.iter().enumerate().flat_map(|(j, &t)| std::iter::repeat_n(t, n(j))).collect();
    let mine_v = vec![me; n(ic.rank())];
    let mut all = vec![usize::MAX; total];
    ic.allgatherv(&mine_v, &mut all, &counts, &displs)?;
    assert_eq!(all, want, "rank {me}: allgatherv");
    let mut at_root = vec![usize::MAX; total];
    let here = (root == InterRoot::Here).then_some((&mut at_root[..], &counts[..], &displs[..]));
    ic.inter_gatherv((!low).then_some(&mine_v[..]), here, root)?;
    if root == InterRoot::Here {
        assert_eq!(at_root, want, "gatherv");
    }
    let mut one = vec![usize::MAX; n(ic.rank())];
    let from = (root == InterRoot::Here).then_some((&want[..], &counts[..], &displs[..]));
    ic.inter_scatterv(from, (!low).then_some(&mut one[..]), root)?;
    if !low {
        assert_eq!(one, vec![me; n(ic.rank())], "rank {me}: scatterv");
    }
    let ones = vec![1usize; theirs.len()];
    let seq: Vec<usize> = (0..theirs.len()).collect();
    let mut back = vec![usize::MAX; theirs.len()];
    ic.alltoallv(&blocks, &ones, &seq, &mut back, &ones, &seq)?;
    let want: Vec<usize> = theirs.iter().map(|&t| 100 * t + ic.rank()).collect();
    assert_eq!(back, want, "rank {me}: alltoallv");
    // Reduce-scatter: the other group's vectors of (its size x this size) elements summed,
    // this rank's block of them.
    let q = theirs.len();
    let vecs: Vec<usize> = (0..mine.len() * q).map(|k| 100 * me + k).collect();
    let mut res = vec![usize::MAX; q];
    ic.reduce_scatter_block(&vecs, &mut res, Sum)?;
    let want: Vec<usize> = (0..q).map(|i| theirs.iter().map(|&t| 100 * t + ic.rank() * q + i).sum()).collect();
    assert_eq!(res, want, "rank {me}: reduce_scatter_block");
    // Split by parity of the rank in each group; merge with the low group first.
    if let Some(part) = ic.split(Some((ic.rank() % 2) as u32), 0)? {
        let remote: Vec<usize> =
            theirs.iter().copied().enumerate().filter(|(j, _)| j % 2 == ic.rank() % 2).map(|(_, t)| t).collect();
        let mut g = vec![usize::MAX; remote.len()];
        part.allgather(&[me], &mut g)?;
        assert_eq!(g, remote, "rank {me}: the split's other group");
    } else {
        assert!(ic.rank() % 2 == 1 && theirs.len() < 2, "rank {me}: a color the other group lacks");
    }
    let merged = ic.merge(!low)?;
    assert_eq!((merged.rank(), merged.size()), (me, p));
    // Both asking low: the group of the lower first world rank (the low one) first again.
    assert_eq!(ic.merge(false)?.rank(), me);
    assert_eq!(ic.merge(low)?.rank(), if low { me + p - h } else { me - h }, "rank {me}: the low group last");
    assert_eq!(ic.bcast(&mut v, 0).unwrap_err().class(), mpr::ErrorClass::Comm);
    assert_eq!(ic.scan(&[1], &mut [0], Sum).unwrap_err().class(), mpr::ErrorClass::Comm);
    inter_nonblocking(&ic, low, &mine, &theirs)
}

/// The nonblocking collectives of the inter-communicator `ic` (this rank in the `low` group
/// or not, of world ranks `mine`, the other group's `theirs`), all in flight at once, with
/// roots that are neither group's first rank.
fn inter_nonblocking(ic: &Comm, low: bool, mine: &[usize], theirs: &[usize]) -> mpr::Result<()> {
    use mpr::InterRoot;
    let (me, q) = (mine[ic.rank()], theirs.len());
    // The last rank of the high group, then of the low group, as this rank names it.
    let last = |of_low: bool| {
        if low != of_low {
            InterRoot::Remote(q - 1)
        } else if ic.rank() == mine.len() - 1 {
            InterRoot::Here
        } else {
            InterRoot::Beside
        }
    };
    let (from_high, to_low) = (last(false), last(true));
    let (one, vecs) = ([me], (0..mine.len() * q).map(|k| 100 * me + k).collect::<Vec<_>>());
    let blocks: Vec<usize> = (0..q).map(|j| 100 * me + j).collect();
    let counts = vec![q; mine.len()];
    let (mut b, mut sum, mut max, mut all, mut swap, mut res, mut part, mut spread) =
        ([me as u64 * 3; 3], [0usize], [usize::MAX], vec![usize::MAX; q], vec![0; q], vec![0; q], [0usize], vec![0; q]);
    for (j, x) in spread.iter_mut().enumerate() {
        *x = 1000 * me + j;
    }
    let here = |r: InterRoot| r == InterRoot::Here;
    mpr::scope(|s| -> mpr::Result<()> {
        let reqs = vec![
            ic.inter_ibcast(s, &mut b, from_high)?,
            ic.ibarrier(s)?,
            ic.iallreduce(s, &one, &mut sum, Sum)?,
            ic.inter_ireduce(
                s,
                (!here(to_low)).then_some(&one[..]),
                here(to_low).then_some(&mut max[..]),
                Max,
                to_low,
            )?,
            ic.iallgather(s, &one, &mut all)?,
            ic.ialltoall(s, &blocks, &mut swap)?,
            ic.ireduce_scatter(s, &vecs, &mut res, &counts, Sum)?,
            ic.inter_iscatter(s, here(from_high).then_some(&spread[..]), low.then_some(&mut part[..]), from_high)?,
        ];
        reqs.into_iter().try_for_each(|r| r.wait())
    })?;
    let high_last = if low { theirs[q - 1] } else { mine[mine.len() - 1] };
    let want_b = if low { high_last as u64 * 3 } else { me as u64 * 3 };
    assert_eq!(b, [want_b; 3], "rank {me}: ibcast from the high group's last");
    assert_eq!(sum[0], theirs.iter().sum::<usize>(), "rank {me}: iallreduce");
    if here(to_low) {
        assert_eq!(max[0], *theirs.iter().max().unwrap(), "rank {me}: ireduce at the low group's last");
    }
    assert_eq!(all, theirs, "rank {me}: iallgather");
    assert_eq!(swap, theirs.iter().map(|&t| 100 * t + ic.rank()).collect::<Vec<_>>(), "rank {me}: ialltoall");
    let want: Vec<usize> = (0..q).map(|i| theirs.iter().map(|&t| 100 * t + ic.rank() * q + i).sum()).collect();
    assert_eq!(res, want, "rank {me}: ireduce_scatter");
    if low {
        assert_eq!(part[0], 1000 * high_last + ic.rank(), "rank {me}: iscatter from the high group's last");
    }
    // A leader whose receive from the other group fails (a buffer too small for the root's
    // message) reports it, and its group still gets what the leader holds: none waits for
    // ever, and each of them reports that what came is not what it was due (the leader sends
    // one byte less than it holds, which no rank expects). The high
    // group's first rank sends two numbers; the low group's leader has room for one, the
    // others for two.
    let mut small = match (low, ic.rank()) {
        (true, 0) => vec![5u64],
        (true, _) => vec![6, 6],
        (false, _) => vec![101, 102],
    };
    let first = if low {
        InterRoot::Remote(0)
    } else if ic.rank() == 0 {
        InterRoot::Here
    } else {
        InterRoot::Beside
    };
    let got = mpr::scope(|s| ic.inter_ibcast(s, &mut small, first)?.wait());
    match (low, ic.rank()) {
        (true, 0) => assert_eq!(got.unwrap_err().class(), mpr::ErrorClass::Truncate, "rank {me}: the leader"),
        (true, _) => {
            // From the leader (7 bytes: its 8 less one), or, in a group too large for the
            // leader to reach everyone itself, from the rank that passed it on (its 16 less
            // one: what it got did not fit what it expected either).
            match got {
                Err(mpr::Error::Mismatch { from: 0, buffer: 16, message: Some(7) }) => {}
                Err(mpr::Error::Mismatch { from, buffer: 16, message: Some(15) }) if from > 0 && from < ic.rank() => {}
                other => panic!("rank {me}: the leader's one number for two: {other:?}"),
            }
            // The leader's one number: its own, or the part of the root's it kept.
            assert!(matches!(small[..], [5 | 101, 6]), "rank {me}: the leader's number, then its own: {small:?}");
        }
        (false, _) => got?,
    }
    ic.barrier()
}
