//! The provenance stamped on every report this binary makes: when the run started (taken first
//! thing in `main`), how long it took, which build, which host, and the command line with its
//! secrets redacted.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use pathdoc_core::{Provenance, Report};

static START: OnceLock<(SystemTime, Instant)> = OnceLock::new();

/// Remember the start of the run; the first call wins.
pub fn mark_start() {
    START.get_or_init(|| (SystemTime::now(), Instant::now()));
}

/// This run's provenance, up to now.
pub fn current() -> Provenance {
    let (wall, mono) = *START.get_or_init(|| (SystemTime::now(), Instant::now()));
    let uname = pathdoc_sys::host_info::uname();
    Provenance {
        started: pathdoc_sys::host_info::iso8601_local(wall),
        // Milliseconds: an analysis of a small capture takes tens of them (0.1 s steps read "0 µs").
        duration_s: (mono.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        pathdoc_version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("PATHDOC_GIT_COMMIT").to_string(),
        hostname: uname
            .as_ref()
            .map_or_else(|| "unknown".into(), |u| u.nodename.clone()),
        os: uname.map_or_else(|| "unknown".into(), |u| u.os),
        command_line: Provenance::redact_command_line(
            std::env::args_os().map(|a| a.to_string_lossy().into_owned()),
        ),
    }
}

/// Stamp a report this run made (never one read back from a file: that keeps its own).
pub fn stamp(report: &mut Report) {
    report.provenance = Some(current());
}
