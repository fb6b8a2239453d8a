//! Per-client and global bounds: how many connections and sessions one address may hold, how
//! long a session may live, and how long a handshake may take.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Server limits. The defaults suit a public server: enough for one client's idle check
/// (a few hundred probe connections) and a throughput test, not enough to exhaust the host.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once from one client IP address.
    pub connections_per_ip: u32,
    /// Connections open at once in total.
    pub connections_total: u32,
    /// Live sessions at once from one client IP address.
    pub sessions_per_ip: u32,
    /// Hard end of any session, however active (the idle check's horizon is 2 h 10 min).
    pub session_max: Duration,
    /// How long a session and its results are kept after its last connection closed, so a
    /// client that lost its control connection can resume or fetch results.
    pub session_linger: Duration,
    /// Deadline for the preamble and Hello of a new connection.
    pub handshake_timeout: Duration,
    /// Longest throughput test a client may ask for.
    pub max_test_duration: Duration,
    /// UDP bytes the server may send for one session in total.
    pub udp_bytes_per_session: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections_per_ip: 1024,
            connections_total: 200_000,
            sessions_per_ip: 8,
            session_max: Duration::from_secs(3 * 3600),
            session_linger: Duration::from_secs(15 * 60),
            handshake_timeout: Duration::from_secs(10),
            max_test_duration: Duration::from_secs(60),
            udp_bytes_per_session: 4 * 1024 * 1024,
        }
    }
}

/// Counts open connections per IP and in total; a [`ConnectionPermit`] releases its slot on drop.
#[derive(Debug, Default)]
pub struct ConnectionCounter {
    inner: Arc<Mutex<CounterState>>,
}

#[derive(Debug, Default)]
struct CounterState {
    total: u32,
    per_ip: HashMap<IpAddr, u32>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitError {
    PerIp(u32),
    Total(u32),
}

impl ConnectionCounter {
    pub fn try_admit(&self, ip: IpAddr, limits: &Limits) -> Result<ConnectionPermit, AdmitError> {
        let mut state = lock(&self.inner);
        if state.total >= limits.connections_total {
            return Err(AdmitError::Total(limits.connections_total));
        }
        let count = state.per_ip.entry(ip).or_insert(0);
        if *count >= limits.connections_per_ip {
            return Err(AdmitError::PerIp(limits.connections_per_ip));
        }
        *count += 1;
        state.total += 1;
        Ok(ConnectionPermit {
            counter: self.inner.clone(),
            ip,
        })
    }

    pub fn total(&self) -> u32 {
        lock(&self.inner).total
    }
}

/// One admitted connection; dropping it frees the slot.
#[derive(Debug)]
pub struct ConnectionPermit {
    counter: Arc<Mutex<CounterState>>,
    ip: IpAddr,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut state = lock(&self.counter);
        state.total = state.total.saturating_sub(1);
        if let Some(count) = state.per_ip.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                state.per_ip.remove(&self.ip);
            }
        }
    }
}

/// A poisoned counter only means another task panicked mid-update of plain integers; the
/// numbers are still usable, so recover rather than take the whole server down.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_ip_and_total_limits_hold_and_release() {
        let limits = Limits {
            connections_per_ip: 2,
            connections_total: 3,
            ..Limits::default()
        };
        let c = ConnectionCounter::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let p1 = c.try_admit(a, &limits).unwrap();
        let _p2 = c.try_admit(a, &limits).unwrap();
        assert_eq!(c.try_admit(a, &limits).unwrap_err(), AdmitError::PerIp(2));
        let _p3 = c.try_admit(b, &limits).unwrap();
        assert_eq!(c.try_admit(b, &limits).unwrap_err(), AdmitError::Total(3));
        drop(p1);
        assert!(c.try_admit(b, &limits).is_ok());
    }
}
