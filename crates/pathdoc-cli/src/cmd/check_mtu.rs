//! The mtu part of `pathdoc check` (owned by the mtu check; see crates/pathdoc-mtu): path MTU
//! both ways, PMTUD black holes with the hop, MSS clamping and the bulk-download symptom.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use pathdoc_core::{Progress, Report};

use super::check::CheckContext;

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Path-MTU check (--mtu)")]
pub struct MtuArgs {
    /// Smallest IP datagram size the MTU search probes.
    #[arg(long = "mtu-min", default_value_t = 576, value_name = "BYTES")]
    pub min: u16,
    /// Largest IP datagram size the MTU search probes; the default goes up to the sender's
    /// interface MTU (jumbo frames included) and says "≥ 9000 B" beyond that.
    #[arg(long = "mtu-max", default_value_t = 9000, value_name = "BYTES")]
    pub max: u16,
    /// Attempts per probe size (ICMP rate limits, loss).
    #[arg(long = "mtu-attempts", default_value_t = 3)]
    pub attempts: u8,
    /// How long to wait for probes and ICMP after each round, in milliseconds.
    #[arg(long = "mtu-wait-ms", default_value_t = 300)]
    pub wait_ms: u64,
    /// Highest TTL when locating the hop where the MTU drops (0 skips locating).
    #[arg(long = "mtu-max-ttl", default_value_t = 12)]
    pub max_ttl: u8,
    /// Length of each timed bulk download in milliseconds (0 skips the download test).
    #[arg(long = "mtu-bulk-ms", default_value_t = 1000)]
    pub bulk_ms: u64,
    /// Skip the handshake MSS comparison.
    #[arg(long = "mtu-skip-mss")]
    pub skip_mss: bool,
}

pub async fn run(
    ctx: &CheckContext<'_>,
    args: &MtuArgs,
    report: &mut Report,
) -> anyhow::Result<()> {
    let opts = pathdoc_mtu::MtuOptions {
        min_size: args.min,
        max_size: args.max,
        attempts: args.attempts,
        wait: Duration::from_millis(args.wait_ms),
        max_ttl: args.max_ttl,
        bulk: Duration::from_millis(args.bulk_ms),
        skip_mss: args.skip_mss,
        ..pathdoc_mtu::MtuOptions::default()
    };
    ctx.progress
        .note("mtu: probing the path MTU both ways (a few seconds)");
    let result = pathdoc_mtu::run_check(
        ctx.server,
        ctx.auth_token.clone(),
        &opts,
        ctx.progress,
        &ctx.cancel,
    )
    .await
    .with_context(|| format!("mtu check against {}", ctx.server))?;
    report.findings.extend(result.findings);
    report.data.insert(
        "mtu".to_string(),
        serde_json::to_value(&result.data).context("serializing the mtu probe table")?,
    );
    ctx.progress.status("mtu: done");
    Ok(())
}
