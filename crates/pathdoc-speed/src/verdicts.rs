//! The findings of one direction: the rate (whole test and steady state) and the text, evidence
//! and remedies (each naming the host it applies on) of the one "limited by" verdict that
//! [`crate::analysis::limit`] chose.

use pathdoc_core::units::{format_bytes, format_rate};
use pathdoc_core::{Evidence, Finding, Host, Quantity, Remedy, Status};

use crate::analysis::{
    bdp_bytes, recommended_buffer, window_ceiling_bps, wire_estimate, Basis, CpuCause,
    DirectionResult, Side, CHECK, CPU_BOUND_FRACTION, HOST_BUSY_FRACTION, LIMITED_FRACTION,
    LOSS_FAIL, LOSS_THRESHOLD, MATHIS_C, MODEL_FACTOR,
};
use crate::model::loss_model_rate;
use crate::phases::LossClass;
use crate::spec::Direction;

fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}

/// The rate over the whole test and in the steady state, with the wire estimate.
pub fn rate_finding(d: &DirectionResult, b: &Basis) -> Finding {
    let w = wire_estimate(
        b.rate_bps,
        d.sender.snd_mss,
        d.ipv6,
        d.sender.timestamps,
        d.retrans_share(),
    );
    let title = match &d.phases.steady {
        Some(_) => format!(
            "{}: {} goodput in the steady state ({} over the whole {:.1} s test), ≈ {} on the wire (IP)",
            d.what(),
            format_rate(b.rate_bps),
            format_rate(d.goodput_bps),
            d.duration_s,
            format_rate(w.ip_bps)
        ),
        None => format!(
            "{}: {} goodput over the whole {:.1} s test (no steady state), ≈ {} on the wire (IP)",
            d.what(),
            format_rate(d.goodput_bps),
            d.duration_s,
            format_rate(w.ip_bps)
        ),
    };
    let phase = match (&d.phases.steady, d.phases.slow_start_end_s) {
        (Some(s), Some(ss)) if s.start_s < ss - 1e-3 => format!(
            " Slow start ended between {:.1} and {ss:.1} s with the rate already at its plateau; the steady state ({:.1}–{:.1} s) is what the path sustains, the whole-test figure includes the ramp-up.",
            s.start_s, s.start_s, s.end_s
        ),
        (Some(s), Some(ss)) => format!(
            " Slow start had ended by {ss:.1} s; the steady state ({:.1}–{:.1} s) is what the path sustains, the whole-test figure includes the ramp-up.",
            s.start_s, s.end_s
        ),
        (Some(s), None) => format!(
            " The rate settled from {:.1} s (the sender does not report leaving slow start, as BBR does not); the steady state ({:.1}–{:.1} s) is what the path sustains, the whole-test figure includes the ramp-up.",
            s.start_s, s.start_s, s.end_s
        ),
        (None, _) => format!(
            " No steady state: {}. Verdicts are judged on the whole test, which includes the ramp-up, so the rate is a lower bound; a longer test (--time) gives a steadier figure.",
            d.phases.no_steady_reason.as_deref().unwrap_or("no per-interval samples")
        ),
    };
    // Literal ids, so the finding-id test can read them (docs/output.md).
    let id = match d.direction {
        Direction::Upload => "upload-rate",
        Direction::Download => "download-rate",
    };
    let mut f = Finding::new(CHECK, id, Status::Info, title)
        .direction(d.core_direction())
        .summary(format!(
            "Goodput is TCP payload acknowledged by the receiver.{phase} The wire estimate adds {} B of IP+TCP headers per {} B segment{} and the retransmitted bytes; Ethernet adds 14 B per frame (what tc/tbf meters) or 38 B at layer 1 (preamble, FCS, gap). Congestion control: {}.",
            w.overhead_bytes,
            d.sender.snd_mss,
            if d.sender.timestamps { " (incl. 12 B timestamps)" } else { "" },
            if d.sender.congestion_control.is_empty() { "unknown" } else { &d.sender.congestion_control },
        ));
    if let Some(s) = &d.phases.steady {
        f = f.evidence(
            Evidence::new(
                format!("goodput, {}", b.label),
                Quantity::Goodput(s.goodput_bps),
            )
            .with_detail(format!("{} sampling intervals", s.intervals)),
        );
    }
    f.evidence(
        Evidence::new("goodput, whole test", Quantity::Goodput(d.goodput_bps)).with_detail(
            format!("{} payload bytes in {:.2} s", d.payload_bytes, d.duration_s),
        ),
    )
    .evidence(Evidence::new(
        format!("wire rate, IP layer, {}", b.label),
        Quantity::WireRate(w.ip_bps),
    ))
    .evidence(Evidence::new(
        "wire rate, Ethernet frames (as tbf counts)",
        Quantity::WireRate(w.ethernet_frame_bps),
    ))
    .evidence(Evidence::new(
        "wire rate, Ethernet L1",
        Quantity::WireRate(w.ethernet_l1_bps),
    ))
    .evidence(
        Evidence::new(
            "retransmitted share of sent bytes, whole test",
            Quantity::Percent(d.retrans_share() * 100.0),
        )
        .with_detail(format!(
            "tcpi_bytes_retrans {} / tcpi_bytes_sent {}",
            d.sender.bytes_retrans, d.sender.bytes_sent
        )),
    )
    .evidences(loss_evidence(d))
    .evidences(rtt_evidence(b))
}

fn rtt_evidence(b: &Basis) -> Vec<Evidence> {
    vec![
        Evidence::new(
            format!("smoothed RTT, {}", b.label),
            Quantity::Seconds(b.rtt_s),
        )
        .with_detail(if b.steady {
            "median of the sender's tcpi_rtt at each sample"
        } else {
            "mean of the sender's tcpi_rtt at each sample"
        }),
        Evidence::new("min RTT", Quantity::Seconds(b.min_rtt_s)).with_detail("sender tcpi_min_rtt"),
        Evidence::new(
            "queueing delay (smoothed − min RTT)",
            Quantity::Seconds(b.queue_delay_s),
        )
        .with_detail(if b.standing_queue {
            "a standing queue at the bottleneck: the link is full"
        } else {
            "no standing queue"
        }),
    ]
}

/// The loss classes of the whole test, when there was loss.
fn loss_evidence(d: &DirectionResult) -> Vec<Evidence> {
    let l = &d.phases.loss;
    if l.class == LossClass::None {
        return Vec::new();
    }
    let mut v = vec![Evidence::new("loss class", Quantity::Text(l.class.describe().to_string())).with_detail(format!(
        "{} lost segments: {} in bursts at a full queue ({} interval(s)), {} path loss ({} interval(s)); a queue counts from {} above the min RTT",
        l.lost_segments,
        l.overflow_segments,
        l.overflow_intervals,
        l.path_segments,
        l.path_intervals,
        ms(f64::from(l.queue_threshold_us) / 1e6)
    ))];
    if let Some(burst) = l.largest_burst {
        v.push(
            Evidence::new(
                "largest loss burst, segments",
                Quantity::Count(burst.segments),
            )
            .with_detail(format!(
                "at {:.1}–{:.1} s{}, RTT {} vs {} min",
                burst.start_s,
                burst.end_s,
                if burst.slow_start {
                    ", in slow start"
                } else {
                    ""
                },
                ms(f64::from(burst.rtt_us) / 1e6),
                ms(d.min_rtt_s())
            )),
        );
    }
    v.push(Evidence::new(
        "path-loss share of sent bytes, whole test",
        Quantity::Percent(l.path_share * 100.0),
    ));
    v
}

fn rate_evidence(d: &DirectionResult, b: &Basis) -> Evidence {
    Evidence::new(
        format!("{} goodput, {}", d.direction.short(), b.label),
        Quantity::Goodput(b.rate_bps),
    )
}

pub fn no_data_finding(d: &DirectionResult) -> Finding {
    Finding::new(CHECK, "no-data", Status::Inconclusive, format!("{}: no data arrived", d.what()))
        .direction(d.core_direction())
        .summary("The data connections were set up but no payload reached the receiver; nothing can be judged.")
}

/// Host CPU evidence of both ends (and whether they are one host).
fn host_cpu_evidence(d: &DirectionResult) -> Vec<Evidence> {
    let mut v = Vec::new();
    for (side, u) in [
        (d.sender_side, d.sender_host_cpu),
        (d.receiver_side, d.receiver_host_cpu),
    ] {
        if d.same_host == Some(true) && side == d.receiver_side {
            break;
        }
        if let Some(u) = u {
            let who = if d.same_host == Some(true) {
                "client and server host (one machine)".to_string()
            } else {
                format!("{} host", side.name())
            };
            v.push(
                Evidence::new(
                    format!("{who} CPU busy, all {} cores", u.cpus),
                    Quantity::Percent(u.busy * 100.0),
                )
                .with_detail(format!(
                    "/proc/stat; softirq {:.0} %, steal {:.0} % of all cores",
                    u.softirq * 100.0,
                    u.steal * 100.0
                )),
            );
        }
    }
    v
}

fn process_cpu_evidence(b: &Basis, d: &DirectionResult) -> Vec<Evidence> {
    [
        (d.sender_side, "sender", b.sender_cpu_cores),
        (d.receiver_side, "receiver", b.receiver_cpu_cores),
    ]
    .into_iter()
    .filter_map(|(side, role, c)| {
        c.map(|c| {
            Evidence::new(
                format!("{} process CPU ({role})", side.name()),
                Quantity::Percent(c * 100.0),
            )
            .with_detail("getrusage user+system over wall time; 100 % = one core")
        })
    })
    .collect()
}

/// A sentence on both hosts' CPU for verdicts that say the CPU was not the limit.
fn cpu_sentence(d: &DirectionResult, b: &Basis) -> String {
    let uses: Vec<(Side, crate::analysis::HostCpuUse)> = [
        (d.sender_side, d.sender_host_cpu),
        (d.receiver_side, d.receiver_host_cpu),
    ]
    .into_iter()
    .filter_map(|(side, u)| u.map(|u| (side, u)))
    .take(if d.same_host == Some(true) { 1 } else { 2 })
    .collect();
    if uses.is_empty() {
        return "No process ran out of CPU (the server did not report its host's CPU).".to_string();
    }
    let busy = uses
        .iter()
        .filter(|(_, u)| u.busy >= HOST_BUSY_FRACTION)
        .map(|&(side, u)| crate::analysis::transfer_cpu_share(d, b, side, u))
        .reduce(f64::max);
    let figures = uses
        .iter()
        .map(|(side, u)| {
            if d.same_host == Some(true) {
                format!(
                    "client and server share one host, {:.0} % of its {} cores busy",
                    u.busy * 100.0,
                    u.cpus
                )
            } else {
                format!(
                    "{} {:.0} % of {} cores busy",
                    side.name(),
                    u.busy * 100.0,
                    u.cpus
                )
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    match busy {
        Some(_) if b.standing_queue || b.overflow_loss => format!(
            "No process ran out of CPU; a host was busy ({figures}), but the queue at the bottleneck shows the path, not the host, was full."
        ),
        Some(share) => format!(
            "No process ran out of CPU; a host was busy ({figures}), but only {:.0} % of its cores went to this transfer (softirq plus pathdoc's processes), so other work kept it busy.",
            share * 100.0
        ),
        None => format!("No host ran out of CPU ({figures})."),
    }
}

pub fn cpu_finding(d: &DirectionResult, b: &Basis, cause: CpuCause) -> Finding {
    let streams_cmd = format!(
        "pathdoc speed HOST --streams {}",
        (d.streams * 2).min(crate::spec::MAX_STREAMS)
    );
    let (title, summary, requirement, host) = match cause {
        CpuCause::Process { side, cores, cpus } => {
            let role = if side == d.sender_side { "sender" } else { "receiver" };
            (
                format!("{} limited by CPU on the {} ({role})", d.what(), side.name()),
                format!(
                    "The {role} process used {cores:.2} cores for {} stream(s) on a {cpus}-CPU host: it cannot move data faster, so the network was not tested to its limit.",
                    d.streams
                ),
                format!("CPU-bound when process CPU ≥ {:.0} % of the cores the streams can use", CPU_BOUND_FRACTION * 100.0),
                side.host(),
            )
        }
        CpuCause::SharedHost { cores, cpus } => (
            format!("{} limited by CPU: client and server share one {cpus}-core host", d.what()),
            format!(
                "Client and server run on the same machine (same kernel) and their processes together used {cores:.2} of its {cpus} cores, besides the kernel's own network work: the measurement is of this host, not of a network path."
            ),
            format!("CPU-bound when the two processes on one host use ≥ {:.0} % of the cores their streams can use", CPU_BOUND_FRACTION * 100.0),
            Host::Client,
        ),
        CpuCause::Host { side, usage } => (
            format!(
                "{} limited by CPU: the {} host had no CPU to spare ({:.0} % of {} cores busy)",
                d.what(),
                if d.same_host == Some(true) { "client and server" } else { side.name() },
                usage.busy * 100.0,
                usage.cpus
            ),
            format!(
                "All cores of the {} host were busy ({:.0} %; softirq {:.0} %, steal {:.0} %), {:.0} % of them for this transfer (the kernel's network work in softirq plus pathdoc's own processes), while no queue built at the bottleneck, so nothing shows the path was full. The sender's send buffer ran full {:.0} % and the receiver's window held it back {:.0} % of its busy time: with no CPU to spare these cannot be judged, and the rate is what these hosts achieved, not the path's capacity.{}",
                if d.same_host == Some(true) { "client and server" } else { side.name() },
                usage.busy * 100.0,
                usage.softirq * 100.0,
                usage.steal * 100.0,
                crate::analysis::transfer_cpu_share(d, b, side, usage) * 100.0,
                b.sndbuf_fraction() * 100.0,
                b.rwnd_fraction() * 100.0,
                if d.same_host == Some(true) { " Client and server share this host (same kernel), so both ends and any lab elements compete for its cores." } else { "" }
            ),
            format!(
                "host CPU-bound when ≥ {:.0} % of all its cores are busy (/proc/stat: any process, softirq, steal), ≥ {:.0} % of them for the transfer (softirq plus pathdoc's processes), no queue at the bottleneck, and no send-buffer or window stall of ≥ {:.0} % of busy time",
                HOST_BUSY_FRACTION * 100.0,
                crate::analysis::TRANSFER_CPU_SHARE * 100.0,
                crate::analysis::DOMINANT_FRACTION * 100.0
            ),
            side.host(),
        ),
    };
    let mut f = Finding::new(CHECK, "cpu-limited", Status::Warn, title)
        .direction(d.core_direction())
        .summary(summary)
        .requirement(requirement)
        .evidences(process_cpu_evidence(b, d))
        .evidences(host_cpu_evidence(d))
        .evidence(Evidence::new(
            "time limited by send buffer",
            Quantity::Percent(b.sndbuf_fraction() * 100.0),
        ))
        .evidence(Evidence::new(
            "data in flight (goodput × RTT)",
            Quantity::Bytes(b.in_flight_bytes() as u64),
        ));
    if let Some(max) = crate::analysis::send_buffer_max(d) {
        f = f.evidence(
            Evidence::new(
                format!("{} send buffer maximum", d.sender_side.name()),
                Quantity::Bytes(max),
            )
            .with_detail("net.ipv4.tcp_wmem max, or twice --window"),
        );
    }
    f
        .evidence(rate_evidence(d, b))
        .evidences(rtt_evidence(b))
        .remedy(
            Remedy::new("Re-run with the CPU free: stop other load, or use a faster host; on a virtual machine high steal means the hypervisor is short of CPU")
                .on(host),
        )
        .remedies(
            // More streams help a busy process use more cores, not a host with none to spare.
            (!matches!(cause, CpuCause::Host { .. })).then(|| {
                Remedy::new("More parallel streams spread the work over more cores; the network itself may be faster than this figure")
                    .on(Host::Client)
                    .with_command(streams_cmd)
            }),
        )
}

pub fn rwnd_finding(d: &DirectionResult, b: &Basis) -> Finding {
    let rtt = b.rtt_s;
    let window = if b.snd_wnd_bytes > 0 {
        b.snd_wnd_bytes
    } else {
        d.sender.max_snd_wnd
    };
    let window_rate = window_ceiling_bps(&Basis {
        snd_wnd_bytes: window,
        ..b.clone()
    });
    let rmem_max = d.receiver_tcp_rmem.map(|r| r[2]);
    // A rate to size the fix for: well above what was reached, and at least 1 Gbit/s.
    let target = (4.0 * b.rate_bps).max(1e9);
    let recommended = recommended_buffer(target, rtt, rmem_max.unwrap_or(window));
    let (rmin, rdef) = d
        .receiver_tcp_rmem
        .map(|r| (r[0], r[1]))
        .unwrap_or((4096, 131072));
    let command = format!("sysctl -w net.ipv4.tcp_rmem=\"{rmin} {rdef} {recommended}\"");
    let receiver = d.receiver_side;
    let mut f = Finding::new(CHECK, "receive-window-limited", Status::Fail, format!(
        "{} limited by the receive window of the {} ({})",
        d.what(),
        receiver.name(),
        format_bytes(window)
    ))
    .direction(d.core_direction())
    .summary(format!(
        "In the {} the receiver's window stayed open at its largest, {} of data were in flight (goodput × RTT) while the sender's congestion window ({}) would have sent more, and the kernel counted {:.0} % of the sender's busy time as waiting for the window. A {} window at {} RTT allows at most {} (window/RTT); the measured {} is at that ceiling. The link rate is not known from here; to reach, say, {} the window must hold {} (bandwidth-delay product = rate × RTT), and the fix below sizes the buffer for twice that.",
        b.label,
        format_bytes(b.in_flight_bytes() as u64),
        format_bytes(b.cwnd_bytes),
        b.rwnd_fraction() * 100.0,
        format_bytes(window),
        ms(rtt),
        format_rate(window_rate),
        format_rate(b.rate_bps),
        format_rate(target),
        format_bytes(bdp_bytes(target, rtt) as u64),
    ))
    .requirement(format!("window ≥ BDP; flagged when the window stays open at its largest and either tcpi_rwnd_limited ≥ {:.0} % of tcpi_busy_time in the steady state with the rate within 2× of window/RTT, or the window is full of data in flight while the congestion window would send more", LIMITED_FRACTION * 100.0))
    .evidence(Evidence::new("time limited by receive window", Quantity::Percent(b.rwnd_fraction() * 100.0)).with_detail(format!(
        "tcpi_rwnd_limited {} µs of tcpi_busy_time {} µs, {}",
        b.rwnd_limited_us, b.busy_us, b.label
    )))
    .evidence(Evidence::new("advertised receive window", Quantity::Bytes(window)).with_detail("sender tcpi_snd_wnd, median over the judged intervals (sum over streams)"))
    .evidence(Evidence::new(pathdoc_core::check::evidence::WINDOW_RTT_CEILING, Quantity::Rate(window_rate)))
    .evidence(Evidence::new("data in flight (goodput × RTT)", Quantity::Bytes(b.in_flight_bytes() as u64)))
    .evidence(Evidence::new("congestion window", Quantity::Bytes(b.cwnd_bytes)).with_detail("median over the judged intervals, sum over streams"))
    .evidence(Evidence::new("bandwidth-delay product at the measured goodput", Quantity::Bytes(bdp_bytes(b.rate_bps, rtt) as u64)))
    .evidence(rate_evidence(d, b))
    .evidences(rtt_evidence(b));
    if let Some(max) = rmem_max {
        f = f.evidence(
            Evidence::new(
                format!("{} net.ipv4.tcp_rmem max", receiver.name()),
                Quantity::Bytes(max),
            )
            .with_detail("read from /proc/sys/net/ipv4/tcp_rmem"),
        );
    }
    if let Some(w) = d.window_option {
        f = f.evidence(Evidence::new(
            "SO_RCVBUF requested by --window",
            Quantity::Bytes(u64::from(w)),
        ));
    }
    f.remedy(
        Remedy::new("Raise the TCP receive buffer maximum so the window can reach the BDP (persist it in /etc/sysctl.d/)")
            .on(receiver.host())
            .with_command(command),
    )
    .remedy(
        Remedy::new("Applications that set SO_RCVBUF themselves are capped by net.core.rmem_max instead")
            .on(receiver.host())
            .with_command(format!("sysctl -w net.core.rmem_max={recommended}")),
    )
}

pub fn sndbuf_finding(d: &DirectionResult, b: &Basis) -> Finding {
    let rtt = b.rtt_s;
    let wmem = d.sender_tcp_wmem;
    let target = (4.0 * b.rate_bps).max(1e9);
    let recommended = recommended_buffer(target, rtt, wmem.map(|w| w[2]).unwrap_or(4 << 20));
    let (wmin, wdef) = wmem.map(|w| (w[0], w[1])).unwrap_or((4096, 16384));
    let sender = d.sender_side;
    let mut f = Finding::new(CHECK, "send-buffer-limited", Status::Fail, format!(
        "{} limited by the send buffer of the {}",
        d.what(),
        sender.name()
    ))
    .direction(d.core_direction())
    .summary(format!(
        "In the {} the sender spent {:.0} % of its busy time with a full send buffer while its congestion window ({}) would have allowed more than the {} in flight: the buffer, not the network, held the data in flight. The link rate is not known from here; at {} RTT, reaching, say, {} needs {} in flight, and the fix below sizes the buffer for twice that.",
        b.label,
        b.sndbuf_fraction() * 100.0,
        format_bytes(b.cwnd_bytes),
        format_bytes(b.in_flight_bytes() as u64),
        ms(rtt),
        format_rate(target),
        format_bytes(bdp_bytes(target, rtt) as u64),
    ))
    .requirement(format!("send buffer ≥ BDP; flagged when tcpi_sndbuf_limited ≥ {:.0} % of tcpi_busy_time in the steady state and the congestion window exceeds the data in flight", LIMITED_FRACTION * 100.0))
    .evidence(Evidence::new("time limited by send buffer", Quantity::Percent(b.sndbuf_fraction() * 100.0)).with_detail(format!(
        "tcpi_sndbuf_limited {} µs of tcpi_busy_time {} µs, {}",
        b.sndbuf_limited_us, b.busy_us, b.label
    )))
    .evidence(Evidence::new("data in flight (goodput × RTT)", Quantity::Bytes(b.in_flight_bytes() as u64)))
    .evidence(Evidence::new("congestion window", Quantity::Bytes(b.cwnd_bytes)).with_detail("median over the judged intervals, sum over streams"))
    .evidence(rate_evidence(d, b))
    .evidences(rtt_evidence(b))
    .evidences(host_cpu_evidence(d));
    if let Some(w) = wmem {
        f = f.evidence(
            Evidence::new(format!("{} net.ipv4.tcp_wmem max", sender.name()), Quantity::Bytes(w[2]))
                .with_detail("read from /proc/sys/net/ipv4/tcp_wmem; the kernel counts skb overhead against it, so it holds less payload than its size"),
        );
    }
    f.remedy(
        Remedy::new("Raise the TCP send buffer maximum (persist it in /etc/sysctl.d/)")
            .on(sender.host())
            .with_command(format!(
                "sysctl -w net.ipv4.tcp_wmem=\"{wmin} {wdef} {recommended}\""
            )),
    )
}

pub fn loss_finding(d: &DirectionResult, b: &Basis, model: f64) -> Finding {
    let p = b.path_loss_share;
    let cc = d.sender.congestion_control.as_str();
    let status = if p >= LOSS_FAIL {
        Status::Fail
    } else {
        Status::Warn
    };
    let sender = d.sender_side;
    let model_name = if cc.eq_ignore_ascii_case("cubic") {
        "RFC 9438 for CUBIC, or Mathis where higher"
    } else {
        "Mathis, for Reno-style congestion avoidance"
    };
    let mut f = Finding::new(CHECK, "loss-limited", status, format!(
        "{} limited by packet loss on the path: {:.2} % of bytes lost {}, {} goodput {}",
        d.what(),
        p * 100.0,
        d.direction.core().arrow(),
        format_rate(b.rate_bps),
        b.short
    ))
    .direction(d.core_direction())
    .summary(format!(
        "In the {} {:.3} % of the sent bytes were lost on the path: the RTT stayed near its minimum ({} vs {}, no queue building) and the losses came interval after interval, not in bursts at a full queue, so this is not the sender overrunning a bottleneck. The loss model ({}) allows about {} for {} stream(s) at this loss and RTT; the measured {} is within {MODEL_FACTOR:.0}× of it, so the loss explains the rate.",
        b.label,
        p * 100.0,
        ms(b.rtt_s),
        ms(b.min_rtt_s),
        model_name,
        format_rate(model),
        d.streams,
        format_rate(b.rate_bps),
    ))
    .requirement(format!(
        "flagged when path loss ≥ {:.2} % of sent bytes in the steady state, no standing queue, and the rate within {MODEL_FACTOR:.0}× of the loss model (Fail from {:.1} %)",
        LOSS_THRESHOLD * 100.0,
        LOSS_FAIL * 100.0
    ))
    .evidence(Evidence::new(format!("path-loss share, {}", b.label), Quantity::Percent(p * 100.0)).with_detail(format!(
        "retransmitted bytes outside queue-overflow bursts, net of DSACK duplicates, over tcpi_bytes_sent; {} segments retransmitted in the whole test",
        d.sender.retransmits
    )))
    .evidence(Evidence::new("loss-model rate", Quantity::Rate(model)).with_detail(format!(
        "{model_name}; MSS {} B, RTT {}, p {:.2e}, Mathis C {MATHIS_C}, × {} stream(s)",
        d.sender.snd_mss,
        ms(b.rtt_s),
        p,
        d.streams
    )))
    .evidence(rate_evidence(d, b))
    .evidences(rtt_evidence(b))
    .evidences(loss_evidence(d));
    if d.sender.dsack_dups > 0 || d.sender.reord_seen > 0 {
        f = f.evidence(Evidence::new(
            "spurious retransmissions (DSACK) / reordering events",
            Quantity::Text(format!("{} / {}", d.sender.dsack_dups, d.sender.reord_seen)),
        ));
    }
    f = f
        .remedy(
            Remedy::new(format!(
                "Find the lossy link in the {} direction: interface error and drop counters and speed/duplex on both ends, then on each switch port and router link between them (a duplex mismatch, a bad cable or radio link, a policer)",
                d.direction.label()
            ))
            .on(Host::BothEnds)
            .with_command("ip -s link show; ethtool IFACE"),
        )
        .remedy(
            Remedy::new("If the loss is on the access line or beyond your network, report it to the provider with these figures")
                .on(Host::Isp),
        );
    if loss_model_rate(cc, 1, 1.0, 1.0).is_some() {
        f = f.remedy(
            Remedy::new(format!(
                "Meanwhile a model-based congestion control copes far better than {} with random loss: switch the sender to BBR (`pathdoc speed --compare-cc` measures the difference)",
                if cc.is_empty() { "a loss-based one" } else { cc }
            ))
            .on(sender.host())
            .with_command("sysctl -w net.core.default_qdisc=fq net.ipv4.tcp_congestion_control=bbr"),
        );
    }
    f
}

/// What the loss of a direction means when it did not limit the rate.
fn loss_sentence(d: &DirectionResult, b: &Basis) -> String {
    let l = &d.phases.loss;
    let p = b.path_loss_share;
    let queue = if b.standing_queue {
        format!(
            "a queue stood at the bottleneck ({} smoothed RTT vs {} minimum), so the link was full",
            ms(b.rtt_s),
            ms(b.min_rtt_s)
        )
    } else {
        String::new()
    };
    let overflow = (l.overflow_segments > 0).then(|| {
        let burst = l.largest_burst.filter(|x| x.queued);
        format!(
            "{} lost segments were the sender overrunning the bottleneck queue{} — self-inflicted, not a path fault",
            if l.overflow_segments == l.lost_segments {
                format!("all {}", l.lost_segments)
            } else {
                format!("{} of the {}", l.overflow_segments, l.lost_segments)
            },
            burst.map_or(String::new(), |x| format!(
                " (largest burst {} segments at {:.1}–{:.1} s{}, RTT {} vs {} minimum)",
                x.segments,
                x.start_s,
                x.end_s,
                if x.slow_start { " in slow start" } else { "" },
                ms(f64::from(x.rtt_us) / 1e6),
                ms(b.min_rtt_s)
            ))
        )
    });
    let path = if p < LOSS_THRESHOLD {
        None
    } else if b.standing_queue {
        Some(format!(
            "the {:.3} % path loss did not hold the rate: {queue}",
            p * 100.0
        ))
    } else {
        let cc = d.sender.congestion_control.as_str();
        Some(match loss_model_rate(cc, d.sender.snd_mss, b.rtt_s, p) {
            None => format!(
                "the {:.3} % path loss does not bound the rate: BBR does not back off on random loss (the Mathis model would hold a loss-based CUBIC or Reno to about {})",
                p * 100.0,
                format_rate(crate::model::mathis_rate(d.sender.snd_mss, b.rtt_s, p) * f64::from(d.streams))
            ),
            Some(m) if b.rate_bps > m * f64::from(d.streams) => format!(
                "the rate is above what the loss model allows for the {:.3} % path loss ({}), so the loss is not what holds it",
                p * 100.0,
                format_rate(m * f64::from(d.streams))
            ),
            Some(m) => format!(
                "the {:.3} % path loss is too rare to explain a rate this low (model {})",
                p * 100.0,
                format_rate(m * f64::from(d.streams))
            ),
        })
    };
    let parts: Vec<String> = [overflow, path].into_iter().flatten().collect();
    let text = match (parts.is_empty(), b.standing_queue) {
        (true, true) => format!("no segment was lost on the path; {queue}"),
        (true, false) if l.lost_segments == 0 => "no segment was lost".to_string(),
        (true, false) => format!("loss was negligible ({:.4} % on the path)", p * 100.0),
        (false, true) if !parts.iter().any(|x| x.contains("queue stood")) => {
            format!("{}; {queue}", parts.join("; "))
        }
        _ => parts.join("; "),
    };
    format!("{text}.")
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

pub fn path_finding(d: &DirectionResult, b: &Basis) -> Finding {
    let mut f = Finding::new(CHECK, "link-limited", Status::Pass, format!(
        "{}: no host-side limit found; the path sets the rate: {} goodput {}",
        d.what(),
        format_rate(b.rate_bps),
        b.short
    ))
    .direction(d.core_direction())
    .summary(format!(
        "Neither the receive window ({:.0} % of busy time) nor the send buffer ({:.0} %) held the sender back. {} {} The rate is what the path delivers.",
        b.rwnd_fraction() * 100.0,
        b.sndbuf_fraction() * 100.0,
        cpu_sentence(d, b),
        capitalized(&loss_sentence(d, b))
    ))
    .evidence(Evidence::new("time limited by receive window", Quantity::Percent(b.rwnd_fraction() * 100.0)))
    .evidence(Evidence::new("time limited by send buffer", Quantity::Percent(b.sndbuf_fraction() * 100.0)))
    .evidence(rate_evidence(d, b))
    .evidences(rtt_evidence(b))
    .evidences(process_cpu_evidence(b, d))
    .evidences(host_cpu_evidence(d));
    if !d.sender.has_chronographs {
        f.status = Status::Info;
        f.summary.push_str(" (This kernel does not report window/buffer chronographs; those two limits could not be checked.)");
    }
    f
}

/// The side whose host a remedy for the sending end applies on (for the cross-direction texts).
pub fn sender_host(d: &DirectionResult) -> Host {
    match d.sender_side {
        Side::Client => Host::Client,
        Side::Server => Host::Server,
    }
}
