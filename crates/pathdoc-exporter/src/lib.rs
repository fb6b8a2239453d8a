//! A Prometheus exporter for pathdoc, following blackbox_exporter's convention: Prometheus
//! schedules `GET /probe?target=HOST[:PORT]&module=NAME`, the exporter runs that module's check
//! against the target through the check crates' library APIs and answers in the OpenMetrics
//! exposition format. The idle check is hours long, so `module=idle` returns the latest result
//! of a background monitor the exporter keeps running per configured target.
//!
//! Only targets and modules listed in the config can be probed (never an open proxy); bearer
//! tokens, concurrency and time limits come from the config too. See docs/exporter.md.

pub mod config;
pub mod connections;
pub mod http;
pub mod idle;
pub mod metrics;
pub mod module;
pub mod probe;

use std::sync::Arc;

pub use config::{Config, ConfigError};
pub use module::ModuleKind;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("serving HTTP: {0}")]
    Serve(#[from] std::io::Error),
}

/// Serve `config` on `listener` until `shutdown` fires: the HTTP server stops accepting, running
/// probes and idle monitors are cancelled (releasing their server sessions), then this returns.
pub async fn serve(
    config: Config,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ExporterError> {
    let limits = connections::Limits {
        max_connections: config.max_connections,
        idle_timeout: config.http_idle_timeout,
    };
    let config = Arc::new(config);
    let metrics = Arc::new(metrics::SelfMetrics::default());
    let (monitors, tasks) = idle::spawn_all(&config, metrics.clone(), &shutdown);
    let state = Arc::new(http::AppState::new(
        config,
        metrics,
        monitors,
        shutdown.clone(),
    ));
    let server = connections::serve(listener, http::router(state), limits, shutdown.clone()).await;
    shutdown.cancel();
    for t in tasks {
        let _ = t.await;
    }
    server.map_err(ExporterError::Serve)
}
