//! mprun serves PMI-1 on each rank's `PMI_FD`; the rank program is the `pmi_client` example
//! (built by `cargo test` with the other examples).

mod common;

use std::path::PathBuf;

use common::{code, run, stderr};

/// The built `pmi_client` example, next to the test binaries.
fn pmi_client() -> String {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let client: PathBuf = profile_dir.join("examples").join("pmi_client");
    assert!(
        client.exists(),
        "{} is missing: build it with `cargo build --release -p mpr-launcher --examples`",
        client.display()
    );
    client.to_str().unwrap().to_string()
}

#[test]
fn ranks_exchange_keys_through_pmi() {
    let client = pmi_client();
    for np in ["1", "3"] {
        let out = run(&["-np", np, &client]);
        assert_eq!(code(&out), 0, "-np {np}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{}", stderr(&out));
    }
}

#[test]
fn pmi_abort_stops_the_job_with_its_code() {
    let out = run(&["-np", "2", &pmi_client(), "abort", "7"]);
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("aborted the job with code 7: giving_up; stopping the job"), "{err}");
}

#[test]
fn a_malformed_pmi_line_closes_that_connection_only() {
    let out = run(&["-np", "2", &pmi_client(), "garbage"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("sent a malformed PMI command; closing its PMI connection"));
}

/// A rank that sends a line without end, or commands whose replies it never reads, has its
/// PMI connection closed once it passes the bound (16 KiB of line, 64 KiB of replies), with
/// the reason on mprun's stderr: mprun's memory does not grow with what a rank sends.
#[test]
fn a_rank_that_floods_its_pmi_connection_is_cut_off() {
    for (mode, why) in [
        ("long-line", "rank 0 sent a PMI line longer than 16384 bytes; closing its PMI connection"),
        ("unread-replies", "rank 0 leaves its PMI replies unread (over 64 KiB queued); closing its PMI connection"),
    ] {
        let out = run(&["-np", "1", &pmi_client(), mode]);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{mode}: {}", stderr(&out));
    }
}
