//! `mprun`: starts N ranks of a program on this host and supervises them as one job.
//!
//! - `cli`: the command line and its checks.
//! - `program`: finding the program through `PATH`.
//! - `ids`: the job id and secret.
//! - `spawn`: starting one rank (environment, process group, pipes, PMI socket).
//! - `job`: the event loop: forwarding, PMI, reaping, stopping.
//! - `stdio`: line-by-line forwarding of the ranks' output.
//! - `pmi`: the PMI-1 server.
//! - `status`, `cause`: how ranks end and why a job is stopped.
//! - `shm`: removing the job's shared-memory segments.
//!
//! mprun exits 0 when every rank exits 0. Otherwise it names the first cause on stderr and
//! exits with the failing rank's code (128 + signal number for a signal), 128 + signal for
//! a signal to mprun, 124 for `--timeout`, 2 for bad usage, 126/127 for a program that
//! cannot be run.

mod cause;
mod cli;
mod ids;
mod job;
mod pmi;
mod program;
mod shm;
mod spawn;
mod status;
mod stdio;

use std::process::ExitCode;

use crate::cli::Parsed;
use crate::ids::JobIds;
use crate::spawn::Launch;
use crate::stdio::say;

fn main() -> ExitCode {
    let code = run();
    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))
}

fn run() -> i32 {
    let opts = match cli::parse(std::env::args_os().collect()) {
        Ok(Parsed::Run(opts)) => opts,
        Ok(Parsed::Exit(code)) => return code,
        Err(e) => {
            say(&e.message);
            return e.code;
        }
    };
    let program = match program::resolve(&opts.program, std::env::var_os("PATH").as_deref()) {
        Ok(path) => path,
        Err(e) => {
            say(&e.message());
            return e.exit_code();
        }
    };
    let ids = match JobIds::generate() {
        Ok(ids) => ids,
        Err(e) => {
            say(&format!("cannot draw a random job id: {e}"));
            return 1;
        }
    };
    let launch = Launch { program: &program, opts: &opts, ids: &ids };
    let code = match job::run(&launch) {
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
