//! Durations on the wire (milliseconds) and in the JSON report (seconds). Parsing what users
//! type (`130s`, `2h10m`) is shared by every command: [`pathdoc_core::units::parse_duration`].

pub use pathdoc_core::units::parse_duration;
use std::time::Duration;

/// Milliseconds as a [`Duration`] (the wire and the JSON carry milliseconds).
pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A [`Duration`] in whole milliseconds, saturating.
pub fn to_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
