//! The control connection between mprun and the proxy of each remote host.
//!
//! mprun listens on one TCP address (never every address). It starts each remote host's
//! proxy through the launcher command (`ssh`, `--launcher-exec CMD`, or directly with
//! `--launcher fork`), writing the job secret on the command's stdin; the proxy connects back
//! and the two prove to each other that they know the secret (`auth`). A connection that does
//! not prove itself within the host timeout, sends a bad frame or a wrong proof, or claims a
//! host that is not waiting for its proxy is closed and logged; the job goes on.
//!
//! After the proof mprun sends `Launch`; the proxy starts its ranks and reports `Started`,
//! forwards their output (`Output`, whole lines), their PMI-1 lines (`Pmi`; mprun holds the one
//! key-value space and answers with `PmiReply`), and their ends (`Exited`), and sends `Done`
//! when all have ended. mprun forwards rank 0's stdin (`Stdin`, `StdinEof`, with `StdinAck`
//! as flow control) and tells the proxy to `Stop` or `Kill` its ranks. Both sides send
//! `Heartbeat` while idle; either side that hears nothing for the host timeout declares the
//! other gone: mprun stops the job naming the host, the proxy kills its ranks and exits.
//!
//! - `wire`: the frames and messages.
//! - `auth`: the HMAC proofs.
//! - `link`: one nonblocking framed connection.
//! - `start`: the command line that starts a proxy.

pub(crate) mod auth;
pub(crate) mod link;
pub(crate) mod start;
pub(crate) mod wire;

use std::time::Duration;

/// How often each side sends a heartbeat when the silence bound is `bound`: a quarter of it,
/// at most once a second, at least every 50 ms.
pub(crate) fn heartbeat_interval(bound: Duration) -> Duration {
    (bound / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}
