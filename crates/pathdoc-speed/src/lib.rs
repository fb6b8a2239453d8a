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
    "throughput-not-measured",
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
