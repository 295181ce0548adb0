//! Tunables read from the environment (`MPR_*`): one parser for all of them.

use std::str::FromStr;

/// The value of `name` parsed as `T`; `None` if unset, empty or unparsable.
pub(crate) fn parsed<T: FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
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
    }
}
