//! The throughput part of `pathdoc check`: a short upload, then a short download, each judged
//! on its own (window, buffer, loss, CPU) and against each other (asymmetry).
//! The measuring lives in crates/pathdoc-speed; the run/report glue is shared with `pathdoc speed`.

use std::time::Duration;

use clap::{ArgMatches, Args};
use pathdoc_speed::{Mode, SpeedOptions};

use super::check::CheckContext;
use super::speed::{congestion_control, measure};
use crate::args::{duration, ms};
use crate::checks::{resolved, CheckFuture, ClientCheck};
use crate::error::CliError;

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Throughput check (--throughput)")]
pub struct ThroughputArgs {
    /// Length of each direction's throughput test.
    #[arg(long = "throughput-time", value_name = "DURATION", default_value = "5s",
          value_parser = duration(ms(100), pathdoc_speed::spec::MAX_TEST_TIME))]
    pub time: Duration,
    /// Parallel streams per direction in the throughput test.
    #[arg(long = "throughput-streams", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=pathdoc_speed::spec::MAX_STREAMS as i64))]
    pub streams: u32,
    /// Congestion control for the throughput test's senders (default: each host's own).
    #[arg(long = "throughput-cc", value_name = "NAME", value_parser = congestion_control)]
    pub cc: Option<String>,
    /// Also compare CUBIC with BBR (doubles the throughput test's length).
    #[arg(long = "throughput-compare-cc", conflicts_with = "cc")]
    pub compare_cc: bool,
}

/// The tests the throughput check runs: an upload, then a download.
#[derive(Debug, Clone)]
pub struct ThroughputPlan {
    pub tests: Vec<SpeedOptions>,
    pub compare_cc: bool,
}

impl ThroughputArgs {
    pub fn plan(&self) -> Result<ThroughputPlan, CliError> {
        let base = SpeedOptions {
            mode: Mode::Upload,
            streams: self.streams,
            duration: self.time,
            bytes: None,
            cc: self.cc.clone(),
            window: None,
            interval: Duration::from_secs(1)
                .min(self.time / 2)
                .max(Duration::from_millis(100)),
        };
        let download = SpeedOptions {
            mode: Mode::Download,
            ..base.clone()
        };
        Ok(ThroughputPlan {
            tests: vec![base, download],
            compare_cc: self.compare_cc,
        })
    }
}

/// `--throughput`'s options resolved: the check ready to run.
pub fn resolve(matches: &ArgMatches) -> Result<Box<dyn ClientCheck>, CliError> {
    resolved(matches, |args: ThroughputArgs| Ok(Box::new(args.plan()?)))
}

impl ClientCheck for ThroughputPlan {
    fn run<'a>(&'a self, ctx: &'a CheckContext<'a>) -> CheckFuture<'a> {
        Box::pin(measure(
            ctx.server,
            ctx.auth_token.clone(),
            &self.tests,
            self.compare_cc,
            ctx.progress,
            &ctx.cancel,
        ))
    }
}
