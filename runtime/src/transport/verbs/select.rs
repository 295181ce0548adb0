//! Which verbs provider a rank opens: `MPR_VERBS_PROVIDER=soft|soft-rc` picks the software
//! provider (never chosen on its own), otherwise the real one (rdma-core on Linux, Apple's
//! librdma on macOS) if a device is there.
//!
//! The software provider's knobs: `MPR_SOFT_LOSS` (probability that a wire frame is dropped,
//! default 0) and `MPR_SOFT_SEED` (seed of the loss generator, mixed with the rank).

use std::net::IpAddr;

use super::ibv::{Ibv, IbvConfig};
use super::provider::Provider;
use super::soft::{SoftConfig, SoftDevice};
use crate::error::Error;

/// An opened device and the kind peers must share to connect to it.
#[derive(Debug)]
pub(crate) struct Opened {
    /// `soft`, `soft-rc` or `verbs` (what the business card says).
    pub(crate) kind: String,
    pub(crate) dev: Box<dyn Provider>,
}

/// Opens this rank's device. `Ok(Err(reason))`: no RDMA here (the job may fall back to
/// TCP); `Err`: a setting is wrong.
pub(crate) fn open(bind: IpAddr, rank: usize) -> Result<Result<Opened, String>, Error> {
    let chosen = std::env::var("MPR_VERBS_PROVIDER").unwrap_or_default();
    match chosen.trim() {
        "" | "verbs" => Ok(Ibv::open(&IbvConfig::from_env())
            .map(|d| Opened { kind: "verbs".into(), dev: Box::new(d) })
            .map_err(|e| e.to_string())),
        kind @ ("soft" | "soft-rc") => {
            let IpAddr::V4(v4) = bind else {
                return Err(Error::Bootstrap(format!("the software RDMA provider needs an IPv4 address, not {bind}")));
            };
            let mut cfg = if kind == "soft" { SoftConfig::new(v4) } else { SoftConfig::rc(v4) };
            if let Ok(v) = std::env::var("MPR_SOFT_LOSS") {
                cfg.loss =
                    v.trim().parse::<f64>().ok().filter(|p| (0.0..1.0).contains(p)).ok_or_else(|| {
                        Error::Bootstrap(format!("MPR_SOFT_LOSS={v}: expected a probability in [0, 1)"))
                    })?;
            }
            cfg.seed = crate::env::parsed::<u64>("MPR_SOFT_SEED").unwrap_or(cfg.seed)
                ^ (rank as u64).wrapping_mul(0x9e37_79b9);
            match SoftDevice::open(cfg) {
                Ok(d) => Ok(Ok(Opened { kind: kind.into(), dev: Box::new(d) })),
                Err(e) => Ok(Err(e.to_string())),
            }
        }
        other => Err(Error::Bootstrap(format!(
            "MPR_VERBS_PROVIDER={other}: unknown provider (this build has verbs, soft, soft-rc)"
        ))),
    }
}
