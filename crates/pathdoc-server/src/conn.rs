//! One accepted TCP connection: admission, handshake, auth, dispatch to a service.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use pathdoc_proto::{
    read_preamble, write_preamble, Channel, CheckKind, FramedConn, Hello, HelloReply, ProtoError,
    Refusal, RefusalCode, SessionId, Welcome,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::budget::{fair_share_message, Refuse};
use crate::fair::Over;
use crate::limits::{AdmitError, ClientKey, ConnectionPermit, Limits};
use crate::session::{EndReason, SessionError};
use crate::stats::Accounting;
use crate::{ServiceError, Shared};

pub(crate) fn bind_tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    // A deep backlog: an idle check opens its probe connections in one burst.
    socket.listen(4096)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// Count a new connection against its client's and the server's limits.
pub(crate) fn admit(shared: &Shared, peer: SocketAddr) -> Result<ConnectionPermit, AdmitError> {
    shared.accounting.accepted.fetch_add(1, Ordering::Relaxed);
    let limits = &shared.config.limits;
    shared.conns.try_admit(ClientKey::of(peer.ip(), limits))
}

/// Refuse a connection [`admit`] turned away, from the accept loop: the refusal is written at
/// once (it fits an empty socket buffer) after reading what the client already sent, and the
/// socket closed, all without waiting. Only when the client's hello has not arrived yet does
/// a task wait for it briefly (see [`refuse`]), and only while few refusals are waiting.
pub(crate) fn refuse_admission(
    shared: &Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    over: AdmitError,
) {
    let key = ClientKey::of(peer.ip(), &shared.config.limits);
    let refusal = admission_refusal(key, over);
    shared.accounting.refused(peer, &refusal);
    let bytes = encode_refusal(RefusalCode::LimitExceeded, refusal);
    let mut sink = [0u8; 1024];
    let mut heard = false;
    for _ in 0..4 {
        match stream.try_read(&mut sink) {
            Ok(0) => {
                heard = true;
                break;
            }
            Ok(_) => heard = true,
            Err(_) => break,
        }
    }
    let slot = (!heard)
        .then(|| DrainSlot::take(&shared.accounting))
        .flatten();
    let Some(slot) = slot else {
        let _ = stream.try_write(&bytes);
        let _ = socket2::SockRef::from(&stream).shutdown(std::net::Shutdown::Write);
        return;
    };
    shared.tasks.spawn(async move {
        let mut stream = stream;
        send_refusal(&mut stream, bytes, Some(slot)).await;
    });
}

/// One of the [`MAX_DRAINING_REFUSALS`] refused connections that may wait for their client's
/// bytes; taken before the wait starts, so a burst cannot overshoot.
struct DrainSlot(Arc<Accounting>);

impl DrainSlot {
    fn take(accounting: &Arc<Accounting>) -> Option<DrainSlot> {
        let refusing = &accounting.refusing;
        if refusing.fetch_add(1, Ordering::AcqRel) >= MAX_DRAINING_REFUSALS {
            refusing.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(DrainSlot(accounting.clone()))
    }
}

impl Drop for DrainSlot {
    fn drop(&mut self) {
        self.0.refusing.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Words for a connection the connection or handshake pool did not admit.
fn admission_refusal(key: ClientKey, over: AdmitError) -> Refuse {
    match over {
        AdmitError::Connections(Over::PerClient { limit, .. }) => Refuse {
            reason: "connections-per-client",
            limit,
            message: format!(
                "it allows {limit} open connections per client address ({key}) and this address has them all; \
                 wait for other pathdoc runs from this address or network to finish, or ask its operator to raise --max-connections-per-ip"
            ),
        },
        AdmitError::Connections(Over::Total { limit, .. }) => Refuse {
            reason: "connections-total",
            limit,
            message: format!(
                "it is holding its maximum of {limit} open connections; try again in a few minutes or ask its operator to raise --max-connections"
            ),
        },
        AdmitError::Connections(Over::FairShare { used, total, held, may_take }) => Refuse {
            reason: "connections-fair-share",
            limit: total,
            message: fair_share_message("open connections", key, 1, (used, total, held, may_take), "--max-connections"),
        },
        AdmitError::Handshakes(Over::PerClient { limit, .. }) => Refuse {
            reason: "handshakes-per-client",
            limit,
            message: format!(
                "it allows {limit} connections per client address ({key}) still in their handshake and this address has them all; \
                 wait for them to finish or ask its operator to raise --max-handshakes-per-ip"
            ),
        },
        AdmitError::Handshakes(Over::Total { limit, .. }) => Refuse {
            reason: "handshakes-total",
            limit,
            message: format!(
                "it is holding its maximum of {limit} connections still in their handshake; try again in a few seconds or ask its operator to raise --max-handshakes"
            ),
        },
        AdmitError::Handshakes(Over::FairShare { used, total, held, may_take }) => Refuse {
            reason: "handshakes-fair-share",
            limit: total,
            message: fair_share_message("connections in their handshake", key, 1, (used, total, held, may_take), "--max-handshakes"),
        },
    }
}

/// One admitted connection: handshake, then the channel it asked for.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    mut permit: ConnectionPermit,
) {
    let Ok(mut conn) = FramedConn::new(stream) else {
        return;
    };
    let Some(hello) = handshake(&shared, &mut conn, peer).await else {
        return;
    };
    // Past a valid Hello (and token): the connection leaves the small handshake pool.
    permit.handshake_done();
    conn.set_send_timeout(Some(shared.config.limits.send_timeout));
    match hello.channel {
        // A client's preflight: reachable, same version, right token. No session, no task.
        Channel::Ping => {
            tracing::debug!(%peer, "ping");
            let _ = welcome(&mut conn, pathdoc_proto::SessionId(0), peer).await;
        }
        Channel::Control { check, resume } => {
            let version = hello.client_version;
            serve_control(shared, conn, peer, permit, (check, resume), version).await
        }
        Channel::Data { session, tag } => {
            serve_data(shared, conn, peer, permit, session, tag).await
        }
        Channel::End { session: id } => {
            if shared.registry.end(id, EndReason::Client) {
                let _ = welcome(&mut conn, id, peer).await;
            } else {
                refuse_session(&shared, &mut conn, peer, SessionError::Unknown(id)).await;
            }
        }
    }
}

/// Preamble, `Hello` within the handshake deadline, auth. `None` when the connection was
/// refused (told why) or broke.
async fn handshake(shared: &Shared, conn: &mut FramedConn, peer: SocketAddr) -> Option<Hello> {
    let deadline = shared.config.limits.handshake_timeout;
    let hello = tokio::select! {
        _ = shared.shutdown.cancelled() => return None,
        r = tokio::time::timeout(deadline, read_hello(conn)) => r,
    };
    let (code, refusal) = match hello {
        Ok(Ok(hello)) => match check_auth(shared, &hello) {
            None => return Some(hello),
            Some(refused) => refused,
        },
        Ok(Err(e)) => {
            let (reason, code, message) = match &e {
                ProtoError::VersionMismatch { ours, theirs } => (
                    "version-mismatch",
                    RefusalCode::VersionMismatch,
                    format!("it speaks pathdoc protocol {ours}, this client speaks {theirs}; upgrade the older side"),
                ),
                ProtoError::Malformed(m) => ("malformed-hello", RefusalCode::BadRequest, format!("malformed hello: {m}")),
                ProtoError::FrameTooLarge(_) => ("malformed-hello", RefusalCode::BadRequest, e.to_string()),
                // Garbage: answer with the preamble and one short refusal so a human who
                // pointed the wrong program here sees why, then close.
                ProtoError::NotPathdoc(_) => ("not-pathdoc", RefusalCode::BadRequest, "not a pathdoc client".to_string()),
                // The connection broke: nobody to tell.
                _ => {
                    tracing::debug!(client = %peer, error = %e, "handshake failed");
                    return None;
                }
            };
            let limit = 0;
            (
                code,
                Refuse {
                    reason,
                    limit,
                    message,
                },
            )
        }
        Err(_) => (
            RefusalCode::BadRequest,
            Refuse {
                reason: "handshake-timeout",
                limit: deadline.as_secs() as u32,
                message: format!("no pathdoc hello within {} s", deadline.as_secs()),
            },
        ),
    };
    refuse(shared, conn.stream_mut(), peer, code, refusal).await;
    None
}

/// A control connection: a new session, or a resumed one; then the check's service runs it in
/// a task that holds only what the service needs (the handshake's state is dropped here).
async fn serve_control(
    shared: Arc<Shared>,
    mut conn: FramedConn,
    peer: SocketAddr,
    mut permit: ConnectionPermit,
    (check, resume): (CheckKind, Option<SessionId>),
    client_version: String,
) {
    let Some(service) = shared.service(check) else {
        let refusal = Refuse {
            reason: "unsupported-check",
            limit: 0,
            message: format!("this server does not run the {check} check"),
        };
        let code = RefusalCode::UnsupportedCheck;
        return refuse(&shared, conn.stream_mut(), peer, code, refusal).await;
    };
    let attached = match resume {
        Some(id) => match shared.registry.get(id) {
            Ok(s) if s.check == check => shared.registry.attach(&s).map(|u| (s, u, true)),
            _ => Err(SessionError::Unknown(id)),
        },
        None => shared
            .registry
            .create(check, peer.ip(), shared.udp.clone(), &shared.shutdown)
            .map(|(s, u)| (s, u, false)),
    };
    let (session, session_use, resumed) = match attached {
        Ok(x) => x,
        Err(e) => return refuse_session(&shared, &mut conn, peer, e).await,
    };
    permit.attach(session_use);
    session.note_addr(peer.ip());
    session.touch();
    if welcome(&mut conn, session.id, peer).await.is_err() {
        return;
    }
    let client_version = crate::stats::log_field(&client_version);
    if shared.accounting.may_log_session_line(client_version.len()) {
        tracing::info!(
            client = %peer,
            session = %session.id,
            %check,
            %client_version,
            "{}",
            if resumed { "session resumed" } else { "session start" }
        );
    }
    shared.tasks.spawn(async move {
        let _permit = permit;
        let cancel = session.cancel.clone();
        tokio::select! {
            _ = cancel.cancelled() => {}
            r = service.control(session.clone(), conn, resumed) => match r {
                // A client that vanished is the session end line's business.
                Err(ServiceError::Proto(e)) if e.is_disconnect() => {}
                Err(e) => tracing::debug!(client = %peer, session = %session.id, error = %e, "control connection ended with an error"),
                Ok(()) => {}
            }
        }
        session.touch();
    });
}

/// A data connection of a session: the service may refuse it (with the reason) or reserve what
/// serving it costs before it is welcomed.
async fn serve_data(
    shared: Arc<Shared>,
    mut conn: FramedConn,
    peer: SocketAddr,
    mut permit: ConnectionPermit,
    id: SessionId,
    tag: u32,
) {
    let attached = shared
        .registry
        .get(id)
        .and_then(|s| shared.registry.attach(&s).map(|u| (s, u)));
    let (session, session_use) = match attached {
        Ok(x) => x,
        Err(e) => return refuse_session(&shared, &mut conn, peer, e).await,
    };
    permit.attach(session_use);
    let Some(service) = shared.service(session.check) else {
        return;
    };
    match service.admit_data(&session, tag) {
        Ok(Some(reservation)) => permit.reserve(reservation),
        Ok(None) => {}
        Err(refusal) => {
            let code = RefusalCode::LimitExceeded;
            return refuse(&shared, conn.stream_mut(), peer, code, refusal).await;
        }
    }
    session.note_addr(peer.ip());
    session.touch();
    if welcome(&mut conn, session.id, peer).await.is_err() {
        return;
    }
    tracing::debug!(client = %peer, session = %session.id, tag, "accepted data connection");
    shared.tasks.spawn(async move {
        let cancel = session.cancel.clone();
        tokio::select! {
            _ = cancel.cancelled() => {}
            r = service.data(session.clone(), tag, conn, permit) => {
                if let Err(e) = r {
                    tracing::debug!(client = %peer, session = %session.id, tag, error = %e, "data connection ended with an error");
                }
            }
        }
        session.touch();
    });
}

/// The shared secret, when the server requires one.
fn check_auth(shared: &Shared, hello: &Hello) -> Option<(RefusalCode, Refuse)> {
    let expected = shared.config.auth_token.as_ref()?;
    let (code, reason, message) = match &hello.token {
        None => (
            RefusalCode::AuthRequired,
            "auth-required",
            "this server requires a shared secret: pass --auth-token (or set PATHDOC_AUTH_TOKEN)",
        ),
        Some(t) if !constant_time_eq(t.as_bytes(), expected.as_bytes()) => {
            (RefusalCode::AuthFailed, "auth-failed", "wrong auth token")
        }
        Some(_) => return None,
    };
    Some((
        code,
        Refuse {
            reason,
            limit: 0,
            message: message.to_string(),
        },
    ))
}

/// Words for a session that cannot be created, found or attached to.
fn session_refusal(e: SessionError, limits: &Limits) -> (RefusalCode, Refuse) {
    let (code, reason, limit, message) = match e {
        SessionError::TooMany {
            limit,
            client,
            soonest_end,
        } => (
            RefusalCode::LimitExceeded,
            "sessions-per-client",
            limit,
            format!(
                "it allows {} per client address ({client}) and {} running; \
                 wait until one finishes (at the latest in {}) or ask its operator to raise --max-sessions-per-ip",
                if limit == 1 { "1 concurrent session".to_string() } else { format!("{limit} concurrent sessions") },
                if limit == 1 { "it is" } else { "all are" },
                format_duration(soonest_end)
            ),
        ),
        SessionError::Full(n) => (
            RefusalCode::LimitExceeded,
            "sessions-total",
            n,
            format!(
                "it is running its maximum of {n} sessions; try again in a few minutes or ask its operator to raise --max-sessions"
            ),
        ),
        SessionError::FairShare {
            client,
            over:
                Over::FairShare {
                    used,
                    total,
                    held,
                    may_take,
                },
        } => (
            RefusalCode::LimitExceeded,
            "sessions-fair-share",
            total,
            fair_share_message("live sessions", client, 1, (used, total, held, may_take), "--max-sessions"),
        ),
        SessionError::FairShare { client, .. } => (
            RefusalCode::LimitExceeded,
            "sessions-fair-share",
            limits.sessions_total,
            format!("the server is busy; this client address ({client}) holds its share of the live sessions"),
        ),
        SessionError::Busy => (
            RefusalCode::LimitExceeded,
            "once-busy",
            1,
            "it was started with --once and is serving another client; try again when that client is done".into(),
        ),
        SessionError::Unknown(id) => (
            RefusalCode::UnknownSession,
            "unknown-session",
            0,
            format!(
                "session {id} is unknown or has ended (sessions without a connection are kept {})",
                format_duration(limits.session_linger)
            ),
        ),
    };
    (
        code,
        Refuse {
            reason,
            limit,
            message,
        },
    )
}

async fn refuse_session(shared: &Shared, conn: &mut FramedConn, peer: SocketAddr, e: SessionError) {
    let (code, refusal) = session_refusal(e, &shared.config.limits);
    refuse(shared, conn.stream_mut(), peer, code, refusal).await;
}

/// Longest a refusal may take to write (it fits an empty socket buffer: normally at once).
const REFUSAL_WRITE: Duration = Duration::from_millis(100);
/// Longest a refused connection waits for what its client already sent (see [`refuse`]).
const REFUSAL_DRAIN: Duration = Duration::from_millis(50);
/// Refused connections that may wait for their client's bytes at once; more close right after
/// the refusal is written. Bounds the descriptors a refusal flood can hold.
const MAX_DRAINING_REFUSALS: u32 = 256;

/// Refuse a connection: count and log the reason, write a `refused` frame, and close. Costs one
/// descriptor for at most [`REFUSAL_WRITE`] + [`REFUSAL_DRAIN`]: closing with the client's hello
/// still unread would make the kernel answer with a reset that can destroy the refusal before
/// the client reads it, so the server first reads what the client sent (it normally arrived
/// with the handshake), bounded in time, bytes and in how many refusals may wait at once.
async fn refuse(
    shared: &Shared,
    stream: &mut TcpStream,
    peer: SocketAddr,
    code: RefusalCode,
    refusal: Refuse,
) {
    shared.accounting.refused(peer, &refusal);
    let slot = DrainSlot::take(&shared.accounting);
    send_refusal(stream, encode_refusal(code, refusal), slot).await;
}

/// Preamble and `refused` frame, ready to write.
/// A refusal for want of room also names its bound and limit ([`pathdoc_proto::LoadLimit`]).
fn encode_refusal(code: RefusalCode, refusal: Refuse) -> Vec<u8> {
    let load = (code == RefusalCode::LimitExceeded).then(|| pathdoc_proto::LoadLimit {
        reason: refusal.reason.to_string(),
        limit: refusal.limit,
    });
    let reply = HelloReply::Refused(Refusal {
        code,
        message: refusal.message,
        load,
    });
    let mut bytes = Vec::with_capacity(256);
    bytes.extend_from_slice(&pathdoc_proto::MAGIC);
    bytes.extend_from_slice(&pathdoc_proto::PROTOCOL_VERSION.to_be_bytes());
    let body = serde_json::to_vec(&reply).unwrap_or_default();
    bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&body);
    bytes
}

/// Write the refusal, then read what the client sent (bounded in time, bytes, and in how many
/// refusals may wait at once), then close.
async fn send_refusal(stream: &mut TcpStream, bytes: Vec<u8>, slot: Option<DrainSlot>) {
    let _ = tokio::time::timeout(REFUSAL_WRITE, async {
        stream.write_all(&bytes).await?;
        stream.shutdown().await
    })
    .await;
    if slot.is_some() {
        let mut sink = [0u8; 1024];
        let mut drained = 0usize;
        let _ = tokio::time::timeout(REFUSAL_DRAIN, async {
            while drained < 4096 {
                match stream.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => drained += n,
                }
            }
        })
        .await;
    }
}

/// A duration for a refusal message: whole seconds below a minute, else minutes.
fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let mins = secs.div_ceil(60);
    match (secs, mins / 60, mins % 60) {
        (0..=59, ..) => format!("{} s", secs.max(1)),
        (60..=3599, ..) => format!("{mins} min"),
        (_, h, 0) => format!("{h} h"),
        (_, h, m) => format!("{h} h {m} min"),
    }
}

async fn read_hello(conn: &mut FramedConn) -> Result<Hello, ProtoError> {
    read_preamble(conn.stream_mut()).await?;
    conn.recv::<Hello>().await
}

async fn welcome(
    conn: &mut FramedConn,
    session: pathdoc_proto::SessionId,
    peer: SocketAddr,
) -> Result<(), ProtoError> {
    write_preamble(conn.stream_mut()).await?;
    let reply = HelloReply::Welcome(Welcome {
        server_version: pathdoc_proto::software_version(),
        session,
        observed: peer,
        revision: pathdoc_proto::PROTOCOL_REVISION,
    });
    conn.send(&reply).await
}

/// Compare secrets without leaking the position of the first difference through timing.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
