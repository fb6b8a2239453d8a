//! The idle check's defaults and bounds, in one place: the client (`IdleConfig`), the CLI's
//! `--idle-*` flags and the exporter's idle modules all use these.

use std::time::Duration;

/// Longest idle time tested: RFC 5382's 2 h 4 min (REQ-5) plus margin, 2 h 10 min.
pub const HORIZON: Duration = Duration::from_secs(7800);
/// Target resolution of the measured timeout.
pub const RESOLUTION: Duration = Duration::from_secs(10);
/// TCP probe connections opened in total (the server's default per-address limit leaves room
/// for them, see `pathdoc server --max-connections-per-ip`).
pub const MAX_PROBES: u32 = 240;
/// Fewest probe connections a run may be limited to: fewer cannot bracket a timeout.
pub const MAX_PROBES_FLOOR: u32 = 8;
/// Most probe connections a run may ask for.
pub const MAX_PROBES_CEILING: u32 = 1000;
