//! A reference server for the memory breakdown: the real `pathdoc_server` framework with a
//! service that only holds each connection open (no per-check state, no extra tasks). The
//! difference between this server and `pathdoc server` per connection is the idle service's own
//! cost; what this one costs is the framework's (connection task, permit, tokio I/O
//! registration).

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
            ..Limits::default()
        };
        let config = ServerConfig {
            listen,
            auth_token: None,
            limits,
        };
        let bound = Server::new(config)
            .with_service(Arc::new(HoldService))
            .bind()
            .await?;
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
