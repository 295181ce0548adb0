//! `mpr-fabric`: sets up and checks a fabric of Macs joined by Thunderbolt cables (or hosts
//! with RDMA NICs) for mpr, in the manner of MLX's `mlx.distributed_config`.
//!
//! - `mpr-fabric probe [--json]`: this host's links: each Thunderbolt port's interface, RDMA
//!   device, address, state and the machine at the other end (on Linux: its RDMA NICs);
//!   `--macos-outputs DIR` reads a Mac's saved tool outputs instead.
//! - `mpr-fabric check --hosts a,b,c`: gathers every host's probe (over ssh, or from
//!   `--reports DIR` of `HOST.json` files), finds the cables between them (a port's peer UUID
//!   is the other end's own), and says in plain words what is not ready: RDMA not enabled,
//!   a port not active, an end without an address, two ends on different subnets, different
//!   macOS versions, a Thunderbolt Bridge up over the ports (connections fail while it is).
//!   Exits 1 if anything is not ready.
//! - `mpr-fabric setup --hosts a,b,c [--assign] [--output FILE]`: the same, then takes down a
//!   Thunderbolt Bridge that holds the ports (its members out, the bridge down), (with
//!   `--assign`) gives each cable a /30 of `--subnet` (`sudo ifconfig` on each end, over ssh;
//!   `--dry-run` prints the commands), and writes the hostfile mprun reads (`rdma=PEER:DEV`
//!   per host). Addresses set with `ifconfig` last until the Mac restarts.

mod parse;
mod plan;
mod probe;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand};

use plan::{Cable, Report};

#[derive(Parser, Debug)]
#[command(name = "mpr-fabric", version, about = "Set up and check the Thunderbolt or RDMA fabric of an mpr cluster")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// This host's links.
    Probe {
        /// Print the report as JSON (what `check` and `setup` gather).
        #[arg(long)]
        json: bool,
        /// Read a Mac's saved outputs instead of this host's: `system_profiler.json`
        /// (`system_profiler SPThunderboltDataType -json`), `networksetup.txt`
        /// (`networksetup -listallhardwareports`), `ifconfig.txt`, and `rdma_devices.txt`
        /// (one RDMA device name per line), to look at a Mac's set-up from anywhere.
        #[arg(long, value_name = "DIR")]
        macos_outputs: Option<PathBuf>,
    },
    /// Finds the cables between the hosts and says what is not ready.
    Check(Gather),
    /// Checks, assigns a subnet per cable (with --assign), and writes the hostfile.
    Setup {
        #[command(flatten)]
        gather: Gather,
        /// Give each cable a /30 of --subnet (on both ends, with sudo, over ssh).
        #[arg(long)]
        assign: bool,
        /// Print the commands --assign would run instead of running them.
        #[arg(long)]
        dry_run: bool,
        /// The /24 the cables' /30s come from.
        #[arg(long, default_value = "192.168.200.0", value_name = "A.B.C.0")]
        subnet: Ipv4Addr,
        /// Where to write the hostfile (default: standard output).
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

#[derive(clap::Args, Debug)]
struct Gather {
    /// The hosts, comma-separated, as mprun will name them.
    #[arg(long, required = true, value_delimiter = ',')]
    hosts: Vec<String>,
    /// Read `DIR/HOST.json` (saved `mpr-fabric probe --json` output) instead of asking over ssh.
    #[arg(long, value_name = "DIR")]
    reports: Option<PathBuf>,
    /// The command that runs a command on a host (`ssh` by default; the host comes first).
    #[arg(long, default_value = "ssh", value_name = "CMD")]
    ssh: String,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("mpr-fabric: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs the command; `Ok(false)`: it ran, and found the fabric not ready.
fn run(args: Args) -> Result<bool, String> {
    match args.cmd {
        Cmd::Probe { json, macos_outputs } => {
            let r = match macos_outputs {
                Some(dir) => probe::from_dir(&dir)?,
                None => probe::here(),
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
            } else {
                print!("{}", describe_host(&r));
            }
            Ok(true)
        }
        Cmd::Check(g) => {
            let hosts = gather(&g)?;
            let (cables, loose) = plan::cables(&hosts);
            print!("{}", describe(&hosts, &cables));
            let problems: Vec<String> = loose.into_iter().chain(plan::check(&hosts, &cables)).collect();
            Ok(say(&problems))
        }
        Cmd::Setup { gather: g, assign, dry_run, subnet, output } => {
            let mut hosts = gather(&g)?;
            let (cables, loose) = plan::cables(&hosts);
            if cables.is_empty() {
                return Err("no cable joins any two of the hosts".into());
            }
            // A Thunderbolt Bridge up over the ports comes down first (as MLX's set-up does).
            for r in &mut hosts {
                for b in std::mem::take(&mut r.bridges) {
                    for cmd in b.down_commands() {
                        if dry_run {
                            println!("{}: {cmd}", r.host);
                        } else {
                            remote(&g.ssh, &r.host, &cmd)?;
                        }
                    }
                }
            }
            if assign {
                for (host, iface, addr) in plan::assign(&hosts, &cables, subnet)? {
                    let r = hosts.iter_mut().find(|r| r.host == host).expect("assigned to a host");
                    let cmd = if r.os.starts_with("macOS") {
                        format!("sudo ifconfig {iface} inet {addr} netmask 255.255.255.252")
                    } else {
                        format!("sudo ip addr replace {addr}/30 dev {iface}")
                    };
                    if dry_run {
                        println!("{host}: {cmd}");
                    } else {
                        remote(&g.ssh, &host, &cmd)?;
                    }
                    if let Some(l) = r.links.iter_mut().find(|l| l.iface == iface) {
                        l.addr = Some((addr, 30));
                    }
                }
            }
            let text = plan::hostfile(&hosts, &cables);
            match &output {
                Some(path) => {
                    std::fs::write(path, &text).map_err(|e| format!("writing {}: {e}", path.display()))?;
                    eprintln!("mpr-fabric: wrote {} ({} cables)", path.display(), cables.len());
                }
                None => print!("{text}"),
            }
            let problems: Vec<String> = loose.into_iter().chain(plan::check(&hosts, &cables)).collect();
            Ok(say(&problems))
        }
    }
}

/// Prints the problems on stderr (or that the fabric is ready); whether there were none.
fn say(problems: &[String]) -> bool {
    if problems.is_empty() {
        eprintln!("mpr-fabric: every cable is ready for RDMA");
        return true;
    }
    eprintln!("mpr-fabric: not ready:");
    for p in problems {
        eprintln!("  - {p}");
    }
    false
}

fn remote(ssh: &str, host: &str, cmd: &str) -> Result<String, String> {
    let words: Vec<&str> = ssh.split_whitespace().collect();
    let (prog, pre) = words.split_first().ok_or("--ssh: expected a command")?;
    let out = Command::new(prog)
        .args(pre)
        .arg(host)
        .args(cmd.split_whitespace())
        .output()
        .map_err(|e| format!("{host}: {prog}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{host}: `{cmd}` failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every host's report, named as given.
fn gather(g: &Gather) -> Result<Vec<Report>, String> {
    g.hosts
        .iter()
        .map(|h| {
            let text = match &g.reports {
                Some(dir) => {
                    let path = dir.join(format!("{h}.json"));
                    std::fs::read_to_string(&path).map_err(|e| format!("{h}: cannot read {}: {e}", path.display()))?
                }
                None => remote(&g.ssh, h, "mpr-fabric probe --json")?,
            };
            let mut r: Report =
                serde_json::from_str(&text).map_err(|e| format!("{h}: its report is not mpr-fabric's: {e}"))?;
            r.host = h.clone();
            Ok(r)
        })
        .collect()
}

fn addr_text(a: Option<(Ipv4Addr, u8)>) -> String {
    a.map_or("no address".into(), |(ip, b)| format!("{ip}/{b}"))
}

fn describe_host(r: &Report) -> String {
    let mut s = format!("{} ({})\n", r.host, r.os);
    for l in &r.links {
        s += &format!(
            "  {}: RDMA {}, {}, {}{}\n",
            l.iface,
            l.rdma.as_deref().unwrap_or("not enabled"),
            addr_text(l.addr),
            if l.active { "active" } else { "not active" },
            l.speed.as_deref().map_or(String::new(), |v| format!(", {v}"))
        );
    }
    if r.links.is_empty() {
        s += "  no Thunderbolt port or RDMA NIC found\n";
    }
    for b in &r.bridges {
        s += &format!(
            "  {}: up, with Thunderbolt ports {} (RDMA fails until it is down)\n",
            b.name,
            b.members.join(", ")
        );
    }
    for n in &r.notes {
        s += &format!("  note: {n}\n");
    }
    s
}

fn describe(hosts: &[Report], cables: &[Cable]) -> String {
    let mut s: String = hosts.iter().map(describe_host).collect();
    s += &format!("{} cable(s):\n", cables.len());
    for c in cables {
        let (a, b) = (&hosts[c.a.0], &hosts[c.b.0]);
        let (la, lb) = (&a.links[c.a.1], &b.links[c.b.1]);
        s += &format!(
            "  {} {} ({}) <-> {} {} ({})\n",
            a.host,
            la.iface,
            addr_text(la.addr),
            b.host,
            lb.iface,
            addr_text(lb.addr)
        );
    }
    s
}
