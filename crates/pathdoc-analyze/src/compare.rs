//! Two captures of one path (e.g. one at the client, one at the server): match each connection
//! in both — through NAT, which rewrites addresses and ports but not sequence numbers — align the
//! two clocks, and say for each direction which packets left one end and never reached the other.
//!
//! Connections are matched by their initial sequence numbers (both ISNs when both handshakes
//! were captured, else the first sequence numbers seen). Packets are matched by (sequence number,
//! acknowledgment number, length, TCP flags, IPv4 identification): NAT keeps all of these. The
//! clock offset comes from the smallest delay each way (symmetric-path assumption).

use std::collections::HashMap;

use pathdoc_capture::CaptureReader;
use pathdoc_core::units::format_duration;
use pathdoc_core::{Direction, Evidence, Finding, Host, Quantity, Remedy, Status};
use serde::Serialize;

use crate::analyzer::{Analyzer, CaptureAnalysis, Options, PacketRecord};
use crate::flags::Flags;
use crate::summary::ConnSummary;

/// Packets kept per capture for matching; beyond it the comparison covers the first ones only.
pub const MAX_RECORDS: usize = 2_000_000;

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Capture(#[from] pathdoc_capture::CaptureError),
}

/// Packets of one kind that did not arrive.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LostKinds {
    pub keepalives: u64,
    pub retransmissions: u64,
    pub data: u64,
    pub syn: u64,
    pub fin: u64,
    pub rst: u64,
    pub pure_acks: u64,
}

/// One lost packet (the first few are listed).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LostPacket {
    /// Seconds since the start of the sending side's capture.
    pub at_s: f64,
    /// Frame number in the sending side's capture.
    pub frame: u64,
    pub kind: String,
    pub seq: u32,
    pub len: u32,
}

/// One direction of a matched connection.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DirectionComparison {
    pub direction: Direction,
    /// Which capture saw it leave (`near` or `far`).
    pub sent_in: String,
    /// Packets that left while the receiving side's capture was running (between its first and
    /// last packet).
    pub sent: u64,
    /// Packets that would have arrived after the receiving capture's last packet: whether that
    /// capture was still running then cannot be told from a pcap file.
    pub unobserved: u64,
    pub arrived: u64,
    pub lost: u64,
    pub lost_kinds: LostKinds,
    pub first_lost_s: Option<f64>,
    pub last_lost_s: Option<f64>,
    /// Idle time before the first lost packet, when the connection had been idle.
    pub lost_after_idle_s: Option<f64>,
    /// Of the packets sent after that idle time, how many arrived.
    pub sent_after_idle: u64,
    pub arrived_after_idle: u64,
    pub examples: Vec<LostPacket>,
    /// Smallest one-way delay seen (after clock alignment), ms.
    pub min_delay_ms: Option<f64>,
}

/// A connection found in both captures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PairComparison {
    pub near_stream: u64,
    pub far_stream: u64,
    pub near: String,
    pub far: String,
    /// Addresses or ports differ between the captures (NAT between them).
    pub nat: bool,
    pub matched_by: String,
    /// True when the near capture is on the client's side of the path.
    pub near_is_client_side: bool,
    /// far clock − near clock, seconds.
    pub clock_offset_s: Option<f64>,
    pub client_syn_mss: (Option<u16>, Option<u16>),
    pub server_syn_mss: (Option<u16>, Option<u16>),
    pub directions: Vec<DirectionComparison>,
    /// The comparison stopped at [`MAX_RECORDS`] packets of one capture.
    pub truncated: bool,
}

/// The whole comparison.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Comparison {
    pub pairs: Vec<PairComparison>,
    /// Streams found in only one capture.
    pub near_only: Vec<u64>,
    pub far_only: Vec<u64>,
}

fn key_of(s: &ConnSummary) -> (u32, u32) {
    (s.client_base_seq, s.server_base_seq)
}

/// Match connections by sequence numbers. Returns (near summary, far summary, how).
fn match_connections<'a>(
    near: &'a CaptureAnalysis,
    far: &'a CaptureAnalysis,
    only: &[u64],
) -> Vec<(&'a ConnSummary, &'a ConnSummary, &'static str)> {
    let mut by_client: HashMap<u32, Vec<&ConnSummary>> = HashMap::new();
    for l in &far.listed {
        by_client
            .entry(l.summary.client_base_seq)
            .or_default()
            .push(&l.summary);
    }
    let mut out = Vec::new();
    for l in &near.listed {
        let n = &l.summary;
        if !only.is_empty() && !only.contains(&n.id) {
            continue;
        }
        let Some(cands) = by_client.get(&n.client_base_seq) else {
            continue;
        };
        let exact = cands.iter().find(|f| key_of(f) == key_of(n));
        let how = if n.syn_seen && n.syn_ack_seen {
            "initial sequence numbers (both handshakes)"
        } else {
            "first sequence numbers"
        };
        if let Some(f) = exact {
            out.push((n, *f, how));
        } else if n.syn_seen {
            if let Some(f) = cands.iter().find(|f| f.syn_seen) {
                out.push((n, *f, "client initial sequence number"));
            }
        }
    }
    out
}

/// A packet's identity across the two captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PacketKey {
    seq: u32,
    ack: u32,
    len: u32,
    flags: u16,
    ip_id: u16,
}

#[derive(Debug, Clone, Copy)]
struct Rec {
    key: PacketKey,
    ts: i64,
    frame: u64,
    flags: Flags,
    /// 0 client→server, 1 server→client.
    dir: u8,
}

/// Packets kept from one capture, per stream, and the capture's time span.
struct Collected {
    recs: HashMap<u64, Vec<Rec>>,
    truncated: bool,
    first: i64,
    last: i64,
}

/// Re-read a capture keeping the packets of the given streams (stream → client endpoint text).
fn collect(
    path: &str,
    streams: &HashMap<u64, String>,
    cancel: &dyn Fn() -> bool,
) -> Result<Collected, CompareError> {
    let mut reader = CaptureReader::open(path)?;
    let mut analyzer = Analyzer::new(Options::default());
    let mut out: HashMap<u64, Vec<Rec>> = HashMap::new();
    let mut client_of: HashMap<u64, crate::conn::Endpoint> = HashMap::new();
    let mut kept = 0usize;
    let mut truncated = false;
    let (mut first, mut last) = (None, 0i64);
    loop {
        let packet = match reader.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            // The first pass already reported the damage; compare what was readable.
            Err(_) => break,
        };
        first.get_or_insert(packet.ts_ns);
        last = last.max(packet.ts_ns);
        if packet.number & 8191 == 0 && cancel() {
            break;
        }
        let Some(r): Option<PacketRecord> = analyzer.process(&packet) else {
            continue;
        };
        let Some(client) = streams.get(&r.stream) else {
            continue;
        };
        if kept >= MAX_RECORDS {
            truncated = true;
            continue;
        }
        let client_ep = *client_of.entry(r.stream).or_insert_with(|| {
            if r.src.to_string() == *client {
                r.src
            } else {
                r.dst
            }
        });
        out.entry(r.stream).or_default().push(Rec {
            key: PacketKey {
                seq: r.seq,
                ack: r.ack,
                len: r.seg_len,
                flags: r.tcp_flags,
                ip_id: r.ip_id,
            },
            ts: r.ts_ns,
            frame: r.number,
            flags: r.flags,
            dir: u8::from(r.src != client_ep),
        });
        kept += 1;
    }
    Ok(Collected {
        recs: out,
        truncated,
        first: first.unwrap_or(0),
        last,
    })
}

/// Compare two capture files whose first passes are `near` and `far`. `only` restricts to
/// these near stream indexes.
pub fn compare_files(
    near_path: &str,
    far_path: &str,
    near: &CaptureAnalysis,
    far: &CaptureAnalysis,
    only: &[u64],
    cancel: &dyn Fn() -> bool,
) -> Result<Comparison, CompareError> {
    let pairs = match_connections(near, far, only);
    let near_streams: HashMap<u64, String> = pairs
        .iter()
        .map(|(n, _, _)| (n.id, n.client.clone()))
        .collect();
    let far_streams: HashMap<u64, String> = pairs
        .iter()
        .map(|(_, f, _)| (f.id, f.client.clone()))
        .collect();
    let Collected {
        recs: near_recs,
        truncated: near_trunc,
        first: near_first,
        last: near_last,
    } = collect(near_path, &near_streams, cancel)?;
    let Collected {
        recs: far_recs,
        truncated: far_trunc,
        first: far_first,
        last: far_last,
    } = collect(far_path, &far_streams, cancel)?;
    let mut result = Comparison::default();
    for (n, f, how) in &pairs {
        let empty = Vec::new();
        let nr = near_recs.get(&n.id).unwrap_or(&empty);
        let fr = far_recs.get(&f.id).unwrap_or(&empty);
        let near_is_client_side = match (
            n.client_to_server.usual_ttl,
            f.client_to_server.usual_ttl,
            n.server_to_client.usual_ttl,
            f.server_to_client.usual_ttl,
        ) {
            (Some(a), Some(b), _, _) if a != b => a > b,
            (_, _, Some(a), Some(b)) if a != b => a < b,
            _ => true,
        };
        let mut pair = PairComparison {
            near_stream: n.id,
            far_stream: f.id,
            near: format!("{} → {}", n.client, n.server),
            far: format!("{} → {}", f.client, f.server),
            nat: n.client != f.client || n.server != f.server,
            matched_by: how.to_string(),
            near_is_client_side,
            clock_offset_s: None,
            client_syn_mss: (
                n.client_to_server.syn_options.and_then(|o| o.mss),
                f.client_to_server.syn_options.and_then(|o| o.mss),
            ),
            server_syn_mss: (
                n.server_to_client.syn_options.and_then(|o| o.mss),
                f.server_to_client.syn_options.and_then(|o| o.mss),
            ),
            directions: Vec::new(),
            truncated: near_trunc || far_trunc,
        };
        // Clock alignment from the smallest apparent delay each way.
        let d_nf = min_delay(nr, fr, if near_is_client_side { 0 } else { 1 });
        let d_fn = min_delay(fr, nr, if near_is_client_side { 1 } else { 0 });
        let (offset, owd) = match (d_nf, d_fn) {
            // In i128: the halves fit in i64 whatever the (saturated) delays.
            (Some(a), Some(b)) => (
                ((i128::from(a) - i128::from(b)) / 2) as i64,
                ((i128::from(a) + i128::from(b)) / 2) as i64,
            ),
            (Some(a), None) => (a, 0),
            (None, Some(b)) => (b.saturating_neg(), 0),
            (None, None) => (0, 0),
        };
        if d_nf.is_some() || d_fn.is_some() {
            pair.clock_offset_s = Some(offset as f64 / 1e9);
        }
        for dir in [0u8, 1] {
            // Which capture sees this direction leave?
            let sender_is_near = (dir == 0) == near_is_client_side;
            let (srecs, rrecs, shift, r_first, r_last, s_first, s_summary) = if sender_is_near {
                (nr, fr, offset, far_first, far_last, near_first, *n)
            } else {
                (
                    fr,
                    nr,
                    offset.saturating_neg(),
                    near_first,
                    near_last,
                    far_first,
                    *f,
                )
            };
            pair.directions.push(compare_direction(
                dir,
                srecs,
                rrecs,
                shift,
                owd,
                (r_first, r_last),
                s_first,
                s_summary,
                if sender_is_near { "near" } else { "far" },
            ));
        }
        result.pairs.push(pair);
    }
    let matched_near: Vec<u64> = pairs.iter().map(|p| p.0.id).collect();
    let matched_far: Vec<u64> = pairs.iter().map(|p| p.1.id).collect();
    result.near_only = near
        .listed
        .iter()
        .map(|l| l.summary.id)
        .filter(|id| !matched_near.contains(id) && (only.is_empty() || only.contains(id)))
        .collect();
    result.far_only = far
        .listed
        .iter()
        .map(|l| l.summary.id)
        .filter(|id| !matched_far.contains(id))
        .collect();
    Ok(result)
}

/// Smallest (receiver time − sender time) over packets of direction `dir` seen in both.
fn min_delay(sent: &[Rec], received: &[Rec], dir: u8) -> Option<i64> {
    let mut first_seen: HashMap<PacketKey, i64> = HashMap::new();
    for r in received.iter().filter(|r| r.dir == dir) {
        first_seen.entry(r.key).or_insert(r.ts);
    }
    sent.iter()
        .filter(|s| s.dir == dir)
        .filter_map(|s| first_seen.get(&s.key).map(|t| t.saturating_sub(s.ts)))
        .min()
}

#[allow(clippy::too_many_arguments)]
fn compare_direction(
    dir: u8,
    sent: &[Rec],
    received: &[Rec],
    shift: i64,
    owd: i64,
    (r_first, r_last): (i64, i64),
    s_first: i64,
    s_summary: &ConnSummary,
    sent_in: &str,
) -> DirectionComparison {
    let mut pool: HashMap<PacketKey, u32> = HashMap::new();
    for r in received.iter().filter(|r| r.dir == dir) {
        *pool.entry(r.key).or_insert(0) += 1;
    }
    let mut out = DirectionComparison {
        direction: if dir == 0 {
            Direction::ClientToServer
        } else {
            Direction::ServerToClient
        },
        sent_in: sent_in.to_string(),
        sent: 0,
        unobserved: 0,
        arrived: 0,
        lost: 0,
        lost_kinds: LostKinds::default(),
        first_lost_s: None,
        last_lost_s: None,
        lost_after_idle_s: None,
        sent_after_idle: 0,
        arrived_after_idle: 0,
        examples: Vec::new(),
        min_delay_ms: None,
    };
    let mut min_delay: Option<i64> = None;
    let mut first_seen: HashMap<PacketKey, i64> = HashMap::new();
    for r in received.iter().filter(|r| r.dir == dir) {
        first_seen.entry(r.key).or_insert(r.ts);
    }
    let idle_end_ns = s_summary.idle.as_ref().map(|i| {
        s_first
            .saturating_add((i.resumed_at_s * 1e9) as i64)
            .saturating_sub(1_000_000)
    });
    for s in sent.iter().filter(|s| s.dir == dir) {
        let arrive = s.ts.saturating_add(shift).saturating_add(owd);
        let after_idle = idle_end_ns.is_some_and(|t| s.ts >= t);
        if arrive < r_first {
            continue;
        }
        if arrive > r_last {
            out.unobserved += 1;
            continue;
        }
        out.sent += 1;
        out.sent_after_idle += u64::from(after_idle);
        match pool.get_mut(&s.key) {
            Some(n) if *n > 0 => {
                *n -= 1;
                out.arrived += 1;
                out.arrived_after_idle += u64::from(after_idle);
                if let Some(t) = first_seen.get(&s.key) {
                    let d = t.saturating_sub(s.ts.saturating_add(shift));
                    min_delay = Some(min_delay.map_or(d, |m: i64| m.min(d)));
                }
            }
            _ => {
                out.lost += 1;
                let kind = kind_of(s);
                bump(&mut out.lost_kinds, kind);
                let at = s.ts.saturating_sub(s_first) as f64 / 1e9;
                out.first_lost_s.get_or_insert(at);
                out.last_lost_s = Some(at);
                if out.examples.len() < 10 {
                    out.examples.push(LostPacket {
                        at_s: at,
                        frame: s.frame,
                        kind: kind.to_string(),
                        seq: s.key.seq,
                        len: s.key.len,
                    });
                }
            }
        }
    }
    out.min_delay_ms = min_delay.map(|d| d as f64 / 1e6);
    if let (Some(first_lost), Some(idle)) = (out.first_lost_s, &s_summary.idle) {
        // The capture-relative time the idle gap ended, in the sender's capture.
        if first_lost + 0.001 >= idle.resumed_at_s {
            out.lost_after_idle_s = Some(idle.idle_s);
        }
    }
    out
}

fn kind_of(r: &Rec) -> &'static str {
    use pathdoc_capture::decode::{TH_ACK, TH_FIN, TH_RST, TH_SYN};
    let f = r.key.flags;
    if f & TH_SYN != 0 {
        "syn"
    } else if f & TH_RST != 0 {
        "rst"
    } else if f & TH_FIN != 0 {
        "fin"
    } else if r.flags.has(Flags::KEEP_ALIVE) {
        "keepalive"
    } else if r.flags.any_retransmission() {
        "retransmission"
    } else if r.key.len > 0 {
        "data"
    } else if f & TH_ACK != 0 {
        "ack"
    } else {
        "other"
    }
}

fn bump(k: &mut LostKinds, kind: &str) {
    match kind {
        "syn" => k.syn += 1,
        "rst" => k.rst += 1,
        "fin" => k.fin += 1,
        "keepalive" => k.keepalives += 1,
        "retransmission" => k.retransmissions += 1,
        "data" => k.data += 1,
        _ => k.pure_acks += 1,
    }
}

fn describe_kinds(k: &LostKinds) -> String {
    let mut parts = Vec::new();
    for (n, what) in [
        (k.keepalives, "keepalives"),
        (k.retransmissions, "retransmissions"),
        (k.data, "data segments"),
        (k.pure_acks, "ACKs"),
        (k.syn, "SYNs"),
        (k.fin, "FINs"),
        (k.rst, "RSTs"),
    ] {
        if n > 0 {
            parts.push(format!(
                "{n} {}",
                if n == 1 {
                    what.trim_end_matches('s')
                } else {
                    what
                }
            ));
        }
    }
    parts.join(", ")
}

/// Findings of a comparison: lost packets per direction, MSS rewritten, unmatched connections.
pub fn findings(c: &Comparison) -> Vec<Finding> {
    let mut out = Vec::new();
    for p in &c.pairs {
        let label = format!("#{} {}", p.near_stream, p.near);
        let (client_cap, server_cap) = if p.near_is_client_side {
            ("near", "far")
        } else {
            ("far", "near")
        };
        for d in &p.directions {
            let (from, to) = if d.direction == Direction::ClientToServer {
                ("client", "server")
            } else {
                ("server", "client")
            };
            if d.lost == 0 {
                if d.unobserved > 0 {
                    out.push(
                        Finding::new("analyze", "after-other-capture", Status::Inconclusive, format!(
                            "{label}: {} packets left the {from} after the {to}'s capture shows its last packet; whether they arrived cannot be told",
                            d.unobserved
                        ))
                        .direction(d.direction)
                        .evidence(Evidence::new("packets after the other capture's last packet", Quantity::Count(d.unobserved)))
                        .summary("A pcap file does not record when the capture stopped: keep both captures running past the event (any later packet, e.g. a new connection, proves the capture was still on)."),
                    );
                }
                continue;
            }
            let share = d.lost as f64 / d.sent.max(1) as f64;
            let what = describe_kinds(&d.lost_kinds);
            let after_idle = d
                .lost_after_idle_s
                .map(|s| {
                    format!(
                        " after {} idle",
                        format_duration(std::time::Duration::from_secs_f64(s))
                    )
                })
                .unwrap_or_default();
            let (of_sent, of_arrived) = if d.lost_after_idle_s.is_some() {
                (d.sent_after_idle, d.arrived_after_idle)
            } else {
                (d.sent, d.arrived)
            };
            let status = if d.lost_after_idle_s.is_some() || share >= 0.01 || d.arrived == 0 {
                Status::Fail
            } else {
                Status::Warn
            };
            let title = format!(
                "{label}: {what} left the {from}{after_idle}; {} reached the {to}: dropped between the {from} and the {to}, {}",
                if of_arrived == 0 { "none".to_string() } else { format!("{of_arrived} of {of_sent} packets") },
                d.direction.arrow()
            );
            let f = Finding::new("analyze", "lost-between-captures", status, title)
                .direction(d.direction)
                .requirement("a packet in the sender-side capture that is absent from the receiver-side capture was dropped on the path between the two capture points")
                .evidence(Evidence::new(format!("packets the {from} sent while both captures ran"), Quantity::Count(d.sent)))
                .evidence(Evidence::new(format!("of them seen arriving at the {to}"), Quantity::Count(d.arrived)))
                .evidence(Evidence::new("lost between the captures", Quantity::Count(d.lost)).with_detail(what.clone()))
                .evidence(Evidence::new("first loss, seconds into the sender's capture", Quantity::Seconds(d.first_lost_s.unwrap_or(0.0))))
                .summary(format!(
                    "Matched {} ({} capture) with {} ({} capture) by {}{}. Of the {} packets the {from} sent {} while the other capture was running, {} never appeared at the {to}'s side: {what}{after_idle}. They were dropped between the two capture points in the {} direction{}.",
                    p.near, client_cap, p.far, server_cap, p.matched_by,
                    if p.nat { " (addresses/ports differ: NAT between them)" } else { "" },
                    d.sent, d.direction.arrow(), d.lost,
                    d.direction.arrow(),
                    if d.lost_after_idle_s.is_some() { ": a NAT or firewall on the path forgot the idle connection (RFC 5382 REQ-5 asks for ≥ 2 h 4 min)" } else { "" }
                ))
                ;
            let f = if d.lost_after_idle_s.is_some() {
                f.remedy(Remedy::new("Keep the connection busier than the path's idle timeout: for SSH, in ~/.ssh/config").on(Host::Client).with_command("ServerAliveInterval 60"))
                    .remedy(Remedy::new("Raise the NAT's or firewall's established-TCP timeout to at least 2 h 4 min (7440 s); if the device is the provider's, report the RFC 5382 REQ-5 violation").on(Host::Router { hop: None, address: None }).with_command("sysctl -w net.netfilter.nf_conntrack_tcp_timeout_established=7440"))
            } else {
                f.remedy(Remedy::new("Look for the drop between the two capture points: interface error and drop counters, policers, firewall rules, a duplex mismatch").on(Host::Router { hop: None, address: None }))
            };
            out.push(f);
        }
        for (who, (a, b)) in [("client", p.client_syn_mss), ("server", p.server_syn_mss)] {
            if let (Some(a), Some(b)) = (a, b) {
                if a != b {
                    let (near_v, far_v) = (a, b);
                    out.push(
                        Finding::new("analyze", "mss-clamped", Status::Info, format!(
                            "#{} {}: the {who}'s MSS was rewritten on the path: {near_v} B in the near capture, {far_v} B in the far one (MSS clamping)",
                            p.near_stream, p.near
                        ))
                        .direction(if who == "client" { Direction::ClientToServer } else { Direction::ServerToClient })
                        .evidence(Evidence::new("MSS option in the near capture", Quantity::Bytes(u64::from(near_v))))
                        .evidence(Evidence::new("MSS option in the far capture", Quantity::Bytes(u64::from(far_v))))
                        .summary("A router between the two capture points changed the MSS option of the SYN (TCPMSS / `tcp option maxseg size set`): both ends then use segments that fit the smaller link. This is normal on tunnels and PPPoE; if big transfers still stall, the clamp is missing on the other direction or set too high."),
                    );
                }
            }
        }
    }
    if c.pairs.is_empty() {
        out.push(
            Finding::new("analyze", "captures-not-matched", Status::Inconclusive, "no connection appears in both captures")
                .summary("No TCP connection of the first capture has the same sequence numbers in the second. The captures may cover different times or paths, or a middlebox rewrites sequence numbers (some firewalls randomise them).")
                .evidence(Evidence::new("connections only in the near capture", Quantity::Count(c.near_only.len() as u64)))
                .evidence(Evidence::new("connections only in the far capture", Quantity::Count(c.far_only.len() as u64))),
        );
    }
    out
}
