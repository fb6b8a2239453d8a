//! Turning the mtu check's measurements into findings with evidence and concrete remedies.
//! Pure: takes [`MtuData`] (also the JSON probe table), returns [`Finding`]s.
//!
//! One assessment per data direction ([`TcpGuard`]: do the segments TCP actually sends fit that
//! direction's path MTU, and is it a clamp that makes them fit?) feeds every finding about that
//! direction and [`remedies`], so the black-hole, MSS and download findings of one report
//! cannot contradict each other: a clamp that exists is never recommended, a download that ran
//! fine is never called stalled, and "no clamping" is only said when a clamp would have shown.

use pathdoc_core::busy::{describe as describe_busy, ServerBusy};
use pathdoc_core::units::format_bytes;
use pathdoc_core::CheckName;
use pathdoc_core::{Evidence, Finding, FindingId, Host, Quantity, Remedy, Status};
use serde::Serialize;

use crate::analysis::{
    bulk_stalled, BulkRun, Direction, LocateMethod, Location, MssComparison, MssObservation,
    Outcome, TtlRow,
};
use crate::search::SizeCap;
use crate::wire::IcmpSeen;

const CHECK: CheckName = CheckName::Mtu;

/// Every finding id the mtu check emits. The direction is a field of the finding
/// (`direction`), never part of the id: a report may hold one finding of an id per direction.
pub const FINDING_IDS: &[FindingId] = &[
    FindingId {
        id: "path-mtu",
        meaning: "a direction's path MTU: PASS when every size passed (the sender's interface MTU, or \"≥ N B\" at the probe limit) or PMTUD works; INCONCLUSIVE when no probe arrived or the direction was not measured",
    },
    FindingId {
        id: "pmtud-black-hole",
        meaning: "larger sizes vanish and no ICMP too-big reaches the sender: FAIL; WARN when the TCP the check measured is protected (its segments fit, e.g. an MSS clamp) and only other traffic is at risk",
    },
    FindingId {
        id: "pmtud-bad-suggestion",
        meaning: "an ICMP too-big names an MTU that itself does not pass (scamper's PTB_BAD): FAIL, WARN when TCP is protected",
    },
    FindingId {
        id: "mss-clamped",
        meaning: "a middlebox lowered the MSS option of the handshake (direction: the SYN's or SYN-ACK's way): INFO, WARN when the clamped value is still too big for the path",
    },
    FindingId {
        id: "mss-unchanged",
        meaning: "the MSS option arrived as sent: PASS; says \"no clamping\" only when the sender advertised its full interface MSS",
    },
    FindingId {
        id: "bulk-download",
        meaning: "a timed server→client download is not slowed by the MTU (PASS), or was measured for reference when no smaller MTU was found (INFO); INCONCLUSIVE when even the download with a smaller MSS crawled and the NIC signature is not there",
    },
    FindingId {
        id: "bulk-download-stall",
        meaning: "the download with the client's normal MSS is ≥ 4× slower than with an MSS that fits the path: FAIL",
    },
    FindingId {
        id: crate::offload::ID,
        meaning: "the server's NIC sends frames larger than its TCP asked for (segmentation offload ignores the MSS and path MTU): even with an MSS that fits, the download crawls with ≥ 20 % of segments retransmitted while UDP probes of that size pass and ICMP too-big keeps arriving: FAIL; named after pmtud-black-hole, as the second fault to fix, when ICMP does not reach the server",
    },
    FindingId {
        id: "server-busy",
        meaning: "the server refused the check's session or a step for want of room (a pool full, shared out between other clients, or this client's own cap; e.g. the timed download did not run), with the server's words, the bound it refused by and its limit, a retry hint and the operator's fix: WARN",
    },
    FindingId {
        id: "step-not-run",
        meaning: "a step of the check did not run or finish (interrupted, refused, failed), with why: INFO",
    },
];

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
    /// A smaller path MTU the sender's kernel had cached before the probes (they ignore it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_pmtu: Option<u32>,
}

/// A step of the check that did not run or did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// The server→client size search.
    DownSearch,
    /// The client→server size search.
    UpSearch,
    /// Locating the client→server MTU drop.
    LocateUp,
    /// Locating the server→client MTU drop.
    LocateDown,
    /// The handshake MSS comparison.
    Mss,
    /// The download with the client's normal MSS.
    Download,
    /// The download with a reduced MSS.
    ReducedDownload,
}

impl Step {
    fn words(self) -> &'static str {
        match self {
            Step::DownSearch => "the server→client path-MTU search",
            Step::UpSearch => "the client→server path-MTU search",
            Step::LocateUp => "locating the client→server MTU drop",
            Step::LocateDown => "locating the server→client MTU drop",
            Step::Mss => "the handshake MSS comparison",
            Step::Download => "the timed download",
            Step::ReducedDownload => "the timed download with a reduced MSS",
        }
    }
}

/// A step that did not run, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotRun {
    pub step: Step,
    pub why: String,
    /// The server refused the step for want of room (a full or fairly shared pool): the
    /// measurement is missing because of load, which the user must see.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    /// What the server said when it refused the step for want of room.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<ServerBusy>,
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
    /// The server's interface that carried the download: driver, offloads, MTU, VM or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_nic: Option<pathdoc_sys::nic::NicFacts>,
    /// The same for the client's interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_nic: Option<pathdoc_sys::nic::NicFacts>,
    pub ipv6: bool,
    /// Remarks about the measurement (e.g. a path MTU the kernel had cached).
    pub notes: Vec<String>,
    /// Steps that did not run or finish, and why.
    pub not_run: Vec<NotRun>,
    /// The run was cut short by the user (Ctrl-C / SIGTERM): what is here is what was measured.
    pub interrupted: bool,
    /// The server refused the check's session for want of room: nothing ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<ServerBusy>,
}

impl MtuData {
    pub fn not_run(&mut self, step: Step, why: impl Into<String>) {
        self.not_run.push(NotRun {
            step,
            why: why.into(),
            busy: false,
            refusal: None,
        });
    }

    /// A step the server refused for want of room ([`NotRun::busy`]).
    pub fn refused_busy(&mut self, step: Step, busy: ServerBusy) {
        self.not_run.push(NotRun {
            step,
            why: busy.message.clone(),
            busy: true,
            refusal: Some(busy),
        });
    }

    fn direction(&self, dir: Direction) -> Option<&DirectionData> {
        match dir {
            Direction::ClientToServer => self.up.as_ref(),
            Direction::ServerToClient => self.down.as_ref(),
        }
    }
}

fn hdr(ipv6: bool) -> u32 {
    if ipv6 {
        60
    } else {
        40
    }
}

fn core_direction(d: Direction) -> pathdoc_core::Direction {
    match d {
        Direction::ClientToServer => pathdoc_core::Direction::ClientToServer,
        Direction::ServerToClient => pathdoc_core::Direction::ServerToClient,
    }
}

/// The machine that sends in `dir` (where ICMP must arrive, where the sysctls go).
fn sender_host(dir: Direction) -> Host {
    match dir {
        Direction::ClientToServer => Host::Client,
        Direction::ServerToClient => Host::Server,
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

/// The socket option that queues ICMP errors: `IP_RECVERR` or `IPV6_RECVERR`.
fn recverr(ipv6: bool) -> &'static str {
    if ipv6 {
        "IPV6_RECVERR"
    } else {
        "IP_RECVERR"
    }
}

/// The ICMP message PMTUD needs, by family: IPv4's frag-needed or ICMPv6 Packet Too Big.
fn too_big_name(ipv6: bool) -> &'static str {
    if ipv6 {
        "ICMPv6 \"Packet Too Big\""
    } else {
        "ICMP \"fragmentation needed\""
    }
}

fn probe_evidence(d: &DirectionData, ipv6: bool) -> Evidence {
    let table: Vec<String> = d
        .probes
        .iter()
        .map(|p| format!("{} B {}/{}", p.size, p.received, p.sent))
        .collect();
    Evidence::new(
        format!("{} DF probes (size arrived/sent)", d.direction.label()),
        Quantity::Text(table.join(", ")),
    )
    .with_detail(if ipv6 {
        "UDP with IPV6_PMTUDISC_PROBE (DF is implicit: IPv6 routers never fragment); sizes are whole IP datagrams, from the IPv6 minimum of 1280 B"
    } else {
        "UDP with IP_PMTUDISC_PROBE; sizes are whole IP datagrams"
    })
}

/// Whether the TCP segments of one data direction fit its path MTU, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TcpGuard {
    /// The sender's MSS plus headers fit the path MTU. `clamp`: a middlebox lowered the MSS
    /// option on the way (sent → arrived); `None`: the receiver advertised it that small itself.
    Fits {
        mss: u32,
        clamp: Option<MssComparison>,
    },
    /// The sender's segments are larger than the path passes.
    TooBig { mss: u32 },
    /// No handshake was measured.
    Unknown,
}

/// The handshake comparison whose MSS governs data flowing in `data_dir`: the client's SYN
/// (travelling client→server) sets the server's segment size, the server's SYN-ACK the client's.
fn governing(data: &MtuData, data_dir: Direction) -> Option<&MssComparison> {
    let syn_dir = match data_dir {
        Direction::ServerToClient => Direction::ClientToServer,
        Direction::ClientToServer => Direction::ServerToClient,
    };
    data.mss_comparison.iter().find(|c| c.direction == syn_dir)
}

fn tcp_guard(data: &MtuData, data_dir: Direction, path_mtu: u16) -> TcpGuard {
    let Some(c) = governing(data, data_dir) else {
        return TcpGuard::Unknown;
    };
    let mss = c.arrived;
    if mss + hdr(data.ipv6) <= u32::from(path_mtu) {
        TcpGuard::Fits {
            mss,
            clamp: (c.rewritten == Some(true)).then_some(*c),
        }
    } else {
        TcpGuard::TooBig { mss }
    }
}

/// What the timed downloads showed (server→client only).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Download<'a> {
    NotMeasured,
    /// Only the normal-MSS download (no smaller server→client MTU to compare with).
    Reference(&'a BulkRun),
    Fine(&'a BulkRun, &'a BulkRun),
    Stalled(&'a BulkRun, &'a BulkRun),
    /// Even the reduced-MSS download crawled (a large share retransmitted): a smaller MSS does
    /// not help, so the segment size TCP chose is not what is lost.
    BothCrawl(&'a BulkRun, &'a BulkRun),
}

fn download(data: &MtuData) -> Download<'_> {
    match (&data.bulk_full, &data.bulk_reduced) {
        (None, _) => Download::NotMeasured,
        (Some(f), None) => Download::Reference(f),
        (Some(f), Some(r)) if crate::offload::crawled(r) => Download::BothCrawl(f, r),
        (Some(f), Some(r)) if bulk_stalled(f, r) => Download::Stalled(f, r),
        (Some(f), Some(r)) => Download::Fine(f, r),
    }
}

/// TCP's state in `dir` for a path that loses sizes above `mtu`: whether it is protected and
/// the sentence that says so, for the black-hole and download findings alike.
struct TcpStory {
    protected: bool,
    sentence: String,
}

fn tcp_story(data: &MtuData, dir: Direction, mtu: u16) -> TcpStory {
    let guard = tcp_guard(data, dir, mtu);
    let dl = if dir == Direction::ServerToClient {
        download(data)
    } else {
        Download::NotMeasured
    };
    let path = format_bytes(u64::from(mtu));
    let who = dir.sender();
    let fits_because = |mss: u32, clamp: Option<MssComparison>| {
        match clamp {
        Some(c) => format!(
            "a middlebox clamps the MSS of the {}'s {} from {} to {}, so the {who} sends segments of at most {} B, which fit the {path} path",
            dir.receiver(),
            if c.direction == Direction::ClientToServer { "SYN" } else { "SYN-ACK" },
            c.sent,
            c.arrived,
            mss + hdr(data.ipv6)
        ),
        None => format!(
            "the {} advertises MSS {mss} itself ({}), so the {who} sends segments of at most {} B, which fit the {path} path",
            dir.receiver(),
            match data.direction(dir.reversed()).and_then(|d| d.cached_pmtu) {
                Some(c) => format!(
                    "its kernel had learned a {c} B path MTU from an earlier ICMP too-big; that lasts about 10 min, and a clamp on the path, if any, would not show in this run"
                ),
                None => "its own interface or route MTU is small enough".to_string(),
            },
            mss + hdr(data.ipv6)
        ),
    }
    };
    match (guard, dl) {
        (_, Download::BothCrawl(f, r)) => TcpStory {
            protected: false,
            sentence: format!(
                "Downloads crawl: {} with the client's normal MSS, and still {} with the MSS set to {}, so a smaller MSS does not help{}.",
                Quantity::Goodput(f.goodput_bps()),
                Quantity::Goodput(r.goodput_bps()),
                r.client_mss.unwrap_or(0),
                if crate::offload::detected(data) {
                    ": the server emits frames larger than its TCP asked for, a second fault to fix after this one (nic-offload-ignores-mtu)"
                } else {
                    ""
                }
            ),
        },
        (TcpGuard::Fits { mss, clamp }, Download::Stalled(f, r)) => TcpStory {
            protected: false,
            sentence: format!(
                "The MSS would protect TCP ({}), yet the timed download stalled at {} and ran at {} with the MSS set to {}: the {who} emits segments larger than its MSS (check its NIC segmentation offload).",
                fits_because(mss, clamp),
                Quantity::Goodput(f.goodput_bps()),
                Quantity::Goodput(r.goodput_bps()),
                r.client_mss.unwrap_or(0)
            ),
        },
        (TcpGuard::Fits { mss, clamp }, dl) => TcpStory {
            protected: true,
            sentence: format!(
                "TCP {} this client are protected: {}{}. Still at risk: traffic that does not size its packets by TCP's MSS (UDP and QUIC with large datagrams, VPN and tunnel traffic, IPsec), {}; for them packets over {path} vanish silently.",
                if dir == Direction::ServerToClient { "downloads to" } else { "uploads from" },
                fits_because(mss, clamp),
                match dl {
                    Download::Fine(f, _) | Download::Reference(f) => format!(
                        " (the timed download ran at {})",
                        Quantity::Goodput(f.goodput_bps())
                    ),
                    _ => String::new(),
                },
                if clamp.is_some() {
                    "IPv6 if the clamp covers only IPv4, and TCP from hosts or paths the clamp does not cover"
                } else {
                    "and TCP from hosts that advertise a larger MSS"
                }
            ),
        },
        (TcpGuard::TooBig { mss }, Download::Stalled(f, r)) => TcpStory {
            protected: false,
            sentence: format!(
                "TCP on the {who} sends {} B segments (MSS {mss}) that are silently dropped: connections open and small transfers work, bulk transfers stall. The timed download got {} with the client's normal MSS and {} with the MSS set to {}.",
                mss + hdr(data.ipv6),
                Quantity::Goodput(f.goodput_bps()),
                Quantity::Goodput(r.goodput_bps()),
                r.client_mss.unwrap_or(0)
            ),
        },
        (TcpGuard::TooBig { mss }, Download::Fine(f, _)) => TcpStory {
            protected: true,
            sentence: format!(
                "The server's TCP started with {} B segments (MSS {mss}) but recovered: the timed download was not slowed ({}; server net.ipv4.tcp_mtu_probing = {}). Other traffic that does not size its packets by TCP's MSS (UDP, QUIC, tunnels) still loses packets over {path} silently.",
                mss + hdr(data.ipv6),
                Quantity::Goodput(f.goodput_bps()),
                data.server_tcp_mtu_probing.as_deref().unwrap_or("unknown")
            ),
        },
        (TcpGuard::TooBig { mss }, _) => TcpStory {
            protected: false,
            sentence: format!(
                "TCP on the {who} sends {} B segments (MSS {mss}) that are silently dropped: connections open and small transfers work, bulk transfers stall or crawl.",
                mss + hdr(data.ipv6)
            ),
        },
        (TcpGuard::Unknown, Download::Stalled(f, _)) => TcpStory {
            protected: false,
            sentence: format!(
                "Bulk transfers stall: the timed download got {} with the client's normal MSS.",
                Quantity::Goodput(f.goodput_bps())
            ),
        },
        (TcpGuard::Unknown, _) => TcpStory {
            protected: false,
            sentence: format!(
                "TCP senders whose segments exceed {path} stall (the handshake MSS was not measured, so whether this connection's TCP is affected is unknown)."
            ),
        },
    }
}

/// The fixes for a direction that loses sizes above `mtu`, each on the machine it applies to.
/// A clamp that exists is never recommended; client workarounds only when TCP is not protected.
fn remedies(
    dir: Direction,
    mtu: u16,
    d: &DirectionData,
    data: &MtuData,
    protected: bool,
) -> Vec<Remedy> {
    let who = dir.sender();
    let on = sender_host(dir);
    let mss = u32::from(mtu).saturating_sub(hdr(data.ipv6));
    let ip_of = |addr: &str| {
        addr.rsplit_once(':')
            .map(|(h, _)| h.trim_matches(['[', ']']).to_string())
            .unwrap_or_else(|| addr.to_string())
    };
    let peer = match dir {
        Direction::ServerToClient => data
            .client_observed
            .as_deref()
            .map(ip_of)
            .unwrap_or_else(|| "CLIENT_ADDR".into()),
        Direction::ClientToServer => ip_of(&data.server),
    };
    let ip = if data.ipv6 { "ip -6" } else { "ip" };
    let mut r = icmp_remedies(who, &on, data.ipv6);
    r.extend([
        Remedy::new(format!("Let the {who}'s TCP find the MTU without ICMP after a black-hole timeout (RFC 4821; the net.ipv4 sysctl governs IPv6 TCP too); persist it in /etc/sysctl.d"))
            .on(on.clone())
            .with_command("sysctl -w net.ipv4.tcp_mtu_probing=1"),
        Remedy::new(format!("Hotfix for every protocol: lock the path MTU towards the peer (replace GATEWAY with the {who}'s next hop)"))
            .on(on.clone())
            .with_command(format!("{ip} route add {peer} via GATEWAY mtu lock {mtu}")),
    ]);
    let clamp_seen = governing(data, dir).is_some_and(|c| c.rewritten == Some(true));
    if !clamp_seen {
        let router = Host::Router {
            hop: None,
            address: d
                .location
                .as_ref()
                .and_then(|l| l.addr)
                .map(|a| a.to_string()),
        };
        let at = match &d.location {
            Some(l) if l.hop > 0 => format!(", hop {} from the {who}", l.hop),
            _ => String::new(),
        };
        r.push(
            Remedy::new(format!("Clamp the MSS of forwarded SYNs to the route MTU (on the router in front of the smaller link{at}), so TCP fits the path whatever ICMP does"))
                .on(router)
                .with_command("nft add rule inet filter forward tcp flags syn tcp option maxseg size set rt mtu"),
        );
    }
    if dir == Direction::ServerToClient && !protected {
        r.push(
            Remedy::new("Workaround for downloads: ask the server for smaller segments by advertising a smaller MSS on the route to it")
                .on(Host::Client)
                .with_command(format!("{ip} route add {} via GATEWAY advmss {mss}", ip_of(&data.server))),
        );
    }
    if !protected {
        r.push(
            Remedy::new(format!("If ICMP does arrive and the {who} still sends full-size frames, check its NIC segmentation offload (an emulated rtl8139 has been seen ignoring the MTU in TSO)"))
                .on(on)
                .with_command("ethtool -k IFACE | grep segmentation-offload   # then: ethtool -K IFACE tso off gso off"),
        );
    }
    r
}

/// Letting the too-big message through on the sender, in the path's own family first.
fn icmp_remedies(who: &str, on: &Host, ipv6: bool) -> Vec<Remedy> {
    let v4 = [
        Remedy::new(format!("Let ICMP \"fragmentation needed\" (type 3 code 4) reach the {who}; check every firewall in front of it too"))
            .on(on.clone())
            .with_command("nft insert rule inet filter input icmp type destination-unreachable icmp code frag-needed accept"),
        Remedy::new("The same with iptables")
            .on(on.clone())
            .with_command("iptables -I INPUT -p icmp --icmp-type fragmentation-needed -j ACCEPT"),
    ];
    if !ipv6 {
        let mut r = v4.to_vec();
        r.push(
            Remedy::new("IPv6 needs Packet Too Big (RFC 4890 says never filter it)")
                .on(on.clone())
                .with_command(
                    "nft insert rule inet filter input icmpv6 type packet-too-big accept",
                ),
        );
        return r;
    }
    vec![
        Remedy::new(format!("Let ICMPv6 \"Packet Too Big\" (type 2) reach the {who}: IPv6 routers never fragment, so without it every bigger packet is lost (RFC 4890 §4.3.1: never filter it); check every firewall in front of it too"))
            .on(on.clone())
            .with_command("nft insert rule inet filter input icmpv6 type packet-too-big accept"),
        Remedy::new("The same with ip6tables")
            .on(on.clone())
            .with_command("ip6tables -I INPUT -p icmpv6 --icmpv6-type packet-too-big -j ACCEPT"),
    ]
}

fn direction_findings(d: &DirectionData, data: &MtuData) -> Vec<Finding> {
    let mut out = direction_verdict(d, data);
    if let (Some(f), Some(m)) = (out.first_mut(), d.cached_pmtu) {
        f.evidence.push(
            Evidence::new(
                format!("path MTU the {}'s kernel had cached", d.direction.sender()),
                Quantity::Bytes(u64::from(m)),
            )
            .with_detail("from an earlier ICMP too-big; the probes ignore it and measure afresh"),
        );
    }
    out
}

fn direction_verdict(d: &DirectionData, data: &MtuData) -> Vec<Finding> {
    let dir = d.direction;
    // Hops count from the client in findings; a server→client location counts from the server.
    let client_hop = d
        .location
        .as_ref()
        .filter(|l| dir == Direction::ClientToServer && l.hop > 0)
        .map(|l| u32::from(l.hop));
    let finding = |id: &'static str, status, title: String| {
        let f = Finding::new(CHECK, id, status, title).direction(core_direction(dir));
        match client_hop {
            Some(h) if id != "path-mtu" || d.outcome.has_drop() => f.hop(h),
            _ => f,
        }
    };
    let mtu_evidence = |mtu: u16| {
        Evidence::new(
            format!("{} path MTU", dir.label()),
            Quantity::Bytes(u64::from(mtu)),
        )
    };
    let mut out = Vec::new();
    match &d.outcome {
        Outcome::NothingArrived => out.push(
            finding("path-mtu", Status::Inconclusive, format!("{}: no UDP probe arrived", dir.label()))
                .summary(format!(
                    "Not even the smallest DF probe ({} B) reached the {}; UDP to/from the server port may be filtered, so the path MTU cannot be measured this way.",
                    d.probes.iter().map(|p| p.size).min().unwrap_or(0),
                    dir.receiver()
                ))
                .evidence(probe_evidence(d, data.ipv6)),
        ),
        Outcome::Clean { mtu, cap } => {
            let (title, summary, detail) = match cap {
                SizeCap::SenderInterface => (
                    format!("{}: path MTU {mtu} B, every size passes", dir.label()),
                    format!(
                        "DF probes of every size up to {mtu} B arrived; {mtu} B is the {}'s interface MTU, the largest it can send.",
                        dir.sender()
                    ),
                    format!("the {}'s interface MTU", dir.sender()),
                ),
                SizeCap::ProbeLimit => (
                    format!("{}: path MTU ≥ {mtu} B (probe limit), every probed size passes", dir.label()),
                    format!(
                        "DF probes of every size up to {mtu} B arrived. {mtu} B is the largest size probed, not a limit of the path: the path MTU is at least that."
                    ),
                    "at least: the largest size probed".to_string(),
                ),
            };
            out.push(
                finding("path-mtu", Status::Pass, title)
                    .summary(summary)
                    .evidence(mtu_evidence(*mtu).with_detail(detail))
                    .evidence(probe_evidence(d, data.ipv6)),
            );
        }
        Outcome::Signalled { mtu, ptb_mtu, ptb_from } => {
            let from = ptb_from.map(|a| a.to_string()).unwrap_or_else(|| "an unknown router".into());
            out.push(
                finding("path-mtu", Status::Pass, format!("{}: path MTU {mtu} B, PMTUD works", dir.label()))
                    .summary(format!(
                        "Probes larger than {mtu} B were dropped {} and {from} told the {} with ICMP too-big (MTU {ptb_mtu}), so TCP adapts.",
                        where_text(dir, &d.location),
                        dir.sender()
                    ))
                    .requirement("RFC 1191 / RFC 8201: a router that cannot forward a DF packet sends ICMP too-big with its next-hop MTU")
                    .evidence(mtu_evidence(*mtu))
                    .evidence(Evidence::new("ICMP too-big next-hop MTU", Quantity::Bytes(u64::from(*ptb_mtu))).with_detail(format!("from {from}, read from the {}'s socket error queue ({})", dir.sender(), recverr(data.ipv6))))
                    .evidence(probe_evidence(d, data.ipv6)),
            );
        }
        Outcome::BlackHole { mtu, smallest_lost } => {
            let story = tcp_story(data, dir, *mtu);
            let (status, title) = if story.protected {
                (
                    Status::Warn,
                    format!("PMTUD black hole {}: packets over {mtu} B vanish without ICMP too-big; TCP is protected here, other traffic is not", dir.label()),
                )
            } else {
                (
                    Status::Fail,
                    format!("PMTUD black hole {}: packets over {mtu} B vanish and no ICMP too-big reaches the {}", dir.label(), dir.sender()),
                )
            };
            let mut f = finding("pmtud-black-hole", status, title)
                .summary(format!(
                    "DF probes up to {mtu} B arrive, {smallest_lost} B and larger are lost {}, and the {} never received an {}. {}",
                    where_text(dir, &d.location),
                    dir.sender(),
                    too_big_name(data.ipv6),
                    story.sentence
                ))
                .requirement("RFC 1191 / RFC 8201 PMTUD needs ICMP too-big to reach the sender; RFC 4890 says never filter it")
                .evidence(mtu_evidence(*mtu))
                .evidence(Evidence::new("smallest size lost", Quantity::Bytes(u64::from(*smallest_lost))))
                .evidence(Evidence::new(format!("ICMP too-big seen by the {}", dir.sender()), Quantity::Count(0)).with_detail(format!("socket error queue ({}) after every probe round", recverr(data.ipv6))))
                .evidence(probe_evidence(d, data.ipv6));
            if let Some(loc) = &d.location {
                f = f.evidence(Evidence::new("where the MTU drops", Quantity::Text(where_text(dir, &Some(loc.clone())))));
            }
            if let Some(c) = governing(data, dir) {
                f = f.evidence(
                    Evidence::new("MSS the sender uses", Quantity::Bytes(u64::from(c.arrived)))
                        .with_detail(if c.rewritten == Some(true) { format!("clamped from {} on the way", c.sent) } else { "as advertised".to_string() }),
                );
            }
            out.push(f.remedies(remedies(dir, *mtu, d, data, story.protected)));
        }
        Outcome::BadSuggestion { mtu, ptb_mtu, ptb_from } => {
            let from = ptb_from.map(|a| a.to_string()).unwrap_or_else(|| "a router".into());
            let story = tcp_story(data, dir, *mtu);
            out.push(
                finding(
                    "pmtud-bad-suggestion",
                    if story.protected { Status::Warn } else { Status::Fail },
                    format!("{}: ICMP too-big says MTU {ptb_mtu} but only {mtu} B passes", dir.label()),
                )
                .summary(format!(
                    "{from} reported a next-hop MTU of {ptb_mtu} B, yet probes up to that size are lost; only {mtu} B pass. A later link has a smaller MTU and its ICMP is lost (scamper calls this PTB_BAD). {}",
                    story.sentence
                ))
                .evidence(mtu_evidence(*mtu))
                .evidence(Evidence::new("ICMP too-big next-hop MTU", Quantity::Bytes(u64::from(*ptb_mtu))))
                .evidence(probe_evidence(d, data.ipv6))
                .remedies(remedies(dir, *mtu, d, data, story.protected)),
            );
        }
    }
    out
}

/// MTU a data direction's segments must fit, when that direction loses larger sizes.
fn dropping_mtu(data: &MtuData, data_dir: Direction) -> Option<u16> {
    data.direction(data_dir)
        .filter(|d| d.outcome.has_drop())
        .and_then(|d| d.outcome.mtu())
}

fn mss_findings(data: &MtuData) -> Vec<Finding> {
    let mut out = Vec::new();
    let h = hdr(data.ipv6);
    for c in &data.mss_comparison {
        // The client's SYN sets the server's segment size (server→client data) and back.
        let data_dir = match c.direction {
            Direction::ClientToServer => Direction::ServerToClient,
            Direction::ServerToClient => Direction::ClientToServer,
        };
        let what = if c.direction == Direction::ClientToServer {
            "SYN"
        } else {
            "SYN-ACK"
        };
        let path_mtu = dropping_mtu(data, data_dir);
        let received_detail = match c.direction {
            Direction::ClientToServer => "server: TCP_SAVED_SYN of the client's SYN",
            Direction::ServerToClient => "client: TCP_INFO snd_mss plus timestamp option bytes",
        };
        let base = |id: &'static str, status, title: String| {
            Finding::new(CHECK, id, status, title)
                .direction(core_direction(c.direction))
                .evidence(Evidence::new(
                    "MSS sent",
                    Quantity::Bytes(u64::from(c.sent)),
                ))
                .evidence(
                    Evidence::new("MSS received", Quantity::Bytes(u64::from(c.arrived)))
                        .with_detail(received_detail),
                )
        };
        match c.rewritten {
            Some(true) => {
                let fits = path_mtu.map(|m| c.arrived + h <= u32::from(m));
                let status = if fits == Some(false) {
                    Status::Warn
                } else {
                    Status::Info
                };
                let mut summary = format!(
                    "The {} advertised MSS {} in its {what}; the {} received MSS {}: a middlebox on the path rewrites (clamps) the TCP MSS option.",
                    c.direction.sender(),
                    c.sent,
                    c.direction.receiver(),
                    c.arrived
                );
                match (fits, path_mtu) {
                    (Some(false), Some(m)) => summary.push_str(&format!(
                        " The clamped value is still too large for the {} path MTU ({m} B): {} B segments are dropped.",
                        data_dir.label(),
                        c.arrived + h
                    )),
                    (Some(true), Some(m)) => summary.push_str(&format!(
                        " It makes the {}'s segments ({} B) fit the {} path MTU of {m} B, which protects TCP against the smaller link.",
                        data_dir.sender(),
                        c.arrived + h,
                        data_dir.label()
                    )),
                    _ => summary.push_str(" That is a common and healthy workaround for a smaller link."),
                }
                let mut f = base(
                    "mss-clamped",
                    status,
                    format!(
                        "MSS clamped {}: {} → {}",
                        c.direction.label(),
                        c.sent,
                        c.arrived
                    ),
                )
                .summary(summary);
                if fits == Some(false) {
                    f = f.remedy(
                        Remedy::new("On the router that clamps: clamp to the route MTU instead of a fixed value")
                            .on(Host::Router { hop: None, address: None })
                            .with_command("nft add rule inet filter forward tcp flags syn tcp option maxseg size set rt mtu"),
                    );
                }
                out.push(f);
            }
            Some(false) => {
                // A clamp shows only if the sender advertised more than a clamp would allow.
                let own_mtu = match c.direction {
                    Direction::ClientToServer => data.mss.and_then(|m| m.client_pmtu),
                    Direction::ServerToClient => None,
                };
                let interface = data
                    .direction(c.direction)
                    .filter(|d| d.local_limit.is_some())
                    .map(|d| u32::from(d.max_probed));
                let full = match (own_mtu, interface) {
                    (Some(own), Some(ifc)) => own >= ifc && c.sent + h >= own,
                    (Some(own), None) => c.sent + h >= own,
                    (None, Some(ifc)) => c.sent + h >= ifc,
                    (None, None) => path_mtu.is_none_or(|m| c.sent + h > u32::from(m)),
                };
                let summary = if full {
                    format!(
                        "The MSS option of the {what} arrived as it was sent, and the {} advertised the largest MSS its route allows: nothing lowers the MSS of {}s on their way to the {}.",
                        c.direction.sender(),
                        what,
                        c.direction.receiver()
                    )
                } else {
                    format!(
                        "The MSS option of the {what} arrived as it was sent. The {} advertised only {}{}, so a clamp at {} or above would not show here.",
                        c.direction.sender(),
                        c.sent,
                        own_mtu
                            .filter(|&o| interface.is_some_and(|i| o < i))
                            .map(|o| format!(" (its kernel had learned a {o} B path MTU towards the server)"))
                            .unwrap_or_default(),
                        c.sent
                    )
                };
                out.push(
                    base(
                        "mss-unchanged",
                        Status::Pass,
                        format!("MSS {} arrives unchanged {}", c.sent, c.direction.label()),
                    )
                    .summary(summary),
                );
            }
            None => {}
        }
    }
    out
}

fn bulk_findings(data: &MtuData) -> Vec<Finding> {
    let probing = data
        .server_tcp_mtu_probing
        .clone()
        .unwrap_or_else(|| "unknown".into());
    let run_ev = |name: String, r: &BulkRun| {
        let mut detail = format!("{} bytes in {:.1} s", r.bytes, r.seconds);
        if let Some(s) = r.server {
            detail.push_str(&format!(
                "; server snd_mss {} B, pmtu {} B, {} retransmissions (TCP_INFO)",
                s.snd_mss, s.pmtu, s.total_retrans
            ));
            if let Some(sent) = s.data_segs_out {
                detail.push_str(&format!(" of {sent} data segments"));
            }
        }
        Evidence::new(name, Quantity::Goodput(r.goodput_bps())).with_detail(detail)
    };
    let normal = |r: &BulkRun| run_ev("download, the client's normal MSS".into(), r);
    let reduced = |r: &BulkRun| {
        run_ev(
            format!(
                "download, client MSS {} (TCP_MAXSEG set before connect)",
                r.client_mss.unwrap_or(0)
            ),
            r,
        )
    };
    let probing_ev = Evidence::new(
        "server net.ipv4.tcp_mtu_probing",
        Quantity::Text(probing.clone()),
    )
    .with_detail(
        "0 = never recovers from a black hole; 1 = probes after repeated timeouts; 2 = always",
    );
    let finding = |id: &'static str, status, title: &str| {
        Finding::new(CHECK, id, status, title).direction(pathdoc_core::Direction::ServerToClient)
    };
    match download(data) {
        Download::NotMeasured => Vec::new(),
        Download::Reference(f) => vec![finding("bulk-download", Status::Info, "bulk download measured for reference")
            .summary("No smaller server→client MTU was found, so there was nothing to compare with a reduced MSS; the rate is for reference.")
            .evidence(normal(f))],
        Download::Stalled(f, r) => {
            let mut finding = finding("bulk-download-stall", Status::Fail, "downloads with the client's normal MSS stall; with an MSS that fits the path they are fast")
                .summary(format!(
                    "The same server→client download got {} with the MSS the client normally advertises and {} with the client's MSS set to {} (≥ {}× faster). The larger segments are dropped on the path; this is the symptom users feel.",
                    Quantity::Goodput(f.goodput_bps()),
                    Quantity::Goodput(r.goodput_bps()),
                    r.client_mss.unwrap_or(0),
                    crate::analysis::STALL_RATIO
                ))
                .evidence(normal(f))
                .evidence(reduced(r))
                .evidence(probing_ev);
            if probing.trim() == "0" {
                finding = finding.remedy(
                    Remedy::new("Enable TCP black-hole MTU probing (RFC 4821); persist it in /etc/sysctl.d")
                        .on(Host::Server)
                        .with_command("sysctl -w net.ipv4.tcp_mtu_probing=1"),
                );
            }
            vec![finding]
        }
        // The offload finding carries both downloads when it fired.
        Download::BothCrawl(..) if crate::offload::detected(data) => Vec::new(),
        Download::BothCrawl(f, r) => vec![finding("bulk-download", Status::Inconclusive, "downloads crawl even with a smaller MSS")
            .summary(format!(
                "A download with the client's normal MSS ran at {} and one with the MSS set to {} at {}, with a large share of segments retransmitted: the segment size is not what limits it, and this check cannot tell what does (try `pathdoc check --throughput`).",
                Quantity::Goodput(f.goodput_bps()),
                r.client_mss.unwrap_or(0),
                Quantity::Goodput(r.goodput_bps())
            ))
            .evidence(normal(f))
            .evidence(reduced(r))],
        Download::Fine(f, r) => {
            let why = match dropping_mtu(data, Direction::ServerToClient) {
                Some(m) => match tcp_guard(data, Direction::ServerToClient, m) {
                    TcpGuard::Fits { mss, clamp: Some(c) } => format!(
                        " The server's segments fit the {m} B path: the client's SYN was clamped from MSS {} to {mss} on the way.",
                        c.sent
                    ),
                    TcpGuard::Fits { mss, clamp: None } => format!(
                        " The server's segments fit the {m} B path: the client advertised MSS {mss} itself."
                    ),
                    _ => format!(" The server's TCP coped with the {m} B path."),
                },
                None => String::new(),
            };
            vec![finding("bulk-download", Status::Pass, "downloads are not slowed by the path MTU")
                .summary(format!(
                    "A download with the MSS the client normally advertises ran at {}, about as fast as with the MSS set to {} ({}).{why}",
                    Quantity::Goodput(f.goodput_bps()),
                    r.client_mss.unwrap_or(0),
                    Quantity::Goodput(r.goodput_bps())
                ))
                .evidence(normal(f))
                .evidence(reduced(r))
                .evidence(probing_ev)]
        }
    }
}

/// Steps that did not run: a direction not measured is an inconclusive `path-mtu`; any other
/// step is a `step-not-run` note.
fn not_run_findings(data: &MtuData) -> Vec<Finding> {
    data.not_run
        .iter()
        .map(|n| match n.step {
            Step::DownSearch | Step::UpSearch => {
                let dir = if n.step == Step::DownSearch {
                    Direction::ServerToClient
                } else {
                    Direction::ClientToServer
                };
                Finding::new(
                    CHECK,
                    "path-mtu",
                    Status::Inconclusive,
                    format!("{}: path MTU not measured", dir.label()),
                )
                .direction(core_direction(dir))
                .summary(format!(
                    "{} did not run: {}.",
                    capitalize(n.step.words()),
                    n.why
                ))
            }
            _ if n.busy => describe_busy(
                Finding::new(CHECK, "server-busy", Status::Warn, ""),
                n.step.words(),
                &n.refusal
                    .clone()
                    .unwrap_or_else(|| ServerBusy::new(n.why.clone(), None, None)),
            ),
            _ => Finding::new(
                CHECK,
                "step-not-run",
                Status::Info,
                format!("{} did not run", n.step.words()),
            )
            .summary(format!(
                "{} did not run: {}.",
                capitalize(n.step.words()),
                n.why
            )),
        })
        .collect()
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// All findings of the mtu check.
pub fn findings(data: &MtuData) -> Vec<Finding> {
    if let Some(busy) = &data.refused {
        // Nothing ran: one WARN saying so, not a path MTU "not measured" per direction.
        return vec![describe_busy(
            Finding::new(CHECK, "server-busy", Status::Warn, ""),
            "the mtu check",
            busy,
        )];
    }
    let mut out = Vec::new();
    for d in [&data.up, &data.down].into_iter().flatten() {
        out.extend(direction_findings(d, data));
    }
    // After the direction findings: a black hole is the first fault to fix, this the second.
    out.extend(crate::offload::finding(data));
    out.extend(mss_findings(data));
    out.extend(bulk_findings(data));
    out.extend(not_run_findings(data));
    out
}

#[cfg(test)]
mod busy_tests {
    use super::*;

    #[test]
    fn a_download_the_server_was_too_busy_for_is_a_warning_not_a_note() {
        let mut data = MtuData::default();
        data.refused_busy(
            Step::Download,
            ServerBusy::new(
                "the server is busy: 8 of its 8 bulk downloads are in use",
                Some("bulk-fair-share".into()),
                Some(8),
            ),
        );
        data.not_run(Step::Mss, "the check was interrupted");
        let f = findings(&data);
        let busy = f.iter().find(|f| f.id == "server-busy").unwrap();
        assert_eq!(busy.status, Status::Warn);
        assert!(
            busy.title
                .contains("the server was busy: the timed download not run"),
            "{}",
            busy.title
        );
        assert!(busy.summary.contains("8 of its 8"), "{}", busy.summary);
        let note = f.iter().find(|f| f.id == "step-not-run").unwrap();
        assert_eq!(note.status, Status::Info);
        assert_eq!(busy.evidence[1].value, Quantity::Count(8));
        assert!(busy.remedies.iter().any(|r| r.host == Some(Host::Client)));
        assert!(busy.remedies.iter().any(|r| r.host == Some(Host::Server)));
    }

    #[test]
    fn a_session_the_server_had_no_room_for_is_one_warning() {
        let data = MtuData {
            refused: Some(ServerBusy::new(
                "the server is busy: 512 of its 512 live sessions are in use",
                Some("sessions-fair-share".into()),
                Some(512),
            )),
            ..Default::default()
        };
        let f = findings(&data);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].id.as_str(), f[0].status),
            ("server-busy", Status::Warn)
        );
        assert_eq!(f[0].title, "the server was busy: the mtu check not run");
        assert!(f[0].remedies[1].description.contains("--max-sessions"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{BulkServerStats, IcmpKind};

    fn dir(direction: Direction, outcome: Outcome) -> DirectionData {
        DirectionData {
            direction,
            max_probed: 1500,
            local_limit: Some(1501),
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
            cached_pmtu: None,
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

    fn clean() -> Outcome {
        Outcome::Clean {
            mtu: 1500,
            cap: SizeCap::SenderInterface,
        }
    }

    fn black_hole(mtu: u16) -> Outcome {
        Outcome::BlackHole {
            mtu,
            smallest_lost: mtu + 1,
        }
    }

    fn run(mss: Option<u32>, bytes: u64, snd_mss: u32) -> BulkRun {
        BulkRun {
            client_mss: mss,
            seconds: 1.0,
            bytes,
            rcv_mss: None,
            server: Some(BulkServerStats {
                bytes_acked: bytes,
                snd_mss,
                pmtu: 1500,
                total_retrans: 0,
                data_segs_out: None,
                icmp_too_big_in: None,
            }),
        }
    }

    fn comparison(direction: Direction, sent: u32, arrived: u32) -> MssComparison {
        MssComparison {
            direction,
            sent,
            arrived,
            rewritten: Some(sent != arrived),
        }
    }

    fn texts(f: &[Finding]) -> String {
        f.iter()
            .map(|f| {
                let remedies: Vec<String> = f
                    .remedies
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {}",
                            r.description,
                            r.command.clone().unwrap_or_default()
                        )
                    })
                    .collect();
                format!("{} | {} | {}", f.title, f.summary, remedies.join(" | "))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn verdict_table() {
        let sig = Outcome::Signalled {
            mtu: 1420,
            ptb_mtu: 1420,
            ptb_from: None,
        };
        use pathdoc_core::Direction::{ClientToServer as Up, ServerToClient as Down};
        // (up, down, expected (id, direction, status))
        type Case = (
            Outcome,
            Outcome,
            Vec<(&'static str, pathdoc_core::Direction, Status)>,
        );
        let cases: Vec<Case> = vec![
            (
                clean(),
                clean(),
                vec![
                    ("path-mtu", Up, Status::Pass),
                    ("path-mtu", Down, Status::Pass),
                ],
            ),
            (
                clean(),
                black_hole(1420),
                vec![
                    ("path-mtu", Up, Status::Pass),
                    ("pmtud-black-hole", Down, Status::Fail),
                ],
            ),
            (
                black_hole(1420),
                sig,
                vec![
                    ("pmtud-black-hole", Up, Status::Fail),
                    ("path-mtu", Down, Status::Pass),
                ],
            ),
            (
                Outcome::NothingArrived,
                clean(),
                vec![
                    ("path-mtu", Up, Status::Inconclusive),
                    ("path-mtu", Down, Status::Pass),
                ],
            ),
        ];
        for (up, down, want) in cases {
            let data = MtuData {
                up: Some(dir(Direction::ClientToServer, up)),
                down: Some(dir(Direction::ServerToClient, down)),
                ..base()
            };
            let got: Vec<(&str, pathdoc_core::Direction, Status)> = findings(&data)
                .iter()
                .map(|f| {
                    (
                        FINDING_IDS
                            .iter()
                            .find(|i| i.id == f.id)
                            .expect("registered id")
                            .id,
                        f.direction.unwrap(),
                        f.status,
                    )
                })
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn black_hole_names_direction_hop_and_fixes_on_their_hosts() {
        let data = MtuData {
            down: Some(dir(Direction::ServerToClient, black_hole(1420))),
            ..base()
        };
        let f = &findings(&data)[0];
        assert!(f.title.contains("server→client"), "{}", f.title);
        assert!(f.summary.contains("hop 1"), "{}", f.summary);
        let on = |needle: &str| {
            f.remedies
                .iter()
                .find(|r| r.command.as_deref().unwrap_or("").contains(needle))
                .unwrap_or_else(|| panic!("no remedy with {needle}: {:?}", f.remedies))
                .host
                .clone()
                .expect("every remedy names its host")
        };
        assert_eq!(on("icmp code frag-needed accept"), Host::Server);
        assert_eq!(on("10.0.1.2 via GATEWAY mtu lock 1420"), Host::Server);
        assert_eq!(on("tcp_mtu_probing=1"), Host::Server);
        assert_eq!(on("ethtool -k"), Host::Server);
        assert_eq!(on("10.0.2.2 via GATEWAY advmss 1380"), Host::Client);
        assert_eq!(
            on("maxseg size set rt mtu"),
            Host::Router {
                hop: None,
                address: Some("10.0.1.1".into())
            }
        );
        assert!(f.remedies.iter().all(|r| r.host.is_some()));
    }

    /// examples/topology.toml: the server eats frag-needed, a 1450-B access link, and the home
    /// router clamps the client's SYN to MSS 1410. TCP is protected; nothing may say otherwise.
    #[test]
    fn black_hole_with_a_protecting_clamp_is_reported_as_such_without_contradiction() {
        let mut data = MtuData {
            up: Some(dir(
                Direction::ClientToServer,
                Outcome::Signalled {
                    mtu: 1450,
                    ptb_mtu: 1450,
                    ptb_from: None,
                },
            )),
            down: Some(dir(Direction::ServerToClient, black_hole(1450))),
            mss_comparison: vec![
                comparison(Direction::ClientToServer, 1460, 1410),
                comparison(Direction::ServerToClient, 1460, 1460),
            ],
            bulk_full: Some(run(None, 14_000_000, 1398)),
            bulk_reduced: Some(run(Some(1410), 14_500_000, 1398)),
            server_tcp_mtu_probing: Some("0".into()),
            ..base()
        };
        data.mss = Some(MssObservation {
            client_sent: Some(1460),
            server_saw: Some(1410),
            client_pmtu: Some(1500),
            header_bytes: 40,
            ..Default::default()
        });
        let f = findings(&data);
        let bh = f.iter().find(|f| f.id == "pmtud-black-hole").unwrap();
        assert_eq!(bh.status, Status::Warn, "{}", texts(&f));
        assert!(bh.summary.contains("clamps the MSS"), "{}", bh.summary);
        assert!(bh.summary.contains("UDP"), "{}", bh.summary);
        let clamp = f.iter().find(|f| f.id == "mss-clamped").unwrap();
        assert_eq!(clamp.status, Status::Info);
        assert!(clamp.summary.contains("protects TCP"), "{}", clamp.summary);
        let dl = f.iter().find(|f| f.id == "bulk-download").unwrap();
        assert_eq!(dl.status, Status::Pass);
        let all = texts(&f).to_lowercase();
        for wrong in [
            "stall",
            "no clamping",
            "no middlebox clamps",
            "full-size",
            "maxseg size set",
            "advmss",
        ] {
            assert!(!all.contains(wrong), "contradicting `{wrong}` in:\n{all}");
        }
    }

    #[test]
    fn a_clamp_is_judged_against_the_direction_it_sizes() {
        // The client's SYN (client→server) sizes the server's segments: compare with the
        // server→client path, not client→server.
        let mut data = MtuData {
            up: Some(dir(Direction::ClientToServer, clean())),
            down: Some(dir(
                Direction::ServerToClient,
                Outcome::Signalled {
                    mtu: 1280,
                    ptb_mtu: 1280,
                    ptb_from: None,
                },
            )),
            mss_comparison: vec![comparison(Direction::ClientToServer, 1460, 1380)],
            ..base()
        };
        let clamp = |data: &MtuData| {
            findings(data)
                .into_iter()
                .find(|f| f.id == "mss-clamped")
                .unwrap()
        };
        let f = clamp(&data);
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert_eq!(f.direction, Some(pathdoc_core::Direction::ClientToServer));
        assert!(f.remedies.iter().all(|r| r.host.is_some()));
        data.down = Some(dir(Direction::ServerToClient, clean()));
        assert_eq!(clamp(&data).status, Status::Info);
        let _ = IcmpKind::TooBig;
    }

    #[test]
    fn no_clamping_is_claimed_only_when_a_clamp_could_have_shown() {
        let mut data = MtuData {
            up: Some(dir(Direction::ClientToServer, clean())),
            mss_comparison: vec![comparison(Direction::ClientToServer, 1410, 1410)],
            ..base()
        };
        // The client's kernel had learned 1450 B: its SYN said 1410, hiding a clamp at ≥ 1410.
        data.mss = Some(MssObservation {
            client_sent: Some(1410),
            server_saw: Some(1410),
            client_pmtu: Some(1450),
            header_bytes: 40,
            ..Default::default()
        });
        let f = findings(&data)
            .into_iter()
            .find(|f| f.id == "mss-unchanged")
            .unwrap();
        assert!(!f.summary.contains("nothing lowers"), "{}", f.summary);
        assert!(f.summary.contains("1450 B path MTU"), "{}", f.summary);
        // The full 1460 advertised and arrived: now "no clamping" is proven.
        data.mss_comparison = vec![comparison(Direction::ClientToServer, 1460, 1460)];
        data.mss.as_mut().unwrap().client_pmtu = Some(1500);
        let f = findings(&data)
            .into_iter()
            .find(|f| f.id == "mss-unchanged")
            .unwrap();
        assert!(
            f.summary.contains("nothing lowers the MSS"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn the_path_mtu_is_never_just_the_probe_cap() {
        let data = MtuData {
            up: Some(dir(
                Direction::ClientToServer,
                Outcome::Clean {
                    mtu: 9000,
                    cap: SizeCap::ProbeLimit,
                },
            )),
            down: Some(dir(Direction::ServerToClient, clean())),
            ..base()
        };
        let f = findings(&data);
        assert!(
            f[0].title.contains("≥ 9000 B (probe limit)"),
            "{}",
            f[0].title
        );
        assert!(f[1].title.contains("path MTU 1500 B"), "{}", f[1].title);
        assert!(f[1].summary.contains("interface MTU"), "{}", f[1].summary);
    }

    #[test]
    fn bulk_stall_is_a_failure_with_the_sysctl_on_the_server() {
        let data = MtuData {
            down: Some(dir(Direction::ServerToClient, black_hole(1420))),
            mss_comparison: vec![comparison(Direction::ClientToServer, 1460, 1460)],
            bulk_full: Some(run(None, 1000, 1448)),
            bulk_reduced: Some(run(Some(1380), 20_000_000, 1368)),
            server_tcp_mtu_probing: Some("0".into()),
            ..base()
        };
        let f = findings(&data);
        let bh = f.iter().find(|f| f.id == "pmtud-black-hole").unwrap();
        assert_eq!(bh.status, Status::Fail);
        assert!(bh.summary.contains("stall"), "{}", bh.summary);
        let stall = f.iter().find(|f| f.id == "bulk-download-stall").unwrap();
        assert_eq!(stall.status, Status::Fail);
        let r = stall
            .remedies
            .iter()
            .find(|r| r.command.as_deref() == Some("sysctl -w net.ipv4.tcp_mtu_probing=1"))
            .unwrap();
        assert_eq!(r.host, Some(Host::Server));
    }

    #[test]
    fn steps_that_did_not_run_say_so() {
        let mut data = base();
        data.not_run(Step::DownSearch, "interrupted");
        data.not_run(Step::Mss, "the server refused the listener");
        let f = findings(&data);
        assert_eq!(f[0].id, "path-mtu");
        assert_eq!(f[0].status, Status::Inconclusive);
        assert!(f[0].summary.contains("interrupted"), "{}", f[0].summary);
        assert_eq!(f[1].id, "step-not-run");
        assert!(f[1].summary.contains("refused"), "{}", f[1].summary);
    }
}
