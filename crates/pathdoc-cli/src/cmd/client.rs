//! What every client command (`check`, `speed`) shares: the server target as users write it,
//! address family and source address, and the preflight that finds the server once — quickly,
//! with a hint — before any check runs.

use std::net::{IpAddr, SocketAddr};

use clap::Args;
use pathdoc_core::report::{CHECK_FAILED, CHECK_INTERRUPTED, CHECK_NOT_RUN};
use pathdoc_core::{AddressFamily, CheckName, CheckOutcome, Finding, Progress, Report, Status};
use pathdoc_proto::preflight::{self, PreflightOptions, Reached};
use pathdoc_proto::target::{Family, Target};
use tokio_util::sync::CancellationToken;

use crate::error::{CliError, ErrorKind};

/// Connection options shared by every client command.
#[derive(Args, Debug, Clone)]
pub struct ServerTarget {
    /// The pathdoc server: HOST, HOST:PORT, [IPV6]:PORT or a bare IPv6 address (not with --ssh).
    #[arg(
        value_name = "HOST[:PORT]",
        required_unless_present_any = ["ssh", "clean"],
        conflicts_with = "ssh"
    )]
    pub host: Option<String>,
    /// Server port, when HOST names none [default: 7224].
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Use IPv4 addresses only.
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 addresses only.
    #[arg(short = '6', long = "ipv6")]
    pub ipv6: bool,
    /// Source address of every connection and datagram (like `ssh -b`, iperf3 `-B`).
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Shared secret, if the server requires one.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "PATHDOC_AUTH_TOKEN",
        hide_env_values = true
    )]
    pub auth_token: Option<String>,
}

/// A validated target: what to resolve, on which port, in which family.
#[derive(Debug, Clone)]
pub struct TargetPlan {
    pub target: Target,
    pub port: u16,
    pub family: Family,
}

impl TargetPlan {
    /// `host:port` as the user would write it, for messages and the report.
    pub fn shown(&self) -> String {
        if self.target.host.contains(':') {
            format!("[{}]:{}", self.target.host, self.port)
        } else {
            format!("{}:{}", self.target.host, self.port)
        }
    }
}

impl ServerTarget {
    /// Check everything about the target that needs no network.
    pub fn plan(&self) -> Result<TargetPlan, CliError> {
        let host = self
            .host
            .as_deref()
            .ok_or_else(|| CliError::usage("no server given: HOST[:PORT], or --ssh [USER@]HOST"))?;
        let target = Target::parse(host).map_err(|e| CliError::usage(e.to_string()))?;
        let port = match (target.port, self.port) {
            (Some(a), Some(b)) if a != b => {
                return Err(CliError::usage(format!(
                    "two ports given: {a} in {host:?} and --port {b}"
                )))
            }
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => pathdoc_proto::DEFAULT_PORT,
        };
        let mut family = match (self.ipv4, self.ipv6) {
            (true, _) => Family::V4,
            (_, true) => Family::V6,
            _ => Family::Any,
        };
        if let Some(bind) = self.bind {
            check_bind(bind)?;
            let bind_family = if bind.is_ipv4() {
                Family::V4
            } else {
                Family::V6
            };
            if family != Family::Any && family != bind_family {
                return Err(CliError::usage(format!(
                    "--bind {bind} is an {bind_family} address but {family} was asked for"
                )));
            }
            family = bind_family;
        }
        Ok(TargetPlan {
            target,
            port,
            family,
        })
    }
}

/// Resolve the target, apply `--bind`, and reach the server once (every address, staggered).
/// `Ok(None)` when the user interrupted it.
pub async fn reach(
    args: &ServerTarget,
    plan: &TargetPlan,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> Result<Option<Reached>, CliError> {
    let Some(addrs) = resolve(args, plan, progress, cancel).await? else {
        return Ok(None);
    };
    let reached = tokio::select! {
        _ = cancel.cancelled() => return Ok(None),
        r = preflight::reach(&addrs, args.auth_token.clone(), PreflightOptions::default()) => r,
    };
    match reached {
        Ok(r) => {
            connected_note(plan, &r, progress);
            Ok(Some(r))
        }
        Err(e) => Err(preflight_error(plan, &e)),
    }
}

/// Apply `--bind` and resolve the target to every address of the family asked for, in the
/// order to try them (RFC 8305). `Ok(None)` when the user interrupted it.
pub async fn resolve(
    args: &ServerTarget,
    plan: &TargetPlan,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> Result<Option<Vec<SocketAddr>>, CliError> {
    if let Some(bind) = args.bind {
        pathdoc_sys::source::set_source(bind).map_err(|other| {
            CliError::new(
                ErrorKind::Other,
                format!("source address already set to {other}"),
            )
        })?;
    }
    progress.status(&format!("connecting to {}", plan.shown()));
    let target = plan.target.clone();
    let (port, family) = (plan.port, plan.family);
    // getaddrinfo blocks: off the runtime's threads, and interruptible.
    let resolving = tokio::task::spawn_blocking(move || target.resolve(port, family));
    tokio::select! {
        _ = cancel.cancelled() => Ok(None),
        r = resolving => r
            .map_err(|e| CliError::new(ErrorKind::Other, format!("resolver task failed: {e}")))?
            .map(Some)
            .map_err(|e| {
                CliError::new(ErrorKind::Resolve, e.to_string())
                    .hint("check the host name (and -4/-6, --bind), or give an IP address")
            }),
    }
}

/// The addresses split by family, this host's preferred family (the resolver's first address,
/// RFC 6724) first. One group unless a name resolved to both families with neither `-4` nor
/// `-6` (nor `--bind`) asked for: then `pathdoc check` runs over both.
pub fn family_groups(
    plan: &TargetPlan,
    addrs: &[SocketAddr],
) -> Vec<(AddressFamily, Vec<SocketAddr>)> {
    let Some(first) = addrs.first() else {
        return Vec::new();
    };
    let preferred = AddressFamily::of(&first.ip());
    let (mine, other): (Vec<SocketAddr>, Vec<SocketAddr>) = addrs
        .iter()
        .partition(|a| AddressFamily::of(&a.ip()) == preferred);
    if plan.family != Family::Any || other.is_empty() {
        return vec![(preferred, addrs.to_vec())];
    }
    vec![(preferred, mine), (preferred.other(), other)]
}

/// "connected to …" once the preflight reached the server.
pub fn connected_note(plan: &TargetPlan, r: &Reached, progress: &dyn Progress) {
    let version = r
        .welcome
        .as_ref()
        .map(|w| format!(" ({})", w.server_version))
        .unwrap_or_default();
    let at = if r.addr.to_string() == plan.shown() {
        String::new()
    } else {
        format!(" at {}", r.addr)
    };
    progress.note(&format!("connected to {}{at}{version}", plan.shown()));
}

/// The error of a preflight that reached no address.
pub fn preflight_error(plan: &TargetPlan, e: &preflight::PreflightError) -> CliError {
    crate::error::from_preflight(&plan.shown(), &plan.target.host, plan.port, e)
}

/// `--bind ADDR` must be one of this host's addresses (binding a local socket proves it).
fn check_bind(ip: IpAddr) -> Result<(), CliError> {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0))
        .map(drop)
        .map_err(|e| {
            CliError::usage(format!(
                "--bind {ip}: {}",
                crate::error::without_os_error(&e.to_string())
            ))
            .hint("give an address of one of this host's interfaces (`ip -brief address`)")
        })
}

/// The report's `target`: the address reached, and the name typed when it was not an address.
pub fn target_label(plan: &TargetPlan, reached: Option<&Reached>) -> String {
    match reached {
        Some(r) if r.addr.to_string() == plan.shown() => plan.shown(),
        Some(r) => format!("{} ({})", plan.shown(), r.addr),
        None => plan.shown(),
    }
}

/// Drive `work` to completion, or — once `cancel` fires — for at most
/// [`STOP_GRACE`](crate::interrupt::STOP_GRACE) more. `None`: it did not stop in time and was
/// dropped (its sockets close with it; the server ends the session on its own).
pub async fn until_stopped<F: std::future::Future>(
    work: F,
    cancel: &CancellationToken,
) -> Option<F::Output> {
    let mut work = std::pin::pin!(work);
    tokio::select! {
        out = &mut work => return Some(out),
        _ = cancel.cancelled() => {}
    }
    tokio::time::timeout(crate::interrupt::STOP_GRACE, work)
        .await
        .ok()
}

/// A check's outcome into the report: its findings, and its measurements as `data.<check>`.
pub fn add(report: &mut Report, check: CheckName, outcome: CheckOutcome) {
    report.findings.extend(outcome.findings);
    report
        .data
        .insert(check.data_key().to_string(), outcome.data);
}

/// Turn one check's result into findings: an error is "could not run" (or "stopped early" when
/// the check had already reported something), or — after the user's interrupt — "interrupted
/// before it measured anything".
pub fn record(report: &mut Report, check: CheckName, result: anyhow::Result<()>, cancelled: bool) {
    let Err(e) = result else { return };
    let reason = crate::error::without_os_error(&format!("{e:#}"));
    let finding = if cancelled {
        Finding::new(
            check,
            CHECK_INTERRUPTED,
            Status::Inconclusive,
            format!("the {check} check was interrupted before it measured anything"),
        )
        .summary(format!("Stopped by the user. {reason}"))
    } else {
        let partial = report.findings.iter().any(|f| f.check == check);
        let title = if partial {
            format!("the {check} check stopped early; the findings above are what it measured")
        } else {
            format!("the {check} check could not run")
        };
        Finding::new(check, CHECK_FAILED, Status::Inconclusive, title).summary(reason)
    };
    report.findings.push(finding);
}

/// A check the interrupt came too early for.
pub fn not_run(report: &mut Report, check: CheckName, what: &str) {
    report.findings.push(Finding::new(
        check,
        CHECK_NOT_RUN,
        Status::Info,
        format!("{what} did not run: interrupted before it started"),
    ));
}

/// A check that did not stop within the grace after the interrupt and was abandoned.
pub fn abandoned(report: &mut Report, check: CheckName) {
    report.findings.push(
        Finding::new(
            check,
            CHECK_INTERRUPTED,
            Status::Inconclusive,
            format!("the {check} check was interrupted and did not stop in time"),
        )
        .summary(format!(
            "It did not stop within {} s of the interrupt, so what it had measured was lost.",
            crate::interrupt::STOP_GRACE.as_secs()
        )),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_both_families_is_two_groups_unless_one_family_was_asked_for() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let addrs = [
            a("[2001:db8::1]:7224"),
            a("192.0.2.1:7224"),
            a("[2001:db8::2]:7224"),
        ];
        let plan = |family| TargetPlan {
            target: Target::parse("server").unwrap(),
            port: 7224,
            family,
        };
        let groups = family_groups(&plan(Family::Any), &addrs);
        assert_eq!(groups.len(), 2);
        assert_eq!(
            groups[0].0,
            AddressFamily::Ipv6,
            "the resolver's first family first"
        );
        assert_eq!(groups[0].1, [addrs[0], addrs[2]]);
        assert_eq!(groups[1], (AddressFamily::Ipv4, vec![addrs[1]]));
        // -4/-6 (or --bind) already filtered the addresses to one family: one group.
        assert_eq!(family_groups(&plan(Family::V6), &addrs[..1]).len(), 1);
        assert_eq!(family_groups(&plan(Family::Any), &addrs[1..2]).len(), 1);
        assert!(family_groups(&plan(Family::Any), &[]).is_empty());
    }
}
