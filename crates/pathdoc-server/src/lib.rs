//! The pathdoc server framework: one TCP port and the same UDP port, a versioned handshake,
//! optional shared-secret auth, per-client limits, and a registry of check sessions.
//!
//! The framework knows no check. Each check (idle, mtu, speed) implements [`Service`] in its
//! own crate and is registered by the binary with [`Server::with_service`]. A connection flows:
//! accept → per-IP connection permit ([`limits`]) → preamble + [`Hello`](pathdoc_proto::Hello)
//! within the handshake deadline → auth → a new or existing [`Session`] → the check's
//! [`Service::control`] or [`Service::data`]. Datagrams on the UDP port go to [`Service::udp`].
//!
//! Facing the internet: the server never allocates more than a frame's bounded size per message,
//! caps connections and sessions per client address and in total, ends sessions at a hard
//! deadline, and answers UDP only for live sessions with no more bytes than it received.

pub mod budget;
pub mod closing;
pub mod fair;
pub mod limits;
pub mod requests;
pub mod session;
pub mod stats;

mod conn;
mod udp;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pathdoc_proto::{CheckKind, FramedConn};
use tokio_util::sync::CancellationToken;

pub use budget::{Budget, BudgetHold, Budgets, Refuse};
pub use fair::{FairPool, Over};
pub use limits::{ClientKey, ConnectionPermit, Limits, Reservation};
pub use requests::next_request;
pub use session::{EndReason, RegistrySnapshot, Session, SessionRegistry};
pub use stats::Accounting;

/// Longest the server waits for a client to take a frame it sends (control replies, refusals
/// excepted: those have their own short deadline). A client that stops reading loses its
/// connection instead of holding a task and a send queue.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Server settings. `Default` gives safe public-server values.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// TCP and UDP listen address.
    pub listen: SocketAddr,
    /// Shared secret required in every Hello, if set.
    pub auth_token: Option<String>,
    pub limits: Limits,
    /// Serve one client (address group), then stop: other clients are refused meanwhile, and
    /// [`BoundServer::run`] returns once that client has had no live session for
    /// [`ONCE_QUIET`] (a `pathdoc check` runs its checks one after another).
    pub once: bool,
    /// How often the server logs its counters line (`None`: never).
    pub stats_interval: Option<Duration>,
}

/// `--once`: how long the served client may have no live session before the server stops.
pub const ONCE_QUIET: Duration = Duration::from_secs(3);

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], pathdoc_proto::DEFAULT_PORT)),
            auth_token: None,
            limits: Limits::default(),
            once: false,
            stats_interval: Some(Duration::from_secs(60)),
        }
    }
}

/// Errors a [`Service`] returns; logged by the framework, never fatal to the server.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Proto(#[from] pathdoc_proto::ProtoError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("client request refused: {0}")]
    BadRequest(String),
    #[error("{0}")]
    Other(String),
}

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    // The cause is the error's source, printed once by whoever shows the chain.
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr} (UDP; another program may hold the port)")]
    BindUdp {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("no service registered")]
    NoService,
}

/// The server side of one check.
#[async_trait]
pub trait Service: Send + Sync + 'static {
    /// Which check this service answers.
    fn check(&self) -> CheckKind;

    /// Run the control connection of `session`. Called again with `resumed = true` when a
    /// client reattaches after an outage; the previous call may still be running until its
    /// connection errors out. Return when the client is done or the connection broke.
    async fn control(
        &self,
        session: Arc<Session>,
        conn: FramedConn,
        resumed: bool,
    ) -> Result<(), ServiceError>;

    /// Before a data connection of `session` labelled `tag` is welcomed: check the tag and
    /// reserve what serving it costs (a bulk-download slot, say), or refuse it with the reason
    /// the client is shown. The reservation travels with the connection's permit and is released
    /// when the connection closes.
    fn admit_data(&self, session: &Arc<Session>, tag: u32) -> Result<Option<Reservation>, Refuse> {
        let _ = (session, tag);
        Ok(None)
    }

    /// Handle a data/probe connection of `session`, labelled `tag` by the client. `permit`
    /// counts the connection against the client's limits until dropped: a service that parks
    /// connections without a task (thousands of idle probes) keeps it with the connection.
    async fn data(
        &self,
        session: Arc<Session>,
        tag: u32,
        conn: FramedConn,
        permit: ConnectionPermit,
    ) -> Result<(), ServiceError> {
        let _ = (session, tag, conn, permit);
        Err(ServiceError::BadRequest(format!(
            "the {} check has no data connections",
            self.check()
        )))
    }

    /// Handle a datagram of `session` from `from`. A returned reply is sent back to `from`
    /// only if it is no larger than the datagram that caused it (no amplification).
    async fn udp(
        &self,
        session: Arc<Session>,
        kind: u16,
        payload: &[u8],
        from: SocketAddr,
    ) -> Option<Vec<u8>> {
        let _ = (session, kind, payload, from);
        None
    }
}

/// A configured server, ready to [`run`](Server::run).
pub struct Server {
    config: ServerConfig,
    services: Vec<Arc<dyn Service>>,
}

impl Server {
    pub fn new(config: ServerConfig) -> Self {
        Server {
            config,
            services: Vec::new(),
        }
    }

    pub fn with_service(mut self, service: Arc<dyn Service>) -> Self {
        self.services.push(service);
        self
    }

    /// Bind the TCP and UDP sockets. Separate from [`BoundServer::run`] so callers (and tests)
    /// can learn the actual port when listening on port 0.
    pub async fn bind(self) -> Result<BoundServer, ServerError> {
        if self.services.is_empty() {
            return Err(ServerError::NoService);
        }
        let listen = self.config.listen;
        let tcp = conn::bind_tcp(listen).map_err(|source| ServerError::Bind {
            addr: listen,
            source,
        })?;
        let local = tcp.local_addr().map_err(|source| ServerError::Bind {
            addr: listen,
            source,
        })?;
        let udp = udp::bind_udp(local).map_err(|source| ServerError::BindUdp {
            addr: local,
            source,
        })?;
        let accounting = Arc::new(Accounting::new(&self.config.limits));
        let shared = Arc::new(Shared {
            registry: SessionRegistry::new(
                self.config.limits.clone(),
                self.config.once,
                accounting.clone(),
            ),
            accounting,
            conns: limits::ConnectionCounter::new(&self.config.limits),
            udp: Arc::new(udp),
            services: self.services,
            config: self.config,
            shutdown: CancellationToken::new(),
            tasks: tokio_util::task::TaskTracker::new(),
        });
        Ok(BoundServer { tcp, local, shared })
    }
}

/// State shared by every connection task.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    pub(crate) registry: SessionRegistry,
    pub(crate) accounting: Arc<Accounting>,
    pub(crate) conns: limits::ConnectionCounter,
    pub(crate) udp: Arc<tokio::net::UdpSocket>,
    pub(crate) services: Vec<Arc<dyn Service>>,
    pub(crate) shutdown: CancellationToken,
    /// Every task the server spawns, so shutdown can wait for them.
    pub(crate) tasks: tokio_util::task::TaskTracker,
}

impl Shared {
    pub(crate) fn service(&self, check: CheckKind) -> Option<Arc<dyn Service>> {
        self.services.iter().find(|s| s.check() == check).cloned()
    }
}

/// A server with its sockets bound.
pub struct BoundServer {
    tcp: tokio::net::TcpListener,
    local: SocketAddr,
    shared: Arc<Shared>,
}

impl BoundServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The session registry (for counters and tests).
    pub fn registry(&self) -> SessionRegistry {
        self.shared.registry.clone()
    }

    /// The server's counters and budgets.
    pub fn accounting(&self) -> Arc<Accounting> {
        self.shared.accounting.clone()
    }

    /// Serve until `shutdown` completes (or, with [`ServerConfig::once`], the one client is
    /// done), then stop accepting, end the sessions and give running connections `grace` to
    /// finish.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>, grace: Duration) {
        let shared = self.shared;
        tracing::info!(
            listen = %self.local,
            auth = shared.config.auth_token.is_some(),
            once = shared.config.once,
            "pathdoc server listening on {} (TCP and UDP)",
            self.local
        );
        let tracker = shared.tasks.clone();
        tracker.spawn(udp::serve(shared.clone()));
        tracker.spawn(session::reap_loop(shared.clone()));
        if let Some(interval) = shared.config.stats_interval {
            tracker.spawn(stats::report_loop(shared.clone(), interval));
        }
        let once_done = once_finished(shared.clone());
        tokio::pin!(shutdown);
        tokio::pin!(once_done);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = &mut once_done => {
                    tracing::info!("--once: the client is done");
                    break;
                }
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, peer)) => {
                        // Admission right here: a connection over a limit is refused without
                        // a task (and usually without keeping its descriptor past this call).
                        match conn::admit(&shared, peer) {
                            Ok(permit) => {
                                tracker.spawn(conn::handle(shared.clone(), stream, peer, permit));
                            }
                            Err(over) => conn::refuse_admission(&shared, stream, peer, over),
                        }
                    }
                    // Out of file descriptors and similar: back off instead of spinning.
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
        tracing::info!("shutting down: no new connections, ending sessions");
        shared.registry.end_all();
        shared.shutdown.cancel();
        tracker.close();
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            tracing::warn!(
                ?grace,
                "some connections did not finish within the grace period"
            );
        }
    }
}

/// Resolves when a `--once` server's client has been quiet for [`ONCE_QUIET`]; never otherwise.
async fn once_finished(shared: Arc<Shared>) {
    if !shared.config.once {
        return std::future::pending().await;
    }
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        if shared
            .registry
            .once_finished(std::time::Instant::now(), ONCE_QUIET)
        {
            return;
        }
    }
}
