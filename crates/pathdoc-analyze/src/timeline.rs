//! What a connection did over time, in a fixed number of bins: per direction the bytes sent,
//! the bytes that repaired a loss, the bytes the peer acknowledged, and round-trip samples of
//! the loop "capture point → this direction's receiver → capture point". The bins double in
//! width (neighbours merge) whenever the connection outlives them, so memory stays fixed however
//! long the capture. Loss episodes (how densely a burst of drops hit the segments it spanned)
//! are tracked beside, per direction.
//!
//! Round trips come from two clocks: Karn samples of the direction's data (data → ACK) and TCP
//! timestamps (RFC 7323): a packet of one side carries TSval X, the first packet of the other
//! side that echoes TSecr ≥ X closes the loop. The second works where Karn cannot: at the
//! receiver, its ACKs (TSval X) go out to the sender and the sender's data echoing X comes back
//! through the forward queue — so a capture at either end (or between) sees the queue the data
//! waits in. The two loops of a connection add up to the whole path's round trip wherever the
//! capture point is.

use crate::tcp::{seq_gt, seq_le};

/// Bins per direction.
pub const BINS: usize = 32;
/// Width of a bin when a timeline starts; it doubles as the connection goes on.
pub const FIRST_BIN_NS: i64 = 10_000_000;
/// A timestamp probe nobody echoed within this time is replaced (a lost packet, an idle peer).
const PROBE_STALE_NS: i64 = 10_000_000_000;

/// One bin of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bin {
    /// New data (payload not sent before), bytes.
    pub sent: u64,
    /// Payload that repaired a loss: retransmissions (not spurious) and segments filling a hole.
    pub repaired: u64,
    /// This direction's bytes the peer newly acknowledged.
    pub delivered: u64,
    /// Bytes a hole in the sequence space skipped (sent, never arrived here: lost upstream).
    pub skipped: u64,
    /// Round-trip samples of this direction's loop, µs.
    pub rtt_min_us: u32,
    pub rtt_n: u32,
    pub rtt_sum_us: u64,
}

impl Bin {
    fn merge(&mut self, o: &Bin) {
        self.sent = self.sent.saturating_add(o.sent);
        self.repaired = self.repaired.saturating_add(o.repaired);
        self.delivered = self.delivered.saturating_add(o.delivered);
        self.skipped = self.skipped.saturating_add(o.skipped);
        if o.rtt_n > 0 {
            self.rtt_min_us = if self.rtt_n == 0 {
                o.rtt_min_us
            } else {
                self.rtt_min_us.min(o.rtt_min_us)
            };
        }
        self.rtt_n = self.rtt_n.saturating_add(o.rtt_n);
        self.rtt_sum_us = self.rtt_sum_us.saturating_add(o.rtt_sum_us);
    }

    fn add_rtt(&mut self, us: u32) {
        self.rtt_min_us = if self.rtt_n == 0 {
            us
        } else {
            self.rtt_min_us.min(us)
        };
        self.rtt_n = self.rtt_n.saturating_add(1);
        self.rtt_sum_us = self.rtt_sum_us.saturating_add(u64::from(us));
    }

    pub fn rtt_mean_us(&self) -> Option<f64> {
        (self.rtt_n > 0).then(|| self.rtt_sum_us as f64 / f64::from(self.rtt_n))
    }
}

/// A TSval one side sent, waiting for the other side to echo it.
#[derive(Debug, Clone, Copy)]
struct Probe {
    tsval: u32,
    sent_ns: i64,
}

/// The bins of both directions of a connection, on one time grid.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub start_ns: i64,
    pub width_ns: i64,
    /// Indexed by direction (sender).
    pub bins: [[Bin; BINS]; 2],
    /// Highest acknowledgment of each direction's data, relative.
    acked: [Option<u32>; 2],
    probes: [Option<Probe>; 2],
}

impl Timeline {
    pub fn new(start_ns: i64) -> Self {
        Timeline {
            start_ns,
            width_ns: FIRST_BIN_NS,
            bins: [[Bin::default(); BINS]; 2],
            acked: [None; 2],
            probes: [None; 2],
        }
    }

    /// The bin of time `ts`, widening the grid until it fits. Packets stamped before the start
    /// (a clock that stepped back) count in the first bin.
    fn bin(&mut self, d: usize, ts: i64) -> &mut Bin {
        let offset = ts.saturating_sub(self.start_ns).max(0);
        while offset / self.width_ns >= BINS as i64 {
            self.widen();
        }
        &mut self.bins[d][(offset / self.width_ns) as usize]
    }

    fn widen(&mut self) {
        for dir in &mut self.bins {
            for k in 0..BINS / 2 {
                let mut b = dir[2 * k];
                b.merge(&dir[2 * k + 1]);
                dir[k] = b;
            }
            for b in &mut dir[BINS / 2..] {
                *b = Bin::default();
            }
        }
        self.width_ns = self.width_ns.saturating_mul(2);
    }

    /// Direction `d` sent `len` payload bytes; `repair` when they repaired a loss.
    pub fn on_data(&mut self, d: usize, ts: i64, len: u32, new_data: bool, repair: bool) {
        let b = self.bin(d, ts);
        if repair {
            b.repaired += u64::from(len);
        } else if new_data {
            b.sent += u64::from(len);
        }
    }

    /// Direction `d`'s sequence numbers skipped `bytes` at `ts` (a hole: lost before the capture).
    pub fn on_skipped(&mut self, d: usize, ts: i64, bytes: u32) {
        let b = self.bin(d, ts);
        b.skipped = b.skipped.saturating_add(u64::from(bytes));
    }

    /// The other side acknowledged direction `d`'s data up to `rel_ack`; true when that was
    /// new data.
    pub fn on_ack(&mut self, d: usize, ts: i64, rel_ack: u32) -> bool {
        let advance = match self.acked[d] {
            Some(prev) if seq_gt(rel_ack, prev) => rel_ack.wrapping_sub(prev),
            Some(_) => return false,
            None => {
                self.acked[d] = Some(rel_ack);
                return false;
            }
        };
        self.acked[d] = Some(rel_ack);
        // A jump of more than 1 GiB is a new base, not data.
        if advance < 1 << 30 {
            self.bin(d, ts).delivered += u64::from(advance);
        }
        true
    }

    /// A round trip of direction `d`'s loop ended at `ts`.
    pub fn on_rtt(&mut self, d: usize, ts: i64, rtt_ns: i64) {
        if rtt_ns <= 0 {
            return;
        }
        let us = u32::try_from(rtt_ns / 1_000).unwrap_or(u32::MAX);
        self.bin(d, ts).add_rtt(us);
    }

    /// A packet of direction `d` carrying a timestamp option (TSval, TSecr): it may start a probe
    /// of `d`'s loop and close one of the other direction's. Only a packet that carries data or
    /// acknowledges new data closes one: a duplicate ACK during a recovery echoes the last
    /// in-order segment's TSval (RFC 7323), which would time the repair, not the path.
    pub fn on_timestamps(&mut self, d: usize, ts: i64, (tsval, tsecr): (u32, u32), news: bool) {
        if let Some(p) = self.probes[1 - d].filter(|_| news) {
            // TSecr at or after the probe's TSval (a later echo means the probe's packet, or
            // one sent with it, arrived).
            if tsecr != 0 && seq_le(p.tsval, tsecr) && tsecr.wrapping_sub(p.tsval) < 1 << 30 {
                self.probes[1 - d] = None;
                self.on_rtt(1 - d, ts, ts.saturating_sub(p.sent_ns));
            } else if ts.saturating_sub(p.sent_ns) > PROBE_STALE_NS {
                self.probes[1 - d] = None;
            }
        }
        if self.probes[d].is_none() {
            self.probes[d] = Some(Probe { tsval, sent_ns: ts });
        }
    }

    /// Bins in use (up to the last one with anything in it).
    pub fn used(&self) -> usize {
        let last = |dir: &[Bin; BINS]| {
            dir.iter()
                .rposition(|b| *b != Bin::default())
                .map_or(0, |i| i + 1)
        };
        last(&self.bins[0]).max(last(&self.bins[1]))
    }
}

/// Consecutive drops of one direction: how densely they hit the sequence range they spanned.
/// A policer with an empty bucket drops nearly everything above its rate in a burst; random
/// loss hits a segment here and there.
#[derive(Debug, Clone, Copy, Default)]
pub struct Episodes {
    current: Option<Episode>,
    /// Episodes closed, and those with at least [`DENSE_MIN_SEGMENTS`] losses that covered at
    /// least [`DENSE_SHARE`] of their range.
    pub count: u64,
    pub dense: u64,
    pub lost_bytes: u64,
    pub dense_lost_bytes: u64,
    /// Most segments one episode lost.
    pub largest_segments: u32,
}

#[derive(Debug, Clone, Copy)]
struct Episode {
    last_ns: i64,
    lo: u32,
    hi: u32,
    bytes: u64,
    segments: u32,
}

/// An episode needs this many lost segments to count as dense …
pub const DENSE_MIN_SEGMENTS: u32 = 3;
/// … and must have lost this share of the sequence range it spans.
pub const DENSE_SHARE: f64 = 0.25;

impl Episodes {
    /// `[lo, hi)` was lost at `ts` (a retransmission, or a hole the sequence numbers opened);
    /// drops closer than `gap_ns` to the previous one belong to its episode.
    pub fn on_loss(&mut self, ts: i64, lo: u32, hi: u32, gap_ns: i64, mss: u32) {
        let len = u64::from(hi.wrapping_sub(lo));
        if len == 0 || len >= 1 << 30 {
            return;
        }
        let segments = (len.div_ceil(u64::from(mss.max(1))) as u32).max(1);
        match &mut self.current {
            Some(e) if ts.saturating_sub(e.last_ns) <= gap_ns => {
                e.last_ns = ts;
                if seq_gt(e.lo, lo) {
                    e.lo = lo;
                }
                if seq_gt(hi, e.hi) {
                    e.hi = hi;
                }
                e.bytes += len;
                e.segments = e.segments.saturating_add(segments);
            }
            _ => {
                self.close();
                self.current = Some(Episode {
                    last_ns: ts,
                    lo,
                    hi,
                    bytes: len,
                    segments,
                });
            }
        }
    }

    /// Close the episode in progress.
    pub fn close(&mut self) {
        let Some(e) = self.current.take() else { return };
        let span = u64::from(e.hi.wrapping_sub(e.lo)).max(e.bytes);
        self.count += 1;
        self.lost_bytes += e.bytes;
        self.largest_segments = self.largest_segments.max(e.segments);
        if e.segments >= DENSE_MIN_SEGMENTS && e.bytes as f64 >= DENSE_SHARE * span as f64 {
            self.dense += 1;
            self.dense_lost_bytes += e.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_widen_and_keep_totals() {
        let mut t = Timeline::new(0);
        for k in 0..1000i64 {
            t.on_data(0, k * 1_000_000, 1000, true, false);
        }
        // 1 s of data in 32 bins: 10 ms × 2^2 = 40 ms wide.
        assert_eq!(t.width_ns, 40_000_000);
        let total: u64 = t.bins[0].iter().map(|b| b.sent).sum();
        assert_eq!(total, 1_000_000);
        assert_eq!(t.used(), 25);
    }

    #[test]
    fn timestamp_echo_closes_the_loop_of_the_prober() {
        let mut t = Timeline::new(0);
        // The receiver's ACK (direction 1) carries TSval 100; the sender's data echoes it 40 ms
        // later: a 40 ms sample of direction 1's loop.
        t.on_timestamps(1, 0, (100, 7), true);
        t.on_timestamps(0, 40_000_000, (9, 99), true);
        assert_eq!(t.bins[1][0].rtt_n, 0, "an older echo does not close it");
        t.on_timestamps(0, 40_500_000, (9, 100), false);
        assert_eq!(t.bins[1][4].rtt_n, 0, "a duplicate ACK does not close it");
        t.on_timestamps(0, 41_000_000, (9, 100), true);
        assert_eq!(t.bins[1][4].rtt_min_us, 41_000);
    }

    #[test]
    fn dense_and_sparse_episodes() {
        let mut e = Episodes::default();
        // A burst: 4 of every 5 segments of 20 lost within 2 ms.
        for k in 0..20u32 {
            if k % 5 != 4 {
                e.on_loss(
                    i64::from(k) * 100_000,
                    k * 1000,
                    k * 1000 + 1000,
                    5_000_000,
                    1000,
                );
            }
        }
        // Isolated drops, far apart.
        for k in 0..5i64 {
            let s = 1_000_000 + k as u32 * 50_000;
            e.on_loss(
                1_000_000_000 + k * 100_000_000,
                s,
                s + 1000,
                5_000_000,
                1000,
            );
        }
        e.close();
        assert_eq!((e.count, e.dense), (6, 1));
        assert_eq!(e.dense_lost_bytes, 16_000);
        assert_eq!(e.lost_bytes, 21_000);
    }
}
