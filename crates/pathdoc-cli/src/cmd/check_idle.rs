//! The idle part of `pathdoc check` (owned by the idle check; see crates/pathdoc-idle).
//!
//! Flags are prefixed `--idle-` so they never collide with other checks' flags.

use std::time::Duration;

use clap::{ArgMatches, Args};
use pathdoc_core::CheckOutcome;
use pathdoc_idle::{defaults, IdleOptions};

use super::check::CheckContext;
use crate::args::{duration, ms, secs};
use crate::checks::{resolved, CheckFuture, ClientCheck};
use crate::error::CliError;

/// `--idle-max-probes`'s help, with the server's real default per-address connection limit.
fn idle_max_probes_help() -> String {
    format!(
        "Most TCP probe connections to open (the server's per-address limit is {} by default)",
        pathdoc_server::Limits::default().connections_per_ip
    )
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Idle-timeout check (--idle)")]
pub struct IdleArgs {
    /// Longest idle time to test (RFC 5382 needs 2h4m; the default adds margin).
    #[arg(long, value_name = "DURATION", default_value = "2h10m", value_parser = duration(secs(1), secs(24 * 3600)))]
    pub idle_max: Duration,
    /// Resolution of the measured timeout.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration(ms(200), secs(3600)))]
    pub idle_resolution: Duration,
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_PROBES, help = idle_max_probes_help(),
          value_parser = clap::value_parser!(u32).range(defaults::MAX_PROBES_FLOOR as i64..=defaults::MAX_PROBES_CEILING as i64))]
    pub idle_max_probes: u32,
    /// How long a probe may take to arrive before it counts as lost (default: from the RTT).
    #[arg(long, value_name = "DURATION", value_parser = duration(ms(10), secs(60)))]
    pub idle_grace: Option<Duration>,
    /// Skip the client-initiated probes (state rebuilt by outbound traffic?).
    #[arg(long)]
    pub idle_no_client_probes: bool,
    /// Skip the TCP-keepalive probes (do keepalives keep the state?).
    #[arg(long)]
    pub idle_no_keepalive: bool,
    /// Skip the culprit-hop search (TTL-limited keepalives that find which hop forgets first).
    #[arg(long)]
    pub idle_no_culprit: bool,
    /// How deep the culprit-hop search looks: it splits the path after hops 1..N and names the
    /// box among the first N+1 routers (two probe groups per split share the connection budget).
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub idle_culprit_depth: u32,
    /// Skip the UDP binding tests (RFC 4787 REQ-5 timeout, REQ-6 inbound refresh); they run
    /// beside the TCP probes by default and end after 5 min 10 s at most.
    #[arg(long)]
    pub idle_no_udp: bool,
}

impl IdleArgs {
    /// The check's settings, validated before any network work; they become a run once the
    /// preflight has found the server.
    pub fn options(&self) -> Result<IdleOptions, CliError> {
        let mut options = IdleOptions::default();
        let cfg = options.settings();
        cfg.horizon = self.idle_max;
        cfg.resolution = self.idle_resolution;
        cfg.max_probes = self.idle_max_probes as usize;
        cfg.grace = self.idle_grace;
        cfg.client_initiated = !self.idle_no_client_probes;
        cfg.keepalive = !self.idle_no_keepalive;
        cfg.culprit = !self.idle_no_culprit;
        cfg.culprit_splits = self.idle_culprit_depth as usize;
        cfg.udp = !self.idle_no_udp;
        if cfg.horizon < cfg.resolution * 2 {
            return Err(CliError::usage(format!(
                "--idle-max must be at least twice --idle-resolution ({} < 2 × {})",
                pathdoc_core::units::format_duration(cfg.horizon),
                pathdoc_core::units::format_duration(cfg.resolution)
            )));
        }
        options
            .validate()
            .map_err(|e| CliError::usage(format!("idle options: {e}")))?;
        Ok(options)
    }
}

/// `--idle`'s options resolved: the check ready to run.
pub fn resolve(matches: &ArgMatches) -> Result<Box<dyn ClientCheck>, CliError> {
    resolved(matches, |args: IdleArgs| {
        Ok(Box::new(IdleCheck(args.options()?)))
    })
}

struct IdleCheck(IdleOptions);

impl ClientCheck for IdleCheck {
    fn run<'a>(&'a self, ctx: &'a CheckContext<'a>) -> CheckFuture<'a> {
        Box::pin(run(ctx, &self.0))
    }
}

async fn run(ctx: &CheckContext<'_>, options: &IdleOptions) -> anyhow::Result<CheckOutcome> {
    let cfg = options.for_server(ctx.server, ctx.auth_token.clone());
    let result = pathdoc_idle::run(&cfg, ctx.progress, &ctx.cancel).await?;
    Ok(CheckOutcome {
        findings: result.findings,
        data: result.data,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        idle: IdleArgs,
    }

    /// clap's default texts ("2h10m", "10s") say what pathdoc_idle::defaults holds.
    #[test]
    fn flag_defaults_are_the_checks_defaults() {
        let args = Cli::try_parse_from(["t"]).unwrap().idle;
        assert_eq!(args.idle_max, defaults::HORIZON);
        assert_eq!(args.idle_resolution, defaults::RESOLUTION);
        assert_eq!(args.idle_max_probes, defaults::MAX_PROBES);
    }
}
