//! One-sided conformance checks, run as the ranks of a job: `mprun -np N rma SCENARIO`.
//! Each scenario checks the windows' contents (against a sequential model where traffic is
//! random) and exits non-zero with a message on any mismatch.

use mpr::{Assert, BitXor, Comm, Error, ErrorClass, Loc, LockType, Max, MinLoc, NoOp, Replace, Sum, Window};
use rand::{Rng, SeedableRng};

type R = mpr::Result<()>;

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let universe = match mpr::init() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("init failed: {e}");
            std::process::exit(2);
        }
    };
    let w = universe.world();
    let iters: usize = std::env::var("RMA_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let r = match scenario.as_str() {
        "model-fence" => model(&w, Sync::Fence),
        "model-lock" => model(&w, Sync::LockAll),
        "model-pscw" => model(&w, Sync::Pscw),
        "counter" => counter(&w, iters),
        "tickets" => tickets(&w, iters),
        "caslock" => cas_lock(&w, iters),
        "one-element" => one_element(&w, iters),
        "types" => types(&w),
        "large" => large(&w),
        "errors" => errors(&w),
        "requests" => requests(&w),
        "busy-target" => busy_target(&w),
        "shared" => shared(&w),
        "dynamic" => dynamic(&w),
        "target-dies" => target_dies(&w),
        "asserts" => asserts(&w),
        other => {
            eprintln!("unknown scenario {other:?}");
            std::process::exit(2)
        }
    };
    if let Err(e) = r {
        eprintln!("rank {}: {scenario} failed: {e}", w.rank());
        std::process::exit(1);
    }
    if let Err(e) = universe.finalize() {
        eprintln!("finalize failed: {e}");
        std::process::exit(1);
    }
    println!("rank {} {scenario} ok", w.rank());
}

/// The window a scenario uses: `allocate` (ranks of a host share it in memory), or with
/// `RMA_WIN=create` one over the program's own memory (every operation then travels as a
/// message, even within a host).
fn window<T: bytemuck::Pod>(w: &Comm, len: usize) -> mpr::Result<Window<'static, T>> {
    if std::env::var("RMA_WIN").as_deref() == Ok("create") {
        let mem: &'static mut [T] = Box::leak(vec![T::zeroed(); len].into_boxed_slice());
        Window::create(w, mem)
    } else {
        Window::allocate(w, len)
    }
}

fn fail(msg: String) -> Error {
    Error::Other(msg)
}

#[derive(Clone, Copy, PartialEq)]
enum Sync {
    Fence,
    LockAll,
    Pscw,
}

/// Elements of each origin's own region in every window (only it puts there).
const REGION: usize = 40;
/// Elements every origin accumulates into.
const SHARED: usize = 24;
const EPOCHS: usize = 12;

/// One operation of the random traffic.
enum OpKind {
    Put { target: usize, at: usize, vals: Vec<u64> },
    Acc { target: usize, at: usize, vals: Vec<u64> },
    Get { target: usize, at: usize, len: usize },
}

/// The operations rank `r` issues in epoch `e` (every rank can regenerate every rank's).
/// Even epochs write (one put per target into the origin's region, accumulates anywhere in
/// the shared part); odd epochs only read, so no read conflicts with a write.
fn ops_of(r: usize, e: usize, n: usize) -> Vec<OpKind> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64((r * 1000 + e) as u64 ^ 0x5eed);
    let win = n * REGION + SHARED;
    let mut ops = Vec::new();
    if e.is_multiple_of(2) {
        for target in 0..n {
            if rng.gen_bool(0.7) {
                let len = rng.gen_range(1..=REGION);
                let at = r * REGION + rng.gen_range(0..=REGION - len);
                ops.push(OpKind::Put { target, at, vals: (0..len).map(|_| rng.gen()).collect() });
            }
        }
        for _ in 0..rng.gen_range(0..8) {
            let len = rng.gen_range(1..=SHARED);
            let at = n * REGION + rng.gen_range(0..=SHARED - len);
            let target = rng.gen_range(0..n);
            ops.push(OpKind::Acc { target, at, vals: (0..len).map(|_| rng.gen_range(0..1000)).collect() });
        }
    } else {
        for _ in 0..rng.gen_range(1..6) {
            let len = rng.gen_range(1..=win);
            ops.push(OpKind::Get { target: rng.gen_range(0..n), at: rng.gen_range(0..=win - len), len });
        }
    }
    ops
}

/// Random puts, gets and accumulates from every rank to every rank, epoch by epoch, under
/// `sync`; every get and, at the end, every window is checked against a sequential model.
fn model(w: &Comm, sync: Sync) -> R {
    let (me, n) = (w.rank(), w.size());
    let len = n * REGION + SHARED;
    let win = window::<u64>(w, len)?;
    let mut model = vec![vec![0u64; len]; n];
    let everyone: Vec<usize> = (0..n).collect();
    if sync == Sync::Fence {
        win.fence()?;
    }
    for e in 0..EPOCHS {
        match sync {
            Sync::Fence => {}
            Sync::LockAll => win.lock_all()?,
            Sync::Pscw => {
                win.post(&everyone)?;
                win.start(&everyone)?;
            }
        }
        for op in ops_of(me, e, n) {
            match op {
                OpKind::Put { target, at, vals } => win.put(&vals, target, at)?,
                OpKind::Acc { target, at, vals } => win.accumulate(&vals, target, at, Sum)?,
                OpKind::Get { target, at, len } => {
                    let mut got = vec![0u64; len];
                    win.get(&mut got, target, at)?;
                    if got[..] != model[target][at..at + len] {
                        return Err(fail(format!("epoch {e}: get of {len} at {at} from rank {target} differs")));
                    }
                }
            }
        }
        match sync {
            Sync::Fence => win.fence()?,
            Sync::LockAll => {
                win.unlock_all()?;
                w.barrier()?;
            }
            Sync::Pscw => {
                win.complete()?;
                win.wait()?;
                // Nobody starts the next epoch's reads before every write of this one is in.
                w.barrier()?;
            }
        }
        for r in 0..n {
            for op in ops_of(r, e, n) {
                match op {
                    OpKind::Put { target, at, vals } => model[target][at..at + vals.len()].copy_from_slice(&vals),
                    OpKind::Acc { target, at, vals } => {
                        for (m, v) in model[target][at..].iter_mut().zip(&vals) {
                            *m += v;
                        }
                    }
                    OpKind::Get { .. } => {}
                }
            }
        }
        let mut mine = vec![0u64; len];
        win.read_local(0, &mut mine)?;
        if mine != model[me] {
            let i = mine.iter().zip(&model[me]).position(|(a, b)| a != b).unwrap_or(0);
            return Err(fail(format!("epoch {e}: window differs from the model at element {i}")));
        }
        // The next epoch's operations may arrive as soon as their origin leaves the fence
        // (or barrier): nobody starts them before every rank has checked its window.
        w.barrier()?;
    }
    win.free()
}

/// A read-modify-write counter under exclusive locks (get, add, put): ends at exactly
/// ranks x iterations, on a remote target and on each rank's own window.
fn counter(w: &Comm, iters: usize) -> R {
    let (me, n) = (w.rank(), w.size());
    let win = window::<u64>(w, 2)?;
    for i in 0..iters {
        // Element 0 of rank 0, and element 1 of rank i % n (sometimes this rank itself).
        for (target, at) in [(0, 0), (i % n, 1)] {
            win.lock(LockType::Exclusive, target)?;
            let mut v = [0u64];
            win.get(&mut v, target, at)?;
            win.put(&[v[0] + 1], target, at)?;
            win.unlock(target)?;
        }
    }
    w.barrier()?;
    let mut total = [0u64; 2];
    win.lock(LockType::Shared, 0)?;
    win.get(&mut total, 0, 0)?;
    win.unlock(0)?;
    if total[0] != (n * iters) as u64 {
        return Err(fail(format!("counter ended at {} instead of {}", total[0], n * iters)));
    }
    let mut local = [0u64; 2];
    win.read_local(0, &mut local)?;
    let want = (0..iters).filter(|i| i % n == me).count() * n;
    if local[1] != want as u64 {
        return Err(fail(format!("rank {me}'s counter ended at {} instead of {want}", local[1])));
    }
    win.free()
}

/// Tickets from fetch_and_op on one counter: every rank's are distinct, and all of them
/// together are exactly 0..ranks x iterations.
fn tickets(w: &Comm, iters: usize) -> R {
    let n = w.size();
    let win = window::<u64>(w, 1)?;
    win.lock_all()?;
    let mut mine = Vec::with_capacity(iters);
    for _ in 0..iters {
        mine.push(win.fetch_and_op(1, n - 1, 0, Sum)?);
    }
    let last = win.fetch_and_op(0, n - 1, 0, NoOp)?;
    win.unlock_all()?;
    let mut all = vec![0u64; n * iters];
    w.allgather(&mine, &mut all)?;
    all.sort_unstable();
    if all.iter().enumerate().any(|(i, &t)| t != i as u64) {
        return Err(fail("tickets are not exactly 0..ranks x iterations".into()));
    }
    if last < iters as u64 {
        return Err(fail(format!("a fetch with no_op read {last}, below this rank's own {iters} tickets")));
    }
    win.free()
}

/// A spin lock made of compare_and_swap (word 0 of rank 0) protecting a plain counter
/// (word 1 of the last rank, read and written with get and put): ends at ranks x iterations.
fn cas_lock(w: &Comm, iters: usize) -> R {
    let (me, n) = (w.rank(), w.size());
    let win = window::<u64>(w, 2)?;
    let holder = me as u64 + 1;
    win.lock_all()?;
    for _ in 0..iters {
        while win.compare_and_swap(holder, 0, 0, 0)? != 0 {}
        let mut v = [0u64];
        win.get(&mut v, n - 1, 1)?;
        win.put(&[v[0] + 1], n - 1, 1)?;
        win.flush(n - 1)?;
        if win.compare_and_swap(0, holder, 0, 0)? != holder {
            return Err(fail("the lock word changed while this rank held it".into()));
        }
    }
    win.unlock_all()?;
    w.barrier()?;
    if me == n - 1 {
        let mut v = [0u64];
        win.read_local(1, &mut v)?;
        if v[0] != (n * iters) as u64 {
            return Err(fail(format!("counter under the CAS lock ended at {} instead of {}", v[0], n * iters)));
        }
    }
    win.free()
}

/// Every rank accumulates into the same elements of rank 0 at once: sums, a max, and a
/// minloc, all exact.
fn one_element(w: &Comm, iters: usize) -> R {
    let (me, n) = (w.rank(), w.size());
    let sums = window::<i64>(w, 2)?;
    let locs = window::<Loc<f64>>(w, 1)?;
    if me == 0 {
        locs.write_local(0, &[Loc { value: f64::MAX, index: -1.0 }])?;
    }
    w.barrier()?;
    sums.lock_all()?;
    locs.lock_all()?;
    for i in 0..iters {
        sums.accumulate(&[me as i64 + 1], 0, 0, Sum)?;
        sums.accumulate(&[(me * iters + i) as i64], 0, 1, Max)?;
        let value = ((me * 7 + i * 3) % 11) as f64;
        locs.accumulate(&[Loc { value, index: (me * iters + i) as f64 }], 0, 0, MinLoc)?;
    }
    sums.unlock_all()?;
    locs.unlock_all()?;
    w.barrier()?;
    if me == 0 {
        let mut s = [0i64; 2];
        sums.read_local(0, &mut s)?;
        let want = (n * (n + 1) / 2 * iters) as i64;
        let max = (n * iters - 1) as i64;
        if s != [want, max] {
            return Err(fail(format!("concurrent accumulates gave {s:?}, want [{want}, {max}]")));
        }
        let mut l = [Loc { value: 0.0, index: 0.0 }];
        locs.read_local(0, &mut l)?;
        let best = (0..n)
            .flat_map(|r| (0..iters).map(move |i| (((r * 7 + i * 3) % 11) as f64, (r * iters + i) as f64)))
            .fold((f64::MAX, f64::MAX), |a, b| if b.0 < a.0 || (b.0 == a.0 && b.1 < a.1) { b } else { a });
        if (l[0].value, l[0].index) != best {
            return Err(fail(format!("minloc gave {:?}, want {best:?}", l[0])));
        }
    }
    sums.free()?;
    locs.free()
}

/// Accumulates of several types and operations to the next rank, and get_accumulate,
/// checked elementwise.
fn types(w: &Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    let next = (me + 1) % n;
    let f = window::<f64>(w, 64)?;
    let x = window::<i32>(w, 64)?;
    let h = window::<mpr::half::f16>(w, 8)?;
    let init: Vec<f64> = (0..64).map(|i| (i as f64 - 30.0) * 0.25).collect();
    f.write_local(0, &init)?;
    x.write_local(0, &(0..64).map(|i| i * 31).collect::<Vec<i32>>())?;
    f.fence()?;
    x.fence()?;
    h.fence()?;
    let mine: Vec<f64> = (0..64).map(|i| ((i * (me + 3)) % 17) as f64 - 8.0).collect();
    f.accumulate(&mine, next, 0, Max)?;
    x.accumulate(&(0..64).map(|i| (i * 7 + me as i32) ^ 0x55).collect::<Vec<i32>>(), next, 0, BitXor)?;
    h.accumulate(&[mpr::half::f16::from_f32(1.5); 8], next, 0, Sum)?;
    f.fence()?;
    x.fence()?;
    h.fence()?;
    let prev = (me + n - 1) % n;
    let theirs: Vec<f64> = (0..64).map(|i| ((i * (prev + 3)) % 17) as f64 - 8.0).collect();
    let mut got = vec![0.0; 64];
    f.read_local(0, &mut got)?;
    let want: Vec<f64> = init.iter().zip(&theirs).map(|(a, b)| a.max(*b)).collect();
    if got != want {
        return Err(fail("f64 max accumulate differs".into()));
    }
    let mut xi = vec![0i32; 64];
    x.read_local(0, &mut xi)?;
    if xi.iter().enumerate().any(|(i, &v)| v != (i as i32 * 31) ^ ((i as i32 * 7 + prev as i32) ^ 0x55)) {
        return Err(fail("i32 bxor accumulate differs".into()));
    }
    let mut hh = [mpr::half::f16::ZERO; 8];
    h.read_local(0, &mut hh)?;
    if hh.iter().any(|v| v.to_f32() != 1.5) {
        return Err(fail(format!("f16 sum accumulate gave {hh:?}")));
    }
    // get_accumulate with replace swaps a block: we get what was there.
    f.fence()?;
    let mut old = vec![0.0; 8];
    f.get_accumulate(&[9.5; 8], &mut old, next, 10, Replace)?;
    f.fence()?;
    let next_theirs: Vec<f64> = (0..64).map(|i| ((i * (me + 3)) % 17) as f64 - 8.0).collect();
    let was: Vec<f64> = (10..18).map(|i| init[i].max(next_theirs[i])).collect();
    if old != was {
        return Err(fail(format!("get_accumulate returned {old:?}, want {was:?}")));
    }
    f.read_local(10, &mut old)?;
    if old != [9.5; 8] {
        return Err(fail("get_accumulate did not replace".into()));
    }
    // MINLOC on (i16, i16) pairs from every rank: the smallest value, the smallest index
    // among ties.
    let l = window::<Loc<i16>>(w, 4)?;
    l.write_local(0, &[Loc { value: i16::MAX, index: -1 }; 4])?;
    l.fence()?;
    for t in 0..n {
        let v: Vec<Loc<i16>> = (0..4).map(|k| Loc { value: ((me + k) % 2) as i16 - 300, index: me as i16 }).collect();
        l.accumulate(&v, t, 0, MinLoc)?;
    }
    l.fence()?;
    let mut got = [Loc { value: 0, index: 0 }; 4];
    l.read_local(0, &mut got)?;
    // Value -300 comes from the ranks with (me + k) even; the smallest such rank is k % 2.
    let want: Vec<Loc<i16>> = (0..4).map(|k| Loc { value: -300, index: (k % 2) as i16 }).collect();
    if got[..] != want[..] && n > 1 {
        return Err(fail(format!("Loc<i16> minloc accumulate gave {got:?}, want {want:?}")));
    }
    l.free()?;
    f.free()?;
    x.free()?;
    h.free()
}

/// Large transfers (several frames each): a 4 MiB put and get between every pair, and a
/// large get_accumulate, byte-exact.
fn large(w: &Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    let len: usize = std::env::var("RMA_LARGE").ok().and_then(|v| v.parse().ok()).unwrap_or(4 << 20);
    let elems = len / 8;
    let win = window::<u64>(w, elems * n)?;
    let data = |from: usize, to: usize| -> Vec<u64> {
        (0..elems as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((from * 131 + to) as u64)).collect()
    };
    win.fence()?;
    for t in 0..n {
        win.put(&data(me, t), t, me * elems)?;
    }
    win.fence()?;
    let mut got = vec![0u64; elems];
    for t in 0..n {
        let from = (me + t) % n;
        win.read_local(from * elems, &mut got)?;
        if got != data(from, me) {
            return Err(fail(format!("put of {len} bytes from rank {from} differs")));
        }
        win.get(&mut got, (me + t) % n, me * elems)?;
        if got != data(me, (me + t) % n) {
            return Err(fail(format!("get of {len} bytes from rank {} differs", (me + t) % n)));
        }
    }
    win.fence()?;
    let t = (me + 1) % n;
    let ones = vec![1u64; elems];
    win.get_accumulate(&ones, &mut got, t, me * elems, Sum)?;
    if got != data(me, t) {
        return Err(fail("large get_accumulate returned the wrong old values".into()));
    }
    win.fence()?;
    win.read_local(((me + n - 1) % n) * elems, &mut got)?;
    let want: Vec<u64> = data((me + n - 1) % n, me).iter().map(|v| v.wrapping_add(1)).collect();
    if got != want {
        return Err(fail("large accumulate differs".into()));
    }
    win.free()
}

/// Request-based operations overlapped in a scope, against a fence epoch. A put and an
/// accumulate of one epoch go to separate elements (MPI leaves the outcome of both on one
/// element undefined: the put may travel by RDMA WRITE, the accumulate as a message).
fn requests(w: &Comm) -> R {
    const B: usize = 20;
    let (me, n) = (w.rank(), w.size());
    let win = window::<u32>(w, B * n)?;
    win.fence()?;
    let blocks: Vec<Vec<u32>> = (0..n).map(|t| (0..16).map(|i| (me * 1000 + t * 100 + i) as u32).collect()).collect();
    mpr::scope(|s| -> R {
        let mut reqs = Vec::new();
        for (t, b) in blocks.iter().enumerate() {
            reqs.push(win.rput(s, b, t, me * B)?);
            reqs.push(win.raccumulate(s, &b[..4], t, me * B + 16, Sum)?);
            reqs.push(win.raccumulate(s, &b[4..8], t, me * B + 16, Sum)?);
        }
        mpr::wait_all(reqs)?;
        Ok(())
    })?;
    win.fence()?;
    let mut gets = vec![vec![0u32; B]; n];
    mpr::scope(|s| -> R {
        let mut reqs = Vec::new();
        for (t, g) in gets.iter_mut().enumerate() {
            reqs.push(win.rget(s, g, t, ((me + 1) % n) * B)?);
        }
        mpr::wait_all(reqs)?;
        Ok(())
    })?;
    for (t, g) in gets.iter().enumerate() {
        let from = (me + 1) % n;
        let v = |i: usize| (from * 1000 + t * 100 + i) as u32;
        let want: Vec<u32> = (0..B).map(|i| if i < 16 { v(i) } else { v(i - 16) + v(i - 12) }).collect();
        if *g != want {
            return Err(fail(format!("rget from rank {t}: {g:?}, want {want:?}")));
        }
    }
    win.fence()?;
    win.free()
}

/// Every misuse a user can make is a clear error of the right class, and leaves the
/// target's window as it was.
fn errors(w: &Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    let next = (me + 1) % n;
    let win = window::<u32>(w, 8)?;
    win.write_local(0, &[7; 8])?;
    w.barrier()?;
    let expect = |r: mpr::Result<()>, class: ErrorClass, what: &str| -> R {
        match r {
            Err(e) if e.class() == class => {
                if me == 0 {
                    println!("{what}: {e}");
                }
                Ok(())
            }
            Err(e) => Err(fail(format!("{what}: wrong error {e} ({:?})", e.class()))),
            Ok(()) => Err(fail(format!("{what}: succeeded"))),
        }
    };
    expect(win.put(&[1], next, 0), ErrorClass::RmaSync, "put outside an epoch")?;
    expect(win.unlock(next), ErrorClass::RmaSync, "unlock without lock")?;
    expect(win.flush(next), ErrorClass::RmaSync, "flush outside a lock")?;
    expect(win.complete(), ErrorClass::RmaSync, "complete without start")?;
    expect(win.wait(), ErrorClass::RmaSync, "wait without post")?;
    expect(win.unlock_all(), ErrorClass::RmaSync, "unlock_all without lock_all")?;
    win.lock(LockType::Shared, next)?;
    expect(win.lock(LockType::Exclusive, next), ErrorClass::RmaSync, "lock twice")?;
    expect(win.fence(), ErrorClass::RmaSync, "fence in a lock epoch")?;
    expect(win.put(&[1, 2], next, 7), ErrorClass::RmaRange, "put past the end")?;
    expect(win.get(&mut [0; 9], next, 0), ErrorClass::RmaRange, "get longer than the window")?;
    expect(win.accumulate(&[1], next, usize::MAX, Sum), ErrorClass::RmaRange, "accumulate at a huge offset")?;
    expect(win.put(&[1], n + 3, 0), ErrorClass::Rank, "put to a rank out of range")?;
    let mut r = [0u32; 2];
    expect(win.get_accumulate(&[1], &mut r, next, 0, Sum), ErrorClass::Other, "get_accumulate of unequal lengths")?;
    win.unlock(next)?;
    // A lock on this rank itself, so no other rank has a frame in flight to the window
    // that the failed free drops.
    let free_early = window::<u8>(w, 4)?;
    free_early.lock(LockType::Shared, me)?;
    match free_early.free() {
        Err(e) if e.class() == ErrorClass::RmaSync => {}
        other => return Err(fail(format!("free with a lock held: {other:?}"))),
    }
    w.barrier()?;
    let mut mine = [0u32; 8];
    win.read_local(0, &mut mine)?;
    if mine != [7; 8] {
        return Err(fail(format!("a refused access touched the window: {mine:?}")));
    }
    win.free()
}

/// Rank 1 computes for two seconds without calling mpr while rank 0 locks its window, puts,
/// and unlocks: rank 0 prints how long that took (the progress thread's bound), and rank 1
/// then finds the value in its window.
fn busy_target(w: &Comm) -> R {
    let me = w.rank();
    let win = window::<u64>(w, 4)?;
    w.barrier()?;
    if me == 1 {
        let t0 = std::time::Instant::now();
        let mut x = 1u64;
        while t0.elapsed() < std::time::Duration::from_secs(2) {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
    } else if me == 0 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let t0 = std::time::Instant::now();
        win.lock(LockType::Exclusive, 1)?;
        win.put(&[0xfeed, 0xbeef], 1, 1)?;
        win.unlock(1)?;
        println!("lock, put and unlock on a busy target took {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
    }
    w.barrier()?;
    if me == 1 {
        let mut v = [0u64; 4];
        win.read_local(0, &mut v)?;
        if v != [0, 0xfeed, 0xbeef, 0] {
            return Err(fail(format!("the busy target's window holds {v:x?}")));
        }
    }
    win.free()
}

/// A window in shared memory per host (`split_shared`, `allocate_shared`): the parts lie
/// one after the other in rank order; each rank stores into its own part and loads its
/// neighbour's through `shared_query`. `allocate_shared` on a communicator that spans hosts
/// is a clear error.
fn shared(w: &Comm) -> R {
    let node = w.split_shared(0)?;
    let (me, n) = (node.rank(), node.size());
    match Window::<u64>::allocate_shared(w, 1) {
        Ok(all) if n == w.size() => all.free()?,
        Err(e) if n < w.size() => {
            if !e.to_string().contains("cannot share memory") {
                return Err(fail(format!("allocate_shared across hosts: unclear error {e}")));
            }
            println!("allocate_shared across hosts: {e}");
        }
        Ok(_) => return Err(fail("allocate_shared across hosts succeeded".into())),
        Err(e) => return Err(e),
    }
    let win = Window::<u64>::allocate_shared(&node, 4 + me)?;
    let mut end: Option<*mut u64> = None;
    for r in 0..n {
        let (p, len) = win.shared_query(r).ok_or_else(|| fail(format!("no shared part of rank {r}")))?;
        if len != 4 + r || end.is_some_and(|e| e != p) {
            return Err(fail(format!("part of rank {r}: {len} elements at {p:?}, after {end:?}")));
        }
        end = Some(p.wrapping_add(len));
    }
    let (mine, len) = win.shared_query(me).expect("checked above");
    for i in 0..len {
        // SAFETY: this rank's own part, which nobody else touches until the barrier.
        unsafe { mine.add(i).write_volatile((me * 100 + i) as u64) };
    }
    win.sync()?;
    node.barrier()?;
    win.sync()?;
    let next = (me + 1) % n;
    let (theirs, len) = win.shared_query(next).expect("checked above");
    for i in 0..len {
        // SAFETY: the neighbour's part, written before the barrier and not since.
        let v = unsafe { theirs.add(i).read_volatile() };
        if v != (next * 100 + i) as u64 {
            return Err(fail(format!("element {i} of rank {next}'s part is {v}")));
        }
    }
    node.barrier()?;
    win.free()
}

/// A dynamic window: each rank attaches two slices and tells the others their addresses;
/// puts, accumulates and gets reach them there; an access where nothing is attached (never,
/// or no longer after a detach) is refused, the target intact.
fn dynamic(w: &Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let win = Window::<u64>::create_dynamic(w)?;
    let a: &'static mut [u64] = Box::leak(vec![0u64; 16].into_boxed_slice());
    let b: &'static mut [u64] = Box::leak(vec![7u64; 4].into_boxed_slice());
    let mine = [win.attach(a)? as u64, win.attach(b)? as u64];
    let mut addrs = vec![0u64; 2 * n];
    w.allgather(&mine, &mut addrs)?;
    let (at, bt) = (addrs[2 * next] as usize, addrs[2 * next + 1] as usize);
    win.lock_all()?;
    let vals: Vec<u64> = (0..16).map(|i| (me * 100 + i) as u64).collect();
    win.put(&vals[4..], next, at + 4 * 8)?;
    win.accumulate(&[5, 6], next, bt + 8, Sum)?;
    win.flush(next)?;
    let mut got = [0u64; 4];
    win.get(&mut got, next, bt)?;
    if got != [7, 12, 13, 7] {
        return Err(fail(format!("the second slice of rank {next} holds {got:?}")));
    }
    win.unlock_all()?;
    w.barrier()?;
    // This rank's own slices, through the window.
    win.lock(LockType::Shared, me)?;
    let mut own = [0u64; 16];
    win.get(&mut own, me, mine[0] as usize)?;
    let want: Vec<u64> = (0..16).map(|i| if i < 4 { 0 } else { (prev * 100 + i) as u64 }).collect();
    if own[..] != want[..] {
        return Err(fail(format!("this rank's first slice holds {own:?}")));
    }
    match win.get(&mut own, me, mine[0] as usize + 8) {
        Err(e) if e.class() == ErrorClass::RmaRange => {}
        other => return Err(fail(format!("a get past this rank's own slice: {other:?}"))),
    }
    win.unlock(me)?;
    w.barrier()?;
    // Nothing attached past the first slice's end, and nothing at the second once detached.
    win.detach(mine[1] as usize)?;
    w.barrier()?;
    // Refused by the target at its next flush or unlock; at once for this rank's own window
    // (a job of one rank).
    let refused = |r: mpr::Result<()>, what: &str| -> R {
        match r {
            Err(e) if next == me && e.class() == ErrorClass::RmaRange => Ok(()),
            Err(e) if next != me && e.to_string().contains("refused 1 puts or accumulates") => {
                if me == 0 {
                    println!("{what}: {e}");
                }
                Ok(())
            }
            other => Err(fail(format!("{what}: {other:?}"))),
        }
    };
    win.lock(LockType::Exclusive, next)?;
    match win.put(&[1, 2], next, at + 15 * 8) {
        Ok(()) => refused(win.flush(next), "put past an attached slice")?,
        e => refused(e, "put past an attached slice")?,
    }
    match win.accumulate(&[1], next, bt, Sum) {
        Ok(()) => refused(win.unlock(next), "accumulate into a detached slice")?,
        e => {
            refused(e, "accumulate into a detached slice")?;
            win.unlock(next)?;
        }
    }
    let mut one = [0u64];
    win.lock(LockType::Shared, next)?;
    match win.get(&mut one, next, bt) {
        Err(e) if e.to_string().contains("refused") || e.class() == ErrorClass::RmaRange => {}
        other => return Err(fail(format!("a get from a detached slice: {other:?}"))),
    }
    win.get(&mut one, next, at + 15 * 8)?;
    if one[0] != (me * 100 + 15) as u64 {
        return Err(fail(format!("a refused put changed the target: {}", one[0])));
    }
    win.unlock(next)?;
    w.barrier()?;
    win.free()
}

/// Rank 1 is killed (SIGKILL) while rank 0 writes 1 MiB into its window in lock epochs, by
/// whatever path the window gives: rank 0's put, flush or unlock fails with an error that
/// names rank 1, which it prints before leaving (mprun then ends the job).
fn target_dies(w: &Comm) -> R {
    let win = window::<u8>(w, 1 << 20)?;
    w.barrier()?;
    match w.rank() {
        0 => {
            // mprun stops the job when rank 1 dies: rank 0 stays to see its error.
            // SAFETY: setting a signal's disposition to SIG_IGN installs no handler code.
            unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            let data = vec![7u8; 1 << 20];
            let t0 = std::time::Instant::now();
            loop {
                let r =
                    win.lock(LockType::Exclusive, 1).and_then(|()| win.put(&data, 1, 0)).and_then(|()| win.unlock(1));
                match r {
                    Err(e) => {
                        println!("rank 0 saw: {e}");
                        std::process::exit(0);
                    }
                    Ok(()) if t0.elapsed().as_secs() > 30 => return Err(fail("rank 1 died unnoticed".into())),
                    Ok(()) => {}
                }
            }
        }
        _ => {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let _ = std::process::Command::new("kill").args(["-9", &std::process::id().to_string()]).status();
            std::thread::sleep(std::time::Duration::from_secs(10));
            Ok(())
        }
    }
}

/// Synchronisation with promises (`MPI_MODE_*`), each checked by the data it must deliver:
/// fences that complete nothing or open nothing (an operation after a NOSUCCEED fence is an
/// error), locks without a lock at the target, post/start without their handshake; and
/// rget_accumulate.
fn asserts(w: &Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    let next = (me + 1) % n;
    let win = window::<u64>(w, 3 * n + 3)?;
    let check = |what: &str, at: usize, want: u64| -> R {
        let mut got = [0u64];
        win.read_local(at, &mut got)?;
        match got[0] == want {
            true => Ok(()),
            false => Err(fail(format!("{what}: element {at} is {}, want {want}", got[0]))),
        }
    };
    // Fence epochs: the first completes nothing, the last opens nothing.
    win.fence_with(Assert::NOPRECEDE)?;
    win.put(&[10 + me as u64], next, me)?;
    win.fence_with(Assert::NOSUCCEED | Assert::NOSTORE)?;
    let prev = (me + n - 1) % n;
    check("put between fences", prev, 10 + prev as u64)?;
    match win.put(&[1], next, me) {
        Err(e) if e.class() == ErrorClass::RmaSync => {}
        other => return Err(fail(format!("put after a NOSUCCEED fence: {other:?}"))),
    }
    // Locks without a lock at the target: each origin writes its own element.
    w.barrier()?;
    win.lock_with(LockType::Shared, next, Assert::NOCHECK)?;
    win.put(&[20 + me as u64], next, n + me)?;
    win.accumulate(&[5], next, 3 * n, Sum)?;
    win.unlock(next)?;
    win.lock_all_with(Assert::NOCHECK)?;
    for t in 0..n {
        win.accumulate(&[1], t, 3 * n + 1, Sum)?;
    }
    win.unlock_all()?;
    w.barrier()?;
    check("put under a NOCHECK lock", n + prev, 20 + prev as u64)?;
    check("accumulate under a NOCHECK lock", 3 * n, 5)?;
    check("accumulates under a NOCHECK lock_all", 3 * n + 1, n as u64)?;
    // Post/start without the handshake: the barrier orders every post before every start.
    let everyone: Vec<usize> = (0..n).collect();
    win.post_with(&everyone, Assert::NOCHECK | Assert::NOPUT)?;
    w.barrier()?;
    win.start_with(&everyone, Assert::NOCHECK)?;
    win.put(&[30 + me as u64], next, 2 * n + me)?;
    let mut old = [0u64; 1];
    mpr::scope(|s| -> R {
        let r = win.rget_accumulate(s, &[7], &mut old, next, 3 * n + 2, Sum)?;
        r.wait()?;
        Ok(())
    })?;
    win.complete()?;
    win.wait()?;
    check("put under a NOCHECK start", 2 * n + prev, 30 + prev as u64)?;
    check("rget_accumulate", 3 * n + 2, 7)?;
    if old[0] != 0 {
        return Err(fail(format!("rget_accumulate returned {}, want 0", old[0])));
    }
    w.barrier()?;
    win.free()
}
