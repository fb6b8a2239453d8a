//! Throughput check: goodput both ways and what limits it, from TCP_INFO on both ends.
//!
//! - [`client::run_test`] runs one test (upload, download or both; 1..N streams; by time or by
//!   bytes) against a `pathdoc server` and returns per-direction [`analysis::DirectionResult`]s.
//! - [`service::SpeedService`] is the server side, registered in `pathdoc server`.
//! - [`analysis`] is the pure diagnosis: receive-window-, send-buffer-, loss- and CPU-limited,
//!   asymmetry, congestion-control comparison, BDP, Mathis and wire-rate arithmetic.
//! - [`stream`] holds the per-stream hot loops (sendfile from a memfd, recv with MSG_TRUNC).

pub mod analysis;
pub mod client;
pub mod host;
pub mod service;
pub mod spec;
pub mod stream;

pub use analysis::{diagnose_asymmetry, diagnose_direction, DirectionResult, CHECK};
pub use client::{run_test, SpeedError, SpeedOptions, SpeedRun};
pub use service::SpeedService;
pub use spec::{Direction, Mode};

use pathdoc_core::Finding;

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
    if let (Some(u), Some(d)) = (up, down) {
        findings.extend(diagnose_asymmetry(u, d));
    }
    findings
}
