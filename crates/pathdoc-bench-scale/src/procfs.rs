//! Readings from /proc: a process's memory and CPU time, and the kernel's socket counters.

use std::time::Duration;

use anyhow::Context;

/// Memory of one process, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// Resident set size (`VmRSS`).
    pub rss: u64,
    /// Private anonymous memory (`Anonymous` in smaps_rollup): heap and stacks, no file pages.
    pub anonymous: u64,
}

pub fn memory(pid: u32) -> anyhow::Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let rss = kib_field(&status, "VmRSS:").context("no VmRSS in /proc/PID/status")?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let anonymous = kib_field(&rollup, "Anonymous:").unwrap_or(0);
    Ok(Memory { rss, anonymous })
}

/// User + system CPU time the process has used so far.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat =
        pathdoc_sys::process::stat(pid).with_context(|| format!("reading /proc/{pid}/stat"))?;
    Ok(Duration::from_secs_f64(stat.cpu_seconds))
}

/// Kernel-wide TCP socket counters (both ends of every loopback connection count).
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelSockets {
    /// Sockets in use (`TCP: inuse` of /proc/net/sockstat).
    pub tcp_inuse: u64,
    /// Socket buffer memory charged to TCP, bytes (`TCP: mem`, pages).
    pub tcp_buffer_bytes: u64,
    /// Kernel slab memory, bytes (`Slab` of /proc/meminfo): socket structures live here.
    pub slab_bytes: u64,
}

pub fn kernel_sockets() -> KernelSockets {
    let sockstat = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    let mut out = KernelSockets::default();
    if let Some(line) = sockstat.lines().find(|l| l.starts_with("TCP:")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let value = |key: &str| -> u64 {
            words
                .iter()
                .position(|w| *w == key)
                .and_then(|i| words.get(i + 1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
        out.tcp_inuse = value("inuse");
        out.tcp_buffer_bytes = value("mem") * page;
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    out.slab_bytes = kib_field(&meminfo, "Slab:").unwrap_or(0);
    out
}

/// Value of a `Key:   123 kB` line, in bytes.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    Some(pathdoc_sys::process::status_number(text, key)? * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        let m = memory(me).unwrap();
        assert!(m.rss > 0);
        cpu_time(me).unwrap();
        assert_eq!(kib_field("VmRSS:\t  12 kB\n", "VmRSS:"), Some(12 * 1024));
    }
}
