//! Throughput check: goodput both ways and what limits it, from TCP_INFO on both ends.
//!
//! - [`client::run_test`] runs one test (upload, download or both; 1..N streams; by time or by
//!   bytes) against a `pathdoc server` and returns per-direction [`analysis::DirectionResult`]s.
//! - [`measure::measure`] runs a sequence of tests and turns them into findings and report data
//!   (shared by `pathdoc speed` and `pathdoc check --throughput`).
//! - [`service::SpeedService`] is the server side, registered in `pathdoc server`.
//! - Pure diagnosis: [`phases`] (slow start vs steady state, queues, loss classes), [`analysis`]
//!   (one limiting-factor verdict per direction), [`verdicts`] (their texts, evidence and
//!   remedies), [`compare`] (asymmetry, congestion-control comparison), [`model`] (BDP, Mathis,
//!   CUBIC, wire-rate arithmetic).
//! - [`stream`] holds the per-stream hot loops (write from one buffer, recv with MSG_TRUNC).

pub mod analysis;
pub mod client;
pub mod compare;
pub mod host;
pub mod latency;
pub mod measure;
pub mod model;
pub mod phases;
pub mod policer;
pub mod service;
pub mod shared;
pub mod spec;
pub mod stream;
pub mod train;
pub mod verdicts;

pub use analysis::{diagnose_asymmetry, diagnose_direction, DirectionResult, CHECK};
pub use client::{run_test, SpeedError, SpeedOptions, SpeedRun};
pub use measure::{measure, Measurement};
pub use service::SpeedService;
pub use spec::{Direction, Mode};

use pathdoc_core::{Finding, FindingId};

/// Every finding id the throughput check emits, with when and which statuses (docs/output.md
/// lists them; the finding-id test keeps code, registry and docs equal). Per-direction ids
/// appear once per measured direction; the finding's `direction` field (`client-to-server` =
/// upload, `server-to-client` = download) tells them apart.
pub const FINDING_IDS: &[FindingId] = &[
    FindingId {
        id: "upload-rate",
        meaning: "the client→server goodput, steady state and whole test, with the estimated wire rate: INFO",
    },
    FindingId {
        id: "download-rate",
        meaning: "the server→client goodput, steady state and whole test, with the estimated wire rate: INFO",
    },
    FindingId {
        id: "no-data",
        meaning: "a direction's connections were set up but no payload reached the receiver: INCONCLUSIVE",
    },
    FindingId {
        id: "cpu-limited",
        meaning: "a sending or receiving process used ≥ 90 % of the cores its streams can use, or a host was ≥ 90 % busy with ≥ 15 % of it the transfer's own work: WARN, naming the host",
    },
    FindingId {
        id: "receive-window-limited",
        meaning: "the receiver's window, at its largest, held the sender back (≥ 20 % of its busy time, or the data in flight filled it): FAIL, with the tcp_rmem fix on the receiver",
    },
    FindingId {
        id: "send-buffer-limited",
        meaning: "the sender's send buffer was full ≥ 20 % of its busy time while its congestion window allowed more: FAIL, with the tcp_wmem fix on the sender",
    },
    FindingId {
        id: "loss-limited",
        meaning: "≥ 0.01 % path loss without a standing queue, and the rate within the loss model's (Mathis / RFC 9438): FAIL at ≥ 0.1 % of bytes lost, else WARN",
    },
    FindingId {
        id: "policer-limited",
        meaning: "≥ 1 % of sent bytes lost on the path with no queueing delay at a flat goodput plateau that the loss model cannot explain (or with the loss concentrated where the sender exceeded the plateau): a token-bucket policer; WARN with the policed rate, a burst lower bound, pacing (fq maxrate) on the sender and the enforced-vs-paid rate for the ISP",
    },
    FindingId {
        id: "shared-bottleneck",
        meaning: "the path set the rate while a queue stood, and the rate on the wire was below 60 % of the bottleneck capacity a packet-train probe measured before the test (download): the link was busy with other traffic; WARN with the capacity, this transfer's share, the implied number of flows, and \"test again when quiet\" (client) / find the other traffic (router)",
    },
    FindingId {
        id: "latency-under-load",
        meaning: "RTT idle vs while this direction was saturated, with the DSLReports bufferbloat grade (A+ < 5 ms … F ≥ 400 ms increase): INFO for A+..B, WARN from a 60 ms increase (C or worse) with SQM (cake/fq_codel shaped below the line rate) on the router at the bottleneck",
    },
    FindingId {
        id: "link-limited",
        meaning: "no host-side limit (window, buffer, CPU, loss) found: the path sets the rate: PASS",
    },
    FindingId {
        id: "throughput-asymmetry",
        meaning: "the slower direction is below 50 % of the faster: WARN when it loses ≥ 0.01 % on the path and ≥ 10× the other's, else INFO (an asymmetric access line, or the slower direction's own finding explains it)",
    },
    FindingId {
        id: "loss-asymmetry",
        meaning: "alike rates, but one direction loses ≥ 0.5 % on the path and the other ≥ 10× less, and the lossy direction's loss is not mostly its own queue overflow (bursts while a queue stood: BBR probing a shaped path) and persists in the steady state (not only the ramp-up): WARN",
    },
    FindingId {
        id: "congestion-control-comparison",
        meaning: "--compare-cc: the same direction once per congestion control: INFO when within 10 %, WARN with the faster one's sysctl otherwise",
    },
    FindingId {
        id: "throughput-interrupted",
        meaning: "Ctrl-C/SIGTERM stopped the test; says what was measured until then, which the findings above cover: INCONCLUSIVE",
    },
    FindingId {
        id: pathdoc_core::report::CHECK_FAILED,
        meaning: "one test of the sequence (e.g. the download after the upload, or one congestion control of --compare-cc) could not run; the tests before it are judged: INCONCLUSIVE",
    },
    FindingId {
        id: "server-busy",
        meaning: "the server had no room for a test (its session or its streams: a pool full, shared out between other clients, or this client's own cap), with the server's words, the bound it refused by and its limit, a retry hint and the operator's fix: WARN",
    },
    FindingId {
        id: pathdoc_core::report::CHECK_NOT_RUN,
        meaning: "one test of the sequence never started: the run was interrupted first: INFO",
    },
];

/// Findings for one run: each direction's rate and limit, and the asymmetry between them.
pub fn diagnose(run: &SpeedRun) -> Vec<Finding> {
    let mut findings: Vec<Finding> = run.directions.iter().flat_map(diagnose_direction).collect();
    let up = run
        .directions
        .iter()
        .find(|d| d.direction == Direction::Upload);
    let down = run
        .directions
        .iter()
        .find(|d| d.direction == Direction::Download);
    if let (Some(u), Some(d), false) = (up, down, run.interrupted) {
        findings.extend(diagnose_asymmetry(u, d));
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{direction, each};
    use crate::analysis::{CcRun, Side};
    use crate::measure::{Measurement, NotMeasured};
    use std::collections::BTreeSet;

    fn run(directions: Vec<DirectionResult>, interrupted: bool) -> SpeedRun {
        SpeedRun {
            mode: Mode::Both,
            congestion_control: None,
            directions,
            client_host: Default::default(),
            server_host: Default::default(),
            interrupted,
        }
    }

    /// Every id the analysis emits is in [`FINDING_IDS`], and every listed id can be emitted.
    #[test]
    fn finding_ids_are_exactly_the_registry() {
        type Tweak = fn(&mut DirectionResult);
        let tweaks: &[Tweak] = &[
            |_| {},
            |d| {
                d.payload_bytes = 0;
            },
            |d| each(d, |_, i| i.sender_cpu_cores = Some(1.0)),
            |d| {
                each(d, |_, i| {
                    i.rwnd_limited_us = 900_000;
                    i.snd_wnd_bytes = 262_144;
                })
            },
            |d| each(d, |_, i| i.sndbuf_limited_us = 900_000),
            |d| crate::shared::tests::share_a_busy_link(d),
            |d| {
                d.goodput_bps = 4e6;
                each(d, |_, i| {
                    i.goodput_bps = 4e6;
                    i.bytes_sent = 500_000;
                    i.retransmits = 2;
                    i.bytes_retrans = 2896;
                })
            },
        ];
        let mut seen = BTreeSet::new();
        for t in tweaks {
            let mut down = direction(20e6);
            t(&mut down);
            let mut up = direction(60e6);
            up.direction = Direction::Upload;
            up.sender_side = Side::Client;
            up.receiver_side = Side::Server;
            for f in diagnose(&run(vec![up.clone(), down.clone()], false)) {
                seen.insert(f.id);
            }
            // Alike rates with one-way loss.
            let mut lossy = up.clone();
            each(&mut lossy, |_, i| {
                i.retransmits = 100;
                i.bytes_retrans = 144_800;
            });
            for f in diagnose(&run(vec![lossy, direction(60e6)], false)) {
                seen.insert(f.id);
            }
        }
        let cc = [
            CcRun {
                congestion_control: "cubic".into(),
                goodput_bps: 1e6,
                retrans_share: 0.0,
            },
            CcRun {
                congestion_control: "bbr".into(),
                goodput_bps: 9e6,
                retrans_share: 0.0,
            },
        ];
        seen.extend(analysis::compare_cc(Direction::Upload, &cc).map(|f| f.id));
        let m = Measurement {
            runs: vec![run(vec![direction(20e6)], true)],
            not_measured: vec![
                NotMeasured {
                    test: "download".into(),
                    mode: Mode::Download,
                    congestion_control: None,
                    reason: "refused".into(),
                    interrupted: false,
                    busy: None,
                },
                NotMeasured {
                    test: "download with bbr".into(),
                    mode: Mode::Download,
                    congestion_control: Some("bbr".into()),
                    reason: "interrupted before it started".into(),
                    interrupted: true,
                    busy: None,
                },
                NotMeasured {
                    test: "upload with bbr".into(),
                    mode: Mode::Upload,
                    congestion_control: Some("bbr".into()),
                    reason: "the server was busy".into(),
                    interrupted: false,
                    busy: Some(pathdoc_core::busy::ServerBusy::new(
                        "the server is busy",
                        Some("streams-fair-share".into()),
                        Some(64),
                    )),
                },
            ],
            interrupted: true,
            ..Measurement::default()
        };
        seen.extend(measure::findings(&m, false).into_iter().map(|f| f.id));
        let registry: BTreeSet<String> = FINDING_IDS.iter().map(|i| i.id.to_string()).collect();
        assert_eq!(seen, registry, "emitted ids vs FINDING_IDS");
    }
}
