//! OSU-style one-sided tests: rank 0 operates on rank 1's window; rank 1 takes part only
//! where the synchronisation needs it (fence, post/wait), and otherwise waits in a barrier
//! (its engine, or its progress thread, serves the operations).
//!
//! Latency tests time one operation and its completion (`--sync`) per iteration; the `_bw`
//! tests a window of `--window` operations and one completion. `put_bw` uses `put` (which
//! returns once its buffer may be reused, as `MPI_Put` may); `get_bw` uses `rget` (a `get`
//! returns with its data), each into its own slot of the buffer (Rust lends each request its
//! own slice), at most 16 MiB of slots at once: beyond that, the window's gets go in batches.

use bytemuck::Pod;
use mpr::{Comm, Elem, LockType, Sum, Window};

use super::{schedule, sizes, Bench, Opts, Paged, SyncKind, WinKind, BANDWIDTH, LATENCY};

type R<T = ()> = mpr::Result<T>;

pub(crate) fn run(w: &Comm, o: &Opts) -> R {
    let title = match o.what {
        Bench::PutLatency => "Put Latency",
        Bench::GetLatency => "Get Latency",
        Bench::AccLatency => "Accumulate Latency",
        Bench::FopLatency => "Fetch_and_op Latency",
        Bench::CasLatency => "Compare_and_swap Latency",
        Bench::PutBw => "Put Bandwidth",
        _ => "Get Bandwidth",
    };
    if w.rank() == 0 {
        println!("# mpr-bench {title} Test");
        println!("# Window creation: {:?}", o.win);
        println!("# Synchronization: {:?}", o.sync);
        match o.what {
            Bench::PutBw | Bench::GetBw => println!("# Size      Bandwidth (MB/s)"),
            _ => println!("# Size          Latency (us)"),
        }
    }
    match o.what {
        Bench::AccLatency => with_window::<i32>(w, o, o.max / 4, |win, at| latency(w, o, win, at, 4)),
        Bench::FopLatency | Bench::CasLatency => with_window::<u64>(w, o, 1, |win, at| latency(w, o, win, at, 8)),
        _ => with_window::<u8>(w, o, o.max.max(1), |win, at| match o.what {
            Bench::PutBw | Bench::GetBw => bandwidth(w, o, win, at),
            _ => latency(w, o, win, at, 1),
        }),
    }
}

/// Makes the window `o.win` asks for, of `len` elements at each rank, runs `f` on it with
/// the displacement of rank 1's memory (0, or its address in a dynamic window), and frees
/// it.
fn with_window<T: Pod>(w: &Comm, o: &Opts, len: usize, f: impl FnOnce(&Window<'_, T>, usize) -> R) -> R {
    match o.win {
        WinKind::Allocate => {
            let win = Window::<T>::allocate(w, len)?;
            f(&win, 0)?;
            win.free()
        }
        WinKind::Create => {
            let mut store = Paged::new(len, T::zeroed());
            let win = Window::create(w, store.get())?;
            f(&win, 0)?;
            win.free()
        }
        WinKind::Dynamic => {
            let mut store = Paged::new(len, T::zeroed());
            let win = Window::create_dynamic(w)?;
            let mut at = [win.attach(store.get())? as u64];
            w.bcast(&mut at, 1)?;
            f(&win, at[0] as usize)?;
            win.free()
        }
    }
}

/// One timed step: rank 0's `ops` and their completion under `o.sync`, with rank 1's part.
fn step<T: Pod>(win: &Window<'_, T>, o: &Opts, ops: impl FnOnce() -> R) -> R {
    match (o.sync, win.comm().rank()) {
        (SyncKind::Flush, 0) => {
            ops()?;
            win.flush(1)
        }
        (SyncKind::Lock, 0) => {
            win.lock(LockType::Exclusive, 1)?;
            ops()?;
            win.unlock(1)
        }
        (SyncKind::Fence, r) if r < 2 => {
            win.fence()?;
            if r == 0 {
                ops()?;
            }
            win.fence()
        }
        (SyncKind::Pscw, 0) => {
            win.start(&[1])?;
            ops()?;
            win.complete()
        }
        (SyncKind::Pscw, 1) => {
            win.post(&[0])?;
            win.wait()
        }
        _ => Ok(()),
    }
}

/// Runs `iters + skip` steps of `ops` and returns the time of the last `iters` (rank 0's).
fn timed<T: Pod>(
    w: &Comm,
    o: &Opts,
    win: &Window<'_, T>,
    (iters, skip): (usize, usize),
    mut ops: impl FnMut() -> R,
) -> R<f64> {
    let me = w.rank();
    w.barrier()?;
    let flush = o.sync == SyncKind::Flush && me == 0;
    if flush {
        win.lock(LockType::Shared, 1)?;
    }
    let mut t0 = 0.0;
    for i in 0..iters + skip {
        if i == skip {
            t0 = mpr::wtime();
        }
        step(win, o, &mut ops)?;
    }
    let t = mpr::wtime() - t0;
    if flush {
        win.unlock(1)?;
    }
    w.barrier()?;
    Ok(t)
}

/// Latency of one operation of `elem`-byte elements per step, for every size (one row of 8
/// bytes for the atomics).
fn latency<T: Elem + mpr::op::Number>(w: &Comm, o: &Opts, win: &Window<'_, T>, at: usize, elem: usize) -> R {
    let list = match o.what {
        Bench::FopLatency | Bench::CasLatency => vec![8],
        _ => sizes(o.min.max(elem), o.max, false),
    };
    let mut src = Paged::new(o.max / elem + 1, T::zeroed());
    let mut dst = Paged::new(o.max / elem + 1, T::zeroed());
    let (src, dst) = (src.get(), dst.get());
    for size in list {
        let n = size / elem;
        let it = schedule(size, &LATENCY, o);
        let t = timed(w, o, win, it, || match o.what {
            Bench::PutLatency => win.put(&src[..n], 1, at),
            Bench::GetLatency => win.get(&mut dst[..n], 1, at),
            Bench::AccLatency => win.accumulate(&src[..n], 1, at, Sum),
            Bench::FopLatency => win.fetch_and_op(src[0], 1, at, Sum).map(drop),
            _ => win.compare_and_swap(src[0], dst[0], 1, at).map(drop),
        })?;
        if w.rank() == 0 {
            println!("{size:<10}{:>18.3}", t * 1e6 / it.0 as f64);
        }
    }
    Ok(())
}

/// Bandwidth of `--window` puts or gets per step, for every size.
fn bandwidth(w: &Comm, o: &Opts, win: &Window<'_, u8>, at: usize) -> R {
    let n = o.window as usize;
    let src = Paged::new(o.max.max(1), b'a');
    let src = src.slice();
    for size in sizes(o.min.max(1), o.max, false) {
        let batch = n.min(((16 << 20) / size).max(1));
        let mut slots = Paged::new(batch * size, 0u8);
        let slots = slots.get();
        let it = schedule(size, &BANDWIDTH, o);
        let t = timed(w, o, win, it, || {
            if o.what == Bench::PutBw {
                // `put` returns once its buffer may be reused, as MPI_Put may: the window of
                // puts is in flight together until the flush.
                for _ in 0..n {
                    win.put(&src[..size], 1, at)?;
                }
            }
            if o.what == Bench::GetBw {
                for k in (0..n).step_by(batch) {
                    mpr::scope(|s| -> R {
                        let mut reqs = Vec::with_capacity(batch);
                        for slot in slots.chunks_mut(size).take(batch.min(n - k)) {
                            reqs.push(win.rget(s, slot, 1, at)?);
                        }
                        mpr::wait_all(reqs).map(drop)
                    })?;
                }
            }
            Ok(())
        })?;
        if w.rank() == 0 {
            println!("{size:<10}{:>18.3}", (size * n * it.0) as f64 / t / 1e6);
        }
    }
    Ok(())
}
