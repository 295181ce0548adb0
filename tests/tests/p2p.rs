//! Point-to-point conformance through mprun: real processes, shared memory, every scenario
//! of the `ptp` rank program, in the default configuration and in the fallbacks (no
//! single-copy reads; tiny rings that force back-pressure and wrap-around).

use mpr_tests::{bin_dir, mprun, mprun_path, text};

fn run(np: usize, scenario: &str, env: &[(&str, &str)]) {
    let ptp = bin_dir().join("ptp");
    let np = np.to_string();
    let out = mprun(&["-np", &np, "--timeout", "120", ptp.to_str().unwrap(), scenario], env);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{scenario} on {np} ranks {env:?} failed: {:?}\nstdout:\n{so}\nstderr:\n{se}",
        out.status
    );
    let oks = so.lines().filter(|l| *l == format!("{scenario} ok")).count();
    assert_eq!(oks, np.parse::<usize>().unwrap(), "every rank reports success:\n{so}\n{se}");
}

const NO_CMA: &[(&str, &str)] = &[("MPR_SHM_CMA", "0")];
const TINY_RINGS: &[(&str, &str)] = &[("MPR_SHM_CELLS", "4"), ("MPR_SHM_CELL_SIZE", "512"), ("MPR_SHM_CMA", "0")];

#[test]
fn ring_pass() {
    for np in [1, 2, 3, 5] {
        run(np, "ring", &[]);
    }
}

#[test]
fn pairs_random_sizes_up_to_16mib() {
    run(3, "pairs", &[]);
}

#[test]
fn pairs_without_single_copy() {
    run(2, "pairs", NO_CMA);
}

#[test]
fn pairs_single_copy_read_only_and_split_everywhere() {
    // Split copy off: the receiver reads every large message alone.
    run(2, "pairs", &[("MPR_SPLIT_COPY_MIN", "0"), ("PTP_MAX", "4000000")]);
    // Split copy from the smallest rendezvous size up (the sender writes half of each).
    run(3, "pairs", &[("MPR_SPLIT_COPY_MIN", "1"), ("PTP_MAX", "4000000")]);
}

#[test]
fn pairs_with_tiny_rings() {
    run(3, "pairs", &[("PTP_MAX", "300000"), TINY_RINGS[0], TINY_RINGS[1], TINY_RINGS[2]]);
}

#[test]
fn any_source_any_tag() {
    run(4, "anysource", &[]);
}

#[test]
fn non_overtaking_under_load() {
    run(4, "order", &[]);
    run(2, "order", TINY_RINGS);
}

#[test]
fn probe_then_recv_vec() {
    run(3, "probe", &[]);
}

#[test]
fn truncation_is_an_error_naming_both_sizes() {
    run(2, "truncate", &[]);
    run(2, "truncate", NO_CMA);
}

#[test]
fn thousands_of_outstanding_requests() {
    run(3, "many", &[]);
    run(2, "many", TINY_RINGS);
}

#[test]
fn send_to_self() {
    run(1, "self", &[]);
    run(2, "self", &[]);
}

#[test]
fn invalid_rank_and_tag() {
    run(2, "badargs", &[]);
}

#[test]
fn singleton_without_launcher() {
    // Started directly, a program is a job of one rank (MPI singleton init).
    let out = std::process::Command::new(bin_dir().join("ptp")).arg("self").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).lines().any(|l| l == "self ok"));
}

/// The whole point-to-point suite again with TCP between every pair of ranks (loopback).
mod over_tcp {
    use super::run;

    const TCP: (&str, &str) = ("MPR_TRANSPORTS", "tcp");

    #[test]
    fn ring_pairs_anysource() {
        run(3, "ring", &[TCP]);
        run(3, "pairs", &[TCP, ("PTP_MAX", "4000000")]);
        run(4, "anysource", &[TCP]);
    }

    #[test]
    fn order_probe_truncate() {
        run(4, "order", &[TCP]);
        run(3, "probe", &[TCP]);
        run(2, "truncate", &[TCP]);
    }

    #[test]
    fn many_self_badargs() {
        run(3, "many", &[TCP]);
        run(2, "self", &[TCP]);
        run(2, "badargs", &[TCP]);
    }

    /// Rendezvous messages carrying their first 512 KiB (or, with small frames, 3000 bytes)
    /// in the request: placed straight into posted receives, kept for late ones, cut short
    /// by a receive too small, and in order with everything else.
    #[test]
    fn rendezvous_heads() {
        const HEAD: (&str, &str) = ("MPR_RNDV_HEAD", "524288");
        run(3, "pairs", &[TCP, HEAD, ("PTP_MAX", "4000000")]);
        run(4, "anysource", &[TCP, HEAD]);
        run(4, "order", &[TCP, HEAD]);
        run(2, "truncate", &[TCP, HEAD]);
        run(3, "probe", &[TCP, HEAD]);
        let small = [TCP, ("MPR_RNDV_HEAD", "3000"), ("MPR_TCP_FRAME", "4096"), ("MPR_TCP_EAGER", "3000")];
        run(3, "pairs", &[small[0], small[1], small[2], small[3], ("PTP_MAX", "1000000")]);
    }

    #[test]
    fn small_frames_and_buffers() {
        // Frames smaller than most messages: everything is streamed in many pieces.
        run(3, "pairs", &[TCP, ("MPR_TCP_FRAME", "4096"), ("MPR_TCP_EAGER", "1000"), ("PTP_MAX", "1000000")]);
    }

    /// Stray and forged connections to the ranks' TCP listeners are closed and logged; the
    /// job is unaffected.
    #[test]
    fn stray_connections_are_turned_away() {
        use std::io::Write;
        let ptp = super::bin_dir().join("ptp");
        let child = std::process::Command::new(super::mprun_path())
            .args(["-np", "2", "--timeout", "60", ptp.to_str().unwrap(), "idle"])
            .env("MPR_TRANSPORTS", "tcp")
            .env("PTP_IDLE_MS", "3000")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Find the ranks' listeners (`ss` lists the owning process) and talk nonsense to them.
        let mut hit = 0;
        let t0 = std::time::Instant::now();
        while hit == 0 && t0.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let ss = std::process::Command::new("ss").args(["-ltnpH"]).output().expect("ss (iproute2)");
            for line in String::from_utf8_lossy(&ss.stdout).lines().filter(|l| l.contains("\"ptp\"")) {
                let Some(addr) = line.split_whitespace().nth(3) else { continue };
                if let Ok(mut s) = std::net::TcpStream::connect(addr) {
                    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\nMPR1\x00\x00\x00\x00forged-nonce-xx");
                    hit += 1;
                }
            }
        }
        assert!(hit > 0, "found no rank listener to connect to");
        let out = child.wait_with_output().unwrap();
        let (so, se) = (super::text(&out.stdout), super::text(&out.stderr));
        assert!(out.status.success(), "{so}\n{se}");
        assert_eq!(so.lines().filter(|l| *l == "idle ok").count(), 2, "{so}");
        assert!(se.contains("closed an unexpected TCP connection from 127.0.0.1"), "{se}");
    }

    #[test]
    fn shm_only() {
        run(3, "pairs", &[("MPR_TRANSPORTS", "shm"), ("PTP_MAX", "100000")]);
    }
}

#[test]
fn unknown_transport_is_a_clear_error() {
    let ptp = bin_dir().join("ptp");
    let out = mprun(&["-np", "2", ptp.to_str().unwrap(), "ring"], &[("MPR_TRANSPORTS", "carrier-pigeon")]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("unknown transport \"carrier-pigeon\""), "{err}");
}
