//! A sender its application holds back: a long transfer with no loss, the receiver's window far
//! from full, and the flight size flat at a value that is neither the window nor shaped like a
//! congestion window (which grows until loss or the window stops it). TCP is healthy; the
//! application (or the sender's socket buffer) is the limit — for SSH, the channel window.

use pathdoc_core::units::{format_bytes, format_duration, format_rate};
use pathdoc_core::{Evidence, Finding, Host, Quantity, Remedy, Status};

use crate::diagnose::{label, path_rtt_s, pct, Side, CHECK};
use crate::loss::LossCount;
use crate::summary::ConnSummary;

/// A transfer long enough for congestion control to have grown past any slow-start value.
const MIN_DATA_SEGMENTS: u64 = 500;
const MIN_RTTS: f64 = 10.0;
/// Flight sizes below this are request/response traffic or paced tests, not a held-back bulk
/// transfer worth a warning.
const MIN_FLIGHT_BYTES: f64 = 256.0 * 1024.0;
/// Flat: the flight size's standard deviation at most this share of its mean.
const MAX_FLIGHT_SPREAD: f64 = 0.3;
/// Far from full: at most this share of the receiver's largest window in flight.
const MAX_WINDOW_USE: f64 = 0.5;
/// OpenSSH's per-channel window (CHAN_SES_WINDOW_DEFAULT: 64 × 32 KiB).
const SSH_CHANNEL_WINDOW: f64 = 2.0 * 1024.0 * 1024.0;

/// The measurements a verdict rests on, once every condition held.
struct Held {
    rtt_s: f64,
    goodput: f64,
    mean_flight: f64,
    spread: f64,
    window: u64,
    ssh: bool,
}

fn held_back(c: &ConnSummary, s: &Side<'_>) -> Option<Held> {
    let (tx, rx) = (s.tx, s.rx);
    let loss = LossCount::of(tx);
    if loss.data_segments < MIN_DATA_SEGMENTS
        || !rx.window_scale_known
        || loss.lost() > 2
        || rx.flags.zero_window > 0
    {
        return None;
    }
    let rtt_s = path_rtt_s(c)?;
    let goodput = tx.goodput_bps?;
    let mean_flight = tx.mean_bytes_in_flight?;
    let spread = tx.sd_bytes_in_flight? / mean_flight.max(1.0);
    let window = rx.max_window_bytes;
    let data_s = tx.unique_bytes as f64 * 8.0 / goodput.max(1.0);
    let far_from_full = (tx.max_bytes_in_flight as f64) <= MAX_WINDOW_USE * window as f64
        && tx.at_window_fraction.unwrap_or(0.0) < 0.05;
    let ok = mean_flight >= MIN_FLIGHT_BYTES
        && spread <= MAX_FLIGHT_SPREAD
        && far_from_full
        && data_s >= MIN_RTTS * rtt_s;
    // A queue that grew at the bottleneck means the path was full: it, not the application,
    // set the rate (a line-rate transfer whose cwnd sits at the BDP plus a short queue).
    if crate::load::under_load(c, s).is_some_and(|u| u.queued()) {
        return None;
    }
    let ssh = (mean_flight - SSH_CHANNEL_WINDOW).abs() <= 0.15 * SSH_CHANNEL_WINDOW;
    ok.then_some(Held {
        rtt_s,
        goodput,
        mean_flight,
        spread,
        window,
        ssh,
    })
}

/// "Sender application-limited at X; the path allowed more" (WARN).
pub(crate) fn sender_application_limited(c: &ConnSummary, s: &Side<'_>, out: &mut Vec<Finding>) {
    let Some(h) = held_back(c, s) else { return };
    let rtt = format_duration(std::time::Duration::from_secs_f64(h.rtt_s));
    // Finding::new with the literal id here (not diagnose's helper): the finding-id registry
    // test reads ids per file.
    let mut f = Finding::new(
        CHECK,
        "sender-application-limited",
        Status::Warn,
        format!(
            "{}: the {} is application-limited at {} {}: {} in flight, flat, while the {}'s window allowed {} and nothing was lost; the path allowed more",
            label(c),
            s.sender,
            format_rate(h.goodput),
            s.dir.arrow(),
            format_bytes(h.mean_flight as u64),
            s.receiver,
            format_bytes(h.window)
        ),
    )
    .direction(s.dir)
    .requirement("a bulk sender whose congestion window is free to grow (no loss) and whose receiver's window is far from full sends more each RTT; a flight size that stays flat is set by the sending application or its socket buffer (RFC 7661: application-limited periods)")
    .evidence(Evidence::new("mean bytes in flight", Quantity::Bytes(h.mean_flight as u64)).with_detail(format!("spread (standard deviation / mean) {:.0} %", h.spread * 100.0)))
    .evidence(Evidence::new("largest bytes in flight", Quantity::Bytes(s.tx.max_bytes_in_flight)))
    .evidence(Evidence::new(format!("largest window the {} advertised", s.receiver), Quantity::Bytes(h.window)))
    .evidence(Evidence::new("segments sent with the window ≥ 90 % full", pct(s.tx.at_window_fraction.unwrap_or(0.0))))
    .evidence(Evidence::new("segments lost", Quantity::Count(LossCount::of(s.tx).lost())))
    .evidence(Evidence::new(format!("{} goodput", s.dir.arrow()), Quantity::Goodput(h.goodput)))
    .evidence(Evidence::new("path RTT", Quantity::Seconds(h.rtt_s)));
    let ssh_note = if h.ssh {
        format!(" The flight size sits at ≈ 2 MiB: OpenSSH's channel window. SSH lets at most 2 MiB per channel be unacknowledged by the far ssh process, so a transfer through it moves at most 2 MiB per RTT ({} at {rtt}) however fast the path — `pathdoc ssh HOST` measures this (raw TCP against SSH transfers) and names the fix.", format_rate(SSH_CHANNEL_WINDOW * 8.0 / h.rtt_s))
    } else {
        String::new()
    };
    f = f.summary(format!(
        "TCP is healthy here: the {} kept {} in flight with little spread over {} RTTs, nothing was lost and the {}'s window ({}) was never more than half used, so neither the path nor the receiver held it back. The sending application (a fixed buffer or window of its own, a paced or rate-limited sender, a slow disk or CPU) or the {}'s socket send buffer (tcp_wmem) did.{ssh_note}",
        s.sender,
        format_bytes(h.mean_flight as u64),
        (s.tx.unique_bytes as f64 * 8.0 / h.goodput / h.rtt_s).round(),
        s.receiver,
        format_bytes(h.window),
        s.sender
    ));
    if h.ssh {
        f = f.remedy(
            Remedy::new("Measure SSH against raw TCP on this path: it names the channel window as the limit and the fix (an SSH with larger channel windows such as HPN-SSH, parallel streams, or a transfer outside SSH)")
                .on(Host::Client)
                .with_command("pathdoc ssh HOST"),
        );
    }
    f = f
        .remedy(
            Remedy::new(format!("Find what paces the sending application on the {} (its own buffer or window size, a rate limit, disk or CPU)", s.sender))
                .on(Host::Other { name: format!("the sending application on the {}", s.sender) }),
        )
        .remedy(
            Remedy::new("If the application writes fast enough, let the send buffer grow to the BDP (max of tcp_wmem); persist it in /etc/sysctl.d")
                .on(s.sender_host.clone())
                .with_command("sysctl -w net.ipv4.tcp_wmem='4096 16384 33554432' net.core.wmem_max=33554432"),
        );
    out.push(f);
}
