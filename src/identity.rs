//! The machine's name and this process's random mark, as the identities of leader election
//! candidates, shards and event reporters carry them (client-go reads `os.Hostname()`;
//! controller-runtime adds a UUID to it, since in a container the name is not unique).

use std::sync::OnceLock;

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

/// How many characters the process's mark has: 36^10, about 52 bits, makes two replicas
/// that share a name sharing a mark too unlikely beyond concern, and leaves a shard id room
/// for 52 characters of the host's name within a label value's 63.
const MARK_LEN: usize = 10;

/// A mark unique to this process, the same at every call: 10 lowercase letters and digits
/// drawn from the operating system's random source when the process first asks. Neither the
/// host's name (shared by the replicas of a template with `spec.hostname`) nor the process
/// id (1 in every container) tells replicas apart.
pub(crate) fn process_mark() -> &'static str {
    static MARK: OnceLock<String> = OnceLock::new();
    MARK.get_or_init(|| {
        let mut bytes = [0u8; 8];
        let mut random = match getrandom::fill(&mut bytes) {
            Ok(()) => u64::from_le_bytes(bytes),
            // No OS randomness: std's hasher keys, which come from the same source when
            // there is one, mixed with the time and the process id.
            Err(_) => {
                use std::hash::{BuildHasher, RandomState};
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                RandomState::new().hash_one((now.ok(), std::process::id()))
            }
        };
        const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        (0..MARK_LEN)
            .map(|_| {
                let digit = DIGITS[(random % 36) as usize];
                random /= 36;
                char::from(digit)
            })
            .collect()
    })
}

/// A shard id for `host` and `mark`, valid as a Lease name and a label value whatever the
/// host's name: lowercased, every character other than a letter or a digit made a `-`,
/// trimmed of `-` and cut to 52 characters, then `-<mark>` (`web-1-k3x9q2m7zp`).
pub(crate) fn shard_id(host: &str, mark: &str) -> String {
    let name: String = host
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect();
    let name: String = name.trim_matches('-').chars().take(63 - 1 - MARK_LEN).collect();
    match name.trim_end_matches('-') {
        "" => format!("shard-{mark}"),
        name => format!("{name}-{mark}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A label value (and a DNS label, as a Lease name): at most 63 characters of lowercase
    /// letters, digits and `-`, beginning and ending with a letter or a digit.
    fn is_label_value(s: &str) -> bool {
        let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        s.len() <= 63
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && edge(s.chars().next())
            && edge(s.chars().last())
    }

    #[test]
    fn a_shard_id_is_a_valid_label_value_for_any_host_name() {
        let mark = process_mark();
        assert_eq!(mark.len(), MARK_LEN);
        assert_eq!(mark, process_mark(), "one mark per process");
        assert_eq!(shard_id("web-0", "k3x9q2m7zp"), "web-0-k3x9q2m7zp");
        let long = "Ip_10-0-0-1.EC2.internal.".repeat(4);
        for host in [
            "web-0",
            "WEB_0",
            long.as_str(),
            "-.-",
            "",
            "ünïcødé-host",
            "a".repeat(200).as_str(),
            "node-1.example.com.",
        ] {
            let id = shard_id(host, mark);
            assert!(is_label_value(&id), "{host:?} gave {id:?}");
            assert!(id.ends_with(mark), "{id}");
        }
        assert_eq!(shard_id("Node_1.Example.com", "m"), "node-1-example-com-m");
        assert_eq!(shard_id("-.-", "m"), "shard-m");
    }
}
