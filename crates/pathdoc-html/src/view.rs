//! Typed, forgiving views of `report.data`: only the fields the report draws, every one optional
//! or defaulted, unknown fields ignored. The checks' data layouts grow while the schema stays
//! `pathdoc.report/1`; a plot whose data is missing or unreadable says so instead of failing.
//!
//! Layouts: docs/throughput.md (`data.throughput`), docs/idle.md (`data.idle`), docs/mtu.md
//! (`data.mtu`), docs/analyze.md (`data.analyze`), docs/ssh.md (`data.ssh`).

use pathdoc_core::Report;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// One check's data: absent from the report, present but unreadable (with serde's reason), or read.
#[derive(Debug)]
pub enum Section<T> {
    Absent,
    Unreadable(String),
    Read(T),
}

impl<T> Section<T> {
    pub fn read(&self) -> Option<&T> {
        match self {
            Section::Read(t) => Some(t),
            _ => None,
        }
    }
}

/// Read `report.data[key]` as `T`.
pub fn section<T: DeserializeOwned>(report: &Report, key: &str) -> Section<T> {
    match report.data.get(key) {
        None | Some(serde_json::Value::Null) => Section::Absent,
        Some(v) => match T::deserialize(v) {
            Ok(t) => Section::Read(t),
            Err(e) => Section::Unreadable(e.to_string()),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Throughput (`data.throughput`)

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Throughput {
    pub runs: Vec<SpeedRun>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SpeedRun {
    pub mode: Option<String>,
    pub congestion_control: Option<String>,
    pub directions: Vec<SpeedDirection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SpeedDirection {
    /// `upload` (client→server) or `download`.
    pub direction: String,
    pub streams: Option<u32>,
    pub goodput_bps: Option<f64>,
    pub duration_s: Option<f64>,
    /// All streams of the direction together; per stream in `intervals[].streams[]`.
    pub intervals: Vec<Interval>,
    /// Slow start and steady state (derived by the check from the intervals).
    pub phases: Option<Phases>,
    pub sender: Option<SenderTotals>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Phases {
    pub slow_start_end_s: Option<f64>,
    pub steady: Option<Steady>,
}

/// The part of the transfer the verdicts are judged on.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Steady {
    pub start_s: Option<f64>,
    pub end_s: Option<f64>,
    pub goodput_bps: Option<f64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Interval {
    pub start_s: Option<f64>,
    pub end_s: Option<f64>,
    pub goodput_bps: Option<f64>,
    pub cwnd_bytes: Option<f64>,
    pub rtt_us: Option<f64>,
    pub retransmits: Option<f64>,
    pub streams: Vec<StreamInterval>,
}

/// One stream in one interval.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct StreamInterval {
    /// Index within its direction, 0-based.
    pub stream: Option<u32>,
    pub goodput_bps: Option<f64>,
    pub cwnd_bytes: Option<f64>,
    pub rtt_us: Option<f64>,
    pub retransmits: Option<f64>,
}

impl SpeedDirection {
    /// Each stream's own intervals (times from the direction's intervals), when the report has
    /// per-stream samples for more than one stream.
    pub fn per_stream(&self) -> Vec<(u32, Vec<Interval>)> {
        let mut streams: Vec<(u32, Vec<Interval>)> = Vec::new();
        for i in &self.intervals {
            for (k, s) in i.streams.iter().enumerate() {
                let id = s.stream.unwrap_or(k as u32);
                let sample = Interval {
                    start_s: i.start_s,
                    end_s: i.end_s,
                    goodput_bps: s.goodput_bps,
                    cwnd_bytes: s.cwnd_bytes,
                    rtt_us: s.rtt_us,
                    retransmits: s.retransmits,
                    streams: Vec::new(),
                };
                match streams.iter_mut().find(|(x, _)| *x == id) {
                    Some((_, v)) => v.push(sample),
                    None => streams.push((id, vec![sample])),
                }
            }
        }
        if streams.len() < 2 {
            streams.clear();
        }
        streams.sort_by_key(|(id, _)| *id);
        streams
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SenderTotals {
    pub congestion_control: Option<String>,
    pub snd_mss: Option<u32>,
    pub retransmits: Option<u64>,
}

impl SpeedDirection {
    /// `client→server` for uploads, `server→client` for downloads.
    pub fn arrow(&self) -> &'static str {
        match self.direction.as_str() {
            "download" => "server→client",
            _ => "client→server",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Idle (`data.idle`)

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Idle {
    pub tests: Vec<IdleTest>,
    pub ladders: Vec<Ladder>,
    pub udp: Option<Udp>,
    pub plan: Option<Plan>,
    pub path: Option<IdlePath>,
    pub culprit: Option<Culprit>,
    pub public_addr: Option<String>,
    pub outages: Vec<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct IdleTest {
    /// `server-initiated`, `client-initiated`, `keepalive`, `near-warm`, `far-warm`.
    pub mode: String,
    pub idle_s: Option<f64>,
    /// `alive`, `dead` or `lost to outage`.
    pub outcome: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Ladder {
    pub mode: String,
    pub split: Option<u32>,
    pub outcome: Option<Bracket>,
}

/// What a ladder measured: the longest idle survived and the shortest that killed.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Bracket {
    pub lower_s: Option<f64>,
    pub upper_s: Option<f64>,
    pub horizon_s: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Udp {
    pub tests: Vec<UdpTest>,
    /// Bindings in two classes with their own timers (single exchange, stream)…
    pub single_exchange: Option<UdpClass>,
    pub stream: Option<UdpClass>,
    /// …or, in reports before the classes, one ladder.
    pub outcome: Option<Bracket>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UdpClass {
    pub outcome: Option<Bracket>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UdpTest {
    /// `single-exchange` or `stream`; absent for the inbound-refresh bindings (and old reports).
    pub class: Option<String>,
    pub idle_s: Option<f64>,
    pub outcome: String,
    pub inbound_refresh: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Plan {
    pub horizon_s: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct IdlePath {
    /// Router addresses, hop 1 (nearest the client) first.
    pub addrs: Vec<Option<String>>,
    pub routers: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Culprit {
    pub location: Option<CulpritLocation>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CulpritLocation {
    pub kind: Option<String>,
    pub hop: Option<u32>,
}

impl Idle {
    /// The longest idle time any probe was tested at, or the plan's horizon.
    pub fn horizon_s(&self) -> Option<f64> {
        self.plan.as_ref().and_then(|p| p.horizon_s)
    }
}

// ---------------------------------------------------------------------------------------------
// MTU (`data.mtu`)

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Mtu {
    pub server: Option<String>,
    pub client_observed: Option<String>,
    pub up: Option<MtuDirection>,
    pub down: Option<MtuDirection>,
    /// The interface each end's bulk download used: driver, offloads, MTU, VM (seed 003).
    pub server_nic: Option<pathdoc_core::nic::NicFacts>,
    pub client_nic: Option<pathdoc_core::nic::NicFacts>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MtuDirection {
    /// `client-to-server` or `server-to-client`.
    pub direction: String,
    pub max_probed: Option<u32>,
    pub local_limit: Option<u32>,
    pub probes: Vec<ProbeRow>,
    pub icmp: Vec<Icmp>,
    pub outcome: Option<MtuOutcome>,
    pub ttl_scan: Vec<TtlRow>,
    pub location: Option<MtuLocation>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct ProbeRow {
    pub size: u32,
    pub sent: u32,
    pub received: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Icmp {
    /// `too-big`, `time-exceeded`, `unreachable`, `other`.
    pub kind: String,
    pub mtu: Option<u32>,
    pub from: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MtuOutcome {
    /// `clean`, `signalled`, `black-hole`, `bad-suggestion`, `nothing-arrived`.
    pub kind: String,
    pub mtu: Option<u32>,
    pub smallest_lost: Option<u32>,
    pub ptb_mtu: Option<u32>,
    pub ptb_from: Option<String>,
    /// For `clean`: what stopped the search — `sender-interface` or `probe-limit` (then the
    /// path MTU is at least `mtu`).
    pub cap: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TtlRow {
    pub ttl: u32,
    pub big: Option<HopReply>,
    pub small: Option<HopReply>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct HopReply {
    pub kind: String,
    pub from: Option<String>,
}

/// The link where the MTU drops: the one leaving `hop`, counted from the sender.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MtuLocation {
    pub hop: Option<u32>,
    pub addr: Option<String>,
    pub method: Option<String>,
}

impl MtuDirection {
    pub fn arrow(&self) -> &'static str {
        match self.direction.as_str() {
            "server-to-client" => "server→client",
            _ => "client→server",
        }
    }

    /// The smallest next-hop MTU any ICMP too-big named.
    pub fn too_big_mtu(&self) -> Option<u32> {
        self.icmp
            .iter()
            .filter(|i| i.kind == "too-big")
            .filter_map(|i| i.mtu)
            .min()
    }
}

// ---------------------------------------------------------------------------------------------
// Captures (`data.analyze`): the time-sequence (Stevens) graph of the connections worth attention.
//
// Read layout (docs/report.md): `captures[].connections[].time_sequence[]`, one entry per data
// direction, `segments` from its sender and `acks` from its receiver, times in seconds since the
// connection's first packet, sequence numbers relative (as Wireshark shows them), flags named as
// Wireshark's `tcp.analysis.*` classes.

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Analyze {
    pub captures: Vec<Capture>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Capture {
    pub file: Option<String>,
    pub connections: Vec<Connection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Connection {
    pub id: Option<u64>,
    pub client: Option<String>,
    pub server: Option<String>,
    pub time_sequence: Vec<TimeSequence>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TimeSequence {
    /// `client-to-server` or `server-to-client`: whose data segments these are.
    pub direction: String,
    pub segments: Vec<Segment>,
    pub acks: Vec<Ack>,
    /// Points were left out (the series is bounded); the graph says so.
    pub truncated: bool,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Segment {
    pub t: f64,
    pub seq: f64,
    pub len: f64,
    pub flags: Vec<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Ack {
    pub t: f64,
    pub ack: f64,
    /// Receive window advertised with this ACK, bytes (scaled).
    pub win: Option<f64>,
    pub flags: Vec<String>,
}

impl Segment {
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

impl Ack {
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

// ---------------------------------------------------------------------------------------------
// SSH (`data.ssh`, docs/ssh.md)

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Ssh {
    pub raw_tcp: SshRawTcp,
    pub transfers: Vec<SshTransfer>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SshRawTcp {
    pub upload_bps: Option<f64>,
    pub download_bps: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SshTransfer {
    /// `upload` or `download`.
    pub way: Option<String>,
    pub requested_cipher: Option<String>,
    pub requested_mac: Option<String>,
    pub steady: Option<SshSteady>,
    pub log: SshLog,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SshSteady {
    pub rate_bps: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SshLog {
    pub client_to_server: Option<SshNegotiated>,
    pub server_to_client: Option<SshNegotiated>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SshNegotiated {
    pub cipher: Option<String>,
}

impl SshTransfer {
    /// The cipher negotiated for the direction the data flowed.
    pub fn negotiated(&self, way: &str) -> Option<String> {
        let n = if way == "upload" {
            self.log.client_to_server.as_ref()
        } else {
            self.log.server_to_client.as_ref()
        };
        n.and_then(|n| n.cipher.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_fields_and_unknown_fields_are_tolerated() {
        let mut report = Report::new(pathdoc_core::Command::Check, "x");
        report.data.insert(
            "throughput".into(),
            serde_json::json!({"runs": [{"directions": [{"direction": "upload",
                "intervals": [{"start_s": 0.0, "end_s": 1.0, "new_field": 3}]}]}], "extra": 1}),
        );
        let t: Section<Throughput> = section(&report, "throughput");
        let t = t.read().expect("readable");
        assert_eq!(t.runs[0].directions[0].intervals.len(), 1);
        assert!(t.runs[0].directions[0].intervals[0].goodput_bps.is_none());
        assert!(matches!(section::<Idle>(&report, "idle"), Section::Absent));
    }

    #[test]
    fn wrong_shapes_are_unreadable_not_panics() {
        let mut report = Report::new(pathdoc_core::Command::Check, "x");
        report
            .data
            .insert("mtu".into(), serde_json::json!({"up": "nonsense"}));
        assert!(matches!(
            section::<Mtu>(&report, "mtu"),
            Section::Unreadable(_)
        ));
    }
}
