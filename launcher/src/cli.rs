//! The command line: `mprun -np N [OPTIONS] PROGRAM [ARGS...]`.
//!
//! Options stop at the first word that is not an option (or after `--`): that word is the
//! program and everything after it belongs to the program, untouched, even words such as
//! `-n`. mpirun's single-dash `-np` is accepted by rewriting it to `--np` before clap sees
//! it. Every error is one line starting `mprun: `, reported before any rank starts.

use std::ffi::{OsStr, OsString};
use std::time::Duration;

use clap::{ArgAction, ColorChoice, CommandFactory, FromArgMatches, Parser};

/// How long ranks get between SIGTERM and SIGKILL when the job is stopped, unless the
/// environment variable [`GRACE_VAR`] says otherwise.
const DEFAULT_KILL_GRACE: Duration = Duration::from_millis(1000);

/// Environment variable that overrides [`DEFAULT_KILL_GRACE`], in milliseconds.
const GRACE_VAR: &str = "MPR_KILL_GRACE_MS";

/// Options whose value is the next word when it is not attached (`--np=4`, `-n4`).
const VALUE_OPTIONS: &[&str] = &["--np", "-n", "--timeout", "-x", "--env"];

/// Exit code for bad usage, as clap and most tools use.
const USAGE_EXIT: i32 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "mprun",
    version,
    about = "Start an mpr job: N ranks of PROGRAM, supervised as one job.",
    override_usage = "mprun -np N [OPTIONS] PROGRAM [ARGS]...",
    after_help = "Environment:\n  MPR_KILL_GRACE_MS  milliseconds between SIGTERM and SIGKILL when the job is stopped \
                  (default 1000)",
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
}

/// Parsing gave either a job to run or an exit code (help or version was printed).
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Run this job.
    Run(Options),
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
    check(args, kill_grace).map(Parsed::Run)
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
        let word = match text.strip_prefix("-np") {
            Some(tail) if tail.is_empty() || tail.starts_with('=') => format!("--np{tail}").into(),
            _ => word.clone(),
        };
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
fn check(args: Args, kill_grace: Duration) -> Result<Options, UsageError> {
    let Some(program) = args.program else {
        return Err(UsageError::usage(
            "missing PROGRAM to run (usage: mprun -np N [OPTIONS] PROGRAM [ARGS]...)".into(),
        ));
    };
    let np = match args.np.as_deref() {
        None => 1,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => return Err(UsageError::usage(format!("-np: expected a positive number of ranks, got '{text}'"))),
        },
    };
    let timeout = args.timeout.as_deref().map(parse_timeout).transpose()?;
    let mut env = Vec::new();
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
    })
}

/// `--timeout SECONDS`: a positive, finite number of seconds (fractions allowed).
fn parse_timeout(text: &str) -> Result<(Duration, f64), UsageError> {
    let bad = || UsageError::usage(format!("--timeout: expected a positive number of seconds, got '{text}'"));
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
        assert_eq!(parse_timeout("1.5").unwrap().0, Duration::from_millis(1500));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("-1").is_err());
        assert!(parse_timeout("nan").is_err());
        assert!(parse_timeout("inf").is_err());
        assert!(parse_timeout("1e30").is_err());
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

    #[test]
    fn errors_are_one_line() {
        for argv in [&["mprun", "--bogus", "sh"][..], &["mprun", "-np"], &["mprun", "-np", "0", "sh"], &["mprun"]] {
            let e = parse(os(argv)).unwrap_err();
            assert_eq!(e.code, USAGE_EXIT, "{argv:?}");
            assert!(!e.message.contains('\n'), "{argv:?}: {}", e.message);
        }
    }
}
