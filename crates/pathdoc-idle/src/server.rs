//! The server side of the idle check: a [`Service`] that keeps probe connections silent, writes
//! to them when the client says so, answers client pings, tests UDP bindings, and remembers what
//! it saw so a client that lost its control connection can resume and fetch the results.
//!
//! Bounds: at most [`MAX_PROBES_PER_SESSION`] probe records per session; probe writes carry a
//! TCP user timeout so an unacknowledged probe ends its connection instead of being retried
//! for 15 minutes; UDP goes only to addresses of the session within its byte budget.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pathdoc_proto::{CheckKind, FramedConn, ProtoError};
use pathdoc_server::{Service, ServiceError, Session};
use tokio::sync::mpsc;

use crate::duration::to_ms;
use crate::proto::{
    udp_kind, ControlReply, ControlRequest, Fired, ProbeMessage, ProbeRequest, ServerProbeRecord,
    ServerSawEnd, UdpPayload,
};

/// Probe connections plus UDP bindings one session may register.
pub const MAX_PROBES_PER_SESSION: usize = 2048;
/// Records per [`ControlReply::Results`] page (keeps a frame far below 64 KiB).
const RESULTS_PAGE: usize = 120;
/// A control connection that sends nothing for this long is considered gone (clients send a
/// heartbeat at least every 15 s).
const CONTROL_SILENCE: Duration = Duration::from_secs(60);
/// After a probe write, how long the kernel may wait for its acknowledgement before giving up.
const PROBE_USER_TIMEOUT: Duration = Duration::from_secs(20);

/// The idle check's server side.
#[derive(Debug, Default)]
pub struct IdleService;

impl IdleService {
    pub fn new() -> Self {
        IdleService
    }
}

#[derive(Default)]
struct IdleState {
    probes: Mutex<HashMap<u32, ProbeEntry>>,
    refresh: Mutex<Option<tokio_util_like::Abort>>,
}

struct ProbeEntry {
    record: ServerProbeRecord,
    last_activity: Instant,
    /// Commands for a TCP probe's task; `None` for UDP bindings or ended connections.
    fire: Option<mpsc::Sender<ProbeCmd>>,
}

/// What the control connection asks of one probe connection's task.
#[derive(Debug, Clone, Copy)]
enum ProbeCmd {
    /// Write the probe now (`nonce`, idle time in ms).
    Fire(u64, u64),
    /// Send TTL-limited keepalives until the next fire.
    KeepWarm { ttl: u8, interval: Duration },
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

fn since(session: &Session, at: Instant) -> u64 {
    to_ms(at.saturating_duration_since(session.created))
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
        loop {
            let req: ControlRequest = match conn
                .recv_timeout(CONTROL_SILENCE, "an idle-check control message")
                .await
            {
                Ok(r) => r,
                Err(e) if e.is_disconnect() => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            session.touch();
            let reply = match req {
                ControlRequest::Heartbeat { seq } => ControlReply::HeartbeatAck {
                    seq,
                    server_elapsed_ms: since(&session, Instant::now()),
                },
                ControlRequest::Fire { tags, nonce } => ControlReply::Fired {
                    fired: fire_tcp(&session, &state, &tags, nonce),
                },
                ControlRequest::FireUdp { tags, nonce } => ControlReply::Fired {
                    fired: fire_udp(&session, &state, &tags, nonce).await,
                },
                ControlRequest::KeepWarm {
                    tags,
                    ttl,
                    interval_ms,
                } => keep_warm(&state, &tags, ttl, interval_ms),
                ControlRequest::UdpRefresh { tags, interval_ms } => {
                    start_refresh(&session, &state, tags, interval_ms)
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
                    ControlReply::Results { records, more }
                }
                ControlRequest::Finish => {
                    *lock(&state.refresh) = None;
                    for p in lock(&state.probes).values_mut() {
                        p.fire = None; // the probe tasks see the channel close and end
                    }
                    conn.send(&ControlReply::Ok).await?;
                    return Ok(());
                }
            };
            conn.send(&reply).await?;
        }
    }

    async fn data(
        &self,
        session: Arc<Session>,
        tag: u32,
        conn: FramedConn,
        _permit: pathdoc_server::ConnectionPermit,
    ) -> Result<(), ServiceError> {
        let state = session.state::<IdleState>();
        let observed = conn.peer();
        let (fire_tx, mut fire_rx) = mpsc::channel::<ProbeCmd>(4);
        {
            let mut probes = lock(&state.probes);
            if probes.len() >= MAX_PROBES_PER_SESSION && !probes.contains_key(&tag) {
                return Err(ServiceError::BadRequest(format!(
                    "more than {MAX_PROBES_PER_SESSION} probes"
                )));
            }
            if probes.get(&tag).is_some_and(|p| p.fire.is_some()) {
                return Err(ServiceError::BadRequest(format!(
                    "probe tag {tag} is already in use"
                )));
            }
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
                    fire: Some(fire_tx),
                },
            );
        }
        let stream = conn.into_inner();
        let default_ttl = socket2::SockRef::from(&stream).ttl().unwrap_or(64);
        let deadline = session.deadline;
        let (mut rd, mut wr) = stream.into_split();
        let mut warm = false;
        let (ev_tx, mut ev_rx) = mpsc::channel::<Result<ProbeRequest, ProtoError>>(2);
        let reader = tokio::spawn(async move {
            loop {
                let r = pathdoc_proto::read_frame::<_, ProbeRequest>(&mut rd).await;
                let stop = r.is_err();
                if ev_tx.send(r).await.is_err() || stop {
                    return;
                }
            }
        });
        let _reader = tokio_util_like::Abort(reader);
        let end = loop {
            tokio::select! {
                fire = fire_rx.recv() => match fire {
                    Some(ProbeCmd::KeepWarm { ttl, interval }) => {
                        let sock = socket2::SockRef::from(wr.as_ref());
                        let ka = socket2::TcpKeepalive::new().with_time(interval).with_interval(interval);
                        // Unanswered keepalives must not end the connection: with a user
                        // timeout set the kernel ignores TCP_KEEPCNT and waits this long.
                        let hold = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(60);
                        let r = sock.set_ttl(u32::from(ttl))
                            .and_then(|_| sock.set_tcp_user_timeout(Some(hold)))
                            .and_then(|_| sock.set_tcp_keepalive(&ka));
                        if let Err(e) = r {
                            break ServerSawEnd::Error(format!("keep-warm setup: {e}"));
                        }
                        warm = true;
                    }
                    Some(ProbeCmd::Fire(nonce, idle_ms)) => {
                        let sock = socket2::SockRef::from(wr.as_ref());
                        if warm {
                            // Stop the TTL-limited keepalives and let the probe and its ACKs
                            // travel the whole path.
                            let _ = sock.set_keepalive(false);
                            let _ = sock.set_ttl(default_ttl);
                            warm = false;
                        }
                        // Bound how long an unacknowledged probe is retransmitted.
                        let _ = sock.set_tcp_user_timeout(Some(PROBE_USER_TIMEOUT));
                        let msg = ProbeMessage::Probe { nonce, observed, idle_ms };
                        if let Err(e) = pathdoc_proto::write_frame(&mut wr, &msg).await {
                            break classify(&e);
                        }
                    }
                    None => break ServerSawEnd::ServerClosed,
                },
                ev = ev_rx.recv() => match ev {
                    Some(Ok(ProbeRequest::Ping { nonce })) => {
                        let now = Instant::now();
                        let idle_ms = {
                            let mut probes = lock(&state.probes);
                            match probes.get_mut(&tag) {
                                Some(p) => {
                                    let idle = to_ms(now.saturating_duration_since(p.last_activity));
                                    p.last_activity = now;
                                    p.record.pinged_ms = Some(since(&session, now));
                                    idle
                                }
                                None => 0,
                            }
                        };
                        let msg = ProbeMessage::Pong { nonce, observed, idle_ms };
                        if let Err(e) = pathdoc_proto::write_frame(&mut wr, &msg).await {
                            break classify(&e);
                        }
                    }
                    Some(Err(e)) => break classify(&e),
                    None => break ServerSawEnd::ServerClosed,
                },
            }
        };
        let now = Instant::now();
        if let Some(p) = lock(&state.probes).get_mut(&tag) {
            p.record.ended_ms = Some(since(&session, now));
            p.record.end = Some(end);
            p.fire = None;
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
                if probes.len() >= MAX_PROBES_PER_SESSION && !probes.contains_key(&msg.tag) {
                    return None;
                }
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
                        fire: None,
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

fn classify(e: &ProtoError) -> ServerSawEnd {
    match e {
        ProtoError::Closed => ServerSawEnd::ClosedByPeer,
        ProtoError::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => {
                ServerSawEnd::ResetByPeer
            }
            std::io::ErrorKind::TimedOut => ServerSawEnd::Unacknowledged,
            _ => ServerSawEnd::Error(io.to_string()),
        },
        other => ServerSawEnd::Error(other.to_string()),
    }
}

fn keep_warm(state: &IdleState, tags: &[u32], ttl: u8, interval_ms: u64) -> ControlReply {
    let interval = Duration::from_millis(interval_ms);
    if interval < MIN_KEEP_WARM || ttl == 0 {
        return ControlReply::Error {
            message: format!(
                "keep-warm needs an interval of at least {} ms and a TTL of at least 1",
                MIN_KEEP_WARM.as_millis()
            ),
        };
    }
    let probes = lock(&state.probes);
    let mut missing = 0;
    for tag in tags.iter().take(MAX_PROBES_PER_SESSION) {
        let sent = probes
            .get(tag)
            .and_then(|p| p.fire.as_ref())
            .is_some_and(|tx| tx.try_send(ProbeCmd::KeepWarm { ttl, interval }).is_ok());
        missing += usize::from(!sent);
    }
    if missing == 0 {
        ControlReply::Ok
    } else {
        ControlReply::Error {
            message: format!("{missing} of {} probe connections not found", tags.len()),
        }
    }
}

fn fire_tcp(session: &Session, state: &IdleState, tags: &[u32], nonce: u64) -> Vec<Fired> {
    let now = Instant::now();
    let mut probes = lock(&state.probes);
    tags.iter()
        .take(MAX_PROBES_PER_SESSION)
        .map(|&tag| match probes.get_mut(&tag) {
            Some(p) if !p.record.udp => {
                let idle = to_ms(now.saturating_duration_since(p.last_activity));
                let sent = p
                    .fire
                    .as_ref()
                    .is_some_and(|tx| tx.try_send(ProbeCmd::Fire(nonce, idle)).is_ok());
                if sent {
                    p.last_activity = now;
                    p.record.fired_ms = Some(since(session, now));
                }
                Fired {
                    tag,
                    idle_ms: Some(idle),
                    sent,
                    error: (!sent).then(|| "connection already ended on the server".into()),
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
    let session = session.clone();
    let st = state.clone();
    let handle = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(interval_ms));
        loop {
            tokio::select! {
                _ = session.cancel.cancelled() => return,
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
            for (tag, to) in targets {
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
