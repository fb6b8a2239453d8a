//! CPU use: this process's (`getrusage(RUSAGE_SELF)`) and the whole host's (`/proc/stat`).
//!
//! Throughput checks sample both on both ends; process CPU seconds over wall seconds is the
//! number of cores the measuring process kept busy, and the host's busy share over all cores
//! (including softirq work that is charged to no process, other processes and hypervisor steal)
//! says whether the host had CPU to spare at all.

use std::io;

/// User and system CPU seconds consumed by the whole process (all threads).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    pub user_seconds: f64,
    pub system_seconds: f64,
}

impl CpuTime {
    pub fn total(&self) -> f64 {
        self.user_seconds + self.system_seconds
    }
}

/// CPU time of this process so far.
pub fn process_cpu_time() -> io::Result<CpuTime> {
    // SAFETY: rusage is plain old data; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Ok(CpuTime {
        user_seconds: secs(usage.ru_utime),
        system_seconds: secs(usage.ru_stime),
    })
}

/// Number of CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Cumulative CPU time of the whole host (all cores) from the aggregate `cpu` line of
/// `/proc/stat`, in clock ticks (`USER_HZ`). Only differences between two readings mean anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostCpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    /// Time a hypervisor ran something else while this (virtual) machine wanted to run.
    pub steal: u64,
    /// CPUs online when read (`cpuN` lines).
    pub cpus: u32,
}

impl HostCpuTimes {
    /// All ticks (guest time is already inside user/nice, so it is not added again).
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }
    /// Ticks in which a CPU was not idle (waiting for I/O counts as idle).
    pub fn busy(&self) -> u64 {
        self.total() - self.idle - self.iowait
    }
}

/// Parse `/proc/stat` text: the aggregate `cpu` line and the number of `cpuN` lines.
pub fn parse_proc_stat(text: &str) -> Option<HostCpuTimes> {
    let mut lines = text.lines();
    let first = lines.next()?;
    let mut fields = first.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.map_while(|f| f.parse().ok()).collect();
    if v.len() < 4 {
        return None;
    }
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    let cpus = text
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count() as u32;
    Some(HostCpuTimes {
        user: at(0),
        nice: at(1),
        system: at(2),
        idle: at(3),
        iowait: at(4),
        irq: at(5),
        softirq: at(6),
        steal: at(7),
        cpus: cpus.max(1),
    })
}

/// The host's cumulative CPU times now.
pub fn host_cpu_times() -> io::Result<HostCpuTimes> {
    let text = std::fs::read_to_string("/proc/stat")?;
    parse_proc_stat(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/stat format"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let before = process_cpu_time().unwrap();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < 50 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = process_cpu_time().unwrap();
        assert!(after.total() > before.total());
        assert!(available_cpus() >= 1);
    }

    #[test]
    fn proc_stat_parses_and_busy_excludes_idle_and_iowait() {
        let text = "cpu  55663 23591 7947 104530 933 0 1881 192 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu1 1 2 3 4 5 6 7 8 0 0\nintr 1 2\n";
        let t = parse_proc_stat(text).unwrap();
        assert_eq!((t.user, t.nice, t.steal, t.cpus), (55663, 23591, 192, 2));
        assert_eq!(t.total(), 55663 + 23591 + 7947 + 104530 + 933 + 1881 + 192);
        assert_eq!(t.busy(), t.total() - 104530 - 933);
        // Old kernels without steal/iowait columns still parse.
        assert_eq!(parse_proc_stat("cpu 1 2 3 4\n").unwrap().steal, 0);
        assert!(parse_proc_stat("intr 1\n").is_none() && parse_proc_stat("").is_none());
        let now = host_cpu_times().unwrap();
        assert!(now.total() > 0 && now.cpus >= 1);
    }
}
