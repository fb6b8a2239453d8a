//! Built-in scenarios: each reproduces one real failure story from the seeds, written as TOML in
//! the same format users pass with `--topology` (so they double as examples).
//!
//! Addresses (see [`crate::plan`]): client 192.168.1.100 behind hop1 192.168.1.1; middle links
//! 100.64.i.0/24; the server is 203.0.113.10 behind the last hop at 203.0.113.1.

use crate::error::LabError;
use crate::topology::Topology;

/// A built-in scenario: name, one-line summary, the seed story it reproduces, and its TOML.
#[derive(Debug, Clone, Copy)]
pub struct ScenarioInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub seed: &'static str,
    pub toml: &'static str,
}

/// Every built-in scenario, in demo order.
pub const SCENARIOS: &[ScenarioInfo] = &[
    ScenarioInfo {
        name: "clean",
        summary: "home NAT with generous timeouts, a 500 Mbit/s line and a 5 ms RTT: the false-alarm control",
        seed: "control: every check must come back healthy here",
        toml: r#"
description = "home NAT, 500 Mbit/s line, no faults, 5 ms RTT: the false-alarm control"
[[hop]]
kind = "nat"
# Linux's default UDP timeouts (30 s after one exchange, 120 s for streams) are below RFC 4787
# REQ-5's 2 min / 5 min: a healthy NAT keeps UDP bindings for 5 min.
conntrack = { udp = 300, udp_stream = 300 }
[[link]]
[[link]]
# A real line has a rate. Unshaped veth runs as fast as the lab host's CPUs, and on a 2-core
# machine that runs both ends, that makes CPU and buffers (truthfully) the limit: not a control.
rate = "500 Mbit/s"
delay_ms = 2.5
"#,
    },
    ScenarioInfo {
        name: "modem-idle",
        summary: "strict NAT that forgets idle TCP connections after 60 s (a scaled-down 2 hours)",
        seed: "an ISP's cable modem/CGNAT dropped idle SSH sessions; keepalives sent after ~2 h never arrived",
        toml: r#"
description = "strict NAT: idle TCP state expires after 60 s and is never rebuilt from mid-stream packets"
[[hop]]
kind = "nat"
strict = true
conntrack = { tcp_established = 60, udp = 30 }
"#,
    },
    ScenarioInfo {
        name: "cgnat-chain",
        summary: "home NAT (600 s) behind a carrier-grade NAT (30 s established, 20 s UDP)",
        seed: "an ISP's CGNAT (the laptop had a 100.64.0.0/10 address), not the home router, forgot idle connections first",
        toml: r#"
description = "home NAT behind a carrier-grade NAT with a shorter established timeout"
[[hop]]
kind = "nat"
conntrack = { tcp_established = 600, udp = 120 }
[[hop]]
kind = "nat"
conntrack = { tcp_established = 30, udp = 20, udp_stream = 30 }
"#,
    },
    ScenarioInfo {
        name: "pmtu-blackhole",
        summary: "1420-byte MTU towards the client, server drops ICMP frag-needed: big downloads stall",
        seed: "Deutsche Telekom customers downloaded at ~100 KB/s from a server whose firewall dropped ICMP 'fragmentation needed'",
        toml: r#"
description = "1420-byte MTU on the access link towards the client; the server's firewall drops ICMP frag-needed"
[[hop]]
kind = "nat"
[[hop]]
[server]
filters = ["drop-icmp-frag-needed"]
[[link]]
[[link]]
[link.down]
mtu = 1420
"#,
    },
    ScenarioInfo {
        name: "nic-ignores-mtu",
        summary: "1420-byte MTU towards the client, ICMP allowed, but the server's NIC sends 1500-byte frames with DF whatever the MSS: downloads crawl",
        seed: "after ICMP was let in, the Mastodon server still sent 1500-byte frames: its VM's emulated rtl8139 NIC segments TSO at a fixed 1500 bytes; `ethtool -K IFACE tso off gso off` fixed it",
        toml: r#"
description = "1420-byte MTU on the access link towards the client; ICMP frag-needed reaches the server, whose NIC cuts TCP offload at 1500 bytes whatever the path MTU"
[[hop]]
kind = "nat"
[[hop]]
[server]
nic_segments_at = 1500
[[link]]
[[link]]
[link.down]
mtu = 1420
"#,
    },
    ScenarioInfo {
        name: "lossy-long-fat",
        summary: "40 ms RTT, 1 Gbit/s, 0.3 % random loss: loss-based congestion control collapses",
        seed: "long fat network with a little loss: CUBIC throughput far below the link rate (Mathis: MSS/RTT·1.22/√p)",
        toml: r#"
description = "40 ms RTT, 1 Gbit/s, 0.3 % random loss each way"
[[hop]]
kind = "nat"
[[link]]
[[link]]
rate = "1 Gbit/s"
delay_ms = 20.0
loss_percent = 0.3
"#,
    },
    ScenarioInfo {
        name: "window-limited",
        summary: "100 ms RTT, 1 Gbit/s, client tcp_rmem max 256 KiB: throughput capped at window/RTT",
        seed: "bulk transfer over a long path crawls because the receive window, not the link, limits it",
        toml: r#"
description = "100 ms RTT, 1 Gbit/s link, client receive buffer capped at 256 KiB"
[client]
sysctl = { "net.ipv4.tcp_rmem" = "4096 131072 262144" }
[[hop]]
kind = "nat"
[[link]]
[[link]]
rate = "1 Gbit/s"
delay_ms = 50.0
"#,
    },
    ScenarioInfo {
        name: "slow-lossy-duplex",
        summary: "100 Mbit/s, 1 ms RTT, 4 % loss in 2-packet bursts towards the server only: uploads crawl",
        seed: "a duplex mismatch broke backups: 94 Mbit/s one way, 29 Mbit/s towards the affected server",
        toml: r#"
description = "100 Mbit/s, 1 ms RTT, loss bursts in the client-to-server direction only (duplex mismatch)"
[[hop]]
[[link]]
[[link]]
rate = "100 Mbit/s"
delay_ms = 0.5
[link.up]
burst_loss = { every_packets = 50, burst_packets = 2 }
"#,
    },
    ScenarioInfo {
        name: "ssh-window-limited",
        summary: "1 Gbit/s, 100 ms RTT, big TCP buffers, sshd on the server: SSH crawls at 2 MiB/RTT",
        seed: "ZFS replication over SSH got 160 Mbit/s where netcat did Gbit/s; OpenSSH's 2 MiB channel window caps a stream at window/RTT (168 Mbit/s at 100 ms)",
        toml: r#"
description = "1 Gbit/s, 100 ms RTT; TCP buffers up to 64 MiB on both ends; OpenSSH sshd on the server"
[client]
sysctl = { "net.ipv4.tcp_rmem" = "4096 131072 67108864", "net.ipv4.tcp_wmem" = "4096 16384 67108864" }
[[hop]]
kind = "nat"
[server]
sshd = true
sysctl = { "net.ipv4.tcp_rmem" = "4096 131072 67108864", "net.ipv4.tcp_wmem" = "4096 16384 67108864" }
[[link]]
[[link]]
rate = "1 Gbit/s"
delay_ms = 50.0
"#,
    },
    ScenarioInfo {
        name: "ssh-cpu-limited",
        summary: "a fast LAN to a server whose CPU is capped at 10 % of a core (cgroup): the cipher decides",
        seed: "a slow CPU cannot encrypt at line rate, and which cipher is faster differs per machine (chacha20-poly1305 vs aes-gcm); measure, don't guess",
        toml: r#"
description = "fast short path (no rate limit, sub-millisecond RTT); the server's CPU is capped at 10 % of a core; OpenSSH sshd on the server"
[[hop]]
[server]
sshd = true
cpu_max_percent = 10
"#,
    },
    ScenarioInfo {
        name: "policed-line",
        summary: "home NAT, 40 ms RTT, a 100 Mbit/s line policed to 20 Mbit/s each way (nftables bucket: 1 s at the rate + 64 KiB): loss without queueing",
        seed: "ISPs and clouds enforce plans with token-bucket policers that drop the excess; policed connections lose ~6x more (Flach et al., SIGCOMM 2016)",
        toml: r#"
description = "home NAT, 40 ms RTT, 100 Mbit/s line with a 20 Mbit/s token-bucket policer (bucket 1 s at the rate + 64 KiB) each way"
[[hop]]
kind = "nat"
[[link]]
[[link]]
rate = "100 Mbit/s"
delay_ms = 20.0
police = { rate = "20 Mbit/s", burst = "64 KiB" }
"#,
    },
    ScenarioInfo {
        name: "bloated-uplink",
        summary: "home NAT, 20 ms RTT, 50 Mbit/s down / 10 Mbit/s up with a 500 ms modem buffer on the uplink: bufferbloat",
        seed: "a bulk upload fills the modem's deep buffer and every interactive ssh session on the line stalls",
        toml: r#"
description = "home NAT, 20 ms RTT, 50 Mbit/s down (20 ms queue), 10 Mbit/s up with a 500 ms queue"
[[hop]]
kind = "nat"
[[link]]
[[link]]
rate = "50 Mbit/s"
queue_ms = 20
delay_ms = 10.0
[link.up]
rate = "10 Mbit/s"
queue_ms = 500
"#,
    },
    ScenarioInfo {
        name: "shared-bottleneck",
        summary: "home NAT, 40 ms RTT, a 50 Mbit/s access line that two neighbours' bulk downloads (CUBIC) keep busy",
        seed: "\"my line is 100 Mbit/s but the test says 30\": a transfer that shares its bottleneck gets its fair share, not the line's rate",
        toml: r#"
description = "home NAT, 40 ms RTT, 50 Mbit/s access line between the home router and the ISP's router, shared with 2 background CUBIC downloads between two other hosts"
[[hop]]
kind = "nat"
[[hop]]
[[link]]
[[link]]
rate = "50 Mbit/s"
delay_ms = 20.0
cross_traffic = { flows = 2, cc = "cubic", direction = "down" }
[[link]]
"#,
    },
    ScenarioInfo {
        name: "v6-ptb-blackhole",
        summary: "dual stack: a 1480-byte IPv6 tunnel link, the server's firewall drops ICMPv6 Packet Too Big; IPv4 is healthy",
        seed: "\"pages hang and ssh freezes after login — only over IPv6\": 6in4/6rd tunnels at 1480 B behind a firewall that filters ICMPv6 type 2",
        toml: r#"
description = "IPv6 crosses a 1480-byte tunnel-like link (IPv4 there is 1500); the server's firewall drops ICMPv6 Packet Too Big"
family = "dual"
[[hop]]
kind = "nat"
[[hop]]
[server]
filters = ["drop-icmpv6-packet-too-big"]
[[link]]
[[link]]
mtu6 = 1480
"#,
    },
    ScenarioInfo {
        name: "v6-firewall-idle",
        summary: "dual stack home router: NAT44 keeps idle TCP 600 s, its RFC 6092 IPv6 firewall forgets after 60 s",
        seed: "IPv6 ssh sessions died while IPv4 ones survived: the home router's IPv6 firewall forgot idle TCP state sooner than its NAT44",
        toml: r#"
description = "home router: NAT44 keeps idle TCP 600 s; its IPv6 stateful firewall (RFC 6092, no NAT) forgets idle TCP after 60 s"
family = "dual"
[[hop]]
kind = "nat"
conntrack = { tcp_established = 600 }
conntrack6 = { tcp_established = 60 }
[[hop]]
"#,
    },
];

/// Names of all built-in scenarios.
pub fn names() -> Vec<&'static str> {
    SCENARIOS.iter().map(|s| s.name).collect()
}

/// Look up a scenario's description.
pub fn info(name: &str) -> Option<&'static ScenarioInfo> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Parse a scenario's topology, its `name` set.
pub fn topology(name: &str) -> Result<Topology, LabError> {
    let info = info(name).ok_or_else(|| LabError::UnknownScenario {
        name: name.to_string(),
        known: names().join(", "),
    })?;
    let mut topo = Topology::from_toml(info.toml)?;
    topo.name = Some(name.to_string());
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{Direction, HopKind};

    #[test]
    fn every_scenario_parses() {
        for s in SCENARIOS {
            let t = topology(s.name).unwrap_or_else(|e| panic!("{}: {e}", s.name));
            assert_eq!(t.name.as_deref(), Some(s.name));
            assert!(t.description.is_some(), "{}", s.name);
        }
        assert_eq!(names().len(), 15);
    }

    #[test]
    fn unknown_scenario_lists_known_ones() {
        let text = topology("nope").unwrap_err().to_string();
        assert!(
            text.contains("modem-idle") && text.contains("nope"),
            "{text}"
        );
    }

    #[test]
    fn scenarios_carry_their_faults() {
        let t = topology("modem-idle").unwrap();
        assert!(t.hops[0].strict && t.hops[0].kind == HopKind::Nat);
        let t = topology("pmtu-blackhole").unwrap();
        assert_eq!(t.link(1).direction(Direction::Down).mtu, 1420);
        assert_eq!(t.link(1).direction(Direction::Up).mtu, 1500);
        let t = topology("nic-ignores-mtu").unwrap();
        assert_eq!(t.server.nic_segments_at, Some(1500));
        assert!(t.server.filters.is_empty(), "ICMP reaches this server");
        assert_eq!(t.link(1).direction(Direction::Down).mtu, 1420);
        let t = topology("window-limited").unwrap();
        assert!(t.client.sysctl.contains_key("net.ipv4.tcp_rmem"));
        let t = topology("slow-lossy-duplex").unwrap();
        assert!(t.link(1).direction(Direction::Up).burst_loss.is_some());
        assert!(t.link(1).direction(Direction::Down).burst_loss.is_none());
        let t = topology("policed-line").unwrap();
        for dir in [Direction::Up, Direction::Down] {
            let d = t.link(1).direction(dir);
            assert_eq!(d.police.map(|p| p.rate.bits_per_second), Some(20_000_000));
        }
        let t = topology("shared-bottleneck").unwrap();
        let x = t
            .link(1)
            .cross_traffic
            .expect("cross traffic on the access line");
        assert_eq!(
            (x.flows, x.cc.as_str(), x.direction),
            (2, "cubic", Direction::Down)
        );
        let t = topology("bloated-uplink").unwrap();
        assert_eq!(t.link(1).direction(Direction::Up).queue_ms, 500.0);
        assert_eq!(t.link(1).direction(Direction::Down).queue_ms, 20.0);
        assert!(topology("clean")
            .unwrap()
            .describe_faults()
            .iter()
            .all(|f| f.contains("NAT") || f.contains("delay") || f.contains("rate")));
    }
}
