//! How many segments a direction lost, and where relative to the capture point, from what the
//! capture shows: retransmissions of segments it saw (lost after it, downstream) and holes in
//! the sequence space filled later (lost before it, upstream, whatever Wireshark's label for
//! the repair). Forwarding copies (`-i any` on a router) are not loss.

use crate::summary::DirSummary;

/// One direction's loss as the capture proves it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossCount {
    /// Data segments sent, forwarding copies excepted.
    pub data_segments: u64,
    /// Segments the capture saw that had to be sent again: lost after the capture point (or
    /// spurious repairs).
    pub downstream: u64,
    /// Segments the capture never saw the first time, whose repair filled a hole: lost before
    /// the capture point.
    pub upstream: u64,
}

/// Where the capture point sits relative to the loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vantage {
    /// Nearly all the loss happened between the sender and the capture point.
    DownstreamOfLoss,
    /// Nearly all between the capture point and the receiver.
    UpstreamOfLoss,
    /// On both sides of it.
    Between,
}

impl LossCount {
    pub fn of(tx: &DirSummary) -> Self {
        let retrans = tx
            .flags
            .all_retransmissions()
            .saturating_sub(tx.retransmission_copies);
        LossCount {
            data_segments: tx.data_packets.saturating_sub(tx.forwarding_copies),
            downstream: retrans.saturating_sub(tx.gaps.fill_retransmissions)
                + tx.out_of_order_resent,
            upstream: tx.gaps.fill_segments,
        }
    }

    pub fn lost(&self) -> u64 {
        self.downstream + self.upstream
    }

    /// Lost share of the data segments.
    pub fn share(&self) -> f64 {
        if self.data_segments == 0 {
            return 0.0;
        }
        (self.lost() as f64 / self.data_segments as f64).min(1.0)
    }

    /// Which side of the capture point the loss is on (90 % of it on one side decides).
    pub fn vantage(&self) -> Option<Vantage> {
        let lost = self.lost();
        if lost == 0 {
            return None;
        }
        Some(if self.upstream * 10 >= lost * 9 {
            Vantage::DownstreamOfLoss
        } else if self.downstream * 10 >= lost * 9 {
            Vantage::UpstreamOfLoss
        } else {
            Vantage::Between
        })
    }
}

/// Wilson score interval of a proportion `k / n` at 95 % (z = 1.96): what a count this small
/// can still mean.
pub fn wilson(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.96f64;
    let n = n as f64;
    let p = k as f64 / n;
    let denom = 1.0 + z * z / n;
    let centre = p + z * z / (2.0 * n);
    let margin = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    (
        ((centre - margin) / denom).max(0.0),
        ((centre + margin) / denom).min(1.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_bounds_small_counts() {
        let (lo, hi) = wilson(0, 100);
        assert_eq!(lo, 0.0);
        assert!((0.03..0.05).contains(&hi), "{hi}");
        let (lo, hi) = wilson(50, 100);
        assert!(lo > 0.39 && hi < 0.61);
    }
}
