//! The check registry: every check pathdoc knows, in one list ([`CHECKS`]), with everything it
//! brings. What lists checks iterates it instead of naming them: `pathdoc check`'s selection
//! flags, option groups and steps (cmd/check.rs), `pathdoc server`'s services (cmd/server.rs),
//! the module kinds `pathdoc exporter` accepts (cmd/exporter.rs), the HTML report's figures
//! (cmd/report_html.rs, cmd/report.rs), and — through the hidden `pathdoc registry` command —
//! the loopback tests of finding ids, docs pages and exporter modules.
//!
//! It lives in the binary because its entries point into crates that cannot see each other (a
//! check crate's service, its module kind in pathdoc-exporter, its figures in pathdoc-html;
//! nothing depends upward); those crates keep no list of checks and take what this one passes
//! them. The names it is keyed by ([`CheckName`]) live in pathdoc-core, so every crate can speak
//! of a check. Adding a check: ARCHITECTURE.md, "Adding a check".

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use clap::{ArgMatches, Args, FromArgMatches};
use pathdoc_core::{CheckName, CheckOutcome, FindingId, Report};
use pathdoc_html::Figure;
use pathdoc_proto::CheckKind;
use pathdoc_server::Service;

use crate::cmd::check::CheckContext;
use crate::error::CliError;

/// One check and what it brings.
pub struct Check {
    pub name: CheckName,
    /// The crate whose sources emit its findings (the finding-id test reads them).
    pub crate_name: &'static str,
    /// Every finding id it can emit; docs/output.md lists them under `### <name>`.
    pub finding_ids: &'static [FindingId],
    /// Its page, relative to the workspace root.
    pub docs: &'static str,
    /// Its far end in `pathdoc server`; `None` when the server does not serve it to every client.
    pub service: Option<ServerService>,
    /// Its part in `pathdoc check`; `None` for a check with a command of its own.
    pub client: Option<ClientSide>,
    /// Its plots in the HTML report, from its `data` section (and findings).
    pub figures: fn(&Report) -> Vec<Figure>,
    /// Where its plots go on the page, ascending: the faults an ISP can fix (idle, MTU) before
    /// the longer throughput figures, then SSH's and captures'.
    pub page_order: u8,
    /// Its module kind in `pathdoc exporter` (`check = "<name>"`, docs/exporter.md), or that it
    /// has none.
    pub exporter: Exporter,
}

/// A check's far end.
pub struct ServerService {
    /// Its name on the wire. The throughput check is `speed` there: older peers know it so.
    pub wire: CheckKind,
    pub new: fn() -> Arc<dyn Service>,
    /// Which servers run it.
    pub offered: Offered,
}

/// Which `pathdoc server`s run a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Offered {
    /// Every server, to every client it admits.
    Always,
    /// Only servers started with `--ssh-evidence` (the SSH bootstrap's temporary server, which
    /// needs a token): the service reports on the far end's processes and sockets.
    SshEvidence,
}

/// A check's part in `pathdoc exporter`.
pub enum Exporter {
    /// Modules of this kind run it (the exporter reads their settings with it).
    Module(&'static pathdoc_exporter::ModuleKind),
    /// It runs from the command line only; the exporter refuses a module of it.
    NotExported,
}

/// A check's part in `pathdoc check`: its selection flag, its own options, and how they become
/// a check ready to run (low-level args → resolved options, once, before any network work).
pub struct ClientSide {
    /// `--<flag>` selects it; its own options are `--<flag>-…` under their own help heading.
    pub flag: &'static str,
    pub help: &'static str,
    /// Adds its options (a clap derive's `Args::augment_args`).
    pub options: fn(clap::Command) -> clap::Command,
    /// Reads and validates its options: usage errors (exit 2) before any network work.
    pub resolve: fn(&ArgMatches) -> Result<Box<dyn ClientCheck>, CliError>,
}

/// The future a check's run returns (not `Send`: checks run on the command's own runtime).
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<CheckOutcome>> + 'a>>;

/// A check with its options resolved: run it against the server in `ctx`. It stops when
/// `ctx.cancel` fires and returns what it measured; an error becomes a `check-failed` finding.
pub trait ClientCheck {
    fn run<'a>(&'a self, ctx: &'a CheckContext<'a>) -> CheckFuture<'a>;
}

/// The options a derive'd `Args` group holds, resolved by `resolve` into a ready check.
pub fn resolved<A, F>(matches: &ArgMatches, resolve: F) -> Result<Box<dyn ClientCheck>, CliError>
where
    A: FromArgMatches,
    F: FnOnce(A) -> Result<Box<dyn ClientCheck>, CliError>,
{
    let args = A::from_arg_matches(matches).map_err(|e| CliError::usage(e.to_string()))?;
    resolve(args)
}

/// Every check, in the order `pathdoc check` runs them: short ones first, the idle check (hours)
/// last.
pub static CHECKS: &[Check] = &[
    Check {
        name: CheckName::Mtu,
        crate_name: "pathdoc-mtu",
        finding_ids: pathdoc_mtu::FINDING_IDS,
        docs: "docs/mtu.md",
        service: Some(ServerService {
            wire: CheckKind::Mtu,
            new: mtu_service,
            offered: Offered::Always,
        }),
        client: Some(ClientSide {
            flag: "mtu",
            help: "Run the path-MTU check (both directions, black holes, MSS clamping)",
            options: crate::cmd::check_mtu::MtuArgs::augment_args,
            resolve: crate::cmd::check_mtu::resolve,
        }),
        figures: pathdoc_html::figures::mtu,
        page_order: 2,
        exporter: Exporter::Module(&pathdoc_exporter::module::MTU),
    },
    Check {
        name: CheckName::Throughput,
        crate_name: "pathdoc-speed",
        finding_ids: pathdoc_speed::FINDING_IDS,
        docs: "docs/throughput.md",
        service: Some(ServerService {
            wire: CheckKind::Speed,
            new: throughput_service,
            offered: Offered::Always,
        }),
        client: Some(ClientSide {
            flag: "throughput",
            help: "Run the throughput check (both directions and what limits each)",
            options: crate::cmd::check_speed::ThroughputArgs::augment_args,
            resolve: crate::cmd::check_speed::resolve,
        }),
        figures: pathdoc_html::figures::throughput,
        page_order: 3,
        exporter: Exporter::Module(&pathdoc_exporter::module::THROUGHPUT),
    },
    Check {
        name: CheckName::Idle,
        crate_name: "pathdoc-idle",
        finding_ids: pathdoc_idle::FINDING_IDS,
        docs: "docs/idle.md",
        service: Some(ServerService {
            wire: CheckKind::Idle,
            new: idle_service,
            offered: Offered::Always,
        }),
        client: Some(ClientSide {
            flag: "idle",
            help:
                "Run the idle-timeout check (NAT/firewall state timeouts; long: up to 2 h 10 min)",
            options: crate::cmd::check_idle::IdleArgs::augment_args,
            resolve: crate::cmd::check_idle::resolve,
        }),
        figures: pathdoc_html::figures::idle,
        page_order: 1,
        exporter: Exporter::Module(&pathdoc_exporter::module::IDLE),
    },
    // `pathdoc ssh`; its far end reports the sshd's CPU and socket during a transfer.
    Check {
        name: CheckName::Ssh,
        crate_name: "pathdoc-ssh",
        finding_ids: pathdoc_ssh::FINDING_IDS,
        docs: "docs/ssh.md",
        service: Some(ServerService {
            wire: CheckKind::Ssh,
            new: ssh_evidence_service,
            offered: Offered::SshEvidence,
        }),
        client: None,
        figures: pathdoc_html::figures::ssh,
        page_order: 4,
        exporter: Exporter::NotExported,
    },
    // `pathdoc analyze`: its ids come from pathdoc-analyze and from the analyze command in this
    // crate (those name the check "analyze" literally), all in pathdoc-analyze's registry.
    Check {
        name: CheckName::Analyze,
        crate_name: "pathdoc-analyze",
        finding_ids: pathdoc_analyze::FINDING_IDS,
        docs: "docs/analyze.md",
        service: None,
        client: None,
        figures: pathdoc_html::figures::analyze,
        page_order: 5,
        exporter: Exporter::NotExported,
    },
];

fn mtu_service() -> Arc<dyn Service> {
    pathdoc_mtu::MtuService::new()
}

fn throughput_service() -> Arc<dyn Service> {
    Arc::new(pathdoc_speed::SpeedService::new())
}

fn idle_service() -> Arc<dyn Service> {
    Arc::new(pathdoc_idle::IdleService::new())
}

fn ssh_evidence_service() -> Arc<dyn Service> {
    Arc::new(pathdoc_ssh::EvidenceService::new())
}

/// Every figure the registered checks draw from `report`, in page order.
pub fn figures(report: &Report) -> Vec<Figure> {
    let mut checks: Vec<&Check> = CHECKS.iter().collect();
    checks.sort_by_key(|c| c.page_order);
    pathdoc_html::per_family(report, |r| {
        checks.iter().flat_map(|c| (c.figures)(r)).collect()
    })
}

/// The services a `pathdoc server` runs: every check's that is always offered, and with
/// `ssh_evidence` (`--ssh-evidence`) also the SSH bootstrap's.
pub fn services(ssh_evidence: bool) -> Vec<Arc<dyn Service>> {
    CHECKS
        .iter()
        .filter_map(|c| c.service.as_ref())
        .filter(|s| s.offered == Offered::Always || ssh_evidence)
        .map(|s| (s.new)())
        .collect()
}

/// The module kinds `pathdoc exporter` may run: the exported checks'.
pub fn exporter_modules() -> Vec<&'static pathdoc_exporter::ModuleKind> {
    CHECKS
        .iter()
        .filter_map(|c| match c.exporter {
            Exporter::Module(kind) => Some(kind),
            Exporter::NotExported => None,
        })
        .collect()
}

/// The registry as JSON, for `pathdoc registry` (hidden; the loopback tests read it).
pub fn describe() -> serde_json::Value {
    let checks: Vec<serde_json::Value> = CHECKS
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "crate": c.crate_name,
                "docs": c.docs,
                "finding_ids": c.finding_ids.iter()
                    .map(|i| serde_json::json!({"id": i.id, "meaning": i.meaning}))
                    .collect::<Vec<_>>(),
                "service": c.service.as_ref().map(|s| s.wire),
                "service_offered": c.service.as_ref().map(|s| s.offered),
                "flag": c.client.as_ref().map(|s| format!("--{}", s.flag)),
                "exporter": matches!(c.exporter, Exporter::Module(_)),
            })
        })
        .collect();
    serde_json::json!({ "checks": checks, "generic_finding_ids":
        pathdoc_core::GENERIC_FINDING_IDS.iter()
            .map(|i| serde_json::json!({"id": i.id, "meaning": i.meaning}))
            .collect::<Vec<_>>() })
}

/// `pathdoc registry`: print the registry (JSON).
pub fn print() -> anyhow::Result<i32> {
    println!("{}", serde_json::to_string_pretty(&describe())?);
    Ok(0)
}

mod toy;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_is_registered_once_and_services_match_their_wire_names() {
        let mut names: Vec<CheckName> = CHECKS.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CHECKS.len(), "a check is registered twice");
        for c in CHECKS {
            assert!(
                c.docs.starts_with("docs/") && c.docs.ends_with(".md"),
                "{}",
                c.name
            );
            assert!(
                !c.finding_ids.is_empty(),
                "{} registers no finding ids",
                c.name
            );
            if let Some(s) = &c.service {
                assert_eq!((s.new)().check(), s.wire, "{}'s service", c.name);
            }
            // A check `pathdoc check` runs needs its far end in every `pathdoc server`.
            if c.client.is_some() {
                assert!(
                    c.service.as_ref().map(|s| s.offered) == Some(Offered::Always),
                    "{} runs in `pathdoc check` without a service every server offers",
                    c.name
                );
            }
            if let Exporter::Module(kind) = c.exporter {
                assert_eq!(kind.check, c.name, "{}'s exporter module kind", c.name);
            }
        }
    }

    /// Only servers started with --ssh-evidence run the SSH evidence service; every server runs
    /// the services of the checks `pathdoc check` runs.
    #[test]
    fn the_ssh_evidence_service_runs_only_when_asked_for() {
        let wires = |ssh| -> Vec<CheckKind> { services(ssh).iter().map(|s| s.check()).collect() };
        assert!(!wires(false).contains(&CheckKind::Ssh));
        assert!(wires(true).contains(&CheckKind::Ssh));
        for c in CHECKS.iter().filter(|c| c.client.is_some()) {
            let wire = c.service.as_ref().unwrap().wire;
            assert!(wires(false).contains(&wire), "{}", c.name);
        }
    }

    /// Every option of a check's group is `--<flag>-…` under a heading that names `--<flag>`, so
    /// help and man pages group them by check; the selection flags sit under no heading.
    #[test]
    fn check_options_sit_under_their_checks_heading() {
        let cli = crate::cli_command();
        let check = cli.find_subcommand("check").unwrap();
        for c in CHECKS {
            let Some(side) = &c.client else { continue };
            let own = (side.options)(clap::Command::new("t"));
            let flag = check
                .get_arguments()
                .find(|a| a.get_long() == Some(side.flag))
                .unwrap_or_else(|| panic!("no --{}", side.flag));
            assert_eq!(flag.get_help_heading(), None, "--{}", side.flag);
            for arg in own.get_arguments() {
                let long = arg.get_long().unwrap_or_default();
                let real = check
                    .get_arguments()
                    .find(|a| a.get_id() == arg.get_id())
                    .unwrap_or_else(|| panic!("--{long} is not in `pathdoc check`"));
                assert!(long.starts_with(&format!("{}-", side.flag)), "--{long}");
                let heading = real.get_help_heading().unwrap_or_default();
                assert!(
                    heading.contains(&format!("(--{})", side.flag)),
                    "--{long}: heading {heading:?}"
                );
            }
        }
    }
}
