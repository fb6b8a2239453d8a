//! The `pathdoc server` flags the SSH bootstrap (`--ssh`, `pathdoc ssh`) starts a temporary
//! server with: the auth token read from stdin (never on a command line `ps` shows), exit when
//! stdin — the SSH channel — closes, and a machine-readable ready line with the bound address
//! (the port is ephemeral). Kept apart from server.rs so that file stays about serving.

use std::io::BufRead;
use std::net::SocketAddr;

use anyhow::{bail, Context};

/// What the stdin flags produced: the token, and a receiver that fires on stdin EOF.
pub struct StdinControl {
    pub token: Option<String>,
    pub eof: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// Read the token line (with `token_from_stdin`) and watch stdin for EOF (with `exit_on_eof`),
/// on one buffered reader so no byte is lost between the two.
pub fn stdin_control(token_from_stdin: bool, exit_on_eof: bool) -> anyhow::Result<StdinControl> {
    let mut reader = std::io::BufReader::new(std::io::stdin());
    let token = if token_from_stdin {
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .context("reading the auth token from stdin")?;
        let token = line.trim().to_string();
        if token.is_empty() {
            bail!("--auth-token-stdin: stdin gave no token (expected one line)");
        }
        Some(token)
    } else {
        None
    };
    let eof = exit_on_eof.then(|| {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            // Anything after the token is ignored; only the end of stdin matters.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
            let _ = tx.send(());
        });
        rx
    });
    Ok(StdinControl { token, eof })
}

/// `pathdoc-server-ready ADDR` on stdout, flushed: what the bootstrap waits for.
pub fn announce(addr: SocketAddr) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}{addr}", pathdoc_ssh::bootstrap::READY_PREFIX);
    let _ = out.flush();
}

/// Resolves on the usual signals or, when watched, on stdin EOF.
pub async fn shutdown(
    signals: impl std::future::Future<Output = ()>,
    eof: Option<tokio::sync::oneshot::Receiver<()>>,
) {
    match eof {
        Some(rx) => {
            tokio::select! {
                _ = signals => {}
                _ = rx => tracing::info!("stdin closed (the SSH session ended): shutting down"),
            }
        }
        None => signals.await,
    }
}
