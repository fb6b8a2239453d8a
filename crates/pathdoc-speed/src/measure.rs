//! Run a sequence of tests (each direction, or once per congestion control with
//! `--compare-cc`) and turn them into findings and report data. Shared by `pathdoc speed` and
//! `pathdoc check --throughput`; the CLI only renders.
//!
//! What was measured is never thrown away: a test that fails or is refused after another one
//! finished adds a `check-failed` finding (with its direction and reason) next to the finished
//! test's verdicts, tests not started after Ctrl-C get `check-not-run`, and
//! Ctrl-C (the cancellation token) ends with the intervals measured so far and a
//! `throughput-interrupted` finding.

use std::net::SocketAddr;

use pathdoc_core::report::{CHECK_FAILED, CHECK_NOT_RUN};
use pathdoc_core::units::format_rate;
use pathdoc_core::{Finding, Progress, Status};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::analysis::{compare_cc, diagnose_asymmetry, CcRun, CHECK};
use crate::client::{run_test, SpeedError, SpeedOptions, SpeedRun};
use crate::spec::{Direction, Mode};
use pathdoc_core::busy::{describe as describe_busy, ServerBusy};

/// One test that did not run (or did not finish), and why.
#[derive(Debug, Clone, Serialize)]
pub struct NotMeasured {
    pub test: String,
    pub mode: Mode,
    pub congestion_control: Option<String>,
    pub reason: String,
    /// It did not start because the user interrupted the run (not a failure).
    pub interrupted: bool,
    /// The server had no room for it (its session or its streams): a `server-busy` WARN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy: Option<ServerBusy>,
}

/// A `--compare-cc` result for one direction.
#[derive(Debug, Clone, Serialize)]
pub struct CcComparison {
    pub direction: Direction,
    pub runs: Vec<CcRun>,
}

/// Everything a sequence of tests produced.
#[derive(Debug, Default)]
pub struct Measurement {
    pub runs: Vec<SpeedRun>,
    pub findings: Vec<Finding>,
    pub comparisons: Vec<CcComparison>,
    pub not_measured: Vec<NotMeasured>,
    /// Ctrl-C ended the sequence.
    pub interrupted: bool,
}

impl Measurement {
    /// `report.data["throughput"]`: every run with its per-direction, per-interval and per-stream
    /// samples, the comparisons, and what did not run.
    pub fn data(&self) -> serde_json::Value {
        serde_json::json!({
            "runs": self.runs,
            "cc_comparison": self.comparisons,
            "not_measured": self.not_measured,
            "interrupted": self.interrupted,
        })
    }
}

pub fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Upload => "upload",
        Mode::Download => "download",
        Mode::Both => "both directions",
    }
}

fn label(o: &SpeedOptions, cc: Option<&str>) -> String {
    format!(
        "{}{}",
        mode_label(o.mode),
        cc.map(|c| format!(" with {c}")).unwrap_or_default()
    )
}

/// Run each of `tests` (with `compare`: once with CUBIC and once with BBR) in turn. Returns an
/// error only when the first test could not run at all (nothing was measured) for another
/// reason than the server's load; later failures become findings, and a test the server had no
/// room for is a `server-busy` WARN wherever it comes.
pub async fn measure(
    server: SocketAddr,
    token: Option<String>,
    tests: &[SpeedOptions],
    compare: bool,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> Result<Measurement, SpeedError> {
    let ccs: Vec<Option<String>> = if compare {
        vec![Some("cubic".into()), Some("bbr".into())]
    } else {
        vec![None]
    };
    let plan: Vec<SpeedOptions> = tests
        .iter()
        .flat_map(|t| {
            ccs.iter().map(move |cc| SpeedOptions {
                cc: cc.clone().or_else(|| t.cc.clone()),
                ..t.clone()
            })
        })
        .collect();
    let mut m = Measurement::default();
    for (k, o) in plan.iter().enumerate() {
        let what = label(o, if compare { o.cc.as_deref() } else { None });
        progress.status(&format!("throughput: {what} starting"));
        match run_test(server, token.clone(), o, progress, cancel).await {
            Ok(run) => {
                for d in &run.directions {
                    progress.note(&format!(
                        "throughput: {}{}: {} goodput",
                        d.direction.short(),
                        o.cc.as_deref()
                            .filter(|_| compare)
                            .map(|c| format!(" [{c}]"))
                            .unwrap_or_default(),
                        format_rate(
                            d.phases
                                .steady
                                .as_ref()
                                .map_or(d.goodput_bps, |s| s.goodput_bps)
                        )
                    ));
                }
                let stop = run.interrupted;
                m.runs.push(run);
                if stop {
                    m.interrupted = true;
                    for rest in &plan[k + 1..] {
                        m.not_measured.push(NotMeasured {
                            test: label(rest, if compare { rest.cc.as_deref() } else { None }),
                            mode: rest.mode,
                            congestion_control: rest.cc.clone(),
                            reason: "interrupted before it started".to_string(),
                            interrupted: true,
                            busy: None,
                        });
                    }
                    break;
                }
            }
            Err(e) if k == 0 && !matches!(e, SpeedError::Busy(_)) => return Err(e),
            Err(e) => {
                let busy = match &e {
                    SpeedError::Busy(b) => Some(b.clone()),
                    _ => None,
                };
                for rest in &plan[k..] {
                    m.not_measured.push(NotMeasured {
                        test: label(rest, if compare { rest.cc.as_deref() } else { None }),
                        mode: rest.mode,
                        congestion_control: rest.cc.clone(),
                        reason: if std::ptr::eq(rest, o) {
                            error_chain(&e)
                        } else if busy.is_some() {
                            "not started: the server was busy".to_string()
                        } else {
                            "not started after the previous test failed".to_string()
                        },
                        interrupted: false,
                        busy: busy.clone(),
                    });
                }
                break;
            }
        }
    }
    if compare {
        m.comparisons = comparisons(&m);
    }
    m.findings = findings(&m, compare);
    Ok(m)
}

fn error_chain(e: &SpeedError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Findings of every run, the cross-direction comparison of separate one-way runs, the
/// congestion-control comparison, and what was interrupted or not measured.
pub(crate) fn findings(m: &Measurement, compare: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    for run in &m.runs {
        let mut fs = crate::diagnose(run);
        if compare {
            if let Some(cc) = &run.congestion_control {
                for f in &mut fs {
                    f.title = format!("[{cc}] {}", f.title);
                }
            }
        }
        out.extend(fs);
    }
    let complete = !m.interrupted && m.not_measured.is_empty();
    let both_in_one = m.runs.iter().any(|r| r.mode == Mode::Both);
    if !compare && complete && !both_in_one {
        let find = |d| {
            m.runs
                .iter()
                .flat_map(|r| &r.directions)
                .find(|x| x.direction == d)
        };
        if let (Some(u), Some(d)) = (find(Direction::Upload), find(Direction::Download)) {
            out.extend(diagnose_asymmetry(u, d));
        }
    }
    for c in &m.comparisons {
        out.extend(compare_cc(c.direction, &c.runs));
    }
    if m.interrupted {
        out.push(interrupted_finding(m));
    }
    for n in &m.not_measured {
        out.push(not_measured_finding(n));
    }
    out
}

/// The comparisons `--compare-cc` produced: each direction's goodput per congestion control.
fn comparisons(m: &Measurement) -> Vec<CcComparison> {
    [Direction::Upload, Direction::Download]
        .into_iter()
        .filter_map(|d| {
            let runs: Vec<CcRun> = m
                .runs
                .iter()
                .flat_map(|r| {
                    r.directions
                        .iter()
                        .filter(move |x| x.direction == d)
                        .map(move |x| (r, x))
                })
                .map(|(r, x)| CcRun {
                    congestion_control: r.congestion_control.clone().unwrap_or_default(),
                    goodput_bps: x
                        .phases
                        .steady
                        .as_ref()
                        .map_or(x.goodput_bps, |s| s.goodput_bps),
                    retrans_share: x.retrans_share(),
                })
                .collect();
            (runs.len() >= 2).then_some(CcComparison { direction: d, runs })
        })
        .collect()
}

fn interrupted_finding(m: &Measurement) -> Finding {
    let measured: Vec<String> = m
        .runs
        .iter()
        .flat_map(|r| &r.directions)
        .map(|d| format!("{} {:.1} s", d.direction.short(), d.duration_s))
        .collect();
    Finding::new(CHECK, "throughput-interrupted", Status::Inconclusive, "the throughput test was interrupted")
        .summary(format!(
            "Stopped by the user (Ctrl-C / SIGTERM). Measured until then: {}. Verdicts above cover only that part; a test cut short may not have left slow start.",
            if measured.is_empty() { "nothing".to_string() } else { measured.join(", ") }
        ))
}

/// A test that did not run, with the report's generic ids (docs/output.md): `check-not-run` when
/// the user interrupted first, `check-failed` when it failed or was refused.
fn not_measured_finding(n: &NotMeasured) -> Finding {
    let mut f = if let Some(busy) = &n.busy {
        describe_busy(
            Finding::new(CHECK, "server-busy", Status::Warn, ""),
            &format!("the {} test", n.test),
            busy,
        )
    } else if n.interrupted {
        Finding::new(
            CHECK,
            CHECK_NOT_RUN,
            Status::Info,
            format!(
                "the {} test did not run: interrupted before it started",
                n.test
            ),
        )
    } else {
        Finding::new(
            CHECK,
            CHECK_FAILED,
            Status::Inconclusive,
            format!(
                "the {} test could not run; the findings above are what was measured",
                n.test
            ),
        )
        .summary(format!(
            "{}. The tests before it finished and are judged above.",
            n.reason
        ))
    };
    if let Some(d) = match n.mode {
        Mode::Upload => Some(Direction::Upload),
        Mode::Download => Some(Direction::Download),
        Mode::Both => None,
    } {
        f = f.direction(d.core());
    }
    f
}
