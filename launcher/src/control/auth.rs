//! Proving a control connection belongs to the job: HMAC-SHA256 keyed by the job secret.
//!
//! mprun sends a random nonce `Nm`; the proxy answers with its host index `h`, its own
//! random nonce `Np` and `HMAC(secret, "mpr-proxy-hello-v1" | Nm | h | Np)`; mprun checks it
//! (in constant time) and answers `HMAC(secret, "mpr-head-welcome-v1" | Np | Nm)`, which the
//! proxy checks before it starts anything. Fresh nonces on both sides make a recorded
//! exchange useless for a later connection; the distinct labels make one side's proof
//! useless as the other's.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::wire::{Bytes32, NONCE_LEN};

type HmacSha256 = Hmac<Sha256>;

const PROXY_LABEL: &[u8] = b"mpr-proxy-hello-v1";
const HEAD_LABEL: &[u8] = b"mpr-head-welcome-v1";

/// A fresh random nonce.
pub(crate) fn nonce() -> std::io::Result<Bytes32> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut n).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(n)
}

fn mac(secret: &str, label: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    m.update(label);
    for p in parts {
        m.update(p);
    }
    m
}

/// The proxy's proof for host `host`.
pub(crate) fn proxy_proof(secret: &str, head_nonce: &Bytes32, host: u32, proxy_nonce: &Bytes32) -> Bytes32 {
    mac(secret, PROXY_LABEL, &[head_nonce, &host.to_le_bytes(), proxy_nonce]).finalize().into_bytes().into()
}

/// Whether `proof` is the proxy's proof for host `host` (constant time).
pub(crate) fn check_proxy(
    secret: &str,
    head_nonce: &Bytes32,
    host: u32,
    proxy_nonce: &Bytes32,
    proof: &Bytes32,
) -> bool {
    mac(secret, PROXY_LABEL, &[head_nonce, &host.to_le_bytes(), proxy_nonce]).verify_slice(proof).is_ok()
}

/// mprun's proof, answering the proxy's nonce.
pub(crate) fn head_proof(secret: &str, proxy_nonce: &Bytes32, head_nonce: &Bytes32) -> Bytes32 {
    mac(secret, HEAD_LABEL, &[proxy_nonce, head_nonce]).finalize().into_bytes().into()
}

/// Whether `proof` is mprun's proof (constant time).
pub(crate) fn check_head(secret: &str, proxy_nonce: &Bytes32, head_nonce: &Bytes32, proof: &Bytes32) -> bool {
    mac(secret, HEAD_LABEL, &[proxy_nonce, head_nonce]).verify_slice(proof).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_check_only_with_the_same_inputs() {
        let (nm, np) = (nonce().unwrap(), nonce().unwrap());
        assert_ne!(nm, np);
        let p = proxy_proof("s3cret", &nm, 2, &np);
        assert!(check_proxy("s3cret", &nm, 2, &np, &p));
        assert!(!check_proxy("other", &nm, 2, &np, &p), "wrong secret");
        assert!(!check_proxy("s3cret", &nm, 3, &np, &p), "other host");
        assert!(!check_proxy("s3cret", &np, 2, &nm, &p), "nonces swapped");
        assert!(!check_proxy("s3cret", &nm, 2, &np, &[0; 32]));
        let h = head_proof("s3cret", &np, &nm);
        assert!(check_head("s3cret", &np, &nm, &h));
        assert!(!check_head("s3cret", &np, &nm, &p), "a proxy proof is not a head proof");
        assert!(!check_proxy("s3cret", &nm, 2, &np, &h), "a head proof is not a proxy proof");
    }
}
