//! The job's shared-memory segments (`/dev/shm/mpr-<jobid>...`) are removed after the job,
//! however it ends.
#![cfg(target_os = "linux")]

mod common;

use common::{code, run, stderr, stdout};

/// Runs a 2-rank job where rank 0 creates `/dev/shm/mpr-$MPR_JOBID-test` and prints the job
/// id, then runs `then`; returns the exit code and the segment's path.
fn job_with_segment(then: &str) -> (i32, std::path::PathBuf) {
    let script = format!("if [ $MPR_RANK = 0 ]; then : > /dev/shm/mpr-$MPR_JOBID-test; echo $MPR_JOBID; {then}; fi");
    let out = run(&["-np", "2", "sh", "-c", &script]);
    let jobid = stdout(&out).trim().to_string();
    assert_eq!(jobid.len(), 16, "{}", stderr(&out));
    (code(&out), format!("/dev/shm/mpr-{jobid}-test").into())
}

#[test]
fn segments_are_removed_after_a_successful_job() {
    let (code, segment) = job_with_segment("true");
    assert_eq!(code, 0);
    assert!(!segment.exists(), "{} was left behind", segment.display());
}

#[test]
fn segments_are_removed_after_a_rank_is_killed() {
    let (code, segment) = job_with_segment("kill -9 $$");
    assert_eq!(code, 137);
    assert!(!segment.exists(), "{} was left behind", segment.display());
}

#[test]
fn other_jobs_segments_are_kept() {
    let other = std::path::Path::new("/dev/shm").join(format!("mpr-other-{}", std::process::id()));
    std::fs::write(&other, b"").unwrap();
    let (code, _) = job_with_segment("true");
    assert_eq!(code, 0);
    assert!(other.exists());
    std::fs::remove_file(other).unwrap();
}
