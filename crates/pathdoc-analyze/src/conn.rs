//! One TCP connection: Wireshark's analysis state, pathdoc's statistics per direction, idle
//! phases and how the connection ended.

use std::net::IpAddr;

use pathdoc_capture::decode::{TcpInfo, TH_ACK, TH_FIN, TH_RST, TH_SYN};

use crate::flags::Flags;
use crate::stats::{DirStats, SynOptions};
use crate::tcp::{Analysis, ConnState, Segment};
use crate::timeline::Timeline;

/// An idle gap shorter than this never counts as "idle" (the RTT still scales it up).
pub const MIN_IDLE_NS: i64 = 1_000_000_000;

/// One end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: u16,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}

/// What one side did after the connection's last long idle gap.
#[derive(Debug, Clone, Copy, Default)]
pub struct PhaseSide {
    pub packets: u32,
    pub keepalives: u32,
    pub retransmissions: u32,
    pub data_packets: u32,
    pub rst: bool,
    pub first_ns: Option<i64>,
    pub last_ns: i64,
}

/// The time after the connection's last long idle gap (everything acknowledged, nothing sent).
#[derive(Debug, Clone, Copy, Default)]
pub struct IdlePhase {
    pub gap_start_ns: i64,
    pub gap_ns: i64,
    /// Indexed by direction (sender).
    pub sides: [PhaseSide; 2],
}

/// A TCP connection (Wireshark's "TCP stream").
#[derive(Debug, Clone)]
pub struct Connection {
    /// Stream index, numbered like `tcp.stream` (from 0, in order of first appearance).
    pub id: u64,
    /// `ends[d]` sends direction `d`; `ends[0]` sent the first packet seen.
    pub ends: [Endpoint; 2],
    pub state: ConnState,
    pub dirs: [DirStats; 2],
    /// Direction index of the client (the side that sent the SYN), when a SYN or SYN-ACK was seen.
    pub client_dir: Option<usize>,
    pub saw_syn: bool,
    pub saw_synack: bool,
    pub first_ns: i64,
    pub last_ns: i64,
    pub frames: u64,
    /// Only seen quoted inside ICMP errors so far.
    pub icmp_only: bool,
    pub idle: Option<IdlePhase>,
    pub longest_gap_ns: i64,
    /// Last packet number, for eviction order.
    pub last_frame: u64,
    /// Packets whose capture time is earlier than the connection's previous packet: durations,
    /// rates and RTTs measured across them are not trustworthy.
    pub clock_backward_steps: u64,
    /// Per direction, the last packet seen: the next one is a forwarding copy if it repeats it.
    last_sig: [Option<PacketSig>; 2],
    /// Rates, repairs and round trips over time, once a direction carried
    /// [`TIMELINE_FROM_SEGMENTS`] data segments (most connections never do: no cost for them).
    pub timeline: Option<Box<Timeline>>,
}

/// Data segments of one direction before a connection gets a [`Timeline`].
pub const TIMELINE_FROM_SEGMENTS: u64 = 16;

/// Drops closer together than this (or two round trips) belong to one loss episode.
const EPISODE_GAP_NS: i64 = 10_000_000;

/// What identifies one packet among its copies (`-i any` on a router captures each forwarded
/// packet twice: in, then out with the TTL one lower).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PacketSig {
    seq: u32,
    ack: u32,
    len: u32,
    flags: u16,
    ip_id: u16,
    ttl: u8,
    ts: i64,
}

/// What a segment says about loss: a hole its sequence number opened (lost before the capture
/// point), and whether its payload repaired a loss (a retransmission, not spurious, or a
/// segment filling a hole).
#[derive(Debug, Clone, Copy)]
struct Lost {
    hole: Option<(u32, u32)>,
    repair: bool,
    filled: bool,
}

/// A copy of a forwarded packet follows the original within this time.
const COPY_WINDOW_NS: i64 = 10_000_000;

/// One TCP segment as the connection sees it.
#[derive(Debug, Clone, Copy)]
pub struct SegmentIn<'a> {
    pub ts: i64,
    pub tcp: &'a TcpInfo,
    /// Payload length from the IP header.
    pub seg_len: u32,
    pub ttl: u8,
    /// IP packet length.
    pub ip_len: u32,
    /// Flags set before the analysis (port reuse).
    pub preset: Flags,
    pub frame: u64,
    /// IPv4 identification (0 for IPv6).
    pub ip_id: u16,
    /// Whether the connection may start a timeline now (the analyzer bounds how many exist).
    pub timeline_allowed: bool,
}

/// The per-packet outcome, for `--flags`.
#[derive(Debug, Clone, Copy)]
pub struct PacketOutcome {
    pub analysis: Analysis,
    /// Direction index within the connection.
    pub dir: usize,
    pub rel_seq: u32,
    pub rel_ack: u32,
    /// The advertised receive window in bytes (scaled), or `None` while the window scale is
    /// unknown (a capture that missed the handshake: the raw field would understate it).
    pub window: Option<u64>,
}

impl Connection {
    pub fn new(id: u64, first: Endpoint, second: Endpoint, ts: i64, frame: u64) -> Self {
        Connection {
            id,
            ends: [first, second],
            state: ConnState::default(),
            dirs: [DirStats::default(), DirStats::default()],
            client_dir: None,
            saw_syn: false,
            saw_synack: false,
            first_ns: ts,
            last_ns: ts,
            frames: 0,
            icmp_only: true,
            idle: None,
            longest_gap_ns: 0,
            last_frame: frame,
            clock_backward_steps: 0,
            last_sig: [None; 2],
            timeline: None,
        }
    }

    /// Direction of a packet from `src`.
    pub fn dir_of(&self, src: &Endpoint) -> usize {
        usize::from(*src != self.ends[0])
    }

    /// The client's direction: from the handshake, else the side with the higher port (the
    /// ephemeral one), else the first sender.
    pub fn client_dir(&self) -> (usize, bool) {
        if let Some(d) = self.client_dir {
            return (d, true);
        }
        let d = if self.ends[0].port < self.ends[1].port {
            1
        } else {
            0
        };
        (d, false)
    }

    /// True when neither side has data outstanding (both have had all their data ACKed).
    fn quiescent(&self) -> bool {
        let f = &self.state.flows;
        (f[0].nextseq == 0 || f[0].nextseq == f[1].lastack)
            && (f[1].nextseq == 0 || f[1].nextseq == f[0].lastack)
    }

    /// Analyse one TCP segment from direction `d`.
    pub fn on_segment(&mut self, d: usize, input: &SegmentIn<'_>) -> PacketOutcome {
        let SegmentIn {
            ts,
            tcp,
            seg_len,
            ttl: ip_ttl,
            ip_len,
            preset,
            frame,
            ip_id: _,
            timeline_allowed: _,
        } = *input;
        if self.frames > 0 && self.last_ns.saturating_sub(ts) > crate::clock::TOLERANCE_NS {
            self.clock_backward_steps += 1;
        }
        let copy = self.is_forwarding_copy(d, input);
        self.track_idle(d, ts);
        self.icmp_only = false;
        self.frames += 1;
        self.last_frame = frame;
        let seg = Segment {
            ts_ns: ts,
            seq: tcp.seq,
            ack: tcp.ack,
            seg_len,
            flags: tcp.flags,
            window: tcp.window,
            wscale: tcp.options.wscale,
        };
        let expected = self.state.flows[d].nextseq;
        let analysis = self.state.analyze(d, &seg, preset);
        let tcp: &TcpInfo = tcp;
        self.state.after(d, &seg);
        self.note_handshake(d, tcp);

        let flags = analysis.flags;
        let base = self.state.flows[d].base_seq;
        let rel_seq = tcp.seq.wrapping_sub(base);
        let rel_ack = tcp.ack.wrapping_sub(self.state.flows[1 - d].base_seq);
        let syn = tcp.flags & TH_SYN != 0;
        let rst = tcp.flags & TH_RST != 0;
        let scaled = self.state.flows[d].scaled_window(tcp.window, syn);
        let window = (syn || self.state.flows[d].win_scale != -1).then_some(scaled);
        let peer_window = self.dirs[1 - d].last_window;

        let st = &mut self.dirs[d];
        st.flags.add(flags);
        if flags.has(Flags::LOST_SEGMENT) {
            st.on_skipped(
                ts,
                expected.wrapping_sub(base),
                rel_seq.wrapping_add(seg_len),
            );
        }
        let mut filled = 0;
        if copy {
            st.forwarding_copies += 1;
            st.retransmission_copies += u64::from(flags.any_retransmission());
        } else if seg_len > 0 {
            filled = st.gaps.on_data(
                rel_seq,
                rel_seq.wrapping_add(seg_len),
                flags.any_retransmission(),
            );
            if filled == 0 && flags.has(Flags::OUT_OF_ORDER) {
                st.out_of_order_resent += 1;
            }
        }
        if flags.has(Flags::LOST_SEGMENT) {
            st.gaps.open(expected.wrapping_sub(base), rel_seq);
        }
        st.on_segment(ts, rel_seq, seg_len, ip_len, flags.any_retransmission());
        st.on_window(ts, scaled, syn || rst);
        if rst {
            st.rst_count += 1;
            if st.rst_ttl.is_none() {
                st.rst_ttl = Some(ip_ttl);
                st.first_rst_ns = Some(ts);
            }
        } else {
            st.ttls.add(ip_ttl);
        }
        if tcp.flags & TH_FIN != 0 {
            st.fin_count += 1;
            st.first_fin_ns.get_or_insert(ts);
        }
        if seg_len > 0 {
            if let Some(mss) = self.dirs[1 - d].syn.and_then(|o| o.mss) {
                if seg_len > u32::from(mss) {
                    self.dirs[d].over_mss += 1;
                }
            }
            self.note_in_flight(d, peer_window);
            self.note_too_big_oversize(d, ts, ip_len);
        }
        let karn = if tcp.flags & TH_ACK != 0 {
            self.dirs[1 - d].on_ack(ts, rel_ack)
        } else {
            None
        };
        if !copy {
            let lost = Lost {
                hole: flags
                    .has(Flags::LOST_SEGMENT)
                    .then(|| (expected.wrapping_sub(base), rel_seq)),
                repair: seg_len > 0
                    && (filled > 0
                        || flags.has(Flags::OUT_OF_ORDER)
                        || (flags.any_retransmission()
                            && !flags.has(Flags::SPURIOUS_RETRANSMISSION))),
                filled: filled > 0,
            };
            self.note_timeline(d, ts, input, rel_seq, rel_ack, flags, lost, karn);
        }
        self.dirs[1 - d].on_peer_packet();
        self.note_idle_phase(d, ts, flags, seg_len, rst);
        self.last_ns = ts;
        PacketOutcome {
            analysis,
            dir: d,
            rel_seq,
            rel_ack,
            window,
        }
    }

    /// Is this packet the previous packet of its direction seen again with another TTL (same
    /// sequence, acknowledgment, length, flags and IPv4 identification, within 10 ms)?
    fn is_forwarding_copy(&mut self, d: usize, input: &SegmentIn<'_>) -> bool {
        let sig = PacketSig {
            seq: input.tcp.seq,
            ack: input.tcp.ack,
            len: input.seg_len,
            flags: input.tcp.flags,
            ip_id: input.ip_id,
            ttl: input.ttl,
            ts: input.ts,
        };
        let copy = self.last_sig[d].is_some_and(|p| {
            p.ttl != sig.ttl
                && PacketSig {
                    ttl: sig.ttl,
                    ts: sig.ts,
                    ..p
                } == sig
                && (0..=COPY_WINDOW_NS).contains(&sig.ts.saturating_sub(p.ts))
        });
        self.last_sig[d] = Some(sig);
        copy
    }

    /// Feed the loss episodes and the timeline (not for forwarding copies).
    #[allow(clippy::too_many_arguments)]
    fn note_timeline(
        &mut self,
        d: usize,
        ts: i64,
        input: &SegmentIn<'_>,
        rel_seq: u32,
        rel_ack: u32,
        flags: Flags,
        lost: Lost,
        karn: Option<i64>,
    ) {
        let seg_len = input.seg_len;
        let rtt = match self.dirs[d].rtt.count {
            0 => self.state.irtt_ns,
            _ => self.dirs[d].rtt.min_ns.max(self.state.irtt_ns),
        };
        let gap = EPISODE_GAP_NS.max(rtt.saturating_mul(2));
        let mss = self.dirs[1 - d]
            .syn
            .and_then(|o| o.mss)
            .map_or(self.dirs[d].max_payload, u32::from)
            .max(536);
        let st = &mut self.dirs[d];
        if let Some((lo, hi)) = lost.hole {
            st.episodes.on_loss(ts, lo, hi, gap, mss);
        }
        if lost.repair && !lost.filled {
            st.episodes
                .on_loss(ts, rel_seq, rel_seq.wrapping_add(seg_len), gap, mss);
        }
        if self.timeline.is_none()
            && input.timeline_allowed
            && st.data_packets >= TIMELINE_FROM_SEGMENTS
        {
            let mut t = Timeline::new(st.first_data_ns.unwrap_or(ts));
            // What came before the timeline: the first segments, counted as new data.
            let earlier = st.payload_bytes.saturating_sub(u64::from(seg_len));
            t.on_data(
                d,
                t.start_ns,
                earlier.min(u64::from(u32::MAX)) as u32,
                true,
                false,
            );
            self.timeline = Some(Box::new(t));
        }
        let Some(t) = self.timeline.as_deref_mut() else {
            return;
        };
        if seg_len > 0 {
            let new_data =
                !flags.any_retransmission() && !flags.has(Flags::OUT_OF_ORDER) && !lost.filled;
            t.on_data(d, ts, seg_len, new_data, lost.repair);
        }
        if let Some((lo, hi)) = lost.hole {
            let skipped = hi.wrapping_sub(lo);
            if skipped < 1 << 30 {
                t.on_skipped(d, ts, skipped);
            }
        }
        let acks_new = input.tcp.flags & TH_ACK != 0 && t.on_ack(1 - d, ts, rel_ack);
        if let Some(k) = karn {
            t.on_rtt(1 - d, ts, k);
        }
        if let Some(stamps) = input.tcp.options.timestamp {
            t.on_timestamps(d, ts, stamps, seg_len > 0 || acks_new);
        }
    }

    fn note_handshake(&mut self, d: usize, tcp: &TcpInfo) {
        if tcp.flags & TH_SYN == 0 {
            return;
        }
        let st = &mut self.dirs[d];
        st.syn_count += 1;
        st.syn = Some(SynOptions {
            mss: tcp.options.mss,
            window_scale: tcp.options.wscale,
            sack_permitted: tcp.options.sack_permitted,
            timestamps: tcp.options.timestamp.is_some(),
        });
        if tcp.flags & TH_ACK == 0 {
            self.saw_syn = true;
            self.client_dir = Some(d);
        } else {
            self.saw_synack = true;
            if self.client_dir.is_none() {
                self.client_dir = Some(1 - d);
            }
        }
    }

    fn note_in_flight(&mut self, d: usize, peer_window: u64) {
        let (fwd, rev) = (&self.state.flows[d], &self.state.flows[1 - d]);
        if rev.lastack == 0 || !rev.base_seq_set {
            return;
        }
        let in_flight = fwd.nextseq.wrapping_sub(rev.lastack);
        if in_flight == 0 || in_flight >= 2_000_000_000 {
            return;
        }
        self.dirs[d].on_in_flight(u64::from(in_flight), peer_window);
    }

    fn note_too_big_oversize(&mut self, d: usize, ts: i64, ip_len: u32) {
        let st = &mut self.dirs[d];
        let (Some(first), Some(mtu)) = (st.first_too_big_ns, st.too_big_min_mtu) else {
            return;
        };
        // Allow the sender one RTT (or 10 ms) to hear about it.
        let grace = st.rtt.min_ns.max(10_000_000);
        if ts > first.saturating_add(grace) && mtu >= 68 && ip_len > mtu {
            st.oversize_after_too_big += 1;
        }
    }

    /// An ICMP too-big quoting a packet of direction `d`.
    pub fn on_too_big(&mut self, d: usize, ts: i64, mtu: Option<u32>) {
        let st = &mut self.dirs[d];
        st.too_big += 1;
        st.first_too_big_ns.get_or_insert(ts);
        if let Some(m) = mtu.filter(|m| *m >= 68) {
            st.too_big_min_mtu = Some(st.too_big_min_mtu.map_or(m, |x| x.min(m)));
        }
    }

    fn track_idle(&mut self, _d: usize, ts: i64) {
        if self.frames == 0 {
            return;
        }
        let gap = ts.saturating_sub(self.last_ns);
        self.longest_gap_ns = self.longest_gap_ns.max(gap);
        let threshold = MIN_IDLE_NS.max(self.state.irtt_ns.saturating_mul(20));
        // Gaps between unanswered probes (keepalive intervals) continue the current phase; a
        // new phase starts after an answered one or after a longer silence.
        let continues = self.idle.is_some_and(|p| {
            let answered = p.sides[0].packets > 0 && p.sides[1].packets > 0;
            !answered && gap < p.gap_ns
        });
        if gap >= threshold && self.quiescent() && !continues {
            self.idle = Some(IdlePhase {
                gap_start_ns: self.last_ns,
                gap_ns: gap,
                sides: [PhaseSide::default(); 2],
            });
        }
    }

    fn note_idle_phase(&mut self, d: usize, ts: i64, flags: Flags, seg_len: u32, rst: bool) {
        let Some(phase) = &mut self.idle else { return };
        let side = &mut phase.sides[d];
        side.packets += 1;
        side.first_ns.get_or_insert(ts);
        side.last_ns = ts;
        if flags.has(Flags::KEEP_ALIVE) {
            side.keepalives += 1;
        }
        if flags.any_retransmission() {
            side.retransmissions += 1;
        }
        if seg_len > 0 && !flags.has(Flags::KEEP_ALIVE) {
            side.data_packets += 1;
        }
        if rst {
            side.rst = true;
        }
    }

    /// Close open intervals at the end of the capture (or on eviction).
    pub fn finish(&mut self) {
        let end = self.last_ns;
        for d in &mut self.dirs {
            d.finish(end);
        }
    }

    pub fn ipv6(&self) -> bool {
        self.ends[0].addr.is_ipv6()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn connection_is_compact() {
        // 50 000 open connections must fit well inside the 256 MiB budget.
        let size = std::mem::size_of::<super::Connection>();
        eprintln!("Connection: {size} bytes");
        assert!(size < 3000, "Connection is {size} bytes");
    }
}
