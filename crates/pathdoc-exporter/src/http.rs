//! The HTTP side: `/probe` (blackbox_exporter's convention), `/metrics` (the exporter's own),
//! `/-/healthy`, and `/` (what is configured). Everything but the health check requires a
//! bearer token when the config lists any.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
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

/// Held while a probe of one (target, module) runs.
type TargetLock = Arc<Mutex<()>>;

pub struct AppState {
    pub config: Arc<Config>,
    pub metrics: Arc<SelfMetrics>,
    pub monitors: Monitors,
    /// Fired on shutdown: running probes give up rather than hold the exit for minutes.
    pub shutdown: CancellationToken,
    probes: Semaphore,
    /// One probe per (target, module) at a time: two throughput tests at once would halve each.
    busy: Mutex<HashMap<(String, String), TargetLock>>,
}

impl AppState {
    pub fn new(
        config: Arc<Config>,
        metrics: Arc<SelfMetrics>,
        monitors: Monitors,
        shutdown: CancellationToken,
    ) -> Self {
        AppState {
            shutdown,
            probes: Semaphore::new(config.max_concurrent_probes),
            config,
            metrics,
            monitors,
            busy: Mutex::new(HashMap::new()),
        }
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/probe", get(probe_handler))
        .route("/metrics", get(metrics_handler))
        .route("/-/healthy", get(|| async { "ok\n" }))
        .route("/", get(index_handler))
        .with_state(state)
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

/// Prometheus sends its scrape timeout; the probe must answer before it.
fn budget(config: &Config, headers: &HeaderMap) -> Duration {
    let scrape = headers
        .get("X-Prometheus-Scrape-Timeout-Seconds")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Duration::from_secs_f64(s).saturating_sub(SCRAPE_MARGIN));
    match scrape {
        Some(s) => s.min(config.probe_timeout).max(Duration::from_millis(100)),
        None => config.probe_timeout,
    }
}

async fn probe_handler(
    State(state): State<Arc<AppState>>,
    Query(params): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&state.config, &headers) {
        return refuse(
            &state,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token".into(),
        );
    }
    let (Some(target), Some(module)) = (params.get("target"), params.get("module")) else {
        return refuse(
            &state,
            StatusCode::BAD_REQUEST,
            "bad-request",
            "usage: /probe?target=HOST[:PORT]&module=NAME".into(),
        );
    };
    let Some(check) = state.config.modules.get(module) else {
        let known: Vec<&str> = state.config.modules.keys().map(String::as_str).collect();
        return refuse(
            &state,
            StatusCode::BAD_REQUEST,
            "unknown-module",
            format!("unknown module {module:?}; this exporter has {known:?}"),
        );
    };
    let Some(allowed) = state.config.allowed(target, module) else {
        return refuse(
            &state,
            StatusCode::FORBIDDEN,
            "target-not-allowed",
            format!(
                "target {target:?} is not allowed for module {module:?} by the exporter's config"
            ),
        );
    };
    let allowed = allowed.clone();
    if let Check::Idle { .. } = check {
        let snapshot = state
            .monitors
            .get(&allowed.address, module)
            .unwrap_or_default();
        return openmetrics(crate::idle::samples(&snapshot).encode());
    }

    let budget = budget(&state.config, &headers);
    let started = Instant::now();
    let key = (allowed.address.clone(), module.clone());
    let lock = state.busy.lock().await.entry(key).or_default().clone();
    let waited = async {
        let permit = state.probes.acquire().await;
        let same_target = lock.lock().await;
        (permit, same_target)
    };
    let Ok((Ok(_permit), _same_target)) = tokio::time::timeout(budget, waited).await else {
        return refuse(
            &state,
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!(
                "no probe slot free within {budget:?} (max_concurrent_probes = {})",
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
    let result = match (&outcome.error, outcome.timed_out) {
        (None, _) => "success",
        (Some(_), true) => "timeout",
        (Some(_), false) => "failure",
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

async fn metrics_handler(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if !authorized(&state.config, &headers) {
        return refuse(
            &state,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token".into(),
        );
    }
    openmetrics(state.metrics.encode())
}

async fn index_handler(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if !authorized(&state.config, &headers) {
        return refuse(
            &state,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token".into(),
        );
    }
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
        let config =
            Config::parse("auth_tokens = [\"0123456789\"]\nprobe_timeout = \"30s\"").unwrap();
        let mut h = HeaderMap::new();
        assert!(!authorized(&config, &h));
        h.insert(header::AUTHORIZATION, "Bearer 0123456789".parse().unwrap());
        assert!(authorized(&config, &h));
        h.insert(header::AUTHORIZATION, "Bearer 0123456780".parse().unwrap());
        assert!(!authorized(&config, &h));
        assert_eq!(budget(&config, &h), Duration::from_secs(30));
        h.insert("X-Prometheus-Scrape-Timeout-Seconds", "10".parse().unwrap());
        assert_eq!(budget(&config, &h), Duration::from_millis(9500));
        h.insert(
            "X-Prometheus-Scrape-Timeout-Seconds",
            "100".parse().unwrap(),
        );
        assert_eq!(budget(&config, &h), Duration::from_secs(30));
    }
}
