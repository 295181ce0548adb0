//! Ranks started by Open MPI's `mpirun` (Debian `openmpi-bin`): a PMIx server, reached
//! through its library (libpmix).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use mpr_tests::{assert_all_ok, bin_dir, text};

fn mpirun(np: &str, args: &[&str], env: &[(&str, &str)]) -> Option<Output> {
    // Open MPI's own name for it: `mpirun` may be MPICH's where both are installed.
    let found = Command::new("mpirun.openmpi")
        .arg("--version")
        .output()
        .is_ok_and(|o| ["Open MPI", "OpenRTE"].iter().any(|n| text(&o.stdout).contains(n)));
    if !found {
        mpr_tests::cannot_run("Open MPI's mpirun not installed (apt-get install openmpi-bin)");
        return None;
    }
    let mut c = Command::new("timeout");
    // Root runs (CI) need Open MPI's consent; more ranks than cores need --oversubscribe.
    c.args(["120", "mpirun.openmpi", "--oversubscribe", "-n", np]).args(args);
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("MPR_") || k.starts_with("PMI") || k.starts_with("SLURM_") {
            c.env_remove(k);
        }
    }
    Some(c.envs(env.iter().copied()).output().unwrap())
}

fn bin(name: &str) -> String {
    bin_dir().join(name).to_str().unwrap().to_string()
}

#[test]
fn open_mpi_mpirun_starts_mpr_ranks_over_shared_memory_and_tcp() {
    let ptp = bin("ptp");
    for transports in ["shm,tcp", "tcp"] {
        for scenario in ["ring", "pairs", "anysource", "many", "probe"] {
            let env = [("MPR_TRANSPORTS", transports), ("PTP_MAX", "300000")];
            let Some(out) = mpirun("3", &[&ptp, scenario], &env) else { return };
            assert_all_ok(&out, &format!("{scenario} ok"), 3);
        }
    }
    let Some(out) = mpirun("4", &[&bin("coll"), "all"], &[]) else { return };
    assert_all_ok(&out, "of 4: coll ok", 4);
    // What the bootstrap used: PMIx, Open MPI's namespace, one node, a drawn secret.
    let Some(out) = mpirun("2", &[&ptp, "ring"], &[("MPR_VERBOSE", "1")]) else { return };
    assert_all_ok(&out, "ring ok", 2);
    let err = text(&out.stderr);
    assert!(
        err.contains("started through the launcher's PMIx service, job ") && err.contains(", 2 rank(s) on this node"),
        "{err}"
    );
    assert_eq!(err.matches("rank 0 drew a 128-bit job secret").count(), 1, "{err}");
}

#[test]
fn an_abort_under_open_mpi_ends_the_job_with_its_code() {
    let t0 = Instant::now();
    // Rank 1 aborts with code 7 after a barrier; the others would wait 30 s.
    let Some(out) = mpirun("3", &[&bin("ptp"), "abort"], &[]) else { return };
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(t0.elapsed() < Duration::from_secs(20), "the others did not wait out their 30 s");
}
