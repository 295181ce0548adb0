//! `mprun`: starts N ranks of a program on one or more hosts and supervises them as one job.
//!
//! - `cli`: the command line and its checks; `hosts`: host lists, hostfiles, placement.
//! - `program`: finding the program through `PATH`.
//! - `ids`: the job id and secret.
//! - `spawn`: starting one rank (environment, process group, CPU binding, pipes, PMI socket).
//! - `bind`: which CPUs each rank of a host is bound to; `topo`: the host's cores and NUMA
//!   nodes.
//! - `ranks`: the ranks of one host as their parent sees them.
//! - `job`: mprun's event loop: forwarding, PMI, reaping, stopping, remote hosts.
//! - `proxy`: `mprun --proxy`, the per-host proxy started on remote hosts.
//! - `control`: the protocol between mprun and the proxies; `addr`: addresses and routes.
//! - `stdio`: line-by-line forwarding of the ranks' output; `stdin`: rank 0's stdin.
//! - `pmi`: the PMI-1 server.
//! - `status`, `cause`: how ranks end and why a job is stopped.
//! - `shm`: removing the job's shared-memory segments.
//!
//! mprun exits 0 when every rank exits 0. Otherwise it names the first cause on stderr and
//! exits with the failing rank's code (128 + signal number for a signal), 128 + signal for
//! a signal to mprun, 124 for `--timeout`, 2 for bad usage, 126/127 for a program that
//! cannot be run, 1 for a host whose proxy cannot be started or is lost.

mod addr;
mod alloc;
mod bind;
mod cause;
mod cli;
mod control;
mod hosts;
mod ids;
mod job;
mod mlx_hostfile;
mod pmi;
mod program;
mod proxy;
mod ranks;
mod shm;
mod spawn;
mod status;
mod stdin;
mod stdio;
mod topo;

use std::process::ExitCode;

use crate::cli::Parsed;
use crate::ids::JobIds;
use crate::job::Setup;
use crate::stdio::say;

/// Most ranks per CPU of this machine without `--oversubscribe`.
const MAX_PER_CPU: usize = 64;

fn main() -> ExitCode {
    let code = run();
    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))
}

fn run() -> i32 {
    let argv: Vec<_> = std::env::args_os().collect();
    if proxy::wanted(&argv[1.min(argv.len())..]) {
        return proxy::main(&argv[2..]);
    }
    let opts = match cli::parse(argv) {
        Ok(Parsed::Run(opts)) => *opts,
        Ok(Parsed::Exit(code)) => return code,
        Err(e) => {
            say(&e.message);
            return e.code;
        }
    };
    let plan = hosts::plan(&opts.hosts, opts.np, addr::is_local, &addr::hostname());
    // Before any fork: a count no machine can run is a typo, not a job.
    let here: usize = plan.iter().filter(|h| h.local).map(|h| h.ranks.len()).sum();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if here > MAX_PER_CPU * cpus && !opts.oversubscribe {
        say(&format!(
            "-np {}: {here} ranks on this machine's {cpus} CPU(s) is more than {MAX_PER_CPU} per CPU; \
             add --oversubscribe to start them anyway",
            opts.np
        ));
        return 2;
    }
    // The program is looked up here only if this machine runs ranks; proxies look it up on
    // their hosts.
    let mut program = None;
    if plan.iter().any(|h| h.local) {
        match program::resolve(&opts.program, std::env::var_os("PATH").as_deref()) {
            Ok(path) => program = Some(path),
            Err(e) => {
                say(&e.message());
                return e.exit_code();
            }
        }
    }
    let ids = match JobIds::generate() {
        Ok(ids) => ids,
        Err(e) => {
            say(&format!("cannot draw a random job id: {e}"));
            return 1;
        }
    };
    let setup = Setup { opts: &opts, ids: &ids, program, plan };
    let code = match job::run(&setup) {
        Ok(code) => code,
        Err(e) => {
            say(&format!("cannot run the job: {e}"));
            1
        }
    };
    match shm::remove_segments(&ids.jobid) {
        Ok(n) if n > 0 && opts.verbose => say(&format!("removed {n} shared-memory segment(s) of the job")),
        Err(e) if opts.verbose => say(&format!("cannot clean up shared memory: {e}")),
        _ => {}
    }
    code
}
