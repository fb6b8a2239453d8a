//! The HTTP/1 connections behind the router, served with hyper directly because `axum::serve`
//! has neither timeouts nor a connection cap: a connection that has not sent a complete request
//! head within the idle timeout (after it opened, or after its previous answer) is closed, the
//! request head is bounded in size, and at most `max_connections` stay open — at the cap the
//! oldest connection that is not in a request is closed to make room, so idle or slow
//! connections can never lock out `/-/healthy` or a scrape.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Largest request head (request line and headers) read; hyper's minimum buffer is 8 KiB.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long shutdown waits for connections finishing their answer.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// Pause after a failed accept (e.g. out of descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub idle_timeout: Duration,
}

struct Entry {
    /// Requests of this connection being answered now.
    in_request: Arc<AtomicUsize>,
    close: Arc<Notify>,
    asked_to_close: bool,
}

/// Open connections by age (ids only grow).
#[derive(Default)]
struct Table {
    next_id: u64,
    live: BTreeMap<u64, Entry>,
}

struct Admitted {
    id: u64,
    in_request: Arc<AtomicUsize>,
    close: Arc<Notify>,
}

impl Table {
    /// Room for one more connection: below the cap, or by asking the oldest connection that is
    /// not in a request to close. `None` when every connection is answering a request.
    fn admit(&mut self, max: usize) -> Option<Admitted> {
        let closing = self.live.values().filter(|e| e.asked_to_close).count();
        if self.live.len() - closing >= max {
            let victim = self
                .live
                .values_mut()
                .find(|e| !e.asked_to_close && e.in_request.load(Ordering::Acquire) == 0)?;
            victim.asked_to_close = true;
            victim.close.notify_one();
        }
        // Connections asked to close go within moments (they are idle); never let them and the
        // new ones add up to more than twice the cap.
        if self.live.len() >= 2 * max {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let entry = Entry {
            in_request: Arc::default(),
            close: Arc::default(),
            asked_to_close: false,
        };
        let admitted = Admitted {
            id,
            in_request: entry.in_request.clone(),
            close: entry.close.clone(),
        };
        self.live.insert(id, entry);
        Some(admitted)
    }
}

type SharedTable = Arc<Mutex<Table>>;

fn lock(table: &SharedTable) -> std::sync::MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|p| p.into_inner())
}

/// Accept and serve connections until `shutdown` fires, then let open ones finish their answer
/// (for at most a few seconds).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let table = SharedTable::default();
    let mut tasks = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => break,
        };
        while tasks.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Some(admitted) = lock(&table).admit(limits.max_connections) else {
            tracing::info!(
                "refused a connection: all {} connections are answering requests",
                limits.max_connections
            );
            continue; // dropping the stream closes it
        };
        tasks.spawn(serve_one(
            stream,
            app.clone(),
            limits.idle_timeout,
            admitted,
            table.clone(),
            shutdown.clone(),
        ));
    }
    drop(listener);
    let finished = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, finished)
        .await
        .is_err()
    {
        tasks.abort_all();
    }
    Ok(())
}

/// Counts a request as in progress while it is answered (also when the answer is dropped).
struct InRequest(Arc<AtomicUsize>);

impl InRequest {
    fn enter(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        InRequest(counter.clone())
    }
}

impl Drop for InRequest {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn serve_one(
    stream: TcpStream,
    app: Router,
    idle_timeout: Duration,
    admitted: Admitted,
    table: SharedTable,
    shutdown: CancellationToken,
) {
    let router = TowerToHyperService::new(app);
    let in_request = admitted.in_request.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let guard = InRequest::enter(&in_request);
        let answer = hyper::service::Service::call(&router, req);
        async move {
            let r = answer.await;
            drop(guard);
            r
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // hyper starts this timer whenever it waits for a request head: on a new connection and
        // between keep-alive requests, so it is the idle timeout too.
        .header_read_timeout(idle_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!("HTTP connection ended: {e}");
                }
                break;
            }
            _ = admitted.close.notified(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = shutdown.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
    lock(&table).live.remove(&admitted.id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room() {
        let mut t = Table::default();
        let a = t.admit(2).unwrap();
        let b = t.admit(2).unwrap();
        a.in_request.fetch_add(1, Ordering::AcqRel);
        // a is answering a request, so b (the oldest idle one) is asked to close.
        let c = t.admit(2).unwrap();
        assert!(!t.live[&a.id].asked_to_close);
        assert!(t.live[&b.id].asked_to_close);
        assert!(!t.live[&c.id].asked_to_close);
        // Every connection not asked to close is now in a request: no room.
        c.in_request.fetch_add(1, Ordering::AcqRel);
        assert!(t.admit(2).is_none());
        // b went: still no room while a and c answer requests.
        t.live.remove(&b.id);
        assert!(t.admit(2).is_none());
        c.in_request.fetch_sub(1, Ordering::AcqRel);
        assert!(t.admit(2).is_some());
        assert!(t.live[&c.id].asked_to_close);
    }
}
