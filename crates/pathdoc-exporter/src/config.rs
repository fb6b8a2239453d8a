//! The exporter's TOML configuration: where it listens, who may scrape it, which modules exist
//! (each runs one check with its settings, like blackbox_exporter's modules) and which targets
//! each module may probe. Nothing outside this file can be probed: the exporter is never an open
//! proxy.
//!
//! ```toml
//! listen = "127.0.0.1:9724"
//! auth_tokens = ["change-me"]        # Authorization: Bearer … on /probe and /metrics
//! max_concurrent_probes = 2
//! probe_timeout = "60s"
//!
//! [modules.mtu]
//! check = "mtu"
//! [modules.throughput]
//! check = "throughput"
//! time = "5s"
//! [modules.idle]
//! check = "idle"
//! idle_max = "2h10m"
//!
//! [[targets]]
//! address = "server.example.net:7224"
//! modules = ["mtu", "throughput", "idle"]
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use pathdoc_core::CheckName;
use serde::Deserialize;

use crate::module::ModuleKind;

/// Longest throughput test a module may run per scrape: the scrape waits for both directions,
/// and Prometheus' scrape timeouts are seconds to a minute (the CLI allows
/// `pathdoc_speed::spec::MAX_TEST_TIME`, for a person waiting on purpose).
pub const MAX_SCRAPE_THROUGHPUT_TIME: Duration = Duration::from_secs(60);

/// The pathdoc server's default port, used when a target names none.
pub const DEFAULT_SERVER_PORT: u16 = 7224;
/// Default listen address: loopback, port 9724 (pathdoc's 7224 + 2500, like the 9xxx exporters).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9724";
/// Hard caps that a config cannot raise: each idle monitor holds up to `max_probes` connections
/// open for hours on the server it probes.
pub const MAX_IDLE_TARGETS: usize = 64;
pub const MAX_TARGETS: usize = 1024;
pub const MAX_CONCURRENT_PROBES: usize = 16;
/// Probes of one (target, module) that may wait or run at once; more are refused at once (429)
/// instead of holding a connection and a descriptor each until their deadline.
pub const MAX_QUEUED_PROBES_PER_TARGET: usize = 64;
/// HTTP connections the exporter keeps open at most (each is a descriptor).
pub const MAX_CONNECTIONS: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The OS error is part of the message, not a `source`: printing the error with its chain
    /// must not say it twice.
    #[error("reading {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    listen: Option<String>,
    #[serde(default)]
    auth_tokens: Vec<String>,
    #[serde(default)]
    max_concurrent_probes: Option<usize>,
    #[serde(default)]
    probe_timeout: Option<String>,
    #[serde(default)]
    max_idle_targets: Option<usize>,
    #[serde(default)]
    max_queued_probes_per_target: Option<usize>,
    #[serde(default)]
    max_connections: Option<usize>,
    #[serde(default)]
    http_idle_timeout: Option<String>,
    #[serde(default)]
    modules: BTreeMap<String, crate::module::RawModule>,
    #[serde(default)]
    targets: Vec<RawTarget>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    address: String,
    modules: Vec<String>,
    /// The pathdoc server's auth token, when it requires one.
    #[serde(default)]
    server_token: Option<String>,
}

/// What one module runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Mtu {
        min_size: u16,
        max_size: u16,
        attempts: u8,
        wait: Duration,
        max_ttl: u8,
        bulk: Duration,
    },
    Throughput {
        time: Duration,
        streams: u32,
        congestion_control: Option<String>,
    },
    Idle {
        idle_max: Duration,
        resolution: Duration,
        max_probes: usize,
        /// Pause between the end of one idle run and the start of the next.
        interval: Duration,
        udp: bool,
        culprit: bool,
    },
}

impl Check {
    pub fn name(&self) -> CheckName {
        match self {
            Check::Mtu { .. } => CheckName::Mtu,
            Check::Throughput { .. } => CheckName::Throughput,
            Check::Idle { .. } => CheckName::Idle,
        }
    }
}

/// A target a module may probe, normalised as `host:port` (host lower-cased).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub address: String,
    pub modules: Vec<String>,
    pub server_token: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub auth_tokens: Vec<String>,
    pub max_concurrent_probes: usize,
    pub probe_timeout: Duration,
    /// Probes of one (target, module) waiting or running at once; beyond it: 429.
    pub max_queued_probes_per_target: usize,
    /// Open HTTP connections; at the cap the oldest idle one is closed for a new one.
    pub max_connections: usize,
    /// A connection that has not sent a complete request head within this time (after it opened
    /// or after its previous answer) is closed.
    pub http_idle_timeout: Duration,
    pub modules: BTreeMap<String, Check>,
    pub targets: Vec<Target>,
}

impl Config {
    /// Read the config at `path`; its modules may run the checks of `kinds`.
    pub fn load(path: &str, kinds: &[&ModuleKind]) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_string(),
            error,
        })?;
        Config::parse(&text, kinds).map_err(|message| ConfigError::Invalid {
            path: path.to_string(),
            message,
        })
    }

    /// Parse and validate, with modules of the checks of `kinds` (the binary's check registry
    /// passes the exported ones); the message names the field at fault.
    pub fn parse(text: &str, kinds: &[&ModuleKind]) -> Result<Config, String> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        let listen = raw
            .listen
            .as_deref()
            .unwrap_or(DEFAULT_LISTEN)
            .parse()
            .map_err(|e| format!("listen: {e} (write e.g. \"127.0.0.1:9724\")"))?;
        if raw.auth_tokens.iter().any(|t| t.trim().len() < 8) {
            return Err("auth_tokens: each token needs at least 8 characters".into());
        }
        let max_concurrent_probes = raw.max_concurrent_probes.unwrap_or(2);
        if !(1..=MAX_CONCURRENT_PROBES).contains(&max_concurrent_probes) {
            return Err(format!(
                "max_concurrent_probes: must be 1..={MAX_CONCURRENT_PROBES}"
            ));
        }
        let probe_timeout = duration("probe_timeout", raw.probe_timeout.as_deref(), 60)?;
        let max_queued_probes_per_target = raw.max_queued_probes_per_target.unwrap_or(4);
        if !(1..=MAX_QUEUED_PROBES_PER_TARGET).contains(&max_queued_probes_per_target) {
            return Err(format!(
                "max_queued_probes_per_target: must be 1..={MAX_QUEUED_PROBES_PER_TARGET}"
            ));
        }
        let max_connections = raw.max_connections.unwrap_or(256);
        if !(8..=MAX_CONNECTIONS).contains(&max_connections) {
            return Err(format!("max_connections: must be 8..={MAX_CONNECTIONS}"));
        }
        let http_idle_timeout =
            duration("http_idle_timeout", raw.http_idle_timeout.as_deref(), 15)?;
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&http_idle_timeout) {
            return Err("http_idle_timeout: must be 1 s to 1 h".into());
        }
        let mut modules = BTreeMap::new();
        for (name, m) in raw.modules {
            let check = crate::module::read(&name, &m, kinds)?;
            modules.insert(name, check);
        }
        if raw.targets.len() > MAX_TARGETS {
            return Err(format!("targets: at most {MAX_TARGETS}"));
        }
        let mut targets: Vec<Target> = Vec::new();
        for t in raw.targets {
            let address = normalize_target(&t.address)
                .map_err(|e| format!("targets: address {:?}: {e}", t.address))?;
            for m in &t.modules {
                if !modules.contains_key(m) {
                    return Err(format!(
                        "targets: {address} lists module {m:?}, which is not defined under [modules]"
                    ));
                }
            }
            if targets.iter().any(|x| x.address == address) {
                return Err(format!("targets: {address} is listed twice"));
            }
            targets.push(Target {
                address,
                modules: t.modules,
                server_token: t.server_token,
            });
        }
        let idle_targets = targets
            .iter()
            .filter(|t| {
                t.modules
                    .iter()
                    .any(|m| matches!(modules.get(m), Some(Check::Idle { .. })))
            })
            .count();
        let max_idle = raw.max_idle_targets.unwrap_or(16).min(MAX_IDLE_TARGETS);
        if idle_targets > max_idle {
            return Err(format!(
                "{idle_targets} targets have an idle module, more than max_idle_targets = {max_idle} (at most {MAX_IDLE_TARGETS}): each idle monitor keeps up to its max_probes connections open on the server"
            ));
        }
        Ok(Config {
            listen,
            auth_tokens: raw.auth_tokens,
            max_concurrent_probes,
            probe_timeout,
            max_queued_probes_per_target,
            max_connections,
            http_idle_timeout,
            modules,
            targets,
        })
    }

    /// Descriptors the probes and idle monitors may need besides HTTP connections: each idle
    /// monitor up to its `max_probes` connections, each running probe its control and data
    /// connections, plus the listener, logs and runtime.
    pub fn descriptors_for_checks(&self) -> u64 {
        let idle: usize = self
            .targets
            .iter()
            .flat_map(|t| t.modules.iter().filter_map(|m| self.modules.get(m)))
            .map(|c| match c {
                Check::Idle { max_probes, .. } => max_probes + 8,
                _ => 0,
            })
            .sum();
        let per_probe = self
            .modules
            .values()
            .map(|c| match c {
                Check::Throughput { streams, .. } => 2 * *streams as usize + 8,
                _ => 16,
            })
            .max()
            .unwrap_or(16);
        (64 + idle + self.max_concurrent_probes * per_probe) as u64
    }

    /// Shrink `max_connections` to what a soft descriptor limit of `fds` leaves after the checks'
    /// share; the warning to print when it had to.
    pub fn fit_to_descriptors(&mut self, fds: u64) -> Option<String> {
        let room = fds.saturating_sub(self.descriptors_for_checks());
        if room >= self.max_connections as u64 {
            return None;
        }
        let was = self.max_connections;
        self.max_connections = (room as usize).max(8);
        Some(format!(
            "the open-files limit is {fds} and the checks may need {}: max_connections lowered from {was} to {} (raise LimitNOFILE / ulimit -n)",
            self.descriptors_for_checks(),
            self.max_connections
        ))
    }

    /// The target entry that allows `module` on `address`, if any.
    pub fn allowed(&self, address: &str, module: &str) -> Option<&Target> {
        let address = normalize_target(address).ok()?;
        self.targets
            .iter()
            .find(|t| t.address == address && t.modules.iter().any(|m| m == module))
    }
}

fn duration(field: &str, text: Option<&str>, default_secs: u64) -> Result<Duration, String> {
    match text {
        None => Ok(Duration::from_secs(default_secs)),
        Some(t) => pathdoc_core::units::parse_duration(t).map_err(|e| format!("{field}: {e}")),
    }
}

pub(crate) fn opt_duration(field: &str, text: Option<&str>) -> Result<Option<Duration>, String> {
    text.map(|t| pathdoc_core::units::parse_duration(t).map_err(|e| format!("{field}: {e}")))
        .transpose()
}

/// `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 address → `host:port` with the host
/// lower-cased and the default port filled in, so `Server.example.net` and
/// `server.example.net:7224` are the same target.
pub fn normalize_target(address: &str) -> Result<String, String> {
    let a = address.trim();
    if a.is_empty() || a.contains(['/', '?', '#', '@', ' ']) {
        return Err("expected HOST or HOST:PORT".into());
    }
    if let Ok(sa) = a.parse::<SocketAddr>() {
        return Ok(sa.to_string());
    }
    if let Ok(ip) = a.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, DEFAULT_SERVER_PORT).to_string());
    }
    let (host, port) = match a.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("bad port {p:?}"))?,
        ),
        None => (a, DEFAULT_SERVER_PORT),
    };
    let valid = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if !valid {
        return Err(format!("{host:?} is not a host name"));
    }
    Ok(format!("{}:{port}", host.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::{IDLE, MTU, THROUGHPUT};

    /// Every kind this crate has (the binary passes its registry's).
    const KINDS: &[&ModuleKind] = &[&MTU, &THROUGHPUT, &IDLE];

    const GOOD: &str = r#"
        auth_tokens = ["0123456789abcdef"]
        [modules.mtu]
        check = "mtu"
        [modules.tp]
        check = "throughput"
        time = "2s"
        [modules.idle]
        check = "idle"
        idle_max = "30s"
        resolution = "1s"
        [[targets]]
        address = "Server.Example.net"
        modules = ["mtu", "tp"]
        [[targets]]
        address = "203.0.113.10:7300"
        modules = ["idle"]
    "#;

    #[test]
    fn targets_are_allowed_only_for_their_modules() {
        let c = Config::parse(GOOD, KINDS).unwrap();
        assert!(c.allowed("server.example.net:7224", "mtu").is_some());
        assert!(c.allowed("SERVER.example.net", "tp").is_some());
        assert!(c.allowed("server.example.net", "idle").is_none());
        assert!(c.allowed("203.0.113.10:7300", "idle").is_some());
        assert!(c.allowed("203.0.113.10", "idle").is_none(), "other port");
        assert!(c.allowed("198.51.100.1", "mtu").is_none());
        assert!(c.allowed("server.example.net/evil", "mtu").is_none());
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert!(
            matches!(c.modules["tp"], Check::Throughput { time, .. } if time == Duration::from_secs(2))
        );
    }

    #[test]
    fn mistakes_name_the_field() {
        for (text, says) in [
            ("[modules.x]\ncheck = \"dns\"", "modules.x.check"),
            (
                "[modules.x]\ncheck = \"mtu\"\ntime = \"5s\"",
                "modules.x.time",
            ),
            (
                "[modules.x]\ncheck = \"throughput\"\ntime = \"5 parsecs\"",
                "modules.x.time",
            ),
            ("[[targets]]\naddress = \"a\"\nmodules = [\"nope\"]", "nope"),
            ("listen = \"everywhere\"", "listen"),
            ("auth_tokens = [\"short\"]", "auth_tokens"),
            ("colour = \"blue\"", "colour"),
            (
                "[[targets]]\naddress = \"a:99999\"\nmodules = []",
                "bad port",
            ),
            ("max_concurrent_probes = 0", "max_concurrent_probes"),
            (
                "max_queued_probes_per_target = 0",
                "max_queued_probes_per_target",
            ),
            ("max_connections = 100000", "max_connections"),
            ("http_idle_timeout = \"0s\"", "http_idle_timeout"),
        ] {
            let e = Config::parse(text, KINDS).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_low_descriptor_limit_shrinks_the_connection_cap() {
        let mut c = Config::parse(GOOD, KINDS).unwrap();
        let checks = c.descriptors_for_checks();
        // One idle target with 240 probes, two probes of at most 16 descriptors, 64 spare.
        assert_eq!(checks, 64 + 248 + 2 * 16);
        assert_eq!(c.fit_to_descriptors(100_000), None);
        assert_eq!(c.max_connections, 256);
        let warning = c.fit_to_descriptors(checks + 100).unwrap();
        assert_eq!(c.max_connections, 100);
        assert!(
            warning.contains("max_connections lowered from 256 to 100"),
            "{warning}"
        );
        c.fit_to_descriptors(10);
        assert_eq!(c.max_connections, 8, "never below the minimum");
    }

    #[test]
    fn idle_monitors_are_bounded() {
        let mut text = String::from("max_idle_targets = 2\n[modules.idle]\ncheck = \"idle\"\n");
        for i in 0..3 {
            text.push_str(&format!(
                "[[targets]]\naddress = \"10.0.0.{i}\"\nmodules = [\"idle\"]\n"
            ));
        }
        assert!(Config::parse(&text, KINDS)
            .unwrap_err()
            .contains("max_idle_targets"));
    }
}
