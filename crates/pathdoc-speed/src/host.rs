//! This host's TCP memory and congestion-control settings, read from /proc/sys (the network
//! namespace of the calling thread), for the remedies that name the exact sysctl to change.

use crate::spec::HostTcpSettings;

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn triple(path: &str) -> Option<[u64; 3]> {
    let text = read(path)?;
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.len() == 3).then(|| [v[0], v[1], v[2]])
}

/// Read tcp_rmem, tcp_wmem, rmem_max, wmem_max, the default congestion control and the CPU count.
pub fn tcp_settings() -> HostTcpSettings {
    HostTcpSettings {
        tcp_rmem: triple("/proc/sys/net/ipv4/tcp_rmem"),
        tcp_wmem: triple("/proc/sys/net/ipv4/tcp_wmem"),
        rmem_max: read("/proc/sys/net/core/rmem_max").and_then(|s| s.parse().ok()),
        wmem_max: read("/proc/sys/net/core/wmem_max").and_then(|s| s.parse().ok()),
        default_cc: read("/proc/sys/net/ipv4/tcp_congestion_control"),
        cpus: pathdoc_sys::cpu_usage::available_cpus() as u32,
        host_id: read("/proc/sys/kernel/random/boot_id").map(|id| host_id(&id)),
    }
}

/// A stable, non-reversible tag of the kernel's boot id (FNV-1a, 64 bit): the same on both ends
/// of a test when they share one kernel, without sending the boot id itself.
pub fn host_id(boot_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in boot_id.trim().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_hosts_settings() {
        let s = super::tcp_settings();
        let r = s.tcp_rmem.expect("tcp_rmem");
        assert!(r[0] <= r[1] && r[1] <= r[2]);
        assert!(s.default_cc.is_some() && s.cpus >= 1);
        assert_eq!(s.host_id, super::tcp_settings().host_id, "stable");
        assert_eq!(super::host_id("a\n"), super::host_id("a"));
        assert_ne!(super::host_id("a"), super::host_id("b"));
    }
}
