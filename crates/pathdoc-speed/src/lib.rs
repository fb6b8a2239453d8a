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
pub mod measure;
pub mod model;
pub mod phases;
pub mod service;
pub mod spec;
pub mod stream;
pub mod verdicts;

pub use analysis::{diagnose_asymmetry, diagnose_direction, DirectionResult, CHECK};
pub use client::{run_test, SpeedError, SpeedOptions, SpeedRun};
pub use measure::{measure, Measurement};
pub use service::SpeedService;
pub use spec::{Direction, Mode};

use pathdoc_core::Finding;

/// Every finding id this crate can emit (docs/throughput.md lists them, with when each appears).
/// Per-direction verdict ids appear once per measured direction; the finding's `direction`
/// field (`client-to-server` = upload, `server-to-client` = download) tells them apart.
pub const FINDING_IDS: &[&str] = &[
    "upload-rate",
    "download-rate",
    "no-data",
    "cpu-limited",
    "receive-window-limited",
    "send-buffer-limited",
    "loss-limited",
    "link-limited",
    "throughput-asymmetry",
    "loss-asymmetry",
    "congestion-control-comparison",
    "throughput-interrupted",
    pathdoc_core::report::CHECK_FAILED,
    pathdoc_core::report::CHECK_NOT_RUN,
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
                },
                NotMeasured {
                    test: "download with bbr".into(),
                    mode: Mode::Download,
                    congestion_control: Some("bbr".into()),
                    reason: "interrupted before it started".into(),
                    interrupted: true,
                },
            ],
            interrupted: true,
            ..Measurement::default()
        };
        seen.extend(measure::findings(&m, false).into_iter().map(|f| f.id));
        let registry: BTreeSet<String> = FINDING_IDS.iter().map(|s| s.to_string()).collect();
        assert_eq!(seen, registry, "emitted ids vs FINDING_IDS");
    }
}
