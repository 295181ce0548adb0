//! `mpr-info` prints the build's transports, the RDMA devices (or why there are none) and the
//! topology, and exits 0 whatever it finds.

use std::process::{Command, Stdio};

fn mpr_info(args: &[&str]) -> (i32, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_mpr-info")).args(args).stdin(Stdio::null()).output().expect("mpr-info runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().expect("mpr-info exits"), text(&out.stdout), text(&out.stderr))
}

#[test]
fn the_report_lists_transports_rdma_and_topology() {
    let (code, out, err) = mpr_info(&[]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.starts_with(&format!("mpr {}\n", env!("CARGO_PKG_VERSION"))), "{out}");
    for transport in ["shm", "tcp", "rdma"] {
        assert!(out.lines().any(|l| l.trim_start().starts_with(transport)), "no {transport} in:\n{out}");
    }
    for provider in ["rdma-core", "librdma", "soft"] {
        assert!(out.contains(&format!("provider {provider}")), "no provider {provider} in:\n{out}");
    }
    assert!(out.contains("numa nodes: "), "{out}");
    let cpus: usize = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("cpus: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no CPU count in:\n{out}"));
    assert!(cpus >= 1);
}

/// No machine here has RDMA (no `/sys/class/infiniband`): the rdma-core provider answers
/// that it is unavailable (with the reason: a kernel without RDMA makes
/// `ibv_get_device_list` fail with "Function not implemented"), or lists no device.
#[test]
#[cfg(target_os = "linux")]
fn without_rdma_hardware_rdma_core_says_why() {
    if std::path::Path::new("/sys/class/infiniband").exists() {
        return; // A host with RDMA devices: nothing to assert about their absence.
    }
    let (code, out, _) = mpr_info(&[]);
    assert_eq!(code, 0);
    let section: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("rdma devices (rdma-core):")).collect();
    assert!(!section.is_empty(), "no rdma-core section in:\n{out}");
    let first = section.get(1).copied().unwrap_or_default().trim();
    assert!(
        first.starts_with("unavailable: ") || first == "no devices",
        "rdma-core should be unavailable or without devices here, got {first:?} in:\n{out}"
    );
    if let Some(why) = first.strip_prefix("unavailable: ") {
        assert!(!why.trim().is_empty(), "a reason is given: {first:?}");
    }
}

#[test]
fn usage_errors_exit_2_and_version_exits_0() {
    let (code, _, err) = mpr_info(&["--bogus"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--bogus"), "{err}");
    let (code, out, _) = mpr_info(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(out.trim(), format!("mpr-info {}", env!("CARGO_PKG_VERSION")));
}
