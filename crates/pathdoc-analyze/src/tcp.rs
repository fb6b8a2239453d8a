//! Wireshark's TCP sequence analysis, one packet at a time, with O(1) state per direction.
//!
//! This follows `tcp_analyze_sequence_number()` of Wireshark's `packet-tcp.c` (the 4.0 series that
//! Debian ships) check by check and in the same order, so the flags agree packet for packet with
//! `tshark`'s `tcp.analysis.*` fields. Wireshark keeps a list of unacknowledged segments per
//! direction; its flags never look into it except through its length (a SYN or FIN only counts
//! one sequence number while fewer than 10 000 segments are unacknowledged), so the list is kept
//! here as the bare set of segment ends, bounded like Wireshark's.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use pathdoc_capture::decode::{TH_ACK, TH_FIN, TH_RST, TH_SYN};

use crate::flags::Flags;

/// Wireshark's `TCP_MAX_UNACKED_SEGMENTS`.
const MAX_UNACKED: usize = 10_000;
/// Fast retransmissions come within 20 ms of the last duplicate ACK.
const FAST_RETRANS_WINDOW_NS: u64 = 20_000_000;
/// Out-of-order threshold when the handshake RTT is unknown.
const DEFAULT_OOO_THRESHOLD_NS: u64 = 3_000_000;

/// `a > b` in sequence space.
pub fn seq_gt(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) < 0
}
/// `a < b` in sequence space.
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
/// `a <= b` in sequence space.
pub fn seq_le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

/// The fields of one TCP segment the analysis reads.
#[derive(Debug, Clone, Copy)]
pub struct Segment {
    pub ts_ns: i64,
    pub seq: u32,
    pub ack: u32,
    pub seg_len: u32,
    pub flags: u16,
    /// Raw window field.
    pub window: u16,
    pub wscale: Option<u8>,
}

/// Wireshark's per-direction analysis state (`tcp_flow_t` + `tcp_analyze_seq_flow_info_t`).
#[derive(Debug, Clone)]
pub struct FlowState {
    pub base_seq_set: bool,
    pub base_seq: u32,
    pub nextseq: u32,
    pub nextseq_time: i64,
    pub maxseqtobeacked: u32,
    pub lastack: u32,
    pub lastack_time: i64,
    pub dupacknum: i32,
    /// Last raw window (Wireshark starts it at `G_MAXUINT32`).
    pub window: u32,
    /// -1 unknown, -2 no scaling, else the shift.
    pub win_scale: i8,
    pub is_first_ack: bool,
    pub lastsegmentflags: u32,
    /// Ends of the unacknowledged segments, relative to `base_seq` (a min-heap).
    unacked: BinaryHeap<Reverse<u32>>,
}

impl Default for FlowState {
    fn default() -> Self {
        FlowState {
            base_seq_set: false,
            base_seq: 0,
            nextseq: 0,
            nextseq_time: 0,
            maxseqtobeacked: 0,
            lastack: 0,
            lastack_time: 0,
            dupacknum: 0,
            window: u32::MAX,
            win_scale: -1,
            is_first_ack: false,
            lastsegmentflags: 0,
            unacked: BinaryHeap::new(),
        }
    }
}

impl FlowState {
    /// The advertised window in bytes, scaled as Wireshark shows `tcp.window_size`.
    pub fn scaled_window(&self, raw: u16, syn: bool) -> u64 {
        if syn || self.win_scale < 0 {
            u64::from(raw)
        } else {
            u64::from(raw) << self.win_scale
        }
    }

    /// Memory held by the unacknowledged-segment set, in entries.
    pub fn unacked_len(&self) -> usize {
        self.unacked.len()
    }

    /// Drop every segment end at or below `ack` (Wireshark removes exactly these from its list).
    fn remove_acked(&mut self, ack: u32) {
        let ack_rel = ack.wrapping_sub(self.base_seq);
        while let Some(Reverse(end)) = self.unacked.peek() {
            // kept while GT_SEQ(nextseq, ack)
            if seq_gt(*end, ack_rel) {
                break;
            }
            self.unacked.pop();
        }
        if self.unacked.is_empty() && self.unacked.capacity() > 64 {
            self.unacked.shrink_to(16);
        }
    }
}

/// Connection-wide analysis state.
#[derive(Debug, Clone, Default)]
pub struct ConnState {
    pub flows: [FlowState; 2],
    /// Time of the most recent SYN (Wireshark's `ts_mru_syn`), 0 if none.
    pub ts_mru_syn: i64,
    /// Handshake RTT (Wireshark's iRTT), 0 until known.
    pub irtt_ns: i64,
}

/// Result of analysing one segment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Analysis {
    pub flags: Flags,
    /// `tcp.analysis.duplicate_ack_num` when the segment is a duplicate ACK.
    pub dupack_num: u32,
}

impl ConnState {
    /// Analyse segment `s` travelling in direction `d` (index of the sending side's flow).
    /// `preset` carries flags set before the analysis (port reuse).
    pub fn analyze(&mut self, d: usize, s: &Segment, preset: Flags) -> Analysis {
        let irtt = self.irtt_ns;
        let (fwd, rev) = split(&mut self.flows, d);
        let mut f = preset;
        let mut dupack_num = 0u32;
        let (seq, ack, seglen, flags) = (s.seq, s.ack, s.seg_len, s.flags);
        let window = u32::from(s.window);
        let syn_fin_rst = flags & (TH_SYN | TH_FIN | TH_RST) != 0;

        if !fwd.base_seq_set {
            fwd.base_seq = if flags & TH_SYN != 0 {
                seq
            } else {
                seq.wrapping_sub(1)
            };
            fwd.base_seq_set = true;
        }
        if !rev.base_seq_set && flags & TH_ACK != 0 {
            rev.base_seq = ack.wrapping_sub(1);
            rev.base_seq_set = true;
        }

        'fwd: {
            // Zero window probe: one byte at the next sequence number into a closed window.
            if seglen == 1 && seq == fwd.nextseq && rev.window == 0 {
                f.set(Flags::ZERO_WINDOW_PROBE);
                break 'fwd;
            }
            if window == 0 && !syn_fin_rst {
                f.set(Flags::ZERO_WINDOW);
            }
            // Previous segment not captured.
            if fwd.nextseq != 0 && seq_gt(seq, fwd.nextseq) && flags & TH_RST == 0 {
                f.set(Flags::LOST_SEGMENT);
            }
            // Keep-alive: 0 or 1 byte one before the next expected sequence number.
            if (seglen == 0 || seglen == 1) && seq == fwd.nextseq.wrapping_sub(1) && !syn_fin_rst {
                f.set(Flags::KEEP_ALIVE);
            }
            let same_position = seglen == 0 && seq == fwd.nextseq && ack == fwd.lastack;
            if same_position && window != 0 && window != fwd.window && !syn_fin_rst {
                f.set(Flags::WINDOW_UPDATE);
            }
            if seglen > 0 && rev.win_scale != -1 && !syn_fin_rst {
                let shift = if rev.is_first_ack || rev.win_scale == -2 {
                    0
                } else {
                    rev.win_scale as u32
                };
                let edge = rev.lastack.wrapping_add(rev.window.wrapping_shl(shift));
                if seq.wrapping_add(seglen) == edge {
                    f.set(Flags::WINDOW_FULL);
                }
            }
            if same_position
                && window != 0
                && window == fwd.window
                && rev.lastsegmentflags & Flags::KEEP_ALIVE != 0
                && !syn_fin_rst
            {
                f.set(Flags::KEEP_ALIVE_ACK);
                break 'fwd;
            }
            if same_position
                && window == 0
                && window == fwd.window
                && rev.lastsegmentflags & Flags::ZERO_WINDOW_PROBE != 0
                && !syn_fin_rst
            {
                f.set(Flags::ZERO_WINDOW_PROBE_ACK);
                break 'fwd;
            }
            if same_position && window != 0 && window == fwd.window && !syn_fin_rst {
                fwd.dupacknum = if fwd.dupacknum == -1 {
                    1
                } else {
                    fwd.dupacknum + 1
                };
                f.set(Flags::DUPLICATE_ACK);
                dupack_num = fwd.dupacknum.max(0) as u32;
            }
        }

        // A new ACK number resets the duplicate-ACK count.
        if ack != fwd.lastack {
            fwd.dupacknum = 0;
        }

        // ACKed unseen segment: flagged when the mark of contiguous data seen can move up to
        // the highest sequence number seen; otherwise once until this side's ACK changes.
        if rev.maxseqtobeacked != 0 && seq_gt(ack, rev.maxseqtobeacked) && flags & TH_ACK != 0 {
            if seq_lt(rev.maxseqtobeacked, rev.nextseq) {
                rev.maxseqtobeacked = rev.nextseq;
                f.set(Flags::ACK_LOST_SEGMENT);
            } else {
                if rev.dupacknum == 0 {
                    f.set(Flags::ACK_LOST_SEGMENT);
                }
                rev.dupacknum = -1;
            }
        }

        if seglen > 0 || flags & (TH_SYN | TH_FIN) != 0 {
            classify_retransmission(fwd, rev, s, irtt, &mut f);
        }

        // Remember the segment and move the expected sequence number forward.
        let mut nextseq = seq.wrapping_add(seglen);
        if (seglen > 0 || flags & (TH_SYN | TH_FIN) != 0) && fwd.unacked.len() < MAX_UNACKED {
            if flags & (TH_SYN | TH_FIN) != 0 {
                nextseq = nextseq.wrapping_add(1);
            }
            fwd.unacked
                .push(Reverse(nextseq.wrapping_sub(fwd.base_seq)));
        }
        let zwp = f.has(Flags::ZERO_WINDOW_PROBE);
        if (seq_gt(nextseq, fwd.nextseq) || fwd.nextseq == 0) && !zwp {
            fwd.nextseq = nextseq;
            fwd.nextseq_time = s.ts_ns;
        }
        if (seq == fwd.maxseqtobeacked || fwd.maxseqtobeacked == 0) && !zwp {
            fwd.maxseqtobeacked = fwd.nextseq;
        }
        fwd.window = window;
        fwd.lastack = ack;
        fwd.lastack_time = s.ts_ns;
        fwd.lastsegmentflags = f.0;
        rev.remove_acked(ack);

        Analysis {
            flags: f,
            dupack_num,
        }
    }

    /// What Wireshark does after the sequence analysis of a segment: handshake timing, the
    /// first-ACK marker and window scaling from the options.
    pub fn after(&mut self, d: usize, s: &Segment) {
        let syn = s.flags & TH_SYN != 0;
        let pure_ack = s.flags & (TH_SYN | TH_ACK) == TH_ACK;
        if syn {
            if s.flags & TH_ACK == 0 {
                self.ts_mru_syn = s.ts_ns;
            }
            self.flows[d].is_first_ack = true;
        }
        if pure_ack && self.ts_mru_syn != 0 && self.irtt_ns == 0 {
            self.irtt_ns = s.ts_ns.saturating_sub(self.ts_mru_syn);
        }
        if pure_ack {
            self.flows[d].is_first_ack = false;
        }
        if let Some(shift) = s.wscale {
            self.flows[d].win_scale = shift.min(14) as i8;
        }
        if syn {
            // verify_tcp_window_scaling()
            let is_synack = s.flags & TH_ACK != 0;
            let (fwd, rev) = split(&mut self.flows, d);
            if fwd.win_scale == -1 {
                fwd.win_scale = -2;
                rev.win_scale = -2;
            } else if is_synack && rev.win_scale == -2 {
                fwd.win_scale = -2;
            }
        }
    }

    /// A SYN without ACK on a known connection starts a new one when its initial sequence
    /// number differs (Wireshark 4.0 treats a repeated SYN as a plain retransmission; later
    /// versions also mark it "ports reused").
    pub fn syn_reuses_ports(&self, d: usize, seq: u32) -> bool {
        let fwd = &self.flows[d];
        fwd.base_seq_set && seq != fwd.base_seq
    }

    /// A SYN-ACK whose sequence number differs from the direction's base: Wireshark adopts it
    /// and marks the ports as reused.
    pub fn synack_reuses_ports(&mut self, d: usize, seq: u32) -> bool {
        let fwd = &mut self.flows[d];
        if fwd.base_seq_set && seq != fwd.base_seq {
            fwd.base_seq = seq;
            true
        } else {
            false
        }
    }
}

fn classify_retransmission(
    fwd: &mut FlowState,
    rev: &mut FlowState,
    s: &Segment,
    irtt: i64,
    f: &mut Flags,
) {
    let (seq, seglen, flags) = (s.seq, s.seg_len, s.flags);
    let mut seq_not_advanced = fwd.nextseq != 0 && seq_lt(seq, fwd.nextseq);
    if f.has(Flags::KEEP_ALIVE) {
        return;
    }
    // New data right after a (possibly dropped) zero-window-probe byte is not a retransmission.
    if seglen > 1 && fwd.nextseq.wrapping_sub(1) == seq {
        seq_not_advanced = false;
    }
    if seglen > 0 && rev.lastack != 0 && seq_le(seq.wrapping_add(seglen), rev.lastack) {
        f.set(Flags::SPURIOUS_RETRANSMISSION);
        return;
    }
    let since_dupack = s.ts_ns.wrapping_sub(rev.lastack_time) as u64;
    if seq_not_advanced
        && rev.dupacknum >= 2
        && rev.lastack == seq
        && since_dupack < FAST_RETRANS_WINDOW_NS
    {
        f.set(Flags::FAST_RETRANSMISSION);
        return;
    }
    let since_highest = s.ts_ns.wrapping_sub(fwd.nextseq_time) as u64;
    let threshold = if irtt == 0 {
        DEFAULT_OOO_THRESHOLD_NS
    } else {
        irtt as u64
    };
    let syn_fin = u32::from(flags & (TH_SYN | TH_FIN) != 0);
    if seq_not_advanced
        && since_highest < threshold
        && fwd.nextseq != seq.wrapping_add(seglen).wrapping_add(syn_fin)
    {
        f.set(Flags::OUT_OF_ORDER);
        return;
    }
    if seq_not_advanced {
        f.set(Flags::RETRANSMISSION);
    }
}

fn split(flows: &mut [FlowState; 2], d: usize) -> (&mut FlowState, &mut FlowState) {
    let [a, b] = flows;
    if d == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(ts_ms: i64, seq: u32, ack: u32, len: u32, flags: u16, window: u16) -> Segment {
        Segment {
            ts_ns: (1000 + ts_ms) * 1_000_000,
            seq,
            ack,
            seg_len: len,
            flags,
            window,
            wscale: None,
        }
    }

    /// Handshake, then client data 1..=3 with the second segment lost, three dup ACKs, a fast
    /// retransmission, an RTO retransmission, a keep-alive and its ACK.
    #[test]
    fn classic_loss_pattern() {
        let mut c = ConnState::default();
        let run = |c: &mut ConnState, d: usize, s: Segment| {
            let a = c.analyze(d, &s, Flags::default());
            c.after(d, &s);
            a
        };
        assert!(run(&mut c, 0, seg(0, 1000, 0, 0, TH_SYN, 64000))
            .flags
            .is_empty());
        assert!(
            run(&mut c, 1, seg(10, 5000, 1001, 0, TH_SYN | TH_ACK, 64000))
                .flags
                .is_empty()
        );
        assert!(run(&mut c, 0, seg(20, 1001, 5001, 0, TH_ACK, 500))
            .flags
            .is_empty());
        assert_eq!(c.irtt_ns, 20_000_000);
        assert!(run(&mut c, 0, seg(21, 1001, 5001, 100, TH_ACK, 500))
            .flags
            .is_empty());
        // 1101..1201 lost; 1201 arrives: previous segment not captured
        let a = run(&mut c, 0, seg(22, 1201, 5001, 100, TH_ACK, 500));
        assert!(a.flags.has(Flags::LOST_SEGMENT));
        assert!(run(&mut c, 1, seg(40, 5001, 1101, 0, TH_ACK, 500))
            .flags
            .is_empty());
        let d1 = run(&mut c, 1, seg(41, 5001, 1101, 0, TH_ACK, 500));
        assert!(d1.flags.has(Flags::DUPLICATE_ACK) && d1.dupack_num == 1);
        let d2 = run(&mut c, 1, seg(42, 5001, 1101, 0, TH_ACK, 500));
        assert_eq!(d2.dupack_num, 2);
        let fr = run(&mut c, 0, seg(43, 1101, 5001, 100, TH_ACK, 500));
        assert!(fr.flags.has(Flags::FAST_RETRANSMISSION), "{}", fr.flags);
        // the same segment again much later: a plain retransmission
        let rto = run(&mut c, 0, seg(400, 1101, 5001, 100, TH_ACK, 500));
        assert!(rto.flags.has(Flags::RETRANSMISSION), "{}", rto.flags);
        // everything acked, then a keep-alive and its ACK
        run(&mut c, 1, seg(450, 5001, 1301, 0, TH_ACK, 500));
        let ka = run(&mut c, 0, seg(9000, 1300, 5001, 0, TH_ACK, 500));
        assert!(ka.flags.has(Flags::KEEP_ALIVE), "{}", ka.flags);
        let kaa = run(&mut c, 1, seg(9010, 5001, 1301, 0, TH_ACK, 500));
        assert!(kaa.flags.has(Flags::KEEP_ALIVE_ACK), "{}", kaa.flags);
        assert!(!kaa.flags.has(Flags::DUPLICATE_ACK));
    }

    #[test]
    fn zero_window_probe_and_its_ack() {
        let mut c = ConnState::default();
        let run = |c: &mut ConnState, d: usize, s: Segment| {
            let a = c.analyze(d, &s, Flags::default());
            c.after(d, &s);
            a
        };
        run(&mut c, 0, seg(0, 1, 1, 10, TH_ACK, 100));
        let zw = run(&mut c, 1, seg(1, 1, 11, 0, TH_ACK, 0));
        assert!(zw.flags.has(Flags::ZERO_WINDOW));
        let zwp = run(&mut c, 0, seg(200, 11, 1, 1, TH_ACK, 100));
        assert!(zwp.flags.has(Flags::ZERO_WINDOW_PROBE), "{}", zwp.flags);
        let zwpa = run(&mut c, 1, seg(201, 1, 11, 0, TH_ACK, 0));
        assert!(
            zwpa.flags.has(Flags::ZERO_WINDOW_PROBE_ACK),
            "{}",
            zwpa.flags
        );
        let wu = run(&mut c, 1, seg(300, 1, 11, 0, TH_ACK, 50));
        assert!(wu.flags.has(Flags::WINDOW_UPDATE), "{}", wu.flags);
    }

    #[test]
    fn sequence_comparisons_wrap() {
        assert!(seq_gt(5, u32::MAX - 5));
        assert!(seq_lt(u32::MAX - 5, 5));
        assert!(seq_le(7, 7));
    }
}
