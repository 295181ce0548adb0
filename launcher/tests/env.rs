//! What each rank gets: its environment, its stdin, its PMI socket.

mod common;

use std::collections::BTreeSet;

use common::{code, mprun, run, run_with, stderr, stdout};

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[test]
fn all_ranks_exiting_0_make_mprun_exit_0() {
    let out = run(&["-np", "4", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

#[test]
fn every_rank_gets_its_identity() {
    let script = "echo rank=$MPR_RANK size=$MPR_SIZE local_rank=$MPR_LOCAL_RANK local_size=$MPR_LOCAL_SIZE \
                  jobid=$MPR_JOBID secret=$MPR_SECRET pmi_rank=$PMI_RANK pmi_size=$PMI_SIZE pmi_fd=$PMI_FD \
                  sock=$([ -S /proc/$$/fd/$PMI_FD ] && echo yes || echo no)";
    let out = run(&["-np", "3", "sh", "-c", script]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let mut ranks = BTreeSet::new();
    let mut jobids = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for line in lines {
        let field = |k: &str| {
            line.split(' ')
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("no {k} in {line}"))
                .to_string()
        };
        let rank = field("rank");
        ranks.insert(rank.clone());
        assert_eq!(field("size"), "3");
        assert_eq!(field("local_rank"), rank);
        assert_eq!(field("local_size"), "3");
        assert_eq!(field("pmi_rank"), rank);
        assert_eq!(field("pmi_size"), "3");
        assert!(field("pmi_fd").parse::<u32>().unwrap() > 2, "{line}");
        if cfg!(target_os = "linux") {
            assert_eq!(field("sock"), "yes", "PMI_FD is not an open socket: {line}");
        }
        assert!(is_lower_hex(&field("jobid"), 16), "{line}");
        assert!(is_lower_hex(&field("secret"), 32), "{line}");
        jobids.insert(field("jobid"));
        secrets.insert(field("secret"));
    }
    assert_eq!(ranks, ["0", "1", "2"].map(String::from).into());
    assert_eq!(jobids.len(), 1, "one job id per job");
    assert_eq!(secrets.len(), 1, "one secret per job");

    let again = stdout(&run(&["-np", "1", "sh", "-c", "echo $MPR_JOBID $MPR_SECRET"]));
    let (jobid, secret) = again.trim().split_once(' ').unwrap();
    assert!(!jobids.contains(jobid) && !secrets.contains(secret), "ids are random per job");
}

#[test]
fn x_and_env_add_variables() {
    let mut cmd = mprun(&[
        "-np",
        "2",
        "-x",
        "MPR_TEST_FROM_MPRUN",
        "-x",
        "MPR_TEST_SET=by-x",
        "--env",
        "MPR_TEST_KV=a=b",
        "--env",
        "MPR_TEST_OVERRIDE=new",
        "sh",
        "-c",
        "echo \"$MPR_RANK $MPR_TEST_FROM_MPRUN $MPR_TEST_SET $MPR_TEST_KV $MPR_TEST_OVERRIDE $MPR_TEST_PLAIN\"",
    ]);
    cmd.env("MPR_TEST_FROM_MPRUN", "exported").env("MPR_TEST_OVERRIDE", "old").env("MPR_TEST_PLAIN", "inherited");
    let out = run_with(cmd, None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut lines: Vec<_> = stdout(&out).lines().map(String::from).collect();
    lines.sort();
    assert_eq!(lines, ["0 exported by-x a=b new inherited", "1 exported by-x a=b new inherited"].map(String::from));
}

#[test]
fn stdin_reaches_rank_0_only() {
    let cmd = mprun(&["-np", "3", "sh", "-c", "read line; echo \"$MPR_RANK:[$line]\""]);
    let out = run_with(cmd, Some(b"hello ranks\n"));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut lines: Vec<_> = stdout(&out).lines().map(String::from).collect();
    lines.sort();
    assert_eq!(lines, ["0:[hello ranks]", "1:[]", "2:[]"].map(String::from));
}
