//! `pathdoc server`: run the far end of every check.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use pathdoc_core::units::{format_duration, parse_duration};
use pathdoc_server::{Limits, Server, ServerConfig};

use crate::Global;

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Address to listen on (TCP and UDP): PORT, HOST, HOST:PORT, IP, IP:PORT or [IPv6]:PORT
    /// [default: 0.0.0.0:7224]. A host name listens on its first address.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Port to listen on, when --listen does not name one [default: 7224].
    #[arg(long, short = 'p')]
    port: Option<u16>,
    /// Require this shared secret from clients (clients pass --auth-token or PATHDOC_AUTH_TOKEN).
    #[arg(long, env = "PATHDOC_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// Serve one client's checks, then exit (iperf3's -1); other clients are refused meanwhile.
    #[arg(long, short = '1', visible_alias = "one-off")]
    once: bool,
    /// Connections one client may hold open at once (a client is an IPv4 address or an IPv6
    /// /64, see --ipv4-prefix/--ipv6-prefix).
    #[arg(long, default_value_t = Limits::default().connections_per_ip, value_name = "N")]
    max_connections_per_ip: u32,
    /// Connections the server holds open in total.
    #[arg(long, default_value_t = Limits::default().connections_total, value_name = "N")]
    max_connections: u32,
    /// Live sessions (check runs with an open connection) one client may hold at once.
    #[arg(long, default_value_t = Limits::default().sessions_per_ip, value_name = "N")]
    max_sessions_per_ip: u32,
    /// Sessions the server keeps in total, live or lingering (oldest lingering ones make room).
    #[arg(long, default_value_t = Limits::default().sessions_total, value_name = "N")]
    max_sessions: u32,
    /// Longest a session may last (the idle check needs 2h10m at full scale).
    #[arg(long, default_value = "3h", value_parser = parse_duration, value_name = "DURATION")]
    max_session: Duration,
    /// Old spelling of --max-session, in seconds.
    #[arg(long, hide = true, conflicts_with = "max_session")]
    max_session_secs: Option<u64>,
    /// Longest throughput test a client may ask for.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    max_test: Duration,
    /// Old spelling of --max-test, in seconds.
    #[arg(long, hide = true, conflicts_with = "max_test")]
    max_test_secs: Option<u64>,
    /// How long a session's results are kept for a resume after its last connection closed.
    #[arg(long, default_value = "15m", value_parser = parse_duration, value_name = "DURATION")]
    session_linger: Duration,
    /// Throughput-test streams (one thread each) one client may run at once.
    #[arg(long, default_value_t = Limits::default().streams_per_ip, value_name = "N")]
    max_streams_per_ip: u32,
    /// Throughput-test streams the server runs at once in total.
    #[arg(long, default_value_t = Limits::default().streams_total, value_name = "N")]
    max_streams: u32,
    /// MTU-check bulk downloads one client may run at once.
    #[arg(long, default_value_t = Limits::default().bulk_per_ip, value_name = "N")]
    max_bulk_per_ip: u32,
    /// MTU-check bulk downloads the server runs at once in total.
    #[arg(long, default_value_t = Limits::default().bulk_total, value_name = "N")]
    max_bulk: u32,
    /// Idle-check probes (connections and UDP bindings, kept with their session's results) one
    /// client's sessions may hold.
    #[arg(long, default_value_t = Limits::default().probes_per_ip, value_name = "N")]
    max_idle_probes_per_ip: u32,
    /// Idle-check probes all sessions may hold in total.
    #[arg(long, default_value_t = Limits::default().probes_total, value_name = "N")]
    max_idle_probes: u32,
    /// Connections one client may hold in their handshake (before a valid Hello and token).
    #[arg(long, default_value_t = Limits::default().handshakes_per_ip, value_name = "N")]
    max_handshakes_per_ip: u32,
    /// Connections in their handshake the server holds in total: their own small pool, so
    /// silent or unauthenticated connections cannot take the slots of authenticated clients.
    #[arg(long, default_value_t = Limits::default().handshakes_total, value_name = "N")]
    max_handshakes: u32,
    /// How long a new connection may take to send its preamble and Hello.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    handshake_timeout: Duration,
    /// How often to log the server's counters (connections, sessions, refusals, budgets,
    /// descriptors); 0s: never.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    stats_interval: Duration,
    /// IPv4 addresses sharing this many leading bits count as one client (24: a /24).
    #[arg(long, default_value_t = Limits::default().ipv4_prefix, value_name = "BITS")]
    ipv4_prefix: u8,
    /// IPv6 addresses sharing this many leading bits count as one client.
    #[arg(long, default_value_t = Limits::default().ipv6_prefix, value_name = "BITS")]
    ipv6_prefix: u8,
    /// Log format on stderr: one human line per event, or one JSON object per line
    /// [default: text; --json means json].
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// Read the auth token from the first line of stdin (for `--ssh`: not visible in `ps`).
    #[arg(long, conflicts_with = "auth_token", hide = true)]
    auth_token_stdin: bool,
    /// Exit when stdin closes (for `--ssh`: the SSH session ended).
    #[arg(long, hide = true)]
    exit_on_stdin_eof: bool,
    /// Print `pathdoc-server-ready ADDR` on stdout once listening (for `--ssh`: the port may be 0).
    #[arg(long, hide = true)]
    ready_line: bool,
    /// Serve TCP_INFO and CPU of this user's sshd sessions to the token holder (`pathdoc ssh`).
    #[arg(long, hide = true)]
    ssh_evidence: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl ServerArgs {
    /// The log format in force: `--log-format`, or JSON under the global `--json`.
    pub fn log_format(&self, json: bool) -> LogFormat {
        match self.log_format {
            Some(f) => f,
            None if json => LogFormat::Json,
            None => LogFormat::Text,
        }
    }

    fn limits(&self) -> Limits {
        Limits {
            connections_per_ip: self.max_connections_per_ip,
            connections_total: self.max_connections,
            sessions_per_ip: self.max_sessions_per_ip,
            sessions_total: self.max_sessions,
            session_max: self
                .max_session_secs
                .map_or(self.max_session, Duration::from_secs),
            session_linger: self.session_linger,
            max_test_duration: self
                .max_test_secs
                .map_or(self.max_test, Duration::from_secs),
            ipv4_prefix: self.ipv4_prefix,
            ipv6_prefix: self.ipv6_prefix,
            streams_per_ip: self.max_streams_per_ip,
            streams_total: self.max_streams,
            bulk_per_ip: self.max_bulk_per_ip,
            bulk_total: self.max_bulk,
            probes_per_ip: self.max_idle_probes_per_ip,
            probes_total: self.max_idle_probes,
            handshakes_per_ip: self.max_handshakes_per_ip,
            handshakes_total: self.max_handshakes,
            handshake_timeout: self.handshake_timeout,
            ..Limits::default()
        }
    }
}

/// Threads of the runtime's blocking pool (the throughput service joins its stream threads
/// there; the server does no other blocking work on it).
const MAX_BLOCKING_THREADS: usize = 16;

/// Connections of the largest single check (the idle check's default 240 probes, its control
/// connection and the end message), for the "limits too small" warning.
const CONNECTIONS_PER_FULL_CHECK: u32 = 242;

pub fn run(args: ServerArgs, global: Global) -> anyhow::Result<i32> {
    let format = args.log_format(global.json);
    match start(args, global) {
        Ok(code) => Ok(code),
        // Under JSON logs every line on stderr is JSON, the last words included.
        Err(e) if format == LogFormat::Json => {
            tracing::error!(error = %format!("{e:#}"), "pathdoc server cannot run");
            // `--json` also promises the error document on stdout, as every command gives it.
            if global.json {
                let err = crate::error::CliError::from_anyhow(&e);
                crate::output::print_error(&err, "server", global);
            }
            Ok(2)
        }
        Err(e) => Err(e),
    }
}

fn start(args: ServerArgs, global: Global) -> anyhow::Result<i32> {
    let stdin = super::server_ssh::stdin_control(args.auth_token_stdin, args.exit_on_stdin_eof)?;
    let auth_token = args.auth_token.clone().or(stdin.token);
    if args.ssh_evidence && auth_token.is_none() {
        bail!("--ssh-evidence needs an auth token (--auth-token or --auth-token-stdin)");
    }
    if global.json && args.log_format == Some(LogFormat::Text) {
        bail!("--json asks for JSON logs and --log-format text for text logs; give one of them");
    }
    let limits = args.limits();
    limits
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid limits: {e}"))?;
    let listen = resolve_listen(args.listen.as_deref(), args.port)?;
    let limits = fit_limits_to_descriptors(limits, raise_fd_limit());
    let config = ServerConfig {
        listen,
        auth_token,
        limits,
        once: args.once,
        stats_interval: (!args.stats_interval.is_zero()).then_some(args.stats_interval),
    };
    warn_about_small_limits(&config.limits);
    // Threads are budgeted (docs/server.md): the workers, at most MAX_BLOCKING_THREADS for
    // blocking joins, one per throughput stream (--max-streams) and the idle parking thread.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let mut server = Server::new(config);
        // Each registered check brings its far end (crate::checks); the SSH evidence service
        // only with --ssh-evidence.
        for service in crate::checks::services(args.ssh_evidence) {
            server = server.with_service(service);
        }
        let bound = server.bind().await?;
        if args.ready_line {
            super::server_ssh::announce(bound.local_addr());
        }
        let stop = super::server_ssh::shutdown(shutdown_signal(), stdin.eof);
        bound.run(stop, Duration::from_secs(5)).await;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(0)
}

/// Limits that are valid but too small for a full check get a warning at startup.
fn warn_about_small_limits(limits: &Limits) {
    if limits.connections_per_ip < CONNECTIONS_PER_FULL_CHECK {
        tracing::warn!(
            limit = limits.connections_per_ip,
            "--max-connections-per-ip is below the {CONNECTIONS_PER_FULL_CHECK} connections of a default idle check; such checks will be refused"
        );
    }
    if limits.session_max < Duration::from_secs(7800) {
        tracing::warn!(
            limit = %format_duration(limits.session_max),
            "--max-session is shorter than a full idle check (2 h 10 min); long idle checks will be cut short"
        );
    }
}

/// Turn `--listen` and `--port` into one socket address: `PORT`, `HOST`, `HOST:PORT`, `IP`,
/// `IP:PORT`, `[IPv6]` or `[IPv6]:PORT`; a host name is resolved and its first address used.
pub fn resolve_listen(listen: Option<&str>, port: Option<u16>) -> anyhow::Result<SocketAddr> {
    let default_port = port.unwrap_or(pathdoc_proto::DEFAULT_PORT);
    let any = IpAddr::from([0, 0, 0, 0]);
    let Some(text) = listen.map(str::trim) else {
        return Ok(SocketAddr::new(any, default_port));
    };
    let with_port = |addr: SocketAddr| -> anyhow::Result<SocketAddr> {
        match port {
            Some(p) if p != addr.port() => bail!(
                "--listen {text} names port {} and --port says {p}; give the port once",
                addr.port()
            ),
            _ => Ok(addr),
        }
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let p: u16 = text
            .parse()
            .map_err(|_| anyhow::anyhow!("--listen {text}: a port is 0..=65535"))?;
        return with_port(SocketAddr::new(any, p));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return with_port(addr);
    }
    let bare = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    let (host, named_port) = match text.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => {
            let p: u16 = p
                .parse()
                .map_err(|_| anyhow::anyhow!("--listen {text}: {p:?} is not a port (0..=65535)"))?;
            (h, Some(p))
        }
        _ => (text, None),
    };
    if host.is_empty() {
        bail!(
            "--listen {text}: no host; write e.g. 7224, localhost:7224, 0.0.0.0:7224 or [::]:7224"
        );
    }
    let wanted = named_port.unwrap_or(default_port);
    let resolved = (host, wanted)
        .to_socket_addrs()
        .with_context(|| format!("--listen {text}: cannot resolve {host:?}"))?
        .next()
        .with_context(|| format!("--listen {text}: {host:?} has no address"))?;
    with_port(resolved)
}

/// Resolves on SIGINT or SIGTERM (systemd stop).
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Caps the server cannot honour with the descriptors it holds are shrunk to fit, and the log
/// says so (a server that kept them would fail checks with "Too many open files").
fn fit_limits_to_descriptors(limits: Limits, fds: Option<(u64, u64)>) -> Limits {
    let Some((before, fds)) = fds else {
        tracing::warn!("cannot read the open-file limit; caps are not checked against it");
        return limits;
    };
    let Some(fitted) = limits.fit_to_descriptors(fds) else {
        tracing::info!(
            open_file_limit = fds,
            raised_from = before,
            needed = limits.descriptors_needed(),
            "the open-file limit {fds} holds every cap"
        );
        return limits;
    };
    tracing::warn!(
        open_file_limit = fds,
        raised_from = before,
        needed = limits.descriptors_needed(),
        max_connections = fitted.connections_total,
        max_connections_per_ip = fitted.connections_per_ip,
        max_sessions = fitted.sessions_total,
        max_sessions_per_ip = fitted.sessions_per_ip,
        max_handshakes = fitted.handshakes_total,
        "the open-file limit is {fds} (soft limit raised from {before} to the hard one), below the {} descriptors the caps need: \
         serving with --max-connections {} (asked {}) and --max-sessions {} (asked {}); raise the hard limit (`ulimit -Hn`, LimitNOFILE=) to serve more",
        limits.descriptors_needed(),
        fitted.connections_total,
        limits.connections_total,
        fitted.sessions_total,
        limits.sessions_total,
    );
    fitted
}

/// A server holds one descriptor per probe connection: lift the soft limit to the hard one,
/// and as root (which may raise the hard limit) to 1 Mi descriptors.
/// Returns the soft limit before and the one in force afterwards.
fn raise_fd_limit() -> Option<(u64, u64)> {
    use pathdoc_sys::fd_limit::{raise, RaisePolicy};
    let raised = raise(RaisePolicy::AtLeast(1 << 20)).ok()?;
    Some((raised.before, raised.after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_accepts_what_users_write() {
        let r = |l: Option<&str>, p: Option<u16>| resolve_listen(l, p).map(|a| a.to_string());
        assert_eq!(r(None, None).unwrap(), "0.0.0.0:7224");
        assert_eq!(r(None, Some(9000)).unwrap(), "0.0.0.0:9000");
        assert_eq!(r(Some("7224"), None).unwrap(), "0.0.0.0:7224");
        assert_eq!(r(Some("127.0.0.1:22001"), None).unwrap(), "127.0.0.1:22001");
        assert_eq!(
            r(Some("127.0.0.1"), Some(22001)).unwrap(),
            "127.0.0.1:22001"
        );
        assert_eq!(r(Some("[::1]:22001"), None).unwrap(), "[::1]:22001");
        assert_eq!(r(Some("[::]"), None).unwrap(), "[::]:7224");
        assert_eq!(r(Some("::1"), Some(22002)).unwrap(), "[::1]:22002");
        let local = r(Some("localhost:22003"), None).unwrap();
        assert!(
            local.ends_with(":22003") && (local.starts_with("127.") || local.starts_with("[::1]")),
            "{local}"
        );
        assert!(r(Some("localhost"), Some(22004))
            .unwrap()
            .ends_with(":22004"));
        // Contradictions and nonsense are errors, not guesses.
        assert!(r(Some("127.0.0.1:1"), Some(2)).is_err());
        assert!(r(Some("99999"), None).is_err());
        assert!(r(Some("localhost:http"), None).is_err());
        assert!(r(Some(":7224"), None).is_err());
        assert!(r(Some("no-such-host.invalid"), None).is_err());
    }
}
