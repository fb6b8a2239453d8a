//! Pure logic: rates, bandwidth-delay product, the Mathis loss model, wire-rate estimates, and the
//! diagnosis of what limits each direction. No sockets here; everything is table-tested.
//!
//! Verdicts are only issued when the kernel's own accounting supports them: the `tcp_info`
//! chronographs (`busy_time`, `rwnd_limited`, `sndbuf_limited`) say how long the sender was
//! stuck on the receive window or its send buffer; retransmitted bytes over sent bytes give the
//! loss rate fed to the Mathis model; process CPU over wall time says whether a host ran out of
//! CPU. When none of them points anywhere the path itself (its bottleneck rate) is the limit and
//! we say so as information, not as a fault.

use pathdoc_core::units::{format_bytes, format_rate};
use pathdoc_core::{Evidence, Finding, Quantity, Remedy, Status};
use serde::{Deserialize, Serialize};

use crate::spec::Direction;

/// Name of this check in findings and in `report.data`.
pub const CHECK: &str = "throughput";

/// Mathis et al. 1997 constant for periodic loss with every segment ACKed: √(3/2).
pub const MATHIS_C: f64 = 1.22;
/// Ethernet bytes per frame beyond the IP packet at layer 1: preamble+SFD 8, MAC header 14,
/// FCS 4, inter-frame gap 12.
pub const ETHERNET_L1_OVERHEAD: u32 = 38;
/// Ethernet MAC header only (what a Linux qdisc such as tbf counts beyond the IP packet).
pub const ETHERNET_HEADER: u32 = 14;

/// Fraction of the sender's busy time stuck on a window or buffer that makes it "the limit".
pub const LIMITED_FRACTION: f64 = 0.2;
/// Process CPU, as a fraction of the cores the streams can use, that counts as CPU-bound.
pub const CPU_BOUND_FRACTION: f64 = 0.9;
/// How far below the Mathis estimate a measured rate may sit and still be called loss-limited.
pub const MATHIS_BELOW: f64 = 3.0;
/// How far above it: CUBIC with random (not periodic) loss and short tests runs well above the
/// Reno model (4.3× measured in the lossy-long-fat lab at 40 ms, 0.25 %), so the margin is wide.
pub const MATHIS_ABOVE: f64 = 10.0;

/// Retransmitted share of sent bytes below which loss cannot be what limits a transfer.
pub const LOSS_THRESHOLD: f64 = 1e-4;
/// Slower direction below this share of the faster one is reported as asymmetric.
pub const ASYMMETRY_RATIO: f64 = 0.5;

/// Which end of the test a setting or a measurement belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    Client,
    Server,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
}

/// Bytes of IP + TCP headers per segment: IPv4 20 / IPv6 40, TCP 20, timestamps option 12.
pub fn segment_overhead(ipv6: bool, timestamps: bool) -> u32 {
    (if ipv6 { 40 } else { 20 }) + 20 + if timestamps { 12 } else { 0 }
}

/// Bandwidth-delay product in bytes: rate (bit/s) × RTT (s) / 8.
pub fn bdp_bytes(rate_bps: f64, rtt_s: f64) -> f64 {
    rate_bps * rtt_s / 8.0
}

/// Mathis et al. upper bound for a loss-based TCP: MSS/RTT × C/√p, in bit/s.
pub fn mathis_rate(mss: u32, rtt_s: f64, loss: f64) -> f64 {
    if loss <= 0.0 || rtt_s <= 0.0 {
        return f64::INFINITY;
    }
    f64::from(mss) * 8.0 / rtt_s * MATHIS_C / loss.sqrt()
}

/// The on-the-wire rates implied by a goodput at a given MSS.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WireEstimate {
    /// IP packets (layer 3) per second in bits, including retransmissions.
    pub ip_bps: f64,
    /// Ethernet frames without preamble/FCS (what a Linux qdisc like tbf meters).
    pub ethernet_frame_bps: f64,
    /// Ethernet at layer 1: frames plus preamble, FCS and inter-frame gap.
    pub ethernet_l1_bps: f64,
    /// IP + TCP header bytes per segment used for the estimate.
    pub overhead_bytes: u32,
}

/// Estimate wire rates: each `mss` payload bytes travel in one segment with `overhead` header
/// bytes; retransmitted bytes (share `retrans_share` of the goodput) travel again.
pub fn wire_estimate(
    goodput_bps: f64,
    mss: u32,
    ipv6: bool,
    timestamps: bool,
    retrans_share: f64,
) -> WireEstimate {
    let overhead = segment_overhead(ipv6, timestamps);
    let mss = f64::from(mss.max(1));
    let segments_bps = goodput_bps * (1.0 + retrans_share.max(0.0)) / mss; // segments·8 per second
    let ip = segments_bps * (mss + f64::from(overhead));
    WireEstimate {
        ip_bps: ip,
        ethernet_frame_bps: ip + segments_bps * f64::from(ETHERNET_HEADER),
        ethernet_l1_bps: ip + segments_bps * f64::from(ETHERNET_L1_OVERHEAD),
        overhead_bytes: overhead,
    }
}

/// A `tcp_rmem`/`tcp_wmem` maximum large enough for `rate_bps` at `rtt_s`: twice the BDP (Linux
/// keeps roughly half of the buffer for skb overhead), rounded up to a power of two, and never
/// below 4× the current maximum nor below 16 MiB.
pub fn recommended_buffer(target_bps: f64, rtt_s: f64, current_max: u64) -> u64 {
    let need = (2.0 * bdp_bytes(target_bps, rtt_s))
        .max(4.0 * current_max as f64)
        .max(16.0 * 1024.0 * 1024.0);
    (need.ceil() as u64).next_power_of_two()
}

/// Per-interval figures of one direction (all streams together).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub start_s: f64,
    pub end_s: f64,
    /// Payload bytes the receiving application read in this interval, as bit/s.
    pub goodput_bps: f64,
    /// Estimated IP-layer rate including headers and retransmissions.
    pub wire_ip_bps: f64,
    /// Segments retransmitted in this interval (sender `tcpi_total_retrans` delta).
    pub retransmits: u64,
    /// Sum of the streams' congestion windows, bytes.
    pub cwnd_bytes: u64,
    /// Peer's advertised window (sum over streams), bytes.
    pub snd_wnd_bytes: u64,
    /// Smoothed RTT (mean over streams), µs.
    pub rtt_us: u32,
    pub min_rtt_us: u32,
    /// Kernel delivery-rate estimate (sum), bit/s.
    pub delivery_rate_bps: f64,
    /// Pacing rate (sum), bit/s.
    pub pacing_rate_bps: f64,
    /// Share of sending time stuck on the receive window / send buffer in this interval.
    pub rwnd_limited: f64,
    pub sndbuf_limited: f64,
    /// Process CPU of the sending and receiving end in this interval, in cores.
    pub sender_cpu_cores: Option<f64>,
    pub receiver_cpu_cores: Option<f64>,
    /// Each stream's share of the interval, when the direction has more than one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamInterval>,
}

/// One stream's figures in one interval (sender side, like the direction's totals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamInterval {
    /// Stream number within its direction, from 0.
    pub stream: u32,
    /// Payload bytes acknowledged in this interval, as bit/s.
    pub goodput_bps: f64,
    pub retransmits: u64,
    pub cwnd_bytes: u64,
    pub rtt_us: u32,
}

/// Totals of one direction's sending sockets (deltas over the test, summed over streams).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderTotals {
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub bytes_acked: u64,
    pub retransmits: u64,
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    pub min_rtt_us: u32,
    /// Mean smoothed RTT over the intervals, µs.
    pub mean_rtt_us: u32,
    pub snd_mss: u32,
    pub pmtu: u32,
    pub timestamps: bool,
    /// Largest advertised window seen from the receiver (per stream), bytes.
    pub max_snd_wnd: u64,
    pub max_cwnd_bytes: u64,
    pub reord_seen: u64,
    pub dsack_dups: u64,
    /// Whether the kernel provided the chronograph fields (Linux ≥ 4.10).
    pub has_chronographs: bool,
    pub congestion_control: String,
}

/// Everything measured about one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionResult {
    pub direction: Direction,
    pub streams: u32,
    pub duration_s: f64,
    /// Payload bytes the receiving application read.
    pub payload_bytes: u64,
    pub goodput_bps: f64,
    pub wire: WireEstimate,
    pub ipv6: bool,
    pub sender_side: Side,
    pub receiver_side: Side,
    pub sender: SenderTotals,
    /// Out-of-order packets the receiver saw (sum over streams).
    pub receiver_ooo_packets: u64,
    /// Process CPU in cores (CPU seconds / wall seconds) on each end, and their CPU counts.
    pub sender_cpu_cores: Option<f64>,
    pub receiver_cpu_cores: Option<f64>,
    pub sender_cpus: u32,
    pub receiver_cpus: u32,
    /// The receiving host's `tcp_rmem` and the sending host's `tcp_wmem`.
    pub receiver_tcp_rmem: Option<[u64; 3]>,
    pub sender_tcp_wmem: Option<[u64; 3]>,
    /// Explicit SO_SNDBUF/SO_RCVBUF the test set (`--window`), if any.
    pub window_option: Option<u32>,
    pub intervals: Vec<Interval>,
}

impl DirectionResult {
    pub fn retrans_share(&self) -> f64 {
        if self.sender.bytes_sent == 0 {
            0.0
        } else {
            self.sender.bytes_retrans as f64 / self.sender.bytes_sent as f64
        }
    }
    /// Retransmitted share minus the retransmissions the receiver reported as duplicates
    /// (DSACK): those were spurious (reordering, a too-eager timer), not lost packets.
    pub fn loss_share(&self) -> f64 {
        if self.sender.bytes_sent == 0 {
            return 0.0;
        }
        let spurious = self.sender.dsack_dups * u64::from(self.sender.snd_mss);
        self.sender.bytes_retrans.saturating_sub(spurious) as f64 / self.sender.bytes_sent as f64
    }
    /// Whether the Mathis model puts the loss-limited rate anywhere near the measured one.
    /// Loss far too rare to bite (rate < estimate / [`MATHIS_BELOW`]) cannot be the limit. A
    /// model-based sender (BBR) does not back off on random loss, so the model does not apply;
    /// nor does it to a loss-based sender running far above it (> estimate × [`MATHIS_ABOVE`]).
    fn loss_explains_rate(&self, loss: f64) -> bool {
        if self.sender.congestion_control.eq_ignore_ascii_case("bbr") {
            return false;
        }
        let bound =
            mathis_rate(self.sender.snd_mss, self.mean_rtt_s(), loss) * f64::from(self.streams);
        (bound / MATHIS_BELOW..=bound * MATHIS_ABOVE).contains(&self.goodput_bps)
    }
    fn fraction(&self, part: u64) -> f64 {
        if self.sender.busy_us == 0 {
            0.0
        } else {
            part as f64 / self.sender.busy_us as f64
        }
    }
    pub fn rwnd_limited_fraction(&self) -> f64 {
        self.fraction(self.sender.rwnd_limited_us)
    }
    pub fn sndbuf_limited_fraction(&self) -> f64 {
        self.fraction(self.sender.sndbuf_limited_us)
    }
    fn rtt_s(&self) -> f64 {
        f64::from(self.sender.min_rtt_us.max(1)) / 1e6
    }
    fn mean_rtt_s(&self) -> f64 {
        f64::from(self.sender.mean_rtt_us.max(self.sender.min_rtt_us).max(1)) / 1e6
    }
    /// Cores the streams can use on a host with `cpus` CPUs.
    fn usable_cores(&self, cpus: u32) -> f64 {
        f64::from(self.streams.min(cpus.max(1)))
    }
    fn cpu_bound(&self, cores: Option<f64>, cpus: u32) -> bool {
        cores.is_some_and(|c| c >= CPU_BOUND_FRACTION * self.usable_cores(cpus))
    }
    fn what(&self) -> String {
        let s = if self.streams == 1 {
            String::new()
        } else {
            format!(", {} streams", self.streams)
        };
        format!("{}{s}", self.direction.short())
    }
    fn common_evidence(&self) -> Vec<Evidence> {
        vec![
            Evidence::new(
                format!("{} goodput", self.direction.short()),
                Quantity::Goodput(self.goodput_bps),
            )
            .with_detail(format!(
                "{} payload bytes in {:.2} s",
                self.payload_bytes, self.duration_s
            )),
            Evidence::new("min RTT", Quantity::Seconds(self.rtt_s()))
                .with_detail("sender tcpi_min_rtt"),
        ]
    }
}

/// Judge one direction: at most one "limited by" verdict plus the rate itself.
pub fn diagnose_direction(d: &DirectionResult) -> Vec<Finding> {
    let mut findings = vec![rate_finding(d)];
    if d.duration_s <= 0.0 || d.payload_bytes == 0 {
        findings.push(
            Finding::new(CHECK, "no-data", Status::Inconclusive, format!("{}: no data arrived", d.what()))
                .summary("The data connections were set up but no payload reached the receiver; nothing can be judged."),
        );
        return findings;
    }
    let rwnd = d.rwnd_limited_fraction();
    let sndbuf = d.sndbuf_limited_fraction();
    let sender_cpu = d.cpu_bound(d.sender_cpu_cores, d.sender_cpus);
    let receiver_cpu = d.cpu_bound(d.receiver_cpu_cores, d.receiver_cpus);
    let loss = d.loss_share();

    if sender_cpu || receiver_cpu {
        findings.push(cpu_finding(d, sender_cpu));
    } else if d.sender.has_chronographs && rwnd >= LIMITED_FRACTION && rwnd >= sndbuf {
        findings.push(rwnd_finding(d, rwnd));
    } else if d.sender.has_chronographs && sndbuf >= LIMITED_FRACTION {
        findings.push(sndbuf_finding(d, sndbuf));
    } else if loss >= LOSS_THRESHOLD && !queue_building(d) && d.loss_explains_rate(loss) {
        findings.push(loss_finding(d, loss));
    } else {
        findings.push(path_finding(d, rwnd, sndbuf, loss));
    }
    findings
}

/// RTT well above its minimum means a queue at the bottleneck: the sender is filling the link,
/// and the losses it sees are that queue overflowing, not random loss starving it.
fn queue_building(d: &DirectionResult) -> bool {
    let min = f64::from(d.sender.min_rtt_us);
    let mean = f64::from(d.sender.mean_rtt_us);
    min > 0.0 && mean > 1.5 * min + 2000.0
}

fn rate_finding(d: &DirectionResult) -> Finding {
    let w = &d.wire;
    Finding::new(CHECK, format!("{}-rate", d.direction.short()), Status::Info, format!(
        "{}: {} goodput, ≈ {} on the wire (IP)",
        d.what(),
        format_rate(d.goodput_bps),
        format_rate(w.ip_bps)
    ))
    .summary(format!(
        "Goodput is TCP payload read by the receiving application. The wire estimate adds {} B of IP+TCP headers per {} B segment{} and the retransmitted bytes; Ethernet adds 14 B per frame (what tc/tbf meters) or 38 B at layer 1 (preamble, FCS, gap). Congestion control: {}.",
        w.overhead_bytes,
        d.sender.snd_mss,
        if d.sender.timestamps { " (incl. 12 B timestamps)" } else { "" },
        if d.sender.congestion_control.is_empty() { "unknown" } else { &d.sender.congestion_control },
    ))
    .evidence(Evidence::new("goodput", Quantity::Goodput(d.goodput_bps)))
    .evidence(Evidence::new("wire rate, IP layer", Quantity::WireRate(w.ip_bps)))
    .evidence(Evidence::new("wire rate, Ethernet frames (as tbf counts)", Quantity::WireRate(w.ethernet_frame_bps)))
    .evidence(Evidence::new("wire rate, Ethernet L1", Quantity::WireRate(w.ethernet_l1_bps)))
    .evidence(Evidence::new("retransmitted share of sent bytes", Quantity::Percent(d.retrans_share() * 100.0)).with_detail(format!(
        "tcpi_bytes_retrans {} / tcpi_bytes_sent {}",
        d.sender.bytes_retrans, d.sender.bytes_sent
    )))
    .evidence(Evidence::new("smoothed RTT (mean)", Quantity::Seconds(d.mean_rtt_s())))
    .evidence(Evidence::new("min RTT", Quantity::Seconds(d.rtt_s())))
}

fn cpu_finding(d: &DirectionResult, sender: bool) -> Finding {
    let (side, cores, cpus) = if sender {
        (
            d.sender_side,
            d.sender_cpu_cores.unwrap_or(0.0),
            d.sender_cpus,
        )
    } else {
        (
            d.receiver_side,
            d.receiver_cpu_cores.unwrap_or(0.0),
            d.receiver_cpus,
        )
    };
    let role = if sender { "sender" } else { "receiver" };
    Finding::new(CHECK, "cpu-limited", Status::Warn, format!("{} limited by CPU on the {} ({role})", d.what(), side.name()))
        .summary(format!(
            "The {role} process used {cores:.2} cores for {} stream(s) on a {cpus}-CPU host: it cannot move data faster, so the network was not tested to its limit.",
            d.streams
        ))
        .requirement(format!("CPU-bound when process CPU ≥ {:.0} % of the cores the streams can use", CPU_BOUND_FRACTION * 100.0))
        .evidence(Evidence::new(format!("{} process CPU", side.name()), Quantity::Percent(cores * 100.0)).with_detail("getrusage user+system over wall time; 100 % = one core"))
        .evidences(d.common_evidence())
        .remedy(Remedy::new("Use more parallel streams (one core each) or a faster host; the network itself may be faster than this figure").with_command(format!("pathdoc speed HOST --streams {}", (d.streams * 2).min(crate::spec::MAX_STREAMS))))
}

fn rwnd_finding(d: &DirectionResult, fraction: f64) -> Finding {
    let rtt = d.rtt_s();
    let window = d.sender.max_snd_wnd;
    let window_rate = window as f64 * 8.0 / rtt;
    let rmem_max = d.receiver_tcp_rmem.map(|r| r[2]);
    // A rate to size the fix for: well above what was reached, and at least 1 Gbit/s.
    let target = (4.0 * d.goodput_bps).max(1e9);
    let recommended = recommended_buffer(target, rtt, rmem_max.unwrap_or(window));
    let (rmin, rdef) = d
        .receiver_tcp_rmem
        .map(|r| (r[0], r[1]))
        .unwrap_or((4096, 131072));
    let command = format!("sysctl -w net.ipv4.tcp_rmem=\"{rmin} {rdef} {recommended}\"");
    let mut f = Finding::new(CHECK, "receive-window-limited", Status::Fail, format!(
        "{} limited by the receive window of the {} ({})",
        d.what(),
        d.receiver_side.name(),
        format_bytes(window)
    ))
    .summary(format!(
        "The sender spent {:.0} % of its busy time waiting for the receiver's window. A {} window at {:.1} ms RTT allows at most {} per stream (window/RTT). The link rate is not known from here; to reach, say, {} a stream needs {} in flight (bandwidth-delay product = rate × min RTT), and the fix below sizes the buffer for twice that.",
        fraction * 100.0,
        format_bytes(window),
        rtt * 1e3,
        format_rate(window_rate),
        format_rate(target),
        format_bytes(bdp_bytes(target, rtt) as u64),
    ))
    .requirement(format!("window ≥ BDP; flagged when tcpi_rwnd_limited ≥ {:.0} % of tcpi_busy_time", LIMITED_FRACTION * 100.0))
    .evidence(Evidence::new("time limited by receive window", Quantity::Percent(fraction * 100.0)).with_detail(format!(
        "tcpi_rwnd_limited {} µs of tcpi_busy_time {} µs",
        d.sender.rwnd_limited_us, d.sender.busy_us
    )))
    .evidence(Evidence::new("advertised receive window (max)", Quantity::Bytes(window)).with_detail("sender tcpi_snd_wnd"))
    .evidence(Evidence::new("window / RTT ceiling per stream", Quantity::Rate(window_rate)))
    .evidence(Evidence::new("bandwidth-delay product at the measured goodput", Quantity::Bytes(bdp_bytes(d.goodput_bps, rtt) as u64)))
    .evidences(d.common_evidence());
    if let Some(max) = rmem_max {
        f = f.evidence(
            Evidence::new(
                format!("{} net.ipv4.tcp_rmem max", d.receiver_side.name()),
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
    f.remedy(Remedy::new(format!(
        "On the {} (the receiver), raise the TCP receive buffer maximum so the window can reach the BDP (persist it in /etc/sysctl.d/)",
        d.receiver_side.name()
    ))
    .with_command(command))
    .remedy(Remedy::new("Applications that set SO_RCVBUF themselves are capped by net.core.rmem_max instead").with_command(format!("sysctl -w net.core.rmem_max={recommended}")))
}

fn sndbuf_finding(d: &DirectionResult, fraction: f64) -> Finding {
    let rtt = d.rtt_s();
    let wmem = d.sender_tcp_wmem;
    // A rate to size the fix for: well above what was reached, and at least 1 Gbit/s.
    let target = (4.0 * d.goodput_bps).max(1e9);
    let recommended = recommended_buffer(target, rtt, wmem.map(|w| w[2]).unwrap_or(4 << 20));
    let (wmin, wdef) = wmem.map(|w| (w[0], w[1])).unwrap_or((4096, 16384));
    let mut f = Finding::new(CHECK, "send-buffer-limited", Status::Fail, format!(
        "{} limited by the send buffer of the {}",
        d.what(),
        d.sender_side.name()
    ))
    .summary(format!(
        "The sender spent {:.0} % of its busy time with a full send buffer: it cannot keep more unacknowledged data in flight. The link rate is not known from here; at {:.1} ms RTT, reaching, say, {} needs {} in flight, and the fix below sizes the buffer for twice that.",
        fraction * 100.0,
        rtt * 1e3,
        format_rate(target),
        format_bytes(bdp_bytes(target, rtt) as u64),
    ))
    .requirement(format!("send buffer ≥ BDP; flagged when tcpi_sndbuf_limited ≥ {:.0} % of tcpi_busy_time", LIMITED_FRACTION * 100.0))
    .evidence(Evidence::new("time limited by send buffer", Quantity::Percent(fraction * 100.0)).with_detail(format!(
        "tcpi_sndbuf_limited {} µs of tcpi_busy_time {} µs",
        d.sender.sndbuf_limited_us, d.sender.busy_us
    )))
    .evidence(Evidence::new("bandwidth-delay product at the measured goodput", Quantity::Bytes(bdp_bytes(d.goodput_bps, rtt) as u64)))
    .evidence(Evidence::new("largest congestion window", Quantity::Bytes(d.sender.max_cwnd_bytes)))
    .evidences(d.common_evidence());
    if let Some(w) = wmem {
        f = f.evidence(
            Evidence::new(
                format!("{} net.ipv4.tcp_wmem max", d.sender_side.name()),
                Quantity::Bytes(w[2]),
            )
            .with_detail("read from /proc/sys/net/ipv4/tcp_wmem"),
        );
    }
    f.remedy(
        Remedy::new(format!("On the {} (the sender), raise the TCP send buffer maximum (persist it in /etc/sysctl.d/)", d.sender_side.name()))
            .with_command(format!("sysctl -w net.ipv4.tcp_wmem=\"{wmin} {wdef} {recommended}\"")),
    )
}

fn loss_finding(d: &DirectionResult, loss: f64) -> Finding {
    let rtt = d.mean_rtt_s();
    let mathis = mathis_rate(d.sender.snd_mss, rtt, loss) * f64::from(d.streams);
    let cc = d.sender.congestion_control.as_str();
    let status = if loss >= 1e-3 {
        Status::Fail
    } else {
        Status::Warn
    };
    let mut f = Finding::new(CHECK, "loss-limited", status, format!(
        "{} limited by packet loss ({:.2} % retransmitted)",
        d.what(),
        loss * 100.0
    ))
    .summary(format!(
        "{:.3} % of the sent bytes were retransmitted while the RTT stayed near its minimum (no queue building), so the loss is on the path, not the sender overrunning a bottleneck. The Mathis model for a loss-based TCP (MSS/RTT × {MATHIS_C}/√p) allows about {} for {} stream(s); measured {}.",
        loss * 100.0,
        format_rate(mathis),
        d.streams,
        format_rate(d.goodput_bps),
    ))
    .requirement(format!("flagged when retransmitted bytes ≥ {:.2} % of sent bytes and the RTT is not inflated by a queue", LOSS_THRESHOLD * 100.0))
    .evidence(Evidence::new("retransmitted share of sent bytes", Quantity::Percent(loss * 100.0)).with_detail(format!(
        "tcpi_bytes_retrans {} / tcpi_bytes_sent {}; {} segments retransmitted",
        d.sender.bytes_retrans, d.sender.bytes_sent, d.sender.retransmits
    )))
    .evidence(Evidence::new("Mathis estimate", Quantity::Rate(mathis)).with_detail(format!(
        "MSS {} B, RTT {:.1} ms, p {:.2e}, C {MATHIS_C}",
        d.sender.snd_mss,
        rtt * 1e3,
        loss
    )))
    .evidences(d.common_evidence());
    if d.sender.dsack_dups > 0 || d.sender.reord_seen > 0 {
        f = f.evidence(Evidence::new(
            "spurious retransmissions (DSACK) / reordering events",
            Quantity::Text(format!("{} / {}", d.sender.dsack_dups, d.sender.reord_seen)),
        ));
    }
    if cc != "bbr" {
        f = f.remedy(Remedy::new(format!(
            "Find and fix the loss (duplex mismatch, bad cable/radio, policer). Meanwhile a model-based congestion control copes far better than {} on lossy paths: switch the sender ({}) to BBR; `pathdoc speed --compare-cc` measures the difference",
            if cc.is_empty() { "a loss-based one" } else { cc },
            d.sender_side.name()
        ))
        .with_command("sysctl -w net.core.default_qdisc=fq net.ipv4.tcp_congestion_control=bbr"));
    } else {
        f = f.remedy(Remedy::new("Find and fix the loss on the path (duplex mismatch, bad cable/radio, policer); more parallel streams share the loss penalty"));
    }
    f
}

fn path_finding(d: &DirectionResult, rwnd: f64, sndbuf: f64, loss: f64) -> Finding {
    let mut f = Finding::new(CHECK, "link-limited", Status::Pass, format!(
        "{}: no host-side limit found; the path sets the rate ({})",
        d.what(),
        format_rate(d.goodput_bps)
    ))
    .summary(format!(
        "Neither the receive window ({:.0} % of busy time) nor the send buffer ({:.0} %) held the sender back, CPU was not exhausted, and {} — the rate is what the path delivers.",
        rwnd * 100.0,
        sndbuf * 100.0,
        if loss < LOSS_THRESHOLD {
            "loss was negligible".to_string()
        } else if !queue_building(d) {
            let mathis = mathis_rate(d.sender.snd_mss, d.mean_rtt_s(), loss) * f64::from(d.streams);
            if d.sender.congestion_control.eq_ignore_ascii_case("bbr") {
                format!("the {:.3} % loss does not bound the rate: BBR does not back off on random loss (the Mathis model would allow a loss-based CUBIC or Reno about {})", loss * 100.0, format_rate(mathis))
            } else if d.goodput_bps > mathis {
                format!("the rate is above what the Mathis model allows for the {:.3} % loss ({}), so the loss is not what holds it", loss * 100.0, format_rate(mathis))
            } else {
                format!("the {:.3} % loss is too rare to explain the rate (Mathis estimate {})", loss * 100.0, format_rate(mathis))
            }
        } else {
            format!("the {:.3} % retransmissions came with a queue building (RTT above its minimum), i.e. the bottleneck was full", loss * 100.0)
        }
    ))
    .evidence(Evidence::new("time limited by receive window", Quantity::Percent(rwnd * 100.0)))
    .evidence(Evidence::new("time limited by send buffer", Quantity::Percent(sndbuf * 100.0)))
    .evidences(d.common_evidence());
    if !d.sender.has_chronographs {
        f.status = Status::Info;
        f.summary.push_str(" (This kernel does not report window/buffer chronographs; those two limits could not be checked.)");
    }
    for (name, cores) in [
        ("sender", d.sender_cpu_cores),
        ("receiver", d.receiver_cpu_cores),
    ] {
        if let Some(c) = cores {
            f = f.evidence(Evidence::new(
                format!("{name} process CPU"),
                Quantity::Percent(c * 100.0),
            ));
        }
    }
    f
}

/// Compare the directions of a two-way test.
pub fn diagnose_asymmetry(upload: &DirectionResult, download: &DirectionResult) -> Option<Finding> {
    let (slow, fast) = if upload.goodput_bps <= download.goodput_bps {
        (upload, download)
    } else {
        (download, upload)
    };
    if fast.goodput_bps <= 0.0 {
        return None;
    }
    let ratio = slow.goodput_bps / fast.goodput_bps;
    if ratio >= ASYMMETRY_RATIO {
        return loss_asymmetry(upload, download);
    }
    let slow_verdict = diagnose_direction(slow).into_iter().nth(1);
    // A host setting (window, buffer, CPU) already explains the slow direction: the asymmetry is
    // a consequence, not a separate path fault, so it is reported without raising an alarm.
    let explained_by_host = slow_verdict.as_ref().is_some_and(|f| {
        matches!(
            f.id.as_str(),
            "receive-window-limited" | "send-buffer-limited" | "cpu-limited"
        )
    });
    let why = match &slow_verdict {
        Some(f) if f.id != "link-limited" => {
            format!(" The slower direction's diagnosis: {}.", f.title)
        }
        _ => " Nothing host-side limits the slower direction, so its path is slower or lossier."
            .to_string(),
    };
    let status = if explained_by_host {
        Status::Info
    } else {
        Status::Warn
    };
    Some(
        Finding::new(CHECK, "throughput-asymmetry", status, format!(
            "{} is {:.0} % of {}: {} vs {}",
            slow.direction.short(),
            ratio * 100.0,
            fast.direction.short(),
            format_rate(slow.goodput_bps),
            format_rate(fast.goodput_bps)
        ))
        .summary(format!(
            "The {} direction is much slower than the {} direction over the same path.{why}",
            slow.direction.label(),
            fast.direction.label()
        ))
        .requirement(format!("flagged when the slower direction is below {:.0} % of the faster", ASYMMETRY_RATIO * 100.0))
        .evidence(Evidence::new(format!("{} goodput", slow.direction.short()), Quantity::Goodput(slow.goodput_bps)))
        .evidence(Evidence::new(format!("{} goodput", fast.direction.short()), Quantity::Goodput(fast.goodput_bps)))
        .evidence(Evidence::new(format!("{} retransmitted share", slow.direction.short()), Quantity::Percent(slow.retrans_share() * 100.0)))
        .evidence(Evidence::new(format!("{} retransmitted share", fast.direction.short()), Quantity::Percent(fast.retrans_share() * 100.0)))
        .remedies(if explained_by_host {
            // The slow direction's own finding carries the fix.
            Vec::new()
        } else {
            vec![Remedy::new(format!(
                "Look for a fault that hits only {} traffic: a duplex mismatch (check `ethtool IFACE` speed/duplex on both ends of each link), a policer or shaper in that direction, or a lossy link",
                slow.direction.label()
            ))]
        }),
    )
}

/// Loss share in one direction that, with ten times less the other way, is worth reporting even
/// when the rates are alike (a model-based congestion control such as BBR hides the rate loss).
pub const LOSS_ASYMMETRY: f64 = 5e-3;

fn loss_asymmetry(upload: &DirectionResult, download: &DirectionResult) -> Option<Finding> {
    let (lossy, clean) = if upload.loss_share() >= download.loss_share() {
        (upload, download)
    } else {
        (download, upload)
    };
    if lossy.loss_share() < LOSS_ASYMMETRY || clean.loss_share() * 10.0 > lossy.loss_share() {
        return None;
    }
    Some(
        Finding::new(CHECK, "loss-asymmetry", Status::Warn, format!(
            "{} loses {:.2} % of its segments, {} only {:.3} %",
            lossy.direction.short(),
            lossy.loss_share() * 100.0,
            clean.direction.short(),
            clean.loss_share() * 100.0
        ))
        .summary(format!(
            "Packets are lost in the {} direction only. The rates are similar ({} vs {}) because {} tolerates loss; a loss-based TCP (CUBIC, Reno) would crawl in that direction.",
            lossy.direction.label(),
            format_rate(lossy.goodput_bps),
            format_rate(clean.goodput_bps),
            if lossy.sender.congestion_control.is_empty() { "the congestion control" } else { &lossy.sender.congestion_control }
        ))
        .requirement(format!("flagged when one direction loses ≥ {:.1} % and the other ten times less", LOSS_ASYMMETRY * 100.0))
        .evidence(Evidence::new(format!("{} retransmitted share", lossy.direction.short()), Quantity::Percent(lossy.loss_share() * 100.0)))
        .evidence(Evidence::new(format!("{} retransmitted share", clean.direction.short()), Quantity::Percent(clean.loss_share() * 100.0)))
        .remedy(Remedy::new(format!(
            "Look for a fault that hits only {} traffic: a duplex mismatch (`ethtool IFACE` speed/duplex on both ends of each link), a policer, or a lossy link",
            lossy.direction.label()
        ))),
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
        .summary("The same direction was measured once per congestion control, one after the other, with everything else equal. Loss-based algorithms (CUBIC, Reno) back off on every loss; BBR paces to its bandwidth and RTT estimate and tolerates random loss.")
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
        f = f.remedy(
            Remedy::new(format!(
                "Use {} on the sending host for this path",
                best.congestion_control
            ))
            .with_command(cmd),
        );
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn formulas_match_reference_tables() {
        // (rate bit/s, RTT s, BDP bytes) from the BDP table.
        for (rate, rtt, bdp) in [(1e9, 0.001, 125e3), (1e9, 0.05, 6.25e6), (10e9, 0.1, 125e6)] {
            assert!(close(bdp_bytes(rate, rtt), bdp, 1e-9));
        }
        // (MSS, RTT, p, expected bit/s) Mathis examples with C = 1.22.
        for (mss, rtt, p, want) in [
            (1448, 0.010, 1e-4, 142e6),
            (1448, 0.050, 1e-4, 28e6),
            (1448, 0.100, 1e-3, 4.5e6),
            (1448, 0.010, 1e-6, 1.42e9),
        ] {
            let got = mathis_rate(mss, rtt, p);
            assert!(close(got, want, 0.03), "{mss} {rtt} {p}: {got}");
        }
        assert!(mathis_rate(1448, 0.01, 0.0).is_infinite());
    }

    #[test]
    fn wire_overhead_matches_ethernet_table() {
        // (ipv6, timestamps, MSS, efficiency at L1) for a 1500-byte MTU.
        for (v6, ts, mss, eff) in [
            (false, false, 1460, 0.9493),
            (false, true, 1448, 0.9415),
            (true, false, 1440, 0.9363),
            (true, true, 1428, 0.9285),
        ] {
            let w = wire_estimate(1e9, mss, v6, ts, 0.0);
            assert!(
                close(1e9 / w.ethernet_l1_bps, eff, 1e-3),
                "{v6} {ts}: {}",
                1e9 / w.ethernet_l1_bps
            );
            assert_eq!(mss + w.overhead_bytes, 1500);
            assert!(close(
                w.ethernet_frame_bps,
                1e9 * 1514.0 / f64::from(mss),
                1e-9
            ));
        }
        let w = wire_estimate(1e8, 1448, false, true, 0.01);
        assert!(close(w.ip_bps, 1e8 * 1.01 * 1500.0 / 1448.0, 1e-9));
    }

    #[test]
    fn buffer_recommendation_covers_twice_the_bdp() {
        // (target, rtt, current max, expected)
        for (target, rtt, cur, want) in [
            (1e9, 0.1, 262_144, 32 << 20),    // 2 × 12.5 MB → 32 MiB
            (1e9, 0.001, 262_144, 16 << 20),  // floor of 16 MiB
            (10e9, 0.1, 4 << 20, 256 << 20),  // 2 × 125 MB → 256 MiB
            (1e8, 0.01, 64 << 20, 256 << 20), // never below 4 × current
        ] {
            assert_eq!(
                recommended_buffer(target, rtt, cur),
                want,
                "{target} {rtt} {cur}"
            );
        }
    }

    pub(crate) fn direction(goodput: f64) -> DirectionResult {
        DirectionResult {
            direction: Direction::Download,
            streams: 1,
            duration_s: 5.0,
            payload_bytes: (goodput * 5.0 / 8.0) as u64,
            goodput_bps: goodput,
            wire: wire_estimate(goodput, 1448, false, true, 0.0),
            ipv6: false,
            sender_side: Side::Server,
            receiver_side: Side::Client,
            sender: SenderTotals {
                bytes_sent: 1_000_000_000,
                bytes_acked: 1_000_000_000,
                busy_us: 5_000_000,
                min_rtt_us: 100_000,
                mean_rtt_us: 101_000,
                snd_mss: 1448,
                pmtu: 1500,
                timestamps: true,
                max_snd_wnd: 262_144,
                has_chronographs: true,
                congestion_control: "cubic".into(),
                ..SenderTotals::default()
            },
            receiver_ooo_packets: 0,
            sender_cpu_cores: Some(0.1),
            receiver_cpu_cores: Some(0.1),
            sender_cpus: 2,
            receiver_cpus: 2,
            receiver_tcp_rmem: Some([4096, 131072, 262144]),
            sender_tcp_wmem: Some([4096, 16384, 4194304]),
            window_option: None,
            intervals: vec![],
        }
    }

    fn verdict(d: &DirectionResult) -> (String, Status) {
        let f = diagnose_direction(d);
        assert_eq!(f[0].id, "download-rate");
        (f[1].id.clone(), f[1].status)
    }

    #[test]
    fn verdict_table() {
        type Tweak = fn(&mut DirectionResult);
        let cases: &[(&str, Tweak, &str, Status)] = &[
            ("clean", |_| {}, "link-limited", Status::Pass),
            (
                "rwnd",
                |d| d.sender.rwnd_limited_us = 4_000_000,
                "receive-window-limited",
                Status::Fail,
            ),
            (
                "rwnd below threshold",
                |d| d.sender.rwnd_limited_us = 500_000,
                "link-limited",
                Status::Pass,
            ),
            (
                "sndbuf",
                |d| d.sender.sndbuf_limited_us = 3_000_000,
                "send-buffer-limited",
                Status::Fail,
            ),
            (
                "random loss",
                |d| d.sender.bytes_retrans = 3_000_000,
                "loss-limited",
                Status::Fail,
            ),
            (
                "light loss",
                |d| d.sender.bytes_retrans = 300_000,
                "loss-limited",
                Status::Warn,
            ),
            (
                "loss at a full queue",
                |d| {
                    d.sender.bytes_retrans = 3_000_000;
                    d.sender.mean_rtt_us = 180_000;
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "loss too rare for so low a rate",
                |d| {
                    d.sender.bytes_retrans = 300_000;
                    d.goodput_bps = 1e6;
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "spurious retransmissions (DSACK)",
                |d| {
                    d.sender.bytes_retrans = 3_000_000;
                    d.sender.dsack_dups = 2100;
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "loss far below what the rate shows (BBR does not back off on loss)",
                |d| {
                    d.sender.bytes_retrans = 3_000_000;
                    d.goodput_bps *= 40.0;
                    d.sender.congestion_control = "bbr".into();
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "tiny loss",
                |d| d.sender.bytes_retrans = 10_000,
                "link-limited",
                Status::Pass,
            ),
            (
                "receiver cpu",
                |d| d.receiver_cpu_cores = Some(0.95),
                "cpu-limited",
                Status::Warn,
            ),
            (
                "cpu beats rwnd",
                |d| {
                    d.receiver_cpu_cores = Some(0.99);
                    d.sender.rwnd_limited_us = 4_000_000;
                },
                "cpu-limited",
                Status::Warn,
            ),
            (
                "two streams, one core busy",
                |d| {
                    d.streams = 2;
                    d.sender_cpu_cores = Some(1.0);
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "no chronographs",
                |d| {
                    d.sender.has_chronographs = false;
                    d.sender.rwnd_limited_us = 4_000_000;
                },
                "link-limited",
                Status::Info,
            ),
        ];
        for (name, tweak, id, status) in cases {
            let mut d = direction(20e6);
            tweak(&mut d);
            assert_eq!(verdict(&d), (id.to_string(), *status), "case {name}");
        }
    }

    #[test]
    fn rwnd_finding_names_bdp_and_the_exact_sysctl() {
        let mut d = direction(20e6);
        d.sender.rwnd_limited_us = 4_500_000;
        let f = &diagnose_direction(&d)[1];
        let cmd = f.remedies[0].command.as_deref().unwrap();
        assert_eq!(cmd, "sysctl -w net.ipv4.tcp_rmem=\"4096 131072 33554432\"");
        assert!(f.title.contains("client"), "{}", f.title);
        assert!(
            f.summary.contains("12.5 MB") || f.summary.contains("11.9 MiB"),
            "{}",
            f.summary
        );
        assert!(f
            .evidence
            .iter()
            .any(|e| e.name.contains("bandwidth-delay")));
    }

    #[test]
    fn asymmetry_names_the_slow_direction() {
        // Seed 001: a LAN (2 ms RTT), 2 % loss one way.
        let mut up = direction(29e6);
        up.direction = Direction::Upload;
        up.sender.bytes_retrans = 20_000_000;
        up.sender.min_rtt_us = 2_000;
        up.sender.mean_rtt_us = 2_100;
        let down = direction(94e6);
        let f = diagnose_asymmetry(&up, &down).unwrap();
        assert!(f.title.starts_with("upload is 31 %"), "{}", f.title);
        assert!(f.summary.contains("packet loss"), "{}", f.summary);
        assert!(diagnose_asymmetry(&direction(60e6), &down).is_none());
        // Same rate, loss one way only (BBR hides it in the rate).
        let mut up = direction(90e6);
        up.direction = Direction::Upload;
        up.sender.bytes_retrans = 15_000_000;
        let f = diagnose_asymmetry(&up, &direction(93e6)).unwrap();
        assert_eq!(f.id, "loss-asymmetry");
        assert!(f.title.starts_with("upload loses 1.50 %"), "{}", f.title);
    }

    #[test]
    fn asymmetry_explained_by_a_host_setting_is_not_an_alarm() {
        let mut down = direction(11e6);
        down.sender.rwnd_limited_us = 4_000_000;
        let mut up = direction(186e6);
        up.direction = Direction::Upload;
        let f = diagnose_asymmetry(&up, &down).unwrap();
        assert_eq!(f.status, Status::Info);
        assert!(f.summary.contains("receive window"), "{}", f.summary);
        assert!(f.remedies.is_empty(), "the window finding carries the fix");
        // Loss in one direction only (seed 001) stays a warning.
        let mut up = direction(29e6);
        up.direction = Direction::Upload;
        up.sender.bytes_retrans = 20_000_000;
        up.sender.min_rtt_us = 2_000;
        up.sender.mean_rtt_us = 2_100;
        assert_eq!(
            diagnose_asymmetry(&up, &direction(94e6)).unwrap().status,
            Status::Warn
        );
    }

    #[test]
    fn cc_comparison_picks_the_winner() {
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
