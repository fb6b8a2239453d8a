//! The mtu part of `pathdoc check` (owned by the mtu check; see crates/pathdoc-mtu): path MTU
//! both ways, PMTUD black holes with the hop, MSS clamping and the bulk-download symptom.

use std::time::Duration;

use anyhow::Context;
use clap::{ArgMatches, Args};
use pathdoc_core::{CheckOutcome, Progress};
use pathdoc_mtu::wire::{MAX_ATTEMPTS, MAX_BULK_MS, MAX_PROBE_SIZE, MAX_WAIT_MS, MIN_PROBE_SIZE};
use pathdoc_mtu::MtuOptions;

use super::check::CheckContext;
use crate::args::{duration, duration_or_zero, ms};
use crate::checks::{resolved, CheckFuture, ClientCheck};
use crate::error::CliError;

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Path-MTU check (--mtu)")]
pub struct MtuArgs {
    /// Smallest IP datagram size the MTU search probes.
    #[arg(long = "mtu-min", default_value_t = 576, value_name = "BYTES",
          value_parser = clap::value_parser!(u16).range(MIN_PROBE_SIZE as i64..=MAX_PROBE_SIZE as i64))]
    pub min: u16,
    /// Largest IP datagram size the MTU search probes; the default goes up to the sender's
    /// interface MTU (jumbo frames included) and says "≥ 9000 B" beyond that.
    #[arg(long = "mtu-max", default_value_t = 9000, value_name = "BYTES",
          value_parser = clap::value_parser!(u16).range(MIN_PROBE_SIZE as i64..=MAX_PROBE_SIZE as i64))]
    pub max: u16,
    /// Attempts per probe size (ICMP rate limits, loss).
    #[arg(long = "mtu-attempts", default_value_t = 3, value_name = "N",
          value_parser = clap::value_parser!(u8).range(1..=MAX_ATTEMPTS as i64))]
    pub attempts: u8,
    /// How long to wait for probes and ICMP after each round.
    #[arg(long = "mtu-wait", value_name = "DURATION", default_value = "300ms",
          value_parser = duration(ms(10), ms(MAX_WAIT_MS as u64)))]
    pub wait: Duration,
    /// Old spelling of --mtu-wait, in milliseconds.
    #[arg(long = "mtu-wait-ms", hide = true, conflicts_with = "wait",
          value_parser = clap::value_parser!(u64).range(10..=MAX_WAIT_MS as u64))]
    pub wait_ms: Option<u64>,
    /// Highest TTL when locating the hop where the MTU drops (0 skips locating).
    #[arg(long = "mtu-max-ttl", default_value_t = 12, value_name = "N",
          value_parser = clap::value_parser!(u8).range(0..=64))]
    pub max_ttl: u8,
    /// Length of each timed bulk download (0s skips the download test).
    #[arg(long = "mtu-bulk", value_name = "DURATION", default_value = "1s",
          value_parser = duration_or_zero(ms(100), ms(MAX_BULK_MS as u64)))]
    pub bulk: Duration,
    /// Old spelling of --mtu-bulk, in milliseconds.
    #[arg(long = "mtu-bulk-ms", hide = true, conflicts_with = "bulk",
          value_parser = clap::value_parser!(u64).range(0..=MAX_BULK_MS as u64))]
    pub bulk_ms: Option<u64>,
    /// Skip the handshake MSS comparison.
    #[arg(long = "mtu-skip-mss")]
    pub skip_mss: bool,
}

impl MtuArgs {
    /// The check's options, validated before any network work.
    pub fn options(&self) -> Result<MtuOptions, CliError> {
        let opts = MtuOptions {
            min_size: self.min,
            max_size: self.max,
            attempts: self.attempts,
            wait: self.wait_ms.map(Duration::from_millis).unwrap_or(self.wait),
            max_ttl: self.max_ttl,
            bulk: self.bulk_ms.map(Duration::from_millis).unwrap_or(self.bulk),
            skip_mss: self.skip_mss,
            ..MtuOptions::default()
        };
        if opts.min_size > opts.max_size {
            return Err(CliError::usage(format!(
                "--mtu-min {} is larger than --mtu-max {}",
                opts.min_size, opts.max_size
            )));
        }
        opts.validate()
            .map_err(|e| CliError::usage(format!("mtu options: {e}")))?;
        Ok(opts)
    }
}

/// `--mtu`'s options resolved: the check ready to run.
pub fn resolve(matches: &ArgMatches) -> Result<Box<dyn ClientCheck>, CliError> {
    resolved(matches, |args: MtuArgs| {
        Ok(Box::new(MtuCheck(args.options()?)))
    })
}

struct MtuCheck(MtuOptions);

impl ClientCheck for MtuCheck {
    fn run<'a>(&'a self, ctx: &'a CheckContext<'a>) -> CheckFuture<'a> {
        Box::pin(run(ctx, &self.0))
    }
}

async fn run(ctx: &CheckContext<'_>, opts: &MtuOptions) -> anyhow::Result<CheckOutcome> {
    ctx.progress
        .note("mtu: probing the path MTU both ways (a few seconds)");
    let result = pathdoc_mtu::run_check(
        ctx.server,
        ctx.auth_token.clone(),
        opts,
        ctx.progress,
        &ctx.cancel,
    )
    .await
    .with_context(|| format!("mtu check against {}", ctx.server))?;
    let outcome = CheckOutcome {
        findings: result.findings,
        data: result.data,
    }
    .into_json()
    .context("serializing the mtu probe table")?;
    ctx.progress.status("mtu: done");
    Ok(outcome)
}
