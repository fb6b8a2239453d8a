//! `pathdoc exporter`: serve Prometheus scrapes (crates/pathdoc-exporter) until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use pathdoc_exporter::config::Check;
use pathdoc_exporter::{Config, ConfigError};
use tokio_util::sync::CancellationToken;

use crate::error::CliError;
use crate::Global;

pub const EXAMPLES: &str = "Examples:
  pathdoc exporter --config /etc/pathdoc/exporter.toml                # serve on 127.0.0.1:9724
  pathdoc exporter -c exporter.toml --check-config                   # validate, show what it allows
  curl -H 'Authorization: Bearer …' 'http://127.0.0.1:9724/probe?target=server.example.net&module=mtu'

Only the targets and modules in the config can be probed. Scrape config, alert rules and a
systemd unit: dist/ and docs/exporter.md.";

#[derive(Args, Debug)]
pub struct ExporterArgs {
    /// TOML config: modules, allowed targets, auth tokens and limits (docs/exporter.md).
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        default_value = "/etc/pathdoc/exporter.toml"
    )]
    pub config: PathBuf,
    /// Listen address, instead of the config's `listen`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Only check the config: print what it allows and exit (0 valid, 2 invalid).
    #[arg(long)]
    pub check_config: bool,
}

/// Where the example config lives, for the error when there is none.
const EXAMPLE_CONFIG: &str = "dist/pathdoc-exporter.toml";

pub fn run(args: ExporterArgs, global: Global) -> anyhow::Result<i32> {
    let mut config = load(&args.config)?;
    if let Some(l) = args.listen {
        config.listen = l;
    }
    let idle_monitors: usize = config
        .targets
        .iter()
        .map(|t| {
            t.modules
                .iter()
                .filter(|m| matches!(config.modules.get(*m), Some(Check::Idle { .. })))
                .count()
        })
        .sum();
    if args.check_config {
        print_summary(&config, idle_monitors, global);
        return Ok(0);
    }
    if config.auth_tokens.is_empty() && !config.listen.ip().is_loopback() {
        eprintln!(
            "pathdoc exporter: warning: listening on {} without auth_tokens: anyone who can reach it can make it probe the configured targets",
            config.listen
        );
    }
    // Every HTTP connection, probe socket and idle-monitor connection is a descriptor.
    match pathdoc_sys::fd_limit::raise(pathdoc_sys::fd_limit::RaisePolicy::ToHard) {
        Ok(fds) => {
            if let Some(warning) = config.fit_to_descriptors(fds.after) {
                eprintln!("pathdoc exporter: warning: {warning}");
            }
        }
        Err(e) => eprintln!("pathdoc exporter: warning: reading the open-files limit: {e}"),
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let shutdown = CancellationToken::new();
        spawn_signal_handler(shutdown.clone())?;
        eprintln!(
            "pathdoc exporter listening on http://{} ({} modules, {} targets, {} idle monitors)",
            listener.local_addr().unwrap_or(config.listen),
            config.modules.len(),
            config.targets.len(),
            idle_monitors
        );
        pathdoc_exporter::serve(config, listener, shutdown).await?;
        anyhow::Ok(0)
    });
    // Blocking helpers of a cancelled check (DNS, socket threads) must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    eprintln!("pathdoc exporter: stopped");
    result
}

/// The config, or an error that says what is missing and where an example is.
fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    let shown = path.display().to_string();
    match Config::load(&path.to_string_lossy(), &crate::checks::exporter_modules()) {
        Ok(c) => Ok(c),
        Err(ConfigError::Read { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(CliError::usage(format!("no exporter config at {shown}"))
                .hint(format!(
                    "the exporter only probes the targets a config lists: start from {EXAMPLE_CONFIG} in pathdoc's source (docs/exporter.md), e.g. `install -m 600 {EXAMPLE_CONFIG} /etc/pathdoc/exporter.toml`, then pass --config FILE if it lives elsewhere"
                ))
                .into())
        }
        Err(e @ ConfigError::Read { .. }) => {
            Err(CliError::usage(crate::error::without_os_error(&e.to_string())).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// SIGINT or SIGTERM stops the exporter cleanly (idle monitors release their sessions).
fn spawn_signal_handler(shutdown: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("pathdoc exporter: stopping (signal)");
        shutdown.cancel();
    });
    Ok(())
}

fn print_summary(config: &Config, idle_monitors: usize, global: Global) {
    if global.json {
        let doc = serde_json::json!({
            "schema": "pathdoc.exporter/1",
            "listen": config.listen.to_string(),
            "auth": !config.auth_tokens.is_empty(),
            "max_concurrent_probes": config.max_concurrent_probes,
            "probe_timeout_s": config.probe_timeout.as_secs_f64(),
            "max_queued_probes_per_target": config.max_queued_probes_per_target,
            "max_connections": config.max_connections,
            "http_idle_timeout_s": config.http_idle_timeout.as_secs_f64(),
            "modules": config.modules.iter().map(|(n, c)| (n.clone(), c.name())).collect::<std::collections::BTreeMap<_, _>>(),
            "targets": config.targets.iter().map(|t| serde_json::json!({"address": t.address, "modules": t.modules})).collect::<Vec<_>>(),
            "idle_monitors": idle_monitors,
        });
        println!("{doc:#}");
        return;
    }
    println!(
        "config OK: listen {}, auth {}",
        config.listen,
        if config.auth_tokens.is_empty() {
            "off"
        } else {
            "on"
        }
    );
    for (name, check) in &config.modules {
        println!("  module {name}: {} check", check.name());
    }
    for t in &config.targets {
        println!("  target {}: {}", t.address, t.modules.join(", "));
    }
    println!(
        "  {idle_monitors} idle monitor(s), at most {} probes at once ({} per target and module waiting or running), probe timeout {:?}",
        config.max_concurrent_probes, config.max_queued_probes_per_target, config.probe_timeout
    );
    println!(
        "  at most {} HTTP connections, closed after {:?} without a request",
        config.max_connections, config.http_idle_timeout
    );
}
