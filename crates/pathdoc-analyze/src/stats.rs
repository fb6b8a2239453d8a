//! What pathdoc keeps about each direction of a connection beyond Wireshark's flags: counters,
//! handshake options, windows, Karn RTT samples, bytes in flight, TTLs, stalls, ICMP too-big.
//! All of it is fixed-size, so a connection costs the same however long it runs.

use serde::Serialize;

use crate::flags::Flags;
use crate::tcp::{seq_gt, seq_le, seq_lt};
use crate::timeline::Episodes;

/// How many data segments per direction are timed at once for RTT samples.
const TIMED: usize = 8;

/// Per-flag counters, in [`Flags::NAMES`] order.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct FlagCounts {
    pub retransmission: u64,
    pub fast_retransmission: u64,
    pub spurious_retransmission: u64,
    pub out_of_order: u64,
    pub lost_segment: u64,
    pub ack_lost_segment: u64,
    pub duplicate_ack: u64,
    pub zero_window: u64,
    pub zero_window_probe: u64,
    pub zero_window_probe_ack: u64,
    pub window_full: u64,
    pub window_update: u64,
    pub keep_alive: u64,
    pub keep_alive_ack: u64,
    pub reused_ports: u64,
}

impl FlagCounts {
    pub fn add(&mut self, f: Flags) {
        if f.is_empty() {
            return;
        }
        let bump = |c: &mut u64, bit: u32| {
            if f.has(bit) {
                *c += 1
            }
        };
        bump(&mut self.retransmission, Flags::RETRANSMISSION);
        bump(&mut self.fast_retransmission, Flags::FAST_RETRANSMISSION);
        bump(
            &mut self.spurious_retransmission,
            Flags::SPURIOUS_RETRANSMISSION,
        );
        bump(&mut self.out_of_order, Flags::OUT_OF_ORDER);
        bump(&mut self.lost_segment, Flags::LOST_SEGMENT);
        bump(&mut self.ack_lost_segment, Flags::ACK_LOST_SEGMENT);
        bump(&mut self.duplicate_ack, Flags::DUPLICATE_ACK);
        bump(&mut self.zero_window, Flags::ZERO_WINDOW);
        bump(&mut self.zero_window_probe, Flags::ZERO_WINDOW_PROBE);
        bump(
            &mut self.zero_window_probe_ack,
            Flags::ZERO_WINDOW_PROBE_ACK,
        );
        bump(&mut self.window_full, Flags::WINDOW_FULL);
        bump(&mut self.window_update, Flags::WINDOW_UPDATE);
        bump(&mut self.keep_alive, Flags::KEEP_ALIVE);
        bump(&mut self.keep_alive_ack, Flags::KEEP_ALIVE_ACK);
        bump(&mut self.reused_ports, Flags::REUSED_PORTS);
    }

    pub fn merge(&mut self, o: &FlagCounts) {
        self.retransmission += o.retransmission;
        self.fast_retransmission += o.fast_retransmission;
        self.spurious_retransmission += o.spurious_retransmission;
        self.out_of_order += o.out_of_order;
        self.lost_segment += o.lost_segment;
        self.ack_lost_segment += o.ack_lost_segment;
        self.duplicate_ack += o.duplicate_ack;
        self.zero_window += o.zero_window;
        self.zero_window_probe += o.zero_window_probe;
        self.zero_window_probe_ack += o.zero_window_probe_ack;
        self.window_full += o.window_full;
        self.window_update += o.window_update;
        self.keep_alive += o.keep_alive;
        self.keep_alive_ack += o.keep_alive_ack;
        self.reused_ports += o.reused_ports;
    }

    /// Segments Wireshark calls a retransmission of any kind.
    pub fn all_retransmissions(&self) -> u64 {
        self.retransmission + self.fast_retransmission + self.spurious_retransmission
    }
}

/// Options a SYN (or SYN-ACK) carried.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct SynOptions {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    pub timestamps: bool,
}

/// Running min/mean/max of a time series in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TimeStats {
    pub count: u64,
    pub min_ns: i64,
    pub max_ns: i64,
    pub sum_ns: i128,
}

impl TimeStats {
    pub fn add(&mut self, v: i64) {
        if self.count == 0 || v < self.min_ns {
            self.min_ns = v;
        }
        if self.count == 0 || v > self.max_ns {
            self.max_ns = v;
        }
        self.count += 1;
        self.sum_ns += v as i128;
    }

    pub fn mean_ns(&self) -> Option<i64> {
        (self.count > 0).then(|| (self.sum_ns / self.count as i128) as i64)
    }
}

/// A data segment being timed for an RTT sample.
#[derive(Debug, Clone, Copy, Default)]
struct Timed {
    end: u32,
    sent_ns: i64,
    ip_len: u32,
    retransmitted: bool,
}

/// The most frequent TTLs of a direction (a tiny frequency table).
#[derive(Debug, Clone, Copy, Default)]
pub struct TtlTable {
    entries: [(u8, u32); 4],
    /// More distinct TTLs than the table holds were seen (ECMP, load balancers): a TTL missing
    /// from it proves nothing.
    pub overflowed: bool,
}

impl TtlTable {
    pub fn add(&mut self, ttl: u8) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.1 > 0 && e.0 == ttl) {
            e.1 += 1;
            return;
        }
        if let Some(e) = self.entries.iter_mut().find(|e| e.1 == 0) {
            *e = (ttl, 1);
            return;
        }
        // Full: replace the rarest (keeps the usual values).
        self.overflowed = true;
        if let Some(e) = self.entries.iter_mut().min_by_key(|e| e.1) {
            *e = (ttl, 1);
        }
    }

    /// The most common TTL, if any packet was seen.
    pub fn usual(&self) -> Option<u8> {
        self.entries
            .iter()
            .filter(|e| e.1 > 0)
            .max_by_key(|e| e.1)
            .map(|e| e.0)
    }

    /// Every distinct TTL held, most common first.
    pub fn values(&self) -> Vec<u8> {
        let mut e: Vec<(u8, u32)> = self.entries.iter().copied().filter(|e| e.1 > 0).collect();
        e.sort_by_key(|e| std::cmp::Reverse(e.1));
        e.into_iter().map(|e| e.0).collect()
    }

    pub fn count(&self, ttl: u8) -> u32 {
        self.entries
            .iter()
            .find(|e| e.1 > 0 && e.0 == ttl)
            .map(|e| e.1)
            .unwrap_or(0)
    }
}

/// A stall: the same sequence number sent again and again without being acknowledged.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Stall {
    /// Relative sequence number of the stalled segment.
    pub seq: u32,
    /// Times it was sent again.
    pub retransmissions: u32,
    /// IP total length of the first transmission seen and of each retransmission, in order
    /// (up to eight).
    #[serde(skip)]
    pub sizes: [u32; 8],
    #[serde(skip)]
    pub n_sizes: u8,
    pub first_ns: i64,
    pub last_ns: i64,
    /// True once an ACK passed it.
    pub resolved: bool,
    /// Packets the peer sent while it lasted (ACKs, duplicate ACKs: small packets that pass).
    pub peer_packets: u32,
}

impl Stall {
    pub fn sizes(&self) -> &[u32] {
        &self.sizes[..self.n_sizes as usize]
    }
}

/// A range of this side's sequence space a later packet revealed (its sequence number is past
/// it) but the capture never saw: seen from the receiving end, the mark of packets that vanish
/// on the way — of a PMTUD black hole when only the small packets that reveal it arrive.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnseenBytes {
    /// Relative sequence numbers: the first byte never seen, and the highest revealed.
    pub start: u32,
    pub end: u32,
    pub since_ns: i64,
    /// This side's packet before the one that revealed the gap: the bytes were sent after it.
    pub sent_after_ns: i64,
    /// Packets of this side that arrived after the gap opened, and the largest of them.
    pub packets_after: u32,
    pub max_ip_after: u32,
}

/// Holes in this side's sequence space (a segment arrived past the next expected byte) still
/// waiting to be filled, at most [`OPEN_GAPS`] of them.
const OPEN_GAPS: usize = 8;

/// Sequence-space holes seen at the capture point and the segments that later filled them:
/// each filling segment is one the capture point did not see the first time — lost upstream of
/// it (between the sender and the capture point), whatever Wireshark's label for the repair
/// (retransmission or out-of-order).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gaps {
    /// Open holes `[start, end)`, relative sequence numbers.
    open: [(u32, u32); OPEN_GAPS],
    open_len: u8,
    /// Holes opened (Wireshark's "previous segment not captured").
    pub opened: u64,
    pub opened_bytes: u64,
    /// Data segments that filled (part of) a hole, and how many Wireshark called retransmissions.
    pub fill_segments: u64,
    pub fill_retransmissions: u64,
    pub filled_bytes: u64,
}

impl Gaps {
    pub fn open(&mut self, start: u32, end: u32) {
        self.opened += 1;
        self.opened_bytes += u64::from(end.wrapping_sub(start));
        let n = self.open_len as usize;
        if n == OPEN_GAPS {
            // Keep the newest holes; the oldest is forgotten (its repair, if any, goes uncounted).
            self.open.copy_within(1.., 0);
            self.open[OPEN_GAPS - 1] = (start, end);
        } else {
            self.open[n] = (start, end);
            self.open_len += 1;
        }
    }

    /// A data segment `[seq, end)` was seen: count it if it fills part of an open hole. Returns
    /// the bytes of holes it filled.
    pub fn on_data(&mut self, seq: u32, end: u32, retrans: bool) -> u64 {
        let mut filled = 0u64;
        let mut keep = 0;
        for i in 0..self.open_len as usize {
            let (mut gs, mut ge) = self.open[i];
            if seq_lt(seq, ge) && seq_gt(end, gs) {
                let lo = if seq_gt(seq, gs) { seq } else { gs };
                let hi = if seq_lt(end, ge) { end } else { ge };
                filled += u64::from(hi.wrapping_sub(lo));
                // Shrink to what remains on one side (a segment inside a hole splits it; the
                // smaller part is forgotten).
                if seq_le(seq, gs) {
                    gs = hi;
                } else {
                    ge = lo;
                }
            }
            if seq_lt(gs, ge) {
                self.open[keep] = (gs, ge);
                keep += 1;
            }
        }
        self.open_len = keep as u8;
        if filled > 0 {
            self.fill_segments += 1;
            self.fill_retransmissions += u64::from(retrans);
            self.filled_bytes += filled;
        }
        filled
    }
}

/// Everything kept about one direction of a connection.
#[derive(Debug, Clone, Default)]
pub struct DirStats {
    pub packets: u64,
    pub data_packets: u64,
    pub payload_bytes: u64,
    pub flags: FlagCounts,
    pub syn: Option<SynOptions>,
    pub syn_count: u32,
    pub fin_count: u32,
    pub first_fin_ns: Option<i64>,
    pub rst_count: u32,
    /// TTL of the first RST this side sent.
    pub rst_ttl: Option<u8>,
    pub first_rst_ns: Option<i64>,
    pub ttls: TtlTable,
    pub first_ns: i64,
    pub last_ns: i64,
    pub first_data_ns: Option<i64>,
    pub last_data_ns: i64,
    /// First and highest sequence end, unwrapped, for unique bytes.
    seq_first: Option<u32>,
    seq_span: u64,
    seq_high: u32,
    pub max_payload: u32,
    pub max_ip_len: u32,
    /// Largest IP length among data segments that were acknowledged (timed ones).
    pub max_acked_ip_len: u32,
    /// Data segments longer than the peer's MSS (a sign of TSO/GSO at the capture point).
    pub over_mss: u64,
    /// Advertised windows (scaled, bytes) this side sent.
    pub max_window: u64,
    pub last_window: u64,
    pub min_window_nonzero: u64,
    pub zero_window_since: Option<i64>,
    pub zero_window_total_ns: i64,
    pub zero_window_longest_ns: i64,
    /// Karn RTT samples of this side's data, timed until the peer's ACK.
    pub rtt: TimeStats,
    timed: [Timed; TIMED],
    timed_len: u8,
    /// Bytes in flight (Wireshark's sequence-based method) when this side sent data.
    pub max_in_flight: u64,
    pub in_flight_samples: u64,
    /// Of those, how many had the peer's advertised window (nearly) full.
    pub in_flight_at_window: u64,
    pub in_flight_sum: u128,
    /// Sum of squares, for the spread of the flight size (f64: ≤ 2^31 B squared per sample).
    pub in_flight_sq_sum: f64,
    /// Longest unresolved (or longest overall) stall.
    pub stall: Option<Stall>,
    pub current_stall: Option<Stall>,
    /// Bytes this side sent that never reached the capture point: a later packet's sequence
    /// number skipped them, no retransmission filled them and the peer never acknowledged them.
    pub unseen: Option<UnseenBytes>,
    /// Holes in the sequence space and the segments that filled them (loss upstream).
    pub gaps: Gaps,
    /// Bursts of drops and how densely they hit (a policer's signature).
    pub episodes: Episodes,
    /// Packets that were the previous packet of this side again with another TTL: the same
    /// packet captured twice (`tcpdump -i any` on a router: before and after forwarding).
    pub forwarding_copies: u64,
    /// Of those, how many Wireshark flagged as retransmissions (not loss).
    pub retransmission_copies: u64,
    /// Segments Wireshark calls out-of-order that filled no hole: the capture point had seen
    /// their bytes already, so they were sent again — a sender's SACK repairs, sent within an
    /// RTT of its newest segment, read that way in a capture taken on the sender.
    pub out_of_order_resent: u64,
    /// ICMP too-big messages about this side's packets.
    pub too_big: u32,
    pub too_big_min_mtu: Option<u32>,
    pub first_too_big_ns: Option<i64>,
    /// Segments larger than the too-big MTU sent more than one RTT after the first too-big.
    pub oversize_after_too_big: u64,
}

impl DirStats {
    /// Bytes of sequence space this side covered (payload without retransmissions).
    pub fn unique_bytes(&self) -> u64 {
        self.seq_span
    }

    /// A packet's sequence number skipped `[start, end)` (Wireshark's "previous segment not
    /// captured"). Only the first open gap is kept; later packets extend what it reveals.
    pub fn on_skipped(&mut self, ts: i64, start: u32, end: u32) {
        match &mut self.unseen {
            Some(g) => {
                if seq_gt(end, g.end) {
                    g.end = end;
                }
            }
            None => {
                self.unseen = Some(UnseenBytes {
                    start,
                    end,
                    since_ns: ts,
                    sent_after_ns: if self.packets > 0 { self.last_ns } else { ts },
                    packets_after: 0,
                    max_ip_after: 0,
                })
            }
        }
    }

    /// Account one sent segment. `rel_seq` is relative to the direction's base.
    pub fn on_segment(&mut self, ts: i64, rel_seq: u32, seg_len: u32, ip_len: u32, retrans: bool) {
        if self.packets == 0 {
            self.first_ns = ts;
        }
        if let Some(g) = &mut self.unseen {
            let end = rel_seq.wrapping_add(seg_len);
            if seg_len > 0 && seq_le(rel_seq, g.start) && seq_gt(end, g.start) {
                // A retransmission filled the gap: the bytes arrived after all.
                self.unseen = None;
            } else if ts >= g.since_ns {
                g.packets_after = g.packets_after.saturating_add(1);
                g.max_ip_after = g.max_ip_after.max(ip_len);
            }
        }
        self.packets += 1;
        self.last_ns = ts;
        if seg_len == 0 {
            return;
        }
        self.data_packets += 1;
        self.payload_bytes += u64::from(seg_len);
        if self.first_data_ns.is_none() {
            self.first_data_ns = Some(ts);
        }
        self.last_data_ns = ts;
        self.max_payload = self.max_payload.max(seg_len);
        self.max_ip_len = self.max_ip_len.max(ip_len);
        let end = rel_seq.wrapping_add(seg_len);
        match self.seq_first {
            None => {
                self.seq_first = Some(rel_seq);
                self.seq_high = end;
                self.seq_span = u64::from(seg_len);
            }
            Some(_) if seq_gt(end, self.seq_high) => {
                self.seq_span += u64::from(end.wrapping_sub(self.seq_high));
                self.seq_high = end;
            }
            Some(_) => {}
        }
        self.time_segment(ts, rel_seq, end, ip_len, retrans);
        self.track_stall(ts, rel_seq, ip_len, retrans);
    }

    fn time_segment(&mut self, ts: i64, rel_seq: u32, end: u32, ip_len: u32, retrans: bool) {
        let n = self.timed_len as usize;
        // A retransmission makes every timed segment it overlaps ambiguous (Karn).
        if retrans {
            for t in &mut self.timed[..n] {
                if seq_gt(t.end, rel_seq) {
                    t.retransmitted = true;
                }
            }
            let _ = end;
            return;
        }
        if n < TIMED {
            self.timed[n] = Timed {
                end,
                sent_ns: ts,
                ip_len,
                retransmitted: false,
            };
            self.timed_len += 1;
        }
    }

    fn track_stall(&mut self, ts: i64, rel_seq: u32, ip_len: u32, retrans: bool) {
        if !retrans {
            return;
        }
        match &mut self.current_stall {
            Some(s) if s.seq == rel_seq => {
                s.retransmissions += 1;
                s.last_ns = ts;
                if (s.n_sizes as usize) < s.sizes.len() {
                    s.sizes[s.n_sizes as usize] = ip_len;
                    s.n_sizes += 1;
                }
            }
            _ => {
                let mut s = Stall {
                    seq: rel_seq,
                    retransmissions: 1,
                    first_ns: ts,
                    last_ns: ts,
                    ..Stall::default()
                };
                s.sizes[0] = ip_len;
                s.n_sizes = 1;
                self.finish_stall();
                self.current_stall = Some(s);
            }
        }
    }

    /// Keep the worst stall seen: unresolved beats resolved, then more retransmissions.
    pub fn finish_stall(&mut self) {
        if let Some(cur) = self.current_stall.take() {
            let better = match &self.stall {
                None => true,
                Some(old) => {
                    (!cur.resolved, cur.retransmissions) > (!old.resolved, old.retransmissions)
                }
            };
            if better {
                self.stall = Some(cur);
            }
        }
    }

    /// The peer acknowledged up to `rel_ack` (relative to this side's base) at `ts`. Returns the
    /// Karn RTT sample it gave, if any.
    pub fn on_ack(&mut self, ts: i64, rel_ack: u32) -> Option<i64> {
        let mut karn = None;
        let n = self.timed_len as usize;
        if n > 0 {
            let mut keep = 0;
            let mut sample: Option<(i64, bool)> = None;
            for i in 0..n {
                let t = self.timed[i];
                if seq_le(t.end, rel_ack) {
                    // The newest covered segment gives the sample, unless any covered one was
                    // retransmitted (Karn's rule).
                    let ambiguous = t.retransmitted || sample.is_some_and(|s| s.1);
                    sample = Some((ts.saturating_sub(t.sent_ns), ambiguous));
                    if !t.retransmitted {
                        self.max_acked_ip_len = self.max_acked_ip_len.max(t.ip_len);
                    }
                } else {
                    self.timed[keep] = t;
                    keep += 1;
                }
            }
            self.timed_len = keep as u8;
            if let Some((rtt, false)) = sample {
                if rtt >= 0 {
                    self.rtt.add(rtt);
                    karn = Some(rtt);
                }
            }
        }
        if let Some(s) = &mut self.current_stall {
            if seq_gt(rel_ack, s.seq) {
                s.resolved = true;
                self.finish_stall();
            }
        }
        if self.unseen.is_some_and(|g| seq_gt(rel_ack, g.start)) {
            // The receiver has them: the capture (not the path) missed them.
            self.unseen = None;
        }
        karn
    }

    pub fn on_window(&mut self, ts: i64, scaled: u64, syn_or_rst: bool) {
        if syn_or_rst {
            return;
        }
        self.max_window = self.max_window.max(scaled);
        if scaled > 0 && (self.min_window_nonzero == 0 || scaled < self.min_window_nonzero) {
            self.min_window_nonzero = scaled;
        }
        self.last_window = scaled;
        match (scaled == 0, self.zero_window_since) {
            (true, None) => self.zero_window_since = Some(ts),
            (false, Some(since)) => {
                let d = ts.saturating_sub(since).max(0);
                self.zero_window_total_ns = self.zero_window_total_ns.saturating_add(d);
                self.zero_window_longest_ns = self.zero_window_longest_ns.max(d);
                self.zero_window_since = None;
            }
            _ => {}
        }
    }

    /// The peer sent a packet (counts towards the current stall's evidence that small packets pass).
    pub fn on_peer_packet(&mut self) {
        if let Some(s) = &mut self.current_stall {
            s.peer_packets = s.peer_packets.saturating_add(1);
        }
    }

    pub fn on_in_flight(&mut self, bytes: u64, peer_window: u64) {
        self.in_flight_samples += 1;
        self.in_flight_sum += u128::from(bytes);
        self.in_flight_sq_sum += (bytes as f64) * (bytes as f64);
        self.max_in_flight = self.max_in_flight.max(bytes);
        if peer_window > 0 && bytes * 10 >= peer_window * 9 {
            self.in_flight_at_window += 1;
        }
    }

    /// Close open intervals at the end of the capture.
    pub fn finish(&mut self, end_ns: i64) {
        if let Some(since) = self.zero_window_since {
            let d = end_ns.saturating_sub(since).max(0);
            self.zero_window_total_ns = self.zero_window_total_ns.saturating_add(d);
            self.zero_window_longest_ns = self.zero_window_longest_ns.max(d);
        }
        self.finish_stall();
        self.episodes.close();
    }
}
