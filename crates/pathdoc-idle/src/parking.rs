//! The parking lot: thousands of idle sockets watched by one thread and one epoll set, with no
//! task, future or buffer per socket.
//!
//! An idle-check probe connection is silent for minutes to hours; giving each one a tokio task
//! (and its reader, channels and I/O registration) costs several KiB while it waits. A parked
//! socket costs only its [`ParkedSocket`] (descriptor, token, one `Arc`) and one map entry. The
//! thread calls the lot's handler with the socket's key when the socket becomes readable, hangs
//! up or errors; the owner of the [`ParkedSocket`] does the reading and writing, non-blocking.
//!
//! Built on `mio` (the portable epoll layer tokio itself uses): its `Waker` stops the thread
//! at once, and its registrations are edge-triggered, so the handler must read until
//! `WouldBlock` (or close the socket) to be called again.

use std::collections::HashMap;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

/// Token of the waker that stops the thread (parked sockets count up from 0).
const WAKE: Token = Token(usize::MAX);
/// Longest the thread sleeps without checking its stop flag.
const POLL_DEADLINE: Duration = Duration::from_secs(1);
/// Readiness events taken from the kernel per wait.
const EVENTS_PER_WAIT: usize = 1024;

/// State shared by the lot's owner, its thread and every parked socket.
struct LotInner<K> {
    registry: mio::Registry,
    waker: Waker,
    stop: AtomicBool,
    /// Key of every parked socket, by token. Tokens are never reused, so a late event of a
    /// socket that has gone cannot reach its successor.
    parked: Mutex<HashMap<u64, K>>,
    next_token: AtomicU64,
}

/// One watching thread. Dropping the lot stops the thread (within [`POLL_DEADLINE`]); sockets
/// still parked stay open until their owners drop them.
pub(crate) struct ParkingLot<K> {
    inner: Arc<LotInner<K>>,
}

/// A socket in the lot. Dropping it takes it out of the epoll set and closes it.
pub(crate) struct ParkedSocket<K> {
    socket: TcpStream,
    token: u64,
    lot: Arc<LotInner<K>>,
}

impl<K: Clone + Send + 'static> ParkingLot<K> {
    /// Start the thread. `handler(key, token)` runs on it for every readiness event of a parked
    /// socket; it must not park or drop sockets of other lots while holding locks the owners of
    /// this lot's sockets take before dropping them (the lot's own lock is never held while it
    /// runs).
    pub(crate) fn start(
        name: &str,
        handler: impl Fn(&K, u64) + Send + 'static,
    ) -> std::io::Result<Self> {
        let poll = Poll::new()?;
        let inner = Arc::new(LotInner {
            registry: poll.registry().try_clone()?,
            waker: Waker::new(poll.registry(), WAKE)?,
            stop: AtomicBool::new(false),
            parked: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(0),
        });
        let thread_inner = inner.clone();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || watch(poll, thread_inner, handler))?;
        Ok(ParkingLot { inner })
    }

    /// Park `socket` (it must be non-blocking) under `key`. Events already pending (data that
    /// arrived before parking) are reported at once.
    pub(crate) fn park(&self, socket: TcpStream, key: K) -> std::io::Result<ParkedSocket<K>> {
        let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed);
        let mio_token = Token(usize::try_from(token).unwrap_or(usize::MAX - 1));
        lock(&self.inner.parked).insert(token, key);
        let fd = socket.as_raw_fd();
        if let Err(e) =
            self.inner
                .registry
                .register(&mut SourceFd(&fd), mio_token, Interest::READABLE)
        {
            lock(&self.inner.parked).remove(&token);
            return Err(e);
        }
        Ok(ParkedSocket {
            socket,
            token,
            lot: self.inner.clone(),
        })
    }

    /// Sockets parked now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.inner.parked).len()
    }
}

impl<K> Drop for ParkingLot<K> {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        let _ = self.inner.waker.wake();
    }
}

impl<K> ParkedSocket<K> {
    pub(crate) fn socket(&self) -> &TcpStream {
        &self.socket
    }

    pub(crate) fn token(&self) -> u64 {
        self.token
    }
}

impl<K> Drop for ParkedSocket<K> {
    fn drop(&mut self) {
        let fd = self.socket.as_raw_fd();
        let _ = self.lot.registry.deregister(&mut SourceFd(&fd));
        lock(&self.lot.parked).remove(&self.token);
        // The socket itself closes when the field drops, after this.
    }
}

fn watch<K: Clone>(mut poll: Poll, inner: Arc<LotInner<K>>, handler: impl Fn(&K, u64)) {
    let mut events = Events::with_capacity(EVENTS_PER_WAIT);
    while !inner.stop.load(Ordering::Acquire) {
        if let Err(e) = poll.poll(&mut events, Some(POLL_DEADLINE)) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                tracing::warn!(error = %e, "parking lot: epoll wait failed");
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        for event in events.iter() {
            if event.token() == WAKE {
                continue;
            }
            let token = event.token().0 as u64;
            // Never hold the lot's lock while the handler runs: it takes the owners' locks,
            // and owners drop parked sockets (which takes the lot's lock) under theirs.
            let key = lock(&inner.parked).get(&token).cloned();
            if let Some(key) = key {
                let run = std::panic::AssertUnwindSafe(|| handler(&key, token));
                if std::panic::catch_unwind(run).is_err() {
                    tracing::error!(token, "parking lot: handler panicked; socket left parked");
                }
            }
        }
    }
}

/// A poisoned lock only means a handler panicked between plain updates; keep serving.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, server)
    }

    #[test]
    fn reports_data_pending_before_parking_and_later_hangups() {
        let (tx, rx) = mpsc::channel();
        let lot = ParkingLot::start("test-lot", move |key: &u32, _| {
            tx.send(*key).unwrap();
        })
        .unwrap();
        let (mut client, server) = pair();
        client.write_all(b"early").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let parked = lot.park(server, 7).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(2)).unwrap(), 7);
        let mut buf = [0u8; 16];
        assert_eq!(parked.socket().read(&mut buf).unwrap(), 5);
        drop(client);
        assert_eq!(rx.recv_timeout(Duration::from_secs(2)).unwrap(), 7);
        assert_eq!(parked.socket().read(&mut buf).unwrap(), 0);
        assert_eq!(lot.len(), 1);
        drop(parked);
        assert_eq!(lot.len(), 0);
    }

    #[test]
    fn dropped_sockets_report_nothing_more() {
        let (tx, rx) = mpsc::channel();
        let lot = ParkingLot::start("test-lot", move |key: &u32, _| {
            tx.send(*key).unwrap();
        })
        .unwrap();
        let (mut client, server) = pair();
        let parked = lot.park(server, 1).unwrap();
        drop(parked);
        let _ = client.write_all(b"late");
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    }
}
