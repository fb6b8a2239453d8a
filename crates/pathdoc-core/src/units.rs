//! Honest units: rates in bit/s with SI prefixes, sizes in bytes with IEC prefixes.
//!
//! 1 Mbit/s = 10^6 bit/s; 1 MiB = 2^20 bytes. Keeping these apart is the point: seed 002's
//! iperf-vs-iftop "7 % disagreement" was a units mix-up.

use std::time::Duration;

/// Format a rate in bits per second with an SI prefix: `93.4 Mbit/s`.
pub fn format_rate(bits_per_second: f64) -> String {
    if !bits_per_second.is_finite() {
        return "n/a".to_string();
    }
    let (value, prefix) = scale_si(bits_per_second);
    format!("{} {}bit/s", three_significant(value), prefix)
}

/// Format a byte count with an IEC prefix: `2.00 MiB`. Below 10 KiB the exact count is
/// clearer (packet, MTU and MSS sizes: `1420 B`, `9000 B`), and so it is below 64 KiB for a
/// count that is not a whole number of KiB: those are 16-bit protocol fields (loopback's MSS
/// 65495, a window of 65535) that `64.0 KiB` would misstate beside the exact figure in a title.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 10 * 1024 || (bytes < 64 * 1024 && !bytes.is_multiple_of(1024)) {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = "B";
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    format!("{} {}", three_significant(value), unit)
}

/// Format a byte rate with an IEC prefix: `20.0 MiB/s`. This is the number scp and rsync print
/// (they divide by 1024 but label it `MB/s`); keep bit/s for link rates.
pub fn format_byte_rate(bytes_per_second: f64) -> String {
    if !bytes_per_second.is_finite() {
        return "n/a".to_string();
    }
    const UNITS: [&str; 4] = ["KiB/s", "MiB/s", "GiB/s", "TiB/s"];
    let mut value = bytes_per_second;
    let mut unit = "B/s";
    for u in UNITS {
        if value.abs() < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    format!("{} {unit}", three_significant(value))
}

/// [`format_duration`] of a number of seconds read from a report: one too large for a
/// `Duration` (1e20 s), negative or not a number is shown as the bare number instead of
/// panicking.
pub fn format_seconds(seconds: f64) -> String {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) => format_duration(d),
        Err(_) => format!("{seconds} s"),
    }
}

/// Format a duration for humans, choosing the unit by magnitude: `350 µs`, `41.2 ms`, `3.0 s`,
/// `61 min 10 s`, `2 h 4 min`.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1e-3 {
        format!("{:.0} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{} ms", three_significant(secs * 1e3))
    } else if secs < 60.0 {
        format!("{} s", three_significant(secs))
    } else if secs < 3600.0 {
        let whole = d.as_secs();
        match whole % 60 {
            0 => format!("{} min", whole / 60),
            s => format!("{} min {} s", whole / 60, s),
        }
    } else {
        let whole = d.as_secs();
        let (h, m, s) = (whole / 3600, (whole % 3600) / 60, whole % 60);
        match (m, s) {
            (0, 0) => format!("{h} h"),
            (m, 0) => format!("{h} h {m} min"),
            (m, s) => format!("{h} h {m} min {s} s"),
        }
    }
}

/// Parse a duration the way users type it on every command: `2h10m`, `130s`, `90min`, `500ms`,
/// `1.5s`. A unit is required on every number so that `--idle-max 130` cannot silently mean
/// seconds when the user meant minutes. Hand-written: the grammar is tiny and the messages should
/// say exactly what is expected.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration; write e.g. 130s, 2h10m or 500ms".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("{text:?}: expected a number at {rest:?}"));
        }
        let value: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("{text:?}: bad number {:?}", &rest[..num_len]))?;
        rest = rest[num_len..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let factor = match unit {
            "ms" => 1e-3,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            "" => {
                return Err(format!(
                    "{text:?}: missing unit after {value}; write e.g. {value}s or {value}min"
                ))
            }
            other => {
                return Err(format!(
                    "{text:?}: unknown unit {other:?} (use ms, s, min or m, h)"
                ))
            }
        };
        total += value * factor;
        rest = rest[unit_len..].trim_start();
    }
    if !total.is_finite() || total > 30.0 * 86400.0 {
        return Err(format!("{text:?} is too long (at most 30 days)"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Pick an SI prefix so that the value is in [1, 1000).
pub fn scale_si(value: f64) -> (f64, &'static str) {
    const PREFIXES: [(f64, &str); 4] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (factor, prefix) in PREFIXES {
        if value.abs() >= factor {
            return (value / factor, prefix);
        }
    }
    (value, "")
}

/// Three significant digits without scientific notation: 93.4, 9.35, 935, 1000.
fn three_significant(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 100.0 || magnitude == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_use_si_bits() {
        assert_eq!(format_rate(93_400_000.0), "93.4 Mbit/s");
        assert_eq!(format_rate(1e9), "1.00 Gbit/s");
        assert_eq!(format_rate(950.0), "950 bit/s");
        assert_eq!(format_rate(12_345.0), "12.3 kbit/s");
    }

    #[test]
    fn sizes_use_iec_bytes() {
        assert_eq!(format_bytes(1420), "1420 B");
        assert_eq!(format_bytes(9000), "9000 B");
        assert_eq!(format_bytes(16 * 1024), "16.0 KiB");
        // MSS and window fields are exact, as titles quote them ("MSS 65495").
        assert_eq!(format_bytes(65_495), "65495 B");
        assert_eq!(format_bytes(65_535), "65535 B");
        assert_eq!(format_bytes(64 * 1024), "64.0 KiB");
        assert_eq!(format_bytes(100_000), "97.7 KiB");
        assert_eq!(format_bytes(2 * 1024 * 1024), "2.00 MiB");
        assert_eq!(format_bytes(6 * 1024 * 1024 * 1024), "6.00 GiB");
    }

    #[test]
    fn byte_rates_use_iec() {
        assert_eq!(format_byte_rate(21_000_000.0), "20.0 MiB/s");
        assert_eq!(format_byte_rate(500.0), "500 B/s");
        assert_eq!(
            format_byte_rate(3.0 * 1024.0 * 1024.0 * 1024.0),
            "3.00 GiB/s"
        );
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(format_duration(Duration::from_micros(350)), "350 µs");
        assert_eq!(format_duration(Duration::from_millis(41)), "41.0 ms");
        assert_eq!(format_duration(Duration::from_secs(3670)), "1 h 1 min 10 s");
        assert_eq!(format_duration(Duration::from_secs(7440)), "2 h 4 min");
        assert_eq!(format_duration(Duration::from_secs(90)), "1 min 30 s");
    }

    #[test]
    fn parses_the_forms_users_type() {
        let table = [
            ("130s", 130_000),
            ("2h10m", 7_800_000),
            ("2h 10min", 7_800_000),
            ("500ms", 500),
            ("1.5s", 1_500),
            ("90min", 5_400_000),
            ("1h", 3_600_000),
        ];
        for (text, millis) in table {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(millis),
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_bare_numbers_and_unknown_units() {
        for bad in ["", "130", "10 parsecs", "s", "1..2s", "99999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }
}
