//! Raw views of user buffers held by in-flight requests.
//!
//! A nonblocking operation hands its buffer to the engine, which reads or writes it later,
//! while the caller's code goes on. The borrow checker cannot see that, so the buffer travels
//! as a pointer and a length. Invariant (established by the `unsafe` constructors, upheld by
//! [`crate::Scope`] and the blocking calls): the memory stays borrowed, and so valid and not
//! otherwise accessed, until the request that holds the view has completed. Every other use
//! of these types is safe.

/// A read-only view of a send buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBuf {
    ptr: *const u8,
    len: usize,
}

/// A writable view of a receive buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBufMut {
    ptr: *mut u8,
    len: usize,
}

impl RawBuf {
    /// The empty view.
    pub(crate) const EMPTY: RawBuf = RawBuf { ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(), len: 0 };

    /// # Safety
    /// `bytes` must stay valid and unmodified until every request holding this view completes.
    pub(crate) unsafe fn new(bytes: &[u8]) -> Self {
        RawBuf { ptr: bytes.as_ptr(), len: bytes.len() }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The address, for single-copy transfers by a peer (CMA).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the constructor's contract keeps `ptr..ptr+len` valid and unmodified while
        // any request holding this view is alive, and views live only inside such requests.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The sub-view `off..off+len` (clamped to the buffer).
    pub(crate) fn slice(&self, off: usize, len: usize) -> RawBuf {
        let off = off.min(self.len);
        let len = len.min(self.len - off);
        // `off <= self.len`, so the pointer stays inside (or one past) the same allocation.
        RawBuf { ptr: self.ptr.wrapping_add(off), len }
    }
}

impl RawBufMut {
    /// # Safety
    /// `bytes` must stay valid and otherwise unaccessed until every request holding this view
    /// completes.
    pub(crate) unsafe fn new(bytes: &mut [u8]) -> Self {
        RawBufMut { ptr: bytes.as_mut_ptr(), len: bytes.len() }
    }

    /// # Safety
    /// As [`RawBufMut::new`], for the `len` bytes at `ptr`.
    pub(crate) unsafe fn from_raw(ptr: *mut u8, len: usize) -> Self {
        RawBufMut { ptr, len }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The empty view.
    pub(crate) const EMPTY: RawBufMut = RawBufMut { ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(), len: 0 };

    /// The same memory, for reading (e.g. sending what was received).
    pub(crate) fn as_read(&self) -> RawBuf {
        RawBuf { ptr: self.ptr, len: self.len }
    }

    /// The bytes `off..off+len` of this view (clamped), under the same contract.
    pub(crate) fn window(&self, off: usize, len: usize) -> RawBufMut {
        let off = off.min(self.len);
        RawBufMut { ptr: self.ptr.wrapping_add(off), len: len.min(self.len - off) }
    }

    /// The first `len` bytes of this view (clamped), under the same contract.
    pub(crate) fn prefix(&self, len: usize) -> RawBufMut {
        RawBufMut { ptr: self.ptr, len: len.min(self.len) }
    }

    /// The address of byte `off` of this view, for a peer's single-copy write.
    pub(crate) fn addr_at(&self, off: usize) -> u64 {
        self.ptr.wrapping_add(off.min(self.len)) as u64
    }

    /// Mutable access to `off..off+len`; `None` if that range is outside the buffer.
    pub(crate) fn range_mut(&mut self, off: usize, len: usize) -> Option<&mut [u8]> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: the constructor's contract gives the holder of this view exclusive access to
        // `ptr..ptr+self.len` until its request completes; the range was checked to lie inside.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), len) })
    }

    /// Copies `src` to offset `off`; false if it does not fit.
    pub(crate) fn write_at(&mut self, off: usize, src: &[u8]) -> bool {
        match self.range_mut(off, src.len()) {
            Some(dst) => {
                crate::copy::copy(dst, src);
                true
            }
            None => false,
        }
    }
}
