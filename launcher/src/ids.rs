//! Per-job identity: a random job id and a random job secret, as lowercase hex.
//!
//! The job id names the job's resources (the runtime names its shared-memory segments
//! `mpr-<jobid>...`); the secret lets ranks recognise each other's connections.

/// The identity of one job.
#[derive(Debug, Clone)]
pub(crate) struct JobIds {
    /// 16 lowercase hex characters (64 random bits).
    pub(crate) jobid: String,
    /// 32 lowercase hex characters (128 random bits).
    pub(crate) secret: String,
}

impl JobIds {
    /// Draws a fresh id and secret from the operating system's random source.
    pub(crate) fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 24];
        getrandom::getrandom(&mut bytes)?;
        Ok(JobIds { jobid: hex(&bytes[..8]), secret: hex(&bytes[8..]) })
    }

    /// The PMI key-value space name of the job.
    pub(crate) fn kvsname(&self) -> String {
        format!("mpr-{}", self.jobid)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let ids = JobIds::generate().unwrap();
        assert_eq!(ids.jobid.len(), 16);
        assert_eq!(ids.secret.len(), 32);
        let lower_hex = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        assert!(lower_hex(&ids.jobid) && lower_hex(&ids.secret));
        assert_ne!(ids.jobid, JobIds::generate().unwrap().jobid);
        assert_eq!(hex(&[0, 0xab, 0x0f]), "00ab0f");
    }
}
