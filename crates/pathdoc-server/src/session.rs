//! Sessions: one client's run of one check, shared by its control and data connections.
//!
//! A session's id is random and acts as its capability: knowing it lets a client attach data
//! connections, resume control after an outage (even from a new address) or end it.
//!
//! Life cycle. A session is **live** while at least one of its connections is open (each
//! connection's [`ConnectionPermit`](crate::ConnectionPermit) holds a [`SessionUse`]); only live
//! sessions count against [`Limits::sessions_per_ip`]. When its last connection closes it
//! **lingers**: the check's results stay for a resume for [`Limits::session_linger`], while
//! services release everything else ([`Session::unused`]). It **ends** when its client says so
//! ([`pathdoc_proto::Channel::End`]), at its hard deadline, when its linger runs out, when it
//! is evicted to make room (the oldest lingering session of its client or of the server), or at
//! shutdown. Admission and every transition are O(1) map updates under one short lock.

use std::any::Any;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use pathdoc_proto::{CheckKind, SessionId, UdpHeader};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::budget::{Budgets, Refuse};
use crate::limits::{lock, ClientKey, Limits};
use crate::stats::Accounting;
use crate::Shared;

/// How many distinct client addresses a session remembers (a client that moves networks).
const MAX_ADDRS_PER_SESSION: usize = 8;

pub struct Session {
    pub id: SessionId,
    pub check: CheckKind,
    /// Address that opened the session.
    pub client_ip: IpAddr,
    /// The client (address group) the session counts against.
    pub client: ClientKey,
    pub created: Instant,
    /// Hard end of the session ([`Limits::session_max`]).
    pub deadline: Instant,
    /// Cancelled when the session ends (client ended it, deadline, linger, eviction, shutdown).
    pub cancel: CancellationToken,
    /// Limits in force, for services that bound their own work (test length, probe count).
    pub limits: Limits,
    addrs: Mutex<Vec<IpAddr>>,
    last_active: Mutex<Instant>,
    udp: Arc<tokio::net::UdpSocket>,
    udp_bytes_sent: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    /// Connections that ever belonged to the session (for the end-of-session log line).
    connections: AtomicU32,
    /// Connections open now; 0 = not live. Mirrors the registry's count for waiters.
    live: watch::Sender<u32>,
    accounting: Arc<Accounting>,
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

    /// Mark the session as in use now.
    pub fn touch(&self) {
        *lock(&self.last_active) = Instant::now();
    }

    /// Time since the session was last used.
    pub fn idle_for(&self, now: Instant) -> Duration {
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

    /// Whether any connection of the session is open now.
    pub fn is_live(&self) -> bool {
        *self.live.borrow() > 0
    }

    /// Resolves once the session has no open connection (or has ended). Services wait on it
    /// to release what only an attached client can use (probe sockets, refresh tasks), so a
    /// lingering session keeps no more than its results. Resolves at once if already unused.
    pub async fn unused(&self) {
        let mut live = self.live.subscribe();
        tokio::select! {
            _ = live.wait_for(|n| *n == 0) => {}
            _ = self.cancel.cancelled() => {}
        }
    }

    /// The server's budgets (throughput streams, bulk downloads) a service takes from.
    pub fn budgets(&self) -> &Budgets {
        &self.accounting.budgets
    }

    /// Count and log a refusal a service answered in its own protocol (a throughput test the
    /// stream budget cannot start, say), as the framework does for its own.
    pub fn refused(&self, client: SocketAddr, refuse: &Refuse) {
        self.accounting.refused(client, refuse);
    }

    /// Count payload bytes a service moved for this session (for the end-of-session log).
    pub fn add_bytes(&self, sent: u64, received: u64) {
        self.bytes_sent.fetch_add(sent, Ordering::Relaxed);
        self.bytes_received.fetch_add(received, Ordering::Relaxed);
    }

    /// Send a pathdoc datagram from the server's UDP port to the session's client. Refused for
    /// addresses that never completed a TCP handshake for this session, once the session ended,
    /// and past the session's UDP byte budget, so a session cannot aim the server at a third
    /// party or keep sending after its client left.
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
        if self.cancel.is_cancelled() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("session {} has ended", self.id),
            ));
        }
        let mut datagram = Vec::with_capacity(UdpHeader::LEN + payload.len());
        UdpHeader {
            session: self.id,
            kind,
        }
        .encode(&mut datagram);
        datagram.extend_from_slice(payload);
        if !self.charge_udp(datagram.len()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::QuotaExceeded,
                "session UDP budget exhausted",
            ));
        }
        self.udp.send_to(&datagram, to).await
    }

    /// Charge `bytes` of UDP the session is about to send (on the server's socket or a
    /// service's own) against its budget ([`Limits::udp_bytes_per_session`]); `false`, with
    /// nothing charged, when they do not fit.
    pub fn charge_udp(&self, bytes: usize) -> bool {
        let budget = self.limits.udp_bytes_per_session;
        self.udp_bytes_sent
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |sent| {
                sent.checked_add(bytes as u64).filter(|&t| t <= budget)
            })
            .is_ok()
    }

    /// The server's shared UDP socket, for services that need its local address.
    pub fn udp_local_addr(&self) -> std::io::Result<SocketAddr> {
        self.udp.local_addr()
    }
}

/// Why a session ended (the `reason` of the "session end" log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// The client said it was done ([`pathdoc_proto::Channel::End`]).
    Client,
    /// No connection for [`Limits::session_linger`].
    Linger,
    /// [`Limits::session_max`] reached.
    Deadline,
    /// A lingering session ended early to make room for a new one.
    Evicted,
    Shutdown,
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EndReason::Client => "client-ended",
            EndReason::Linger => "linger-expired",
            EndReason::Deadline => "deadline",
            EndReason::Evicted => "evicted",
            EndReason::Shutdown => "shutdown",
        })
    }
}

/// Why a session could not be created, found or attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionError {
    /// The client already has `limit` live sessions; the soonest of them ends at the latest
    /// after `soonest_end`.
    TooMany {
        limit: u32,
        client: ClientKey,
        soonest_end: Duration,
    },
    /// `limit` sessions are live on the server (nothing lingering left to evict).
    Full(u32),
    /// The server is busy and this client already holds its fair share of the live sessions
    /// ([`crate::fair`]).
    FairShare {
        client: ClientKey,
        over: crate::fair::Over,
    },
    /// `--once`: the server serves another client.
    Busy,
    Unknown(SessionId),
}

/// One of a session's open connections; dropping it may make the session stop being live.
/// Held by the connection's [`ConnectionPermit`](crate::ConnectionPermit).
#[derive(Debug)]
pub struct SessionUse {
    id: SessionId,
    registry: Weak<RegistryShared>,
}

impl Drop for SessionUse {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.detach(self.id);
        }
    }
}

/// All sessions, live and lingering.
#[derive(Clone)]
pub struct SessionRegistry {
    shared: Arc<RegistryShared>,
}

struct RegistryShared {
    limits: Limits,
    accounting: Arc<Accounting>,
    /// `--once`: serve one client, then let the server stop.
    once: bool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<SessionId, Entry>,
    clients: HashMap<ClientKey, ClientSessions>,
    /// Lingering sessions, oldest first (for the linger reaper and server-wide eviction).
    lingering: BTreeSet<(Instant, SessionId)>,
    /// Every session by hard deadline; sessions are created in deadline order.
    deadlines: VecDeque<(Instant, SessionId)>,
    /// `--once`: the client being served, and since when it has had no live session.
    once_client: Option<ClientKey>,
    once_quiet_since: Option<Instant>,
    counts: RegistryCounts,
}

struct Entry {
    session: Arc<Session>,
    /// Open connections; 0 = lingering.
    conns: u32,
    /// When the last connection closed (the key into `lingering`).
    idle_since: Option<Instant>,
}

#[derive(Default)]
struct ClientSessions {
    /// Live sessions of this client (at most `sessions_per_ip`).
    live: Vec<SessionId>,
    /// Lingering sessions of this client, oldest first (at most `sessions_per_ip`).
    lingering: VecDeque<SessionId>,
}

/// Totals for the server's periodic counters line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RegistryCounts {
    pub created: u64,
    pub ended_client: u64,
    pub ended_linger: u64,
    pub ended_deadline: u64,
    pub ended_evicted: u64,
}

/// A snapshot of the registry for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistrySnapshot {
    pub live: usize,
    pub lingering: usize,
    pub clients: usize,
    pub counts: RegistryCounts,
}

impl SessionRegistry {
    pub fn new(limits: Limits, once: bool, accounting: Arc<Accounting>) -> Self {
        SessionRegistry {
            shared: Arc::new(RegistryShared {
                limits,
                accounting,
                once,
                inner: Mutex::new(Inner::default()),
            }),
        }
    }

    /// A new live session of `check` for the client at `client_ip`, with its first connection.
    pub(crate) fn create(
        &self,
        check: CheckKind,
        client_ip: IpAddr,
        udp: Arc<tokio::net::UdpSocket>,
        parent: &CancellationToken,
    ) -> Result<(Arc<Session>, SessionUse), SessionError> {
        let limits = &self.shared.limits;
        let client = ClientKey::of(client_ip, limits);
        let now = Instant::now();
        let mut evicted = Vec::new();
        let result = {
            let mut inner = lock(&self.shared.inner);
            let accounting = self.shared.accounting.clone();
            self.admit(&mut inner, client, now, &mut evicted).map(|()| {
                inner.insert_new(NewSession {
                    check,
                    client_ip,
                    client,
                    udp,
                    parent,
                    limits,
                    accounting,
                    now,
                })
            })
        };
        finish_ended(evicted, EndReason::Evicted);
        let session = result?;
        let session_use = SessionUse {
            id: session.id,
            registry: Arc::downgrade(&self.shared),
        };
        Ok((session, session_use))
    }

    /// Admission of a new session for `client`: its live-session cap, `--once`, and the
    /// server-wide cap (making room by evicting the oldest lingering session).
    fn admit(
        &self,
        inner: &mut Inner,
        client: ClientKey,
        now: Instant,
        evicted: &mut Vec<Arc<Session>>,
    ) -> Result<(), SessionError> {
        let limits = &self.shared.limits;
        if self.shared.once {
            match inner.once_client {
                Some(served) if served != client => return Err(SessionError::Busy),
                _ => inner.once_client = Some(client),
            }
        }
        inner.check_live_slot(client, limits, now)?;
        if inner.sessions.len() >= limits.sessions_total as usize {
            let Some(&(_, oldest)) = inner.lingering.iter().next() else {
                return Err(SessionError::Full(limits.sessions_total));
            };
            evicted.extend(inner.end_locked(oldest, EndReason::Evicted));
        }
        Ok(())
    }

    pub fn get(&self, id: SessionId) -> Result<Arc<Session>, SessionError> {
        lock(&self.shared.inner)
            .sessions
            .get(&id)
            .map(|e| e.session.clone())
            .ok_or(SessionError::Unknown(id))
    }

    /// Count one more open connection of `session` (a data connection or a resumed control).
    /// A lingering session becomes live again, which needs a live-session slot of its client.
    pub(crate) fn attach(&self, session: &Session) -> Result<SessionUse, SessionError> {
        let limits = &self.shared.limits;
        let now = Instant::now();
        let mut inner = lock(&self.shared.inner);
        let Some(entry) = inner.sessions.get(&session.id) else {
            return Err(SessionError::Unknown(session.id));
        };
        if entry.conns == 0 {
            inner.check_live_slot(session.client, limits, now)?;
            inner.revive(session.id);
        }
        if let Some(entry) = inner.sessions.get_mut(&session.id) {
            entry.conns += 1;
            entry.session.live.send_modify(|n| *n += 1);
            entry.session.connections.fetch_add(1, Ordering::Relaxed);
        }
        Ok(SessionUse {
            id: session.id,
            registry: Arc::downgrade(&self.shared),
        })
    }

    /// End a session now (the client's explicit end). Returns whether it existed.
    pub(crate) fn end(&self, id: SessionId, reason: EndReason) -> bool {
        let ended = lock(&self.shared.inner).end_locked(id, reason);
        let found = ended.is_some();
        finish_ended(ended.into_iter().collect(), reason);
        found
    }

    /// End every session (server shutdown).
    pub(crate) fn end_all(&self) {
        let ended: Vec<Arc<Session>> = {
            let mut inner = lock(&self.shared.inner);
            let ids: Vec<SessionId> = inner.sessions.keys().copied().collect();
            ids.into_iter()
                .filter_map(|id| inner.end_locked(id, EndReason::Shutdown))
                .collect()
        };
        finish_ended(ended, EndReason::Shutdown);
    }

    pub fn len(&self) -> usize {
        lock(&self.shared.inner).sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn snapshot(&self) -> RegistrySnapshot {
        let inner = lock(&self.shared.inner);
        RegistrySnapshot {
            live: inner.sessions.len() - inner.lingering.len(),
            lingering: inner.lingering.len(),
            clients: inner.clients.len(),
            counts: inner.counts,
        }
    }

    /// `--once`: true once the served client has had no live session for `quiet`.
    pub(crate) fn once_finished(&self, now: Instant, quiet: Duration) -> bool {
        let inner = lock(&self.shared.inner);
        inner.once_client.is_some()
            && inner
                .once_quiet_since
                .is_some_and(|t| now.saturating_duration_since(t) >= quiet)
    }

    /// End sessions past their deadline and lingering sessions past the linger time.
    pub(crate) fn reap(&self, now: Instant) {
        let linger = self.shared.limits.session_linger;
        let (deadline, lingered) = {
            let mut inner = lock(&self.shared.inner);
            let mut deadline = Vec::new();
            while let Some(&(at, id)) = inner.deadlines.front() {
                if at > now {
                    break;
                }
                inner.deadlines.pop_front();
                deadline.extend(inner.end_locked(id, EndReason::Deadline));
            }
            let mut lingered = Vec::new();
            while let Some(&(since, id)) = inner.lingering.iter().next() {
                if now.saturating_duration_since(since) < linger {
                    break;
                }
                lingered.extend(inner.end_locked(id, EndReason::Linger));
            }
            (deadline, lingered)
        };
        finish_ended(deadline, EndReason::Deadline);
        finish_ended(lingered, EndReason::Linger);
    }
}

impl RegistryShared {
    /// One connection of session `id` closed.
    fn detach(&self, id: SessionId) {
        let now = Instant::now();
        let evicted = {
            let mut inner = lock(&self.inner);
            let Some(entry) = inner.sessions.get_mut(&id) else {
                return; // already ended
            };
            entry.conns = entry.conns.saturating_sub(1);
            entry.session.live.send_modify(|n| *n = n.saturating_sub(1));
            if entry.conns > 0 {
                return;
            }
            entry.idle_since = Some(now);
            let client = entry.session.client;
            inner.lingering.insert((now, id));
            let sessions = inner.clients.entry(client).or_default();
            sessions.live.retain(|s| *s != id);
            sessions.lingering.push_back(id);
            let over = (sessions.lingering.len() > self.limits.sessions_per_ip as usize)
                .then(|| sessions.lingering.front().copied())
                .flatten();
            if inner.once_client == Some(client)
                && inner
                    .clients
                    .get(&client)
                    .is_some_and(|c| c.live.is_empty())
            {
                inner.once_quiet_since = Some(now);
            }
            over.and_then(|oldest| inner.end_locked(oldest, EndReason::Evicted))
        };
        finish_ended(evicted.into_iter().collect(), EndReason::Evicted);
    }
}

/// What a new session is made of.
struct NewSession<'a> {
    check: CheckKind,
    client_ip: IpAddr,
    client: ClientKey,
    udp: Arc<tokio::net::UdpSocket>,
    parent: &'a CancellationToken,
    limits: &'a Limits,
    accounting: Arc<Accounting>,
    now: Instant,
}

impl Inner {
    /// Whether `client` may have one more live session.
    fn check_live_slot(
        &self,
        client: ClientKey,
        limits: &Limits,
        now: Instant,
    ) -> Result<(), SessionError> {
        let held = self.clients.get(&client).map_or(0, |c| c.live.len() as u32);
        let live = (self.sessions.len() - self.lingering.len()) as u32;
        // Lingering sessions can always make room, so only live ones count as used.
        match crate::fair::admits(limits.sessions_total, limits.sessions_per_ip, live, held, 1) {
            Ok(()) => return Ok(()),
            Err(over @ crate::fair::Over::FairShare { .. }) => {
                return Err(SessionError::FairShare { client, over })
            }
            Err(crate::fair::Over::Total { limit, .. }) => return Err(SessionError::Full(limit)),
            Err(crate::fair::Over::PerClient { .. }) => {}
        }
        let Some(sessions) = self.clients.get(&client) else {
            return Ok(());
        };
        let soonest_end = sessions
            .live
            .iter()
            .filter_map(|id| self.sessions.get(id))
            .map(|e| e.session.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or_default();
        Err(SessionError::TooMany {
            limit: limits.sessions_per_ip,
            client,
            soonest_end,
        })
    }

    fn insert_new(&mut self, new: NewSession<'_>) -> Arc<Session> {
        let NewSession {
            check,
            client_ip,
            client,
            udp,
            parent,
            limits,
            accounting,
            now,
        } = new;
        let id = loop {
            let id = SessionId(rand::random());
            if !self.sessions.contains_key(&id) {
                break id;
            }
        };
        let session = Arc::new(Session {
            id,
            check,
            client_ip,
            client,
            created: now,
            deadline: now + limits.session_max,
            cancel: parent.child_token(),
            limits: limits.clone(),
            addrs: Mutex::new(vec![client_ip]),
            last_active: Mutex::new(now),
            udp,
            udp_bytes_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            connections: AtomicU32::new(1),
            live: watch::Sender::new(1),
            accounting,
            state: OnceLock::new(),
        });
        self.sessions.insert(
            id,
            Entry {
                session: session.clone(),
                conns: 1,
                idle_since: None,
            },
        );
        self.clients.entry(client).or_default().live.push(id);
        self.deadlines.push_back((session.deadline, id));
        self.counts.created += 1;
        if self.once_client == Some(client) {
            self.once_quiet_since = None;
        }
        session
    }

    /// A lingering session gets a connection again.
    fn revive(&mut self, id: SessionId) {
        let Some(entry) = self.sessions.get_mut(&id) else {
            return;
        };
        let client = entry.session.client;
        if let Some(since) = entry.idle_since.take() {
            self.lingering.remove(&(since, id));
        }
        let sessions = self.clients.entry(client).or_default();
        sessions.lingering.retain(|s| *s != id);
        sessions.live.push(id);
        if self.once_client == Some(client) {
            self.once_quiet_since = None;
        }
    }

    /// Remove session `id` from every index; the caller cancels and logs it outside the lock.
    fn end_locked(&mut self, id: SessionId, reason: EndReason) -> Option<Arc<Session>> {
        let entry = self.sessions.remove(&id)?;
        let client = entry.session.client;
        if let Some(since) = entry.idle_since {
            self.lingering.remove(&(since, id));
        }
        if let Some(sessions) = self.clients.get_mut(&client) {
            sessions.live.retain(|s| *s != id);
            sessions.lingering.retain(|s| *s != id);
            if sessions.live.is_empty() && sessions.lingering.is_empty() {
                self.clients.remove(&client);
            }
        }
        if self.once_client == Some(client)
            && self.clients.get(&client).is_none_or(|c| c.live.is_empty())
            && self.once_quiet_since.is_none()
        {
            self.once_quiet_since = Some(Instant::now());
        }
        match reason {
            EndReason::Client => self.counts.ended_client += 1,
            EndReason::Linger => self.counts.ended_linger += 1,
            EndReason::Deadline => self.counts.ended_deadline += 1,
            EndReason::Evicted => self.counts.ended_evicted += 1,
            EndReason::Shutdown => {}
        }
        Some(entry.session)
    }
}

/// Cancel ended sessions (their connections and tasks stop) and log each one's account.
fn finish_ended(ended: Vec<Arc<Session>>, reason: EndReason) {
    for session in ended {
        session.cancel.cancel();
        if !session.accounting.may_log_session() {
            continue;
        }
        let duration = session.created.elapsed();
        tracing::info!(
            session = %session.id,
            check = %session.check,
            client = %session.client_ip,
            reason = %reason,
            duration_s = (duration.as_secs_f64() * 1000.0).round() / 1000.0,
            connections = session.connections.load(Ordering::Relaxed),
            bytes_sent = session.bytes_sent.load(Ordering::Relaxed),
            bytes_received = session.bytes_received.load(Ordering::Relaxed),
            udp_bytes_sent = session.udp_bytes_sent.load(Ordering::Relaxed),
            "session end"
        );
    }
}

pub(crate) async fn reap_loop(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = tick.tick() => shared.registry.reap(Instant::now()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn udp() -> Arc<tokio::net::UdpSocket> {
        Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap())
    }

    fn acc(limits: &Limits) -> Arc<Accounting> {
        Arc::new(Accounting::new(limits))
    }

    fn limits() -> Limits {
        Limits {
            sessions_per_ip: 2,
            sessions_total: 3,
            ..Limits::default()
        }
    }

    #[tokio::test]
    async fn only_live_sessions_count_and_finished_ones_free_their_slot() {
        let reg = SessionRegistry::new(limits(), false, acc(&limits()));
        let parent = CancellationToken::new();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let (a, use_a) = reg
            .create(CheckKind::Mtu, ip, udp().await, &parent)
            .unwrap();
        let (_b, _use_b) = reg
            .create(CheckKind::Mtu, ip, udp().await, &parent)
            .unwrap();
        assert!(matches!(
            reg.create(CheckKind::Mtu, ip, udp().await, &parent),
            Err(SessionError::TooMany { limit: 2, .. })
        ));
        // a's last connection closes: it lingers for a resume but no longer counts.
        drop(use_a);
        assert!(!a.is_live());
        tokio::time::timeout(Duration::from_secs(1), a.unused())
            .await
            .unwrap();
        let (_c, _use_c) = reg
            .create(CheckKind::Mtu, ip, udp().await, &parent)
            .unwrap();
        assert_eq!(reg.snapshot().live, 2);
        assert_eq!(reg.snapshot().lingering, 1);
        // Resuming a needs a live slot again: refused while two are live.
        assert!(matches!(reg.attach(&a), Err(SessionError::TooMany { .. })));
        assert!(reg.end(a.id, EndReason::Client));
        assert!(a.cancel.is_cancelled());
        assert!(reg.get(a.id).is_err());
    }

    #[tokio::test]
    async fn a_full_server_evicts_lingering_sessions_but_refuses_when_all_are_live() {
        let reg = SessionRegistry::new(limits(), false, acc(&limits()));
        let parent = CancellationToken::new();
        let mut held = Vec::new();
        for i in 1..=3 {
            let ip: IpAddr = format!("192.0.2.{i}").parse().unwrap();
            held.push(
                reg.create(CheckKind::Idle, ip, udp().await, &parent)
                    .unwrap(),
            );
        }
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(
            reg.create(CheckKind::Idle, other, udp().await, &parent)
                .unwrap_err(),
            SessionError::Full(3)
        );
        let (first, use_first) = held.remove(0);
        drop(use_first);
        let (_d, _use_d) = reg
            .create(CheckKind::Idle, other, udp().await, &parent)
            .unwrap();
        assert!(
            first.cancel.is_cancelled(),
            "the lingering session made room"
        );
        assert_eq!(reg.snapshot().counts.ended_evicted, 1);
    }

    #[tokio::test]
    async fn linger_and_deadline_end_sessions() {
        let limits = Limits {
            session_linger: Duration::from_millis(50),
            session_max: Duration::from_millis(200),
            ..Limits::default()
        };
        let reg = SessionRegistry::new(limits.clone(), false, acc(&limits));
        let parent = CancellationToken::new();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let (a, use_a) = reg
            .create(CheckKind::Idle, ip, udp().await, &parent)
            .unwrap();
        let (b, _use_b) = reg
            .create(CheckKind::Idle, ip, udp().await, &parent)
            .unwrap();
        drop(use_a);
        reg.reap(Instant::now() + Duration::from_millis(60));
        assert!(a.cancel.is_cancelled());
        assert!(!b.cancel.is_cancelled());
        reg.reap(Instant::now() + Duration::from_millis(250));
        assert!(
            b.cancel.is_cancelled(),
            "live sessions end at their deadline"
        );
        assert!(reg.is_empty());
        assert_eq!(reg.snapshot().clients, 0);
    }

    #[tokio::test]
    async fn once_serves_one_client_and_finishes_when_it_is_quiet() {
        let reg = SessionRegistry::new(Limits::default(), true, acc(&Limits::default()));
        let parent = CancellationToken::new();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let (_s, use_s) = reg.create(CheckKind::Mtu, a, udp().await, &parent).unwrap();
        assert_eq!(
            reg.create(CheckKind::Mtu, b, udp().await, &parent)
                .unwrap_err(),
            SessionError::Busy
        );
        let quiet = Duration::from_millis(10);
        assert!(!reg.once_finished(Instant::now() + quiet * 2, quiet));
        drop(use_s);
        assert!(reg.once_finished(Instant::now() + quiet * 2, quiet));
    }
}
