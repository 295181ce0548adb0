//! `mprcc`: the C compiler wrapper (see `cc/mod.rs`).

#[path = "../cc/mod.rs"]
mod cc;

fn main() -> std::process::ExitCode {
    cc::main("mprcc", "MPR_CC", "cc")
}
