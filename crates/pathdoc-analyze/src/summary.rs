//! The serialisable result of analysing a capture: the `data.analyze` part of the JSON report
//! (documented in docs/analyze.md). Units are in the field names (`_bytes`, `_s`, `_ms`,
//! `_bps`); directions are from the client's point of view (the side that opened the connection).

use serde::Serialize;

use crate::conn::{Connection, IdlePhase};
use crate::stats::{DirStats, FlagCounts, Stall, SynOptions};
use crate::timeline::Timeline;

/// One direction of a connection.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DirSummary {
    pub packets: u64,
    pub data_packets: u64,
    /// Payload bytes including retransmissions.
    pub payload_bytes: u64,
    /// Sequence space covered: payload without retransmissions.
    pub unique_bytes: u64,
    /// Unique payload bits per second between this side's first and last data segment.
    pub goodput_bps: Option<f64>,
    pub flags: FlagCounts,
    pub syn_options: Option<SynOptions>,
    pub max_segment_bytes: u32,
    pub max_ip_packet_bytes: u32,
    /// Largest IP packet of this side that the peer acknowledged (among timed segments).
    pub max_acked_ip_packet_bytes: u32,
    /// Data segments longer than the MSS the peer announced.
    pub segments_over_peer_mss: u64,
    /// Largest / smallest non-zero window this side advertised (scaled), bytes.
    pub max_window_bytes: u64,
    pub min_window_bytes: u64,
    pub zero_window_s: f64,
    pub longest_zero_window_s: f64,
    /// Karn RTT samples of this side's data (capture point → receiver → capture point).
    pub rtt_samples: u64,
    pub rtt_min_ms: Option<f64>,
    pub rtt_mean_ms: Option<f64>,
    pub rtt_max_ms: Option<f64>,
    pub max_bytes_in_flight: u64,
    pub mean_bytes_in_flight: Option<f64>,
    /// Standard deviation of the bytes in flight over the same samples: small when the flight
    /// size sits flat.
    pub sd_bytes_in_flight: Option<f64>,
    /// Share of data segments sent with ≥ 90 % of the peer's advertised window in flight.
    pub at_window_fraction: Option<f64>,
    pub usual_ttl: Option<u8>,
    pub fins: u32,
    pub rsts: u32,
    pub rst_ttl: Option<u8>,
    pub stall: Option<StallSummary>,
    /// Bytes this side sent (later sequence numbers prove it) that never reached the capture
    /// point and that the peer never acknowledged, until the connection's last packet.
    pub unseen: Option<UnseenSummary>,
    pub icmp_too_big: u32,
    pub icmp_too_big_mtu: Option<u32>,
    pub oversize_after_too_big: u64,
    /// False when the window scale of this side's advertisements was never seen (the capture
    /// started mid-connection, or holds the peer's SYN only): its windows are raw, unscaled
    /// numbers (Wireshark's window scale -1, "unknown").
    pub window_scale_known: bool,
    /// Every distinct TTL of this side's packets (RSTs excepted), most common first, and whether
    /// there were more than the four kept.
    pub ttls: Vec<u8>,
    pub ttls_overflowed: bool,
    /// Holes in this side's sequence space at the capture point and the segments that filled
    /// them later: lost upstream of the capture point.
    pub gaps: GapSummary,
    /// The same packet captured twice with another TTL (`-i any` on a router), and how many of
    /// those copies Wireshark calls retransmissions.
    pub forwarding_copies: u64,
    pub retransmission_copies: u64,
    /// Out-of-order segments that filled no hole: bytes the capture point had already seen,
    /// sent again (a sender-side capture's SACK repairs).
    pub out_of_order_resent: u64,
    /// Bursts of drops (retransmitted ranges, holes) and how densely they hit.
    pub loss_episodes: EpisodeSummary,
}

/// Loss episodes of one direction (see `DirSummary::loss_episodes`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct EpisodeSummary {
    pub episodes: u64,
    /// Episodes of ≥ 3 lost segments that lost ≥ 25 % of the sequence range they spanned.
    pub dense_episodes: u64,
    pub lost_bytes: u64,
    pub dense_lost_bytes: u64,
    pub largest_segments: u32,
}

/// The connection over time (see `ConnSummary::timeline`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelineSummary {
    /// Seconds from the connection's first packet to the start of the first bin.
    pub start_s: f64,
    pub bin_s: f64,
    pub client_to_server: DirTimeline,
    pub server_to_client: DirTimeline,
}

/// One direction's bins, a list per figure (one JSON array each, not an object per bin: a
/// capture's report holds up to 2 000 of them).
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct DirTimeline {
    /// New payload bytes sent.
    pub sent_bytes: Vec<u64>,
    /// Payload that repaired a loss (retransmissions that were not spurious, hole fills).
    pub repaired_bytes: Vec<u64>,
    /// This direction's bytes the peer newly acknowledged.
    pub delivered_bytes: Vec<u64>,
    /// Bytes its sequence numbers skipped (sent, lost before the capture point).
    pub skipped_bytes: Vec<u64>,
    /// Round trips of the loop capture point → this direction's receiver → capture point
    /// (Karn samples of its data and TCP timestamp echoes).
    pub rtt_samples: Vec<u32>,
    pub rtt_min_ms: Vec<Option<f64>>,
    pub rtt_mean_ms: Vec<Option<f64>>,
}

impl DirTimeline {
    pub fn len(&self) -> usize {
        self.delivered_bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.delivered_bytes.is_empty()
    }
}

/// Sequence-space holes of one direction (see `DirSummary::gaps`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct GapSummary {
    pub holes: u64,
    pub hole_bytes: u64,
    /// Data segments that filled part of a hole: segments lost before the capture point.
    pub fill_segments: u64,
    /// Of those, the ones Wireshark labels retransmissions (the rest it calls out-of-order).
    pub fill_retransmissions: u64,
    pub filled_bytes: u64,
}

/// Sequence space a later packet revealed but the capture never saw (see `DirSummary::unseen`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UnseenSummary {
    pub bytes: u64,
    /// Relative sequence number of the first byte never seen.
    pub from_seq: u32,
    /// From this side's last packet before the gap (the bytes were sent after it) to the
    /// connection's last packet: how long the receiver went without them, at least.
    pub open_s: f64,
    /// Packets of this side that arrived meanwhile, and the largest of them (IP bytes).
    pub packets_after: u32,
    pub max_ip_packet_after_bytes: u32,
}

/// The same segment sent again and again.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StallSummary {
    /// Relative sequence number.
    pub seq: u32,
    pub retransmissions: u32,
    /// IP packet sizes of the first few retransmissions, in order.
    pub sizes_bytes: Vec<u32>,
    pub start_s: f64,
    pub duration_s: f64,
    pub resolved: bool,
    /// Packets the peer sent during the stall.
    pub peer_packets: u32,
}

/// What happened after the last long idle gap.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IdleSummary {
    pub idle_s: f64,
    /// Seconds from the start of the capture to the end of the gap.
    pub resumed_at_s: f64,
    pub client: PhaseSideSummary,
    pub server: PhaseSideSummary,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PhaseSideSummary {
    pub packets: u32,
    pub keepalives: u32,
    pub retransmissions: u32,
    pub data_packets: u32,
    pub rst: bool,
}

/// How the connection ended.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub enum EndState {
    /// Both sides sent FIN.
    Closed,
    /// Only one side sent FIN.
    HalfClosed { by: String },
    /// A RST ended it.
    Reset {
        by: String,
        ttl: u8,
        usual_ttl: Option<u8>,
    },
    /// Still open when the capture ended.
    Open,
}

/// One connection.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ConnSummary {
    /// Stream index, as Wireshark's `tcp.stream`.
    pub id: u64,
    pub client: String,
    pub server: String,
    /// False when the handshake was not captured and the client was guessed (higher port).
    pub client_known: bool,
    pub ip_version: u8,
    /// Capture time of the first packet, seconds since the Unix epoch.
    pub start_epoch_s: f64,
    pub duration_s: f64,
    pub packets: u64,
    pub syn_seen: bool,
    pub syn_ack_seen: bool,
    /// Raw first sequence numbers (the ISNs when the handshake was seen): they survive NAT and
    /// identify the connection in another capture of the same path.
    pub client_base_seq: u32,
    pub server_base_seq: u32,
    /// Handshake RTT at the capture point (Wireshark's iRTT).
    pub handshake_rtt_ms: Option<f64>,
    pub client_to_server: DirSummary,
    pub server_to_client: DirSummary,
    pub longest_gap_s: f64,
    pub idle: Option<IdleSummary>,
    pub end: EndState,
    /// Packets captured with an earlier time than the connection's previous packet: its
    /// durations, rates and RTTs are not trustworthy.
    pub clock_backward_steps: u64,
    /// Rates, repairs and round trips over time, for connections that carried ≥ 16 data
    /// segments one way.
    pub timeline: Option<TimelineSummary>,
}

fn secs(ns: i64) -> f64 {
    ns as f64 / 1e9
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

fn dir_summary(st: &DirStats, conn_last_ns: i64, window_scale_known: bool) -> DirSummary {
    let goodput = st.first_data_ns.and_then(|first| {
        let dur = st.last_data_ns.saturating_sub(first);
        (dur > 0 && st.unique_bytes() > 0).then(|| st.unique_bytes() as f64 * 8.0 / secs(dur))
    });
    let stall = st.stall.as_ref().map(|s: &Stall| StallSummary {
        seq: s.seq,
        retransmissions: s.retransmissions,
        sizes_bytes: s.sizes().to_vec(),
        start_s: secs(s.first_ns),
        duration_s: secs(s.last_ns.saturating_sub(s.first_ns)),
        resolved: s.resolved,
        peer_packets: s.peer_packets,
    });
    DirSummary {
        packets: st.packets,
        data_packets: st.data_packets,
        payload_bytes: st.payload_bytes,
        unique_bytes: st.unique_bytes(),
        goodput_bps: goodput,
        flags: st.flags,
        syn_options: st.syn,
        max_segment_bytes: st.max_payload,
        max_ip_packet_bytes: st.max_ip_len,
        max_acked_ip_packet_bytes: st.max_acked_ip_len,
        segments_over_peer_mss: st.over_mss,
        max_window_bytes: st.max_window,
        min_window_bytes: st.min_window_nonzero,
        zero_window_s: secs(st.zero_window_total_ns),
        longest_zero_window_s: secs(st.zero_window_longest_ns),
        rtt_samples: st.rtt.count,
        rtt_min_ms: (st.rtt.count > 0).then(|| ms(st.rtt.min_ns)),
        rtt_mean_ms: st.rtt.mean_ns().map(ms),
        rtt_max_ms: (st.rtt.count > 0).then(|| ms(st.rtt.max_ns)),
        max_bytes_in_flight: st.max_in_flight,
        mean_bytes_in_flight: (st.in_flight_samples > 0)
            .then(|| st.in_flight_sum as f64 / st.in_flight_samples as f64),
        sd_bytes_in_flight: (st.in_flight_samples > 0).then(|| {
            let n = st.in_flight_samples as f64;
            let mean = st.in_flight_sum as f64 / n;
            (st.in_flight_sq_sum / n - mean * mean).max(0.0).sqrt()
        }),
        at_window_fraction: (st.in_flight_samples > 0)
            .then(|| st.in_flight_at_window as f64 / st.in_flight_samples as f64),
        usual_ttl: st.ttls.usual(),
        fins: st.fin_count,
        rsts: st.rst_count,
        rst_ttl: st.rst_ttl,
        stall,
        unseen: st.unseen.map(|g| UnseenSummary {
            bytes: u64::from(g.end.wrapping_sub(g.start)),
            from_seq: g.start,
            open_s: secs(conn_last_ns.saturating_sub(g.sent_after_ns).max(0)),
            packets_after: g.packets_after,
            max_ip_packet_after_bytes: g.max_ip_after,
        }),
        icmp_too_big: st.too_big,
        icmp_too_big_mtu: st.too_big_min_mtu,
        oversize_after_too_big: st.oversize_after_too_big,
        window_scale_known,
        ttls: st.ttls.values(),
        ttls_overflowed: st.ttls.overflowed,
        gaps: GapSummary {
            holes: st.gaps.opened,
            hole_bytes: st.gaps.opened_bytes,
            fill_segments: st.gaps.fill_segments,
            fill_retransmissions: st.gaps.fill_retransmissions,
            filled_bytes: st.gaps.filled_bytes,
        },
        forwarding_copies: st.forwarding_copies,
        retransmission_copies: st.retransmission_copies,
        out_of_order_resent: st.out_of_order_resent,
        loss_episodes: EpisodeSummary {
            episodes: st.episodes.count,
            dense_episodes: st.episodes.dense,
            lost_bytes: st.episodes.lost_bytes,
            dense_lost_bytes: st.episodes.dense_lost_bytes,
            largest_segments: st.episodes.largest_segments,
        },
    }
}

fn timeline_summary(t: &Timeline, c: &Connection, client: usize) -> TimelineSummary {
    let bins = |d: usize| {
        let b = &t.bins[d][..t.used()];
        DirTimeline {
            sent_bytes: b.iter().map(|b| b.sent).collect(),
            repaired_bytes: b.iter().map(|b| b.repaired).collect(),
            delivered_bytes: b.iter().map(|b| b.delivered).collect(),
            skipped_bytes: b.iter().map(|b| b.skipped).collect(),
            rtt_samples: b.iter().map(|b| b.rtt_n).collect(),
            rtt_min_ms: b
                .iter()
                .map(|b| (b.rtt_n > 0).then(|| f64::from(b.rtt_min_us) / 1e3))
                .collect(),
            rtt_mean_ms: b
                .iter()
                .map(|b| b.rtt_mean_us().map(|us| us / 1e3))
                .collect(),
        }
    };
    TimelineSummary {
        start_s: secs(t.start_ns.saturating_sub(c.first_ns)),
        bin_s: secs(t.width_ns),
        client_to_server: bins(client),
        server_to_client: bins(1 - client),
    }
}

fn idle_summary(phase: &IdlePhase, client: usize, capture_start_ns: i64) -> IdleSummary {
    let side = |d: usize| {
        let s = &phase.sides[d];
        PhaseSideSummary {
            packets: s.packets,
            keepalives: s.keepalives,
            retransmissions: s.retransmissions,
            data_packets: s.data_packets,
            rst: s.rst,
        }
    };
    IdleSummary {
        idle_s: secs(phase.gap_ns),
        resumed_at_s: secs(
            phase
                .gap_start_ns
                .saturating_add(phase.gap_ns)
                .saturating_sub(capture_start_ns),
        ),
        client: side(client),
        server: side(1 - client),
    }
}

/// Summarise a finished connection. `capture_start_ns` anchors relative times.
pub fn summarize(c: &Connection, capture_start_ns: i64) -> ConnSummary {
    let (client, known) = c.client_dir();
    let server = 1 - client;
    let name = |d: usize| if d == client { "client" } else { "server" };
    // Wireshark's -1: no SYN of this side told its shift, nor did the handshake rule it out.
    let scale_known = |d: usize| c.state.flows[d].win_scale != -1;
    let end = {
        let rst_side = (0..2)
            .filter(|&d| c.dirs[d].rst_count > 0)
            .min_by_key(|&d| c.dirs[d].first_rst_ns.unwrap_or(i64::MAX));
        if let Some(d) = rst_side {
            EndState::Reset {
                by: name(d).into(),
                ttl: c.dirs[d].rst_ttl.unwrap_or(0),
                usual_ttl: c.dirs[d].ttls.usual(),
            }
        } else {
            match (c.dirs[client].fin_count > 0, c.dirs[server].fin_count > 0) {
                (true, true) => EndState::Closed,
                (true, false) => EndState::HalfClosed {
                    by: "client".into(),
                },
                (false, true) => EndState::HalfClosed {
                    by: "server".into(),
                },
                (false, false) => EndState::Open,
            }
        }
    };
    ConnSummary {
        id: c.id,
        client: c.ends[client].to_string(),
        server: c.ends[server].to_string(),
        client_known: known,
        ip_version: if c.ipv6() { 6 } else { 4 },
        start_epoch_s: secs(c.first_ns),
        duration_s: secs(c.last_ns.saturating_sub(c.first_ns)),
        packets: c.frames,
        syn_seen: c.saw_syn,
        syn_ack_seen: c.saw_synack,
        client_base_seq: c.state.flows[client].base_seq,
        server_base_seq: c.state.flows[server].base_seq,
        handshake_rtt_ms: (c.state.irtt_ns > 0).then(|| ms(c.state.irtt_ns)),
        client_to_server: dir_summary(&c.dirs[client], c.last_ns, scale_known(client)),
        server_to_client: dir_summary(&c.dirs[server], c.last_ns, scale_known(server)),
        longest_gap_s: secs(c.longest_gap_ns),
        idle: c
            .idle
            .as_ref()
            .map(|p| idle_summary(p, client, capture_start_ns)),
        end,
        clock_backward_steps: c.clock_backward_steps,
        timeline: c
            .timeline
            .as_deref()
            .map(|t| timeline_summary(t, c, client)),
    }
}
