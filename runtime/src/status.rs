//! What a completed receive or a probe reports (MPI 4.1, section 3.2.5).

/// Source, tag and size of a received or probed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Rank of the sender in the communicator.
    pub source: usize,
    /// Tag of the message.
    pub tag: i32,
    /// Size of the message in bytes.
    pub bytes: usize,
}

impl Status {
    /// Number of `T` elements in the message (`MPI_Get_count`); `None` if the byte count is
    /// not a whole number of `T`.
    pub fn count<T>(&self) -> Option<usize> {
        let n = std::mem::size_of::<T>();
        if n == 0 {
            return Some(0);
        }
        self.bytes.is_multiple_of(n).then_some(self.bytes / n)
    }
}
