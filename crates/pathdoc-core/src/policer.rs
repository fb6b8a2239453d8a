//! What to do about a token-bucket policer, shared by the throughput check and `pathdoc analyze`
//! (both name the same fix, whether the policer was met in a test or found in a capture).

use crate::units::format_rate;
use crate::{Host, Remedy};

/// Pace this far below the policed rate, so the sender never overruns the bucket.
pub const PACING_MARGIN: f64 = 0.95;

/// The rate to pace a sender at under a policer measured at `ip_bps` (IP layer).
pub fn pacing_rate(ip_bps: f64) -> f64 {
    PACING_MARGIN * ip_bps
}

/// Pace `sender` (e.g. "the sender", "the server") a little below the policed rate with fq.
pub fn pace_below(sender: &str, ip_bps: f64, host: Host) -> Remedy {
    let pace = pacing_rate(ip_bps);
    Remedy::new(format!(
        "Pace {sender} a little below the policed rate, so it never overruns the bucket: with the fq qdisc, cap it at ≈ {} (per socket: SO_MAX_PACING_RATE, e.g. iperf3 --fq-rate)",
        format_rate(pace)
    ))
    .on(host)
    .with_command(format!(
        "tc qdisc replace dev IFACE root fq maxrate {}kbit",
        (pace / 1e3).round() as u64
    ))
}

/// Switch a loss-based sender to BBR.
pub fn run_bbr(host: Host) -> Remedy {
    Remedy::new("Or run BBR on the sender: it paces at the delivery rate it measures and (BBR v1) detects token-bucket policers")
        .on(host)
        .with_command("sysctl -w net.core.default_qdisc=fq net.ipv4.tcp_congestion_control=bbr")
}

/// Ask the provider which rate it enforces `which_way` ("in this direction", "client→server").
pub fn ask_the_provider(which_way: &str, ip_bps: f64) -> Remedy {
    Remedy::new(format!(
        "Ask the provider which rate the plan enforces {which_way} and compare it with what you pay for: measured ≈ {} at the IP layer",
        format_rate(ip_bps)
    ))
    .on(Host::Isp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_is_five_percent_below_the_policed_rate_in_kbit() {
        let r = pace_below("the sender", 20e6, Host::Server);
        assert_eq!(
            r.command.as_deref(),
            Some("tc qdisc replace dev IFACE root fq maxrate 19000kbit")
        );
        assert!(r.description.contains("19.0 Mbit/s"), "{}", r.description);
    }
}
