//! nftables rulesets for lab hosts, generated as text (pure, unit-tested) and loaded with
//! `nft -f -` inside the host's namespace.
//!
//! - NAT hops: `masquerade` out of `wan0`; inbound on `wan0` only established/related traffic
//!   (and echo requests to the hop) passes, everything else is dropped silently, like a CPE or CGN.
//!   `strict` adds `ct state invalid drop` so mid-stream packets of a forgotten connection are
//!   dropped instead of re-creating state (together with `nf_conntrack_tcp_loose=0`).
//! - Filters: `drop-icmp-frag-needed` drops ICMP type 3 code 4 in input, forward and output;
//!   `drop-icmpv6-packet-too-big` ICMPv6 type 2 in the same places.
//! - MSS clamp: `tcp option maxseg size set N` on SYNs in forward and output (the `inet` table
//!   sees IPv4 and IPv6 SYNs alike).
//! - IPv6 through a NAT hop: the same `inet` rules make it an RFC 6092 stateful firewall
//!   (established/related in, new from outside dropped; neighbour discovery and echo requests to
//!   the hop itself allowed); `nat66` adds `table ip6 pathdoc_nat6` masquerade; `conntrack6`
//!   timeouts are `ct timeout` objects set on the first packet of each forwarded IPv6 flow.
//! - Random loss, loss bursts and policers are applied where packets are *received* (netdev ingress of the
//!   receiving interface), so the sender's stack sees a real loss on the wire, not a local error.

use std::fmt::Write;

use crate::plan::{HostPlan, Plan};
use crate::topology::{Family, Filter, HopSpec, HostSpec, Police, Topology};

/// Name of the lab's nftables tables in each namespace.
pub const TABLE: &str = "pathdoc";

/// Probability scale for `numgen random mod`: loss resolution is 1e-6.
const LOSS_SCALE: u64 = 1_000_000;

/// The ruleset for one host, or `None` when the host needs no rules.
pub fn ruleset(topology: &Topology, plan: &Plan, host: &HostPlan) -> Option<String> {
    let spec: HostSpec = topology.host_spec(&host.name).unwrap_or_default();
    let hop: Option<&HopSpec> = if host.position >= 1 && host.position <= topology.hops.len() {
        Some(&topology.hops[host.position - 1])
    } else {
        None
    };
    let nat = host.is_nat;
    let strict = hop.map(|h| h.strict).unwrap_or(false);
    let family = topology.family;

    let mut input = Vec::new();
    let mut forward = Vec::new();
    let mut output = Vec::new();

    if let Some(mss) = spec.mss_clamp {
        let rule = format!(
            "tcp flags syn tcp option maxseg size > {mss} tcp option maxseg size set {mss}"
        );
        forward.push(rule.clone());
        output.push(rule);
    }
    for f in &spec.filters {
        match f {
            Filter::DropIcmpFragNeeded => {
                let rule = "icmp type destination-unreachable icmp code frag-needed counter drop"
                    .to_string();
                input.push(rule.clone());
                forward.push(rule.clone());
                output.push(rule);
            }
            Filter::DropIcmpv6PacketTooBig => {
                let rule = "icmpv6 type packet-too-big counter drop".to_string();
                input.push(rule.clone());
                forward.push(rule.clone());
                output.push(rule);
            }
        }
    }
    let mut objects = Vec::new();
    if nat {
        for (proto, policy) in hop.map(|h| h.conntrack6.nft_policies()).unwrap_or_default() {
            objects.push(format!(
                "  ct timeout v6_{proto} {{\n    protocol {proto}; l3proto ip6;\n    policy = {{ {policy} }}\n  }}"
            ));
            forward.push(format!(
                "meta nfproto ipv6 meta l4proto {proto} ct state new ct timeout set \"v6_{proto}\""
            ));
        }
        if strict {
            forward.push("ct state invalid counter drop".into());
            input.push("ct state invalid counter drop".into());
        }
        forward.push("iifname \"wan0\" ct state established,related accept".into());
        forward.push("iifname \"wan0\" counter drop".into());
        input.push("iifname \"wan0\" ct state established,related accept".into());
        input.push("iifname \"wan0\" icmp type echo-request accept".into());
        if family.has_v6() {
            input.push(
                "iifname \"wan0\" icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, echo-request } accept"
                    .into(),
            );
        }
        input.push("iifname \"wan0\" counter drop".into());
    }

    let mut text = String::new();
    let mut any = false;
    if !(input.is_empty() && forward.is_empty() && output.is_empty()) {
        any = true;
        let _ = writeln!(text, "table inet {TABLE} {{");
        for o in &objects {
            let _ = writeln!(text, "{o}");
        }
        for (chain, rules) in [
            ("input", &input),
            ("forward", &forward),
            ("output", &output),
        ] {
            let _ = writeln!(
                text,
                "  chain {chain} {{\n    type filter hook {chain} priority filter; policy accept;"
            );
            for r in rules.iter() {
                let _ = writeln!(text, "    {r}");
            }
            let _ = writeln!(text, "  }}");
        }
        let _ = writeln!(text, "}}");
    }
    for (table, on) in [
        ("ip", nat && family.has_v4()),
        ("ip6", host.is_nat66 && family.has_v6()),
    ] {
        if on {
            any = true;
            let suffix = if table == "ip" { "nat" } else { "nat6" };
            let _ = writeln!(
                text,
                "table {table} {TABLE}_{suffix} {{\n  chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n    oifname \"wan0\" masquerade\n  }}\n}}"
            );
        }
    }
    let ingress = ingress_tables(plan, host, family);
    any |= !ingress.is_empty();
    text.push_str(&ingress);
    any.then_some(text)
}

/// A `netdev` table per interface where this host receives with loss, burst loss or a policer:
/// the link's impairments act at the receiving end's ingress.
fn ingress_tables(plan: &Plan, host: &HostPlan, family: Family) -> String {
    let mut text = String::new();
    for iface in &host.ifaces {
        let link = &plan.links[iface.link];
        // lan0 receives the link's "up" direction, wan0 its "down" direction.
        let dir = if iface.name == "lan0" {
            &link.up
        } else {
            &link.down
        };
        let mut rules = Vec::new();
        let ip = protocols(family);
        if dir.loss_percent > 0.0 {
            let threshold = (dir.loss_percent / 100.0 * LOSS_SCALE as f64).round() as u64;
            rules.push(format!(
                "meta protocol {ip} numgen random mod {LOSS_SCALE} < {threshold} counter drop"
            ));
        }
        if let Some(b) = dir.burst_loss {
            rules.push(format!(
                "meta protocol {ip} numgen inc mod {} < {} counter drop",
                b.every_packets, b.burst_packets
            ));
        }
        if let Some(p) = dir.police {
            rules.push(police_rule(p, ip));
        }
        if !rules.is_empty() && family.has_v6() {
            // Neighbour discovery is IPv6's ARP: loss and policers act on data, as for IPv4.
            rules.insert(
                0,
                "icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept".into(),
            );
        }
        if !rules.is_empty() {
            let _ = writeln!(
                text,
                "table netdev {TABLE}_{name} {{\n  chain ingress {{\n    type filter hook ingress device \"{name}\" priority filter; policy accept;",
                name = iface.name
            );
            for r in rules {
                let _ = writeln!(text, "    {r}");
            }
            let _ = writeln!(text, "  }}\n}}");
        }
    }
    text
}

/// The `meta protocol` match of loss and policer rules: the families the lab carries.
fn protocols(family: Family) -> &'static str {
    match family {
        Family::V4 => "ip",
        Family::Dual => "{ ip, ip6 }",
        Family::V6 => "ip6",
    }
}

/// A token-bucket policer on IP bytes. Written in plain bytes: nft's `kbytes` are 1024 bytes,
/// and the rate is SI bit/s.
fn police_rule(p: Police, ip: &str) -> String {
    format!(
        "meta protocol {ip} limit rate over {} bytes/second burst {} bytes counter drop",
        (p.rate.bits_per_second / 8).max(1),
        p.burst.bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan;
    use crate::scenarios;

    fn rules_for(scenario: &str, host: &str) -> Option<String> {
        let t = scenarios::topology(scenario).unwrap();
        let p = plan(&t, "l");
        ruleset(&t, &p, p.host(host).unwrap())
    }

    #[test]
    fn strict_nat_drops_invalid_and_masquerades() {
        let r = rules_for("modem-idle", "hop1").unwrap();
        assert!(r.contains("ct state invalid counter drop"), "{r}");
        assert!(r.contains("oifname \"wan0\" masquerade"), "{r}");
        assert!(r.contains("iifname \"wan0\" counter drop"), "{r}");
        assert!(rules_for("modem-idle", "client").is_none());
    }

    #[test]
    fn loose_nat_has_no_invalid_drop() {
        let r = rules_for("cgnat-chain", "hop2").unwrap();
        assert!(!r.contains("invalid"), "{r}");
    }

    #[test]
    fn icmp_filter_on_server() {
        let r = rules_for("pmtu-blackhole", "server").unwrap();
        assert_eq!(r.matches("frag-needed").count(), 3, "{r}");
    }

    #[test]
    fn loss_is_applied_at_the_receiver() {
        let r = rules_for("lossy-long-fat", "server").unwrap();
        assert!(
            r.contains("device \"lan0\"") && r.contains("< 3000 counter drop"),
            "{r}"
        );
        let r = rules_for("lossy-long-fat", "hop1").unwrap();
        assert!(r.contains("device \"wan0\""), "{r}");
        let r = rules_for("slow-lossy-duplex", "server").unwrap();
        assert!(r.contains("numgen inc mod 50 < 2"), "{r}");
        assert!(rules_for("slow-lossy-duplex", "hop1").is_none());
    }

    #[test]
    fn policer_drops_over_its_rate_at_the_receiver() {
        let t = Topology::from_toml(
            "[[hop]]\n[[link]]\n[[link]]\n[link.up]\npolice = { rate = \"20 Mbit/s\", burst = \"64 KiB\" }\n",
        )
        .unwrap();
        let p = plan(&t, "l");
        let r = ruleset(&t, &p, p.host("server").unwrap()).unwrap();
        assert!(
            r.contains("device \"lan0\"")
                && r.contains(
                    "limit rate over 2500000 bytes/second burst 65536 bytes counter drop"
                ),
            "{r}"
        );
        // Only the direction that has it.
        assert!(ruleset(&t, &p, p.host("hop1").unwrap()).is_none());
    }

    #[test]
    fn mss_clamp_rule() {
        let t = Topology::from_toml("[[hop]]\nmss_clamp = 1380\n").unwrap();
        let p = plan(&t, "l");
        let r = ruleset(&t, &p, p.host("hop1").unwrap()).unwrap();
        assert!(r.contains("maxseg size set 1380"), "{r}");
    }

    #[test]
    fn dual_stack_nat_hop_is_an_rfc6092_firewall_with_its_own_timeouts() {
        let t = Topology::from_toml(
            "family = \"dual\"\n[[hop]]\nkind = \"nat\"\nconntrack = { tcp_established = 8 }\nconntrack6 = { tcp_established = 3, udp = 2 }\n[server]\nfilters = [\"drop-icmpv6-packet-too-big\"]\n[[link]]\nloss_percent = 1.0\n",
        )
        .unwrap();
        let p = plan(&t, "l");
        let r = ruleset(&t, &p, p.host("hop1").unwrap()).unwrap();
        assert!(r.contains("ct timeout v6_tcp {"), "{r}");
        assert!(r.contains("policy = { established: 3 }"), "{r}");
        assert!(r.contains("policy = { unreplied: 2 }"), "{r}");
        assert!(r.contains("ct timeout set \"v6_tcp\""), "{r}");
        assert!(r.contains("nd-neighbor-solicit"), "{r}");
        assert!(r.contains("table ip pathdoc_nat"), "{r}");
        assert!(!r.contains("pathdoc_nat6"), "{r}");
        assert!(r.contains("meta protocol { ip, ip6 } numgen random"), "{r}");
        let r = ruleset(&t, &p, p.host("server").unwrap()).unwrap();
        assert_eq!(
            r.matches("icmpv6 type packet-too-big counter drop").count(),
            3,
            "{r}"
        );
    }

    #[test]
    fn nat66_masquerades_ipv6() {
        let t = Topology::from_toml("family = \"dual\"\n[[hop]]\nkind = \"nat\"\nnat66 = true\n")
            .unwrap();
        let p = plan(&t, "l");
        let r = ruleset(&t, &p, p.host("hop1").unwrap()).unwrap();
        assert!(r.contains("table ip6 pathdoc_nat6"), "{r}");
        assert!(r.contains("table ip pathdoc_nat "), "{r}");
    }
}
