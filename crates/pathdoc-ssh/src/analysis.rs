//! One verdict per direction: which of the four limits caps SSH bulk transfers here, with the
//! numbers and the fix. Pure functions over measured [`Transfer`]s and the raw TCP rate.
//!
//! The four limits and their signatures (reference: PSC HPN-SSH notes, OpenSSH `channels.h`):
//! - **cipher/CPU** — the `ssh` or `sshd` doing the crypto runs at ≈ 100 % of what it may use
//!   (one core, or its cgroup's cap); another cipher moves more bytes per CPU-second.
//! - **channel window** — the rate sits at window/RTT (OpenSSH: 2 MiB since 4.7), the CPUs are
//!   mostly idle, TCP is not held back by its own buffers, and raw TCP is much faster.
//! - **TCP buffers** — the sender's TCP spends much of the time limited by the receiver's
//!   window (`tcpi_rwnd_limited`) or its own send buffer (`tcpi_sndbuf_limited`).
//! - **network** — raw TCP on the same path is no faster: SSH is not the problem.

use pathdoc_core::units::{format_byte_rate, format_bytes, format_rate};
use pathdoc_core::CheckName;
use pathdoc_core::{Evidence, Finding, FindingId, Host, Quantity, Remedy, Status};
use serde::{Deserialize, Serialize};

use crate::steady::{SideCpu, Steady, Way};
use crate::transfer::Transfer;

pub const CHECK: CheckName = CheckName::Ssh;

/// Every finding id `pathdoc ssh` emits, with when and which statuses (docs/output.md lists
/// them; the finding-id test keeps code, registry and docs equal). The verdict ids appear once
/// per measured direction, told apart by the finding's `direction` field.
pub const FINDING_IDS: &[FindingId] = &[
    FindingId {
        id: "ssh-versions",
        meaning: "both ends' SSH software, and whether it is HPN-SSH (dynamic channel window) or stock OpenSSH (fixed 2 MiB window): INFO",
    },
    FindingId {
        id: "ssh-cpu-limited",
        meaning: "the ssh or sshd doing the crypto ran at ≥ 85 % of the CPU it may use (one core, or its cgroup's cap): WARN when raw TCP on the path is faster (SSH below 80 % of it), with a faster cipher if one measured ≥ 15 % better; INFO otherwise",
    },
    FindingId {
        id: "ssh-window-limited",
        meaning: "the rate is at 70–120 % of the SSH channel window / RTT, the crypto CPUs are not saturated and raw TCP is ≥ 1.3× faster: WARN, with HPN-SSH on the receiver or parallel sessions",
    },
    FindingId {
        id: "ssh-tcp-buffer-limited",
        meaning: "the sender's TCP was held back by the receive window or send buffer ≥ 20 % of its busy time, or SSH is as fast as raw TCP that is itself buffer-limited: WARN, with the sysctl on the host whose buffer it is",
    },
    FindingId {
        id: "ssh-network-limited",
        meaning: "SSH reaches ≥ 80 % of raw TCP on the same path: the network, not SSH, sets the rate: PASS",
    },
    FindingId {
        id: pathdoc_core::report::CHECK_INTERRUPTED,
        meaning: "Ctrl-C/SIGTERM cut the direction's transfer before it had 1 s of steady samples: no verdict is drawn from less: INCONCLUSIVE",
    },
    FindingId {
        id: pathdoc_core::report::CHECK_NOT_RUN,
        meaning: "the direction's transfers never started: the run was interrupted first: INFO",
    },
    FindingId {
        id: "ssh-cipher-faster-unproven",
        meaning: "no limit proven (e.g. a busy host where the CPU rule cannot be shown) but a cipher measured ≥ 1.3× the default's rate in the same run: WARN, hedged, with the figures and the cipher to try",
    },
    FindingId {
        id: "ssh-next-step",
        meaning: "after `check --ssh`/`speed --ssh`: for SSH transfers to this host run `pathdoc ssh [user@]host[:port]` (the ssh options kept): INFO",
    },
    FindingId {
        id: "ssh-keepalive-next-step",
        meaning: "after `check --ssh` with an idle FAIL: the ServerAliveInterval stanza for this host in the user's ~/.ssh/config: INFO",
    },
    FindingId {
        id: "ssh-limit-inconclusive",
        meaning: "no SSH transfer in the direction could be measured, or no single limit explains the rate (with what was seen): INCONCLUSIVE",
    },
];
/// A crypto process at or above this share of its CPU allowance is the bottleneck.
pub const CPU_SATURATED: f64 = 0.85;
/// The sender's TCP limited by a buffer for at least this share of its busy time: buffer-limited
/// (the threshold pathdoc-speed uses for raw TCP).
pub const BUFFER_LIMITED: f64 = pathdoc_speed::analysis::LIMITED_FRACTION;
/// The steady rate within this band of window/RTT matches the channel-window ceiling.
pub const WINDOW_BAND: (f64, f64) = (0.70, 1.20);
/// Raw TCP at least this much faster than SSH: SSH, not the network, is the limit.
pub const RAW_MUCH_FASTER: f64 = 1.30;
/// With no limit proven, a cipher measured at least this much faster than the default is still
/// worth a (hedged) WARN: on a busy host the CPU rule cannot be proven, and "rerun when quieter"
/// never converges on a NAS that is always busy.
pub const UNPROVEN_CIPHER_GAIN: f64 = 1.30;
/// SSH within this share of raw TCP: the network is the limit.
pub const NETWORK_SHARE: f64 = 0.80;
/// A cipher this much faster than the default is worth switching to.
pub const CIPHER_GAIN: f64 = 1.15;

/// The four limits (and "cannot tell").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    CipherCpu,
    ChannelWindow,
    TcpBuffer,
    Network,
    Inconclusive,
}

/// Which end a CPU limit is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

impl Side {
    fn host(self) -> Host {
        match self {
            Side::Client => Host::Client,
            Side::Server => Host::Server,
        }
    }
    fn process(self) -> &'static str {
        match self {
            Side::Client => "ssh (client)",
            Side::Server => "sshd (server)",
        }
    }
}

/// One cipher's result in one direction, for the comparison table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CipherResult {
    pub cipher: String,
    pub mac: Option<String>,
    pub default: bool,
    pub rate_bps: f64,
    /// The busier end's share of its CPU allowance.
    pub cpu_saturation: Option<f64>,
    /// Rate if that end ran at 100 % of its allowance (bytes per CPU-second × allowance).
    pub projected_bps: Option<f64>,
}

fn busiest(s: &Steady) -> Option<(Side, f64)> {
    let c = s.client.saturation().map(|x| (Side::Client, x));
    let v = s.server.saturation().map(|x| (Side::Server, x));
    match (c, v) {
        (Some(a), Some(b)) => Some(if b.1 >= a.1 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The comparison table of every cipher measured in `way`, fastest first.
pub fn cipher_table(way: Way, transfers: &[Transfer]) -> Vec<CipherResult> {
    let mut out: Vec<CipherResult> = transfers
        .iter()
        .filter(|t| t.way == way && judgeable(t))
        .filter_map(|t| {
            let st = t.steady.as_ref()?;
            let sat = busiest(st).map(|(_, s)| s);
            Some(CipherResult {
                cipher: t.cipher().unwrap_or("?").to_string(),
                mac: t.mac().filter(|m| *m != "<implicit>").map(str::to_string),
                default: t.requested_cipher.is_none(),
                rate_bps: st.rate_bps,
                cpu_saturation: sat,
                projected_bps: sat.filter(|s| *s >= 0.05).map(|s| st.rate_bps / s.min(1.0)),
            })
        })
        .collect();
    out.sort_by(|a, b| b.rate_bps.total_cmp(&a.rate_bps));
    out
}

/// Facts of one direction the verdict is drawn from.
pub struct DirectionInput<'a> {
    pub way: Way,
    /// Raw TCP goodput on the same path and direction (pathdoc's own stream).
    pub raw_bps: Option<f64>,
    /// pathdoc-speed's verdict on that raw stream (`receive-window-limited`, …).
    pub raw_limit: Option<&'a str>,
    /// Raw TCP over the whole test, slow start included (`raw_bps` is the steady state).
    pub raw_whole_test_bps: Option<f64>,
    /// What `raw_bps` covers: "steady state (1.0–4.0 s)" or "whole test".
    pub raw_basis: Option<&'a str>,
    pub transfers: &'a [Transfer],
    /// The far end's host name as the user wrote it (for config lines).
    pub host: &'a str,
    /// OpenSSH version strings, client and server.
    pub client_version: Option<&'a str>,
    pub server_version: Option<&'a str>,
}

/// The rate as bit/s and bytes/s, both labelled: a Gbit/s-vs-Gibit/s (iperf vs iftop) mix-up cannot happen.
fn rate_evidence(name: &str, bps: f64, detail: Option<String>) -> Vec<Evidence> {
    let mut bits = Evidence::new(format!("{name} (bit/s)"), Quantity::Goodput(bps));
    if let Some(d) = detail {
        bits = bits.with_detail(d);
    }
    vec![
        bits,
        Evidence::new(format!("{name} (bytes/s)"), Quantity::ByteRate(bps / 8.0)).with_detail(
            format!(
            "what scp and rsync print as \"{:.1}MB/s\" (they mean MiB/s); = {:.1} MB/s in SI units",
            bps / 8.0 / 1048576.0,
            bps / 8.0 / 1e6
        ),
        ),
    ]
}

fn pct(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

fn cpu_detail(c: &SideCpu) -> String {
    let mut parts = Vec::new();
    if let Some(l) = c.cgroup_limit {
        parts.push(format!("cgroup cap {} of a core", pct(l)));
    }
    if let Some(t) = c.cgroup_throttled {
        parts.push(format!("throttled in {} of scheduler periods", pct(t)));
    }
    if let Some(h) = c.host_busy {
        parts.push(format!(
            "whole machine {} busy over {} CPUs",
            pct(h),
            c.host_cpus.unwrap_or(0)
        ));
    }
    parts.join("; ")
}

/// A transfer the user interrupted is judged only when its steady part lasted this long: a
/// fraction of a second of samples says nothing about which limit holds.
pub const MIN_INTERRUPTED_STEADY_S: f64 = 1.0;

/// Whether a transfer has a steady part worth a verdict.
fn judgeable(t: &Transfer) -> bool {
    match &t.steady {
        None => false,
        Some(st) if t.interrupted() => st.to - st.from >= MIN_INTERRUPTED_STEADY_S,
        Some(_) => true,
    }
}

/// A direction whose transfers never started because the user interrupted the run first.
pub fn not_started_finding(way: Way) -> Finding {
    Finding::new(
        CHECK,
        pathdoc_core::report::CHECK_NOT_RUN,
        Status::Info,
        format!(
            "SSH {}: not measured, interrupted before it started",
            way.label()
        ),
    )
    .direction(way.direction())
}

/// Every transfer of the direction was cut by the user too early: what was measured, and why it
/// is not enough for a verdict.
fn interrupted_finding(way: Way, cut: &[&Transfer]) -> Finding {
    let steady_s = cut
        .iter()
        .filter_map(|t| t.steady.as_ref().map(|st| st.to - st.from))
        .fold(0.0, f64::max);
    let payload: u64 = cut.iter().map(|t| t.payload_bytes).sum();
    let seconds = cut.iter().map(|t| t.seconds).fold(0.0, f64::max);
    Finding::new(
        CHECK,
        pathdoc_core::report::CHECK_INTERRUPTED,
        Status::Inconclusive,
        format!("SSH {}: interrupted too early to judge", way.label()),
    )
    .direction(way.direction())
    .summary(format!(
        "The transfer was interrupted before it had {MIN_INTERRUPTED_STEADY_S:.0} s of steady samples; no verdict is drawn from less."
    ))
    .requirement(format!(
        "a verdict needs ≥ {MIN_INTERRUPTED_STEADY_S:.0} s of steady samples from a transfer the user cut short"
    ))
    .evidence(
        Evidence::new("steady samples before the interruption", Quantity::Seconds(steady_s))
            .with_detail("the longest steady window of the cut transfers (after the warm-up share)"),
    )
    .evidence(
        Evidence::new("payload moved before the interruption", Quantity::Bytes(payload))
            .with_detail(format!(
                "{} transfer(s), the longest {seconds:.2} s",
                cut.len()
            )),
    )
}

/// The verdict for one direction, in phases: choose the transfer to judge, read the basis of the
/// verdict from it, name what limits the rate, then the finding with its evidence.
pub fn diagnose_direction(input: &DirectionInput<'_>) -> Finding {
    let (def, st) = match judged_transfer(input) {
        Ok(chosen) => chosen,
        Err(no_verdict) => return *no_verdict,
    };
    let basis = Basis::of(input, def, st);
    let limit = basis.limit(input);
    // A buffer or window limit always costs throughput a fix would win back; a CPU limit only
    // matters when the network could carry more.
    let faster_unproven = match limit {
        Limit::Inconclusive if def.requested_cipher.is_none() => basis
            .table
            .iter()
            .find(|c| !c.default && c.rate_bps >= UNPROVEN_CIPHER_GAIN * basis.rate),
        _ => None,
    };
    let status = match limit {
        Limit::Network => Status::Pass,
        Limit::Inconclusive if faster_unproven.is_some() => Status::Warn,
        Limit::Inconclusive => Status::Inconclusive,
        Limit::TcpBuffer | Limit::ChannelWindow => Status::Warn,
        Limit::CipherCpu if basis.raw.is_some_and(|r| basis.rate < NETWORK_SHARE * r) => {
            Status::Warn
        }
        Limit::CipherCpu => Status::Info,
    };
    // Literal ids, so the finding-id test can read them (docs/output.md).
    let id = match limit {
        Limit::CipherCpu => "ssh-cpu-limited",
        Limit::ChannelWindow => "ssh-window-limited",
        Limit::TcpBuffer => "ssh-tcp-buffer-limited",
        Limit::Network => "ssh-network-limited",
        Limit::Inconclusive if faster_unproven.is_some() => "ssh-cipher-faster-unproven",
        Limit::Inconclusive => "ssh-limit-inconclusive",
    };
    let f = Finding::new(CHECK, id, status, String::new())
        .direction(input.way.direction())
        .evidences(shared_evidence(input, &basis));
    limit_verdict(f, input, &basis, limit, faster_unproven)
}

/// The transfer a direction is judged on and its steady part: the default cipher's if it can be
/// judged, else the first that can. Without one, the finding that says why there is no verdict.
fn judged_transfer<'a>(
    input: &DirectionInput<'a>,
) -> Result<(&'a Transfer, &'a Steady), Box<Finding>> {
    let way = input.way;
    let mine: Vec<&Transfer> = input.transfers.iter().filter(|t| t.way == way).collect();
    let judged = |t: &&'a Transfer| {
        t.steady
            .as_ref()
            .filter(|_| judgeable(t))
            .map(|st| (*t, st))
    };
    let chosen = mine
        .iter()
        .filter(|t| t.requested_cipher.is_none())
        .find_map(judged)
        .or_else(|| mine.iter().find_map(judged));
    if let Some(chosen) = chosen {
        return Ok(chosen);
    }
    if !mine.is_empty() && mine.iter().all(|t| t.interrupted()) {
        return Err(Box::new(interrupted_finding(way, &mine)));
    }
    let why: Vec<String> = mine
        .iter()
        .filter_map(|t| t.incomplete.as_ref().map(|i| i.to_string()))
        .collect();
    Err(Box::new(
        Finding::new(
            CHECK,
            "ssh-limit-inconclusive",
            Status::Inconclusive,
            format!("SSH {}: no transfer could be measured", way.label()),
        )
        .direction(way.direction())
        .summary(if why.is_empty() {
            "No SSH transfer in this direction produced enough samples to judge.".to_string()
        } else {
            format!("The SSH transfers did not complete: {}", why.join("; "))
        }),
    ))
}

/// What one direction's verdict is judged on: the chosen transfer's steady part, and what its
/// rate is compared with.
struct Basis<'a> {
    def: &'a Transfer,
    st: &'a Steady,
    cipher: String,
    /// Every cipher measured in this direction, fastest first.
    table: Vec<CipherResult>,
    /// The steady SSH rate, bit/s.
    rate: f64,
    /// Raw TCP on the same path, bit/s (absent or zero: not measured).
    raw: Option<f64>,
    /// The SSH channel window, bytes.
    window: Option<u64>,
    rtt_ms: Option<f64>,
    /// Window / RTT, bit/s.
    ceiling: Option<f64>,
    /// The rate's share of that ceiling.
    window_ratio: Option<f64>,
    /// The end whose CPU was busier, and its share of its allowance.
    cpu: Option<(Side, f64)>,
}

impl<'a> Basis<'a> {
    fn of(input: &DirectionInput<'_>, def: &'a Transfer, st: &'a Steady) -> Self {
        let rate = st.rate_bps;
        let window = def.window();
        let rtt_ms = st.rtt_ms.or(st.min_rtt_ms);
        let ceiling = match (window, rtt_ms) {
            (Some(w), Some(r)) if r > 0.0 => Some(w as f64 * 8.0 / (r / 1000.0)),
            _ => None,
        };
        Basis {
            def,
            st,
            cipher: def.cipher().unwrap_or("the negotiated cipher").to_string(),
            table: cipher_table(input.way, input.transfers),
            rate,
            raw: input.raw_bps.filter(|r| *r > 0.0),
            window,
            rtt_ms,
            ceiling,
            window_ratio: ceiling.map(|c| rate / c),
            cpu: busiest(st),
        }
    }

    /// What limits the rate, first match wins.
    fn limit(&self, input: &DirectionInput<'_>) -> Limit {
        let (rate, raw) = (self.rate, self.raw);
        let raw_buffer_limited = matches!(
            input.raw_limit,
            Some("receive-window-limited" | "send-buffer-limited")
        );
        if self.cpu.is_some_and(|(_, s)| s >= CPU_SATURATED) {
            Limit::CipherCpu
        } else if self
            .st
            .buffer_limited_of_busy()
            .is_some_and(|b| b >= BUFFER_LIMITED)
        {
            Limit::TcpBuffer
        } else if self
            .window_ratio
            .is_some_and(|r| (WINDOW_BAND.0..=WINDOW_BAND.1).contains(&r))
            && raw.is_some_and(|r| r >= RAW_MUCH_FASTER * rate)
        {
            Limit::ChannelWindow
        } else if raw.is_some_and(|r| rate >= NETWORK_SHARE * r) && raw_buffer_limited {
            // As fast as raw TCP, and raw TCP itself is held back by a TCP buffer.
            Limit::TcpBuffer
        } else if raw.is_some_and(|r| rate >= NETWORK_SHARE * r) {
            Limit::Network
        } else {
            Limit::Inconclusive
        }
    }
}

/// The limit's own text, remedies and evidence on top of the shared evidence in `f`.
fn limit_verdict(
    f: Finding,
    input: &DirectionInput<'_>,
    b: &Basis<'_>,
    limit: Limit,
    faster_unproven: Option<&CipherResult>,
) -> Finding {
    let (def, st, raw) = (b.def, b.st, b.raw);
    match limit {
        Limit::CipherCpu => cpu_verdict(
            f,
            input,
            def,
            st,
            b.cpu.map(|c| c.0).unwrap_or(Side::Server),
            &b.table,
            raw,
        ),
        Limit::ChannelWindow => window_verdict(
            f,
            input,
            st,
            b.window.unwrap_or(0),
            b.rtt_ms.unwrap_or(0.0),
            b.ceiling.unwrap_or(0.0),
            raw.unwrap_or(0.0),
        ),
        Limit::TcpBuffer => buffer_verdict(f, input, st, b.rtt_ms, raw),
        Limit::Network => network_verdict(f, input, b.rate, raw.unwrap_or(0.0), b.window_ratio),
        Limit::Inconclusive => {
            let reasons = unexplained_reasons(st, b.cpu, b.window_ratio, raw);
            match faster_unproven {
                Some(best) => faster_cipher_unproven_verdict(f, input, def, st, best, &reasons),
                None => inconclusive_verdict(f, input, st, &reasons),
            }
        }
    }
}

/// Evidence shared by every verdict: the rates, both ends' CPU, the connection's window and
/// RTT, and the cipher table.
fn shared_evidence(input: &DirectionInput<'_>, b: &Basis<'_>) -> Vec<Evidence> {
    let mut ev = rate_and_raw_evidence(input, b);
    ev.extend(cpu_evidence(b.st));
    ev.extend(connection_evidence(b));
    ev.extend(b.table.iter().map(cipher_evidence));
    ev
}

/// The steady SSH rate, the whole transfer's payload, and raw TCP on the same path.
fn rate_and_raw_evidence(input: &DirectionInput<'_>, b: &Basis<'_>) -> Vec<Evidence> {
    let (way, def, st, rate) = (input.way, b.def, b.st, b.rate);
    let mut ev = rate_evidence(
        &format!("SSH {} rate, steady ({})", way.label(), b.cipher),
        rate,
        Some(format!(
            "TCP bytes of the SSH connection from {:.1} s to {:.1} s of the transfer; SSH framing adds ≈ 0.1 %",
            st.from, st.to
        )),
    );
    ev.push(
        Evidence::new(
            format!("SSH {} payload, whole transfer", way.label()),
            Quantity::Bytes(def.payload_bytes),
        )
        .with_detail(format!(
            "{} bytes in {:.2} s = {} goodput (includes slow start{})",
            def.payload_bytes,
            def.seconds,
            format_rate(def.goodput_bps),
            if way == Way::Upload {
                " and the session's close"
            } else {
                ""
            }
        )),
    );
    if let Some(r) = b.raw {
        ev.push(
            Evidence::new(
                format!("raw TCP {} goodput, same path", way.label()),
                Quantity::Goodput(r),
            )
            .with_detail(format!(
                "pathdoc's own TCP stream through the temporary server, {} as `check --throughput` judges it{}: {:.1}× the SSH rate",
                input.raw_basis.unwrap_or("whole test"),
                input
                    .raw_whole_test_bps
                    .filter(|_| input.raw_basis.is_some_and(|b| b != "whole test"))
                    .map(|w| format!("; {} over the whole test incl. slow start", format_rate(w)))
                    .unwrap_or_default(),
                r / rate
            )),
        );
    }
    ev
}

/// CPU of `ssh` on the client and `sshd` on the server.
fn cpu_evidence(st: &Steady) -> Vec<Evidence> {
    let mut ev = Vec::new();
    if let Some(c) = st.client.ssh_process {
        ev.push(
            Evidence::new(
                "CPU of ssh on the client (share of one core)",
                Quantity::Percent(c * 100.0),
            )
            .with_detail(cpu_detail(&st.client)),
        );
    }
    if let Some(s) = st.server.ssh_process {
        let cmd = st
            .server
            .command
            .map(|c| format!("; the remote command (cat/head) {}", pct(c)))
            .unwrap_or_default();
        ev.push(
            Evidence::new(
                "CPU of sshd on the server (share of one core)",
                Quantity::Percent(s * 100.0),
            )
            .with_detail(format!("{}{cmd}", cpu_detail(&st.server))),
        );
    }
    ev
}

/// The SSH channel window, the connection's RTT and the ceiling they make, what held the
/// sending TCP back, and retransmissions.
fn connection_evidence(b: &Basis<'_>) -> Vec<Evidence> {
    let st = b.st;
    let mut ev = Vec::new();
    if let Some(w) = b.window {
        let how = match b.def.way {
            Way::Upload => "the server's window: ssh -vv `open confirm rwindow` + `rcvd adjust`",
            Way::Download => "the client's own window: ssh -vv `window … sent adjust …`",
        };
        ev.push(Evidence::new("SSH channel window", Quantity::Bytes(w)).with_detail(how));
    }
    if let Some(r) = b.rtt_ms {
        ev.push(
            Evidence::new("RTT of the SSH connection", Quantity::Seconds(r / 1000.0)).with_detail(
                format!(
                    "sender's smoothed RTT (TCP_INFO via sock_diag){}",
                    st.min_rtt_ms
                        .map(|m| {
                            format!(
                                "; minimum {}",
                                pathdoc_core::units::format_duration(
                                    std::time::Duration::from_secs_f64(m.max(0.0) / 1000.0)
                                )
                            )
                        })
                        .unwrap_or_default()
                ),
            ),
        );
    }
    if let (Some(c), Some(ratio)) = (b.ceiling, b.window_ratio) {
        ev.push(
            Evidence::new(
                pathdoc_core::check::evidence::WINDOW_RTT_CEILING,
                Quantity::Rate(c),
            )
            .with_detail(format!("the SSH rate is {} of it", pct(ratio))),
        );
    }
    if let (Some(rw), Some(sb), Some(busy)) = (
        st.rwnd_limited_share,
        st.sndbuf_limited_share,
        st.busy_share.filter(|b| *b > 0.0),
    ) {
        ev.push(
            Evidence::new(
                "sender TCP limited by the receive window (share of its busy time)",
                Quantity::Percent(rw / busy * 100.0),
            )
            .with_detail(format!(
                "tcpi_rwnd_limited / tcpi_busy_time; by its send buffer {} (tcpi_sndbuf_limited); busy {} of the time",
                pct(sb / busy),
                pct(busy)
            )),
        );
    }
    if let Some(r) = st.retransmits {
        ev.push(Evidence::new(
            "retransmitted segments (steady part)",
            Quantity::Count(r),
        ));
    }
    ev
}

/// One row of the cipher comparison table.
fn cipher_evidence(c: &CipherResult) -> Evidence {
    let name = format!(
        "{}{}{}",
        c.cipher,
        c.mac
            .as_deref()
            .map(|m| format!(" + {m}"))
            .unwrap_or_default(),
        if c.default {
            " (negotiated by default)"
        } else {
            ""
        }
    );
    let detail = match (c.cpu_saturation, c.projected_bps) {
        (Some(s), Some(p)) => format!(
            "{} ({}); busier end at {} of its CPU → ≈ {} if CPU were the only limit",
            format_rate(c.rate_bps),
            format_byte_rate(c.rate_bps / 8.0),
            pct(s),
            format_rate(p)
        ),
        _ => format!(
            "{} ({})",
            format_rate(c.rate_bps),
            format_byte_rate(c.rate_bps / 8.0)
        ),
    };
    Evidence::new(format!("cipher {name}"), Quantity::Goodput(c.rate_bps)).with_detail(detail)
}

/// Using a cipher: once per command, and for this host in ~/.ssh/config.
fn cipher_commands(host: &str, cipher: &str) -> String {
    format!(
        "ssh -c {cipher} {host} …\n{}",
        config_cipher_line(host, cipher)
    )
}

fn config_cipher_line(host: &str, first: &str) -> String {
    let others: Vec<&str> = [
        "aes128-gcm@openssh.com",
        "aes256-gcm@openssh.com",
        "chacha20-poly1305@openssh.com",
        "aes128-ctr",
    ]
    .into_iter()
    .filter(|c| *c != first)
    .collect();
    format!("Host {host}\n    Ciphers {first},{}", others.join(","))
}

fn plain_tcp_remedy(way: Way, host: &str) -> Remedy {
    let (recv, send) = match way {
        Way::Upload => ("on the server", "on the client"),
        Way::Download => ("on the client", "on the server"),
    };
    let peer = match way {
        Way::Upload => host.to_string(),
        Way::Download => "CLIENT".to_string(),
    };
    Remedy::new(format!(
        "Any single stream (zfs send, tar, a database dump): skip SSH for the bulk data and send it with mbuffer over plain TCP (receiver {recv}, sender {send}), as syncoid's --insecure-direct-connection does — not encrypted, so only on a network you trust or inside a WireGuard/VPN tunnel, which keeps it private without SSH's channel window"
    ))
    .on(Host::BothEnds)
    .with_command(format!(
        "receiver: mbuffer -q -s 128k -m 1G -I 9090 > DESTINATION\nsender:   SOURCE | mbuffer -q -s 128k -m 1G -O {peer}:9090"
    ))
}

/// Parallel sessions, by what the user sends: a file tree splits into files (rsync), one
/// `zfs send` stream cannot be split but each dataset is its own stream. A plain pipe from any
/// other producer gets the mbuffer/HPN-SSH remedies instead.
fn parallel_remedies(host: &str, per_stream: &str) -> Vec<Remedy> {
    vec![
        Remedy::new(format!(
            "File trees (rsync, scp -r): split the transfer across parallel SSH sessions; each gets its own {per_stream}, so N sessions carry about N times as much"
        ))
        .on(Host::Client)
        .with_command(format!("ls SRC | xargs -P 4 -I{{}} rsync -a SRC/{{}} {host}:DEST/")),
        Remedy::new(format!(
            "zfs send | ssh: one stream cannot be split, but each dataset is its own stream: send the datasets in parallel (parents received first), each with its own {per_stream}"
        ))
        .on(Host::Client)
        .with_command(format!(
            "zfs list -H -o name -t filesystem -r POOL/DATA | xargs -P 4 -I{{}} sh -c 'zfs send {{}}@SNAP | ssh {host} zfs receive -u -d BACKUP'"
        )),
    ]
}

fn cpu_verdict(
    f: Finding,
    input: &DirectionInput<'_>,
    def: &Transfer,
    st: &Steady,
    side: Side,
    table: &[CipherResult],
    raw: Option<f64>,
) -> Finding {
    let cipher = def.cipher().unwrap_or("the negotiated cipher");
    let side_cpu = match side {
        Side::Client => &st.client,
        Side::Server => &st.server,
    };
    let share = side_cpu.ssh_process.unwrap_or(0.0);
    // Under a cgroup cap the process shares the cap with the remote command: say so, with the
    // throttling that proves the cap was hit.
    let capped = match side_cpu.cgroup_limit {
        Some(l) => format!(
            " (with {} for the command it runs, in a cgroup capped at {} of a core{})",
            pct(side_cpu.command.unwrap_or(0.0)),
            pct(l),
            side_cpu
                .cgroup_throttled
                .map(|t| format!(", throttled in {} of scheduler periods", pct(t)))
                .unwrap_or_default()
        ),
        None => String::new(),
    };
    let best = table.first();
    let default_rate = st.rate_bps;
    let faster = best.filter(|b| b.cipher != cipher && b.rate_bps >= CIPHER_GAIN * default_rate);
    let mut summary = format!(
        "{} ran at {} of a core{capped} while SSH moved {} ({}) {} with {cipher}: the crypto process, not the network, sets the pace.",
        side.process(),
        pct(share),
        format_rate(default_rate),
        format_byte_rate(default_rate / 8.0),
        input.way.label(),
    );
    if let Some(r) = raw {
        summary.push_str(&format!(
            " Raw TCP on the same path reached {}.",
            format_rate(r)
        ));
    }
    let slowest = table.last();
    match (faster, slowest) {
        (Some(b), _) => summary.push_str(&format!(
            " {} is the fastest cipher both ends offer here: {} ({}), {:.2}× the default.",
            b.cipher,
            format_rate(b.rate_bps),
            format_byte_rate(b.rate_bps / 8.0),
            b.rate_bps / default_rate
        )),
        (None, Some(s)) if table.len() > 1 => match best.filter(|b| b.cipher != cipher) {
            Some(b) => summary.push_str(&format!(
                " {} measured {}, within {} of the default: no cipher is clearly faster here (slowest: {} at {}).",
                b.cipher,
                format_rate(b.rate_bps),
                pct(CIPHER_GAIN - 1.0),
                s.cipher,
                format_rate(s.rate_bps)
            )),
            None => summary.push_str(&format!(
                " The default is the fastest cipher measured (slowest: {} at {}).",
                s.cipher,
                format_rate(s.rate_bps)
            )),
        },
        _ => {}
    }
    let title = match faster {
        Some(b) => format!(
            "SSH {}: cipher/CPU-limited at {} by {} ({cipher}); {} is {:.2}× faster here",
            input.way.label(),
            format_rate(default_rate),
            side.process(),
            b.cipher,
            b.rate_bps / default_rate
        ),
        None => format!(
            "SSH {}: cipher/CPU-limited at {} by {} ({cipher})",
            input.way.label(),
            format_rate(default_rate),
            side.process()
        ),
    };
    let mut f = f
        .summary(summary)
        .requirement(format!(
            "a crypto process at ≥ {} of its CPU allowance is the bottleneck; projected rate = bytes per CPU-second × allowance",
            pct(CPU_SATURATED)
        ));
    f.title = title;
    if let Some(b) = faster {
        f = f.remedy(
            Remedy::new(format!(
                "Pick {} for bulk transfers (per command, or for this host in ~/.ssh/config)",
                b.cipher
            ))
            .on(Host::Client)
            .with_command(cipher_commands(input.host, &b.cipher)),
        );
    }
    if side_cpu.cgroup_limit.is_some() {
        f = f.remedy(
            Remedy::new("The process runs under a CPU cap (cgroup cpu.max / CPUQuota): raise it for sshd, or run bulk transfers outside it")
                .on(side.host())
                .with_command("systemctl set-property ssh.service CPUQuota=100%"),
        );
    }
    f.remedy(
        Remedy::new("HPN-SSH's parallel ChaCha20 (chacha20-poly1305-mt@hpnssh.org) spreads the cipher over several cores; it must run on the CPU-bound end and be offered by the other")
            .on(Host::BothEnds)
            .with_command(format!("hpnssh -oCiphers=chacha20-poly1305-mt@hpnssh.org {} …", input.host)),
    )
    .remedies(parallel_remedies(input.host, "CPU core for the cipher"))
    .remedy(
        Remedy::new("Decouple a bursty producer and consumer from SSH with mbuffer on both ends, so the cipher never waits on the disk")
            .on(Host::BothEnds)
            .with_command(format!("SOURCE | mbuffer -q -s 128k -m 256M | ssh {} 'mbuffer -q -s 128k -m 256M > DESTINATION'", input.host)),
    )
    .remedy(plain_tcp_remedy(input.way, input.host))
}

fn window_verdict(
    f: Finding,
    input: &DirectionInput<'_>,
    st: &Steady,
    window: u64,
    rtt_ms: f64,
    ceiling: f64,
    raw: f64,
) -> Finding {
    let (receiver, receiver_name) = match input.way {
        Way::Upload => (Host::Server, "the server (sshd receives)"),
        Way::Download => (Host::Client, "the client (ssh receives)"),
    };
    let cpu_note = match (st.client.ssh_process, st.server.ssh_process) {
        (Some(c), Some(s)) => format!(
            " ssh used {} and sshd {} of a core, so the CPU had room.",
            pct(c),
            pct(s)
        ),
        (Some(c), None) => format!(" ssh used {} of a core.", pct(c)),
        _ => String::new(),
    };
    let sftp = match input.client_version.and_then(crate::sshlog::SshLog::openssh_version) {
        Some((major, _)) if major >= 9 => " scp (OpenSSH ≥ 9.0 uses the SFTP protocol) and sftp add a second cap of their own: 64 requests × 32 KiB = 2 MiB in flight, also window/RTT.",
        _ => " sftp (and scp on OpenSSH ≥ 9.0) add a second 2 MiB-per-RTT cap of their own (64 × 32 KiB requests).",
    };
    let mut f = f
        .summary(format!(
            "SSH moved {} ({}) {}, {} of the ceiling its {} channel window allows at this RTT ({} / {:.1} ms = {}); raw TCP on the same path reached {} ({:.1}× faster).{cpu_note} TCP was limited by its buffers only {} of its busy time. OpenSSH's channel window has been 2 MiB since 4.7 (2007) and never grows.{sftp}",
            format_rate(st.rate_bps),
            format_byte_rate(st.rate_bps / 8.0),
            input.way.label(),
            pct(st.rate_bps / ceiling),
            format_bytes(window),
            format_bytes(window),
            rtt_ms,
            format_rate(ceiling),
            format_rate(raw),
            raw / st.rate_bps,
            pct(st.buffer_limited_of_busy().unwrap_or(0.0)),
        ))
        .requirement("an SSH channel carries at most window / RTT (RFC 4254 §5.2 flow control); channel-window-limited when the rate is within 70–120 % of it, CPUs are not saturated, TCP is not buffer-limited and raw TCP is ≥ 1.3× faster");
    f.title = format!(
        "SSH {}: channel-window-limited at {} ≈ {} window / {:.0} ms RTT; raw TCP {:.1}× faster",
        input.way.label(),
        format_rate(st.rate_bps),
        format_bytes(window),
        rtt_ms,
        raw / st.rate_bps
    );
    f.remedy(
        Remedy::new(format!(
            "Use HPN-SSH (github.com/rapier1/hpn-ssh) where the data is received, {receiver_name}: its channel window grows with the TCP receive buffer. Only the receiving end needs it; towards a stock OpenSSH peer it stops at 15 MiB, still 7× the 2 MiB"
        ))
        .on(receiver)
        .with_command(match input.way {
            Way::Upload => format!(
                "hpnsshd on the server (it listens on port 2222), then: hpnssh -p 2222 {} …",
                input.host
            ),
            Way::Download => format!("hpnssh {} …   # the server may keep stock OpenSSH", input.host),
        }),
    )
    .remedies(parallel_remedies(input.host, "2 MiB window"))
    .remedy(
        Remedy::new("scp/sftp: with a larger window, also lift their request pipeline (sftp -R requests, -B buffer) or use the legacy scp protocol")
            .on(Host::Client)
            .with_command(format!("sftp -R 256 -B 262144 {}   # or: scp -O …", input.host)),
    )
    .remedy(plain_tcp_remedy(input.way, input.host))
}

fn buffer_verdict(
    f: Finding,
    input: &DirectionInput<'_>,
    st: &Steady,
    rtt_ms: Option<f64>,
    raw: Option<f64>,
) -> Finding {
    let rwnd = st.rwnd_limited_share.unwrap_or(0.0);
    let sndbuf = st.sndbuf_limited_share.unwrap_or(0.0);
    let busy = st.busy_share.filter(|b| *b > 0.0).unwrap_or(1.0);
    let receive = match input.raw_limit {
        Some("send-buffer-limited") if rwnd / busy < BUFFER_LIMITED => false,
        Some("receive-window-limited") if sndbuf / busy < BUFFER_LIMITED => true,
        _ => rwnd >= sndbuf,
    };
    let raw_note = match (input.raw_limit, raw) {
        (Some(l @ ("receive-window-limited" | "send-buffer-limited")), Some(r)) => format!(
            " Raw TCP on the same path reached only {} and pathdoc's throughput analysis calls it {l}: the same buffer caps every single stream here.",
            format_rate(r)
        ),
        _ => String::new(),
    };
    let (host, key, which) = match (input.way, receive) {
        (Way::Upload, true) => (Host::Server, "tcp_rmem", "the server's receive buffer"),
        (Way::Download, true) => (Host::Client, "tcp_rmem", "the client's receive buffer"),
        (Way::Upload, false) => (Host::Client, "tcp_wmem", "the client's send buffer"),
        (Way::Download, false) => (Host::Server, "tcp_wmem", "the server's send buffer"),
    };
    // Room for the rate raw TCP shows (or 1 Gbit/s) at this RTT, twice for overhead, ≥ 16 MiB.
    let target_bps = raw.unwrap_or(1e9).max(st.rate_bps);
    let bdp = target_bps / 8.0 * rtt_ms.unwrap_or(100.0) / 1000.0;
    let max = ((2.0 * bdp) as u64).next_power_of_two().max(16 << 20);
    let default = if key == "tcp_rmem" { 131072 } else { 16384 };
    let buf = if receive {
        st.rcvbuf_bytes
    } else {
        st.sndbuf_bytes
    };
    let mut f = f
        .summary(format!(
            "The sender's TCP was held back by {which} {} of its busy time (receive window {}, send buffer {}){} while SSH moved {} ({}).{raw_note} Both SSH and any other single TCP stream on this path are capped until the buffer grows.",
            pct(if receive { rwnd } else { sndbuf } / busy),
            pct(rwnd / busy),
            pct(sndbuf / busy),
            buf.map(|b| format!("; the buffer was {}", format_bytes(b))).unwrap_or_default(),
            format_rate(st.rate_bps),
            format_byte_rate(st.rate_bps / 8.0),
        ))
        .requirement(format!(
            "buffer-limited when tcpi_rwnd_limited + tcpi_sndbuf_limited ≥ {} of tcpi_busy_time (or raw TCP, as fast as SSH, is itself buffer-limited); a stream needs a buffer ≥ bandwidth × RTT",
            pct(BUFFER_LIMITED)
        ));
    f.title = format!(
        "SSH {}: TCP-buffer-limited at {} by {which}",
        input.way.label(),
        format_rate(st.rate_bps)
    );
    f.remedy(
        Remedy::new(format!(
            "Let {which} grow to 2× the bandwidth-delay product; persist it in /etc/sysctl.d"
        ))
        .on(host)
        .with_command(format!("sysctl -w net.ipv4.{key}=\"4096 {default} {max}\"")),
    )
    .remedies(parallel_remedies(input.host, "TCP buffer"))
}

fn network_verdict(
    f: Finding,
    input: &DirectionInput<'_>,
    rate: f64,
    raw: f64,
    window_ratio: Option<f64>,
) -> Finding {
    let also_window = match window_ratio {
        Some(r) if r >= WINDOW_BAND.0 => format!(
            " SSH is also at {} of its channel window's ceiling (window/RTT): on a faster path SSH would stop there.",
            pct(r)
        ),
        _ => String::new(),
    };
    // pathdoc-speed found a policer on the raw stream: the "network limit" is a provider's
    // token rate, and the throughput check's pacing remedy applies to SSH too.
    let policed = match input.raw_limit {
        Some("policer-limited") => " Raw TCP on this path was policed (the throughput check's policer-limited: heavy loss without queueing at a flat rate): the limit is a token-bucket policer, and pacing the sender below its rate avoids the drops.",
        Some("shared-bottleneck") => " Raw TCP on this path shared its bottleneck with other traffic (the throughput check's shared-bottleneck: a standing queue at a rate well below the capacity a packet-train probe measured): this rate is a share of a busy link at the time of the test, not what the line can do; run again when the link is quiet.",
        _ => "",
    };
    let mut f = f
        .summary(format!(
            "SSH moved {} ({}) {}, {} of what raw TCP reached on the same path ({}): SSH costs little here; the network (or its far end) is the limit.{policed}{also_window}",
            format_rate(rate),
            format_byte_rate(rate / 8.0),
            input.way.label(),
            pct(rate / raw),
            format_rate(raw)
        ))
        .requirement(format!(
            "network-limited when SSH reaches ≥ {} of raw TCP on the same path",
            pct(NETWORK_SHARE)
        ));
    f.title = format!(
        "SSH {}: {} — as fast as raw TCP here ({}); the network is the limit",
        input.way.label(),
        format_rate(rate),
        format_rate(raw)
    );
    f
}

/// Why no limit was proven: each rule's figure against its threshold, and a busy machine.
fn unexplained_reasons(
    st: &Steady,
    cpu: Option<(Side, f64)>,
    window_ratio: Option<f64>,
    raw: Option<f64>,
) -> Vec<String> {
    let mut reasons = Vec::new();
    match cpu {
        Some((side, s)) => reasons.push(format!(
            "the busiest crypto process ({}) ran at {} of its CPU (a CPU limit needs ≥ {})",
            side.process(),
            pct(s),
            pct(CPU_SATURATED)
        )),
        None => reasons.push("the CPU of ssh/sshd could not be read".into()),
    }
    match window_ratio {
        Some(r) => reasons.push(format!(
            "the rate is {} of window/RTT (a window limit needs {}–{})",
            pct(r),
            pct(WINDOW_BAND.0),
            pct(WINDOW_BAND.1)
        )),
        None => reasons.push("the channel window or RTT is unknown".into()),
    }
    match raw {
        Some(r) => reasons.push(format!(
            "raw TCP reached {} ({:.2}× SSH)",
            format_rate(r),
            r / st.rate_bps
        )),
        None => reasons.push("raw TCP could not be measured".into()),
    }
    for (name, side) in [("client", &st.client), ("server", &st.server)] {
        if let Some(b) = side.host_busy.filter(|b| *b >= 0.9) {
            reasons.push(format!(
                "every CPU of the {name} machine was busy ({} of {}): other processes took CPU time the crypto needed",
                pct(b),
                side.host_cpus.unwrap_or(0)
            ));
        }
    }
    reasons
}

/// No limit proven, but a cipher measured clearly faster than the default: a hedged WARN with
/// the figures and the cipher to try, instead of "rerun" on a host that is always busy.
fn faster_cipher_unproven_verdict(
    f: Finding,
    input: &DirectionInput<'_>,
    def: &Transfer,
    st: &Steady,
    best: &CipherResult,
    reasons: &[String],
) -> Finding {
    let cipher = def.cipher().unwrap_or("the negotiated cipher");
    let gain = best.rate_bps / st.rate_bps;
    let mut f = f
        .summary(format!(
            "No limit could be proven: {}. But in this run {} moved {} ({}) where the default {cipher} moved {} ({}): {gain:.2}× as much. \
             That points to the cipher's CPU cost — on a busy machine the crypto gets only part of a core, so the CPU rule cannot be proven from the process's share — \
             but one run on a busy host can also be luck: try {} on a real transfer and keep it if it holds.",
            reasons.join("; "),
            best.cipher,
            format_rate(best.rate_bps),
            format_byte_rate(best.rate_bps / 8.0),
            format_rate(st.rate_bps),
            format_byte_rate(st.rate_bps / 8.0),
            best.cipher,
        ))
        .requirement(format!(
            "no limit proven, and a cipher measured ≥ {UNPROVEN_CIPHER_GAIN:.1}× the default's steady rate in the same run"
        ))
        .remedy(
            Remedy::new(format!(
                "Try {} for bulk transfers (per command, or for this host in ~/.ssh/config); keep it if a real transfer confirms the gain",
                best.cipher
            ))
            .on(Host::Client)
            .with_command(cipher_commands(input.host, &best.cipher)),
        );
    f.title = format!(
        "SSH {}: {} measured {gain:.2}× faster than the default {cipher} ({} vs {}) — likely the cipher's CPU cost on a busy host (not proven)",
        input.way.label(),
        best.cipher,
        format_rate(best.rate_bps),
        format_rate(st.rate_bps)
    );
    f
}

fn inconclusive_verdict(
    f: Finding,
    input: &DirectionInput<'_>,
    st: &Steady,
    reasons: &[String],
) -> Finding {
    let mut f = f.summary(format!(
        "SSH moved {} {}, but no single limit explains it: {}. Rerun when the machines are quieter; in a real transfer, also rule out the disk and the pipe around ssh.",
        format_rate(st.rate_bps),
        input.way.label(),
        reasons.join("; ")
    ));
    f.title = format!(
        "SSH {}: {} — no single limit explains the rate",
        input.way.label(),
        format_rate(st.rate_bps)
    );
    f
}

/// The versions finding: both banners, HPN or not, and what that means for the window.
pub fn versions_finding(client: Option<&str>, server: Option<&str>) -> Finding {
    let is_hpn = |v: Option<&str>| v.is_some_and(|v| v.to_ascii_lowercase().contains("hpn"));
    let describe = |v: Option<&str>| match v {
        Some(v) if is_hpn(Some(v)) => format!("{v} (HPN-SSH: dynamic channel window)"),
        Some(v) => format!("{v} (stock OpenSSH: fixed 2 MiB channel window)"),
        None => "unknown".into(),
    };
    Finding::new(
        CHECK,
        "ssh-versions",
        Status::Info,
        format!(
            "SSH software: client {}, server {}",
            client.unwrap_or("?"),
            server.unwrap_or("?")
        ),
    )
    .summary(format!(
        "Client: {}. Server: {}.",
        describe(client),
        describe(server)
    ))
    .evidence(
        Evidence::new(
            "client version",
            Quantity::Text(client.unwrap_or("?").into()),
        )
        .with_detail("ssh -vv: Local version string"),
    )
    .evidence(
        Evidence::new(
            "server version",
            Quantity::Text(server.unwrap_or("?").into()),
        )
        .with_detail("ssh -vv: remote software version"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sshlog::{Negotiated, SshLog};

    fn transfer(way: Way, cipher: Option<&str>, negotiated: &str, steady: Steady) -> Transfer {
        let n = Some(Negotiated {
            cipher: negotiated.into(),
            mac: "<implicit>".into(),
        });
        Transfer {
            way,
            requested_cipher: cipher.map(str::to_string),
            requested_mac: None,
            payload_bytes: (steady.rate_bps / 8.0 * 4.0) as u64,
            seconds: 4.0,
            goodput_bps: steady.rate_bps * 0.9,
            steady: Some(steady),
            log: SshLog {
                client_to_server: n.clone(),
                server_to_client: n,
                open_rwindow: Some(0),
                max_adjust_received: Some(2 << 20),
                local_window: Some(2 << 20),
                ..Default::default()
            },
            ssh_client: None,
            ssh_server: None,
            client_samples: vec![],
            server_samples: vec![],
            incomplete: None,
        }
    }

    fn steady(rate: f64, client_cpu: f64, server_cpu: f64, rtt_ms: f64) -> Steady {
        Steady {
            from: 1.4,
            to: 4.0,
            tcp_bytes: (rate / 8.0 * 2.6) as u64,
            rate_bps: rate,
            client: SideCpu {
                ssh_process: Some(client_cpu),
                ..Default::default()
            },
            server: SideCpu {
                ssh_process: Some(server_cpu),
                command: Some(0.02),
                ..Default::default()
            },
            rtt_ms: Some(rtt_ms),
            min_rtt_ms: Some(rtt_ms - 0.2),
            busy_share: Some(1.0),
            rwnd_limited_share: Some(0.0),
            sndbuf_limited_share: Some(0.0),
            retransmits: Some(0),
            cwnd_bytes: None,
            sndbuf_bytes: None,
            rcvbuf_bytes: Some(6 << 20),
            congestion_control: Some("cubic".into()),
        }
    }

    fn judge(
        way: Way,
        raw: Option<f64>,
        raw_limit: Option<&str>,
        transfers: &[Transfer],
    ) -> Finding {
        diagnose_direction(&DirectionInput {
            way,
            raw_bps: raw,
            raw_limit,
            raw_whole_test_bps: raw.map(|r| r * 0.8),
            raw_basis: raw.map(|_| "steady state (1.0–4.0 s)"),
            transfers,
            host: "nas",
            client_version: Some("OpenSSH_9.2p1 Debian-2"),
            server_version: Some("OpenSSH_9.2p1 Debian-2"),
        })
    }

    fn hosts(f: &Finding) -> Vec<Host> {
        f.remedies.iter().filter_map(|r| r.host.clone()).collect()
    }

    #[test]
    fn window_limited_names_window_rtt_and_the_receiver() {
        let t = [transfer(
            Way::Upload,
            None,
            "chacha20-poly1305@openssh.com",
            steady(163e6, 0.04, 0.04, 100.0),
        )];
        let f = judge(Way::Upload, Some(700e6), None, &t);
        assert_eq!(f.id, "ssh-window-limited");
        assert_eq!(f.status, Status::Warn);
        assert_eq!(f.direction, Some(pathdoc_core::Direction::ClientToServer));
        assert!(
            f.title.contains("2.00 MiB") && f.title.contains("100 ms"),
            "{}",
            f.title
        );
        assert!(f.summary.contains("SFTP"), "{}", f.summary);
        // HPN on the receiver: the server for an upload.
        assert_eq!(f.remedies[0].host, Some(Host::Server));
        assert!(hosts(&f).contains(&Host::BothEnds) && hosts(&f).contains(&Host::Client));
        // Both units.
        assert!(f
            .evidence
            .iter()
            .any(|e| matches!(e.value, Quantity::ByteRate(_))));
        // The same numbers downloading: HPN on the client.
        let t = [transfer(
            Way::Download,
            None,
            "chacha20-poly1305@openssh.com",
            steady(160e6, 0.04, 0.03, 100.0),
        )];
        let f = judge(Way::Download, Some(700e6), None, &t);
        assert_eq!(f.id, "ssh-window-limited");
        assert_eq!(f.remedies[0].host, Some(Host::Client));
        // Remedies for what the user sends: a file tree splits into files, a zfs send stream
        // into datasets, any stream can go over mbuffer (plain TCP or a WireGuard tunnel).
        let says = |needle: &str| {
            f.remedies.iter().any(|r| {
                r.description.contains(needle)
                    || r.command.as_deref().is_some_and(|c| c.contains(needle))
            })
        };
        assert!(says("File trees (rsync, scp -r)") && says("xargs -P 4 -I{} rsync"));
        assert!(says("zfs send | ssh: one stream cannot be split"));
        assert!(says("zfs send {}@SNAP | ssh nas zfs receive"));
        assert!(says("WireGuard") && says("mbuffer"));
        assert!(says("HPN-SSH"));
        // Raw TCP not much faster: not a window verdict.
        let f = judge(Way::Download, Some(170e6), None, &t);
        assert_eq!(f.id, "ssh-network-limited");
        assert!(
            f.summary.contains("channel window's ceiling"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn network_verdict_names_a_policer_found_on_raw_tcp() {
        let t = [transfer(
            Way::Download,
            None,
            "chacha20-poly1305@openssh.com",
            steady(18e6, 0.04, 0.03, 100.0),
        )];
        let f = judge(Way::Download, Some(19e6), Some("policer-limited"), &t);
        assert_eq!(f.id, "ssh-network-limited");
        assert!(f.summary.contains("token-bucket policer"), "{}", f.summary);
        let f = judge(Way::Download, Some(19e6), Some("link-limited"), &t);
        assert!(!f.summary.contains("policer"), "{}", f.summary);
        let f = judge(Way::Download, Some(19e6), Some("shared-bottleneck"), &t);
        assert_eq!(f.id, "ssh-network-limited");
        assert!(f.summary.contains("busy link"), "{}", f.summary);
    }

    #[test]
    fn cpu_limited_names_the_side_and_the_faster_cipher() {
        let mut capped = steady(900e6, 0.15, 0.15, 1.0);
        capped.server.cgroup_limit = Some(0.2);
        capped.server.cgroup_throttled = Some(0.7);
        let mut gcm = capped.clone();
        gcm.rate_bps = 1.9e9;
        let t = [
            transfer(Way::Upload, None, "chacha20-poly1305@openssh.com", capped),
            transfer(
                Way::Upload,
                Some("aes128-gcm@openssh.com"),
                "aes128-gcm@openssh.com",
                gcm,
            ),
        ];
        let f = judge(Way::Upload, Some(8e9), None, &t);
        assert_eq!(f.id, "ssh-cpu-limited");
        assert_eq!(f.status, Status::Warn);
        assert!(
            f.title.contains("sshd (server)") && f.title.contains("aes128-gcm@openssh.com"),
            "{}",
            f.title
        );
        assert_eq!(f.remedies[0].host, Some(Host::Client));
        assert!(f.remedies[0]
            .command
            .as_deref()
            .unwrap()
            .contains("Ciphers aes128-gcm@openssh.com,"));
        assert!(
            hosts(&f).contains(&Host::Server),
            "the cgroup remedy is on the server"
        );
        let table = cipher_table(Way::Upload, &t);
        assert_eq!(table[0].cipher, "aes128-gcm@openssh.com");
        assert!(table[1].default);
        // A cipher only 10 % faster is not worth switching to, and the summary says so.
        let mut close = t.clone();
        close[1].steady.as_mut().unwrap().rate_bps = 990e6;
        let f = judge(Way::Upload, Some(8e9), None, &close);
        assert!(!f.title.contains("aes128-gcm"), "{}", f.title);
        assert!(
            f.summary.contains("no cipher is clearly faster"),
            "{}",
            f.summary
        );
        // A client ssh on a full core, no faster cipher: still CPU, no cipher advice.
        let t = [transfer(
            Way::Download,
            None,
            "aes128-gcm@openssh.com",
            steady(2e9, 0.98, 0.6, 1.0),
        )];
        let f = judge(Way::Download, Some(2.1e9), None, &t);
        assert_eq!(f.id, "ssh-cpu-limited");
        assert_eq!(
            f.status,
            Status::Info,
            "SSH near the network rate: not a problem"
        );
        assert!(f.title.contains("ssh (client)"));
        assert!(!f.remedies[0].description.starts_with("Pick"));
    }

    #[test]
    fn buffer_limited_points_at_the_buffer_and_its_host() {
        let mut s = steady(12e6, 0.02, 0.01, 100.0);
        s.rwnd_limited_share = Some(0.5);
        let t = [transfer(
            Way::Download,
            None,
            "chacha20-poly1305@openssh.com",
            s.clone(),
        )];
        let f = judge(Way::Download, Some(11e6), None, &t);
        assert_eq!(f.id, "ssh-tcp-buffer-limited");
        assert_eq!(f.status, Status::Warn);
        assert_eq!(f.remedies[0].host, Some(Host::Client));
        assert!(f.remedies[0]
            .command
            .as_deref()
            .unwrap()
            .starts_with("sysctl -w net.ipv4.tcp_rmem="));
        // SSH's own chronograph below the threshold, but raw TCP (as fast) is receive-window-limited.
        s.rwnd_limited_share = Some(0.1);
        let t = [transfer(
            Way::Upload,
            None,
            "chacha20-poly1305@openssh.com",
            s,
        )];
        let f = judge(
            Way::Upload,
            Some(12.5e6),
            Some("receive-window-limited"),
            &t,
        );
        assert_eq!(f.id, "ssh-tcp-buffer-limited");
        assert_eq!(
            f.remedies[0].host,
            Some(Host::Server),
            "upload: the server receives"
        );
        assert!(
            f.summary.contains("receive-window-limited"),
            "{}",
            f.summary
        );
    }

    /// Both ends on one busy host: no CPU limit can be proven (the crypto gets 40 % of a core), but
    /// aes256-gcm measured 2× the default: a hedged WARN with both figures, not "rerun".
    #[test]
    fn busy_host_with_a_much_faster_cipher_gets_a_hedged_warn() {
        let busy = |rate: f64| {
            let mut st = steady(rate, 0.4, 0.35, 0.3);
            st.client.host_busy = Some(1.0);
            st.client.host_cpus = Some(2);
            st
        };
        let chacha = "chacha20-poly1305@openssh.com";
        let aes = "aes256-gcm@openssh.com";
        let t = [
            transfer(Way::Upload, None, chacha, busy(400e6)),
            transfer(Way::Upload, Some(aes), aes, busy(800e6)),
        ];
        let f = judge(Way::Upload, Some(4e9), None, &t);
        assert_eq!(
            (f.id.as_str(), f.status),
            ("ssh-cipher-faster-unproven", Status::Warn)
        );
        assert!(
            f.title.contains("2.00× faster than the default"),
            "{}",
            f.title
        );
        assert!(f.title.contains("800 Mbit/s vs 400 Mbit/s"), "{}", f.title);
        assert!(f.title.contains("not proven"), "{}", f.title);
        assert!(
            f.summary
                .contains("every CPU of the client machine was busy"),
            "{}",
            f.summary
        );
        let cmd = f.remedies[0].command.as_deref().unwrap();
        assert!(cmd.contains("Ciphers aes256-gcm@openssh.com,"), "{cmd}");
        // Raw TCP is the steady state, as `check --throughput` gives it, the whole test beside it.
        let raw = f
            .evidence
            .iter()
            .find(|e| e.name.starts_with("raw TCP"))
            .unwrap();
        assert_eq!(raw.value, Quantity::Goodput(4e9));
        let detail = raw.detail.as_deref().unwrap();
        assert!(
            detail.contains("steady state (1.0–4.0 s) as `check --throughput` judges it; 3.20 Gbit/s over the whole test incl. slow start"),
            "{detail}"
        );
        // 1.2× is within the noise of a busy host: still inconclusive.
        let t = [
            transfer(Way::Upload, None, chacha, busy(400e6)),
            transfer(Way::Upload, Some(aes), aes, busy(480e6)),
        ];
        let f = judge(Way::Upload, Some(4e9), None, &t);
        assert_eq!(f.id, "ssh-limit-inconclusive");
    }

    #[test]
    fn network_limited_passes_and_unexplained_is_inconclusive() {
        let t = [transfer(
            Way::Upload,
            None,
            "aes128-gcm@openssh.com",
            steady(94.7e6, 0.1, 0.1, 5.0),
        )];
        let f = judge(Way::Upload, Some(93.8e6), None, &t);
        assert_eq!(
            (f.id.as_str(), f.status),
            ("ssh-network-limited", Status::Pass)
        );
        assert!(f.remedies.is_empty());
        let mut busy = steady(1.1e9, 0.2, 0.18, 0.6);
        busy.client.host_busy = Some(1.0);
        busy.client.host_cpus = Some(2);
        let t = [transfer(
            Way::Upload,
            None,
            "chacha20-poly1305@openssh.com",
            busy,
        )];
        let f = judge(Way::Upload, Some(4e9), None, &t);
        assert_eq!(
            (f.id.as_str(), f.status),
            ("ssh-limit-inconclusive", Status::Inconclusive)
        );
        assert!(
            f.summary
                .contains("every CPU of the client machine was busy"),
            "{}",
            f.summary
        );
        let f = judge(Way::Upload, Some(4e9), None, &[]);
        assert_eq!(f.status, Status::Inconclusive);
    }

    /// Ctrl-C 0.3 s into the steady part used to give a confident verdict from that sliver.
    #[test]
    fn an_interrupted_transfer_is_judged_only_with_a_second_of_steady_samples() {
        let mut short = steady(94.7e6, 0.1, 0.1, 5.0);
        short.to = short.from + 0.3;
        let mut t = transfer(Way::Upload, None, "aes128-gcm@openssh.com", short);
        t.incomplete = Some(crate::transfer::Incomplete::Interrupted);
        let f = judge(Way::Upload, Some(93.8e6), None, std::slice::from_ref(&t));
        assert_eq!(
            (f.id.as_str(), f.status),
            (
                pathdoc_core::report::CHECK_INTERRUPTED,
                Status::Inconclusive
            ),
            "{}",
            f.title
        );
        // The measurement behind "too early" is in the evidence.
        let steady = f
            .evidence
            .iter()
            .find(|e| e.name == "steady samples before the interruption")
            .expect("steady-samples evidence");
        assert!(
            matches!(steady.value, Quantity::Seconds(x) if (x - 0.3).abs() < 1e-9),
            "{steady:?}"
        );
        // Interrupted after enough steady samples: judged as usual.
        t.steady.as_mut().unwrap().to = 4.0;
        let f = judge(Way::Upload, Some(93.8e6), None, &[t]);
        assert_eq!(f.id, "ssh-network-limited");
    }

    /// The ids the verdicts above produce are exactly [`FINDING_IDS`].
    #[test]
    fn finding_ids_are_exactly_the_registry() {
        let chacha = "chacha20-poly1305@openssh.com";
        let window = [transfer(
            Way::Upload,
            None,
            chacha,
            steady(163e6, 0.04, 0.04, 100.0),
        )];
        let cpu = [transfer(
            Way::Download,
            None,
            chacha,
            steady(2e9, 0.98, 0.6, 1.0),
        )];
        let mut s = steady(12e6, 0.02, 0.01, 100.0);
        s.rwnd_limited_share = Some(0.5);
        let buffer = [transfer(Way::Download, None, chacha, s)];
        let network = [transfer(
            Way::Upload,
            None,
            chacha,
            steady(94.7e6, 0.1, 0.1, 5.0),
        )];
        let mut cut = steady(94.7e6, 0.1, 0.1, 5.0);
        cut.to = cut.from + 0.2;
        let mut interrupted = transfer(Way::Upload, None, chacha, cut);
        interrupted.incomplete = Some(crate::transfer::Incomplete::Interrupted);
        let dest = crate::SshDest::parse("nas").unwrap();
        let mut idle_fail = pathdoc_core::Report::new(pathdoc_core::Command::Check, "nas");
        idle_fail.findings.push(
            Finding::new("idle", "tcp-idle-timeout", Status::Fail, "x")
                .remedy(pathdoc_core::Remedy::new("ssh").with_command("ServerAliveInterval 60")),
        );
        let seen: std::collections::BTreeSet<String> = [
            judge(Way::Upload, Some(93.8e6), None, &[interrupted]),
            not_started_finding(Way::Download),
            judge(Way::Upload, Some(700e6), None, &window),
            judge(Way::Download, Some(2.1e9), None, &cpu),
            judge(Way::Download, Some(11e6), None, &buffer),
            judge(Way::Upload, Some(93.8e6), None, &network),
            judge(Way::Upload, None, None, &[]),
            versions_finding(None, None),
            judge(
                Way::Upload,
                Some(4e9),
                None,
                &[
                    transfer(Way::Upload, None, chacha, steady(400e6, 0.5, 0.5, 0.3)),
                    transfer(
                        Way::Upload,
                        Some("aes256-gcm@openssh.com"),
                        "aes256-gcm@openssh.com",
                        steady(800e6, 0.5, 0.5, 0.3),
                    ),
                ],
            ),
            crate::next_step::pathdoc_ssh_finding(&dest),
            crate::next_step::keepalive_finding(&dest, &idle_fail).unwrap(),
        ]
        .into_iter()
        .map(|f| f.id)
        .collect();
        let registry = FINDING_IDS.iter().map(|i| i.id.to_string()).collect();
        assert_eq!(seen, registry, "emitted ids vs FINDING_IDS");
    }

    #[test]
    fn versions_say_hpn_or_stock() {
        let f = versions_finding(Some("OpenSSH_9.2p1"), Some("OpenSSH_8.9p1-hpn15v2"));
        assert!(f.summary.contains("HPN-SSH") && f.summary.contains("fixed 2 MiB"));
        assert_eq!(f.status, Status::Info);
    }
}
