//! `pathdoc check HOST`: run the selected checks against a `pathdoc server` and print one report.
//!
//! Flow: validate every option (usage errors, exit 2, before any network work) → find the server
//! once (preflight: every address, a hint when nothing answers) → run the checks in order, short
//! ones first (mtu, throughput, idle) → print the report. Ctrl-C/SIGTERM stops the running check,
//! which returns what it measured; the report is marked interrupted and exits 130.

use std::cell::Cell;
use std::net::SocketAddr;

use anyhow::Context;
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};
use pathdoc_core::{CheckName, Report};
use tokio_util::sync::CancellationToken;

pub use super::client::ServerTarget;
use super::client::{self, TargetPlan};
use crate::checks::{Check, ClientCheck, ClientSide, CHECKS};
use crate::error::CliError;
use crate::families;
use crate::progress::TerminalProgress;
use crate::{interrupt, output, Global};
use pathdoc_core::{AddressFamily, FamilyRun, Progress};
use pathdoc_proto::preflight::{self, AttemptError, PreflightError, PreflightOptions, Reached};
use std::time::Duration;

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
    /// `--mtu`, `--throughput`, `--idle` and each check's own options, from the check registry.
    #[command(flatten)]
    pub checks: CheckSelection,
    #[command(flatten)]
    pub html: super::report_html::HtmlReportArgs,
    #[command(flatten)]
    pub ssh_opts: super::ssh::SshClientArgs,
}

/// The registry's checks on the command line: a `--<flag>` per check that `pathdoc check` runs,
/// then each one's option group. Parsed values stay in the matches until [`Self::steps`]
/// resolves them (clap's errors are usage errors; a check's own validation is too).
#[derive(Clone)]
pub struct CheckSelection {
    matches: ArgMatches,
    registry: &'static [Check],
}

impl std::fmt::Debug for CheckSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckSelection")
            .field("matches", &self.matches)
            .finish_non_exhaustive()
    }
}

impl CheckSelection {
    /// Adds the selection flags and option groups of `registry`'s client checks to `cmd`.
    pub fn augment(mut cmd: clap::Command, registry: &'static [Check]) -> clap::Command {
        for (check, side) in client_checks(registry) {
            cmd = cmd.arg(
                Arg::new(check.name.as_str())
                    .long(side.flag)
                    .help(side.help)
                    .action(ArgAction::SetTrue),
            );
        }
        for (_, side) in client_checks(registry) {
            // A group's heading must not carry over to the options after it.
            cmd = (side.options)(cmd).next_help_heading(None::<&str>);
        }
        cmd
    }

    pub fn from_matches(matches: &ArgMatches, registry: &'static [Check]) -> Self {
        CheckSelection {
            matches: matches.clone(),
            registry,
        }
    }

    /// The checks to run, in registry order (short ones first), each resolved from its options.
    /// None selected means all. Every option is validated, also those of checks not selected:
    /// a typo is a typo.
    pub fn steps(&self) -> Result<Vec<Step>, CliError> {
        let selected = |c: &Check| self.matches.get_flag(c.name.as_str());
        let all = !client_checks(self.registry).any(|(c, _)| selected(c));
        let mut steps = Vec::new();
        for (check, side) in client_checks(self.registry) {
            let ready = (side.resolve)(&self.matches)?;
            if all || selected(check) {
                steps.push(Step { check, ready });
            }
        }
        Ok(steps)
    }
}

fn client_checks(
    registry: &'static [Check],
) -> impl Iterator<Item = (&'static Check, &'static ClientSide)> {
    registry
        .iter()
        .filter_map(|c| c.client.as_ref().map(|side| (c, side)))
}

impl FromArgMatches for CheckSelection {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(CheckSelection::from_matches(matches, CHECKS))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = CheckSelection::from_matches(matches, self.registry);
        Ok(())
    }
}

impl Args for CheckSelection {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        CheckSelection::augment(cmd, CHECKS)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        CheckSelection::augment(cmd, CHECKS)
    }
}

/// What a check module gets to run with.
pub struct CheckContext<'a> {
    pub server: SocketAddr,
    pub auth_token: Option<String>,
    pub progress: &'a TerminalProgress,
    /// Fired by Ctrl-C/SIGTERM; each check stops and returns what it measured so far.
    pub cancel: CancellationToken,
}

/// One check of the run, with its options resolved.
pub struct Step {
    pub check: &'static Check,
    pub ready: Box<dyn ClientCheck>,
}

impl Step {
    fn name(&self) -> CheckName {
        self.check.name
    }
}

/// Everything the run needs, checked before any network work.
struct Plan {
    target: TargetPlan,
    steps: Vec<Step>,
}

pub fn run(mut args: CheckArgs, global: Global) -> anyhow::Result<i32> {
    // Every option is checked before any network work, the SSH bootstrap included.
    let steps = args.checks.steps()?;
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
    let target = &plan.target;
    let Some(addrs) = client::resolve(&args.target, target, progress, &cancel).await? else {
        return Ok(interrupted_before_start(plan, None));
    };
    let groups = client::family_groups(target, &addrs);
    let both = groups.len() > 1;
    let Some(reached) = reach_families(args, plan, &groups, progress, &cancel).await? else {
        return Ok(interrupted_before_start(plan, None));
    };
    let mut report = Report::new(
        pathdoc_core::Command::Check,
        families::target_label(target, &reached),
    );
    report.families = reached
        .iter()
        .map(|(family, r)| FamilyRun {
            family: *family,
            address: r.as_ref().ok().map(|r| r.addr.to_string()),
        })
        .collect();
    for (family, result) in &reached {
        let family = *family;
        let Ok(r) = result else {
            // Only in a run over both families: the other one answered (else an error above).
            let check = plan.steps.first().map_or(CheckName::Mtu, Step::name);
            report.findings.push(families::unreachable(
                family,
                target,
                result.as_ref().err(),
                check,
            ));
            continue;
        };
        progress.set_label(both.then_some(family.label()));
        client::connected_note(target, r, progress);
        let mut one = Report::new(pathdoc_core::Command::Check, String::new());
        if cancel.is_cancelled() {
            one.interrupted = true;
            not_run_all(&mut one, &plan.steps);
        } else {
            run_family(args, plan, r.addr, progress, &cancel, &mut one).await;
        }
        families::merge(&mut report, one, family, both);
    }
    progress.set_label(None);
    if both {
        families::compare(&mut report);
    }
    Ok(report)
}

/// Preflight each family's addresses (both at once: a family whose packets vanish must not
/// delay the other). `Ok(None)`: interrupted. An error when no family answered.
async fn reach_families(
    args: &CheckArgs,
    plan: &Plan,
    groups: &[(AddressFamily, Vec<SocketAddr>)],
    progress: &TerminalProgress,
    cancel: &CancellationToken,
) -> Result<Option<Vec<(AddressFamily, Result<Reached, PreflightError>)>>, CliError> {
    if groups.len() > 1 {
        let names: Vec<&str> = groups.iter().map(|(f, _)| f.label()).collect();
        progress.status(&format!(
            "connecting to {} over {}",
            plan.target.shown(),
            names.join(" and ")
        ));
    }
    let reached = match preflight_all(groups, &args.target.auth_token, cancel).await {
        Some(r) => r,
        None => return Ok(None),
    };
    if reached.iter().all(|(_, r)| r.is_err()) {
        let attempts = reached
            .into_iter()
            .filter_map(|(_, r)| r.err())
            .flat_map(|e| e.attempts)
            .collect();
        return Err(client::preflight_error(
            &plan.target,
            &PreflightError { attempts },
        ));
    }
    Ok(Some(reached))
}

/// How long the other family may still take once one family answered: three SYNs (at 0, 1 and
/// 3 s) and a moment for the reply. Applications with Happy Eyeballs fall back after 250 ms;
/// a family silent for this long is one that every other application waits on.
const OTHER_FAMILY_GRACE: Duration = Duration::from_secs(4);

/// Each group's preflight, all at once; once one answered, the others get
/// [`OTHER_FAMILY_GRACE`] more (the ones still pending then count as connect timeouts). In
/// `groups` order; `None` when interrupted.
async fn preflight_all(
    groups: &[(AddressFamily, Vec<SocketAddr>)],
    token: &Option<String>,
    cancel: &CancellationToken,
) -> Option<Vec<(AddressFamily, Result<Reached, PreflightError>)>> {
    let mut pending = tokio::task::JoinSet::new();
    for (i, (_, addrs)) in groups.iter().enumerate() {
        let (addrs, token) = (addrs.clone(), token.clone());
        pending.spawn(async move {
            let r = preflight::reach(&addrs, token, PreflightOptions::default()).await;
            (i, r)
        });
    }
    let mut results: Vec<Option<Result<Reached, PreflightError>>> =
        groups.iter().map(|_| None).collect();
    let mut grace: Option<tokio::time::Instant> = None;
    loop {
        let until = grace.unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            _ = cancel.cancelled() => return None,
            joined = pending.join_next() => match joined {
                None => break,
                Some(Ok((i, r))) => {
                    if r.is_ok() && grace.is_none() {
                        grace = Some(tokio::time::Instant::now() + OTHER_FAMILY_GRACE);
                    }
                    results[i] = Some(r);
                }
                Some(Err(_)) => {}
            },
            _ = tokio::time::sleep_until(until), if grace.is_some() => {
                pending.abort_all();
                break;
            }
        }
    }
    let out = groups
        .iter()
        .zip(results)
        .map(|((family, addrs), r)| {
            let r = r.unwrap_or_else(|| {
                Err(PreflightError {
                    attempts: addrs
                        .iter()
                        .map(|a| (*a, AttemptError::ConnectTimeout(OTHER_FAMILY_GRACE)))
                        .collect(),
                })
            });
            (*family, r)
        })
        .collect();
    Some(out)
}

/// The report of a run interrupted before any check started.
fn interrupted_before_start(plan: &Plan, reached: Option<&Reached>) -> Report {
    let mut report = Report::new(
        pathdoc_core::Command::Check,
        client::target_label(&plan.target, reached),
    );
    report.interrupted = true;
    not_run_all(&mut report, &plan.steps);
    report
}

fn not_run_all(report: &mut Report, steps: &[Step]) {
    for step in steps {
        client::not_run(report, step.name(), &format!("the {} check", step.name()));
    }
}

/// Run every step against one server address, into `report`.
async fn run_family(
    args: &CheckArgs,
    plan: &Plan,
    server: SocketAddr,
    progress: &TerminalProgress,
    cancel: &CancellationToken,
    report: &mut Report,
) {
    let ctx = CheckContext {
        server,
        auth_token: args.target.auth_token.clone(),
        progress,
        cancel: cancel.clone(),
    };
    // How far the run got, for the report when the checks do not stop in time.
    let started = Cell::new(0usize);
    let finished = Cell::new(0usize);
    let done = client::until_stopped(
        run_steps(&ctx, &plan.steps, report, &started, &finished),
        cancel,
    )
    .await;
    if cancel.is_cancelled() {
        report.interrupted = true;
        if done.is_none() && finished.get() < started.get() {
            client::abandoned(report, plan.steps[started.get() - 1].name());
        }
        not_run_all(report, &plan.steps[started.get()..]);
    }
}

/// [`run_steps`] without the progress counters, for the registry's toy check.
#[cfg(test)]
pub async fn run_steps_for_test(ctx: &CheckContext<'_>, steps: &[Step], report: &mut Report) {
    run_steps(ctx, steps, report, &Cell::new(0), &Cell::new(0)).await;
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
        let result = (step.ready.run(ctx).await).map(|o| client::add(report, step.name(), o));
        client::record(report, step.name(), result, ctx.cancel.is_cancelled());
        finished.set(i + 1);
    }
}
