//! A bottleneck shared with other traffic: the transfer ran at a fraction of what the path can
//! carry while a queue stood at the bottleneck. TCP_INFO alone cannot tell a queue that others
//! fill from one's own, so the capacity comes from a packet-train probe ([`crate::train`]) taken
//! before the test: a train leaves a FIFO bottleneck spread to its capacity whoever else is
//! queued, while a bulk flow among N gets about 1/N of it (TCP fairness between flows of equal
//! RTT; Chiu & Jain 1989). A single flow filling its own queue runs at ≈ the capacity and never
//! gets this finding.

use pathdoc_core::units::format_rate;
use pathdoc_core::{Evidence, Finding, Host, Quantity, Remedy, Status};

use crate::analysis::{Basis, DirectionResult, Limit, CHECK};

/// A transfer below this share of the measured capacity (IP layer, both) did not have the link
/// to itself: one other equal flow leaves it 50 %; a single flow filling its own queue runs at
/// 85–100 % (measured on the lab's shaped paths: 90–97 % of the tbf rate).
pub const SHARED_FRACTION: f64 = 0.6;

/// The transfer's steady rate on the wire (IP), from the steady goodput and the whole test's
/// wire/goodput ratio (headers and retransmissions).
fn wire_rate(d: &DirectionResult, b: &Basis) -> f64 {
    if d.goodput_bps > 0.0 && d.wire.ip_bps > 0.0 {
        b.rate_bps * d.wire.ip_bps / d.goodput_bps
    } else {
        b.rate_bps
    }
}

/// The `shared-bottleneck` finding of one direction, when its capacity was probed, the path
/// (not a host, loss or a policer) set its rate, a queue stood and the rate was a fraction of
/// the capacity.
pub fn shared_finding(d: &DirectionResult, b: &Basis, limit: &Limit) -> Option<Finding> {
    let probe = d.capacity.as_ref()?;
    let capacity = probe.capacity_ip_bps?;
    let wire = wire_rate(d, b);
    if *limit != Limit::Path
        || !b.standing_queue
        || wire <= 0.0
        || wire > SHARED_FRACTION * capacity
    {
        return None;
    }
    let share = wire / capacity;
    let flows = (1.0 / share).round().max(2.0);
    let (lo, hi) = (
        probe.train_rates_bps.first().copied().unwrap_or(capacity),
        probe.train_rates_bps.last().copied().unwrap_or(capacity),
    );
    let f = Finding::new(
        CHECK,
        "shared-bottleneck",
        Status::Warn,
        format!(
            "{}: the link was busy with other traffic during the test: {} of capacity, this transfer got {} ({:.0} %)",
            d.what(),
            format_rate(capacity),
            format_rate(wire),
            share * 100.0
        ),
    )
    .direction(d.core_direction())
    .summary(format!(
        "A packet train sent back to back before the test left the bottleneck spread to {} (IP), but this {} ran at {} on the wire ({} goodput, {}) while a queue stood ({:.0} ms of queueing delay) and {:.2} % of its bytes were lost: it shared the bottleneck with other traffic and got about its fair share, as one of ≈ {flows:.0} equal flows would. The rate measured is this transfer's share at that moment, not what the line can do; nothing on either end limited it.",
        format_rate(capacity),
        d.direction.short(),
        format_rate(wire),
        format_rate(b.rate_bps),
        b.label,
        b.queue_delay_s * 1e3,
        b.loss_share * 100.0,
    ))
    .requirement(format!(
        "the path set the rate (no host, loss or policer limit), a standing queue, and a rate on the wire below {:.0} % of the capacity a packet-train probe measured (median of ≥ {} trains of {} × {} B, each one datagram over its median path-spread gap: capacity = size / gap; Dovrolis et al., IEEE/ACM ToN 2004)",
        SHARED_FRACTION * 100.0,
        crate::train::MIN_TRAINS,
        probe.packets_per_train,
        probe.datagram_ip_bytes
    ))
    .evidence(
        Evidence::new("bottleneck capacity (packet trains, IP)", Quantity::Rate(capacity)).with_detail(format!(
            "median of {} trains ({}–{}), {} of {} answered",
            probe.train_rates_bps.len(),
            format_rate(lo),
            format_rate(hi),
            probe.trains_answered,
            probe.trains_sent
        )),
    )
    .evidence(Evidence::new(format!("this transfer on the wire (IP), {}", b.label), Quantity::WireRate(wire)))
    .evidence(Evidence::new(format!("this transfer's goodput, {}", b.label), Quantity::Goodput(b.rate_bps)))
    .evidence(Evidence::new("share of the capacity", Quantity::Percent(share * 100.0)).with_detail(format!("fair share of ≈ {flows:.0} equal flows")))
    .evidence(Evidence::new("queueing delay (RTT under load − minimum RTT)", Quantity::Seconds(b.queue_delay_s)))
    .evidence(Evidence::new("bytes lost (retransmitted, net of DSACK)", Quantity::Percent(b.loss_share * 100.0)))
    .remedy(
        Remedy::new("Test again when the link is quiet (off-peak, or with the other users' transfers paused) to measure what the line itself carries")
            .on(Host::Client),
    )
    .remedy(
        Remedy::new("Find the other traffic on the router that owns the bottleneck: its per-host or per-connection counters show who else was sending (a backup, an update, a stream); a fair queue (cake/fq_codel) there shares the line evenly")
            .on(Host::Router { hop: None, address: None })
            .with_command("conntrack -L -o extended | sort -k 10 | tail; iftop -i LAN"),
    );
    Some(f)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::tests::{direction, each};
    use crate::analysis::{diagnose_direction, limit};
    use crate::train::CapacityProbe;

    fn probe(capacity: f64) -> CapacityProbe {
        CapacityProbe {
            capacity_ip_bps: Some(capacity),
            train_rates_bps: vec![0.97 * capacity, capacity, 1.02 * capacity],
            trains_sent: 3,
            trains_answered: 3,
            datagram_ip_bytes: 1228,
            packets_per_train: 64,
        }
    }

    /// A 50 Mbit/s line probed, a 15 Mbit/s download with a 20 ms standing queue over a 60 ms
    /// minimum RTT (others' queue) — the lab's shared-bottleneck path.
    pub(crate) fn share_a_busy_link(d: &mut DirectionResult) {
        d.capacity = Some(probe(50e6));
        d.sender.min_rtt_us = 60_000;
        d.goodput_bps = 15e6;
        d.wire.ip_bps = 15e6 * 1.035;
        each(d, |_, i| {
            i.goodput_bps = 15e6;
            i.rtt_us = 80_000;
            i.min_rtt_us = 60_000;
        });
        *d = d.clone().with_phases();
    }

    #[test]
    fn a_busy_link_warns_with_capacity_share_and_remedies() {
        let mut d = direction(20e6);
        share_a_busy_link(&mut d);
        let f = diagnose_direction(&d)
            .into_iter()
            .find(|f| f.id == "shared-bottleneck")
            .expect("shared-bottleneck");
        assert_eq!(f.status, Status::Warn);
        assert!(f.title.contains("50.0 Mbit/s of capacity"), "{}", f.title);
        assert!(f.remedies.iter().any(|r| r.host == Some(Host::Client)));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.name.starts_with("bottleneck capacity")));
    }

    #[test]
    fn one_flow_filling_its_own_queue_or_no_probe_or_no_queue_is_not_shared() {
        // CUBIC alone on a shaped 50 Mbit/s line: ≈ 47 Mbit/s with its own queue.
        let mut d = direction(20e6);
        share_a_busy_link(&mut d);
        d.goodput_bps = 45e6;
        d.wire.ip_bps = 45e6 * 1.035;
        each(&mut d, |_, i| i.goodput_bps = 45e6);
        let d = d.with_phases();
        assert!(shared_finding(&d, &Basis::of(&d), &limit(&d, &Basis::of(&d))).is_none());
        // No probe (upload, or an older server).
        let mut d = direction(20e6);
        share_a_busy_link(&mut d);
        d.capacity = None;
        assert!(shared_finding(&d, &Basis::of(&d), &Limit::Path).is_none());
        // A probe that did not count: inconclusive, no verdict.
        d.capacity = Some(CapacityProbe::default());
        assert!(shared_finding(&d, &Basis::of(&d), &Limit::Path).is_none());
        // Slow but without a queue (a receive window, an application): not shared.
        let mut d = direction(15e6);
        d.capacity = Some(probe(50e6));
        assert!(shared_finding(&d, &Basis::of(&d), &Limit::Path).is_none());
        // A host or loss limit explains the rate: not blamed on others.
        let mut d = direction(20e6);
        share_a_busy_link(&mut d);
        assert!(shared_finding(&d, &Basis::of(&d), &Limit::SendBuffer).is_none());
    }
}
