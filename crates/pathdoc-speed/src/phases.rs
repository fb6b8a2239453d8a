//! Phases of one direction's transfer, from its per-interval samples: where slow start ends and
//! the steady state begins, whether a queue stands at the bottleneck, and where the losses came
//! from — a sender overrunning a bottleneck queue, or the path itself. Pure; table-tested.
//!
//! - **Slow start** ends at the first sample at which every stream has left its initial slow
//!   start (`tcpi_snd_ssthresh` set, by a loss or by HyStart). Model-based senders (BBR) do not
//!   use ssthresh, and any sender sets it when it runs out of data at the end of the test, so
//!   for BBR, and in the last interval, the rate rule alone decides.
//! - **Steady state** starts at the first full interval, not before the one in which slow start
//!   ended, whose goodput is within [`STEADY_RATE_FRACTION`] (and its inverse) of the median of
//!   it and every later interval, and needs at least [`STEADY_MIN_INTERVALS`] full intervals. Rates and limits
//!   are judged on it.
//! - **Queue**: an interval's smoothed RTT more than [`queue_threshold_us`] above the minimum
//!   RTT; a **standing queue** is the median steady-state interval queued.
//! - **Loss at queue overflow** (self-inflicted): retransmissions in an interval that had a queue
//!   *and* is a burst — at least [`BURST_FACTOR`]× the background (the lower median of lost
//!   segments per interval after slow start), so the test's other intervals are nearly loss-free
//!   — or the recovery tail of such a burst in the next, still queued, interval. Every other loss
//!   is **path loss**: it comes without a queue, or steadily, interval after interval, as random
//!   or faulty-link loss does.

use serde::{Deserialize, Serialize};

use crate::analysis::Interval;

/// An interval's goodput must reach this share of the median of the rest to start the steady state.
pub const STEADY_RATE_FRACTION: f64 = 0.8;
/// Full intervals a steady state needs.
pub const STEADY_MIN_INTERVALS: usize = 2;
/// Queueing delay that counts as a queue: this share of the minimum RTT …
pub const QUEUE_FRACTION: f64 = 0.2;
/// … but never less than this (jitter of a few ms is not a queue).
pub const QUEUE_MIN_US: u32 = 5_000;
/// Retransmissions in one interval this many times the median per interval make a burst.
pub const BURST_FACTOR: u64 = 4;
/// Share of the lost segments that names the loss class; below it the class is mixed.
pub const CLASS_SHARE: f64 = 0.8;

/// Queueing delay above the minimum RTT that counts as a queue at the bottleneck.
pub fn queue_threshold_us(min_rtt_us: u32) -> u32 {
    ((f64::from(min_rtt_us) * QUEUE_FRACTION) as u32).max(QUEUE_MIN_US)
}

/// Where the losses of a direction came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossClass {
    /// No segment was lost (retransmissions the receiver reported as duplicates do not count).
    #[default]
    None,
    /// Bursts while a queue stood at the bottleneck: the sender overran the queue (slow start
    /// overshoot, a loss-based sender probing for bandwidth). Normal; not a path fault.
    QueueOverflow,
    /// Loss without a queue, or steady loss interval after interval: the path drops packets.
    Path,
    /// Both kinds, neither [`CLASS_SHARE`] of the total.
    Mixed,
}

impl LossClass {
    pub fn describe(self) -> &'static str {
        match self {
            LossClass::None => "no loss",
            LossClass::QueueOverflow => "loss at a full bottleneck queue, self-inflicted",
            LossClass::Path => "path loss, without a queue building",
            LossClass::Mixed => "both queue-overflow and path loss",
        }
    }
}

/// The largest loss burst of a direction, for the evidence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LossBurst {
    pub start_s: f64,
    pub end_s: f64,
    pub segments: u64,
    /// Smoothed RTT at the burst (the larger of the interval's start and end samples), µs.
    pub rtt_us: u32,
    /// Whether the interval was still in slow start.
    pub slow_start: bool,
    pub queued: bool,
}

/// Losses of a whole direction, split by class.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LossBreakdown {
    pub class: LossClass,
    /// Segments retransmitted minus those the receiver reported as duplicates (DSACK).
    pub lost_segments: u64,
    pub overflow_segments: u64,
    pub path_segments: u64,
    /// Intervals with loss at a full queue / with path loss.
    pub overflow_intervals: u32,
    pub path_intervals: u32,
    /// Path-loss bytes over all bytes sent (the whole test).
    pub path_share: f64,
    pub largest_burst: Option<LossBurst>,
    /// The queueing delay that counted as a queue, µs.
    pub queue_threshold_us: u32,
}

/// The steady-state part of a direction's transfer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    /// Index of its first interval.
    pub first_interval: usize,
    pub intervals: usize,
    pub start_s: f64,
    pub end_s: f64,
    /// Payload acknowledged in the steady state over its duration.
    pub goodput_bps: f64,
    /// Median smoothed RTT of its intervals, µs.
    pub rtt_us: u32,
    /// Median queueing delay (smoothed RTT − min RTT), µs.
    pub queue_delay_us: u32,
    pub standing_queue: bool,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    /// Retransmitted bytes net of DSACK duplicates, and the part of them that was path loss.
    pub lost_bytes: u64,
    pub path_lost_bytes: u64,
    pub retransmits: u64,
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// Median congestion window (sum over streams), bytes.
    pub cwnd_bytes: u64,
    /// Median advertised receive window (sum over streams), bytes.
    pub snd_wnd_bytes: u64,
}

impl SteadyState {
    pub fn duration_s(&self) -> f64 {
        self.end_s - self.start_s
    }
    /// Path-loss bytes over bytes sent in the steady state.
    pub fn path_loss_share(&self) -> f64 {
        ratio(self.path_lost_bytes, self.bytes_sent)
    }
    pub fn loss_share(&self) -> f64 {
        ratio(self.lost_bytes, self.bytes_sent)
    }
    pub fn fraction(&self, part: u64) -> f64 {
        ratio(part, self.busy_us)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Phases of one direction: when slow start ended, the steady state (if one was reached) and
/// the loss breakdown.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// When every stream had left its initial slow start, seconds into the test (`None`: never,
    /// or a model-based sender that does not report it).
    pub slow_start_end_s: Option<f64>,
    pub steady: Option<SteadyState>,
    /// Why there is no steady state, when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_steady_reason: Option<String>,
    pub loss: LossBreakdown,
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Some(v[v.len() / 2])
}

fn lost_segments(i: &Interval) -> u64 {
    i.retransmits.saturating_sub(i.dsack_dups)
}

/// Bytes an interval retransmitted, less what D-SACKs showed had arrived (spurious repairs).
pub(crate) fn lost_bytes(i: &Interval, mss: u32) -> u64 {
    i.bytes_retrans
        .saturating_sub(i.dsack_dups * u64::from(mss))
}

/// The larger of the smoothed RTTs at an interval's start and end.
fn interval_rtt(intervals: &[Interval], k: usize) -> u32 {
    let end = intervals[k].rtt_us;
    let start = k.checked_sub(1).map_or(end, |p| intervals[p].rtt_us);
    start.max(end)
}

/// Intervals at least half as long as the median interval (the last one is often a sliver).
fn full_intervals(intervals: &[Interval]) -> Vec<bool> {
    let dt = |i: &Interval| i.end_s - i.start_s;
    let typical = median(intervals.iter().map(dt).collect()).unwrap_or(0.0);
    intervals
        .iter()
        .map(|i| dt(i) >= 0.5 * typical && dt(i) > 0.0)
        .collect()
}

/// Split a direction's intervals into phases. `min_rtt_us` is the sender's minimum RTT over the
/// test, `mss` its MSS (to convert DSACK duplicates to bytes), `reports_slow_start` whether the
/// sender's congestion control uses ssthresh (not BBR).
pub fn phases(
    intervals: &[Interval],
    min_rtt_us: u32,
    mss: u32,
    reports_slow_start: bool,
) -> Phases {
    let threshold = queue_threshold_us(min_rtt_us);
    let queued = |k: usize| min_rtt_us > 0 && interval_rtt(intervals, k) >= min_rtt_us + threshold;
    let slow_start_end = if reports_slow_start {
        let before_last = &intervals[..intervals.len().saturating_sub(1)];
        before_last.iter().position(|i| !i.slow_start)
    } else {
        None
    };
    let overflow = overflow_mask(intervals, &queued, slow_start_end.unwrap_or(0));
    let loss = classify_loss(intervals, &queued, &overflow, threshold, mss);
    let (steady, no_steady_reason) = match steady_start(intervals, slow_start_end) {
        Ok(first) => (
            Some(steady_state(
                intervals, first, min_rtt_us, threshold, mss, &overflow,
            )),
            None,
        ),
        Err(why) => (None, Some(why)),
    };
    Phases {
        slow_start_end_s: slow_start_end.map(|k| intervals[k].end_s),
        steady,
        no_steady_reason,
        loss,
    }
}

/// Index of the first steady-state interval, or why there is none.
fn steady_start(intervals: &[Interval], slow_start_end: Option<usize>) -> Result<usize, String> {
    let full = full_intervals(intervals);
    let n_full = full.iter().filter(|&&f| f).count();
    if n_full < STEADY_MIN_INTERVALS + 1 {
        return Err(format!(
            "only {n_full} full sampling interval(s): too few to tell slow start from the steady state"
        ));
    }
    // Not before slow start ended; the interval in which it ended may count when its rate is
    // already at the plateau (a sender behind a shaper on its own host leaves slow start late
    // without the rate changing).
    let earliest = slow_start_end.unwrap_or(0);
    let rates: Vec<f64> = intervals.iter().map(|i| i.goodput_bps).collect();
    for k in earliest..intervals.len() {
        if !full[k] {
            continue;
        }
        let rest: Vec<f64> = (k..intervals.len())
            .filter(|&j| full[j])
            .map(|j| rates[j])
            .collect();
        if rest.len() < STEADY_MIN_INTERVALS {
            break;
        }
        let m = median(rest).unwrap_or(0.0);
        // Neither still ramping up nor a slow-start burst above what the path then sustained.
        if m > 0.0 && rates[k] >= STEADY_RATE_FRACTION * m && rates[k] <= m / STEADY_RATE_FRACTION {
            return Ok(k);
        }
    }
    Err(match slow_start_end {
        None if intervals.iter().all(|i| i.slow_start) && earliest == 0 => {
            "the rate was still climbing when the test ended".to_string()
        }
        _ => {
            "the test ended before the rate settled (fewer than 2 full intervals after slow start)"
                .to_string()
        }
    })
}

fn steady_state(
    intervals: &[Interval],
    first: usize,
    min_rtt_us: u32,
    threshold: u32,
    mss: u32,
    overflow: &[bool],
) -> SteadyState {
    let part = &intervals[first..];
    let full = full_intervals(intervals);
    let duration: f64 = part.iter().map(|i| i.end_s - i.start_s).sum();
    let acked_bits: f64 = part
        .iter()
        .map(|i| i.goodput_bps * (i.end_s - i.start_s))
        .sum();
    let sum = |f: fn(&Interval) -> u64| part.iter().map(f).sum::<u64>();
    let full_part: Vec<&Interval> = (first..intervals.len())
        .filter(|&k| full[k])
        .map(|k| &intervals[k])
        .collect();
    let rtt = median(
        full_part
            .iter()
            .map(|i| i.rtt_us)
            .filter(|&r| r > 0)
            .collect(),
    )
    .unwrap_or(0);
    let queue_delay = rtt.saturating_sub(min_rtt_us);
    let path_lost_bytes = (first..intervals.len())
        .filter(|&k| !overflow[k])
        .map(|k| lost_bytes(&intervals[k], mss))
        .sum();
    SteadyState {
        first_interval: first,
        intervals: part.len(),
        start_s: part.first().map_or(0.0, |i| i.start_s),
        end_s: part.last().map_or(0.0, |i| i.end_s),
        goodput_bps: if duration > 0.0 {
            acked_bits / duration
        } else {
            0.0
        },
        rtt_us: rtt,
        queue_delay_us: queue_delay,
        standing_queue: min_rtt_us > 0 && rtt > 0 && queue_delay >= threshold,
        bytes_sent: sum(|i| i.bytes_sent),
        bytes_retrans: sum(|i| i.bytes_retrans),
        lost_bytes: part.iter().map(|i| lost_bytes(i, mss)).sum(),
        path_lost_bytes,
        retransmits: sum(|i| i.retransmits),
        busy_us: sum(|i| i.busy_us),
        rwnd_limited_us: sum(|i| i.rwnd_limited_us),
        sndbuf_limited_us: sum(|i| i.sndbuf_limited_us),
        cwnd_bytes: median(full_part.iter().map(|i| i.cwnd_bytes).collect()).unwrap_or(0),
        snd_wnd_bytes: median(full_part.iter().map(|i| i.snd_wnd_bytes).collect()).unwrap_or(0),
    }
}

/// Which intervals' losses were the sender overrunning a queue: a burst (at least
/// [`BURST_FACTOR`]× the background) while the queue stood, or the recovery tail of such a burst
/// spilling into the next interval (still queued, above the background, no more than the burst).
fn overflow_mask(
    intervals: &[Interval],
    queued: &dyn Fn(usize) -> bool,
    ramp_end: usize,
) -> Vec<bool> {
    let background = background_loss(intervals, ramp_end);
    let burst: Vec<bool> = (0..intervals.len())
        .map(|k| {
            let lost = lost_segments(&intervals[k]);
            queued(k) && lost > 0 && lost >= BURST_FACTOR * background
        })
        .collect();
    (0..intervals.len())
        .map(|k| {
            let lost = lost_segments(&intervals[k]);
            let tail = k > 0
                && burst[k - 1]
                && queued(k)
                && lost > background
                && lost <= lost_segments(&intervals[k - 1]);
            burst[k] || tail
        })
        .collect()
}

/// The background loss a burst stands out from: the lower median of lost segments per full
/// interval after the one in which slow start ended (after the first when that is unknown), so
/// the slow-start overshoot does not count as background.
fn background_loss(intervals: &[Interval], ramp_end: usize) -> u64 {
    let full = full_intervals(intervals);
    let lost = |from: usize| {
        let mut v: Vec<u64> = (from..intervals.len())
            .filter(|&k| full[k])
            .map(|k| lost_segments(&intervals[k]))
            .collect();
        v.sort_unstable();
        v
    };
    let mut v = lost(ramp_end + 1);
    if v.is_empty() {
        v = lost(0);
    }
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

fn classify_loss(
    intervals: &[Interval],
    queued: &dyn Fn(usize) -> bool,
    overflow: &[bool],
    threshold: u32,
    mss: u32,
) -> LossBreakdown {
    let mut b = LossBreakdown {
        queue_threshold_us: threshold,
        ..LossBreakdown::default()
    };
    let mut path_bytes = 0u64;
    for (k, i) in intervals.iter().enumerate() {
        let lost = lost_segments(i);
        if lost == 0 {
            continue;
        }
        let q = queued(k);
        if overflow[k] {
            b.overflow_segments += lost;
            b.overflow_intervals += 1;
        } else {
            b.path_segments += lost;
            b.path_intervals += 1;
            path_bytes += lost_bytes(i, mss);
        }
        b.lost_segments += lost;
        if b.largest_burst.is_none_or(|x| lost > x.segments) {
            b.largest_burst = Some(LossBurst {
                start_s: i.start_s,
                end_s: i.end_s,
                segments: lost,
                rtt_us: interval_rtt(intervals, k),
                slow_start: k == 0 || intervals[k - 1].slow_start,
                queued: q,
            });
        }
    }
    let sent: u64 = intervals.iter().map(|i| i.bytes_sent).sum();
    b.path_share = ratio(path_bytes, sent);
    let total = b.lost_segments as f64;
    b.class = if b.lost_segments == 0 {
        LossClass::None
    } else if b.overflow_segments as f64 >= CLASS_SHARE * total {
        LossClass::QueueOverflow
    } else if b.path_segments as f64 >= CLASS_SHARE * total {
        LossClass::Path
    } else {
        LossClass::Mixed
    };
    b
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One-second intervals from (goodput Mbit/s, retransmitted segments, sRTT ms, slow start).
    pub(crate) fn intervals(rows: &[(f64, u64, f64, bool)]) -> Vec<Interval> {
        rows.iter()
            .enumerate()
            .map(|(k, &(mbit, retr, rtt_ms, ss))| {
                let sent = (mbit * 1e6 / 8.0) as u64 + retr * 1448;
                Interval {
                    start_s: k as f64,
                    end_s: k as f64 + 1.0,
                    goodput_bps: mbit * 1e6,
                    retransmits: retr,
                    bytes_retrans: retr * 1448,
                    bytes_sent: sent,
                    rtt_us: (rtt_ms * 1000.0) as u32,
                    busy_us: 1_000_000,
                    slow_start: ss,
                    ..Interval::default()
                }
            })
            .collect()
    }

    #[test]
    fn queue_threshold_scales_with_rtt_with_a_floor_for_jitter() {
        assert_eq!(queue_threshold_us(1_000), 5_000);
        assert_eq!(queue_threshold_us(70_000), 14_000);
        assert_eq!(queue_threshold_us(200_000), 40_000);
    }

    #[test]
    fn slow_start_and_steady_state_table() {
        // (name, rows, expected first steady interval or None, expected slow-start end interval)
        type Row = (f64, u64, f64, bool);
        type Case<'a> = (&'a str, &'a [Row], Option<usize>, Option<usize>);
        let cases: &[Case] = &[
            (
                // 70 ms, 50 Mbit/s tbf, CUBIC: overshoot losses in the first second.
                "cubic overshoot then flat",
                &[
                    (28.7, 406, 120.8, false),
                    (50.0, 2, 101.6, false),
                    (47.9, 0, 107.2, false),
                    (47.8, 0, 112.4, false),
                    (47.8, 0, 113.7, false),
                ],
                Some(1),
                Some(0),
            ),
            (
                "bbr never reports leaving slow start: the rate rule decides",
                &[
                    (12.0, 0, 30.0, true),
                    (35.0, 0, 31.0, true),
                    (47.0, 0, 31.0, true),
                    (47.5, 0, 30.5, true),
                    (47.2, 0, 30.8, true),
                ],
                Some(2),
                None,
            ),
            (
                "slow start ended late: not before that interval",
                &[
                    (5.0, 0, 40.0, true),
                    (58.0, 0, 41.0, true),
                    (60.0, 3, 42.0, false),
                    (58.0, 0, 41.0, false),
                    (59.0, 0, 41.0, false),
                ],
                Some(2),
                Some(2),
            ),
            (
                "slow start ended in the second interval, the rate already flat",
                &[
                    (30.0, 0, 76.0, true),
                    (47.8, 0, 76.0, false),
                    (47.8, 0, 76.0, false),
                    (47.9, 0, 76.0, false),
                ],
                Some(1),
                Some(1),
            ),
            (
                "a sender sets ssthresh when it runs out of data at the end: not slow start's end",
                &[
                    (50.0, 0, 100.0, true),
                    (230.0, 0, 100.0, true),
                    (231.0, 0, 100.0, true),
                    (230.0, 0, 100.0, true),
                    (221.0, 0, 100.0, false),
                ],
                Some(1),
                None,
            ),
            (
                "still climbing at the end",
                &[
                    (1.0, 0, 100.0, true),
                    (2.0, 0, 100.0, true),
                    (4.0, 0, 100.0, true),
                    (8.0, 0, 100.0, true),
                ],
                None,
                None,
            ),
            (
                "too short",
                &[(40.0, 0, 20.0, false), (41.0, 0, 20.0, false)],
                None,
                Some(0),
            ),
            (
                // A loss-limited CUBIC sawtooth: the median keeps the steady state from drifting.
                "sawtooth",
                &[
                    (25.9, 6, 41.0, false),
                    (8.3, 1, 40.3, false),
                    (7.8, 3, 41.5, false),
                    (4.4, 2, 41.2, false),
                    (6.0, 0, 40.5, false),
                ],
                Some(1),
                Some(0),
            ),
        ];
        for (name, rows, first, ss) in cases {
            let iv = intervals(rows);
            let p = phases(&iv, 40_000, 1448, true);
            assert_eq!(
                p.steady.as_ref().map(|s| s.first_interval),
                *first,
                "{name}"
            );
            assert_eq!(p.slow_start_end_s, ss.map(|k| k as f64 + 1.0), "{name}");
            assert_eq!(p.steady.is_none(), p.no_steady_reason.is_some(), "{name}");
        }
    }

    #[test]
    fn steady_state_rate_ignores_the_ramp() {
        let iv = intervals(&[
            (28.7, 406, 120.8, false),
            (50.0, 2, 101.6, false),
            (47.9, 0, 107.2, false),
            (47.8, 0, 112.4, false),
            (47.8, 0, 113.7, false),
        ]);
        let s = phases(&iv, 67_500, 1448, true).steady.unwrap();
        assert!((s.goodput_bps - 48.375e6).abs() < 1e3, "{}", s.goodput_bps);
        assert_eq!((s.start_s, s.end_s, s.intervals), (1.0, 5.0, 4));
        // The queue the slow ramp hid from a whole-test mean: median 107 ms vs min 67.5 ms.
        assert!(s.standing_queue);
        assert_eq!(s.rtt_us, 112_400);
    }

    #[test]
    fn loss_classes_table() {
        type Row = (f64, u64, f64, bool);
        type Case<'a> = (&'a str, &'a [Row], f64, LossClass, u64);
        // (name, rows, min RTT ms, class, path segments)
        let cases: &[Case] = &[
            (
                "slow-start overshoot at a shaper (seed: clean 70 ms path, CUBIC)",
                &[
                    (28.7, 406, 120.8, false),
                    (50.0, 2, 101.6, false),
                    (47.9, 0, 107.2, false),
                    (47.8, 0, 112.4, false),
                ],
                67.5,
                LossClass::QueueOverflow,
                0,
            ),
            (
                "random loss, no queue (0.5 % one way)",
                &[
                    (13.3, 6, 20.9, false),
                    (10.3, 3, 20.4, false),
                    (7.4, 5, 20.7, false),
                    (9.8, 3, 20.7, false),
                    (6.0, 7, 21.5, false),
                ],
                20.0,
                LossClass::Path,
                24,
            ),
            (
                "duplex-mismatch bursts every interval, BBR's small queue (seed 001)",
                &[
                    (91.5, 330, 4.2, true),
                    (90.6, 328, 4.7, true),
                    (92.8, 330, 4.7, true),
                    (91.8, 330, 4.7, true),
                ],
                1.0,
                LossClass::Path,
                1318,
            ),
            (
                "steady random loss under a standing queue is still path loss",
                &[
                    (35.7, 37, 45.1, true),
                    (38.1, 2, 41.4, true),
                    (38.2, 2, 42.3, true),
                    (38.2, 3, 45.9, true),
                    (38.1, 7, 44.0, true),
                ],
                18.9,
                LossClass::Mixed,
                14,
            ),
            (
                "a loss burst without a queue is path loss",
                &[
                    (40.0, 0, 20.5, false),
                    (20.0, 200, 20.8, false),
                    (40.0, 0, 20.4, false),
                    (40.0, 0, 20.6, false),
                ],
                20.0,
                LossClass::Path,
                200,
            ),
            (
                "no loss",
                &[(40.0, 0, 80.0, false), (40.0, 0, 80.0, false)],
                20.0,
                LossClass::None,
                0,
            ),
        ];
        for (name, rows, min_ms, class, path) in cases {
            let p = phases(&intervals(rows), (min_ms * 1000.0) as u32, 1448, true);
            assert_eq!(
                (p.loss.class, p.loss.path_segments),
                (*class, *path),
                "{name}"
            );
        }
    }

    #[test]
    fn dsack_duplicates_are_not_loss() {
        let mut iv = intervals(&[
            (40.0, 10, 20.0, false),
            (40.0, 10, 20.0, false),
            (40.0, 10, 20.0, false),
        ]);
        for i in &mut iv {
            i.dsack_dups = 10;
        }
        let p = phases(&iv, 20_000, 1448, true);
        assert_eq!(p.loss.class, LossClass::None);
        assert_eq!(p.steady.unwrap().lost_bytes, 0);
    }
}
