//! Formulas: bandwidth-delay product, the loss-rate models of loss-based congestion control
//! (Mathis for Reno, RFC 9438's response function for CUBIC), wire-rate estimates and buffer
//! sizing. Pure arithmetic, table-tested against published figures.

use serde::{Deserialize, Serialize};

/// Mathis et al. 1997 constant for periodic loss with every segment ACKed: √(3/2).
pub const MATHIS_C: f64 = 1.22;
/// CUBIC's constant C and multiplicative decrease β (RFC 9438 §4.1, §4.6).
pub const CUBIC_C: f64 = 0.4;
pub const CUBIC_BETA: f64 = 0.7;
/// How far the measured steady-state rate may sit from the loss model (in either direction) and
/// still be called loss-limited. The models assume periodic single losses; random loss with SACK
/// (several drops in one window recovered as one congestion event) runs above them, and a short
/// test sits wherever the sawtooth happens to be. One factor, used here and in docs/throughput.md.
pub const MODEL_FACTOR: f64 = 3.0;

/// Ethernet bytes per frame beyond the IP packet at layer 1: preamble+SFD 8, MAC header 14,
/// FCS 4, inter-frame gap 12.
pub const ETHERNET_L1_OVERHEAD: u32 = 38;
/// Ethernet MAC header only (what a Linux qdisc such as tbf counts beyond the IP packet).
pub const ETHERNET_HEADER: u32 = 14;

/// Bytes of IP + TCP headers per segment: IPv4 20 / IPv6 40, TCP 20, timestamps option 12.
pub fn segment_overhead(ipv6: bool, timestamps: bool) -> u32 {
    (if ipv6 { 40 } else { 20 }) + 20 + if timestamps { 12 } else { 0 }
}

/// Bandwidth-delay product in bytes: rate (bit/s) × RTT (s) / 8.
pub fn bdp_bytes(rate_bps: f64, rtt_s: f64) -> f64 {
    rate_bps * rtt_s / 8.0
}

/// Mathis et al. upper bound for Reno-style congestion avoidance: MSS/RTT × C/√p, in bit/s.
pub fn mathis_rate(mss: u32, rtt_s: f64, loss: f64) -> f64 {
    if loss <= 0.0 || rtt_s <= 0.0 {
        return f64::INFINITY;
    }
    f64::from(mss) * 8.0 / rtt_s * MATHIS_C / loss.sqrt()
}

/// CUBIC's average rate at loss rate `p` (RFC 9438 §5.1): the average window is
/// (C(3+β)/(4(1−β)))^¼ × RTT^¾ / p^¾ segments (RTT in seconds), i.e. ≈ 1.054 × RTT^¾/p^¾.
pub fn cubic_rate(mss: u32, rtt_s: f64, loss: f64) -> f64 {
    if loss <= 0.0 || rtt_s <= 0.0 {
        return f64::INFINITY;
    }
    let k = (CUBIC_C * (3.0 + CUBIC_BETA) / (4.0 * (1.0 - CUBIC_BETA))).powf(0.25);
    let window = k * rtt_s.powf(0.75) / loss.powf(0.75);
    window * f64::from(mss) * 8.0 / rtt_s
}

/// The rate a loss-based congestion control sustains per stream at loss rate `p`, or `None` for
/// a model-based one (BBR paces to its bandwidth estimate and does not back off on random loss).
/// CUBIC runs whichever is faster of its cubic curve and its Reno-friendly region (RFC 9438
/// §4.3), so its model is the larger of the two; anything else is modelled as Reno.
pub fn loss_model_rate(cc: &str, mss: u32, rtt_s: f64, loss: f64) -> Option<f64> {
    let cc = cc.to_ascii_lowercase();
    if cc.starts_with("bbr") {
        return None;
    }
    let reno = mathis_rate(mss, rtt_s, loss);
    Some(if cc == "cubic" {
        reno.max(cubic_rate(mss, rtt_s, loss))
    } else {
        reno
    })
}

/// Whether a measured rate is within [`MODEL_FACTOR`] of a model's.
pub fn within_model_factor(measured: f64, model: f64) -> bool {
    model.is_finite() && (model / MODEL_FACTOR..=model * MODEL_FACTOR).contains(&measured)
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
    fn cubic_model_follows_rfc_9438() {
        // The constant: (0.4 × 3.7 / 1.2)^¼ = 1.0538.
        let w = cubic_rate(1, 1.0, 1.0) / 8.0;
        assert!(close(w, 1.0538, 1e-3), "{w}");
        // Short RTT: CUBIC sits in its Reno-friendly region, so the model is Mathis.
        let reno = mathis_rate(1448, 0.04, 3e-3);
        assert_eq!(loss_model_rate("cubic", 1448, 0.04, 3e-3), Some(reno));
        // Long fat path, rare loss: the cubic curve is well above Reno (RFC 9438 §5.1).
        let (rtt, p) = (0.1, 1e-5);
        let cubic = loss_model_rate("cubic", 1448, rtt, p).unwrap();
        assert!(cubic > 2.0 * mathis_rate(1448, rtt, p), "{cubic}");
        assert_eq!(
            loss_model_rate("reno", 1448, rtt, p),
            Some(mathis_rate(1448, rtt, p))
        );
        assert_eq!(loss_model_rate("BBR", 1448, rtt, p), None);
        assert!(within_model_factor(30e6, 10.5e6) && !within_model_factor(32e6, 10e6));
        assert!(within_model_factor(3.4e6, 10e6) && !within_model_factor(3.2e6, 10e6));
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
}
