//! `pathdoc server`: run the far end of every check.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use pathdoc_server::{Limits, Server, ServerConfig, Service};

use crate::Global;

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// TCP and UDP address to listen on.
    #[arg(long, default_value_t = SocketAddr::from(([0, 0, 0, 0], pathdoc_proto::DEFAULT_PORT)))]
    listen: SocketAddr,
    /// Require this shared secret from clients (clients pass --auth-token or PATHDOC_AUTH_TOKEN).
    #[arg(long, env = "PATHDOC_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// Connections one client address may hold open at once.
    #[arg(long, default_value_t = Limits::default().connections_per_ip)]
    max_connections_per_ip: u32,
    /// Connections the server holds open in total.
    #[arg(long, default_value_t = Limits::default().connections_total)]
    max_connections: u32,
    /// Sessions (check runs) one client address may hold at once.
    #[arg(long, default_value_t = Limits::default().sessions_per_ip)]
    max_sessions_per_ip: u32,
    /// Longest a session may last, in seconds (the idle check needs 2 h 10 min at full scale).
    #[arg(long, default_value_t = Limits::default().session_max.as_secs())]
    max_session_secs: u64,
    /// Longest throughput test a client may ask for, in seconds.
    #[arg(long, default_value_t = Limits::default().max_test_duration.as_secs())]
    max_test_secs: u64,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
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
    pub fn log_format(&self) -> LogFormat {
        self.log_format
    }
}

/// The services this binary serves; each check crate contributes one.
fn services() -> Vec<Arc<dyn Service>> {
    vec![
        Arc::new(pathdoc_idle::IdleService::new()),
        pathdoc_mtu::MtuService::new(),
        Arc::new(pathdoc_speed::SpeedService::new()),
    ]
}

pub fn run(args: ServerArgs, _global: Global) -> anyhow::Result<i32> {
    let stdin = super::server_ssh::stdin_control(args.auth_token_stdin, args.exit_on_stdin_eof)?;
    let auth_token = args.auth_token.clone().or(stdin.token);
    if args.ssh_evidence && auth_token.is_none() {
        anyhow::bail!("--ssh-evidence needs an auth token (--auth-token or --auth-token-stdin)");
    }
    let limits = Limits {
        connections_per_ip: args.max_connections_per_ip,
        connections_total: args.max_connections,
        sessions_per_ip: args.max_sessions_per_ip,
        session_max: Duration::from_secs(args.max_session_secs),
        max_test_duration: Duration::from_secs(args.max_test_secs),
        ..Limits::default()
    };
    let config = ServerConfig {
        listen: args.listen,
        auth_token,
        limits,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        let fds = raise_fd_limit();
        if fds < u64::from(config.limits.connections_total) {
            tracing::warn!(
                open_file_limit = fds,
                "the open-file limit caps the server at about {fds} connections (raise it with `ulimit -n` or LimitNOFILE=)"
            );
        }
        let mut server = Server::new(config);
        for service in services() {
            server = server.with_service(service);
        }
        if args.ssh_evidence {
            server = server.with_service(Arc::new(pathdoc_ssh::EvidenceService::new()));
        }
        let bound = server.bind().await?;
        eprintln!(
            "pathdoc server listening on {} (TCP and UDP)",
            bound.local_addr()
        );
        if args.ready_line {
            super::server_ssh::announce(bound.local_addr());
        }
        let stop = super::server_ssh::shutdown(shutdown_signal(), stdin.eof);
        bound.run(stop, Duration::from_secs(5)).await;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(0)
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

/// A server holds one descriptor per probe connection: lift the soft limit to the hard one,
/// and as root (which may raise the hard limit) to 1 Mi descriptors.
/// Returns the soft limit in force afterwards.
fn raise_fd_limit() -> u64 {
    const WANTED: libc::rlim_t = 1 << 20;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        let raised = libc::rlimit {
            rlim_cur: WANTED.max(lim.rlim_max),
            rlim_max: WANTED.max(lim.rlim_max),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}
