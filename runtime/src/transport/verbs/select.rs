//! Which verbs provider a rank opens: `MPR_VERBS_PROVIDER=soft|soft-rc` picks the software
//! provider (never chosen on its own), otherwise the real one (rdma-core on Linux, Apple's
//! librdma on macOS) if a device is there.
//!
//! The software provider's knobs: `MPR_SOFT_LOSS` (probability that a wire frame is dropped,
//! default 0), `MPR_SOFT_SEED` (seed of the loss generator, mixed with the rank) and
//! `MPR_SOFT_LIMITS` (a smaller device, to test how the transport lives within it:
//! `qp=N,mr=N,wr=N,msg=N`, each optional, the rest from the mode).

use std::net::IpAddr;

use super::ibv::{Ibv, IbvConfig};
use super::provider::{Provider, VerbsError};
use super::soft::{SoftConfig, SoftDevice, SoftLimits};
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
        "" | "verbs" => {
            let config = IbvConfig::from_env();
            Ok(Ibv::open(&config).map(|d| Opened { kind: "verbs".into(), dev: Box::new(d) }).map_err(|e| {
                let why = match e {
                    VerbsError::Unavailable(s) => s,
                    e => e.to_string(),
                };
                match &config.device {
                    Some(name) => format!("{why} (device {name}, from MPR_RDMA_DEVICE)"),
                    None => why,
                }
            }))
        }
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
            if let Ok(v) = std::env::var("MPR_SOFT_LIMITS") {
                cfg.limits =
                    Some(parse_limits(&v, &cfg).map_err(|e| Error::Bootstrap(format!("MPR_SOFT_LIMITS={v}: {e}")))?);
            }
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

/// `qp=N,mr=N,wr=N,msg=N` (any subset) over the limits of `cfg`'s mode.
fn parse_limits(text: &str, cfg: &SoftConfig) -> Result<SoftLimits, String> {
    let c = cfg.caps();
    let mut l = SoftLimits { max_qp: c.max_qp, max_mr: c.max_mr, max_wr: c.max_wr, max_msg: c.max_msg };
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item.split_once('=').ok_or_else(|| format!("expected KEY=N, got '{item}'"))?;
        let n = v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("'{item}': expected a count above 0"))?;
        match k.trim() {
            "qp" => l.max_qp = n,
            "mr" => l.max_mr = n,
            "wr" => l.max_wr = n,
            "msg" => l.max_msg = n,
            other => return Err(format!("unknown limit '{other}' (qp, mr, wr, msg)")),
        }
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_limits_parse_over_the_modes() {
        let uc = SoftConfig::new(std::net::Ipv4Addr::LOCALHOST);
        let l = parse_limits("wr=8, mr=3", &uc).unwrap();
        assert_eq!((l.max_qp, l.max_mr, l.max_wr, l.max_msg), (10, 3, 8, uc.caps().max_msg));
        let rc = SoftConfig::rc(std::net::Ipv4Addr::LOCALHOST);
        assert_eq!(parse_limits("", &rc).unwrap().max_mr, 1024);
        assert_eq!(parse_limits("qp=2,msg=4096", &rc).unwrap().max_qp, 2);
        assert_eq!(parse_limits("wr", &uc).unwrap_err(), "expected KEY=N, got 'wr'");
        assert_eq!(parse_limits("wr=0", &uc).unwrap_err(), "'wr=0': expected a count above 0");
        assert_eq!(parse_limits("cq=4", &uc).unwrap_err(), "unknown limit 'cq' (qp, mr, wr, msg)");
    }
}
