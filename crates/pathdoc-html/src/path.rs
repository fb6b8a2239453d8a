//! The path as the report saw it: hops with their addresses, what kind of box each address
//! suggests, and what the findings say about each hop.

use std::net::Ipv4Addr;

use pathdoc_core::{CheckName, Command, Report};

use crate::view::{section, Idle, Mtu, Section};

/// One router on the path, counted from the client.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hop {
    pub hop: u32,
    /// Addresses the hop answered from (its client-facing and server-facing interfaces differ).
    pub addrs: Vec<String>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PathInfo {
    /// The report's command (`check`, `ssh`, `analyze`, …): what `server` is depends on it.
    pub command: Command,
    pub server: String,
    /// What the far end is, in words: the report's command decides (a pathdoc server, an sshd).
    pub server_kind: &'static str,
    /// The client's address and port as the server saw it (after any NAT).
    pub client_public: Option<String>,
    /// Each end's network interface in words ("eth0: driver 8139cp, MTU 1500 B, TSO on, …;
    /// KVM/QEMU guest"), from the MTU check.
    pub client_nic: Option<String>,
    pub server_nic: Option<String>,
    pub hops: Vec<Hop>,
}

impl PathInfo {
    pub fn from_report(report: &Report) -> PathInfo {
        let idle: Section<Idle> = section(report, CheckName::Idle.data_key());
        let mtu: Section<Mtu> = section(report, CheckName::Mtu.data_key());
        let mut path = PathInfo {
            command: report.command.clone(),
            server: report.target.clone(),
            server_kind: match report.command {
                Command::Ssh => {
                    "SSH server (sshd); a temporary pathdoc server beside it for raw TCP"
                }
                Command::Analyze => "the captured connections' far end",
                _ => "pathdoc server",
            },
            client_public: mtu
                .read()
                .and_then(|m| m.client_observed.clone())
                .or_else(|| idle.read().and_then(|i| i.public_addr.clone())),
            client_nic: mtu
                .read()
                .and_then(|m| m.client_nic.as_ref())
                .map(|n| n.describe()),
            server_nic: mtu
                .read()
                .and_then(|m| m.server_nic.as_ref())
                .map(|n| n.describe()),
            hops: Vec::new(),
        };
        if let Some(idle) = idle.read() {
            if let Some(p) = &idle.path {
                for (i, a) in p.addrs.iter().enumerate() {
                    path.hop(i as u32 + 1).add_addr(a.as_deref());
                }
            }
        }
        if let Some(h) = idle
            .read()
            .and_then(|i| i.culprit.as_ref())
            .and_then(|c| c.location.as_ref())
            .filter(|l| l.kind.as_deref() == Some("hop"))
            .and_then(|l| l.hop)
        {
            path.note_after(h, "forgets idle connections first (idle check)");
        }
        let mut routers = idle
            .read()
            .and_then(|i| i.path.as_ref().and_then(|p| p.routers));
        if let Some(up) = mtu.read().and_then(|m| m.up.as_ref()) {
            for row in &up.ttl_scan {
                for reply in [&row.small, &row.big].into_iter().flatten() {
                    if reply.kind == "time-exceeded" {
                        path.hop(row.ttl).add_addr(reply.from.as_deref());
                        routers = Some(routers.unwrap_or(0).max(row.ttl));
                    }
                }
            }
            if let Some(h) = up.location.as_ref().and_then(|l| l.hop) {
                path.note_after(
                    h,
                    "the MTU drops on the link after this hop (client→server)",
                );
            }
        }
        if let Some(down) = mtu.read().and_then(|m| m.down.as_ref()) {
            // The server→client scan counts hops from the server.
            let from_client = |ttl: u32| routers.and_then(|r| (ttl <= r).then(|| r + 1 - ttl));
            for row in &down.ttl_scan {
                for reply in [&row.small, &row.big].into_iter().flatten() {
                    if reply.kind == "time-exceeded" {
                        if let Some(h) = from_client(row.ttl) {
                            path.hop(h).add_addr(reply.from.as_deref());
                        }
                    }
                }
            }
            if let Some(l) = &down.location {
                if let Some(h) = l.hop.and_then(from_client) {
                    path.note_after(
                        h,
                        "the MTU drops on the link towards the client after this hop (server→client)",
                    );
                }
            }
        }
        for f in &report.findings {
            if let Some(h) = f.hop.filter(|h| *h > 0) {
                path.hop(h)
                    .notes
                    .push(format!("{} {}: {}", f.status.label(), f.check, f.title));
            }
        }
        path.hops.sort_by_key(|h| h.hop);
        path
    }

    fn hop(&mut self, hop: u32) -> &mut Hop {
        if let Some(i) = self.hops.iter().position(|h| h.hop == hop) {
            return &mut self.hops[i];
        }
        self.hops.push(Hop {
            hop,
            ..Hop::default()
        });
        self.hops.last_mut().expect("just pushed")
    }

    fn note_after(&mut self, hop: u32, note: &str) {
        if hop > 0 {
            self.hop(hop).notes.push(note.to_string());
        }
    }
}

impl Hop {
    fn add_addr(&mut self, addr: Option<&str>) {
        if let Some(a) = addr {
            if !self.addrs.iter().any(|x| x == a) {
                self.addrs.push(a.to_string());
            }
        }
    }

    /// What kind of box the hop's addresses suggest, when they suggest one.
    pub fn kind(&self) -> Option<&'static str> {
        let kinds: Vec<&str> = self.addrs.iter().filter_map(|a| box_kind(a)).collect();
        kinds
            .iter()
            .find(|k| k.contains("carrier"))
            .or_else(|| kinds.first())
            .copied()
    }
}

/// RFC 1918 private space suggests a home or office router; RFC 6598 shared space (100.64/10)
/// a carrier-grade NAT; anything else a public router.
pub fn box_kind(addr: &str) -> Option<&'static str> {
    let ip: Ipv4Addr = addr.parse().ok()?;
    let [a, b, ..] = ip.octets();
    Some(if ip.is_private() {
        "private address (RFC 1918): usually your own router or NAT"
    } else if a == 100 && (64..128).contains(&b) {
        "shared address space (RFC 6598): usually the ISP's carrier-grade NAT"
    } else {
        "public address: a router on the way"
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathdoc_core::{Finding, Status};

    #[test]
    fn hops_merge_idle_path_and_both_ttl_scans_and_findings() {
        let mut r = Report::new(pathdoc_core::Command::Check, "203.0.113.10:7224");
        r.data.insert(
            "idle".into(),
            serde_json::json!({"path": {"addrs": ["192.168.1.1"], "routers": 2}, "public_addr": "203.0.113.1:4000",
                "culprit": {"location": {"kind": "hop", "hop": 1}}}),
        );
        r.data.insert(
            "mtu".into(),
            serde_json::json!({
                "up": {"direction": "client-to-server", "ttl_scan": [
                    {"ttl": 1, "small": {"kind": "time-exceeded", "from": "192.168.1.1"}},
                    {"ttl": 2, "small": {"kind": "time-exceeded", "from": "100.64.1.1"}}]},
                "down": {"direction": "server-to-client", "location": {"hop": 1, "addr": "203.0.113.1"},
                    "ttl_scan": [{"ttl": 1, "big": {"kind": "time-exceeded", "from": "203.0.113.1"}}]}
            }),
        );
        r.findings.push(
            Finding::new(
                "idle",
                "tcp-idle-culprit-hop",
                Status::Fail,
                "hop 1 forgets",
            )
            .hop(1),
        );
        let p = PathInfo::from_report(&r);
        assert_eq!(p.client_public.as_deref(), Some("203.0.113.1:4000"));
        assert_eq!(p.hops.len(), 2);
        assert_eq!(p.hops[0].addrs, vec!["192.168.1.1"]);
        assert_eq!(p.hops[1].addrs, vec!["100.64.1.1", "203.0.113.1"]);
        assert!(p.hops[1].notes[0].contains("towards the client"));
        assert!(p.hops[0].notes[0].contains("forgets idle connections first"));
        assert!(p.hops[0].notes[1].contains("hop 1 forgets"));
        assert!(p.hops[1].kind().unwrap().contains("carrier"));
        assert!(p.hops[0].kind().unwrap().contains("private"));
    }

    #[test]
    fn both_ends_network_interfaces_go_in_the_path_table() {
        let mut r = Report::new(pathdoc_core::Command::Check, "203.0.113.10:7224");
        r.data.insert(
            "mtu".into(),
            serde_json::json!({
                "server_nic": {"iface": "ens3", "driver": "8139cp", "mtu": 1500, "tso": true,
                    "gso": true, "gro": false, "machine": "KVM/QEMU guest"},
                "client_nic": {"iface": "eth0", "driver": "<b>e1000e</b>", "machine": "no virtual machine seen"}
            }),
        );
        let p = PathInfo::from_report(&r);
        assert_eq!(
            p.server_nic.as_deref(),
            Some("ens3: driver 8139cp, MTU 1500 B, TSO on, GSO on, GRO off; KVM/QEMU guest")
        );
        let page = crate::page::page(&r, &[], &[(None, p)]);
        assert!(
            page.contains("network interface ens3: driver 8139cp, MTU 1500 B, TSO on"),
            "server row"
        );
        // Text from the report is escaped like every other value.
        assert!(page.contains("driver &lt;b&gt;e1000e&lt;/b&gt;") && !page.contains("<b>e1000e"));
        // Without the facts (an older report), the rows stay as they were.
        let old = PathInfo::from_report(&Report::new(pathdoc_core::Command::Check, "x"));
        assert!(old.server_nic.is_none() && old.client_nic.is_none());
    }
}
