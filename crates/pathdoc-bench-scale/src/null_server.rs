//! A reference server for the memory breakdown: the real `pathdoc_server` framework with a
//! service that only holds each connection open (no per-check state, no extra tasks). The
//! difference between this server and `pathdoc server` per connection is the idle service's own
//! cost; what this one costs is the framework's (connection task, permit, tokio I/O
//! registration).
//!
//! [`run_bare`] goes one step further down: the pathdoc handshake in a plain tokio task per
//! connection, no framework at all — the floor of task-per-connection on tokio.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pathdoc_proto::{CheckKind, FramedConn};
use pathdoc_server::{Limits, Server, ServerConfig, Service, ServiceError, Session};
use tokio::io::AsyncReadExt;

struct HoldService;

#[async_trait]
impl Service for HoldService {
    fn check(&self) -> CheckKind {
        CheckKind::Idle
    }

    async fn control(
        &self,
        _session: Arc<Session>,
        conn: FramedConn,
        _resumed: bool,
    ) -> Result<(), ServiceError> {
        hold(conn).await
    }

    async fn data(
        &self,
        _session: Arc<Session>,
        _tag: u32,
        conn: FramedConn,
        _permit: pathdoc_server::ConnectionPermit,
    ) -> Result<(), ServiceError> {
        hold(conn).await
    }
}

/// Wait until the peer sends anything or closes.
async fn hold(mut conn: FramedConn) -> Result<(), ServiceError> {
    let mut byte = [0u8; 1];
    let _ = conn.stream_mut().read(&mut byte).await;
    Ok(())
}

/// Run the reference server until killed; prints the same "listening on" line as `pathdoc server`.
pub fn run(listen: SocketAddr) -> anyhow::Result<()> {
    crate::raise_fd_limit();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let limits = Limits {
            connections_per_ip: 1 << 20,
            connections_total: 1 << 20,
            sessions_per_ip: 1 << 16,
            sessions_total: 1 << 20,
            handshakes_per_ip: 1 << 20,
            handshakes_total: 1 << 20,
            ..Limits::default()
        };
        let config = ServerConfig {
            listen,
            auth_token: None,
            limits,
            once: false,
            stats_interval: None,
        };
        let service: Arc<dyn Service> = Arc::new(HoldService);
        let bound = Server::new(config).with_service(service).bind().await?;
        eprintln!(
            "reference server listening on {} (TCP and UDP)",
            bound.local_addr()
        );
        bound
            .run(std::future::pending::<()>(), Duration::from_secs(1))
            .await;
        Ok(())
    })
}

/// Run a bare tokio server that answers the pathdoc handshake and then holds each connection in
/// one task: the floor under any framework. Prints the same "listening on" line.
pub fn run_bare(listen: SocketAddr) -> anyhow::Result<()> {
    crate::raise_fd_limit();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        eprintln!("bare server listening on {} (TCP)", listener.local_addr()?);
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            tokio::spawn(async move {
                let Ok(mut conn) = FramedConn::new(stream) else {
                    return;
                };
                let hello = async {
                    pathdoc_proto::read_preamble(conn.stream_mut()).await?;
                    conn.recv::<pathdoc_proto::Hello>().await
                };
                if tokio::time::timeout(Duration::from_secs(10), hello)
                    .await
                    .map_or(true, |r| r.is_err())
                {
                    return;
                }
                let welcome = pathdoc_proto::HelloReply::Welcome(pathdoc_proto::Welcome {
                    server_version: pathdoc_proto::software_version(),
                    session: pathdoc_proto::SessionId(1),
                    observed: peer,
                    revision: 0,
                });
                if pathdoc_proto::write_preamble(conn.stream_mut())
                    .await
                    .is_err()
                    || conn.send(&welcome).await.is_err()
                {
                    return;
                }
                let _ = hold(conn).await;
            });
        }
    })
}
