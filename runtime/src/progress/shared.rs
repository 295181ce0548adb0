//! The runtime as the application's thread and the progress thread share it.
//!
//! Every API call takes the runtime's lock for as long as it works inside it (a wait holds it
//! while it polls): one uncontended atomic operation to take it and one to give it back.
//! The progress thread exists only while it is needed (by default, while a window is open:
//! a target that computes without calling mpr must still serve the operations on its
//! window). It wakes after a nap, takes the lock only if nobody holds it (`try_lock`: it
//! never makes the application wait behind it for more than one round of polling), polls
//! the transports once, and naps again: 50 us after a round that found work, doubling up to
//! `MPR_PROGRESS_NAP_US` (default 1000) while there is none, and that longest nap at once
//! when the application holds the lock (it is inside mpr, making progress itself). So an
//! operation on a target that computes is served within about one longest nap plus the
//! OS's scheduling delay.
//!
//! `MPR_PROGRESS_THREAD`: `auto` (default: while a window is open, in jobs of more than one
//! rank), `on` (from start-up to the end), `off` (never: passive-target operations then
//! wait for the target's next mpr call, as in MPICH without its async thread).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::Runtime;

/// When the progress thread runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Auto,
    On,
    Off,
}

#[derive(Debug)]
struct Helper {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

/// The shared runtime.
#[derive(Debug)]
pub(crate) struct Shared {
    /// parking_lot's lock: no poisoning, whose check std's lock makes on every take and
    /// give-back (a panic inside the runtime leaves it as it was at that point, as a
    /// `RefCell` would; the job goes on or ends by the panic's own path).
    rt: parking_lot::Mutex<Runtime>,
    mode: Mode,
    /// Fastest and slowest napping of the progress thread.
    naps: (Duration, Duration),
    /// Open windows that need the progress thread, and the thread while it runs.
    helper: Mutex<(usize, Option<Helper>)>,
}

impl Shared {
    pub(crate) fn new(rt: Runtime) -> Result<Arc<Shared>, crate::error::Error> {
        let mode = match std::env::var("MPR_PROGRESS_THREAD").ok().as_deref().map(str::trim) {
            None | Some("" | "auto") => Mode::Auto,
            Some("on" | "1") => Mode::On,
            Some("off" | "0") => Mode::Off,
            Some(v) => {
                return Err(crate::error::Error::Bootstrap(format!(
                    "MPR_PROGRESS_THREAD={v}: expected auto, on or off"
                )))
            }
        };
        let max = Duration::from_micros(crate::env::parsed("MPR_PROGRESS_NAP_US").unwrap_or(1000).max(50));
        let solo = rt.boot.size == 1;
        let s = Arc::new(Shared {
            rt: parking_lot::Mutex::new(rt),
            mode: if solo { Mode::Off } else { mode },
            naps: (Duration::from_micros(50).min(max), max),
            helper: Mutex::new((0, None)),
        });
        if s.mode == Mode::On {
            s.start_helper();
        }
        Ok(s)
    }

    /// The runtime, for the calling thread alone until the guard drops.
    #[inline]
    pub(crate) fn borrow_mut(&self) -> parking_lot::MutexGuard<'_, Runtime> {
        self.rt.lock()
    }

    /// As [`Shared::borrow_mut`] (reading needs the lock too).
    #[inline]
    pub(crate) fn borrow(&self) -> parking_lot::MutexGuard<'_, Runtime> {
        self.borrow_mut()
    }

    /// The runtime if nobody holds it.
    pub(crate) fn try_borrow_mut(&self) -> Option<parking_lot::MutexGuard<'_, Runtime>> {
        self.rt.try_lock()
    }

    fn helper(&self) -> MutexGuard<'_, (usize, Option<Helper>)> {
        self.helper.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A window that needs this rank's engine while the application computes is open.
    pub(crate) fn serve(self: &Arc<Self>) {
        let first = {
            let mut h = self.helper();
            h.0 += 1;
            h.0 == 1
        };
        if first && self.mode == Mode::Auto {
            self.start_helper();
        }
    }

    /// Such a window is closed.
    pub(crate) fn unserve(&self) {
        let last = {
            let mut h = self.helper();
            h.0 = h.0.saturating_sub(1);
            h.0 == 0
        };
        if last && self.mode == Mode::Auto {
            self.stop_helper();
        }
    }

    fn start_helper(self: &Arc<Self>) {
        let mut h = self.helper();
        if h.1.is_some() {
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (weak, flag, naps) = (Arc::downgrade(self), stop.clone(), self.naps);
        let spawned = std::thread::Builder::new().name("mpr-progress".into()).spawn(move || run(weak, flag, naps));
        match spawned {
            Ok(handle) => h.1 = Some(Helper { stop, handle }),
            // Without it, operations are served at the target's next mpr call, as with `off`.
            Err(e) => {
                crate::say::say!("mpr: no progress thread ({e}); passive-target operations wait for the target's calls")
            }
        }
    }

    /// Stops the progress thread, if it runs, and waits for it. Called without the
    /// runtime's lock held (the thread may be waiting for it).
    pub(crate) fn stop_helper(&self) {
        let helper = self.helper().1.take();
        if let Some(Helper { stop, handle }) = helper {
            stop.store(true, Ordering::Release);
            handle.thread().unpark();
            let _ = handle.join();
        }
    }
}

/// The progress thread: nap, poll once if the runtime is free, repeat.
fn run(shared: Weak<Shared>, stop: Arc<AtomicBool>, (fast, slow): (Duration, Duration)) {
    let mut nap = fast;
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(nap);
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Some(s) = shared.upgrade() else { return };
        nap = match s.try_borrow_mut().map(|mut rt| rt.progress_aside()) {
            Some(n) if n > 0 => fast,
            Some(_) => (nap * 2).min(slow),
            // The application is inside mpr and makes progress itself: stay out of its way
            // (on a busy machine, a thread that wakes often takes a core from a rank).
            None => slow,
        };
    }
}
