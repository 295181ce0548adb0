//! `mpr-info`: what this build of mpr has and what it finds on this host, in the manner of
//! `ompi_info` and `ibv_devinfo`: the version, the transports and RDMA providers compiled in,
//! where the C ABI's header and library are, the RDMA devices (or why there are none), and
//! the CPU topology mprun binds ranks to.
//!
//! It always exits 0 once it has printed its report (an absent device is a finding, not a
//! failure); 2 for bad usage.

// The topology reader of mprun, shared as source (the launcher is binaries only). This
// program reads the topology and nothing else of it.
#[allow(dead_code)]
#[path = "../topo/mod.rs"]
mod topo;

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use mpr::info;

/// Prints this build's transports, the host's RDMA devices and its CPU topology.
#[derive(Parser, Debug)]
#[command(name = "mpr-info", version)]
struct Args {}

fn main() -> ExitCode {
    if let Err(e) = Args::try_parse() {
        let _ = e.print();
        return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
    }
    let text = report();
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mpr-info: cannot write the report: {e}");
            ExitCode::FAILURE
        }
    }
}

fn report() -> String {
    let mut out = String::new();
    let _ = writeln!(out, "mpr {}", info::version());
    transports(&mut out);
    c_abi(&mut out);
    rdma_devices(&mut out);
    topology(&mut out);
    out
}

/// Where `mprcc` finds mpi.h and libmpr (both from this tool's own directory).
fn c_abi(out: &mut String) {
    let abi = info::c_abi(&info::program_dir());
    let shown = |d: Option<std::path::PathBuf>| d.map_or("not found".to_string(), |d| d.display().to_string());
    let _ = writeln!(out, "\nC ABI (mprcc, mprcxx):");
    let _ = writeln!(out, "  mpi.h      {}", shown(abi.include));
    let _ = writeln!(out, "  {:<10} {}", info::C_LIBRARY, shown(abi.lib));
}

fn transports(out: &mut String) {
    let _ = writeln!(out, "\ntransports:");
    for t in info::transports() {
        let _ = writeln!(out, "  {:<5} {}", t.name, t.summary);
        for p in &t.providers {
            let built = if p.built { "built" } else { "not built" };
            let _ = writeln!(out, "        provider {:<10} {:<10} {}", p.name, built, p.summary);
        }
    }
}

fn rdma_devices(out: &mut String) {
    let _ = writeln!(out, "\nrdma devices ({}):", info::rdma_provider());
    let devices = match info::rdma_devices() {
        Ok(devices) => devices,
        Err(why) => {
            let _ = writeln!(out, "  unavailable: {why}");
            return;
        }
    };
    if devices.is_empty() {
        let _ = writeln!(out, "  no devices");
    }
    for d in devices {
        let _ = write!(out, "  {}", d.name);
        if let Some(guid) = d.node_guid {
            let _ = write!(out, "  node_guid {}", guid_text(guid));
        }
        if let Some(n) = d.max_qp {
            let _ = write!(out, "  max_qp {n}");
        }
        if let Some(n) = d.max_mr {
            let _ = write!(out, "  max_mr {n}");
        }
        let _ = writeln!(out);
        if let Some(e) = &d.error {
            let _ = writeln!(out, "    error: {e}");
        }
        for p in &d.ports {
            let mtu = p.active_mtu.map_or_else(|| "?".to_string(), |m| m.to_string());
            let _ = writeln!(
                out,
                "    port {}: {}  link_layer {}  active_mtu {}  lid {}",
                p.number, p.state, p.link_layer, mtu, p.lid
            );
            for g in &p.gids {
                let _ = writeln!(out, "      gid[{:>3}] {}", g.index, g.gid);
            }
        }
    }
}

/// `ibv_devinfo`'s form: four groups of four hex digits.
fn guid_text(guid: u64) -> String {
    let h = format!("{guid:016x}");
    format!("{}:{}:{}:{}", &h[0..4], &h[4..8], &h[8..12], &h[12..16])
}

fn topology(out: &mut String) {
    let t = topo::read();
    let pus: usize = t.cores.iter().map(|c| c.pus.len()).sum();
    let _ = writeln!(out, "\ntopology (the CPUs this process may run on):");
    let _ = writeln!(out, "  cpus: {pus}");
    let _ = writeln!(out, "  cores: {}", t.cores.len());
    let _ = writeln!(out, "  numa nodes: {}", t.numa_nodes);
}

#[cfg(test)]
mod tests {
    #[test]
    fn guids_print_as_ibv_devinfo_does() {
        assert_eq!(super::guid_text(0x0002_c903_0031_7c10), "0002:c903:0031:7c10");
    }
}
