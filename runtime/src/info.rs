//! What this build of mpr has and what it finds on this host: the library version, the
//! transports and RDMA providers compiled in, and the RDMA devices the host's verbs library
//! lists. This is the stable entry for tools (the `mpr-info` binary prints it, as `ompi_info`
//! and `ibv_devinfo` do); the structures are `#[non_exhaustive]`, so fields may be added.
//!
//! ```
//! for t in mpr::info::transports() {
//!     println!("{}: {}", t.name, t.summary);
//! }
//! match mpr::info::rdma_devices() {
//!     Ok(devices) => println!("{} RDMA device(s)", devices.len()),
//!     Err(why) => println!("RDMA unavailable: {why}"),
//! }
//! ```

use std::net::Ipv6Addr;

use crate::transport::verbs::ibv;

/// This library's version.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Where the C ABI is: the directory of `mpi.h` and that of `libmpr` (`.so`, `.dylib` on
/// macOS), each `None` where it is not found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CAbi {
    /// The directory holding `mpi.h`.
    pub include: Option<std::path::PathBuf>,
    /// The directory holding the shared library.
    pub lib: Option<std::path::PathBuf>,
}

/// The directory of the running program (where a tool looks for the C ABI beside it).
pub fn program_dir() -> std::path::PathBuf {
    std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.to_path_buf())).unwrap_or_default()
}

/// The shared library's file name on this platform.
pub const C_LIBRARY: &str = if cfg!(target_os = "macos") { "libmpr.dylib" } else { "libmpr.so" };

/// Finds the C ABI for a tool whose executable lies in `bin`: `MPR_HOME/{include,lib}` if
/// set; else an installed tree (`bin/../include`, `bin/../lib`); else a build tree: this
/// crate's own `include`, and the library cargo built last, beside the tool or in `deps`
/// (`cargo test` builds it there without copying it up).
pub fn c_abi(bin: &std::path::Path) -> CAbi {
    use std::path::{Path, PathBuf};
    let holds = |d: &Path, file: &str| d.join(file).is_file();
    if let Some(home) = std::env::var_os("MPR_HOME") {
        let home = PathBuf::from(home);
        let (include, lib) = (home.join("include"), home.join("lib"));
        return CAbi {
            include: holds(&include, "mpi.h").then_some(include),
            lib: holds(&lib, C_LIBRARY).then_some(lib),
        };
    }
    let (include, lib) = (bin.join("../include"), bin.join("../lib"));
    if holds(&include, "mpi.h") && holds(&lib, C_LIBRARY) {
        return CAbi { include: Some(include), lib: Some(lib) };
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let modified = |d: &PathBuf| std::fs::metadata(d.join(C_LIBRARY)).and_then(|m| m.modified()).ok();
    let lib = [bin.to_path_buf(), bin.join("deps")].into_iter().filter(|d| modified(d).is_some()).max_by_key(modified);
    CAbi { include: holds(&source, "mpi.h").then_some(source), lib }
}

/// A transport compiled into this build.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transport {
    /// Its short name (`shm`, `tcp`, `rdma`).
    pub name: &'static str,
    /// What it connects, in a few words.
    pub summary: &'static str,
    /// The device providers behind it (RDMA only; empty for the others).
    pub providers: Vec<RdmaProvider>,
}

/// A provider of RDMA devices: a verbs library loaded at run time, or software.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RdmaProvider {
    /// Its short name (`rdma-core`, `librdma`, `soft`).
    pub name: &'static str,
    /// Whether this build contains it (the real providers are per operating system).
    pub built: bool,
    /// What it is, in a few words.
    pub summary: &'static str,
}

/// The transports of this build, in the order a rank prefers them for a peer.
pub fn transports() -> Vec<Transport> {
    let provider = |name, built, summary| RdmaProvider { name, built, summary };
    vec![
        Transport {
            name: "shm",
            summary: "shared memory between the ranks of one host (single-copy for large messages)",
            providers: Vec::new(),
        },
        Transport { name: "tcp", summary: "TCP sockets between hosts", providers: Vec::new() },
        Transport {
            name: "rdma",
            summary: "RDMA verbs: UC or RC queue pairs, one completion queue per device",
            providers: vec![
                provider(
                    "rdma-core",
                    cfg!(not(target_os = "macos")),
                    "libibverbs.so.1 (InfiniBand, RoCE), loaded at run time",
                ),
                provider(
                    "librdma",
                    cfg!(target_os = "macos"),
                    "Apple's librdma.dylib (RDMA over Thunderbolt, macOS 26.2+), loaded at run time",
                ),
                provider(
                    "soft",
                    true,
                    "software provider with Thunderbolt's limits (MPR_VERBS_PROVIDER=soft, or soft-rc like a NIC)",
                ),
            ],
        },
    ]
}

/// The provider [`rdma_devices`] asks: `rdma-core` on Linux, `librdma` on macOS.
pub fn rdma_provider() -> &'static str {
    ibv::Flavor::HOST.name()
}

/// An RDMA device, as `ibv_devinfo` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RdmaDevice {
    /// The provider that lists it (see [`rdma_provider`]).
    pub provider: &'static str,
    /// The device name (`mlx5_0`, `rdma_en2`).
    pub name: String,
    /// Node GUID; `None` if the device could not be queried.
    pub node_guid: Option<u64>,
    /// Most queue pairs the device supports, as it reports.
    pub max_qp: Option<u32>,
    /// Most memory regions the device supports, as it reports.
    pub max_mr: Option<u32>,
    /// Its ports.
    pub ports: Vec<RdmaPort>,
    /// Why the device (or part of it) could not be opened or queried.
    pub error: Option<String>,
}

/// A port of an [`RdmaDevice`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RdmaPort {
    /// Port number (from 1).
    pub number: u8,
    /// `ACTIVE`, `DOWN`, `INIT`, ... (`ibv_port_state_str`'s names).
    pub state: String,
    /// `InfiniBand`, `Ethernet`, `unspecified` or `unknown`.
    pub link_layer: String,
    /// Active MTU in bytes; `None` if the device reports no valid one.
    pub active_mtu: Option<usize>,
    /// Local identifier (InfiniBand; 0 on Ethernet and Thunderbolt).
    pub lid: u16,
    /// The non-zero entries of the GID table.
    pub gids: Vec<RdmaGid>,
}

/// One GID table entry of an [`RdmaPort`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RdmaGid {
    /// Its index in the table (the `sgid_index` that selects it).
    pub index: u8,
    /// The GID; for RoCE and Thunderbolt, often an IPv4 address mapped into IPv6.
    pub gid: Ipv6Addr,
}

/// The RDMA devices of this host, or why there are none to ask for: no verbs library, or a
/// library that cannot list devices (a kernel without RDMA answers "Function not
/// implemented"). A device that cannot be opened is listed with its [`RdmaDevice::error`].
pub fn rdma_devices() -> Result<Vec<RdmaDevice>, String> {
    let reports = ibv::probe().map_err(|e| match e {
        crate::transport::verbs::provider::VerbsError::Unavailable(why) => why,
        other => other.to_string(),
    })?;
    Ok(reports
        .into_iter()
        .map(|r| RdmaDevice {
            provider: r.provider,
            name: r.name,
            node_guid: r.node_guid,
            max_qp: r.max_qp,
            max_mr: r.max_mr,
            ports: r
                .ports
                .into_iter()
                .map(|p| RdmaPort {
                    number: p.port,
                    state: ibv::port_state_name(p.state).to_string(),
                    link_layer: ibv::link_layer_name(p.link_layer).to_string(),
                    active_mtu: ibv::mtu_bytes(p.active_mtu),
                    lid: p.lid,
                    gids: p.gids.into_iter().map(|(index, g)| RdmaGid { index, gid: Ipv6Addr::from(g) }).collect(),
                })
                .collect(),
            error: r.error,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_build_lists_its_transports_and_one_real_provider() {
        let t = super::transports();
        let names: Vec<&str> = t.iter().map(|t| t.name).collect();
        assert_eq!(names, ["shm", "tcp", "rdma"]);
        let rdma = &t[2].providers;
        let built: Vec<&str> = rdma.iter().filter(|p| p.built && p.name != "soft").map(|p| p.name).collect();
        assert_eq!(built, [super::rdma_provider()], "exactly the host's verbs provider is built");
    }

    #[test]
    fn rdma_devices_never_panics_and_explains_an_absence() {
        match super::rdma_devices() {
            Err(why) => assert!(!why.is_empty()),
            Ok(devices) => assert!(devices.iter().all(|d| d.provider == super::rdma_provider())),
        }
    }
}
