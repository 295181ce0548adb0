//! The command line: `mprun -np N [OPTIONS] PROGRAM [ARGS...]`.
//!
//! Options stop at the first word that is not an option (or after `--`): that word is the
//! program and everything after it belongs to the program, untouched, even words such as
//! `-n`. mpirun's single-dash long options (`-np`, `-ppn`, `-host`, `-hostfile`,
//! `-machinefile`) are accepted by rewriting them to `--np` and so on before clap sees them.
//! Every error is one line starting `mprun: `, reported before any rank starts.

use std::ffi::{OsStr, OsString};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, ColorChoice, CommandFactory, FromArgMatches, Parser};

use crate::addr;
use crate::alloc::{Allocation, System};
use crate::bind::{self, BindTo, MapBy};
use crate::control::start::Launcher;
use crate::hosts::{self, HostSpec};

/// How long ranks get between SIGTERM and SIGKILL when the job is stopped, unless the
/// environment variable [`GRACE_VAR`] says otherwise.
const DEFAULT_KILL_GRACE: Duration = Duration::from_millis(1000);

/// Environment variable that overrides [`DEFAULT_KILL_GRACE`], in milliseconds.
const GRACE_VAR: &str = "MPR_KILL_GRACE_MS";

/// Default bound on starting a host's proxy and on its silence.
const DEFAULT_HOST_TIMEOUT: Duration = Duration::from_secs(30);

/// Options whose value is the next word when it is not attached (`--np=4`, `-n4`).
const VALUE_OPTIONS: &[&str] = &[
    "--np",
    "-n",
    "--timeout",
    "-x",
    "--env",
    "-H",
    "--host",
    "--hostfile",
    "--machinefile",
    "--ppn",
    "--launcher",
    "--launcher-exec",
    "--host-timeout",
    "--control-addr",
    "--iface",
    "--transports",
    "--rdma-device",
    "--bind-to",
    "--map-by",
];

/// mpirun's single-dash long options, rewritten to their double-dash form.
const SINGLE_DASH: &[&str] =
    &["-np", "-ppn", "-hostfile", "-machinefile", "-host", "-bind-to", "-map-by", "-report-bindings"];

/// Exit code for bad usage, as clap and most tools use.
const USAGE_EXIT: i32 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "mprun",
    version,
    about = "Start an mpr job: N ranks of PROGRAM, supervised as one job.",
    override_usage = "mprun -np N [OPTIONS] PROGRAM [ARGS]...",
    after_help = "Environment:\n  MPR_KILL_GRACE_MS  milliseconds between SIGTERM and SIGKILL when the job is stopped \
                  (default 1000)\n  MPR_*              passed on to ranks on remote hosts, which do not inherit \
                  mprun's environment (other variables: use -x or --env)",
    color = ColorChoice::Never
)]
struct Args {
    /// Number of ranks to start (also spelled -np)
    #[arg(short = 'n', long = "np", value_name = "N", allow_hyphen_values = true)]
    np: Option<String>,

    /// Prefix every line of output with `[rank] `
    #[arg(long)]
    tag_output: bool,

    /// Stop the job (exit code 124) if it runs longer than SECONDS
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
    timeout: Option<String>,

    /// Report what mprun does on stderr
    #[arg(long)]
    verbose: bool,

    /// Pass VAR from mprun's environment to the ranks (or set it: VAR=VALUE); repeatable
    #[arg(short = 'x', value_name = "VAR", action = ArgAction::Append, allow_hyphen_values = true)]
    export: Vec<String>,

    /// Set K=V in the ranks' environment; repeatable
    #[arg(long = "env", value_name = "K=V", action = ArgAction::Append, allow_hyphen_values = true)]
    env: Vec<String>,

    /// Hosts to run on: NAME[:SLOTS],... (repeatable; a host without SLOTS has one)
    #[arg(short = 'H', long = "host", value_name = "HOSTS", action = ArgAction::Append)]
    host: Vec<String>,

    /// File naming the hosts, one per line: `HOST slots=N` or `HOST:N`
    #[arg(long, visible_alias = "machinefile", value_name = "FILE")]
    hostfile: Option<PathBuf>,

    /// Ranks per host: every host gets N slots (also spelled -ppn)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    ppn: Option<String>,

    /// How remote hosts' proxies are started: ssh (default; srun inside a Slurm allocation),
    /// srun, or fork (all on this machine)
    #[arg(long, value_name = "ssh|srun|fork")]
    launcher: Option<String>,

    /// Start remote proxies as `CMD HOST PROXY-COMMAND...` (CMD is split at spaces)
    #[arg(long = "launcher-exec", value_name = "CMD")]
    launcher_exec: Option<String>,

    /// Stop the job if a host's proxy does not connect, or is not heard from, within SECONDS
    /// (default 30)
    #[arg(long = "host-timeout", value_name = "SECONDS", allow_hyphen_values = true)]
    host_timeout: Option<String>,

    /// The address mprun listens on for proxies (default: the local address that routes to
    /// the first remote host)
    #[arg(long = "control-addr", value_name = "IP")]
    control_addr: Option<String>,

    /// Network interface (NAME, or a subnet A.B.C.D/N) of the job: mprun listens on its address and ranks use it for TCP
    #[arg(long, value_name = "NAME")]
    iface: Option<String>,

    /// Transports the ranks may use, e.g. `tcp` or `shm,tcp` (sets MPR_TRANSPORTS)
    #[arg(long, value_name = "LIST")]
    transports: Option<String>,

    /// RDMA device of every host the hostfile gives none (`rdma_en3`, `mlx5_0`; sets MPR_RDMA_DEVICE)
    #[arg(long = "rdma-device", value_name = "NAME")]
    rdma_device: Option<String>,

    /// Bind each rank to the CPUs of a core or a NUMA node, or not at all (default: core when
    /// a host's ranks do not outnumber its cores, else none)
    #[arg(long = "bind-to", value_name = "core|numa|none", allow_hyphen_values = true)]
    bind_to: Option<String>,

    /// Spread a host's consecutive ranks: core (rank i on core i, the default) or numa
    /// (round-robin over the NUMA nodes)
    #[arg(long = "map-by", value_name = "core|numa", allow_hyphen_values = true)]
    map_by: Option<String>,

    /// Print each rank's binding on stderr before it starts
    #[arg(long)]
    report_bindings: bool,

    /// Start more than 64 ranks per CPU of this machine (refused otherwise)
    #[arg(long)]
    oversubscribe: bool,

    /// The program each rank runs, found through PATH like a shell does
    #[arg(value_name = "PROGRAM")]
    program: Option<OsString>,

    /// Arguments passed to PROGRAM untouched
    #[arg(value_name = "ARGS", trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// What the user asked for, checked.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Number of ranks.
    pub(crate) np: usize,
    /// The program as the user wrote it.
    pub(crate) program: OsString,
    /// Its arguments.
    pub(crate) args: Vec<OsString>,
    /// Prefix forwarded lines with `[rank] `.
    pub(crate) tag_output: bool,
    /// The time limit, and the number of seconds as written for messages.
    pub(crate) timeout: Option<(Duration, f64)>,
    /// Report what mprun does.
    pub(crate) verbose: bool,
    /// Variables added to every rank's environment (from `-x` and `--env`), in order.
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Time between SIGTERM and SIGKILL when the job is stopped.
    pub(crate) kill_grace: Duration,
    /// The hosts, merged (a host named twice has the slots of both; every name of this
    /// machine is one host); empty when none was named: the job runs here.
    pub(crate) hosts: Vec<HostSpec>,
    /// How remote hosts' proxies are started.
    pub(crate) launcher: Launcher,
    /// Bound on starting a host's proxy and on its silence.
    pub(crate) host_timeout: Duration,
    /// The control listener's address, if given.
    pub(crate) control_addr: Option<IpAddr>,
    /// The network interface of the job, if given.
    pub(crate) iface: Option<String>,
    /// `--transports`, if given.
    pub(crate) transports: Option<String>,
    /// `--rdma-device`, if given.
    pub(crate) rdma_device: Option<String>,
    /// `--bind-to`, `--map-by`, `--report-bindings`.
    pub(crate) binding: bind::Policy,
    /// `--oversubscribe`: no bound on the ranks per CPU of this machine.
    pub(crate) oversubscribe: bool,
}

/// Parsing gave either a job to run or an exit code (help or version was printed).
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Run this job.
    Run(Box<Options>),
    /// Exit now with this code.
    Exit(i32),
}

/// A bad command line: one message and the exit code to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UsageError {
    /// Exit code for mprun.
    pub(crate) code: i32,
    /// The message, without the `mprun: ` prefix.
    pub(crate) message: String,
}

impl UsageError {
    fn usage(message: String) -> Self {
        UsageError { code: USAGE_EXIT, message }
    }
}

/// Parses mprun's command line (`argv[0]` included) and the environment it depends on.
pub(crate) fn parse(argv: Vec<OsString>) -> Result<Parsed, UsageError> {
    parse_in(argv, crate::alloc::from_env)
}

/// [`parse`], with the batch allocation (if any) from `allocation`.
fn parse_in(
    argv: Vec<OsString>,
    allocation: impl FnOnce() -> Result<Option<Allocation>, String>,
) -> Result<Parsed, UsageError> {
    let (options, program) = split_argv(argv.into_iter().skip(1).collect());
    let mut words: Vec<OsString> = vec!["mprun".into()];
    words.extend(options);
    if !program.is_empty() {
        words.push("--".into());
        words.extend(program);
    }
    let mut command = Args::command();
    let matches = match command.try_get_matches_from_mut(words) {
        Ok(m) => m,
        Err(e) => return clap_error(e),
    };
    let args = Args::from_arg_matches(&matches).map_err(|e| UsageError::usage(first_line(&e)))?;
    let kill_grace = kill_grace(std::env::var_os(GRACE_VAR).as_deref())?;
    // The batch allocation matters only when no host is named (and a broken one only then).
    let allocation = if args.host.is_empty() && args.hostfile.is_none() {
        allocation().map_err(|e| UsageError::usage(format!("the batch allocation: {e}")))?
    } else {
        None
    };
    check(args, kill_grace, allocation).map(|o| Parsed::Run(Box::new(o)))
}

/// Splits the words after `argv[0]` into mprun's options and the program with its
/// arguments, rewriting `-np` to `--np`.
fn split_argv(words: Vec<OsString>) -> (Vec<OsString>, Vec<OsString>) {
    let mut options = Vec::new();
    let mut rest = words.into_iter();
    while let Some(word) = rest.next() {
        let text = word.to_string_lossy();
        if text == "--" {
            break;
        }
        if !text.starts_with('-') || text == "-" {
            return (options, std::iter::once(word).chain(rest).collect());
        }
        let rewritten = SINGLE_DASH.iter().find_map(|long| match text.strip_prefix(long) {
            Some(tail) if tail.is_empty() || tail.starts_with('=') => Some(OsString::from(format!("-{long}{tail}"))),
            _ => None,
        });
        let word = rewritten.unwrap_or_else(|| word.clone());
        let takes_value = VALUE_OPTIONS.contains(&word.to_string_lossy().as_ref());
        options.push(word);
        if takes_value {
            options.extend(rest.next());
        }
    }
    (options, rest.collect())
}

/// Turns clap's error into one line, or prints help/version and exits 0.
fn clap_error(e: clap::Error) -> Result<Parsed, UsageError> {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            Ok(Parsed::Exit(0))
        }
        _ => Err(UsageError::usage(first_line(&e))),
    }
}

/// The first non-empty line of clap's rendered error (`error: ...`).
fn first_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("error: bad command line");
    line.trim().to_string()
}

/// Checks the values clap could not check, and builds [`Options`].
fn check(args: Args, kill_grace: Duration, allocation: Option<Allocation>) -> Result<Options, UsageError> {
    let Some(program) = args.program else {
        return Err(UsageError::usage(
            "missing PROGRAM to run (usage: mprun -np N [OPTIONS] PROGRAM [ARGS]...)".into(),
        ));
    };
    let positive = |option: &str, what: &str, text: &str| match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(UsageError::usage(format!("{option}: expected a positive number of {what}, got '{text}'"))),
    };
    let np = args.np.as_deref().map(|t| positive("-np", "ranks", t)).transpose()?;
    let ppn = args.ppn.as_deref().map(|t| positive("-ppn", "ranks per host", t)).transpose()?;
    let mut hosts = Vec::new();
    let mut env = Vec::new();
    if let Some(file) = &args.hostfile {
        if !args.host.is_empty() {
            return Err(UsageError::usage("use --host or --hostfile, not both".into()));
        }
        let parsed = hosts::read_hostfile(file).map_err(UsageError::usage)?;
        hosts = parsed.hosts;
        // MLX's `envs`: before -x and --env, which may override them.
        env.extend(parsed.env.into_iter().map(|(k, v)| (k.into(), v.into())));
    }
    for list in &args.host {
        hosts.extend(hosts::parse_host_list(list).map_err(UsageError::usage)?);
    }
    // No host named: a batch allocation's hosts, with its task counts as slots.
    let system = match allocation {
        Some(a) if hosts.is_empty() => {
            hosts = a.hosts;
            Some(a.system)
        }
        _ => None,
    };
    let mut hosts =
        hosts::merge(hosts, |a, b| a == b || (addr::is_local(a) && addr::is_local(b))).map_err(UsageError::usage)?;
    if let Some(file) = &args.hostfile {
        hosts::check_cables(&hosts).map_err(|e| UsageError::usage(format!("--hostfile {}: {e}", file.display())))?;
    }
    if let Some(ppn) = ppn {
        if hosts.is_empty() {
            hosts.push(HostSpec::new("localhost", ppn));
        }
        hosts.iter_mut().for_each(|h| h.slots = ppn);
    }
    let np = np.unwrap_or_else(|| if hosts.is_empty() { 1 } else { hosts.iter().map(|h| h.slots).sum() });
    let timeout = args.timeout.as_deref().map(|t| parse_timeout("--timeout", t)).transpose()?;
    let host_timeout = match args.host_timeout.as_deref() {
        Some(t) => parse_timeout("--host-timeout", t)?.0,
        None => DEFAULT_HOST_TIMEOUT,
    };
    let launcher = match (args.launcher.as_deref(), args.launcher_exec.as_deref()) {
        // Inside a Slurm allocation, srun reaches its nodes (ssh may not be allowed there).
        (None, None) if system == Some(System::Slurm) => Launcher::Srun,
        (None | Some("ssh"), None) => Launcher::Ssh,
        (Some("srun"), None) => Launcher::Srun,
        (Some("fork"), None) => Launcher::Fork,
        (Some(other), None) => {
            return Err(UsageError::usage(format!("--launcher: expected ssh, srun or fork, got '{other}'")));
        }
        (None | Some("ssh"), Some(cmd)) => {
            let words: Vec<OsString> = cmd.split_whitespace().map(OsString::from).collect();
            if words.is_empty() {
                return Err(UsageError::usage("--launcher-exec: expected a command, got ''".into()));
            }
            Launcher::Exec(words)
        }
        (Some(_), Some(_)) => {
            return Err(UsageError::usage("--launcher-exec cannot be combined with --launcher fork or srun".into()));
        }
    };
    let control_addr = match args.control_addr.as_deref() {
        Some(text) => Some(
            text.parse::<IpAddr>()
                .map_err(|_| UsageError::usage(format!("--control-addr: expected an IP address, got '{text}'")))?,
        ),
        None => None,
    };
    if let Some(list) = &args.transports {
        if list.trim().is_empty() {
            return Err(UsageError::usage("--transports: expected a list such as tcp or shm,tcp, got ''".into()));
        }
        // The names the ranks take (`MPR_TRANSPORTS`), checked here so that a typo is one line.
        let known = ["shm", "tcp", "rdma"];
        if let Some(bad) = list.split(',').map(str::trim).find(|t| !t.is_empty() && !known.contains(t)) {
            return Err(UsageError::usage(format!(
                "--transports: unknown transport '{bad}' (expected shm, tcp or rdma)"
            )));
        }
    }
    let rdma_device = args
        .rdma_device
        .as_deref()
        .map(hosts::check_device)
        .transpose()
        .map_err(|e| UsageError::usage(format!("--rdma-device: {e}")))?;
    let binding = bind::Policy {
        bind: args.bind_to.as_deref().map(BindTo::parse).transpose().map_err(UsageError::usage)?,
        map: args.map_by.as_deref().map(MapBy::parse).transpose().map_err(UsageError::usage)?.unwrap_or_default(),
        report: args.report_bindings,
    };
    let oversubscribe = args.oversubscribe;
    for var in &args.export {
        env.extend(export(var)?);
    }
    for pair in &args.env {
        match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => env.push((k.into(), v.into())),
            _ => return Err(UsageError::usage(format!("--env: expected K=V, got '{pair}'"))),
        }
    }
    Ok(Options {
        np,
        program,
        args: args.args,
        tag_output: args.tag_output,
        timeout,
        verbose: args.verbose,
        env,
        kill_grace,
        hosts,
        launcher,
        host_timeout,
        control_addr,
        iface: args.iface,
        transports: args.transports,
        rdma_device,
        binding,
        oversubscribe,
    })
}

/// `--timeout SECONDS` (and `--host-timeout`): a positive, finite number of seconds
/// (fractions allowed).
fn parse_timeout(option: &str, text: &str) -> Result<(Duration, f64), UsageError> {
    let bad = || UsageError::usage(format!("{option}: expected a positive number of seconds, got '{text}'"));
    let secs: f64 = text.trim().parse().map_err(|_| bad())?;
    if secs.is_nan() || secs <= 0.0 {
        return Err(bad());
    }
    let limit = Duration::try_from_secs_f64(secs).map_err(|_| bad())?;
    Ok((limit, secs))
}

/// `-x VAR` passes VAR from mprun's environment (nothing if it is unset); `-x VAR=VALUE`
/// sets it.
fn export(var: &str) -> Result<Option<(OsString, OsString)>, UsageError> {
    if let Some((k, v)) = var.split_once('=') {
        if k.is_empty() {
            return Err(UsageError::usage(format!("-x: expected VAR or VAR=VALUE, got '{var}'")));
        }
        return Ok(Some((k.into(), v.into())));
    }
    if var.is_empty() {
        return Err(UsageError::usage("-x: expected a variable name, got ''".into()));
    }
    Ok(std::env::var_os(var).map(|v| (OsString::from(var), v)))
}

/// The SIGTERM-to-SIGKILL grace from [`GRACE_VAR`] (milliseconds), or the default.
fn kill_grace(value: Option<&OsStr>) -> Result<Duration, UsageError> {
    let Some(value) = value else {
        return Ok(DEFAULT_KILL_GRACE);
    };
    let text = value.to_string_lossy();
    text.trim()
        .parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| UsageError::usage(format!("{GRACE_VAR}: expected a number of milliseconds, got '{text}'")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn options_stop_at_the_program() {
        let (opts, prog) = split_argv(os(&["-np", "2", "--tag-output", "./a", "-n", "5", "--np"]));
        assert_eq!(opts, os(&["--np", "2", "--tag-output"]));
        assert_eq!(prog, os(&["./a", "-n", "5", "--np"]));
    }

    #[test]
    fn values_may_look_like_options() {
        let (opts, prog) = split_argv(os(&["-np", "-1", "prog"]));
        assert_eq!(opts, os(&["--np", "-1"]));
        assert_eq!(prog, os(&["prog"]));
        let (opts, prog) = split_argv(os(&["-np=3", "-x", "A", "--env", "B=1", "--", "-prog"]));
        assert_eq!(opts, os(&["--np=3", "-x", "A", "--env", "B=1"]));
        assert_eq!(prog, os(&["-prog"]));
    }

    #[test]
    fn timeouts() {
        let t = |text| parse_timeout("--timeout", text);
        assert_eq!(t("1.5").unwrap().0, Duration::from_millis(1500));
        assert!(t("0").is_err());
        assert!(t("-1").is_err());
        assert!(t("nan").is_err());
        assert!(t("inf").is_err());
        assert!(t("1e30").is_err());
    }

    #[test]
    fn grace() {
        assert_eq!(kill_grace(None).unwrap(), DEFAULT_KILL_GRACE);
        assert_eq!(kill_grace(Some(OsStr::new("250"))).unwrap(), Duration::from_millis(250));
        assert!(kill_grace(Some(OsStr::new("soon"))).is_err());
    }

    #[test]
    fn parses_a_job() {
        let Parsed::Run(o) =
            parse(os(&["mprun", "-np", "3", "--timeout", "2", "--env", "A=b=c", "sh", "-c", "x"])).unwrap()
        else {
            panic!("expected a job")
        };
        assert_eq!(o.np, 3);
        assert_eq!(o.program, "sh");
        assert_eq!(o.args, os(&["-c", "x"]));
        assert_eq!(o.env, vec![("A".into(), "b=c".into())]);
        assert_eq!(o.timeout.unwrap().1, 2.0);
    }

    fn job(words: &[&str]) -> Options {
        match parse_in(os(words), || Ok(None)).unwrap() {
            Parsed::Run(o) => *o,
            Parsed::Exit(_) => panic!("expected a job"),
        }
    }

    #[test]
    fn single_dash_long_options() {
        let (opts, prog) = split_argv(os(&["-ppn", "2", "-host", "a,b", "-hostfile=f", "-hosts", "x"]));
        assert_eq!(opts, os(&["--ppn", "2", "--host", "a,b", "--hostfile=f", "-hosts"]));
        assert_eq!(prog, os(&["x"]));
    }

    #[test]
    fn hosts_set_the_default_rank_count() {
        let o = job(&["mprun", "-H", "a,b:2", "--host", "c:3", "true"]);
        assert_eq!(o.np, 6);
        assert_eq!(
            o.hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect::<Vec<_>>(),
            [("a", 1), ("b", 2), ("c", 3)]
        );
        assert_eq!(job(&["mprun", "-H", "a,b,a", "true"]).np, 3, "a host named twice keeps its slots");
        assert_eq!(job(&["mprun", "-H", "a,b:5", "-ppn", "2", "true"]).np, 4);
        assert_eq!(job(&["mprun", "-np", "7", "-H", "a,b", "true"]).np, 7);
        let o = job(&["mprun", "-H", "localhost:2,127.0.0.1:2", "true"]);
        assert_eq!((o.np, o.hosts.len()), (4, 1), "names of this machine are one host");
        assert_eq!(job(&["mprun", "-ppn", "3", "true"]).np, 3);
        assert_eq!(job(&["mprun", "true"]).np, 1);
    }

    #[test]
    fn a_slurm_allocation_gives_hosts_and_srun() {
        let slurm = || {
            let hosts = vec![HostSpec::new("n01", 2), HostSpec::new("n02", 2), HostSpec::new("n03", 1)];
            Ok(Some(Allocation { system: System::Slurm, hosts }))
        };
        let run = |words: &[&str]| match parse_in(os(words), slurm).unwrap() {
            Parsed::Run(o) => *o,
            Parsed::Exit(_) => panic!("expected a job"),
        };
        let o = run(&["mprun", "true"]);
        assert_eq!((o.np, o.launcher.clone()), (5, Launcher::Srun));
        assert_eq!(
            o.hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect::<Vec<_>>(),
            [("n01", 2), ("n02", 2), ("n03", 1)]
        );
        assert_eq!(run(&["mprun", "-np", "3", "true"]).np, 3);
        assert_eq!(run(&["mprun", "--launcher", "ssh", "true"]).launcher, Launcher::Ssh);
        // Hosts named on the command line beat the allocation's.
        let o = run(&["mprun", "-H", "a:2", "true"]);
        assert_eq!((o.np, o.launcher), (2, Launcher::Ssh));
        let pbs = || Ok(Some(Allocation { system: System::Pbs, hosts: vec![HostSpec::new("p1", 3)] }));
        let Parsed::Run(o) = parse_in(os(&["mprun", "true"]), pbs).unwrap() else { panic!() };
        assert_eq!((o.np, o.launcher), (3, Launcher::Ssh));
        let broken = || Err("SLURM_TASKS_PER_NODE=2(x: '2(x' is not N or N(xR)".to_string());
        let e = parse_in(os(&["mprun", "true"]), broken).unwrap_err();
        assert!(e.message.contains("the batch allocation: SLURM_TASKS_PER_NODE"), "{}", e.message);
        assert!(parse_in(os(&["mprun", "-H", "a", "true"]), broken).is_ok(), "named hosts need no allocation");
    }

    #[test]
    fn launchers() {
        assert_eq!(job(&["mprun", "true"]).launcher, Launcher::Ssh);
        assert_eq!(job(&["mprun", "--launcher", "fork", "true"]).launcher, Launcher::Fork);
        let o = job(&["mprun", "--launcher-exec", "ip netns exec", "true"]);
        assert_eq!(o.launcher, Launcher::Exec(os(&["ip", "netns", "exec"])));
        for bad in
            [&["--launcher", "rsh"][..], &["--launcher", "fork", "--launcher-exec", "x"], &["--launcher-exec", " "]]
        {
            let mut argv = vec!["mprun"];
            argv.extend(bad);
            argv.push("true");
            assert!(parse(os(&argv)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn host_options() {
        let o = job(&["mprun", "--host-timeout", "2.5", "--control-addr", "10.0.0.1", "--iface", "eth1", "true"]);
        assert_eq!(o.host_timeout, Duration::from_millis(2500));
        assert_eq!(o.control_addr, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(o.iface.as_deref(), Some("eth1"));
        assert_eq!(job(&["mprun", "true"]).host_timeout, DEFAULT_HOST_TIMEOUT);
        for bad in [
            &["--host-timeout", "0"][..],
            &["--control-addr", "nowhere"],
            &["-H", "a:0"],
            &["-H", "a", "--hostfile", "/dev/null"],
            &["-ppn", "0"],
            &["--transports", ""],
            &["--transports", "foo"],
            &["--transports", "shm,infiniband"],
        ] {
            let mut argv = vec!["mprun"];
            argv.extend(bad);
            argv.push("true");
            let e = parse(os(&argv)).unwrap_err();
            assert_eq!(e.code, USAGE_EXIT, "{bad:?}");
        }
    }

    #[test]
    fn binding_options() {
        let o = job(&["mprun", "true"]);
        assert_eq!(o.binding, bind::Policy::default());
        let o = job(&["mprun", "--bind-to", "numa", "--map-by=numa", "--report-bindings", "true"]);
        assert_eq!(o.binding, bind::Policy { bind: Some(BindTo::Numa), map: MapBy::Numa, report: true });
        let o = job(&["mprun", "-bind-to", "none", "-map-by", "core", "-report-bindings", "true"]);
        assert_eq!(o.binding, bind::Policy { bind: Some(BindTo::None), map: MapBy::Core, report: true });
        for (bad, want) in [
            (&["--bind-to", "socket"][..], "--bind-to: expected core, numa or none, got 'socket'"),
            (&["--bind-to", ""], "--bind-to: expected core, numa or none, got ''"),
            (&["--map-by", "slot"], "--map-by: expected core or numa, got 'slot'"),
        ] {
            let mut argv = vec!["mprun"];
            argv.extend(bad);
            argv.push("true");
            let e = parse(os(&argv)).unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (USAGE_EXIT, want), "{bad:?}");
        }
    }

    #[test]
    fn errors_are_one_line() {
        for argv in [&["mprun", "--bogus", "sh"][..], &["mprun", "-np"], &["mprun", "-np", "0", "sh"], &["mprun"]] {
            let e = parse(os(argv)).unwrap_err();
            assert_eq!(e.code, USAGE_EXIT, "{argv:?}");
            assert!(!e.message.contains('\n'), "{argv:?}: {}", e.message);
        }
    }
}
