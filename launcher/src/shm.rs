//! Removing the job's shared-memory segments after the job.
//!
//! The runtime names its POSIX shared-memory segments `mpr-<jobid>...`; a rank killed by a
//! signal cannot unlink its own, so mprun removes every one left once all ranks are gone.
//! Where POSIX shared memory is not visible as files (macOS), there is nothing to list.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Where Linux shows POSIX shared-memory segments as files.
const SHM_DIR: &str = "/dev/shm";

/// Removes every segment of job `jobid`; returns how many were removed.
pub(crate) fn remove_segments(jobid: &str) -> io::Result<usize> {
    remove_prefixed(Path::new(SHM_DIR), &format!("mpr-{jobid}"))
}

fn remove_prefixed(dir: &Path, prefix: &str) -> io::Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if entry.file_name().as_bytes().starts_with(prefix.as_bytes()) && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_only_the_jobs_files() {
        let dir = std::env::temp_dir().join(format!("mpr-shm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["mpr-abc", "mpr-abc-0-ring", "mpr-abd", "other"] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        assert_eq!(remove_prefixed(&dir, "mpr-abc").unwrap(), 2);
        let mut left: Vec<_> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["mpr-abd", "other"]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(remove_prefixed(&dir, "x").unwrap(), 0);
    }
}
