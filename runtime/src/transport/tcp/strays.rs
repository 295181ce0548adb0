//! The listener after start-up: every connection that reaches it then is a stray (the job's
//! peers are all connected), so a thread of its own accepts and closes each at once, also
//! while the application computes and calls nothing, and counts them ([`Rejects`]: a line
//! per address per interval). It looks every [`TICK`] whether it should stop; stopping
//! says the count of the rest.

use std::net::TcpListener;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::rejects::Rejects;

/// How long the thread sleeps in `poll` between looks at its stop flag.
const TICK: Duration = Duration::from_millis(200);

/// The thread that turns strays away.
#[derive(Debug)]
pub(crate) struct Strays {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Strays {
    /// Starts turning away what reaches `listener`, counting into `rejects`. Without a
    /// thread (the system refused one) the listener is closed: strays are then refused by
    /// the system, at once, uncounted.
    pub(crate) fn start(listener: TcpListener, mut rejects: Rejects) -> Strays {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let _ = listener.set_nonblocking(true);
        let thread = std::thread::Builder::new()
            .name("mpr-tcp-strays".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    let mut fds = [nix::poll::PollFd::new(listener.as_fd(), nix::poll::PollFlags::POLLIN)];
                    let tick = nix::poll::PollTimeout::try_from(TICK).unwrap_or(nix::poll::PollTimeout::NONE);
                    if nix::poll::poll(&mut fds, tick).is_err() {
                        std::thread::sleep(TICK);
                    }
                    while let Ok((conn, from)) = listener.accept() {
                        drop(conn);
                        let what = format!("closed an unexpected TCP connection from {from}");
                        rejects.note(from.ip(), &what, Instant::now());
                    }
                }
                rejects.flush();
            })
            .ok();
        Strays { stop, thread }
    }

    /// Stops the thread and says what it counted and had not said yet.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Strays {
    fn drop(&mut self) {
        self.stop();
    }
}
