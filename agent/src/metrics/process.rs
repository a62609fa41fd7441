//! The `process_*` metrics every Prometheus client library exports, read from Linux's `/proc/self`, and the
//! store's file system's size and free space.

use std::fmt::Write as _;
use std::path::Path;

/// What `/proc/self/stat` says of this process (fields as `proc(5)` numbers them).
#[derive(Debug, PartialEq)]
pub struct Stat {
    /// utime + stime (14, 15), in clock ticks.
    pub cpu_ticks: u64,
    /// starttime (22): clock ticks after boot.
    pub start_ticks: u64,
    /// vsize (23), bytes.
    pub virtual_bytes: u64,
    /// rss (24), pages.
    pub resident_pages: u64,
}

/// Parses `/proc/self/stat`: the command name (field 2) is in parentheses and may hold spaces and `)`, so the
/// fields are counted from its last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let after = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The soft limit on open files from `/proc/self/limits` (`unlimited` as `u64::MAX`).
pub fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    match soft {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    }
}

/// The boot time (`btime`, Unix seconds) from `/proc/stat`.
pub fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

fn gauge(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

/// Appends the `process_*` metrics; those that cannot be read (not Linux, no `/proc`) are left out.
pub fn render(out: &mut String) {
    let tick = rustix::param::clock_ticks_per_second().max(1) as f64;
    let page = rustix::param::page_size() as u64;
    if let Some(s) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| parse_stat(&t))
    {
        gauge(
            out,
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            s.cpu_ticks as f64 / tick,
        );
        gauge(
            out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            s.resident_pages * page,
        );
        gauge(
            out,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            s.virtual_bytes,
        );
        if let Some(boot) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| parse_boot_time(&t))
        {
            gauge(
                out,
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                boot as f64 + s.start_ticks as f64 / tick,
            );
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        gauge(
            out,
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            dir.count(),
        );
    }
    if let Some(max) = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| parse_max_fds(&t))
    {
        gauge(
            out,
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max,
        );
    }
}

/// Appends the size and the space left (to an unprivileged writer, as the agent is) of the file system that
/// holds the store at `root`; nothing if it cannot be read.
pub fn render_store_filesystem(out: &mut String, root: &Path) {
    let Ok(fs) = rustix::fs::statvfs(root) else {
        return;
    };
    gauge(
        out,
        "foothold_store_filesystem_size_bytes",
        "gauge",
        "Size of the file system that holds the agent's store.",
        fs.f_blocks * fs.f_frsize,
    );
    gauge(
        out,
        "foothold_store_filesystem_avail_bytes",
        "gauge",
        "Bytes of the store's file system the agent can still write.",
        fs.f_bavail * fs.f_frsize,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_names_last_parenthesis() {
        // A name with a space and a `)` of its own, as a process may call itself.
        let text = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 2469 0 0 0 150 25 0 0 20 0 9 0 \
                    1234 987654 321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                cpu_ticks: 175,
                start_ticks: 1234,
                virtual_bytes: 987654,
                resident_pages: 321,
            })
        );
        assert_eq!(parse_stat("4242 (cut short) S 1 2"), None);
    }

    #[test]
    fn the_soft_limit_on_open_files() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(
            parse_max_fds(
                "Max open files            unlimited            unlimited            files"
            ),
            Some(u64::MAX)
        );
        assert_eq!(parse_max_fds("Max processes 10 10 processes"), None);
    }

    #[test]
    fn boot_time() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1764460800\nprocesses 9\n"),
            Some(1_764_460_800)
        );
    }

    #[test]
    fn this_process_reports_itself() {
        let mut out = String::new();
        render(&mut out);
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_start_time_seconds",
            "process_open_fds",
            "process_max_fds",
        ] {
            assert!(out.contains(&format!("\n{name} ")), "{name}: {out}");
        }
        let start: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("process_start_time_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Started within the last day, and not in the future (a second of clock-tick rounding allowed).
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} vs {now}"
        );
    }
}
