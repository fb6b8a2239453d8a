//! Process CPU time (`getrusage(RUSAGE_SELF)`): user + system seconds used by this process so far.
//!
//! Throughput checks sample it at the start and end of a test on both ends; CPU seconds divided
//! by wall seconds is the number of cores kept busy, which tells a CPU-bound transfer from a
//! network-bound one.

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
}
