//! One accepted TCP connection: admission, handshake, auth, dispatch to a service.

use std::net::SocketAddr;
use std::sync::Arc;

use pathdoc_proto::{
    read_preamble, write_preamble, Channel, FramedConn, Hello, HelloReply, ProtoError, Refusal,
    RefusalCode, Welcome,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::limits::AdmitError;
use crate::session::SessionError;
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
    let permit = match shared.conns.try_admit(peer.ip(), &shared.config.limits) {
        Ok(permit) => permit,
        Err(e) => {
            let message = match e {
                AdmitError::PerIp(n) => {
                    format!("too many connections from {} (limit {n})", peer.ip())
                }
                AdmitError::Total(n) => format!("server is full ({n} connections)"),
            };
            tracing::info!(%peer, %message, "connection refused");
            refuse_raw(stream, RefusalCode::LimitExceeded, message).await;
            return;
        }
    };
    let mut conn = match FramedConn::new(stream) {
        Ok(c) => c,
        Err(_) => return,
    };
    let deadline = shared.config.limits.handshake_timeout;
    let hello = tokio::select! {
        _ = shared.shutdown.cancelled() => return,
        r = tokio::time::timeout(deadline, read_hello(&mut conn)) => r,
    };
    let hello = match hello {
        Ok(Ok(hello)) => hello,
        Ok(Err(e)) => {
            tracing::info!(%peer, error = %e, "bad handshake");
            let reply = match &e {
                ProtoError::VersionMismatch { ours, theirs } => Some((
                    RefusalCode::VersionMismatch,
                    format!("server speaks pathdoc protocol {ours}, client speaks {theirs}; upgrade the older side"),
                )),
                ProtoError::Malformed(m) => Some((RefusalCode::BadRequest, format!("malformed hello: {m}"))),
                ProtoError::FrameTooLarge(_) => Some((RefusalCode::BadRequest, e.to_string())),
                // Garbage: answer with the preamble and one short refusal so a human who
                // pointed the wrong program here sees why, then close.
                ProtoError::NotPathdoc(_) => Some((RefusalCode::BadRequest, "not a pathdoc client".to_string())),
                _ => None,
            };
            if let Some((code, message)) = reply {
                refuse(&mut conn, code, message).await;
            }
            return;
        }
        Err(_) => {
            tracing::info!(%peer, ?deadline, "handshake timed out");
            return;
        }
    };

    if let Some(expected) = &shared.config.auth_token {
        match &hello.token {
            None => {
                return refuse(
                    &mut conn,
                    RefusalCode::AuthRequired,
                    "this server requires --auth-token".into(),
                )
                .await
            }
            Some(t) if !constant_time_eq(t.as_bytes(), expected.as_bytes()) => {
                tracing::info!(%peer, "authentication failed");
                return refuse(
                    &mut conn,
                    RefusalCode::AuthFailed,
                    "wrong auth token".into(),
                )
                .await;
            }
            Some(_) => {}
        }
    }

    match hello.channel {
        // A client's preflight: reachable, same version, right token. No session, no task.
        Channel::Ping => {
            tracing::debug!(%peer, "ping");
            let _ = welcome(&mut conn, pathdoc_proto::SessionId(0), peer).await;
        }
        Channel::Control { check, resume } => {
            let Some(service) = shared.service(check) else {
                return refuse(
                    &mut conn,
                    RefusalCode::UnsupportedCheck,
                    format!("this server does not run the {check} check"),
                )
                .await;
            };
            let (session, resumed) = match resume {
                Some(id) => match shared.registry.get(id) {
                    Ok(s) if s.check == check => (s, true),
                    _ => {
                        return refuse(
                            &mut conn,
                            RefusalCode::UnknownSession,
                            format!("session {id} is unknown or expired"),
                        )
                        .await
                    }
                },
                None => match shared.registry.create(
                    check,
                    peer.ip(),
                    shared.udp.clone(),
                    &shared.shutdown,
                ) {
                    Ok(s) => (s, false),
                    Err(SessionError::TooMany(n)) => {
                        return refuse(
                            &mut conn,
                            RefusalCode::LimitExceeded,
                            format!("too many sessions from {} (limit {n})", peer.ip()),
                        )
                        .await
                    }
                    Err(SessionError::Unknown(_)) => return,
                },
            };
            session.note_addr(peer.ip());
            session.touch();
            if welcome(&mut conn, session.id, peer).await.is_err() {
                return;
            }
            tracing::info!(%peer, session = %session.id, %check, resumed, "control connection");
            // The handshake's state is dropped here; the connection lives on in a task that
            // holds only what the service needs.
            shared.tasks.spawn(async move {
                let _permit = permit;
                let cancel = session.cancel.clone();
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    r = service.control(session.clone(), conn, resumed) => {
                        if let Err(e) = r {
                            tracing::info!(%peer, session = %session.id, error = %e, "control ended with error");
                        }
                    }
                }
                session.touch();
            });
        }
        Channel::Data { session: id, tag } => {
            let session = match shared.registry.get(id) {
                Ok(s) => s,
                Err(_) => {
                    return refuse(
                        &mut conn,
                        RefusalCode::UnknownSession,
                        format!("session {id} is unknown or expired"),
                    )
                    .await
                }
            };
            let Some(service) = shared.service(session.check) else {
                return;
            };
            session.note_addr(peer.ip());
            session.touch();
            if welcome(&mut conn, session.id, peer).await.is_err() {
                return;
            }
            shared.tasks.spawn(async move {
                let cancel = session.cancel.clone();
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    r = service.data(session.clone(), tag, conn, permit) => {
                        if let Err(e) = r {
                            tracing::debug!(%peer, session = %session.id, tag, error = %e, "data connection ended with error");
                        }
                    }
                }
                session.touch();
            });
        }
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
