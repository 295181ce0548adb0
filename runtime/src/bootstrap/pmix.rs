//! PMIx client: ranks started by `srun --mpi=pmix`, Open MPI's `mpirun` or PRRTE's `prterun`.
//!
//! PMIx is not a text protocol on an inherited socket but a library (OpenPMIx's `libpmix`)
//! that talks to the launcher's PMIx server with its own binary, versioned protocol. So mpr
//! does what it does for verbs: it opens the library at run time (`libloading`; Debian's
//! `libpmix2`, Homebrew's `open-mpi`) when the launcher's variables (`PMIX_NAMESPACE`,
//! `PMIX_RANK`) say it was started that way, and calls the handful of functions it needs:
//! `PMIx_Init`, `PMIx_Get` (job size, local peers, host name, other ranks' values),
//! `PMIx_Put` + `PMIx_Commit`, `PMIx_Fence` (a barrier that also collects the values put
//! before it), `PMIx_Abort` and `PMIx_Finalize`. Values are per process in PMIx, so a read
//! names the rank that put the key.
//!
//! The structures below are the parts of `pmix_common.h` (OpenPMIx 3.x to 5.x keep them
//! alike) that cross the boundary: `pmix_proc_t` (a 256-byte namespace and a 32-bit rank),
//! `pmix_value_t` (a 16-bit type tag, then a union whose largest member is 24 bytes, 8-byte
//! aligned) and `pmix_info_t` (a 512-byte key, 32-bit flags, a value).

#![allow(non_camel_case_types)] // The C names, as in verbs/ffi.rs.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use libloading::Library;

use crate::error::Error;

const PMIX_MAX_NSLEN: usize = 255;
const PMIX_MAX_KEYLEN: usize = 511;
const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
const PMIX_SUCCESS: c_int = 0;
const PMIX_BOOL: u16 = 1;
const PMIX_INT: u16 = 6;
const PMIX_STRING: u16 = 3;
const PMIX_SIZE: u16 = 4;
const PMIX_UINT32: u16 = 14;
const PMIX_UINT64: u16 = 15;
const PMIX_PROC_RANK: u16 = 40;
/// `PMIX_GLOBAL`: the value is for every process of the job, local or remote.
const PMIX_GLOBAL: u8 = 3;

#[repr(C)]
struct pmix_proc_t {
    nspace: [c_char; PMIX_MAX_NSLEN + 1],
    rank: u32,
}

#[repr(C)]
struct pmix_value_t {
    ty: u16,
    /// The union: `bool`, integers, `char *` at its start.
    data: [u64; 3],
}

#[repr(C)]
struct pmix_info_t {
    key: [c_char; PMIX_MAX_KEYLEN + 1],
    flags: u32,
    value: pmix_value_t,
}

type Status = c_int;

struct Api {
    init: unsafe extern "C" fn(*mut pmix_proc_t, *mut pmix_info_t, usize) -> Status,
    finalize: unsafe extern "C" fn(*const pmix_info_t, usize) -> Status,
    abort: unsafe extern "C" fn(c_int, *const c_char, *mut pmix_proc_t, usize) -> Status,
    put: unsafe extern "C" fn(u8, *const c_char, *mut pmix_value_t) -> Status,
    commit: unsafe extern "C" fn() -> Status,
    fence: unsafe extern "C" fn(*const pmix_proc_t, usize, *const pmix_info_t, usize) -> Status,
    get: unsafe extern "C" fn(
        *const pmix_proc_t,
        *const c_char,
        *const pmix_info_t,
        usize,
        *mut *mut pmix_value_t,
    ) -> Status,
    /// `PMIx_Value_destruct` (OpenPMIx 4+): frees what a value points to.
    destruct: Option<unsafe extern "C" fn(*mut pmix_value_t)>,
    /// Never unloaded: after `PMIx_Init` the library runs a thread of its own, which may
    /// outlive a `PMIx_Finalize` that failed or never came.
    _lib: std::mem::ManuallyDrop<Library>,
}

#[cfg(target_os = "macos")]
const LIBRARIES: &[&str] = &["libpmix.2.dylib", "libpmix.dylib"];
#[cfg(not(target_os = "macos"))]
const LIBRARIES: &[&str] = &["libpmix.so.2", "libpmix.so"];

impl Api {
    fn load() -> Result<Api, String> {
        let mut why = Vec::new();
        for &path in LIBRARIES {
            // SAFETY: loading libpmix runs its initializers, which set up its own state and
            // nothing a Rust invariant rests on. `Api` owns the library, and it is never
            // unloaded while one of its functions may run (`Pmix` holds the `Api`).
            match unsafe { Library::new(path) } {
                Ok(lib) => match Api::resolve(lib) {
                    Ok(api) => return Ok(api),
                    Err(e) => why.push(format!("{path}: {e}")),
                },
                Err(e) => why.push(e.to_string()),
            }
        }
        Err(why.join("; "))
    }

    fn resolve(lib: Library) -> Result<Api, libloading::Error> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is the PMIx function of that name, whose prototype in
                // pmix.h is the function type of the field it is stored in; the pointer is
                // copied out and stays valid because the library moves into the same `Api`.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }?
            };
        }
        Ok(Api {
            init: sym!("PMIx_Init"),
            finalize: sym!("PMIx_Finalize"),
            abort: sym!("PMIx_Abort"),
            put: sym!("PMIx_Put"),
            commit: sym!("PMIx_Commit"),
            fence: sym!("PMIx_Fence"),
            get: sym!("PMIx_Get"),
            // SAFETY: as for the others: `void PMIx_Value_destruct(pmix_value_t *)`.
            destruct: unsafe { lib.get(b"PMIx_Value_destruct\0") }.ok().map(|s| *s),
            _lib: std::mem::ManuallyDrop::new(lib),
        })
    }
}

/// A value read with `PMIx_Get`.
enum Value {
    Text(String),
    Number(u64),
    Other(u16),
}

/// A PMIx client, past `PMIx_Init`.
pub(crate) struct Pmix {
    api: Api,
    nspace: String,
    rank: usize,
    size: usize,
    /// The bound on a fence or a read, in seconds (`MPR_PMI_TIMEOUT`, as for PMI).
    timeout: c_int,
    finalized: bool,
}

impl Drop for Pmix {
    fn drop(&mut self) {
        if !self.finalized {
            let _ = self.finalize();
        }
    }
}

/// One `pmix_info_t` directive: `key` with a boolean or an integer value.
fn info(key: &str, ty: u16, value: u64) -> pmix_info_t {
    let mut i =
        pmix_info_t { key: [0; PMIX_MAX_KEYLEN + 1], flags: 0, value: pmix_value_t { ty, data: [value, 0, 0] } };
    for (d, s) in i.key.iter_mut().zip(key.bytes().take(PMIX_MAX_KEYLEN)) {
        *d = s as c_char;
    }
    i
}

impl std::fmt::Debug for Pmix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmix")
            .field("nspace", &self.nspace)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

fn err(msg: impl Into<String>) -> Error {
    Error::Bootstrap(msg.into())
}

fn proc_of(nspace: &str, rank: u32) -> pmix_proc_t {
    let mut p = pmix_proc_t { nspace: [0; PMIX_MAX_NSLEN + 1], rank };
    for (d, s) in p.nspace.iter_mut().zip(nspace.bytes().take(PMIX_MAX_NSLEN)) {
        *d = s as c_char;
    }
    p
}

impl Pmix {
    /// Started by a PMIx launcher: its variables are set and no `PMI_FD` is given.
    pub(crate) fn launched() -> bool {
        std::env::var_os("PMIX_NAMESPACE").is_some() && std::env::var_os("PMIX_RANK").is_some()
    }

    /// Loads libpmix and connects to the launcher's PMIx server.
    pub(crate) fn start() -> Result<Pmix, Error> {
        let ns = std::env::var("PMIX_NAMESPACE").unwrap_or_default();
        let api = Api::load().map_err(|why| {
            err(format!(
                "started by a PMIx launcher (PMIX_NAMESPACE={ns}) but its library cannot be loaded ({why}); \
                 install OpenPMIx (Debian: libpmix2), or start the job with mprun or srun --mpi=pmi2"
            ))
        })?;
        let mut me = proc_of("", 0);
        // SAFETY: `me` is a writable pmix_proc_t the call fills; no info array is passed.
        let rc = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
        if rc != PMIX_SUCCESS {
            return Err(err(format!("PMIx_Init failed (status {rc})")));
        }
        // SAFETY: PMIx_Init wrote a NUL-terminated namespace into the 256-byte array.
        let nspace = unsafe { CStr::from_ptr(me.nspace.as_ptr()) }.to_string_lossy().into_owned();
        let timeout =
            crate::env::seconds("MPR_PMI_TIMEOUT").map_or(300, |t| t.as_secs().clamp(1, i32::MAX as u64)) as c_int;
        let mut p = Pmix { api, nspace, rank: me.rank as usize, size: 0, timeout, finalized: false };
        p.size = match p.get_value(PMIX_RANK_WILDCARD, "pmix.job.size")? {
            Some(Value::Number(n)) if n > 0 => n as usize,
            _ => return Err(err("PMIx gave no job size (pmix.job.size)")),
        };
        if p.rank >= p.size {
            return Err(err(format!("PMIx says rank {} of {}", p.rank, p.size)));
        }
        Ok(p)
    }

    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The job's namespace.
    pub(crate) fn nspace(&self) -> &str {
        &self.nspace
    }

    /// The ranks on this node (`pmix.lpeers`), if the launcher says.
    pub(crate) fn local_peers(&mut self) -> Result<Option<Vec<usize>>, Error> {
        Ok(match self.get_value(PMIX_RANK_WILDCARD, "pmix.lpeers")? {
            Some(Value::Text(t)) => t.split(',').map(|r| r.trim().parse().ok()).collect::<Option<Vec<usize>>>(),
            _ => None,
        })
    }

    /// The name of this rank's host (`pmix.hname`), if the launcher says.
    pub(crate) fn hostname(&mut self) -> Option<String> {
        match self.get_value(self.rank as u32, "pmix.hname") {
            Ok(Some(Value::Text(t))) if !t.is_empty() => Some(t),
            _ => None,
        }
    }

    fn get_value(&mut self, rank: u32, key: &str) -> Result<Option<Value>, Error> {
        let who = proc_of(&self.nspace, rank);
        let k = CString::new(key).map_err(|_| err(format!("PMIx key {key:?} holds a NUL")))?;
        let mut out: *mut pmix_value_t = std::ptr::null_mut();
        let bound = info("pmix.timeout", PMIX_INT, self.timeout as u64);
        // SAFETY: `who`, `k` and the one directive (PMIX_TIMEOUT) outlive the call; `out`
        // receives a value the library allocated (or stays null on failure).
        let rc = unsafe { (self.api.get)(&who, k.as_ptr(), &bound, 1, &mut out) };
        if rc != PMIX_SUCCESS || out.is_null() {
            return Ok(None);
        }
        // SAFETY: on success `out` points to a valid pmix_value_t; its union is read as the
        // member its type tag names (a C string pointer, or an integer at the union's start).
        let value = unsafe {
            let v = &*out;
            match v.ty {
                PMIX_STRING => {
                    let s = v.data[0] as *const c_char;
                    Value::Text(if s.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(s).to_string_lossy().into_owned()
                    })
                }
                PMIX_UINT32 | PMIX_PROC_RANK => Value::Number((v.data[0] as u32) as u64),
                PMIX_SIZE | PMIX_UINT64 => Value::Number(v.data[0]),
                other => Value::Other(other),
            }
        };
        // SAFETY: the value came from PMIx_Get, whose caller owns it (PMIX_VALUE_RELEASE:
        // destruct its contents, then free it with the C allocator). Without the destructor
        // (an old libpmix) its contents leak, a few bytes per read at start-up.
        unsafe {
            if let Some(destruct) = self.api.destruct {
                destruct(out);
            }
            libc::free(out as *mut c_void);
        }
        Ok(Some(value))
    }

    /// Publishes `key = value` for every rank (visible after the next fence).
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let k = CString::new(key).map_err(|_| err(format!("PMIx key {key:?} holds a NUL")))?;
        let v = CString::new(value).map_err(|_| err(format!("PMIx value of {key} holds a NUL")))?;
        let mut val = pmix_value_t { ty: PMIX_STRING, data: [v.as_ptr() as u64, 0, 0] };
        // SAFETY: key and value strings outlive the call, which copies them.
        let rc = unsafe { (self.api.put)(PMIX_GLOBAL, k.as_ptr(), &mut val) };
        if rc != PMIX_SUCCESS {
            return Err(err(format!("PMIx_Put of {key} failed (status {rc})")));
        }
        Ok(())
    }

    /// The value rank `owner` put under `key` before the last fence.
    pub(crate) fn get(&mut self, owner: usize, key: &str) -> Result<String, Error> {
        match self.get_value(owner as u32, key)? {
            Some(Value::Text(t)) => Ok(t),
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(Value::Other(ty)) => {
                Err(err(format!("PMIx value of {key} from rank {owner} has type {ty}, not a string")))
            }
            None => Err(err(format!("PMIx has no {key} from rank {owner}"))),
        }
    }

    /// Commits this rank's puts and waits for every rank (`PMIx_Fence` collecting the data).
    pub(crate) fn fence(&mut self) -> Result<(), Error> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.api.commit)() };
        if rc != PMIX_SUCCESS {
            return Err(err(format!("PMIx_Commit failed (status {rc})")));
        }
        let directives = [info("pmix.collect", PMIX_BOOL, 1), info("pmix.timeout", PMIX_INT, self.timeout as u64)];
        // SAFETY: a null process array means the whole namespace; the directives
        // (PMIX_COLLECT_DATA, PMIX_TIMEOUT) are valid pmix_info_t that outlive the call.
        let rc = unsafe { (self.api.fence)(std::ptr::null(), 0, directives.as_ptr(), directives.len()) };
        if rc != PMIX_SUCCESS {
            return Err(err(format!("PMIx_Fence failed (status {rc})")));
        }
        Ok(())
    }

    pub(crate) fn finalize(&mut self) -> Result<(), Error> {
        self.finalized = true;
        // SAFETY: no info array.
        let rc = unsafe { (self.api.finalize)(std::ptr::null(), 0) };
        if rc != PMIX_SUCCESS {
            return Err(err(format!("PMIx_Finalize failed (status {rc})")));
        }
        Ok(())
    }

    /// Asks the launcher to end the whole job with `code`.
    pub(crate) fn abort(&mut self, code: i32, msg: &str) {
        let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: `m` outlives the call; a null process array means the whole namespace.
        unsafe { (self.api.abort)(code, m.as_ptr(), std::ptr::null_mut(), 0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_pmix_common_h() {
        // sizeof in C (x86-64 and arm64 alike): pmix_proc_t 260, pmix_value_t 32,
        // pmix_info_t 552 with the value at offset 520.
        assert_eq!(std::mem::size_of::<pmix_proc_t>(), 260);
        assert_eq!(std::mem::size_of::<pmix_value_t>(), 32);
        assert_eq!(std::mem::size_of::<pmix_info_t>(), 552);
        assert_eq!(std::mem::offset_of!(pmix_info_t, value), 520);
        assert_eq!(std::mem::offset_of!(pmix_value_t, data), 8);
        let p = proc_of("slurm.pmix.7.0", 3);
        // SAFETY: proc_of leaves a NUL after the name.
        assert_eq!(unsafe { CStr::from_ptr(p.nspace.as_ptr()) }.to_str().unwrap(), "slurm.pmix.7.0");
    }
}
