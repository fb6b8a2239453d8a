//! The report model: every check returns [`Finding`]s, each with its evidence and remedy.
//!
//! The JSON form of [`Report`] is versioned by [`SCHEMA_VERSION`]; scripts should check it.
//! Adding fields is a compatible change; renaming or removing one bumps the version.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

use crate::units;

/// Version of the JSON report schema (`schema` field of every `--json` output).
pub const SCHEMA_VERSION: &str = "pathdoc.report/1";

/// Outcome of one finding. Ordered from best to worst so a report's overall status is the max,
/// except that `Inconclusive` never hides a `Fail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Measured and healthy (meets the requirement named in the finding).
    Pass,
    /// Informational measurement with no judgement attached.
    Info,
    /// Could not be decided; the finding's summary says why.
    Inconclusive,
    /// Works, but worse than recommended (e.g. meets a MUST but not a SHOULD).
    Warn,
    /// A fault was found and proven by the evidence.
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Info => "INFO",
            Status::Inconclusive => "INCONCLUSIVE",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A measured value with its unit. The JSON carries the raw number in base units
/// (`bit/s`, `B`, `s`) so scripts never parse human strings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "unit", content = "value")]
pub enum Quantity {
    /// Goodput: TCP payload bits per second (what the application gets).
    #[serde(rename = "bit/s goodput")]
    Goodput(f64),
    /// On-the-wire bits per second including IP/TCP headers (and Ethernet framing if stated).
    #[serde(rename = "bit/s wire")]
    WireRate(f64),
    /// Some other rate in bits per second (e.g. a tbf setting, a pacing rate).
    #[serde(rename = "bit/s")]
    Rate(f64),
    #[serde(rename = "B")]
    Bytes(u64),
    #[serde(rename = "s")]
    Seconds(f64),
    #[serde(rename = "%")]
    Percent(f64),
    #[serde(rename = "count")]
    Count(u64),
    #[serde(rename = "text")]
    Text(String),
}

impl Quantity {
    pub fn duration(d: Duration) -> Self {
        Quantity::Seconds(d.as_secs_f64())
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Quantity::Goodput(r) => write!(f, "{} goodput", units::format_rate(*r)),
            Quantity::WireRate(r) => write!(f, "{} on the wire", units::format_rate(*r)),
            Quantity::Rate(r) => f.write_str(&units::format_rate(*r)),
            Quantity::Bytes(b) => f.write_str(&units::format_bytes(*b)),
            Quantity::Seconds(s) if s.is_finite() && *s >= 0.0 => {
                f.write_str(&units::format_duration(Duration::from_secs_f64(*s)))
            }
            Quantity::Seconds(s) => write!(f, "{s} s"),
            Quantity::Percent(p) => write!(f, "{p:.2} %"),
            Quantity::Count(n) => write!(f, "{n}"),
            Quantity::Text(t) => f.write_str(t),
        }
    }
}

/// One measurement behind a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What was measured, e.g. "server→client probe after 3600 s idle".
    pub name: String,
    pub value: Quantity,
    /// Optional context: how it was measured, where it came from (TCP_INFO field, ICMP source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Evidence {
    pub fn new(name: impl Into<String>, value: Quantity) -> Self {
        Evidence {
            name: name.into(),
            value,
            detail: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// A concrete fix: what to do and, where there is one, the exact line to run or paste.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remedy {
    pub description: String,
    /// A command, config line or rule, verbatim (`sysctl -w …`, `ServerAliveInterval 60`, an nft rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl Remedy {
    pub fn new(description: impl Into<String>) -> Self {
        Remedy {
            description: description.into(),
            command: None,
        }
    }

    pub fn with_command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }
}

/// One verdict of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Which check produced it: `idle`, `mtu`, `throughput`, …
    pub check: String,
    /// Stable machine identifier, e.g. `tcp-idle-timeout`, `pmtud-black-hole`.
    pub id: String,
    pub status: Status,
    /// One line: the diagnosis.
    pub title: String,
    /// A few sentences: what was seen and what it means (or, if inconclusive, why).
    pub summary: String,
    /// The threshold or requirement it was judged against (e.g. "RFC 5382 REQ-5: ≥ 2 h 4 min").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirement: Option<String>,
    pub evidence: Vec<Evidence>,
    pub remedies: Vec<Remedy>,
}

impl Finding {
    pub fn new(
        check: impl Into<String>,
        id: impl Into<String>,
        status: Status,
        title: impl Into<String>,
    ) -> Self {
        Finding {
            check: check.into(),
            id: id.into(),
            status,
            title: title.into(),
            summary: String::new(),
            requirement: None,
            evidence: Vec::new(),
            remedies: Vec::new(),
        }
    }

    pub fn summary(mut self, summary: impl Into<String>) -> Self {
        self.summary = summary.into();
        self
    }

    pub fn requirement(mut self, requirement: impl Into<String>) -> Self {
        self.requirement = Some(requirement.into());
        self
    }

    pub fn evidence(mut self, evidence: Evidence) -> Self {
        self.evidence.push(evidence);
        self
    }

    pub fn remedy(mut self, remedy: Remedy) -> Self {
        self.remedies.push(remedy);
        self
    }

    pub fn evidences(mut self, evidence: impl IntoIterator<Item = Evidence>) -> Self {
        self.evidence.extend(evidence);
        self
    }

    pub fn remedies(mut self, remedies: impl IntoIterator<Item = Remedy>) -> Self {
        self.remedies.extend(remedies);
        self
    }
}

/// The whole result of one command run (`pathdoc check`, `pathdoc speed`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA_VERSION`].
    pub schema: String,
    pub pathdoc_version: String,
    /// The command that produced it, e.g. `check`, `speed`.
    pub command: String,
    /// The peer or lab the command ran against.
    pub target: String,
    pub findings: Vec<Finding>,
    /// Per-check raw measurements (samples, probe tables), keyed by check name.
    #[serde(default)]
    pub data: serde_json::Map<String, serde_json::Value>,
}

impl Report {
    pub fn new(command: impl Into<String>, target: impl Into<String>) -> Self {
        Report {
            schema: SCHEMA_VERSION.to_string(),
            pathdoc_version: env!("CARGO_PKG_VERSION").to_string(),
            command: command.into(),
            target: target.into(),
            findings: Vec::new(),
            data: serde_json::Map::new(),
        }
    }

    /// The worst status among the findings (`Pass` when there are none).
    pub fn overall(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Pass)
    }

    /// Process exit code for scripts: 0 healthy, 1 a fault was found, 3 inconclusive only.
    /// (2 is reserved for "could not run": usage errors, unreachable server, missing privilege.)
    pub fn exit_code(&self) -> i32 {
        match self.overall() {
            Status::Pass | Status::Info => 0,
            Status::Fail | Status::Warn => 1,
            Status::Inconclusive => 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overall_is_worst_and_fail_beats_inconclusive() {
        let mut r = Report::new("check", "lab");
        assert_eq!(r.exit_code(), 0);
        r.findings
            .push(Finding::new("mtu", "a", Status::Inconclusive, "x"));
        assert_eq!(r.exit_code(), 3);
        r.findings.push(Finding::new("mtu", "b", Status::Fail, "y"));
        assert_eq!(r.overall(), Status::Fail);
        assert_eq!(r.exit_code(), 1);
    }

    #[test]
    fn quantities_serialize_with_base_units() {
        let e = Evidence::new("goodput", Quantity::Goodput(93.4e6));
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["value"]["unit"], "bit/s goodput");
        assert_eq!(json["value"]["value"], 93.4e6);
        assert_eq!(e.value.to_string(), "93.4 Mbit/s goodput");
    }
}
