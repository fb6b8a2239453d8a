//! Latency under load: how much a saturating transfer in one direction raised the round-trip
//! time, graded like the DSLReports speed test's bufferbloat grade (A+ < 5 ms, A < 30, B < 60,
//! C < 200, D < 400, F ≥ 400 ms of increase). The loaded RTT is the bulk sender's own smoothed
//! RTT in the steady state: any packet that shares the bottleneck queue — an ssh keystroke beside
//! the transfer — waits the same queue.

use pathdoc_core::units::format_rate;
use pathdoc_core::{Evidence, Finding, Host, Quantity, Remedy, Status};

use crate::analysis::{Basis, DirectionResult, CHECK};
use crate::spec::Direction;

use pathdoc_core::bufferbloat::{grade, WARN_FROM_MS};
/// Shape the SQM this far below the measured rate, so the queue forms in the SQM, not the modem.
pub const SQM_SHARE: f64 = 0.9;

/// The `latency-under-load` finding of one direction, when its RTTs are known.
pub fn latency_finding(d: &DirectionResult, b: &Basis) -> Option<Finding> {
    if d.sender.min_rtt_us == 0 || b.rtt_s <= 0.0 {
        return None;
    }
    let idle_ms = b.min_rtt_s * 1e3;
    let loaded_ms = b.rtt_s.max(b.min_rtt_s) * 1e3;
    let increase = loaded_ms - idle_ms;
    let g = grade(increase);
    let bad = increase >= WARN_FROM_MS;
    let status = if bad { Status::Warn } else { Status::Info };
    let mut f = Finding::new(
        CHECK,
        "latency-under-load",
        status,
        format!(
            "{}: latency under load +{:.0} ms (RTT {:.1} ms idle, {:.1} ms while saturated), bufferbloat grade {g}",
            d.what(),
            increase,
            idle_ms,
            loaded_ms
        ),
    )
    .direction(d.core_direction())
    .summary(format!(
        "While this {} filled the path ({} goodput {}), the round trip grew by {:.0} ms: a queue at the bottleneck held that much data. Every packet that shares the queue waits as long — an interactive ssh session beside this transfer gets each keystroke echoed {:.0} ms later{}. Grades are the DSLReports speed test's for the RTT increase under load ({}).",
        d.direction.short(),
        format_rate(b.rate_bps),
        b.short,
        increase,
        increase,
        if bad { ", which users feel as lag (a terminal feels sluggish from about 100 ms)" } else { "; that is not noticeable" },
        pathdoc_core::bufferbloat::GRADES_TEXT
    ))
    .requirement(format!("Warn from a {WARN_FROM_MS:.0} ms increase (grade C or worse)"))
    .evidence(Evidence::new("RTT idle (minimum)", Quantity::Seconds(b.min_rtt_s)))
    .evidence(Evidence::new(format!("RTT under load, {}", b.label), Quantity::Seconds(loaded_ms / 1e3)).with_detail("the bulk sender's smoothed RTT (median of the steady intervals)"))
    .evidence(Evidence::new("increase (queueing delay)", Quantity::Seconds(increase / 1e3)))
    .evidence(Evidence::new("grade (DSLReports)", Quantity::Text(g.to_string())));
    if bad {
        let shape = SQM_SHARE * b.rate_bps;
        let kbit = (shape / 1e3).round() as u64;
        let (iface, host) = match d.direction {
            Direction::Upload => (
                "the WAN interface (egress)",
                Host::Router {
                    hop: None,
                    address: None,
                },
            ),
            Direction::Download => (
                "the WAN interface's ingress (through an ifb device)",
                Host::Router {
                    hop: None,
                    address: None,
                },
            ),
        };
        f = f
            .remedy(
                Remedy::new(format!(
                    "Move the queue to where it can be managed: smart queue management (cake or fq_codel) on the router that owns this bottleneck, shaped a little below the line rate ({} ≈ 90 % of the measured {}) on {iface}; then bulk and interactive flows get separate queues and the delay stays in milliseconds",
                    format_rate(shape),
                    format_rate(b.rate_bps)
                ))
                .on(host)
                .with_command(format!("tc qdisc replace dev WAN root cake bandwidth {kbit}kbit")),
            )
            .remedy(
                Remedy::new("If the buffer is in the provider's modem or head end, ask for one with AQM (DOCSIS 3.1 PIE) or a smaller buffer")
                    .on(Host::Isp),
            );
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bloated_queue_warns_with_sqm_and_a_short_one_is_information() {
        let mut d = crate::analysis::tests::direction(9.5e6);
        d.sender.min_rtt_us = 20_000;
        crate::analysis::tests::each(&mut d, |_, i| i.rtt_us = 500_000);
        let f = latency_finding(&d, &Basis::of(&d)).unwrap();
        assert_eq!(f.status, Status::Warn);
        assert!(f.title.contains("grade F"), "{}", f.title);
        assert!(f.remedies[0]
            .command
            .as_deref()
            .unwrap()
            .contains("cake bandwidth 8550kbit"));
        crate::analysis::tests::each(&mut d, |_, i| i.rtt_us = 32_000);
        let f = latency_finding(&d, &Basis::of(&d)).unwrap();
        assert_eq!(f.status, Status::Info);
        assert!(
            f.title.contains("grade A") && f.remedies.is_empty(),
            "{}",
            f.title
        );
    }
}
