//! Sessions: one client's run of one check, shared by its control and data connections.
//!
//! A session's id is random and acts as its capability: knowing it lets a client attach data
//! connections or resume control after an outage, even from a new address.

use std::any::Any;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pathdoc_proto::{CheckKind, SessionId, UdpHeader};
use tokio_util::sync::CancellationToken;

use crate::limits::Limits;
use crate::Shared;

/// How many distinct client addresses a session remembers (a client that moves networks).
const MAX_ADDRS_PER_SESSION: usize = 8;

pub struct Session {
    pub id: SessionId,
    pub check: CheckKind,
    /// Address that opened the session.
    pub client_ip: IpAddr,
    pub created: Instant,
    /// Hard end of the session ([`Limits::session_max`]).
    pub deadline: Instant,
    /// Cancelled when the session ends (deadline, reaped, server shutdown).
    pub cancel: CancellationToken,
    /// Limits in force, for services that bound their own work (test length, probe count).
    pub limits: Limits,
    addrs: Mutex<Vec<IpAddr>>,
    last_active: Mutex<Instant>,
    udp: Arc<tokio::net::UdpSocket>,
    udp_bytes_sent: AtomicU64,
    state: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("check", &self.check)
            .field("client_ip", &self.client_ip)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The check's own per-session state, created on first use. A service uses one type per
    /// session; asking for another type is a programming error and returns a fresh value.
    pub fn state<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let any = self
            .state
            .get_or_init(|| Arc::new(T::default()) as Arc<dyn Any + Send + Sync>);
        any.clone().downcast::<T>().unwrap_or_else(|_| {
            tracing::error!(session = %self.id, "session state requested with two different types");
            Arc::new(T::default())
        })
    }

    /// Mark the session as in use now (keeps it from being reaped).
    pub fn touch(&self) {
        *lock(&self.last_active) = Instant::now();
    }

    pub(crate) fn idle_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(*lock(&self.last_active))
    }

    /// Remember an address this session's client connected from.
    pub(crate) fn note_addr(&self, ip: IpAddr) {
        let mut addrs = lock(&self.addrs);
        if !addrs.contains(&ip) && addrs.len() < MAX_ADDRS_PER_SESSION {
            addrs.push(ip);
        }
    }

    /// Whether `ip` has connected to this session over TCP (so it is not a spoofed target).
    pub fn knows_addr(&self, ip: IpAddr) -> bool {
        lock(&self.addrs).contains(&ip)
    }

    /// Send a pathdoc datagram from the server's UDP port to the session's client. Refused for
    /// addresses that never completed a TCP handshake for this session and past the session's
    /// UDP byte budget, so a session cannot aim the server at a third party.
    pub async fn send_udp(
        &self,
        to: SocketAddr,
        kind: u16,
        payload: &[u8],
    ) -> std::io::Result<usize> {
        if !self.knows_addr(to.ip()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{to} is not an address of session {}", self.id),
            ));
        }
        let mut datagram = Vec::with_capacity(UdpHeader::LEN + payload.len());
        UdpHeader {
            session: self.id,
            kind,
        }
        .encode(&mut datagram);
        datagram.extend_from_slice(payload);
        let sent = self
            .udp_bytes_sent
            .fetch_add(datagram.len() as u64, Ordering::Relaxed);
        if sent + datagram.len() as u64 > self.limits.udp_bytes_per_session {
            return Err(std::io::Error::new(
                std::io::ErrorKind::QuotaExceeded,
                "session UDP budget exhausted",
            ));
        }
        self.udp.send_to(&datagram, to).await
    }

    /// The server's shared UDP socket, for services that need its local address.
    pub fn udp_local_addr(&self) -> std::io::Result<SocketAddr> {
        self.udp.local_addr()
    }
}

/// All live sessions.
pub struct SessionRegistry {
    limits: Limits,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
}

/// Why a session could not be created or found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionError {
    TooMany(u32),
    Unknown(SessionId),
}

impl SessionRegistry {
    pub fn new(limits: Limits) -> Self {
        SessionRegistry {
            limits,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn create(
        &self,
        check: CheckKind,
        client_ip: IpAddr,
        udp: Arc<tokio::net::UdpSocket>,
        parent: &CancellationToken,
    ) -> Result<Arc<Session>, SessionError> {
        let mut sessions = lock(&self.sessions);
        let from_ip = sessions
            .values()
            .filter(|s| s.client_ip == client_ip)
            .count() as u32;
        if from_ip >= self.limits.sessions_per_ip {
            return Err(SessionError::TooMany(self.limits.sessions_per_ip));
        }
        let id = loop {
            let id = SessionId(rand::random());
            if !sessions.contains_key(&id) {
                break id;
            }
        };
        let now = Instant::now();
        let session = Arc::new(Session {
            id,
            check,
            client_ip,
            created: now,
            deadline: now + self.limits.session_max,
            cancel: parent.child_token(),
            limits: self.limits.clone(),
            addrs: Mutex::new(vec![client_ip]),
            last_active: Mutex::new(now),
            udp,
            udp_bytes_sent: AtomicU64::new(0),
            state: OnceLock::new(),
        });
        sessions.insert(id, session.clone());
        Ok(session)
    }

    pub fn get(&self, id: SessionId) -> Result<Arc<Session>, SessionError> {
        lock(&self.sessions)
            .get(&id)
            .cloned()
            .ok_or(SessionError::Unknown(id))
    }

    pub fn len(&self) -> usize {
        lock(&self.sessions).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// End sessions past their deadline, and sessions with no connection that have been idle
    /// longer than the linger time.
    pub(crate) fn reap(&self, now: Instant) -> usize {
        let mut sessions = lock(&self.sessions);
        let before = sessions.len();
        sessions.retain(|_, s| {
            // The registry's own Arc is the only one left when no connection holds the session.
            let unused = Arc::strong_count(s) == 1;
            let keep =
                now < s.deadline && !(unused && s.idle_for(now) > self.limits.session_linger);
            if !keep {
                s.cancel.cancel();
            }
            keep
        });
        before - sessions.len()
    }
}

pub(crate) async fn reap_loop(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = tick.tick() => {
                let reaped = shared.registry.reap(Instant::now());
                if reaped > 0 {
                    tracing::debug!(reaped, "sessions ended");
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
