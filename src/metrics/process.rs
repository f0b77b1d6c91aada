//! The process's own metrics, under the names and help texts of the Prometheus client
//! libraries' process collector (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! ...), so dashboards built for Go operators read a ctrlkit one unchanged.
//!
//! # Contract
//! - Linux only: read from `/proc/self` at each scrape, without libc. On other systems
//!   [`ProcessStats::read`] gives nothing and no `process_*` series is exported.
//! - Each value is read on its own: one file the process may not read (a hardened `/proc`)
//!   leaves out its series, not the others.
//! - CPU time and the start time are in the kernel's `USER_HZ` ticks, fixed at 100 a second
//!   for user space on every Linux architecture (Go's `procfs` assumes the same).

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The gauges' names and help texts, as the Prometheus client libraries write them.
const GAUGES: [(&str, &str); 5] = [
    ("process_open_fds", "Number of open file descriptors."),
    ("process_max_fds", "Maximum number of open file descriptors."),
    ("process_virtual_memory_bytes", "Virtual memory size in bytes."),
    ("process_resident_memory_bytes", "Resident memory size in bytes."),
    ("process_start_time_seconds", "Start time of the process since unix epoch in seconds."),
];

/// One reading of the process's metrics; a field is `None` where it could not be read.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct ProcessStats {
    /// User and system CPU time, in seconds.
    cpu_seconds: Option<f64>,
    /// Resident memory, in bytes.
    resident_memory_bytes: Option<u64>,
    /// Virtual memory, in bytes.
    virtual_memory_bytes: Option<u64>,
    /// Open file descriptors.
    open_fds: Option<u64>,
    /// The soft limit on open file descriptors, when it is a number.
    max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// Reads `/proc/self` now; all `None` off Linux.
    pub(crate) fn read() -> Self {
        #[cfg(target_os = "linux")]
        {
            use linux::*;
            let stat = std::fs::read_to_string("/proc/self/stat").ok();
            let stat = stat.as_deref().and_then(Stat::parse);
            let status = std::fs::read_to_string("/proc/self/status").ok();
            let limits = std::fs::read_to_string("/proc/self/limits").ok();
            let boot_time = std::fs::read_to_string("/proc/stat").ok();
            Self {
                cpu_seconds: stat.map(|s| (s.utime as f64 + s.stime as f64) / TICKS_PER_SECOND),
                resident_memory_bytes: status.as_deref().and_then(|s| status_kib(s, "VmRSS:")),
                virtual_memory_bytes: stat.map(|s| s.vsize),
                open_fds: std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64),
                max_fds: limits.as_deref().and_then(max_open_files),
                start_time_seconds: stat
                    .zip(boot_time.as_deref().and_then(btime))
                    .map(|(s, boot)| boot as f64 + s.starttime as f64 / TICKS_PER_SECOND),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            Self::default()
        }
    }

    /// Writes each value read as its metric.
    pub(crate) fn encode(&self, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        if let Some(seconds) = self.cpu_seconds {
            let counter = ConstCounter::new(seconds);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?)?;
        }
        let values = [
            self.open_fds.map(|n| n as f64),
            self.max_fds.map(|n| n as f64),
            self.virtual_memory_bytes.map(|n| n as f64),
            self.resident_memory_bytes.map(|n| n as f64),
            self.start_time_seconds,
        ];
        for ((name, help), value) in GAUGES.into_iter().zip(values) {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        Ok(())
    }
}

/// Parsers of the files in `/proc`, as the kernel writes them.
#[cfg(target_os = "linux")]
mod linux {
    /// `USER_HZ`: the unit of `/proc`'s tick counts, 100 on every Linux architecture.
    pub(super) const TICKS_PER_SECOND: f64 = 100.0;

    /// The fields of `/proc/self/stat` read here.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(super) struct Stat {
        pub(super) utime: u64,
        pub(super) stime: u64,
        pub(super) starttime: u64,
        pub(super) vsize: u64,
    }

    impl Stat {
        /// Parses `pid (comm) state ppid ...`: the command may hold spaces and parentheses,
        /// so the fields are counted from after its last `)`.
        pub(super) fn parse(text: &str) -> Option<Self> {
            let (_, rest) = text.rsplit_once(')')?;
            // After the command, field 3 (`state`) is index 0.
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
            Some(Self {
                utime: field(14)?,
                stime: field(15)?,
                starttime: field(22)?,
                vsize: field(23)?,
            })
        }
    }

    /// A `Name:   1234 kB` line of `/proc/self/status`, in bytes.
    pub(super) fn status_kib(status: &str, name: &str) -> Option<u64> {
        let line = status.lines().find_map(|l| l.strip_prefix(name))?;
        let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
        kib.checked_mul(1024)
    }

    /// The soft limit of `Max open files` in `/proc/self/limits`; `None` when unlimited.
    pub(super) fn max_open_files(limits: &str) -> Option<u64> {
        let line = limits.lines().find_map(|l| l.strip_prefix("Max open files"))?;
        line.split_whitespace().next()?.parse().ok()
    }

    /// The boot time (`btime`, seconds since the epoch) in `/proc/stat`.
    pub(super) fn btime(stat: &str) -> Option<u64> {
        stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    use super::linux::{Stat, btime, max_open_files, status_kib};

    #[test]
    fn a_command_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 3 0 \
                    12345 987654 300 18446744073709551615";
        let parsed = Stat::parse(stat).expect("a stat line");
        assert_eq!(parsed, Stat { utime: 250, stime: 150, starttime: 12345, vsize: 987654 });
        assert_eq!(Stat::parse("42 (cut short"), None);
    }

    #[test]
    fn limits_status_and_boot_time_are_read_as_the_kernel_writes_them() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63459                63459                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(max_open_files(unlimited), None);
        assert_eq!(status_kib("Name:\tx\nVmRSS:\t    2048 kB\n", "VmRSS:"), Some(2048 * 1024));
        assert_eq!(btime("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"), Some(1_700_000_000));
    }
}
