//! The framework against hostile and confused clients, on loopback, with a small echo service.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pathdoc_proto::{
    connect, Channel, CheckKind, FramedConn, ProtoError, RefusalCode, SessionId, UdpHeader,
};
use pathdoc_server::{Limits, Server, ServerConfig, Service, ServiceError, Session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(5);

/// Echoes one frame on control; counts data connections; echoes UDP payloads doubled (which
/// the framework must refuse to send, being larger than the request).
#[derive(Default)]
struct Echo {
    data_conns: AtomicU32,
}

#[derive(Default)]
struct EchoState {
    controls: AtomicU32,
}

#[async_trait]
impl Service for Echo {
    fn check(&self) -> CheckKind {
        CheckKind::Idle
    }

    async fn control(
        &self,
        session: Arc<Session>,
        mut conn: FramedConn,
        _resumed: bool,
    ) -> Result<(), ServiceError> {
        session
            .state::<EchoState>()
            .controls
            .fetch_add(1, Ordering::SeqCst);
        loop {
            let msg: String = conn.recv().await?;
            let reply = format!(
                "{msg} controls={}",
                session.state::<EchoState>().controls.load(Ordering::SeqCst)
            );
            conn.send(&reply).await?;
        }
    }

    async fn data(
        &self,
        _session: Arc<Session>,
        tag: u32,
        mut conn: FramedConn,
        _permit: pathdoc_server::ConnectionPermit,
    ) -> Result<(), ServiceError> {
        self.data_conns.fetch_add(1, Ordering::SeqCst);
        conn.send(&tag).await?;
        let _: Result<String, _> = conn.recv().await;
        Ok(())
    }

    async fn udp(
        &self,
        _s: Arc<Session>,
        kind: u16,
        payload: &[u8],
        _from: SocketAddr,
    ) -> Option<Vec<u8>> {
        if kind == 1 {
            Some(payload.to_vec())
        } else {
            Some([payload, payload].concat())
        }
    }
}

async fn start(limits: Limits, token: Option<&str>) -> SocketAddr {
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth_token: token.map(str::to_string),
        limits,
        once: false,
        stats_interval: None,
    };
    let bound = Server::new(config)
        .with_service(Arc::new(Echo::default()))
        .bind()
        .await
        .unwrap();
    let addr = bound.local_addr();
    tokio::spawn(bound.run(std::future::pending(), Duration::from_millis(100)));
    addr
}

fn control() -> Channel {
    Channel::Control {
        check: CheckKind::Idle,
        resume: None,
    }
}

async fn still_serves(addr: SocketAddr) {
    let (mut conn, _) = connect(addr, None, control(), T)
        .await
        .expect("server still serves");
    conn.send(&"ping".to_string()).await.unwrap();
    let reply: String = conn.recv_timeout(T, "echo").await.unwrap();
    assert!(reply.starts_with("ping"));
}

async fn refusal_of(
    result: Result<(FramedConn, pathdoc_proto::Welcome), ProtoError>,
) -> RefusalCode {
    match result {
        Err(ProtoError::Refused(r)) => r.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn welcome_reports_the_observed_address() {
    let addr = start(Limits::default(), None).await;
    let (conn, welcome) = connect(addr, None, control(), T).await.unwrap();
    assert_eq!(welcome.observed, conn.local());
}

#[tokio::test]
async fn garbage_gets_a_readable_refusal_and_the_server_carries_on() {
    let addr = start(Limits::default(), None).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut reply))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&reply);
    assert!(text.contains("not a pathdoc client"), "got {text:?}");
    // Random bytes with a huge length prefix must not make the server allocate or die.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PDoc\x00\x01\xff\xff\xff\xff").await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&reply).contains("exceeds"));
    still_serves(addr).await;
}

#[tokio::test]
async fn old_version_is_told_to_upgrade() {
    let addr = start(Limits::default(), None).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PDoc\x00\x00").await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut reply))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&reply);
    assert!(
        text.contains("version-mismatch") && text.contains("upgrade"),
        "got {text:?}"
    );
    still_serves(addr).await;
}

#[tokio::test]
async fn silent_client_is_dropped_at_the_handshake_deadline() {
    let limits = Limits {
        handshake_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let addr = start(limits, None).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut reply))
        .await
        .expect("server closes")
        .unwrap();
    // Told why, then closed.
    let text = String::from_utf8_lossy(&reply);
    assert!(text.contains("no pathdoc hello within"), "{text:?}");
}

#[tokio::test]
async fn auth_token_is_enforced() {
    let addr = start(Limits::default(), Some("s3cret")).await;
    assert_eq!(
        refusal_of(connect(addr, None, control(), T).await).await,
        RefusalCode::AuthRequired
    );
    assert_eq!(
        refusal_of(connect(addr, Some("wrong".into()), control(), T).await).await,
        RefusalCode::AuthFailed
    );
    assert!(connect(addr, Some("s3cret".into()), control(), T)
        .await
        .is_ok());
}

#[tokio::test]
async fn connection_and_session_limits_refuse_with_a_reason() {
    let limits = Limits {
        connections_per_ip: 3,
        sessions_per_ip: 2,
        ..Limits::default()
    };
    let addr = start(limits, None).await;
    let (_a, first) = connect(addr, None, control(), T).await.unwrap();
    let (_b, _) = connect(addr, None, control(), T).await.unwrap();
    // A third session from the same address is over the session limit.
    assert_eq!(
        refusal_of(connect(addr, None, control(), T).await).await,
        RefusalCode::LimitExceeded
    );
    // Let the refused connection's slot be released before counting connections.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (_c, _) = connect(
        addr,
        None,
        Channel::Data {
            session: first.session,
            tag: 1,
        },
        T,
    )
    .await
    .unwrap();
    // A fourth open connection is over the per-address connection limit.
    assert_eq!(
        refusal_of(
            connect(
                addr,
                None,
                Channel::Data {
                    session: first.session,
                    tag: 2
                },
                T
            )
            .await
        )
        .await,
        RefusalCode::LimitExceeded
    );
}

#[tokio::test]
async fn data_connections_need_a_live_session_and_resume_reattaches() {
    let addr = start(Limits::default(), None).await;
    assert_eq!(
        refusal_of(
            connect(
                addr,
                None,
                Channel::Data {
                    session: SessionId(42),
                    tag: 1
                },
                T
            )
            .await
        )
        .await,
        RefusalCode::UnknownSession
    );
    let (mut ctl, welcome) = connect(addr, None, control(), T).await.unwrap();
    let (mut data, _) = connect(
        addr,
        None,
        Channel::Data {
            session: welcome.session,
            tag: 7,
        },
        T,
    )
    .await
    .unwrap();
    let tag: u32 = data.recv_timeout(T, "tag").await.unwrap();
    assert_eq!(tag, 7);
    ctl.send(&"a".to_string()).await.unwrap();
    let _: String = ctl.recv_timeout(T, "echo").await.unwrap();
    drop(ctl);
    let resume = Channel::Control {
        check: CheckKind::Idle,
        resume: Some(welcome.session),
    };
    let (mut ctl2, w2) = connect(addr, None, resume, T).await.unwrap();
    assert_eq!(w2.session, welcome.session);
    ctl2.send(&"b".to_string()).await.unwrap();
    let reply: String = ctl2.recv_timeout(T, "echo").await.unwrap();
    assert_eq!(
        reply, "b controls=2",
        "resumed control shares the session state"
    );
}

#[tokio::test]
async fn udp_answers_only_live_sessions_and_never_amplifies() {
    let addr = start(Limits::default(), None).await;
    let (_ctl, welcome) = connect(addr, None, control(), T).await.unwrap();
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let datagram = |session, kind| {
        let mut d = Vec::new();
        UdpHeader { session, kind }.encode(&mut d);
        d.extend_from_slice(b"hello");
        d
    };
    let mut buf = [0u8; 2048];
    // Same-size echo for a live session is answered.
    sock.send_to(&datagram(welcome.session, 1), addr)
        .await
        .unwrap();
    let (n, _) = tokio::time::timeout(T, sock.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let (header, payload) = UdpHeader::decode(&buf[..n]).unwrap();
    assert_eq!((header.session, payload), (welcome.session, &b"hello"[..]));
    // A reply larger than the request, or any reply to an unknown session, is not sent.
    sock.send_to(&datagram(welcome.session, 2), addr)
        .await
        .unwrap();
    sock.send_to(&datagram(SessionId(1), 1), addr)
        .await
        .unwrap();
    sock.send_to(b"garbage", addr).await.unwrap();
    let silent = tokio::time::timeout(Duration::from_millis(500), sock.recv_from(&mut buf)).await;
    assert!(silent.is_err(), "no amplified or unsolicited reply");
}

#[tokio::test]
async fn finished_sessions_do_not_count_and_an_ended_session_is_gone() {
    let limits = Limits {
        sessions_per_ip: 2,
        ..Limits::default()
    };
    let addr = start(limits, None).await;
    // Far more sessions than the per-address limit, one after another: each finished session
    // (connections closed, or ended explicitly) frees its slot at once.
    for i in 0..12 {
        let (conn, welcome) = connect(addr, None, control(), T)
            .await
            .unwrap_or_else(|e| panic!("session {i}: {e}"));
        if i % 2 == 0 {
            pathdoc_proto::end_session(addr, None, &welcome)
                .await
                .unwrap();
            // Ended: its id no longer opens anything.
            let data = Channel::Data {
                session: welcome.session,
                tag: 1,
            };
            assert_eq!(
                refusal_of(connect(addr, None, data, T).await).await,
                RefusalCode::UnknownSession
            );
        }
        drop(conn);
        // The server notices the closed connection within moments.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Two live sessions fill the slots; the refusal says so in words, with the way out.
    let (_a, _) = connect(addr, None, control(), T).await.unwrap();
    let (_b, _) = connect(addr, None, control(), T).await.unwrap();
    match connect(addr, None, control(), T).await {
        Err(ProtoError::Refused(r)) => {
            assert_eq!(r.code, RefusalCode::LimitExceeded);
            assert!(
                r.message
                    .contains("2 concurrent sessions per client address")
                    && r.message.contains("--max-sessions-per-ip"),
                "{}",
                r.message
            );
            let shown = ProtoError::Refused(r).to_string();
            assert!(!shown.contains("LimitExceeded"), "{shown}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_lingering_session_can_still_be_resumed() {
    let addr = start(Limits::default(), None).await;
    let (ctl, welcome) = connect(addr, None, control(), T).await.unwrap();
    drop(ctl);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resume = Channel::Control {
        check: CheckKind::Idle,
        resume: Some(welcome.session),
    };
    let (_ctl, again) = connect(addr, None, resume, T).await.unwrap();
    assert_eq!(again.session, welcome.session);
    assert_eq!(again.revision, pathdoc_proto::PROTOCOL_REVISION);
}
