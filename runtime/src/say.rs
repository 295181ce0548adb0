//! Lines to standard error, each written whole.
//!
//! `eprintln!` writes a formatted line in pieces (standard error is unbuffered): a rank
//! descheduled between two pieces leaves half a line in its pipe, which the launcher releases
//! after a short wait (a prompt looks the same), and another rank's line lands in the middle
//! of it. [`say!`](crate::say) formats the line first and hands it to one `write`, which a
//! pipe takes whole up to `PIPE_BUF` bytes. Every line the runtime prints goes through it.

/// `eprintln!`, written whole: the line is formatted first, then written at once.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::line(::std::format_args!($($arg)*))
    };
}
pub(crate) use say;

/// Writes `args` and a newline to standard error with one write (errors ignored, as
/// `eprintln!` would panic on them instead).
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut s = std::fmt::format(args);
    s.push('\n');
    let _ = std::io::stderr().lock().write_all(s.as_bytes());
}
