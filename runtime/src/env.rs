//! Tunables read from the environment (`MPR_*`): one parser for all of them, and one check
//! at start-up ([`check`]) that every numeric setting holds a value it can take, so that a
//! typo is a clear error naming the variable, never a panic or a silent default.

use std::str::FromStr;
use std::time::Duration;

use crate::error::Error;

/// What a numeric setting takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A whole number of bytes, items or microseconds (0 included).
    Count,
    /// A time in seconds (a decimal number, at most [`MAX_SECONDS`]).
    Seconds,
    /// `0` (off) or `1` (on).
    Switch,
    /// A probability in [0, 1).
    Fraction,
    /// One of the words listed.
    OneOf(&'static [&'static str]),
}

/// The longest time a setting may give: about 31 years, far from where durations overflow.
const MAX_SECONDS: f64 = 1e9;

/// Every numeric (or enumerated) setting of the runtime (the README's tuning table).
const NUMERIC: &[(&str, Kind)] = &[
    ("MPR_SHM_FRAME", Kind::Count),
    ("MPR_SHM_RING", Kind::Count),
    ("MPR_SHM_EAGER", Kind::Count),
    ("MPR_SHM_CMA", Kind::Switch),
    ("MPR_PTRACER", Kind::Count),
    ("MPR_WAIT_SPIN", Kind::Count),
    ("MPR_WAIT_TIMEOUT", Kind::Seconds),
    ("MPR_SPLIT_COPY_MIN", Kind::Count),
    ("MPR_RNDV_HEAD", Kind::Count),
    ("MPR_RDMA_GID_INDEX", Kind::Count),
    ("MPR_RDMA_MTU", Kind::OneOf(&["256", "512", "1024", "2048", "4096"])),
    ("MPR_RDMA_MR_ACCESS", Kind::OneOf(&["local", "remote"])),
    ("MPR_RDMA_CHUNK", Kind::Count),
    ("MPR_RDMA_WINDOW", Kind::Count),
    ("MPR_RDMA_RTO_MS", Kind::Count),
    ("MPR_RDMA_TIMEOUT", Kind::Seconds),
    ("MPR_RDMA_READ_MIN", Kind::Count),
    ("MPR_RDMA_READ", Kind::Switch),
    ("MPR_SOFT_LOSS", Kind::Fraction),
    ("MPR_SOFT_SEED", Kind::Count),
    ("MPR_COLL_SHM", Kind::Switch),
    ("MPR_COLL_SHM_SLOT", Kind::Count),
    ("MPR_COLL_SHM_BCAST_MAX", Kind::Count),
    ("MPR_COLL_SHM_REDUCE_MAX", Kind::Count),
    ("MPR_COLL_SHM_GATHER_MAX", Kind::Count),
    ("MPR_TCP_EAGER", Kind::Count),
    ("MPR_TCP_FRAME", Kind::Count),
    ("MPR_TCP_BUF", Kind::Count),
    ("MPR_CONNECT_TIMEOUT", Kind::Seconds),
    ("MPR_PMI_TIMEOUT", Kind::Seconds),
    ("MPR_PROGRESS_NAP_US", Kind::Count),
];

/// The names of the numeric settings [`check`] validates.
pub fn numeric_settings() -> impl Iterator<Item = &'static str> {
    NUMERIC.iter().map(|(name, _)| *name)
}

/// Checks every numeric setting that is set (and not empty); the first bad one is an error
/// naming the variable, its value and what it takes.
pub(crate) fn check() -> Result<(), Error> {
    for &(name, kind) in NUMERIC {
        let Ok(value) = std::env::var(name) else { continue };
        let v = value.trim();
        if v.is_empty() {
            continue;
        }
        let (ok, takes) = match kind {
            Kind::Count => (v.parse::<u64>().is_ok(), "a whole number from 0".to_string()),
            Kind::Seconds => (
                v.parse::<f64>().is_ok_and(|s| (0.0..=MAX_SECONDS).contains(&s)),
                "seconds, a finite number from 0 to 1000000000".to_string(),
            ),
            Kind::Switch => (v == "0" || v == "1", "0 (off) or 1 (on)".to_string()),
            Kind::Fraction => {
                (v.parse::<f64>().is_ok_and(|p| (0.0..1.0).contains(&p)), "a probability in [0, 1)".to_string())
            }
            Kind::OneOf(words) => (words.contains(&v), format!("one of {}", words.join(", "))),
        };
        if !ok {
            return Err(Error::Bootstrap(format!("{name}={value}: expected {takes}")));
        }
    }
    Ok(())
}

/// The value of `name` parsed as `T`; `None` if unset, empty or unparsable.
pub(crate) fn parsed<T: FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The time `name` gives in seconds; `None` if unset or not a time [`check`] accepts (so
/// this never panics, whatever the environment holds).
pub(crate) fn seconds(name: &str) -> Option<Duration> {
    parsed::<f64>(name).filter(|s| (0.0..=MAX_SECONDS).contains(s)).and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// `MPR_VERBOSE` is set (and not `0`): report the transports chosen and what they did.
pub(crate) fn verbose() -> bool {
    std::env::var("MPR_VERBOSE").is_ok_and(|v| !v.is_empty() && v != "0")
}

#[cfg(test)]
mod tests {
    #[test]
    fn unset_and_garbage_are_none() {
        assert_eq!(super::parsed::<usize>("MPR_TEST_SURELY_UNSET_VARIABLE"), None);
        assert_eq!(super::parsed::<usize>("PATH"), None);
        assert_eq!(super::seconds("MPR_TEST_SURELY_UNSET_VARIABLE"), None);
    }
}
