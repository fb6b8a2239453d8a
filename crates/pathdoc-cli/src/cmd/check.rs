//! `pathdoc check HOST`: run the selected checks against a `pathdoc server` and print one report.
//!
//! With no selection every check runs, the idle-timeout check last because it is long.
//! Each check lives in its own module (check_*.rs) and adds its findings to the report.

use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::Context;
use clap::Args;
use pathdoc_core::Report;
use tokio_util::sync::CancellationToken;

use crate::progress::TerminalProgress;
use crate::{output, Global};

/// Connection options shared by every client command.
#[derive(Args, Debug, Clone)]
pub struct ServerTarget {
    /// The pathdoc server: HOST or HOST:PORT (IPv6: [ADDR]:PORT).
    pub host: String,
    /// Server port, when HOST has none.
    #[arg(long, default_value_t = pathdoc_proto::DEFAULT_PORT)]
    pub port: u16,
    /// Shared secret, if the server requires one.
    #[arg(long, env = "PATHDOC_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
}

impl ServerTarget {
    /// Resolve HOST[:PORT] to one address (the first the resolver returns).
    pub fn resolve(&self) -> anyhow::Result<SocketAddr> {
        if let Ok(addr) = self.host.parse::<SocketAddr>() {
            return Ok(addr);
        }
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        (host, self.port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {:?}", self.host))?
            .next()
            .with_context(|| format!("{:?} resolves to no address", self.host))
    }
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub target: ServerTarget,
    /// Run the path-MTU check (both directions, black holes, MSS clamping).
    #[arg(long)]
    pub mtu: bool,
    /// Run the throughput check (both directions and what limits each).
    #[arg(long)]
    pub throughput: bool,
    /// Run the idle-timeout check (NAT/firewall state timeouts; long: up to 2 h 10 min).
    #[arg(long)]
    pub idle: bool,
    #[command(flatten)]
    pub mtu_opts: super::check_mtu::MtuArgs,
    #[command(flatten)]
    pub throughput_opts: super::check_speed::ThroughputArgs,
    #[command(flatten)]
    pub idle_opts: super::check_idle::IdleArgs,
    #[command(flatten)]
    pub html: super::report_html::HtmlReportArgs,
}

/// What a check module gets to run with.
pub struct CheckContext<'a> {
    pub server: SocketAddr,
    pub auth_token: Option<String>,
    pub progress: &'a TerminalProgress,
    /// Fired by Ctrl-C/SIGTERM; each check stops and returns what it measured so far.
    pub cancel: CancellationToken,
}

pub fn run(args: CheckArgs, global: Global) -> anyhow::Result<i32> {
    let server = args.target.resolve()?;
    let html = args.html.prepare()?;
    let all = !(args.mtu || args.throughput || args.idle);
    let progress = TerminalProgress::new(global);
    let ctx = CheckContext {
        server,
        auth_token: args.target.auth_token.clone(),
        progress: &progress,
        cancel: CancellationToken::new(),
    };
    let mut report = Report::new("check", server.to_string());
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let (ran, could_not) = runtime.block_on(async {
        let mut ran = 0;
        let mut could_not = 0;
        let mut record = |report: &mut Report, check: &str, result: anyhow::Result<()>| {
            ran += 1;
            if could_not_run(report, check, result) {
                could_not += 1;
            }
        };
        // Short checks first; the idle check can take hours.
        if all || args.mtu {
            let r = super::check_mtu::run(&ctx, &args.mtu_opts, &mut report).await;
            record(&mut report, "mtu", r);
        }
        if all || args.throughput {
            let r = super::check_speed::run(&ctx, &args.throughput_opts, &mut report).await;
            record(&mut report, "throughput", r);
        }
        if all || args.idle {
            let r = super::check_idle::run(&ctx, &args.idle_opts, &mut report).await;
            record(&mut report, "idle", r);
        }
        (ran, could_not)
    });
    progress.finish();
    let code = output::print_report(&report, global);
    if let Some(html) = html {
        html.write(&report)?;
    }
    // Nothing could run at all (server unreachable, not a pathdoc server, refused): that is
    // "could not run" for scripts, not an inconclusive diagnosis.
    Ok(if ran > 0 && could_not == ran { 2 } else { code })
}

/// A check that could not run is reported as inconclusive with the reason, so the other
/// checks' verdicts still reach the user. Returns whether the check failed to run.
fn could_not_run(report: &mut Report, check: &str, result: anyhow::Result<()>) -> bool {
    let failed = result.is_err();
    if let Err(e) = result {
        report.findings.push(
            pathdoc_core::Finding::new(
                check,
                "check-failed",
                pathdoc_core::Status::Inconclusive,
                format!("the {check} check could not run"),
            )
            .summary(format!("{e:#}")),
        );
    }
    failed
}
