//! A token-bucket policer on the path, told from a lossy link: heavy loss that comes without any
//! queueing delay while the goodput sits on a flat plateau, and that the loss model cannot
//! explain (a loss-based sender could not run that fast at that loss) or that is concentrated
//! where the sender ran above the plateau (a lossy link drops in proportion to what crosses it;
//! a policer drops what exceeds its token rate). Flach et al., "An Internet-Wide Analysis of
//! Traffic Policing" (SIGCOMM 2016), use the same signature on server-side traces: loss without
//! RTT inflation before it, at a steady delivery rate.

use pathdoc_core::policer;
use pathdoc_core::units::{format_bytes, format_rate};
use pathdoc_core::{Evidence, Finding, Quantity, Remedy, Status};

use crate::analysis::{Basis, DirectionResult, CHECK, MODEL_FACTOR};
use crate::model::{loss_model_rate, wire_estimate};
use crate::phases::{lost_bytes, LossClass};

/// Path loss over the whole test (share of sent bytes) a policer verdict needs: policed traces
/// lose several percent (Flach et al.: on average 6× the loss of unpoliced ones).
pub const POLICER_MIN_LOSS: f64 = 0.01;
/// Every full steady-state interval within this factor of the plateau (and its inverse) …
pub const PLATEAU_FACTOR: f64 = 0.8;
/// … or, below it, down to this share: a loss-based sender recovering from a heavy drop (CUBIC
/// regrows its window over K = ∛(W·(1−β)/C), seconds at 40 ms) runs below the rate for an
/// interval or two and banks the bucket's tokens. The plateau is then only a lower bound of the
/// policed rate, reported as a range.
pub const RECOVERY_FLOOR: f64 = 0.6;
/// The rate is a range, too, when the test ended this many full intervals after its last loss:
/// a sender that never met the empty bucket again may have banked tokens it never spent (the
/// lab's deep bucket: a recovery at 13–17 Mbit/s, then 21–23 Mbit/s without loss, the steady
/// mean 15 % under the rate).
pub const UNSPENT_TAIL_INTERVALS: usize = 2;
/// Loss "concentrated where the sender exceeded the plateau": the interval with the most lost
/// segments holds at least this share of them …
pub const CONCENTRATED_SHARE: f64 = 0.5;
/// … and lost at least this many times the share of its bytes that the rest of the test lost (a
/// lossy link drops in proportion to the traffic that crosses it, a policer what exceeds its rate).
pub const CONCENTRATION_FACTOR: f64 = 4.0;

/// Why a direction looks policed, with the figures the finding reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Policed {
    /// The plateau (steady-state goodput) and its IP-layer rate (what a policer meters).
    pub goodput_bps: f64,
    pub ip_bps: f64,
    /// Path-lost share of the bytes sent over the whole test.
    pub loss_share: f64,
    /// The loss model's rate at that loss, for a loss-based sender.
    pub model_bps: Option<f64>,
    /// Share of lost segments in the worst interval; lost share of the bytes sent in it and in
    /// the rest of the test.
    pub worst_loss_share: f64,
    pub worst_loss_rate: f64,
    pub rest_loss_rate: f64,
    pub worst_interval: (f64, f64),
    /// Bytes delivered above the plateau before it held: a lower bound of the bucket.
    pub burst_bytes: u64,
    /// Largest and smallest steady interval over the plateau.
    pub plateau_spread: (f64, f64),
    /// When a steady interval ran below [`PLATEAU_FACTOR`] of the plateau or the test ended
    /// [`UNSPENT_TAIL_INTERVALS`] after its last loss, the drops do not bracket the steady state:
    /// the bucket may have held credit at its start and its end (a sender banks tokens while it
    /// recovers below the rate and spends them later without loss), so the policed rate is the
    /// plateau ± the bucket's lower bound spread over the steady state.
    pub range: Option<RateRange>,
    /// Loss-free full steady intervals at the end of the test.
    pub unspent_tail: usize,
}

/// The policed rate as a range, goodput and IP layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateRange {
    pub goodput_bps: (f64, f64),
    pub ip_bps: (f64, f64),
}

/// The policer signature of one direction, or `None`.
pub fn policed(d: &DirectionResult, b: &Basis) -> Option<Policed> {
    let steady = d.phases.steady.as_ref()?;
    let loss = &d.phases.loss;
    let no_queue = !b.standing_queue
        && loss.class == LossClass::Path
        && loss.largest_burst.is_some_and(|x| !x.queued);
    if !no_queue || loss.path_share < POLICER_MIN_LOSS || steady.goodput_bps <= 0.0 {
        return None;
    }
    let plateau = steady.goodput_bps;
    let shape = Shape::of(d, steady.first_interval, plateau)?;
    let burst_bytes = burst_estimate(d, plateau);
    let steady_s = steady.end_s - steady.start_s;
    // The bucket's credit at the steady state's ends, if the drops do not bracket it.
    let credit_bps = burst_bytes as f64 * 8.0 / steady_s.max(1e-3);
    let ranged = shape.lo < PLATEAU_FACTOR || shape.unspent_tail >= UNSPENT_TAIL_INTERVALS;
    let ceiling = if ranged {
        plateau + credit_bps
    } else {
        plateau
    };
    if shape.lo < RECOVERY_FLOOR || shape.hi * plateau > ceiling / PLATEAU_FACTOR {
        return None;
    }
    let model_bps = loss_model_rate(
        &d.sender.congestion_control,
        d.sender.snd_mss,
        b.rtt_s,
        loss.path_share,
    )
    .map(|m| m * f64::from(d.streams.max(1)));
    let w = worst_interval(d)?;
    let unexplained = model_bps.is_some_and(|m| plateau > MODEL_FACTOR * m);
    let concentrated = w.loss_share >= CONCENTRATED_SHARE
        && w.loss_rate >= CONCENTRATION_FACTOR * w.rest_loss_rate;
    if !(unexplained || concentrated) {
        return None;
    }
    let ip =
        |goodput| wire_estimate(goodput, d.sender.snd_mss, d.ipv6, d.sender.timestamps, 0.0).ip_bps;
    let range = ranged.then(|| {
        let (low, high) = ((plateau - credit_bps).max(0.0), plateau + credit_bps);
        RateRange {
            goodput_bps: (low, high),
            ip_bps: (ip(low), ip(high)),
        }
    });
    Some(Policed {
        goodput_bps: plateau,
        ip_bps: ip(plateau),
        loss_share: loss.path_share,
        model_bps,
        worst_loss_share: w.loss_share,
        worst_loss_rate: w.loss_rate,
        rest_loss_rate: w.rest_loss_rate,
        worst_interval: w.span,
        burst_bytes,
        plateau_spread: (shape.lo, shape.hi),
        range,
        unspent_tail: shape.unspent_tail,
    })
}

/// The full steady intervals against the plateau.
struct Shape {
    /// Smallest and largest interval over the plateau.
    lo: f64,
    hi: f64,
    /// Loss-free full intervals after the last one that lost packets.
    unspent_tail: usize,
}

impl Shape {
    fn of(d: &DirectionResult, first: usize, plateau: f64) -> Option<Shape> {
        let steady_part = &d.intervals[first.min(d.intervals.len())..];
        let typical = steady_part
            .iter()
            .map(|i| i.end_s - i.start_s)
            .fold(0.0, f64::max);
        let full: Vec<_> = steady_part
            .iter()
            .filter(|i| i.end_s - i.start_s >= 0.5 * typical)
            .collect();
        let (lo, hi) = full.iter().fold((f64::MAX, 0.0_f64), |(lo, hi), i| {
            let r = i.goodput_bps / plateau;
            (lo.min(r), hi.max(r))
        });
        let unspent_tail = full
            .iter()
            .rev()
            .take_while(|i| lost_bytes(i, d.sender.snd_mss) == 0)
            .count();
        (!full.is_empty()).then_some(Shape {
            lo,
            hi,
            unspent_tail,
        })
    }
}

/// The interval with the most lost segments, against the rest of the test.
struct Worst {
    span: (f64, f64),
    loss_share: f64,
    loss_rate: f64,
    rest_loss_rate: f64,
}

fn worst_interval(d: &DirectionResult) -> Option<Worst> {
    let lost = |i: &crate::analysis::Interval| lost_bytes(i, d.sender.snd_mss);
    let total_lost: u64 = d.intervals.iter().map(lost).sum();
    let total_sent: u64 = d.intervals.iter().map(|i| i.bytes_sent).sum();
    let worst = d.intervals.iter().max_by_key(|i| lost(i))?;
    if total_lost == 0 || worst.bytes_sent == 0 {
        return None;
    }
    let rest_sent = total_sent.saturating_sub(worst.bytes_sent);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Some(Worst {
        span: (worst.start_s, worst.end_s),
        loss_share: ratio(lost(worst), total_lost),
        loss_rate: ratio(lost(worst), worst.bytes_sent),
        rest_loss_rate: ratio(total_lost - lost(worst), rest_sent),
    })
}

/// A token bucket passes at most `burst + rate × t` in any time `t`; it starts full, so the most
/// the cumulative goodput ran ahead of the plateau is a lower bound of its depth (the sender's
/// ramp-up spent part of the credit's time below the rate).
fn burst_estimate(d: &DirectionResult, plateau_bps: f64) -> u64 {
    let t0 = d.intervals.first().map_or(0.0, |i| i.start_s);
    let mut delivered = 0.0;
    let mut ahead: f64 = 0.0;
    for i in &d.intervals {
        delivered += i.goodput_bps * (i.end_s - i.start_s) / 8.0;
        ahead = ahead.max(delivered - plateau_bps / 8.0 * (i.end_s - t0));
    }
    ahead.max(0.0) as u64
}

fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}

/// The `policer-limited` finding: the policed rate, the loss it costs, and pacing as the fix.
pub fn policer_finding(d: &DirectionResult, b: &Basis, p: &Policed) -> Finding {
    let cc = d.sender.congestion_control.as_str();
    let bbr = cc.to_ascii_lowercase().starts_with("bbr");
    let why = match p.model_bps {
        Some(m) if p.goodput_bps > MODEL_FACTOR * m => format!(
            "a loss-based sender ({cc}) losing {:.1} % could not run at {} — the loss model allows about {} — so the losses did not set the rate: something enforced the rate and dropped what exceeded it",
            p.loss_share * 100.0,
            format_rate(p.goodput_bps),
            format_rate(m)
        ),
        _ => format!(
            "{:.0} % of the lost bytes fell in {:.1}–{:.1} s, which lost {:.1} % of what it sent against {:.2} % in the rest of the test: a lossy link drops in proportion to the traffic that crosses it, a policer drops what exceeds its rate",
            p.worst_loss_share * 100.0,
            p.worst_interval.0,
            p.worst_interval.1,
            p.worst_loss_rate * 100.0,
            p.rest_loss_rate * 100.0
        ),
    };
    let (rate, plateau) = match p.range {
        None => (
            format!("≈ {} ({} goodput)", format_rate(p.ip_bps), format_rate(p.goodput_bps)),
            format!(
                "The goodput sat on a flat plateau ({}, every steady interval within {:.0}–{:.0} % of it)",
                format_rate(p.goodput_bps),
                p.plateau_spread.0 * 100.0,
                p.plateau_spread.1 * 100.0
            ),
        ),
        Some(r) => (
            format!(
                "{}–{} (plateau {} goodput)",
                format_rate(r.ip_bps.0),
                format_rate(r.ip_bps.1),
                format_rate(p.goodput_bps)
            ),
            format!(
                "The goodput held a plateau of {} (steady intervals within {:.0}–{:.0} % of it), but {}: the drops do not bracket the steady state, so the bucket may have held credit at its start and its end (a sender banks tokens while below the rate and spends them later without a drop), and the policed rate is the plateau ± the bucket's lower bound over the {:.1} s steady state: {}–{} goodput; a longer test narrows it",
                format_rate(p.goodput_bps),
                p.plateau_spread.0 * 100.0,
                p.plateau_spread.1 * 100.0,
                if p.plateau_spread.0 < PLATEAU_FACTOR {
                    format!("those below {:.0} % were the sender recovering from a heavy drop", PLATEAU_FACTOR * 100.0)
                } else {
                    format!("the test ended {} intervals after its last loss", p.unspent_tail)
                },
                d.phases.steady.as_ref().map_or(0.0, |s| s.end_s - s.start_s),
                format_rate(r.goodput_bps.0),
                format_rate(r.goodput_bps.1)
            ),
        ),
    };
    let f = Finding::new(CHECK, "policer-limited", Status::Warn, format!(
        "{}: policed at {rate}: {:.1} % of the bytes sent were dropped with no queueing delay — a token-bucket policer, not a lossy link",
        d.what(),
        p.loss_share * 100.0
    ))
    .direction(d.core_direction())
    .summary(format!(
        "{plateau} and the RTT stayed at its minimum while packets were lost ({} smoothed vs {} minimum): nothing queued before the drops, so no buffer filled — a shaper or a congested link queues first. And {why}. That is a token-bucket policer (Flach et al., SIGCOMM 2016), as ISPs and clouds use to enforce a plan; nothing is broken, but every packet above its rate is thrown away and resent. Burst allowance: the transfer ran up to {} ahead of the plateau before the drops held it (a lower bound of the bucket).",
        ms(b.rtt_s),
        ms(b.min_rtt_s),
        format_bytes(p.burst_bytes)
    ))
    .requirement(format!(
        "flagged when ≥ {:.0} % of sent bytes are lost on the path with no queue (steady RTT within the queue threshold of the minimum), the steady goodput flat within {:.0}–{:.0} % (down to {:.0} % for a sender recovering from a heavy drop), and the rate either > {MODEL_FACTOR:.0}× the loss model's or the loss concentrated (≥ {:.0} % of it in one interval that lost ≥ {CONCENTRATION_FACTOR:.0}× the share the rest of the test lost); the rate is a range (the plateau ± the burst lower bound over the steady state) when a steady interval ran below {:.0} % of it or the test ended ≥ {UNSPENT_TAIL_INTERVALS} intervals after its last loss",
        POLICER_MIN_LOSS * 100.0,
        PLATEAU_FACTOR * 100.0,
        100.0 / PLATEAU_FACTOR,
        RECOVERY_FLOOR * 100.0,
        CONCENTRATED_SHARE * 100.0,
        PLATEAU_FACTOR * 100.0
    ))
    .evidence(Evidence::new(format!("policed rate, IP layer, {}", b.label), Quantity::WireRate(p.ip_bps)).with_detail("steady-state goodput plus IP/TCP headers, without retransmissions (what a policer meters)"));
    let f = match p.range {
        Some(r) => f
            .evidence(Evidence::new(format!("policed rate, IP layer, lower bound, {}", b.label), Quantity::WireRate(r.ip_bps.0)).with_detail("the plateau less the bucket's lower bound spread over the steady state: credit it may have spent at the start"))
            .evidence(Evidence::new(format!("policed rate, IP layer, upper bound, {}", b.label), Quantity::WireRate(r.ip_bps.1)).with_detail("the plateau plus the bucket's lower bound spread over the steady state: tokens banked and never spent")),
        None => f,
    };
    f
    .evidence(Evidence::new(format!("goodput, {}", b.label), Quantity::Goodput(p.goodput_bps)))
    .evidence(Evidence::new("path-loss share of sent bytes, whole test", Quantity::Percent(p.loss_share * 100.0)).with_detail(format!("{} segments retransmitted", d.sender.retransmits)))
    .evidence(Evidence::new("RTT, smoothed vs minimum", Quantity::Text(format!("{} vs {}", ms(b.rtt_s), ms(b.min_rtt_s)))))
    .evidence(Evidence::new("burst allowance, lower bound", Quantity::Bytes(p.burst_bytes)).with_detail("most the cumulative goodput ran ahead of the plateau"))
    .evidence(Evidence::new("interval with the most loss: its share of all lost bytes; lost share of its bytes vs the rest's", Quantity::Text(format!(
        "{:.0} %; {:.1} % vs {:.2} % ({:.1}–{:.1} s)",
        p.worst_loss_share * 100.0,
        p.worst_loss_rate * 100.0,
        p.rest_loss_rate * 100.0,
        p.worst_interval.0,
        p.worst_interval.1
    ))))
    .remedy(policer::pace_below("the sender", p.ip_bps, d.sender_side.host()))
    .remedy(if bbr {
        Remedy::new(format!("The sender already runs {cc}; its bandwidth probes still overran the bucket ({:.1} % lost), so pacing with maxrate is what removes the loss", p.loss_share * 100.0))
            .on(d.sender_side.host())
    } else {
        policer::run_bbr(d.sender_side.host())
    })
    .remedy(policer::ask_the_provider("in this direction", p.ip_bps))
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnose_direction;
    use crate::analysis::tests::{direction, each};

    /// (goodput Mbit/s, lost segments, sRTT ms) per 1-s interval on a 40 ms path.
    fn path(cc: &str, rows: &[(f64, u64, f64)]) -> crate::DirectionResult {
        let mut d = direction(20e6);
        d.sender.congestion_control = cc.into();
        d.sender.min_rtt_us = 40_000;
        d.intervals.truncate(rows.len());
        each(&mut d, |k, i| {
            let (mbit, lost, rtt) = rows[k];
            i.goodput_bps = mbit * 1e6;
            i.retransmits = lost;
            i.bytes_retrans = lost * 1448;
            i.bytes_sent = (mbit * 1e6 / 8.0) as u64 + lost * 1448;
            i.rtt_us = (rtt * 1e3) as u32;
            i.slow_start = cc == "bbr" || k == 0;
        });
        d
    }

    fn verdict(d: &crate::DirectionResult) -> String {
        diagnose_direction(d)[1].id.clone()
    }

    #[test]
    fn policed_line_is_policer_limited_for_cubic_and_bbr() {
        // Measured shapes (policed-line lab, 4 s): the bucket's credit in the first second, then
        // a flat plateau, loss concentrated where the sender ran above it, the RTT at its minimum.
        let cubic = path(
            "cubic",
            &[
                (36.9, 810, 40.5),
                (18.8, 130, 40.7),
                (15.9, 0, 40.3),
                (19.5, 0, 40.2),
            ],
        );
        assert_eq!(verdict(&cubic), "policer-limited");
        let f = &diagnose_direction(&cubic)[1];
        assert!(
            f.remedies.iter().any(|r| r
                .command
                .as_deref()
                .is_some_and(|c| c.contains("fq maxrate"))),
            "{f:#?}"
        );
        assert!(
            !f.remedies
                .iter()
                .any(|r| r.description.contains("lossy link")),
            "{f:#?}"
        );
        let bbr = path(
            "bbr",
            &[
                (34.1, 1872, 41.9),
                (21.8, 32, 40.2),
                (19.1, 0, 40.2),
                (19.4, 181, 41.0),
            ],
        );
        assert_eq!(verdict(&bbr), "policer-limited");
    }

    #[test]
    fn a_sender_recovering_below_the_rate_gets_a_range() {
        // Measured (policed-line lab, CUBIC download, 5 s): a heavy drop in the first steady
        // second, then CUBIC regrowing its window below the rate for three seconds. The steady
        // mean (16.5 Mbit/s) is 14 % under the 19.3 Mbit/s a 20 Mbit/s IP policer passes as
        // goodput; the finding says it is a lower bound and gives the most it can be.
        let d = path(
            "cubic",
            &[
                (36.67, 685, 40.2),
                (16.49, 280, 40.4),
                (12.69, 0, 40.2),
                (16.48, 0, 40.2),
                (20.27, 0, 40.2),
            ],
        );
        assert_eq!(verdict(&d), "policer-limited");
        let p = super::policed(&d, &crate::analysis::Basis::of(&d)).expect("policed");
        let r = p.range.expect("a range");
        assert!(
            r.goodput_bps.0 < 19.31e6 && 19.31e6 < r.goodput_bps.1,
            "{p:?}"
        );
        let f = &diagnose_direction(&d)[1];
        assert!(f.title.contains("–"), "{}", f.title);
        assert!(
            f.evidence.iter().any(|e| e.name.contains("upper bound")),
            "{f:#?}"
        );
        // A flat plateau is a point, not a range.
        let flat = path(
            "cubic",
            &[(36.9, 810, 40.5), (18.8, 130, 40.7), (19.5, 40, 40.2)],
        );
        let p = super::policed(&flat, &crate::analysis::Basis::of(&flat)).expect("policed");
        assert_eq!(p.range, None);
    }

    #[test]
    fn a_test_that_ends_long_after_its_last_loss_gets_a_range() {
        // Measured (policed-line lab, CUBIC download, 5 s, CI-like load): the last loss in the
        // first steady second, then 3 s of recovery and spending the banked tokens without a
        // drop; the steady mean 16.4 Mbit/s, 15 % under the policed 19.3, and the last full
        // interval 1.27× the mean — it failed the flatness rule and read link-limited PASS.
        let d = path(
            "cubic",
            &[
                (36.78, 551, 40.3),
                (14.32, 165, 40.2),
                (13.25, 0, 40.1),
                (17.02, 0, 40.2),
                (20.78, 0, 40.3),
            ],
        );
        assert_eq!(verdict(&d), "policer-limited");
        let p = super::policed(&d, &crate::analysis::Basis::of(&d)).expect("policed");
        assert_eq!(p.unspent_tail, 3);
        let r = p.range.expect("a range");
        assert!(
            r.goodput_bps.0 < 19.31e6 && 19.31e6 < r.goodput_bps.1,
            "{p:?}"
        );
        let f = &diagnose_direction(&d)[1];
        assert!(
            f.summary.contains("3 intervals after its last loss"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn steady_random_or_queued_loss_is_not_a_policer() {
        // Loss in proportion to the traffic (a lossy link), BBR riding through it at the link rate.
        let lossy = path(
            "bbr",
            &[
                (90.0, 320, 1.2),
                (94.0, 330, 1.1),
                (94.0, 325, 1.2),
                (93.0, 330, 1.1),
            ],
        );
        assert_ne!(verdict(&lossy), "policer-limited");
        // The same loss pattern as a policer but with a queue before it: a shaper.
        let queued = path(
            "cubic",
            &[
                (36.9, 810, 90.0),
                (18.8, 130, 90.0),
                (15.9, 0, 90.0),
                (19.5, 0, 90.0),
            ],
        );
        assert_ne!(verdict(&queued), "policer-limited");
        // Light loss is not a policer's.
        let light = path(
            "cubic",
            &[
                (20.0, 20, 40.2),
                (19.0, 5, 40.2),
                (19.5, 0, 40.2),
                (19.4, 0, 40.2),
            ],
        );
        assert_ne!(verdict(&light), "policer-limited");
    }
}
