//! The server side of the idle check: a [`Service`] that keeps probe connections silent, writes
//! to them when the client says so, answers client pings, tests UDP bindings, and remembers what
//! it saw so a client that lost its control connection can resume and fetch the results.
//!
//! Probe connections are parked, not served by tasks: [`IdleService::data`] records the probe,
//! takes the socket out of tokio and hands it with its connection permit to the service's
//! [`ParkingLot`] (one epoll thread for every session), then returns. The lot's thread answers
//! pings and records how connections end; a `Fire` writes the probe on the socket directly from
//! the control task. An idle probe thus costs its record and a parked socket (a few hundred
//! bytes) instead of a task, a reader and two channels (issue #3 §9: ≤ 2 KiB per connection).
//!
//! Bounds: at most [`MAX_PROBES_PER_SESSION`] probe records per session and
//! [`MAX_TAGS_PER_REQUEST`] tags per fire request (so a reply fits a frame); probe frames from
//! the client are at most [`PROBE_FRAME_MAX`] bytes; probe writes carry a TCP user timeout so
//! an unacknowledged probe ends its connection instead of being retried for 15 minutes; UDP goes
//! only to addresses of the session within its byte budget. A session's parked sockets close
//! when it finishes, is reaped or the server shuts down.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pathdoc_proto::{CheckKind, FramedConn};
use pathdoc_server::{next_request, ConnectionPermit, Service, ServiceError, Session};
use serde::Serialize;

use crate::duration::to_ms;
use crate::parking::{ParkedSocket, ParkingLot};
use crate::proto::{
    udp_kind, ControlReply, ControlRequest, Fired, ProbeMessage, ProbeRequest, RefusedBindings,
    ServerProbeRecord, ServerSawEnd, UdpPayload,
};

/// Probe connections plus UDP bindings one session may register.
pub const MAX_PROBES_PER_SESSION: usize = 2048;
/// Tags one `Fire`/`FireUdp` request may name: its `Fired` reply (≤ ~110 bytes per tag) then
/// stays below the 64 KiB frame limit. Clients split larger requests.
pub const MAX_TAGS_PER_REQUEST: usize = 500;
/// Longest frame a client may send on a probe connection (a ping is ~40 bytes).
pub const PROBE_FRAME_MAX: usize = 1024;
/// Records per [`ControlReply::Results`] page (keeps a frame far below 64 KiB).
const RESULTS_PAGE: usize = 120;
/// A control connection that sends nothing for this long is considered gone (clients send a
/// heartbeat at least every 15 s).
const CONTROL_SILENCE: Duration = Duration::from_secs(60);
/// After a probe write, how long the kernel may wait for its acknowledgement before giving up.
const PROBE_USER_TIMEOUT: Duration = Duration::from_secs(20);
/// Bytes the parking thread reads from one probe connection per readiness event before it
/// calls the connection a flood and closes it (a well-behaved client sends one ping per test).
const READ_BUDGET_PER_EVENT: usize = 16 * 1024;

/// The idle check's server side.
#[derive(Default)]
pub struct IdleService {
    /// Started on the first probe connection, so a process that never serves one has no thread.
    lot: Mutex<Option<Arc<ParkingLot<ProbeKey>>>>,
}

impl std::fmt::Debug for IdleService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleService").finish_non_exhaustive()
    }
}

impl IdleService {
    pub fn new() -> Self {
        IdleService::default()
    }

    fn lot(&self) -> std::io::Result<Arc<ParkingLot<ProbeKey>>> {
        let mut lot = lock(&self.lot);
        if let Some(l) = lot.as_ref() {
            return Ok(l.clone());
        }
        let started = Arc::new(ParkingLot::start("pathdoc-idle-park", on_ready)?);
        *lot = Some(started.clone());
        Ok(started)
    }
}

/// What the parking lot knows of a parked probe: enough to find its entry. Holding the session
/// keeps it from being reaped as unused while probes are open (as a task per probe did).
#[derive(Clone)]
struct ProbeKey {
    session: Arc<Session>,
    tag: u32,
}

#[derive(Default)]
struct IdleState {
    probes: Mutex<HashMap<u32, ProbeEntry>>,
    /// This session's share of the server's probe-record budget: one unit per record, given
    /// back when the session (and its results) ends.
    records: Mutex<Option<pathdoc_server::BudgetHold>>,
    refresh: Mutex<Option<tokio_util_like::Abort>>,
    /// A task waits for the session's end to close its parked sockets (one per session).
    watched: AtomicBool,
    /// UDP bindings the record budget refused, reported with the results.
    udp_refused: Mutex<UdpRefused>,
}

/// UDP bindings refused for want of room. Tags are kept (at most a session's probe count) so a
/// binding whose `OPEN` is retried counts once, and one admitted on a retry not at all.
#[derive(Default)]
struct UdpRefused {
    tags: std::collections::HashSet<u32>,
    last: Option<pathdoc_server::Refuse>,
}

impl UdpRefused {
    /// A refused `OPEN` of `tag`; true the first time this tag is refused (to log it once).
    fn refused(&mut self, tag: u32, refuse: pathdoc_server::Refuse) -> bool {
        self.last = Some(refuse);
        self.tags.len() < MAX_PROBES_PER_SESSION && self.tags.insert(tag)
    }

    fn report(&self) -> Option<RefusedBindings> {
        let last = self.last.as_ref().filter(|_| !self.tags.is_empty())?;
        Some(RefusedBindings {
            count: self.tags.len() as u32,
            message: last.message.clone(),
            reason: last.reason.to_string(),
            limit: last.limit,
        })
    }
}

struct ProbeEntry {
    record: ServerProbeRecord,
    last_activity: Instant,
    /// The parked TCP connection; `None` for UDP bindings and ended connections.
    conn: Option<ParkedConn>,
}

/// A live probe connection. Dropping it closes the socket and frees the client's connection slot.
struct ParkedConn {
    socket: ParkedSocket<ProbeKey>,
    _permit: ConnectionPermit,
    /// Start of a frame that arrived in pieces; empty (no allocation) otherwise.
    partial: Vec<u8>,
    default_ttl: u8,
    /// TTL-limited keepalives are on (culprit search), until the next fire.
    warm: bool,
}

/// Shortest keepalive interval a client may ask for (kernel granularity is 1 s anyway).
const MIN_KEEP_WARM: Duration = Duration::from_secs(1);

/// A tiny abort-on-drop handle for the refresh task.
mod tokio_util_like {
    pub struct Abort(pub tokio::task::JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl IdleState {
    /// Count one more probe record against the session's client and the server.
    fn take_record(&self, session: &Session) -> Result<(), pathdoc_server::Refuse> {
        let mut records = lock(&self.records);
        records
            .get_or_insert_with(|| session.budgets().probes.empty(session.client))
            .try_grow(1)
    }
}

fn since(session: &Session, at: Instant) -> u64 {
    since_created(session.created, at)
}

fn since_created(created: Instant, at: Instant) -> u64 {
    to_ms(at.saturating_duration_since(created))
}

#[async_trait]
impl Service for IdleService {
    fn check(&self) -> CheckKind {
        CheckKind::Idle
    }

    async fn control(
        &self,
        session: Arc<Session>,
        mut conn: FramedConn,
        _resumed: bool,
    ) -> Result<(), ServiceError> {
        let state = session.state::<IdleState>();
        let what = "an idle-check control message";
        let malformed = |message| ControlReply::Error { message };
        while let Some(req) =
            next_request::<ControlRequest, _>(&session, &mut conn, CONTROL_SILENCE, what, malformed)
                .await?
        {
            let reply = match req {
                ControlRequest::Heartbeat { seq } => ControlReply::HeartbeatAck {
                    seq,
                    server_elapsed_ms: since(&session, Instant::now()),
                },
                ControlRequest::Fire { tags, .. } | ControlRequest::FireUdp { tags, .. }
                    if tags.len() > MAX_TAGS_PER_REQUEST =>
                {
                    ControlReply::Error {
                        message: format!(
                            "{} tags in one fire request; at most {MAX_TAGS_PER_REQUEST}",
                            tags.len()
                        ),
                    }
                }
                ControlRequest::Fire { tags, nonce } => ControlReply::Fired {
                    fired: fire_tcp(&session, &state, &distinct(tags), nonce),
                },
                ControlRequest::FireUdp { tags, nonce } => ControlReply::Fired {
                    fired: fire_udp(&session, &state, &distinct(tags), nonce).await,
                },
                ControlRequest::KeepWarm {
                    tags,
                    ttl,
                    interval_ms,
                } => keep_warm(&session, &state, &tags, ttl, interval_ms),
                ControlRequest::UdpRefresh { tags, interval_ms } => {
                    start_refresh(&session, &state, distinct(tags), interval_ms)
                }
                ControlRequest::Results { after } => {
                    let probes = lock(&state.probes);
                    let mut records: Vec<ServerProbeRecord> = probes
                        .values()
                        .filter(|p| after.is_none_or(|a| p.record.tag > a))
                        .map(|p| p.record.clone())
                        .collect();
                    records.sort_by_key(|r| r.tag);
                    let more = records.len() > RESULTS_PAGE;
                    records.truncate(RESULTS_PAGE);
                    let udp_refused = lock(&state.udp_refused).report();
                    ControlReply::Results {
                        records,
                        more,
                        udp_refused,
                    }
                }
                ControlRequest::Finish => {
                    *lock(&state.refresh) = None;
                    close_all(&state, session.created);
                    conn.send(&ControlReply::Ok).await?;
                    return Ok(());
                }
            };
            conn.send(&reply).await?;
        }
        Ok(())
    }

    fn admit_data(
        &self,
        session: &Arc<Session>,
        tag: u32,
    ) -> Result<Option<pathdoc_server::Reservation>, pathdoc_server::Refuse> {
        let state = session.state::<IdleState>();
        let known = lock(&state.probes).contains_key(&tag);
        if !known {
            state.take_record(session)?;
        }
        Ok(None)
    }

    async fn data(
        &self,
        session: Arc<Session>,
        tag: u32,
        conn: FramedConn,
        permit: ConnectionPermit,
    ) -> Result<(), ServiceError> {
        let state = session.state::<IdleState>();
        let observed = conn.peer();
        let lot = self.lot()?;
        // Out of tokio: the socket is watched by the lot's thread from here on.
        let stream = conn.into_inner().into_std()?;
        stream.set_nonblocking(true)?;
        let default_ttl = pathdoc_sys::pmtu::hop_limit(&stream)
            .map_or(64, |t| u8::try_from(t).unwrap_or(u8::MAX));
        {
            let mut probes = lock(&state.probes);
            if probes.len() >= MAX_PROBES_PER_SESSION && !probes.contains_key(&tag) {
                return Err(ServiceError::BadRequest(format!(
                    "more than {MAX_PROBES_PER_SESSION} probes"
                )));
            }
            if probes.get(&tag).is_some_and(|p| p.conn.is_some()) {
                return Err(ServiceError::BadRequest(format!(
                    "probe tag {tag} is already in use"
                )));
            }
            // Checked under the lock the session-end watcher takes: a probe parked after the
            // watcher closed the others would never be closed.
            if session.cancel.is_cancelled() {
                return Ok(());
            }
            let key = ProbeKey {
                session: session.clone(),
                tag,
            };
            // Parked under the lock: an event that arrives at once finds the entry.
            let socket = lot.park(stream, key)?;
            let now = Instant::now();
            probes.insert(
                tag,
                ProbeEntry {
                    record: ServerProbeRecord {
                        tag,
                        udp: false,
                        observed,
                        opened_ms: since(&session, now),
                        fired_ms: None,
                        pinged_ms: None,
                        seen_from: None,
                        ended_ms: None,
                        end: None,
                    },
                    last_activity: now,
                    conn: Some(ParkedConn {
                        socket,
                        _permit: permit,
                        partial: Vec::new(),
                        default_ttl,
                        warm: false,
                    }),
                },
            );
        }
        if !state.watched.swap(true, Ordering::AcqRel) {
            // Holds the state, not the session: a session with no connection left must still
            // look unused to the reaper.
            let cancel = session.cancel.clone();
            let created = session.created;
            let watched = state.clone();
            tokio::spawn(async move {
                cancel.cancelled().await;
                *lock(&watched.refresh) = None;
                close_all(&watched, created);
            });
        }
        Ok(())
    }

    async fn udp(
        &self,
        session: Arc<Session>,
        kind: u16,
        payload: &[u8],
        from: SocketAddr,
    ) -> Option<Vec<u8>> {
        let msg = UdpPayload::decode(payload)?;
        if kind == udp_kind::TRACE {
            // Echo so the client learns the hop count; nothing is stored.
            let reply = UdpPayload {
                tag: msg.tag,
                nonce: msg.nonce,
                observed: None,
            }
            .encode(0);
            return (reply.len() <= payload.len()).then_some(reply);
        }
        let state = session.state::<IdleState>();
        let now = Instant::now();
        let mut probes = lock(&state.probes);
        match kind {
            udp_kind::OPEN => {
                if !probes.contains_key(&msg.tag) {
                    if probes.len() >= MAX_PROBES_PER_SESSION {
                        return None;
                    }
                    // Over the record budget: no binding, no answer (no datagram may carry
                    // the words); the client learns why with the results.
                    if let Err(refuse) = state.take_record(&session) {
                        if lock(&state.udp_refused).refused(msg.tag, refuse.clone()) {
                            session.refused(from, &refuse);
                        }
                        return None;
                    }
                }
                lock(&state.udp_refused).tags.remove(&msg.tag);
                probes.insert(
                    msg.tag,
                    ProbeEntry {
                        record: ServerProbeRecord {
                            tag: msg.tag,
                            udp: true,
                            observed: from,
                            opened_ms: since(&session, now),
                            fired_ms: None,
                            pinged_ms: None,
                            seen_from: None,
                            ended_ms: None,
                            end: None,
                        },
                        last_activity: now,
                        conn: None,
                    },
                );
            }
            udp_kind::PROBE => {
                let p = probes.get_mut(&msg.tag).filter(|p| p.record.udp)?;
                p.record.pinged_ms = Some(since(&session, now));
                p.last_activity = now;
                if from != p.record.observed {
                    p.record.seen_from = Some(from);
                }
            }
            _ => return None,
        }
        let reply = UdpPayload {
            tag: msg.tag,
            nonce: msg.nonce,
            observed: Some(from),
        }
        .encode(0);
        (reply.len() <= payload.len()).then_some(reply)
    }
}

/// The parking thread's handler: a parked probe connection is readable, hung up or in error.
fn on_ready(key: &ProbeKey, token: u64) {
    let session = &key.session;
    let state = session.state::<IdleState>();
    let mut probes = lock(&state.probes);
    let Some(entry) = probes.get_mut(&key.tag) else {
        return;
    };
    let ProbeEntry {
        record,
        last_activity,
        conn,
    } = entry;
    let Some(live) = conn.as_mut().filter(|c| c.socket.token() == token) else {
        return;
    };
    if let Some(end) = serve_readable(live, record, last_activity, session.created) {
        end_probe(entry, session.created, end);
        drop(probes);
        session.touch();
    }
}

/// Read everything the client sent, answer its pings; `Some` when the connection is over.
fn serve_readable(
    conn: &mut ParkedConn,
    record: &mut ServerProbeRecord,
    last_activity: &mut Instant,
    created: Instant,
) -> Option<ServerSawEnd> {
    let mut buf = [0u8; 512];
    let mut budget = READ_BUDGET_PER_EVENT;
    loop {
        let n = match conn.socket.socket().read(&mut buf) {
            Ok(0) => return Some(ServerSawEnd::ClosedByPeer),
            Ok(n) => n,
            // Edge-triggered: drained, the next event comes with the next bytes.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Some(classify_io(&e)),
        };
        let Some(left) = budget.checked_sub(n) else {
            return Some(ServerSawEnd::Error(format!(
                "more than {READ_BUDGET_PER_EVENT} bytes at once on a probe connection"
            )));
        };
        budget = left;
        let socket = conn.socket.socket();
        let answered = split_frames(&mut conn.partial, &buf[..n], PROBE_FRAME_MAX, |frame| {
            let request: ProbeRequest = serde_json::from_slice(frame)
                .map_err(|e| ServerSawEnd::Error(format!("malformed probe message: {e}")))?;
            let ProbeRequest::Ping { nonce } = request;
            let now = Instant::now();
            let idle_ms = to_ms(now.saturating_duration_since(*last_activity));
            *last_activity = now;
            record.pinged_ms = Some(since_created(created, now));
            let pong = ProbeMessage::Pong {
                nonce,
                observed: record.observed,
                idle_ms,
            };
            send_frame(socket, &pong).map_err(|e| e.end())
        });
        if let Err(end) = answered {
            return Some(end);
        }
    }
}

/// Record how a probe connection ended and close it.
fn end_probe(entry: &mut ProbeEntry, created: Instant, end: ServerSawEnd) {
    entry.record.ended_ms = Some(since_created(created, Instant::now()));
    entry.record.end = Some(end);
    entry.conn = None;
}

/// Close every parked probe connection of a session (finish, session end, shutdown).
fn close_all(state: &IdleState, created: Instant) {
    let mut probes = lock(&state.probes);
    for entry in probes.values_mut() {
        if entry.conn.is_some() {
            end_probe(entry, created, ServerSawEnd::ServerClosed);
        }
    }
}

/// Cut complete `u32`-BE-length-prefixed frames out of `chunk` (after what `partial` holds)
/// and hand each body to `on_frame`; keep an incomplete tail in `partial`. `partial` is only
/// allocated while a frame is split across reads, and never holds more than one frame + chunk.
/// Public for the fuzz target (fuzz/): it parses whatever a client sends on a probe connection.
pub fn split_frames(
    partial: &mut Vec<u8>,
    chunk: &[u8],
    max: usize,
    mut on_frame: impl FnMut(&[u8]) -> Result<(), ServerSawEnd>,
) -> Result<(), ServerSawEnd> {
    let joined;
    let data: &[u8] = if partial.is_empty() {
        chunk
    } else {
        partial.extend_from_slice(chunk);
        joined = std::mem::take(partial);
        &joined
    };
    let mut at = 0;
    while let Some(header) = data.get(at..at + 4) {
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if len > max {
            return Err(ServerSawEnd::Error(format!(
                "probe frame of {len} bytes exceeds the {max}-byte limit"
            )));
        }
        let Some(body) = data.get(at + 4..at + 4 + len) else {
            break;
        };
        on_frame(body)?;
        at += 4 + len;
    }
    if at < data.len() {
        *partial = data[at..].to_vec();
    }
    Ok(())
}

/// Why a non-blocking frame write failed.
enum SendError {
    /// Nothing or only part of the frame fit the socket's send buffer.
    Full {
        written: usize,
    },
    Io(std::io::Error),
}

impl SendError {
    fn end(&self) -> ServerSawEnd {
        match self {
            SendError::Full { written } => ServerSawEnd::Error(format!(
                "the socket send buffer was full ({written} bytes of a frame written): the client is not reading"
            )),
            SendError::Io(e) => classify_io(e),
        }
    }
}

/// Write one frame without blocking. A probe connection carries at most one small frame per
/// test, so its send buffer is empty and the frame fits; anything else is an error.
fn send_frame<T: Serialize>(mut socket: &std::net::TcpStream, msg: &T) -> Result<(), SendError> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, msg).map_err(|e| SendError::Io(e.into()))?;
    let len = u32::try_from(frame.len() - 4).unwrap_or(u32::MAX);
    frame[..4].copy_from_slice(&len.to_be_bytes());
    loop {
        return match socket.write(&frame) {
            Ok(n) if n == frame.len() => Ok(()),
            Ok(written) => Err(SendError::Full { written }),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                Err(SendError::Full { written: 0 })
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => Err(SendError::Io(e)),
        };
    }
}

fn classify_io(e: &std::io::Error) -> ServerSawEnd {
    match e.kind() {
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => {
            ServerSawEnd::ResetByPeer
        }
        std::io::ErrorKind::TimedOut => ServerSawEnd::Unacknowledged,
        _ => ServerSawEnd::Error(e.to_string()),
    }
}

fn keep_warm(
    session: &Session,
    state: &IdleState,
    tags: &[u32],
    ttl: u8,
    interval_ms: u64,
) -> ControlReply {
    let interval = Duration::from_millis(interval_ms);
    if interval < MIN_KEEP_WARM || ttl == 0 {
        return ControlReply::Error {
            message: format!(
                "keep-warm needs an interval of at least {} ms and a TTL of at least 1",
                MIN_KEEP_WARM.as_millis()
            ),
        };
    }
    // Unanswered keepalives must not end the connection: with a user timeout set the kernel
    // ignores TCP_KEEPCNT and waits this long.
    let hold = session.deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(60);
    let ka = socket2::TcpKeepalive::new()
        .with_time(interval)
        .with_interval(interval);
    let mut probes = lock(&state.probes);
    let mut missing = 0;
    for tag in tags.iter().take(MAX_PROBES_PER_SESSION) {
        let Some(entry) = probes.get_mut(tag).filter(|p| p.conn.is_some()) else {
            missing += 1;
            continue;
        };
        let setup = entry.conn.as_mut().map(|conn| {
            let sock = socket2::SockRef::from(conn.socket.socket());
            let r = pathdoc_sys::pmtu::set_hop_limit(conn.socket.socket(), u32::from(ttl))
                .and_then(|_| sock.set_tcp_user_timeout(Some(hold)))
                .and_then(|_| sock.set_tcp_keepalive(&ka));
            conn.warm = r.is_ok();
            r
        });
        if let Some(Err(e)) = setup {
            end_probe(
                entry,
                session.created,
                ServerSawEnd::Error(format!("keep-warm setup: {e}")),
            );
        }
    }
    if missing == 0 {
        ControlReply::Ok
    } else {
        ControlReply::Error {
            message: format!("{missing} of {} probe connections not found", tags.len()),
        }
    }
}

/// Write the probe on each named connection now, from the caller's task (no hand-off).
fn fire_tcp(session: &Session, state: &IdleState, tags: &[u32], nonce: u64) -> Vec<Fired> {
    let now = Instant::now();
    let mut probes = lock(&state.probes);
    tags.iter()
        .take(MAX_TAGS_PER_REQUEST)
        .map(|&tag| match probes.get_mut(&tag) {
            Some(p) if !p.record.udp => {
                let idle = to_ms(now.saturating_duration_since(p.last_activity));
                let Some(conn) = p.conn.as_mut() else {
                    return Fired {
                        tag,
                        idle_ms: Some(idle),
                        sent: false,
                        error: Some("connection already ended on the server".into()),
                    };
                };
                let sock = socket2::SockRef::from(conn.socket.socket());
                if conn.warm {
                    // Stop the TTL-limited keepalives and let the probe and its ACKs travel
                    // the whole path.
                    let _ = sock.set_keepalive(false);
                    let _ = pathdoc_sys::pmtu::set_hop_limit(
                        conn.socket.socket(),
                        u32::from(conn.default_ttl),
                    );
                    conn.warm = false;
                }
                // Bound how long an unacknowledged probe is retransmitted.
                let _ = sock.set_tcp_user_timeout(Some(PROBE_USER_TIMEOUT));
                let msg = ProbeMessage::Probe {
                    nonce,
                    observed: p.record.observed,
                    idle_ms: idle,
                };
                let written = send_frame(conn.socket.socket(), &msg);
                // A probe that left (even if the connection then failed) was sent, as when a
                // task wrote it: the client judges it by what arrives and how the server saw
                // the connection end. Nothing written at all means not sent.
                let sent = !matches!(written, Err(SendError::Full { written: 0 }));
                if sent {
                    p.last_activity = now;
                    p.record.fired_ms = Some(since(session, now));
                }
                let error = written.err().map(|e| {
                    let end = e.end();
                    let message = format!("probe write failed: {end:?}");
                    end_probe(p, session.created, end);
                    message
                });
                Fired {
                    tag,
                    idle_ms: Some(idle),
                    sent,
                    error,
                }
            }
            _ => Fired {
                tag,
                idle_ms: None,
                sent: false,
                error: Some("no such probe connection".into()),
            },
        })
        .collect()
}

async fn fire_udp(session: &Session, state: &IdleState, tags: &[u32], nonce: u64) -> Vec<Fired> {
    let now = Instant::now();
    let targets: Vec<(u32, Option<(SocketAddr, u64)>)> = {
        let mut probes = lock(&state.probes);
        tags.iter()
            .take(MAX_PROBES_PER_SESSION)
            .map(|&tag| match probes.get_mut(&tag) {
                Some(p) if p.record.udp => {
                    let idle = to_ms(now.saturating_duration_since(p.last_activity));
                    p.last_activity = now;
                    p.record.fired_ms = Some(since(session, now));
                    (tag, Some((p.record.observed, idle)))
                }
                _ => (tag, None),
            })
            .collect()
    };
    let mut out = Vec::new();
    for (tag, target) in targets {
        out.push(match target {
            Some((to, idle)) => {
                let payload = UdpPayload {
                    tag,
                    nonce,
                    observed: Some(to),
                }
                .encode(0);
                match session.send_udp(to, udp_kind::PROBE, &payload).await {
                    Ok(_) => Fired {
                        tag,
                        idle_ms: Some(idle),
                        sent: true,
                        error: None,
                    },
                    Err(e) => Fired {
                        tag,
                        idle_ms: Some(idle),
                        sent: false,
                        error: Some(e.to_string()),
                    },
                }
            }
            None => Fired {
                tag,
                idle_ms: None,
                sent: false,
                error: Some("no such UDP binding".into()),
            },
        });
    }
    out
}

/// Tags in first-seen order without repeats: a request naming one probe 15 000 times does the
/// work of one.
fn distinct(tags: Vec<u32>) -> Vec<u32> {
    let mut seen = std::collections::HashSet::with_capacity(tags.len().min(MAX_PROBES_PER_SESSION));
    tags.into_iter().filter(|t| seen.insert(*t)).collect()
}

/// Refresh datagrams one session may send per second; a tick sends at most its share and the
/// next tick continues where it stopped, so a large request is paced, not burst.
const REFRESH_DATAGRAMS_PER_SECOND: u64 = 1000;

fn start_refresh(
    session: &Arc<Session>,
    state: &Arc<IdleState>,
    tags: Vec<u32>,
    interval_ms: u64,
) -> ControlReply {
    if interval_ms < 200 {
        return ControlReply::Error {
            message: "refresh interval below 200 ms refused".into(),
        };
    }
    if tags.len() > MAX_PROBES_PER_SESSION {
        return ControlReply::Error {
            message: format!(
                "{} bindings to refresh; a session has at most {MAX_PROBES_PER_SESSION}",
                tags.len()
            ),
        };
    }
    let per_tick = (REFRESH_DATAGRAMS_PER_SECOND * interval_ms / 1000).max(1) as usize;
    let session = session.clone();
    let st = state.clone();
    let handle = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(interval_ms));
        let mut next = 0usize;
        loop {
            // Never outlives its client: it stops when the session's last connection closes
            // (a client that left is not refreshed) or the session ends.
            tokio::select! {
                _ = session.unused() => return,
                _ = tick.tick() => {}
            }
            let targets: Vec<(u32, SocketAddr)> = {
                let probes = lock(&st.probes);
                tags.iter()
                    .filter_map(|t| {
                        probes
                            .get(t)
                            .filter(|p| p.record.udp)
                            .map(|p| (*t, p.record.observed))
                    })
                    .collect()
            };
            if targets.is_empty() {
                continue;
            }
            let n = targets.len().min(per_tick);
            let batch: Vec<(u32, SocketAddr)> = (0..n)
                .map(|i| targets[(next + i) % targets.len()])
                .collect();
            next = (next + n) % targets.len();
            for (tag, to) in batch {
                let payload = UdpPayload {
                    tag,
                    nonce: 0,
                    observed: None,
                }
                .encode(0);
                if session
                    .send_udp(to, udp_kind::REFRESH, &payload)
                    .await
                    .is_err()
                {
                    return; // budget exhausted or address not ours: stop quietly
                }
            }
        }
    });
    *lock(&state.refresh) = Some(tokio_util_like::Abort(handle));
    ControlReply::Ok
}
