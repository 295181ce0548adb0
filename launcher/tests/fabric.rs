//! `mpr-fabric` end to end on the saved outputs of two Macs joined by one Thunderbolt cable
//! (synthetic, written here as macOS prints them): each Mac's probe, the check that finds
//! the cable and what is missing (addresses), the set-up that assigns a /30 per cable and
//! writes a hostfile mprun accepts, and the errors a user can meet.

use std::path::Path;
use std::process::Command;

fn fabric(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mpr-fabric")).args(args).output().expect("mpr-fabric runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().expect("exits"), text(&out.stdout), text(&out.stderr))
}

/// A Mac whose Thunderbolt port 1 (en2) is cabled to the Mac with port UUID `peer`, with
/// RDMA enabled (rdma_en2), no address on en2 yet; `bridged`: as macOS leaves it, en2 in the
/// Thunderbolt Bridge (up) and holding a 169.254 address.
fn mac(dir: &Path, uuid: &str, peer: &str, peer_name: &str, bridged: bool) {
    std::fs::create_dir_all(dir).unwrap();
    let profile = format!(
        r#"{{"SPThunderboltDataType": [{{"_name": "thunderboltusb4_bus_0", "device_name_key": "Mac Studio",
            "domain_uuid_key": "{uuid}", "vendor_name_key": "Apple Inc.",
            "receptacle_1_tag": {{"current_speed_key": "Up to 80 Gb/s", "receptacle_id_key": "1", "receptacle_status_key": "receptacle_connected"}},
            "_items": [{{"_name": "{peer_name}", "device_name_key": "{peer_name}", "domain_uuid_key": "{peer}"}}]}}]}}"#
    );
    std::fs::write(dir.join("system_profiler.json"), profile).unwrap();
    let ns = "Hardware Port: Ethernet\nDevice: en0\n\nHardware Port: Thunderbolt 1\nDevice: en2\n\n\
              Hardware Port: Thunderbolt Bridge\nDevice: bridge0\n";
    std::fs::write(dir.join("networksetup.txt"), ns).unwrap();
    let mut ifc = "en0: flags=8863<UP> mtu 1500\n\tinet 192.168.1.20 netmask 0xffffff00\n\tstatus: active\n\
                   en2: flags=8863<UP> mtu 1500\n\tstatus: active\n"
        .to_string();
    if bridged {
        ifc += "\tinet 169.254.3.4 netmask 0xffff0000 broadcast 169.254.255.255\n\
                bridge0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500\n\
                \tmember: en2 flags=3<LEARNING,DISCOVER>\n\tstatus: active\n";
    }
    std::fs::write(dir.join("ifconfig.txt"), ifc).unwrap();
    std::fs::write(dir.join("rdma_devices.txt"), "rdma_en2\n").unwrap();
    std::fs::write(dir.join("sw_vers.txt"), "26.2\n").unwrap();
}

#[test]
fn two_macs_are_probed_checked_and_set_up() {
    let root = std::env::temp_dir().join(format!("mpr-fabric-test-{}", std::process::id()));
    let (reports, outputs) = (root.join("reports"), root.join("outputs"));
    std::fs::create_dir_all(&reports).unwrap();
    mac(&outputs.join("mac1"), "UUID-A", "UUID-B", "mac2", true);
    mac(&outputs.join("mac2"), "UUID-B", "UUID-A", "mac1", false);
    for h in ["mac1", "mac2"] {
        let dir = outputs.join(h);
        let (code, out, err) = fabric(&["probe", "--macos-outputs", dir.to_str().unwrap(), "--json"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("\"rdma_en2\"") && out.contains("\"UUID-"), "{out}");
        std::fs::write(reports.join(format!("{h}.json")), out).unwrap();
        let (code, out, _) = fabric(&["probe", "--macos-outputs", dir.to_str().unwrap()]);
        assert_eq!(code, 0);
        assert!(out.contains("en2: RDMA rdma_en2, no address, active, Up to 80 Gb/s"), "{out}");
        let bridge = "bridge0: up, with Thunderbolt ports en2 (RDMA fails until it is down)";
        assert_eq!(out.contains(bridge), h == "mac1", "{out}");
    }
    let r = reports.to_str().unwrap();
    let (code, out, err) = fabric(&["check", "--hosts", "mac1,mac2", "--reports", r]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("1 cable(s):\n  mac1 en2 (no address) <-> mac2 en2 (no address)"), "{out}");
    assert!(err.contains("mac1 en2 <-> mac2 en2: mac1 en2 has no IPv4 address (mpr-fabric setup --assign"), "{err}");
    assert!(err.contains("mac1: bridge0 is up with Thunderbolt ports en2 as members"), "{err}");
    let hostfile = root.join("hostfile");
    let args =
        ["setup", "--hosts", "mac1,mac2", "--reports", r, "--assign", "--dry-run", "-o", hostfile.to_str().unwrap()];
    let (code, out, err) = fabric(&args);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        out,
        "mac1: sudo ifconfig bridge0 deletem en2\n\
         mac1: sudo ifconfig bridge0 down\n\
         mac1: sudo ifconfig en2 inet 192.168.200.1 netmask 255.255.255.252\n\
         mac2: sudo ifconfig en2 inet 192.168.200.2 netmask 255.255.255.252\n"
    );
    assert!(err.contains("every cable is ready for RDMA"), "{err}");
    let text = std::fs::read_to_string(&hostfile).unwrap();
    assert!(text.ends_with("\nmac1 rdma=mac2:rdma_en2\nmac2 rdma=mac1:rdma_en2\n"), "{text}");
    // mprun accepts the file: it gets as far as resolving the hosts (exit 1, not the usage
    // error 2 a bad hostfile gets).
    let out = Command::new(env!("CARGO_BIN_EXE_mprun"))
        .args(["--hostfile", hostfile.to_str().unwrap(), "--launcher-exec", "false", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("mprun: host mac1: cannot resolve its name"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn missing_reports_and_bad_usage_are_clear_errors() {
    let (code, _, err) = fabric(&["check", "--hosts", "nowhere", "--reports", "/nonexistent-dir"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("mpr-fabric: nowhere: cannot read /nonexistent-dir/nowhere.json: "), "{err}");
    let (code, _, err) = fabric(&["check"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--hosts"), "{err}");
    let (code, _, err) = fabric(&["probe", "--macos-outputs", "/nonexistent-dir"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent-dir/system_profiler.json"), "{err}");
}
