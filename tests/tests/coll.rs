//! Collectives and communicators through mprun: the `coll` rank program checks every
//! collective against a sequential reference, for 1 to 12 ranks and 32, each algorithm
//! forced in turn, on shared memory and over TCP.

use mpr_tests::{bin_dir, mprun, text};

fn run(np: usize, env: &[(&str, &str)]) {
    let coll = bin_dir().join("coll");
    let n = np.to_string();
    let out = mprun(&["-np", &n, "--timeout", "240", coll.to_str().unwrap()], env);
    let so = text(&out.stdout);
    assert!(out.status.success(), "coll on {np} ranks {env:?}: {:?}\n{so}\n{}", out.status, text(&out.stderr));
    assert_eq!(so.lines().filter(|l| l.ends_with("coll ok")).count(), np, "{so}");
}

#[test]
fn every_rank_count_from_1_to_7() {
    for np in 1..=7 {
        run(np, &[]);
    }
}

/// Larger jobs, where the groups of intercommunicators and trees have inner nodes: errors
/// passed down a tree name the rank that passed them (the suite's expectations of which
/// rank a mismatch comes from held only up to 7 ranks).
#[test]
fn eight_twelve_and_thirty_two_ranks() {
    for (np, max) in [(8, "70000"), (12, "20000"), (32, "2000")] {
        run(np, &[("COLL_MAX", max)]);
    }
}

#[test]
fn allreduce_algorithms_forced() {
    for algo in ["recursive-doubling", "ring", "reduce-bcast"] {
        for np in [3, 4, 6] {
            run(np, &[("MPR_ALLREDUCE_ALGO", algo), ("COLL_MAX", "70000")]);
        }
    }
}

#[test]
fn barrier_algorithms_forced() {
    // Linear runs by default when ranks outnumber cores and the barrier goes point to
    // point; each is forced on the other's ground too (never through the segment).
    for algo in ["dissemination", "linear"] {
        for np in [3, 5] {
            run(np, &[("MPR_BARRIER_ALGO", algo), ("COLL_MAX", "100")]);
        }
    }
}

#[test]
fn bcast_algorithms_forced() {
    for algo in ["binomial", "scatter-allgather", "flat"] {
        for np in [2, 5] {
            run(np, &[("MPR_BCAST_ALGO", algo), ("COLL_MAX", "70000")]);
        }
    }
}

#[test]
fn allgather_algorithms_forced() {
    for algo in ["bruck", "ring"] {
        for np in [3, 5, 6] {
            run(np, &[("MPR_ALLGATHER_ALGO", algo), ("COLL_MAX", "70000")]);
        }
    }
    // Recursive doubling runs by default on 4 ranks below 512 KiB; forced, it also takes
    // the large sizes.
    run(4, &[("MPR_ALLGATHER_ALGO", "recursive-doubling"), ("COLL_MAX", "300000")]);
}

#[test]
fn alltoall_algorithms_forced() {
    // Scattered runs by default when ranks outnumber cores, pairwise with a core per rank:
    // each is forced on the other's ground too (all-to-all and alltoallv).
    for algo in ["pairwise", "scattered"] {
        for np in [3, 4, 7] {
            run(np, &[("MPR_ALLTOALL_ALGO", algo), ("COLL_MAX", "70000")]);
        }
        run(4, &[("MPR_ALLTOALL_ALGO", algo), ("MPR_WAIT_SPIN", "50"), ("COLL_MAX", "70000")]);
    }
}

#[test]
fn over_tcp() {
    for np in [2, 3, 5] {
        run(np, &[("MPR_TRANSPORTS", "tcp"), ("COLL_MAX", "70000")]);
    }
}

#[test]
fn shared_memory_collectives_in_small_pieces() {
    // Every bcast and reduction through the host's collective segment, in 4 KiB pieces, and
    // every allgather and all-to-all that fits a slot.
    let env = [
        ("MPR_COLL_SHM_SLOT", "4096"),
        ("MPR_COLL_SHM_BCAST_MAX", "1000000000"),
        ("MPR_COLL_SHM_REDUCE_MAX", "1000000000"),
        ("MPR_COLL_SHM_GATHER_MAX", "1000000000"),
    ];
    for np in [2, 3, 5, 7] {
        run(np, &env);
    }
}

#[test]
fn point_to_point_collectives_only() {
    for np in [2, 4] {
        run(np, &[("MPR_COLL_SHM", "0"), ("COLL_MAX", "70000")]);
    }
}

#[test]
fn paths_for_a_core_per_rank() {
    // Ranks outnumber the cores here, which picks the shared-memory paths made for that;
    // with waits told to spin, the runtime takes the ones for a core per rank instead (the
    // ring all-reduce above 512 KiB, LL lines up to 280 B), decided alike on every rank.
    run(4, &[("MPR_WAIT_SPIN", "50")]);
}

/// Runs `coll` on `np` ranks with mprun confined to CPU 0 (`taskset`), verbose, with the
/// extra mprun flags `flags`; checks that every rank passed and returns the ranks' stderr.
fn on_cpu_0(np: usize, flags: &[&str], env: &[(&str, &str)]) -> String {
    let coll = bin_dir().join("coll");
    let n = np.to_string();
    let out = std::process::Command::new("taskset")
        .args(["-c", "0"])
        .arg(mpr_tests::mprun_path())
        .args(flags)
        .args(["-np", &n, "--timeout", "240", coll.to_str().unwrap()])
        .env("MPR_VERBOSE", "1")
        .envs(env.iter().copied())
        .output()
        .expect("run taskset");
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{so}\n{se}");
    assert_eq!(so.lines().filter(|l| l.ends_with("coll ok")).count(), np, "{so}");
    se
}

/// Ranks that share a CPU yield while they wait, whatever bound them: here `--bind-to core`
/// with more ranks than mprun's one CPU (the binding wraps round), where spinning first made
/// an 8-byte all-reduce take a millisecond. A rank with a CPU of its own spins first.
#[test]
fn ranks_bound_to_one_shared_cpu_yield_at_once() {
    let run = |np: usize| on_cpu_0(np, &["--bind-to", "core"], &[("COLL_MAX", "70000")]);
    let se = run(2);
    for r in 0..2 {
        let line = format!(
            "mpr: rank {r}: CPUs 0, 2 rank(s) on this host, 2 on this machine, outnumbered: waits yield at once"
        );
        assert!(se.contains(&line), "{se}");
    }
    let se = run(1);
    assert!(
        se.contains("mpr: rank 0: CPUs 0, 1 rank(s) on this host, 1 on this machine, waits spin, then yield"),
        "{se}"
    );
}

/// Ranks that share a CPU over TCP send at most 256 KiB eagerly and the first 256 KiB of a
/// larger message with its rendezvous request (a large eager message mostly arrives before
/// its receive there, and the answer to a request waits for a time slice); every collective
/// still checks out against its reference with messages of up to 2.4 MB.
#[test]
fn crowded_ranks_over_tcp_send_heads_and_smaller_eager_messages() {
    let se = on_cpu_0(3, &[], &[("MPR_TRANSPORTS", "tcp"), ("COLL_MAX", "300000")]);
    for (from, to) in [(0, 1), (1, 2), (2, 0)] {
        let line = format!(
            "mpr: rank {from} -> rank {to}: tcp (eager up to 262144 B, large messages by pipelined frames, \
             the first 262144 B with the request)"
        );
        assert!(se.contains(&line), "{se}");
    }
}
