//! One scrape of `module=mtu` or `module=throughput`: resolve the target, run the check through
//! its library API within the scrape's deadline, and turn the result into samples.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pathdoc_core::busy::ServerBusy;
use pathdoc_core::{Finding, NoProgress};
use pathdoc_mtu::analysis::Outcome;
use pathdoc_speed::{DirectionResult, Mode, SpeedOptions, SpeedRun};
use tokio_util::sync::CancellationToken;

use crate::config::{Check, Target};
use crate::metrics::Samples;

/// What a probe produced: its samples (always with `probe_success`, `probe_duration_seconds`
/// and `pathdoc_server_busy`) and, when it failed, why.
pub struct ProbeOutcome {
    pub samples: Samples,
    pub error: Option<String>,
    pub timed_out: bool,
    /// The pathdoc server refused the probe for want of room: nothing was measured, and that
    /// says nothing about the path.
    pub busy: Option<ServerBusy>,
}

/// Why a probe measured nothing.
struct Failed {
    message: String,
    busy: Option<ServerBusy>,
}

impl From<String> for Failed {
    fn from(message: String) -> Self {
        Failed {
            message,
            busy: None,
        }
    }
}

/// The server refused `what` for want of room.
fn busy(what: String, busy: ServerBusy) -> Failed {
    Failed {
        message: format!("{what}: the server was busy: {}", busy.message),
        busy: Some(busy),
    }
}

const BUSY: &str = "pathdoc_server_busy";
const BUSY_HELP: &str = "1 when the pathdoc server refused the probe for want of room (its pools were full or shared out between other clients), so nothing was measured: not a path fault";
const BUSY_LIMIT: &str = "pathdoc_server_busy_limit";
const BUSY_LIMIT_HELP: &str = "The limit the busy pathdoc server refused the probe by; reason: the bound, as the server's log names it (sessions-total, streams-fair-share…)";

/// Run `check` against `target` for at most `budget`.
pub async fn run(check: &Check, target: &Target, budget: Duration) -> ProbeOutcome {
    let start = Instant::now();
    let cancel = CancellationToken::new();
    // Dropping this future (Prometheus gave up) or running out of time cancels the check, which
    // then releases its server session.
    let _guard = cancel.clone().drop_guard();
    let measured = tokio::time::timeout(budget, measure(check, target, &cancel)).await;
    let (mut samples, error, timed_out, busy) = match measured {
        Ok(Ok(samples)) => (samples, None, false, None),
        Ok(Err(e)) => (Samples::default(), Some(e.message), false, e.busy),
        Err(_) => (
            Samples::default(),
            Some(format!(
                "the {} check did not finish within {budget:?} (raise scrape_timeout and probe_timeout)",
                check.name()
            )),
            true,
            None,
        ),
    };
    samples.set(BUSY, BUSY_HELP, &[], if busy.is_some() { 1.0 } else { 0.0 });
    // Servers before the refusal's bound and limit name neither: no series then.
    if let Some((reason, limit)) = busy.as_ref().and_then(|b| b.reason.as_deref().zip(b.limit)) {
        samples.set(
            BUSY_LIMIT,
            BUSY_LIMIT_HELP,
            &[("reason", reason)],
            f64::from(limit),
        );
    }
    samples.set(
        "probe_success",
        "Whether the probe succeeded",
        &[],
        if error.is_none() { 1.0 } else { 0.0 },
    );
    samples.set(
        "probe_duration_seconds",
        "How long the probe took",
        &[],
        start.elapsed().as_secs_f64(),
    );
    ProbeOutcome {
        samples,
        error,
        timed_out,
        busy,
    }
}

/// The first address `HOST:PORT` resolves to.
pub async fn resolve(address: &str) -> Result<SocketAddr, String> {
    tokio::net::lookup_host(address)
        .await
        .map_err(|e| format!("cannot resolve {address}: {e}"))?
        .next()
        .ok_or_else(|| format!("{address} resolves to no address"))
}

async fn measure(
    check: &Check,
    target: &Target,
    cancel: &CancellationToken,
) -> Result<Samples, Failed> {
    let server = resolve(&target.address).await?;
    let token = target.server_token.clone();
    match check {
        Check::Mtu {
            min_size,
            max_size,
            attempts,
            wait,
            max_ttl,
            bulk,
        } => {
            let opts = pathdoc_mtu::MtuOptions {
                min_size: *min_size,
                max_size: *max_size,
                attempts: *attempts,
                wait: *wait,
                max_ttl: *max_ttl,
                bulk: *bulk,
                ..pathdoc_mtu::MtuOptions::default()
            };
            let r = pathdoc_mtu::run_check(server, token, &opts, &NoProgress, cancel)
                .await
                .map_err(|e| format!("mtu check against {server}: {e}"))?;
            // A session the server had no room for measured nothing: a failed probe, and
            // said to be the server's load (pathdoc_server_busy), not the path.
            if let Some(refused) = r.data.refused {
                return Err(busy(format!("mtu check against {server}"), refused));
            }
            Ok(mtu_samples(&r))
        }
        Check::Throughput {
            time,
            streams,
            congestion_control,
        } => {
            let base = SpeedOptions {
                mode: Mode::Upload,
                streams: *streams,
                duration: *time,
                bytes: None,
                cc: congestion_control.clone(),
                window: None,
                interval: Duration::from_secs(1)
                    .min(*time / 2)
                    .max(Duration::from_millis(100)),
            };
            let mut runs = Vec::new();
            for mode in [Mode::Upload, Mode::Download] {
                let opts = SpeedOptions {
                    mode,
                    ..base.clone()
                };
                let what = format!("throughput test against {server}");
                let run =
                    pathdoc_speed::run_test(server, token.clone(), &opts, &NoProgress, cancel)
                        .await
                        .map_err(|e| match e {
                            pathdoc_speed::SpeedError::Busy(b) => busy(what, b),
                            e => Failed::from(format!("{what}: {e}")),
                        })?;
                runs.push(run);
            }
            Ok(throughput_samples(&runs))
        }
        Check::Idle { .. } => Err(Failed::from(
            "the idle check runs in the background, not per scrape".to_string(),
        )),
    }
}

fn mtu_direction(d: pathdoc_mtu::analysis::Direction) -> &'static str {
    match d {
        pathdoc_mtu::analysis::Direction::ClientToServer => "client-to-server",
        pathdoc_mtu::analysis::Direction::ServerToClient => "server-to-client",
    }
}

pub fn mtu_samples(r: &pathdoc_mtu::MtuResult) -> Samples {
    let mut s = Samples::default();
    for d in [&r.data.up, &r.data.down].into_iter().flatten() {
        let dir = mtu_direction(d.direction);
        let labels = [("direction", dir)];
        if let Some(mtu) = d.outcome.mtu() {
            s.set(
                "pathdoc_path_mtu_bytes",
                "Largest IP datagram that crosses the path with DF set, per direction",
                &labels,
                f64::from(mtu),
            );
        }
        let black_hole = matches!(d.outcome, Outcome::BlackHole { .. });
        s.set(
            "pathdoc_pmtud_black_hole",
            "1 when bigger datagrams vanish and no ICMP too-big reaches the sender (PMTUD black hole)",
            &labels,
            if black_hole { 1.0 } else { 0.0 },
        );
        if let Some(loc) = &d.location {
            s.set(
                "pathdoc_mtu_drop_hop",
                "Hop (counted from the sender of the direction) after which the MTU drops",
                &labels,
                f64::from(loc.hop),
            );
        }
    }
    s.findings(&r.findings);
    s
}

/// The "limited by" verdict ids of the throughput check, at most one per direction.
const LIMITS: [&str; 6] = [
    "no-data",
    "cpu-limited",
    "receive-window-limited",
    "send-buffer-limited",
    "loss-limited",
    "link-limited",
];

fn speed_direction(d: &DirectionResult) -> &'static str {
    match d.direction {
        pathdoc_speed::Direction::Upload => "client-to-server",
        pathdoc_speed::Direction::Download => "server-to-client",
    }
}

pub fn throughput_samples(runs: &[SpeedRun]) -> Samples {
    let mut s = Samples::default();
    let mut findings: Vec<Finding> = Vec::new();
    for run in runs {
        for d in &run.directions {
            let dir = speed_direction(d);
            let labels = [("direction", dir)];
            s.set(
                "pathdoc_goodput_bits_per_second",
                "TCP payload delivered per second (goodput), per direction",
                &labels,
                d.goodput_bps,
            );
            s.set(
                "pathdoc_retransmitted_ratio",
                "Retransmitted share of the bytes sent, per direction",
                &labels,
                d.retrans_share(),
            );
            if d.sender.min_rtt_us > 0 {
                s.set(
                    "pathdoc_min_rtt_seconds",
                    "Smallest RTT the sender's TCP saw, per direction",
                    &labels,
                    f64::from(d.sender.min_rtt_us) / 1e6,
                );
            }
            let direction_findings = pathdoc_speed::diagnose_direction(d);
            if let Some(limit) = direction_findings
                .iter()
                .find(|f| LIMITS.contains(&f.id.as_str()))
            {
                s.set(
                    "pathdoc_throughput_limit",
                    "What limits the throughput of a direction: 1 for the factor named in the label",
                    &[("direction", dir), ("factor", limit.id.as_str())],
                    1.0,
                );
            }
            findings.extend(direction_findings.into_iter().map(|mut f| {
                // The exporter labels by direction; older check crates may not set the field.
                f.direction.get_or_insert(match d.direction {
                    pathdoc_speed::Direction::Upload => pathdoc_core::Direction::ClientToServer,
                    pathdoc_speed::Direction::Download => pathdoc_core::Direction::ServerToClient,
                });
                f
            }));
        }
    }
    let up = runs
        .iter()
        .flat_map(|r| &r.directions)
        .find(|d| d.direction == pathdoc_speed::Direction::Upload);
    let down = runs
        .iter()
        .flat_map(|r| &r.directions)
        .find(|d| d.direction == pathdoc_speed::Direction::Download);
    if let (Some(u), Some(d)) = (up, down) {
        findings.extend(pathdoc_speed::diagnose_asymmetry(u, d));
    }
    s.findings(&findings);
    s
}
