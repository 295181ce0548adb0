//! The subset of the verbs ABI (rdma-core's `infiniband/verbs.h`) that mpr uses, and the
//! function table loaded from the verbs library at run time.
//!
//! Nothing here links against libibverbs: [`Api::load`] opens the library with `dlopen`
//! (`libloading`) so that a build runs, and falls back to other transports, on hosts without
//! RDMA. On Linux the library is rdma-core's `libibverbs.so.1`; on macOS 26.2+ it is Apple's
//! `librdma.dylib` (TN3205, "Low-latency communication with RDMA over Thunderbolt"), which
//! MLX's JACCL backend loads the same way (`mlx/distributed/jaccl/.../rdma.cpp`:
//! `dlopen("librdma.dylib", RTLD_NOW | RTLD_GLOBAL)` and `dlsym` of each `ibv_*` function).
//!
//! Real exports versus header inlines (checked against rdma-core 44's header and
//! `nm -D libibverbs.so.1`):
//! - Exported, and loaded here: `ibv_get_device_list`, `ibv_free_device_list`,
//!   `ibv_get_device_name`, `ibv_open_device`, `ibv_close_device`, `ibv_query_device`,
//!   `ibv_query_gid`, `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_dereg_mr`, `ibv_create_cq`,
//!   `ibv_destroy_cq`, `ibv_create_qp`, `ibv_modify_qp`, `ibv_destroy_qp`. `dlsym` returns the
//!   default symbol version (`@@IBVERBS_1.1`), the one a program compiled today links.
//! - `ibv_query_port` and `ibv_reg_mr` are macros in the header (`___ibv_query_port` tries the
//!   extended `verbs_context` first; `__ibv_reg_mr` routes `IBV_ACCESS_OPTIONAL_RANGE` flags to
//!   `ibv_reg_mr_iova2`). Both macros fall back to the exported compat functions of the same
//!   name, which are what JACCL `dlsym`s and what is loaded here: `ibv_query_port` with a
//!   zeroed, full-size [`ibv_port_attr`] (the inline does the same), `ibv_reg_mr` with plain
//!   access flags (no optional-range bits).
//! - `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are `static inline` functions that call
//!   through `context->ops`; there is no symbol to load (JACCL notes the same for librdma), so
//!   [`post_send`], [`post_recv`] and [`poll_cq`] read the same table.
//!
//! Apple's library, as far as public material shows (nobody here can build for macOS):
//! - Same API and, for the fields mpr reads, the same layout: JACCL compiles against Apple's
//!   `infiniband/verbs.h` and reads `qp->qp_num` and `mr->lkey` and uses the inline
//!   `ibv_post_send`/`ibv_post_recv`/`ibv_poll_cq`. The pthread fields inside `ibv_context`,
//!   `ibv_cq` and `ibv_qp` are larger on Darwin (`pthread_mutex_t` is 64 bytes there, 40 on
//!   Linux x86-64), which is why they are declared with `libc`'s types; mpr reads no field
//!   after them.
//! - `ibv_query_device` is not among the symbols JACCL loads (it never needs it), but
//!   `ibv_devinfo` works on macOS (TN3205 shows its output), so it is loaded as optional.
//! - Devices are `rdma_enN` with transport "Thunderbolt (100)" and one port (TN3205).
//! - Posting may report failure as a negative errno (`ibv_post_recv ... ret=-12` past 32
//!   posted receives, hellas-ai/thunderbolt-ibverbs PR 35), where rdma-core returns a
//!   positive one; callers take the absolute value.
//! - Registration is reported to accept `mmap`-backed memory and to refuse some heap
//!   allocations (a third-party report on macOS 26.4; unconfirmed here): mpr registers page-
//!   aligned mappings on that provider anyway, as its caps ask for page alignment.

#![allow(non_camel_case_types)] // The C names, so the layout test can name both sides alike.

use std::ffi::{c_char, c_int, c_void};

use libloading::Library;

// ---------------------------------------------------------------------------------------------
// Constants (enum values of verbs.h).

pub(crate) const IBV_QPT_RC: u32 = 2;
pub(crate) const IBV_QPT_UC: u32 = 3;

pub(crate) const IBV_QPS_RESET: u32 = 0;
pub(crate) const IBV_QPS_INIT: u32 = 1;
pub(crate) const IBV_QPS_RTR: u32 = 2;
pub(crate) const IBV_QPS_RTS: u32 = 3;
pub(crate) const IBV_QPS_ERR: u32 = 6;

pub(crate) const IBV_QP_STATE: c_int = 1 << 0;
pub(crate) const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub(crate) const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub(crate) const IBV_QP_PORT: c_int = 1 << 5;
pub(crate) const IBV_QP_AV: c_int = 1 << 7;
pub(crate) const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub(crate) const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub(crate) const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub(crate) const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub(crate) const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub(crate) const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub(crate) const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub(crate) const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub(crate) const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub(crate) const IBV_QP_DEST_QPN: c_int = 1 << 20;

pub(crate) const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub(crate) const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
pub(crate) const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;

pub(crate) const IBV_WR_RDMA_WRITE: u32 = 0;
pub(crate) const IBV_WR_SEND: u32 = 2;
pub(crate) const IBV_WR_RDMA_READ: u32 = 4;

pub(crate) const IBV_SEND_SIGNALED: u32 = 1 << 1;

pub(crate) const IBV_WC_SEND: u32 = 0;
pub(crate) const IBV_WC_RDMA_WRITE: u32 = 1;
pub(crate) const IBV_WC_RDMA_READ: u32 = 2;
pub(crate) const IBV_WC_RECV: u32 = 1 << 7;

pub(crate) const IBV_WC_SUCCESS: u32 = 0;
pub(crate) const IBV_WC_LOC_LEN_ERR: u32 = 1;
pub(crate) const IBV_WC_WR_FLUSH_ERR: u32 = 5;
pub(crate) const IBV_WC_REM_ACCESS_ERR: u32 = 10;
pub(crate) const IBV_WC_RETRY_EXC_ERR: u32 = 12;
pub(crate) const IBV_WC_RNR_RETRY_EXC_ERR: u32 = 13;

pub(crate) const IBV_PORT_NOP: u32 = 0;
pub(crate) const IBV_PORT_DOWN: u32 = 1;
pub(crate) const IBV_PORT_INIT: u32 = 2;
pub(crate) const IBV_PORT_ARMED: u32 = 3;
pub(crate) const IBV_PORT_ACTIVE: u32 = 4;
pub(crate) const IBV_PORT_ACTIVE_DEFER: u32 = 5;

pub(crate) const IBV_MTU_256: u32 = 1;
pub(crate) const IBV_MTU_1024: u32 = 3;
pub(crate) const IBV_MTU_4096: u32 = 5;

pub(crate) const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub(crate) const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub(crate) const IBV_LINK_LAYER_ETHERNET: u8 = 2;

pub(crate) const IBV_SYSFS_NAME_MAX: usize = 64;
pub(crate) const IBV_SYSFS_PATH_MAX: usize = 256;

// ---------------------------------------------------------------------------------------------
// Structures. Field names are the C ones; anonymous C unions are named by their first member.

/// `struct ibv_device`: only its name is read, through `ibv_get_device_name`.
#[repr(C)]
pub(crate) struct ibv_device {
    /// `struct _ibv_device_ops`: two unused function pointers.
    pub(crate) _ops: [*mut c_void; 2],
    pub(crate) node_type: c_int,
    pub(crate) transport_type: c_int,
    pub(crate) name: [c_char; IBV_SYSFS_NAME_MAX],
    pub(crate) dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub(crate) dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub(crate) ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

pub(crate) type PollCqFn = unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int;
pub(crate) type PostSendFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int;
pub(crate) type PostRecvFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: the data-path entries (`poll_cq`, `post_send`, `post_recv`) that
/// the header's inline functions call; the rest are unused slots, kept for the layout.
#[repr(C)]
pub(crate) struct ibv_context_ops {
    pub(crate) _compat_query_device: *mut c_void,
    pub(crate) _compat_query_port: *mut c_void,
    pub(crate) _compat_alloc_pd: *mut c_void,
    pub(crate) _compat_dealloc_pd: *mut c_void,
    pub(crate) _compat_reg_mr: *mut c_void,
    pub(crate) _compat_rereg_mr: *mut c_void,
    pub(crate) _compat_dereg_mr: *mut c_void,
    pub(crate) alloc_mw: *mut c_void,
    pub(crate) bind_mw: *mut c_void,
    pub(crate) dealloc_mw: *mut c_void,
    pub(crate) _compat_create_cq: *mut c_void,
    pub(crate) poll_cq: Option<PollCqFn>,
    pub(crate) req_notify_cq: *mut c_void,
    pub(crate) _compat_cq_event: *mut c_void,
    pub(crate) _compat_resize_cq: *mut c_void,
    pub(crate) _compat_destroy_cq: *mut c_void,
    pub(crate) _compat_create_srq: *mut c_void,
    pub(crate) _compat_modify_srq: *mut c_void,
    pub(crate) _compat_query_srq: *mut c_void,
    pub(crate) _compat_destroy_srq: *mut c_void,
    pub(crate) post_srq_recv: *mut c_void,
    pub(crate) _compat_create_qp: *mut c_void,
    pub(crate) _compat_query_qp: *mut c_void,
    pub(crate) _compat_modify_qp: *mut c_void,
    pub(crate) _compat_destroy_qp: *mut c_void,
    pub(crate) post_send: Option<PostSendFn>,
    pub(crate) post_recv: Option<PostRecvFn>,
    pub(crate) _compat_create_ah: *mut c_void,
    pub(crate) _compat_destroy_ah: *mut c_void,
    pub(crate) _compat_attach_mcast: *mut c_void,
    pub(crate) _compat_detach_mcast: *mut c_void,
    pub(crate) _compat_async_event: *mut c_void,
}

/// `struct ibv_context`.
#[repr(C)]
pub(crate) struct ibv_context {
    pub(crate) device: *mut ibv_device,
    pub(crate) ops: ibv_context_ops,
    pub(crate) cmd_fd: c_int,
    pub(crate) async_fd: c_int,
    pub(crate) num_comp_vectors: c_int,
    pub(crate) mutex: libc::pthread_mutex_t,
    pub(crate) abi_compat: *mut c_void,
}

/// `struct ibv_device_attr` (what `ibv_query_device` fills).
#[repr(C)]
pub(crate) struct ibv_device_attr {
    pub(crate) fw_ver: [c_char; 64],
    /// Big-endian, as on the wire.
    pub(crate) node_guid: u64,
    pub(crate) sys_image_guid: u64,
    pub(crate) max_mr_size: u64,
    pub(crate) page_size_cap: u64,
    pub(crate) vendor_id: u32,
    pub(crate) vendor_part_id: u32,
    pub(crate) hw_ver: u32,
    pub(crate) max_qp: c_int,
    pub(crate) max_qp_wr: c_int,
    pub(crate) device_cap_flags: u32,
    pub(crate) max_sge: c_int,
    pub(crate) max_sge_rd: c_int,
    pub(crate) max_cq: c_int,
    pub(crate) max_cqe: c_int,
    pub(crate) max_mr: c_int,
    pub(crate) max_pd: c_int,
    pub(crate) max_qp_rd_atom: c_int,
    pub(crate) max_ee_rd_atom: c_int,
    pub(crate) max_res_rd_atom: c_int,
    pub(crate) max_qp_init_rd_atom: c_int,
    pub(crate) max_ee_init_rd_atom: c_int,
    pub(crate) atomic_cap: u32,
    pub(crate) max_ee: c_int,
    pub(crate) max_rdd: c_int,
    pub(crate) max_mw: c_int,
    pub(crate) max_raw_ipv6_qp: c_int,
    pub(crate) max_raw_ethy_qp: c_int,
    pub(crate) max_mcast_grp: c_int,
    pub(crate) max_mcast_qp_attach: c_int,
    pub(crate) max_total_mcast_qp_attach: c_int,
    pub(crate) max_ah: c_int,
    pub(crate) max_fmr: c_int,
    pub(crate) max_map_per_fmr: c_int,
    pub(crate) max_srq: c_int,
    pub(crate) max_srq_wr: c_int,
    pub(crate) max_srq_sge: c_int,
    pub(crate) max_pkeys: u16,
    pub(crate) local_ca_ack_delay: u8,
    pub(crate) phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (what `ibv_query_port` fills).
#[repr(C)]
pub(crate) struct ibv_port_attr {
    pub(crate) state: u32,
    pub(crate) max_mtu: u32,
    pub(crate) active_mtu: u32,
    pub(crate) gid_tbl_len: c_int,
    pub(crate) port_cap_flags: u32,
    pub(crate) max_msg_sz: u32,
    pub(crate) bad_pkey_cntr: u32,
    pub(crate) qkey_viol_cntr: u32,
    pub(crate) pkey_tbl_len: u16,
    pub(crate) lid: u16,
    pub(crate) sm_lid: u16,
    pub(crate) lmc: u8,
    pub(crate) max_vl_num: u8,
    pub(crate) sm_sl: u8,
    pub(crate) subnet_timeout: u8,
    pub(crate) init_type_reply: u8,
    pub(crate) active_width: u8,
    pub(crate) active_speed: u8,
    pub(crate) phys_state: u8,
    pub(crate) link_layer: u8,
    pub(crate) flags: u8,
    pub(crate) port_cap_flags2: u16,
}

/// `union ibv_gid`, as its `raw` bytes (the `global` view is two big-endian u64, hence the
/// alignment).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ibv_gid {
    pub(crate) raw: [u8; 16],
}

/// `struct ibv_pd`.
#[repr(C)]
pub(crate) struct ibv_pd {
    pub(crate) context: *mut ibv_context,
    pub(crate) handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub(crate) struct ibv_mr {
    pub(crate) context: *mut ibv_context,
    pub(crate) pd: *mut ibv_pd,
    pub(crate) addr: *mut c_void,
    pub(crate) length: usize,
    pub(crate) handle: u32,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

/// `struct ibv_cq`.
#[repr(C)]
pub(crate) struct ibv_cq {
    pub(crate) context: *mut ibv_context,
    /// `struct ibv_comp_channel *` (unused: mpr polls).
    pub(crate) channel: *mut c_void,
    pub(crate) cq_context: *mut c_void,
    pub(crate) handle: u32,
    pub(crate) cqe: c_int,
    pub(crate) mutex: libc::pthread_mutex_t,
    pub(crate) cond: libc::pthread_cond_t,
    pub(crate) comp_events_completed: u32,
    pub(crate) async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub(crate) struct ibv_qp {
    pub(crate) context: *mut ibv_context,
    pub(crate) qp_context: *mut c_void,
    pub(crate) pd: *mut ibv_pd,
    pub(crate) send_cq: *mut ibv_cq,
    pub(crate) recv_cq: *mut ibv_cq,
    /// `struct ibv_srq *` (unused).
    pub(crate) srq: *mut c_void,
    pub(crate) handle: u32,
    pub(crate) qp_num: u32,
    pub(crate) state: u32,
    pub(crate) qp_type: u32,
    pub(crate) mutex: libc::pthread_mutex_t,
    pub(crate) cond: libc::pthread_cond_t,
    pub(crate) events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_qp_cap {
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub(crate) struct ibv_qp_init_attr {
    pub(crate) qp_context: *mut c_void,
    pub(crate) send_cq: *mut ibv_cq,
    pub(crate) recv_cq: *mut ibv_cq,
    /// `struct ibv_srq *` (unused).
    pub(crate) srq: *mut c_void,
    pub(crate) cap: ibv_qp_cap,
    pub(crate) qp_type: u32,
    pub(crate) sq_sig_all: c_int,
}

/// `struct ibv_global_route`: the GRH of an address handle.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_global_route {
    pub(crate) dgid: ibv_gid,
    pub(crate) flow_label: u32,
    pub(crate) sgid_index: u8,
    pub(crate) hop_limit: u8,
    pub(crate) traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_ah_attr {
    pub(crate) grh: ibv_global_route,
    pub(crate) dlid: u16,
    pub(crate) sl: u8,
    pub(crate) src_path_bits: u8,
    pub(crate) static_rate: u8,
    pub(crate) is_global: u8,
    pub(crate) port_num: u8,
}

/// `struct ibv_qp_attr` (what `ibv_modify_qp` reads, per its attribute mask).
#[repr(C)]
pub(crate) struct ibv_qp_attr {
    pub(crate) qp_state: u32,
    pub(crate) cur_qp_state: u32,
    pub(crate) path_mtu: u32,
    pub(crate) path_mig_state: u32,
    pub(crate) qkey: u32,
    pub(crate) rq_psn: u32,
    pub(crate) sq_psn: u32,
    pub(crate) dest_qp_num: u32,
    pub(crate) qp_access_flags: u32,
    pub(crate) cap: ibv_qp_cap,
    pub(crate) ah_attr: ibv_ah_attr,
    pub(crate) alt_ah_attr: ibv_ah_attr,
    pub(crate) pkey_index: u16,
    pub(crate) alt_pkey_index: u16,
    pub(crate) en_sqd_async_notify: u8,
    pub(crate) sq_draining: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) port_num: u8,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) alt_port_num: u8,
    pub(crate) alt_timeout: u8,
    pub(crate) rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_sge {
    pub(crate) addr: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
}

/// The `rdma` member of `ibv_send_wr`'s `wr` union.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_rdma_wr {
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
}

/// `ibv_send_wr`'s `wr` union: `rdma` is the member mpr uses; `atomic` (the largest, four
/// 8-byte words) sets the size.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_send_wr_wr {
    pub(crate) rdma: ibv_rdma_wr,
    pub(crate) atomic: [u64; 4],
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub(crate) struct ibv_send_wr {
    pub(crate) wr_id: u64,
    pub(crate) next: *mut ibv_send_wr,
    pub(crate) sg_list: *mut ibv_sge,
    pub(crate) num_sge: c_int,
    pub(crate) opcode: u32,
    pub(crate) send_flags: u32,
    /// Anonymous union of `imm_data` (big-endian) and `invalidate_rkey`.
    pub(crate) imm_data: u32,
    pub(crate) wr: ibv_send_wr_wr,
    /// Union `qp_type` with its one member `xrc.remote_srqn`.
    pub(crate) qp_type: u32,
    /// Anonymous union of `bind_mw` (the larger, 48 bytes) and `tso`; unused.
    pub(crate) bind_mw: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub(crate) struct ibv_recv_wr {
    pub(crate) wr_id: u64,
    pub(crate) next: *mut ibv_recv_wr,
    pub(crate) sg_list: *mut ibv_sge,
    pub(crate) num_sge: c_int,
}

/// `struct ibv_wc`. Only `wr_id`, `status`, `qp_num` and `vendor_err` are defined for a
/// completion in error; `opcode` and `byte_len` only for a successful one.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_wc {
    pub(crate) wr_id: u64,
    pub(crate) status: u32,
    pub(crate) opcode: u32,
    pub(crate) vendor_err: u32,
    pub(crate) byte_len: u32,
    /// Anonymous union of `imm_data` and `invalidated_rkey`.
    pub(crate) imm_data: u32,
    pub(crate) qp_num: u32,
    pub(crate) src_qp: u32,
    pub(crate) wc_flags: u32,
    pub(crate) pkey_index: u16,
    pub(crate) slid: u16,
    pub(crate) sl: u8,
    pub(crate) dlid_path_bits: u8,
}

/// Implements `bytemuck::Zeroable` for the structures passed to the library zero-filled, as
/// C code `memset`s them.
macro_rules! zeroable {
    ($($t:ty),* $(,)?) => {$(
        // SAFETY: a plain C structure of integers, arrays of integers, raw pointers, nullable
        // function pointers (`Option<fn>`) and pthread objects, for all of which the all-zero
        // bit pattern is a valid value (a null pointer, `None`, an unused mutex slot).
        unsafe impl bytemuck::Zeroable for $t {}
    )*};
}

zeroable!(
    ibv_device_attr,
    ibv_port_attr,
    ibv_gid,
    ibv_qp_cap,
    ibv_qp_init_attr,
    ibv_global_route,
    ibv_ah_attr,
    ibv_qp_attr,
    ibv_sge,
    ibv_rdma_wr,
    ibv_send_wr_wr,
    ibv_send_wr,
    ibv_recv_wr,
    ibv_wc,
);

// ---------------------------------------------------------------------------------------------
// The function table.

/// The exported verbs functions, loaded from the library. The library stays loaded as long as
/// the table lives (for mpr, the whole process: it is kept in a `static`).
#[derive(Debug)]
pub(crate) struct Api {
    /// Which file was opened.
    pub(crate) path: &'static str,
    pub(crate) get_device_list: unsafe extern "C" fn(num_devices: *mut c_int) -> *mut *mut ibv_device,
    pub(crate) free_device_list: unsafe extern "C" fn(list: *mut *mut ibv_device),
    pub(crate) get_device_name: unsafe extern "C" fn(device: *mut ibv_device) -> *const c_char,
    pub(crate) open_device: unsafe extern "C" fn(device: *mut ibv_device) -> *mut ibv_context,
    pub(crate) close_device: unsafe extern "C" fn(context: *mut ibv_context) -> c_int,
    /// Optional: see the module notes on Apple's library.
    pub(crate) query_device:
        Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int>,
    /// The compat export behind the header's `ibv_query_port` macro.
    pub(crate) query_port: unsafe extern "C" fn(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int,
    pub(crate) query_gid:
        unsafe extern "C" fn(context: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int,
    pub(crate) alloc_pd: unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_pd,
    pub(crate) dealloc_pd: unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int,
    /// The compat export behind the header's `ibv_reg_mr` macro.
    pub(crate) reg_mr:
        unsafe extern "C" fn(pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int) -> *mut ibv_mr,
    pub(crate) dereg_mr: unsafe extern "C" fn(mr: *mut ibv_mr) -> c_int,
    pub(crate) create_cq: unsafe extern "C" fn(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut c_void,
        comp_vector: c_int,
    ) -> *mut ibv_cq,
    pub(crate) destroy_cq: unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int,
    pub(crate) create_qp: unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub(crate) modify_qp: unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int,
    pub(crate) destroy_qp: unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int,
    _lib: Library,
}

impl Api {
    /// Opens the first of `candidates` that loads and resolves every required function.
    /// The error names what was tried and why each failed.
    pub(crate) fn load(candidates: &[&'static str]) -> Result<Api, String> {
        let mut why = Vec::new();
        for &path in candidates {
            // SAFETY: loading a verbs library runs its initializers, which only register its
            // providers (rdma-core) or nothing observable (librdma); no Rust invariant rests on
            // them. The library is never unloaded while a function from it may run: `Api`
            // owns it and every caller reaches `Api` through a `'static` reference.
            match unsafe { Library::new(path) } {
                Ok(lib) => match Api::resolve(path, lib) {
                    Ok(api) => return Ok(api),
                    Err(e) => why.push(format!("{path}: {e}")),
                },
                Err(e) => why.push(e.to_string()),
            }
        }
        Err(why.join("; "))
    }

    fn resolve(path: &'static str, lib: Library) -> Result<Api, libloading::Error> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is the verbs function of that name, whose C prototype in
                // verbs.h is the function type of the field it is stored in (checked by hand
                // against rdma-core 44's header and by the layout test for the structures).
                // The pointer is copied out of the `Symbol`, and stays valid because the
                // library is moved into the same `Api`.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }?
            };
        }
        Ok(Api {
            path,
            get_device_list: sym!("ibv_get_device_list"),
            free_device_list: sym!("ibv_free_device_list"),
            get_device_name: sym!("ibv_get_device_name"),
            open_device: sym!("ibv_open_device"),
            close_device: sym!("ibv_close_device"),
            // SAFETY: as for the other symbols: `ibv_query_device(struct ibv_context *,
            // struct ibv_device_attr *)` returning int.
            query_device: unsafe { lib.get(b"ibv_query_device\0") }.ok().map(|s| *s),
            query_port: sym!("ibv_query_port"),
            query_gid: sym!("ibv_query_gid"),
            alloc_pd: sym!("ibv_alloc_pd"),
            dealloc_pd: sym!("ibv_dealloc_pd"),
            reg_mr: sym!("ibv_reg_mr"),
            dereg_mr: sym!("ibv_dereg_mr"),
            create_cq: sym!("ibv_create_cq"),
            destroy_cq: sym!("ibv_destroy_cq"),
            create_qp: sym!("ibv_create_qp"),
            modify_qp: sym!("ibv_modify_qp"),
            destroy_qp: sym!("ibv_destroy_qp"),
            _lib: lib,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The header's inline data-path functions, through the context's ops table.

/// `ibv_post_send`: `qp->context->ops.post_send(qp, wr, bad_wr)`. Returns 0 or an errno
/// (positive from rdma-core, possibly negative from librdma); `EOPNOTSUPP` if the table has no
/// entry.
///
/// # Safety
/// `qp` is a live queue pair of a live context; `wr` and everything it points to (its
/// scatter-gather list) are valid for the call; `bad_wr` is writable.
pub(crate) unsafe fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int {
    // SAFETY: the caller guarantees `qp` and its context are live, so both reads are of
    // initialized library-owned structures whose layout is `ibv_qp`/`ibv_context`.
    let f = unsafe { (*(*qp).context).ops.post_send };
    match f {
        // SAFETY: the library's own entry for this context, called as the inline does, with
        // arguments the caller vouches for.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_recv`, as [`post_send`].
///
/// # Safety
/// As for [`post_send`].
pub(crate) unsafe fn post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int {
    // SAFETY: as in `post_send`.
    let f = unsafe { (*(*qp).context).ops.post_recv };
    match f {
        // SAFETY: as in `post_send`.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_poll_cq`: `cq->context->ops.poll_cq(cq, n, wc)`. Returns how many completions were
/// written to `wc`, or a negative value on error.
///
/// # Safety
/// `cq` is a live completion queue of a live context; `wc` has room for `n` entries.
pub(crate) unsafe fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: as in `post_send`, for the completion queue.
    let f = unsafe { (*(*cq).context).ops.poll_cq };
    match f {
        // SAFETY: the library's own entry, with arguments the caller vouches for.
        Some(f) => unsafe { f(cq, n, wc) },
        None => -libc::EOPNOTSUPP,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod layout_tests {
    //! Every structure, field and constant above against the installed `infiniband/verbs.h`:
    //! a C program prints `sizeof`, `_Alignof`, `offsetof` and enum values; each must equal
    //! the Rust side.

    use std::collections::BTreeMap;
    use std::fmt::Write as _;
    use std::mem::{align_of, offset_of, size_of};
    use std::process::Command;

    use super::*;

    /// One number the C compiler must agree with: its C expression and the Rust value.
    struct Check {
        c: String,
        rust: i64,
    }

    macro_rules! layout {
        ($checks:ident; $($t:ident => $c:literal { $($($f:ident).+),* $(,)? })*) => {$(
            $checks.push(Check { c: format!("sizeof({})", $c), rust: size_of::<$t>() as i64 });
            $checks.push(Check { c: format!("_Alignof({})", $c), rust: align_of::<$t>() as i64 });
            $(
                $checks.push(Check {
                    c: format!("offsetof({}, {})", $c, [$(stringify!($f)),+].join(".")),
                    rust: offset_of!($t, $($f).+) as i64,
                });
            )*
        )*};
    }

    macro_rules! constants {
        ($checks:ident; $($name:ident),* $(,)?) => {$(
            $checks.push(Check { c: format!("(long long){}", stringify!($name)), rust: $name as i64 });
        )*};
    }

    fn checks() -> Vec<Check> {
        let mut c = Vec::new();
        layout!(c;
            ibv_device => "struct ibv_device" {
                _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path,
            }
            ibv_context_ops => "struct ibv_context_ops" {
                _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
                _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
                _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
                _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
                _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
                _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
                _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast,
                _compat_async_event,
            }
            ibv_context => "struct ibv_context" {
                device, ops, ops.poll_cq, ops.post_send, ops.post_recv, cmd_fd, async_fd,
                num_comp_vectors, mutex, abi_compat,
            }
            ibv_device_attr => "struct ibv_device_attr" {
                fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
                vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
                max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
                max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
                max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
                max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
                max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
            }
            ibv_port_attr => "struct ibv_port_attr" {
                state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz,
                bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl,
                subnet_timeout, init_type_reply, active_width, active_speed, phys_state,
                link_layer, flags, port_cap_flags2,
            }
            ibv_gid => "union ibv_gid" { raw }
            ibv_pd => "struct ibv_pd" { context, handle }
            ibv_mr => "struct ibv_mr" { context, pd, addr, length, handle, lkey, rkey }
            ibv_cq => "struct ibv_cq" {
                context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
                async_events_completed,
            }
            ibv_qp => "struct ibv_qp" {
                context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
                mutex, cond, events_completed,
            }
            ibv_qp_cap => "struct ibv_qp_cap" {
                max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
            }
            ibv_qp_init_attr => "struct ibv_qp_init_attr" {
                qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
            }
            ibv_global_route => "struct ibv_global_route" {
                dgid, flow_label, sgid_index, hop_limit, traffic_class,
            }
            ibv_ah_attr => "struct ibv_ah_attr" {
                grh, grh.dgid, grh.sgid_index, grh.hop_limit, dlid, sl, src_path_bits,
                static_rate, is_global, port_num,
            }
            ibv_qp_attr => "struct ibv_qp_attr" {
                qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
                dest_qp_num, qp_access_flags, cap, ah_attr, ah_attr.grh.dgid, ah_attr.dlid,
                ah_attr.is_global, ah_attr.port_num, alt_ah_attr, pkey_index, alt_pkey_index,
                en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic,
                min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num,
                alt_timeout, rate_limit,
            }
            ibv_sge => "struct ibv_sge" { addr, length, lkey }
            ibv_send_wr => "struct ibv_send_wr" {
                wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr,
                wr.rdma.remote_addr, wr.rdma.rkey, qp_type, bind_mw,
            }
            ibv_recv_wr => "struct ibv_recv_wr" { wr_id, next, sg_list, num_sge }
            ibv_wc => "struct ibv_wc" {
                wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
                pkey_index, slid, sl, dlid_path_bits,
            }
        );
        // Sizes the Rust side states by hand: the unions named by a member, the atomic member.
        c.push(Check { c: "sizeof(((struct ibv_send_wr *)0)->wr)".into(), rust: size_of::<ibv_send_wr_wr>() as i64 });
        c.push(Check {
            c: "sizeof(((struct ibv_send_wr *)0)->bind_mw) > sizeof(((struct ibv_send_wr *)0)->tso) \
                ? sizeof(((struct ibv_send_wr *)0)->bind_mw) : sizeof(((struct ibv_send_wr *)0)->tso)"
                .into(),
            rust: size_of::<[u64; 6]>() as i64,
        });
        c.push(Check { c: "sizeof(((struct ibv_send_wr *)0)->imm_data)".into(), rust: 4 });
        c.push(Check { c: "sizeof(((struct ibv_wc *)0)->imm_data)".into(), rust: 4 });
        constants!(c;
            IBV_QPT_RC, IBV_QPT_UC, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
            IBV_QPS_ERR, IBV_QP_STATE, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX, IBV_QP_PORT,
            IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY,
            IBV_QP_RQ_PSN, IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN,
            IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_DEST_QPN, IBV_ACCESS_LOCAL_WRITE,
            IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
            IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, IBV_WC_SEND, IBV_WC_RDMA_WRITE,
            IBV_WC_RDMA_READ, IBV_WC_RECV, IBV_WC_SUCCESS, IBV_WC_LOC_LEN_ERR,
            IBV_WC_WR_FLUSH_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_RETRY_EXC_ERR,
            IBV_WC_RNR_RETRY_EXC_ERR, IBV_PORT_NOP, IBV_PORT_DOWN, IBV_PORT_INIT, IBV_PORT_ARMED,
            IBV_PORT_ACTIVE, IBV_PORT_ACTIVE_DEFER, IBV_MTU_256, IBV_MTU_1024, IBV_MTU_4096,
            IBV_LINK_LAYER_UNSPECIFIED, IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET,
            IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX,
        );
        c
    }

    /// Compiles and runs a C program printing `index value` for each check's expression.
    fn c_values(checks: &[Check]) -> BTreeMap<usize, i64> {
        let mut src =
            String::from("#include <infiniband/verbs.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n");
        for (i, check) in checks.iter().enumerate() {
            writeln!(src, "    printf(\"%d %lld\\n\", {i}, (long long)({}));", check.c).unwrap();
        }
        src.push_str("    return 0;\n}\n");

        let dir = std::env::temp_dir().join(format!("mpr-verbs-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c_file, exe) = (dir.join("layout.c"), dir.join("layout"));
        std::fs::write(&c_file, &src).unwrap();
        let out = Command::new("cc")
            .arg("-std=gnu11")
            .arg("-o")
            .arg(&exe)
            .arg(&c_file)
            .output()
            .expect("the layout test needs a C compiler (`cc`)");
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            let err = String::from_utf8_lossy(&out.stderr);
            if err.contains("infiniband/verbs.h") {
                panic!(
                    "the verbs header infiniband/verbs.h is missing: install libibverbs-dev \
                     (apt-get install libibverbs-dev) to check the FFI layout\n{err}"
                );
            }
            panic!("the layout program does not compile:\n{err}");
        }
        let run = Command::new(&exe).output().expect("the layout program runs");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(run.status.success(), "the layout program failed: {run:?}");
        String::from_utf8(run.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                let (i, v) = line.split_once(' ').unwrap();
                (i.parse().unwrap(), v.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn structures_and_constants_match_the_installed_header() {
        let checks = checks();
        let c = c_values(&checks);
        assert_eq!(c.len(), checks.len(), "one value per check");
        let wrong: Vec<String> = checks
            .iter()
            .enumerate()
            .filter(|(i, check)| c[i] != check.rust)
            .map(|(i, check)| format!("{}: C says {}, Rust says {}", check.c, c[&i], check.rust))
            .collect();
        assert!(wrong.is_empty(), "the FFI disagrees with infiniband/verbs.h:\n{}", wrong.join("\n"));
    }
}
