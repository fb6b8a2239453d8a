//! Metrics in the Prometheus/OpenMetrics exposition format, encoded by `prometheus-client`:
//! the per-scrape result of a probe ([`Samples`]) and the exporter's own counters
//! ([`SelfMetrics`]).

use std::sync::atomic::AtomicU64;

use pathdoc_core::{Finding, Status};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// Content type of what [`Samples::encode`] and [`SelfMetrics::encode`] produce.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub type Labels = Vec<(String, String)>;
type GaugeF64 = Gauge<f64, AtomicU64>;

/// One probe's gauges, gathered as (name, help, labels, value) and encoded in one go.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    values: Vec<(&'static str, &'static str, Labels, f64)>,
}

fn owned(labels: &[(&str, &str)]) -> Labels {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Samples {
    /// Set `name{labels} = value`; the first sample of a name fixes its help text.
    pub fn set(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let labels = owned(labels);
        match self
            .values
            .iter_mut()
            .find(|(n, _, l, _)| *n == name && *l == labels)
        {
            Some(v) => v.3 = value,
            None => self.values.push((name, help, labels, value)),
        }
    }

    /// The value of `name{labels}`, if set.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels = owned(labels);
        self.values
            .iter()
            .find(|(n, _, l, _)| *n == name && *l == labels)
            .map(|v| v.3)
    }

    /// Findings as `pathdoc_finding_status{check, id, direction}`: 0 pass, 1 info,
    /// 2 inconclusive, 3 warn, 4 fail (the worst when an id repeats).
    pub fn findings(&mut self, findings: &[Finding]) {
        for f in findings {
            let direction = f.direction.map(kebab).unwrap_or_default();
            let labels = [
                ("check", f.check.as_str()),
                ("id", f.id.as_str()),
                ("direction", direction.as_str()),
            ];
            let value = severity(f.status);
            let worst = self
                .get(FINDING, &labels)
                .map_or(value, |old| old.max(value));
            self.set(FINDING, FINDING_HELP, &labels, worst);
        }
    }

    pub fn encode(&self) -> String {
        let mut registry = Registry::default();
        let mut families: Vec<(&str, Family<Labels, GaugeF64>)> = Vec::new();
        for (name, help, labels, value) in &self.values {
            if labels.is_empty() {
                // A plain gauge: `name 1.0` rather than `name{} 1.0`.
                let g = GaugeF64::default();
                g.set(*value);
                registry.register(*name, *help, g);
                continue;
            }
            let family = match families.iter().find(|(n, _)| n == name) {
                Some((_, f)) => f.clone(),
                None => {
                    let f = Family::<Labels, GaugeF64>::default();
                    registry.register(*name, *help, f.clone());
                    families.push((name, f.clone()));
                    f
                }
            };
            family.get_or_create(labels).set(*value);
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &registry);
        text
    }
}

pub const FINDING: &str = "pathdoc_finding_status";
const FINDING_HELP: &str =
    "Status of each finding of the latest result: 0 pass, 1 info, 2 inconclusive, 3 warn, 4 fail";

pub fn severity(status: Status) -> f64 {
    match status {
        Status::Pass => 0.0,
        Status::Info => 1.0,
        Status::Inconclusive => 2.0,
        Status::Warn => 3.0,
        Status::Fail => 4.0,
    }
}

/// `client-to-server`, `server-to-client` or `both`, as the JSON report spells directions.
pub fn kebab(d: pathdoc_core::Direction) -> String {
    match d {
        pathdoc_core::Direction::ClientToServer => "client-to-server",
        pathdoc_core::Direction::ServerToClient => "server-to-client",
        pathdoc_core::Direction::Both => "both",
    }
    .to_string()
}

/// The exporter's own metrics, served on `/metrics`.
pub struct SelfMetrics {
    registry: Registry,
    pub probes: Family<Labels, Counter>,
    pub refused: Family<Labels, Counter>,
    pub probe_seconds: Family<Labels, Histogram>,
    pub in_flight: Gauge,
    pub idle_runs: Family<Labels, Counter>,
    pub idle_running: Family<Labels, Gauge>,
}

impl Default for SelfMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("pathdoc_exporter");
        let probes = Family::<Labels, Counter>::default();
        registry.register(
            "probes",
            "Probes run on /probe, by module and result (success, failure, timeout, busy: the pathdoc server had no room)",
            probes.clone(),
        );
        let refused = Family::<Labels, Counter>::default();
        registry.register(
            "refused_requests",
            "Requests refused, by reason (unauthorized, bad-request, unknown-module, target-not-allowed, queue-full, busy, shutting-down)",
            refused.clone(),
        );
        let probe_seconds = Family::<Labels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0])
        });
        registry.register(
            "probe_duration_seconds",
            "How long probes took, by module",
            probe_seconds.clone(),
        );
        let in_flight = Gauge::default();
        registry.register("probes_in_flight", "Probes running now", in_flight.clone());
        let idle_runs = Family::<Labels, Counter>::default();
        registry.register(
            "idle_runs",
            "Finished idle monitor runs, by target, module and result (success, failure)",
            idle_runs.clone(),
        );
        let idle_running = Family::<Labels, Gauge>::default();
        registry.register(
            "idle_run_in_progress",
            "1 while an idle monitor run for the target is in progress",
            idle_running.clone(),
        );
        registry.register(
            "build",
            "pathdoc exporter build information",
            Info::new(vec![(
                "version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            )]),
        );
        SelfMetrics {
            registry,
            probes,
            refused,
            probe_seconds,
            in_flight,
            idle_runs,
            idle_running,
        }
    }
}

impl SelfMetrics {
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let _ = encode(&mut text, &self.registry);
        text
    }

    pub fn refuse(&self, reason: &str) {
        self.refused
            .get_or_create(&vec![("reason".to_string(), reason.to_string())])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathdoc_core::Direction;

    #[test]
    fn samples_encode_as_openmetrics_with_labels() {
        let mut s = Samples::default();
        s.set("probe_success", "Whether the probe succeeded", &[], 1.0);
        s.set(
            "pathdoc_path_mtu_bytes",
            "Path MTU",
            &[("direction", "server-to-client")],
            1420.0,
        );
        let text = s.encode();
        assert!(text.contains("probe_success 1.0\n"), "{text}");
        assert!(
            text.contains("pathdoc_path_mtu_bytes{direction=\"server-to-client\"} 1420.0\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn repeated_finding_ids_keep_the_worst_status() {
        let mut s = Samples::default();
        s.findings(&[
            Finding::new("throughput", "loss-limited", Status::Warn, "a")
                .direction(Direction::ClientToServer),
            Finding::new("throughput", "loss-limited", Status::Pass, "b")
                .direction(Direction::ClientToServer),
            Finding::new("throughput", "loss-limited", Status::Pass, "c")
                .direction(Direction::ServerToClient),
        ]);
        let text = s.encode();
        assert!(text.contains("pathdoc_finding_status{check=\"throughput\",id=\"loss-limited\",direction=\"client-to-server\"} 3.0"), "{text}");
        assert!(text.contains("pathdoc_finding_status{check=\"throughput\",id=\"loss-limited\",direction=\"server-to-client\"} 0.0"), "{text}");
    }
}
