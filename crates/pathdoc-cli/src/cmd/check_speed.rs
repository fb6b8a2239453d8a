//! The throughput part of `pathdoc check`: a short upload, then a short download, each judged
//! on its own (window, buffer, loss, CPU) and against each other (asymmetry).
//! The measuring lives in crates/pathdoc-speed; the run/report glue is shared with `pathdoc speed`.

use std::time::Duration;

use clap::Args;
use pathdoc_core::Report;
use pathdoc_speed::{Mode, SpeedOptions};

use super::check::CheckContext;
use super::speed::{measure, parse_duration};

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Throughput check (--throughput)")]
pub struct ThroughputArgs {
    /// Length of each direction's throughput test.
    #[arg(long = "throughput-time", default_value = "5s", value_parser = parse_duration)]
    pub time: Duration,
    /// Parallel streams per direction in the throughput test.
    #[arg(long = "throughput-streams", default_value_t = 1)]
    pub streams: u32,
    /// Congestion control for the throughput test's senders (default: each host's own).
    #[arg(long = "throughput-cc")]
    pub cc: Option<String>,
    /// Also compare CUBIC with BBR (doubles the throughput test's length).
    #[arg(long = "throughput-compare-cc", conflicts_with = "cc")]
    pub compare_cc: bool,
}

pub async fn run(
    ctx: &CheckContext<'_>,
    args: &ThroughputArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    if args.streams == 0 || args.streams > pathdoc_speed::spec::MAX_STREAMS {
        anyhow::bail!(
            "--throughput-streams must be between 1 and {}",
            pathdoc_speed::spec::MAX_STREAMS
        );
    }
    let base = SpeedOptions {
        mode: Mode::Upload,
        streams: args.streams,
        duration: args.time,
        bytes: None,
        cc: args.cc.clone(),
        window: None,
        interval: Duration::from_secs(1)
            .min(args.time / 2)
            .max(Duration::from_millis(100)),
    };
    let tests = [
        base.clone(),
        SpeedOptions {
            mode: Mode::Download,
            ..base
        },
    ];
    measure(
        ctx.server,
        ctx.auth_token.clone(),
        &tests,
        args.compare_cc,
        ctx.progress,
        &ctx.cancel,
        report,
    )
    .await
}
