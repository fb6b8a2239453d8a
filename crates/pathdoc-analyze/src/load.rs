//! What a bulk transfer met under load, read from the connection's timeline
//! ([`crate::timeline`]): a token-bucket policer, and the queueing delay the transfer built
//! (latency under load).
//!
//! A policer drops what exceeds its token rate at once: loss with no queueing delay before it,
//! in dense bursts (an empty bucket drops most of what arrives), at a steady delivery rate —
//! the signature Flach et al. use on server-side traces ("An Internet-Wide Analysis of Traffic
//! Policing", SIGCOMM 2016), who take the goodput between the first and the last loss as the
//! policed rate: the bucket is empty at every drop. Here that is what passed a capture point
//! downstream of the drops between them; upstream, where only cumulative ACKs tell what passed,
//! the median bin from the first loss on (the median ignores a repair's spike). A lossy link
//! drops a segment here and there (sparse episodes); a shaper or a full queue delays before it
//! drops (the RTT grows).

use pathdoc_core::bufferbloat::{grade, GRADES_TEXT, WARN_FROM_MS};
use pathdoc_core::policer;
use pathdoc_core::units::{format_bytes, format_rate};
use pathdoc_core::{Evidence, Finding, Host, Quantity, Remedy, Status};

use crate::diagnose::{finding, pct, Side};
use crate::loss::LossCount;
use crate::summary::{ConnSummary, DirTimeline};

/// Loss a policer verdict needs: share of the data segments and segments (policed traces lose
/// several percent: Flach et al. measured 6× the loss of unpoliced ones).
pub const POLICER_MIN_LOSS: f64 = 0.01;
pub const POLICER_MIN_LOST: u64 = 20;
/// Share of the lost bytes that fell in dense episodes ([`crate::timeline::DENSE_SHARE`]).
pub const DENSE_LOSS_SHARE: f64 = 0.5;
/// "No queue": the round trip while losing within this fraction of the idle one (at least
/// [`QUEUE_MIN_MS`]) — the throughput check's standing-queue threshold …
pub const QUEUE_FRACTION: f64 = 0.2;
pub const QUEUE_MIN_MS: f64 = 5.0;
/// … for at least this share of the repaired bytes.
pub const NO_QUEUE_SHARE: f64 = 0.75;
/// The plateau: at least this share of the bins from the first loss on deliver within this
/// band around the policed rate, their median (a recovery's cumulative ACK makes single bins
/// spiky).
pub const PLATEAU_BAND: (f64, f64) = (2.0 / 3.0, 1.5);
pub const PLATEAU_SHARE: f64 = 0.6;
/// Bins (at least) over which the plateau is judged.
pub const PLATEAU_MIN_BINS: usize = 4;
/// The sender must have offered at least this much more than the policed rate in some bin up to
/// the last loss: a policer drops the excess of a sender that exceeds it. A sender paced at the
/// plateau that loses anyway (a busy host's queue) was not policed.
pub const OFFERED_ABOVE_PLATEAU: f64 = 1.2;
/// The policed rate must exceed Mathis' bound at the measured loss by this factor: the loss did
/// not set the rate. Policed lab transfers ran at ~10× it; CUBIC on a link losing 4-packet bursts
/// (3.2 %, 20 ms) at 1.5× — segment loss in bursts overstates the loss events CUBIC reacts to.
pub const MATHIS_FACTOR: f64 = 3.0;
/// Latency under load is reported from this increase (grade B or worse) …
pub const LATENCY_INFO_FROM_MS: f64 = 30.0;
/// … over at least this many loaded bins, covering ≥ 10 idle round trips.
pub const LATENCY_MIN_BINS: usize = 4;
/// A bin is "loaded" when it delivered at least this share of the direction's busiest bin …
pub const LOADED_SHARE: f64 = 0.5;
/// … and at least this many full segments per idle round trip (a bulk flight, acknowledged
/// every second segment, not a delayed ACK's 40–200 ms per lone segment).
pub const LOADED_MIN_SEGMENTS: f64 = 8.0;
/// Shape the SQM this far below the delivered rate.
pub const SQM_SHARE: f64 = 0.9;

/// One direction's bins with the whole path's round trip per bin.
struct Series<'a> {
    tx: &'a DirTimeline,
    bin_s: f64,
    /// Smallest and mean path round trip per bin, ms (None: no sample of the far loop).
    rtt_min: Vec<Option<f64>>,
    rtt_mean: Vec<Option<f64>>,
    /// The path's round trip without a queue: the handshake's, or the smallest bin's.
    idle_ms: f64,
}

impl Series<'_> {
    fn rate_bps(&self, k: usize) -> f64 {
        self.tx.delivered_bytes[k] as f64 * 8.0 / self.bin_s
    }

    /// What the sender put on the path in bin `k`, as far as this capture point can tell: new
    /// data that passed it, repairs, and data its sequence numbers skipped (lost before it).
    fn offered_bps(&self, k: usize) -> f64 {
        let t = self.tx;
        (t.sent_bytes[k] + t.repaired_bytes[k] + t.skipped_bytes[k]) as f64 * 8.0 / self.bin_s
    }

    fn queue_threshold_ms(&self) -> f64 {
        (self.idle_ms * QUEUE_FRACTION).max(QUEUE_MIN_MS)
    }
}

/// The two loops (capture point → each end → capture point) add up to the path's round trip
/// wherever the capture was taken; the far loop is the one with the larger minimum. The near
/// loop's bin minimum stands in for it (its mean holds the receiver's delayed ACKs).
fn series<'a>(c: &'a ConnSummary, s: &Side<'_>) -> Option<Series<'a>> {
    let t = c.timeline.as_ref()?;
    let (tx, rx) = match s.dir {
        pathdoc_core::Direction::ClientToServer => (&t.client_to_server, &t.server_to_client),
        _ => (&t.server_to_client, &t.client_to_server),
    };
    let global_min = |bins: &DirTimeline| {
        bins.rtt_min_ms
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min)
    };
    // A loop without samples (no timestamps, the other side sends no data) is the near one.
    let finite_min = |bins: &DirTimeline| Some(global_min(bins)).filter(|m| m.is_finite());
    let (far, near) = if finite_min(tx) >= finite_min(rx) {
        (tx, rx)
    } else {
        (rx, tx)
    };
    if !global_min(far).is_finite() || t.bin_s <= 0.0 {
        return None;
    }
    let near_min = Some(global_min(near))
        .filter(|m| m.is_finite())
        .unwrap_or(0.0);
    let near_at = |k: usize| {
        near.rtt_min_ms
            .get(k)
            .copied()
            .flatten()
            .unwrap_or(near_min)
    };
    let rtt_min: Vec<Option<f64>> = (0..tx.len())
        .map(|k| {
            far.rtt_min_ms
                .get(k)
                .copied()
                .flatten()
                .map(|m| m + near_at(k))
        })
        .collect();
    let rtt_mean = (0..tx.len())
        .map(|k| {
            far.rtt_mean_ms
                .get(k)
                .copied()
                .flatten()
                .map(|m| m + near_at(k))
        })
        .collect();
    let smallest = rtt_min
        .iter()
        .flatten()
        .fold(f64::INFINITY, |a, &b| a.min(b));
    let idle_ms = c
        .handshake_rtt_ms
        .filter(|h| *h > 0.0)
        .map_or(smallest, |h| h.min(smallest));
    idle_ms.is_finite().then_some(Series {
        tx,
        bin_s: t.bin_s,
        rtt_min,
        rtt_mean,
        idle_ms,
    })
}

/// Why a direction looks policed, with the figures the finding reports.
struct Policed {
    count: LossCount,
    rate_bps: f64,
    /// How the rate was read.
    rate_basis: RateBasis,
    /// Bins of the plateau, and how many delivered within the band.
    plateau_bins: usize,
    plateau_in_band: usize,
    /// Share of the repaired bytes repaired while the RTT stayed within the queue threshold,
    /// and the median smallest RTT of the bins that repaired.
    no_queue_share: f64,
    loss_rtt_ms: f64,
    burst_bytes: u64,
    span_s: (f64, f64),
    /// The most the sender offered in one bin up to the last loss.
    offered_peak_bps: f64,
}

/// Where the policed rate came from.
#[derive(Clone, Copy)]
enum RateBasis {
    /// Payload that passed a capture point downstream of the drops, between the first and the
    /// last bin it saw a hole in (their interior bins).
    BetweenDrops { bins: usize },
    /// The median bin delivered (by acknowledgment) from the first loss on.
    MedianBin,
}

impl RateBasis {
    fn evidence(self, p: &Policed, bin_s: f64) -> Evidence {
        let rate_bps = p.rate_bps;
        match self {
            RateBasis::BetweenDrops { bins } => Evidence::new(
                "goodput between the drops",
                Quantity::Goodput(rate_bps),
            )
            .with_detail(format!(
                "payload that passed the capture point (downstream of the drops) in the {bins} bins of {:.0} ms between the first and the last one with a hole: an empty bucket at both ends passes exactly its rate",
                bin_s * 1e3
            )),
            RateBasis::MedianBin => Evidence::new(
                "goodput from the first loss on (median bin)",
                Quantity::Goodput(rate_bps),
            )
            .with_detail(format!(
                "acknowledged payload, {:.1}–{:.1} s, {} bins of {:.0} ms (the capture point is upstream of the drops: a repair's cumulative ACK credits earlier bytes to its bin, so the median)",
                p.span_s.0,
                p.span_s.1,
                p.plateau_bins,
                bin_s * 1e3
            )),
        }
    }
}

/// Interior bins a between-the-drops rate needs.
pub const BETWEEN_DROPS_MIN_BINS: usize = 2;

/// The policed rate where the capture point is downstream of the drops (it saw the holes): a
/// token bucket is empty at every drop, so between two drops it passes exactly its rate × time
/// (Flach et al. take the goodput between the first and the last loss), and here every byte
/// that passed it passed the capture point when it did. The bins strictly between the first and
/// the last one with a hole: the first holds the bucket's credit draining before the first drop,
/// the last the sender's backing off after the last. Upstream of the drops only acknowledgments
/// tell what passed, and a cumulative ACK credits bytes that arrived before a hole was repaired
/// to the bin that repaired it.
fn between_drops_bps(sr: &Series<'_>) -> Option<(f64, usize)> {
    let t = sr.tx;
    let (skipped, repaired) = (
        t.skipped_bytes.iter().sum::<u64>(),
        t.repaired_bytes.iter().sum::<u64>(),
    );
    if skipped * 2 < repaired {
        return None;
    }
    let first = t.skipped_bytes.iter().position(|&b| b > 0)?;
    let last = t.skipped_bytes.iter().rposition(|&b| b > 0)?;
    let bins = (first + 1..last).len();
    if bins < BETWEEN_DROPS_MIN_BINS {
        return None;
    }
    let passed: u64 = (first + 1..last)
        .map(|k| t.sent_bytes[k] + t.repaired_bytes[k])
        .sum();
    Some((passed as f64 * 8.0 / (bins as f64 * sr.bin_s), bins))
}

fn policed(c: &ConnSummary, s: &Side<'_>, sr: &Series<'_>) -> Option<Policed> {
    let count = LossCount::of(s.tx);
    let ep = &s.tx.loss_episodes;
    if count.share() < POLICER_MIN_LOSS
        || count.lost() < POLICER_MIN_LOST
        || ep.dense_episodes == 0
        || (ep.dense_lost_bytes as f64) < DENSE_LOSS_SHARE * ep.lost_bytes as f64
    {
        return None;
    }
    let loss_bins: Vec<usize> = (0..sr.tx.len())
        .filter(|&k| sr.tx.repaired_bytes[k] > 0)
        .collect();
    let first = *loss_bins.first()?;
    // The round trip around the loss: the smaller of this bin's and the one before (a queue that
    // overflows stands in both; a recovery's echoes wait for the repair and inflate only the
    // bin that repairs, as RFC 7323 receivers echo the last in-order segment's timestamp).
    let loss_rtt = |k: usize| {
        let before = k.checked_sub(1).and_then(|j| sr.rtt_min[j]);
        match (sr.rtt_min[k], before) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    };
    let (mut judged, mut calm) = (0u64, 0u64);
    let mut rtts = Vec::new();
    for &k in &loss_bins {
        if let Some(r) = loss_rtt(k) {
            judged += sr.tx.repaired_bytes[k];
            rtts.push(r);
            if r <= sr.idle_ms + sr.queue_threshold_ms() {
                calm += sr.tx.repaired_bytes[k];
            }
        }
    }
    let no_queue_share = calm as f64 / judged.max(1) as f64;
    if judged == 0 || no_queue_share < NO_QUEUE_SHARE {
        return None;
    }
    // The plateau: from the first loss to the last full bin (the capture's last bin is cut
    // short). Its median rate, not its mean: the bucket's last credit in the first loss bin and
    // each recovery's cumulative ACK make single bins spike.
    let last_data = sr.tx.delivered_bytes.iter().rposition(|&b| b > 0)?;
    let last = if last_data > first + PLATEAU_MIN_BINS {
        last_data - 1
    } else {
        last_data
    };
    let bins = (last + 1).saturating_sub(first);
    if bins < PLATEAU_MIN_BINS {
        return None;
    }
    let mut rates: Vec<f64> = (first..=last).map(|k| sr.rate_bps(k)).collect();
    let (rate_bps, rate_basis) = match between_drops_bps(sr) {
        Some((bps, bins)) => (bps, RateBasis::BetweenDrops { bins }),
        None => (median(&mut rates), RateBasis::MedianBin),
    };
    let in_band = rates
        .iter()
        .filter(|&&r| (PLATEAU_BAND.0..=PLATEAU_BAND.1).contains(&(r / rate_bps)))
        .count();
    if rate_bps <= 0.0 || (in_band as f64) < PLATEAU_SHARE * bins as f64 {
        return None;
    }
    // Loss that explains the rate (a loss-based sender at Mathis' bound) is the link's, bursts
    // or not: a policer holds a sender far above what its loss alone would allow.
    let mss = f64::from(s.tx.max_segment_bytes.clamp(536, 9000));
    let mathis_bps = crate::diagnose::mathis_bps(mss, sr.idle_ms / 1e3, count.share());
    if rate_bps <= MATHIS_FACTOR * mathis_bps {
        return None;
    }
    let last_loss = *loss_bins.last()?;
    let offered_peak = (0..=last_loss)
        .map(|k| sr.offered_bps(k))
        .fold(0.0, f64::max);
    if offered_peak < OFFERED_ABOVE_PLATEAU * rate_bps {
        return None;
    }
    Some(Policed {
        count,
        rate_bps,
        rate_basis,
        plateau_bins: bins,
        plateau_in_band: in_band,
        no_queue_share,
        loss_rtt_ms: median(&mut rtts),
        burst_bytes: burst_estimate(sr, first, rate_bps),
        offered_peak_bps: offered_peak,
        span_s: (
            start_s(c) + first as f64 * sr.bin_s,
            start_s(c) + (last + 1) as f64 * sr.bin_s,
        ),
    })
}

fn start_s(c: &ConnSummary) -> f64 {
    c.timeline.as_ref().map_or(0.0, |t| t.start_s)
}

/// A token bucket passes at most `burst + rate × t`; it starts full, so how far the delivered
/// bytes ran ahead of the policed rate before the first loss bounds its depth from below.
fn burst_estimate(sr: &Series<'_>, first_loss: usize, rate_bps: f64) -> u64 {
    let mut delivered = 0.0;
    let mut ahead: f64 = 0.0;
    for k in 0..first_loss {
        delivered += sr.tx.delivered_bytes[k] as f64;
        ahead = ahead.max(delivered - rate_bps / 8.0 * (k + 1) as f64 * sr.bin_s);
    }
    ahead.max(0.0) as u64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// IP-layer rate of a goodput (what a policer meters): each MSS carries IP and TCP headers.
fn ip_rate(c: &ConnSummary, s: &Side<'_>, goodput_bps: f64) -> f64 {
    let mss = f64::from(s.tx.max_segment_bytes.clamp(536, 9000));
    let timestamps = s.tx.syn_options.is_some_and(|o| o.timestamps);
    let headers = if c.ip_version == 6 { 60.0 } else { 40.0 } + if timestamps { 12.0 } else { 0.0 };
    goodput_bps * (mss + headers) / mss
}

/// The `policer-limited` finding of one direction, which replaces its loss finding: the
/// policed rate, the loss it costs, pacing as the fix — never "find the lossy link".
pub(crate) fn policer(c: &ConnSummary, s: &Side<'_>) -> Option<Finding> {
    let sr = series(c, s)?;
    let p = policed(c, s, &sr)?;
    let ep = &s.tx.loss_episodes;
    let ip_bps = ip_rate(c, s, p.rate_bps);
    let mss = f64::from(s.tx.max_segment_bytes.clamp(536, 9000));
    let share = p.count.share();
    let mathis = crate::diagnose::mathis_bps(mss, sr.idle_ms / 1e3, share);
    let f = finding(
        c,
        "policer-limited",
        Status::Warn,
        format!(
            "policed {}: ≈ {} at the IP layer ({} goodput), {:.1} % of the {}'s segments dropped in bursts with no queueing delay — a token-bucket policer, not a lossy link",
            s.dir.arrow(),
            format_rate(ip_bps),
            format_rate(p.rate_bps),
            share * 100.0,
            s.sender
        ),
    )
    .direction(s.dir)
    .summary(format!(
        "From the first loss on ({:.1}–{:.1} s) the {} delivered a steady {} ({} of {} bins within {:.0}–{:.0} % of it), and the round trip while it lost stayed at the idle one ({:.1} ms against {:.1} ms idle): nothing queued before the drops, so no buffer filled — a shaper or a congested link delays before it drops. The drops came in bursts: {} of {} loss episodes lost ≥ 25 % of the segments they spanned ({:.0} % of the lost bytes), where a lossy link drops a segment here and there. That is a token-bucket policer (Flach et al., SIGCOMM 2016), as ISPs and clouds use to enforce a plan, or a bottleneck with almost no buffer; nothing is broken, but every packet above the rate is thrown away and resent. Random loss of {:.1} % would hold a loss-based sender near {} (Mathis' bound); this one ran at {}, so the loss did not set the rate: the policer did. Burst allowance: the transfer ran {} ahead of the policed rate before the first drop (a lower bound of the bucket).",
        p.span_s.0,
        p.span_s.1,
        s.sender,
        format_rate(p.rate_bps),
        p.plateau_in_band,
        p.plateau_bins,
        PLATEAU_BAND.0 * 100.0,
        PLATEAU_BAND.1 * 100.0,
        p.loss_rtt_ms,
        sr.idle_ms,
        ep.dense_episodes,
        ep.episodes,
        ep.dense_lost_bytes as f64 * 100.0 / ep.lost_bytes.max(1) as f64,
        share * 100.0,
        format_rate(mathis),
        format_rate(p.rate_bps),
        format_bytes(p.burst_bytes)
    ))
    .requirement(format!(
        "flagged when ≥ {:.0} % (≥ {POLICER_MIN_LOST}) of the data segments are lost, ≥ {:.0} % of the lost bytes in dense episodes (≥ 3 segments losing ≥ 25 % of their span), ≥ {:.0} % of the repairs while the RTT stayed within max({QUEUE_MIN_MS:.0} ms, {:.0} %) of the idle RTT, ≥ {:.0} % of the bins from the first loss on within {:.0}–{:.0} % of the policed rate (the policed rate: the payload that passed between the first and the last drop where the capture point is downstream of them, as Flach et al. take the goodput between the first and last loss; upstream, the median bin's acknowledged goodput), that rate > {MATHIS_FACTOR:.1}× Mathis' bound at the measured loss and idle RTT, and the sender offering ≥ {OFFERED_ABOVE_PLATEAU:.1}× that rate in some bin up to the last loss (a sender paced at the rate that loses anyway was not policed)",
        POLICER_MIN_LOSS * 100.0,
        DENSE_LOSS_SHARE * 100.0,
        NO_QUEUE_SHARE * 100.0,
        QUEUE_FRACTION * 100.0,
        PLATEAU_SHARE * 100.0,
        PLATEAU_BAND.0 * 100.0,
        PLATEAU_BAND.1 * 100.0
    ))
    .evidence(Evidence::new(format!("policed rate {}, IP layer", s.dir.arrow()), Quantity::WireRate(ip_bps)).with_detail("goodput plus IP/TCP headers per MSS (what a policer meters)"))
    .evidence(p.rate_basis.evidence(&p, sr.bin_s))
    .evidence(Evidence::new(format!("{}'s segments lost", s.sender), pct(share)).with_detail(format!("{} of {} data segments", p.count.lost(), p.count.data_segments)))
    .evidence(Evidence::new("loss episodes: dense / all", Quantity::Text(format!("{} / {} (largest {} segments)", ep.dense_episodes, ep.episodes, ep.largest_segments))).with_detail(format!("{} of {} lost", format_bytes(ep.dense_lost_bytes), format_bytes(ep.lost_bytes))))
    .evidence(Evidence::new("RTT while losing vs idle", Quantity::Text(format!("{:.1} ms vs {:.1} ms", p.loss_rtt_ms, sr.idle_ms))).with_detail(format!("{:.0} % of the repaired bytes within the {:.1} ms queue threshold", p.no_queue_share * 100.0, sr.queue_threshold_ms())))
    .evidence(Evidence::new("Mathis' bound at this loss and RTT", Quantity::Rate(mathis)).with_detail("what a loss-based sender could reach if the loss were random"))
    .evidence(Evidence::new("most the sender offered in one bin", Quantity::Rate(p.offered_peak_bps)).with_detail(format!("{:.1}× the policed rate: it exceeded the rate and the excess was dropped", p.offered_peak_bps / p.rate_bps)))
    .evidence(Evidence::new("burst allowance, lower bound", Quantity::Bytes(p.burst_bytes)).with_detail("most the delivered bytes ran ahead of the policed rate before the first loss"));
    Some(policer_remedies(f, s, ip_bps))
}

fn policer_remedies(f: Finding, s: &Side<'_>, ip_bps: f64) -> Finding {
    f.remedy(policer::pace_below(
        &format!("the {}", s.sender),
        ip_bps,
        s.sender_host.clone(),
    ))
    .remedy(policer::run_bbr(s.sender_host.clone()))
    .remedy(policer::ask_the_provider(s.dir.arrow(), ip_bps))
}

/// The round trip while a direction was busy, against the idle one.
pub(crate) struct UnderLoad {
    pub idle_ms: f64,
    /// Median of the busy bins' mean round trips, and the highest of them.
    pub loaded_ms: f64,
    pub highest_ms: f64,
    pub bins: usize,
    pub bin_s: f64,
    /// Mean goodput over the busy bins.
    pub rate_bps: f64,
}

impl UnderLoad {
    /// A queue formed at the bottleneck: the round trip grew by the throughput check's
    /// standing-queue threshold (here from 1 ms: a LAN's queue is short but real).
    pub fn queued(&self) -> bool {
        self.loaded_ms - self.idle_ms >= (self.idle_ms * QUEUE_FRACTION).max(1.0)
    }
}

/// The busy bins (delivering ≥ [`LOADED_SHARE`] of the busiest), when there are enough of them
/// over ≥ 10 idle round trips.
pub(crate) fn under_load(c: &ConnSummary, s: &Side<'_>) -> Option<UnderLoad> {
    let sr = series(c, s)?;
    let peak = (0..sr.tx.len()).map(|k| sr.rate_bps(k)).fold(0.0, f64::max);
    if peak <= 0.0 {
        return None;
    }
    // A bin is busy when it carried a bulk transfer's flight: interactive traffic (a keystroke
    // at a time) is timed with the receiver's delayed ACK in its round trips, not a queue.
    let mss = f64::from(s.tx.max_segment_bytes.clamp(536, 9000));
    let bulk_bps = LOADED_MIN_SEGMENTS * mss * 8.0 / (sr.idle_ms / 1e3).max(1e-3);
    let loaded: Vec<usize> = (0..sr.tx.len())
        .filter(|&k| sr.rate_bps(k) >= (LOADED_SHARE * peak).max(bulk_bps))
        .collect();
    let mut rtts: Vec<f64> = loaded.iter().filter_map(|&k| sr.rtt_mean[k]).collect();
    let span_s = loaded.len() as f64 * sr.bin_s;
    if rtts.len() < LATENCY_MIN_BINS || span_s < 10.0 * sr.idle_ms / 1e3 {
        return None;
    }
    let highest_ms = rtts.iter().copied().fold(0.0, f64::max);
    let loaded_ms = median(&mut rtts);
    let rate_bps = loaded.iter().map(|&k| sr.rate_bps(k)).sum::<f64>() / loaded.len() as f64;
    Some(UnderLoad {
        idle_ms: sr.idle_ms,
        loaded_ms,
        highest_ms,
        bins: rtts.len(),
        bin_s: sr.bin_s,
        rate_bps,
    })
}

/// The `latency-under-load` finding: the round trip while this direction was busy against the
/// idle one, graded like the DSLReports bufferbloat grade.
pub(crate) fn latency_under_load(c: &ConnSummary, s: &Side<'_>, out: &mut Vec<Finding>) {
    let Some(u) = under_load(c, s) else { return };
    let (idle_ms, loaded_ms, highest, rate) = (u.idle_ms, u.loaded_ms, u.highest_ms, u.rate_bps);
    let increase = loaded_ms - idle_ms;
    if increase < LATENCY_INFO_FROM_MS {
        return;
    }
    let g = grade(increase);
    let bad = increase >= WARN_FROM_MS;
    let mut f = finding(
        c,
        "latency-under-load",
        if bad { Status::Warn } else { Status::Info },
        format!(
            "latency under load {}: +{:.0} ms (RTT {:.1} ms idle, {:.1} ms while the {} sent), bufferbloat grade {g}",
            s.dir.arrow(),
            increase,
            idle_ms,
            loaded_ms,
            s.sender
        ),
    )
    .direction(s.dir)
    .summary(format!(
        "While the {} sent at {} goodput, the path's round trip grew by {:.0} ms (up to {:.0} ms): a queue at the bottleneck held that much data. Every packet sharing that queue waits as long — an interactive ssh session beside this transfer gets each keystroke echoed {:.0} ms later{}. The round trips come from this capture's data/ACK pairs and TCP timestamp echoes (RFC 7323), both loops through the capture point added up, so the capture may sit at either end. Grades are the DSLReports speed test's for the RTT increase under load ({GRADES_TEXT}).",
        s.sender,
        format_rate(rate),
        increase,
        highest - idle_ms,
        increase,
        if bad { ", which users feel as lag" } else { "" }
    ))
    .requirement(format!("reported from a {LATENCY_INFO_FROM_MS:.0} ms increase (grade B); WARN from {WARN_FROM_MS:.0} ms (grade C or worse)"))
    .evidence(Evidence::new("RTT idle", Quantity::Seconds(idle_ms / 1e3)).with_detail(if c.handshake_rtt_ms.is_some() { "the handshake's, or the smallest under load" } else { "no handshake in the capture: the smallest RTT seen, which a queue already standing when the capture started inflates (the increase is then a lower bound)" }))
    .evidence(Evidence::new("RTT under load (median of the busy bins' means)", Quantity::Seconds(loaded_ms / 1e3)).with_detail(format!("{} bins of {:.0} ms delivering ≥ {:.0} % of the busiest", u.bins, u.bin_s * 1e3, LOADED_SHARE * 100.0)))
    .evidence(Evidence::new("highest RTT under load", Quantity::Seconds(highest / 1e3)))
    .evidence(Evidence::new("increase (queueing delay)", Quantity::Seconds(increase / 1e3)))
    .evidence(Evidence::new("grade (DSLReports)", Quantity::Text(g.to_string())))
    .evidence(Evidence::new(format!("goodput {} while loaded", s.dir.arrow()), Quantity::Goodput(rate)));
    if bad {
        let shape = SQM_SHARE * rate;
        f = f
            .remedy(
                Remedy::new(format!(
                    "Move the queue to where it can be managed: smart queue management (cake or fq_codel) on the router in front of the bottleneck {}, shaped a little below the rate this transfer got ({} ≈ 90 % of {}); bulk and interactive flows then get separate queues and the delay stays in milliseconds",
                    s.dir.arrow(),
                    format_rate(shape),
                    format_rate(rate)
                ))
                .on(Host::Router { hop: None, address: None })
                .with_command(format!("tc qdisc replace dev WAN root cake bandwidth {}kbit", (shape / 1e3).round() as u64)),
            )
            .remedy(
                Remedy::new("If the buffer is in the provider's modem or head end, ask for one with AQM (DOCSIS 3.1 PIE) or a smaller buffer")
                    .on(Host::Isp),
            );
    }
    out.push(f);
}
