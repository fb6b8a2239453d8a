//! The host's (network namespace's) counters of ICMP errors received, from `/proc/net/snmp`
//! (`Icmp: InDestUnreachs`, IPv4 type 3 of every code, counted after the firewall's input hook)
//! and `/proc/net/snmp6` (`Icmp6InPktTooBigs`). Read before and after a transfer, the difference
//! says whether ICMP "fragmentation needed"/"packet too big" kept arriving during it.

/// IPv4 destination-unreachable plus IPv6 packet-too-big messages received so far, or `None`
/// when neither file can be read.
pub fn too_big_received() -> Option<u64> {
    let v4 = std::fs::read_to_string("/proc/net/snmp")
        .ok()
        .and_then(|t| snmp_value(&t, "Icmp:", "InDestUnreachs"));
    let v6 = std::fs::read_to_string("/proc/net/snmp6")
        .ok()
        .and_then(|t| snmp6_value(&t, "Icmp6InPktTooBigs"));
    match (v4, v6) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// A field of a `/proc/net/snmp` section: a header line of names, then a line of values.
fn snmp_value(text: &str, section: &str, field: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(section));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// A field of `/proc/net/snmp6` (`name value` per line).
fn snmp6_value(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut parts = l.split_whitespace();
        (parts.next()? == field).then(|| parts.next()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_files_formats() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 2 64\nIcmp: InMsgs InErrors InCsumErrors InDestUnreachs InTimeExcds\nIcmp: 9 0 0 7 2\nIcmpMsg: InType3\nIcmpMsg: 7\n";
        assert_eq!(snmp_value(snmp, "Icmp:", "InDestUnreachs"), Some(7));
        assert_eq!(snmp_value(snmp, "Icmp:", "Nope"), None);
        let snmp6 = "Ip6InTooBigErrors               \t0\nIcmp6InPktTooBigs               \t12\n";
        assert_eq!(snmp6_value(snmp6, "Icmp6InPktTooBigs"), Some(12));
        assert!(too_big_received().is_some());
    }
}
