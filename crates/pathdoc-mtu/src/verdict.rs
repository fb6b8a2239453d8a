//! Turning the mtu check's measurements into findings with evidence and concrete remedies.
//! Pure: takes [`MtuData`] (also the JSON probe table), returns [`Finding`]s.

use pathdoc_core::{Evidence, Finding, Quantity, Remedy, Status};
use serde::Serialize;

use crate::analysis::{
    bulk_stalled, BulkRun, Direction, LocateMethod, Location, MssComparison, MssObservation,
    Outcome, TtlRow,
};
use crate::wire::IcmpSeen;

const CHECK: &str = "mtu";

/// One row of the probe table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProbeRow {
    /// IP datagram size in bytes.
    pub size: u16,
    pub sent: u32,
    pub received: u32,
}

/// Everything measured in one direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectionData {
    pub direction: Direction,
    /// Largest size the sender could emit (its interface MTU or the configured maximum).
    pub max_probed: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_limit: Option<u16>,
    pub probes: Vec<ProbeRow>,
    pub icmp: Vec<IcmpSeen>,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ttl_scan: Vec<TtlRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

/// The mtu check's raw data (`report.data["mtu"]`).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct MtuData {
    pub server: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_observed: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up: Option<DirectionData>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub down: Option<DirectionData>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mss: Option<MssObservation>,
    pub mss_comparison: Vec<MssComparison>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bulk_full: Option<BulkRun>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bulk_reduced: Option<BulkRun>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_tcp_mtu_probing: Option<String>,
    pub ipv6: bool,
    /// Steps that could not run, and why.
    pub notes: Vec<String>,
}

fn hdr(ipv6: bool) -> u32 {
    if ipv6 {
        60
    } else {
        40
    }
}

fn where_text(dir: Direction, loc: &Option<Location>) -> String {
    match loc {
        Some(l) if l.hop == 0 => format!("on the {}'s own first link", dir.sender()),
        Some(l) => {
            let addr = l.addr.map(|a| format!(" ({a})")).unwrap_or_default();
            match l.method {
                LocateMethod::TooBigSource => {
                    format!("at hop {} from the {}{addr}, whose next link has the smaller MTU", l.hop, dir.sender())
                }
                LocateMethod::LastHopReached => format!(
                    "on the link after hop {} from the {}{addr}: big probes reached that hop and vanished beyond it",
                    l.hop,
                    dir.sender()
                ),
            }
        }
        None => "at a hop that could not be located (no ICMP time-exceeded came back)".to_string(),
    }
}

fn probe_evidence(d: &DirectionData) -> Evidence {
    let table: Vec<String> = d
        .probes
        .iter()
        .map(|p| format!("{} B {}/{}", p.size, p.received, p.sent))
        .collect();
    Evidence::new(
        format!("{} DF probes (size arrived/sent)", d.direction.label()),
        Quantity::Text(table.join(", ")),
    )
    .with_detail("UDP with IP_PMTUDISC_PROBE; sizes are whole IP datagrams")
}

fn icmp_remedies(dir: Direction, mtu: u16, data: &MtuData) -> Vec<Remedy> {
    let who = dir.sender();
    let mss = u32::from(mtu).saturating_sub(hdr(data.ipv6));
    let peer = match dir {
        Direction::ServerToClient => data
            .client_observed
            .clone()
            .unwrap_or_else(|| "CLIENT_ADDR".into()),
        Direction::ClientToServer => data.server.clone(),
    };
    let peer_ip = peer
        .rsplit_once(':')
        .map(|(h, _)| h.trim_matches(['[', ']']).to_string())
        .unwrap_or(peer);
    let mut r = vec![
        Remedy::new(format!("Let ICMP \"fragmentation needed\" (type 3 code 4) reach the {who}; check every firewall in front of it too"))
            .with_command("nft insert rule inet filter input icmp type destination-unreachable icmp code frag-needed accept"),
        Remedy::new("The same with iptables").with_command("iptables -I INPUT -p icmp --icmp-type fragmentation-needed -j ACCEPT"),
        Remedy::new("IPv6 needs Packet Too Big (RFC 4890 says never filter it)")
            .with_command("nft insert rule inet filter input icmpv6 type packet-too-big accept"),
        Remedy::new(format!("Let the {who}'s TCP find the MTU without ICMP after a black-hole timeout (RFC 4821); persist it in /etc/sysctl.d"))
            .with_command("sysctl -w net.ipv4.tcp_mtu_probing=1"),
        Remedy::new(format!("Hotfix on the {who}: lock the path MTU towards the peer (replace GATEWAY with the {who}'s next hop)"))
            .with_command(format!("ip route add {peer_ip} via GATEWAY mtu lock {mtu}")),
        Remedy::new("On the router in front of the smaller link: clamp the MSS of forwarded SYNs to the route MTU")
            .with_command("nft add rule inet filter forward tcp flags syn tcp option maxseg size set rt mtu"),
    ];
    if dir == Direction::ServerToClient {
        r.push(
            Remedy::new("Client-side workaround: ask the server for smaller segments by advertising a smaller MSS on the route to it")
                .with_command(format!("ip route add {} via GATEWAY advmss {mss}", data.server.rsplit_once(':').map(|(h, _)| h.trim_matches(['[', ']'])).unwrap_or(&data.server))),
        );
    }
    r.push(
        Remedy::new(format!("If ICMP does arrive and the {who} still sends full-size frames, check its NIC segmentation offload (seen in the wild: an emulated rtl8139 NIC ignored the MTU in TSO)"))
            .with_command("ethtool -k IFACE | grep segmentation-offload   # then: ethtool -K IFACE tso off gso off"),
    );
    r
}

fn direction_findings(d: &DirectionData, data: &MtuData) -> Vec<Finding> {
    let dir = d.direction;
    let id = |s: &str| format!("{s}-{}", dir.id());
    let mut out = Vec::new();
    match &d.outcome {
        Outcome::NothingArrived => out.push(
            Finding::new(CHECK, id("path-mtu"), Status::Inconclusive, format!("{}: no UDP probe arrived", dir.label()))
                .summary(format!(
                    "Not even the smallest DF probe ({} B) reached the {}; UDP to/from the server port may be filtered, so the path MTU cannot be measured this way.",
                    d.probes.iter().map(|p| p.size).min().unwrap_or(0),
                    dir.receiver()
                ))
                .evidence(probe_evidence(d)),
        ),
        Outcome::Clean { mtu } => out.push(
            Finding::new(CHECK, id("path-mtu"), Status::Pass, format!("{}: path MTU {mtu} B, every probed size passes", dir.label()))
                .summary(format!(
                    "DF probes of every size up to {mtu} B (the largest the {} can send) arrived.",
                    dir.sender()
                ))
                .evidence(Evidence::new(format!("{} path MTU", dir.label()), Quantity::Bytes(u64::from(*mtu))))
                .evidence(probe_evidence(d)),
        ),
        Outcome::Signalled { mtu, ptb_mtu, ptb_from } => {
            let from = ptb_from.map(|a| a.to_string()).unwrap_or_else(|| "an unknown router".into());
            out.push(
                Finding::new(CHECK, id("path-mtu"), Status::Pass, format!("{}: path MTU {mtu} B, PMTUD works", dir.label()))
                    .summary(format!(
                        "Probes larger than {mtu} B were dropped {} and {from} told the {} with ICMP too-big (MTU {ptb_mtu}), so TCP adapts.",
                        where_text(dir, &d.location),
                        dir.sender()
                    ))
                    .requirement("RFC 1191 / RFC 8201: a router that cannot forward a DF packet sends ICMP too-big with its next-hop MTU")
                    .evidence(Evidence::new(format!("{} path MTU", dir.label()), Quantity::Bytes(u64::from(*mtu))))
                    .evidence(Evidence::new("ICMP too-big next-hop MTU", Quantity::Bytes(u64::from(*ptb_mtu))).with_detail(format!("from {from}, read from the {}'s socket error queue (IP_RECVERR)", dir.sender())))
                    .evidence(probe_evidence(d)),
            );
        }
        Outcome::BlackHole { mtu, smallest_lost } => {
            let mut f = Finding::new(
                CHECK,
                id("pmtud-black-hole"),
                Status::Fail,
                format!("PMTUD black hole {}: packets over {mtu} B vanish and no ICMP too-big reaches the {}", dir.label(), dir.sender()),
            )
            .summary(format!(
                "DF probes up to {mtu} B arrive, {smallest_lost} B and larger are lost {}, and the {} never received an ICMP \"fragmentation needed\". TCP on the {} keeps sending full-size segments that are silently dropped: connections open, small transfers work, bulk transfers stall or crawl.",
                where_text(dir, &d.location),
                dir.sender(),
                dir.sender()
            ))
            .requirement("RFC 1191 / RFC 8201 PMTUD needs ICMP too-big to reach the sender; RFC 4890 says never filter it")
            .evidence(Evidence::new(format!("{} path MTU", dir.label()), Quantity::Bytes(u64::from(*mtu))))
            .evidence(Evidence::new("smallest size lost", Quantity::Bytes(u64::from(*smallest_lost))))
            .evidence(Evidence::new(format!("ICMP too-big seen by the {}", dir.sender()), Quantity::Count(0)).with_detail("socket error queue (IP_RECVERR) after every probe round"))
            .evidence(probe_evidence(d));
            if let Some(loc) = &d.location {
                f = f.evidence(Evidence::new("where the MTU drops", Quantity::Text(where_text(dir, &Some(loc.clone())))));
            }
            for r in icmp_remedies(dir, *mtu, data) {
                f = f.remedy(r);
            }
            out.push(f);
        }
        Outcome::BadSuggestion { mtu, ptb_mtu, ptb_from } => {
            let from = ptb_from.map(|a| a.to_string()).unwrap_or_else(|| "a router".into());
            let mut f = Finding::new(
                CHECK,
                id("pmtud-bad-suggestion"),
                Status::Fail,
                format!("{}: ICMP too-big says MTU {ptb_mtu} but only {mtu} B passes", dir.label()),
            )
            .summary(format!(
                "{from} reported a next-hop MTU of {ptb_mtu} B, yet probes up to that size are lost; only {mtu} B pass. A later link has a smaller MTU and its ICMP is lost (scamper calls this PTB_BAD)."
            ))
            .evidence(Evidence::new(format!("{} path MTU", dir.label()), Quantity::Bytes(u64::from(*mtu))))
            .evidence(Evidence::new("ICMP too-big next-hop MTU", Quantity::Bytes(u64::from(*ptb_mtu))))
            .evidence(probe_evidence(d));
            for r in icmp_remedies(dir, *mtu, data) {
                f = f.remedy(r);
            }
            out.push(f);
        }
    }
    out
}

fn mss_findings(data: &MtuData) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in &data.mss_comparison {
        match c.rewritten {
            Some(true) => {
                let path_mtu = match c.direction {
                    Direction::ClientToServer => data.up.as_ref(),
                    Direction::ServerToClient => data.down.as_ref(),
                }
                .filter(|d| d.outcome.has_drop())
                .and_then(|d| d.outcome.mtu());
                let fits = path_mtu.map(|m| c.arrived + hdr(data.ipv6) <= u32::from(m));
                let status = if fits == Some(false) { Status::Warn } else { Status::Info };
                let mut summary = format!(
                    "The {} advertised MSS {} in its {}; the {} received MSS {}: a middlebox on the path rewrites (clamps) the TCP MSS option.",
                    c.direction.sender(),
                    c.sent,
                    if c.direction == Direction::ClientToServer { "SYN" } else { "SYN-ACK" },
                    c.direction.receiver(),
                    c.arrived
                );
                if fits == Some(false) {
                    summary.push_str(&format!(
                        " The clamped value is still too large for the measured path MTU ({} B), so it does not prevent drops.",
                        path_mtu.unwrap_or(0)
                    ));
                } else {
                    summary.push_str(" That is a common and healthy workaround for a smaller link.");
                }
                let mut f = Finding::new(CHECK, format!("mss-clamped-{}", c.direction.id()), status, format!("MSS clamped {}: {} → {}", c.direction.label(), c.sent, c.arrived))
                    .summary(summary)
                    .evidence(Evidence::new("MSS sent", Quantity::Bytes(u64::from(c.sent))))
                    .evidence(Evidence::new("MSS received", Quantity::Bytes(u64::from(c.arrived))).with_detail(match c.direction {
                        Direction::ClientToServer => "server: TCP_SAVED_SYN of the client's SYN",
                        Direction::ServerToClient => "client: TCP_INFO snd_mss plus timestamp option bytes",
                    }));
                if fits == Some(false) {
                    f = f.remedy(Remedy::new("Clamp to the route MTU instead of a fixed value").with_command("nft add rule inet filter forward tcp flags syn tcp option maxseg size set rt mtu"));
                }
                out.push(f);
            }
            Some(false) => out.push(
                Finding::new(CHECK, format!("mss-{}", c.direction.id()), Status::Pass, format!("MSS {} arrives unchanged {}", c.sent, c.direction.label()))
                    .summary("The MSS option of the handshake arrived as it was sent: no clamping or rewriting on this path.")
                    .evidence(Evidence::new("MSS sent", Quantity::Bytes(u64::from(c.sent))))
                    .evidence(Evidence::new("MSS received", Quantity::Bytes(u64::from(c.arrived)))),
            ),
            None => {}
        }
    }
    out
}

fn bulk_findings(data: &MtuData) -> Vec<Finding> {
    let Some(full) = &data.bulk_full else {
        return Vec::new();
    };
    let probing = data
        .server_tcp_mtu_probing
        .clone()
        .unwrap_or_else(|| "unknown".into());
    let full_ev = Evidence::new(
        "download, full-size segments",
        Quantity::Goodput(full.goodput_bps()),
    )
    .with_detail(format!("{} bytes in {:.1} s", full.bytes, full.seconds));
    let Some(reduced) = &data.bulk_reduced else {
        return vec![Finding::new(CHECK, "bulk-download", Status::Info, "bulk download with full-size segments")
            .summary("Measured for reference; no smaller MTU was found server→client, so no reduced-MSS comparison was needed.")
            .evidence(full_ev)];
    };
    let red_ev = Evidence::new(
        format!("download, client MSS {}", reduced.client_mss.unwrap_or(0)),
        Quantity::Goodput(reduced.goodput_bps()),
    )
    .with_detail(format!(
        "{} bytes in {:.1} s (TCP_MAXSEG set before connect)",
        reduced.bytes, reduced.seconds
    ));
    let probing_ev = Evidence::new(
        "server net.ipv4.tcp_mtu_probing",
        Quantity::Text(probing.clone()),
    )
    .with_detail(
        "0 = never recovers from a black hole; 1 = probes after repeated timeouts; 2 = always",
    );
    if bulk_stalled(full, reduced) {
        let mut f = Finding::new(CHECK, "bulk-download-stall", Status::Fail, "downloads with full-size segments stall; with a smaller MSS they are fast")
            .summary(format!(
                "The same server→client download got {} with full-size segments and {} with the client's MSS set to {} (≥ {}× faster). Full-size segments are dropped on the path; this is the user-visible symptom.",
                Quantity::Goodput(full.goodput_bps()),
                Quantity::Goodput(reduced.goodput_bps()),
                reduced.client_mss.unwrap_or(0),
                crate::analysis::STALL_RATIO
            ))
            .evidence(full_ev)
            .evidence(red_ev)
            .evidence(probing_ev);
        if let Some(s) = full.server {
            f = f.evidence(
                Evidence::new(
                    "server snd_mss / pmtu during the stalled download",
                    Quantity::Text(format!(
                        "{} B / {} B, {} retransmissions",
                        s.snd_mss, s.pmtu, s.total_retrans
                    )),
                )
                .with_detail("server TCP_INFO"),
            );
        }
        if probing.trim() == "0" {
            f = f.remedy(
                Remedy::new("On the server: enable TCP black-hole MTU probing")
                    .with_command("sysctl -w net.ipv4.tcp_mtu_probing=1"),
            );
        }
        vec![f]
    } else {
        vec![Finding::new(
            CHECK,
            "bulk-download",
            Status::Pass,
            "bulk downloads with full-size segments are not slowed by the MTU",
        )
        .summary("A download with full-size segments was about as fast as one with a reduced MSS.")
        .evidence(full_ev)
        .evidence(red_ev)
        .evidence(probing_ev)]
    }
}

/// All findings of the mtu check.
pub fn findings(data: &MtuData) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in [&data.up, &data.down].into_iter().flatten() {
        out.extend(direction_findings(d, data));
    }
    out.extend(mss_findings(data));
    out.extend(bulk_findings(data));
    for n in &data.notes {
        out.push(
            Finding::new(
                CHECK,
                "step-skipped",
                Status::Info,
                "an mtu step could not run",
            )
            .summary(n.clone()),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::IcmpKind;

    fn dir(direction: Direction, outcome: Outcome) -> DirectionData {
        DirectionData {
            direction,
            max_probed: 1500,
            local_limit: None,
            probes: vec![
                ProbeRow {
                    size: 1500,
                    sent: 3,
                    received: 0,
                },
                ProbeRow {
                    size: 1420,
                    sent: 3,
                    received: 3,
                },
            ],
            icmp: vec![],
            outcome,
            ttl_scan: vec![],
            location: Some(Location {
                hop: 1,
                addr: Some("10.0.1.1".parse().unwrap()),
                method: LocateMethod::LastHopReached,
            }),
        }
    }

    fn base() -> MtuData {
        MtuData {
            server: "10.0.2.2:7224".into(),
            client_observed: Some("10.0.1.2:40000".into()),
            ..Default::default()
        }
    }

    #[test]
    fn verdict_table() {
        let bh = Outcome::BlackHole {
            mtu: 1420,
            smallest_lost: 1421,
        };
        let sig = Outcome::Signalled {
            mtu: 1420,
            ptb_mtu: 1420,
            ptb_from: None,
        };
        let clean = Outcome::Clean { mtu: 1500 };
        // (up, down, expected ids with statuses)
        type Case = (Outcome, Outcome, Vec<(&'static str, Status)>);
        let cases: Vec<Case> = vec![
            (
                clean.clone(),
                clean.clone(),
                vec![
                    ("path-mtu-up", Status::Pass),
                    ("path-mtu-down", Status::Pass),
                ],
            ),
            (
                clean.clone(),
                bh.clone(),
                vec![
                    ("path-mtu-up", Status::Pass),
                    ("pmtud-black-hole-down", Status::Fail),
                ],
            ),
            (
                bh.clone(),
                sig.clone(),
                vec![
                    ("pmtud-black-hole-up", Status::Fail),
                    ("path-mtu-down", Status::Pass),
                ],
            ),
            (
                Outcome::NothingArrived,
                clean,
                vec![
                    ("path-mtu-up", Status::Inconclusive),
                    ("path-mtu-down", Status::Pass),
                ],
            ),
        ];
        for (up, down, want) in cases {
            let data = MtuData {
                up: Some(dir(Direction::ClientToServer, up)),
                down: Some(dir(Direction::ServerToClient, down)),
                ..base()
            };
            let got: Vec<(String, Status)> = findings(&data)
                .iter()
                .map(|f| (f.id.clone(), f.status))
                .collect();
            let want: Vec<(String, Status)> =
                want.into_iter().map(|(i, s)| (i.to_string(), s)).collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn black_hole_names_direction_hop_and_fixes() {
        let data = MtuData {
            down: Some(dir(
                Direction::ServerToClient,
                Outcome::BlackHole {
                    mtu: 1420,
                    smallest_lost: 1421,
                },
            )),
            ..base()
        };
        let f = &findings(&data)[0];
        assert!(f.title.contains("server→client"), "{}", f.title);
        assert!(f.summary.contains("hop 1"), "{}", f.summary);
        let cmds: Vec<&str> = f
            .remedies
            .iter()
            .filter_map(|r| r.command.as_deref())
            .collect();
        assert!(cmds
            .iter()
            .any(|c| c.contains("icmp code frag-needed accept")));
        assert!(
            cmds.iter()
                .any(|c| c.contains("10.0.1.2 via GATEWAY mtu lock 1420")),
            "{cmds:?}"
        );
        assert!(
            cmds.iter()
                .any(|c| c.contains("10.0.2.2 via GATEWAY advmss 1380")),
            "{cmds:?}"
        );
        assert!(cmds.iter().any(|c| c.contains("tcp_mtu_probing=1")));
        assert!(cmds.iter().any(|c| c.contains("ethtool -k")));
    }

    #[test]
    fn clamp_is_info_unless_too_big_for_the_path() {
        let cmp = |arrived| MssComparison {
            direction: Direction::ClientToServer,
            sent: 1460,
            arrived,
            rewritten: Some(true),
        };
        let mut data = MtuData {
            up: Some(dir(Direction::ClientToServer, Outcome::Clean { mtu: 1500 })),
            ..base()
        };
        data.mss_comparison = vec![cmp(1380)];
        let f: Vec<Finding> = findings(&data)
            .into_iter()
            .filter(|f| f.id.starts_with("mss"))
            .collect();
        assert_eq!(f[0].id, "mss-clamped-up");
        assert_eq!(f[0].status, Status::Info);
        data.up = Some(dir(
            Direction::ClientToServer,
            Outcome::Signalled {
                mtu: 1280,
                ptb_mtu: 1280,
                ptb_from: None,
            },
        ));
        let f: Vec<Finding> = findings(&data)
            .into_iter()
            .filter(|f| f.id.starts_with("mss"))
            .collect();
        assert_eq!(f[0].status, Status::Warn);
        let _ = IcmpKind::TooBig;
    }

    #[test]
    fn bulk_stall_is_a_failure_with_the_sysctl() {
        let run = |mss, bytes| BulkRun {
            client_mss: mss,
            seconds: 1.0,
            bytes,
            rcv_mss: None,
            server: None,
        };
        let data = MtuData {
            bulk_full: Some(run(None, 1000)),
            bulk_reduced: Some(run(Some(1380), 20_000_000)),
            server_tcp_mtu_probing: Some("0".into()),
            ..base()
        };
        let f = findings(&data);
        assert_eq!(f[0].id, "bulk-download-stall");
        assert_eq!(f[0].status, Status::Fail);
        assert!(f[0]
            .remedies
            .iter()
            .any(|r| r.command.as_deref() == Some("sysctl -w net.ipv4.tcp_mtu_probing=1")));
    }
}
