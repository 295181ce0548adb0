//! The service thread of a soft device: the part of an RDMA device that works without the
//! host CPU. It waits on every queue pair's socket and on the queue pairs' timers, and under
//! the device lock reads datagrams, runs the timers and puts frames on the wire.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{lock, Core};

/// The token of the waker that tells the thread to stop.
pub(super) const WAKER: mio::Token = mio::Token(usize::MAX);

/// Longest sleep: frames left behind by a full socket, or posted while the thread slept
/// towards a far deadline, go out at least this often.
const TICK: Duration = Duration::from_millis(20);

pub(super) fn run(mut poll: mio::Poll, core: &Mutex<Core>, stop: &AtomicBool) {
    let mut events = mio::Events::with_capacity(256);
    // Queue pairs whose sockets may hold more datagrams (edge-triggered: read until empty).
    let mut hot: Vec<u32> = Vec::new();
    let mut timeout = Duration::ZERO;
    loop {
        if let Err(e) = poll.poll(&mut events, Some(timeout)) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                crate::say::say!("mpr: soft verbs device: waiting for datagrams failed: {e}");
                return;
            }
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        for ev in events.iter().filter(|ev| ev.token() != WAKER) {
            let id = ev.token().0 as u32;
            if !hot.contains(&id) {
                hot.push(id);
            }
        }
        let mut guard = lock(core);
        let Core { ctx, qps, buf, .. } = &mut *guard;
        let now = Instant::now();
        hot.retain(|id| qps.get_mut(id).is_some_and(|qp| qp.receive(ctx, buf, now)));
        let mut next = now + TICK;
        for qp in qps.values_mut() {
            qp.on_timer(ctx, now);
            qp.flush(ctx, buf, now);
            if let Some(at) = qp.deadline(ctx) {
                next = next.min(at);
            }
        }
        drop(guard);
        timeout = if hot.is_empty() { next.saturating_duration_since(Instant::now()) } else { Duration::ZERO };
    }
}
