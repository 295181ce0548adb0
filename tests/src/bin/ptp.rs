//! Point-to-point conformance checks, run as the ranks of a job: `mprun -np N ptp SCENARIO`.
//! Each scenario checks what arrived and exits non-zero (with a message) on any mismatch.

use mpr::{Error, ANY_SOURCE, ANY_TAG};
use mpr_tests::{check, pattern};
use rand::{Rng, SeedableRng};

type R = mpr::Result<()>;

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    // PTP_UNTRACEABLE=RANK:before|after: that rank makes itself not dumpable (so a peer
    // without CAP_SYS_PTRACE may not read its memory) before init, or after init and a
    // barrier (after its peers checked that they could).
    let untraceable_job = std::env::var("PTP_UNTRACEABLE").ok();
    let untraceable = untraceable_job.as_deref().and_then(|v| {
        let (rank, when) = v.split_once(':')?;
        (std::env::var("MPR_RANK").ok()? == rank).then(|| when.to_string())
    });
    if untraceable.as_deref() == Some("before") {
        not_dumpable();
    }
    // PTP_INIT_DELAY_MS=RANK:MS: that rank starts MS milliseconds late (its peers wait in
    // start-up meanwhile, their listeners open).
    if let Some(ms) = std::env::var("PTP_INIT_DELAY_MS").ok().and_then(|v| {
        let (rank, ms) = v.split_once(':')?;
        (std::env::var("MPR_RANK").ok()? == rank).then(|| ms.parse::<u64>().ok())?
    }) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let universe = match mpr::init() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("init failed: {e}");
            std::process::exit(2);
        }
    };
    let w = universe.world();
    if untraceable_job.is_some_and(|v| v.ends_with(":after")) {
        // Once every rank is through init (and so through its checks of the others).
        if let Err(e) = w.barrier() {
            eprintln!("barrier failed: {e}");
            std::process::exit(1);
        }
        if untraceable.is_some() {
            not_dumpable();
        }
    }
    if w.rank() == 0 {
        println!("jobid {}", std::env::var("MPR_JOBID").unwrap_or_default());
    }
    let r = match scenario.as_str() {
        "ring" => ring(&w),
        "pairs" => pairs(&w),
        "offsets" => offsets(&w),
        "anysource" => anysource(&w),
        "order" => order(&w),
        "probe" => probe(&w),
        "truncate" => truncate(&w),
        "many" => many(&w),
        "self" => selfsend(&w),
        "badargs" => badargs(&w),
        "peer-dies" => peer_dies(&w),
        "exit" => exit_code(&w),
        "abort" => abort(&w),
        "timeout" => wait_timeout(&w),
        "self-timeout" => self_timeout(&w),
        "idle" => idle(&w),
        "probe-gone" => probe_gone(&w),
        "leave" => leave(&w),
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
    println!("{scenario} ok");
}

/// Makes this process not dumpable: only a process with CAP_SYS_PTRACE may read its memory.
#[cfg(target_os = "linux")]
fn not_dumpable() {
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) takes integers only and touches no memory of ours.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_DUMPABLE,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    assert_eq!(r, 0, "prctl(PR_SET_DUMPABLE, 0)");
}

#[cfg(not(target_os = "linux"))]
fn not_dumpable() {
    panic!("PTP_UNTRACEABLE needs Linux");
}

/// A token goes around the ring several times; each rank adds its rank.
fn ring(w: &mpr::Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let laps = 50u64;
    let mut tok = [0u64; 2];
    for lap in 0..laps {
        if me == 0 {
            tok = [lap, tok[1]];
            w.send(&tok, next, 5)?;
            w.recv(&mut tok, prev, 5)?;
            assert_eq!(tok[0], lap);
        } else {
            w.recv(&mut tok, prev, 5)?;
            tok[1] += me as u64;
            w.send(&tok, next, 5)?;
        }
    }
    if me == 0 {
        let want = laps * (0..n as u64).sum::<u64>();
        assert_eq!(tok[1], want, "token sum");
    }
    Ok(())
}

/// Every ordered pair exchanges messages of random sizes from 0 B to 16 MiB.
fn pairs(w: &mpr::Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    let max: usize = std::env::var("PTP_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(16 << 20);
    let sizes = |a: usize, b: usize| -> Vec<usize> {
        let mut rng = rand::rngs::SmallRng::seed_from_u64((a * 1000 + b) as u64);
        // Around the eager limits: shared memory (64 KiB; 8 KiB with many ranks), RDMA (32 KiB)
        // and TCP (256 KiB).
        let mut v = vec![0, 1, 8, 8192, 8193, 8200, 8201, 32768, 32769, 65536, 65537, 262144, 262145, max];
        v.extend((0..6).map(|_| rng.gen_range(0..=max)));
        v.extend((0..6).map(|_| 1usize << rng.gen_range(0..=max.ilog2())));
        v.into_iter().map(|s| s.min(max)).collect()
    };
    for k in 1..n {
        let to = (me + k) % n;
        let from = (me + n - k) % n;
        let (out, inn) = (sizes(me, to), sizes(from, me));
        for (seq, (&so, &si)) in out.iter().zip(&inn).enumerate() {
            let msg = pattern(me, to, seq, so);
            let mut got = vec![0u8; si];
            let st = w.sendrecv(&msg, to, seq as i32, &mut got, from, seq as i32)?;
            assert_eq!((st.source, st.tag, st.bytes), (from, seq as i32, si));
            check(&got, from, me, seq, si);
        }
    }
    Ok(())
}

/// Every ordered pair exchanges messages between buffers at every mix of offsets within a
/// page, the receive buffer a short distance (1 to 63 bytes, modulo a page) past the send
/// buffer among them: the distance that the single-copy path moves through its bounce buffer.
/// Every byte arrives, and the bytes around the receive buffer stay as they were.
fn offsets(w: &mpr::Comm) -> R {
    const PAGE: usize = 4096;
    let (me, n) = (w.rank(), w.size());
    let offsets = [0usize, 16, 1, 63, 64, 4080];
    let page_at = |v: &[u8]| (v.as_ptr() as usize).next_multiple_of(PAGE) - v.as_ptr() as usize;
    let mut seq = 0;
    for k in 1..n {
        let to = (me + k) % n;
        let from = (me + n - k) % n;
        for size in [8193usize, 65543, 300_000, 2 << 20] {
            for so in offsets {
                for ro in offsets {
                    let mut out = vec![0u8; size + 2 * PAGE];
                    let s0 = page_at(&out) + so;
                    out[s0..s0 + size].copy_from_slice(&pattern(me, to, seq, size));
                    let mut inn = vec![0xa5u8; size + 2 * PAGE];
                    let r0 = page_at(&inn) + ro;
                    let tag = seq as i32;
                    let st = w.sendrecv(&out[s0..s0 + size], to, tag, &mut inn[r0..r0 + size], from, tag)?;
                    assert_eq!((st.source, st.bytes), (from, size));
                    check(&inn[r0..r0 + size], from, me, seq, size);
                    assert!(
                        inn[..r0].iter().chain(&inn[r0 + size..]).all(|&b| b == 0xa5),
                        "message {seq} ({size} B, sent at offset {so}, received at {ro}) wrote outside its buffer"
                    );
                    seq += 1;
                }
            }
        }
    }
    Ok(())
}

/// Rank 0 receives from anyone with any tag; per-sender order must hold.
fn anysource(w: &mpr::Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    let per = 200usize;
    if me == 0 {
        let mut next_seq = vec![0usize; n];
        for _ in 0..per * (n - 1) {
            let mut buf = vec![0u8; 20000];
            let st = w.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            let seq = next_seq[st.source];
            assert_eq!(st.tag as usize, seq % 7, "tag from {}", st.source);
            let len = (seq * 97) % 20000;
            check(&buf[..st.bytes], st.source, 0, seq, len);
            next_seq[st.source] += 1;
        }
        assert!(next_seq[1..].iter().all(|&c| c == per), "counts {next_seq:?}");
    } else {
        for seq in 0..per {
            let len = (seq * 97) % 20000;
            w.send(&pattern(me, 0, seq, len), 0, (seq % 7) as i32)?;
        }
    }
    Ok(())
}

/// Messages between one pair on one tag arrive in send order, eager and rendezvous mixed,
/// while the receiver is late (everything unexpected) and while it is early (all posted).
fn order(w: &mpr::Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    let count = 300usize;
    let len_of = |seq: usize| {
        if seq.is_multiple_of(5) {
            100_000 + seq
        } else {
            seq * 13
        }
    };
    for round in 0..2 {
        if me % 2 == 0 && me + 1 < n {
            let to = me + 1;
            // Nonblocking, so that a late receiver cannot deadlock the large (rendezvous) sends.
            let msgs: Vec<Vec<u8>> = (0..count).map(|seq| pattern(me, to, seq, len_of(seq))).collect();
            mpr::scope(|s| -> R {
                let reqs = msgs.iter().map(|m| w.isend(s, &m[..], to, 3)).collect::<Result<Vec<_>, _>>()?;
                w.send(&[0u8], to, 4)?;
                mpr::wait_all(reqs)?;
                Ok(())
            })?;
        } else if me % 2 == 1 {
            let from = me - 1;
            if round == 0 {
                // Late receiver: wait until the end marker is there (all of them unexpected).
                w.probe(from, 4)?;
            }
            let tag = if round == 0 { 3 } else { ANY_TAG };
            for seq in 0..count {
                let (v, st) = w.recv_vec::<u8>(from, tag)?;
                assert_eq!(st.tag, 3);
                check(&v, from, me, seq, len_of(seq));
            }
            w.recv(&mut [0u8], from, 4)?;
        }
    }
    Ok(())
}

/// probe / iprobe report source, tag and size; recv_vec takes a message of unknown size.
fn probe(w: &mpr::Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    if me == 0 {
        for src in 1..n {
            for seq in 0..3 {
                let st = w.probe(src, ANY_TAG)?;
                assert_eq!(st.source, src);
                let len = 1000 * src + seq * 50_000;
                assert_eq!(st.bytes, len);
                assert_eq!(st.count::<u8>(), Some(len));
                let (v, st2) = w.recv_vec::<u8>(src, st.tag)?;
                assert_eq!(st2, st);
                check(&v, src, 0, seq, len);
            }
        }
        // iprobe finds nothing when nothing was sent, and finds the final message.
        assert!(w.iprobe(ANY_SOURCE, 99)?.is_none());
        w.send(&[1u8], 1, 98)?;
        loop {
            if let Some(st) = w.iprobe(1, 99)? {
                assert_eq!((st.source, st.tag, st.bytes), (1, 99, 16));
                let (v, _) = w.recv_vec::<u64>(1, 99)?;
                assert_eq!(v, vec![7u64, 9]);
                break;
            }
        }
        // A size that is not a whole number of elements is a Count error.
        let e = w.recv_vec::<u64>(1, 97).unwrap_err();
        assert_eq!(e, Error::Count { bytes: 5, elem: 8 });
        w.recv(&mut [0u8; 5], 1, 97)?;
    } else {
        for seq in 0..3 {
            let len = 1000 * me + seq * 50_000;
            w.send(&pattern(me, 0, seq, len), 0, 10 + seq as i32)?;
        }
        if me == 1 {
            w.recv(&mut [0u8], 0, 98)?;
            w.send(&[7u64, 9], 0, 99)?;
            w.send(&[0u8; 5], 0, 97)?;
        }
    }
    Ok(())
}

/// A message larger than the receive buffer is a Truncate error naming both sizes, for
/// eager and rendezvous sizes; communication goes on afterwards.
fn truncate(w: &mpr::Comm) -> R {
    let me = w.rank();
    for (i, &(len, cap)) in [(100usize, 10usize), (1 << 20, 1 << 19)].iter().enumerate() {
        if me == 0 {
            w.send(&vec![7u8; len], 1, i as i32)?;
        } else if me == 1 {
            let mut buf = vec![0u8; cap];
            match w.recv(&mut buf, 0, i as i32) {
                Err(e @ Error::Truncate { message, buffer, source, tag }) => {
                    assert_eq!((message, buffer, source, tag), (len, cap, 0, i as i32));
                    assert_eq!(e.class(), mpr::ErrorClass::Truncate);
                    println!("rank 1 got the expected error: {e}");
                }
                other => panic!("expected a truncation error, got {other:?}"),
            }
        }
    }
    if me == 0 {
        w.send(&pattern(0, 1, 0, 5000), 1, 50)?;
    } else if me == 1 {
        let mut v = vec![0u8; 5000];
        w.recv(&mut v, 0, 50)?;
        check(&v, 0, 1, 0, 5000);
    }
    Ok(())
}

/// Thousands of outstanding nonblocking requests, completed with wait_all, wait_any and
/// test_all.
fn many(w: &mpr::Comm) -> R {
    let (me, n) = (w.rank(), w.size());
    // PTP_MANY=COUNT,LEN: fewer, larger messages (all in flight at once).
    let (count, len) = std::env::var("PTP_MANY")
        .ok()
        .and_then(|v| v.split_once(',').and_then(|(c, l)| Some((c.parse().ok()?, l.parse().ok()?))))
        .unwrap_or((4000usize, 3000usize));
    let len_of = |i: usize| (i * 31 * len / 3000) % len;
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let outs: Vec<Vec<u8>> = (0..count).map(|i| pattern(me, to, i, len_of(i))).collect();
    let mut ins: Vec<Vec<u8>> = (0..count).map(|i| vec![0u8; len_of(i)]).collect();
    mpr::scope(|s| -> R {
        let mut recvs = Vec::new();
        for (i, b) in ins.iter_mut().enumerate() {
            recvs.push(w.irecv(s, &mut b[..], from, (i % 100) as i32)?);
        }
        let mut sends = Vec::new();
        for (i, b) in outs.iter().enumerate() {
            sends.push(w.isend(s, &b[..], to, (i % 100) as i32)?);
        }
        // Half the receives by wait_any, the rest by test_all polling, sends by wait_all.
        let mut seen = vec![false; count];
        let idx: Vec<usize> = (0..count).collect();
        let mut live = idx.clone();
        for _ in 0..count / 2 {
            let (i, st) = mpr::wait_any(&mut recvs)?;
            let orig = live.remove(i);
            assert!(!seen[orig]);
            seen[orig] = true;
            assert_eq!(st.bytes, len_of(orig));
        }
        loop {
            if let Some(sts) = mpr::test_all(&mut recvs)? {
                for (k, st) in sts.iter().enumerate() {
                    assert_eq!(st.bytes, len_of(live[k]));
                }
                break;
            }
        }
        mpr::wait_all(sends)?;
        Ok(())
    })?;
    for (i, b) in ins.iter().enumerate() {
        check(b, from, me, i, len_of(i));
    }
    // Leaked requests: the scope still completes them before the buffers are released.
    let mut b = vec![0u8; 64];
    let out = pattern(me, to, 0, 64);
    mpr::scope(|s| -> R {
        let r = w.irecv(s, &mut b[..], from, 777)?;
        std::mem::forget(r);
        let q = w.isend(s, &out[..], to, 777)?;
        drop(q);
        Ok(())
    })?;
    check(&b, from, me, 0, 64);
    Ok(())
}

/// Sends to self, small (buffered) and large (matched later), before and after the receive.
fn selfsend(w: &mpr::Comm) -> R {
    let me = w.rank();
    for (seq, len) in [0usize, 10, 100_000, 5 << 20].into_iter().enumerate() {
        let msg = pattern(me, me, seq, len);
        if len < 100_000 {
            w.send(&msg, me, seq as i32)?;
            let (v, st) = w.recv_vec::<u8>(me, seq as i32)?;
            assert_eq!(st.source, me);
            check(&v, me, me, seq, len);
        } else {
            let mut got = vec![0u8; len];
            mpr::scope(|s| -> R {
                let q = w.isend(s, &msg[..], me, seq as i32)?;
                let r = w.irecv(s, &mut got[..], me, seq as i32)?;
                r.wait()?;
                q.wait()?;
                Ok(())
            })?;
            check(&got, me, me, seq, len);
        }
    }
    Ok(())
}

/// Invalid ranks and tags are errors, not panics.
fn badargs(w: &mpr::Comm) -> R {
    let n = w.size();
    assert_eq!(w.send(&[1u8], n, 0), Err(Error::Rank { rank: n, size: n }));
    assert_eq!(w.send(&[1u8], 0, -5), Err(Error::Tag(-5)));
    assert_eq!(w.recv(&mut [0u8], n + 3, 0).unwrap_err().class(), mpr::ErrorClass::Rank);
    assert_eq!(w.recv(&mut [0u8], 0, -7), Err(Error::Tag(-7)));
    Ok(())
}

/// Rank 1 dies by SIGKILL while rank 0 waits for it: rank 0 must get an error, not hang.
/// (Rank 0 ignores SIGTERM so that it outlives mprun's first stop signal and can report.)
fn peer_dies(w: &mpr::Comm) -> R {
    match w.rank() {
        0 => {
            // SAFETY: setting a signal disposition to SIG_IGN has no handler to race with.
            unsafe { libc_ignore_sigterm() };
            w.send(&[1u8], 1, 0)?;
            let mut b = [0u8; 8];
            // PEER_DIES_IN=allreduce: wait in a collective (on one host: in shared memory).
            let got = if std::env::var("PEER_DIES_IN").is_ok_and(|v| v == "allreduce") {
                w.allreduce_in_place(&mut b, mpr::Sum).map(|_| ())
            } else {
                w.recv(&mut b, 1, 1).map(|_| ())
            };
            match got {
                Err(e @ Error::PeerGone { .. }) => {
                    println!("rank 0 saw: {e}");
                    std::process::exit(0);
                }
                other => panic!("expected PeerGone, got {other:?}"),
            }
        }
        1 => {
            w.recv(&mut [0u8], 0, 0)?;
            let _ = std::process::Command::new("kill").args(["-9", &std::process::id().to_string()]).status();
            std::thread::sleep(std::time::Duration::from_secs(10));
            Ok(())
        }
        _ if std::env::var("PEER_DIES_IN").is_ok_and(|v| v == "allreduce") => {
            w.allreduce_in_place(&mut [0u8; 8], mpr::Sum).map(|_| ())
        }
        _ => Ok(()),
    }
}

/// # Safety
/// Changes the process-wide SIGTERM disposition.
unsafe fn libc_ignore_sigterm() {
    extern "C" {
        fn signal(sig: i32, handler: usize) -> usize;
    }
    // SAFETY: SIG_IGN (1) for SIGTERM (15) installs no handler code.
    unsafe {
        signal(15, 1);
    }
}

/// With MPR_WAIT_TIMEOUT set, a receive that nothing matches fails with Timeout; the ranks
/// then go on talking normally.
fn wait_timeout(w: &mpr::Comm) -> R {
    match w.rank() {
        0 => {
            let t0 = mpr::wtime();
            let e = w.recv(&mut [0u8; 4], 1, 123).unwrap_err();
            assert_eq!(e.class(), mpr::ErrorClass::Timeout, "{e}");
            println!("rank 0 timed out after {:.1} s: {e}", mpr::wtime() - t0);
            w.send(&[1u8], 1, 1)
        }
        1 => loop {
            // Rank 0's message comes after its own time-out: retry ours until it does.
            match w.recv(&mut [0u8], 0, 1) {
                Err(Error::Timeout(_)) => continue,
                r => break r.map(|_| ()),
            }
        },
        _ => Ok(()),
    }
}

/// Run with `MPR_WAIT_TIMEOUT`: a large send to self that nobody receives times out, and
/// its message is withdrawn: neither a probe nor a later receive finds it (a receive that
/// matched it would wait for a sender that gave up), the next message arrives whole.
fn self_timeout(w: &mpr::Comm) -> R {
    let me = w.rank();
    let len = 5 << 20;
    let gone = pattern(me, me, 1, len);
    let e = w.send(&gone, me, 77).unwrap_err();
    assert_eq!(e.class(), mpr::ErrorClass::Timeout, "{e}");
    assert_eq!(w.iprobe(me, 77)?, None, "the timed-out message is still there");
    let next = pattern(me, me, 2, len);
    let mut got = vec![0u8; len];
    mpr::scope(|s| -> R {
        let q = w.isend(s, &next[..], me, 77)?;
        w.recv(&mut got[..], me, 77)?;
        q.wait()?;
        Ok(())
    })?;
    check(&got, me, me, 2, len);
    println!("rank {me}: the timed-out send to self was withdrawn");
    Ok(())
}

/// Rank 1 leaves at once without sending; rank 0's probe of rank 1 (blocking, then inside
/// `recv_vec`) ends with an error naming it instead of waiting forever.
fn probe_gone(w: &mpr::Comm) -> R {
    if w.rank() == 0 {
        match w.probe(1, 5) {
            Err(e @ Error::PeerGone { .. }) => println!("rank 0 saw: {e}"),
            other => panic!("expected PeerGone, got {other:?}"),
        }
        match w.recv_vec::<u8>(1, 5) {
            Err(Error::PeerGone { rank: 1, .. }) => {}
            other => panic!("expected PeerGone, got {other:?}"),
        }
    }
    Ok(())
}

/// Rank 0 waits (polling) while rank 1 sleeps `PTP_IDLE_MS`, then they exchange a message:
/// a window for a test to throw stray connections at the ranks.
fn idle(w: &mpr::Comm) -> R {
    let ms: u64 = std::env::var("PTP_IDLE_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let len: usize = std::env::var("PTP_IDLE_LEN").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    match w.rank() {
        0 => {
            let (v, _) = w.recv_vec::<u8>(1, 9)?;
            check(&v, 1, 0, 0, len);
        }
        1 => {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            w.send(&pattern(1, 0, 0, len), 0, 9)?;
        }
        _ => {}
    }
    Ok(())
}

/// Rank 1 ends the job with `abort(7)` (MPI_Abort) after a barrier; the others wait 30 s,
/// unless the launcher ends them first.
fn abort(w: &mpr::Comm) -> R {
    w.barrier()?;
    if w.rank() == 1 {
        w.abort(7);
    }
    std::thread::sleep(std::time::Duration::from_secs(30));
    Ok(())
}

/// Rank `PTP_FAIL_RANK` exits with code 3 after a first exchange; the others wait.
fn exit_code(w: &mpr::Comm) -> R {
    let fail: usize = std::env::var("PTP_FAIL_RANK").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    if w.rank() == fail {
        std::process::exit(3);
    }
    std::thread::sleep(std::time::Duration::from_secs(30));
    Ok(())
}

/// Rank 1 leaves with code 0 without finalizing (an `exit(0)` in the middle of the
/// program); rank 0 waits for a message it will never send.
fn leave(w: &mpr::Comm) -> Result<(), Error> {
    if w.rank() == 1 {
        std::process::exit(0);
    }
    let mut b = [0u8; 8];
    w.recv(&mut b, 1, 0).map(|_| ())
}
