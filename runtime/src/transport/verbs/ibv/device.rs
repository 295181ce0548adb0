//! Owning verbs objects and asking a device about itself: the guards that release contexts,
//! protection domains, completion queues, queue pairs and regions (also when a setup fails
//! halfway), the device list, and the queries of an open device.

use std::ffi::{c_int, CStr};
use std::io;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::OnceLock;

use bytemuck::Zeroable;

use super::flavor::Flavor;
use super::GID_SCAN;
use crate::transport::verbs::ffi::{self, Api};
use crate::transport::verbs::provider::VerbsError;

/// An error from a verbs call returning an int: 0 is success; rdma-core returns an errno or
/// -1 with `errno` set; librdma may return a negated errno.
pub(super) fn rc_error(rc: c_int) -> io::Error {
    if rc == -1 {
        io::Error::last_os_error()
    } else {
        io::Error::from_raw_os_error(rc.saturating_abs())
    }
}

pub(super) fn device_error(call: &str, e: io::Error) -> VerbsError {
    VerbsError::Device(format!("{call}: {e}"))
}

/// The process's verbs library, loaded on first use and kept (never unloaded).
pub(super) fn api(flavor: Flavor) -> Result<&'static Api, VerbsError> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| Api::load(flavor.libraries()))
        .as_ref()
        .map_err(|e| VerbsError::Unavailable(format!("no {} library ({e})", flavor.name())))
}

// ---------------------------------------------------------------------------------------------
// Owned verbs objects.

/// A verbs object type and the call that releases it.
pub(super) trait Resource {
    /// The releasing call, for error messages.
    const RELEASE: &'static str;

    /// # Safety
    /// `p` is a live object of this type from `api`'s library, with nothing else created from
    /// it still alive; it is not used again.
    unsafe fn release(api: &Api, p: *mut Self) -> c_int;
}

impl Resource for ffi::ibv_context {
    const RELEASE: &'static str = "ibv_close_device";
    unsafe fn release(api: &Api, p: *mut Self) -> c_int {
        // SAFETY: the caller's contract is this function's.
        unsafe { (api.close_device)(p) }
    }
}

impl Resource for ffi::ibv_pd {
    const RELEASE: &'static str = "ibv_dealloc_pd";
    unsafe fn release(api: &Api, p: *mut Self) -> c_int {
        // SAFETY: the caller's contract is this function's.
        unsafe { (api.dealloc_pd)(p) }
    }
}

impl Resource for ffi::ibv_cq {
    const RELEASE: &'static str = "ibv_destroy_cq";
    unsafe fn release(api: &Api, p: *mut Self) -> c_int {
        // SAFETY: the caller's contract is this function's.
        unsafe { (api.destroy_cq)(p) }
    }
}

impl Resource for ffi::ibv_qp {
    const RELEASE: &'static str = "ibv_destroy_qp";
    unsafe fn release(api: &Api, p: *mut Self) -> c_int {
        // SAFETY: the caller's contract is this function's.
        unsafe { (api.destroy_qp)(p) }
    }
}

impl Resource for ffi::ibv_mr {
    const RELEASE: &'static str = "ibv_dereg_mr";
    unsafe fn release(api: &Api, p: *mut Self) -> c_int {
        // SAFETY: the caller's contract is this function's.
        unsafe { (api.dereg_mr)(p) }
    }
}

/// A live verbs object, released when dropped (errors ignored) or by [`Owned::close`].
pub(super) struct Owned<T: Resource> {
    pub(super) api: &'static Api,
    ptr: NonNull<T>,
}

impl<T: Resource> Owned<T> {
    /// Takes ownership of what a creating call returned; null is that call's failure, with
    /// the reason in `errno`.
    ///
    /// # Safety
    /// A non-null `p` is a live object just created through `api`, owned by nobody else.
    pub(super) unsafe fn new(api: &'static Api, p: *mut T, call: &str) -> Result<Self, VerbsError> {
        match NonNull::new(p) {
            Some(ptr) => Ok(Owned { api, ptr }),
            None => Err(device_error(call, io::Error::last_os_error())),
        }
    }

    pub(super) fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Releases the object now, reporting failure.
    pub(super) fn close(self) -> Result<(), VerbsError> {
        let me = ManuallyDrop::new(self);
        // SAFETY: `Owned` holds the only handle to a live object, and users keep objects
        // created from it (QPs of a CQ, ...) in fields dropped before it; `me` is not dropped
        // afterwards, so it is released once.
        let rc = unsafe { T::release(me.api, me.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(device_error(T::RELEASE, rc_error(rc)))
        }
    }
}

impl<T: Resource> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: as in `close`; this is the last use of the pointer.
        let _ = unsafe { T::release(self.api, self.as_ptr()) };
    }
}

/// The list from `ibv_get_device_list`, freed when dropped. Contexts opened from its devices
/// stay valid after that (libibverbs' contract).
pub(super) struct DeviceList {
    pub(super) api: &'static Api,
    list: NonNull<*mut ffi::ibv_device>,
    len: usize,
}

impl DeviceList {
    pub(super) fn get(api: &'static Api) -> Result<DeviceList, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid place for the count; the result is owned by `DeviceList`.
        let list = unsafe { (api.get_device_list)(&mut n) };
        match NonNull::new(list) {
            Some(list) => Ok(DeviceList { api, list, len: usize::try_from(n).unwrap_or(0) }),
            None => {
                let e = io::Error::last_os_error();
                let hint =
                    if e.raw_os_error() == Some(libc::ENOSYS) { " (no RDMA support in this kernel)" } else { "" };
                Err(VerbsError::Unavailable(format!("ibv_get_device_list: {e}{hint}")))
            }
        }
    }

    pub(super) fn devices(&self) -> &[*mut ffi::ibv_device] {
        // SAFETY: the library returned an array of `len` device pointers (plus a terminating
        // null), alive until `ibv_free_device_list` in `drop`, after the borrow ends.
        unsafe { std::slice::from_raw_parts(self.list.as_ptr(), self.len) }
    }

    pub(super) fn name(&self, dev: *mut ffi::ibv_device) -> String {
        // SAFETY: `dev` is an entry of this live list.
        let p = unsafe { (self.api.get_device_name)(dev) };
        if p.is_null() {
            return String::from("?");
        }
        // SAFETY: a non-null result is the device's NUL-terminated name, owned by the list.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    pub(super) fn open(&self, dev: *mut ffi::ibv_device) -> Result<Owned<ffi::ibv_context>, VerbsError> {
        // SAFETY: `dev` is an entry of this live list; the context is owned by the guard.
        unsafe { Owned::new(self.api, (self.api.open_device)(dev), "ibv_open_device") }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from `ibv_get_device_list` and is freed once; no borrow of
        // `devices()` outlives `self`.
        unsafe { (self.api.free_device_list)(self.list.as_ptr()) }
    }
}

/// Queries of an open context.
pub(super) struct Device<'a> {
    pub(super) api: &'static Api,
    pub(super) ctx: &'a Owned<ffi::ibv_context>,
}

impl Device<'_> {
    pub(super) fn attr(&self) -> Result<ffi::ibv_device_attr, VerbsError> {
        let Some(query) = self.api.query_device else {
            return Err(VerbsError::Unavailable("the library has no ibv_query_device".into()));
        };
        let mut attr = ffi::ibv_device_attr::zeroed();
        // SAFETY: the context is live and `attr` is a writable `ibv_device_attr`.
        let rc = unsafe { query(self.ctx.as_ptr(), &mut attr) };
        if rc == 0 {
            Ok(attr)
        } else {
            Err(device_error("ibv_query_device", rc_error(rc)))
        }
    }

    pub(super) fn port(&self, port: u8) -> Result<ffi::ibv_port_attr, VerbsError> {
        let mut attr = ffi::ibv_port_attr::zeroed();
        // SAFETY: the context is live and `attr` is a zeroed, writable, full-size
        // `ibv_port_attr` (the compat export writes at most that much; see `ffi`).
        let rc = unsafe { (self.api.query_port)(self.ctx.as_ptr(), port, &mut attr) };
        if rc == 0 {
            Ok(attr)
        } else {
            Err(device_error("ibv_query_port", rc_error(rc)))
        }
    }

    pub(super) fn gid(&self, port: u8, index: u8) -> Result<[u8; 16], VerbsError> {
        let mut gid = ffi::ibv_gid::zeroed();
        // SAFETY: the context is live and `gid` is a writable `union ibv_gid`.
        let rc = unsafe { (self.api.query_gid)(self.ctx.as_ptr(), port, c_int::from(index), &mut gid) };
        if rc == 0 {
            Ok(gid.raw)
        } else {
            Err(device_error(&format!("ibv_query_gid (index {index})"), rc_error(rc)))
        }
    }

    /// The non-zero entries among the first `len` (at most [`GID_SCAN`]) of a port's table.
    pub(super) fn gids(&self, port: u8, len: usize) -> Vec<(u8, [u8; 16])> {
        let len = if len == 0 { 8 } else { len.min(GID_SCAN) };
        (0..len as u8).filter_map(|i| self.gid(port, i).ok().filter(|g| g != &[0; 16]).map(|g| (i, g))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_of_int_returning_calls() {
        assert_eq!(rc_error(-libc::ENOMEM).raw_os_error(), Some(libc::ENOMEM), "librdma's negative errno");
        assert_eq!(rc_error(libc::EINVAL).raw_os_error(), Some(libc::EINVAL));
        assert_eq!(
            device_error("ibv_x", rc_error(libc::EINVAL)).to_string(),
            format!("RDMA device error: ibv_x: {}", io::Error::from_raw_os_error(libc::EINVAL))
        );
    }
}
