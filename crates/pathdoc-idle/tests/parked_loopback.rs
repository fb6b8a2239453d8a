//! The idle service's parked probe path on loopback, through the real server framework: probe
//! connections parked on the service's epoll thread are fired, answer pings (also pings split
//! across TCP segments), record how they ended (peer close, reset), close at Finish and at
//! server shutdown, and give their connection slots back. Fire requests over the server's
//! per-request limit are refused with an error instead of breaking the control connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pathdoc_idle::proto::{
    ControlReply, ControlRequest, ProbeMessage, ProbeRequest, ServerProbeRecord, ServerSawEnd,
};
use pathdoc_idle::server::MAX_TAGS_PER_REQUEST;
use pathdoc_idle::IdleService;
use pathdoc_proto::{Channel, CheckKind, FramedConn, ProtoError, SessionId};
use pathdoc_server::{Limits, Server, ServerConfig};
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;

const STEP: Duration = Duration::from_secs(10);

/// A server on 127.0.0.1:0 that shuts down (and is awaited, with a deadline) on drop.
struct TestServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    async fn start(connections_per_ip: u32) -> Self {
        let config = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            auth_token: None,
            limits: Limits {
                connections_per_ip,
                ..Limits::default()
            },
            once: false,
            stats_interval: None,
        };
        let bound = Server::new(config)
            .with_service(Arc::new(IdleService::new()))
            .bind()
            .await
            .unwrap();
        let addr = bound.local_addr();
        let (tx, rx) = oneshot::channel::<()>();
        let done = tokio::spawn(async move {
            bound
                .run(
                    async {
                        let _ = rx.await;
                    },
                    Duration::from_secs(2),
                )
                .await
        });
        TestServer {
            addr,
            stop: Some(tx),
            done: Some(done),
        }
    }

    /// Shut down and wait for the server to return: it must not hang on parked connections.
    async fn shutdown(mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        let done = self.done.take().unwrap();
        tokio::time::timeout(Duration::from_secs(5), done)
            .await
            .expect("server shutdown hung")
            .unwrap();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
    }
}

async fn open(addr: SocketAddr, channel: Channel) -> Result<(FramedConn, SessionId), ProtoError> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (conn, welcome) = pathdoc_proto::handshake(stream, None, channel, STEP).await?;
    Ok((conn, welcome.session))
}

async fn control(addr: SocketAddr, resume: Option<SessionId>) -> (FramedConn, SessionId) {
    open(
        addr,
        Channel::Control {
            check: CheckKind::Idle,
            resume,
        },
    )
    .await
    .unwrap()
}

async fn probes(
    addr: SocketAddr,
    session: SessionId,
    tags: std::ops::Range<u32>,
) -> Vec<FramedConn> {
    let mut out = Vec::new();
    for tag in tags {
        out.push(open(addr, Channel::Data { session, tag }).await.unwrap().0);
    }
    out
}

async fn ask(ctl: &mut FramedConn, req: &ControlRequest) -> ControlReply {
    ctl.send(req).await.unwrap();
    ctl.recv_timeout(STEP, "a control reply").await.unwrap()
}

async fn results(ctl: &mut FramedConn) -> Vec<ServerProbeRecord> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        match ask(ctl, &ControlRequest::Results { after }).await {
            ControlReply::Results { records, more, .. } => {
                after = records.last().map(|r| r.tag);
                all.extend(records);
                if !more {
                    return all;
                }
            }
            other => panic!("unexpected reply {other:?}"),
        }
    }
}

/// Poll the server's records until `tag` has ended.
async fn wait_end(ctl: &mut FramedConn, tag: u32) -> ServerSawEnd {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let records = results(ctl).await;
        if let Some(end) = records
            .iter()
            .find(|r| r.tag == tag)
            .and_then(|r| r.end.clone())
        {
            return end;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "tag {tag} never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn recv_probe(conn: &mut FramedConn) -> ProbeMessage {
    conn.recv_timeout(STEP, "a probe message").await.unwrap()
}

async fn assert_closed_by_server(conn: &mut FramedConn) {
    match conn
        .recv_timeout::<ProbeMessage>(STEP, "the server's close")
        .await
    {
        Err(e) if e.is_disconnect() => {}
        other => panic!("expected the server to close the probe connection, got {other:?}"),
    }
}

/// Lift the soft descriptor limit to the hard one: the test holds both ends of `need` sockets.
fn raise_fd_limit(need: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    assert!(
        lim.rlim_cur >= need,
        "this test needs {need} descriptors; RLIMIT_NOFILE hard limit is {}",
        lim.rlim_cur
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_probes_fire_ping_record_ends_and_close_at_finish() {
    const N: u32 = 2000;
    raise_fd_limit(2 * u64::from(N) + 200);
    let server = TestServer::start(N + 16).await;
    let (mut ctl, session) = control(server.addr, None).await;
    let mut conns = probes(server.addr, session, 0..N).await;
    // Every probe is registered (parked) once its handshake is done.
    let deadline = tokio::time::Instant::now() + STEP;
    while results(&mut ctl).await.len() < N as usize {
        assert!(
            tokio::time::Instant::now() < deadline,
            "probes not registered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Too many tags in one request: a clear error, and the control connection stays up.
    let all: Vec<u32> = (0..N).collect();
    let reply = ask(
        &mut ctl,
        &ControlRequest::Fire {
            tags: all.clone(),
            nonce: 1,
        },
    )
    .await;
    assert!(matches!(reply, ControlReply::Error { .. }), "{reply:?}");
    // The same 2 000 tags in batches the server takes: all sent, every reply fits a frame.
    for batch in all.chunks(MAX_TAGS_PER_REQUEST) {
        let req = ControlRequest::Fire {
            tags: batch.to_vec(),
            nonce: 2,
        };
        match ask(&mut ctl, &req).await {
            ControlReply::Fired { fired } => {
                assert_eq!(fired.len(), batch.len());
                assert!(
                    fired.iter().all(|f| f.sent && f.error.is_none()),
                    "{fired:?}"
                );
            }
            other => panic!("unexpected reply {other:?}"),
        }
    }
    for (tag, conn) in conns.iter_mut().enumerate() {
        match recv_probe(conn).await {
            ProbeMessage::Probe {
                nonce, observed, ..
            } => {
                assert_eq!(nonce, 2, "tag {tag}");
                assert_eq!(observed, conn.local(), "tag {tag}");
            }
            other => panic!("tag {tag}: unexpected {other:?}"),
        }
    }

    // Client-initiated ping, answered from the parking thread.
    conns[5]
        .send(&ProbeRequest::Ping { nonce: 77 })
        .await
        .unwrap();
    match recv_probe(&mut conns[5]).await {
        ProbeMessage::Pong {
            nonce, observed, ..
        } => {
            assert_eq!(nonce, 77);
            assert_eq!(observed, conns[5].local());
        }
        other => panic!("unexpected {other:?}"),
    }
    // A ping split across two segments (a short read on the server).
    let body = serde_json::to_vec(&ProbeRequest::Ping { nonce: 78 }).unwrap();
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let stream = conns[6].stream_mut();
    stream.set_nodelay(true).unwrap();
    stream.write_all(&frame[..3]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stream.write_all(&frame[3..]).await.unwrap();
    assert!(matches!(
        recv_probe(&mut conns[6]).await,
        ProbeMessage::Pong { nonce: 78, .. }
    ));

    // How connections end: a reset (SO_LINGER 0 close) and an orderly close.
    let reset = conns.remove(7).into_inner().into_std().unwrap();
    socket2::SockRef::from(&reset)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(reset);
    assert_eq!(wait_end(&mut ctl, 7).await, ServerSawEnd::ResetByPeer);
    let closed = conns.remove(7); // tag 8
    drop(closed);
    assert_eq!(wait_end(&mut ctl, 8).await, ServerSawEnd::ClosedByPeer);
    // A frame over the probe limit ends the connection with an error, nothing is buffered.
    conns[7]
        .stream_mut()
        .write_all(&(1u32 << 20).to_be_bytes())
        .await
        .unwrap();
    assert!(matches!(
        wait_end(&mut ctl, 9).await,
        ServerSawEnd::Error(_)
    ));

    // Fired tags that ended say so.
    match ask(
        &mut ctl,
        &ControlRequest::Fire {
            tags: vec![7, 8, 10],
            nonce: 3,
        },
    )
    .await
    {
        ControlReply::Fired { fired } => {
            assert!(
                !fired[0].sent && !fired[1].sent && fired[2].sent,
                "{fired:?}"
            );
        }
        other => panic!("unexpected reply {other:?}"),
    }
    assert!(matches!(
        recv_probe(&mut conns[8]).await,
        ProbeMessage::Probe { nonce: 3, .. }
    ));

    // Finish closes the session's parked connections; the records say the server closed them.
    assert_eq!(
        ask(&mut ctl, &ControlRequest::Finish).await,
        ControlReply::Ok
    );
    for conn in conns.iter_mut().step_by(97) {
        assert_closed_by_server(conn).await;
    }
    let (mut ctl, _) = control(server.addr, Some(session)).await;
    let records = results(&mut ctl).await;
    assert_eq!(records.len(), N as usize);
    let server_closed = records
        .iter()
        .filter(|r| r.end == Some(ServerSawEnd::ServerClosed))
        .count();
    assert_eq!(server_closed, N as usize - 3);
    assert!(records.iter().all(|r| r.ended_ms.is_some()));
    drop(ctl);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_parked_probes_and_slots_come_back() {
    // Control + 3 probes fill the per-address limit.
    let server = TestServer::start(4).await;
    let (mut ctl, session) = control(server.addr, None).await;
    let mut conns = probes(server.addr, session, 0..3).await;
    let refused = open(server.addr, Channel::Data { session, tag: 3 }).await;
    assert!(
        matches!(refused, Err(ProtoError::Refused(_))),
        "{refused:?}"
    );
    // A probe that ended gives its slot back although no task ever held it.
    drop(conns.remove(0));
    assert_eq!(wait_end(&mut ctl, 0).await, ServerSawEnd::ClosedByPeer);
    let deadline = tokio::time::Instant::now() + STEP;
    let mut again = loop {
        match open(server.addr, Channel::Data { session, tag: 3 }).await {
            Ok((c, _)) => break c,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("slot never came back: {e}"),
        }
    };
    // Server shutdown ends the session, which closes its parked probes, and does not hang.
    server.shutdown().await;
    for conn in conns.iter_mut() {
        assert_closed_by_server(conn).await;
    }
    assert_closed_by_server(&mut again).await;
}
