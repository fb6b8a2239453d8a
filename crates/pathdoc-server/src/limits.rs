//! Per-client and global bounds: how many connections and sessions one client may hold, how
//! long a session may live, and how long a handshake may take.
//!
//! A "client" for these limits is an address group ([`ClientKey`]): by default one IPv4
//! address, or one IPv6 /64 (one subscriber's LAN: a single host can use any of its 2^64
//! addresses, so counting per IPv6 address would count nothing).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fair::{FairPool, Over};
use crate::session::SessionUse;

/// Server limits. The defaults suit a public server (docs/server.md, "Resource model", explains
/// each number): an office of users behind one NAT can run full checks at once, and no client
/// can make the server hold more than its share of descriptors, memory or threads.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once from one client (address group).
    pub connections_per_ip: u32,
    /// Connections open at once in total.
    pub connections_total: u32,
    /// Live sessions (with at least one open connection) at once from one client.
    pub sessions_per_ip: u32,
    /// Sessions kept at once in total, live or lingering; when full, the oldest lingering
    /// session is ended to make room, and only live sessions can make the server refuse.
    pub sessions_total: u32,
    /// Hard end of any session, however active (the idle check's horizon is 2 h 10 min).
    pub session_max: Duration,
    /// How long a session's results are kept after its last connection closed, so a client
    /// that lost its connections can resume or fetch results. A session its client ended
    /// explicitly is not kept.
    pub session_linger: Duration,
    /// Deadline for the preamble and Hello of a new connection.
    pub handshake_timeout: Duration,
    /// How long a client may leave a control frame the server sends untaken (its receive window
    /// shut) before the server drops the connection: what a client that never reads can hold.
    /// [`crate::SEND_TIMEOUT`]; tests scale it down.
    pub send_timeout: Duration,
    /// Connections still in their handshake (not yet past a valid Hello, so not yet
    /// authenticated) one client may hold at once.
    pub handshakes_per_ip: u32,
    /// Connections still in their handshake in total: a pool of their own, so silent or
    /// unauthenticated connections cannot hold the slots authenticated clients need.
    pub handshakes_total: u32,
    /// Longest throughput test a client may ask for.
    pub max_test_duration: Duration,
    /// UDP bytes the server may send for one session in total.
    pub udp_bytes_per_session: u64,
    /// IPv4 addresses sharing this many leading bits count as one client (32: each address).
    pub ipv4_prefix: u8,
    /// IPv6 addresses sharing this many leading bits count as one client (64: one LAN).
    pub ipv6_prefix: u8,
    /// Throughput-test stream threads at once from one client.
    pub streams_per_ip: u32,
    /// Throughput-test stream threads at once in total.
    pub streams_total: u32,
    /// MTU-check bulk downloads at once from one client (one per session at most).
    pub bulk_per_ip: u32,
    /// MTU-check bulk downloads at once in total.
    pub bulk_total: u32,
    /// Idle-check probe records (connections and UDP bindings) one client's sessions may keep.
    pub probes_per_ip: u32,
    /// Idle-check probe records all sessions may keep in total.
    pub probes_total: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections_per_ip: 4096,
            connections_total: 100_000,
            sessions_per_ip: 32,
            sessions_total: 4096,
            session_max: Duration::from_secs(3 * 3600),
            session_linger: Duration::from_secs(15 * 60),
            handshake_timeout: Duration::from_secs(5),
            send_timeout: crate::SEND_TIMEOUT,
            // An idle check may open up to 1000 probe connections at once.
            handshakes_per_ip: 1024,
            handshakes_total: 8192,
            max_test_duration: Duration::from_secs(60),
            udp_bytes_per_session: 4 * 1024 * 1024,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            streams_per_ip: 16,
            streams_total: 64,
            bulk_per_ip: 4,
            bulk_total: 16,
            probes_per_ip: 8192,
            probes_total: 262_144,
        }
    }
}

impl Limits {
    /// Reject limits under which no check can run, with the flag to fix.
    pub fn validate(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.connections_per_ip < 3 {
            problems.push(format!(
                "--max-connections-per-ip {} is too small: a check needs at least 3 connections (control, data, end)",
                self.connections_per_ip
            ));
        }
        if self.connections_total < self.connections_per_ip {
            problems.push(format!(
                "--max-connections {} is below --max-connections-per-ip {}",
                self.connections_total, self.connections_per_ip
            ));
        }
        if self.sessions_per_ip == 0 {
            problems.push(
                "--max-sessions-per-ip 0 would refuse every check; use at least 1".to_string(),
            );
        }
        if self.sessions_total < self.sessions_per_ip {
            problems.push(format!(
                "--max-sessions {} is below --max-sessions-per-ip {}",
                self.sessions_total, self.sessions_per_ip
            ));
        }
        if self.session_max < Duration::from_secs(1) {
            problems.push("--max-session must be at least 1s".to_string());
        }
        if self.handshake_timeout < Duration::from_millis(100) {
            problems.push("--handshake-timeout must be at least 100ms".to_string());
        }
        if self.max_test_duration < Duration::from_secs(1) {
            problems.push("--max-test must be at least 1s".to_string());
        }
        if self.max_test_duration > self.session_max {
            problems.push("--max-test is longer than --max-session".to_string());
        }
        for (flag, per, total_flag, total) in [
            (
                "--max-streams-per-ip",
                self.streams_per_ip,
                "--max-streams",
                self.streams_total,
            ),
            (
                "--max-bulk-per-ip",
                self.bulk_per_ip,
                "--max-bulk",
                self.bulk_total,
            ),
            (
                "--max-handshakes-per-ip",
                self.handshakes_per_ip,
                "--max-handshakes",
                self.handshakes_total,
            ),
        ] {
            if per == 0 {
                problems.push(format!(
                    "{flag} 0 would refuse every such check; use at least 1"
                ));
            } else if total < per {
                problems.push(format!("{total_flag} {total} is below {flag} {per}"));
            }
        }
        if !(8..=32).contains(&self.ipv4_prefix) {
            problems.push(format!("--ipv4-prefix {} must be 8..=32", self.ipv4_prefix));
        }
        if !(16..=128).contains(&self.ipv6_prefix) {
            problems.push(format!(
                "--ipv6-prefix {} must be 16..=128",
                self.ipv6_prefix
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Descriptors a server needs besides its connections and MTU sessions: stdio, epoll, the
/// listeners and UDP socket, the refused connections that may wait for their hello (256), and
/// slack for the runtime and logs.
pub const BASE_DESCRIPTORS: u64 = 320;
/// Descriptors a live MTU session may hold besides its connections: the UDP probe socket, the
/// MSS listener and the connection it accepted.
pub const DESCRIPTORS_PER_SESSION: u64 = 3;

impl Limits {
    /// Descriptors every cap reached at once needs.
    pub fn descriptors_needed(&self) -> u64 {
        u64::from(self.connections_total)
            + DESCRIPTORS_PER_SESSION * u64::from(self.sessions_total)
            + BASE_DESCRIPTORS
    }

    /// These limits shrunk to what `fds` open descriptors can hold, or `None` when they fit.
    /// Sessions keep at most an eighth of the room (their descriptors come on top of their
    /// connections), connections get the rest; per-client caps and the handshake pool follow
    /// their totals down, never below what one check needs.
    pub fn fit_to_descriptors(&self, fds: u64) -> Option<Limits> {
        if self.descriptors_needed() <= fds {
            return None;
        }
        let room = fds.saturating_sub(BASE_DESCRIPTORS).max(64);
        let sessions = (room / 8).clamp(1, u64::from(self.sessions_total)) as u32;
        let connections = (room - DESCRIPTORS_PER_SESSION * u64::from(sessions))
            .clamp(3, u64::from(self.connections_total)) as u32;
        let mut fitted = self.clone();
        fitted.sessions_total = sessions;
        fitted.sessions_per_ip = self.sessions_per_ip.min(sessions);
        fitted.connections_total = connections;
        fitted.connections_per_ip = self.connections_per_ip.min(connections);
        fitted.handshakes_total = self.handshakes_total.min(connections);
        fitted.handshakes_per_ip = self.handshakes_per_ip.min(fitted.handshakes_total);
        Some(fitted)
    }
}

/// The address group a client's connections and sessions are counted under: its address
/// masked to [`Limits::ipv4_prefix`] or [`Limits::ipv6_prefix`] bits. IPv4-mapped IPv6
/// addresses (a dual-stack listener) count as their IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey {
    net: IpAddr,
    prefix: u8,
}

impl ClientKey {
    pub fn of(ip: IpAddr, limits: &Limits) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let prefix = limits.ipv4_prefix.min(32);
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                ClientKey {
                    net: IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask)),
                    prefix,
                }
            }
            IpAddr::V6(v6) => {
                let prefix = limits.ipv6_prefix.min(128);
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                ClientKey {
                    net: IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)),
                    prefix,
                }
            }
        }
    }
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = if self.net.is_ipv4() { 32 } else { 128 };
        if self.prefix == full {
            write!(f, "{}", self.net)
        } else {
            write!(f, "{}/{}", self.net, self.prefix)
        }
    }
}

/// Counts open connections per client and in total, and among them those still in their
/// handshake (a pool of their own); both pools are shared fairly ([`crate::fair`]). A
/// [`ConnectionPermit`] releases its slots on drop.
#[derive(Debug)]
pub struct ConnectionCounter {
    inner: Arc<Mutex<CounterState>>,
}

#[derive(Debug)]
struct CounterState {
    connections: FairPool,
    handshakes: FairPool,
}

/// Why a connection was not admitted: which pool, and which of its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitError {
    Connections(Over),
    Handshakes(Over),
}

impl ConnectionCounter {
    pub fn new(limits: &Limits) -> Self {
        ConnectionCounter {
            inner: Arc::new(Mutex::new(CounterState {
                connections: FairPool::new(limits.connections_total, limits.connections_per_ip),
                handshakes: FairPool::new(limits.handshakes_total, limits.handshakes_per_ip),
            })),
        }
    }

    /// A slot in both pools for a new connection of `key`, or which one stops it.
    pub fn try_admit(&self, key: ClientKey) -> Result<ConnectionPermit, AdmitError> {
        let mut state = lock(&self.inner);
        state
            .connections
            .try_take(key, 1)
            .map_err(AdmitError::Connections)?;
        if let Err(over) = state.handshakes.try_take(key, 1) {
            state.connections.give(key, 1);
            return Err(AdmitError::Handshakes(over));
        }
        Ok(ConnectionPermit {
            counter: self.inner.clone(),
            key,
            handshaking: true,
            session: None,
            reservation: None,
        })
    }

    pub fn total(&self) -> u32 {
        lock(&self.inner).connections.used()
    }

    /// Connections still in their handshake.
    pub fn handshaking(&self) -> u32 {
        lock(&self.inner).handshakes.used()
    }

    /// Clients (address groups) with at least one open connection.
    pub fn clients(&self) -> usize {
        lock(&self.inner).connections.clients()
    }
}

/// One admitted connection; dropping it frees the slot. Until its handshake is done it also
/// holds a handshake slot. Once the connection belongs to a session, the permit also counts it
/// as one of the session's connections: a session whose last permit is gone is no longer live.
#[derive(Debug)]
pub struct ConnectionPermit {
    counter: Arc<Mutex<CounterState>>,
    key: ClientKey,
    handshaking: bool,
    session: Option<SessionUse>,
    reservation: Option<Reservation>,
}

/// What a service reserved for a connection (see `Service::admit_data`): a budget share, a
/// per-session slot. Released when the connection's permit drops.
pub type Reservation = Box<dyn std::any::Any + Send + Sync>;

impl ConnectionPermit {
    /// The connection sent a valid Hello (with the right token): it leaves the handshake pool.
    pub(crate) fn handshake_done(&mut self) {
        if std::mem::take(&mut self.handshaking) {
            lock(&self.counter).handshakes.give(self.key, 1);
        }
    }

    pub(crate) fn attach(&mut self, session: SessionUse) {
        self.session = Some(session);
    }

    pub(crate) fn reserve(&mut self, reservation: Reservation) {
        self.reservation = Some(reservation);
    }

    pub fn client(&self) -> ClientKey {
        self.key
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        // What the connection reserved, then the session's count: a session is live while any
        // of its connections is.
        drop(self.reservation.take());
        drop(self.session.take());
        let mut state = lock(&self.counter);
        state.connections.give(self.key, 1);
        if self.handshaking {
            state.handshakes.give(self.key, 1);
        }
    }
}

/// A poisoned counter only means another task panicked mid-update of plain integers; the
/// numbers are still usable, so recover rather than take the whole server down.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_and_total_limits_hold_and_release() {
        let limits = Limits {
            connections_per_ip: 2,
            connections_total: 3,
            ..Limits::default()
        };
        let c = ConnectionCounter::new(&limits);
        let a = ClientKey::of("192.0.2.1".parse().unwrap(), &limits);
        let b = ClientKey::of("192.0.2.2".parse().unwrap(), &limits);
        let p1 = c.try_admit(a).unwrap();
        let _p2 = c.try_admit(a).unwrap();
        assert!(matches!(
            c.try_admit(a).unwrap_err(),
            AdmitError::Connections(Over::PerClient { limit: 2, .. })
        ));
        let _p3 = c.try_admit(b).unwrap();
        assert!(matches!(
            c.try_admit(b).unwrap_err(),
            AdmitError::Connections(Over::Total { limit: 3, .. })
        ));
        drop(p1);
        // b holds one of the 2 left free: the free one goes to a client holding nothing.
        assert!(c.try_admit(b).is_err());
        let d = ClientKey::of("192.0.2.4".parse().unwrap(), &limits);
        assert!(c.try_admit(d).is_ok());
    }

    #[test]
    fn handshakes_have_a_pool_of_their_own_left_after_the_hello() {
        let limits = Limits {
            handshakes_per_ip: 2,
            handshakes_total: 6,
            ..Limits::default()
        };
        let c = ConnectionCounter::new(&limits);
        let silent = ClientKey::of("192.0.2.1".parse().unwrap(), &limits);
        let user = ClientKey::of("192.0.2.2".parse().unwrap(), &limits);
        let _s: Vec<_> = (0..2).map(|_| c.try_admit(silent).unwrap()).collect();
        assert!(matches!(
            c.try_admit(silent).unwrap_err(),
            AdmitError::Handshakes(Over::PerClient { limit: 2, .. })
        ));
        // The refused handshake took no connection slot.
        assert_eq!((c.total(), c.handshaking()), (2, 2));
        let mut done: Vec<_> = (0..2).map(|_| c.try_admit(user).unwrap()).collect();
        for p in &mut done {
            p.handshake_done();
            p.handshake_done();
        }
        assert_eq!((c.total(), c.handshaking()), (4, 2));
        // Past their hello the user's connections no longer count as handshakes.
        assert!(c.try_admit(user).is_ok());
    }

    #[test]
    fn clients_are_grouped_by_prefix() {
        let limits = Limits::default();
        let key = |s: &str| ClientKey::of(s.parse().unwrap(), &limits);
        assert_eq!(key("2001:db8::1"), key("2001:db8::ffff:1"));
        assert_ne!(key("2001:db8::1"), key("2001:db8:0:1::1"));
        assert_eq!(key("2001:db8::1").to_string(), "2001:db8::/64");
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
        assert_eq!(key("::ffff:192.0.2.1"), key("192.0.2.1"));
        assert_eq!(key("192.0.2.1").to_string(), "192.0.2.1");
        let by_24 = Limits {
            ipv4_prefix: 24,
            ..Limits::default()
        };
        let k24 = |s: &str| ClientKey::of(s.parse().unwrap(), &by_24);
        assert_eq!(k24("192.0.2.1"), k24("192.0.2.200"));
        assert_eq!(k24("192.0.2.1").to_string(), "192.0.2.0/24");
    }

    #[test]
    fn caps_shrink_to_the_descriptors_the_server_holds() {
        let limits = Limits::default();
        assert_eq!(limits.descriptors_needed(), 100_000 + 3 * 4096 + 320);
        assert!(limits.fit_to_descriptors(1 << 20).is_none());
        let fitted = limits.fit_to_descriptors(4096).unwrap();
        assert!(fitted.descriptors_needed() <= 4096, "{fitted:?}");
        assert_eq!(
            (fitted.sessions_total, fitted.connections_total),
            (472, 2360)
        );
        assert!(fitted.connections_per_ip <= fitted.connections_total);
        assert!(fitted.handshakes_total <= fitted.connections_total);
        assert!(fitted.validate().is_ok(), "{:?}", fitted.validate());
        // Even a tiny limit leaves limits a check can run under.
        assert!(limits.fit_to_descriptors(100).unwrap().validate().is_ok());
    }

    #[test]
    fn nonsensical_limits_are_named() {
        let zero = Limits {
            sessions_per_ip: 0,
            ..Limits::default()
        };
        assert!(zero
            .validate()
            .unwrap_err()
            .contains("--max-sessions-per-ip 0"));
        assert!(Limits::default().validate().is_ok());
    }
}
