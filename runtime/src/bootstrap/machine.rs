//! Which machine a process runs on, whatever its host is called.
//!
//! Hosts that are network namespaces or containers of one machine have names (and addresses)
//! of their own but share the machine's kernel and CPUs. Ranks and the launcher group them by
//! the kernel's boot id, which every namespace and container of a running Linux kernel reads
//! the same (`/proc/sys/kernel/random/boot_id`) and which no other machine has. Where there is
//! none (macOS, which has no such containers, or a `/proc` that does not show it), a host is
//! its own machine.

/// This machine's id (the kernel's boot id, 32 hex digits), if it has one.
pub fn id() -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().and_then(|t| normalize(&t))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// A machine id as it travels on business cards and control messages: the hex digits of a
/// UUID, lower case, without dashes; `None` for anything else.
pub fn normalize(text: &str) -> Option<String> {
    let hex: String = text.trim().chars().filter(|&c| c != '-').map(|c| c.to_ascii_lowercase()).collect();
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_normalized_uuids() {
        assert_eq!(
            normalize("5F0E1A3C-1b2d-4c3e-9f00-0123456789ab\n").as_deref(),
            Some("5f0e1a3c1b2d4c3e9f000123456789ab")
        );
        assert_eq!(normalize("not a uuid"), None);
        assert_eq!(normalize(""), None);
        assert_eq!(normalize("5f0e1a3c1b2d4c3e9f000123456789a;"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_has_one_id() {
        // The same on every read: the kernel's, not a random value per process.
        let id = id().expect("Linux has a boot id");
        assert_eq!(super::id(), Some(id));
    }
}
