//! `pathdoc speed HOST`: measure TCP throughput to a pathdoc server and name what limits it.
//!
//! The measuring and judging lives in crates/pathdoc-speed; this module parses the options,
//! runs the tests (one, or one per congestion control with `--compare-cc`) and fills the report.

use std::net::SocketAddr;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use anyhow::{bail, Context};
use clap::Args;
use pathdoc_core::{Progress, Report};
use pathdoc_speed::analysis::{compare_cc, CcRun};
use pathdoc_speed::{Direction, Mode, SpeedOptions, SpeedRun};

use super::check::ServerTarget;
use crate::progress::TerminalProgress;
use crate::{output, Global};

#[derive(Args, Debug)]
pub struct SpeedArgs {
    #[command(flatten)]
    pub target: ServerTarget,
    /// Server → client (download) instead of client → server.
    #[arg(long, short = 'R', conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at the same time.
    #[arg(long)]
    pub bidir: bool,
    /// Parallel TCP streams per direction (1..=8).
    #[arg(long, short = 'P', default_value_t = 1)]
    pub streams: u32,
    /// Test length, e.g. 10s, 500ms, 1m.
    #[arg(long, short = 't', default_value = "10s", value_parser = parse_duration)]
    pub time: Duration,
    /// Stop after this many payload bytes per direction instead, e.g. 1GiB, 500MB.
    #[arg(long, short = 'n', value_parser = parse_bytes)]
    pub bytes: Option<u64>,
    /// Congestion control for the senders on both ends (cubic, bbr, reno, ...).
    #[arg(long, short = 'C')]
    pub cc: Option<String>,
    /// Run once with CUBIC and once with BBR and say which wins on this path.
    #[arg(long, conflicts_with = "cc")]
    pub compare_cc: bool,
    /// SO_SNDBUF/SO_RCVBUF on both ends, e.g. 256KiB (default: kernel autotuning).
    #[arg(long, short = 'w', value_parser = parse_window)]
    pub window: Option<u32>,
    /// Sampling interval for the per-interval figures.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    #[command(flatten)]
    pub html: super::report_html::HtmlReportArgs,
}

/// A test length or interval: the shared grammar (`10s`, `500ms`, `2m`, `1.5s`), plus a bare
/// number of seconds as iperf3's `-t 10` has it. Longer than an hour is a typo (servers cap tests
/// at 60 s by default).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::from_secs_f64(secs),
        Ok(_) => return Err(format!("{s:?} is not a duration (e.g. 10s, 500ms, 1m)")),
        Err(_) => pathdoc_core::units::parse_duration(s)?,
    };
    if d.is_zero() || d > Duration::from_secs(3600) {
        return Err(format!(
            "duration {s:?} must be positive and at most an hour"
        ));
    }
    Ok(d)
}

/// Parse a byte count with an optional SI (kB, MB, GB) or IEC (KiB, MiB, GiB) suffix.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 1GiB, 500MB)"))?;
    let factor = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit {other:?} (use B, kB, MB, GB, KiB, MiB, GiB)"
            ))
        }
    };
    let bytes = value * factor;
    if !(1.0..1e18).contains(&bytes) {
        return Err(format!("size {s:?} out of range"));
    }
    Ok(bytes as u64)
}

fn parse_window(s: &str) -> Result<u32, String> {
    let b = parse_bytes(s)?;
    if !(4096..=(1 << 30)).contains(&b) {
        return Err(format!("window {s:?} must be between 4 KiB and 1 GiB"));
    }
    Ok(b as u32)
}

pub fn run(args: SpeedArgs, global: Global) -> anyhow::Result<i32> {
    let server = args.target.resolve()?;
    let html = args.html.prepare()?;
    if args.streams == 0 || args.streams > pathdoc_speed::spec::MAX_STREAMS {
        bail!(
            "--streams must be between 1 and {}",
            pathdoc_speed::spec::MAX_STREAMS
        );
    }
    let mode = if args.bidir {
        Mode::Both
    } else if args.reverse {
        Mode::Download
    } else {
        Mode::Upload
    };
    let opts = SpeedOptions {
        mode,
        streams: args.streams,
        duration: args.time,
        bytes: args.bytes,
        cc: args.cc.clone(),
        window: args.window,
        interval: args.interval,
    };
    let progress = TerminalProgress::new(global);
    let mut report = Report::new("speed", server.to_string());
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let result = runtime.block_on(measure(
        server,
        args.target.auth_token.clone(),
        &[opts],
        args.compare_cc,
        &progress,
        &CancellationToken::new(),
        &mut report,
    ));
    progress.finish();
    result?;
    let code = output::print_report(&report, global);
    if let Some(html) = html {
        html.write(&report)?;
    }
    Ok(code)
}

/// Run each of `tests` (with `compare_cc`: once per congestion control) and add findings and
/// raw data to `report`. Shared with `pathdoc check`.
pub async fn measure(
    server: SocketAddr,
    token: Option<String>,
    tests: &[SpeedOptions],
    compare: bool,
    progress: &dyn Progress,
    cancel: &CancellationToken,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut runs: Vec<SpeedRun> = Vec::new();
    let ccs: Vec<Option<String>> = if compare {
        vec![Some("cubic".into()), Some("bbr".into())]
    } else {
        vec![None]
    };
    for opts in tests {
        for cc in &ccs {
            let mut o = opts.clone();
            if cc.is_some() {
                o.cc = cc.clone();
            }
            progress.status(&format!(
                "throughput: {} starting{}",
                mode_label(o.mode),
                cc.as_deref()
                    .map(|c| format!(" with {c}"))
                    .unwrap_or_default()
            ));
            let run = pathdoc_speed::run_test(server, token.clone(), &o, progress, cancel)
                .await
                .with_context(|| format!("throughput test ({})", mode_label(o.mode)))?;
            for d in &run.directions {
                progress.note(&format!(
                    "throughput: {}{}: {} goodput",
                    d.direction.short(),
                    cc.as_deref().map(|c| format!(" [{c}]")).unwrap_or_default(),
                    pathdoc_core::units::format_rate(d.goodput_bps)
                ));
            }
            runs.push(run);
        }
    }
    // Diagnose each run; with two separate one-way runs also compare the directions.
    for run in &runs {
        let mut findings = pathdoc_speed::diagnose(run);
        if compare {
            if let Some(cc) = &run.congestion_control {
                for f in &mut findings {
                    f.title = format!("[{cc}] {}", f.title);
                }
            }
        }
        report.findings.extend(findings);
    }
    if !compare {
        let up = runs
            .iter()
            .flat_map(|r| &r.directions)
            .find(|d| d.direction == Direction::Upload);
        let down = runs
            .iter()
            .flat_map(|r| &r.directions)
            .find(|d| d.direction == Direction::Download);
        let both_in_one = runs.iter().any(|r| r.mode == Mode::Both);
        if let (Some(u), Some(d), false) = (up, down, both_in_one) {
            report
                .findings
                .extend(pathdoc_speed::diagnose_asymmetry(u, d));
        }
    }
    let mut comparisons = Vec::new();
    if compare {
        for d in [Direction::Upload, Direction::Download] {
            let cc_runs: Vec<CcRun> = runs
                .iter()
                .flat_map(|r| {
                    r.directions
                        .iter()
                        .filter(|x| x.direction == d)
                        .map(move |x| (r, x))
                })
                .map(|(r, x)| CcRun {
                    congestion_control: r.congestion_control.clone().unwrap_or_default(),
                    goodput_bps: x.goodput_bps,
                    retrans_share: x.retrans_share(),
                })
                .collect();
            if let Some(f) = compare_cc(d, &cc_runs) {
                comparisons.push(serde_json::json!({ "direction": d, "runs": cc_runs }));
                report.findings.push(f);
            }
        }
    }
    report.data.insert(
        pathdoc_speed::CHECK.to_string(),
        serde_json::json!({ "runs": runs, "cc_comparison": comparisons }),
    );
    Ok(())
}

fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Upload => "upload",
        Mode::Download => "download",
        Mode::Both => "both directions",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_parse_with_units() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(
            parse_duration("0s").is_err()
                && parse_duration("ten").is_err()
                && parse_duration("5h").is_err()
        );
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("500MB").unwrap(), 500_000_000);
        assert_eq!(parse_bytes("256KiB").unwrap(), 262_144);
        assert!(parse_bytes("-1").is_err() && parse_bytes("1TB").is_err());
        assert!(parse_window("1k").is_err());
    }
}
