//! Connections a rank rejects, summarised: the first from an address says why at once; the
//! rest from it within [`INTERVAL`] are counted and said in one line (at the next rejection
//! after the interval, or at [`Rejects::flush`]), so a flood of strays cannot flood the
//! user's output.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// At most one line per address per interval (and the summary of the rest).
pub(crate) const INTERVAL: Duration = Duration::from_secs(10);

/// What one address's rejections since its last line come to.
#[derive(Debug)]
struct Tally {
    said: Instant,
    more: u64,
}

/// The rejections of one rank, by peer address.
#[derive(Debug)]
pub(crate) struct Rejects {
    me: usize,
    by_addr: HashMap<IpAddr, Tally>,
}

impl Rejects {
    pub(crate) fn new(me: usize) -> Rejects {
        Rejects { me, by_addr: HashMap::new() }
    }

    /// A connection from `from` was rejected or closed; `what` says so ("rejected a TCP
    /// connection from ...: why"). Returns the line printed, if any.
    pub(crate) fn note(&mut self, from: IpAddr, what: &str, now: Instant) -> Option<String> {
        let line = match self.by_addr.get_mut(&from) {
            Some(t) if now.duration_since(t.said) < INTERVAL => {
                t.more += 1;
                return None;
            }
            Some(t) if t.more > 0 => {
                let more = std::mem::take(&mut t.more);
                t.said = now;
                format!(
                    "mpr: rank {}: {what} (and {more} more from {from} in the {} s before)",
                    self.me,
                    INTERVAL.as_secs()
                )
            }
            _ => {
                self.by_addr.insert(from, Tally { said: now, more: 0 });
                format!("mpr: rank {}: {what}", self.me)
            }
        };
        crate::say::say!("{line}");
        Some(line)
    }

    /// Says what was counted and not yet said, one line per address.
    pub(crate) fn flush(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for (addr, t) in self.by_addr.iter_mut().filter(|(_, t)| t.more > 0) {
            let more = std::mem::take(&mut t.more);
            lines.push(format!("mpr: rank {}: {more} more TCP connection(s) from {addr} rejected or closed", self.me));
        }
        lines.sort();
        for l in &lines {
            crate::say::say!("{l}");
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_from_one_address_is_one_line_and_a_summary() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut r = Rejects::new(3);
        let t0 = Instant::now();
        let first = r.note(a, "rejected a TCP connection from 10.0.0.1:5: bad magic", t0);
        assert_eq!(first.as_deref(), Some("mpr: rank 3: rejected a TCP connection from 10.0.0.1:5: bad magic"));
        let said = (1..200).filter_map(|i| r.note(a, "x", t0 + Duration::from_millis(i))).count();
        assert_eq!(said, 0, "the flood's other 199 are counted, not said");
        assert!(r.note(b, "rejected a TCP connection from 10.0.0.2:7: bad magic", t0).is_some(), "another address");
        let next = r.note(a, "rejected a TCP connection from 10.0.0.1:9: bad magic", t0 + INTERVAL).unwrap();
        assert!(next.ends_with("bad magic (and 199 more from 10.0.0.1 in the 10 s before)"), "{next}");
        r.note(a, "x", t0 + INTERVAL + Duration::from_secs(1));
        assert_eq!(r.flush(), ["mpr: rank 3: 1 more TCP connection(s) from 10.0.0.1 rejected or closed"]);
        assert!(r.flush().is_empty(), "said once");
    }
}
