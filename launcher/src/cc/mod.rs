//! `mprcc` and `mprcxx`, MPI's compiler wrappers (like `mpicc`): the C or C++ compiler with
//! mpr's `mpi.h` on the include path and, when linking, `libmpr` on the link line (with its
//! directory as the run-time search path, so the program runs under `mprun` as it is).
//!
//! Arguments pass through to the compiler; the wrapper's own are `-show` (print the command,
//! run nothing), `-compile_info`/`-link_info` (the same), and `-cc=COMPILER`. `-c`, `-E`,
//! `-S` and `-M`/`-MM` mean no linking. The compiler is `MPR_CC` (`MPR_CXX`), else `cc`
//! (`c++`). The header and library are found from the wrapper's own location
//! (`mpr::info::c_abi`), or `MPR_HOME`.

use std::ffi::OsString;
use std::process::{Command, ExitCode};

/// Runs the wrapper `name` whose compiler is `$env`, else `default`.
pub(crate) fn main(name: &str, env: &str, default: &str) -> ExitCode {
    let mut compiler = std::env::var_os(env).unwrap_or_else(|| default.into());
    let (mut show, mut link) = (false, true);
    let mut args: Vec<OsString> = Vec::new();
    for a in std::env::args_os().skip(1) {
        match a.to_str() {
            Some("-show" | "-compile_info" | "-link_info") => show = true,
            Some(s) if s.starts_with("-cc=") => compiler = s["-cc=".len()..].into(),
            Some("-c" | "-E" | "-S" | "-M" | "-MM") => {
                link = false;
                args.push(a);
            }
            _ => args.push(a),
        }
    }
    let bin = mpr::info::program_dir();
    let abi = mpr::info::c_abi(&bin);
    let Some(include) = abi.include else {
        eprintln!("{name}: cannot find mpi.h beside {} (set MPR_HOME to mpr's installation)", bin.display());
        return ExitCode::from(2);
    };
    let mut line: Vec<OsString> = vec![compiler, format!("-I{}", include.display()).into()];
    line.extend(args);
    if link {
        let Some(lib) = abi.lib else {
            eprintln!(
                "{name}: cannot find {} beside {} (set MPR_HOME to mpr's installation)",
                mpr::info::C_LIBRARY,
                bin.display()
            );
            return ExitCode::from(2);
        };
        line.push(format!("-L{}", lib.display()).into());
        line.push(format!("-Wl,-rpath,{}", lib.display()).into());
        line.push("-lmpr".into());
    }
    if show {
        let words: Vec<String> = line.iter().map(|w| w.to_string_lossy().into_owned()).collect();
        println!("{}", words.join(" "));
        return ExitCode::SUCCESS;
    }
    match Command::new(&line[0]).args(&line[1..]).status() {
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| c.clamp(0, 255) as u8)),
        Err(e) => {
            eprintln!("{name}: cannot run {}: {e}", line[0].to_string_lossy());
            ExitCode::from(127)
        }
    }
}
