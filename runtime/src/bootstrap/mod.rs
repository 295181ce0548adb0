//! Bootstrap: who am I, who are my peers.
//!
//! A rank learns its rank, the job's size, id and secret from its launcher (environment and
//! the PMI-1 service, pmi.rs), publishes a business card (host, pid, later transport
//! addresses) and reads everyone's after a fence. Without a launcher the process is a
//! job of one (MPI's singleton init).

pub mod cpus;
pub mod machine;
pub(crate) mod pmi;
pub(crate) mod pmi2;
pub(crate) mod pmix;
pub mod wire;

/// The IPv4 address of this host on interface `name`, or inside subnet `name`
/// (`A.B.C.D/N`): how ranks and the launcher agree on the job's network.
pub fn interface_address(name: &str) -> Result<std::net::IpAddr, Error> {
    crate::transport::tcp::addr::iface_addr(name)
}

/// The local address this host sends from to reach `dest` (no packet is sent): how the
/// launcher picks the address its hosts reach it at, and ranks under Slurm theirs.
pub fn route_source(dest: std::net::IpAddr) -> std::io::Result<std::net::IpAddr> {
    crate::transport::tcp::addr::route_source(dest)
}

use crate::error::Error;
use pmi::{Placement, Pmi};

/// What one rank tells the others about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Card {
    /// Host identity: ranks with equal hosts share memory.
    pub(crate) host: String,
    /// The machine the host is on (see [`machine`]), if known: hosts that are namespaces or
    /// containers of one machine share its CPUs.
    pub(crate) machine: Option<String>,
    pub(crate) pid: u32,
    /// TCP listener address, if the rank listens.
    pub(crate) tcp: Option<std::net::SocketAddr>,
    /// The kind of RDMA device the rank opened (`soft`, `soft-rc`, `verbs`), if any: peers of
    /// the same kind on other hosts reach each other over RDMA.
    pub(crate) rdma: Option<String>,
    /// The links its RDMA devices sit on, one per device (IPv4 address and prefix length):
    /// a peer with a device on the same subnet is reached through that device. Empty: one
    /// device that reaches every peer of its kind.
    pub(crate) links: Vec<(std::net::Ipv4Addr, u8)>,
    /// Devices named per peer host (the hostfile's `rdma=HOST:DEV+DEV,...`, see
    /// `verbs::fabric`): for each peer host, the indices of this rank's devices that reach
    /// it, one per cable, in the order both ends list them. Beats `links`.
    pub(crate) named: Vec<(String, Vec<usize>)>,
    /// The CPUs the rank may run on, if its OS says (see `cpus`).
    pub(crate) cpus: Option<Vec<usize>>,
    /// Queue pairs each of its RDMA devices holds for all the ranks of its host together
    /// (Thunderbolt); `None`: each rank's devices are its own (see `verbs::fabric::plan`).
    pub(crate) qps: Option<usize>,
}

impl Card {
    /// What ranks that compete for the same CPUs have in common: the machine id, or the host
    /// name where the machine is not known.
    pub(crate) fn machine_key(&self) -> &str {
        self.machine.as_deref().unwrap_or(&self.host)
    }

    pub(crate) fn encode(&self) -> String {
        let mut s = format!("h={};p={}", self.host, self.pid);
        if let Some(m) = &self.machine {
            s += &format!(";m={m}");
        }
        if let Some(t) = self.tcp {
            s += &format!(";t={t}");
        }
        if let Some(v) = &self.rdma {
            s += &format!(";v={v}");
        }
        if !self.links.is_empty() {
            let links: Vec<String> = self.links.iter().map(|(ip, bits)| format!("{ip}/{bits}")).collect();
            s += &format!(";r={}", links.join(","));
        }
        if !self.named.is_empty() {
            let each = |(h, d): &(String, Vec<usize>)| {
                format!("{h}:{}", d.iter().map(usize::to_string).collect::<Vec<_>>().join("+"))
            };
            s += &format!(";x={}", self.named.iter().map(each).collect::<Vec<_>>().join(","));
        }
        if let Some(c) = &self.cpus {
            s += &format!(";c={}", cpus::encode(c));
        }
        if let Some(q) = self.qps {
            s += &format!(";q={q}");
        }
        s
    }

    pub(crate) fn decode(s: &str) -> Result<Card, Error> {
        let mut host = None;
        let mut machine = None;
        let mut pid = None;
        let mut tcp = None;
        let mut rdma = None;
        let mut links = Vec::new();
        let mut named = Vec::new();
        let mut cpu_list = None;
        let mut qps = None;
        for part in s.split(';') {
            match part.split_once('=') {
                Some(("h", v)) => host = Some(v.to_string()),
                Some(("p", v)) => pid = v.parse().ok(),
                Some(("m", v)) => machine = machine::normalize(v),
                Some(("v", v)) => rdma = Some(v.to_string()),
                Some(("r", v)) => {
                    let link = |l: &str| {
                        let (ip, bits) = l.split_once('/')?;
                        Some((ip.parse().ok()?, bits.parse::<u8>().ok().filter(|&b| b <= 32)?))
                    };
                    links = v
                        .split(',')
                        .map(link)
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| Error::Bootstrap(format!("bad RDMA links in card {s:?}")))?;
                }
                Some(("x", v)) => {
                    let each = |e: &str| {
                        let (h, d) = e.rsplit_once(':')?;
                        let d = d.split('+').map(|i| i.parse().ok()).collect::<Option<Vec<usize>>>()?;
                        Some((h.to_string(), d))
                    };
                    named = v
                        .split(',')
                        .map(each)
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| Error::Bootstrap(format!("bad RDMA device list in card {s:?}")))?;
                }
                Some(("c", v)) => cpu_list = cpus::decode(v),
                Some(("q", v)) => {
                    qps = Some(v.parse().map_err(|_| Error::Bootstrap(format!("bad queue pair count in card {s:?}")))?)
                }
                Some(("t", v)) => {
                    tcp = Some(v.parse().map_err(|_| Error::Bootstrap(format!("bad TCP address in card {s:?}")))?)
                }
                _ => {}
            }
        }
        match (host, pid) {
            (Some(host), Some(pid)) => Ok(Card { host, machine, pid, tcp, rdma, links, named, cpus: cpu_list, qps }),
            _ => Err(Error::Bootstrap(format!("malformed business card {s:?}"))),
        }
    }
}

/// This rank's place in the job.
#[derive(Debug)]
pub(crate) struct Bootstrap {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    /// Job id: names shared resources (`/dev/shm/mpr-<jobid>-*`). Under a foreign launcher,
    /// its job name and (after the card exchange) a random tag.
    pub(crate) jobid: String,
    pub(crate) host: String,
    /// Per-job secret shared by all ranks: the key that authenticates TCP connections.
    /// Empty until the card exchange where the launcher gives none (rank 0 draws one then).
    pub(crate) secret: Vec<u8>,
    /// Whether the launcher says every rank runs on this host.
    pub(crate) one_host: bool,
    /// Which ranks share this one's node, where the launcher says.
    placement: Option<Placement>,
    /// Started by a launcher other than mprun (no `MPR_JOBID`): the job id gets a tag rank 0
    /// draws at the card exchange.
    foreign: bool,
    pmi: Option<Pmi>,
}

fn env_num(name: &str) -> Result<Option<usize>, Error> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map(Some).map_err(|_| Error::Bootstrap(format!("{name}={v} is not a number"))),
        Err(_) => Ok(None),
    }
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl Bootstrap {
    /// Reads the launcher's environment and connects to its PMI service.
    pub(crate) fn from_env() -> Result<Bootstrap, Error> {
        let env_rank = env_num("MPR_RANK")?.or(env_num("PMI_RANK")?);
        let env_size = env_num("MPR_SIZE")?.or(env_num("PMI_SIZE")?);
        let mut pmi = Pmi::from_env(env_rank)?;
        // PMI-2 says rank and size itself; they must agree with the environment's.
        let (rank, size) = match pmi.as_ref().and_then(Pmi::rank_size) {
            Some((r, s)) if env_size.is_some_and(|e| e != s) => {
                return Err(Error::Bootstrap(format!(
                    "the launcher's PMI says rank {r} of {s} but the environment says {} ranks",
                    env_size.unwrap_or(0)
                )))
            }
            Some((r, s)) => (Some(r), Some(s)),
            None => (env_rank, env_size),
        };
        // The host's name: mprun's, else Slurm's name for the node (only where Slurm's own
        // service started the rank: another launcher inside a Slurm job may pass every rank
        // the environment of the node it runs on), else the PMIx launcher's, else the
        // machine's.
        let var = |v: &str| std::env::var(v).ok().filter(|h| !h.is_empty());
        let slurm = pmi.as_ref().is_some_and(Pmi::is_slurms);
        let host = var("MPR_HOST")
            .or_else(|| var("SLURMD_NODENAME").filter(|_| slurm))
            .or_else(|| pmi.as_mut().and_then(Pmi::hostname))
            .unwrap_or_else(hostname);
        let host: String =
            host.chars().map(|c| if c.is_ascii_graphic() && c != ';' && c != '=' { c } else { '_' }).collect();
        let (rank, size) = match (pmi.is_some(), rank, size) {
            (true, Some(r), Some(s)) if r < s => (r, s),
            (true, ..) => {
                return Err(Error::Bootstrap(
                    "started with PMI_FD but without a valid rank and size (MPR_RANK/PMI_RANK, MPR_SIZE/PMI_SIZE)"
                        .into(),
                ))
            }
            (false, _, Some(s)) if s > 1 => {
                return Err(Error::Bootstrap(format!(
                    "MPR_SIZE/PMI_SIZE says {s} ranks but there is no PMI_FD to reach the launcher"
                )))
            }
            (false, _, _) => (0, 1),
        };
        let foreign = pmi.is_some() && std::env::var("MPR_JOBID").map_or(true, |j| j.is_empty());
        let jobid = match std::env::var("MPR_JOBID") {
            Ok(j) if !j.is_empty() => j,
            _ => match &pmi {
                Some(p) => p.kvsname().to_string(),
                None => format!("single{}", std::process::id()),
            },
        };
        let jobid: String = jobid.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        // Without MPR_SECRET (a foreign launcher), rank 0 draws one at the card exchange.
        let secret = std::env::var("MPR_SECRET").ok().filter(|s| !s.is_empty()).unwrap_or_default();
        // Which ranks share this host: mprun says MPR_LOCAL_SIZE, MPICH's hydra
        // MPI_LOCALNRANKS, a PMI-2 launcher (Slurm) its process mapping, PMIx local peers.
        let placement = match pmi.as_mut() {
            Some(p) if size > 1 => p.placement(rank, size)?,
            _ => None,
        };
        let local = env_num("MPR_LOCAL_SIZE")?
            .or(env_num("MPI_LOCALNRANKS").ok().flatten())
            .or(placement.as_ref().map(|p| p.local.len()));
        let one_host = size == 1 || local == Some(size);
        if let (Some(p), 0, true) = (&pmi, rank, crate::env::verbose()) {
            let mapping = match &placement {
                Some(Placement { nodes: Some(n), .. }) => format!(", {n} node(s) by its process mapping"),
                Some(Placement { local, .. }) => format!(", {} rank(s) on this node", local.len()),
                None => String::new(),
            };
            crate::say::say!(
                "mpr: rank 0: started through the launcher's {} service, job {}{mapping}",
                p.name(),
                p.kvsname()
            );
        }
        Ok(Bootstrap { rank, size, jobid, host, secret: secret.into_bytes(), one_host, placement, foreign, pmi })
    }

    /// Whether a launcher other than mprun started this rank.
    pub(crate) fn foreign(&self) -> bool {
        self.foreign
    }

    /// Publishes `card`, fences, and returns every rank's card (index = rank).
    pub(crate) fn exchange(&mut self, card: &Card) -> Result<Vec<Card>, Error> {
        let Some(pmi) = self.pmi.as_mut() else {
            return Ok(vec![card.clone()]);
        };
        pmi.put(&format!("mpr-card-{}", self.rank), &card.encode())?;
        // Under a foreign launcher rank 0 draws, and shares through the launcher's key-value
        // service (which only the job's ranks reach): a tag that makes the job id unique
        // (a launcher's job ids repeat: Slurm's restart at 1 on a new cluster, and files a
        // killed job left in /dev/shm must not collide with a later one), and, without
        // MPR_SECRET, the job's 128-bit secret.
        let draw_secret = self.secret.is_empty();
        let draw = draw_secret || self.foreign;
        let mut job = String::new();
        if draw && self.rank == 0 {
            let mut bytes = [0u8; 20];
            getrandom::getrandom(&mut bytes).map_err(|e| Error::Bootstrap(format!("no random job secret: {e}")))?;
            job = hex(&bytes[..4]);
            if draw_secret {
                job += &format!(":{}", hex(&bytes[4..]));
                if crate::env::verbose() {
                    crate::say::say!(
                        "mpr: no MPR_SECRET from the launcher: rank 0 drew a 128-bit job secret and shared it \
                         through the launcher's key-value service (see docs/launchers.md)"
                    );
                }
            }
            pmi.put("mpr-job", &job)?;
        }
        pmi.barrier()?;
        if draw && self.rank != 0 {
            job = pmi.get(0, "mpr-job")?;
        }
        if draw {
            let (tag, secret) = job.split_once(':').map_or((job.as_str(), None), |(t, s)| (t, Some(s)));
            let hex_of = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
            if !hex_of(tag, 8) || secret.is_some_and(|s| !hex_of(s, 32)) || (draw_secret && secret.is_none()) {
                return Err(Error::Bootstrap(format!(
                    "rank 0 published a malformed job tag and secret ({} bytes{})",
                    job.len(),
                    if draw_secret && secret.is_none() { "; no secret, yet this rank has no MPR_SECRET" } else { "" }
                )));
            }
            if self.foreign {
                self.jobid = format!("{}_{tag}", self.jobid);
            }
            if draw_secret {
                self.secret = secret.unwrap_or_default().as_bytes().to_vec();
            }
        }
        let cards =
            (0..self.size)
                .map(|r| {
                    if r == self.rank {
                        Ok(card.clone())
                    } else {
                        Card::decode(&pmi.get(r, &format!("mpr-card-{r}"))?)
                    }
                })
                .collect::<Result<Vec<Card>, Error>>()?;
        if let Some(placement) = &self.placement {
            // The launcher's placement and the hosts' names should tell the same story.
            let differ = (0..self.size)
                .filter(|&r| placement.local.contains(&r) != (cards[r].host == card.host))
                .collect::<Vec<_>>();
            if !differ.is_empty() && crate::env::verbose() {
                crate::say::say!(
                    "mpr: rank {}: the launcher's process mapping and the host names disagree about ranks {differ:?}; \
                     the host names decide which ranks share memory (MPR_HOST names a host)",
                    self.rank
                );
            }
        }
        Ok(cards)
    }

    /// Publishes `key = value` in the job's key-value space (visible after the next fence).
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        match self.pmi.as_mut() {
            Some(p) => p.put(key, value),
            None => Ok(()),
        }
    }

    /// The value rank `owner` published under `key` before the last fence.
    pub(crate) fn get(&mut self, owner: usize, key: &str) -> Result<String, Error> {
        match self.pmi.as_mut() {
            Some(p) => p.get(owner, key),
            None => Err(Error::Bootstrap(format!("no key-value service to look up {key}"))),
        }
    }

    /// A fence across all ranks (no-op for a job of one).
    pub(crate) fn fence(&mut self) -> Result<(), Error> {
        match self.pmi.as_mut() {
            Some(p) => p.barrier(),
            None => Ok(()),
        }
    }

    pub(crate) fn finalize(&mut self) {
        if let Some(p) = self.pmi.as_mut() {
            let _ = p.finalize();
        }
    }

    pub(crate) fn abort(&mut self, code: i32, msg: &str) {
        if let Some(p) = self.pmi.as_mut() {
            p.abort(code, msg);
        }
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_round_trip() {
        let c = Card {
            host: "node-1.local".into(),
            machine: None,
            pid: 4242,
            tcp: None,
            rdma: None,
            links: Vec::new(),
            named: Vec::new(),
            cpus: None,
            qps: None,
        };
        assert_eq!(Card::decode(&c.encode()).unwrap(), c);
        let c = Card {
            host: "n2".into(),
            machine: Some("5f0e1a3c1b2d4c3e9f000123456789ab".into()),
            pid: 1,
            tcp: Some("10.0.0.2:5000".parse().unwrap()),
            rdma: Some("soft".into()),
            links: vec![("10.9.1.1".parse().unwrap(), 30), ("10.9.2.5".parse().unwrap(), 30)],
            named: vec![("mac2".into(), vec![0, 1]), ("10.0.0.3".into(), vec![2])],
            cpus: Some(vec![0, 1, 2, 6]),
            qps: Some(10),
        };
        assert_eq!(Card::decode(&c.encode()).unwrap(), c);
        assert!(c.encode().contains(";r=10.9.1.1/30,10.9.2.5/30"), "{}", c.encode());
        assert!(c.encode().contains(";x=mac2:0+1,10.0.0.3:2"), "{}", c.encode());
        assert!(Card::decode("h=x;p=1;x=mac2:a").is_err());
        assert!(Card::decode("h=x;p=1;x=mac2").is_err());
        assert!(Card::decode("h=x;p=1;r=10.9.1.1/33").is_err());
        assert!(Card::decode("h=x;p=1;r=10.9.1.1").is_err());
        assert!(Card::decode("h=x;p=1;t=nonsense").is_err());
        assert!(Card::decode("h=x;p=1;q=ten").is_err());
        assert!(Card::decode("h=x").is_err());
        assert!(Card::decode("garbage").is_err());
    }
}
