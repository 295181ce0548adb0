//! The provider over a real verbs library: rdma-core's `libibverbs` on Linux (InfiniBand,
//! RoCE) and Apple's `librdma` on macOS (RDMA over Thunderbolt), both through [`super::ffi`].
//!
//! One code path serves both; what differs is data in [`Flavor`] (which library, which GID,
//! which limits), and only the choice of the host's flavor is behind `cfg`. What the
//! Thunderbolt flavor does follows Apple's TN3205 and MLX's JACCL backend
//! (`mlx/distributed/jaccl`), which is the reference user of `librdma`:
//! - devices `rdma_enN`, one port (1); the GID is the paired interface's IPv4 address mapped
//!   into IPv6 (`::ffff:a.b.c.d`), at index 1 (JACCL's `sgid_index = 1`; its later versions
//!   scan the table for the IPv4-mapped entry because some Thunderbolt 5 setups put it at
//!   index 2, and MLX PR 3468 falls back to index 1 where only link-local GIDs exist);
//! - UC queue pairs only (RC is refused), SEND/RECV only, hop limit 1, at most 32 work
//!   requests in flight (JACCL's `MAX_SEND_WR`/`MAX_RECV_WR`; past that Apple's provider fails
//!   posts), 4096-byte frames (JACCL's `FRAME_SIZE`), memory registered for local write only
//!   and page-aligned (DESIGN.md, "RDMA over Thunderbolt").
//!
//! The provider owns one device context, one protection domain, one completion queue shared
//! by every queue pair, the queue pairs and the memory regions. Each is held by a guard
//! (`device::Owned`), so a setup that fails halfway releases what it made, and [`Ibv`]'s
//! fields are declared in release order (queue pairs, regions, CQ, PD, context).
//!
//! Work requests are posted with provider-chosen ids: the completion of an id says which
//! queue pair, operation and caller's id it was for, also for completions in error, whose
//! opcode verbs leaves undefined, and completions of destroyed queue pairs are dropped.
//!
//! - `flavor`: what differs between the libraries, and reading verbs values (pure).
//! - `device`: the guards that own verbs objects, the device list, device queries.
//! - `probe`: every device and port, for `mpr-info`.

mod device;
pub(crate) mod flavor;
mod probe;

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::fmt;
use std::ptr;

use bytemuck::Zeroable;

use self::device::{api, device_error, rc_error, Device, DeviceList, Owned};
use self::flavor::{choose_gid, min_known, roce_v2, wc_status, DevLimits, GidEntry, PortInfo};
pub(crate) use self::flavor::{link_layer_name, mtu_bytes, port_state_name, Flavor};
pub(crate) use self::probe::probe;
use super::ffi;
use super::provider::{
    Completion, DeviceCaps, Mr, Opcode, Provider, QpAddr, QpId, QpType, Remote, Sge, VerbsError, WcStatus,
};

/// The port mpr uses: the only one of a Thunderbolt device (TN3205), the first of a NIC.
const PORT: u8 = 1;
/// GID table entries looked at when scanning (mlx5 devices list 256, the useful ones first).
const GID_SCAN: usize = 128;
/// Completions taken from the CQ per `ibv_poll_cq` call.
const POLL_BATCH: usize = 16;

// RC retry policy (as ibv_rc_pingpong): ack timeout 4.096 us * 2^14 = 67 ms, 7 retries
// before `IBV_WC_RETRY_EXC_ERR`; receiver-not-ready NAKs retried without end (7), 0.64 ms
// apart (12), since mpr's credits keep receives posted.
const RC_TIMEOUT: u8 = 14;
const RC_RETRY_CNT: u8 = 7;
const RC_RNR_RETRY: u8 = 7;
const RC_MIN_RNR_TIMER: u8 = 12;

/// Which device and GID to use; unset fields are chosen as the module notes say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IbvConfig {
    /// Device name (`mlx5_0`, `rdma_en2`); `None`: the first with an active port.
    pub(crate) device: Option<String>,
    /// GID table index; `None`: chosen by [`choose_gid`].
    pub(crate) gid_index: Option<u8>,
    /// Path MTU in bytes; `None`: the flavor's ([`Flavor::path_mtu`]).
    pub(crate) mtu: Option<usize>,
    /// `local` or `remote` access to registered memory; `None`: the flavor's.
    pub(crate) mr_access: Option<String>,
}

impl IbvConfig {
    /// From `MPR_RDMA_DEVICE`, `MPR_RDMA_GID_INDEX`, `MPR_RDMA_MTU` and `MPR_RDMA_MR_ACCESS`
    /// (the last two validated at start-up, `env::check`).
    pub(crate) fn from_env() -> IbvConfig {
        IbvConfig {
            device: crate::env::parsed::<String>("MPR_RDMA_DEVICE").filter(|s| !s.is_empty()),
            gid_index: crate::env::parsed("MPR_RDMA_GID_INDEX"),
            mtu: crate::env::parsed("MPR_RDMA_MTU"),
            mr_access: crate::env::parsed::<String>("MPR_RDMA_MR_ACCESS").filter(|s| !s.is_empty()),
        }
    }
}

/// A queue pair and its bookkeeping.
struct Qp {
    qp: Owned<ffi::ibv_qp>,
    ty: QpType,
    psn: u32,
    connected: bool,
    /// Posted sends/reads/writes and receives not yet completed.
    sends: usize,
    recvs: usize,
}

/// A registered region.
struct Region {
    mr: Owned<ffi::ibv_mr>,
    info: Mr,
}

/// A posted work request, by the id the device was given.
#[derive(Clone, Copy, Debug)]
struct Pending {
    wr_id: u64,
    qp: QpId,
    op: Opcode,
}

/// An open verbs device: context, protection domain, shared completion queue, and the queue
/// pairs and regions made on it.
pub(crate) struct Ibv {
    // Release order is declaration order: queue pairs, regions, CQ, PD, context.
    qps: BTreeMap<QpId, Qp>,
    mrs: HashMap<u32, Region>,
    cq: Owned<ffi::ibv_cq>,
    pd: Owned<ffi::ibv_pd>,
    ctx: Owned<ffi::ibv_context>,
    flavor: Flavor,
    device: String,
    port: PortInfo,
    gid_index: u8,
    gid: [u8; 16],
    caps: DeviceCaps,
    /// Path MTU of every connection (`IBV_MTU_*`) and access flags of every region.
    path_mtu: u32,
    mr_access: c_int,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    pending: HashMap<u64, Pending>,
    next_wr: u64,
    next_mr: u32,
}

// SAFETY: the verbs objects behind the raw pointers are not tied to the thread that made
// them (libibverbs is thread-safe, and a context may be used from any thread); `Ibv` is
// moved between threads, never shared (every operation takes `&mut self`).
unsafe impl Send for Ibv {}

impl fmt::Debug for Ibv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ibv")
            .field("provider", &self.flavor.name())
            .field("device", &self.device)
            .field("gid_index", &self.gid_index)
            .field("caps", &self.caps)
            .field("qps", &self.qps.len())
            .field("mrs", &self.mrs.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

/// Why a Thunderbolt device cannot be used: its interface has no routable IPv4 address, and
/// the command that gives it one.
fn no_ipv4(device: &str, table: &[GidEntry]) -> String {
    let iface = device.strip_prefix("rdma_").unwrap_or(device);
    let have: Vec<String> = table.iter().map(|e| super::fabric::gid_text(&e.gid)).collect();
    super::fabric::no_address(iface, device, &have)
}

/// What [`Ibv::open_active`] found: each active device opened (or why it could not be, with
/// its name), and the devices left out, with why.
pub(crate) type OpenedActive = (Vec<Result<Ibv, (String, VerbsError)>>, Vec<String>);

impl Ibv {
    /// Opens `config.device` (or the first device whose port 1 is active), with its protection
    /// domain and completion queue. `Unavailable` when there is no library, no kernel support,
    /// or no such device; `Device` when a call on the device fails.
    pub(crate) fn open(config: &IbvConfig) -> Result<Ibv, VerbsError> {
        let flavor = Flavor::HOST;
        let api = api(flavor)?;
        let list = DeviceList::get(api)?;
        let (device, ctx) = Self::pick(&list, config)?;
        drop(list);
        Self::on_context(api, device, ctx, config)
    }

    /// Every device whose port is active, each opened once (its context serves both the port
    /// query and the device): the devices, or why one could not be set up, by name; apart,
    /// the devices whose port is not active, with its state.
    pub(crate) fn open_active(config: &IbvConfig) -> Result<OpenedActive, VerbsError> {
        let api = api(Flavor::HOST)?;
        let list = DeviceList::get(api)?;
        let (mut opened, mut not) = (Vec::new(), Vec::new());
        for &dev in list.devices() {
            let name = list.name(dev);
            let ctx = match list.open(dev) {
                Ok(ctx) => ctx,
                Err(e) => {
                    not.push(format!("{name}: {e}"));
                    continue;
                }
            };
            match (Device { api, ctx: &ctx }).port(PORT) {
                Ok(p) if p.state == ffi::IBV_PORT_ACTIVE => {
                    let config = IbvConfig { device: Some(name.clone()), ..config.clone() };
                    opened.push(Self::on_context(api, name.clone(), ctx, &config).map_err(|e| (name, e)));
                }
                Ok(p) => not.push(format!("{name}: port {PORT} {}", port_state_name(p.state))),
                Err(e) => not.push(format!("{name}: {e}")),
            }
        }
        Ok((opened, not))
    }

    /// The device `device`, whose context `ctx` is open: its port, GID, limits, protection
    /// domain and completion queue.
    fn on_context(
        api: &'static ffi::Api,
        device: String,
        ctx: Owned<ffi::ibv_context>,
        config: &IbvConfig,
    ) -> Result<Ibv, VerbsError> {
        let flavor = Flavor::HOST;
        let dev = Device { api, ctx: &ctx };

        let limits = match dev.attr() {
            Ok(attr) => DevLimits::from_attr(&attr),
            // librdma may not export it (see `ffi`); the flavor's limits then stand alone.
            Err(_) if flavor == Flavor::AppleRdma => DevLimits::default(),
            Err(e) => return Err(e),
        };
        let port = PortInfo::from_attr(&dev.port(PORT)?);
        let gid_index = match config.gid_index {
            Some(i) => i,
            None => {
                let table: Vec<GidEntry> =
                    if flavor == Flavor::RdmaCore && port.link_layer == ffi::IBV_LINK_LAYER_INFINIBAND {
                        Vec::new()
                    } else {
                        let v2 = |i| if flavor == Flavor::RdmaCore { roce_v2(&device, i) } else { None };
                        dev.gids(PORT, port.gid_tbl_len)
                            .into_iter()
                            .map(|(index, gid)| GidEntry { index, gid, roce_v2: v2(index) })
                            .collect()
                    };
                choose_gid(flavor, port.link_layer, &table)
                    .ok_or_else(|| VerbsError::Unavailable(no_ipv4(&device, &table)))?
            }
        };
        let gid = dev.gid(PORT, gid_index).map_err(|e| VerbsError::Invalid(format!("GID index {gid_index}: {e}")))?;
        // SAFETY: `sysconf` reads a constant of the system; it takes no pointers.
        let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let (caps, cq_entries) = flavor.caps(&limits, &port, page_size, flavor::macos_version());

        // SAFETY: the context is live; the PD is owned by the guard.
        let pd = unsafe { Owned::new(api, (api.alloc_pd)(ctx.as_ptr()), "ibv_alloc_pd")? };
        let cqe = c_int::try_from(cq_entries).unwrap_or(c_int::MAX);
        // SAFETY: the context is live; no completion channel or context pointer is passed;
        // the CQ is owned by the guard.
        let cq = unsafe {
            Owned::new(api, (api.create_cq)(ctx.as_ptr(), cqe, ptr::null_mut(), ptr::null_mut(), 0), "ibv_create_cq")?
        };
        let rd = |n: usize| u8::try_from(min_known(n, 16)).unwrap_or(16).max(1);
        Ok(Ibv {
            qps: BTreeMap::new(),
            mrs: HashMap::new(),
            cq,
            pd,
            ctx,
            flavor,
            device,
            port,
            gid_index,
            gid,
            caps,
            path_mtu: flavor.path_mtu(port.active_mtu, config.mtu),
            mr_access: flavor.mr_access(config.mr_access.as_deref()),
            max_rd_atomic: rd(limits.max_qp_init_rd_atom),
            max_dest_rd_atomic: rd(limits.max_qp_rd_atom),
            pending: HashMap::new(),
            next_wr: 0,
            next_mr: 0,
        })
    }

    /// The device's name (`rdma_en3`, `mlx5_0`).
    pub(crate) fn device(&self) -> &str {
        &self.device
    }

    /// The IPv4 address in this device's GID, if it holds one (Thunderbolt: its paired
    /// interface's address; RoCE v2 over IPv4).
    pub(crate) fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        super::fabric::gid_ipv4(&self.gid)
    }

    /// The configured device, or the first with an active port.
    fn pick(list: &DeviceList, config: &IbvConfig) -> Result<(String, Owned<ffi::ibv_context>), VerbsError> {
        let names: Vec<(String, *mut ffi::ibv_device)> = list.devices().iter().map(|&d| (list.name(d), d)).collect();
        if let Some(want) = &config.device {
            let Some(&(_, dev)) = names.iter().find(|(n, _)| n == want) else {
                let have: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
                return Err(VerbsError::Unavailable(format!(
                    "no RDMA device '{want}' (devices: {})",
                    list_or_none(&have)
                )));
            };
            return Ok((want.clone(), list.open(dev)?));
        }
        let mut seen = Vec::new();
        for (name, dev) in names {
            let state = list.open(dev).and_then(|ctx| {
                let state = Device { api: list.api, ctx: &ctx }.port(PORT)?.state;
                Ok((ctx, state))
            });
            match state {
                Ok((ctx, ffi::IBV_PORT_ACTIVE)) => return Ok((name, ctx)),
                Ok((_, s)) => seen.push(format!("{name}: port {PORT} {}", port_state_name(s))),
                Err(e) => seen.push(format!("{name}: {e}")),
            }
        }
        Err(VerbsError::Unavailable(format!("no RDMA device with an active port ({})", list_or_none(&seen))))
    }

    fn qp(&mut self, id: QpId) -> Result<&mut Qp, VerbsError> {
        self.qps.get_mut(&id).ok_or_else(|| VerbsError::Invalid(format!("no queue pair {}", id.0)))
    }

    fn modify(
        &self,
        qp: &Owned<ffi::ibv_qp>,
        attr: &mut ffi::ibv_qp_attr,
        mask: c_int,
        to: &str,
    ) -> Result<(), VerbsError> {
        // SAFETY: the queue pair is live and `attr` is a valid `ibv_qp_attr` for the mask.
        let rc = unsafe { (self.ctx.api.modify_qp)(qp.as_ptr(), attr, mask) };
        if rc == 0 {
            Ok(())
        } else {
            Err(device_error(&format!("ibv_modify_qp to {to}"), rc_error(rc)))
        }
    }

    /// Records a work request about to be posted; returns the id the device gets.
    fn track(&mut self, qp: QpId, wr_id: u64, op: Opcode) -> Result<u64, VerbsError> {
        let max_wr = self.caps.max_wr;
        let q = self.qp(qp)?;
        let inflight = if op == Opcode::Recv { &mut q.recvs } else { &mut q.sends };
        if *inflight >= max_wr {
            return Err(VerbsError::Limit("work requests in flight"));
        }
        *inflight += 1;
        let id = self.next_wr;
        self.next_wr = self.next_wr.wrapping_add(1);
        self.pending.insert(id, Pending { wr_id, qp, op });
        Ok(id)
    }

    /// Undoes [`Ibv::track`] after a failed post, and names the failure.
    fn untrack(&mut self, id: u64, rc: c_int, call: &str) -> VerbsError {
        if let Some(p) = self.pending.remove(&id) {
            if let Some(q) = self.qps.get_mut(&p.qp) {
                let inflight = if p.op == Opcode::Recv { &mut q.recvs } else { &mut q.sends };
                *inflight = inflight.saturating_sub(1);
            }
        }
        let e = rc_error(rc);
        if e.raw_os_error() == Some(libc::ENOMEM) {
            VerbsError::Limit("work requests in flight (the device queue is full)")
        } else {
            device_error(call, e)
        }
    }

    /// Posts a SEND, RDMA READ or RDMA WRITE.
    fn post_sq(
        &mut self,
        qp: QpId,
        wr_id: u64,
        op: Opcode,
        sge: Sge,
        remote: Option<Remote>,
    ) -> Result<(), VerbsError> {
        let (rc_only, opcode) = match op {
            Opcode::Send => (false, ffi::IBV_WR_SEND),
            Opcode::Read => (true, ffi::IBV_WR_RDMA_READ),
            Opcode::Write => (true, ffi::IBV_WR_RDMA_WRITE),
            Opcode::Recv => unreachable!("receives go to post_recv"),
        };
        if (op == Opcode::Read && !self.caps.rdma_read) || (op == Opcode::Write && !self.caps.rdma_write) {
            return Err(VerbsError::Invalid(format!("{op:?} is not supported by {}", self.name())));
        }
        if sge.len as usize > self.caps.max_msg {
            return Err(VerbsError::Invalid(format!("{} bytes exceed the device's largest message", sge.len)));
        }
        let q = self.qp(qp)?;
        if !q.connected {
            return Err(VerbsError::Invalid(format!("queue pair {} is not connected", qp.0)));
        }
        if rc_only && q.ty != QpType::Rc {
            return Err(VerbsError::Invalid(format!("{op:?} needs an RC queue pair")));
        }
        let qp_ptr = q.qp.as_ptr();
        let id = self.track(qp, wr_id, op)?;
        let mut list = ffi::ibv_sge { addr: sge.addr, length: sge.len, lkey: sge.lkey };
        let mut wr = ffi::ibv_send_wr::zeroed();
        wr.wr_id = id;
        wr.sg_list = &mut list;
        wr.num_sge = 1;
        wr.opcode = opcode;
        wr.send_flags = ffi::IBV_SEND_SIGNALED;
        if let Some(r) = remote {
            wr.wr = ffi::ibv_send_wr_wr { rdma: ffi::ibv_rdma_wr { remote_addr: r.addr, rkey: r.rkey } };
        }
        let mut bad = ptr::null_mut();
        // SAFETY: the queue pair is live; `wr` and its one-entry list live across the call and
        // the device copies them before returning (verbs' contract for posted requests).
        let rc = unsafe { ffi::post_send(qp_ptr, &mut wr, &mut bad) };
        if rc == 0 {
            Ok(())
        } else {
            Err(self.untrack(id, rc, "ibv_post_send"))
        }
    }

    /// Turns a device completion into the seam's, if it is for a live request.
    fn complete(&mut self, wc: &ffi::ibv_wc) -> Option<Completion> {
        let p = self.pending.remove(&wc.wr_id)?;
        if let Some(q) = self.qps.get_mut(&p.qp) {
            let inflight = if p.op == Opcode::Recv { &mut q.recvs } else { &mut q.sends };
            *inflight = inflight.saturating_sub(1);
        }
        let status = wc_status(wc.status);
        let byte_len = if p.op == Opcode::Recv && status == WcStatus::Success { wc.byte_len } else { 0 };
        Some(Completion { wr_id: p.wr_id, qp: p.qp, op: p.op, status, byte_len })
    }
}

fn list_or_none(items: &[impl AsRef<str>]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(", ")
    }
}

/// A random 24-bit packet sequence number (a fixed one if the OS has no randomness).
fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    match getrandom::getrandom(&mut b) {
        Ok(()) => u32::from_le_bytes(b) & 0x00ff_ffff,
        Err(_) => 0x00c0_ffee,
    }
}

impl Provider for Ibv {
    fn name(&self) -> String {
        format!("{} {} port {PORT} gid {}", self.flavor.name(), self.device, self.gid_index)
    }

    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    unsafe fn register(&mut self, addr: *mut u8, len: usize) -> Result<Mr, VerbsError> {
        let align = self.caps.align;
        if len == 0 || addr.is_null() {
            return Err(VerbsError::Invalid("an empty memory region".into()));
        }
        if !(addr as usize).is_multiple_of(align) || !len.is_multiple_of(align) {
            return Err(VerbsError::Invalid(format!("memory regions must start and end on {align}-byte boundaries")));
        }
        if self.mrs.len() >= self.caps.max_mr {
            return Err(VerbsError::Limit("memory regions"));
        }
        let api = self.ctx.api;
        // SAFETY: the PD is live; the caller guarantees `len` bytes at `addr` stay valid until
        // the region is deregistered or the provider dropped (which deregisters it first).
        let p = unsafe { (api.reg_mr)(self.pd.as_ptr(), addr.cast(), len, self.mr_access) };
        // SAFETY: `p` was just returned by `ibv_reg_mr` through `api`.
        let mr = unsafe { Owned::new(api, p, "ibv_reg_mr")? };
        // SAFETY: the region is live; its keys are plain fields written by the library.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        while self.mrs.contains_key(&self.next_mr) {
            self.next_mr = self.next_mr.wrapping_add(1);
        }
        let info = Mr { id: self.next_mr, lkey, rkey, addr: addr as u64, len };
        self.next_mr = self.next_mr.wrapping_add(1);
        self.mrs.insert(info.id, Region { mr, info });
        Ok(info)
    }

    fn deregister(&mut self, mr: Mr) -> Result<(), VerbsError> {
        match self.mrs.remove(&mr.id) {
            Some(r) if r.info == mr => r.mr.close(),
            Some(r) => {
                self.mrs.insert(mr.id, r);
                Err(VerbsError::Invalid(format!("memory region {} does not match", mr.id)))
            }
            None => Err(VerbsError::Invalid(format!("no memory region {}", mr.id))),
        }
    }

    fn create_qp(&mut self, ty: QpType) -> Result<(QpId, QpAddr), VerbsError> {
        if ty == QpType::Rc && !self.caps.rc {
            return Err(VerbsError::Invalid(format!("{} has UC queue pairs only", self.name())));
        }
        if self.qps.len() >= self.caps.max_qp {
            return Err(VerbsError::Limit("queue pairs"));
        }
        let max_wr = u32::try_from(self.caps.max_wr).unwrap_or(u32::MAX);
        let mut init = ffi::ibv_qp_init_attr::zeroed();
        init.send_cq = self.cq.as_ptr();
        init.recv_cq = self.cq.as_ptr();
        init.cap = ffi::ibv_qp_cap {
            max_send_wr: max_wr,
            max_recv_wr: max_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        init.qp_type = match ty {
            QpType::Uc => ffi::IBV_QPT_UC,
            QpType::Rc => ffi::IBV_QPT_RC,
        };
        let api = self.ctx.api;
        // SAFETY: PD and CQ are live and `init` is a valid `ibv_qp_init_attr`; the queue pair
        // is owned by the guard (destroyed if a later step fails).
        let qp = unsafe { Owned::new(api, (api.create_qp)(self.pd.as_ptr(), &mut init), "ibv_create_qp")? };

        let mut attr = ffi::ibv_qp_attr::zeroed();
        attr.qp_state = ffi::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = PORT;
        attr.qp_access_flags = self.flavor.qp_access(ty);
        let mask = ffi::IBV_QP_STATE | ffi::IBV_QP_PKEY_INDEX | ffi::IBV_QP_PORT | ffi::IBV_QP_ACCESS_FLAGS;
        self.modify(&qp, &mut attr, mask, "INIT")?;

        // SAFETY: the queue pair is live; `qp_num` is a plain field set at creation.
        let qpn = unsafe { (*qp.as_ptr()).qp_num };
        let psn = random_psn();
        let id = QpId(qpn);
        self.qps.insert(id, Qp { qp, ty, psn, connected: false, sends: 0, recvs: 0 });
        Ok((id, QpAddr { lid: self.port.lid, qpn, psn, gid: self.gid }))
    }

    fn connect(&mut self, qp: QpId, peer: &QpAddr) -> Result<(), VerbsError> {
        if peer.qpn > 0x00ff_ffff || peer.psn > 0x00ff_ffff {
            return Err(VerbsError::Invalid(format!("bad peer queue pair address {}", peer.encode())));
        }
        let (flavor, gid_index, rd, dest_rd) =
            (self.flavor, self.gid_index, self.max_rd_atomic, self.max_dest_rd_atomic);
        let path_mtu = self.path_mtu;
        let q = self.qps.get(&qp).ok_or_else(|| VerbsError::Invalid(format!("no queue pair {}", qp.0)))?;
        if q.connected {
            return Err(VerbsError::Invalid(format!("queue pair {} is already connected", qp.0)));
        }
        let rc = q.ty == QpType::Rc;

        let mut attr = ffi::ibv_qp_attr::zeroed();
        attr.qp_state = ffi::IBV_QPS_RTR;
        attr.path_mtu = path_mtu;
        attr.dest_qp_num = peer.qpn;
        attr.rq_psn = peer.psn;
        attr.ah_attr.dlid = peer.lid;
        attr.ah_attr.port_num = PORT;
        if peer.gid != [0; 16] {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = ffi::ibv_gid { raw: peer.gid };
            attr.ah_attr.grh.sgid_index = gid_index;
            attr.ah_attr.grh.hop_limit = flavor.hop_limit();
        }
        let mut mask =
            ffi::IBV_QP_STATE | ffi::IBV_QP_AV | ffi::IBV_QP_PATH_MTU | ffi::IBV_QP_DEST_QPN | ffi::IBV_QP_RQ_PSN;
        if rc {
            attr.max_dest_rd_atomic = dest_rd;
            attr.min_rnr_timer = RC_MIN_RNR_TIMER;
            mask |= ffi::IBV_QP_MAX_DEST_RD_ATOMIC | ffi::IBV_QP_MIN_RNR_TIMER;
        }
        self.modify(&q.qp, &mut attr, mask, "RTR")?;

        let mut attr = ffi::ibv_qp_attr::zeroed();
        attr.qp_state = ffi::IBV_QPS_RTS;
        attr.sq_psn = q.psn;
        let mut mask = ffi::IBV_QP_STATE | ffi::IBV_QP_SQ_PSN;
        if rc {
            attr.timeout = RC_TIMEOUT;
            attr.retry_cnt = RC_RETRY_CNT;
            attr.rnr_retry = RC_RNR_RETRY;
            attr.max_rd_atomic = rd;
            mask |= ffi::IBV_QP_TIMEOUT | ffi::IBV_QP_RETRY_CNT | ffi::IBV_QP_RNR_RETRY | ffi::IBV_QP_MAX_QP_RD_ATOMIC;
        }
        self.modify(&q.qp, &mut attr, mask, "RTS")?;
        self.qp(qp)?.connected = true;
        Ok(())
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<(), VerbsError> {
        let q = self.qps.remove(&qp).ok_or_else(|| VerbsError::Invalid(format!("no queue pair {}", qp.0)))?;
        self.pending.retain(|_, p| p.qp != qp);
        q.qp.close()
    }

    fn post_recv(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<(), VerbsError> {
        let qp_ptr = self.qp(qp)?.qp.as_ptr();
        let id = self.track(qp, wr_id, Opcode::Recv)?;
        let mut list = ffi::ibv_sge { addr: sge.addr, length: sge.len, lkey: sge.lkey };
        let mut wr = ffi::ibv_recv_wr::zeroed();
        wr.wr_id = id;
        wr.sg_list = &mut list;
        wr.num_sge = 1;
        let mut bad = ptr::null_mut();
        // SAFETY: the queue pair is live; `wr` and its list live across the call, which copies
        // them.
        let rc = unsafe { ffi::post_recv(qp_ptr, &mut wr, &mut bad) };
        if rc == 0 {
            Ok(())
        } else {
            Err(self.untrack(id, rc, "ibv_post_recv"))
        }
    }

    fn post_send(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<(), VerbsError> {
        self.post_sq(qp, wr_id, Opcode::Send, sge, None)
    }

    fn post_read(&mut self, qp: QpId, wr_id: u64, local: Sge, remote: Remote) -> Result<(), VerbsError> {
        self.post_sq(qp, wr_id, Opcode::Read, local, Some(remote))
    }

    fn post_write(&mut self, qp: QpId, wr_id: u64, local: Sge, remote: Remote) -> Result<(), VerbsError> {
        self.post_sq(qp, wr_id, Opcode::Write, local, Some(remote))
    }

    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> Result<usize, VerbsError> {
        let mut wcs = [ffi::ibv_wc::zeroed(); POLL_BATCH];
        let mut got = 0;
        while got < max {
            let want = (max - got).min(POLL_BATCH);
            // SAFETY: the CQ is live and `wcs` has room for `want` <= POLL_BATCH entries.
            let n = unsafe { ffi::poll_cq(self.cq.as_ptr(), want as c_int, wcs.as_mut_ptr()) };
            let Ok(n) = usize::try_from(n) else {
                return Err(device_error("ibv_poll_cq", rc_error(n)));
            };
            for wc in &wcs[..n.min(want)] {
                if let Some(c) = self.complete(wc) {
                    out.push(c);
                    got += 1;
                }
            }
            if n < want {
                break;
            }
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psns_are_24_bits() {
        assert!((0..100).map(|_| random_psn()).all(|p| p <= 0x00ff_ffff));
    }
}
