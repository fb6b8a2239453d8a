//! Comparisons across runs: upload against download (asymmetry of rate or of loss) and one
//! congestion control against another. Asymmetry alone is no fault — almost every DSL, cable and
//! LTE line is asymmetric — so a warning needs a sign of one: loss on the path in one direction
//! only (loss at a queue the sender overran does not count).

use pathdoc_core::units::format_rate;
use pathdoc_core::{Direction as CoreDirection, Evidence, Finding, Host, Quantity, Remedy, Status};
use serde::{Deserialize, Serialize};

use crate::analysis::{
    diagnose_direction, mathis_rate, Basis, DirectionResult, ASYMMETRY_RATIO, CHECK, LOSS_THRESHOLD,
};
use crate::spec::Direction;

/// Loss share in one direction that, with ten times less the other way, is worth reporting even
/// when the rates are alike (a model-based congestion control such as BBR hides the rate loss).
pub const LOSS_ASYMMETRY: f64 = 5e-3;
/// One direction's path loss must be this many times the other's to count as one-way.
pub const ONE_WAY_FACTOR: f64 = 10.0;

fn one_way_loss(lossy: &DirectionResult, clean: &DirectionResult, at_least: f64) -> bool {
    // A fault on one direction loses steadily; the steady state's path loss is the measure,
    // so a sender's ramp-up overshoot (BBR's startup filling a shaper's queue within the first
    // interval, whose mean RTT hides the transient queue) does not read as one-way loss.
    let steady = |d: &DirectionResult| {
        d.phases
            .steady
            .as_ref()
            .map_or_else(|| d.path_loss_share(), |s| s.path_loss_share())
    };
    let (a, b) = (
        lossy.path_loss_share().min(steady(lossy)),
        clean.path_loss_share(),
    );
    // Loss the phases call mostly self-inflicted (a sender overrunning the bottleneck queue, as
    // BBR's probes do on a shaped path) is not a path fault, whatever fell outside the overflow
    // intervals: a "loss without a queue" finding would contradict its own evidence.
    let self_inflicted = lossy.phases.loss.class == crate::phases::LossClass::QueueOverflow;
    a >= at_least && b * ONE_WAY_FACTOR <= a && !self_inflicted
}

fn fault_remedies(slow: &DirectionResult) -> Vec<Remedy> {
    vec![
        Remedy::new(format!(
            "Look for a fault that hits only {} traffic: speed/duplex and error counters on both ends (a duplex mismatch loses packets in one direction only), then each switch port and router link between them",
            slow.direction.label()
        ))
        .on(Host::BothEnds)
        .with_command("ethtool IFACE; ip -s link show"),
        Remedy::new(format!(
            "If the loss is on the access line (or a policer in the {} direction), report it to the provider with these figures",
            slow.direction.short()
        ))
        .on(Host::Isp),
    ]
}

/// Compare the directions of a two-way test.
pub fn diagnose_asymmetry(upload: &DirectionResult, download: &DirectionResult) -> Option<Finding> {
    // A direction that delivered nothing has its own INCONCLUSIVE finding (and, on a black-holed
    // path, the MTU check's verdict); a ratio against nothing is no evidence of anything more.
    if !upload.delivered() || !download.delivered() {
        return None;
    }
    let (bu, bd) = (Basis::of(upload), Basis::of(download));
    let ((slow, bs), (fast, bf)) = if bu.rate_bps <= bd.rate_bps {
        ((upload, &bu), (download, &bd))
    } else {
        ((download, &bd), (upload, &bu))
    };
    if bf.rate_bps <= 0.0 {
        return None;
    }
    let ratio = bs.rate_bps / bf.rate_bps;
    if ratio >= ASYMMETRY_RATIO {
        return loss_asymmetry(upload, download);
    }
    let slow_findings = diagnose_direction(slow);
    // Other traffic on the slower direction's bottleneck explains it too: not a one-way fault.
    let shared = slow_findings
        .iter()
        .find(|f| f.id == "shared-bottleneck")
        .cloned();
    let slow_verdict = shared.or_else(|| slow_findings.into_iter().nth(1));
    // A host setting (window, buffer, CPU) already explains the slow direction: the asymmetry is
    // a consequence, not a separate path fault, so it is reported without raising an alarm.
    let explained_by_host = slow_verdict.as_ref().is_some_and(|f| {
        matches!(
            f.id.as_str(),
            "receive-window-limited" | "send-buffer-limited" | "cpu-limited" | "shared-bottleneck"
        )
    });
    let fault = !explained_by_host && one_way_loss(slow, fast, LOSS_THRESHOLD);
    let (status, direction, why) = if explained_by_host {
        (
            Status::Info,
            slow.core_direction(),
            format!(
                " The slower direction's own finding explains it: {}.",
                slow_verdict.as_ref().map_or("", |f| f.title.as_str())
            ),
        )
    } else if fault {
        (
            Status::Warn,
            slow.core_direction(),
            format!(
                " The slower direction loses {:.3} % of its bytes on the path (without a queue building), the faster {:.3} %: a fault in the {} direction only.{}",
                slow.path_loss_share() * 100.0,
                fast.path_loss_share() * 100.0,
                slow.direction.short(),
                slow_verdict.as_ref().filter(|f| f.id == "loss-limited").map_or(String::new(), |f| format!(" Its own finding: {}.", f.title))
            ),
        )
    } else {
        (
            Status::Info,
            CoreDirection::Both,
            " Both directions are limited by the path and neither shows a one-way fault (no loss on the path in one direction only): this is what an asymmetric access line (DSL, cable, LTE, many fibre plans) looks like, not a problem.".to_string(),
        )
    };
    let title = if status == Status::Info && !explained_by_host {
        format!(
            "asymmetric path: upload {} / download {} ({} is {:.0} % of {})",
            format_rate(bu.rate_bps),
            format_rate(bd.rate_bps),
            slow.direction.short(),
            ratio * 100.0,
            fast.direction.short()
        )
    } else {
        format!(
            "{} is {:.0} % of {}: {} vs {}",
            slow.direction.short(),
            ratio * 100.0,
            fast.direction.short(),
            format_rate(bs.rate_bps),
            format_rate(bf.rate_bps)
        )
    };
    Some(
        Finding::new(CHECK, "throughput-asymmetry", status, title)
            .direction(direction)
            .summary(format!(
                "The {} direction ran at {:.0} % of the {} direction over the same path.{why}",
                slow.direction.label(),
                ratio * 100.0,
                fast.direction.label(),
            ))
            .requirement(format!(
                "reported when the slower direction is below {:.0} % of the faster; a warning only with path loss in the slower direction ≥ {:.2} % and ≥ {ONE_WAY_FACTOR:.0}× the other's",
                ASYMMETRY_RATIO * 100.0,
                LOSS_THRESHOLD * 100.0
            ))
            .evidence(Evidence::new(format!("{} goodput, {}", slow.direction.short(), bs.label), Quantity::Goodput(bs.rate_bps)))
            .evidence(Evidence::new(format!("{} goodput, {}", fast.direction.short(), bf.label), Quantity::Goodput(bf.rate_bps)))
            .evidence(Evidence::new(format!("{} path-loss share", slow.direction.short()), Quantity::Percent(slow.path_loss_share() * 100.0)).with_detail(slow.phases.loss.class.describe()))
            .evidence(Evidence::new(format!("{} path-loss share", fast.direction.short()), Quantity::Percent(fast.path_loss_share() * 100.0)).with_detail(fast.phases.loss.class.describe()))
            .remedies(if fault { fault_remedies(slow) } else { Vec::new() }),
    )
}

fn loss_asymmetry(upload: &DirectionResult, download: &DirectionResult) -> Option<Finding> {
    let (lossy, clean) = if upload.path_loss_share() >= download.path_loss_share() {
        (upload, download)
    } else {
        (download, upload)
    };
    if !one_way_loss(lossy, clean, LOSS_ASYMMETRY) {
        return None;
    }
    let (bl, bc) = (Basis::of(lossy), Basis::of(clean));
    let cc = lossy.sender.congestion_control.as_str();
    let why = if cc.to_ascii_lowercase().starts_with("bbr") {
        format!(
            "BBR does not back off on random loss; a loss-based congestion control (CUBIC, Reno) would be held to about {} in that direction (Mathis model)",
            format_rate(mathis_rate(lossy.sender.snd_mss, bl.rtt_s, lossy.path_loss_share()) * f64::from(lossy.streams))
        )
    } else {
        format!(
            "something else holds the {} direction's rate at least as low",
            clean.direction.short()
        )
    };
    Some(
        Finding::new(CHECK, "loss-asymmetry", Status::Warn, format!(
            "{} loses {:.2} % of its bytes on the path, {} only {:.3} %",
            lossy.direction.short(),
            lossy.path_loss_share() * 100.0,
            clean.direction.short(),
            clean.path_loss_share() * 100.0
        ))
        .direction(lossy.core_direction())
        .summary(format!(
            "Packets are lost in the {} direction only, without a queue building (so it is not the sender overrunning a bottleneck). The rates are similar ({} vs {}) because {why}.",
            lossy.direction.label(),
            format_rate(bl.rate_bps),
            format_rate(bc.rate_bps),
        ))
        .requirement(format!(
            "flagged when one direction loses ≥ {:.1} % on the path and the other ≥ {ONE_WAY_FACTOR:.0}× less",
            LOSS_ASYMMETRY * 100.0
        ))
        .evidence(Evidence::new(format!("{} path-loss share", lossy.direction.short()), Quantity::Percent(lossy.path_loss_share() * 100.0)).with_detail(lossy.phases.loss.class.describe()))
        .evidence(Evidence::new(format!("{} path-loss share", clean.direction.short()), Quantity::Percent(clean.path_loss_share() * 100.0)).with_detail(clean.phases.loss.class.describe()))
        .remedies(fault_remedies(lossy)),
    )
}

/// Result of running the same direction with two congestion controls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CcRun {
    pub congestion_control: String,
    pub goodput_bps: f64,
    pub retrans_share: f64,
}

/// Say which congestion control won and by how much (within 10 % is a tie).
pub fn compare_cc(direction: Direction, runs: &[CcRun]) -> Option<Finding> {
    let best = runs
        .iter()
        .max_by(|a, b| a.goodput_bps.total_cmp(&b.goodput_bps))?;
    let worst = runs
        .iter()
        .min_by(|a, b| a.goodput_bps.total_cmp(&b.goodput_bps))?;
    if runs.len() < 2 || worst.goodput_bps <= 0.0 && best.goodput_bps <= 0.0 {
        return None;
    }
    let factor = if worst.goodput_bps > 0.0 {
        best.goodput_bps / worst.goodput_bps
    } else {
        f64::INFINITY
    };
    let tie = factor < 1.1;
    let title = if tie {
        format!(
            "{}: congestion control makes no real difference here ({} vs {} within 10 %)",
            direction.short(),
            best.congestion_control,
            worst.congestion_control
        )
    } else {
        format!(
            "{}: {} is {:.1}× faster than {} on this path ({} vs {})",
            direction.short(),
            best.congestion_control,
            factor,
            worst.congestion_control,
            format_rate(best.goodput_bps),
            format_rate(worst.goodput_bps)
        )
    };
    let mut f = Finding::new(CHECK, "congestion-control-comparison", if tie { Status::Info } else { Status::Warn }, title)
        .direction(direction.core())
        .summary("The same direction was measured once per congestion control, one after the other, with everything else equal. Loss-based algorithms (CUBIC, Reno) back off on every loss; BBR paces to its bandwidth and RTT estimate and does not back off on random loss.")
        .requirement("a difference above 10 % is reported; the winner is the suggested sender setting");
    for r in runs {
        f = f.evidence(
            Evidence::new(
                format!("{} goodput", r.congestion_control),
                Quantity::Goodput(r.goodput_bps),
            )
            .with_detail(format!("{:.3} % retransmitted", r.retrans_share * 100.0)),
        );
    }
    if !tie {
        let cmd = if best.congestion_control == "bbr" {
            "sysctl -w net.core.default_qdisc=fq net.ipv4.tcp_congestion_control=bbr".to_string()
        } else {
            format!(
                "sysctl -w net.ipv4.tcp_congestion_control={}",
                best.congestion_control
            )
        };
        let sender = match direction {
            Direction::Upload => Host::Client,
            Direction::Download => Host::Server,
        };
        f = f.remedy(
            Remedy::new(format!(
                "Use {} on the sending host for this path",
                best.congestion_control
            ))
            .on(sender)
            .with_command(cmd),
        );
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{direction, each};
    use crate::analysis::Interval;

    fn upload(mut d: DirectionResult) -> DirectionResult {
        d.direction = Direction::Upload;
        d.sender_side = crate::analysis::Side::Client;
        d.receiver_side = crate::analysis::Side::Server;
        d
    }

    /// Path loss of `segments` in every interval, RTT at the minimum.
    fn path_loss(d: &mut DirectionResult, segments: u64) {
        each(d, |_, i: &mut Interval| {
            i.retransmits = segments;
            i.bytes_retrans = segments * 1448;
        });
    }

    fn lan(d: &mut DirectionResult) {
        d.sender.min_rtt_us = 2_000;
        d.sender.mean_rtt_us = 2_100;
        each(d, |_, i| i.rtt_us = 2_100);
    }

    #[test]
    fn asymmetry_table() {
        type Make = fn() -> (DirectionResult, DirectionResult);
        // (name, upload/download, id, status, title starts with)
        let cases: &[(&str, Make, &str, Status, &str)] = &[
            (
                "seed 001: a LAN, 2 % loss one way, CUBIC crawls",
                || {
                    let mut up = upload(direction(29e6));
                    lan(&mut up);
                    path_loss(&mut up, 50);
                    let mut down = direction(94e6);
                    lan(&mut down);
                    (up, down)
                },
                "throughput-asymmetry",
                Status::Warn,
                "upload is 31 %",
            ),
            (
                "a healthy 10/50 access line",
                || (upload(direction(9.5e6)), direction(47e6)),
                "throughput-asymmetry",
                Status::Info,
                "asymmetric path: upload 9.50 Mbit/s / download 47.0 Mbit/s",
            ),
            (
                "a 40/100 line with the same light loss both ways (examples/topology.toml)",
                || {
                    let mut up = upload(direction(16e6));
                    path_loss(&mut up, 2);
                    let mut down = direction(40e6);
                    path_loss(&mut down, 4);
                    (up, down)
                },
                "throughput-asymmetry",
                Status::Info,
                "asymmetric path",
            ),
            (
                "slow-start overshoot one way at a shaper",
                || {
                    let mut up = upload(direction(9.5e6));
                    each(&mut up, |k, i| {
                        if k == 0 {
                            i.retransmits = 40;
                            i.bytes_retrans = 40 * 1448;
                            i.rtt_us = 160_000;
                        }
                    });
                    (up, direction(47e6))
                },
                "throughput-asymmetry",
                Status::Info,
                "asymmetric path",
            ),
            (
                "a window explains the slow direction",
                || {
                    let mut down = direction(11e6);
                    each(&mut down, |_, i| {
                        i.rwnd_limited_us = 800_000;
                        i.snd_wnd_bytes = 150_000;
                    });
                    (upload(direction(186e6)), down)
                },
                "throughput-asymmetry",
                Status::Info,
                "download is 6 %",
            ),
            (
                "alike rates, one-way loss hidden by BBR",
                || {
                    let mut up = upload(direction(90e6));
                    lan(&mut up);
                    path_loss(&mut up, 330);
                    up.sender.congestion_control = "bbr".into();
                    let mut down = direction(93e6);
                    lan(&mut down);
                    (up, down)
                },
                "loss-asymmetry",
                Status::Warn,
                "upload loses",
            ),
        ];
        for (name, make, id, status, title) in cases {
            let (up, down) = make();
            let f = diagnose_asymmetry(&up, &down).unwrap_or_else(|| panic!("{name}: none"));
            assert_eq!(
                (f.id.as_str(), f.status),
                (*id, *status),
                "{name}: {}",
                f.summary
            );
            assert!(f.title.starts_with(title), "{name}: {}", f.title);
            assert!(f.direction.is_some(), "{name}");
            assert_eq!(f.status == Status::Warn, !f.remedies.is_empty(), "{name}");
            assert!(f.remedies.iter().all(|r| r.host.is_some()), "{name}");
        }
        // Alike rates, no loss: nothing to say.
        assert!(diagnose_asymmetry(&upload(direction(60e6)), &direction(61e6)).is_none());
    }

    #[test]
    fn a_direction_that_delivered_nothing_is_no_asymmetry() {
        // A black-holed download: the sender retransmitted, nothing arrived. Its own finding is
        // INCONCLUSIVE ("no data"); an asymmetry WARN beside it would blame a one-way fault.
        let mut down = direction(0.0);
        path_loss(&mut down, 40);
        down.payload_bytes = 0;
        assert!(diagnose_asymmetry(&upload(direction(90e6)), &down).is_none());
        let mut up = upload(direction(90e6));
        up.duration_s = 0.0;
        assert!(diagnose_asymmetry(&up, &direction(90e6)).is_none());
    }

    /// `up` loses enough on the path to matter, yet that loss is no one-way loss beside a
    /// clean download at the same rate.
    fn assert_no_loss_asymmetry(up: &DirectionResult) {
        assert!(
            up.path_loss_share() >= LOSS_ASYMMETRY,
            "{}",
            up.path_loss_share()
        );
        let f = diagnose_asymmetry(up, &direction(48e6));
        assert!(
            f.as_ref().is_none_or(|f| f.id != "loss-asymmetry"),
            "{f:#?}"
        );
    }

    #[test]
    fn bbr_overrunning_a_shaped_queue_is_no_one_way_loss() {
        // Measured shape (70 ms jitter path, 50 Mbit/s tbf, BBR upload): bursts while the queue
        // stood, plus a little loss in an interval the overflow mask did not take: 0.64 % "path"
        // loss next to a +43 ms queue. The loss is the sender's own.
        let mut up = upload(direction(50e6));
        up.sender.congestion_control = "bbr".into();
        up.sender.min_rtt_us = 67_000;
        let lost = [90u64, 900, 0, 700, 60];
        each(&mut up, |k, i| {
            i.rtt_us = 110_000;
            i.retransmits = lost[k];
            i.bytes_retrans = lost[k] * 1448;
        });
        let up = up.with_phases();
        assert_eq!(
            up.phases.loss.class,
            crate::phases::LossClass::QueueOverflow
        );
        assert_no_loss_asymmetry(&up);
    }

    #[test]
    fn bbr_startup_overshoot_is_no_one_way_loss() {
        // Measured (same path, another run): BBR's startup lost 656 segments in the first second
        // at a mean RTT only 6 ms over the minimum (the transient queue averaged away), then ran
        // at the link rate with a standing queue and no more path loss.
        let mut up = upload(direction(47e6));
        up.sender.congestion_control = "bbr".into();
        up.sender.min_rtt_us = 67_000;
        each(&mut up, |k, i| {
            let lost = if k == 0 { 656 } else { 0 };
            i.rtt_us = if k == 0 { 73_000 } else { 106_000 };
            if k == 0 {
                i.goodput_bps = 29.5e6;
                i.bytes_sent = (29.5e6 / 8.0) as u64 + lost * 1448;
            }
            i.retransmits = lost;
            i.bytes_retrans = lost * 1448;
        });
        let up = up.with_phases();
        assert_no_loss_asymmetry(&up);
    }

    #[test]
    fn loss_asymmetry_text_does_not_contradict_itself() {
        let mut up = upload(direction(90e6));
        lan(&mut up);
        path_loss(&mut up, 330);
        up.sender.congestion_control = "bbr".into();
        let f = diagnose_asymmetry(&up, &direction(93e6)).unwrap();
        assert!(f.summary.contains("BBR does not back off"), "{}", f.summary);
        assert!(!f.summary.contains("tolerates"), "{}", f.summary);
        // With CUBIC the text must not claim CUBIC tolerates loss.
        up.sender.congestion_control = "cubic".into();
        let f = diagnose_asymmetry(&up, &direction(93e6)).unwrap();
        assert!(
            !f.summary.contains("BBR") && !f.summary.contains("crawl"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn cc_comparison_picks_the_winner_and_its_host() {
        let runs = [
            CcRun {
                congestion_control: "cubic".into(),
                goodput_bps: 20e6,
                retrans_share: 0.003,
            },
            CcRun {
                congestion_control: "bbr".into(),
                goodput_bps: 400e6,
                retrans_share: 0.004,
            },
        ];
        let f = compare_cc(Direction::Download, &runs).unwrap();
        assert!(
            f.title.contains("bbr is 20.0× faster than cubic"),
            "{}",
            f.title
        );
        assert_eq!(f.status, Status::Warn);
        assert_eq!(f.remedies[0].host, Some(Host::Server));
        assert_eq!(f.direction, Some(CoreDirection::ServerToClient));
        let tie = [
            CcRun {
                goodput_bps: 390e6,
                ..runs[0].clone()
            },
            runs[1].clone(),
        ];
        assert_eq!(
            compare_cc(Direction::Download, &tie).unwrap().status,
            Status::Info
        );
    }
}
