//! One accepted TCP connection: admission, handshake, auth, dispatch to a service.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pathdoc_proto::{
    read_preamble, write_preamble, Channel, FramedConn, Hello, HelloReply, ProtoError, Refusal,
    RefusalCode, Welcome,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::limits::{AdmitError, ClientKey, Limits};
use crate::session::{EndReason, SessionError};
use crate::Shared;

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

pub(crate) async fn handle(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr) {
    let limits = &shared.config.limits;
    let key = ClientKey::of(peer.ip(), limits);
    let mut permit = match shared.conns.try_admit(key, limits) {
        Ok(permit) => permit,
        Err(e) => {
            let refusal = match e {
                AdmitError::PerClient(n) => Refused::new(
                    "connections-per-client",
                    n,
                    format!(
                        "it allows {n} open connections per client address ({key}) and this address has them all; \
                         wait for other pathdoc runs from this address or network to finish, or ask its operator to raise --max-connections-per-ip"
                    ),
                ),
                AdmitError::Total(n) => Refused::new(
                    "connections-total",
                    n,
                    format!(
                        "it is holding its maximum of {n} open connections; try again in a few minutes or ask its operator to raise --max-connections"
                    ),
                ),
            };
            refusal.log(peer);
            refuse_raw(stream, RefusalCode::LimitExceeded, refusal.message).await;
            return;
        }
    };
    let mut conn = match FramedConn::new(stream) {
        Ok(c) => c,
        Err(_) => return,
    };
    let deadline = limits.handshake_timeout;
    let hello = tokio::select! {
        _ = shared.shutdown.cancelled() => return,
        r = tokio::time::timeout(deadline, read_hello(&mut conn)) => r,
    };
    let hello = match hello {
        Ok(Ok(hello)) => hello,
        Ok(Err(e)) => {
            let reply = match &e {
                ProtoError::VersionMismatch { ours, theirs } => Some((
                    "version-mismatch",
                    RefusalCode::VersionMismatch,
                    format!("it speaks pathdoc protocol {ours}, this client speaks {theirs}; upgrade the older side"),
                )),
                ProtoError::Malformed(m) => Some(("malformed-hello", RefusalCode::BadRequest, format!("malformed hello: {m}"))),
                ProtoError::FrameTooLarge(_) => Some(("malformed-hello", RefusalCode::BadRequest, e.to_string())),
                // Garbage: answer with the preamble and one short refusal so a human who
                // pointed the wrong program here sees why, then close.
                ProtoError::NotPathdoc(_) => Some(("not-pathdoc", RefusalCode::BadRequest, "not a pathdoc client".to_string())),
                _ => None,
            };
            match reply {
                Some((reason, code, message)) => {
                    tracing::info!(client = %peer, reason = %reason, error = %e, "refused");
                    refuse(&mut conn, code, message).await;
                }
                None => tracing::debug!(client = %peer, error = %e, "handshake failed"),
            }
            return;
        }
        Err(_) => {
            tracing::info!(client = %peer, reason = %"handshake-timeout", timeout_s = deadline.as_secs_f64(), "refused");
            return;
        }
    };

    if let Some(expected) = &shared.config.auth_token {
        let refusal = match &hello.token {
            None => Some((
                "auth-required",
                RefusalCode::AuthRequired,
                "this server requires a shared secret: pass --auth-token (or set PATHDOC_AUTH_TOKEN)",
            )),
            Some(t) if !constant_time_eq(t.as_bytes(), expected.as_bytes()) => Some((
                "auth-failed",
                RefusalCode::AuthFailed,
                "wrong auth token",
            )),
            Some(_) => None,
        };
        if let Some((reason, code, message)) = refusal {
            tracing::info!(client = %peer, reason = %reason, "refused");
            return refuse(&mut conn, code, message.into()).await;
        }
    }

    match hello.channel {
        Channel::Control { check, resume } => {
            let Some(service) = shared.service(check) else {
                tracing::info!(client = %peer, reason = %"unsupported-check", %check, "refused");
                return refuse(
                    &mut conn,
                    RefusalCode::UnsupportedCheck,
                    format!("this server does not run the {check} check"),
                )
                .await;
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
                Err(e) => return refuse_session(&mut conn, peer, e, limits).await,
            };
            permit.attach(session_use);
            session.note_addr(peer.ip());
            session.touch();
            if welcome(&mut conn, session.id, peer).await.is_err() {
                return;
            }
            tracing::info!(
                client = %peer,
                session = %session.id,
                %check,
                client_version = %hello.client_version,
                "{}",
                if resumed { "session resumed" } else { "session start" }
            );
            // The handshake's state is dropped here; the connection lives on in a task that
            // holds only what the service needs.
            shared.tasks.spawn(async move {
                let _permit = permit;
                let cancel = session.cancel.clone();
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    r = service.control(session.clone(), conn, resumed) => {
                        if let Err(e) = r {
                            tracing::info!(client = %peer, session = %session.id, error = %e, "control connection ended with an error");
                        }
                    }
                }
                session.touch();
            });
        }
        Channel::Data { session: id, tag } => {
            let attached = shared
                .registry
                .get(id)
                .and_then(|s| shared.registry.attach(&s).map(|u| (s, u)));
            let (session, session_use) = match attached {
                Ok(x) => x,
                Err(e) => return refuse_session(&mut conn, peer, e, limits).await,
            };
            permit.attach(session_use);
            let Some(service) = shared.service(session.check) else {
                return;
            };
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
        Channel::End { session: id } => {
            if shared.registry.end(id, EndReason::Client) {
                let _ = welcome(&mut conn, id, peer).await;
            } else {
                refuse_session(&mut conn, peer, SessionError::Unknown(id), limits).await;
            }
        }
    }
}

/// A refusal: its log reason, the limit in force, and the user's message.
struct Refused {
    reason: &'static str,
    limit: u32,
    message: String,
}

impl Refused {
    fn new(reason: &'static str, limit: u32, message: String) -> Self {
        Refused {
            reason,
            limit,
            message,
        }
    }

    fn log(&self, peer: SocketAddr) {
        tracing::info!(client = %peer, reason = %self.reason, limit = self.limit, "refused");
    }
}

/// Words for a session that cannot be created, found or attached to.
fn session_refusal(e: SessionError, limits: &Limits) -> (RefusalCode, Refused) {
    match e {
        SessionError::TooMany {
            limit,
            client,
            soonest_end,
        } => (
            RefusalCode::LimitExceeded,
            Refused::new(
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
        ),
        SessionError::Full(n) => (
            RefusalCode::LimitExceeded,
            Refused::new(
                "sessions-total",
                n,
                format!(
                    "it is running its maximum of {n} sessions; try again in a few minutes or ask its operator to raise --max-sessions"
                ),
            ),
        ),
        SessionError::Busy => (
            RefusalCode::LimitExceeded,
            Refused::new(
                "once-busy",
                1,
                "it was started with --once and is serving another client; try again when that client is done".into(),
            ),
        ),
        SessionError::Unknown(id) => (
            RefusalCode::UnknownSession,
            Refused::new(
                "unknown-session",
                0,
                format!(
                    "session {id} is unknown or has ended (sessions without a connection are kept {})",
                    format_duration(limits.session_linger)
                ),
            ),
        ),
    }
}

async fn refuse_session(conn: &mut FramedConn, peer: SocketAddr, e: SessionError, limits: &Limits) {
    let (code, refusal) = session_refusal(e, limits);
    refusal.log(peer);
    refuse(conn, code, refusal.message).await;
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

async fn refuse(conn: &mut FramedConn, code: RefusalCode, message: String) {
    let reply = HelloReply::Refused(Refusal { code, message });
    // Best effort with a short deadline: the peer may not be reading.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        write_preamble(conn.stream_mut()).await?;
        conn.send(&reply).await?;
        conn.stream_mut().shutdown().await.map_err(ProtoError::from)
    })
    .await;
    // Closing with the client's Hello still unread would make the kernel answer with a RST,
    // which can destroy the refusal before the client reads it. Read and discard what the
    // client sends until it closes, bounded in time and bytes.
    let mut sink = [0u8; 1024];
    let mut drained = 0usize;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        while drained < 64 * 1024 {
            match conn.stream_mut().read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
}

async fn refuse_raw(stream: TcpStream, code: RefusalCode, message: String) {
    if let Ok(mut conn) = FramedConn::new(stream) {
        refuse(&mut conn, code, message).await;
    }
}

/// Compare secrets without leaking the position of the first difference through timing.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
