//! Parsing and printing durations the way users type them: `130s`, `2h10m`, `500ms`, `1.5s`.
//!
//! Hand-written instead of a dependency because the grammar is tiny and the error messages
//! should name the flag's expectations exactly.

use std::time::Duration;

/// Parse `2h10m`, `130s`, `90min`, `500ms`, `1.5s`. A unit is required on every number so that
/// `--idle-max 130` cannot silently mean seconds when the user meant minutes.
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

/// Milliseconds as a [`Duration`] (the wire and the JSON carry milliseconds).
pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A [`Duration`] in whole milliseconds, saturating.
pub fn to_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

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

/// Serde helpers: durations as seconds (f64) in the JSON report.
pub mod secs {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub mod option {
        use super::*;
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => s.serialize_some(&d.as_secs_f64()),
                None => s.serialize_none(),
            }
        }
    }

    pub mod vec {
        use super::*;
        use serde::ser::SerializeSeq;
        pub fn serialize<S: Serializer>(v: &[Duration], s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(v.len()))?;
            for d in v {
                seq.serialize_element(&d.as_secs_f64())?;
            }
            seq.end()
        }
    }
}
