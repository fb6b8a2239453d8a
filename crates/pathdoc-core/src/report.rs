//! The report model: every check returns [`Finding`]s, each with its evidence and remedy.
//!
//! The JSON form of [`Report`] is versioned by [`SCHEMA_VERSION`]; scripts should check it.
//! Adding fields is a compatible change; renaming or removing one bumps the version.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

use crate::check::Command;
use crate::units;

/// Version of the JSON report schema (`schema` field of every `--json` output). Version 2 added
/// the address family: `family` on findings, the report's `families`, and in a run over both
/// families the data of each under `data.ipv4` / `data.ipv6` (docs/output.md).
pub const SCHEMA_VERSION: &str = "pathdoc.report/2";

/// Every schema version `pathdoc report` reads: version 1 is version 2 without families.
pub const SCHEMA_VERSIONS_READ: &[&str] = &["pathdoc.report/1", SCHEMA_VERSION];

/// The IP version a finding or a measurement is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AddressFamily {
    Ipv4,
    Ipv6,
}

impl AddressFamily {
    pub fn of(ip: &std::net::IpAddr) -> Self {
        if ip.is_ipv4() {
            AddressFamily::Ipv4
        } else {
            AddressFamily::Ipv6
        }
    }

    /// "IPv4" / "IPv6", as people write it.
    pub fn label(self) -> &'static str {
        match self {
            AddressFamily::Ipv4 => "IPv4",
            AddressFamily::Ipv6 => "IPv6",
        }
    }

    /// The JSON name and the key of its data in a run over both families: `ipv4` / `ipv6`.
    pub fn key(self) -> &'static str {
        match self {
            AddressFamily::Ipv4 => "ipv4",
            AddressFamily::Ipv6 => "ipv6",
        }
    }

    pub fn other(self) -> Self {
        match self {
            AddressFamily::Ipv4 => AddressFamily::Ipv6,
            AddressFamily::Ipv6 => AddressFamily::Ipv4,
        }
    }
}

impl fmt::Display for AddressFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One address family a run covered, and the server address it reached in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyRun {
    pub family: AddressFamily,
    /// `address:port` reached (`[v6]:port`); absent when that family could not be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

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
    /// Bytes per second (what scp/rsync print); shown with IEC prefixes (MiB/s).
    #[serde(rename = "B/s")]
    ByteRate(f64),
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
            Quantity::ByteRate(r) => f.write_str(&units::format_byte_rate(*r)),
            Quantity::Seconds(s) => f.write_str(&units::format_seconds(*s)),
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

/// Which way along the path a finding applies. "Client" is the host that ran the pathdoc client
/// command (or, for a capture, the side that opened the connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    ClientToServer,
    ServerToClient,
    /// Both directions alike (e.g. a symmetric loss, an MSS clamp seen both ways).
    Both,
}

impl Direction {
    /// The arrow form used in titles: `client→server`.
    pub fn arrow(self) -> &'static str {
        match self {
            Direction::ClientToServer => "client→server",
            Direction::ServerToClient => "server→client",
            Direction::Both => "both directions",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.arrow())
    }
}

/// The machine a remedy is applied on, so a user never runs a server fix on their laptop or is
/// told to tune a box their ISP owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Host {
    /// The host that ran the pathdoc client command.
    Client,
    /// The host running `pathdoc server` (or the far end of a capture / SSH session).
    Server,
    /// The same change on both ends.
    BothEnds,
    /// A router or middlebox on the path, by hop number counted from the client when known.
    Router {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hop: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        address: Option<String>,
    },
    /// Equipment the user does not control: ask the access provider.
    Isp,
    /// Anything else, named in words (e.g. "the sending application").
    Other { name: String },
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Client => f.write_str("on the client"),
            Host::Server => f.write_str("on the server"),
            Host::BothEnds => f.write_str("on both ends"),
            Host::Router { hop, address } => {
                f.write_str("on the router")?;
                if let Some(h) = hop {
                    write!(f, " at hop {h}")?;
                }
                if let Some(a) = address {
                    write!(f, " ({a})")?;
                }
                Ok(())
            }
            Host::Isp => f.write_str("by your ISP"),
            Host::Other { name } => write!(f, "on {name}"),
        }
    }
}

/// A concrete fix: what to do and, where there is one, the exact line to run or paste.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remedy {
    /// Where to apply it. Every remedy a check emits names its host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Host>,
    pub description: String,
    /// A command, config line or rule, verbatim (`sysctl -w …`, `ServerAliveInterval 60`, an nft rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl Remedy {
    pub fn new(description: impl Into<String>) -> Self {
        Remedy {
            host: None,
            description: description.into(),
            command: None,
        }
    }

    /// The machine this remedy is applied on.
    pub fn on(mut self, host: Host) -> Self {
        self.host = Some(host);
        self
    }

    pub fn with_command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }
}

/// One kind of finding a check can emit: its stable id and what it means. Each check crate
/// lists its own in a `FINDING_IDS` registry, which docs/output.md is tested against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FindingId {
    /// The `id` field of the findings of this kind.
    pub id: &'static str,
    /// One line: when it is emitted and with which statuses.
    pub meaning: &'static str,
}

/// Finding ids any check can carry, emitted by the front end rather than a check crate.
pub const GENERIC_FINDING_IDS: &[FindingId] = &[
    FindingId {
        id: CHECK_FAILED,
        meaning: "the check named in `check` could not run (refused, lost the server, bad answer), or stopped early after reporting what it had; the summary says why: INCONCLUSIVE",
    },
    FindingId {
        id: CHECK_INTERRUPTED,
        meaning: "the user interrupted the check before it had measured anything: INCONCLUSIVE",
    },
    FindingId {
        id: CHECK_NOT_RUN,
        meaning: "the check (or one test of it) never started: the run was interrupted first: INFO",
    },
    FindingId {
        id: FAMILY_UNREACHABLE,
        meaning: "the name has IPv4 and IPv6 addresses and the server answered over one family only; the checks ran over that one. Connects that time out or find no route: WARN (applications that do not fall back wait for them); refused or another answer: INFO",
    },
];

/// One verdict of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Which check produced it: `idle`, `mtu`, `throughput`, …
    pub check: String,
    /// Stable machine identifier, e.g. `tcp-idle-timeout`, `pmtud-black-hole`.
    pub id: String,
    pub status: Status,
    /// The direction the finding is about, when it is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// The hop (router count from the client) the finding locates, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop: Option<u32>,
    /// The address family the finding is about: set on every finding of a run against a server
    /// address by `pathdoc check`, absent elsewhere (captures; `speed` and `ssh` keep one family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<AddressFamily>,
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
            direction: None,
            hop: None,
            family: None,
            title: title.into(),
            summary: String::new(),
            requirement: None,
            evidence: Vec::new(),
            remedies: Vec::new(),
        }
    }

    pub fn direction(mut self, direction: Direction) -> Self {
        self.direction = Some(direction);
        self
    }

    pub fn hop(mut self, hop: u32) -> Self {
        self.hop = Some(hop);
        self
    }

    pub fn family(mut self, family: AddressFamily) -> Self {
        self.family = Some(family);
        self
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
    pub command: Command,
    /// The peer or lab the command ran against.
    pub target: String,
    pub findings: Vec<Finding>,
    /// The address families the run covered, in the order they ran (this host's preferred one
    /// first). Empty for commands without a server address (captures) and in version 1 reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<FamilyRun>,
    /// Per-check raw measurements (samples, probe tables), keyed by check name — in a run over
    /// both families keyed by family first (`data.ipv6.mtu`, see [`Report::family_data`]).
    #[serde(default)]
    pub data: serde_json::Map<String, serde_json::Value>,
    /// The user stopped the run (Ctrl-C, SIGTERM): the findings are what was measured until
    /// then, and checks that never started are listed as [`CHECK_NOT_RUN`] findings.
    #[serde(default)]
    pub interrupted: bool,
    /// When, where and how the report was made (absent in reports saved before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

/// When, where and how a report was made, so a report mailed to an ISP or compared before and
/// after a fix says what produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Start of the run, ISO 8601 with the local zone offset (`2026-11-26T14:54:05+01:00`).
    pub started: String,
    /// Wall-clock seconds from the start of the run to the report.
    pub duration_s: f64,
    pub pathdoc_version: String,
    /// The git commit the binary was built from (`unknown` outside a checkout).
    pub commit: String,
    /// The host that ran the command.
    pub hostname: String,
    /// `uname`: kernel name, release, version and machine, e.g. `Linux 6.1.0-18-amd64 #1 SMP … x86_64`.
    pub os: String,
    /// The command line as typed, secrets (`--auth-token VALUE`) replaced by `<redacted>`.
    pub command_line: Vec<String>,
}

/// The placeholder for a secret left out of [`Provenance::command_line`].
pub const REDACTED: &str = "<redacted>";

/// Options whose value is a secret and never goes into a report.
const SECRET_OPTIONS: &[&str] = &["--auth-token"];

impl Provenance {
    /// `argv` with the values of secret options replaced (`--auth-token X`, `--auth-token=X`).
    pub fn redact_command_line(argv: impl IntoIterator<Item = String>) -> Vec<String> {
        let mut out = Vec::new();
        let mut secret_next = false;
        for arg in argv {
            if secret_next {
                out.push(REDACTED.to_string());
                secret_next = false;
                continue;
            }
            if SECRET_OPTIONS.contains(&arg.as_str()) {
                secret_next = true;
                out.push(arg);
                continue;
            }
            match SECRET_OPTIONS
                .iter()
                .find(|o| arg.starts_with(&format!("{o}=")))
            {
                Some(o) => out.push(format!("{o}={REDACTED}")),
                None => out.push(arg),
            }
        }
        out
    }

    /// The command line as one shell-like line (arguments with spaces or quotes are quoted).
    pub fn command_line_text(&self) -> String {
        self.command_line
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%[]".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// Finding id of a check that could not run (server refused, lost, bad answer); its summary
/// says why. A report whose findings are all of this kind means "could not run" (exit 2).
pub const CHECK_FAILED: &str = "check-failed";
/// Finding id of a check the user interrupted before it had measured anything.
pub const CHECK_INTERRUPTED: &str = "check-interrupted";
/// Finding id of a check that never started because the run was interrupted first.
pub const CHECK_NOT_RUN: &str = "check-not-run";
/// Finding id of an address family of a dual-stack name over which the server did not answer.
pub const FAMILY_UNREACHABLE: &str = "family-unreachable";

/// Exit codes scripts can rely on (docs/output.md).
pub mod exit {
    /// Ran, no problem found.
    pub const OK: i32 = 0;
    /// Ran, a problem was found (a FAIL or WARN finding).
    pub const PROBLEM: i32 = 1;
    /// Could not run: usage, unreachable or foreign server, refusal, missing privilege or tool.
    pub const COULD_NOT_RUN: i32 = 2;
    /// Ran, but could not decide.
    pub const INCONCLUSIVE: i32 = 3;
    /// Interrupted by the user (128 + SIGINT), partial results.
    pub const INTERRUPTED: i32 = 130;
}

impl Report {
    pub fn new(command: Command, target: impl Into<String>) -> Self {
        Report {
            schema: SCHEMA_VERSION.to_string(),
            pathdoc_version: env!("CARGO_PKG_VERSION").to_string(),
            command,
            target: target.into(),
            findings: Vec::new(),
            families: Vec::new(),
            data: serde_json::Map::new(),
            interrupted: false,
            provenance: None,
        }
    }

    /// The run covered both address families (its data is keyed by family).
    pub fn both_families(&self) -> bool {
        self.families.len() > 1
    }

    /// The measurements of one family: `data.<family>` in a run over both, else `data` when the
    /// run covered that family (or did not say).
    pub fn family_data(
        &self,
        family: AddressFamily,
    ) -> Option<&serde_json::Map<String, serde_json::Value>> {
        if self.both_families() {
            return self.data.get(family.key()).and_then(|v| v.as_object());
        }
        match self.families.first() {
            Some(run) if run.family != family => None,
            _ => Some(&self.data),
        }
    }

    /// The report as if the run had covered `family` only: its findings and its data.
    pub fn for_family(&self, family: AddressFamily) -> Report {
        let mut r = self.clone();
        r.findings.retain(|f| f.family.is_none_or(|x| x == family));
        r.data = self.family_data(family).cloned().unwrap_or_default();
        r.families.retain(|run| run.family == family);
        r
    }

    /// Every finding says its check could not run (and there is at least one).
    pub fn could_not_run(&self) -> bool {
        !self.interrupted
            && !self.findings.is_empty()
            && self.findings.iter().all(|f| f.id == CHECK_FAILED)
    }

    /// The worst status among the findings (`Pass` when there are none).
    pub fn overall(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Pass)
    }

    /// Process exit code for scripts ([`exit`]): 130 interrupted, 2 no check could run, else by
    /// the worst finding: 0 healthy, 1 a fault was found, 3 inconclusive only.
    pub fn exit_code(&self) -> i32 {
        if self.interrupted {
            return exit::INTERRUPTED;
        }
        if self.could_not_run() {
            return exit::COULD_NOT_RUN;
        }
        match self.overall() {
            Status::Pass | Status::Info => exit::OK,
            Status::Fail | Status::Warn => exit::PROBLEM,
            Status::Inconclusive => exit::INCONCLUSIVE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_beyond_a_duration_display_as_numbers_not_panics() {
        // 1e20 s panicked in Duration::from_secs_f64 (`pathdoc report` exited 101; found again
        // by the report_reader fuzz target).
        assert_eq!(
            Quantity::Seconds(1e20).to_string(),
            "100000000000000000000 s"
        );
        assert_eq!(
            Quantity::Seconds(f64::MAX).to_string(),
            format!("{} s", f64::MAX)
        );
        assert_eq!(Quantity::Seconds(-1.0).to_string(), "-1 s");
        assert_eq!(Quantity::Seconds(f64::NAN).to_string(), "NaN s");
        assert_eq!(Quantity::Seconds(7440.0).to_string(), "2 h 4 min");
    }

    #[test]
    fn overall_is_worst_and_fail_beats_inconclusive() {
        let mut r = Report::new(crate::Command::Check, "lab");
        assert_eq!(r.exit_code(), 0);
        r.findings
            .push(Finding::new("mtu", "a", Status::Inconclusive, "x"));
        assert_eq!(r.exit_code(), 3);
        r.findings.push(Finding::new("mtu", "b", Status::Fail, "y"));
        assert_eq!(r.overall(), Status::Fail);
        assert_eq!(r.exit_code(), 1);
    }

    #[test]
    fn could_not_run_and_interrupted_have_their_own_codes() {
        let mut r = Report::new(crate::Command::Check, "lab");
        r.findings
            .push(Finding::new("mtu", CHECK_FAILED, Status::Inconclusive, "x"));
        assert_eq!(r.exit_code(), exit::COULD_NOT_RUN);
        r.findings
            .push(Finding::new("idle", "udp", Status::Inconclusive, "y"));
        assert_eq!(r.exit_code(), exit::INCONCLUSIVE);
        r.interrupted = true;
        assert_eq!(r.exit_code(), exit::INTERRUPTED);
        // Reports saved before the flag existed read back as not interrupted.
        let mut json = serde_json::to_value(&r).unwrap();
        json.as_object_mut().unwrap().remove("interrupted");
        let back: Report = serde_json::from_value(json).unwrap();
        assert!(!back.interrupted);
    }

    #[test]
    fn auth_tokens_never_reach_the_command_line() {
        let argv = [
            "pathdoc",
            "check",
            "host",
            "--auth-token",
            "s3cret",
            "--auth-token=other",
            "--idle",
        ]
        .map(String::from);
        let line = Provenance::redact_command_line(argv);
        assert_eq!(
            line,
            [
                "pathdoc",
                "check",
                "host",
                "--auth-token",
                REDACTED,
                "--auth-token=<redacted>",
                "--idle"
            ]
        );
        assert!(!line.concat().contains("s3cret") && !line.concat().contains("other"));
    }

    #[test]
    fn command_line_text_quotes_what_a_shell_would_split() {
        let p = Provenance {
            started: String::new(),
            duration_s: 0.0,
            pathdoc_version: String::new(),
            commit: String::new(),
            hostname: String::new(),
            os: String::new(),
            command_line: ["pathdoc", "ssh", "nas", "-o", "ProxyJump=a b", "it's"]
                .map(String::from)
                .to_vec(),
        };
        assert_eq!(
            p.command_line_text(),
            "pathdoc ssh nas -o 'ProxyJump=a b' 'it'\\''s'"
        );
    }

    #[test]
    fn quantities_serialize_with_base_units() {
        let e = Evidence::new("goodput", Quantity::Goodput(93.4e6));
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["value"]["unit"], "bit/s goodput");
        assert_eq!(json["value"]["value"], 93.4e6);
        assert_eq!(e.value.to_string(), "93.4 Mbit/s goodput");
    }

    #[test]
    fn direction_hop_and_remedy_host_serialize_as_fields() {
        let f = Finding::new("mtu", "pmtud-black-hole", Status::Fail, "x")
            .direction(Direction::ServerToClient)
            .hop(2)
            .remedy(Remedy::new("let ICMP through").on(Host::Router {
                hop: Some(2),
                address: Some("192.0.2.1".into()),
            }));
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["direction"], "server-to-client");
        assert_eq!(json["hop"], 2);
        assert_eq!(json["remedies"][0]["host"]["kind"], "router");
        assert_eq!(json["remedies"][0]["host"]["hop"], 2);
        let back: Finding = serde_json::from_value(json).unwrap();
        assert_eq!(back, f);
        assert_eq!(
            f.remedies[0].host.as_ref().unwrap().to_string(),
            "on the router at hop 2 (192.0.2.1)"
        );
    }
}
