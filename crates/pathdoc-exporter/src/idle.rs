//! Background idle monitors: the idle check takes up to hours, so it cannot run per scrape. One
//! task per (target, idle module) runs it again and again; `module=idle` scrapes return the
//! latest finished result with its timestamp.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pathdoc_core::{Finding, NoProgress};
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Check, Config, Target};
use crate::metrics::{Labels, Samples, SelfMetrics};
use crate::probe::resolve;

/// RFC 5382 REQ-5 (TCP established) and RFC 4787 REQ-5 (UDP mapping) floors in seconds.
pub const RFC5382_S: f64 = 7440.0;
pub const RFC4787_S: f64 = 120.0;

/// A finished run.
#[derive(Debug, Clone)]
pub struct Finished {
    pub at: SystemTime,
    pub took: Duration,
    pub findings: Vec<Finding>,
    pub data: serde_json::Value,
}

/// What a monitor knows about its target.
#[derive(Debug, Clone, Default)]
pub struct MonitorState {
    pub latest: Option<Finished>,
    pub runs: u64,
    pub failures: u64,
    pub last_error: Option<(SystemTime, String)>,
    pub running_since: Option<SystemTime>,
}

type Key = (String, String);

/// Shared view of every monitor's state, keyed by (target, module).
#[derive(Clone, Default)]
pub struct Monitors {
    state: Arc<Mutex<BTreeMap<Key, MonitorState>>>,
}

impl Monitors {
    pub fn get(&self, target: &str, module: &str) -> Option<MonitorState> {
        self.lock()
            .get(&(target.to_string(), module.to_string()))
            .cloned()
    }

    fn update(&self, key: &Key, f: impl FnOnce(&mut MonitorState)) {
        f(self.lock().entry(key.clone()).or_default());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, MonitorState>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Start one monitor per (target, idle module) of the config. They stop when `cancel` fires
/// (the running check is cancelled and releases its server session).
pub fn spawn_all(
    config: &Config,
    metrics: Arc<SelfMetrics>,
    cancel: &CancellationToken,
) -> (Monitors, Vec<JoinHandle<()>>) {
    let monitors = Monitors::default();
    let mut tasks = Vec::new();
    for target in &config.targets {
        for module in &target.modules {
            if let Some(check @ Check::Idle { .. }) = config.modules.get(module) {
                let key = (target.address.clone(), module.clone());
                monitors.update(&key, |_| {});
                tasks.push(tokio::spawn(monitor(
                    key,
                    target.clone(),
                    check.clone(),
                    monitors.clone(),
                    metrics.clone(),
                    cancel.clone(),
                )));
            }
        }
    }
    (monitors, tasks)
}

async fn monitor(
    key: Key,
    target: Target,
    check: Check,
    monitors: Monitors,
    metrics: Arc<SelfMetrics>,
    cancel: CancellationToken,
) {
    let Check::Idle {
        idle_max,
        resolution,
        max_probes,
        interval,
        udp,
        culprit,
    } = check
    else {
        return;
    };
    let labels: Labels = vec![
        ("target".to_string(), key.0.clone()),
        ("module".to_string(), key.1.clone()),
    ];
    while !cancel.is_cancelled() {
        let started = SystemTime::now();
        monitors.update(&key, |s| s.running_since = Some(started));
        metrics.idle_running.get_or_create(&labels).set(1);
        let result = async {
            let server = resolve(&target.address).await?;
            let mut cfg = pathdoc_idle::IdleConfig::new(server);
            cfg.token = target.server_token.clone();
            cfg.horizon = idle_max;
            cfg.resolution = resolution;
            cfg.max_probes = max_probes;
            cfg.udp = udp;
            cfg.culprit = culprit;
            let run = run_isolated(cfg, cancel.clone());
            tokio::pin!(run);
            tokio::select! {
                r = &mut run => r,
                _ = cancel.cancelled() => {
                    // The check stops on the token and releases its session; give it a moment,
                    // but never let shutdown wait for an hours-long run.
                    let _ = tokio::time::timeout(Duration::from_secs(2), &mut run).await;
                    Err("stopped".to_string())
                }
            }
        }
        .await;
        metrics.idle_running.get_or_create(&labels).set(0);
        if cancel.is_cancelled() {
            break;
        }
        let took = started.elapsed().unwrap_or_default();
        let ok = result.is_ok();
        let mut result_labels = labels.clone();
        result_labels.push((
            "result".to_string(),
            if ok { "success" } else { "failure" }.to_string(),
        ));
        metrics.idle_runs.get_or_create(&result_labels).inc();
        monitors.update(&key, |s| {
            s.running_since = None;
            s.runs += 1;
            match result {
                Ok(r) => {
                    tracing::info!(target = %key.0, module = %key.1, "idle run finished in {took:?}");
                    s.latest = Some(Finished {
                        at: SystemTime::now(),
                        took,
                        findings: r.findings,
                        data: r.data,
                    });
                }
                Err(e) => {
                    tracing::warn!(target = %key.0, module = %key.1, "idle run failed: {e}");
                    s.failures += 1;
                    s.last_error = Some((SystemTime::now(), e));
                }
            }
        });
        // After a failure retry sooner, but never in a tight loop against a dead server.
        let pause = if ok {
            interval
        } else {
            interval.clamp(Duration::from_secs(5), Duration::from_secs(60))
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = cancel.cancelled() => break,
        }
    }
}

/// Run one idle check on its own thread and runtime, and drop that runtime when the check
/// returns: every task the run spawned (probe readers waiting on connections a NAT silently
/// dropped, which would otherwise hold their sockets until TCP gives up) ends with it, so a
/// monitor that runs for months does not accumulate file descriptors.
async fn run_isolated(
    cfg: pathdoc_idle::IdleConfig,
    cancel: CancellationToken,
) -> Result<pathdoc_idle::IdleResult, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("pathdoc-idle-run".into())
        .spawn(move || {
            let result = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    let r = rt
                        .block_on(pathdoc_idle::run(&cfg, &NoProgress, &cancel))
                        .map_err(|e| e.to_string());
                    rt.shutdown_timeout(Duration::from_secs(1));
                    r
                }
                Err(e) => Err(format!("starting the idle run's runtime: {e}")),
            };
            let _ = tx.send(result);
        })
        .map_err(|e| format!("starting the idle run's thread: {e}"))?;
    rx.await
        .unwrap_or_else(|_| Err("the idle run ended without a result".into()))
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct IdleData {
    ladders: Vec<Ladder>,
    udp: Option<Udp>,
    plan: Option<Plan>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Ladder {
    mode: String,
    split: Option<u32>,
    outcome: Option<Bracket>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Bracket {
    lower_s: Option<f64>,
    upper_s: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Udp {
    /// The two binding classes (single exchange, stream), each with its own ladder…
    single_exchange: Option<UdpClass>,
    stream: Option<UdpClass>,
    /// …or one ladder in results from before the classes.
    outcome: Option<Bracket>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UdpClass {
    outcome: Option<Bracket>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Plan {
    horizon_s: Option<f64>,
}

/// Whether the latest finished run succeeded; `None` while no run has finished.
fn last_run_succeeded(state: &MonitorState) -> Option<bool> {
    match (&state.latest, &state.last_error) {
        (None, None) => None,
        (Some(_), None) => Some(true),
        (None, Some(_)) => Some(false),
        (Some(ok), Some((failed_at, _))) => Some(ok.at > *failed_at),
    }
}

/// The samples of `module=idle` for one monitor.
pub fn samples(state: &MonitorState) -> Samples {
    let mut s = Samples::default();
    // Until the first run ends (up to the whole horizon, 2 h 10 min by default) there is no
    // verdict either way: probe_success stays absent so `probe_success == 0` does not fire, and
    // pathdoc_idle_result_available says "measuring, no result yet".
    if let Some(ok) = last_run_succeeded(state) {
        s.set(
            "probe_success",
            "Whether the latest finished idle run produced a result (absent until the first run ends)",
            &[],
            if ok { 1.0 } else { 0.0 },
        );
    }
    s.set(
        "pathdoc_idle_result_available",
        "1 once an idle result exists; 0 while the first run is still measuring (or every run failed)",
        &[],
        if state.latest.is_some() { 1.0 } else { 0.0 },
    );
    s.set(
        "pathdoc_idle_runs_completed",
        "Idle runs this monitor finished (successful or not) since the exporter started",
        &[],
        state.runs as f64,
    );
    s.set(
        "pathdoc_idle_run_in_progress",
        "1 while the next idle run is in progress",
        &[],
        if state.running_since.is_some() {
            1.0
        } else {
            0.0
        },
    );
    if let Some((at, _)) = &state.last_error {
        s.set(
            "pathdoc_idle_last_error_timestamp_seconds",
            "When the latest failed idle run ended (Unix time)",
            &[],
            unix(*at),
        );
    }
    let Some(latest) = &state.latest else {
        return s;
    };
    s.set(
        "pathdoc_idle_result_timestamp_seconds",
        "When the latest finished idle result was measured (Unix time of its end)",
        &[],
        unix(latest.at),
    );
    s.set(
        "pathdoc_idle_run_duration_seconds",
        "How long the latest finished idle run took",
        &[],
        latest.took.as_secs_f64(),
    );
    let data: IdleData = serde_json::from_value(latest.data.clone()).unwrap_or_default();
    if let Some(h) = data.plan.and_then(|p| p.horizon_s) {
        s.set(
            "pathdoc_idle_horizon_seconds",
            "Longest idle time the run tested",
            &[],
            h,
        );
    }
    let tcp = data
        .ladders
        .iter()
        .filter(|l| l.split.is_none())
        .map(|l| ("tcp", l.mode.as_str(), l.outcome.as_ref()));
    let udp = data.udp.as_ref().into_iter().flat_map(|u| {
        [
            (
                "udp",
                "single-exchange",
                u.single_exchange.as_ref().and_then(|c| c.outcome.as_ref()),
            ),
            (
                "udp",
                "stream",
                u.stream.as_ref().and_then(|c| c.outcome.as_ref()),
            ),
            ("udp", "server-initiated", u.outcome.as_ref()),
        ]
    });
    for (protocol, mode, bracket) in tcp.chain(udp) {
        let Some(b) = bracket else { continue };
        for (bound, v) in [("lower", b.lower_s), ("upper", b.upper_s)] {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                s.set(
                    "pathdoc_idle_timeout_seconds",
                    "Idle timeout bracket: lower = longest idle that survived, upper = shortest that was dropped",
                    &[("protocol", protocol), ("mode", mode), ("bound", bound)],
                    v,
                );
            }
        }
        let floor = if protocol == "tcp" {
            RFC5382_S
        } else {
            RFC4787_S
        };
        let below = b.upper_s.is_some_and(|u| u < floor);
        let worst = s
            .get("pathdoc_idle_timeout_below_rfc", &[("protocol", protocol)])
            .unwrap_or(0.0);
        s.set(
            "pathdoc_idle_timeout_below_rfc",
            "1 when idle state was dropped before the RFC floor (TCP: RFC 5382 2 h 4 min; UDP: RFC 4787 2 min)",
            &[("protocol", protocol)],
            worst.max(if below { 1.0 } else { 0.0 }),
        );
    }
    s.findings(&latest.findings);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_samples_carry_bracket_timestamp_and_rfc_flag() {
        let state = MonitorState {
            runs: 1,
            latest: Some(Finished {
                at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
                took: Duration::from_secs(9),
                findings: vec![],
                data: serde_json::json!({
                    "plan": {"horizon_s": 12.0},
                    "ladders": [{"mode": "server-initiated", "split": null,
                                 "outcome": {"lower_s": 2.0, "upper_s": 3.0}}],
                    "udp": {"single_exchange": {"outcome": {"lower_s": 1.0, "upper_s": null}},
                            "stream": {"outcome": {"lower_s": 150.0, "upper_s": 160.0}}}
                }),
            }),
            ..MonitorState::default()
        };
        let s = samples(&state);
        assert_eq!(s.get("probe_success", &[]), Some(1.0));
        assert_eq!(
            s.get("pathdoc_idle_result_timestamp_seconds", &[]),
            Some(1_700_000_000.0)
        );
        assert_eq!(
            s.get(
                "pathdoc_idle_timeout_seconds",
                &[
                    ("protocol", "tcp"),
                    ("mode", "server-initiated"),
                    ("bound", "upper")
                ]
            ),
            Some(3.0)
        );
        assert_eq!(
            s.get("pathdoc_idle_timeout_below_rfc", &[("protocol", "tcp")]),
            Some(1.0)
        );
        assert_eq!(
            s.get("pathdoc_idle_timeout_below_rfc", &[("protocol", "udp")]),
            Some(0.0)
        );
        assert_eq!(s.get("pathdoc_idle_result_available", &[]), Some(1.0));
        let none = samples(&MonitorState::default());
        assert_eq!(none.get("pathdoc_idle_result_timestamp_seconds", &[]), None);
    }

    #[test]
    fn a_first_run_still_measuring_is_not_a_failed_probe() {
        let measuring = MonitorState {
            running_since: Some(SystemTime::now()),
            ..MonitorState::default()
        };
        let s = samples(&measuring);
        assert_eq!(s.get("probe_success", &[]), None, "no verdict yet");
        assert_eq!(s.get("pathdoc_idle_result_available", &[]), Some(0.0));
        assert_eq!(s.get("pathdoc_idle_run_in_progress", &[]), Some(1.0));

        let t = |s| UNIX_EPOCH + Duration::from_secs(s);
        let failed = MonitorState {
            runs: 1,
            failures: 1,
            last_error: Some((t(100), "connection refused".into())),
            ..MonitorState::default()
        };
        assert_eq!(samples(&failed).get("probe_success", &[]), Some(0.0));
        let finished = |at| Finished {
            at,
            took: Duration::from_secs(1),
            findings: vec![],
            data: serde_json::Value::Null,
        };
        let recovered = MonitorState {
            latest: Some(finished(t(200))),
            ..failed.clone()
        };
        assert_eq!(samples(&recovered).get("probe_success", &[]), Some(1.0));
        let failing_again = MonitorState {
            latest: Some(finished(t(50))),
            ..failed
        };
        let s = samples(&failing_again);
        assert_eq!(s.get("probe_success", &[]), Some(0.0));
        assert_eq!(s.get("pathdoc_idle_result_available", &[]), Some(1.0));
    }
}
