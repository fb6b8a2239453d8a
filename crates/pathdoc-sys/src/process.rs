//! Other processes as `/proc` shows them: CPU time, parent, name, owner.
//!
//! The one job of this module is reading `/proc/PID/{stat,status}`, so a check can tell how busy
//! a process (an `ssh`, an `sshd`) kept its CPU and find a process's ancestors. `/proc/PID/stat`
//! is world-readable, also for non-dumpable processes such as sshd's session child.

use std::io;

use serde::{Deserialize, Serialize};

/// A process's state from one read of `/proc/PID/stat`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcStat {
    pub pid: u32,
    /// The kernel's name of the process (`comm`, at most 15 bytes: `sshd`, `ssh`, `cat`).
    pub comm: String,
    pub ppid: u32,
    /// User + system CPU seconds of all its threads so far.
    pub cpu_seconds: f64,
}

/// Read `/proc/PID/stat`.
pub fn stat(pid: u32) -> io::Result<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(pid, &text, clock_ticks())
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn parse_stat(pid: u32, text: &str, ticks: f64) -> io::Result<ProcStat> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: {text:?}"),
        )
    };
    // comm is in parentheses and may itself contain ") ": split at the last one.
    let open = text.find('(').ok_or_else(bad)?;
    let close = text.rfind(')').ok_or_else(bad)?;
    let comm = text.get(open + 1..close).ok_or_else(bad)?.to_string();
    let rest: Vec<&str> = text
        .get(close + 1..)
        .ok_or_else(bad)?
        .split_whitespace()
        .collect();
    // rest[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
    let field = |n: usize| -> io::Result<u64> {
        rest.get(n - 3).and_then(|s| s.parse().ok()).ok_or_else(bad)
    };
    Ok(ProcStat {
        pid,
        comm,
        ppid: field(4)? as u32,
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
    })
}

/// Real uid of a process (`Uid:` in `/proc/PID/status`).
pub fn uid(pid: u32) -> io::Result<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status_number(&text, "Uid:")
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Uid line"))
}

/// The first number of the line starting with `key` in a `/proc` file of `Key:  123 kB` lines
/// (`/proc/PID/status`, `/proc/meminfo`, `smaps_rollup`), as written (kB stay kB).
pub fn status_number(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What a process holds: descriptors, threads and resident memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Entries of `/proc/PID/fd`.
    pub fds: u64,
    /// `Threads:` of `/proc/PID/status`.
    pub threads: u64,
    /// `VmRSS:` of `/proc/PID/status`, in bytes.
    pub rss_bytes: u64,
}

/// A process's [`Footprint`]; what cannot be read (the process is gone, not ours) counts 0.
pub fn footprint(pid: u32) -> Footprint {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key| status_number(&status, key).unwrap_or(0);
    Footprint {
        fds,
        threads: field("Threads:"),
        rss_bytes: field("VmRSS:") * 1024,
    }
}

/// The first ancestor of `pid` (itself included) whose name satisfies `is_match`, looking at
/// most `max_steps` levels up.
pub fn ancestor_named(
    pid: u32,
    max_steps: usize,
    is_match: impl Fn(&str) -> bool,
) -> io::Result<Option<ProcStat>> {
    let mut current = stat(pid)?;
    for _ in 0..=max_steps {
        if is_match(&current.comm) {
            return Ok(Some(current));
        }
        if current.ppid <= 1 {
            return Ok(None);
        }
        current = stat(current.ppid)?;
    }
    Ok(None)
}

/// The whole machine's CPU time from the `cpu` line of `/proc/stat`, in seconds summed over all
/// CPUs. Busy = user + nice + system + irq + softirq + steal (steal: a VM's CPU taken by the host).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostCpu {
    pub busy_seconds: f64,
    pub total_seconds: f64,
    /// Online CPUs counted in the line.
    pub cpus: u32,
}

/// Read `/proc/stat` (through [`crate::cpu_usage::host_cpu_times`], the one parser of it).
pub fn host_cpu() -> io::Result<HostCpu> {
    Ok(HostCpu::from_ticks(
        &crate::cpu_usage::host_cpu_times()?,
        clock_ticks(),
    ))
}

impl HostCpu {
    /// Seconds from `/proc/stat`'s clock ticks (`ticks` per second).
    pub fn from_ticks(t: &crate::cpu_usage::HostCpuTimes, ticks: f64) -> HostCpu {
        HostCpu {
            busy_seconds: t.busy() as f64 / ticks,
            total_seconds: t.total() as f64 / ticks,
            cpus: t.cpus,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let text = "1234 (my ) proc) S 77 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 1 1 1";
        let s = parse_stat(1234, text, 100.0).unwrap();
        assert_eq!(s.comm, "my ) proc");
        assert_eq!(s.ppid, 77);
        assert!((s.cpu_seconds - 3.0).abs() < 1e-9);
        assert!(parse_stat(1, "garbage", 100.0).is_err());
        assert!(parse_stat(1, "1 (x) S", 100.0).is_err());
    }

    #[test]
    fn parses_proc_stat() {
        let text = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 1";
        let h = HostCpu::from_ticks(&crate::cpu_usage::parse_proc_stat(text).unwrap(), 100.0);
        assert_eq!(h.cpus, 2);
        assert!((h.busy_seconds - 1.5).abs() < 1e-9);
        assert!((h.total_seconds - 10.0).abs() < 1e-9);
        assert!(host_cpu().unwrap().cpus >= 1);
    }

    #[test]
    fn reads_this_process_and_its_ancestors() {
        let me = stat(std::process::id()).unwrap();
        assert_eq!(me.pid, std::process::id());
        assert!(me.cpu_seconds >= 0.0);
        assert_eq!(
            uid(std::process::id()).unwrap(),
            nix::unistd::getuid().as_raw()
        );
        let found = ancestor_named(std::process::id(), 0, |c| c == me.comm).unwrap();
        assert_eq!(found.unwrap().pid, me.pid);
        let none = ancestor_named(std::process::id(), 3, |c| c == "no-such-process-name").unwrap();
        assert!(none.is_none());
        assert!(stat(u32::MAX).is_err());
    }

    #[test]
    fn reads_status_numbers_and_this_process_footprint() {
        let status = "Name:\tx\nThreads:\t3\nVmRSS:\t  12 kB\nVmRSSx: 9\n";
        assert_eq!(status_number(status, "VmRSS:"), Some(12));
        assert_eq!(status_number(status, "Threads:"), Some(3));
        assert_eq!(status_number(status, "Name:"), None);
        assert_eq!(status_number(status, "Slab:"), None);
        let me = footprint(std::process::id());
        assert!(me.fds > 0 && me.threads >= 1 && me.rss_bytes > 0, "{me:?}");
        assert_eq!(footprint(u32::MAX), Footprint::default());
    }
}
