//! Jobs started by a real Slurm (Debian `slurm-wlm`, `munge`): `srun --mpi=pmi2` (and
//! `--mpi=pmix`) starts mpr ranks itself, and `mprun` inside a `salloc` allocation uses its
//! hosts and starts its proxies with `srun`.
//!
//! Each test brings up a one-machine cluster of its own: munged, slurmctld and two slurmd
//! daemons for nodes `n1` and `n2` (both on this machine, each with 4 CPUs), configured in a
//! fresh directory and on free ports, and stops all of it when it ends, passing or failing.
//! Ranks on one node share memory; ranks on the two nodes reach each other over TCP.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mpr_tests::{assert_all_ok, bin_dir, processes_with, text};

/// One cluster at a time: they would share munge's and Slurm's defaults otherwise.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Cluster {
    dir: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn have(tool: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"].iter().any(|d| Path::new(d).join(tool).exists())
}

impl Cluster {
    /// Starts the cluster and waits until both nodes are idle; `None` (after saying why)
    /// where Slurm is not installed.
    fn start() -> Option<Cluster> {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let missing: Vec<&str> = ["munged", "slurmctld", "slurmd", "srun", "salloc", "sinfo", "scancel", "scontrol"]
            .into_iter()
            .filter(|t| !have(t))
            .collect();
        if !missing.is_empty() {
            mpr_tests::cannot_run(&format!("not installed: {missing:?} (apt-get install slurm-wlm munge)"));
            return None;
        }
        let dir = std::env::temp_dir().join(format!("mpr-slurm-{}-{}", std::process::id(), free_port()));
        let _ = std::fs::remove_dir_all(&dir);
        // (Slurm's PMIx plugin keeps its sockets in the node's spool directory.)
        for sub in ["munge", "state", "spool/n1", "spool/n2", "log"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let cluster = Cluster { dir, _turn: turn };
        cluster.write_config();
        let d = |p: &str| cluster.dir.join(p).to_str().unwrap().to_string();
        cluster.daemon(Command::new("munged").args([
            "--force",
            &format!("--socket={}", d("munge/sock")),
            &format!("--key-file={}", d("munge/key")),
            &format!("--pid-file={}", d("munge/pid")),
            &format!("--log-file={}", d("munge/log")),
            &format!("--seed-file={}", d("munge/seed")),
        ]));
        cluster.daemon(Command::new("slurmctld").args(["-f", &d("slurm.conf")]));
        for node in ["n1", "n2"] {
            cluster.daemon(Command::new("slurmd").args(["-f", &d("slurm.conf"), "-N", node]));
        }
        let t0 = Instant::now();
        loop {
            let out = cluster.cmd("sinfo").args(["-h", "-N", "-o", "%N %T"]).output().unwrap();
            let states = text(&out.stdout);
            if states.lines().filter(|l| l.ends_with(" idle")).count() == 2 {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the test cluster did not come up: sinfo says {states:?} {}\n{}",
                text(&out.stderr),
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(cluster)
    }

    fn write_config(&self) {
        let key: Vec<u8> =
            (0..1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ std::process::id() as u8).collect();
        let key_path = self.dir.join("munge/key");
        std::fs::write(&key_path, key).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o400)).unwrap();
        std::fs::set_permissions(self.dir.join("munge"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let host = nix_hostname();
        let d = self.dir.to_str().unwrap();
        let (ctld, slurmd, p1, p2) = (free_port(), free_port(), free_port(), free_port());
        // The epilog the docs recommend: it removes what a killed job left in /dev/shm.
        let epilog = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/slurm-epilog.sh");
        let epilog = epilog.canonicalize().unwrap();
        let epilog = epilog.display();
        let conf = format!(
            "ClusterName=mprtest\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={d}/munge/sock\n\
             CredType=cred/munge\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool/%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             KillWait=2\n\
             SlurmdParameters=config_overrides\n\
             JobCompType=jobcomp/filetxt\n\
             JobCompLoc={d}/jobcomp.txt\n\
             Epilog={epilog}\n\
             NodeName=n1 NodeHostname={host} NodeAddr=127.0.0.1 Port={p1} CPUs=4 State=UNKNOWN\n\
             NodeName=n2 NodeHostname={host} NodeAddr=127.0.0.1 Port={p2} CPUs=4 State=UNKNOWN\n\
             PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n"
        );
        std::fs::write(self.dir.join("slurm.conf"), conf).unwrap();
    }

    /// Runs a daemon (which forks into the background) and checks it started.
    fn daemon(&self, c: &mut Command) {
        let out = c.env("SLURM_CONF", self.dir.join("slurm.conf")).output().unwrap();
        assert!(out.status.success(), "{c:?} failed: {}\n{}", text(&out.stderr), self.logs());
    }

    /// A Slurm command against this cluster.
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.dir.join("slurm.conf"));
        // The tests' own Slurm environment, if any, must not leak into these jobs.
        for (k, _) in std::env::vars() {
            if k.starts_with("SLURM_") || k.starts_with("MPR_") || k.starts_with("PMI_") {
                c.env_remove(k);
            }
        }
        c.env("SLURM_CONF", self.dir.join("slurm.conf")).current_dir(&self.dir);
        c
    }

    /// Runs `srun` with `args` under a time limit.
    fn srun(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.cmd("timeout");
        c.arg("120").arg("srun").args(args).envs(env.iter().copied());
        c.output().unwrap()
    }

    /// The job completion records (Slurm's `jobcomp/filetxt`).
    fn jobcomp(&self) -> String {
        std::fs::read_to_string(self.dir.join("jobcomp.txt")).unwrap_or_default()
    }

    /// The record of job `id`, once Slurm has written it.
    fn record(&self, id: &str) -> String {
        self.record_where(&format!("job {id}"), |l| l.starts_with(&format!("JobId={id} ")))
    }

    /// The completion record of the job named `name` (a name used once), once written.
    fn record_named(&self, name: &str) -> String {
        self.record_where(&format!("job {name}"), |l| l.contains(&format!(" Name={name} ")))
    }

    fn record_where(&self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let all = self.jobcomp();
            if let Some(l) = all.lines().find(|l| wanted(l)) {
                return l.to_string();
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no completion record for {what}:\n{all}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for f in ["log/slurmctld.log", "log/slurmd-n1.log", "log/slurmd-n2.log", "munge/log"] {
            let t = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(15).collect();
            s += &format!("--- {f}\n{}\n", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        s
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first (their steps would outlive slurmd), then the daemons.
        let _ = self.cmd("scancel").args(["--quiet", "--user=root"]).status();
        for pid_file in ["slurmd-n1.pid", "slurmd-n2.pid", "slurmctld.pid", "munge/pid"] {
            let Some(pid) =
                std::fs::read_to_string(self.dir.join(pid_file)).ok().and_then(|p| p.trim().parse::<i32>().ok())
            else {
                continue;
            };
            // SAFETY: kill(2) with a pid the daemon wrote; no memory is involved.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let t0 = Instant::now();
            // SAFETY: signal 0 only asks whether the process exists.
            while unsafe { libc::kill(pid, 0) } == 0 && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // Steps of this cluster still running (a test that failed mid-job).
        for p in processes_with(&format!("{}", self.dir.display())) {
            if let Some(pid) = p.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn nix_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0, "gethostname");
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    name.split('.').next().unwrap_or_default().to_string()
}

/// mpr's files in /dev/shm.
fn shm_files() -> Vec<String> {
    let names = std::fs::read_dir("/dev/shm").into_iter().flatten().flatten();
    names.map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("mpr-")).collect()
}

fn bin(name: &str) -> String {
    bin_dir().join(name).to_str().unwrap().to_string()
}

/// The command lines of running processes started as `program` whose line mentions `marker`.
fn started_as(program: &str, marker: &str) -> usize {
    processes_with(marker)
        .iter()
        .filter(|p| p.split_once(": ").is_some_and(|(_, cmd)| cmd.starts_with(program)))
        .count()
}

#[test]
fn srun_pmi2_runs_the_point_to_point_and_collective_suites() {
    let Some(c) = Cluster::start() else { return };
    let (ptp, coll) = (bin("ptp"), bin("coll"));
    for (nodes, n) in [("1", 1), ("2", 2), ("2", 4)] {
        let np = n.to_string();
        let shape = ["--mpi=pmi2", "-N", nodes, "-n", &np];
        let scenarios: &[&str] =
            if n == 1 { &["ring", "self"] } else { &["ring", "pairs", "anysource", "many", "probe"] };
        for &scenario in scenarios {
            let out = c.srun(&[&shape[..], &[&ptp, scenario]].concat(), &[("PTP_MAX", "300000")]);
            assert_all_ok(&out, &format!("{scenario} ok"), n);
        }
        let out = c.srun(&[&shape[..], &[&coll, "all"]].concat(), &[]);
        assert_all_ok(&out, &format!("of {n}: coll ok"), n);
    }
    // The bootstrap says what it used: PMI-2, Slurm's job id, two nodes, a drawn secret;
    // shared memory within a node and TCP between the nodes (3 ranks on n1, 1 on n2).
    let out = c.srun(&["--mpi=pmi2", "-N", "2", "-n", "4", &ptp, "ring"], &[("MPR_VERBOSE", "1")]);
    assert_all_ok(&out, "ring ok", 4);
    let err = text(&out.stderr);
    // Slurm's job id, as PMI-2 gives it (JOB.STEP): its record says Name=ptp.
    let id = err
        .split("started through the launcher's PMI-2 service, job ")
        .nth(1)
        .and_then(|t| t.split_once(".0, 2 node(s) by its process mapping"))
        .map(|(id, _)| id.to_string())
        .unwrap_or_else(|| panic!("no PMI-2 line: {err}"));
    assert!(c.record(&id).contains(" Name=ptp "), "{}", c.record(&id));
    assert_eq!(err.matches("rank 0 drew a 128-bit job secret").count(), 1, "{err}");
    assert!(err.contains("rank 0 -> rank 1: shm") && err.contains("rank 0 -> rank 3: tcp"), "{err}");
    assert!(err.contains("rank 3 -> rank 2: tcp"), "{err}");
    // A secret the user passes is used as it is: nothing is drawn.
    let out = c.srun(
        &["--mpi=pmi2", "--export=ALL,MPR_SECRET=00112233445566778899aabbccddeeff", "-N", "2", "-n", "2", &ptp, "ring"],
        &[("MPR_VERBOSE", "1")],
    );
    assert_all_ok(&out, "ring ok", 2);
    let err = text(&out.stderr);
    assert!(!err.contains("drew a") && err.contains("started through the launcher's PMI-2 service"), "{err}");
    // A rank that fails during start-up (here: an interface that does not exist) asks
    // Slurm to end the step: the other one does not wait out its fences and connections.
    let script = format!("if [ \"$SLURM_PROCID\" = 1 ]; then export MPR_IFACE=no-such-if0; fi; exec {ptp} ring");
    let t0 = Instant::now();
    let out = c.srun(&["--mpi=pmi2", "-N", "2", "-n", "2", "sh", "-c", &script], &[]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("mpr: rank 1: start-up failed") && err.contains("no-such-if0"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "the job ended at once: {err}");
}

#[test]
fn mprun_takes_the_hosts_of_a_batch_allocation_from_its_environment() {
    let ptp = bin("ptp");
    let run = |env: &[(&str, &str)]| {
        let mut c = Command::new(bin("mprun"));
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SLURM_") || k.starts_with("PBS_")) {
            c.env_remove(k);
        }
        c.args([&ptp, "ring"]).envs(env.iter().copied()).output().unwrap()
    };
    // A PBS job: one line per slot.
    let dir = std::env::temp_dir().join(format!("mpr-pbs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = dir.join("nodes");
    std::fs::write(&nodes, "localhost\nlocalhost\nlocalhost\n").unwrap();
    let out = run(&[("PBS_NODEFILE", nodes.to_str().unwrap())]);
    assert_all_ok(&out, "ring ok", 3);
    // A Slurm job's variables (this machine's name as the node: no srun is needed).
    let slurm = [("SLURM_JOB_ID", "7"), ("SLURM_JOB_NODELIST", "localhost"), ("SLURM_TASKS_PER_NODE", "2(x1)")];
    assert_all_ok(&run(&slurm), "ring ok", 2);
    // Broken ones: a clear error before anything starts.
    let bad = [("SLURM_JOB_ID", "7"), ("SLURM_JOB_NODELIST", "n[1-2]"), ("SLURM_TASKS_PER_NODE", "2")];
    let out = run(&bad);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("SLURM_TASKS_PER_NODE=2 gives 1 counts for the 2 nodes of SLURM_JOB_NODELIST=n[1-2]"),
        "{err}"
    );
    let out = run(&[("SLURM_JOB_ID", "7"), ("SLURM_JOB_NODELIST", "n[2-1]"), ("SLURM_TASKS_PER_NODE", "1")]);
    assert!(
        text(&out.stderr).contains("SLURM_JOB_NODELIST=n[2-1]: range 2-1 in [2-1] runs backwards"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&[("PBS_NODEFILE", dir.join("missing").to_str().unwrap())]);
    assert!(
        text(&out.stderr).contains("PBS_NODEFILE=") && text(&out.stderr).contains("cannot read it"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn srun_pmix_starts_mpr_ranks_through_libpmix() {
    let Some(c) = Cluster::start() else { return };
    let (ptp, coll) = (bin("ptp"), bin("coll"));
    // One node: Slurm's PMIx plugin gives every node of a machine the same scratch
    // directory, so two slurmd nodes of one machine cannot both serve PMIx.
    let shape = ["--mpi=pmix", "-N", "1", "-n", "3"];
    for scenario in ["ring", "pairs", "anysource", "probe"] {
        let out = c.srun(&[&shape[..], &[&ptp, scenario]].concat(), &[("PTP_MAX", "300000")]);
        assert_all_ok(&out, &format!("{scenario} ok"), 3);
    }
    let out = c.srun(&[&shape[..], &[&coll, "all"]].concat(), &[("MPR_TRANSPORTS", "tcp")]);
    assert_all_ok(&out, "of 3: coll ok", 3);
    let out = c.srun(&[&shape[..], &[&ptp, "ring"]].concat(), &[("MPR_VERBOSE", "1")]);
    assert_all_ok(&out, "ring ok", 3);
    let err = text(&out.stderr);
    assert!(err.contains("started through the launcher's PMIx service, job slurm.pmix."), "{err}");
    assert!(err.contains(", 3 rank(s) on this node") && err.contains("rank 0 -> rank 2: shm"), "{err}");
    assert_eq!(err.matches("rank 0 drew a 128-bit job secret").count(), 1, "{err}");
}

#[test]
fn salloc_and_mprun_use_the_allocation_and_srun() {
    let Some(c) = Cluster::start() else { return };
    let (mprun, ptp, coll) = (bin("mprun"), bin("ptp"), bin("coll"));
    let salloc = |args: &[&str]| {
        let mut cmd = c.cmd("timeout");
        cmd.args(["120", "salloc"]).args(args);
        cmd.output().unwrap()
    };
    // No host named: the allocation's (3 tasks on n1, 1 on n2), proxies through srun.
    let out = salloc(&["-N", "2", "-n", "4", &mprun, "--verbose", &ptp, "ring"]);
    assert_all_ok(&out, "ring ok", 4);
    let err = text(&out.stderr);
    assert!(err.contains("starting 4 rank(s)") && err.contains("on n1 (3 rank(s)), n2 (1 rank(s))"), "{err}");
    assert!(err.contains("starting its proxy: srun --nodes=1 --ntasks=1 --nodelist=n2"), "{err}");
    let out = salloc(&["-N", "2", "-n", "4", &mprun, &coll, "all"]);
    assert_all_ok(&out, "of 4: coll ok", 4);
    // -np beyond the allocation's tasks deals the rest out over its nodes.
    let out = salloc(&["-N", "2", "--ntasks-per-node=1", &mprun, "-np", "3", &ptp, "pairs"]);
    assert_all_ok(&out, "pairs ok", 3);
}

#[test]
fn a_dead_rank_ends_the_job_with_the_cause_in_slurm_and_mprun() {
    let Some(c) = Cluster::start() else { return };
    let ptp = bin("ptp");
    let marker = format!("slurm-dies-{}", std::process::id());
    let shm_before = shm_files();
    // Under srun: rank 1 SIGKILLs itself while the others wait for it in an allreduce.
    let out = c.srun(
        &["--mpi=pmi2", "-J", &marker, "-N", "2", "-n", "4", &ptp, "peer-dies", &marker],
        &[("PEER_DIES_IN", "allreduce")],
    );
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    // (Whether a peer also says so races with Slurm ending the step on the kill.)
    assert!(err.contains("task 1: Killed"), "srun names the killed rank: {err}");
    let rec = c.record_named(&marker);
    assert!(rec.contains("JobState=FAILED") && rec.contains("ExitCode=0:9"), "{rec}");
    assert!(processes_with(&marker).is_empty(), "left running: {:?}", processes_with(&marker));
    // Slurm kills the others mid-job; what they could not remove, the epilog does.
    let t0 = Instant::now();
    let left = || shm_files().into_iter().filter(|f| !shm_before.contains(f)).collect::<Vec<String>>();
    while !left().is_empty() && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(left().is_empty(), "shared-memory files left by the failed job: {:?}", left());
    // A rank's abort (PMI-2 `abort`, isworld) makes Slurm end the whole step at once.
    let name = format!("{marker}-abort");
    let t0 = Instant::now();
    let out = c.srun(&["--mpi=pmi2", "-J", &name, "-N", "2", "-n", "4", &ptp, "abort", &marker], &[]);
    assert!(!out.status.success(), "{}", text(&out.stderr));
    assert!(t0.elapsed() < Duration::from_secs(20), "the others did not wait out their 30 s: {}", text(&out.stderr));
    assert!(c.record_named(&name).contains("JobState=FAILED"), "{}", c.record_named(&name));
    assert!(processes_with(&marker).is_empty(), "left running: {:?}", processes_with(&marker));
    // Under mprun in an allocation: mprun names the rank and its signal, and fails.
    let mut cmd = c.cmd("timeout");
    cmd.args(["120", "salloc", "-N", "2", "-n", "4", &bin("mprun"), &ptp, "peer-dies", &marker]);
    let out = cmd.env("PEER_DIES_IN", "allreduce").output().unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("rank 1") && err.contains("SIGKILL"), "mprun names the rank and its signal: {err}");
    assert!(processes_with(&marker).is_empty(), "left running: {:?}", processes_with(&marker));
}

#[test]
fn scancel_ends_an_srun_job_and_an_mprun_job() {
    let Some(c) = Cluster::start() else { return };
    let ptp = bin("ptp");
    for how in ["srun", "mprun"] {
        let marker = format!("slurm-cancel-{how}-{}", std::process::id());
        // Every rank waits (no rank is told to fail); the job is cancelled from outside.
        let mut cmd = c.cmd("timeout");
        match how {
            "srun" => {
                cmd.args(["120", "srun", "--mpi=pmi2", "-J", &marker, "-N", "2", "-n", "4", &ptp, "exit", &marker])
            }
            _ => cmd.args(["120", "salloc", "-J", &marker, "-N", "2", "-n", "4", &bin("mprun"), &ptp, "exit", &marker]),
        };
        let child = cmd.env("PTP_FAIL_RANK", "99").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let t0 = Instant::now();
        while started_as(&ptp, &marker) < 4 {
            assert!(t0.elapsed() < Duration::from_secs(30), "the ranks never started");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(300));
        let cancelled = c.cmd("scancel").args(["--name", &marker]).status().unwrap();
        assert!(cancelled.success());
        let t1 = Instant::now();
        let out = child.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{how}: {err}");
        assert!(t1.elapsed() < Duration::from_secs(20), "{how}: the job ended promptly: {err}");
        let rec = c.record_named(&marker);
        assert!(rec.contains("JobState=CANCELLED"), "{how}: {rec}");
        let t2 = Instant::now();
        while !processes_with(&marker).is_empty() && t2.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(processes_with(&marker).is_empty(), "{how}: left running: {:?}", processes_with(&marker));
    }
}
