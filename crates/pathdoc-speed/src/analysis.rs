//! Pure logic: what was measured per direction, the basis every verdict is judged on (the steady
//! state), and the choice of one limiting-factor verdict per direction. No sockets here.
//!
//! Verdicts are only issued when the kernel's own accounting supports them: the `tcp_info`
//! chronographs (`busy_time`, `rwnd_limited`, `sndbuf_limited`) say how long the sender was
//! stuck on the receive window or its send buffer; retransmitted bytes that were lost on the path
//! (not at a bottleneck queue the sender overran, see [`crate::phases`]) give the loss rate fed to
//! the loss model; process and host CPU say whether an end ran out of CPU. When none of them
//! points anywhere the path itself is the limit and we say so as information, not as a fault.
//! The finding texts live in [`crate::verdicts`], the cross-direction comparison in
//! [`crate::compare`], the formulas in [`crate::model`].

use pathdoc_core::CheckName;
use pathdoc_core::Finding;
use serde::{Deserialize, Serialize};

pub use crate::compare::{compare_cc, diagnose_asymmetry, CcRun, LOSS_ASYMMETRY};
pub use crate::model::*;
use crate::phases::{queue_threshold_us, LossClass, Phases};
use crate::spec::Direction;
use crate::verdicts;

/// Name of this check in findings and in `report.data`.
pub const CHECK: CheckName = CheckName::Throughput;

/// Fraction of the sender's busy time stuck on a window or buffer that makes it "the limit".
pub const LIMITED_FRACTION: f64 = 0.2;
/// Process CPU, as a fraction of the cores the streams can use, that counts as CPU-bound.
pub const CPU_BOUND_FRACTION: f64 = 0.9;
/// Share of all a host's cores busy (any process, softirq, steal) that leaves no CPU to spare.
pub const HOST_BUSY_FRACTION: f64 = 0.9;
/// Path-loss share of sent bytes below which loss cannot be what limits a transfer.
pub const LOSS_THRESHOLD: f64 = 1e-4;
/// Loss at or above this share is a Fail (below it a Warn) when it limits the rate.
pub const LOSS_FAIL: f64 = 1e-3;
/// Slower direction below this share of the faster one is reported as asymmetric.
pub const ASYMMETRY_RATIO: f64 = 0.5;
/// The advertised window explains the rate when the rate reaches this share of window / RTT.
pub const WINDOW_EXPLAINS: f64 = 0.5;
/// Share of a busy host's cores the transfer must use itself for the host to be its limit.
pub const TRANSFER_CPU_SHARE: f64 = 0.15;
/// A window or buffer chronograph at or above this share of busy time is strong enough to be
/// judged even on a host without CPU to spare; below it a busy host makes it ambiguous.
pub const DOMINANT_FRACTION: f64 = 0.5;
/// A window at or above this share of its largest value is "open at its largest"; data in flight
/// at or above this share of it fills it.
pub const WINDOW_AT_MAX: f64 = 0.8;
/// The send buffer can cap the window only when the data in flight is at least this share of its
/// maximum.
pub const BUFFER_IN_FLIGHT: f64 = 0.25;
/// The send buffer binds when the congestion window exceeds the data in flight by this factor
/// (the congestion control would send more, the buffer holds it back).
pub const CWND_HEADROOM: f64 = 1.25;

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
    /// The host a remedy for this end is applied on.
    pub fn host(self) -> pathdoc_core::Host {
        match self {
            Side::Client => pathdoc_core::Host::Client,
            Side::Server => pathdoc_core::Host::Server,
        }
    }
}

/// One stream's figures in one interval (for per-stream tables).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamInterval {
    /// Stream index within its direction (0-based).
    pub stream: u32,
    pub goodput_bps: f64,
    pub retransmits: u64,
    pub cwnd_bytes: u64,
    pub rtt_us: u32,
}

/// Per-interval figures of one direction (all streams together).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub start_s: f64,
    pub end_s: f64,
    /// Payload bytes the receiver acknowledged in this interval, as bit/s.
    pub goodput_bps: f64,
    /// Estimated IP-layer rate including headers and retransmissions.
    pub wire_ip_bps: f64,
    /// Segments retransmitted in this interval (sender `tcpi_total_retrans` delta).
    pub retransmits: u64,
    /// Sum of the streams' congestion windows, bytes.
    pub cwnd_bytes: u64,
    /// Peer's advertised window (sum over streams), bytes.
    pub snd_wnd_bytes: u64,
    /// Smoothed RTT (mean over streams) at the end of the interval, µs.
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
    /// RTT variation (mean over streams), µs.
    #[serde(default)]
    pub rttvar_us: u32,
    /// Sender `tcpi_bytes_sent` / `tcpi_bytes_retrans` / `tcpi_dsack_dups` deltas.
    #[serde(default)]
    pub bytes_sent: u64,
    #[serde(default)]
    pub bytes_retrans: u64,
    #[serde(default)]
    pub dsack_dups: u64,
    /// Sender chronograph deltas (µs, summed over streams).
    #[serde(default)]
    pub busy_us: u64,
    #[serde(default)]
    pub rwnd_limited_us: u64,
    #[serde(default)]
    pub sndbuf_limited_us: u64,
    /// Some stream was still in its initial slow start at the end of the interval (its ssthresh
    /// not yet set). Model-based senders (BBR) never set it and stay `true` throughout.
    #[serde(default)]
    pub slow_start: bool,
    /// Share of all the sending / receiving host's cores busy in this interval (`/proc/stat`).
    #[serde(default)]
    pub sender_host_busy: Option<f64>,
    #[serde(default)]
    pub receiver_host_busy: Option<f64>,
    /// Each stream's share of the interval, when the direction has more than one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamInterval>,
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

/// CPU use of a whole host over the judged part of the test (from `/proc/stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCpuUse {
    /// Share of all cores not idle (any process, interrupts, softirq, steal), 0..1.
    pub busy: f64,
    /// Share of all cores a hypervisor gave to someone else while this machine wanted to run.
    pub steal: f64,
    /// Share of all cores in softirq (network receive and transmit processing).
    pub softirq: f64,
    pub cpus: u32,
}

/// Everything measured about one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionResult {
    pub direction: Direction,
    pub streams: u32,
    pub duration_s: f64,
    /// Payload bytes the receiver acknowledged (capped at what the sender wrote).
    pub payload_bytes: u64,
    /// Goodput over the whole test, slow start included.
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
    /// Slow start, steady state and loss classes, derived from `intervals` ([`crate::phases`]).
    #[serde(default)]
    pub phases: Phases,
    /// Whole-host CPU of the sending and receiving host over the judged part of the test.
    #[serde(default)]
    pub sender_host_cpu: Option<HostCpuUse>,
    #[serde(default)]
    pub receiver_host_cpu: Option<HostCpuUse>,
    /// Whether client and server ran on one host (same kernel), `None` when the server did not say.
    #[serde(default)]
    pub same_host: Option<bool>,
    /// The bottleneck's capacity from a packet-train probe before the test ([`crate::train`]),
    /// when one ran (download only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<crate::train::CapacityProbe>,
}

impl DirectionResult {
    /// Whether any payload crossed: a direction without it gets `no-data` and nothing else.
    pub fn delivered(&self) -> bool {
        self.duration_s > 0.0 && self.payload_bytes > 0
    }

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
    /// Share of sent bytes lost on the path (not at a queue the sender overran). Without
    /// per-interval samples every loss counts as path loss.
    pub fn path_loss_share(&self) -> f64 {
        if self.intervals.is_empty() {
            self.loss_share()
        } else {
            self.phases.loss.path_share
        }
    }
    /// Recompute [`Self::phases`] from the intervals (after building or editing them).
    pub fn with_phases(mut self) -> Self {
        let reports_slow_start =
            loss_model_rate(&self.sender.congestion_control, 1, 1.0, 1.0).is_some();
        self.phases = crate::phases::phases(
            &self.intervals,
            self.sender.min_rtt_us,
            self.sender.snd_mss,
            reports_slow_start,
        );
        self
    }
    pub(crate) fn min_rtt_s(&self) -> f64 {
        f64::from(self.sender.min_rtt_us.max(1)) / 1e6
    }
    pub(crate) fn mean_rtt_s(&self) -> f64 {
        f64::from(self.sender.mean_rtt_us.max(self.sender.min_rtt_us).max(1)) / 1e6
    }
    /// The core report's direction for this one.
    pub fn core_direction(&self) -> pathdoc_core::Direction {
        self.direction.core()
    }
    /// "upload" or "download, 4 streams".
    pub(crate) fn what(&self) -> String {
        let s = if self.streams == 1 {
            String::new()
        } else {
            format!(", {} streams", self.streams)
        };
        format!("{}{s}", self.direction.short())
    }
}

/// The figures every verdict of one direction is judged on: the steady state when one was
/// reached, else the whole test (and the findings say so).
#[derive(Debug, Clone, PartialEq)]
pub struct Basis {
    pub steady: bool,
    /// What the figures cover, for texts: "steady state (1.0–5.0 s)" or "whole test".
    pub label: String,
    /// The same for titles: "in the steady state" or "over the whole test".
    pub short: &'static str,
    pub rate_bps: f64,
    /// Smoothed RTT the transfer ran at (steady median, or whole-test mean), seconds.
    pub rtt_s: f64,
    pub min_rtt_s: f64,
    pub queue_delay_s: f64,
    pub standing_queue: bool,
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// Lost (net of DSACK) and path-lost bytes over bytes sent.
    pub loss_share: f64,
    pub path_loss_share: f64,
    /// Whether a loss burst at a full queue fell into the judged part.
    pub overflow_loss: bool,
    pub cwnd_bytes: u64,
    pub snd_wnd_bytes: u64,
    /// Process CPU in cores over the judged part.
    pub sender_cpu_cores: Option<f64>,
    pub receiver_cpu_cores: Option<f64>,
}

impl Basis {
    pub fn of(d: &DirectionResult) -> Basis {
        let min_rtt_s = d.min_rtt_s();
        let threshold = f64::from(queue_threshold_us(d.sender.min_rtt_us)) / 1e6;
        if let Some(s) = &d.phases.steady {
            let part = &d.intervals[s.first_interval.min(d.intervals.len())..];
            let rtt_s = f64::from(s.rtt_us.max(d.sender.min_rtt_us).max(1)) / 1e6;
            return Basis {
                steady: true,
                label: format!("steady state ({:.1}–{:.1} s)", s.start_s, s.end_s),
                short: "in the steady state",
                rate_bps: s.goodput_bps,
                rtt_s,
                min_rtt_s,
                queue_delay_s: f64::from(s.queue_delay_us) / 1e6,
                standing_queue: s.standing_queue,
                busy_us: s.busy_us,
                rwnd_limited_us: s.rwnd_limited_us,
                sndbuf_limited_us: s.sndbuf_limited_us,
                loss_share: s.loss_share(),
                path_loss_share: s.path_loss_share(),
                overflow_loss: s.lost_bytes > s.path_lost_bytes,
                cwnd_bytes: s.cwnd_bytes,
                snd_wnd_bytes: s.snd_wnd_bytes,
                sender_cpu_cores: mean_cores(part, |i| i.sender_cpu_cores).or(d.sender_cpu_cores),
                receiver_cpu_cores: mean_cores(part, |i| i.receiver_cpu_cores)
                    .or(d.receiver_cpu_cores),
            };
        }
        let rtt_s = d.mean_rtt_s();
        let queue_delay_s = (rtt_s - min_rtt_s).max(0.0);
        Basis {
            steady: false,
            label: "whole test".to_string(),
            short: "over the whole test",
            rate_bps: d.goodput_bps,
            rtt_s,
            min_rtt_s,
            queue_delay_s,
            standing_queue: d.sender.min_rtt_us > 0 && queue_delay_s >= threshold,
            busy_us: d.sender.busy_us,
            rwnd_limited_us: d.sender.rwnd_limited_us,
            sndbuf_limited_us: d.sender.sndbuf_limited_us,
            loss_share: d.loss_share(),
            path_loss_share: d.path_loss_share(),
            overflow_loss: d.phases.loss.overflow_segments > 0,
            cwnd_bytes: d.sender.max_cwnd_bytes,
            snd_wnd_bytes: d.sender.max_snd_wnd * u64::from(d.streams.max(1)),
            sender_cpu_cores: d.sender_cpu_cores,
            receiver_cpu_cores: d.receiver_cpu_cores,
        }
    }
    fn fraction(&self, part: u64) -> f64 {
        if self.busy_us == 0 {
            0.0
        } else {
            part as f64 / self.busy_us as f64
        }
    }
    pub fn rwnd_fraction(&self) -> f64 {
        self.fraction(self.rwnd_limited_us)
    }
    pub fn sndbuf_fraction(&self) -> f64 {
        self.fraction(self.sndbuf_limited_us)
    }
    /// Bytes in flight at the judged rate and RTT.
    pub fn in_flight_bytes(&self) -> f64 {
        bdp_bytes(self.rate_bps, self.rtt_s)
    }
}

fn mean_cores(part: &[Interval], f: impl Fn(&Interval) -> Option<f64>) -> Option<f64> {
    let (mut sum, mut time) = (0.0, 0.0);
    for i in part {
        if let Some(c) = f(i) {
            let dt = i.end_s - i.start_s;
            sum += c * dt;
            time += dt;
        }
    }
    (time > 0.0).then(|| sum / time)
}

/// Why a direction counts as CPU-limited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CpuCause {
    /// The sending or receiving process used ≥ 90 % of the cores its streams can use.
    Process { side: Side, cores: f64, cpus: u32 },
    /// Client and server share one host and their processes together used ≥ 90 % of it.
    SharedHost { cores: f64, cpus: u32 },
    /// A whole host had no CPU to spare, and the transfer shows a host-side symptom.
    Host { side: Side, usage: HostCpuUse },
}

/// What limits one direction (at most one verdict).
#[derive(Debug, Clone, PartialEq)]
pub enum Limit {
    Cpu(CpuCause),
    ReceiveWindow,
    SendBuffer,
    Loss { model_bps: f64 },
    Policer(crate::policer::Policed),
    Path,
}

/// The limit the numbers support, checked in this order: a busy process, the receive window, a
/// policer, path loss, a host without CPU to spare, the send buffer; otherwise the path.
pub fn limit(d: &DirectionResult, b: &Basis) -> Limit {
    if let Some(cause) = process_cpu_bound(d, b) {
        return Limit::Cpu(cause);
    }
    if receive_window_bound(d, b) {
        return Limit::ReceiveWindow;
    }
    if let Some(p) = crate::policer::policed(d, b) {
        return Limit::Policer(p);
    }
    if let Some(model_bps) = loss_bound(d, b) {
        return Limit::Loss { model_bps };
    }
    if let Some(cause) = host_cpu_bound(d, b) {
        return Limit::Cpu(cause);
    }
    if send_buffer_bound(d, b) {
        return Limit::SendBuffer;
    }
    Limit::Path
}

/// Cores the streams of one process can use on a host with `cpus` CPUs.
fn usable_cores(streams: u32, cpus: u32) -> f64 {
    f64::from(streams.min(cpus.max(1)))
}

fn process_cpu_bound(d: &DirectionResult, b: &Basis) -> Option<CpuCause> {
    let bound = |cores: Option<f64>, cpus: u32| {
        cores.filter(|&c| c >= CPU_BOUND_FRACTION * usable_cores(d.streams, cpus))
    };
    if let Some(cores) = bound(b.sender_cpu_cores, d.sender_cpus) {
        return Some(CpuCause::Process {
            side: d.sender_side,
            cores,
            cpus: d.sender_cpus,
        });
    }
    if let Some(cores) = bound(b.receiver_cpu_cores, d.receiver_cpus) {
        return Some(CpuCause::Process {
            side: d.receiver_side,
            cores,
            cpus: d.receiver_cpus,
        });
    }
    if d.same_host == Some(true) {
        let cpus = d.sender_cpus.max(1);
        let both = b.sender_cpu_cores.unwrap_or(0.0) + b.receiver_cpu_cores.unwrap_or(0.0);
        if both >= CPU_BOUND_FRACTION * usable_cores(2 * d.streams, cpus) {
            return Some(CpuCause::SharedHost { cores: both, cpus });
        }
    }
    None
}

/// Window / RTT ceiling of the judged window, bit/s.
pub fn window_ceiling_bps(b: &Basis) -> f64 {
    b.snd_wnd_bytes as f64 * 8.0 / b.rtt_s
}

/// The receive window limits the transfer when it is open at its largest (its size, not a
/// receiver too slow to read, is the limit) and either the chronograph says so and the window
/// explains the rate, or the window is full of data in flight while the congestion window would
/// send more. The second holds even when the chronograph under-counts (it runs only while the
/// sender has nothing else stopping it).
fn receive_window_bound(d: &DirectionResult, b: &Basis) -> bool {
    let wnd = b.snd_wnd_bytes as f64;
    let known = b.snd_wnd_bytes > 0;
    let at_max = !known
        || wnd >= WINDOW_AT_MAX * (d.sender.max_snd_wnd * u64::from(d.streams.max(1))) as f64;
    let chrono = d.sender.has_chronographs
        && b.rwnd_fraction() >= LIMITED_FRACTION
        && b.rwnd_fraction() >= b.sndbuf_fraction()
        && (!known || b.rate_bps >= WINDOW_EXPLAINS * window_ceiling_bps(b));
    let full = known
        && b.in_flight_bytes() >= WINDOW_AT_MAX * wnd
        && b.cwnd_bytes as f64 >= CWND_HEADROOM * wnd;
    at_max && (chrono || full)
}

/// The loss model's rate for this direction's streams, when path loss explains the rate: enough
/// path loss, no standing queue (a full bottleneck means the link, not loss, sets the rate), a
/// loss-based sender, and the measured rate within [`MODEL_FACTOR`] of the model.
fn loss_bound(d: &DirectionResult, b: &Basis) -> Option<f64> {
    if b.path_loss_share < LOSS_THRESHOLD || b.standing_queue {
        return None;
    }
    let model = loss_model_rate(
        &d.sender.congestion_control,
        d.sender.snd_mss,
        b.rtt_s,
        b.path_loss_share,
    )? * f64::from(d.streams.max(1));
    within_model_factor(b.rate_bps, model).then_some(model)
}

/// A host without CPU to spare limits the transfer when a large part of its CPU went to the
/// transfer itself ([`TRANSFER_CPU_SHARE`]: the host's softirq share, where the kernel does its
/// network work, plus pathdoc's own processes on it), and nothing shows the path was full (no
/// standing queue, no loss at a full queue). A buffer or window that held the sender back most
/// of its busy time ([`DOMINANT_FRACTION`]) is judged as such even then. A host kept busy by
/// other work while a slow transfer barely touches it is not blamed.
fn host_cpu_bound(d: &DirectionResult, b: &Basis) -> Option<CpuCause> {
    if b.standing_queue || b.overflow_loss {
        return None;
    }
    let dominant = d.sender.has_chronographs
        && b.sndbuf_fraction().max(b.rwnd_fraction()) >= DOMINANT_FRACTION;
    if dominant {
        return None;
    }
    [
        (d.sender_side, d.sender_host_cpu),
        (d.receiver_side, d.receiver_host_cpu),
    ]
    .into_iter()
    .filter_map(|(side, u)| u.map(|u| (side, u)))
    .filter(|&(side, u)| {
        u.busy >= HOST_BUSY_FRACTION && transfer_cpu_share(d, b, side, u) >= TRANSFER_CPU_SHARE
    })
    .max_by(|a, b| a.1.busy.total_cmp(&b.1.busy))
    .map(|(side, usage)| CpuCause::Host { side, usage })
}

/// Share of a host's cores the transfer itself used: softirq plus pathdoc's processes on it.
pub fn transfer_cpu_share(d: &DirectionResult, b: &Basis, side: Side, u: HostCpuUse) -> f64 {
    let own = if d.same_host == Some(true) {
        b.sender_cpu_cores.unwrap_or(0.0) + b.receiver_cpu_cores.unwrap_or(0.0)
    } else if side == d.sender_side {
        b.sender_cpu_cores.unwrap_or(0.0)
    } else {
        b.receiver_cpu_cores.unwrap_or(0.0)
    };
    u.softirq + own / f64::from(u.cpus.max(1))
}

/// The most the sender's socket buffer may hold: twice an explicit `--window` (the kernel doubles
/// SO_SNDBUF), else the `tcp_wmem` maximum.
pub fn send_buffer_max(d: &DirectionResult) -> Option<u64> {
    d.window_option
        .map(|w| 2 * u64::from(w))
        .or(d.sender_tcp_wmem.map(|w| w[2]))
}

fn send_buffer_bound(d: &DirectionResult, b: &Basis) -> bool {
    d.sender.has_chronographs
        && b.sndbuf_fraction() >= LIMITED_FRACTION
        // The congestion control would have sent more: otherwise the congestion window, not
        // the buffer, held the data in flight.
        && (b.cwnd_bytes == 0 || b.cwnd_bytes as f64 >= CWND_HEADROOM * b.in_flight_bytes())
        // And the buffer is substantially full of data in flight (the kernel counts skb overhead
        // against the limit, so its payload capacity is roughly 50–95 % of it): a buffer far
        // from full cannot be what caps the window, whatever the chronograph says.
        && send_buffer_max(d)
            .is_none_or(|max| b.in_flight_bytes() >= BUFFER_IN_FLIGHT * max as f64)
}

/// Judge one direction: the rate itself plus at most one "limited by" verdict.
pub fn diagnose_direction(d: &DirectionResult) -> Vec<Finding> {
    let b = Basis::of(d);
    let mut findings = vec![verdicts::rate_finding(d, &b)];
    if !d.delivered() {
        findings.push(verdicts::no_data_finding(d));
        return findings;
    }
    let lim = limit(d, &b);
    findings.push(match &lim {
        Limit::Cpu(cause) => verdicts::cpu_finding(d, &b, *cause),
        Limit::ReceiveWindow => verdicts::rwnd_finding(d, &b),
        Limit::SendBuffer => verdicts::sndbuf_finding(d, &b),
        Limit::Loss { model_bps } => verdicts::loss_finding(d, &b, *model_bps),
        Limit::Policer(p) => crate::policer::policer_finding(d, &b, p),
        Limit::Path => verdicts::path_finding(d, &b),
    });
    findings.extend(crate::shared::shared_finding(d, &b, &lim));
    findings.extend(crate::latency::latency_finding(d, &b));
    findings
}

/// Whether the loss of a direction is worth naming, and how: its class and share.
pub fn loss_class(d: &DirectionResult) -> LossClass {
    if d.intervals.is_empty() {
        if d.loss_share() >= LOSS_THRESHOLD {
            LossClass::Path
        } else {
            LossClass::None
        }
    } else {
        d.phases.loss.class
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::phases::tests::intervals;
    use pathdoc_core::Status;

    /// A clean 1-stream CUBIC download at `goodput` over a 100 ms path, five 1-s intervals, with
    /// no loss and no queue.
    pub(crate) fn direction(goodput: f64) -> DirectionResult {
        let rows: Vec<_> = (0..5).map(|_| (goodput / 1e6, 0, 101.0, false)).collect();
        let mut iv = intervals(&rows);
        for i in &mut iv {
            i.cwnd_bytes = 4 << 20;
            i.snd_wnd_bytes = 64 << 20;
            i.sender_cpu_cores = Some(0.1);
            i.receiver_cpu_cores = Some(0.1);
            i.sender_host_busy = Some(0.2);
            i.receiver_host_busy = Some(0.2);
        }
        let sent: u64 = iv.iter().map(|i| i.bytes_sent).sum();
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
                bytes_sent: sent,
                bytes_acked: sent,
                busy_us: 5_000_000,
                min_rtt_us: 100_000,
                mean_rtt_us: 101_000,
                snd_mss: 1448,
                pmtu: 1500,
                timestamps: true,
                max_snd_wnd: 64 << 20,
                max_cwnd_bytes: 4 << 20,
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
            sender_tcp_wmem: Some([4096, 16384, 524288]),
            window_option: None,
            intervals: iv,
            phases: Phases::default(),
            sender_host_cpu: Some(HostCpuUse {
                busy: 0.2,
                cpus: 2,
                ..HostCpuUse::default()
            }),
            receiver_host_cpu: Some(HostCpuUse {
                busy: 0.2,
                cpus: 2,
                ..HostCpuUse::default()
            }),
            same_host: Some(false),
            capacity: None,
        }
        .with_phases()
    }

    /// Set every interval's figure with `f`, then recompute totals that depend on it.
    pub(crate) fn each(d: &mut DirectionResult, f: impl Fn(usize, &mut Interval)) {
        for (k, i) in d.intervals.iter_mut().enumerate() {
            f(k, i);
        }
        let sum = |g: fn(&Interval) -> u64| d.intervals.iter().map(g).sum::<u64>();
        d.sender.bytes_retrans = sum(|i| i.bytes_retrans);
        d.sender.retransmits = sum(|i| i.retransmits);
        d.sender.rwnd_limited_us = sum(|i| i.rwnd_limited_us);
        d.sender.sndbuf_limited_us = sum(|i| i.sndbuf_limited_us);
        d.sender.dsack_dups = sum(|i| i.dsack_dups);
        d.sender.max_snd_wnd = d
            .intervals
            .iter()
            .map(|i| i.snd_wnd_bytes)
            .max()
            .unwrap_or(0)
            / u64::from(d.streams.max(1));
        *d = d.clone().with_phases();
    }

    fn verdict(d: &DirectionResult) -> (String, Status) {
        let f = diagnose_direction(d);
        assert_eq!(f[0].id, "download-rate");
        assert!(f
            .iter()
            .all(|x| x.direction == Some(pathdoc_core::Direction::ServerToClient)));
        (f[1].id.clone(), f[1].status)
    }

    /// A loss-based sender at `mbit` Mbit/s losing `segments` in every interval `every` (1: all).
    fn lossy(d: &mut DirectionResult, mbit: f64, segments: u64, every: usize) {
        d.goodput_bps = mbit * 1e6;
        each(d, |k, i| {
            i.goodput_bps = mbit * 1e6;
            let lost = if k % every == every - 1 { segments } else { 0 };
            i.retransmits = lost;
            i.bytes_retrans = lost * 1448;
            i.bytes_sent = (mbit * 1e6 / 8.0) as u64 + lost * 1448;
        });
    }

    #[test]
    fn verdict_table() {
        type Tweak = fn(&mut DirectionResult);
        // Mathis at 101 ms: 1448 B × 8 / 0.101 s × 1.22 / √p. At 4 Mbit/s, 2 segments lost per
        // second (p = 0.58 %) allow 1.84 Mbit/s: within the factor of 3, a Fail. At 11.6 Mbit/s
        // with one segment every other second (p = 0.05 %) they allow 6.3 Mbit/s: a Warn.
        let cases: &[(&str, Tweak, &str, Status)] = &[
            ("clean", |_| {}, "link-limited", Status::Pass),
            (
                "rwnd that explains the rate",
                |d| each(d, |_, i| {
                    i.rwnd_limited_us = 800_000;
                    i.snd_wnd_bytes = 262_144;
                }),
                "receive-window-limited",
                Status::Fail,
            ),
            (
                "window full of data in flight, cwnd above it, chronograph under-counting",
                |d| each(d, |_, i| {
                    i.rwnd_limited_us = 150_000;
                    i.snd_wnd_bytes = 262_144;
                    i.cwnd_bytes = 600_000;
                }),
                "receive-window-limited",
                Status::Fail,
            ),
            (
                "a receiver too slow to read: its window shrank to a fraction of its largest",
                |d| each(d, |k, i| {
                    i.rwnd_limited_us = 800_000;
                    i.snd_wnd_bytes = if k == 0 { 4 << 20 } else { 262_144 };
                    i.cwnd_bytes = 600_000;
                }),
                "link-limited",
                Status::Pass,
            ),
            (
                "rwnd chronograph but a window far above the rate (a receiver that could not keep up)",
                |d| each(d, |_, i| i.rwnd_limited_us = 800_000),
                "link-limited",
                Status::Pass,
            ),
            (
                "rwnd below threshold",
                |d| each(d, |_, i| {
                    i.rwnd_limited_us = 100_000;
                    i.snd_wnd_bytes = 1 << 20;
                }),
                "link-limited",
                Status::Pass,
            ),
            (
                "rwnd only in slow start",
                |d| each(d, |k, i| {
                    if k == 0 {
                        i.rwnd_limited_us = 1_000_000;
                        i.slow_start = true;
                    }
                    i.snd_wnd_bytes = 1 << 20;
                }),
                "link-limited",
                Status::Pass,
            ),
            (
                "sndbuf",
                |d| each(d, |_, i| i.sndbuf_limited_us = 600_000),
                "send-buffer-limited",
                Status::Fail,
            ),
            (
                "sndbuf chronograph with the buffer far from full of data in flight",
                |d| {
                    d.sender_tcp_wmem = Some([4096, 16384, 64 << 20]);
                    each(d, |_, i| i.sndbuf_limited_us = 600_000);
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "sndbuf chronograph while the congestion window holds the data in flight",
                |d| each(d, |_, i| {
                    i.sndbuf_limited_us = 600_000;
                    i.cwnd_bytes = 260_000;
                }),
                "link-limited",
                Status::Pass,
            ),
            ("random loss", |d| lossy(d, 4.0, 2, 1), "loss-limited", Status::Fail),
            ("light loss", |d| lossy(d, 11.6, 1, 2), "loss-limited", Status::Warn),
            (
                "loss with a standing queue (the bottleneck is full)",
                |d| {
                    lossy(d, 4.0, 2, 1);
                    each(d, |_, i| i.rtt_us = 180_000);
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "loss too light to hold the rate (5× the model)",
                |d| lossy(d, 20.0, 2, 1),
                "link-limited",
                Status::Pass,
            ),
            (
                "a rate far below what the loss allows",
                |d| lossy(d, 0.3, 1, 2),
                "link-limited",
                Status::Pass,
            ),
            (
                "spurious retransmissions (DSACK)",
                |d| {
                    lossy(d, 4.0, 2, 1);
                    each(d, |_, i| i.dsack_dups = 2);
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "BBR does not back off on loss",
                |d| {
                    lossy(d, 4.0, 2, 1);
                    d.sender.congestion_control = "bbr".into();
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "slow-start overshoot only",
                |d| each(d, |k, i| {
                    if k == 0 {
                        i.retransmits = 400;
                        i.bytes_retrans = 400 * 1448;
                        i.rtt_us = 180_000;
                    }
                }),
                "link-limited",
                Status::Pass,
            ),
            ("tiny loss", |d| each(d, |k, i| if k == 3 {
                i.retransmits = 1;
                i.bytes_retrans = 100;
            }), "link-limited", Status::Pass),
            (
                "receiver process cpu",
                |d| each(d, |_, i| i.receiver_cpu_cores = Some(0.95)),
                "cpu-limited",
                Status::Warn,
            ),
            (
                "process cpu beats rwnd",
                |d| each(d, |_, i| {
                    i.receiver_cpu_cores = Some(0.99);
                    i.rwnd_limited_us = 800_000;
                    i.snd_wnd_bytes = 262_144;
                }),
                "cpu-limited",
                Status::Warn,
            ),
            (
                "two streams, one core busy",
                |d| {
                    d.streams = 2;
                    each(d, |_, i| i.sender_cpu_cores = Some(1.0));
                },
                "link-limited",
                Status::Pass,
            ),
            (
                "client and server on one 2-core host: 105 % + 91 %",
                |d| {
                    d.same_host = Some(true);
                    each(d, |_, i| {
                        i.sender_cpu_cores = Some(1.05);
                        i.receiver_cpu_cores = Some(0.91);
                    });
                    d.streams = 2;
                },
                "cpu-limited",
                Status::Warn,
            ),
            (
                "host without CPU to spare, much of it for the transfer, and a full send buffer",
                |d| {
                    d.sender_host_cpu = Some(HostCpuUse { busy: 0.98, softirq: 0.2, cpus: 2, steal: 0.0 });
                    each(d, |_, i| i.sndbuf_limited_us = 300_000);
                },
                "cpu-limited",
                Status::Warn,
            ),
            (
                "loopback: one host at 100 %, its processes and softirq busy, sender out of data",
                |d| {
                    d.same_host = Some(true);
                    d.sender_host_cpu = Some(HostCpuUse { busy: 1.0, softirq: 0.12, cpus: 2, steal: 0.0 });
                    d.receiver_host_cpu = d.sender_host_cpu;
                    each(d, |_, i| {
                        i.sender_cpu_cores = Some(0.33);
                        i.receiver_cpu_cores = Some(0.29);
                        i.busy_us = 870_000;
                    });
                },
                "cpu-limited",
                Status::Warn,
            ),
            (
                "host busy with other work, the transfer barely touches it, send buffer 30 %",
                |d| {
                    d.sender_host_cpu = Some(HostCpuUse { busy: 1.0, softirq: 0.03, cpus: 2, steal: 0.0 });
                    each(d, |_, i| i.sndbuf_limited_us = 300_000);
                },
                "send-buffer-limited",
                Status::Fail,
            ),
            (
                "busy host but the transfer fills the path (standing queue)",
                |d| {
                    d.sender_host_cpu = Some(HostCpuUse { busy: 0.98, softirq: 0.2, cpus: 2, steal: 0.0 });
                    each(d, |_, i| {
                        i.sndbuf_limited_us = 300_000;
                        i.rtt_us = 180_000;
                    });
                },
                "send-buffer-limited",
                Status::Fail,
            ),
            (
                "busy host, but the send buffer held the sender back most of the time",
                |d| {
                    d.sender_host_cpu = Some(HostCpuUse { busy: 1.0, softirq: 0.2, cpus: 2, steal: 0.0 });
                    each(d, |_, i| i.sndbuf_limited_us = 730_000);
                },
                "send-buffer-limited",
                Status::Fail,
            ),
            (
                "busy host, little of it for the transfer",
                |d| d.receiver_host_cpu.as_mut().unwrap().busy = 0.99,
                "link-limited",
                Status::Pass,
            ),
            (
                "no chronographs",
                |d| {
                    d.sender.has_chronographs = false;
                    each(d, |_, i| i.rwnd_limited_us = 800_000);
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
    fn verdicts_without_intervals_fall_back_to_totals() {
        let mut d = direction(4e6);
        d.intervals.clear();
        d = d.with_phases();
        assert!(d.phases.steady.is_none());
        assert_eq!(verdict(&d).0, "link-limited");
        d.sender.bytes_retrans = d.sender.bytes_sent / 800; // 0.125 %
        assert_eq!(verdict(&d), ("loss-limited".into(), Status::Fail));
        d.sender.mean_rtt_us = 180_000;
        assert_eq!(verdict(&d).0, "link-limited", "mean RTT shows a queue");
    }

    #[test]
    fn rwnd_finding_names_bdp_and_the_exact_sysctl() {
        let mut d = direction(20e6);
        each(&mut d, |_, i| {
            i.rwnd_limited_us = 900_000;
            i.snd_wnd_bytes = 262_144;
        });
        let f = &diagnose_direction(&d)[1];
        assert_eq!(f.id, "receive-window-limited");
        let cmd = f.remedies[0].command.as_deref().unwrap();
        assert_eq!(cmd, "sysctl -w net.ipv4.tcp_rmem=\"4096 131072 33554432\"");
        assert_eq!(f.remedies[0].host, Some(pathdoc_core::Host::Client));
        assert!(f.title.contains("client"), "{}", f.title);
        assert!(f.summary.contains("12.0 MiB"), "{}", f.summary);
        assert!(f
            .evidence
            .iter()
            .any(|e| e.name.contains("bandwidth-delay")));
    }

    #[test]
    fn every_remedy_names_its_host() {
        let tweaks: &[fn(&mut DirectionResult)] = &[
            |d| {
                each(d, |_, i| {
                    i.rwnd_limited_us = 900_000;
                    i.snd_wnd_bytes = 262_144;
                })
            },
            |d| each(d, |_, i| i.sndbuf_limited_us = 600_000),
            |d| lossy(d, 4.0, 2, 1),
            |d| {
                lossy(d, 4.0, 2, 1);
                d.sender.congestion_control = "reno".into();
            },
            |d| each(d, |_, i| i.sender_cpu_cores = Some(1.0)),
            |d| {
                d.receiver_host_cpu = Some(HostCpuUse {
                    busy: 0.98,
                    softirq: 0.3,
                    cpus: 2,
                    steal: 0.0,
                });
                each(d, |_, i| i.sndbuf_limited_us = 300_000);
            },
        ];
        for t in tweaks {
            let mut d = direction(20e6);
            t(&mut d);
            let f = diagnose_direction(&d);
            assert!(!f[1].remedies.is_empty(), "{}", f[1].id);
            for r in f.iter().flat_map(|x| &x.remedies) {
                assert!(r.host.is_some(), "{}: {}", f[1].id, r.description);
            }
        }
    }
}
