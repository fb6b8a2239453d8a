//! `pathdoc check HOST`: run the selected checks against a `pathdoc server` and print one report.
//!
//! Flow: validate every option (usage errors, exit 2, before any network work) → find the server
//! once (preflight: every address, a hint when nothing answers) → run the checks in order, short
//! ones first (mtu, throughput, idle) → print the report. Ctrl-C/SIGTERM stops the running check,
//! which returns what it measured; the report is marked interrupted and exits 130.

use std::cell::Cell;
use std::net::SocketAddr;

use anyhow::Context;
use clap::Args;
use pathdoc_core::Report;
use pathdoc_idle::IdleConfig;
use pathdoc_mtu::MtuOptions;
use tokio_util::sync::CancellationToken;

use super::check_speed::ThroughputPlan;
pub use super::client::ServerTarget;
use super::client::{self, TargetPlan};
use crate::error::CliError;
use crate::progress::TerminalProgress;
use crate::{interrupt, output, Global};

pub const EXAMPLES: &str = "Examples:
  pathdoc check server.example.net           # all checks; the idle check takes up to 2 h 10 min
  pathdoc check server.example.net --mtu     # one check (also --throughput, --idle)
  pathdoc check localhost:7224 --throughput  # a host name with a port
  pathdoc check [2001:db8::10]:7224 -6       # IPv6
  pathdoc check 203.0.113.10 --json          # versioned JSON for scripts (docs/output.md)
  pathdoc check server.example.net --report path.html   # also a self-contained HTML report

Exit codes: 0 no problem, 1 problem found, 2 could not run, 3 inconclusive, 130 interrupted.
Ctrl-C stops the checks and prints what was measured so far.";

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub target: ServerTarget,
    /// Start a temporary pathdoc server on [USER@]HOST[:PORT] over SSH and check the path to it
    /// (nothing to install there; your ssh config, keys and known_hosts apply). docs/ssh.md.
    #[arg(long, value_name = "[USER@]HOST[:PORT]")]
    pub ssh: Option<String>,
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
    #[command(flatten)]
    pub ssh_opts: super::ssh::SshClientArgs,
}

/// What a check module gets to run with.
pub struct CheckContext<'a> {
    pub server: SocketAddr,
    pub auth_token: Option<String>,
    pub progress: &'a TerminalProgress,
    /// Fired by Ctrl-C/SIGTERM; each check stops and returns what it measured so far.
    pub cancel: CancellationToken,
}

/// One check of the run, with its validated options.
enum Step {
    Mtu(MtuOptions),
    Throughput(ThroughputPlan),
    Idle(IdleConfig),
}

impl Step {
    fn name(&self) -> &'static str {
        match self {
            Step::Mtu(_) => "mtu",
            Step::Throughput(_) => pathdoc_speed::CHECK,
            Step::Idle(_) => "idle",
        }
    }
}

/// Everything the run needs, checked before any network work.
struct Plan {
    target: TargetPlan,
    steps: Vec<Step>,
}

impl CheckArgs {
    fn steps(&self) -> Result<Vec<Step>, CliError> {
        let all = !(self.mtu || self.throughput || self.idle);
        // Every option is validated, also those of checks not selected: a typo is a typo.
        let mtu = self.mtu_opts.options()?;
        let throughput = self.throughput_opts.plan()?;
        let idle = self.idle_opts.config()?;
        let mut steps = Vec::new();
        // Short checks first; the idle check can take hours.
        if all || self.mtu {
            steps.push(Step::Mtu(mtu));
        }
        if all || self.throughput {
            steps.push(Step::Throughput(throughput));
        }
        if all || self.idle {
            steps.push(Step::Idle(idle));
        }
        Ok(steps)
    }
}

pub fn run(mut args: CheckArgs, global: Global) -> anyhow::Result<i32> {
    // Every option is checked before any network work, the SSH bootstrap included.
    let steps = args.steps()?;
    let html = args.html.prepare()?;
    let progress = TerminalProgress::new(global);
    // --ssh: the temporary server becomes the target; keep its guard until the report is out.
    let remote = match super::ssh::prepare_target(
        &mut args.target,
        args.ssh.as_deref(),
        &args.ssh_opts,
        &progress,
        global,
    )? {
        super::ssh::SshStart::Cleaned(code) => return Ok(code),
        start => start,
    };
    let plan = Plan {
        target: args.target.plan()?,
        steps,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let mut report = runtime.block_on(run_plan(&args, &plan, &progress, global))?;
    report.target = remote.label(report.target);
    remote.add_next_steps(&mut report);
    progress.finish();
    crate::provenance::stamp(&mut report);
    let code = output::print_report(&report, global);
    if let Some(html) = html {
        html.write(&report)?;
    }
    Ok(code)
}

async fn run_plan(
    args: &CheckArgs,
    plan: &Plan,
    progress: &TerminalProgress,
    global: Global,
) -> anyhow::Result<Report> {
    let cancel = interrupt::install(global.quiet).context("installing the Ctrl-C handler")?;
    let reached = client::reach(&args.target, &plan.target, progress, &cancel).await?;
    let mut report = Report::new(
        "check",
        client::target_label(&plan.target, reached.as_ref()),
    );
    let Some(reached) = reached else {
        report.interrupted = true;
        for step in &plan.steps {
            client::not_run(
                &mut report,
                step.name(),
                &format!("the {} check", step.name()),
            );
        }
        return Ok(report);
    };
    let ctx = CheckContext {
        server: reached.addr,
        auth_token: args.target.auth_token.clone(),
        progress,
        cancel: cancel.clone(),
    };
    // How far the run got, for the report when the checks do not stop in time.
    let started = Cell::new(0usize);
    let finished = Cell::new(0usize);
    let done = client::until_stopped(
        run_steps(&ctx, &plan.steps, &mut report, &started, &finished),
        &cancel,
    )
    .await;
    if cancel.is_cancelled() {
        report.interrupted = true;
        if done.is_none() && finished.get() < started.get() {
            client::abandoned(&mut report, plan.steps[started.get() - 1].name());
        }
        for step in &plan.steps[started.get()..] {
            client::not_run(
                &mut report,
                step.name(),
                &format!("the {} check", step.name()),
            );
        }
    }
    Ok(report)
}

async fn run_steps(
    ctx: &CheckContext<'_>,
    steps: &[Step],
    report: &mut Report,
    started: &Cell<usize>,
    finished: &Cell<usize>,
) {
    for (i, step) in steps.iter().enumerate() {
        if ctx.cancel.is_cancelled() {
            return;
        }
        started.set(i + 1);
        let result = match step {
            Step::Mtu(opts) => super::check_mtu::run(ctx, opts, report).await,
            Step::Throughput(plan) => super::check_speed::run(ctx, plan, report).await,
            Step::Idle(cfg) => super::check_idle::run(ctx, cfg, report).await,
        };
        client::record(report, step.name(), result, ctx.cancel.is_cancelled());
        finished.set(i + 1);
    }
}
