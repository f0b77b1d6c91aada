//! The machine's name, as the identities of leader election candidates and event reporters
//! carry it (client-go reads `os.Hostname()` for both).

/// The host's name: `$HOSTNAME` when set (a pod's name in Kubernetes), else the kernel's;
/// `None` when neither says.
pub(crate) fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}
