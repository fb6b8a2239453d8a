//! The HTTP side: `/probe` (blackbox_exporter's convention), `/metrics` (the exporter's own),
//! `/-/healthy`, and `/` (what is configured). Everything but the health check requires a
//! bearer token when the config lists any.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::{Check, Config};
use crate::idle::Monitors;
use crate::metrics::{Labels, SelfMetrics, CONTENT_TYPE};
use crate::probe;

/// Time kept back from Prometheus's scrape timeout to encode and send the answer.
const SCRAPE_MARGIN: Duration = Duration::from_millis(500);
/// Largest scrape timeout header accepted: a day (Prometheus's timeouts are seconds to minutes).
pub const MAX_SCRAPE_TIMEOUT_S: f64 = 86_400.0;
/// Longest `target` (a 253-byte DNS name, `:`, a port) and `module` parameter accepted.
pub const MAX_TARGET_LEN: usize = 300;
pub const MAX_MODULE_LEN: usize = 64;
pub const SCRAPE_TIMEOUT_HEADER: &str = "X-Prometheus-Scrape-Timeout-Seconds";

/// The probes of one (target, module): how many wait or run, and the lock one probe holds.
#[derive(Default)]
struct TargetQueue {
    queued: AtomicUsize,
    /// One probe per (target, module) at a time: two throughput tests at once would halve each.
    running: Mutex<()>,
}

/// A place in a [`TargetQueue`], given back when the probe ends or its request is dropped.
struct QueueSlot<'a>(&'a AtomicUsize);

impl<'a> QueueSlot<'a> {
    fn take(queue: &'a TargetQueue, max: usize) -> Option<Self> {
        queue
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| QueueSlot(&queue.queued))
    }
}

impl Drop for QueueSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pub struct AppState {
    pub config: Arc<Config>,
    pub metrics: Arc<SelfMetrics>,
    pub monitors: Monitors,
    /// Fired on shutdown: running probes give up rather than hold the exit for minutes.
    pub shutdown: CancellationToken,
    probes: Semaphore,
    /// One queue per (target, module) the config allows, made up front: requests never add keys.
    queues: HashMap<(String, String), TargetQueue>,
}

impl AppState {
    pub fn new(
        config: Arc<Config>,
        metrics: Arc<SelfMetrics>,
        monitors: Monitors,
        shutdown: CancellationToken,
    ) -> Self {
        let queues = config
            .targets
            .iter()
            .flat_map(|t| t.modules.iter().map(|m| (t.address.clone(), m.clone())))
            .map(|key| (key, TargetQueue::default()))
            .collect();
        AppState {
            shutdown,
            probes: Semaphore::new(config.max_concurrent_probes),
            config,
            metrics,
            monitors,
            queues,
        }
    }
}

/// Every route but the health check sits behind the bearer-token middleware.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/probe", get(probe_handler))
        .route("/metrics", get(metrics_handler))
        .route("/", get(index_handler))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token))
        .route("/-/healthy", get(|| async { "ok\n" }))
        .with_state(state)
}

async fn require_token(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if authorized(&state.config, req.headers()) {
        next.run(req).await
    } else {
        refuse(
            &state,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token".into(),
        )
    }
}

fn refuse(state: &AppState, status: StatusCode, reason: &str, message: String) -> Response {
    state.metrics.refuse(reason);
    tracing::info!("refused ({reason}): {message}");
    let mut r = (status, format!("{message}\n")).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    r
}

/// Compare without an early exit, so response time does not reveal how much of a token matched.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorized(config: &Config, headers: &HeaderMap) -> bool {
    if config.auth_tokens.is_empty() {
        return true;
    }
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    config.auth_tokens.iter().fold(false, |ok, t| {
        ok | same(t.as_bytes(), given.trim().as_bytes())
    })
}

/// Prometheus sends its scrape timeout; the probe must answer before it. A header that is not a
/// number of seconds in (0, [`MAX_SCRAPE_TIMEOUT_S`]] is an error, not a silent default.
fn budget(config: &Config, headers: &HeaderMap) -> Result<Duration, String> {
    let Some(raw) = headers.get(SCRAPE_TIMEOUT_HEADER) else {
        return Ok(config.probe_timeout);
    };
    let seconds = raw
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0 && *s <= MAX_SCRAPE_TIMEOUT_S)
        .ok_or_else(|| {
            format!(
                "{SCRAPE_TIMEOUT_HEADER}: {:?} is not a number of seconds above 0 and at most {MAX_SCRAPE_TIMEOUT_S}",
                String::from_utf8_lossy(raw.as_bytes())
            )
        })?;
    let scrape = Duration::from_secs_f64(seconds).saturating_sub(SCRAPE_MARGIN);
    Ok(scrape
        .min(config.probe_timeout)
        .max(Duration::from_millis(100)))
}

/// `target` and `module`, each given once and within its length bound.
fn probe_params(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<(String, String), String> {
    const USAGE: &str = "usage: /probe?target=HOST[:PORT]&module=NAME";
    let Query(pairs) = query.map_err(|e| format!("{USAGE} ({})", e.body_text()))?;
    let one = |name: &str, max: usize| -> Result<String, String> {
        let mut values = pairs.iter().filter(|(k, _)| k == name);
        let value = values
            .next()
            .ok_or_else(|| format!("{USAGE} ({name} is missing)"))?;
        if values.next().is_some() {
            return Err(format!("{USAGE} ({name} is given more than once)"));
        }
        if value.1.len() > max {
            return Err(format!("{name}: longer than {max} bytes"));
        }
        Ok(value.1.clone())
    };
    Ok((
        one("target", MAX_TARGET_LEN)?,
        one("module", MAX_MODULE_LEN)?,
    ))
}

async fn probe_handler(
    State(state): State<Arc<AppState>>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let (target, module) = match probe_params(query) {
        Ok(p) => p,
        Err(message) => return refuse(&state, StatusCode::BAD_REQUEST, "bad-request", message),
    };
    let budget = match budget(&state.config, &headers) {
        Ok(b) => b,
        Err(message) => return refuse(&state, StatusCode::BAD_REQUEST, "bad-request", message),
    };
    let Some(check) = state.config.modules.get(&module) else {
        let known: Vec<&str> = state.config.modules.keys().map(String::as_str).collect();
        return refuse(
            &state,
            StatusCode::BAD_REQUEST,
            "unknown-module",
            format!("unknown module {module:?}; this exporter has {known:?}"),
        );
    };
    let Some(allowed) = state.config.allowed(&target, &module) else {
        return refuse(
            &state,
            StatusCode::FORBIDDEN,
            "target-not-allowed",
            format!(
                "target {target:?} is not allowed for module {module:?} by the exporter's config"
            ),
        );
    };
    if let Check::Idle { .. } = check {
        let snapshot = state
            .monitors
            .get(&allowed.address, &module)
            .unwrap_or_default();
        return openmetrics(crate::idle::samples(&snapshot).encode());
    }
    let allowed = allowed.clone();
    let started = Instant::now();
    // Every allowed (target, module) got its queue in AppState::new; none missing means busy.
    let Some(queue) = state.queues.get(&(allowed.address.clone(), module.clone())) else {
        return refuse(
            &state,
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!("no probe queue for {} {module}", allowed.address),
        );
    };
    let max_queued = state.config.max_queued_probes_per_target;
    let Some(_slot) = QueueSlot::take(queue, max_queued) else {
        return refuse(
            &state,
            StatusCode::TOO_MANY_REQUESTS,
            "queue-full",
            format!(
                "{max_queued} probes of {} with module {module} are already waiting or running (max_queued_probes_per_target = {max_queued}); scrape it less often or raise scrape_timeout",
                allowed.address
            ),
        );
    };
    // The target's own lock first, the global permit second: a probe waiting behind a slow probe
    // of its own target holds no global permit, so other targets' probes still get one.
    let waited = async {
        let same_target = queue.running.lock().await;
        let permit = state.probes.acquire().await;
        (same_target, permit)
    };
    let Ok((_same_target, Ok(_permit))) = tokio::time::timeout(budget, waited).await else {
        return refuse(
            &state,
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!(
                "no probe slot free within {budget:?} (one probe per target and module at a time, max_concurrent_probes = {})",
                state.config.max_concurrent_probes
            ),
        );
    };
    let left = budget.saturating_sub(started.elapsed());
    state.metrics.in_flight.inc();
    let outcome = tokio::select! {
        o = probe::run(check, &allowed, left) => Some(o),
        _ = state.shutdown.cancelled() => None,
    };
    state.metrics.in_flight.dec();
    let Some(outcome) = outcome else {
        return refuse(
            &state,
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting-down",
            "the exporter is shutting down".into(),
        );
    };
    let module_label: Labels = vec![("module".into(), module.clone())];
    state
        .metrics
        .probe_seconds
        .get_or_create(&module_label)
        .observe(started.elapsed().as_secs_f64());
    let result = match (&outcome.error, outcome.timed_out, &outcome.busy) {
        (None, ..) => "success",
        (Some(_), true, _) => "timeout",
        (Some(_), false, Some(_)) => "busy",
        (Some(_), false, None) => "failure",
    };
    let mut labels = module_label;
    labels.push(("result".into(), result.into()));
    state.metrics.probes.get_or_create(&labels).inc();
    if let Some(e) = &outcome.error {
        tracing::warn!(target = %allowed.address, module = %module, "probe failed: {e}");
    }
    openmetrics(outcome.samples.encode())
}

fn openmetrics(body: String) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response()
}

async fn metrics_handler(State(state): State<Arc<AppState>>) -> Response {
    openmetrics(state.metrics.encode())
}

async fn index_handler(State(state): State<Arc<AppState>>) -> Response {
    let mut text = format!(
        "pathdoc exporter {}\n\nGET /probe?target=HOST[:PORT]&module=NAME   run a check (idle: latest background result)\nGET /metrics                                the exporter's own metrics\n\nmodules:\n",
        env!("CARGO_PKG_VERSION")
    );
    for (name, check) in &state.config.modules {
        text.push_str(&format!("  {name}: {} check\n", check.name()));
    }
    text.push_str("targets:\n");
    for t in &state.config.targets {
        text.push_str(&format!("  {}: {}\n", t.address, t.modules.join(", ")));
    }
    text.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_checked_and_scrape_timeouts_bound_the_probe() {
        let config = Config::parse(
            "auth_tokens = [\"0123456789\"]\nprobe_timeout = \"30s\"",
            &[],
        )
        .unwrap();
        let mut h = HeaderMap::new();
        assert!(!authorized(&config, &h));
        h.insert(header::AUTHORIZATION, "Bearer 0123456789".parse().unwrap());
        assert!(authorized(&config, &h));
        h.insert(header::AUTHORIZATION, "Bearer 0123456780".parse().unwrap());
        assert!(!authorized(&config, &h));
        assert_eq!(budget(&config, &h), Ok(Duration::from_secs(30)));
        h.insert(SCRAPE_TIMEOUT_HEADER, "10".parse().unwrap());
        assert_eq!(budget(&config, &h), Ok(Duration::from_millis(9500)));
        h.insert(SCRAPE_TIMEOUT_HEADER, "100".parse().unwrap());
        assert_eq!(budget(&config, &h), Ok(Duration::from_secs(30)));
        h.insert(SCRAPE_TIMEOUT_HEADER, "86400".parse().unwrap());
        assert_eq!(budget(&config, &h), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn scrape_timeouts_out_of_bounds_are_errors_not_panics() {
        let config = Config::parse("", &[]).unwrap();
        // 1e300 panicked in Duration::from_secs_f64 before the bound.
        for bad in [
            "1e300", "86401", "inf", "NaN", "-1", "0", "-0", "ten", "", "1e-400",
        ] {
            let mut h = HeaderMap::new();
            h.insert(SCRAPE_TIMEOUT_HEADER, bad.parse().unwrap());
            let e = budget(&config, &h).unwrap_err();
            assert!(e.contains(SCRAPE_TIMEOUT_HEADER), "{bad}: {e}");
        }
        let mut h = HeaderMap::new();
        h.insert(
            SCRAPE_TIMEOUT_HEADER,
            header::HeaderValue::from_bytes(b"\xff10").unwrap(),
        );
        assert!(budget(&config, &h).is_err());
    }
}
