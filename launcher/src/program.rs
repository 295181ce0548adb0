//! Finding the program to run, the way a shell does.
//!
//! A name containing `/` is a path. Any other name is looked up in each directory of `PATH`
//! in order (an empty entry means the current directory); the first executable regular file
//! wins. Exit codes follow the shell: 127 when nothing is found, 126 when something is found
//! but cannot be executed.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::unistd::{access, AccessFlags};

/// `PATH` to use when the variable is unset (what execvp falls back to).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Why the program cannot be run; [`Unrunnable::exit_code`] and [`Unrunnable::message`] say
/// what to tell the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unrunnable {
    /// Nothing by that name (exit 127).
    NotFound(OsString),
    /// Found, but not an executable file (exit 126).
    NotExecutable(OsString),
    /// Found, but a directory (exit 126).
    Directory(OsString),
}

impl Unrunnable {
    /// The shell's exit code for this failure.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Unrunnable::NotFound(_) => 127,
            Unrunnable::NotExecutable(_) | Unrunnable::Directory(_) => 126,
        }
    }

    /// The message, without the `mprun: ` prefix.
    pub(crate) fn message(&self) -> String {
        match self {
            Unrunnable::NotFound(p) => format!("{}: program not found", p.to_string_lossy()),
            Unrunnable::NotExecutable(p) => {
                format!("{}: permission denied (not an executable file)", p.to_string_lossy())
            }
            Unrunnable::Directory(p) => {
                format!("{}: is a directory, not a program", p.to_string_lossy())
            }
        }
    }
}

/// Resolves `program` to the path to execute, using `path` (the value of `PATH`).
pub(crate) fn resolve(program: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, Unrunnable> {
    if program.is_empty() {
        return Err(Unrunnable::NotFound(program.into()));
    }
    if program.as_bytes().contains(&b'/') {
        let candidate = Path::new(program);
        return match check(candidate) {
            Check::Runnable => Ok(candidate.to_path_buf()),
            Check::Missing => Err(Unrunnable::NotFound(program.into())),
            Check::NotExecutable => Err(Unrunnable::NotExecutable(program.into())),
            Check::Directory => Err(Unrunnable::Directory(program.into())),
        };
    }
    let path = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    let mut denied = false;
    for dir in path.as_bytes().split(|b| *b == b':') {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(OsStr::from_bytes(dir)) };
        let candidate = dir.join(program);
        match check(&candidate) {
            Check::Runnable => return Ok(candidate),
            Check::NotExecutable => denied = true,
            Check::Missing | Check::Directory => {}
        }
    }
    if denied {
        Err(Unrunnable::NotExecutable(program.into()))
    } else {
        Err(Unrunnable::NotFound(program.into()))
    }
}

/// What is at a candidate path.
enum Check {
    Runnable,
    Missing,
    NotExecutable,
    Directory,
}

fn check(candidate: &Path) -> Check {
    match std::fs::metadata(candidate) {
        Err(_) => Check::Missing,
        Ok(m) if m.is_dir() => Check::Directory,
        Ok(_) if access(candidate, AccessFlags::X_OK).is_ok() => Check::Runnable,
        Ok(_) => Check::NotExecutable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_through_path() {
        let found = resolve(OsStr::new("sh"), Some(OsStr::new("/nonexistent:/bin:/usr/bin"))).unwrap();
        assert!(found.ends_with("sh"));
    }

    #[test]
    fn reports_what_is_wrong() {
        let missing = resolve(OsStr::new("no-such-program-mpr"), Some(OsStr::new("/bin"))).unwrap_err();
        assert_eq!(missing.exit_code(), 127);
        assert_eq!(missing.message(), "no-such-program-mpr: program not found");
        assert_eq!(resolve(OsStr::new("/"), None).unwrap_err().exit_code(), 126);
        assert_eq!(resolve(OsStr::new("./no/such"), None).unwrap_err().exit_code(), 127);
        assert_eq!(resolve(OsStr::new(""), None).unwrap_err().exit_code(), 127);
    }
}
