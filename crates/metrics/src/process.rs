//! The standard `process_*` metrics (the names Prometheus' Go and Python clients export), read
//! from `/proc/self` at each scrape. prometheus-client has no process collector of its own, and
//! these few fields of `/proc/self/stat` do not warrant a procfs dependency.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Exports CPU time, memory, descriptors, threads and start time of this process.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What one scrape read of the process.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU seconds.
    pub cpu_seconds: f64,
    /// Resident set size in bytes.
    pub resident_bytes: i64,
    /// Virtual memory size in bytes.
    pub virtual_bytes: i64,
    /// Threads.
    pub threads: i64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: i64,
    /// The soft limit on file descriptors.
    pub max_fds: i64,
}

impl ProcessStats {
    /// Reads this process' figures; `None` where `/proc` is not mounted.
    pub fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        // SAFETY-free: sysconf and getrlimit only read.
        let ticks = sysconf(libc::_SC_CLK_TCK).unwrap_or(100) as f64;
        let page = sysconf(libc::_SC_PAGESIZE).unwrap_or(4096);
        let mut s = parse_stat(&stat, &boot, ticks, page)?;
        s.open_fds = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count() as i64)
            .unwrap_or(0);
        s.max_fds = rlimit_nofile().unwrap_or(0);
        Some(s)
    }
}

fn sysconf(name: libc::c_int) -> Option<i64> {
    #[allow(unsafe_code)]
    // SAFETY: sysconf takes an integer and returns one; it touches no memory of ours.
    let v = unsafe { libc::sysconf(name) };
    (v > 0).then_some(v as i64)
}

fn rlimit_nofile() -> Option<i64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    #[allow(unsafe_code)]
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    (rc == 0).then(|| r.rlim_cur.min(i64::MAX as u64) as i64)
}

/// Parses `/proc/self/stat` (fields after the parenthesised command name, which may hold
/// spaces) with the boot time from `/proc/stat`.
fn parse_stat(stat: &str, proc_stat: &str, ticks: f64, page: i64) -> Option<ProcessStats> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state); field n is at index n - 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<i64> { f.get(n - 3)?.parse().ok() };
    let utime = field(14)?;
    let stime = field(15)?;
    let threads = field(20)?;
    let start_ticks = field(22)?;
    let vsize = field(23)?;
    let rss = field(24)?;
    let btime: f64 = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(ProcessStats {
        cpu_seconds: (utime + stime) as f64 / ticks,
        resident_bytes: rss * page,
        virtual_bytes: vsize,
        threads,
        start_time_seconds: btime + start_ticks as f64 / ticks,
        open_fds: 0,
        max_fds: 0,
    })
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, f64); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_bytes as f64,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                s.max_fds as f64,
            ),
            ("process_threads", "Number of OS threads.", s.threads as f64),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        // A command name with spaces and a parenthesis, as the kernel writes it.
        let stat = "4242 (ferry (serve) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 50 0 0 20 0 7 0 12345 104857600 2560 18446744073709551615";
        let proc_stat = "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n";
        let s = parse_stat(stat, proc_stat, 100.0, 4096).expect("parses");
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.threads, 7);
        assert_eq!(s.virtual_bytes, 104_857_600);
        assert_eq!(s.resident_bytes, 2560 * 4096);
        assert_eq!(s.start_time_seconds, 1_700_000_123.45);
        assert!(parse_stat("garbage", proc_stat, 100.0, 4096).is_none());
        assert!(parse_stat(stat, "no boot time\n", 100.0, 4096).is_none());
    }

    #[test]
    fn this_process_is_read() {
        let s = ProcessStats::read().expect("/proc is mounted");
        assert!(s.threads >= 1);
        assert!(s.resident_bytes > 0);
        assert!(s.open_fds >= 3, "{s:?}");
        assert!(s.max_fds >= s.open_fds);
    }
}
