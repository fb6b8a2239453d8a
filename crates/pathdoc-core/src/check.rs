//! Names that cross crate boundaries, as types: which check ([`CheckName`]), which command made
//! a report ([`Command`]), what a check run hands back ([`CheckOutcome`]), and the evidence names
//! another crate reads ([`evidence`]).
//!
//! The registry that ties a check's name to its flags, server service, docs and figures lives in
//! the binary (`pathdoc-cli/src/checks.rs`), the only crate that sees every check.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Finding;

/// A check's name: the `check` of its findings, the key of its `data` section, its flag in
/// `pathdoc check`, its exporter module's `check`, its `### …` table in docs/output.md.
///
/// The throughput check is `throughput` everywhere except on the wire, where the protocol's
/// `CheckKind::Speed` ("speed") stays for compatibility; the check registry maps one to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckName {
    Mtu,
    Throughput,
    Idle,
    /// `pathdoc ssh` (and `pathdoc check --ssh`'s SSH verdicts).
    Ssh,
    /// `pathdoc analyze`: verdicts from a capture file.
    Analyze,
}

impl CheckName {
    /// Every name, in the order `pathdoc check` runs the checks (short ones first).
    pub const ALL: [CheckName; 5] = [
        CheckName::Mtu,
        CheckName::Throughput,
        CheckName::Idle,
        CheckName::Ssh,
        CheckName::Analyze,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            CheckName::Mtu => "mtu",
            CheckName::Throughput => "throughput",
            CheckName::Idle => "idle",
            CheckName::Ssh => "ssh",
            CheckName::Analyze => "analyze",
        }
    }

    /// The key of the check's section in a report's `data`.
    pub const fn data_key(self) -> &'static str {
        self.as_str()
    }
}

impl fmt::Display for CheckName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<CheckName> for String {
    fn from(name: CheckName) -> String {
        name.as_str().to_string()
    }
}

impl PartialEq<CheckName> for String {
    fn eq(&self, name: &CheckName) -> bool {
        self == name.as_str()
    }
}

impl PartialEq<CheckName> for str {
    fn eq(&self, name: &CheckName) -> bool {
        self == name.as_str()
    }
}

/// A name that is no check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCheck(pub String);

impl fmt::Display for UnknownCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = CheckName::ALL.iter().map(|c| c.as_str()).collect();
        write!(f, "no check `{}` (known: {})", self.0, known.join(", "))
    }
}

impl std::error::Error for UnknownCheck {}

impl FromStr for CheckName {
    type Err = UnknownCheck;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CheckName::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCheck(s.to_string()))
    }
}

/// The command that made a report (`report.command`). A saved report from another version may
/// name a command this one does not know: it is kept as [`Command::Other`], so reading and
/// re-rendering it still works and writing it back changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Command {
    Check,
    Speed,
    Ssh,
    Analyze,
    Other(String),
}

impl Command {
    pub fn as_str(&self) -> &str {
        match self {
            Command::Check => "check",
            Command::Speed => "speed",
            Command::Ssh => "ssh",
            Command::Analyze => "analyze",
            Command::Other(name) => name,
        }
    }
}

impl From<String> for Command {
    fn from(name: String) -> Command {
        match name.as_str() {
            "check" => Command::Check,
            "speed" => Command::Speed,
            "ssh" => Command::Ssh,
            "analyze" => Command::Analyze,
            _ => Command::Other(name),
        }
    }
}

impl From<Command> for String {
    fn from(command: Command) -> String {
        command.as_str().to_string()
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one check run hands back: its findings and its measurements (`D`, typed by the check;
/// [`CheckOutcome::into_json`] makes the report's `data` section of it).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOutcome<D = serde_json::Value> {
    pub findings: Vec<Finding>,
    pub data: D,
}

impl<D: Serialize> CheckOutcome<D> {
    pub fn into_json(self) -> Result<CheckOutcome, serde_json::Error> {
        Ok(CheckOutcome {
            findings: self.findings,
            data: serde_json::to_value(&self.data)?,
        })
    }
}

/// Evidence names that another crate reads back (a chart draws what the verdict stated).
pub mod evidence {
    /// The rate a window allows at the measured RTT (SSH's channel window, a TCP receive
    /// window); pathdoc-html draws pathdoc-ssh's as the ceiling line of the SSH chart.
    pub const WINDOW_RTT_CEILING: &str = "window / RTT ceiling";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_are_kebab_case_in_json_and_parse_back() {
        for name in CheckName::ALL {
            let json = serde_json::to_string(&name).unwrap();
            assert_eq!(json, format!("\"{}\"", name.as_str()));
            assert_eq!(name.as_str().parse::<CheckName>(), Ok(name));
        }
        assert!("speed".parse::<CheckName>().is_err());
    }

    #[test]
    fn commands_round_trip_also_unknown_ones() {
        for text in ["check", "speed", "ssh", "analyze", "lab-demo"] {
            let c: Command = serde_json::from_str(&format!("\"{text}\"")).unwrap();
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{text}\""));
        }
        assert_eq!(Command::from("check".to_string()), Command::Check);
    }
}
