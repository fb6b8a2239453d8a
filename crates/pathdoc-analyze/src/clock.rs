//! Captures whose timestamps run backwards (a clock stepped by NTP during the capture, merged
//! files, broken capture hardware): what they can still prove. Counts, sequence numbers and
//! flags hold; durations, rates, RTTs and idle times measured across a backward step do not, so
//! findings resting on time become INCONCLUSIVE and the capture gets a finding saying so.

use pathdoc_core::units::format_duration;
use pathdoc_core::{Evidence, Finding, Quantity, Status};

use crate::diagnose::CHECK;
use crate::summary::ConnSummary;

/// A step back up to this size is stamping jitter (per-queue timestamps on a multi-queue NIC,
/// merged interfaces): nothing analysed rests on that precision, so it is not counted.
pub const TOLERANCE_NS: i64 = 1_000_000;

/// Findings whose verdict rests on durations, rates or RTTs.
const TIMING_BASED: &[&str] = &[
    "idle-death",
    "zero-window-stall",
    "receive-window-limited",
    "sender-application-limited",
    "pmtud-black-hole",
    "policer-limited",
    "latency-under-load",
];

/// Qualify a connection's findings when its packets' times ran backwards: timing-based ones
/// become INCONCLUSIVE; a loss FAIL that rests on Mathis' bound (RTT, goodput) becomes a WARN on
/// the counts alone.
pub fn qualify(c: &ConnSummary, findings: &mut [Finding]) {
    let steps = c.clock_backward_steps;
    if steps == 0 {
        return;
    }
    for f in findings.iter_mut() {
        let timing = TIMING_BASED.contains(&f.id.as_str());
        let mathis = f.id == "tcp-loss-one-direction" && f.status == Status::Fail;
        let timed_verdict = timing && f.status > Status::Info;
        if !(timed_verdict || mathis) {
            continue;
        }
        f.status = if mathis {
            Status::Warn
        } else {
            Status::Inconclusive
        };
        let note = format!(
            " Not proven: {steps} packet(s) of this connection carry an earlier time than the one before them (the capture's clock ran backwards), so the durations, rates and RTTs this verdict rests on are not trustworthy."
        );
        f.summary.push_str(&note);
        f.evidence.push(
            Evidence::new(
                "packets with an earlier time than the previous one",
                Quantity::Count(steps),
            )
            .with_detail("in this connection"),
        );
    }
}

/// The capture-level finding: how often and how far its clock ran backwards (by more than
/// [`TOLERANCE_NS`]).
pub fn capture_finding(steps: u64, largest_step_s: f64) -> Option<Finding> {
    let largest = format_duration(std::time::Duration::from_secs_f64(
        largest_step_s.clamp(0.0, 1e12),
    ));
    let times = if steps == 1 {
        "once".to_string()
    } else {
        format!("{steps} times")
    };
    (steps > 0).then(|| {
        Finding::new(
            CHECK,
            "capture-clock-backwards",
            Status::Inconclusive,
            format!(
                "the capture's timestamps run backwards {times} (by up to {largest}): findings that rest on time are not proven"
            ),
        )
        .requirement("durations, rates, RTTs and idle times need timestamps that never decrease")
        .evidence(Evidence::new(
            "packets more than 1 ms earlier than the packet before them",
            Quantity::Count(steps),
        ))
        .evidence(Evidence::new(
            "largest backward step",
            Quantity::Seconds(largest_step_s),
        ))
        .summary(format!(
            "{steps} packet(s) carry a capture time more than 1 ms earlier than the packet before them (largest step back {largest}): the clock of the capturing host was stepped (NTP, a VM migration), files were merged out of order, or the capture hardware stamps packets per queue. Packet counts, sequence numbers and Wireshark's flags still hold; verdicts about durations, rates, RTTs and idle times are reported INCONCLUSIVE where the backward steps fall into a connection. Sort the capture by time (`reordercap`) if the packets were merely written out of order."
        ))
    })
}
