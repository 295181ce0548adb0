//! Deciding, before anything starts, the addresses and the environment of each host's ranks,
//! and opening the control listener when there are remote hosts.
//!
//! `MPR_HOST_ADDR` (the address a host's ranks listen on for TCP) is, for a remote host, the
//! address mprun reaches it at: its name if that is an IP address, else what the name
//! resolves to (with `--launcher fork`, where "hosts" are names on this machine, 127.0.0.1);
//! if the name does not resolve, the proxy sets it to its own end of the control connection.
//! For this machine it is 127.0.0.1 in a job of one host, else the control listener's
//! address. With `--iface NAME`, ranks get `MPR_IFACE=NAME` instead.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::ffi::OsStrExt;

use mio::net::TcpListener;
use mio::Interest;

use super::remote::Remote;
use super::{Job, Place, LISTENER};
use crate::addr;
use crate::control::start::Launcher;
use crate::control::wire::LaunchSpec;
use crate::hosts::Planned;

/// Threads that look host names up at once.
const RESOLVERS: usize = 32;

/// Variables of mprun's own that are never passed on to remote ranks.
const NOT_FORWARDED: &[&str] = &["MPR_KILL_GRACE_MS"];

impl Job<'_> {
    /// Decides addresses and environments and opens the control listener; `Err` is a
    /// message for a job that cannot start.
    pub(super) fn prepare(&mut self) -> Result<(), String> {
        let setup = self.setup;
        let plan = &setup.plan;
        let addrs = match self.resolve_remotes() {
            Ok(addrs) => addrs,
            Err(signal) => {
                // Nothing started: the job ends as a signal to mprun ends it.
                self.stop(crate::cause::Cause::Signal(signal));
                return Ok(());
            }
        };
        let control_ip = if plan.iter().any(|h| !h.local) { Some(self.control_ip(&addrs)?) } else { None };
        if let Some(ip) = control_ip {
            let mut listener = TcpListener::bind(SocketAddr::new(ip, 0))
                .map_err(|e| format!("cannot listen for the hosts' proxies on {ip}: {e}"))?;
            self.poll
                .registry()
                .register(&mut listener, LISTENER, Interest::READABLE)
                .map_err(|e| format!("cannot watch the control listener: {e}"))?;
            self.listener = Some(listener);
        }
        let cwd = std::env::current_dir().map(OsString::from).unwrap_or_default();
        for (index, host) in plan.iter().enumerate() {
            if host.local {
                let ip = control_ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
                self.local_env = self.host_env(host, Some(ip), false);
                continue;
            }
            let r = self.remotes.len();
            for &rank in &host.ranks {
                self.place[rank] = Place::Remote(r);
            }
            let spec = LaunchSpec {
                jobid: self.setup.ids.jobid.clone(),
                host: host.name.clone(),
                program: self.opts.program.clone(),
                args: self.opts.args.clone(),
                env: self.host_env(host, addrs[index], true),
                cwd: cwd.clone(),
                size: self.opts.np as u32,
                ranks: host.ranks.iter().map(|&r| r as u32).collect(),
                tag_output: self.opts.tag_output,
                verbose: self.opts.verbose,
                stdin: host.ranks.first() == Some(&0),
                fill_host_addr: addrs[index].is_none() && self.opts.iface.is_none(),
                kill_grace_ms: self.opts.kill_grace.as_millis() as u64,
                binding: self.opts.binding,
                share: crate::bind::Share::alone(),
            };
            self.remotes.push(Remote::new(host, spec));
        }
        Ok(())
    }

    /// The address of every remote host (`None` for this machine's and names that do not
    /// resolve), looked up by up to [`RESOLVERS`] threads at once, since a name that does
    /// not resolve can take the resolver's whole timeout. mprun keeps watching its signals
    /// meanwhile: `Err(signal)` if SIGINT, SIGTERM or SIGHUP came first.
    fn resolve_remotes(&mut self) -> Result<Vec<Option<IpAddr>>, i32> {
        let plan = &self.setup.plan;
        let mut addrs: Vec<Option<IpAddr>> = vec![None; plan.len()];
        // Names whose address needs the resolver; the others are known at once.
        let mut ask: Vec<(usize, String)> = Vec::new();
        for (i, h) in plan.iter().enumerate().filter(|(_, h)| !h.local) {
            match (&self.opts.launcher, h.name.parse::<IpAddr>()) {
                (_, Ok(ip)) => addrs[i] = Some(ip),
                (Launcher::Fork, Err(_)) => addrs[i] = Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                _ => ask.push((i, h.name.clone())),
            }
        }
        if ask.is_empty() {
            return Ok(addrs);
        }
        let srun = self.opts.launcher == Launcher::Srun;
        let queue = std::sync::Arc::new(std::sync::Mutex::new(ask));
        let (tx, rx) = std::sync::mpsc::channel();
        let mut left = queue.lock().map_or(0, |q| q.len());
        for _ in 0..left.min(RESOLVERS) {
            let (queue, tx) = (queue.clone(), tx.clone());
            // Detached: a lookup stuck in the resolver must not hold mprun when it stops.
            let spawned = std::thread::Builder::new().name("mprun-resolve".into()).spawn(move || loop {
                let Some((i, name)) = queue.lock().ok().and_then(|mut q| q.pop()) else { return };
                // Slurm's node names need not resolve: it knows each node's address.
                let ip = addr::resolve(&name).or_else(|| srun.then(|| crate::alloc::slurm_node_addr(&name)).flatten());
                if tx.send((i, ip)).is_err() {
                    return;
                }
            });
            if spawned.is_err() {
                break;
            }
        }
        drop(tx);
        while left > 0 {
            match rx.recv_timeout(std::time::Duration::from_millis(50)) {
                Ok((i, ip)) => {
                    addrs[i] = ip;
                    left -= 1;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                // No thread could start (or all ended): what is left, here, one by one.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let rest: Vec<(usize, String)> =
                        queue.lock().map(|mut q| q.drain(..).collect()).unwrap_or_default();
                    for (i, name) in rest {
                        addrs[i] = self.remote_addr(&name);
                    }
                    break;
                }
            }
            if let Some(signal) = self.stop_signal() {
                return Err(signal);
            }
        }
        Ok(addrs)
    }

    /// The address mprun reaches remote host `name` at, if known without asking it.
    fn remote_addr(&self, name: &str) -> Option<IpAddr> {
        match (&self.opts.launcher, name.parse::<IpAddr>()) {
            (_, Ok(ip)) => Some(ip),
            (Launcher::Fork, Err(_)) => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            // Slurm's node names need not resolve: it knows each node's address.
            (Launcher::Srun, Err(_)) => addr::resolve(name).or_else(|| crate::alloc::slurm_node_addr(name)),
            _ => addr::resolve(name),
        }
    }

    /// The control listener's address: `--control-addr`, `--iface`'s address, or the local
    /// address that routes to the first remote host with a known address.
    fn control_ip(&self, addrs: &[Option<IpAddr>]) -> Result<IpAddr, String> {
        if let Some(ip) = self.opts.control_addr {
            return Ok(ip);
        }
        if let Some(iface) = &self.opts.iface {
            return addr::iface_ipv4(iface).map_err(|e| format!("--iface {iface}: {e}"));
        }
        if self.opts.launcher == Launcher::Fork {
            return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        let plan = &self.setup.plan;
        if let Some((host, ip)) = plan.iter().zip(addrs).find_map(|(h, a)| a.map(|ip| (h, ip))) {
            return addr::route_source(ip).map_err(|e| format!("host {}: no route to {ip}: {e}", host.name));
        }
        let first = plan.iter().find(|h| !h.local).map_or("?", |h| h.name.as_str());
        Err(format!(
            "host {first}: cannot resolve its name, so mprun cannot tell which of its addresses the hosts \
             reach it at; give it with --control-addr IP or --iface NAME"
        ))
    }

    /// The environment every rank of `host` gets on top of what it inherits. Remote ranks
    /// do not inherit mprun's environment, so its `MPR_*` variables are passed on to them
    /// (before `-x`/`--env`, which may override them).
    fn host_env(&self, host: &Planned, host_addr: Option<IpAddr>, remote: bool) -> Vec<(OsString, OsString)> {
        let mut env = Vec::new();
        if remote {
            for (k, v) in std::env::vars_os() {
                let name = k.as_bytes();
                if name.starts_with(b"MPR_") && !NOT_FORWARDED.iter().any(|n| n.as_bytes() == name) {
                    env.push((k, v));
                }
            }
        }
        env.extend(self.opts.env.iter().cloned());
        let mut set = |k: &str, v: &str| env.push((k.into(), v.into()));
        set("MPR_JOBID", &self.setup.ids.jobid);
        set("MPR_SECRET", &self.setup.ids.secret);
        set("MPR_HOST", &host.name);
        match (&self.opts.iface, host_addr) {
            (Some(iface), _) => set("MPR_IFACE", iface),
            (None, Some(ip)) => set("MPR_HOST_ADDR", &ip.to_string()),
            (None, None) => {}
        }
        if let Some(list) = &self.opts.transports {
            set("MPR_TRANSPORTS", list);
        }
        if !host.rdma_peers.is_empty() {
            set("MPR_RDMA_PEERS", &crate::hosts::peers_env(&host.rdma_peers));
        } else if let Some(dev) = host.rdma_device.as_ref().or(self.opts.rdma_device.as_ref()) {
            set("MPR_RDMA_DEVICE", dev);
        }
        if self.opts.verbose {
            set("MPR_VERBOSE", "1");
        }
        // The ranks' stderr is a pipe to mprun: tell them where it ends up, so that a
        // program may draw progress in place (mprun forwards each `\r` redraw at once).
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            set("MPR_STDERR_TTY", "1");
        }
        env
    }
}
