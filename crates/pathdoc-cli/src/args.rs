//! Value parsers shared by every command, so each numeric and duration flag accepts one grammar,
//! has bounds, and fails as a one-line usage error (exit 2) before any network work.
//!
//! Durations use `pathdoc_core::units::parse_duration` (`500ms`, `10s`, `2h10m`); the iperf3-style
//! flags of `pathdoc speed` (`-t`, `--interval`) also take bare seconds.

use std::time::Duration;

use pathdoc_core::units::{format_bytes, parse_duration};

/// A duration flag within `[min, max]`.
pub fn duration(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text| parse_duration(text).and_then(|d| within(d, min, max))
}

/// A duration flag within `[min, max]`, or exactly zero (which switches the step off).
pub fn duration_or_zero(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text| match parse_duration(text)? {
        d if d.is_zero() => Ok(d),
        d => within(d, min, max).map_err(|e| format!("{e} (or 0 to skip)")),
    }
}

/// iperf3 habit: a bare number is seconds (`-t 10`); anything else is the shared grammar.
pub fn seconds_or_duration(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text| {
        let t = text.trim();
        let d = if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
            let secs: f64 = t
                .parse()
                .map_err(|_| format!("{t:?} is not a number of seconds"))?;
            Duration::try_from_secs_f64(secs).map_err(|_| format!("{t:?} is out of range"))?
        } else {
            parse_duration(t)?
        };
        within(d, min, max)
    }
}

fn within(d: Duration, min: Duration, max: Duration) -> Result<Duration, String> {
    if d < min || d > max {
        return Err(format!("must be between {} and {}", bound(min), bound(max)));
    }
    Ok(d)
}

/// A round limit as it is typed: `200ms`, `1s`, `60s`, `24h` (not `1.00 s`).
fn bound(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        _ if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

/// Parse a byte count with an optional SI (kB, MB, GB) or IEC (KiB, MiB, GiB) suffix.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 1GiB, 500MB)"))?;
    let factor = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit {other:?} (use B, kB, MB, GB, KiB, MiB, GiB)"
            ))
        }
    };
    let bytes = value * factor;
    if !(1.0..1e18).contains(&bytes) {
        return Err(format!("size {s:?} out of range"));
    }
    Ok(bytes as u64)
}

/// A byte count within `[min, max]`.
pub fn bytes(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text| {
        let b = parse_bytes(text)?;
        if b < min || b > max {
            return Err(format!(
                "must be between {} and {}",
                format_bytes(min),
                format_bytes(max)
            ));
        }
        Ok(b)
    }
}

pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_one_grammar_and_bounds() {
        let d = duration(ms(200), secs(86400));
        assert_eq!(d("10s").unwrap(), secs(10));
        assert_eq!(d("2h10m").unwrap(), secs(7800));
        for bad in [
            "0s",
            "10",
            "-1s",
            "25h",
            "1e400s",
            "99999999999999999999s",
            "x",
        ] {
            assert!(d(bad).is_err(), "{bad}");
        }
        let t = seconds_or_duration(ms(100), secs(3600));
        assert_eq!(t("3").unwrap(), secs(3));
        assert_eq!(t("1.5").unwrap(), ms(1500));
        assert_eq!(t("500ms").unwrap(), ms(500));
        for bad in ["0", "99999999999999999999", "-1", "1e3", "2h", "", "."] {
            assert!(t(bad).is_err(), "{bad}");
        }
        assert_eq!(
            d("25h").unwrap_err(),
            "must be between 200ms and 24h",
            "limits are shown as they are typed"
        );
        let z = duration_or_zero(ms(100), secs(5));
        assert_eq!(z("0s").unwrap(), Duration::ZERO);
        assert!(z("10s").is_err());
    }

    #[test]
    fn sizes_parse_with_units_and_bounds() {
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("500MB").unwrap(), 500_000_000);
        assert_eq!(parse_bytes("256KiB").unwrap(), 262_144);
        assert!(parse_bytes("-1").is_err() && parse_bytes("1TB").is_err());
        assert!(bytes(4096, 1 << 30)("1k").is_err());
        assert!(bytes(1, 1 << 40)("99999999999999999999").is_err());
    }
}
