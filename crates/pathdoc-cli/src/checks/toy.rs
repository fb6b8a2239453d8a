//! ARCHITECTURE.md's recipe "Adding a check", followed for a toy check that needs no server:
//! its options (a clap derive group), its resolved form (a [`ClientCheck`]), one registration —
//! and `pathdoc check`'s flags, help heading, steps and report come out of the registry with
//! no other code changed. (A real check also has a crate, a `CheckName` and a service.)

#![cfg(test)]

use clap::{ArgMatches, Args};
use pathdoc_core::{CheckName, CheckOutcome, Finding, FindingId, Report, Status};

use super::{resolved, Check, CheckFuture, ClientCheck, ClientSide, Exporter};
use crate::cmd::check::{CheckContext, CheckSelection};
use crate::error::CliError;

const TOY_IDS: &[FindingId] = &[FindingId {
    id: "toy-answer",
    meaning: "the toy check's answer (info)",
}];

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Toy check (--toy)")]
struct ToyArgs {
    /// The answer the toy check reports.
    #[arg(long = "toy-answer", default_value_t = 42)]
    answer: u32,
}

struct ToyCheck {
    answer: u32,
}

impl ClientCheck for ToyCheck {
    fn run<'a>(&'a self, _ctx: &'a CheckContext<'a>) -> CheckFuture<'a> {
        Box::pin(async move {
            let finding = Finding::new(
                CheckName::Mtu,
                "toy-answer",
                Status::Info,
                format!("the answer is {}", self.answer),
            );
            CheckOutcome {
                findings: vec![finding],
                data: serde_json::json!({ "answer": self.answer }),
            }
            .into_json()
            .map_err(Into::into)
        })
    }
}

fn resolve(matches: &ArgMatches) -> Result<Box<dyn ClientCheck>, CliError> {
    resolved(matches, |a: ToyArgs| {
        if a.answer == 0 {
            return Err(CliError::usage("--toy-answer must not be 0"));
        }
        Ok(Box::new(ToyCheck { answer: a.answer }))
    })
}

fn no_figures(_: &Report) -> Vec<pathdoc_html::Figure> {
    Vec::new()
}

/// The one registration (a test cannot add a `CheckName`, so the toy borrows `mtu`'s).
static TOY_REGISTRY: &[Check] = &[Check {
    name: CheckName::Mtu,
    crate_name: "pathdoc-cli",
    finding_ids: TOY_IDS,
    docs: "docs/toy.md",
    service: None,
    client: Some(ClientSide {
        flag: "toy",
        help: "Run the toy check",
        options: ToyArgs::augment_args,
        resolve,
    }),
    figures: no_figures,
    page_order: 1,
    exporter: Exporter::NotExported,
}];

fn selection(args: &[&str]) -> Result<CheckSelection, clap::Error> {
    let cmd = CheckSelection::augment(clap::Command::new("check"), TOY_REGISTRY);
    let matches = cmd.try_get_matches_from(args)?;
    Ok(CheckSelection::from_matches(&matches, TOY_REGISTRY))
}

#[test]
fn a_registered_toy_check_gets_its_flag_heading_step_and_report_section() {
    let mut cmd = CheckSelection::augment(clap::Command::new("check"), TOY_REGISTRY);
    let help = cmd.render_help().to_string();
    assert!(
        help.contains("--toy ") && help.contains("Run the toy check"),
        "{help}"
    );
    assert!(
        help.contains("Toy check (--toy):\n      --toy-answer"),
        "{help}"
    );

    let steps = selection(&["check", "--toy", "--toy-answer", "7"])
        .unwrap()
        .steps()
        .unwrap();
    assert_eq!(steps.len(), 1);
    let progress = crate::progress::TerminalProgress::new(crate::Global {
        json: false,
        quiet: true,
        verbose: 0,
    });
    let ctx = CheckContext {
        server: "127.0.0.1:9".parse().unwrap(),
        auth_token: None,
        progress: &progress,
        cancel: tokio_util::sync::CancellationToken::new(),
    };
    let mut report = Report::new(pathdoc_core::Command::Check, "toy");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(crate::cmd::check::run_steps_for_test(
        &ctx,
        &steps,
        &mut report,
    ));
    assert_eq!(report.findings.len(), 1, "{report:?}");
    assert_eq!(report.findings[0].title, "the answer is 7");
    assert_eq!(report.data["mtu"]["answer"], 7);
}

#[test]
fn the_toy_checks_options_are_validated_before_it_runs() {
    // Not selected (another check would be), still validated: a typo is a typo.
    let err = selection(&["check", "--toy-answer", "0"])
        .unwrap()
        .steps()
        .err()
        .expect("a usage error");
    assert!(err.to_string().contains("--toy-answer"), "{err}");
    assert!(selection(&["check", "--toy-answer", "x"]).is_err());
}
